//! The GGUF reader over synthetic files from a test-only writer: v2 and v3,
//! every value type and nested arrays read back exactly, tensors where the
//! writer put them, and one malformed file per refusal, each asserting the
//! exact error.

mod gguf_support;

use gguf_support::writer::{s, Layout, Writer, T, V};
use gguf_support::Rng;
use pagoda_core::gguf::{Gguf, GgufError, Name, Value, ValueKind, ValueType, MAX_ARRAY_DEPTH};
use pagoda_core::QuantKind;

fn n(name: &str) -> Name {
    Name::new(name.as_bytes())
}

/// Asserts a read value is the written one, arrays element by element.
fn same(read: &Value<'_>, written: &V) {
    match (read, written) {
        (Value::U8(a), V::U8(b)) => assert_eq!(a, b),
        (Value::I8(a), V::I8(b)) => assert_eq!(a, b),
        (Value::U16(a), V::U16(b)) => assert_eq!(a, b),
        (Value::I16(a), V::I16(b)) => assert_eq!(a, b),
        (Value::U32(a), V::U32(b)) => assert_eq!(a, b),
        (Value::I32(a), V::I32(b)) => assert_eq!(a, b),
        (Value::F32(a), V::F32(b)) => assert_eq!(a.to_bits(), b.to_bits()),
        (Value::Bool(a), V::Bool(b)) => assert_eq!(a, b),
        (Value::String(a), V::Str(b)) => assert_eq!(a, &b.as_slice()),
        (Value::U64(a), V::U64(b)) => assert_eq!(a, b),
        (Value::I64(a), V::I64(b)) => assert_eq!(a, b),
        (Value::F64(a), V::F64(b)) => assert_eq!(a.to_bits(), b.to_bits()),
        (Value::Array(a), V::Arr(elem, items)) => {
            assert_eq!(a.elem_type(), ValueType::from_id(*elem).unwrap());
            assert_eq!(a.len(), items.len() as u64);
            assert_eq!(a.iter().count(), items.len());
            for (r, w) in a.iter().zip(items) {
                same(&r, w);
            }
        }
        _ => panic!("read {read:?}, wrote {written:?}"),
    }
}

fn every_value() -> Vec<(&'static str, V)> {
    vec![
        ("t.u8", V::U8(200)),
        ("t.i8", V::I8(-100)),
        ("t.u16", V::U16(60000)),
        ("t.i16", V::I16(-30000)),
        ("t.u32", V::U32(4_000_000_000)),
        ("t.i32", V::I32(-2_000_000_000)),
        ("t.f32", V::F32(-1.5e-7)),
        ("t.bool", V::Bool(true)),
        ("t.false", V::Bool(false)),
        ("t.str", s("héllo, 世界 🙂")),
        ("t.empty_str", s("")),
        ("t.u64", V::U64(u64::MAX - 3)),
        ("t.i64", V::I64(i64::MIN + 5)),
        ("t.f64", V::F64(std::f64::consts::PI)),
        ("t.arr_u8", V::Arr(0, vec![V::U8(1), V::U8(2), V::U8(255)])),
        ("t.arr_i32", V::Arr(5, vec![V::I32(-1), V::I32(7)])),
        ("t.arr_f32", V::Arr(6, vec![V::F32(0.25), V::F32(-3.0)])),
        ("t.arr_bool", V::Arr(7, vec![V::Bool(true), V::Bool(false)])),
        ("t.arr_str", V::Arr(8, vec![s("a"), s(""), s("ccc")])),
        ("t.arr_u64", V::Arr(10, vec![V::U64(1 << 40)])),
        ("t.arr_f64", V::Arr(12, vec![V::F64(-0.0)])),
        ("t.arr_empty", V::Arr(4, vec![])),
        (
            "t.nested",
            V::Arr(
                9,
                vec![
                    V::Arr(8, vec![s("x"), s("yz")]),
                    V::Arr(5, vec![V::I32(3)]),
                    V::Arr(9, vec![V::Arr(0, vec![V::U8(9)])]),
                ],
            ),
        ),
    ]
}

