//! Which dispatches of a program need a barrier before them: each dispatch
//! names the ranges it reads and writes, and a barrier goes in only where
//! one touches what an earlier dispatch since the last barrier wrote (or
//! writes what one read). Independent products of one input (queries, keys
//! and values; gate and up) then run side by side, where a barrier after
//! every dispatch would drain the device between them: on a GPU the drain,
//! not the work, is most of a small dispatch's time.

use std::ops::Range;

use super::op::Op;

/// What a dispatch touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resource {
    /// The activations, by element.
    Act,
    /// The op meta words (token ids, positions, sampled tokens).
    Meta,
    /// One layer of the KV store.
    Kv(u32),
    /// The attention kernels' split-KV partial records.
    Partials,
}

/// One range a dispatch reads or writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Access {
    pub resource: Resource,
    pub range: Range<u64>,
    pub write: bool,
}

impl Access {
    pub fn read(resource: Resource, range: Range<u64>) -> Self {
        Self {
            resource,
            range,
            write: false,
        }
    }

    pub fn write(resource: Resource, range: Range<u64>) -> Self {
        Self {
            resource,
            range,
            write: true,
        }
    }

    fn overlaps(&self, other: &Access) -> bool {
        self.resource == other.resource
            && self.range.start < other.range.end
            && other.range.start < self.range.end
    }
}

/// The elements `rows` rows of `cols`, `stride` apart from `first`, span
/// (rows between them included: a conservative range).
pub(crate) fn rows(first: u32, stride: u32, rows: u32, cols: u32) -> Range<u64> {
    let start = u64::from(first);
    if rows == 0 || cols == 0 {
        return start..start;
    }
    start..start + u64::from(rows - 1) * u64::from(stride) + u64::from(cols)
}

impl Op {
    /// The activation and meta ranges the op reads and writes (weights
    /// are never written, so they never order anything).
    pub(crate) fn accesses(&self) -> Vec<Access> {
        use Resource::{Act, Meta};
        match *self {
            Op::Matmul {
                rows: r,
                cols,
                batch,
                x,
                x_stride,
                y,
                y_stride,
                accumulate,
                ..
            } => {
                let mut out = vec![
                    Access::read(Act, rows(x, x_stride, batch, cols)),
                    Access::write(Act, rows(y, y_stride, batch, r)),
                ];
                if accumulate {
                    out.push(Access::read(Act, rows(y, y_stride, batch, r)));
                }
                out
            }
            Op::Embed {
                cols,
                batch,
                tokens,
                y,
                y_stride,
                ..
            } => vec![
                Access::read(
                    Meta,
                    u64::from(tokens)..u64::from(tokens) + u64::from(batch),
                ),
                Access::write(Act, rows(y, y_stride, batch, cols)),
            ],
            Op::RmsNorm {
                cols,
                batch,
                x,
                x_stride,
                y,
                y_stride,
                ..
            } => vec![
                Access::read(Act, rows(x, x_stride, batch, cols)),
                Access::write(Act, rows(y, y_stride, batch, cols)),
            ],
            Op::Rope {
                heads,
                head_dim,
                batch,
                x,
                x_stride,
                positions,
                ..
            } => {
                let range = rows(x, x_stride, batch, heads * head_dim);
                vec![
                    Access::read(
                        Meta,
                        u64::from(positions)..u64::from(positions) + u64::from(batch),
                    ),
                    Access::read(Act, range.clone()),
                    Access::write(Act, range),
                ]
            }
            Op::Glu {
                cols,
                batch,
                gate,
                up,
                stride,
                y,
                y_stride,
                ..
            } => vec![
                Access::read(Act, rows(gate, stride, batch, cols)),
                Access::read(Act, rows(up, stride, batch, cols)),
                Access::write(Act, rows(y, y_stride, batch, cols)),
            ],
            Op::Add {
                cols,
                batch,
                x,
                x_stride,
                y,
                y_stride,
            } => {
                let acc = rows(y, y_stride, batch, cols);
                vec![
                    Access::read(Act, rows(x, x_stride, batch, cols)),
                    Access::read(Act, acc.clone()),
                    Access::write(Act, acc),
                ]
            }
            Op::Argmax {
                cols,
                batch,
                x,
                x_stride,
                out,
            } => vec![
                Access::read(Act, rows(x, x_stride, batch, cols)),
                Access::write(Meta, u64::from(out)..u64::from(out) + u64::from(batch)),
            ],
        }
    }
}

/// What the dispatches since the last barrier read and wrote.
#[derive(Debug, Default)]
pub(crate) struct Hazards {
    reads: Vec<Access>,
    writes: Vec<Access>,
}

impl Hazards {
    /// Whether a dispatch touching `accesses` must wait for the ones since
    /// the last barrier: it reads or writes what they wrote, or writes
    /// what they read.
    pub fn conflicts(&self, accesses: &[Access]) -> bool {
        accesses.iter().any(|a| {
            self.writes.iter().any(|w| w.overlaps(a))
                || (a.write && self.reads.iter().any(|r| r.overlaps(a)))
        })
    }

    /// Notes a dispatch recorded since the last barrier.
    pub fn add(&mut self, accesses: &[Access]) {
        for a in accesses {
            if a.write {
                self.writes.push(a.clone());
            } else {
                self.reads.push(a.clone());
            }
        }
    }

    /// A barrier was recorded: nothing before it is pending.
    pub fn clear(&mut self) {
        self.reads.clear();
        self.writes.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagoda_core::QuantKind;

    fn product(x: u32, y: u32) -> Op {
        Op::Matmul {
            kind: QuantKind::Q4_0,
            weights: 0,
            rows: 8,
            cols: 32,
            batch: 1,
            x,
            x_stride: 32,
            y,
            y_stride: 8,
            accumulate: false,
        }
    }

    #[test]
    fn products_of_one_input_into_distinct_outputs_need_no_barrier() {
        let mut h = Hazards::default();
        h.add(&product(0, 100).accesses());
        assert!(!h.conflicts(&product(0, 108).accesses()));
        // Reading what was written, or overwriting what was read, waits.
        assert!(h.conflicts(&product(100, 200).accesses()));
        assert!(h.conflicts(&product(40, 16).accesses()));
        h.clear();
        assert!(!h.conflicts(&product(100, 200).accesses()));
    }

    #[test]
    fn kv_layers_and_meta_are_their_own_resources() {
        let mut h = Hazards::default();
        h.add(&[Access::write(Resource::Kv(3), 0..1)]);
        assert!(!h.conflicts(&[Access::read(Resource::Kv(4), 0..1)]));
        assert!(h.conflicts(&[Access::read(Resource::Kv(3), 0..1)]));
        assert!(!h.conflicts(&[Access::read(Resource::Meta, 0..1)]));
    }

    #[test]
    fn strided_rows_span_from_the_first_to_the_end_of_the_last() {
        assert_eq!(rows(10, 100, 3, 4), 10..214);
        assert_eq!(rows(10, 100, 0, 4), 10..10);
    }
}
