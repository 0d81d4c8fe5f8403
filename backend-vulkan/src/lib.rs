//! # pagoda-vulkan
//!
//! Pagoda's Vulkan paged-attention backend, implementing
//! [`pagoda_core::backend::Backend`] with SPIR-V compute shaders through
//! `ash`, memory from `gpu-allocator`: inference on AMD, Intel, Arm,
//! Qualcomm and NVIDIA GPUs alike, and on Mesa's lavapipe where there is none.
//!
//! - **Device**: a discrete GPU first, then an integrated one, then any
//!   other (lavapipe last); [`DEVICE_ENV`] or [`VulkanOptions::device`]
//!   picks one by index or name. [`VulkanBackend::info`] reports the device,
//!   its limits and the features in use.
//! - **Memory**: the KV store lives in device memory, split into up to
//!   [`KV_CHUNKS`] storage buffers so a pool larger than
//!   `maxStorageBufferRange` (128 MiB on lavapipe) still works. Queries,
//!   outputs, batch metadata and split-KV partials live in buffers the
//!   backend keeps and grows, never reallocates per call.
//! - **Kernels** (`shaders/*.comp`, listed once in `shaders/kernels.list`,
//!   committed as SPIR-V and checked as they load): scatter, gather, page
//!   copy for copy-on-write, paged attention for prefill (tiles of
//!   grouped-query heads × new tokens, causal, online softmax), a decode
//!   kernel shaped around reading the KV once (a tile of keys and values
//!   loaded in coalesced 16-byte reads, all issued before any is used; one
//!   softmax step per tile; each value row read once for all the heads of
//!   its group), both split across the KV length for long contexts, and the
//!   merge of split partials. f16 and bf16 are read as packed words. The
//!   decode kernel has variants picked when the backend opens: subgroup
//!   max and add for the softmax where the device has them, f16
//!   products for f16 stores where it has `shaderFloat16`, f32 otherwise
//!   ([`VulkanOptions::subgroups`], [`VulkanOptions::float16`]).
//! - **Checks**: every input is validated before anything is recorded, the
//!   same checks as every backend. The bounds-checking kernel variants
//!   (default in debug builds) check every index on the device too.
//! - **Timing**: GPU timestamps around every dispatch,
//!   [`VulkanBackend::last_timings`].
//! - **Ownership**: every buffer, store, pipeline set and command pool
//!   holds the shared context (instance, device, allocator) and frees
//!   itself when dropped, also when creation fails part-way; the context
//!   goes last, after waiting for the device. Under validation, a
//!   [`ValidationLog`] kept by the caller hears what the layer says at
//!   teardown, where it reports anything never freed.
//!
//! ```no_run
//! use pagoda_core::backend::Backend;
//! use pagoda_core::{KvDtype, KvGeometry};
//! use pagoda_vulkan::{VulkanBackend, VulkanOptions};
//!
//! let mut gpu = VulkanBackend::new(&VulkanOptions::from_env()).unwrap();
//! println!("{}", gpu.info());
//! let geometry = KvGeometry::new(32, 8, 128, KvDtype::F16).unwrap();
//! let store = gpu.create_kv_store(geometry, 4096).unwrap();
//! assert_eq!(gpu.memory_bytes(&store), 4096 * geometry.bytes_per_page());
//! ```

#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

mod commands;
mod context;
mod error;
mod features;
mod inject;
mod kernels;
#[cfg(test)]
mod leaks;
mod matvec_shape;
mod memory;
mod ops;
mod plan;
mod store;
mod validation;

use std::sync::Arc;

use ash::vk;
use gpu_allocator::MemoryLocation;
use half::{bf16, f16};
use pagoda_core::backend::{
    validate_attention, validate_copies, validate_scatter, AttentionShape, Backend, SeqAttention,
    LATENT_HEAD_DIM,
};
use pagoda_core::{KvDtype, KvGeometry, PageCopy, Slot, PAGE_SIZE};

/// The head dimensions the device's attention kernels run: the core's
/// but latent attention's 576, past the 256 their shared memory is sized
/// for.
pub const DEVICE_HEAD_DIMS: [u32; 6] = [64, 80, 96, 128, 192, 256];

