//! Recurrent layers: the ops of a hybrid model's layers that carry state
//! from one step of a sequence to the next in place of keys and values in
//! the paged cache (LFM2's short convolutions, Qwen3.5's gated delta
//! nets, the Mamba-2 state spaces of Granite 4.0-H and Nemotron-H), and
//! the store of those states.
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

/// A short convolution ([`Op::ShortConv`](super::program::Op::ShortConv)): each channel's output is the
/// dot product of its `taps` weights with its last `taps` inputs, the
/// current one last, so its recurrent state is the `taps − 1` inputs
/// before the current one.
#[derive(Debug, Clone)]
pub(crate) struct ShortConv {
    /// Taps per channel (LFM2's `shortconv.l_cache`, 3).
    pub taps: u32,
    /// `hidden` channels of `taps` weights each, channel after channel.
    pub weights: Vec<f32>,
    /// Which of the program's recurrent states the op reads and writes.
    pub state: u32,
}

/// A gated delta net ([`Op::DeltaNet`](super::program::Op::DeltaNet)),
/// Qwen3.5's linear attention, after HF's `Qwen3_5GatedDeltaNet`: the
/// queries, keys and values of a row go through a causal convolution of
/// `taps` taps per channel and a SiLU; each query and key head is
/// L2-normed (the query then scaled by `1 / sqrt(key_dim)`). Each value
/// head `h` keeps a `key_dim × value_dim` state `S`, reading the key head
/// its [`DeltaLayout`] gives: per token, `S ← g·S`, `S ← S + k ⊗ β(v − Sᵀk)`, output `Sᵀq`, with `g =
/// exp(decay · softplus(α + dt_bias))` and `β = sigmoid(beta)`. Each
/// head's output is RMS-normed by `norm`, then times `silu(z)`.
#[derive(Debug, Clone)]
pub(crate) struct DeltaNet {
    /// Taps of the convolution (`ssm.conv_kernel`, 4).
    pub taps: u32,
    /// [`conv_width`](Self::conv_width) channels of `taps` weights each.
    pub conv: Vec<f32>,
    /// Query and key heads (`ssm.group_count`).
    pub key_heads: u32,
    /// Value heads (`ssm.time_step_rank`), a multiple of the key heads.
    pub value_heads: u32,
    /// A query or key head's width (`ssm.state_size`).
    pub key_dim: u32,
    /// A value head's width (`ssm.inner_size / value_heads`).
    pub value_dim: u32,
    /// Added to `α` before its softplus, one per value head.
    pub dt_bias: Vec<f32>,
    /// `−exp(A_log)` as the converter stores it (`ssm_a`), one per value
    /// head.
    pub decay: Vec<f32>,
    /// The gated norm's gain, `value_dim` long.
    pub norm: Vec<f32>,
    /// Which of the program's recurrent states the op reads and writes.
    pub state: u32,
    /// Where its value heads and gates sit, as the converter wrote them.
    pub layout: DeltaLayout,
}

/// How a file lays out a delta net's value heads and per-head gates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeltaLayout {
    /// Qwen3.5's: value head `h` reads key head `h mod key_heads` (the
    /// converter tiles them), and `β` and `α` come from products of their
    /// own ([`Buf::Beta`], [`Buf::Alpha`]).
    ///
    /// [`Buf::Beta`]: super::program::Buf::Beta
    /// [`Buf::Alpha`]: super::program::Buf::Alpha
    Tiled,
    /// Qwen3-Next's: each key head serves its group of consecutive value
    /// heads (`h / (value_heads / key_heads)`), and one product gives every
    /// group's `β`s then its `α`s side by side in [`Buf::Beta`].
    ///
    /// [`Buf::Beta`]: super::program::Buf::Beta
    Grouped,
}

impl DeltaNet {
    /// The key head value head `h` reads.
    pub(crate) fn key_head(&self, h: usize) -> usize {
        let (keys, values) = (self.key_heads.max(1) as usize, self.value_heads as usize);
        match self.layout {
            DeltaLayout::Tiled => h % keys,
            DeltaLayout::Grouped => h / (values / keys).max(1),
        }
    }

    /// Values a row of [`Buf::Beta`](super::program::Buf::Beta) and of
    /// [`Buf::Alpha`](super::program::Buf::Alpha) holds (the latter 0 where
    /// `β` and `α` share a product).
    pub(crate) fn gate_widths(&self) -> (usize, usize) {
        let heads = self.value_heads as usize;
        match self.layout {
            DeltaLayout::Tiled => (heads, heads),
            DeltaLayout::Grouped => (2 * heads, 0),
        }
    }

    /// Where value head `h`'s `β` and `α` sit in their rows (both in the
    /// `β` row where the layout fuses them).
    pub(crate) fn gate_index(&self, h: usize) -> (usize, usize) {
        let (keys, values) = (self.key_heads.max(1) as usize, self.value_heads as usize);
        match self.layout {
            DeltaLayout::Tiled => (h, h),
            DeltaLayout::Grouped => {
                let per = (values / keys).max(1);
                let (group, j) = (h / per, h % per);
                (group * 2 * per + j, group * 2 * per + per + j)
            }
        }
    }

