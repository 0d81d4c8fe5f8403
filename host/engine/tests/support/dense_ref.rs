//! The seeded Llama model's forward pass in plain f64 loops: the
//! definition the engine's paged, chunked and batched forward must match
//! (engine.rs).

use pagoda_engine::model::Model;

/// Logits of every position of `tokens`, by a dense f64 forward pass with
/// plain loops: the definition the engine must match.
pub fn logits(model: &Model, tokens: &[u32]) -> Vec<Vec<f64>> {
    let c = model.config();
    // The seeded model's matrices in the order it reads them: the
    // embedding, each layer's q, k, v, output, gate, up and down, the head
    // (`out` rows of `in`); its norm gains are all one.
    let matrices: Vec<(usize, Vec<f32>)> = model
        .matrices()
        .map(|m| (m.cols(), m.to_f32().unwrap()))
        .collect();
    assert_eq!(matrices.len(), 2 + 7 * c.layers as usize);
    let (n, hd, d) = (tokens.len(), c.hidden as usize, c.head_dim as usize);
    let group = (c.q_heads / c.kv_heads) as usize;
    let matmul = |x: &[Vec<f64>], m: &(usize, Vec<f32>)| -> Vec<Vec<f64>> {
        let (inp, w) = m;
        x.iter()
            .map(|row| {
                w.chunks_exact(*inp)
                    .map(|wrow| row.iter().zip(wrow).map(|(v, w)| v * f64::from(*w)).sum())
                    .collect()
            })
            .collect()
    };
    let norm = |x: &[Vec<f64>]| -> Vec<Vec<f64>> {
        x.iter()
            .map(|row| {
                let ms = row.iter().map(|v| v * v).sum::<f64>() / row.len() as f64;
                let inv = 1.0 / (ms + f64::from(c.rms_eps)).sqrt();
                row.iter().map(|v| v * inv).collect()
            })
            .collect()
    };
    let rope = |x: &mut [Vec<f64>], heads: usize| {
        for (pos, row) in x.iter_mut().enumerate() {
            for h in 0..heads {
                for i in 0..d / 2 {
                    let freq = f64::from(c.rope_theta).powf(-2.0 * i as f64 / d as f64);
                    let (sin, cos) = (pos as f64 * freq).sin_cos();
                    let (a, b) = (row[h * d + i], row[h * d + i + d / 2]);
                    row[h * d + i] = a * cos - b * sin;
                    row[h * d + i + d / 2] = b * cos + a * sin;
                }
            }
        }
    };
    let embed = &matrices[0].1;
    let mut x: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&t| {
            embed[t as usize * hd..][..hd]
                .iter()
                .map(|&v| f64::from(v))
                .collect()
        })
        .collect();
    for layer in matrices[1..matrices.len() - 1].chunks_exact(7) {
        let h = norm(&x);
        let mut q = matmul(&h, &layer[0]);
        let mut k = matmul(&h, &layer[1]);
        let v = matmul(&h, &layer[2]);
        rope(&mut q, c.q_heads as usize);
        rope(&mut k, c.kv_heads as usize);
        let scale = 1.0 / (d as f64).sqrt();
        let mut attn = vec![vec![0.0; c.q_dim()]; n];
        for i in 0..n {
            for qh in 0..c.q_heads as usize {
                let kh = qh / group;
                let scores: Vec<f64> = (0..=i)
                    .map(|j| {
                        (0..d)
                            .map(|e| q[i][qh * d + e] * k[j][kh * d + e])
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = weights.iter().sum();
                for (j, wj) in weights.iter().enumerate() {
                    for e in 0..d {
                        attn[i][qh * d + e] += wj / total * v[j][kh * d + e];
                    }
                }
            }
        }
        let o = matmul(&attn, &layer[3]);
        for (xr, or) in x.iter_mut().zip(&o) {
            for (a, b) in xr.iter_mut().zip(or) {
                *a += b;
            }
        }
        let h = norm(&x);
        let gate = matmul(&h, &layer[4]);
        let up = matmul(&h, &layer[5]);
        let act: Vec<Vec<f64>> = gate
            .iter()
            .zip(&up)
            .map(|(g, u)| {
                g.iter()
                    .zip(u)
                    .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                    .collect()
            })
            .collect();
        let down = matmul(&act, &layer[6]);
        for (xr, dr) in x.iter_mut().zip(&down) {
            for (a, b) in xr.iter_mut().zip(dr) {
                *a += b;
            }
        }
    }
    matmul(&norm(&x), &matrices[matrices.len() - 1])
}

/// The index of the largest value (the first of equal ones).
pub fn argmax(row: &[f64]) -> u32 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best as u32
}
