//! [`Op`]: one model op of a program, and its checks against the buffers
//! before anything is recorded.

use pagoda_core::QuantKind;

use super::pipelines::{
    matmul_kernels, OpParams, DECODE_MAX_BATCH, DECODE_ROWS, TILE_BATCH, TILE_ROWS,
};
use crate::kernels::Kernel;
use crate::VulkanError;

/// Workgroups one dispatch asks for at most; kernels loop over the rest.
const MAX_GROUPS: u32 = 65_535;

/// Invocations per workgroup of the element-wise kernels.
const GROUP: u32 = 64;

/// What the device offers the planner: the subgroup width where the
/// subgroup kernel variants are in use, whether prefill products take the
/// cooperative-matrix kernel, and the largest batch the GPU decode product
/// (`matvec.comp`) takes (0: never).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KernelChoice {
    pub subgroup: Option<u32>,
    pub coopmat: bool,
    pub vector_batch: u32,
    /// Output rows per workgroup of the GPU decode product.
    pub vector_rows: u32,
    /// Whether the GPU decode product takes its variant on 8-bit
    /// activations in integer dot products.
    pub integer_dot: bool,
}

/// The activation of a gated linear unit's gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GluActivation {
    /// `silu(g) = g / (1 + e^-g)` (SwiGLU).
    Silu,
    /// GELU's tanh approximation, `0.5·g·(1 + tanh(√(2/π)(g + 0.044715 g³)))`
    /// (GeGLU, as Gemma uses it).
    GeluTanh,
}

/// One op of a program. Weight offsets are bytes into the weights buffer;
/// `x`, `y`, `gate`, `up` are element offsets into the activations, with
/// strides between batch rows; `tokens`, `positions`, `out` index meta.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// `y[b][r] = Σ_c W[r][c] · x[b][c]` (or `+=`, with `accumulate`),
    /// `W` as `rows` rows of `cols` elements in `kind` blocks from byte
    /// `weights`.
    Matmul {
        /// Block type of the matrix.
        kind: QuantKind,
        /// First byte of the matrix.
        weights: u64,
        /// Output features.
        rows: u32,
        /// Input features.
        cols: u32,
        /// Activation rows.
        batch: u32,
        /// First input element and the stride between input rows.
        x: u32,
        /// Elements between input rows.
        x_stride: u32,
        /// First output element.
        y: u32,
        /// Elements between output rows.
        y_stride: u32,
        /// Add the product to what `y` holds (a residual connection fused
        /// into the product) instead of overwriting it.
        accumulate: bool,
    },
    /// `y[b] = row meta[tokens + b]` of the `rows` × `cols` matrix in `kind`
    /// blocks, dequantized, times `scale`.
    Embed {
        /// Block type of the matrix.
        kind: QuantKind,
        /// First byte of the matrix.
        weights: u64,
        /// Rows (the vocabulary).
        rows: u32,
        /// Elements per row.
        cols: u32,
        /// Tokens looked up.
        batch: u32,
        /// Where the token ids start in meta.
        tokens: u32,
        /// First output element.
        y: u32,
        /// Elements between output rows.
        y_stride: u32,
        /// Factor on every row (Gemma's `sqrt(hidden)`; 1 for none).
        scale: f32,
    },
    /// `y[b] = x[b] / sqrt(mean(x[b]²) + eps) · g`, the gains `g` as `cols`
    /// f32 from byte `gains` (4-byte aligned); `centered`, LayerNorm
    /// without a bias: `(x[b] − mean) / sqrt(var + eps) · g` (Cohere's).
    RmsNorm {
        /// First byte of the gains.
        gains: u64,
        /// Elements per row.
        cols: u32,
        /// Rows.
        batch: u32,
        /// First input element.
        x: u32,
        /// Elements between input rows.
        x_stride: u32,
        /// First output element (may equal `x`).
        y: u32,
        /// Elements between output rows.
        y_stride: u32,
        /// Added to the mean square (the variance where `centered`).
        eps: f32,
        /// Whether each row's mean is taken off first.
        centered: bool,
    },
    /// Rotary embedding in place over `batch` rows of `heads` heads of
    /// `head_dim`: the first `2 · half` elements of each head rotate by the
    /// f32 tables `[table_rows][half]` of cosines (byte `cos`) and sines
    /// (byte `sin`) at row `meta[positions + b]`.
    Rope {
        /// First byte of the cosine table.
        cos: u64,
        /// First byte of the sine table.
        sin: u64,
        /// Positions the tables cover.
        table_rows: u32,
        /// Rotated pairs per head.
        half: u32,
        /// Pairs `(2i, 2i+1)` instead of `(i, i + half)`.
        interleaved: bool,
        /// Heads per row.
        heads: u32,
        /// Elements per head.
        head_dim: u32,
        /// Rows.
        batch: u32,
        /// First element.
        x: u32,
        /// Elements between rows.
        x_stride: u32,
        /// Where the positions start in meta.
        positions: u32,
    },
    /// `y = act(gate) · up` over `batch` rows of `cols` (gate and up share
    /// `stride`).
    Glu {
        /// The gate's activation.
        activation: GluActivation,
        /// Elements per row.
        cols: u32,
        /// Rows.
        batch: u32,
        /// First gate element.
        gate: u32,
        /// First up element.
        up: u32,
        /// Elements between gate (and up) rows.
        stride: u32,
        /// First output element.
        y: u32,
        /// Elements between output rows.
        y_stride: u32,
    },
    /// `y += x` over `batch` rows of `cols`.
    Add {
        /// Elements per row.
        cols: u32,
        /// Rows.
        batch: u32,
        /// First addend element.
        x: u32,
        /// Elements between addend rows.
        x_stride: u32,
        /// First accumulator element.
        y: u32,
        /// Elements between accumulator rows.
        y_stride: u32,
    },
    /// `meta[out + b]` = the index of row b's largest element (the lowest
    /// among equals).
    Argmax {
        /// Elements per row.
        cols: u32,
        /// Rows.
        batch: u32,
        /// First element.
        x: u32,
        /// Elements between rows.
        x_stride: u32,
        /// Where the indices go in meta.
        out: u32,
    },
}

