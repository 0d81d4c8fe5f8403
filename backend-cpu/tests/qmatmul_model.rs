//! The products over the real SmolLM2 tensors, used in place from the GGUF
//! bytes: every 2-D tensor of layer 0 and the embedding (the tied output
//! head), the first rows of each, split across a thread team, against f64
//! products of `pagoda_core::dequantize_row` weights with the dequantized
//! quantized activations. Tolerance as in `qmatmul_reference.rs`:
//! `1e-5 × Σ|w·x| + 1e-6`. Skips with one line when the model is missing
//! (fails under `CI=true`).

mod qmatmul_support;

use pagoda_core::Gguf;
use pagoda_cpu::{matmul_team, Isa, QuantMatrix, QuantizedActivations, Team};
use qmatmul_support::*;

#[path = "../../tests/support/env.rs"]
mod env;

use env::require_model;

#[test]
fn real_model_tensors_match_the_reference() {
    let Some(path) = require_model("real_model_tensors_match_the_reference") else {
        return;
    };
    let bytes = std::fs::read(path).unwrap();
    let gguf = Gguf::parse(&bytes).unwrap();
    let mut team = Team::new(3).unwrap();
    let mut rng = fastrand::Rng::with_seed(135);
    let mut checked = 0;
    for t in gguf.tensors() {
        let name = t.name();
        if t.dims().len() != 2 || !(name.starts_with("blk.0.") || name == "token_embd.weight") {
            continue;
        }
        let (kind, cols) = (t.kind(), t.row_elems() as usize);
        let rows = (t.rows() as usize).min(96);
        let data = &t.data()[..rows * kind.bytes_for(cols).unwrap()];
        let w = QuantMatrix::new(kind, rows, cols, data).unwrap();
        let n = 3;
        let x = random_activations(&mut rng, n, cols);
        let mut acts = QuantizedActivations::new();
        acts.quantize(kind, &x, n, cols).unwrap();
        let mut out = vec![0.0f32; n * rows];
        matmul_team(&mut team, Isa::detect(), &w, &acts, &mut out).unwrap();
        let mut worst = 0.0f64;
        for i in 0..n {
            let mut xq = vec![0.0f32; cols];
            acts.dequantize_row(i, &mut xq).unwrap();
            for r in 0..rows {
                let (exact, mag) = dot64(&weight_row(kind, data, cols, r), &xq);
                let got = f64::from(out[i * rows + r]);
                let tol = 1e-5 * mag + 1e-6;
                assert!(
                    (got - exact).abs() <= tol,
                    "{name} ({kind}) row {r}: {got} vs {exact}"
                );
                worst = worst.max((got - exact).abs() / mag.max(1e-30));
            }
        }
        println!("{name} {kind} {rows}x{cols}: worst |err| / Σ|w·x| = {worst:.2e}");
        checked += 1;
    }
    assert!(checked >= 7, "only {checked} tensors checked");
}
