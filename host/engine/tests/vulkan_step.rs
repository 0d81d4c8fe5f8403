//! Whole model steps on the Vulkan backend against the CPU backend's
//! forward pass (itself held to an f64 NumPy reference by `real_model.rs`):
//! the same prompt chunk, then a few greedy decode steps, through
//! `StepBackend::forward_step` on both, for the embedded model (dense f32
//! weights uploaded as F32 tensors) and SmolLM2 kept quantized (its Q4_1 /
//! Q6_K / Q8_0 blocks uploaded as they are). Logits within a stated
//! fraction of their range, the same greedy tokens; then both engines give
//! the same greedy continuations of two requests batched together. Under
//! the validation layer with the bounds-checking kernels, which must report
//! nothing. Without a Vulkan device (or SmolLM2) the tests skip with one
//! line; under `CI=true` they fail.

mod support;

use std::sync::Arc;

use pagoda_core::backend::SeqAttention;
use pagoda_core::{KvDtype, PageId, Priority, Slot, PAGE_SIZE};
use pagoda_cpu::CpuBackend;
use pagoda_engine::model::{
    argmax, Activations, Model, ModelConfig, ModelFile, SamplingParams, Seeded, StateRow, StepInput,
};
use pagoda_engine::{
    DeviceProgram, Engine, EngineConfig, EngineStorage, Event, GenRequest, StepBackend,
};
use pagoda_vulkan::{VulkanBackend, VulkanOptions};

/// Worst |device − CPU| logit over the CPU's logit range at that step. The
/// device sums in another order and, with an f16 KV store, runs decode rows
/// through f16 arithmetic where it has `shaderFloat16`; measured: printed
/// by the test.
const TOLERANCE_F32_KV: f32 = 1e-4;
const TOLERANCE_F16_KV: f32 = 5e-3;
/// Where the device has cooperative matrices, a prompt of more than 8
/// tokens goes through their product, which rounds weights and
/// activations to f16 (measured on lavapipe: 3.1e-4 on the embedded model).
const TOLERANCE_COOPMAT: f32 = 2e-3;
/// The same for the tiny random files of make_tiny_gguf.py, whose random
/// K-quant blocks (of nonzero mean) make activations far larger than a
/// trained model's, so f16 operands round more of the logits' range away
/// (measured up to 2.4e-3 on the tiny llama, the same greedy tokens).
const TOLERANCE_COOPMAT_RANDOM: f32 = 5e-3;
/// Where the GPU decode product rounds activations to 8 bits (its integer
/// dot-product variant, the default on devices that accelerate it): the
/// CPU path's own tolerance for 8-bit activations against the reference
/// (`real_model.rs`), since the rounding is of the same kind (runs of 16
/// here, blocks of 32 there).
const TOLERANCE_INT8: f32 = 5e-2;
/// With 8-bit activations the greedy tokens are compared only where the
/// CPU's top two logits are further apart than this (`real_model.rs`'s
/// near tie for that path).
const NEAR_TIE_INT8: f32 = 0.5;

fn open() -> Option<VulkanBackend> {
    open_with(VulkanOptions::from_env())
}

fn open_with(options: VulkanOptions) -> Option<VulkanBackend> {
    let options = VulkanOptions {
        validation: Some(true),
        bounds_checks: Some(true),
        ..options
    };
    match VulkanBackend::new(&options) {
        Ok(b) => Some(b),
        Err(e) if support::in_ci() => panic!("CI=true needs a Vulkan device: {e}"),
        Err(e) => {
            eprintln!("skipping Vulkan step tests: {e}");
            None
        }
    }
}

fn smollm2() -> Option<Model> {
    let path = support::require_model("vulkan_step")?;
    let file = Arc::new(ModelFile::open(path).unwrap());
    Some(Model::from_file(file).unwrap())
}

fn embedded() -> Model {
    Model::seeded(ModelConfig::EMBEDDED, 7).unwrap()
}

/// One sequence stepped by hand on one backend: its own store and buffers.
struct Run<B: StepBackend> {
    backend: B,
    store: B::KvStore,
    prepared: B::Prepared,
    act: Activations,
    pages: Vec<PageId>,
}

impl<B: StepBackend> Run<B> {
    fn new(mut backend: B, model: &Model, dtype: KvDtype, tokens: usize) -> Self {
        let geometry = model.config().kv_geometry(dtype).unwrap();
        let n = tokens.div_ceil(PAGE_SIZE) as u32;
        let store = backend.create_kv_store(geometry, 2 * n + 1).unwrap();
        // Pages out of order, as a pool hands them out after some churn.
        let pages = (0..n).map(|i| PageId::from_index(2 * n - 2 * i)).collect();
        Self {
            backend,
            store,
            prepared: B::Prepared::default(),
            act: Activations::with_threads(1).unwrap(),
            pages,
        }
    }