pub use commands::KernelTime;
pub use context::{
    DeviceInfo, DeviceKind, VulkanOptions, COOPMAT_ENV, DEVICE_ENV, FLOAT16_ENV, INT_DOT_ENV,
    MATVEC_ENV, MATVEC_SHAPE_ENV, SUBGROUPS_ENV, VALIDATION_ENV,
};
pub use error::VulkanError;
pub use features::{CoopMatrixShape, IntegerDot};
pub use kernels::{Kernel, KV_CHUNKS};
pub use matvec_shape::MatvecShape;
pub use ops::{
    matmul_kernel, matmul_kernels, GluActivation, KernelProfile, MatmulKernels, Op,
    ProgramHostTime, StepOp, StepProgram, VulkanWeights,
};
pub use store::VulkanKvStore;
pub use validation::ValidationLog;

use commands::{Commands, Dispatch, Transfer};
use context::Context;
use kernels::{Params, Pipelines};
use memory::Buffer;

/// Workgroups one dispatch asks for at most; kernels loop over the rest.
const MAX_GROUPS: u32 = 65_535;

/// The buffers every call reuses, grown when a call needs more. Kernels
/// read and write device-local buffers only; each call's inputs and
/// metadata go through one host-visible staging buffer, its results come
/// back through another. Each buffer frees itself when dropped.
struct Io {
    input: Buffer,
    output: Buffer,
    meta: Buffer,
    partials: Buffer,
    faults: Buffer,
    upload: Buffer,
    download: Buffer,
    /// A step program's activations and op meta (`ops/step.rs`).
    step_act: Buffer,
    step_meta: Buffer,
}

impl Io {
    /// Small buffers of each kind, grown by the calls that need more.
    fn new(ctx: &Arc<Context>) -> Result<Self, VulkanError> {
        let device = |name| Buffer::new(ctx, name, 4096, MemoryLocation::GpuOnly);
        // A failure drops the buffers already made, which frees them.
        Ok(Self {
            input: device("inputs")?,
            output: device("outputs")?,
            meta: device("meta")?,
            partials: device("partials")?,
            faults: Buffer::new(ctx, "faults", 16, MemoryLocation::GpuToCpu)?,
            upload: Buffer::new(ctx, "upload", 8192, MemoryLocation::CpuToGpu)?,
            download: Buffer::new(ctx, "download", 4096, MemoryLocation::GpuToCpu)?,
            step_act: device("step activations")?,
            step_meta: device("step meta")?,
        })
    }
}

/// Where metadata starts in the upload staging buffer, after `input_bytes`.
fn meta_offset(input_bytes: u64) -> u64 {
    input_bytes.next_multiple_of(256)
}

/// The Vulkan backend: a device, its pipelines and reusable buffers. Every
/// call records one command buffer, submits it and waits, so results are
/// ready when it returns, and no work is pending between calls. Everything
/// it made is freed when it (and every store it made) is dropped.
pub struct VulkanBackend {
    io: Io,
    commands: Commands,
    pipelines: Pipelines,
    /// The model ops' pipelines, built on first use.
    ops: Option<ops::OpPipelines>,
    /// Device time of the last op program (`last_program_nanos`).
    program_nanos: Option<f64>,
    /// Dispatches the last op or step program recorded.
    program_dispatches: usize,
    /// Barriers between the last program's dispatches.
    program_barriers: usize,
    /// Host time of the last step program (`last_program_host`).
    program_host: Option<ProgramHostTime>,
    /// Whether step programs write a timestamp after every dispatch
    /// (`PAGODA_VULKAN_PROFILE=1`, or [`Self::set_profiling`]).
    profiling: bool,
    /// Device time per kernel of the last profiled step program.
    program_profile: Vec<KernelProfile>,
    timings: Vec<KernelTime>,
    max_chunk_bytes: Option<u64>,
    /// Caps each storage binding of uploaded weights.
    max_weight_chunk: u64,
    ctx: Arc<Context>,
}

impl std::fmt::Debug for VulkanBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanBackend")
            .field("device", &self.ctx.info.name)
            .finish()
    }
}