fn kind_tensor(rng: &mut Rng, kind: QuantKind, name: &str, rows: u64) -> T {
    let row = kind.block_elems() as u64 * 2;
    let bytes = kind.bytes_for((row * rows) as usize).unwrap();
    let mut data = vec![0; bytes];
    rng.fill(&mut data);
    T::new(name, &[row, rows], kind.ggml_id(), data)
}

fn full_file(version: u32, alignment: Option<u32>) -> (Writer, Vec<u8>, Layout) {
    let mut rng = Rng(version as u64);
    let mut w = Writer::new(version);
    for (k, v) in every_value() {
        w = w.kv(k, v);
    }
    if let Some(a) = alignment {
        w = w.kv("general.alignment", V::U32(a));
        w.alignment = a as u64;
    }
    for (i, kind) in QuantKind::ALL.into_iter().enumerate() {
        w = w.tensor(kind_tensor(&mut rng, kind, &format!("t{i}.{kind}"), 3));
    }
    w = w.tensor(T::new("scalar", &[], 0, 7f32.to_le_bytes().to_vec()));
    w = w.tensor(T::new("cube", &[2, 3, 4, 5], 0, vec![1; 2 * 3 * 4 * 5 * 4]));
    let (bytes, layout) = w.build_with_layout();
    (w, bytes, layout)
}

#[test]
fn reader_reads_every_value_type_and_tensor_in_v2_and_v3() {
    for version in [2, 3] {
        for alignment in [None, Some(64), Some(1)] {
            let (w, bytes, layout) = full_file(version, alignment);
            let file = Gguf::parse(&bytes).unwrap();
            assert_eq!(file.version(), version);
            assert_eq!(file.alignment(), alignment.unwrap_or(32));
            assert_eq!(file.data_offset(), layout.data_start);
            assert_eq!(file.kv_count(), w.kvs.len() as u64);
            let read: Vec<_> = file.metadata().collect();
            assert_eq!(read.len(), w.kvs.len());
            for ((kv, (key, v)), off) in read.iter().zip(&w.kvs).zip(&layout.kv_offsets) {
                assert_eq!(kv.key.as_bytes(), key.as_slice());
                assert_eq!(kv.offset, *off);
                same(&kv.value, v);
                same(&file.get(kv.key).unwrap(), v);
            }
            assert_eq!(file.tensor_count(), w.tensors.len() as u64);
            for ((t, wt), (at, len)) in file.tensors().zip(&w.tensors).zip(&layout.tensor_data) {
                assert_eq!(t.name().as_bytes(), wt.name.as_slice());
                assert_eq!(t.kind().ggml_id(), wt.type_id);
                assert_eq!(t.dims(), wt.dims.as_slice());
                assert_eq!(t.data(), wt.data.as_slice());
                assert_eq!(t.data().as_ptr(), bytes[*at..].as_ptr());
                assert_eq!(t.data().len(), *len);
                assert_eq!(
                    (file.data_offset() as u64 + t.offset()) % file.alignment() as u64,
                    0
                );
                assert_eq!(file.tensor(t.name()), Some(t));
                let rows = t.rows();
                let row_bytes = t.data().len() / rows as usize;
                assert_eq!(
                    t.row(rows - 1),
                    Some(&t.data()[t.data().len() - row_bytes..])
                );
                assert_eq!(t.row(rows), None);
            }
            assert_eq!(file.tensor("absent"), None);
            assert_eq!(file.tensor("scalar").unwrap().elems(), 1);
            assert_eq!(file.tensor("cube").unwrap().elems(), 120);
            // parse_indexed agrees.
            let mut index = [0usize; 64];
            let indexed = Gguf::parse_indexed(&bytes, &mut index).unwrap();
            assert_eq!(indexed.data_offset(), file.data_offset());
        }
    }
}

