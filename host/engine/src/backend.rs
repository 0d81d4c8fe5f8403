//! Choosing the backend at run time: [`BackendChoice`] opens the CPU or the
//! Vulkan backend and hands it to a [`WithBackend`] visitor, so a caller
//! writes its generic code once and never names a backend crate; and
//! [`StepBackend`], how a backend runs a whole model step.

use std::sync::Arc;

use pagoda_core::backend::Backend;
use pagoda_cpu::{CpuBackend, CpuError, Isa};
use pagoda_vulkan::{VulkanBackend, VulkanError, VulkanOptions};

use crate::config::EngineConfig;
use crate::model::{argmax, Activations, ForwardError, Model, StepInput};
use crate::thread::{spawn, EngineClient, SpawnError};

/// A backend that runs whole model steps: the engine calls
/// [`forward_step`](Self::forward_step) once per step. The default is the
/// host's forward pass ([`Model::forward`]: matrix products on the CPU, the
/// KV scatter and attention on the backend); the Vulkan backend runs the
/// whole step on the device (weights uploaded on the first step).
pub trait StepBackend: Backend + Sized {
    /// What the backend prepares for a model and keeps across steps (the
    /// Vulkan backend: the weights on the device); the engine holds it
    /// beside the backend's KV store.
    type Prepared: Default;

    /// Whether the backend runs models whose layers the cache pages in
    /// groups ([`KvLayout`](crate::KvLayout): sliding-window layers holding
    /// only their window). The host's forward pass does; a backend that
    /// runs whole steps on a device from one page table does not, and gets
    /// every layer paged together.
    const KV_GROUPS: bool = true;

    /// Whether the backend runs
    /// [`attention_with_sinks`](Backend::attention_with_sinks) (gpt-oss):
    /// an engine of a model with sinks on a backend without it is refused
    /// when it is built, not at its first step.
    const ATTENTION_SINKS: bool = true;

    /// Fresh activation buffers for an engine on this backend. The default
    /// starts its own thread team on the first step; the CPU backend lends
    /// its team, so attention and the products run on the same threads.
    fn activations(&self) -> Activations {
        Activations::default()
    }

    /// Runs one step of `model`: writes the step's keys and values into
    /// `store` and `sample_rows.len() × vocab` logits into `logits`.
    fn forward_step(
        &mut self,
        model: &Model,
        store: &mut Self::KvStore,
        prepared: &mut Self::Prepared,
        input: &StepInput<'_>,
        act: &mut Activations,
        logits: &mut Vec<f32>,
    ) -> Result<(), ForwardError<Self::Error>> {
        let _ = prepared;
        model.forward(self, store, input, act, logits)
    }

    /// [`forward_step`](Self::forward_step) for a step whose every sampled
    /// row is greedy: `tokens` gets each sampled row's most likely token
    /// (the lowest id among equal logits); what `logits` holds after it is
    /// unspecified. The default picks from the logits on the host; the
    /// Vulkan backend picks on the device and reads back only the tokens.
    #[allow(clippy::too_many_arguments)]
    fn greedy_step(
        &mut self,
        model: &Model,
        store: &mut Self::KvStore,
        prepared: &mut Self::Prepared,
        input: &StepInput<'_>,
        act: &mut Activations,
        logits: &mut Vec<f32>,
        tokens: &mut Vec<u32>,
    ) -> Result<(), ForwardError<Self::Error>> {
        self.forward_step(model, store, prepared, input, act, logits)?;
        greedy_tokens(logits, model.config().vocab, tokens);
        Ok(())
    }

    /// Whether steps run whole on a device with what the backend
    /// `prepared` (`None` on the host, or before the first step).
    fn whole_steps_on_device(prepared: &Self::Prepared) -> Option<bool> {
        let _ = prepared;
        None
    }

    /// The device's copy bandwidth in bytes read plus written per second,
    /// measured now (the baseline a device's decode is compared with);
    /// `None` for a backend on the host.
    fn device_copy_bandwidth(&mut self) -> Option<f64> {
        None
    }

    /// Kernel dispatches and device time of the last program the backend
    /// ran on a device; `None` for a backend on the host.
    fn last_device_program(&self) -> Option<DeviceProgram> {
        None
    }
}

