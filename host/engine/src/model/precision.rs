//! How a step's products take their activations: f32, or rounded to 8-bit
//! blocks for integer products, and on which steps ([`ActPrecision`]).

use pagoda_core::QuantKind;

/// How the products take their activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ActPrecision {
    /// Unrounded f32, each weight block widened to f32 in registers: the
    /// products add only f32 summation error, so the logits are the dense
    /// path's (within 2e-5 of the logit range of a float64 reference).
    #[default]
    F32,
    /// 8-bit activations on decode steps, where the integer kernels are
    /// the faster ones: products of fewer than
    /// [`INT8_DECODE_ROWS`](Self::INT8_DECODE_ROWS) rows with Q4_0, Q4_1,
    /// K-quant or IQ4 weights, and with Q8_0 weights from
    /// [`INT8_Q8_0_ROWS`](Self::INT8_Q8_0_ROWS) rows (from one when
    /// interleaved); f32 for everything else. Steps that hold any prompt
    /// rows keep f32, so a prompt's keys and values, which serve every
    /// later token and every request that shares the prefix, are exact,
    /// at the cost of prefill speed (1B Q4_0 prefill of 512: 72 against
    /// 118 tokens/s under [`Int8`](Self::Int8)).
    Int8Decode,
    /// Rounded to 8-bit blocks for every product of a block type, as
    /// llama.cpp does, and the CLI's default: the fastest on every step
    /// (prefill of 512 on the 1B shape, 2 AVX2 threads: 1.6-1.7× f32
    /// activations; a decode row of interleaved Q8_0: 1.9×). Each row is
    /// rounded on its own, per block of 32 (Q8_0, Q8_1) or 256 (Q8_K), so
    /// a row's logits do not depend (beyond the order of f32 adds) on what
    /// else is in its step or on how much of its prompt the prefix cache
    /// held. Every product adds the
    /// rounding: over 30 layers the logits move by about 3% of their range
    /// (SmolLM2: 3.1e-2 of the range of a float64 reference), enough to
    /// flip a near tie.
    Int8,
}

impl ActPrecision {
    /// The rows from which [`Int8Decode`](Self::Int8Decode) keeps f32
    /// activations on decode steps too (with f32 activations, products of
    /// this many rows widen the weights to f32 panels).
    pub const INT8_DECODE_ROWS: usize = 24;

    /// The rows from which [`Int8Decode`](Self::Int8Decode) rounds for
    /// Q8_0 weights: from there the AVX2 kernel takes four activation rows
    /// per multiply, and runs 1.3× its f32 path at 8 and 16 rows (one row
    /// at a time, the integer products gained 0.9–1.15×).
    pub const INT8_Q8_0_ROWS: usize = 5;

    /// Whether a product of `rows` activation rows with `weights`-typed
    /// weights (`interleaved`: held with rows interleaved) takes them
    /// rounded to 8-bit blocks, in a step that holds prompt rows
    /// (`prompt`) or only decodes. Float weights never do. Interleaved
    /// Q8_0 rounds from one row: its kernel runs 1.9× the plain integer
    /// one at one row (36.5 against 19 GiB/s, 2048², one thread, Zen 2).
    ///
    /// The single-threaded kernels, integer against f32, in weight bytes
    /// per second on AVX2 (Zen 2; `cargo bench -p pagoda-cpu --bench
    /// qmatmul`): Q4_1 at 1, 4 and 16 rows 2.4×, 1.9× and 1.9×; Q4_K 2.2×,
    /// 1.9× and 4.5×; Q8_0 0.9× and 1.15× at 1 and 4 rows, 1.3× at 8 and 16.
    pub fn rounds(self, rows: usize, prompt: bool, weights: QuantKind, interleaved: bool) -> bool {
        if matches!(weights, QuantKind::F32 | QuantKind::F16 | QuantKind::BF16) {
            return false;
        }
        match self {
            Self::F32 => false,
            Self::Int8Decode => {
                !prompt
                    && rows < Self::INT8_DECODE_ROWS
                    && match weights {
                        QuantKind::Q4_0
                        | QuantKind::Q4_1
                        | QuantKind::Q2_K
                        | QuantKind::Q3_K
                        | QuantKind::Q4_K
                        | QuantKind::Q5_K
                        | QuantKind::Q6_K
                        | QuantKind::IQ4_NL
                        | QuantKind::IQ4_XS
                        | QuantKind::MXFP4 => true,
                        QuantKind::Q8_0 => interleaved || rows >= Self::INT8_Q8_0_ROWS,
                        _ => false,
                    }
            }
            Self::Int8 => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int8_decode_rounds_decode_steps_where_the_integer_kernels_win() {
        let p = ActPrecision::Int8Decode;
        assert!(p.rounds(1, false, QuantKind::Q4_1, false));
        assert!(p.rounds(16, false, QuantKind::Q4_K, false));
        // Any prompt row keeps the step f32, however short.
        assert!(!p.rounds(1, true, QuantKind::Q4_1, false));
        assert!(!p.rounds(
            ActPrecision::INT8_DECODE_ROWS,
            false,
            QuantKind::Q4_1,
            false
        ));
        // Q8_0 only where four rows share each multiply.
        assert!(!p.rounds(
            ActPrecision::INT8_Q8_0_ROWS - 1,
            false,
            QuantKind::Q8_0,
            false
        ));
        assert!(p.rounds(ActPrecision::INT8_Q8_0_ROWS, false, QuantKind::Q8_0, false));
        // Interleaved Q8_0 from one row (but never in a prompt step).
        assert!(p.rounds(1, false, QuantKind::Q8_0, true));
        assert!(!p.rounds(1, true, QuantKind::Q8_0, true));
        assert!(!p.rounds(8, false, QuantKind::F16, false));
        assert!(!ActPrecision::F32.rounds(1, false, QuantKind::Q4_1, false));
        assert!(ActPrecision::Int8.rounds(512, true, QuantKind::Q8_0, false));
        assert!(!ActPrecision::Int8.rounds(512, true, QuantKind::F32, false));
    }
}