impl VulkanBackend {
    /// Opens the device `options` choose and builds every pipeline.
    pub fn new(options: &VulkanOptions) -> Result<Self, VulkanError> {
        // Each part frees itself if a later one fails.
        let ctx = Context::new(options)?;
        let pipelines = Pipelines::new(&ctx, ctx.info.bounds_checks)?;
        let commands = Commands::new(&ctx)?;
        let io = Io::new(&ctx)?;
        Ok(Self {
            io,
            commands,
            pipelines,
            ops: None,
            program_nanos: None,
            program_dispatches: 0,
            program_barriers: 0,
            program_host: None,
            profiling: std::env::var_os("PAGODA_VULKAN_PROFILE").is_some_and(|v| v == "1"),
            program_profile: Vec::new(),
            timings: Vec::new(),
            max_chunk_bytes: options.max_chunk_bytes,
            max_weight_chunk: options.max_weight_chunk_bytes.unwrap_or(u64::MAX),
            ctx,
        })
    }

    /// The device in use, its limits and features.
    pub fn info(&self) -> &DeviceInfo {
        &self.ctx.info
    }

    /// Every message the validation layer reported (empty unless it is on).
    pub fn validation_messages(&self) -> Vec<String> {
        self.ctx.validation.messages()
    }

    /// The validation layer's log, which stays readable after the backend
    /// is dropped: what the layer reports as the device is destroyed
    /// (objects never freed) lands there too.
    pub fn validation_log(&self) -> ValidationLog {
        self.ctx.validation.clone()
    }

    /// Device time of each dispatch of the last call, from GPU timestamps
    /// (empty if the device has none).
    pub fn last_timings(&self) -> &[KernelTime] {
        &self.timings
    }

    /// The device's copy bandwidth in bytes read + written per second: the
    /// best of `repeats` `vkCmdCopyBuffer`s of `bytes / 2` between two
    /// device-local buffers, timed with GPU timestamps, after half a second
    /// of copies (GPUs raise their clocks under load).
    pub fn copy_bandwidth(&mut self, bytes: u64, repeats: u32) -> Result<f64, VulkanError> {
        let half = (bytes / 2)
            .min(self.ctx.info.max_allocation_bytes)
            .max(1 << 20);
        let src = Buffer::new(&self.ctx, "copy source", half, MemoryLocation::GpuOnly)?;
        let dst = Buffer::new(&self.ctx, "copy destination", half, MemoryLocation::GpuOnly)?;
        // Half a second of copies first: GPUs raise their clocks under load.
        let started = std::time::Instant::now();
        while started.elapsed().as_secs_f64() < 0.5 {
            self.commands.time_copy(src.handle, dst.handle, half)?;
        }
        let mut best = f64::INFINITY;
        for _ in 0..repeats.max(1) {
            best = best.min(self.commands.time_copy(src.handle, dst.handle, half)?);
        }
        Ok(2.0 * half as f64 / (best * 1e-9))
    }

    /// Grows `which` buffer to hold `bytes`, refusing more than one binding
    /// may cover.
    fn ensure(&mut self, which: fn(&mut Io) -> &mut Buffer, bytes: u64) -> Result<(), VulkanError> {
        let limit = self.ctx.info.max_storage_buffer_range;
        if bytes > limit {
            return Err(VulkanError::Unsupported(format!(
                "a batch needs a {bytes}-byte buffer, more than one binding covers ({limit})"
            )));
        }
        let slot = which(&mut self.io);
        if slot.bytes >= bytes {
            return Ok(());
        }
        // The old buffer stays if the new one cannot be made; once it is,
        // the old one is dropped (no work is pending between calls).
        *slot = Buffer::new(
            &self.ctx,
            "io",
            bytes.max(slot.bytes * 2).min(limit),
            slot.location,
        )?;
        Ok(())
    }

    /// Stages a call's input words and metadata words for upload, growing
    /// the buffers they need. Returns their byte sizes.
    fn stage(
        &mut self,
        input: impl ExactSizeIterator<Item = u32>,
        meta: &[u32],
    ) -> Result<(u64, u64), VulkanError> {
        let (input_bytes, meta_bytes) = (input.len() as u64 * 4, meta.len() as u64 * 4);
        self.ensure(|io| &mut io.input, input_bytes)?;
        self.ensure(|io| &mut io.meta, meta_bytes)?;
        let offset = meta_offset(input_bytes);
        self.ensure(|io| &mut io.upload, offset + meta_bytes)?;
        let staging = self.io.upload.mapped()?;
        write_words(&mut staging[..input_bytes as usize], input);
        write_words(&mut staging[offset as usize..], meta.iter().copied());
        Ok((input_bytes, meta_bytes))
    }