pub(super) fn shape(message: String) -> VulkanError {
    VulkanError::Shape(message)
}

/// Elements `first + (rows - 1) · stride + cols` end at, checked.
fn rows_end(first: u32, stride: u32, rows: u32, cols: u32) -> Option<u64> {
    if rows == 0 {
        return Some(0);
    }
    Some(u64::from(first) + u64::from(rows - 1) * u64::from(stride) + u64::from(cols))
}

/// Checks that `[first, first + len)` lies within `size`.
fn within(what: &str, op: usize, end: Option<u64>, size: u64) -> Result<(), VulkanError> {
    match end {
        Some(end) if end <= size => Ok(()),
        _ => Err(shape(format!(
            "op {op}: {what} runs past its buffer ({size})"
        ))),
    }
}

/// The bytes of `rows` rows of `cols` elements of `kind`.
pub(super) fn matrix_bytes(
    op: usize,
    kind: QuantKind,
    rows: u32,
    cols: u32,
) -> Result<(u64, u32), VulkanError> {
    let row = kind.bytes_for(cols as usize).map_err(|_| {
        shape(format!(
            "op {op}: rows of {cols} are not whole {} blocks",
            kind.name()
        ))
    })?;
    Ok((row as u64 * u64::from(rows), row as u32))
}

impl Op {
    /// The first weight byte the op reads, if it reads any.
    fn weight_start(&self) -> Option<u64> {
        match *self {
            Op::Matmul { weights, .. } | Op::Embed { weights, .. } => Some(weights),
            Op::RmsNorm { gains, .. } => Some(gains),
            Op::Rope { cos, sin, .. } => Some(cos.min(sin)),
            Op::Glu { .. } | Op::Add { .. } | Op::Argmax { .. } => None,
        }
    }