#[test]
fn reader_typed_getters_return_values_and_refuse_other_types() {
    let (_, bytes, _) = full_file(3, None);
    let file = Gguf::parse(&bytes).unwrap();
    assert_eq!(file.get_u32("t.u32"), Ok(4_000_000_000));
    assert_eq!(file.get_u64("t.u64"), Ok(u64::MAX - 3));
    assert_eq!(file.get_i32("t.i32"), Ok(-2_000_000_000));
    assert_eq!(file.get_f32("t.f32"), Ok(-1.5e-7));
    assert_eq!(file.get_bool("t.bool"), Ok(true));
    assert_eq!(file.get_str("t.str"), Ok("héllo, 世界 🙂"));
    let ints = file.get_i32_array("t.arr_i32").unwrap();
    assert_eq!(ints.iter().collect::<Vec<_>>(), [-1, 7]);
    assert_eq!((ints.len(), ints.get(1), ints.get(2)), (2, Some(7), None));
    let floats = file.get_f32_array("t.arr_f32").unwrap();
    assert_eq!(floats.iter().collect::<Vec<_>>(), [0.25, -3.0]);
    let strs = file.get_str_array("t.arr_str").unwrap();
    assert_eq!(strs.len(), 3);
    assert_eq!(strs.iter().collect::<Vec<_>>(), [&b"a"[..], b"", b"ccc"]);

    let wrong = |key: &str, expected, found| GgufError::WrongType {
        key: n(key),
        expected,
        found,
    };
    use ValueKind::{ArrayOf, Scalar};
    assert_eq!(
        file.get_u32("t.u64"),
        Err(wrong(
            "t.u64",
            Scalar(ValueType::U32),
            Scalar(ValueType::U64)
        ))
    );
    assert_eq!(
        file.get_f32("t.f64"),
        Err(wrong(
            "t.f64",
            Scalar(ValueType::F32),
            Scalar(ValueType::F64)
        ))
    );
    assert_eq!(
        file.get_bool("t.u8"),
        Err(wrong(
            "t.u8",
            Scalar(ValueType::Bool),
            Scalar(ValueType::U8)
        ))
    );
    assert_eq!(
        file.get_str("t.arr_str"),
        Err(wrong(
            "t.arr_str",
            Scalar(ValueType::String),
            ArrayOf(ValueType::String)
        ))
    );
    assert_eq!(
        file.get_str_array("t.nested"),
        Err(wrong(
            "t.nested",
            ArrayOf(ValueType::String),
            ArrayOf(ValueType::Array)
        ))
    );
    assert_eq!(
        file.get_u32("no.such.key"),
        Err(GgufError::MissingKey {
            key: n("no.such.key")
        })
    );
}

#[test]
fn reader_refuses_token_type_of_u8_where_i32_is_expected() {
    let bytes = Writer::new(3)
        .kv(
            "tokenizer.ggml.token_type",
            V::Arr(0, vec![V::U8(1), V::U8(3)]),
        )
        .build();
    let file = Gguf::parse(&bytes).unwrap();
    let err = file.get_i32_array("tokenizer.ggml.token_type").unwrap_err();
    assert_eq!(
        err,
        GgufError::WrongType {
            key: n("tokenizer.ggml.token_type"),
            expected: ValueKind::ArrayOf(ValueType::I32),
            found: ValueKind::ArrayOf(ValueType::U8),
        }
    );
    assert_eq!(
        err.to_string(),
        "metadata `tokenizer.ggml.token_type` is array of u8, expected array of i32"
    );
}

fn refuse(bytes: &[u8], expected: GgufError) {
    assert_eq!(Gguf::parse(bytes).err(), Some(expected));
    let mut index = [0usize; 128];
    let indexed = Gguf::parse_indexed(bytes, &mut index).err();
    assert_eq!(
        core::mem::discriminant(&indexed.unwrap()),
        core::mem::discriminant(&expected)
    );
    assert!(!expected.to_string().is_empty());
}

