//! Bounded mutation test: thousands of mutated headers (bit flips,
//! truncations, count/length/type/dim/offset rewrites) of a synthetic file
//! and, when present, the real SmolLM2 file. None may panic: each parses
//! (and is then read through completely) or returns a typed error, and the
//! pairwise and indexed duplicate checks agree on which files are valid.

mod gguf_support;

use std::panic::{catch_unwind, AssertUnwindSafe};

use gguf_support::exercise::exercise;
use gguf_support::writer::{s, Writer, T, V};
use gguf_support::{env, Rng};
use pagoda_core::gguf::{Gguf, GgufError, Value};
use pagoda_core::QuantKind;

/// A field of the header: where it is and how wide (4 or 8 bytes).
type Field = (usize, usize);

/// The header's counts, lengths, type ids, dims and offsets, from a parse
/// of the unmutated file.
fn fields(file: &Gguf<'_>) -> Vec<Field> {
    let mut out = vec![(4, 4), (8, 8), (16, 8)];
    for kv in file.metadata() {
        let ty = kv.offset + 8 + kv.key.len();
        out.extend([(kv.offset, 8), (ty, 4)]);
        match kv.value {
            Value::String(_) => out.push((ty + 4, 8)),
            Value::Array(_) => out.extend([(ty + 4, 4), (ty + 8, 8)]),
            _ => {}
        }
    }
    for t in file.tensors() {
        let io = t.info_offset();
        let nd = io + 8 + t.name().len();
        out.extend([(io, 8), (nd, 4)]);
        for k in 0..t.dims().len() {
            out.push((nd + 4 + 8 * k, 8));
        }
        let ty = nd + 4 + 8 * t.dims().len();
        out.extend([(ty, 4), (ty + 4, 8)]);
    }
    out
}

fn interesting(rng: &mut Rng, old: u64, len: usize) -> u64 {
    let pick = [
        0,
        1,
        2,
        3,
        4,
        5,
        8,
        9,
        12,
        13,
        14,
        30,
        31,
        32,
        33,
        255,
        256,
        u32::MAX as u64,
        1 << 32,
        1 << 62,
        u64::MAX,
        u64::MAX - 1,
        old.wrapping_add(1),
        old.wrapping_sub(1),
        old.wrapping_mul(2),
        rng.below(len as u64),
        rng.next_u64(),
    ];
    pick[rng.below(pick.len() as u64) as usize]
}

/// Runs `count` mutations of `bytes` (restored after each); returns how many
/// mutants parsed.
fn mutate(name: &str, bytes: &mut [u8], count: usize, seed: u64) -> usize {
    let file = Gguf::parse(bytes).unwrap_or_else(|e| panic!("{name}: the original fails: {e}"));
    let fields = fields(&file);
    let header = file.data_offset().min(bytes.len());
    let mut rng = Rng(seed);
    let mut index = vec![0usize; 1 << 12];
    let mut row = Vec::new();
    let mut parsed = 0;
    for case in 0..count {
        let mut undo: Vec<(usize, u8)> = Vec::new();
        let mut cut = bytes.len();
        let mut write = |bytes: &mut [u8], at: usize, new: &[u8]| {
            for (i, &b) in new.iter().enumerate() {
                if let Some(slot) = bytes.get_mut(at + i) {
                    undo.push((at + i, *slot));
                    *slot = b;
                }
            }
        };
        let what = rng.below(5);
        match what {
            0 => {
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(header as u64) as usize;
                    let b = bytes[at] ^ (1 << rng.below(8));
                    write(bytes, at, &[b]);
                }
            }
            1 => {
                cut = if rng.below(2) == 0 {
                    rng.below(header as u64 + 1) as usize
                } else {
                    rng.below(bytes.len() as u64 + 1) as usize
                }
            }
            2 | 3 => {
                let (at, width) = fields[rng.below(fields.len() as u64) as usize];
                let mut old = [0u8; 8];
                old[..width].copy_from_slice(&bytes[at..at + width]);
                let new = interesting(&mut rng, u64::from_le_bytes(old), bytes.len());
                write(bytes, at, &new.to_le_bytes()[..width]);
            }
            _ => {
                let at = rng.below(header as u64) as usize;
                let width = if rng.below(2) == 0 { 4 } else { 8 };
                let new = interesting(&mut rng, 0, bytes.len());
                write(bytes, at, &new.to_le_bytes()[..width]);
            }
        }
        let input = &bytes[..cut];
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let plain = Gguf::parse(input);
            let indexed = Gguf::parse_indexed(input, &mut index);
            if !matches!(indexed, Err(GgufError::ScratchTooSmall { .. })) {
                assert_eq!(plain.is_ok(), indexed.is_ok(), "{plain:?} / {indexed:?}");
            }
            match plain {
                Ok(file) => {
                    exercise(&file, &mut row);
                    true
                }
                Err(e) => {
                    assert!(!e.to_string().is_empty());
                    false
                }
            }
        }));
        match outcome {
            Ok(ok) => parsed += usize::from(ok),
            Err(_) => {
                panic!("{name}: mutation {case} (kind {what}, cut {cut}, writes {undo:?}) panicked")
            }
        }
        for &(at, b) in undo.iter().rev() {
            bytes[at] = b;
        }
    }
    parsed
}

