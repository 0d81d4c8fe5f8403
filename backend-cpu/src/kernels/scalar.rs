//! Portable kernels: the reference for the SIMD ones.

use crate::element::KvElement;

pub fn page_scores<E: KvElement>(
    q: &[f32],
    rows: usize,
    k: &[E],
    keys: usize,
    dim: usize,
    scores: &mut [f32],
) {
    for r in 0..rows {
        let qr = &q[r * dim..(r + 1) * dim];
        for i in 0..keys {
            let ki = &k[i * dim..(i + 1) * dim];
            scores[r * 16 + i] = qr.iter().zip(ki).map(|(a, b)| a * b.to_f32()).sum();
        }
    }
}

pub fn page_accumulate<E: KvElement>(
    acc: &mut [f32],
    rows: usize,
    p: &[f32],
    v: &[E],
    keys: usize,
    dim: usize,
) {
    for r in 0..rows {
        let ar = &mut acc[r * dim..(r + 1) * dim];
        for i in 0..keys {
            let w = p[r * 16 + i];
            for (a, b) in ar.iter_mut().zip(&v[i * dim..(i + 1) * dim]) {
                *a += w * b.to_f32();
            }
        }
    }
}