    /// Binds `store` and the I/O buffers; uploads what [`Self::stage`]
    /// staged (`staged` bytes of input and metadata); runs `dispatches`;
    /// downloads `download` bytes of outputs; checks the bounds-checking
    /// fault word.
    fn run(
        &mut self,
        store: &VulkanKvStore,
        fill: &[vk::Buffer],
        staged: (u64, u64),
        dispatches: &[Dispatch],
        download: u64,
    ) -> Result<(), VulkanError> {
        self.ensure(|io| &mut io.download, download)?;
        let io = &mut self.io;
        io.faults.mapped()?[..4].copy_from_slice(&0u32.to_le_bytes());
        let chunks: Vec<vk::Buffer> = store.chunks.iter().map(|c| c.handle).collect();
        self.pipelines.bind(
            &chunks,
            [
                io.input.handle,
                io.output.handle,
                io.meta.handle,
                io.partials.handle,
                io.faults.handle,
            ],
        );
        let uploads = [
            Transfer {
                src: io.upload.handle,
                src_offset: 0,
                dst: io.input.handle,
                bytes: staged.0,
            },
            Transfer {
                src: io.upload.handle,
                src_offset: meta_offset(staged.0),
                dst: io.meta.handle,
                bytes: staged.1,
            },
        ];
        let downloads = [Transfer {
            src: io.output.handle,
            src_offset: 0,
            dst: io.download.handle,
            bytes: download,
        }];
        self.timings =
            self.commands
                .run(&self.pipelines, fill, &uploads, dispatches, &downloads)?;
        let fault = u32::from_le_bytes(self.io.faults.mapped()?[..4].try_into().unwrap_or([0; 4]));
        if fault != 0 {
            return Err(VulkanError::ShaderFault(fault));
        }
        Ok(())
    }

    /// Push constants describing `store` and the I/O buffers' sizes.
    fn params(&self, store: &VulkanKvStore, layer: u32, count: u32) -> Params {
        let g = store.geometry;
        let io = &self.io;
        Params {
            dtype: store::dtype_code(g.dtype()),
            layer,
            layers: g.layers(),
            kv_heads: g.kv_heads(),
            head_dim: g.head_dim(),
            pages_per_chunk: store.pages_per_chunk,
            page_words: store.page_words,
            pages: store.pages,
            count,
            chunks: store.chunks.len() as u32,
            input_words: words(io.input.bytes),
            output_words: words(io.output.bytes),
            meta_words: words(io.meta.bytes),
            partial_words: words(io.partials.bytes),
            ..Params::default()
        }
    }

    /// A dispatch of `kernel` over `count` records of `store`'s `layer`.
    /// The decode kernel variant for a store's dtype: the first, in order of
    /// preference, whose needs are met (f16 products only for f16 stores).
    fn decode_kernel(&self, dtype: KvDtype) -> Kernel {
        let info = &self.ctx.info;
        let float16 = info.use_float16 && dtype == KvDtype::F16;
        [
            Kernel::DecodeF16Subgroup,
            Kernel::DecodeF16,
            Kernel::DecodeSubgroup,
        ]
        .into_iter()
        .find(|k| {
            k.needs().met(kernels::Offered {
                subgroups: info.use_subgroups,
                float16,
                ..kernels::Offered::default()
            })
        })
        .unwrap_or(Kernel::Decode)
    }

    fn dispatch(&self, kernel: Kernel, store: &VulkanKvStore, layer: u32, count: u32) -> Dispatch {
        Dispatch {
            kernel,
            params: self.params(store, layer, count),
            groups: count.min(MAX_GROUPS),
        }
    }

    /// The checks of a scatter or gather: the store is this backend's and
    /// the slots and rows fit it.
    fn check_slots(
        &self,
        store: &VulkanKvStore,
        layer: u32,
        slots: &[Slot],
        keys: usize,
        values: usize,
    ) -> Result<(), VulkanError> {
        self.check_store(store)?;
        validate_scatter(&store.geometry, store.pages, layer, slots, keys, values)?;
        Ok(())
    }