fn synthetic() -> Vec<u8> {
    let mut rng = Rng(7);
    let mut w = Writer::new(3)
        .kv("general.architecture", s("llama"))
        .kv("general.alignment", V::U32(64))
        .kv("llama.block_count", V::U32(2))
        .kv("llama.rope.freq_base", V::F32(10000.0))
        .kv(
            "tokenizer.ggml.tokens",
            V::Arr(8, vec![s("a"), s("bb"), s("<s>")]),
        )
        .kv(
            "tokenizer.ggml.token_type",
            V::Arr(5, vec![V::I32(1), V::I32(1), V::I32(3)]),
        )
        .kv("tokenizer.ggml.scores", V::Arr(6, vec![V::F32(0.0); 3]))
        .kv(
            "nested",
            V::Arr(
                9,
                vec![V::Arr(0, vec![V::U8(1)]), V::Arr(7, vec![V::Bool(true)])],
            ),
        )
        .kv("flag", V::Bool(true))
        .kv("wide", V::I64(-1));
    w.alignment = 64;
    for (i, kind) in QuantKind::ALL.into_iter().enumerate() {
        let dims = [kind.block_elems() as u64 * 2, 2];
        let mut data = vec![0; kind.bytes_for((dims[0] * dims[1]) as usize).unwrap()];
        rng.fill(&mut data);
        w = w.tensor(T::new(
            &format!("blk.{i}.weight"),
            &dims,
            kind.ggml_id(),
            data,
        ));
    }
    w.build()
}

#[test]
fn mutated_synthetic_headers_never_panic() {
    let mut bytes = synthetic();
    let parsed = mutate("synthetic", &mut bytes, 5000, 1);
    println!("synthetic: {parsed} of 5000 mutants parsed, the rest refused");
    // Some mutants stay valid (a flipped value byte), most are refused.
    assert!(parsed > 0 && parsed < 5000, "{parsed} of 5000 parsed");
    assert_eq!(bytes, synthetic(), "mutations were not undone");
}

#[test]
fn mutated_real_model_headers_never_panic() {
    let Some(path) = env::require_model("mutated_real_model_headers_never_panic") else {
        return;
    };
    let mut bytes = std::fs::read(&path).unwrap();
    let parsed = mutate("SmolLM2", &mut bytes, 2000, 2);
    println!("SmolLM2: {parsed} of 2000 mutants parsed, the rest refused");
    assert!(parsed < 2000, "{parsed} of 2000 parsed");
}
