//! Model ops on the device: the kernels `shaders/kernels.list` marks
//! `-DOPS`, with their own descriptor layout (weights, activations, the
//! fault word) and push constants (`shaders/ops_common.glsl`).
//!
//! This is the first piece of running whole models on Vulkan: the matrix
//! product over GGUF blocks as the file lays them out, dequantized in
//! registers. [`VulkanBackend::matmul`] runs one product end to end
//! (upload, dispatch, download) so it can be checked against a plain
//! reference; a resident-weight step that records every op of a forward
//! pass into one command buffer builds on the same pipelines.

use std::sync::Arc;

use ash::vk;
use gpu_allocator::MemoryLocation;
use pagoda_core::QuantKind;

use crate::context::Context;
use crate::kernels::{create_pipeline, Kernel};
use crate::memory::Buffer;
use crate::{inject, VulkanBackend, VulkanError};

/// Bindings of the op layout: weights, activations, faults.
const BINDINGS: u32 = 3;

/// Workgroups one dispatch asks for at most; the kernel loops over rows.
const MAX_GROUPS: u32 = 65_535;

/// The push constants of `shaders/ops_common.glsl`, field for field.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct OpParams {
    pub rows: u32,
    pub cols: u32,
    pub batch: u32,
    pub w_offset: u32,
    pub row_bytes: u32,
    pub x_offset: u32,
    pub x_stride: u32,
    pub y_offset: u32,
    pub y_stride: u32,
    pub w_words: u32,
    pub act_words: u32,
}

