//! Running [`Op`] programs: the resident weights they read, and recording a
//! whole program into one command buffer.

use std::ops::Range;
use std::sync::Arc;

use ash::vk;
use gpu_allocator::MemoryLocation;
use pagoda_core::QuantKind;

use super::op::{matrix_bytes, shape, KernelChoice, Op};
use super::pipelines::{OpParams, OpPipelines};
use super::step::{with_rounded_inputs, Recorded};
use crate::kernels::Kernel;
use crate::memory::Buffer;
use crate::{KernelProfile, ProgramHostTime, VulkanBackend, VulkanError};

/// Weights on the device, uploaded once with
/// [`VulkanBackend::upload_weights`] and read by every later program: one
/// buffer, or (weights beyond one storage binding, an 8B model's 4.5 GB on
/// a GPU whose bindings cover 4 GiB) several, each a run of whole tensors,
/// bound in turn as the ops that read them run.
pub struct VulkanWeights {
    pub(super) chunks: Vec<WeightChunk>,
    bytes: u64,
}

/// One binding's worth of the weights: bytes `range` of the whole.
pub(super) struct WeightChunk {
    pub buffer: Buffer,
    pub range: Range<u64>,
}

/// Storage bindings the weights may take: each has a descriptor set of the
/// op layout of its own.
pub(crate) const MAX_WEIGHT_CHUNKS: usize = 16;

/// The weights' staging buffer's largest size: a copy of it costs more than
/// its submission, and it is small beside a model.
const STAGING_BYTES: u64 = 64 << 20;

impl std::fmt::Debug for VulkanWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanWeights")
            .field("bytes", &self.bytes)
            .field("bindings", &self.chunks.len())
            .finish()
    }
}

impl VulkanWeights {
    /// Bytes uploaded.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Storage bindings they take.
    pub fn bindings(&self) -> usize {
        self.chunks.len()
    }

    /// Where each binding's bytes lie in the whole, and its buffer's size.
    pub(super) fn map(&self) -> Vec<(Range<u64>, u64)> {
        self.chunks
            .iter()
            .map(|c| (c.range.clone(), c.buffer.bytes))
            .collect()
    }

    pub(super) fn handles(&self) -> Vec<vk::Buffer> {
        self.chunks.iter().map(|c| c.buffer.handle).collect()
    }

    pub(super) fn belongs_to(&self, ctx: &Arc<crate::context::Context>) -> bool {
        self.chunks.iter().all(|c| c.buffer.belongs_to(ctx))
    }
}

impl VulkanBackend {
    /// Uploads `bytes` (GGUF tensors, tables) to a device-local buffer that
    /// programs read with [`run_ops_on`](Self::run_ops_on); they must fit
    /// one storage binding.
    pub fn upload_weights(&mut self, bytes: &[u8]) -> Result<VulkanWeights, VulkanError> {
        self.upload_weights_split(bytes, &[])
    }

    /// Uploads `bytes` as [`upload_weights`](Self::upload_weights) does, in
    /// as many storage bindings as they need, each split only at one of
    /// `cuts` (byte offsets where a tensor starts; no op reads across
    /// one). Refused if a run between cuts is larger than a binding.
    pub fn upload_weights_split(
        &mut self,
        bytes: &[u8],
        cuts: &[u64],
    ) -> Result<VulkanWeights, VulkanError> {
        let fill = |at: u64, dst: &mut [u8]| {
            dst.copy_from_slice(&bytes[at as usize..at as usize + dst.len()]);
        };
        self.upload_weights_with(bytes.len() as u64, cuts, fill)
    }