    /// Channels of the convolution: every query, key and value.
    pub(crate) fn conv_width(&self) -> usize {
        2 * self.key_width() + self.value_width()
    }

    /// Every query (or key) head's values side by side.
    pub(crate) fn key_width(&self) -> usize {
        self.key_heads as usize * self.key_dim as usize
    }

    /// Every value head's values side by side.
    pub(crate) fn value_width(&self) -> usize {
        self.value_heads as usize * self.value_dim as usize
    }

    /// Values of one sequence's state: the convolution's last `taps − 1`
    /// inputs, then each value head's `key_dim × value_dim` matrix.
    pub(crate) fn state_len(&self) -> usize {
        let kept = self.taps.saturating_sub(1) as usize;
        let heads = self.value_heads as usize;
        kept * self.conv_width() + heads * self.key_dim as usize * self.value_dim as usize
    }

    /// Its f32 vectors.
    pub(crate) fn vectors(&self) -> impl Iterator<Item = &[f32]> {
        [&self.conv, &self.dt_bias, &self.decay, &self.norm]
            .into_iter()
            .map(Vec::as_slice)
    }
}

/// A Mamba-2 mixer's selective state space ([`Op::StateSpace`](super::program::Op::StateSpace)),
/// after llama.cpp's `build_mamba2_layer` and HF's `Mamba2Mixer`: one
/// product makes each row's output gate `z`, its `x`, `B` and `C` and a
/// step size per head. `x`, `B` and `C` go through a causal convolution of
/// `taps` taps per channel (plus its bias) and a SiLU. Each head `h` keeps
/// a `head_dim × state_dim` state `S` and reads the `B` and `C` of its
/// group (`h / (heads / groups)`): per token, with `Δ = softplus(dt +
/// dt_bias)`, `S ← exp(Δ · decay)·S + Δ · x ⊗ B`, output `S·C + skip · x`.
/// The output is multiplied by `silu(z)` and RMS-normed over each group's
/// share of it by `norm`.
#[derive(Debug, Clone)]
pub(crate) struct StateSpace {
    /// Taps of the convolution (`ssm.conv_kernel`, 4).
    pub taps: u32,
    /// [`conv_width`](Self::conv_width) channels of `taps` weights each.
    pub conv: Vec<f32>,
    /// The convolution's bias, one per channel (zeros where the file has
    /// none).
    pub conv_bias: Vec<f32>,
    /// Heads (`ssm.time_step_rank`), a multiple of the groups.
    pub heads: u32,
    /// A head's width (`ssm.inner_size / heads`).
    pub head_dim: u32,
    /// Groups of heads that share a `B` and a `C` (`ssm.group_count`).
    pub groups: u32,
    /// The width of `B`, `C` and each row of a head's state
    /// (`ssm.state_size`).
    pub state_dim: u32,
    /// Added to the step size before its softplus, one per head.
    pub dt_bias: Vec<f32>,
    /// `−exp(A_log)` as the converter stores it (`ssm_a`), one per head.
    pub decay: Vec<f32>,
    /// The skip connection's factor `D`, one per head.
    pub skip: Vec<f32>,
    /// The gated norm's gain, [`inner`](Self::inner) long.
    pub norm: Vec<f32>,
    /// Which of the program's recurrent states the op reads and writes.
    pub state: u32,
}

impl StateSpace {
    /// Every head's values side by side (`ssm.inner_size`).
    pub(crate) fn inner(&self) -> usize {
        self.heads as usize * self.head_dim as usize
    }

    /// Channels of the convolution: `x`, then every group's `B`, then its
    /// `C`.
    pub(crate) fn conv_width(&self) -> usize {
        self.inner() + 2 * self.groups as usize * self.state_dim as usize
    }

    /// Values of the input product's row: `z`, the convolution's channels,
    /// a step size per head.
    pub(crate) fn input_width(&self) -> usize {
        self.inner() + self.conv_width() + self.heads as usize
    }

    /// Values of one sequence's state: the convolution's last `taps − 1`
    /// inputs, then each head's `head_dim × state_dim` matrix.
    pub(crate) fn state_len(&self) -> usize {
        let kept = self.taps.saturating_sub(1) as usize;
        kept * self.conv_width() + self.inner() * self.state_dim as usize
    }

    /// Its f32 vectors.
    pub(crate) fn vectors(&self) -> impl Iterator<Item = &[f32]> {
        [
            &self.conv,
            &self.conv_bias,
            &self.dt_bias,
            &self.decay,
            &self.skip,
            &self.norm,
        ]
        .into_iter()
        .map(Vec::as_slice)
    }
}

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