    fn check_store(&self, store: &VulkanKvStore) -> Result<(), VulkanError> {
        if store.same_device(&self.ctx) {
            Ok(())
        } else {
            Err(VulkanError::Unsupported(
                "the KV store belongs to another Vulkan backend".into(),
            ))
        }
    }
}

fn words(bytes: u64) -> u32 {
    u32::try_from(bytes / 4).unwrap_or(u32::MAX)
}

fn write_words(dst: &mut [u8], words: impl Iterator<Item = u32>) {
    for (d, w) in dst.chunks_exact_mut(4).zip(words) {
        d.copy_from_slice(&w.to_le_bytes());
    }
}

/// A slot's (page, offset) pair for the kernels.
fn slot_words(slots: &[Slot]) -> Vec<u32> {
    slots
        .iter()
        .flat_map(|s| {
            [
                (s.0 / PAGE_SIZE as u64) as u32,
                (s.0 % PAGE_SIZE as u64) as u32,
            ]
        })
        .collect()
}

/// Packs f32 values into the store's dtype, two 16-bit values per word (low
/// half first), rounded to nearest even as `half` does.
fn pack(dtype: KvDtype, values: &[f32], out: &mut Vec<u32>) {
    match dtype {
        KvDtype::F32 => out.extend(values.iter().map(|v| v.to_bits())),
        KvDtype::F16 => out.extend(values.chunks_exact(2).map(|p| {
            u32::from(f16::from_f32(p[0]).to_bits())
                | u32::from(f16::from_f32(p[1]).to_bits()) << 16
        })),
        KvDtype::Bf16 => out.extend(values.chunks_exact(2).map(|p| {
            u32::from(bf16::from_f32(p[0]).to_bits())
                | u32::from(bf16::from_f32(p[1]).to_bits()) << 16
        })),
    }
}

/// Widens words of the store's dtype back to f32.
fn unpack(dtype: KvDtype, words: &[u8], out: &mut [f32]) {
    let mut it = words
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
    match dtype {
        KvDtype::F32 => {
            for (o, w) in out.iter_mut().zip(it) {
                *o = f32::from_bits(w);
            }
        }
        KvDtype::F16 | KvDtype::Bf16 => {
            for pair in out.chunks_exact_mut(2) {
                let w = it.next().unwrap_or(0);
                let (lo, hi) = ((w & 0xFFFF) as u16, (w >> 16) as u16);
                if dtype == KvDtype::F16 {
                    pair[0] = f16::from_bits(lo).to_f32();
                    pair[1] = f16::from_bits(hi).to_f32();
                } else {
                    pair[0] = bf16::from_bits(lo).to_f32();
                    pair[1] = bf16::from_bits(hi).to_f32();
                }
            }
        }
    }
}

impl Backend for VulkanBackend {
    type KvStore = VulkanKvStore;
    type Error = VulkanError;

