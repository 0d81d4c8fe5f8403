//! A file written by the `gguf` Python package (an independent writer):
//! every value type reads back as written, and its tensors' types, shapes,
//! offsets and dequantized values match what the package reads. Skips (one
//! line) without the venv outside CI; fails without it under `CI=true`.

mod gguf_support;

use std::path::Path;

use gguf_support::env;
use pagoda_core::gguf::{Gguf, Value};
use pagoda_core::{dequantize_row, QuantKind};

#[test]
fn reader_reads_what_the_gguf_package_writes() {
    let test = "reader_reads_what_the_gguf_package_writes";
    let Some(python) = env::require_python(test) else {
        return;
    };
    let dir = env::scratch_dir("gguf_reference");
    let path = dir.join("written.gguf");
    env::run_reference(&python, "write_gguf.py", &[&path]);
    let bytes = std::fs::read(&path).unwrap();
    let file = Gguf::parse(&bytes).unwrap();
    assert_eq!(file.version(), 3);
    assert_eq!(file.alignment(), 64);
    assert_eq!(file.get_str("general.architecture"), Ok("llama"));
    assert_eq!(file.get("t.u8"), Some(Value::U8(200)));
    assert_eq!(file.get("t.i8"), Some(Value::I8(-100)));
    assert_eq!(file.get("t.u16"), Some(Value::U16(60000)));
    assert_eq!(file.get("t.i16"), Some(Value::I16(-30000)));
    assert_eq!(file.get_u32("t.u32"), Ok(4_000_000_000));
    assert_eq!(file.get_i32("t.i32"), Ok(-2_000_000_000));
    assert_eq!(file.get_f32("t.f32"), Ok(0.375));
    assert_eq!(file.get_u64("t.u64"), Ok(u64::MAX - 3));
    assert_eq!(file.get("t.i64"), Some(Value::I64(i64::MIN + 5)));
    assert_eq!(file.get("t.f64"), Some(Value::F64(2.5)));
    assert_eq!(file.get_bool("t.bool"), Ok(true));
    assert_eq!(file.get_str("t.str"), Ok("héllo, 世界 🙂"));
    let ints: Vec<i32> = file.get_i32_array("t.arr_i32").unwrap().iter().collect();
    assert_eq!(ints, [-1, 7, 9]);
    let floats: Vec<f32> = file.get_f32_array("t.arr_f32").unwrap().iter().collect();
    assert_eq!(floats, [0.25, -3.0]);
    let strs: Vec<&[u8]> = file.get_str_array("t.arr_str").unwrap().iter().collect();
    assert_eq!(strs, [&b"a"[..], b"", b"ccc"]);
    let Some(Value::Array(nested)) = file.get("t.nested") else {
        panic!("t.nested is not an array");
    };
    let inner: Vec<Vec<Value<'_>>> = nested
        .iter()
        .map(|v| match v {
            Value::Array(a) => a.iter().collect(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        inner,
        [
            vec![Value::String(b"x"), Value::String(b"yz")],
            vec![Value::String(b"w")]
        ]
    );

    assert_eq!(file.tensor_count(), QuantKind::ALL.len() as u64);
    let names: Vec<String> = QuantKind::ALL.iter().map(|k| format!("w.{k}:3")).collect();
    let mut args: Vec<&Path> = vec![&path, &dir];
    args.extend(names.iter().map(Path::new));
    env::run_reference(&python, "model_ref.py", &args);
    let listing = std::fs::read_to_string(dir.join("tensors.tsv")).unwrap();
    for (t, line) in file.tensors().zip(listing.lines()) {
        let offset = file.data_offset() as u64 + t.offset();
        let ours = format!("{}\t{}\t512,3\t{offset}", t.name(), t.kind());
        assert_eq!(ours, line);
        let reference = env::read_f32s(&dir.join(format!("{}.f32", t.name())));
        let mut values = vec![0.0; 512 * 3];
        for (r, out) in values.chunks_exact_mut(512).enumerate() {
            dequantize_row(t.kind(), t.row(r as u64).unwrap(), out).unwrap();
        }
        assert_eq!(values.len(), reference.len());
        for (i, (a, b)) in values.iter().zip(&reference).enumerate() {
            let same = a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
            assert!(same, "{}[{i}]: ours {a} reference {b}", t.name());
        }
    }
}
