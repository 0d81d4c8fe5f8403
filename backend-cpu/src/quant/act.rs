//! A step's activations, quantized once to the 8-bit blocks the weight type
//! pairs with (see the table in the module above) and reused for every
//! weight matrix of that type and shape.

use pagoda_core::QuantKind;

use super::lines::LineBuf;
use super::QMatError;

/// Elements per Q8_0/Q8_1 activation block (the legacy weight block).
pub(super) const QB: usize = 32;
/// Elements per Q8_K activation block (the K super-block).
pub(super) const KB: usize = 256;
/// Elements per Q8_K partial sum.
pub(super) const KSUM: usize = 16;
/// Activation rows whose block scales [`QuantizedActivations::lane_scales`]
/// keeps side by side (one 8-lane vector).
pub(super) const LANES: usize = 8;
/// Activation rows interleaved together in [`QuantizedActivations::quads`].
pub(super) const QUAD: usize = 4;
/// Bytes of one row that a quad's vector holds side by side with the
/// other rows' (a quarter of a 32-byte vector).
pub(super) const QUAD_CHUNK: usize = 8;
/// Activation rows from which the AVX2 kernels multiply Q4_0, Q4_1, Q8_0
/// and K-quant weights against [`QuantizedActivations::quads`], and so from which
/// quantizing builds them. Below, a group of four has too little work per
/// unpacked block: Q4_1 1536×576 at 3 and 4 rows ran 3.99 and 3.92 GiB/s
/// interleaved against 4.99 and 4.25 one row at a time; at 6 and 8, 2.79
/// and 2.70 against 2.55 and 2.16 (one thread, Zen 2).
pub(super) const QUAD_MIN_ROWS: usize = 5;

/// How the activations are stored.
// GGML's names, so they read as in every other tool.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActFormat {
    /// Plain f32: what F32, F16 and BF16 weights take, and what any
    /// quantized weights take when the 8-bit rounding would cost too much
    /// accuracy ([`QuantizedActivations::keep_f32`]): their blocks are then
    /// widened to f32 in registers.
    F32,
    /// Blocks of 32 `i8` with an f32 scale (Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4
    /// weights).
    Q8_0,
    /// Q8_0 plus each block's `scale × Σ q` (Q4_1, Q5_1 weights).
    Q8_1,
    /// Blocks of 256 `i8`, an f32 scale and sums of each 16 (K weights).
    Q8_K,
}

impl ActFormat {
    /// The format `kind` weights multiply with.
    pub fn for_weights(kind: QuantKind) -> Self {
        match kind {
            QuantKind::F32 | QuantKind::F16 | QuantKind::BF16 => Self::F32,
            QuantKind::Q8_0
            | QuantKind::Q4_0
            | QuantKind::Q5_0
            | QuantKind::IQ4_NL
            | QuantKind::MXFP4 => Self::Q8_0,
            QuantKind::Q4_1 | QuantKind::Q5_1 => Self::Q8_1,
            QuantKind::Q2_K
            | QuantKind::Q3_K
            | QuantKind::Q4_K
            | QuantKind::Q5_K
            | QuantKind::Q6_K
            | QuantKind::IQ4_XS => Self::Q8_K,
        }
    }

    /// Elements per block.
    pub fn block_elems(self) -> usize {
        match self {
            Self::F32 => 1,
            Self::Q8_0 | Self::Q8_1 => QB,
            Self::Q8_K => KB,
        }
    }
}

