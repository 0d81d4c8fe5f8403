//! The tiny random models make_tiny_gguf.py writes, checked against the
//! independent NumPy forward pass (forward_ref.py): through both loaders
//! (dense, quantized in place), both KV dtypes, and repacked.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use pagoda_core::KvDtype;
use pagoda_cpu::quant::interleave::multiplies_in_place;
use pagoda_cpu::Isa;
use pagoda_engine::model::{ActPrecision, Holding, LoadError, Model, ModelConfig, ModelFile};

/// The dense tiny models synthetic_gguf.rs checks against the reference.
pub const DENSE: [&str; 27] = [
    "qwen2",
    "llama",
    "qwen3",
    "llama3",
    "phi3",
    "gemma3",
    "gemma2",
    "granite",
    "yarn",
    "smollm3",
    "olmo2",
    "lowbits",
    "glm4",
    "glm4_fused",
    "qwen2vl",
    "qwen3vl",
    "ernie4_5",
    "seed_oss",
    "exaone",
    "exaone4",
    "exaone4_full",
    "mistral3",
    "hunyuan_dense",
    "command_r",
    "cohere2",
    "olmo3",
    "olmo3_yarn",
];

/// The tiny mixtures of experts (and DeepSeek's latent attention)
/// experts_gguf.rs checks against the reference.
pub const MIXTURES: [&str; 14] = [
    "mixtral",
    "qwen3moe",
    "qwen2moe",
    "qwen2moe_defaults",
    "granitemoe",
    "glm4moe",
    "gpt_oss",
    "deepseek2_lite",
    "deepseek2_v3",
    "deepseek2_legacy",
    "qwen3vlmoe",
    "ernie4_5_moe",
    "olmoe",
    "minimax_m2",
];

/// The tiny hybrids of attention and recurrent layers (LFM2's, Qwen3.5's
/// and Qwen3-Next's) hybrid_gguf.rs checks against the reference.
pub const HYBRIDS: [&str; 9] = [
    "lfm2",
    "lfm2moe",
    "qwen35",
    "qwen35moe",
    "qwen3next",
    "granite_hybrid",
    "granite_hybrid_moe",
    "nemotron_h",
    "nemotron_h_moe",
];

/// Tiny models only the CPU backend runs (Vulkan has no attention sinks,
/// and its kernels stop short of latent attention's head of 576): the
/// rest of the files are [`super::TINY_MODELS`].
pub const CPU_ONLY: [&str; 4] = [
    "gpt_oss",
    "deepseek2_lite",
    "deepseek2_v3",
    "deepseek2_legacy",
];

/// Logits may differ from the f64 reference by this fraction of their
/// range (max - min over all positions): f32 compute and the KV cache's
/// rounding. Measured: see the printed figures.
pub const TOLERANCE_F32: f32 = 3e-5;
pub const TOLERANCE_F16: f32 = 5e-3;

/// Logits of the repacked model (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K
/// and Q6_K matrices interleaved eight rows at a time) may differ from the
/// plain layout's, both with 8-bit activations, by this fraction of their
/// range. Each product differs only in the order of its f32 adds (within
/// 1e-5 of Σ|w·x|: `backend-cpu/tests/qmatmul_interleaved.rs`), but the
/// next layer rounds its activations to 8 bits, and a last-bit difference
/// that moves one value across a rounding boundary moves it a whole step:
/// measured up to 3.6e-3 of the range over these prompts (1e-7 where no
/// value crossed). A wrong kernel moves logits by a good part of their
/// range.
const TOLERANCE_REPACKED: f32 = 1e-2;

/// The repacked tolerance of the tiny DeepSeek and Qwen3.5 files, whose
/// 8-bit logits are the most sensitive of all: each layout alone is 0.9e-2
/// to 1.4e-1 of the range from the f64 reference (Qwen3.5's 0.9e-2 to
/// 1.35e-1, where LFM2's are 0.6e-2 to 4.3e-2 and the other mixtures' 0.2e-2
/// to 4e-2), the two alike, and the layouts measured up to 3.3e-2 apart
/// (Qwen3.5's 2.4e-2: a rounding step taken differently carries on in the
/// delta nets' states). Their f32 logits, repacked or not, are held to
/// [`TOLERANCE_F32`].
const TOLERANCE_REPACKED_SENSITIVE: f32 = 6e-2;

/// The prompts every tiny model runs: 14 tokens, 40 (past Gemma's 5-token
/// windows) and one.
pub fn prompts() -> Vec<Vec<u32>> {
    vec![
        vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 200, 255, 0, 17],
        (0..40).map(|i| (i * 37 + 11) % 256).collect(),
        vec![42],
    ]
}

/// Every file make_tiny_gguf.py writes, and the reference's logits over
/// [`prompts`] for each of `archs` (`{arch}/logits_{i}.f32`), made once
/// per test binary in a scratch folder named after it; `None` (the test
/// skipped, with one line) without the Python reference.
pub fn fixtures(archs: &[&str]) -> Option<&'static PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let name = env!("CARGO_CRATE_NAME");
        let python = super::require_python(name)?;
        let dir = super::scratch_dir(name);
        super::run_reference(&python, "make_tiny_gguf.py", &[dir.as_os_str()]);
        let prompts_file = dir.join("prompts.txt");
        super::write_prompts(&prompts_file, &prompts());
        for arch in archs {
            let out = dir.join(arch);
            std::fs::create_dir_all(&out).unwrap();
            let model = dir.join(format!("{arch}.gguf"));
            super::run_reference(
                &python,
                "forward_ref.py",
                &[
                    model.as_os_str(),
                    out.as_os_str(),
                    prompts_file.as_os_str(),
                    "0".as_ref(),
                ],
            );
        }
        Some(dir)
    })
    .as_ref()
}

