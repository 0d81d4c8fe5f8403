//! Running [`Op`] programs: the resident weights they read, and recording a
//! whole program into one command buffer.

use ash::vk;
use gpu_allocator::MemoryLocation;
use pagoda_core::QuantKind;

use super::op::{matrix_bytes, shape, Op};
use super::pipelines::OpPipelines;
use crate::memory::Buffer;
use crate::{VulkanBackend, VulkanError};

/// Weights on the device, uploaded once with
/// [`VulkanBackend::upload_weights`] and read by every later program.
pub struct VulkanWeights {
    pub(super) buffer: Buffer,
    bytes: u64,
}

impl std::fmt::Debug for VulkanWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanWeights")
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl VulkanWeights {
    /// Bytes uploaded.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl VulkanBackend {
    /// Uploads `bytes` (GGUF tensors, tables) to a device-local buffer that
    /// programs read with [`run_ops_on`](Self::run_ops_on).
    pub fn upload_weights(&mut self, bytes: &[u8]) -> Result<VulkanWeights, VulkanError> {
        let limit = self.ctx.info.max_storage_buffer_range;
        let padded = (bytes.len() as u64).next_multiple_of(4).max(4);
        if padded > limit {
            return Err(VulkanError::Unsupported(format!(
                "{padded} bytes of weights are more than one binding covers ({limit})"
            )));
        }
        let buffer = Buffer::new(&self.ctx, "weights", padded, MemoryLocation::GpuOnly)?;
        let mut staging = Buffer::new(
            &self.ctx,
            "weights upload",
            padded,
            MemoryLocation::CpuToGpu,
        )?;
        staging.mapped()?[..bytes.len()].copy_from_slice(bytes);
        let (src, dst) = (staging.handle, buffer.handle);
        self.commands.submit_and_wait(|device, cmd| {
            let region = [vk::BufferCopy::default().size(padded)];
            // SAFETY: `cmd` is recording; both buffers are live and `padded`
            // long until the wait that follows.
            unsafe { device.cmd_copy_buffer(cmd, src, dst, &region) };
        })?;
        Ok(VulkanWeights {
            buffer,
            bytes: bytes.len() as u64,
        })
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

    /// The subgroup width the op planner shapes the decode product for,
    /// where the subgroup kernel variants are in use.
    pub(super) fn subgroup_width(&self) -> Option<u32> {
        let info = &self.ctx.info;
        info.use_subgroups.then_some(info.subgroup_size)
    }

    /// Kernel dispatches the last program recorded (ops, and for a step
    /// program each scatter and the one to three attention kernels).
    pub fn last_program_dispatches(&self) -> usize {
        self.program_dispatches
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
        let mut planned = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            planned.push(op.plan(
                i,
                weights.buffer.bytes,
                act_len,
                meta,
                self.subgroup_width(),
                self.ctx.info.use_coopmat,
            )?);
        }
        let limit = self.ctx.info.max_storage_buffer_range;
        let act_bytes = (4 * act_len).max(4);
        let meta_bytes = (4 * meta.len() as u64).max(4);
        if act_bytes > limit || meta_bytes > limit {
            return Err(VulkanError::Unsupported(format!(
                "activations of {act_bytes} bytes are more than one binding covers ({limit})"
            )));
        }
        if self.ops.is_none() {
            self.ops = Some(OpPipelines::new(&self.ctx, self.ctx.info.bounds_checks)?);
        }
        let ctx = self.ctx.clone();
        let act_buf = Buffer::new(&ctx, "activations", act_bytes, MemoryLocation::GpuOnly)?;
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
        pipelines.bind([
            weights.buffer.handle,
            act_buf.handle,
            self.io.faults.handle,
            meta_buf.handle,
        ]);
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
                for (kernel, params, groups) in &planned {
                    pipelines.record(cmd, *kernel, params, *groups);
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
        };
        self.run_ops(weights, &mut act, &mut [], &[op])?;
        Ok(act.split_off(batch * cols))
    }
}