impl OpParams {
    fn bytes(&self) -> [u8; 44] {
        let words = [
            self.rows,
            self.cols,
            self.batch,
            self.w_offset,
            self.row_bytes,
            self.x_offset,
            self.x_stride,
            self.y_offset,
            self.y_stride,
            self.w_words,
            self.act_words,
        ];
        let mut out = [0u8; 44];
        for (dst, w) in out.chunks_exact_mut(4).zip(words) {
            dst.copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

/// The matrix-product kernel for a weight block type, if there is one.
pub fn matmul_kernel(kind: QuantKind) -> Option<Kernel> {
    Some(match kind {
        QuantKind::F32 => Kernel::MatmulF32,
        QuantKind::F16 => Kernel::MatmulF16,
        QuantKind::Q4_0 => Kernel::MatmulQ40,
        QuantKind::Q4_1 => Kernel::MatmulQ41,
        QuantKind::Q8_0 => Kernel::MatmulQ80,
        _ => return None,
    })
}

/// The op kernels' pipelines, their layout and their one descriptor set.
pub(crate) struct OpPipelines {
    ctx: Arc<Context>,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pool: vk::DescriptorPool,
    set: vk::DescriptorSet,
    /// Indexed by `Kernel as usize`; null for attention kernels.
    pipelines: Vec<vk::Pipeline>,
}

impl OpPipelines {
    pub fn new(ctx: &Arc<Context>, checked: bool) -> Result<Self, VulkanError> {
        let mut this = Self {
            ctx: ctx.clone(),
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pool: vk::DescriptorPool::null(),
            set: vk::DescriptorSet::null(),
            pipelines: Vec::new(),
        };
        let device = &ctx.device;
        let bindings: Vec<_> = (0..BINDINGS)
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        // SAFETY: valid create infos on a live device; every handle is
        // stored in `this` at once, so its Drop destroys it on error.
        unsafe {
            let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
            inject::before("vkCreateDescriptorSetLayout")?;
            this.set_layout = device
                .create_descriptor_set_layout(&info, None)
                .map_err(VulkanError::vk("vkCreateDescriptorSetLayout"))?;
            let ranges = [vk::PushConstantRange::default()
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
                .size(OpParams::default().bytes().len() as u32)];
            let set_layouts = [this.set_layout];
            let info = vk::PipelineLayoutCreateInfo::default()
                .set_layouts(&set_layouts)
                .push_constant_ranges(&ranges);
            inject::before("vkCreatePipelineLayout")?;
            this.layout = device
                .create_pipeline_layout(&info, None)
                .map_err(VulkanError::vk("vkCreatePipelineLayout"))?;
            let sizes = [vk::DescriptorPoolSize::default()
                .ty(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(BINDINGS)];
            let info = vk::DescriptorPoolCreateInfo::default()
                .max_sets(1)
                .pool_sizes(&sizes);
            inject::before("vkCreateDescriptorPool")?;
            this.pool = device
                .create_descriptor_pool(&info, None)
                .map_err(VulkanError::vk("vkCreateDescriptorPool"))?;
            let info = vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(this.pool)
                .set_layouts(&set_layouts);
            inject::before("vkAllocateDescriptorSets")?;
            this.set = device
                .allocate_descriptor_sets(&info)
                .map_err(VulkanError::vk("vkAllocateDescriptorSets"))?[0];
            for kernel in Kernel::ALL {
                let pipeline = if kernel.is_op() {
                    create_pipeline(device, kernel, checked, this.layout)?
                } else {
                    vk::Pipeline::null()
                };
                this.pipelines.push(pipeline);
            }
        }
        Ok(this)
    }

    /// Points the set at the weights, the activations and the fault word.
    fn bind(&self, buffers: [vk::Buffer; BINDINGS as usize]) {
        let infos: Vec<[vk::DescriptorBufferInfo; 1]> = buffers
            .iter()
            .map(|&b| {
                [vk::DescriptorBufferInfo::default()
                    .buffer(b)
                    .range(vk::WHOLE_SIZE)]
            })
            .collect();
        let writes: Vec<_> = infos
            .iter()
            .enumerate()
            .map(|(i, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(self.set)
                    .dst_binding(i as u32)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(info)
            })
            .collect();
        // SAFETY: the set is not in use by any pending submission (every
        // submission is waited for), and the buffers are live.
        unsafe { self.ctx.device.update_descriptor_sets(&writes, &[]) };
    }

    /// Records one dispatch of an op kernel.
    ///
    /// # Safety
    /// `cmd` is recording, and the buffers last bound stay alive until the
    /// submission is waited for.
    unsafe fn record(
        &self,
        cmd: vk::CommandBuffer,
        kernel: Kernel,
        params: &OpParams,
        groups: u32,
    ) {
        let device = &self.ctx.device;
        // SAFETY: as the caller guarantees; the pipeline, layout and set
        // belong to this device.
        unsafe {
            device.cmd_bind_pipeline(
                cmd,
                vk::PipelineBindPoint::COMPUTE,
                self.pipelines[kernel as usize],
            );
            device.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::COMPUTE,
                self.layout,
                0,
                &[self.set],
                &[],
            );
            device.cmd_push_constants(
                cmd,
                self.layout,
                vk::ShaderStageFlags::COMPUTE,
                0,
                &params.bytes(),
            );
            device.cmd_dispatch(cmd, groups, 1, 1);
        }
    }
}

impl Drop for OpPipelines {
    fn drop(&mut self) {
        // SAFETY: nothing is pending (every submission is waited for);
        // null handles are ignored.
        unsafe {
            let device = &self.ctx.device;
            for &p in &self.pipelines {
                device.destroy_pipeline(p, None);
            }
            device.destroy_descriptor_pool(self.pool, None);
            device.destroy_pipeline_layout(self.layout, None);
            device.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}

impl VulkanBackend {
    /// `y[b][r] = Σ_c W[r][c] · x[b][c]` on the device, for `W` given as
    /// `rows` rows of `cols` elements in GGUF's `kind` blocks (as a file
    /// holds them) and `x` as `batch` rows of `cols` f32. Returns `batch`
    /// rows of `rows` f32.
    ///
    /// Uploads the weights on every call: this is the op checked on its own;
    /// a model keeps its weights resident.
    pub fn matmul(
        &mut self,
        kind: QuantKind,
        weights: &[u8],
        rows: usize,
        cols: usize,
        x: &[f32],
        batch: usize,
    ) -> Result<Vec<f32>, VulkanError> {
        let kernel = matmul_kernel(kind).ok_or_else(|| {
            VulkanError::Unsupported(format!("no matrix product for {} weights", kind.name()))
        })?;
        let row_bytes = kind.bytes_for(cols).map_err(|_| {
            VulkanError::Shape(format!(
                "rows of {cols} are not whole {} blocks",
                kind.name()
            ))
        })?;
        if weights.len() != rows * row_bytes {
            return Err(VulkanError::Shape(format!(
                "{} weight bytes for {rows} rows of {row_bytes}",
                weights.len()
            )));
        }
        if x.len() != batch * cols {
            return Err(VulkanError::Shape(format!(
                "{} inputs for {batch} rows of {cols}",
                x.len()
            )));
        }
        if rows == 0 || batch == 0 {
            return Ok(Vec::new());
        }
        let weight_bytes = weights.len().next_multiple_of(4) as u64;
        let act_words = (batch * cols + batch * rows) as u64;
        let limit = self.ctx.info.max_storage_buffer_range;
        if weight_bytes > limit || act_words * 4 > limit || act_words > u64::from(u32::MAX) {
            return Err(VulkanError::Unsupported(format!(
                "a {weight_bytes}-byte matrix is more than one binding covers ({limit})"
            )));
        }
        if self.ops.is_none() {
            self.ops = Some(OpPipelines::new(&self.ctx, self.ctx.info.bounds_checks)?);
        }
        let ctx = self.ctx.clone();
        let device_buffer = |name, bytes| Buffer::new(&ctx, name, bytes, MemoryLocation::GpuOnly);
        let w_buf = device_buffer("matmul weights", weight_bytes)?;
        let act = device_buffer("matmul activations", act_words * 4)?;
        let x_bytes = (x.len() * 4) as u64;
        let mut upload = Buffer::new(
            &ctx,
            "matmul upload",
            weight_bytes + x_bytes,
            MemoryLocation::CpuToGpu,
        )?;
        let y_len = batch * rows;
        let mut download = Buffer::new(
            &ctx,
            "matmul download",
            (y_len * 4) as u64,
            MemoryLocation::GpuToCpu,
        )?;
        {
            let staged = upload.mapped()?;
            staged[..weights.len()].copy_from_slice(weights);
            for (dst, v) in staged[weight_bytes as usize..].chunks_exact_mut(4).zip(x) {
                dst.copy_from_slice(&v.to_le_bytes());
            }
        }
        self.io.faults.mapped()?[..4].copy_from_slice(&0u32.to_le_bytes());
        let params = OpParams {
            rows: rows as u32,
            cols: cols as u32,
            batch: batch as u32,
            w_offset: 0,
            row_bytes: row_bytes as u32,
            x_offset: 0,
            x_stride: cols as u32,
            y_offset: (batch * cols) as u32,
            y_stride: rows as u32,
            w_words: (weight_bytes / 4) as u32,
            act_words: act_words as u32,
        };
        let ops = self
            .ops
            .as_ref()
            .ok_or_else(|| VulkanError::Unsupported("no op pipelines".into()))?;
        ops.bind([w_buf.handle, act.handle, self.io.faults.handle]);
        let groups = (rows as u32).min(MAX_GROUPS);
        let (up, w_dev, act_dev, down) = (upload.handle, w_buf.handle, act.handle, download.handle);
        self.commands.submit_and_wait(|device, cmd| {
            let transfer_to_compute = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)];
            let compute_to_transfer = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                .dst_access_mask(vk::AccessFlags::TRANSFER_READ)];
            let to_host = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::TRANSFER_WRITE | vk::AccessFlags::SHADER_WRITE)
                .dst_access_mask(vk::AccessFlags::HOST_READ)];
            // SAFETY: `cmd` is recording; every buffer is live and large
            // enough until the wait that follows.
            unsafe {
                device.cmd_copy_buffer(
                    cmd,
                    up,
                    w_dev,
                    &[vk::BufferCopy::default().size(weight_bytes)],
                );
                device.cmd_copy_buffer(
                    cmd,
                    up,
                    act_dev,
                    &[vk::BufferCopy::default()
                        .src_offset(weight_bytes)
                        .size(x_bytes)],
                );
                device.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::DependencyFlags::empty(),
                    &transfer_to_compute,
                    &[],
                    &[],
                );
                ops.record(cmd, kernel, &params, groups);
                device.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::DependencyFlags::empty(),
                    &compute_to_transfer,
                    &[],
                    &[],
                );
                device.cmd_copy_buffer(
                    cmd,
                    act_dev,
                    down,
                    &[vk::BufferCopy::default()
                        .src_offset(x_bytes)
                        .size((y_len * 4) as u64)],
                );
                device.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                    vk::PipelineStageFlags::HOST,
                    vk::DependencyFlags::empty(),
                    &to_host,
                    &[],
                    &[],
                );
            }
        })?;
        let fault = u32::from_le_bytes(self.io.faults.mapped()?[..4].try_into().unwrap_or([0; 4]));
        if fault != 0 {
            return Err(VulkanError::ShaderFault(fault));
        }
        let out = download.mapped()?;
        Ok(out[..y_len * 4]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_constants_match_the_glsl_block() {
        // 11 four-byte fields, within the 128 bytes every device allows.
        let p = OpParams {
            rows: 3,
            act_words: 9,
            ..OpParams::default()
        };
        let bytes = p.bytes();
        assert_eq!(&bytes[0..4], &3u32.to_le_bytes());
        assert_eq!(&bytes[40..44], &9u32.to_le_bytes());
    }

    #[test]
    fn every_product_kernel_is_an_op_and_no_attention_kernel_is() {
        for kind in QuantKind::ALL {
            if let Some(k) = matmul_kernel(kind) {
                assert!(k.is_op(), "{}", k.name());
            }
        }
        assert!(!Kernel::Attention.is_op());
        assert!(!Kernel::Decode.is_op());
    }
}