    /// Tokens at positions `start..`; returns the last row's logits.
    fn step(&mut self, model: &Model, start: usize, tokens: &[u32]) -> Vec<f32> {
        let end = start + tokens.len();
        let positions: Vec<u32> = (start as u32..end as u32).collect();
        let slots: Vec<Slot> = positions
            .iter()
            .map(|&p| self.pages[p as usize / PAGE_SIZE].slot(p % PAGE_SIZE as u32))
            .collect();
        let seqs = [SeqAttention {
            pages: &self.pages,
            context_len: end as u32,
            query_start: 0,
            query_len: tokens.len() as u32,
        }];
        let rows = [tokens.len() as u32 - 1];
        let input = StepInput {
            places: &[],
            groups: &[],
            tokens,
            positions: &positions,
            slots: &slots,
            seqs: &seqs,
            states: &[StateRow { row: 0, owner: 1 }],
            sample_rows: &rows,
            prompt_rows: tokens.len(),
        };
        let mut logits = Vec::new();
        self.backend
            .forward_step(
                model,
                &mut self.store,
                &mut self.prepared,
                &input,
                &mut self.act,
                &mut logits,
            )
            .unwrap_or_else(|e| panic!("{}: {e:?}", self.backend.name()));
        logits
    }
}

/// A prompt chunk then `decode` greedy steps on both backends; checks the
/// logits and tokens agree. Returns the worst normalised difference and
/// whether the steps ran whole on the device.
fn compare(
    model: &Model,
    gpu: VulkanBackend,
    dtype: KvDtype,
    prompt: &[u32],
    decode: usize,
) -> (f32, bool) {
    compare_within(model, gpu, dtype, prompt, decode, TOLERANCE_COOPMAT)
}

/// [`compare`] allowing `coopmat` of the range where the prompt's products
/// run in cooperative matrices.
fn compare_within(
    model: &Model,
    gpu: VulkanBackend,
    dtype: KvDtype,
    prompt: &[u32],
    decode: usize,
    coopmat_tolerance: f32,
) -> (f32, bool) {
    let total = prompt.len() + decode;
    // The prompt's products in f16 cooperative matrices (more than the
    // decode product's 8 rows), and the later steps attending to its KV.
    let coopmat = gpu.info().use_coopmat && prompt.len() > 8;
    // Where CI runs the cooperative-matrix lavapipe, they must be used.
    if std::env::var("PAGODA_EXPECT_COOPMAT").is_ok_and(|v| v == "1") {
        assert!(
            gpu.info().use_coopmat,
            "no cooperative matrices on {}",
            gpu.info()
        );
    }
    let mut cpu = Run::new(CpuBackend::with_threads(1).unwrap(), model, dtype, total);
    let mut dev = Run::new(gpu, model, dtype, total);
    let tolerance = match dtype {
        KvDtype::F32 => TOLERANCE_F32_KV,
        _ => TOLERANCE_F16_KV,
    };
    let tolerance = if coopmat {
        eprintln!("the prompt's products in cooperative matrices");
        tolerance.max(coopmat_tolerance)
    } else {
        tolerance
    };
    let int8 = gpu_int8(&dev.backend);
    let tolerance = if int8 {
        eprintln!("the decode products on 8-bit activations");
        tolerance.max(TOLERANCE_INT8)
    } else {
        tolerance
    };
    let (mut worst, mut at, mut input) = (0f32, 0, prompt.to_vec());
    for step in 0..=decode {
        let want = cpu.step(model, at, &input);
        let got = dev.step(model, at, &input);
        if let Some(nanos) = dev.backend.last_program_nanos() {
            eprintln!(
                "{} tokens: {} dispatches, {} barriers, {:.1} ms on the device",
                input.len(),
                dev.backend.last_program_dispatches(),
                dev.backend.last_program_barriers(),
                nanos * 1e-6
            );
        }
        assert_eq!(got.len(), want.len());
        let (lo, hi) = want
            .iter()
            .fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        let diff = got
            .iter()
            .zip(&want)
            .fold(0f32, |m, (g, w)| m.max((g - w).abs()));
        let norm = diff / (hi - lo);
        worst = worst.max(norm);
        assert!(norm <= tolerance, "{dtype:?} step {step}: {norm:.3e}");
        let token = argmax(&want);
        if !int8 || margin(&want) > NEAR_TIE_INT8 {
            assert_eq!(
                argmax(&got),
                token,
                "{dtype:?} step {step}: greedy tokens differ"
            );
        }
        at += input.len();
        input = vec![token];
    }
    let on_device = VulkanBackend::whole_steps_on_device(&dev.prepared);
    assert!(on_device.is_some());
    let messages = dev.backend.validation_messages();
    assert!(messages.is_empty(), "validation layer: {messages:#?}");
    (worst, on_device == Some(true))
}

