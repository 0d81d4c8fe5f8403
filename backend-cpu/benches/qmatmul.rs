//! Quantized matrix products at SmolLM2-135M's shapes and a Llama-3.2-1B
//! square: decode (1 to 16 activation rows) and prefill (128), with 8-bit
//! and with f32 activations, in the plain layout and (the types
//! [`interleaves`] takes) rows interleaved eight at a time (`/rows8`), single-threaded, reported as
//! weight bytes streamed per second. All of them take several minutes; a
//! filter picks some, e.g.
//! `cargo bench -p pagoda-cpu --bench qmatmul -- 'Q4_1/1536x576/(int8|f32)/(1|16)$'`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pagoda_core::QuantKind;
use pagoda_cpu::quant::interleave::{interleave, interleaved_len, interleaves};
use pagoda_cpu::{matmul, Isa, QuantMatrix, QuantizedActivations};

/// Weight bytes with sane f16 scales: every byte random, then each block's
/// scale fields set to a small positive half float.
fn weights(kind: QuantKind, rows: usize, cols: usize) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(7);
    let bytes = kind.bytes_for(cols).expect("whole blocks") * rows;
    let mut data: Vec<u8> = (0..bytes).map(|_| rng.u8(..)).collect();
    let scale_at: &[usize] = match kind {
        QuantKind::Q8_0 | QuantKind::IQ4_NL | QuantKind::IQ4_XS => &[0],
        QuantKind::Q6_K => &[208],
        QuantKind::Q3_K => &[108],
        QuantKind::Q2_K => &[80, 82],
        _ => &[0, 2], // Q4_1: d and m; Q4_K: d and dmin
    };
    for block in data.chunks_exact_mut(kind.block_bytes()) {
        for &at in scale_at {
            // 0x2000 ≈ 0.0078: a small positive f16.
            block[at..at + 2].copy_from_slice(&0x2000u16.to_le_bytes());
        }
    }
    data
}

fn bench(c: &mut Criterion) {
    let isa = Isa::detect();
    // SmolLM2-135M's Q4_1 layer shapes and its Q8_0 head; a K-quant needs
    // rows of whole 256-blocks, so Q2_K to Q6_K and IQ4_XS take a
    // 1536-square matrix.
    let cases: [(QuantKind, &[(usize, usize)]); 12] = [
        (QuantKind::Q4_1, &[(1536, 576), (576, 1536)]),
        (QuantKind::Q8_0, &[(49152, 576), (2048, 2048)]),
        (QuantKind::Q4_0, &[(2048, 2048)]),
        (QuantKind::Q5_0, &[(2048, 2048)]),
        (QuantKind::Q5_1, &[(2048, 2048)]),
        (QuantKind::Q4_K, &[(1536, 1536)]),
        (QuantKind::Q5_K, &[(1536, 1536)]),
        (QuantKind::Q6_K, &[(1536, 1536)]),
        (QuantKind::Q2_K, &[(1536, 1536)]),
        (QuantKind::Q3_K, &[(1536, 1536)]),
        (QuantKind::IQ4_NL, &[(2048, 2048)]),
        (QuantKind::IQ4_XS, &[(1536, 1536)]),
    ];
    for (kind, shapes) in cases {
        let mut group = c.benchmark_group(format!("qmatmul/{kind}"));
        for &(rows, cols) in shapes {
            let data = weights(kind, rows, cols);
            let plain = QuantMatrix::new(kind, rows, cols, &data).expect("valid shape");
            let mut packed = Vec::new();
            if interleaves(kind) {
                packed.resize(interleaved_len(kind, rows, cols).expect("shape"), 0);
                interleave(kind, rows, cols, &data, &mut packed).expect("shape");
            }
            let mut layouts = vec![("", plain)];
            if !packed.is_empty() {
                let w = QuantMatrix::interleaved(kind, rows, cols, &packed).expect("shape");
                layouts.push(("/rows8", w));
            }
            for (n, (layout, w)) in [1usize, 2, 4, 8, 16, 128]
                .into_iter()
                .flat_map(|n| layouts.iter().map(move |l| (n, l)))
            {
                let x: Vec<f32> = (0..n * cols)
                    .map(|i| ((i % 97) as f32 - 48.0) / 32.0)
                    .collect();
                // 8-bit activations (integer products), then f32 ones
                // (blocks widened to f32).
                for f32_acts in [false, true] {
                    let mut acts = QuantizedActivations::new();
                    if f32_acts {
                        acts.keep_f32(&x, n, cols).expect("valid activations");
                    } else {
                        acts.quantize(kind, &x, n, cols).expect("valid activations");
                    }
                    let mut out = vec![0.0f32; n * rows];
                    group.throughput(Throughput::Bytes(data.len() as u64));
                    let acts_name = if f32_acts { "f32" } else { "int8" };
                    let name = format!("{rows}x{cols}{layout}/{acts_name}");
                    group.bench_function(BenchmarkId::new(name, n), |b| {
                        b.iter(|| matmul(isa, w, &acts, &mut out, 0..rows).expect("valid"))
                    });
                }
            }
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