/// `rows` activation rows of `cols` elements in one [`ActFormat`]. The
/// buffers grow to the largest shape seen and are then reused: quantizing a
/// step allocates nothing once warm.
#[derive(Debug, Clone)]
pub struct QuantizedActivations {
    format: ActFormat,
    rows: usize,
    cols: usize,
    /// F32: the values.
    pub(super) f: Vec<f32>,
    /// Quantized values, row after row.
    pub(super) q: LineBuf<i8>,
    /// One scale per block.
    pub(super) d: Vec<f32>,
    /// Q8_1: `d × Σ q` per block.
    pub(super) s: Vec<f32>,
    /// Q8_0 and Q8_1: for each group of [`LANES`] rows and each block, one
    /// cache line of the rows' scales (`d`) then their `d × Σ q` (zero past
    /// the last row), so a kernel reads a group's eight of each in one load.
    /// Built only where read: on x86_64, for three rows or more.
    lane_scales: LineBuf<f32>,
    /// From [`QUAD_MIN_ROWS`] rows on x86_64 (8-bit formats): the values
    /// of each group of [`QUAD`] rows (zero past the last row) interleaved
    /// per 32 values in chunks of [`QUAD_CHUNK`]: 128 bytes a 32, chunk `k`
    /// of row `r` at `32k + 8r` (a Q8_K block is eight such in a row). One 32-byte load then holds a chunk of
    /// four rows, and `maddubs` against the weight chunk broadcast to all
    /// four gives every row's sums in its own lanes (see `x86::quads`).
    quads: LineBuf<i8>,
    /// Beside [`Self::quads`], for each group and block, 16 floats: the
    /// rows' scales `d` (each twice, as row `r`'s sums fill lanes `2r` and
    /// `2r + 1`), then (Q8_0, Q8_1) their `d × Σ q` in lanes `2r` (odd
    /// lanes zero).
    quad_scales: LineBuf<f32>,
    /// Q8_K, beside [`Self::quads`]: for each group and 256-value block,
    /// the rows' 16 sums of 16 in four vectors, vector `k` holding sums
    /// `4k..4k + 4` of row `r` at `4r` (64 `i16`), so one `madd` against a
    /// weight block's four corrections broadcast gives each row's in its
    /// lanes `2r`, `2r + 1`.
    quad_bsums: LineBuf<i16>,
    /// Q8_K: `Σ q` per 16 values.
    pub(super) bsums: Vec<i16>,
    /// Q8_0 and Q8_1: `Σ q` per block, for the interleaved Q4_0 kernel,
    /// which multiplies nibbles unsigned and takes their −8 back exactly.
    sums: Vec<i32>,
    /// F32: each 32-value block in [`NIBBLE_ORDER`] (Q4_0, Q4_1 weights).
    nibble_order: LineBuf<f32>,
    /// F32: each 32-value block in [`BYTE_ORDER`] (Q8_0 weights).
    byte_order: LineBuf<f32>,
}

/// The element of a 32-value block that lane `l` of vector `k` holds when
/// a Q4 block's 16 bytes are read as four 32-bit words, the words'
/// high halves moved to lanes 4..8, and each vector takes the nibble at bits
/// `4k` of every lane: `NIBBLE_ORDER[8k + l]`. The SIMD kernels then widen
/// weights with shifts and masks alone (no byte shuffles), and the
/// activations, permuted once per step to match, are read in order.
pub(super) const NIBBLE_ORDER: [usize; QB] = {
    let mut order = [0; QB];
    let mut i = 0;
    while i < QB {
        let (k, l) = (i / 8, i % 8);
        let byte = 4 * (l % 4) + 2 * (l / 4) + k / 2;
        order[i] = byte + 16 * (k % 2);
        i += 1;
    }
    order
};

/// As [`NIBBLE_ORDER`] for a Q8_0 block's 32 bytes read as eight 32-bit
/// words, vector `k` taking byte `k` of every word: element `4l + k`.
pub(super) const BYTE_ORDER: [usize; QB] = {
    let mut order = [0; QB];
    let mut i = 0;
    while i < QB {
        order[i] = 4 * (i % 8) + i / 8;
        i += 1;
    }
    order
};

/// `v` rounded to the nearest integer (halves away from zero, as
/// `f32::round`) and clamped to ±127; NaN gives 0. Written out because
/// `round` is a library call on x86_64 without SSE4.1, and a decode step
/// rounds every activation of every product.
#[inline]
fn round_i8(v: f32) -> i8 {
    let r = v.clamp(-127.0, 127.0);
    // `as` truncates toward zero (NaN to 0); `r − t` is exact below 2²³.
    let t = r as i32;
    let frac = r - t as f32;
    (t + i32::from(frac >= 0.5) - i32::from(frac <= -0.5)) as i8
}

/// Rounds one block: scale `amax / 127`, values rounded to nearest by
/// [`round_i8`]. Returns the scale.
fn round_block(xb: &[f32], qb: &mut [i8]) -> f32 {
    let amax = xb.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    for (q, v) in qb.iter_mut().zip(xb) {
        *q = round_i8(v * id);
    }
    d
}

/// The sums of `qb`'s values sixteen at a time, into `sums`.
fn sums_of_16(qb: &[i8], sums: &mut [i32]) {
    for (sum, g) in sums.iter_mut().zip(qb.chunks_exact(KSUM)) {
        *sum = g.iter().map(|&q| i32::from(q)).sum();
    }
}