/// Each row of `logits` (`vocab` wide)'s most likely token into `tokens`:
/// a greedy step picked on the host.
pub(crate) fn greedy_tokens(logits: &[f32], vocab: u32, tokens: &mut Vec<u32>) {
    tokens.clear();
    tokens.extend(logits.chunks_exact(vocab as usize).map(argmax));
}

/// What one program cost on the device: the figures a device bench reports
/// per step.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceProgram {
    /// Kernel dispatches recorded.
    pub dispatches: usize,
    /// Barriers between them (a dispatch waits only for what it reads).
    pub barriers: usize,
    /// Device time, first dispatch to last, from GPU timestamps (`None`
    /// where the device has none).
    pub device_seconds: Option<f64>,
    /// Host time of the backend's step call, and of its recording and its
    /// wait from submission to completion (`None` where not measured).
    pub host_seconds: Option<(f64, f64, f64)>,
    /// Device time per kernel, slowest first, when the backend profiled
    /// the step (`PAGODA_VULKAN_PROFILE=1`); empty otherwise.
    pub profile: Vec<DeviceKernel>,
}

/// One kernel's share of a profiled device step.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceKernel {
    /// The kernel's name.
    pub kernel: &'static str,
    /// Its dispatches in the step.
    pub dispatches: usize,
    /// Their device time, each from the end of the dispatch before it.
    pub seconds: f64,
    /// Weight bytes the matrix products among them read (0 otherwise).
    pub weight_bytes: u64,
}

impl StepBackend for CpuBackend {
    type Prepared = ();

    fn activations(&self) -> Activations {
        Activations::with_team(self.team().clone())
    }
}

/// Which backend runs attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendChoice {
    /// The SIMD CPU backend, on this many threads (0: one per core): the
    /// engine's thread and `threads − 1` team workers, shared by attention
    /// and the matrix products.
    Cpu {
        /// Threads, the engine's included.
        threads: usize,
    },
    /// The Vulkan compute backend, on the device `PAGODA_VULKAN_*` variables
    /// select (the first one otherwise).
    Vulkan,
}

/// Code generic over the backend, run by [`BackendChoice::open`].
pub trait WithBackend {
    /// What the code returns.
    type Output;
    /// Runs with the opened backend.
    fn run<B>(self, backend: B) -> Self::Output
    where
        B: StepBackend,
        B::Error: std::error::Error + Send + Sync + 'static;
}

/// Why a backend could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum BackendOpenError {
    /// The CPU backend (its thread pool) could not start.
    #[error("{0}")]
    Cpu(#[from] CpuError),
    /// No usable Vulkan device, or its setup failed.
    #[error("{0}")]
    Vulkan(#[from] VulkanError),
}

impl BackendChoice {
    /// The backend's short name: `cpu` or `vulkan`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cpu { .. } => "cpu",
            Self::Vulkan => "vulkan",
        }
    }

    /// Opens the backend and runs `code` with it.
    pub fn open<W: WithBackend>(self, code: W) -> Result<W::Output, BackendOpenError> {
        Ok(match self {
            Self::Cpu { threads } => code.run(CpuBackend::with_threads(threads)?),
            Self::Vulkan => code.run(VulkanBackend::new(&VulkanOptions::from_env())?),
        })
    }

    /// Runs an engine over `model` on its own thread with this backend,
    /// opened on that thread; see [`spawn`].
    pub fn spawn(
        self,
        model: Arc<Model>,
        config: EngineConfig,
    ) -> Result<EngineClient, SpawnError> {
        match self {
            Self::Cpu { threads } => {
                spawn(model, config, move || CpuBackend::with_threads(threads))
            }
            Self::Vulkan => spawn(model, config, || {
                VulkanBackend::new(&VulkanOptions::from_env())
            }),
        }
    }

    /// Opens the backend once to describe it for reports: the CPU's
    /// instruction set and threads, or the Vulkan device's name.
    pub fn describe(self) -> Result<String, BackendOpenError> {
        Ok(match self {
            // What `with_threads` would use, without starting threads.
            Self::Cpu { threads } => format!(
                "cpu backend ({:?}, {} threads)",
                Isa::detect(),
                CpuBackend::resolve_threads(threads)
            ),
            Self::Vulkan => {
                let probe = VulkanBackend::new(&VulkanOptions::from_env())?;
                format!("vulkan backend ({})", probe.info().name)
            }
        })
    }
}