    /// Uploads `total` bytes of weights as
    /// [`upload_weights_split`](Self::upload_weights_split) does, asking
    /// `fill(at, dst)` for the bytes from offset `at` one staging piece at
    /// a time (at most 64 MiB), so that the caller need not hold them in
    /// one piece and the host's staging memory stays small. Gathered in one
    /// buffer and staged whole, an 8B model's 4.3 GB took `pagoda run` to
    /// 8.8 GB resident on an H200's host.
    pub fn upload_weights_with(
        &mut self,
        total: u64,
        cuts: &[u64],
        mut fill: impl FnMut(u64, &mut [u8]),
    ) -> Result<VulkanWeights, VulkanError> {
        // 16 bytes past each end: the GPU decode product reads whole words
        // around blocks that are not word-aligned.
        const PAD: u64 = 16;
        let info = &self.ctx.info;
        let limit = info
            .max_storage_buffer_range
            .min(info.max_allocation_bytes)
            .min(self.max_weight_chunk)
            .saturating_sub(2 * PAD);
        let mut ranges = Vec::new();
        let mut start = 0u64;
        while start < total || ranges.is_empty() {
            let end = if total - start <= limit {
                total
            } else {
                // The furthest cut a binding from `start` reaches.
                cuts.iter()
                    .copied()
                    .filter(|&c| c > start && c - start <= limit)
                    .max()
                    .ok_or_else(|| {
                        VulkanError::Unsupported(format!(
                            "a tensor of the weights at byte {start} is more than one binding covers ({limit})"
                        ))
                    })?
            };
            ranges.push(start..end);
            start = end;
        }
        if ranges.len() > MAX_WEIGHT_CHUNKS {
            return Err(VulkanError::Unsupported(format!(
                "{total} bytes of weights need {} bindings of {limit} bytes; at most {MAX_WEIGHT_CHUNKS}",
                ranges.len()
            )));
        }
        let largest = ranges.iter().map(|r| r.end - r.start).max().unwrap_or(0);
        let staging_len = (largest.next_multiple_of(16) + PAD).min(STAGING_BYTES);
        let mut staging = Buffer::new(
            &self.ctx,
            "weights upload",
            staging_len,
            MemoryLocation::CpuToGpu,
        )?;
        let mut chunks = Vec::with_capacity(ranges.len());
        for range in ranges {
            let len = range.end - range.start;
            let padded = len.next_multiple_of(16) + PAD;
            let buffer = Buffer::new(&self.ctx, "weights", padded, MemoryLocation::GpuOnly)?;
            let mut at = 0u64;
            while at < padded {
                let piece = (padded - at).min(staging_len);
                // The piece's bytes of the weights, then zeros (the pad).
                let data = len.saturating_sub(at).min(piece);
                let mapped = &mut staging.mapped()?[..piece as usize];
                let (head, pad) = mapped.split_at_mut(data as usize);
                fill(range.start + at, head);
                pad.fill(0);
                let (src, dst) = (staging.handle, buffer.handle);
                self.commands.submit_and_wait(|device, cmd| {
                    let region = [vk::BufferCopy::default().dst_offset(at).size(piece)];
                    // SAFETY: `cmd` is recording; both buffers are live, the
                    // staging buffer at least `piece` long and the weights'
                    // `at + piece`, until the wait that follows.
                    unsafe { device.cmd_copy_buffer(cmd, src, dst, &region) };
                })?;
                at += piece;
            }
            chunks.push(WeightChunk { buffer, range });
        }
        Ok(VulkanWeights {
            chunks,
            bytes: total,
        })
    }

