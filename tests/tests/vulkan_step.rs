//! Vulkan step programs (model ops, the KV scatter and paged attention in one
//! submission) against a float64 reference computed here from
//! `dequantize_row`: an attention block (norm → q, k, v products → rotary →
//! scatter → attention → output product) over a batch whose sequences have
//! a cached prefix, written by an earlier program: one decode row and one
//! prefill chunk. For each store dtype; under the validation layer with the
//! bounds-checking kernels. With `CI=true` a missing device fails the run.

use half::f16;
use pagoda_conformance::{stored, Rng};
use pagoda_core::backend::{AttentionShape, Backend, SeqAttention};
use pagoda_core::{dequantize_row, KvDtype, KvGeometry, PageId, QuantKind, Slot};
use pagoda_vulkan::{
    Op, StepOp, StepProgram, VulkanBackend, VulkanError, VulkanKvStore, VulkanOptions,
    VulkanWeights,
};

fn open() -> Option<VulkanBackend> {
    // f32 activations in every product, so the tolerances below hold on
    // any device (the 8-bit integer-dot product has its tests in
    // vulkan_ops.rs and the engine's vulkan_step.rs).
    let options = VulkanOptions {
        validation: Some(true),
        bounds_checks: Some(true),
        integer_dot: Some(false),
        ..VulkanOptions::from_env()
    };
    match VulkanBackend::new(&options) {
        Ok(b) => Some(b),
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true needs a Vulkan device with validation layers: {e}")
        }
        Err(e) => {
            eprintln!("skipping Vulkan step tests: {e}");
            None
        }
    }
}

const HIDDEN: usize = 128;
const Q_HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 64;
const Q_ROW: usize = Q_HEADS * HEAD_DIM;
const KV_ROW: usize = KV_HEADS * HEAD_DIM;
const HALF: usize = HEAD_DIM / 2;
const TABLE_ROWS: usize = 64;
const THETA: f64 = 10_000.0;
const EPS: f32 = 1e-5;

/// Random Q8_0 rows: random quantized values, each block's f16 scale near
/// trained models' magnitudes.
fn q8_0(rng: &mut Rng, rows: usize, cols: usize) -> Vec<u8> {
    let kind = QuantKind::Q8_0;
    let bytes = kind.bytes_for(cols).unwrap() * rows;
    let mut out: Vec<u8> = (0..bytes).map(|_| rng.next_u64() as u8).collect();
    for block in out.chunks_exact_mut(kind.block_bytes()) {
        let d = 5e-3 + 5e-3 * (rng.below(1000) as f32 / 1000.0);
        block[..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
    }
    out
}

fn dequantized(bytes: &[u8], rows: usize, cols: usize) -> Vec<f64> {
    let row_bytes = QuantKind::Q8_0.bytes_for(cols).unwrap();
    let mut row = vec![0f32; cols];
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        dequantize_row(
            QuantKind::Q8_0,
            &bytes[r * row_bytes..][..row_bytes],
            &mut row,
        )
        .unwrap();
        out.extend(row.iter().map(|&v| f64::from(v)));
    }
    out
}

/// The model: weights as the device holds them and as the reference reads
/// them.
struct Block {
    /// wq, wk, wv, wo, gains, cos, sin.
    at: [u64; 7],
    bytes: Vec<u8>,
    wq: Vec<f64>,
    wk: Vec<f64>,
    wv: Vec<f64>,
    wo: Vec<f64>,
    gains: Vec<f64>,
}