/// Whether `gpu`'s decode products round activations to 8 bits.
fn gpu_int8(gpu: &VulkanBackend) -> bool {
    gpu.info().use_integer_dot && gpu.info().matvec_batch > 0
}

/// How far the largest logit is above the next.
fn margin(logits: &[f32]) -> f32 {
    let (first, second) = logits.iter().fold((f32::MIN, f32::MIN), |(a, b), &v| {
        if v > a {
            (v, a)
        } else {
            (a, b.max(v))
        }
    });
    first - second
}

#[test]
fn the_embedded_model_steps_on_the_device_as_on_the_cpu() {
    let model = embedded();
    let prompt: Vec<u32> = (0..21).map(|i| (i * 97 + 5) % 2048).collect();
    for dtype in [KvDtype::F32, KvDtype::F16] {
        let Some(gpu) = open() else { return };
        let (worst, on_device) = compare(&model, gpu, dtype, &prompt, 4);
        assert!(on_device);
        eprintln!("embedded, {dtype:?} KV: worst logit difference / range {worst:.2e}");
    }
}

/// The embedded model with what Qwen2 and Llama 3 files add: query, key
/// and value biases, an output head of its own, rotary frequency factors.
fn embedded_with_biases() -> Model {
    let c = ModelConfig::EMBEDDED;
    let extra = Seeded {
        biases: true,
        rope_factors: Some((0..c.rope_dim / 2).map(|i| 1.0 + i as f32 / 8.0).collect()),
    };
    let model = Model::seeded_with(c, 11, &extra).unwrap();
    assert!(model.has_biases() && !model.is_tied());
    model
}

#[test]
fn biases_an_untied_head_and_rope_factors_step_on_the_device_as_on_the_cpu() {
    let model = embedded_with_biases();
    let Some(gpu) = open() else { return };
    let prompt: Vec<u32> = (0..9).map(|i| (i * 31 + 2) % 2048).collect();
    let (worst, on_device) = compare(&model, gpu, KvDtype::F32, &prompt, 2);
    assert!(on_device);
    eprintln!("embedded with biases, F32 KV: worst logit difference / range {worst:.2e}");
}

/// Every architecture's tiny file (make_tiny_gguf.py: llama, qwen2, qwen3
/// with QK-norm, Llama 3 scaling with attention wider than the hidden size,
/// phi3 with fused tensors and LongRoPE, Gemma 2 and 3, YaRN, SmolLM3's
/// unrotated layers, OLMo 2's post-norms, GLM-4, the Qwen-VL text models,
/// ERNIE 4.5, Seed-OSS, EXAONE 3.5 and 4, Ministral 3's temperature,
/// Hunyuan's QK-norm after the rotary, Cohere's LayerNorms and parallel
/// layers, OLMo 3's windows and two rotary tables), its program
/// lowered to the device, against the CPU backend (which the
/// synthetic_gguf tests hold to the NumPy reference): a 12-token prompt
/// (the prefill product) and two decode steps. The mixtures of experts
/// (Mixtral-style llama, qwen3moe, qwen2moe, granitemoe, glm4moe,
/// qwen3vlmoe, ernie4_5-moe, olmoe), Granite's scaled residual stream and
/// LFM2's hybrids (their convolutions' recurrent state is the host's)
/// have no device lowering: their products run on
/// the host, attention on the device, with the same logits. The Q2_K, Q3_K
/// and IQ4 matrices (lowbits) run on the device's products.
#[test]
fn every_architecture_steps_on_the_device_as_on_the_cpu() {
    let Some(dir) = support::tiny_models("vulkan_step_archs") else {
        return;
    };
    let prompt: Vec<u32> = (0..12).map(|i| (i * 37 + 11) % 256).collect();
    // gemma3 and gemma2: the 12 tokens cross their 5-token window.
    for arch in support::TINY_MODELS {
        // f32 activations: these random blocks are no test of 8-bit
        // rounding (see the SmolLM2 test of it).
        let Some(gpu) = open_with(VulkanOptions {
            integer_dot: Some(false),
            ..VulkanOptions::from_env()
        }) else {
            return;
        };
        let model = Model::load(dir.join(format!("{arch}.gguf"))).unwrap();
        let (worst, on_device) = compare_within(
            &model,
            gpu,
            KvDtype::F32,
            &prompt,
            2,
            TOLERANCE_COOPMAT_RANDOM,
        );
        // Granite's scaled residual adds are not lowered either, nor the
        // hybrids' recurrent layers (their state stays on the host).
        let host = matches!(
            arch,
            "mixtral"
                | "qwen3moe"
                | "qwen2moe"
                | "qwen2moe_defaults"
                | "granite"
                | "granitemoe"
                | "glm4moe"
                | "qwen3vlmoe"
                | "ernie4_5_moe"
                | "olmoe"
                | "lfm2"
                | "lfm2moe"
                | "qwen35"
                | "qwen35moe"
                | "qwen3next"
                | "minimax_m2"
                | "granite_hybrid"
                | "granite_hybrid_moe"
                | "nemotron_h"
                | "nemotron_h_moe"
        );
        assert_eq!(on_device, !host, "{arch}");
        eprintln!("{arch}, F32 KV: worst logit difference / range {worst:.2e}");
    }
}

