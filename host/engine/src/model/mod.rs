//! A decoder model: its shape, its architecture as data (a layer program
//! built once at load by one file per architecture in `arch/`, over
//! matrices whose format is a property of the tensor), the CPU backend's
//! interpreter of that program (`cpu/`), the Vulkan lowering (`device/`),
//! and sampling.
//!
//! Supported: `llama` (Llama 1-3.x, Mistral, Mistral-Nemo, SmolLM,
//! TinyLlama), `qwen2`, `qwen3`, `phi3`, `gemma2`, `gemma3` and the other
//! [`SUPPORTED_ARCHITECTURES`]' GGUF files (LFM2's hybrids with their
//! recurrent state, `recurrent.rs`), with their matrices
//! quantized in the memory map or dequantized to f32, and a seeded model of
//! any Llama shape.

mod arch;
mod config;
mod constraint;
mod cpu;
mod dequant;
mod device;
mod experts;
mod file;
mod forward;
mod input;
mod load_error;
mod meta;
mod precision;
mod program;
mod recurrent;
mod repack_cache;
mod rope;
mod sampling;
mod tensors;

pub use config::{ModelConfig, ModelError, SUPPORTED_ARCHITECTURES};
pub use constraint::{Constraint, ConstraintSpec, ConstraintState};
pub use cpu::Activations;
pub use device::DeviceModel;
pub use file::ModelFile;
pub use forward::{Holding, Model, Seeded};
pub use input::{ForwardError, GroupRows, StepInput};
pub use load_error::LoadError;
pub use precision::ActPrecision;
pub use recurrent::{StateRow, MAX_STATE_ROWS};
pub use repack_cache::{RepackCacheHandle, RepackCacheUse};
pub use rope::RopeMode;
pub use sampling::{
    argmax, Sampler, SamplingError, SamplingParams, TokenLogprobs, MAX_TOP_LOGPROBS,
};
pub use tensors::Matrix;
