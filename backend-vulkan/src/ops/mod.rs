//! Model ops on the device: the kernels `shaders/kernels.list` marks
//! `-DOPS` (matrix products over GGUF blocks dequantized in registers, the
//! embedding lookup, RMSNorm, rotary embedding, SwiGLU, the residual add
//! and greedy argmax), with their own descriptor layout. The product has
//! two shapes per block type ([`matmul_kernels`]): the decode product for
//! batches up to 8 (several output rows per workgroup, reduced by subgroup
//! add where the device has it), and the tiled product for larger batches
//! (weight tiles dequantized into shared memory once per 32 activation
//! rows); the planner picks by batch.
//!
//! A program is a list of [`Op`]s over three buffers: the weights (GGUF
//! blocks as a file lays them out, addressed by byte), the activations
//! (f32, by element) and meta (u32: token ids, positions, sampled tokens).
//! [`VulkanBackend::run_ops`](crate::VulkanBackend::run_ops) checks every op's ranges on the host, then
//! records the whole program into one command buffer, one dispatch per op
//! with a barrier after each, and submits it once. Weights uploaded with
//! [`VulkanBackend::upload_weights`](crate::VulkanBackend::upload_weights) stay on the device for every later
//! program. This is the layer a whole-model step on Vulkan is built from:
//! [`VulkanBackend::run_step_on`](crate::VulkanBackend::run_step_on) runs a [`StepProgram`], whose
//! [`StepOp`]s add the KV scatter and paged attention to the same
//! command buffer.

mod hazard;
mod op;
mod pipelines;
mod program;
mod rounding;
mod step;

pub use op::{GluActivation, Op};
pub(crate) use pipelines::OpPipelines;
pub use pipelines::{matmul_kernel, matmul_kernels, MatmulKernels};
pub use program::VulkanWeights;
pub use step::{KernelProfile, ProgramHostTime, StepOp, StepProgram};
