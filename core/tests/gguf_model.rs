//! The real SmolLM2-135M-Instruct Q4_1 file: its metadata, every tensor's
//! type, shape and offset as the `gguf` Python package reads them, a few
//! tensors dequantized bitwise like `gguf.quants.dequantize`, and every
//! tensor dequantized to finite values. Skips (one line) without the model
//! or the venv outside CI; fails without them under `CI=true`.

mod gguf_support;

use gguf_support::env;
use pagoda_core::gguf::Gguf;
use pagoda_core::{dequantize_row, QuantKind};

/// Tensors the reference dequantizes, with how many rows.
const COMPARED: [(&str, u64); 6] = [
    ("token_embd.weight", 4),
    ("blk.0.attn_q.weight", 8),
    ("blk.0.attn_norm.weight", 1),
    ("blk.0.ffn_down.weight", 4),
    ("blk.29.attn_v.weight", 8),
    ("output_norm.weight", 1),
];

#[test]
fn smollm2_metadata_and_tensors_read_as_expected() {
    let Some(path) = env::require_model("smollm2_metadata_and_tensors_read_as_expected") else {
        return;
    };
    let bytes = std::fs::read(&path).unwrap();
    let file = Gguf::parse(&bytes).unwrap();
    assert_eq!(file.version(), 3);
    assert_eq!(file.alignment(), 32);
    assert_eq!(file.get_str("general.architecture"), Ok("llama"));
    assert_eq!(file.get_u32("llama.block_count"), Ok(30));
    assert_eq!(file.get_u32("llama.context_length"), Ok(8192));
    assert_eq!(file.get_u32("llama.embedding_length"), Ok(576));
    assert_eq!(file.get_u32("llama.feed_forward_length"), Ok(1536));
    assert_eq!(file.get_u32("llama.attention.head_count"), Ok(9));
    assert_eq!(file.get_u32("llama.attention.head_count_kv"), Ok(3));
    assert_eq!(file.get_u32("llama.rope.dimension_count"), Ok(64));
    assert_eq!(file.get_f32("llama.rope.freq_base"), Ok(100000.0));
    assert_eq!(
        file.get_f32("llama.attention.layer_norm_rms_epsilon"),
        Ok(1e-5)
    );
    assert_eq!(file.get_str("tokenizer.ggml.model"), Ok("gpt2"));
    assert_eq!(file.get_str("tokenizer.ggml.pre"), Ok("smollm"));
    assert_eq!(file.get_bool("tokenizer.ggml.add_bos_token"), Ok(false));
    assert_eq!(file.get_u32("tokenizer.ggml.bos_token_id"), Ok(1));
    assert_eq!(file.get_u32("tokenizer.ggml.eos_token_id"), Ok(2));
    let tokens = file.get_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 49152);
    assert_eq!(tokens.iter().nth(1), Some(&b"<|im_start|>"[..]));
    let types = file.get_i32_array("tokenizer.ggml.token_type").unwrap();
    assert_eq!(types.len(), 49152);
    assert_eq!(
        file.get_str_array("tokenizer.ggml.merges").unwrap().len(),
        48900
    );
    assert!(file
        .get_str("tokenizer.chat_template")
        .unwrap()
        .contains("<|im_start|>"));

    assert_eq!(file.tensor_count(), 272);
    let count = |k| file.tensors().filter(|t| t.kind() == k).count();
    assert_eq!(
        (
            count(QuantKind::Q4_1),
            count(QuantKind::F32),
            count(QuantKind::Q8_0)
        ),
        (210, 61, 1)
    );
    let embd = file.tensor("token_embd.weight").unwrap();
    assert_eq!(
        (embd.kind(), embd.dims()),
        (QuantKind::Q8_0, &[576, 49152][..])
    );
    let q = file.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!((q.kind(), q.dims()), (QuantKind::Q4_1, &[576, 576][..]));
    let k = file.tensor("blk.29.attn_k.weight").unwrap();
    assert_eq!(k.dims(), [576, 192]);

    // Every tensor dequantizes, row by row, to finite values.
    let mut row = Vec::new();
    for t in file.tensors() {
        row.resize(t.row_elems() as usize, 0.0);
        for r in 0..t.rows() {
            dequantize_row(t.kind(), t.row(r).unwrap(), &mut row).unwrap();
            assert!(row.iter().all(|x| x.is_finite()), "{} row {r}", t.name());
        }
    }
}

#[test]
fn smollm2_matches_gguf_reference() {
    let test = "smollm2_matches_gguf_reference";
    let Some(path) = env::require_model(test) else {
        return;
    };
    let Some(python) = env::require_python(test) else {
        return;
    };
    let dir = env::scratch_dir("gguf_model");
    let wanted: Vec<String> = COMPARED.iter().map(|(n, r)| format!("{n}:{r}")).collect();
    let mut args: Vec<&std::path::Path> = vec![&path, &dir];
    args.extend(wanted.iter().map(std::path::Path::new));
    env::run_reference(&python, "model_ref.py", &args);

    let bytes = std::fs::read(&path).unwrap();
    let file = Gguf::parse(&bytes).unwrap();
    let listing = std::fs::read_to_string(dir.join("tensors.tsv")).unwrap();
    let theirs: Vec<&str> = listing.lines().collect();
    assert_eq!(theirs.len() as u64, file.tensor_count());
    for (t, line) in file.tensors().zip(theirs) {
        let dims: Vec<String> = t.dims().iter().map(u64::to_string).collect();
        let ours = format!(
            "{}\t{}\t{}\t{}",
            t.name(),
            t.kind(),
            dims.join(","),
            file.data_offset() as u64 + t.offset()
        );
        assert_eq!(ours, line);
    }
    for (name, rows) in COMPARED {
        let t = file.tensor(name).unwrap();
        let reference = env::read_f32s(&dir.join(format!("{name}.f32")));
        let mut ours = vec![0.0; (t.row_elems() * rows) as usize];
        for (r, out) in ours.chunks_exact_mut(t.row_elems() as usize).enumerate() {
            dequantize_row(t.kind(), t.row(r as u64).unwrap(), out).unwrap();
        }
        assert_eq!(ours.len(), reference.len(), "{name}");
        for (i, (a, b)) in ours.iter().zip(&reference).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{name}[{i}]: ours {a} reference {b}"
            );
        }
    }
}