/// gpt-oss's attention sinks have no device kernel: an engine of the tiny
/// gpt-oss model on the device is refused by name when it is built, not
/// at its first step, while the CPU backend's runs it.
#[test]
fn a_model_with_attention_sinks_is_refused_on_the_device_when_built() {
    let Some(dir) = support::tiny_models("vulkan_step_sinks") else {
        return;
    };
    let model = Model::load(dir.join("gpt_oss.gguf")).unwrap();
    let Some(gpu) = open_with(VulkanOptions::from_env()) else {
        return;
    };
    let config = EngineConfig {
        kv_pages: 16,
        ..EngineConfig::default()
    };
    let mut storage = EngineStorage::new(&config, model.config().max_context);
    match Engine::new(&model, gpu, &config, &mut storage) {
        Err(e) => assert!(e.to_string().contains("attention sinks"), "{e}"),
        Ok(_) => panic!("an engine of a model with sinks was built on the device"),
    }
    let (tokens, _) = continuations(&model, CpuBackend::new());
    assert!(tokens.iter().all(|t| t.len() == 4), "{tokens:?}");
}

/// SmolLM2 with the GPU decode product forced onto 8-bit activations (its
/// integer dot-product variant), wherever the device has the extension,
/// accelerated or not: an 8-token prompt (within the decode product's
/// batch) and two decode steps, against the CPU backend's f32 activations.
/// Measured 3.7e-2 of the logits' range on lavapipe; the CPU's own 8-bit
/// path is 3.1e-2 from the reference. (The tiny random files are no test of this
/// rounding: their random K-quant blocks make activations with outliers
/// that real models' do not have, 0.14 of the range on the tiny llama.)
#[test]
fn smollm2_steps_on_8_bit_activations_within_their_rounding() {
    let Some(model) = smollm2() else { return };
    let Some(gpu) = open_with(VulkanOptions {
        integer_dot: Some(true),
        ..VulkanOptions::from_env()
    }) else {
        return;
    };
    if !gpu_int8(&gpu) {
        eprintln!(
            "skipped: no integer dot product or GPU decode product on {}",
            gpu.info()
        );
        return;
    }
    let prompt = [1, 9690, 198, 2683, 359, 253, 5356, 5646];
    let (worst, on_device) = compare_within(&model, gpu, KvDtype::F32, &prompt, 2, TOLERANCE_INT8);
    assert!(on_device);
    eprintln!("SmolLM2, 8-bit activations: worst logit difference / range {worst:.2e}");
}

#[test]
fn smollm2_steps_on_the_device_as_on_the_cpu() {
    let Some(model) = smollm2() else { return };
    let Some(gpu) = open() else { return };
    // The opening of real_model.rs's ChatML prompt (`<|im_start|>` = 1):
    // 12 tokens, past the decode product's 8 rows, so the prompt takes the
    // prefill product (tiled, or in cooperative matrices) on the model's
    // own Q4_1 / Q6_K / Q8_0 blocks. Lavapipe takes seconds a step here,
    // so the decode steps are few.
    let prompt = [
        1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308,
    ];
    let (worst, on_device) = compare(&model, gpu, KvDtype::F32, &prompt, 2);
    assert!(on_device);
    eprintln!("SmolLM2, F32 KV: worst logit difference / range {worst:.2e}");
}

