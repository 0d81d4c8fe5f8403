//! What one step asks of a model, checked before any compute, and how a
//! step fails.

use pagoda_core::backend::SeqAttention;
use pagoda_core::{LayerPlace, Slot};

use super::config::ModelError;
use super::recurrent::StateRow;

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
    /// Their KV slots (in group 0's rows when layers are grouped).
    pub slots: &'a [Slot],
    /// The attention batch over those rows (group 0's page rows).
    pub seqs: &'a [SeqAttention<'a>],
    /// Where each layer's keys and values live when the cache groups layers
    /// ([`KvGroups`](pagoda_core::KvGroups)); empty when every page holds
    /// every layer.
    pub places: &'a [LayerPlace],
    /// The slots and page rows of groups `1..`, in order; empty with one
    /// group.
    pub groups: &'a [GroupRows<'a>],
    /// Each sequence's recurrent state, in the order of `seqs`; may be
    /// empty for a model without recurrent layers (see [`StateRow`]).
    pub states: &'a [StateRow],
    /// Rows whose logits are wanted.
    pub sample_rows: &'a [u32],
    /// How many of the rows are prompt tokens (prefill); 0 for a step that
    /// only decodes. Under [`ActPrecision::Int8Decode`](super::ActPrecision::Int8Decode) a step with any
    /// prompt row keeps f32 activations, so a prompt gives the same first
    /// token whether or not part of it came from the cache.
    pub prompt_rows: usize,
}

/// One KV group's slots and page rows for a step: the same rows and
/// sequences as [`StepInput::slots`] and [`StepInput::seqs`], in the group's
/// pages.
#[derive(Debug, Clone, Copy)]
pub struct GroupRows<'a> {
    /// Each row's KV slot in the group's pages.
    pub slots: &'a [Slot],
    /// The attention batch over the group's page rows.
    pub seqs: &'a [SeqAttention<'a>],
}

impl<'a> StepInput<'a> {
    /// Where `layer`'s keys and values live: its index in its group's pages,
    /// the new rows' slots and the page rows there. `None` for a layer or
    /// group the input does not describe.
    pub fn layer_kv(&self, layer: u32) -> Option<(u32, &'a [Slot], &'a [SeqAttention<'a>])> {
        if self.places.is_empty() {
            return Some((layer, self.slots, self.seqs));
        }
        let place = self.places.get(layer as usize)?;
        match place.group {
            0 => Some((place.index, self.slots, self.seqs)),
            g => {
                let rows = self.groups.get(g as usize - 1)?;
                Some((place.index, rows.slots, rows.seqs))
            }
        }
    }
}

/// Why a forward pass failed.
#[derive(Debug)]
pub enum ForwardError<E> {
    /// The input does not fit the model (checked before any compute).
    Model(ModelError),
    /// The backend refused or failed.
    Backend(E),
}
