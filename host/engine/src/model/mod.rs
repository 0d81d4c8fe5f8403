//! A Llama-architecture decoder: configuration, weights from any source
//! (seeded, or a GGUF file's `llama` or `qwen2` model, either dequantized to
//! f32 or kept quantized in the memory map), the batched forward pass over
//! the paged KV cache, and sampling.

mod config;
mod dequant;
mod device;
mod file;
mod forward;
mod load;
mod load_error;
mod qforward;
mod quantized;
mod sampling;
mod weights;

pub use config::{ModelConfig, ModelError};
pub use file::ModelFile;
pub use forward::{Activations, ForwardError, Model, StepInput};
pub use load_error::LoadError;
pub use quantized::{ActPrecision, QuantTensor, QuantizedWeights};
pub use sampling::{argmax, Sampler, SamplingError, SamplingParams};
pub use weights::{LayerWeights, Weights};