fn f32_tensor(name: &str, elems: u64) -> T {
    T::new(name, &[elems], 0, vec![0; elems as usize * 4])
}

#[test]
fn reader_refuses_bad_magic_and_versions() {
    refuse(b"GGU", GgufError::BadMagic { found: *b"GGU\0" });
    let mut bytes = Writer::new(3).build();
    bytes[0] = b'X';
    refuse(&bytes, GgufError::BadMagic { found: *b"XGUF" });
    for version in [0, 1, 4, 0x0300_0000] {
        refuse(
            &Writer::new(version).build(),
            GgufError::UnsupportedVersion { version },
        );
    }
}

#[test]
fn reader_refuses_every_truncation() {
    let (_, bytes, _) = full_file(3, None);
    for cut in 0..bytes.len() {
        let err = Gguf::parse(&bytes[..cut]).expect_err("a truncated file parsed");
        assert!(
            matches!(
                err,
                GgufError::BadMagic { .. }
                    | GgufError::Truncated { .. }
                    | GgufError::CountTooLarge { .. }
                    | GgufError::DataOutOfBounds { .. }
            ),
            "cut at {cut}: {err:?}"
        );
    }
    refuse(
        &bytes[..6],
        GgufError::Truncated {
            offset: 4,
            what: "version",
        },
    );
    refuse(
        &bytes[..20],
        GgufError::Truncated {
            offset: 16,
            what: "metadata count",
        },
    );
}

#[test]
fn reader_refuses_counts_larger_than_the_file() {
    let mut w = Writer::new(3).kv("a", V::U8(1));
    w.kv_count = Some(1 << 40);
    refuse(
        &w.build(),
        GgufError::CountTooLarge {
            offset: 16,
            what: "metadata count",
            count: 1 << 40,
        },
    );
    let mut w = Writer::new(3).kv("a", V::U8(1)).tensor(f32_tensor("x", 4));
    w.tensor_count = Some(1000);
    refuse(
        &w.build(),
        GgufError::CountTooLarge {
            offset: 8,
            what: "tensor count",
            count: 1000,
        },
    );
    // An array of 1e12 u64 in a file of a few dozen bytes.
    let mut body = 10u32.to_le_bytes().to_vec();
    body.extend(1_000_000_000_000u64.to_le_bytes());
    let bytes = Writer::new(3).kv("big", V::Raw(9, body)).build();
    refuse(
        &bytes,
        GgufError::CountTooLarge {
            offset: 24 + 8 + 3 + 4 + 4,
            what: "array count",
            count: 1_000_000_000_000,
        },
    );
    // A string length past the end.
    let mut body = u64::MAX.to_le_bytes().to_vec();
    body.extend(b"abc");
    let bytes = Writer::new(2).kv("k", V::Raw(8, body)).build();
    refuse(
        &bytes,
        GgufError::CountTooLarge {
            offset: 24 + 8 + 1 + 4,
            what: "string",
            count: u64::MAX,
        },
    );
}

#[test]
fn reader_refuses_bad_alignment() {
    for a in [0, 3, 48, u32::MAX] {
        refuse(
            &Writer::new(3).kv("general.alignment", V::U32(a)).build(),
            GgufError::BadAlignment { alignment: a },
        );
    }
    refuse(
        &Writer::new(3).kv("general.alignment", V::U64(32)).build(),
        GgufError::WrongType {
            key: n("general.alignment"),
            expected: ValueKind::Scalar(ValueType::U32),
            found: ValueKind::Scalar(ValueType::U64),
        },
    );
}

#[test]
fn reader_refuses_bad_shapes() {
    let five = T::new("five", &[1, 1, 1, 1, 1], 0, vec![0; 4]);
    refuse(
        &Writer::new(3).tensor(five).build(),
        GgufError::TooManyDims {
            tensor: n("five"),
            dims: 5,
        },
    );
    let zero = T::new("zero", &[4, 0], 0, vec![]);
    refuse(
        &Writer::new(3).tensor(zero).build(),
        GgufError::ZeroDim {
            tensor: n("zero"),
            axis: 1,
        },
    );
    let partial = T::new("partial", &[48, 2], QuantKind::Q4_0.ggml_id(), vec![0; 54]);
    refuse(
        &Writer::new(3).tensor(partial).build(),
        GgufError::PartialBlock {
            tensor: n("partial"),
            row: 48,
            block: 32,
        },
    );
}