    /// The op with its weight offsets `by` bytes earlier.
    fn weights_shifted(&self, by: u64) -> Op {
        let mut op = *self;
        match &mut op {
            Op::Matmul { weights, .. } | Op::Embed { weights, .. } => *weights -= by,
            Op::RmsNorm { gains, .. } => *gains -= by,
            Op::Rope { cos, sin, .. } => {
                *cos -= by;
                *sin -= by;
            }
            Op::Glu { .. } | Op::Add { .. } | Op::Argmax { .. } => {}
        }
        op
    }

    /// [`plan`](Self::plan) over weights in several bindings (`weights`:
    /// each binding's range of the whole and its buffer's bytes): the op's
    /// weights must lie in one, whose index comes back with the plan.
    pub(super) fn plan_in(
        &self,
        index: usize,
        weights: &[(std::ops::Range<u64>, u64)],
        act: u64,
        meta: &[u32],
        choice: KernelChoice,
    ) -> Result<(Kernel, OpParams, u32, usize), VulkanError> {
        let start = self.weight_start().unwrap_or(0);
        let chunk = weights
            .iter()
            .position(|(r, _)| r.contains(&start))
            .or_else(|| (!weights.is_empty()).then(|| weights.len() - 1))
            .ok_or_else(|| shape(format!("op {index}: no weights uploaded")))?;
        let (range, buffer_bytes) = &weights[chunk];
        let local = self.weights_shifted(range.start.min(start));
        let (kernel, mut params, groups) =
            local.plan(index, range.end - range.start, act, meta, choice)?;
        // The kernels' own bounds: the whole buffer (padding included).
        params.w_words = (buffer_bytes / 4) as u32;
        Ok((kernel, params, groups, chunk))
    }

