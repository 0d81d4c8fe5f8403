//! Reads everything a parsed file offers, as a loader would: used on files
//! that parsed after mutation, so a reader bug that only shows when the
//! view is used (an out-of-bounds slice, an endless iterator) still fails.

use pagoda_core::dequantize_row;
use pagoda_core::gguf::{Gguf, Value};

fn walk(v: &Value<'_>, budget: &mut u64) -> u64 {
    let mut sum = 1;
    if let Value::Array(a) = v {
        for item in a.iter() {
            if *budget == 0 {
                break;
            }
            *budget -= 1;
            sum += walk(&item, budget);
        }
    }
    sum
}

/// Visits metadata (arrays included), the typed getters (on the first
/// keys), every tensor and
/// the first row of each; returns a count so nothing is optimized away.
pub fn exercise(file: &Gguf<'_>, out: &mut Vec<f32>) -> u64 {
    let mut seen = 0;
    let mut budget = 1 << 20;
    for (i, kv) in file.metadata().enumerate() {
        seen += walk(&kv.value, &mut budget);
        // Each getter is a linear scan: try them on a few keys only.
        if i >= 4 {
            continue;
        }
        let _ = file.get_u32(kv.key);
        let _ = file.get_f32(kv.key);
        let _ = file.get_bool(kv.key);
        let _ = file.get_str(kv.key).map(str::len);
        if let Ok(a) = file.get_i32_array(kv.key) {
            seen += a.iter().count() as u64 + u64::from(a.get(a.len()).is_none());
        }
        if let Ok(a) = file.get_f32_array(kv.key) {
            seen += a.iter().count() as u64;
        }
        if let Ok(a) = file.get_str_array(kv.key) {
            seen += a.iter().count() as u64;
        }
    }
    for t in file.tensors() {
        seen += 1;
        let row = t.row(0).expect("a tensor has a first row");
        if t.row_elems() <= 1 << 16 {
            out.clear();
            out.resize(t.row_elems() as usize, 0.0);
            dequantize_row(t.kind(), row, out).expect("a parsed tensor's row dequantizes");
        }
        assert!(t.row(t.rows()).is_none());
    }
    seen
}
