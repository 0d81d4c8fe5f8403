//! Recurrent state: what a hybrid model's recurrent layers (LFM2's short
//! convolutions) carry from one step of a sequence to the next, in place of
//! keys and values in the paged cache.
//!
//! A state summarizes every token of its sequence so far, so it cannot be
//! shared as a prefix the way pages are: an engine of a recurrent model
//! computes every prompt whole (no request reuses a cached prefix) and a
//! preempted sequence starts again from its first token, as a sequence
//! that starts at position 0 starts from a zero state. Each state records
//! which sequence wrote it and how many tokens it has read, so a step that
//! would continue another sequence's state, or skip tokens, is refused
//! ([`ModelError::StateGap`]) instead of computing from the wrong state.

use super::config::ModelError;

/// Where one sequence of a step keeps its recurrent state: a row of the
/// model's state store (the engine's page-table row of the sequence) and a
/// tag unique to the sequence (the engine's request id), so a row another
/// sequence left is never read as this one's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateRow {
    /// The row of the state store.
    pub row: u32,
    /// The sequence the row holds, as the caller tags it.
    pub owner: u64,
}

/// Rows a state store holds at most: far past any engine's sequences (a
/// page-table row each), so a row past it is a caller's mistake, refused
/// before the store grows to it.
pub const MAX_STATE_ROWS: u32 = 1 << 16;

/// One recurrent layer's state in one row.
#[derive(Debug, Default)]
struct LayerState {
    /// The sequence that wrote it; `None` before any did.
    owner: Option<u64>,
    /// Tokens the state has read: the position of the next one.
    next: u32,
    values: Vec<f32>,
}

/// The states of every recurrent layer in every row, grown to the largest
/// row and state seen (not reallocated after that).
#[derive(Debug, Default)]
pub(crate) struct RecurrentStates {
    /// `rows[row][layer]`: the layer numbers the program's recurrent ops
    /// give, not the model's layers.
    rows: Vec<Vec<LayerState>>,
}

impl RecurrentStates {
    /// The `len` values of `layer`'s state in `seq`'s row, for a step of
    /// that sequence from `position`: zeroed for a sequence that starts
    /// (position 0), else the state that sequence left at `position`.
    /// The state then counts the step's `tokens` as read.
    pub(crate) fn continue_at(
        &mut self,
        seq: StateRow,
        layer: u32,
        len: usize,
        position: u32,
        tokens: u32,
    ) -> Result<&mut [f32], ModelError> {
        if seq.row >= MAX_STATE_ROWS {
            return Err(ModelError::StateRowRange {
                row: seq.row,
                max: MAX_STATE_ROWS,
            });
        }
        let (row, layer_index) = (seq.row as usize, layer as usize);
        if self.rows.len() <= row {
            self.rows.resize_with(row + 1, Vec::new);
        }
        let layers = &mut self.rows[row];
        if layers.len() <= layer_index {
            layers.resize_with(layer_index + 1, LayerState::default);
        }
        let state = &mut layers[layer_index];
        if position == 0 {
            state.owner = Some(seq.owner);
            state.values.clear();
            state.values.resize(len, 0.0);
        } else if state.owner != Some(seq.owner)
            || state.next != position
            || state.values.len() != len
        {
            return Err(ModelError::StateGap {
                row: seq.row,
                position,
            });
        }
        state.next = position.saturating_add(tokens);
        Ok(&mut state.values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: StateRow = StateRow { row: 2, owner: 7 };

    #[test]
    fn a_state_starts_at_zero_and_continues_only_where_its_sequence_left_it() {
        let mut states = RecurrentStates::default();
        let s = states.continue_at(A, 1, 4, 0, 3).unwrap();
        assert_eq!(s, [0.0; 4]);
        s.copy_from_slice(&[1.0, 2.0, 3.0, 4.0]);
        // The same sequence, where it left off: the state it wrote.
        let s = states.continue_at(A, 1, 4, 3, 1).unwrap();
        assert_eq!(s, [1.0, 2.0, 3.0, 4.0]);
        // Skipping a token, going back, or another sequence in the row:
        // refused, and the state kept.
        for (seq, position) in [(A, 5), (A, 2), (StateRow { owner: 8, ..A }, 4)] {
            assert_eq!(
                states.continue_at(seq, 1, 4, position, 1),
                Err(ModelError::StateGap { row: 2, position })
            );
        }
        assert_eq!(
            states.continue_at(A, 1, 4, 4, 1).unwrap(),
            [1.0, 2.0, 3.0, 4.0]
        );
        // Another layer of the row has a state of its own, and a restart
        // zeroes the state whoever held it.
        assert!(states.continue_at(A, 0, 4, 4, 1).is_err());
        let other = StateRow { owner: 9, ..A };
        assert_eq!(states.continue_at(other, 1, 4, 0, 2).unwrap(), [0.0; 4]);
        assert!(states.continue_at(A, 1, 4, 5, 1).is_err());
        // A row past the store's limit is refused before it grows.
        let far = StateRow {
            row: MAX_STATE_ROWS,
            owner: 1,
        };
        assert_eq!(
            states.continue_at(far, 0, 4, 0, 1),
            Err(ModelError::StateRowRange {
                row: MAX_STATE_ROWS,
                max: MAX_STATE_ROWS
            })
        );
        assert_eq!(states.rows.len(), 3);
    }
}