impl Block {
    fn new(rng: &mut Rng) -> Self {
        let mut bytes = Vec::new();
        let mut at = [0u64; 7];
        let mut push = |i: usize, data: &[u8]| {
            bytes.resize(bytes.len().next_multiple_of(16), 0);
            at[i] = bytes.len() as u64;
            bytes.extend_from_slice(data);
        };
        let shapes = [
            (Q_ROW, HIDDEN),
            (KV_ROW, HIDDEN),
            (KV_ROW, HIDDEN),
            (HIDDEN, Q_ROW),
        ];
        let mut mats = Vec::new();
        for (i, &(rows, cols)) in shapes.iter().enumerate() {
            let m = q8_0(rng, rows, cols);
            push(i, &m);
            mats.push(dequantized(&m, rows, cols));
        }
        let gains: Vec<f32> = (0..HIDDEN).map(|_| 1.0 + 0.2 * rng.value()).collect();
        push(4, &f32_bytes(&gains));
        let angle =
            |pos: usize, i: usize| pos as f64 * THETA.powf(-2.0 * i as f64 / HEAD_DIM as f64);
        let table = |f: fn(f64) -> f64| -> Vec<f32> {
            (0..TABLE_ROWS * HALF)
                .map(|j| f(angle(j / HALF, j % HALF)) as f32)
                .collect()
        };
        push(5, &f32_bytes(&table(f64::cos)));
        push(6, &f32_bytes(&table(f64::sin)));
        let wo = mats.pop().unwrap();
        let wv = mats.pop().unwrap();
        let wk = mats.pop().unwrap();
        let wq = mats.pop().unwrap();
        Self {
            at,
            bytes,
            wq,
            wk,
            wv,
            wo,
            gains: gains.iter().map(|&g| f64::from(g)).collect(),
        }
    }

    /// `rows × out` = each row times `w` (`out` rows of `cols`).
    fn product(w: &[f64], x: &[f64], cols: usize) -> Vec<f64> {
        let out = w.len() / cols;
        x.chunks_exact(cols)
            .flat_map(|xr| {
                (0..out).map(move |r| (0..cols).map(|c| w[r * cols + c] * xr[c]).sum::<f64>())
            })
            .collect()
    }

    /// Interleaved-pair rotary embedding, angles in f64.
    fn rope(rows: &mut [f64], width: usize, positions: &[u32]) {
        for (row, &pos) in rows.chunks_exact_mut(width).zip(positions) {
            for head in row.chunks_exact_mut(HEAD_DIM) {
                for i in 0..HALF {
                    let a = f64::from(pos) * THETA.powf(-2.0 * i as f64 / HEAD_DIM as f64);
                    let (x1, x2) = (head[2 * i], head[2 * i + 1]);
                    head[2 * i] = x1 * a.cos() - x2 * a.sin();
                    head[2 * i + 1] = x2 * a.cos() + x1 * a.sin();
                }
            }
        }
    }

    /// Normed rows → (q, k, v) after the rotary embedding.
    fn qkv(&self, x: &[f32], positions: &[u32]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let mut h = Vec::with_capacity(x.len());
        for row in x.chunks_exact(HIDDEN) {
            let ms = row.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / HIDDEN as f64;
            let inv = 1.0 / (ms + f64::from(EPS)).sqrt();
            h.extend(
                row.iter()
                    .zip(&self.gains)
                    .map(|(&v, g)| f64::from(v) * inv * g),
            );
        }
        let mut q = Self::product(&self.wq, &h, HIDDEN);
        let mut k = Self::product(&self.wk, &h, HIDDEN);
        let v = Self::product(&self.wv, &h, HIDDEN);
        Self::rope(&mut q, Q_ROW, positions);
        Self::rope(&mut k, KV_ROW, positions);
        (q, k, v)
    }
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The activations of the program: x | h | q | [k|v] | attention | y.
struct Layout {
    t: u32,
}

impl Layout {
    fn h(&self) -> u32 {
        self.t * HIDDEN as u32
    }
    fn q(&self) -> u32 {
        2 * self.t * HIDDEN as u32
    }
    fn kv(&self) -> u32 {
        self.q() + self.t * Q_ROW as u32
    }
    fn attn(&self) -> u32 {
        self.kv() + self.t * 2 * KV_ROW as u32
    }
    fn y(&self) -> u32 {
        self.attn() + self.t * Q_ROW as u32
    }
    fn len(&self) -> u32 {
        self.y() + self.t * HIDDEN as u32
    }

