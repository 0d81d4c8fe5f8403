//! Whole model steps on the Vulkan backend: on a model's first step the
//! weights are laid out ([`image`]) and uploaded once, kept in the
//! backend's [`DeviceModel`] (the state the engine keeps for the backend,
//! beside its KV store); every step then runs as one step program
//! ([`program`], the model's program lowered): embedding, every layer
//! (attention through the paged KV store included), the output head for the
//! sampled rows, one submission, and only the logits come back.
//!
//! A model whose weights do not fit one storage binding of the device
//! (`maxStorageBufferRange`, 128 MiB on lavapipe) runs as before: the
//! products on the CPU, attention on the device. So does a mixture of
//! experts, whose routing has no device lowering yet, and a model whose
//! blocks are scaled before the residual add (Granite).

mod image;
mod program;

use pagoda_core::QuantKind;
use pagoda_vulkan::{StepProgram, VulkanBackend, VulkanError, VulkanKvStore, VulkanWeights};

use super::cpu::Activations;
use super::forward::Model;
use super::input::{ForwardError, StepInput};
use super::program::Program;
use crate::backend::{greedy_tokens, DeviceKernel, DeviceProgram, StepBackend};
use image::Image;

/// A model's weights on the device, or why they are not there: what the
/// Vulkan backend prepares for a model.
#[derive(Debug, Default)]
pub struct DeviceModel {
    /// The [`Model`] they are of, once a step ran.
    model: Option<u64>,
    /// `None`: too large for the device, or a program the step program does
    /// not lower ([`lowers`]); steps run the host's forward pass.
    resident: Option<Box<Resident>>,
}

#[derive(Debug)]
struct Resident {
    weights: VulkanWeights,
    image: Image,
}

impl DeviceModel {
    /// Whether the last model run runs whole steps on the device
    /// (`Some(true)`), runs only attention there because its weights do
    /// not fit one buffer binding or its program is not lowered, a mixture
    /// of experts say (`Some(false)`), or has not run yet (`None`).
    pub fn whole_steps_on_device(&self) -> Option<bool> {
        self.model.map(|_| self.resident.is_some())
    }
}

/// Uploads `model`'s weights unless `device` already holds them.
fn make_resident(
    backend: &mut VulkanBackend,
    model: &Model,
    device: &mut DeviceModel,
) -> Result<(), VulkanError> {
    if device.model == Some(model.id()) {
        return Ok(());
    }
    // The old model's weights go first, so both are never held at once.
    *device = DeviceModel::default();
    if !lowers(model.program()) {
        device.model = Some(model.id());
        return Ok(());
    }
    let (image, bytes) = Image::new(model.program());
    // As many storage bindings as the weights need, split between tensors,
    // each filled from the model's own bytes a staging piece at a time.
    let fill = |at: u64, dst: &mut [u8]| bytes.fill(at, dst);
    let resident = match backend.upload_weights_with(bytes.len(), &image.cuts, fill) {
        Ok(weights) => Some(Box::new(Resident { weights, image })),
        Err(VulkanError::Unsupported(_)) => None,
        Err(e) => return Err(e),
    };
    *device = DeviceModel {
        model: Some(model.id()),
        resident,
    };
    Ok(())
}

/// Whether the step program can run `program` whole: not a mixture of
/// experts (the routing has no device lowering) nor latent attention (its
/// per-head products and spans have none) nor a short convolution (its
/// recurrent state stays on the host), not a residual stream
/// whose blocks are scaled (Granite; the device's add does not scale), and
/// every matrix of a type the device's products read (BF16 is widened on
/// upload).
pub(super) fn lowers(program: &Program) -> bool {
    program.experts().next().is_none()
        && program.latent.is_none()
        && !program.is_recurrent()
        && !program.has_sinks()
        && program.residual_scale == 1.0
        && program.matrices().all(|m| {
            m.kind() == QuantKind::BF16 || pagoda_vulkan::matmul_kernels(m.kind()).is_some()
        })
}

