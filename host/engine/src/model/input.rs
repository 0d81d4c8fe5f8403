//! What one step asks of a model, checked before any compute, and how a
//! step fails.

use pagoda_core::backend::SeqAttention;
use pagoda_core::Slot;

use super::config::ModelError;

/// The new tokens of one step, packed: row `i` is token `tokens[i]` at
/// `positions[i]`, whose keys and values go to `slots[i]`. `seqs` says which
/// rows belong to which sequence; logits are computed only for
/// `sample_rows` (the last row of each sequence that samples this step).
#[derive(Debug, Clone, Copy)]
pub struct StepInput<'a> {
    /// Token ids.
    pub tokens: &'a [u32],
    /// Their positions in their sequences.
    pub positions: &'a [u32],
    /// Their KV slots.
    pub slots: &'a [Slot],
    /// The attention batch over those rows.
    pub seqs: &'a [SeqAttention<'a>],
    /// Rows whose logits are wanted.
    pub sample_rows: &'a [u32],
    /// How many of the rows are prompt tokens (prefill); 0 for a step that
    /// only decodes. Under [`ActPrecision::Int8Decode`](super::ActPrecision::Int8Decode) a step with any
    /// prompt row keeps f32 activations, so a prompt gives the same first
    /// token whether or not part of it came from the cache.
    pub prompt_rows: usize,
}

/// Why a forward pass failed.
#[derive(Debug)]
pub enum ForwardError<E> {
    /// The input does not fit the model (checked before any compute).
    Model(ModelError),
    /// The backend refused or failed.
    Backend(E),
}