    /// The bandwidth a kernel reaches on this device, in bytes per second:
    /// `(copy, read)`, copying `bytes` of random words between two
    /// device-local buffers (bytes read + written) and only reading them
    /// (`shaders/stream.comp`); the best of `repeats` each, after half a
    /// second of copies (GPUs raise their clocks under load). The baseline
    /// decode figures are compared with: a kernel's reads, where
    /// `vkCmdCopyBuffer` may take a copy engine slower than the shader
    /// cores (see [`copy_bandwidth`](Self::copy_bandwidth)).
    pub fn kernel_bandwidth(
        &mut self,
        bytes: u64,
        repeats: u32,
    ) -> Result<(f64, f64), VulkanError> {
        let limit = self.ctx.info.max_storage_buffer_range;
        let bytes = (bytes.min(limit - 4096) / 16 * 16).max(16);
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let random: Vec<u8> = (0..bytes / 8)
            .flat_map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state.to_le_bytes()
            })
            .collect();
        let weights = self.upload_weights(&random)?;
        drop(random);
        let sink = Buffer::new(
            &self.ctx,
            "stream sink",
            bytes + 4096,
            MemoryLocation::GpuOnly,
        )?;
        self.ensure_op_pipelines()?;
        let pipelines = self
            .ops
            .as_ref()
            .ok_or_else(|| VulkanError::Unsupported("no op pipelines".into()))?;
        pipelines.bind(
            &weights.handles(),
            [sink.handle, self.io.faults.handle, self.io.faults.handle],
        );
        let Some(queries) = self.commands.query_pool() else {
            return Err(VulkanError::Unsupported("no GPU timestamps".into()));
        };
        let words = (bytes / 16) as u32;
        let groups = (words / 1024).clamp(1, 65_535);
        let mut best = [f64::INFINITY; 2];
        let started = std::time::Instant::now();
        let mut runs = 0;
        let mut warm = true;
        while warm || runs < 2 * repeats.max(1) {
            if warm && started.elapsed().as_secs_f64() >= 0.5 {
                warm = false;
                runs = 0;
            }
            let copy = runs % 2 == 0;
            let params = OpParams {
                rows: words,
                w_words: (weights.chunks[0].buffer.bytes / 4) as u32,
                act_words: ((bytes + 4096) / 4) as u32,
                aux1: u32::from(copy),
                ..OpParams::default()
            };
            self.commands.submit_and_wait(|device, cmd| {
                let stage = vk::PipelineStageFlags::COMPUTE_SHADER;
                // SAFETY: `cmd` is recording; the buffers bound stay alive
                // until the wait that follows.
                unsafe {
                    device.cmd_reset_query_pool(cmd, queries, 0, 2);
                    device.cmd_write_timestamp(cmd, stage, queries, 0);
                    pipelines.record(cmd, Kernel::Stream, &params, groups, 0);
                    device.cmd_write_timestamp(cmd, stage, queries, 1);
                }
            })?;
            let ns = self.commands.read_timestamps(1)?[0];
            if !warm {
                let i = usize::from(!copy);
                best[i] = best[i].min(ns);
            }
            runs += 1;
        }
        let fault = u32::from_le_bytes(self.io.faults.mapped()?[..4].try_into().unwrap_or([0; 4]));
        if fault != 0 {
            return Err(VulkanError::ShaderFault(fault));
        }
        Ok((
            2.0 * bytes as f64 / (best[0] * 1e-9),
            bytes as f64 / (best[1] * 1e-9),
        ))
    }

    /// Makes the op kernels' pipelines on first use.
    pub(super) fn ensure_op_pipelines(&mut self) -> Result<(), VulkanError> {
        if self.ops.is_none() {
            self.ops = Some(OpPipelines::new(&self.ctx, self.ctx.info.bounds_checks)?);
        }
        Ok(())
    }

    /// After a program's submission: a fault a bounds-checking kernel
    /// raised fails it; otherwise its dispatches and device time (when
    /// `timed`) become the last program's.
    pub(super) fn close_program(
        &mut self,
        dispatches: usize,
        timed: bool,
    ) -> Result<(), VulkanError> {
        let fault = u32::from_le_bytes(self.io.faults.mapped()?[..4].try_into().unwrap_or([0; 4]));
        if fault != 0 {
            return Err(VulkanError::ShaderFault(fault));
        }
        self.program_dispatches = dispatches;
        self.program_nanos = if timed {
            self.commands.read_timestamps(1)?.first().copied()
        } else {
            None
        };
        Ok(())
    }

    /// Device time of the last program's ops, first dispatch to last, from
    /// GPU timestamps (`None` if the device has none).
    pub fn last_program_nanos(&self) -> Option<f64> {
        self.program_nanos
    }

    /// What the op planner may pick from on this device: the subgroup
    /// width where the subgroup variants are in use, cooperative matrices,
    /// the GPU decode product's largest batch.
    pub(super) fn kernel_choice(&self) -> KernelChoice {
        let info = &self.ctx.info;
        KernelChoice {
            subgroup: info.use_subgroups.then_some(info.subgroup_size),
            coopmat: info.use_coopmat,
            vector_batch: info.matvec_batch,
            vector_rows: info.matvec_shape.rows,
            integer_dot: info.use_integer_dot,
        }
    }

    /// Turns profiling of step programs on or off: with it, each
    /// dispatch is followed by a timestamp (which also keeps the device
    /// from overlapping dispatches that have no barrier between them, so a
    /// profiled step runs a little slower than an unprofiled one).
    pub fn set_profiling(&mut self, on: bool) {
        self.profiling = on;
    }

    /// Device time per kernel of the last step program, slowest first,
    /// when profiling was on for it (empty otherwise, and on a device
    /// without timestamps).
    pub fn last_program_profile(&self) -> &[KernelProfile] {
        &self.program_profile
    }

    /// Host time of the last step program: the whole call, its recording,
    /// and submission to completion (`None` before the first step).
    pub fn last_program_host(&self) -> Option<ProgramHostTime> {
        self.program_host
    }

    /// Kernel dispatches the last program recorded (ops, and for a step
    /// program each scatter and the one to three attention kernels).
    pub fn last_program_dispatches(&self) -> usize {
        self.program_dispatches
    }

    /// Barriers the last program recorded between its dispatches (a step
    /// program puts one only where a dispatch needs what an earlier one
    /// wrote; an op program after every op).
    pub fn last_program_barriers(&self) -> usize {
        self.program_barriers
    }

    /// Uploads `weights`, then runs `ops` as [`run_ops_on`](Self::run_ops_on).
    pub fn run_ops(
        &mut self,
        weights: &[u8],
        act: &mut [f32],
        meta: &mut [u32],
        ops: &[Op],
    ) -> Result<(), VulkanError> {
        let weights = self.upload_weights(weights)?;
        self.run_ops_on(&weights, act, meta, ops)
    }

    /// Runs `ops` in order over the resident `weights` and copies of `act`
    /// and `meta`, in one submission; on success `act` and `meta` hold what
    /// the program left. Every op is checked first (ranges, token ids and
    /// positions as given); a refused program dispatches nothing.
    pub fn run_ops_on(
        &mut self,
        weights: &VulkanWeights,
        act: &mut [f32],
        meta: &mut [u32],
        ops: &[Op],
    ) -> Result<(), VulkanError> {
        let act_len = act.len() as u64;
        if act_len > u64::from(u32::MAX) || meta.len() as u64 > u64::from(u32::MAX) {
            return Err(shape("activations or meta beyond 2^32 elements".into()));
        }
        let map = weights.map();
        let mut planned = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            let (kernel, params, groups, set) =
                op.plan_in(i, &map, act_len, meta, self.kernel_choice())?;
            planned.push((Recorded::Op(kernel, params, groups, set), op.accesses()));
        }
        let limit = self.ctx.info.max_storage_buffer_range;
        let act_bytes = (4 * act_len).max(4);
        let meta_bytes = (4 * meta.len() as u64).max(4);
        if act_bytes > limit || meta_bytes > limit {
            return Err(VulkanError::Unsupported(format!(
                "activations of {act_bytes} bytes are more than one binding covers ({limit})"
            )));
        }
        // The integer-dot products' rounded inputs, past the activations.
        let (planned, buffer_bytes) = with_rounded_inputs(planned, act_bytes, limit)?;
        let planned: Vec<(Kernel, OpParams, u32, usize)> = planned
            .into_iter()
            .filter_map(|(what, _)| match what {
                Recorded::Op(kernel, params, groups, set) => Some((kernel, params, groups, set)),
                Recorded::Attention(_) => None,
            })
            .collect();
        self.ensure_op_pipelines()?;
        let ctx = self.ctx.clone();
        let act_buf = Buffer::new(&ctx, "activations", buffer_bytes, MemoryLocation::GpuOnly)?;
        let meta_buf = Buffer::new(&ctx, "op meta", meta_bytes, MemoryLocation::GpuOnly)?;
        let mut upload = Buffer::new(
            &ctx,
            "op upload",
            act_bytes + meta_bytes,
            MemoryLocation::CpuToGpu,
        )?;
        let mut download = Buffer::new(
            &ctx,
            "op download",
            act_bytes + meta_bytes,
            MemoryLocation::GpuToCpu,
        )?;
        {
            let staged = upload.mapped()?;
            for (dst, v) in staged.chunks_exact_mut(4).zip(act.iter()) {
                dst.copy_from_slice(&v.to_le_bytes());
            }
            for (dst, v) in staged[act_bytes as usize..]
                .chunks_exact_mut(4)
                .zip(meta.iter())
            {
                dst.copy_from_slice(&v.to_le_bytes());
            }
        }
        self.io.faults.mapped()?[..4].copy_from_slice(&0u32.to_le_bytes());
        let pipelines = self
            .ops
            .as_ref()
            .ok_or_else(|| VulkanError::Unsupported("no op pipelines".into()))?;
        pipelines.bind(
            &weights.handles(),
            [act_buf.handle, self.io.faults.handle, meta_buf.handle],
        );
        let queries = self.commands.query_pool();
        let (up, down, act_dev, meta_dev) = (
            upload.handle,
            download.handle,
            act_buf.handle,
            meta_buf.handle,
        );
        self.commands.submit_and_wait(|device, cmd| {
            let rw = vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE;
            let after_upload = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                .dst_access_mask(rw)];
            let between = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                .dst_access_mask(rw | vk::AccessFlags::TRANSFER_READ)];
            let to_host = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                .dst_access_mask(vk::AccessFlags::HOST_READ)];
            let copy = |src_offset, dst_offset, size| {
                [vk::BufferCopy::default()
                    .src_offset(src_offset)
                    .dst_offset(dst_offset)
                    .size(size)]
            };
            // SAFETY: `cmd` is recording; every buffer and the pipelines'
            // set stay alive and large enough until the wait that follows.
            unsafe {
                device.cmd_copy_buffer(cmd, up, act_dev, &copy(0, 0, act_bytes));
                device.cmd_copy_buffer(cmd, up, meta_dev, &copy(act_bytes, 0, meta_bytes));
                device.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::DependencyFlags::empty(),
                    &after_upload,
                    &[],
                    &[],
                );
                let stamp = vk::PipelineStageFlags::COMPUTE_SHADER;
                if let Some(pool) = queries {
                    device.cmd_reset_query_pool(cmd, pool, 0, 2);
                    device.cmd_write_timestamp(cmd, stamp, pool, 0);
                }
                for (kernel, params, groups, set) in &planned {
                    pipelines.record(cmd, *kernel, params, *groups, *set);
                    device.cmd_pipeline_barrier(
                        cmd,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                        vk::DependencyFlags::empty(),
                        &between,
                        &[],
                        &[],
                    );
                }
                if let Some(pool) = queries {
                    device.cmd_write_timestamp(cmd, stamp, pool, 1);
                }
                device.cmd_copy_buffer(cmd, act_dev, down, &copy(0, 0, act_bytes));
                device.cmd_copy_buffer(cmd, meta_dev, down, &copy(0, act_bytes, meta_bytes));
                device.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::PipelineStageFlags::HOST,
                    vk::DependencyFlags::empty(),
                    &to_host,
                    &[],
                    &[],
                );
            }
        })?;
        self.close_program(planned.len(), queries.is_some())?;
        self.program_barriers = planned.len();
        let out = download.mapped()?;
        for (v, b) in act.iter_mut().zip(out.chunks_exact(4)) {
            *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        for (v, b) in meta
            .iter_mut()
            .zip(out[act_bytes as usize..].chunks_exact(4))
        {
            *v = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        Ok(())
    }

    /// `y[b][r] = Σ_c W[r][c] · x[b][c]` for `W` as `rows` rows of `cols`
    /// elements in `kind` blocks and `x` as `batch` rows of `cols`: one
    /// [`Op::Matmul`], weights uploaded for the call. Returns `batch` rows
    /// of `rows`.
    pub fn matmul(
        &mut self,
        kind: QuantKind,
        weights: &[u8],
        rows: usize,
        cols: usize,
        x: &[f32],
        batch: usize,
    ) -> Result<Vec<f32>, VulkanError> {
        let (bytes, _) = matrix_bytes(0, kind, rows as u32, cols as u32)?;
        if weights.len() as u64 != bytes {
            return Err(shape(format!(
                "{} weight bytes for {rows} rows of {cols}",
                weights.len()
            )));
        }
        if x.len() != batch * cols {
            return Err(shape(format!(
                "{} inputs for {batch} rows of {cols}",
                x.len()
            )));
        }
        let mut act = x.to_vec();
        act.resize(batch * cols + batch * rows, 0.0);
        let op = Op::Matmul {
            kind,
            weights: 0,
            rows: rows as u32,
            cols: cols as u32,
            batch: batch as u32,
            x: 0,
            x_stride: cols as u32,
            y: (batch * cols) as u32,
            y_stride: rows as u32,
            accumulate: false,
        };
        self.run_ops(weights, &mut act, &mut [], &[op])?;
        Ok(act.split_off(batch * cols))
    }
}