/// Whether 8-bit blocks are rounded by the AVX2 loop
/// (`x86::round::round_blocks`), which gives the same bytes and sums.
fn simd_rounding() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::Isa::detect().base() == crate::Isa::Avx2
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl Default for QuantizedActivations {
    fn default() -> Self {
        Self::new()
    }
}

impl QuantizedActivations {
    /// An empty buffer (zero rows of F32).
    pub fn new() -> Self {
        Self {
            format: ActFormat::F32,
            rows: 0,
            cols: 0,
            f: Vec::new(),
            q: LineBuf::new(),
            d: Vec::new(),
            s: Vec::new(),
            bsums: Vec::new(),
            sums: Vec::new(),
            nibble_order: LineBuf::new(),
            byte_order: LineBuf::new(),
            lane_scales: LineBuf::new(),
            quads: LineBuf::new(),
            quad_scales: LineBuf::new(),
            quad_bsums: LineBuf::new(),
        }
    }

    /// The format held.
    pub fn format(&self) -> ActFormat {
        self.format
    }

    /// Activation rows held.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Elements per row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Quantizes `x` (`rows × cols` floats, row-major) for `weights`-typed
    /// matrices: blocks of `amax / 127` scale, values rounded to nearest.
    pub fn quantize(
        &mut self,
        weights: QuantKind,
        x: &[f32],
        rows: usize,
        cols: usize,
    ) -> Result<(), QMatError> {
        let format = ActFormat::for_weights(weights);
        let block = format.block_elems();
        if !cols.is_multiple_of(block) {
            return Err(QMatError::PartialBlock {
                kind: weights,
                cols,
            });
        }
        let expected = rows.checked_mul(cols).ok_or(QMatError::Overflow)?;
        if x.len() != expected {
            return Err(QMatError::InputLength {
                expected,
                found: x.len(),
            });
        }
        if format == ActFormat::F32 {
            return self.keep_f32(x, rows, cols);
        }
        (self.format, self.rows, self.cols) = (format, rows, cols);
        for v in [&mut self.f, &mut self.d, &mut self.s] {
            v.clear();
        }
        self.bsums.clear();
        self.sums.clear();
        let q = self.q.reset(x.len());
        let (d, s, bsums, sums) = (&mut self.d, &mut self.s, &mut self.bsums, &mut self.sums);
        // Each block's scale, and its values' sums sixteen at a time (Q8_K
        // keeps them; Q8_0 and Q8_1 keep their total).
        let mut each = |d_block: f32, sums16: &[i32]| {
            d.push(d_block);
            if format == ActFormat::Q8_K {
                // |Σ| of 16 values ≤ 16 × 127: fits i16.
                bsums.extend(sums16.iter().map(|&s| s as i16));
                return;
            }
            let sum: i32 = sums16.iter().sum();
            sums.push(sum);
            if format == ActFormat::Q8_1 {
                s.push(d_block * sum as f32);
            }
        };
        if simd_rounding() {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `simd_rounding` checked that the CPU has AVX2, FMA
            // and F16C.
            unsafe {
                super::x86::round::round_blocks(x, q, block, each);
            }
        } else {
            let mut sums16 = [0i32; KB / KSUM];
            for (xb, qb) in x.chunks_exact(block).zip(q.chunks_exact_mut(block)) {
                let d_block = round_block(xb, qb);
                let sums = &mut sums16[..block / KSUM];
                sums_of_16(qb, sums);
                each(d_block, sums);
            }
        }
        // Only the AVX2 kernels for passes of three or four rows read these
        // lines (passes of 5 or more take the interleaved rows), and only
        // a product's last pass can be that short.
        let last_pass = rows.saturating_sub(1) % super::MAX_ROWS_PER_PASS + 1;
        let lanes_read = cfg!(target_arch = "x86_64") && rows >= 3 && matches!(last_pass, 3 | 4);
        if lanes_read && matches!(format, ActFormat::Q8_0 | ActFormat::Q8_1) {
            let blocks = cols / QB;
            let table = self
                .lane_scales
                .reset(rows.div_ceil(LANES) * blocks * 2 * LANES);
            table.fill(0.0);
            for i in 0..rows {
                let (group, lane) = (i / LANES, i % LANES);
                for b in 0..blocks {
                    let at = (group * blocks + b) * 2 * LANES + lane;
                    table[at] = self.d[i * blocks + b];
                    if format == ActFormat::Q8_1 {
                        table[at + LANES] = self.s[i * blocks + b];
                    }
                }
            }
        }
        let quads_read = cfg!(target_arch = "x86_64") && rows >= QUAD_MIN_ROWS;
        if quads_read {
            self.build_quads();
        } else {
            self.quads.reset(0);
            self.quad_scales.reset(0);
            self.quad_bsums.reset(0);
        }
        Ok(())
    }