/// Runs one step as one program: the logits come back, or with `tokens`
/// only each sampled row's argmax. `false`: the model is not on the device,
/// nothing ran.
fn device_step(
    backend: &mut VulkanBackend,
    model: &Model,
    store: &mut VulkanKvStore,
    device: &mut DeviceModel,
    input: &StepInput<'_>,
    logits: &mut Vec<f32>,
    tokens: Option<&mut Vec<u32>>,
) -> Result<bool, VulkanError> {
    if input.tokens.is_empty() {
        return Ok(false);
    }
    make_resident(backend, model, device)?;
    let Some(Resident { weights, image }) = device.resident.as_deref() else {
        return Ok(false);
    };
    let c = model.config();
    let p = program::build(image, model.program(), c, input, tokens.is_some())?;
    let step = StepProgram {
        ops: &p.ops,
        act_len: p.act_len,
        init: &image.consts,
        meta: &p.meta,
        slots: input.slots,
        shape: c.attention_shape(),
        batch: input.seqs,
        read: if tokens.is_some() { 0..0 } else { p.logits },
        read_meta: p.tokens,
    };
    let mut scratch = Vec::new();
    let picked = match tokens {
        Some(tokens) => tokens,
        None => &mut scratch,
    };
    backend.run_step_on(weights, store, &step, logits, picked)?;
    if !step.read.is_empty() {
        model.program().cap_logits(logits);
    }
    Ok(true)
}

impl StepBackend for VulkanBackend {
    type Prepared = DeviceModel;

    /// Whole steps on the device read one page table for every layer.
    const KV_GROUPS: bool = false;
    const ATTENTION_SINKS: bool = false;

    fn forward_step(
        &mut self,
        model: &Model,
        store: &mut Self::KvStore,
        prepared: &mut DeviceModel,
        input: &StepInput<'_>,
        act: &mut Activations,
        logits: &mut Vec<f32>,
    ) -> Result<(), ForwardError<VulkanError>> {
        model.check(input).map_err(ForwardError::Model)?;
        let ran = device_step(self, model, store, prepared, input, logits, None)
            .map_err(ForwardError::Backend)?;
        if ran {
            Ok(())
        } else {
            model.forward(self, store, input, act, logits)
        }
    }

    fn greedy_step(
        &mut self,
        model: &Model,
        store: &mut Self::KvStore,
        prepared: &mut DeviceModel,
        input: &StepInput<'_>,
        act: &mut Activations,
        logits: &mut Vec<f32>,
        tokens: &mut Vec<u32>,
    ) -> Result<(), ForwardError<VulkanError>> {
        model.check(input).map_err(ForwardError::Model)?;
        let ran = device_step(self, model, store, prepared, input, logits, Some(tokens))
            .map_err(ForwardError::Backend)?;
        if ran {
            return Ok(());
        }
        model.forward(self, store, input, act, logits)?;
        greedy_tokens(logits, model.config().vocab, tokens);
        Ok(())
    }

    fn device_copy_bandwidth(&mut self) -> Option<f64> {
        // 256 MiB each way, best of 5: past every cache a GPU has. The
        // better of vkCmdCopyBuffer (which may take a copy engine slower
        // than the shader cores: 851 GB/s where a kernel copies 3.0 TB/s on
        // an H100) and a copy kernel.
        let engine = self.copy_bandwidth(512 << 20, 5).ok();
        let kernel = self
            .kernel_bandwidth(256 << 20, 5)
            .ok()
            .map(|(copy, _)| copy);
        match (engine, kernel) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    fn whole_steps_on_device(prepared: &DeviceModel) -> Option<bool> {
        prepared.whole_steps_on_device()
    }

    fn last_device_program(&self) -> Option<DeviceProgram> {
        Some(DeviceProgram {
            dispatches: self.last_program_dispatches(),
            barriers: self.last_program_barriers(),
            device_seconds: self.last_program_nanos().map(|ns| ns * 1e-9),
            host_seconds: self.last_program_host().map(|h| {
                (
                    h.total.as_secs_f64(),
                    h.recording.as_secs_f64(),
                    h.waiting.as_secs_f64(),
                )
            }),
            profile: self
                .last_program_profile()
                .iter()
                .map(|k| DeviceKernel {
                    kernel: k.kernel,
                    dispatches: k.dispatches,
                    seconds: k.nanos * 1e-9,
                    weight_bytes: k.weight_bytes,
                })
                .collect(),
        })
    }
}
