//! Fuzzes the GGUF reader and the dequantizer: any input either parses, and
//! then every view of it reads without panicking, or is refused with a typed
//! error; the pairwise and indexed checks agree on which inputs are valid.
//! The first byte also picks a weight type to dequantize the rest as.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pagoda_core::gguf::{Gguf, GgufError, Value};
use pagoda_core::{dequantize_row, QuantKind};

fn walk(v: &Value<'_>, budget: &mut u32) {
    if let Value::Array(a) = v {
        for item in a.iter() {
            if *budget == 0 {
                return;
            }
            *budget -= 1;
            walk(&item, budget);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // The dequantizer over arbitrary bytes.
    if let Some((&pick, rest)) = data.split_first() {
        let kind = QuantKind::ALL[usize::from(pick) % QuantKind::ALL.len()];
        let elems = rest.len() / kind.block_bytes() * kind.block_elems();
        let mut out = vec![0f32; elems];
        let take = kind.bytes_for(elems).unwrap();
        dequantize_row(kind, &rest[..take], &mut out).unwrap();
        // And a length that does not match is refused.
        if take < rest.len() {
            assert!(dequantize_row(kind, rest, &mut out).is_err());
        }
    }

    let plain = Gguf::parse(data);
    let mut index = [0usize; 256];
    let indexed = Gguf::parse_indexed(data, &mut index);
    if !matches!(indexed, Err(GgufError::ScratchTooSmall { .. })) {
        assert_eq!(plain.is_ok(), indexed.is_ok());
    }
    let Ok(file) = plain else {
        return;
    };
    let mut budget = 1 << 16;
    for kv in file.metadata() {
        walk(&kv.value, &mut budget);
        let _ = file.get_u32(kv.key);
        let _ = file.get_str(kv.key);
        if let Ok(a) = file.get_i32_array(kv.key) {
            let _ = a.iter().count();
        }
        if let Ok(a) = file.get_str_array(kv.key) {
            let _ = a.iter().count();
        }
    }
    let mut out = Vec::new();
    for t in file.tensors() {
        assert_eq!(file.tensor(t.name()).map(|u| u.offset()), Some(t.offset()));
        let row = t.row(0).unwrap();
        if t.row_elems() <= 1 << 16 {
            out.resize(t.row_elems() as usize, 0.0);
            dequantize_row(t.kind(), row, &mut out).unwrap();
        }
    }
});