/// Loads `path` dense: every matrix dequantized to f32.
pub fn load(path: &Path) -> Result<Model, LoadError> {
    let file = ModelFile::open(path)?;
    Model::from_gguf(&file.gguf()?)
}

/// A way to load a model file.
pub type Loader = fn(&Path) -> Result<Model, LoadError>;

/// Both loaders: dense, then quantized in place.
pub fn loaders() -> [(&'static str, Loader); 2] {
    [("dense", load), ("quantized", |p| Model::load(p))]
}

/// Checks `{arch}.gguf` of `dir` (made by [`fixtures`]) against the
/// reference's logits, through both loaders and both KV dtypes and
/// repacked; returns its configuration.
pub fn agrees_with_reference(dir: &Path, arch: &str) -> ModelConfig {
    let path = dir.join(format!("{arch}.gguf"));
    let dense = load(&path).expect("load the tiny model");
    let quantized = Model::load(&path).expect("load the tiny model in place");
    assert!(!dense.is_quantized() && quantized.is_quantized());
    assert_eq!(dense.config(), quantized.config());
    assert_eq!(dense.parameters(), quantized.parameters());
    let runs = [
        (&dense, KvDtype::F32, TOLERANCE_F32),
        (&dense, KvDtype::F16, TOLERANCE_F16),
        (&quantized, KvDtype::F32, TOLERANCE_F32),
        (&quantized, KvDtype::F16, TOLERANCE_F16),
    ];
    for (model, dtype, tolerance) in runs {
        let path_name = if model.is_quantized() {
            "quantized"
        } else {
            "dense"
        };
        for (i, tokens) in prompts().iter().enumerate() {
            let reference = super::read_f32s(&dir.join(arch).join(format!("logits_{i}.f32")));
            let ours = super::logits_every_position(model, tokens, dtype, 7);
            let (diff, range) = super::max_diff(&ours, &reference);
            println!(
                "{arch} {path_name} {dtype:?} prompt {i} ({} tokens): max |diff| {diff:.2e} over a range of {range:.2} ({:.2e} of it)",
                tokens.len(),
                diff / range
            );
            assert!(
                diff <= tolerance * range,
                "{arch} {path_name} {dtype:?} prompt {i}: max |diff| {diff} > {tolerance} × range {range}"
            );
        }
    }
    repacked_agrees(arch, &path, &dir.join(arch));
    *dense.config()
}

/// Whether the CPU multiplies any of `model`'s matrix types interleaved
/// in place (then the loader repacks them).
pub fn repacks(model: &Model) -> bool {
    model
        .matrices()
        .any(|m| multiplies_in_place(Isa::detect(), m.kind()))
}

/// The repacked model: with f32 activations (every interleaved row copied
/// back out to the plain layout) against the reference, and with 8-bit
/// activations (the interleaved kernels) against the plain layout's.
fn repacked_agrees(arch: &str, path: &Path, reference: &Path) {
    let file = Arc::new(ModelFile::open(path).expect("map the tiny model"));
    let open = |h| Model::open(Arc::clone(&file), h).expect("load the tiny model");
    let f32_packed = open(Holding::Interleaved(ActPrecision::F32));
    let packed = open(Holding::Interleaved(ActPrecision::Int8));
    let plain = open(Holding::Mapped(ActPrecision::Int8));
    let interleaved = packed.matrices().filter(|m| m.is_interleaved()).count();
    // Only where the CPU multiplies interleaved rows in place: elsewhere the
    // loader keeps every matrix plain.
    assert_eq!(
        interleaved > 0,
        repacks(&plain),
        "{arch}: {interleaved} matrices interleaved"
    );
    assert_eq!(packed.parameters(), plain.parameters());
    let tolerance = if arch.starts_with("deepseek2") || arch.starts_with("qwen3") {
        TOLERANCE_REPACKED_SENSITIVE
    } else {
        TOLERANCE_REPACKED
    };
    for (i, tokens) in prompts().iter().enumerate() {
        let want = super::read_f32s(&reference.join(format!("logits_{i}.f32")));
        let ours = super::logits_every_position(&f32_packed, tokens, KvDtype::F32, 7);
        let (diff, range) = super::max_diff(&ours, &want);
        assert!(
            diff <= TOLERANCE_F32 * range,
            "{arch} repacked f32 prompt {i}: max |diff| {diff} > {TOLERANCE_F32} × range {range}"
        );
        let a = super::logits_every_position(&packed, tokens, KvDtype::F32, 7);
        let b = super::logits_every_position(&plain, tokens, KvDtype::F32, 7);
        let (diff, range) = super::max_diff(&a, &b);
        println!(
            "{arch} repacked int8 prompt {i}: {interleaved} matrices interleaved, max |diff| from the plain layout {diff:.2e} ({:.2e} of the range)",
            diff / range
        );
        assert!(
            diff <= tolerance * range,
            "{arch} repacked int8 prompt {i}: max |diff| {diff} > {tolerance} × range {range}"
        );
    }
}