    /// Checks the op's ranges against the buffers' sizes (weight bytes,
    /// activation elements, meta words) and the meta values it reads as
    /// uploaded; returns the kernel, its push constants and workgroups,
    /// picked from what `choice` says the device offers.
    pub(super) fn plan(
        &self,
        index: usize,
        weights: u64,
        act: u64,
        meta: &[u32],
        choice: KernelChoice,
    ) -> Result<(Kernel, OpParams, u32), VulkanError> {
        let KernelChoice {
            subgroup, coopmat, ..
        } = choice;
        let base = OpParams {
            w_words: (weights / 4) as u32,
            act_words: act as u32,
            meta_words: meta.len() as u32,
            ..OpParams::default()
        };
        let meta_len = meta.len() as u64;
        let groups_for =
            |n: u64| n.div_ceil(u64::from(GROUP)).clamp(1, u64::from(MAX_GROUPS)) as u32;
        let offset32 = |what: &str, bytes: u64| {
            u32::try_from(bytes)
                .map_err(|_| shape(format!("op {index}: {what} offset {bytes} beyond 4 GiB")))
        };
        match *self {
            Op::Matmul {
                kind,
                weights: w,
                rows,
                cols,
                batch,
                x,
                x_stride,
                y,
                y_stride,
                accumulate,
            } => {
                let kernels = matmul_kernels(kind).ok_or_else(|| {
                    VulkanError::Unsupported(format!(
                        "no matrix product for {} weights",
                        kind.name()
                    ))
                })?;
                let (bytes, row_bytes) = matrix_bytes(index, kind, rows, cols)?;
                within("the matrix", index, w.checked_add(bytes), weights)?;
                within("the input", index, rows_end(x, x_stride, batch, cols), act)?;
                within("the output", index, rows_end(y, y_stride, batch, rows), act)?;
                let params = OpParams {
                    rows,
                    cols,
                    batch,
                    w_offset: offset32("weight", w)?,
                    row_bytes,
                    x_offset: x,
                    x_stride,
                    y_offset: y,
                    y_stride,
                    aux0: u32::from(accumulate),
                    ..base
                };
                // The GPU decode product reads 16-byte weight words and
                // vec4 activations: it needs them aligned.
                let vector = if choice.integer_dot {
                    kernels.vector_dot
                } else {
                    kernels.vector
                };
                let vector = vector.filter(|_| {
                    subgroup.is_some()
                        && batch <= choice.vector_batch
                        && w % 16 == 0
                        && x % 4 == 0
                        && x_stride % 4 == 0
                });
                // Kernels loop over what the workgroups do not cover, so
                // the counts only need to be right for speed.
                let (kernel, groups) = if let Some(vector) = vector {
                    (vector, u64::from(rows.div_ceil(choice.vector_rows.max(1))))
                } else if batch > DECODE_MAX_BATCH {
                    // Both prefill kernels work on the same tiles.
                    let tiles =
                        u64::from(rows.div_ceil(TILE_ROWS)) * u64::from(batch.div_ceil(TILE_BATCH));
                    let kernel = if coopmat {
                        kernels.coopmat
                    } else {
                        kernels.tiled
                    };
                    (kernel, tiles)
                } else if let Some(width) = subgroup {
                    let per_group = (GROUP / width.clamp(1, GROUP)).max(1);
                    (kernels.decode_subgroup, u64::from(rows.div_ceil(per_group)))
                } else {
                    (kernels.decode, u64::from(rows.div_ceil(DECODE_ROWS)))
                };
                Ok((
                    kernel,
                    params,
                    groups.clamp(1, u64::from(MAX_GROUPS)) as u32,
                ))
            }
            Op::Embed {
                kind,
                weights: w,
                rows,
                cols,
                batch,
                tokens,
                y,
                y_stride,
                scale,
            } => {
                let (bytes, row_bytes) = matrix_bytes(index, kind, rows, cols)?;
                if !scale.is_finite() {
                    return Err(shape(format!("op {index}: embedding scale {scale}")));
                }
                if kind == QuantKind::BF16 {
                    return Err(VulkanError::Unsupported(
                        "no embedding lookup for BF16".into(),
                    ));
                }
                within("the matrix", index, w.checked_add(bytes), weights)?;
                within(
                    "the token ids",
                    index,
                    Some(u64::from(tokens) + u64::from(batch)),
                    meta_len,
                )?;
                within("the output", index, rows_end(y, y_stride, batch, cols), act)?;
                let ids = &meta[tokens as usize..][..batch as usize];
                if let Some(bad) = ids.iter().find(|&&t| t >= rows) {
                    return Err(shape(format!(
                        "op {index}: token {bad} is not below {rows}"
                    )));
                }
                let params = OpParams {
                    rows,
                    cols,
                    batch,
                    w_offset: offset32("weight", w)?,
                    row_bytes,
                    y_offset: y,
                    y_stride,
                    aux0: tokens,
                    aux1: kind.ggml_id(),
                    eps: scale,
                    ..base
                };
                Ok((Kernel::Embed, params, batch.clamp(1, MAX_GROUPS)))
            }
            Op::RmsNorm {
                gains,
                cols,
                batch,
                x,
                x_stride,
                y,
                y_stride,
                eps,
                centered,
            } => {
                if gains % 4 != 0 {
                    return Err(shape(format!(
                        "op {index}: gains at byte {gains} are not 4-byte aligned"
                    )));
                }
                within(
                    "the gains",
                    index,
                    gains.checked_add(4 * u64::from(cols)),
                    weights,
                )?;
                within("the input", index, rows_end(x, x_stride, batch, cols), act)?;
                within("the output", index, rows_end(y, y_stride, batch, cols), act)?;
                let params = OpParams {
                    cols,
                    batch,
                    w_offset: offset32("gains", gains)?,
                    x_offset: x,
                    x_stride,
                    y_offset: y,
                    y_stride,
                    eps,
                    aux0: u32::from(centered),
                    ..base
                };
                Ok((Kernel::RmsNorm, params, batch.clamp(1, MAX_GROUPS)))
            }
            Op::Rope {
                cos,
                sin,
                table_rows,
                half,
                interleaved,
                heads,
                head_dim,
                batch,
                x,
                x_stride,
                positions,
            } => {
                if 2 * u64::from(half) > u64::from(head_dim) {
                    return Err(shape(format!(
                        "op {index}: {half} pairs do not fit heads of {head_dim}"
                    )));
                }
                if cos % 4 != 0 || sin % 4 != 0 {
                    return Err(shape(format!(
                        "op {index}: rotary tables are not 4-byte aligned"
                    )));
                }
                let table = 4 * u64::from(table_rows) * u64::from(half);
                within("the cosine table", index, cos.checked_add(table), weights)?;
                within("the sine table", index, sin.checked_add(table), weights)?;
                within(
                    "the positions",
                    index,
                    Some(u64::from(positions) + u64::from(batch)),
                    meta_len,
                )?;
                within(
                    "the rows",
                    index,
                    rows_end(x, x_stride, batch, heads * head_dim),
                    act,
                )?;
                let at = &meta[positions as usize..][..batch as usize];
                if let Some(bad) = at.iter().find(|&&p| p >= table_rows) {
                    return Err(shape(format!(
                        "op {index}: position {bad} is past the {table_rows}-row table"
                    )));
                }
                let params = OpParams {
                    rows: heads,
                    cols: head_dim,
                    batch,
                    w_offset: offset32("cosine table", cos)?,
                    x_offset: x,
                    x_stride,
                    aux0: positions,
                    aux1: offset32("sine table", sin)?,
                    aux2: half,
                    aux3: u32::from(interleaved),
                    ..base
                };
                let pairs = u64::from(batch) * u64::from(heads) * u64::from(half);
                Ok((Kernel::Rope, params, groups_for(pairs)))
            }
            Op::Glu {
                activation,
                cols,
                batch,
                gate,
                up,
                stride,
                y,
                y_stride,
            } => {
                within("the gate", index, rows_end(gate, stride, batch, cols), act)?;
                within(
                    "the up projection",
                    index,
                    rows_end(up, stride, batch, cols),
                    act,
                )?;
                within("the output", index, rows_end(y, y_stride, batch, cols), act)?;
                let params = OpParams {
                    cols,
                    batch,
                    x_offset: gate,
                    x_stride: stride,
                    y_offset: y,
                    y_stride,
                    aux0: up,
                    aux1: match activation {
                        GluActivation::Silu => 0,
                        GluActivation::GeluTanh => 1,
                    },
                    ..base
                };
                Ok((
                    Kernel::Swiglu,
                    params,
                    groups_for(u64::from(batch) * u64::from(cols)),
                ))
            }
            Op::Add {
                cols,
                batch,
                x,
                x_stride,
                y,
                y_stride,
            } => {
                within("the addend", index, rows_end(x, x_stride, batch, cols), act)?;
                within(
                    "the accumulator",
                    index,
                    rows_end(y, y_stride, batch, cols),
                    act,
                )?;
                let params = OpParams {
                    cols,
                    batch,
                    x_offset: x,
                    x_stride,
                    y_offset: y,
                    y_stride,
                    ..base
                };
                Ok((
                    Kernel::Add,
                    params,
                    groups_for(u64::from(batch) * u64::from(cols)),
                ))
            }
            Op::Argmax {
                cols,
                batch,
                x,
                x_stride,
                out,
            } => {
                within("the rows", index, rows_end(x, x_stride, batch, cols), act)?;
                within(
                    "the indices",
                    index,
                    Some(u64::from(out) + u64::from(batch)),
                    meta_len,
                )?;
                let params = OpParams {
                    cols,
                    batch,
                    x_offset: x,
                    x_stride,
                    aux0: out,
                    ..base
                };
                Ok((Kernel::Argmax, params, batch.clamp(1, MAX_GROUPS)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel and workgroups the planner gives a Q4_0 product of
    /// `rows` × 64 at `batch`, with subgroups of `subgroup` (or none).
    fn product(rows: u32, batch: u32, subgroup: Option<u32>) -> (Kernel, u32) {
        product_with(rows, batch, subgroup, false)
    }

    fn product_with(rows: u32, batch: u32, subgroup: Option<u32>, coopmat: bool) -> (Kernel, u32) {
        let op = Op::Matmul {
            kind: QuantKind::Q4_0,
            weights: 0,
            rows,
            cols: 64,
            batch,
            x: 0,
            x_stride: 64,
            y: 0,
            y_stride: rows,
            accumulate: false,
        };
        let choice = KernelChoice {
            subgroup,
            coopmat,
            vector_batch: 0,
            vector_rows: 4,
            integer_dot: false,
        };
        let (kernel, _, groups) = op.plan(0, 1 << 40, 1 << 32, &[], choice).unwrap();
        (kernel, groups)
    }

    fn vector(rows: u32, batch: u32, x: u32) -> Kernel {
        vector_with(rows, batch, x, false)
    }

    fn vector_with(rows: u32, batch: u32, x: u32, integer_dot: bool) -> Kernel {
        let op = Op::Matmul {
            kind: QuantKind::Q4_K,
            weights: 0,
            rows,
            cols: 256,
            batch,
            x,
            x_stride: 256,
            y: 1 << 20,
            y_stride: rows,
            accumulate: false,
        };
        let choice = KernelChoice {
            subgroup: Some(32),
            coopmat: false,
            vector_batch: 16,
            vector_rows: 4,
            integer_dot,
        };
        op.plan(0, 1 << 40, 1 << 32, &[], choice).unwrap().0
    }

    #[test]
    fn the_gpu_decode_products_take_aligned_batches_up_to_their_limit() {
        assert_eq!(vector(100, 1, 0), Kernel::MatvecQ4K);
        assert_eq!(vector(100, 16, 0), Kernel::MatvecQ4K);
        // Past the limit, or activations not vec4-aligned: the others.
        assert_eq!(vector(100, 17, 0), Kernel::MatmulTiledQ4K);
        assert_eq!(vector(100, 1, 2), Kernel::MatmulQ4KSubgroup);
        // With integer dot products: their variant, under the same limits.
        assert_eq!(vector_with(100, 16, 0, true), Kernel::MatvecDotQ4K);
        assert_eq!(vector_with(100, 17, 0, true), Kernel::MatmulTiledQ4K);
        assert_eq!(vector_with(100, 1, 2, true), Kernel::MatmulQ4KSubgroup);
    }

    #[test]
    fn batches_beyond_the_decode_product_take_the_tiled_one() {
        // 4 rows per workgroup in shared memory, one per subgroup.
        assert_eq!(product(130, 8, None), (Kernel::MatmulQ40, 33));
        assert_eq!(product(130, 1, Some(32)), (Kernel::MatmulQ40Subgroup, 65));
        assert_eq!(product(130, 1, Some(64)), (Kernel::MatmulQ40Subgroup, 130));
        // Tiles of 64 rows × 32 activation rows.
        assert_eq!(product(130, 9, None), (Kernel::MatmulTiledQ40, 3));
        assert_eq!(product(130, 70, Some(32)), (Kernel::MatmulTiledQ40, 9));
        // With cooperative matrices: the same tiles, decode unchanged.
        assert_eq!(
            product_with(130, 70, Some(32), true),
            (Kernel::MatmulCoopQ40, 9)
        );
        assert_eq!(
            product_with(130, 8, Some(32), true),
            (Kernel::MatmulQ40Subgroup, 65)
        );
        // Far beyond one dispatch: the kernels loop over the rest.
        assert_eq!(product(1 << 20, 1, None).1, MAX_GROUPS);
    }
}