#[test]
fn reader_refuses_overflowing_counts() {
    let elems = T::new("e", &[1 << 32, 1 << 32, 1 << 32], 0, vec![]);
    refuse(
        &Writer::new(3).tensor(elems).build(),
        GgufError::SizeOverflow {
            tensor: n("e"),
            what: "element count",
        },
    );
    let bytes = T::new("b", &[1 << 62], 0, vec![]);
    refuse(
        &Writer::new(3).tensor(bytes).build(),
        GgufError::SizeOverflow {
            tensor: n("b"),
            what: "byte count",
        },
    );
    let mut end = f32_tensor("d", 8);
    end.data.clear();
    end.offset = Some(u64::MAX - 31);
    refuse(
        &Writer::new(3).tensor(end).build(),
        GgufError::SizeOverflow {
            tensor: n("d"),
            what: "data end",
        },
    );
}

#[test]
fn reader_refuses_data_past_the_end_misaligned_and_overlapping() {
    let (mut bytes, layout) = Writer::new(3)
        .tensor(f32_tensor("a", 8))
        .build_with_layout();
    bytes.pop();
    refuse(
        &bytes,
        GgufError::DataOutOfBounds {
            tensor: n("a"),
            end: layout.data_start as u64 + 32,
            len: bytes.len() as u64,
        },
    );
    let mut t = f32_tensor("m", 4);
    t.offset = Some(16);
    refuse(
        &Writer::new(3).tensor(t).build(),
        GgufError::Misaligned {
            tensor: n("m"),
            offset: 16,
        },
    );
    let mut second = f32_tensor("b", 8);
    second.offset = Some(32);
    let w = Writer::new(3).tensor(f32_tensor("a", 32)).tensor(second);
    refuse(
        &w.build(),
        GgufError::Overlap {
            tensor: n("b"),
            other: n("a"),
        },
    );
    // Touching but not overlapping is fine.
    let mut after = f32_tensor("b", 8);
    after.offset = Some(128);
    let bytes = Writer::new(3)
        .tensor(f32_tensor("a", 32))
        .tensor(after)
        .build();
    assert!(Gguf::parse(&bytes).is_ok());
}

#[test]
fn reader_refuses_duplicates() {
    let (bytes, layout) = Writer::new(3)
        .kv("a", V::U8(1))
        .kv("b", V::U8(1))
        .kv("a", V::U32(2))
        .build_with_layout();
    refuse(
        &bytes,
        GgufError::DuplicateKey {
            key: n("a"),
            offset: layout.kv_offsets[2] as u64,
        },
    );
    let (bytes, layout) = Writer::new(3)
        .tensor(f32_tensor("w", 8))
        .tensor(f32_tensor("v", 8))
        .tensor(f32_tensor("w", 8))
        .build_with_layout();
    refuse(
        &bytes,
        GgufError::DuplicateTensor {
            tensor: n("w"),
            offset: layout.tensor_info_offsets[2] as u64,
        },
    );
}