    /// Fills [`Self::quads`], [`Self::quad_scales`] and (Q8_K)
    /// [`Self::quad_bsums`] from the rows.
    fn build_quads(&mut self) {
        let blocks = self.cols / QB;
        let groups = self.rows.div_ceil(QUAD);
        let quads = self.quads.reset(groups * blocks * QUAD * QB);
        quads.fill(0);
        let q = self.q.as_slice();
        for i in 0..self.rows {
            let (group, r) = (i / QUAD, i % QUAD);
            for b in 0..blocks {
                let at = (group * blocks + b) * QUAD * QB;
                let src = &q[(i * blocks + b) * QB..(i * blocks + b + 1) * QB];
                for (k, chunk) in src.chunks_exact(QUAD_CHUNK).enumerate() {
                    let to = at + k * QUAD * QUAD_CHUNK + r * QUAD_CHUNK;
                    quads[to..to + QUAD_CHUNK].copy_from_slice(chunk);
                }
            }
        }
        if self.format == ActFormat::Q8_K {
            self.build_k_lines();
            return;
        }
        self.quad_bsums.reset(0);
        let scales = self.quad_scales.reset(groups * blocks * 4 * QUAD);
        scales.fill(0.0);
        for i in 0..self.rows {
            let (group, r) = (i / QUAD, i % QUAD);
            for b in 0..blocks {
                let src = &q[(i * blocks + b) * QB..(i * blocks + b + 1) * QB];
                let d = self.d[i * blocks + b];
                // Q4_0 weights are multiplied unsigned (0..15) and take
                // their −8 from `d × Σ q` too, so both formats carry it.
                let sum: i32 = src.iter().map(|&v| i32::from(v)).sum();
                let line = &mut scales[(group * blocks + b) * 4 * QUAD..][..4 * QUAD];
                line[2 * r] = d;
                line[2 * r + 1] = d;
                line[2 * QUAD + 2 * r] = d * sum as f32;
            }
        }
    }

    /// Q8_K's lines beside [`Self::quads`]: for each group and 256-value
    /// block, the rows' scales in [`Self::quad_scales`] (lanes `2r`,
    /// `2r + 1`; the rest of the 16 zero) and their sums of 16 in
    /// [`Self::quad_bsums`].
    fn build_k_lines(&mut self) {
        let blocks = self.cols / KB;
        let groups = self.rows.div_ceil(QUAD);
        let scales = self.quad_scales.reset(groups * blocks * 4 * QUAD);
        let bsums = self.quad_bsums.reset(groups * blocks * KB / KSUM * QUAD);
        scales.fill(0.0);
        bsums.fill(0);
        let per_block = KB / KSUM;
        for i in 0..self.rows {
            let (group, r) = (i / QUAD, i % QUAD);
            for b in 0..blocks {
                let d = self.d[i * blocks + b];
                let line = &mut scales[(group * blocks + b) * 4 * QUAD..][..4 * QUAD];
                line[2 * r] = d;
                line[2 * r + 1] = d;
                let src = &self.bsums[(i * blocks + b) * per_block..][..per_block];
                let at = (group * blocks + b) * per_block * QUAD;
                for (k, four) in src.chunks_exact(QUAD).enumerate() {
                    let to = at + (k * QUAD + r) * QUAD;
                    bsums[to..to + QUAD].copy_from_slice(four);
                }
            }
        }
    }

