//! Malformed shapes give a typed error and write nothing; nothing panics.

use pagoda_core::QuantKind;
use pagoda_cpu::{matmul, ActFormat, Isa, QMatError, QuantMatrix, QuantizedActivations};

#[test]
fn weight_data_of_the_wrong_length_is_refused() {
    let row = QuantKind::Q4_1.block_bytes() * 2; // 64 columns
    for len in [0, row * 3 - 1, row * 3 + 1, row * 4] {
        let data = vec![0u8; len];
        assert_eq!(
            QuantMatrix::new(QuantKind::Q4_1, 3, 64, &data).unwrap_err(),
            QMatError::DataLength {
                expected: row * 3,
                found: len
            }
        );
    }
}

#[test]
fn rows_that_are_not_whole_blocks_are_refused() {
    let data = vec![0u8; 1000];
    for (kind, cols) in [
        (QuantKind::Q8_0, 33),
        (QuantKind::Q4_K, 288),
        (QuantKind::Q6_K, 32),
    ] {
        assert_eq!(
            QuantMatrix::new(kind, 1, cols, &data).unwrap_err(),
            QMatError::PartialBlock { kind, cols }
        );
        let mut acts = QuantizedActivations::new();
        assert_eq!(
            acts.quantize(kind, &vec![0.0; cols], 1, cols).unwrap_err(),
            QMatError::PartialBlock { kind, cols }
        );
    }
}

#[test]
fn overflowing_shapes_are_refused() {
    assert_eq!(
        QuantMatrix::new(QuantKind::F32, usize::MAX, 2, &[]).unwrap_err(),
        QMatError::Overflow
    );
    let mut acts = QuantizedActivations::new();
    assert_eq!(
        acts.quantize(QuantKind::F32, &[], usize::MAX, 2)
            .unwrap_err(),
        QMatError::Overflow
    );
}

#[test]
fn products_refuse_mismatched_inputs_and_write_nothing() {
    let data = vec![0u8; QuantKind::Q8_0.block_bytes() * 4]; // 2 rows × 64
    let w = QuantMatrix::new(QuantKind::Q8_0, 2, 64, &data).unwrap();
    let mut acts = QuantizedActivations::new();
    assert_eq!(
        acts.quantize(QuantKind::Q8_0, &[1.0; 127], 2, 64)
            .unwrap_err(),
        QMatError::InputLength {
            expected: 128,
            found: 127
        }
    );
    acts.quantize(QuantKind::Q8_0, &[1.0; 192], 3, 64).unwrap();
    for isa in [Isa::Scalar, Isa::detect()] {
        let mut out = vec![5.0f32; 5];
        assert_eq!(
            matmul(isa, &w, &acts, &mut out, 0..2).unwrap_err(),
            QMatError::OutputLength {
                expected: 6,
                found: 5
            }
        );
        let mut out = vec![5.0f32; 6];
        // A reversed range is malformed input too.
        #[allow(clippy::reversed_empty_ranges)]
        let ranges = [0..3, 2..1, 3..3];
        for range in ranges {
            assert_eq!(
                matmul(isa, &w, &acts, &mut out, range.clone()).unwrap_err(),
                QMatError::RowRange { range, rows: 2 }
            );
        }
        assert!(out.iter().all(|&v| v == 5.0));
    }
    // Activations quantized for another weight type, or another length.
    acts.quantize(QuantKind::Q4_1, &[1.0; 64], 1, 64).unwrap();
    let mut out = vec![0.0f32; 2];
    assert_eq!(
        matmul(Isa::Scalar, &w, &acts, &mut out, 0..2).unwrap_err(),
        QMatError::FormatMismatch {
            kind: QuantKind::Q8_0,
            format: ActFormat::Q8_1
        }
    );
    acts.quantize(QuantKind::Q8_0, &[1.0; 32], 1, 32).unwrap();
    assert_eq!(
        matmul(Isa::Scalar, &w, &acts, &mut out, 0..2).unwrap_err(),
        QMatError::ColsMismatch {
            weights: 64,
            activations: 32
        }
    );
    let mut row = vec![0.0f32; 31];
    assert!(acts.dequantize_row(0, &mut row).is_err());
    assert!(acts.dequantize_row(1, &mut [0.0f32; 32]).is_err());
}

#[test]
fn non_finite_activations_do_not_panic() {
    let data = vec![0u8; QuantKind::Q4_K.block_bytes()];
    let w = QuantMatrix::new(QuantKind::Q4_K, 1, 256, &data).unwrap();
    let mut x = vec![1.0f32; 256];
    x[3] = f32::NAN;
    x[9] = f32::INFINITY;
    let mut acts = QuantizedActivations::new();
    acts.quantize(QuantKind::Q4_K, &x, 1, 256).unwrap();
    let mut out = [0.0f32; 1];
    matmul(Isa::detect(), &w, &acts, &mut out, 0..1).unwrap();
}

/// Rows of no columns are a valid, empty shape: every product is 0, on
/// every path and row count, alone and on a team.
#[test]
fn rows_of_no_columns_give_zeros() {
    let mut team = pagoda_cpu::Team::new(2).unwrap();
    for kind in [
        QuantKind::F32,
        QuantKind::Q4_1,
        QuantKind::Q8_0,
        QuantKind::Q4_K,
    ] {
        let w = QuantMatrix::new(kind, 3, 0, &[]).unwrap();
        for n in [1usize, 2, 5, 17, 30] {
            for f32_acts in [false, true] {
                let mut acts = QuantizedActivations::new();
                if f32_acts {
                    acts.keep_f32(&[], n, 0).unwrap();
                } else {
                    acts.quantize(kind, &[], n, 0).unwrap();
                }
                for isa in [Isa::Scalar, Isa::detect()] {
                    let mut out = vec![f32::NAN; n * 3];
                    matmul(isa, &w, &acts, &mut out, 0..3).unwrap();
                    assert!(out.iter().all(|&v| v == 0.0), "{kind} {n} rows {isa:?}");
                }
                let mut out = vec![f32::NAN; n * 3];
                pagoda_cpu::matmul_team(&mut team, Isa::detect(), &w, &acts, &mut out).unwrap();
                assert!(out.iter().all(|&v| v == 0.0), "{kind} {n} rows on a team");
            }
        }
    }
}
