//! Dequantization of every block type against the `gguf` Python package on
//! random blocks (bitwise identical, NaN matching NaN), plus hand-built
//! blocks and the refusals, which need no Python.

mod gguf_support;

use gguf_support::{env, Rng};
use pagoda_core::{dequantize_row, QuantError, QuantKind};

/// Byte offsets of a block's f16 scale fields.
fn scale_fields(kind: QuantKind) -> &'static [usize] {
    match kind {
        QuantKind::Q8_0
        | QuantKind::Q4_0
        | QuantKind::Q5_0
        | QuantKind::IQ4_NL
        | QuantKind::IQ4_XS => &[0],
        QuantKind::Q4_1 | QuantKind::Q5_1 | QuantKind::Q4_K | QuantKind::Q5_K => &[0, 2],
        QuantKind::Q2_K => &[80, 82],
        QuantKind::Q3_K => &[108],
        QuantKind::Q6_K => &[208],
        QuantKind::F32 | QuantKind::F16 | QuantKind::BF16 | QuantKind::MXFP4 => &[],
    }
}

/// Random blocks: the first half all random bits (NaN and infinite scales
/// included), the second half with finite scales.
fn random_blocks(kind: QuantKind, rng: &mut Rng) -> (Vec<u8>, usize) {
    let blocks = if kind.block_elems() == 1 {
        4096
    } else {
        8192 / kind.block_elems() + 8
    };
    let mut bytes = vec![0; blocks * kind.block_bytes()];
    rng.fill(&mut bytes);
    for block in bytes.chunks_exact_mut(kind.block_bytes()).skip(blocks / 2) {
        for &at in scale_fields(kind) {
            let h = (rng.next_u64() as u16 & !0x7c00) | ((rng.below(31) as u16) << 10);
            block[at..at + 2].copy_from_slice(&h.to_le_bytes());
        }
    }
    (bytes, blocks * kind.block_elems())
}

fn same_bits(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn dequantize_matches_gguf_reference_on_random_blocks() {
    let Some(python) = env::require_python("dequantize_matches_gguf_reference_on_random_blocks")
    else {
        return;
    };
    let dir = env::scratch_dir("quant_reference");
    let mut rng = Rng(0x5eed);
    let mut expected = Vec::new();
    for kind in QuantKind::ALL {
        let (bytes, elems) = random_blocks(kind, &mut rng);
        std::fs::write(dir.join(format!("{}.bin", kind.name())), &bytes).unwrap();
        let mut out = vec![0f32; elems];
        dequantize_row(kind, &bytes, &mut out).unwrap();
        expected.push((kind, out));
    }
    env::run_reference(&python, "dequant.py", &[&dir]);
    for (kind, ours) in expected {
        let theirs = env::read_f32s(&dir.join(format!("{}.f32", kind.name())));
        assert_eq!(ours.len(), theirs.len(), "{kind}: element count");
        let bad: Vec<_> = (0..ours.len())
            .filter(|&i| !same_bits(ours[i], theirs[i]))
            .collect();
        assert!(
            bad.is_empty(),
            "{kind}: {} of {} values differ, first at {}: ours {} reference {}",
            bad.len(),
            ours.len(),
            bad[0],
            ours[bad[0]],
            theirs[bad[0]]
        );
    }
}

const ONE: [u8; 2] = [0x00, 0x3c]; // f16 1.0
const HALF: [u8; 2] = [0x00, 0x38]; // f16 0.5

#[test]
fn dequantize_reads_hand_built_blocks() {
    let mut out = [0f32; 32];
    // Q8_0: x = q × d.
    let mut b = HALF.to_vec();
    b.extend((0..32).map(|i| (i as i8 - 16) as u8));
    dequantize_row(QuantKind::Q8_0, &b, &mut out).unwrap();
    assert_eq!(out[..3], [-8.0, -7.5, -7.0]);
    // Q4_0: low nibbles first, then high nibbles, offset 8.
    let mut b = ONE.to_vec();
    b.extend((0..16).map(|j| (j as u8) | (15 - j as u8) << 4));
    dequantize_row(QuantKind::Q4_0, &b, &mut out).unwrap();
    assert_eq!((out[0], out[15], out[16], out[31]), (-8.0, 7.0, 7.0, -8.0));
    // Q4_1: x = q × d + m.
    let mut b = HALF.to_vec();
    b.extend(ONE);
    b.extend([0x21; 16]);
    dequantize_row(QuantKind::Q4_1, &b, &mut out).unwrap();
    assert_eq!((out[0], out[16]), (1.5, 2.0));
    // Q5_0: bit j of qh is element j's fifth bit, bit j + 16 element j + 16's.
    let mut b = ONE.to_vec();
    b.extend(((1u32 << 3) | (1 << 20)).to_le_bytes());
    b.extend([0u8; 16]);
    dequantize_row(QuantKind::Q5_0, &b, &mut out).unwrap();
    assert_eq!((out[3], out[4], out[20], out[21]), (0.0, -16.0, 0.0, -16.0));
    // Q6_K: d × scale × (q − 32) with all-zero quants gives −32 × d × scale.
    let mut b = vec![0u8; 210];
    b[192..208].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]);
    b[208..].copy_from_slice(&ONE);
    let mut out = [0f32; 256];
    dequantize_row(QuantKind::Q6_K, &b, &mut out).unwrap();
    assert_eq!(
        (out[0], out[16], out[32], out[255]),
        (-32.0, -64.0, -96.0, -32.0 * 16.0)
    );
}

#[test]
fn dequantize_refuses_partial_blocks_and_wrong_lengths() {
    let mut out = [7f32; 48];
    assert_eq!(
        dequantize_row(QuantKind::Q4_0, &[0; 27], &mut out),
        Err(QuantError::PartialBlock {
            kind: QuantKind::Q4_0,
            elems: 48
        })
    );
    assert_eq!(
        dequantize_row(QuantKind::Q8_0, &[0; 33], &mut out[..32]),
        Err(QuantError::LengthMismatch {
            kind: QuantKind::Q8_0,
            expected: 34,
            found: 33
        })
    );
    assert_eq!(
        QuantKind::F32.bytes_for(usize::MAX / 2),
        Err(QuantError::Overflow {
            kind: QuantKind::F32,
            elems: usize::MAX / 2
        })
    );
    assert!(out.iter().all(|&x| x == 7.0), "a refusal wrote output");
}

#[test]
fn quant_kinds_round_trip_their_ggml_ids() {
    for kind in QuantKind::ALL {
        assert_eq!(QuantKind::from_ggml_id(kind.ggml_id()), Some(kind));
        assert_eq!(kind.bytes_for(kind.block_elems()), Ok(kind.block_bytes()));
    }
    let known = (0..64).filter_map(QuantKind::from_ggml_id).count();
    assert_eq!(known, QuantKind::ALL.len());
}
