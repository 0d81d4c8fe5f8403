//! The 8-bit activations of the integer-dot GPU decode product
//! (`matvec_dot_*`): before each such product a `quantize` dispatch rounds
//! its input rows into a scratch area past the program's activations, and
//! the product reads that copy. Products of one input (queries, keys and
//! values; gate and up) share one rounding: it is made again only when the
//! input rows change (another input, or a dispatch that writes them).
//! Rounding once per input, rather than in every workgroup of every
//! product that reads it, leaves each workgroup a quarter of the bytes to
//! read and no rounding to do. Where the dispatch just before wrote exactly
//! those rows (the norm before the queries, keys and values, or before
//! gate and up; the gated unit before the down projection), it takes its
//! variant that also writes them rounded (`rms_norm_round`,
//! `swiglu_round`), and no dispatch is added.

use super::hazard::{rows, Access, Resource};
use super::pipelines::OpParams;
use super::step::{Dispatches, Recorded};
use crate::kernels::Kernel;

/// Rows rounded into the scratch: their (first element, stride, batch,
/// columns), and the elements they span.
struct Held {
    key: (u32, u32, u32, u32),
    source: std::ops::Range<u64>,
}

/// Invocations per workgroup of `shaders/quantize.comp`.
const GROUP: u32 = 64;

/// Workgroups one dispatch asks for at most; the kernel loops over the rest.
const MAX_GROUPS: u32 = 65_535;

/// Words from one rounded row's start to the next's: its bytes as words,
/// then a scale per run of 16, rounded up to whole 16-byte vectors.
fn row_words(cols: u32) -> u32 {
    (cols / 4 + cols / 16).next_multiple_of(4)
}

/// Puts a `quantize` dispatch before every integer-dot product of
/// `dispatches` whose input rows are not already rounded, and points the
/// product at the rounded copy, in a scratch area from word `scratch` (a
/// multiple of 4, past every activation the program addresses). Returns
/// the dispatches and the scratch words they use; a program without such
/// products comes back as it was, with none.
pub(crate) fn round_inputs(dispatches: Dispatches, scratch: u32) -> (Dispatches, u64) {
    let mut out = Vec::with_capacity(dispatches.len());
    let mut words = 0u64;
    // The input rows the scratch holds rounded.
    let mut held: Option<Held> = None;
    for (what, access) in dispatches {
        let Recorded::Op(kernel, params, groups, set) = what else {
            forget_if_written(&mut held, &access);
            out.push((what, access));
            continue;
        };
        if !kernel.needs().integer_dot {
            forget_if_written(&mut held, &access);
            out.push((Recorded::Op(kernel, params, groups, set), access));
            continue;
        }
        let key = (params.x_offset, params.x_stride, params.batch, params.cols);
        let source = rows(params.x_offset, params.x_stride, params.batch, params.cols);
        let stride = row_words(params.cols);
        // Slack of a row's length past the last rounded row: the product's
        // bounds check reads a rounded row as `cols` long.
        let span = u64::from(params.batch) * u64::from(stride) + u64::from(params.cols);
        let rounded = u64::from(scratch)..u64::from(scratch) + span;
        words = words.max(span);
        let fused = held.as_ref().map(|h| h.key) != Some(key)
            && fuse_into_last(&mut out, key, scratch, stride, &rounded);
        if fused {
            held = Some(Held {
                key,
                source: source.clone(),
            });
        } else if held.as_ref().map(|h| h.key) != Some(key) {
            let quantize = OpParams {
                y_offset: scratch,
                y_stride: stride,
                ..params
            };
            let runs = params.batch * (params.cols / 16);
            let access = vec![
                Access::read(Resource::Act, source.clone()),
                Access::write(Resource::Act, rounded.clone()),
            ];
            out.push((
                Recorded::Op(
                    Kernel::Quantize,
                    quantize,
                    runs.div_ceil(GROUP).clamp(1, MAX_GROUPS),
                    set,
                ),
                access,
            ));
            held = Some(Held {
                key,
                source: source.clone(),
            });
        }
        let product = OpParams {
            x_offset: scratch,
            x_stride: stride,
            ..params
        };
        // The product reads the rounded copy in place of its input.
        let mut access: Vec<Access> = access
            .into_iter()
            .filter(|a| a.write || a.resource != Resource::Act || a.range != source)
            .collect();
        access.push(Access::read(Resource::Act, rounded));
        forget_if_written(&mut held, &access);
        out.push((Recorded::Op(kernel, product, groups, set), access));
    }
    (out, words)
}

/// Turns the last dispatch of `out` into its rounding variant if it is a
/// norm or gated unit that wrote exactly the rows `key` names, the copy to
/// start at word `scratch`, rows `stride` apart, spanning `rounded`.
/// Returns whether it did.
fn fuse_into_last(
    out: &mut Dispatches,
    key: (u32, u32, u32, u32),
    scratch: u32,
    stride: u32,
    rounded: &std::ops::Range<u64>,
) -> bool {
    let Some((Recorded::Op(kernel, params, groups, _), access)) = out.last_mut() else {
        return false;
    };
    let wrote = (params.y_offset, params.y_stride, params.batch, params.cols);
    let round = match kernel {
        Kernel::RmsNorm => Kernel::RmsNormRound,
        Kernel::Swiglu => Kernel::SwigluRound,
        _ => return false,
    };
    if wrote != key {
        return false;
    }
    if round == Kernel::SwigluRound {
        // One invocation per run of 16 outputs.
        let runs = params.batch * (params.cols / 16);
        *groups = runs.div_ceil(GROUP).clamp(1, MAX_GROUPS);
    }
    *kernel = round;
    params.aux2 = scratch;
    params.aux3 = stride;
    access.push(Access::write(Resource::Act, rounded.clone()));
    true
}