    /// Keeps `x` (`rows × cols` floats) as f32, unrounded. Every weight
    /// type takes these (see [`ActFormat::F32`]); the product then costs
    /// more arithmetic per weight but adds no activation error.
    pub fn keep_f32(&mut self, x: &[f32], rows: usize, cols: usize) -> Result<(), QMatError> {
        let expected = rows.checked_mul(cols).ok_or(QMatError::Overflow)?;
        if x.len() != expected {
            return Err(QMatError::InputLength {
                expected,
                found: x.len(),
            });
        }
        (self.format, self.rows, self.cols) = (ActFormat::F32, rows, cols);
        for v in [&mut self.d, &mut self.s] {
            v.clear();
        }
        self.q.reset(0);
        self.quads.reset(0);
        self.quad_scales.reset(0);
        self.quad_bsums.reset(0);
        self.bsums.clear();
        self.sums.clear();
        self.f.clear();
        self.f.extend_from_slice(x);
        // Only the AVX2 row kernels read these, and only below the rows
        // where a product switches to a dense panel of the natural order.
        let ordered = cfg!(target_arch = "x86_64")
            && cols.is_multiple_of(QB)
            && rows < super::kernel::PANEL_MIN_ROWS;
        let len = if ordered { x.len() } else { 0 };
        let nibbles = self.nibble_order.reset(len);
        for (xb, ob) in x.chunks_exact(QB).zip(nibbles.chunks_exact_mut(QB)) {
            for (o, &e) in ob.iter_mut().zip(&NIBBLE_ORDER) {
                *o = xb[e];
            }
        }
        let bytes = self.byte_order.reset(len);
        for (xb, ob) in x.chunks_exact(QB).zip(bytes.chunks_exact_mut(QB)) {
            for (o, &e) in ob.iter_mut().zip(&BYTE_ORDER) {
                *o = xb[e];
            }
        }
        Ok(())
    }

    /// The values row `i` stands for (`q × d`), as the products see them;
    /// `out` holds `cols` floats. For checking the activation rounding.
    pub fn dequantize_row(&self, i: usize, out: &mut [f32]) -> Result<(), QMatError> {
        if i >= self.rows {
            return Err(QMatError::RowRange {
                range: i..i + 1,
                rows: self.rows,
            });
        }
        if out.len() != self.cols {
            return Err(QMatError::OutputLength {
                expected: self.cols,
                found: out.len(),
            });
        }
        let at = i * self.cols;
        if self.format == ActFormat::F32 {
            out.copy_from_slice(&self.f[at..at + self.cols]);
            return Ok(());
        }
        let block = self.format.block_elems();
        for (b, (o, q)) in out
            .chunks_exact_mut(block)
            .zip(self.q.as_slice()[at..at + self.cols].chunks_exact(block))
            .enumerate()
        {
            let d = self.d[at / block + b];
            for (o, &q) in o.iter_mut().zip(q) {
                *o = f32::from(q) * d;
            }
        }
        Ok(())
    }

    /// Row `i`'s quantized values.
    pub(super) fn q_row(&self, i: usize) -> &[i8] {
        &self.q.as_slice()[i * self.cols..(i + 1) * self.cols]
    }

    /// Row `i`'s block scales.
    pub(super) fn d_row(&self, i: usize) -> &[f32] {
        let n = self.cols / self.format.block_elems();
        &self.d[i * n..(i + 1) * n]
    }

    /// The scale lines of rows `LANES × group ..` (Q8_0 and Q8_1): for
    /// each block, the rows' `d` then their `d × Σ q`, eight lanes each.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // AVX2 kernels only
    pub(super) fn lane_scales(&self, group: usize) -> &[f32] {
        let n = self.cols / QB * 2 * LANES;
        &self.lane_scales.as_slice()[group * n..(group + 1) * n]
    }

    /// Whether [`Self::quads`] was built (see [`QUAD_MIN_ROWS`]).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // AVX2 kernels only
    pub(super) fn has_quads(&self) -> bool {
        !self.quads.as_slice().is_empty()
    }

    /// Group `group`'s interleaved values ([`Self::quads`]), every block.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // AVX2 kernels only
    pub(super) fn quad_values(&self, group: usize) -> &[i8] {
        let n = self.cols / QB * QUAD * QB;
        &self.quads.as_slice()[group * n..(group + 1) * n]
    }

    /// Group `group`'s sums of 16 ([`Self::quad_bsums`], Q8_K).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // AVX2 kernels only
    pub(super) fn quad_bsums(&self, group: usize) -> &[i16] {
        let n = self.cols / KB * (KB / KSUM) * QUAD;
        &self.quad_bsums.as_slice()[group * n..(group + 1) * n]
    }

    /// Group `group`'s scale lines ([`Self::quad_scales`]), every block.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // AVX2 kernels only
    pub(super) fn quad_scales(&self, group: usize) -> &[f32] {
        let n = self.cols / self.format.block_elems() * 4 * QUAD;
        &self.quad_scales.as_slice()[group * n..(group + 1) * n]
    }

    /// Row `i`'s Q8_1 block sums.
    pub(super) fn s_row(&self, i: usize) -> &[f32] {
        let n = self.cols / QB;
        &self.s[i * n..(i + 1) * n]
    }

    /// Row `i`'s block sums `Σ q` (Q8_0, Q8_1).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // AVX2 kernels only
    pub(super) fn sum_row(&self, i: usize) -> &[i32] {
        let n = self.cols / QB;
        &self.sums[i * n..(i + 1) * n]
    }

