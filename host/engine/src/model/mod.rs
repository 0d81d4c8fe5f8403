//! A Llama-architecture decoder: configuration, weights from any source, the
//! batched forward pass over the paged KV cache, and sampling.

mod config;
mod forward;
mod sampling;
mod weights;

pub use config::{ModelConfig, ModelError};
pub use forward::{Activations, ForwardError, Model, StepInput};
pub use sampling::{argmax, Sampler, SamplingError, SamplingParams};
pub use weights::{LayerWeights, Weights};