/// Forgets the rounded rows if `access` writes any of their inputs.
fn forget_if_written(held: &mut Option<Held>, access: &[Access]) {
    if let Some(Held { source, .. }) = held {
        let written = access.iter().any(|a| {
            a.write
                && a.resource == Resource::Act
                && a.range.start < source.end
                && source.start < a.range.end
        });
        if written {
            *held = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An integer-dot product of `outputs` × 64 reading one row at `x`,
    /// writing at `y`.
    fn product(x: u32, y: u32, outputs: u32) -> (Recorded, Vec<Access>) {
        let params = OpParams {
            rows: outputs,
            cols: 64,
            batch: 1,
            x_offset: x,
            x_stride: 64,
            y_offset: y,
            y_stride: outputs,
            ..OpParams::default()
        };
        let access = vec![
            Access::read(Resource::Act, rows(x, 64, 1, 64)),
            Access::write(Resource::Act, rows(y, outputs, 1, outputs)),
        ];
        (Recorded::Op(Kernel::MatvecDotQ40, params, 1, 0), access)
    }

    /// A plain op writing `len` elements at `at`.
    fn writer(at: u32, len: u32) -> (Recorded, Vec<Access>) {
        let params = OpParams {
            cols: len,
            batch: 1,
            y_offset: at,
            ..OpParams::default()
        };
        let access = vec![Access::write(Resource::Act, rows(at, len, 1, len))];
        (Recorded::Op(Kernel::RmsNorm, params, 1, 0), access)
    }

    fn kernels(list: &[(Recorded, Vec<Access>)]) -> Vec<Kernel> {
        list.iter()
            .map(|(what, _)| match what {
                Recorded::Op(k, ..) => *k,
                Recorded::Attention(d) => d.kernel,
            })
            .collect()
    }

    #[test]
    fn products_of_one_input_share_its_rounding_until_it_is_written() {
        use Kernel::{MatvecDotQ40 as Dot, Quantize as Q, RmsNorm as Norm};
        let scratch = 1024;
        let list = vec![
            writer(0, 64),
            product(0, 100, 8),
            product(0, 200, 4),
            // Another input, then the first again: rounded anew each time.
            product(300, 400, 4),
            product(0, 500, 4),
            // The input rewritten: rounded again.
            writer(0, 64),
            product(0, 600, 4),
            // A write elsewhere changes nothing.
            writer(700, 8),
            product(0, 800, 4),
        ];
        let (out, words) = round_inputs(list, scratch);
        assert_eq!(
            kernels(&out),
            [Norm, Q, Dot, Dot, Q, Dot, Q, Dot, Norm, Q, Dot, Norm, Dot]
        );
        // One row: its 16 words of bytes and 4 scales, then a row's slack.
        assert_eq!(words, 20 + 64);
        for (what, access) in &out {
            let Recorded::Op(kernel, params, ..) = what else {
                unreachable!()
            };
            let rounded = u64::from(scratch)..u64::from(scratch) + words;
            match kernel {
                Kernel::Quantize => {
                    assert_eq!((params.y_offset, params.y_stride), (scratch, 20));
                    assert!(access.contains(&Access::write(Resource::Act, rounded)));
                }
                Kernel::MatvecDotQ40 => {
                    // It reads the copy, not its input.
                    assert_eq!((params.x_offset, params.x_stride), (scratch, 20));
                    assert!(access.contains(&Access::read(Resource::Act, rounded)));
                    assert!(!access
                        .iter()
                        .any(|a| !a.write && a.range.start < u64::from(scratch)));
                }
                _ => {}
            }
        }
    }

    /// A norm (or gated unit) writing one row of 64 at `at`, as the
    /// products' input.
    fn producer(kernel: Kernel, at: u32) -> (Recorded, Vec<Access>) {
        let params = OpParams {
            cols: 64,
            batch: 1,
            y_offset: at,
            y_stride: 64,
            ..OpParams::default()
        };
        let access = vec![Access::write(Resource::Act, rows(at, 64, 1, 64))];
        (Recorded::Op(kernel, params, 1, 0), access)
    }

    #[test]
    fn a_norm_or_gated_unit_just_before_rounds_what_it_wrote() {
        use Kernel::{MatvecDotQ40 as Dot, Quantize as Q};
        let scratch = 1024;
        let list = vec![
            producer(Kernel::RmsNorm, 0),
            product(0, 100, 8),
            product(0, 200, 4),
            producer(Kernel::Swiglu, 300),
            product(300, 400, 4),
            // Not just before: a quantize of its own.
            producer(Kernel::RmsNorm, 500),
            writer(700, 8),
            product(500, 800, 4),
        ];
        let (out, _) = round_inputs(list, scratch);
        assert_eq!(
            kernels(&out),
            [
                Kernel::RmsNormRound,
                Dot,
                Dot,
                Kernel::SwigluRound,
                Dot,
                Kernel::RmsNorm,
                Kernel::RmsNorm,
                Q,
                Dot
            ]
        );
        let rounded = u64::from(scratch)..u64::from(scratch) + 20 + 64;
        for (what, access) in &out[..4] {
            if let Recorded::Op(k @ (Kernel::RmsNormRound | Kernel::SwigluRound), params, ..) = what
            {
                assert_eq!((params.aux2, params.aux3), (scratch, 20), "{k:?}");
                assert!(access.contains(&Access::write(Resource::Act, rounded.clone())));
            }
        }
    }

    #[test]
    fn a_program_without_integer_dot_products_is_left_as_it_was() {
        let (out, words) = round_inputs(vec![writer(0, 64), writer(64, 64)], 256);
        assert_eq!(words, 0);
        assert_eq!(kernels(&out), [Kernel::RmsNorm, Kernel::RmsNorm]);
    }
}