    fn ops(&self, b: &Block, layer: u32) -> Vec<StepOp> {
        let t = self.t;
        let (hid, q_row, kv_row) = (HIDDEN as u32, Q_ROW as u32, KV_ROW as u32);
        let matmul = |weights, rows, cols, x, y, y_stride| {
            StepOp::Op(Op::Matmul {
                kind: QuantKind::Q8_0,
                weights,
                rows,
                cols,
                batch: t,
                x,
                x_stride: cols,
                y,
                y_stride,
                accumulate: false,
            })
        };
        let rope = |heads, x, x_stride| {
            StepOp::Op(Op::Rope {
                cos: b.at[5],
                sin: b.at[6],
                table_rows: TABLE_ROWS as u32,
                half: HALF as u32,
                interleaved: true,
                heads,
                head_dim: HEAD_DIM as u32,
                batch: t,
                x,
                x_stride,
                positions: 0,
            })
        };
        vec![
            StepOp::Op(Op::RmsNorm {
                gains: b.at[4],
                cols: hid,
                batch: t,
                x: 0,
                x_stride: hid,
                y: self.h(),
                y_stride: hid,
                eps: EPS,
                centered: false,
            }),
            matmul(b.at[0], q_row, hid, self.h(), self.q(), q_row),
            matmul(b.at[1], kv_row, hid, self.h(), self.kv(), 2 * kv_row),
            matmul(
                b.at[2],
                kv_row,
                hid,
                self.h(),
                self.kv() + kv_row,
                2 * kv_row,
            ),
            rope(Q_HEADS as u32, self.q(), q_row),
            rope(KV_HEADS as u32, self.kv(), 2 * kv_row),
            StepOp::Scatter {
                layer,
                kv: self.kv(),
            },
            StepOp::Attention {
                layer,
                q: self.q(),
                out: self.attn(),
                scale: 1.0 / (HEAD_DIM as f32).sqrt(),
                window: 0,
                softcap: 0.0,
            },
            matmul(b.at[3], hid, q_row, self.attn(), self.y(), hid),
        ]
    }
}

/// One sequence of the test: its pages and what the reference keeps of it.
struct Seq {
    pages: Vec<PageId>,
    keys: Vec<f64>,
    values: Vec<f64>,
}

/// Runs the block for new rows `x` of `seqs` (`(seq, count)` in order) and
/// checks the output against the reference, which also records the new
/// keys and values as the store keeps them. Returns the normalised error.
#[allow(clippy::too_many_arguments)]
fn run_and_check(
    backend: &mut VulkanBackend,
    weights: &VulkanWeights,
    store: &mut VulkanKvStore,
    block: &Block,
    dtype: KvDtype,
    seqs: &mut [Seq],
    new: &[(usize, usize)],
    x: &[f32],
) -> f64 {
    let t: usize = new.iter().map(|&(_, n)| n).sum();
    let layout = Layout { t: t as u32 };
    let (mut positions, mut slots) = (Vec::new(), Vec::new());
    for &(s, n) in new {
        let cached = seqs[s].keys.len() / KV_ROW;
        for p in cached..cached + n {
            positions.push(p as u32);
            slots.push(seqs[s].pages[p / 16].slot((p % 16) as u32));
        }
    }
    // Reference keys and values, rounded as the store keeps them.
    let (q, k, v) = block.qkv(x, &positions);
    let keep = |x: f64| f64::from(stored(dtype, x as f32));
    let mut row = 0;
    for &(s, n) in new {
        seqs[s]
            .keys
            .extend(k[row * KV_ROW..(row + n) * KV_ROW].iter().map(|&x| keep(x)));
        seqs[s]
            .values
            .extend(v[row * KV_ROW..(row + n) * KV_ROW].iter().map(|&x| keep(x)));
        row += n;
    }
    let mut batch = Vec::new();
    let mut start = 0u32;
    for &(s, n) in new {
        batch.push(SeqAttention {
            pages: &seqs[s].pages,
            context_len: (seqs[s].keys.len() / KV_ROW) as u32,
            query_start: start,
            query_len: n as u32,
        });
        start += n as u32;
    }
    let shape = AttentionShape {
        q_heads: Q_HEADS as u32,
        kv_heads: KV_HEADS as u32,
        head_dim: HEAD_DIM as u32,
        scale: 1.0 / (HEAD_DIM as f32).sqrt(),
        window: 0,
        softcap: 0.0,
    };
    let ops = layout.ops(block, 1);
    let program = StepProgram {
        ops: &ops,
        act_len: layout.len(),
        init: x,
        meta: &positions,
        slots: &slots,
        shape,
        batch: &batch,
        read: layout.y()..layout.len(),
        read_meta: 0..0,
    };
    let (mut got, mut meta) = (Vec::new(), Vec::new());
    backend
        .run_step_on(weights, store, &program, &mut got, &mut meta)
        .unwrap();
    assert_eq!(got.len(), t * HIDDEN);

    // Reference attention, causal over each sequence's cache, then wo.
    let group = Q_HEADS / KV_HEADS;
    let mut attn = vec![0f64; t * Q_ROW];
    let mut row = 0;
    for &(s, n) in new {
        let seq = &seqs[s];
        let context = seq.keys.len() / KV_ROW;
        for i in 0..n {
            let pos = context - n + i;
            for h in 0..Q_HEADS {
                let kh = h / group;
                let qv = &q[(row + i) * Q_ROW + h * HEAD_DIM..][..HEAD_DIM];
                let scores: Vec<f64> = (0..=pos)
                    .map(|j| {
                        let kj = &seq.keys[j * KV_ROW + kh * HEAD_DIM..][..HEAD_DIM];
                        qv.iter().zip(kj).map(|(a, b)| a * b).sum::<f64>()
                            / (HEAD_DIM as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                let out = &mut attn[(row + i) * Q_ROW + h * HEAD_DIM..][..HEAD_DIM];
                for (j, w) in e.iter().enumerate() {
                    let vj = &seq.values[j * KV_ROW + kh * HEAD_DIM..][..HEAD_DIM];
                    for (o, v) in out.iter_mut().zip(vj) {
                        *o += w / sum * v;
                    }
                }
            }
        }
        row += n;
    }
    let want = Block::product(&block.wo, &attn, Q_ROW);
    let range = want.iter().fold(0f64, |m, v| m.max(v.abs()));
    let worst = got
        .iter()
        .zip(&want)
        .fold(0f64, |m, (g, w)| m.max((f64::from(*g) - w).abs()));
    worst / range
}

fn setup(backend: &mut VulkanBackend, dtype: KvDtype) -> (Block, VulkanWeights, VulkanKvStore) {
    let mut rng = Rng::new(0x57E9_0001);
    let block = Block::new(&mut rng);
    let weights = backend.upload_weights(&block.bytes).unwrap();
    let geometry = KvGeometry::new(2, KV_HEADS as u32, HEAD_DIM as u32, dtype).unwrap();
    let store = backend.create_kv_store(geometry, 8).unwrap();
    (block, weights, store)
}

#[test]
fn an_attention_block_with_a_cached_prefix_matches_a_float64_reference() {
    let Some(mut backend) = open() else {
        return;
    };
    let mut rng = Rng::new(0x57E9_0002);
    for dtype in [KvDtype::F32, KvDtype::F16, KvDtype::Bf16] {
        let (block, weights, mut store) = setup(&mut backend, dtype);
        let page = |i| PageId::from_index(i);
        let mut seqs = vec![
            Seq {
                pages: vec![page(5), page(1)],
                keys: Vec::new(),
                values: Vec::new(),
            },
            Seq {
                pages: vec![page(3)],
                keys: Vec::new(),
                values: Vec::new(),
            },
        ];
        let mut rows = |n: usize| -> Vec<f32> { (0..n * HIDDEN).map(|_| rng.value()).collect() };
        // The prefixes, prefilled by one program: 20 tokens and 5.
        let x = rows(25);
        let first = run_and_check(
            &mut backend,
            &weights,
            &mut store,
            &block,
            dtype,
            &mut seqs,
            &[(0, 20), (1, 5)],
            &x,
        );
        // Then a decode row for the first and a chunk of 7 for the second,
        // over the prefixes the first program left in the store.
        let x = rows(8);
        let second = run_and_check(
            &mut backend,
            &weights,
            &mut store,
            &block,
            dtype,
            &mut seqs,
            &[(0, 1), (1, 7)],
            &x,
        );
        // Worst error over the largest output. Keys and values are rounded
        // to the store's dtype on both sides, so what is left is f32
        // summation (measured ≤ 1.3e-5 on lavapipe), except that an f16
        // store's decode row runs the f16-arithmetic decode kernel where
        // the device has shaderFloat16 (measured 1.2e-3).
        //
        // Where the device has cooperative matrices, the 25-row program's
        // products take them with f16 operands, and the second program
        // attends to keys and values made that way (measured on Mesa
        // 26.1's lavapipe: 1.6e-3 to 7.1e-3 for the prefill, up to 1.5e-2
        // for a BF16 store's second program).
        let tolerance = match dtype {
            _ if backend.info().use_coopmat => 3e-2,
            KvDtype::F16 => 3e-3,
            _ => 5e-5,
        };
        eprintln!("{dtype:?}: prefill {first:.2e}, decode and chunk {second:.2e}");
        assert!(first <= tolerance, "{dtype:?} prefill: {first:.3e}");
        assert!(
            second <= tolerance,
            "{dtype:?} decode and chunk: {second:.3e}"
        );
    }
    let messages = backend.validation_messages();
    assert!(messages.is_empty(), "validation layer: {messages:#?}");
}

#[test]
fn a_program_that_does_not_fit_is_refused_before_it_runs() {
    let Some(mut backend) = open() else {
        return;
    };
    let (block, weights, mut store) = setup(&mut backend, KvDtype::F16);
    let layout = Layout { t: 1 };
    let pages = [PageId::from_index(0)];
    let batch = [SeqAttention {
        pages: &pages,
        context_len: 1,
        query_start: 0,
        query_len: 1,
    }];
    let shape = AttentionShape {
        q_heads: Q_HEADS as u32,
        kv_heads: KV_HEADS as u32,
        head_dim: HEAD_DIM as u32,
        scale: 0.125,
        window: 0,
        softcap: 0.0,
    };
    let x = vec![0.5f32; HIDDEN];
    let good_ops = layout.ops(&block, 0);
    let slots = [Slot(0)];
    let program = StepProgram {
        ops: &good_ops,
        act_len: layout.len(),
        init: &x,
        meta: &[0],
        slots: &slots,
        shape,
        batch: &batch,
        read: 0..4,
        read_meta: 0..0,
    };
    let (mut act, mut meta) = (Vec::new(), Vec::new());
    let mut run =
        |p: &StepProgram<'_>| backend.run_step_on(&weights, &mut store, p, &mut act, &mut meta);
    run(&program).unwrap();
    // A slot past the store, a layer past it, activations too short, a
    // position past the rotary table: each refused with a typed error.
    let far = [Slot(8 * 16)];
    let err = run(&StepProgram {
        slots: &far,
        ..program.clone()
    })
    .unwrap_err();
    assert!(matches!(err, VulkanError::Input(_)), "{err}");
    let late = layout.ops(&block, 2);
    let err = run(&StepProgram {
        ops: &late,
        ..program.clone()
    })
    .unwrap_err();
    assert!(matches!(err, VulkanError::Input(_)), "{err}");
    let err = run(&StepProgram {
        act_len: layout.y(),
        read: 0..1,
        ..program.clone()
    })
    .unwrap_err();
    assert!(matches!(err, VulkanError::Shape(_)), "{err}");
    let err = run(&StepProgram {
        meta: &[TABLE_ROWS as u32],
        ..program.clone()
    })
    .unwrap_err();
    assert!(matches!(err, VulkanError::Shape(_)), "{err}");
    let messages = backend.validation_messages();
    assert!(messages.is_empty(), "validation layer: {messages:#?}");
}