    /// Row `i`'s Q8_K sums of 16.
    pub(super) fn bsums_row(&self, i: usize) -> &[i16] {
        let n = self.cols / KSUM;
        &self.bsums[i * n..(i + 1) * n]
    }

    /// Row `i`'s floats (F32 format).
    pub(super) fn f_row(&self, i: usize) -> &[f32] {
        &self.f[i * self.cols..(i + 1) * self.cols]
    }

    /// Row `i`'s floats (F32 format, whole 32-value blocks) in
    /// [`NIBBLE_ORDER`], or [`BYTE_ORDER`] when `bytes`.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // AVX2 kernels only
    pub(super) fn ordered_row(&self, i: usize, bytes: bool) -> &[f32] {
        let v = if bytes {
            self.byte_order.as_slice()
        } else {
            self.nibble_order.as_slice()
        };
        &v[i * self.cols..(i + 1) * self.cols]
    }
}

#[cfg(test)]
mod tests {
    use super::round_i8;

    /// The AVX2 block rounding gives the scalar blocks bit for bit: random
    /// blocks of several magnitudes, blocks whose scale is exactly 1 so
    /// that halves are ties, zeros, NaN and infinities.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_rounding_matches_scalar_rounding() {
        use super::{round_block, KB, KSUM, QB};
        if crate::Isa::detect().base() != crate::Isa::Avx2 {
            return;
        }
        let mut rng = fastrand::Rng::with_seed(31);
        let mut x = Vec::new();
        for b in 0..2000 {
            let mut block: Vec<f32> = match b % 5 {
                0 => (0..QB).map(|_| rng.f32() * 2.0 - 1.0).collect(),
                1 => (0..QB).map(|_| (rng.f32() - 0.5) * 1e4).collect(),
                // Scale 1: every k + 0.5 is a tie.
                2 => (0..QB)
                    .map(|_| (rng.i32(-127..127) as f32 + 0.5).clamp(-127.0, 127.0))
                    .collect(),
                3 => vec![0.0; QB],
                _ => (0..QB).map(|_| (rng.f32() - 0.5) * 1e-30).collect(),
            };
            if b % 5 == 2 {
                block[rng.usize(..QB)] = 127.0;
            }
            if b % 7 == 0 {
                let special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0];
                block[rng.usize(..QB)] = special[rng.usize(..special.len())];
            }
            x.extend(block);
        }
        // Q8_0's and Q8_1's blocks of 32, Q8_K's of 256 (sums of 16).
        for block in [QB, KB] {
            let mut want_q = vec![0i8; x.len()];
            let want: Vec<(u32, Vec<i32>)> = x
                .chunks_exact(block)
                .zip(want_q.chunks_exact_mut(block))
                .map(|(xb, qb)| {
                    let d = round_block(xb, qb);
                    let mut sums = vec![0; block / KSUM];
                    super::sums_of_16(qb, &mut sums);
                    (d.to_bits(), sums)
                })
                .collect();
            let mut got_q = vec![0i8; x.len()];
            let mut got = Vec::new();
            // SAFETY: AVX2 (with FMA and F16C) was detected above.
            unsafe {
                super::super::x86::round::round_blocks(&x, &mut got_q, block, |d, s| {
                    got.push((d.to_bits(), s.to_vec()))
                });
            }
            assert_eq!(got, want, "blocks of {block}");
            assert_eq!(got_q, want_q, "blocks of {block}");
        }
    }

    #[test]
    fn round_i8_is_rounding_to_nearest_with_halves_away_from_zero() {
        let mut rng_state = 0x2545_f491_4f6c_dd1du64;
        let mut values = vec![
            0.0f32,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            -2.5,
            0.499_999_97,
            -0.499_999_97,
            126.5,
            -126.5,
            127.0,
            127.4,
            200.0,
            -1e9,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        for _ in 0..100_000 {
            // xorshift: uniform bits as a float in [-160, 160).
            rng_state ^= rng_state << 13;
            rng_state ^= rng_state >> 7;
            rng_state ^= rng_state << 17;
            values.push((rng_state >> 40) as f32 / (1u64 << 24) as f32 * 320.0 - 160.0);
        }
        for v in values {
            let expected = v.round().clamp(-127.0, 127.0) as i8;
            assert_eq!(round_i8(v), expected, "{v}");
        }
        assert_eq!(round_i8(f32::NAN), 0);
    }
}