/// Gemma 3 270M, a prompt longer than its 512-token window: whole steps
/// on the device where its weights fit one binding, else (lavapipe's 128
/// MiB) its windowed and global attention on the device, the rest on the
/// CPU; against the CPU backend.
#[test]
fn gemma3_steps_on_the_device_as_on_the_cpu() {
    let Some(path) = support::require_gemma("vulkan_step") else {
        return;
    };
    let Some(gpu) = open() else { return };
    let model = Model::load(path).unwrap();
    let prompt: Vec<u32> = (0..530).map(|i| 2 + (i * 7919) % 200_000).collect();
    let (worst, on_device) = compare(&model, gpu, KvDtype::F16, &prompt, 2);
    eprintln!("Gemma 3 270M (whole steps on the device: {on_device}): {worst:.2e}");
}

#[test]
fn weights_beyond_one_binding_are_split_between_tensors_or_stay_on_the_host() {
    let Some(path) = support::require_model("vulkan_step") else {
        return;
    };
    // Dequantized to f32: 540 MB, its largest tensor (the embedding) 113 MB.
    let model = Model::from_gguf(&ModelFile::open(path).unwrap().gguf().unwrap()).unwrap();
    let embedding = 4 * u64::from(model.config().vocab) * u64::from(model.config().hidden);
    // Bindings of 128 MiB (lavapipe's own): whole steps over five of them.
    // Bindings smaller than the embedding: products on the host,
    // attention on the device.
    for (cap, whole) in [(128u64 << 20, true), (embedding / 2, false)] {
        let Some(gpu) = open_with(VulkanOptions {
            max_weight_chunk_bytes: Some(cap),
            ..VulkanOptions::from_env()
        }) else {
            return;
        };
        let (worst, on_device) = compare(&model, gpu, KvDtype::F16, &[1, 9690, 198], 1);
        assert_eq!(on_device, whole, "bindings of {cap} bytes");
        eprintln!("dense SmolLM2, bindings of {cap} bytes (whole steps on the device: {on_device}): {worst:.2e}");
    }
}

/// Greedy continuations of two requests batched in one engine, and what
/// the engine says its last step cost on a device.
fn continuations<B: StepBackend>(
    model: &Model,
    backend: B,
) -> (Vec<Vec<u32>>, Option<DeviceProgram>) {
    let config = EngineConfig {
        kv_pages: 16,
        ..EngineConfig::default()
    };
    let mut storage = EngineStorage::new(&config, model.config().max_context);
    let mut engine = Engine::new(model, backend, &config, &mut storage).unwrap();
    let handles: Vec<_> = [
        vec![3u32, 14, 15, 92, 65, 35, 89, 79, 32, 38],
        vec![27, 18, 28],
    ]
    .into_iter()
    .enumerate()
    .map(|(tag, prompt)| {
        let request = GenRequest {
            tag: tag as u64,
            prompt,
            max_new_tokens: 4,
            sampling: SamplingParams::GREEDY,
            seed: 0,
            stop_tokens: Vec::new(),
        };
        let now = engine.now();
        engine.submit(request, Priority::Normal, now).unwrap()
    })
    .collect();
    while !engine.is_idle() {
        engine.step().unwrap();
    }
    let device = engine.last_device_step();
    let outputs = handles
        .into_iter()
        .map(|h| loop {
            match h.recv() {
                Some(Event::Finished(done)) => break done.output,
                Some(Event::Token { .. }) => {}
                other => panic!("unexpected {other:?}"),
            }
        })
        .collect();
    (outputs, device)
}

#[test]
fn engines_on_both_backends_give_the_same_greedy_tokens() {
    let model = embedded();
    let Some(gpu) = open() else { return };
    let log = gpu.validation_log();
    let (want, on_host) = continuations(&model, CpuBackend::with_threads(1).unwrap());
    let (got, on_device) = continuations(&model, gpu);
    assert_eq!(got, want);
    // The bench's per-step figures: none on the host; on the device, the
    // whole step (at least norm, q, k, v, rope, scatter, attention, o and
    // the MLP's five ops per layer) in one program.
    assert_eq!(on_host, None);
    let step = on_device.expect("a device step");
    assert!(
        step.dispatches >= 10 * model.config().layers as usize,
        "{step:?}"
    );
    assert!(
        log.messages().is_empty(),
        "validation layer: {:#?}",
        log.messages()
    );
}