#[test]
fn reader_refuses_unknown_types_and_bad_values() {
    let (bytes, layout) = Writer::new(3)
        .kv("k", V::Raw(13, vec![0; 8]))
        .build_with_layout();
    refuse(
        &bytes,
        GgufError::UnknownValueType {
            offset: layout.kv_offsets[0] as u64 + 9,
            id: 13,
        },
    );
    let (bytes, layout) = Writer::new(3)
        .kv("k", V::Arr(77, vec![]))
        .build_with_layout();
    refuse(
        &bytes,
        GgufError::UnknownValueType {
            offset: layout.kv_offsets[0] as u64 + 13,
            id: 77,
        },
    );
    for id in [16, 99, 31] {
        let t = T::new("q", &[256], id, vec![0; 256]);
        refuse(
            &Writer::new(3).tensor(t).build(),
            GgufError::UnknownTensorType { tensor: n("q"), id },
        );
    }
    let (bytes, layout) = Writer::new(3)
        .kv("flag", V::Raw(7, vec![2]))
        .build_with_layout();
    refuse(
        &bytes,
        GgufError::BadBool {
            offset: layout.kv_offsets[0] as u64 + 16,
            value: 2,
        },
    );
    let (bytes, layout) = Writer::new(3).kv("a\u{0}", V::U8(0)).build_with_layout();
    assert!(Gguf::parse(&bytes).is_ok());
    let mut bad = bytes.clone();
    bad[layout.kv_offsets[0] + 9] = 0xff;
    refuse(
        &bad,
        GgufError::NotUtf8 {
            offset: layout.kv_offsets[0] as u64 + 8,
        },
    );
    let bytes = Writer::new(3).kv("s", V::Str(vec![0xc3])).build();
    let file = Gguf::parse(&bytes).unwrap();
    assert_eq!(
        file.get_str("s"),
        Err(GgufError::NotUtf8 {
            offset: bytes.len() as u64 - 1
        })
    );
}

#[test]
fn reader_bounds_array_nesting() {
    let nest = |depth: u32| {
        let mut v = V::Arr(0, vec![V::U8(1)]);
        for _ in 1..depth {
            v = V::Arr(9, vec![v]);
        }
        v
    };
    let ok = Writer::new(3).kv("n", nest(MAX_ARRAY_DEPTH)).build();
    let file = Gguf::parse(&ok).unwrap();
    let mut v = file.get("n").unwrap();
    for _ in 1..MAX_ARRAY_DEPTH {
        let Value::Array(a) = v else { panic!("{v:?}") };
        v = a.iter().next().unwrap();
    }
    let Value::Array(a) = v else { panic!("{v:?}") };
    assert_eq!(a.iter().collect::<Vec<_>>(), [Value::U8(1)]);
    let (deep, layout) = Writer::new(3)
        .kv("n", nest(MAX_ARRAY_DEPTH + 1))
        .build_with_layout();
    let innermost = layout.kv_offsets[0] as u64 + 8 + 1 + 4 + 12 * MAX_ARRAY_DEPTH as u64;
    refuse(&deep, GgufError::NestingTooDeep { offset: innermost });
}

#[test]
fn reader_index_must_hold_every_entry() {
    let bytes = Writer::new(3).kv("a", V::U8(1)).kv("b", V::U8(2)).build();
    let mut index = [0usize; 1];
    assert_eq!(
        Gguf::parse_indexed(&bytes, &mut index).err(),
        Some(GgufError::ScratchTooSmall { needed: 2 })
    );
}

#[test]
fn reader_finds_duplicates_among_many_keys() {
    for (dup_of, at) in [(5, 90), (70, 90), (63, 64), (64, 65), (0, 99)] {
        let mut w = Writer::new(3);
        for i in 0..100 {
            let key = if i == at {
                format!("k{dup_of}")
            } else {
                format!("k{i}")
            };
            w = w.kv(&key, V::Arr(8, vec![s("pad"), s("ding")]));
        }
        let (bytes, layout) = w.build_with_layout();
        refuse(
            &bytes,
            GgufError::DuplicateKey {
                key: n(&format!("k{dup_of}")),
                offset: layout.kv_offsets[at] as u64,
            },
        );
    }
    let mut w = Writer::new(3);
    for i in 0..100 {
        w = w.kv(&format!("k{i}"), V::U8(i as u8));
    }
    let bytes = w.build();
    let file = Gguf::parse(&bytes).unwrap();
    assert_eq!(file.get("k99"), Some(Value::U8(99)));
}