    fn name(&self) -> &'static str {
        "vulkan"
    }

    fn create_kv_store(
        &mut self,
        geometry: KvGeometry,
        pages: u32,
    ) -> Result<VulkanKvStore, VulkanError> {
        // The kernels pack 16-bit values in pairs and size shared memory for
        // these dims; refuse others here rather than lose data later.
        if !DEVICE_HEAD_DIMS.contains(&geometry.head_dim()) {
            return Err(VulkanError::Unsupported(format!(
                "head dimension {} (supported: {DEVICE_HEAD_DIMS:?}; latent attention's {LATENT_HEAD_DIM} runs on the CPU backend)",
                geometry.head_dim()
            )));
        }
        let store = VulkanKvStore::new(&self.ctx, geometry, pages, self.max_chunk_bytes)?;
        // Start from zeros, not whatever the memory held before.
        let fill: Vec<vk::Buffer> = store.chunks.iter().map(|c| c.handle).collect();
        self.run(&store, &fill, (0, 0), &[], 0)?;
        Ok(store)
    }

    fn scatter(
        &mut self,
        store: &mut VulkanKvStore,
        layer: u32,
        slots: &[Slot],
        keys: &[f32],
        values: &[f32],
    ) -> Result<(), VulkanError> {
        self.check_slots(store, layer, slots, keys.len(), values.len())?;
        if slots.is_empty() {
            return Ok(());
        }
        let dtype = store.geometry.dtype();
        let row = store.geometry.kv_heads() as usize * store.geometry.head_dim() as usize;
        let mut packed = Vec::with_capacity(slots.len() * row * 2);
        for (k, v) in keys.chunks_exact(row).zip(values.chunks_exact(row)) {
            pack(dtype, k, &mut packed);
            pack(dtype, v, &mut packed);
        }
        let staged = self.stage(packed.into_iter(), &slot_words(slots))?;
        let scatter = self.dispatch(Kernel::Scatter, store, layer, slots.len() as u32);
        self.run(store, &[], staged, &[scatter], 0)
    }

    fn attention_with_sinks(
        &mut self,
        store: &VulkanKvStore,
        layer: u32,
        shape: AttentionShape,
        sinks: &[f32],
        batch: &[SeqAttention<'_>],
        queries: &[f32],
        out: &mut [f32],
    ) -> Result<(), VulkanError> {
        let _ = (store, layer, shape, sinks, batch, queries, out);
        Err(VulkanError::Unsupported(
            "attention sinks (gpt-oss) have no device kernel yet".into(),
        ))
    }

    fn attention(
        &mut self,
        store: &VulkanKvStore,
        layer: u32,
        shape: AttentionShape,
        batch: &[SeqAttention<'_>],
        queries: &[f32],
        out: &mut [f32],
    ) -> Result<(), VulkanError> {
        self.check_store(store)?;
        let rows = validate_attention(
            &store.geometry,
            store.pages,
            layer,
            &shape,
            batch,
            queries.len(),
            out.len(),
        )?;
        if batch.is_empty() {
            return Ok(());
        }
        let q_row = shape.q_row();
        let floats = rows as usize * q_row;
        let plan = plan::plan_attention(&shape, batch);
        self.ensure(|io| &mut io.output, floats as u64 * 4)?;
        let partial_bytes = u64::from(plan.partial_records) * (u64::from(shape.head_dim) + 2) * 4;
        self.ensure(|io| &mut io.partials, partial_bytes)?;
        let staged = self.stage(queries[..floats].iter().map(|q| q.to_bits()), &plan.meta)?;
        let mut params = self.params(store, layer, plan.items);
        params.q_heads = shape.q_heads;
        params.scale = shape.scale;
        params.window = shape.window;
        params.softcap = shape.softcap;
        params.item_offset = plan.item_offset;
        let mut dispatches = Vec::with_capacity(3);
        if plan.items > 0 {
            dispatches.push(Dispatch {
                kernel: Kernel::Attention,
                params,
                groups: plan.items.min(MAX_GROUPS),
            });
        }
        if plan.decode_items > 0 {
            dispatches.push(Dispatch {
                kernel: self.decode_kernel(store.geometry.dtype()),
                params: Params {
                    count: plan.decode_items,
                    item_offset: plan.decode_offset,
                    ..params
                },
                groups: plan.decode_items.min(MAX_GROUPS),
            });
        }
        if plan.merges > 0 {
            let merge = Params {
                count: plan.merges,
                item_offset: plan.merge_offset,
                ..params
            };
            dispatches.push(Dispatch {
                kernel: Kernel::Merge,
                params: merge,
                groups: plan.merges.min(MAX_GROUPS),
            });
        }
        self.run(store, &[], staged, &dispatches, floats as u64 * 4)?;
        // Copy back only the rows the batch owns; others are the caller's.
        let results = self.io.download.mapped()?;
        for seq in batch {
            let start = seq.query_start as usize * q_row;
            let len = seq.query_len as usize * q_row;
            for (o, w) in out[start..start + len]
                .iter_mut()
                .zip(results[start * 4..(start + len) * 4].chunks_exact(4))
            {
                *o = f32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            }
        }
        Ok(())
    }

    fn gather(
        &mut self,
        store: &VulkanKvStore,
        layer: u32,
        slots: &[Slot],
        keys: &mut [f32],
        values: &mut [f32],
    ) -> Result<(), VulkanError> {
        self.check_slots(store, layer, slots, keys.len(), values.len())?;
        if slots.is_empty() {
            return Ok(());
        }
        let dtype = store.geometry.dtype();
        let row = keys.len() / slots.len();
        let row_bytes = row * dtype.size_bytes() as usize;
        let bytes = (slots.len() * row_bytes * 2) as u64;
        self.ensure(|io| &mut io.output, bytes)?;
        let staged = self.stage(std::iter::empty(), &slot_words(slots))?;
        let gather = self.dispatch(Kernel::Gather, store, layer, slots.len() as u32);
        self.run(store, &[], staged, &[gather], bytes)?;
        let results = self.io.download.mapped()?;
        for (i, slot) in results[..slots.len() * row_bytes * 2]
            .chunks_exact(row_bytes * 2)
            .enumerate()
        {
            unpack(dtype, &slot[..row_bytes], &mut keys[i * row..][..row]);
            unpack(dtype, &slot[row_bytes..], &mut values[i * row..][..row]);
        }
        Ok(())
    }

    fn copy_pages(
        &mut self,
        store: &mut VulkanKvStore,
        copies: &[PageCopy],
    ) -> Result<(), VulkanError> {
        self.check_store(store)?;
        validate_copies(store.pages, copies)?;
        if copies.is_empty() {
            return Ok(());
        }
        let meta: Vec<u32> = copies
            .iter()
            .flat_map(|c| [c.src.index(), c.dst.index(), c.slots])
            .collect();
        let staged = self.stage(std::iter::empty(), &meta)?;
        let copy = self.dispatch(Kernel::Copy, store, 0, copies.len() as u32);
        self.run(store, &[], staged, &[copy], 0)
    }

    fn memory_bytes(&self, store: &VulkanKvStore) -> u64 {
        store.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagoda_core::backend::{BackendError, BackendErrorKind};

    #[test]
    fn the_checked_kernels_report_an_out_of_range_access() {
        let options = VulkanOptions {
            bounds_checks: Some(true),
            validation: Some(false),
            ..VulkanOptions::from_env()
        };
        let mut gpu = match VulkanBackend::new(&options) {
            Ok(gpu) => gpu,
            Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("{e}"),
            Err(e) => {
                eprintln!("skipping: {e}");
                return;
            }
        };
        let geometry = KvGeometry::new(1, 1, 64, KvDtype::F32).unwrap();
        let store = gpu.create_kv_store(geometry, 2).unwrap();
        // Past the host's validation: a slot on page 5 of a 2-page store.
        let staged = gpu.stage([0u32; 128].into_iter(), &[5, 0]).unwrap();
        let scatter = gpu.dispatch(Kernel::Scatter, &store, 0, 1);
        let err = gpu.run(&store, &[], staged, &[scatter], 0).unwrap_err();
        assert!(
            matches!(err, VulkanError::ShaderFault(bits) if bits & 1 != 0),
            "{err}"
        );
        // The same call within range is fine.
        let staged = gpu.stage([0u32; 128].into_iter(), &[1, 3]).unwrap();
        let scatter = gpu.dispatch(Kernel::Scatter, &store, 0, 1);
        gpu.run(&store, &[], staged, &[scatter], 0).unwrap();
        // A head dim the kernels do not handle is refused up front.
        let odd = KvGeometry::new(1, 1, 63, KvDtype::F16).unwrap();
        let err = gpu.create_kv_store(odd, 2).unwrap_err();
        assert_eq!(err.kind(), BackendErrorKind::Unsupported, "{err}");
    }

    #[test]
    fn packing_rounds_like_half_and_round_trips() {
        let values = [1.0f32, -2.5, 0.1, 65504.0, 1e-8, 3.3];
        for dtype in [KvDtype::F32, KvDtype::F16, KvDtype::Bf16] {
            let mut words = Vec::new();
            pack(dtype, &values, &mut words);
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let mut back = [0.0f32; 6];
            unpack(dtype, &bytes, &mut back);
            for (b, v) in back.iter().zip(values) {
                let want = match dtype {
                    KvDtype::F32 => v,
                    KvDtype::F16 => f16::from_f32(v).to_f32(),
                    KvDtype::Bf16 => bf16::from_f32(v).to_f32(),
                };
                assert_eq!(*b, want, "{dtype:?}");
            }
        }
    }
}
