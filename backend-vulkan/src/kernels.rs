//! The compute pipelines: one descriptor layout and push-constant block
//! shared by every kernel of `shaders/kernels.list`, and the SPIR-V, checked
//! as it is loaded.

use std::io::Cursor;
use std::sync::Arc;

use ash::vk;

use crate::context::Context;
use crate::{inject, VulkanError};

include!(concat!(env!("OUT_DIR"), "/kernels.rs"));

/// What a kernel variant needs of the device (from its defines in
/// `shaders/kernels.list`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    /// Subgroup arithmetic, max and add (`SUBGROUP`).
    pub subgroup_arithmetic: bool,
    /// `shaderFloat16` (`F16_ARITH`).
    pub float16: bool,
    /// `VK_KHR_cooperative_matrix` with an f16 shape that fits (`COOPMAT`);
    /// built with specialization constants for the shape.
    pub cooperative_matrix: bool,
    /// `VK_KHR_shader_integer_dot_product` (`INT_DOT`).
    pub integer_dot: bool,
}

/// What a device offers and the backend wants of the optional features
/// kernels may need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Offered {
    pub subgroups: bool,
    pub float16: bool,
    pub coopmat: bool,
    pub integer_dot: bool,
}

impl Needs {
    /// Whether a kernel with these needs may run where the `offered`
    /// features are (or are not) available and wanted.
    pub(crate) fn met(self, offered: Offered) -> bool {
        (offered.subgroups || !self.subgroup_arithmetic)
            && (offered.float16 || !self.float16)
            && (offered.coopmat || !self.cooperative_matrix)
            && (offered.integer_dot || !self.integer_dot)
    }
}

/// Storage buffers the KV pool may be split across (`KV_CHUNKS` in
/// `shaders/common.glsl`).
pub const KV_CHUNKS: usize = 8;

/// Bindings after the KV chunks: inputs, outputs, metadata, partials, faults.
const IO_BINDINGS: u32 = 5;

/// Highest SPIR-V version the modules may declare (Vulkan 1.1 takes 1.3).
const MAX_SPIRV_VERSION: u32 = 0x0001_0300;

/// The push constants of `shaders/common.glsl`, field for field.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Params {
    pub dtype: u32,
    pub layer: u32,
    pub layers: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    pub q_heads: u32,
    pub pages_per_chunk: u32,
    pub page_words: u32,
    pub pages: u32,
    pub count: u32,
    pub scale: f32,
    pub seq_offset: u32,
    pub item_offset: u32,
    pub chunks: u32,
    pub input_words: u32,
    pub output_words: u32,
    pub meta_words: u32,
    pub partial_words: u32,
    pub window: u32,
    pub softcap: f32,
    /// First word of the inputs and of the outputs in their buffers (a
    /// step program points both at its activations).
    pub input_offset: u32,
    pub output_offset: u32,
}

impl Params {
    fn bytes(&self) -> [u8; std::mem::size_of::<Params>()] {
        let mut out = [0u8; std::mem::size_of::<Params>()];
        let words = [
            self.dtype,
            self.layer,
            self.layers,
            self.kv_heads,
            self.head_dim,
            self.q_heads,
            self.pages_per_chunk,
            self.page_words,
            self.pages,
            self.count,
            self.scale.to_bits(),
            self.seq_offset,
            self.item_offset,
            self.chunks,
            self.input_words,
            self.output_words,
            self.meta_words,
            self.partial_words,
            self.window,
            self.softcap.to_bits(),
            self.input_offset,
            self.output_offset,
        ];
        for (dst, w) in out.chunks_exact_mut(4).zip(words) {
            dst.copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

/// Checks a module and returns its words: a whole number of words, the
/// SPIR-V magic number, a version Vulkan 1.1 accepts.
pub(crate) fn load_spirv(kernel: Kernel, bytes: &[u8]) -> Result<Vec<u32>, VulkanError> {
    let words = ash::util::read_spv(&mut Cursor::new(bytes))
        .map_err(|e| VulkanError::Unsupported(format!("{}: not SPIR-V: {e}", kernel.name())))?;
    match words.get(1) {
        Some(&v) if v <= MAX_SPIRV_VERSION => Ok(words),
        v => Err(VulkanError::Unsupported(format!(
            "{}: SPIR-V version {v:?} is newer than Vulkan 1.1 accepts",
            kernel.name()
        ))),
    }
}

/// Builds `kernel`'s compute pipeline (plain or bounds-checking) on
/// `layout`, with `constants` as its specialization constants 0, 1, ...
///
/// # Safety
/// `layout` is a live pipeline layout of `device` that matches the
/// kernel's bindings and push constants.
pub(crate) unsafe fn create_pipeline(
    device: &ash::Device,
    kernel: Kernel,
    checked: bool,
    layout: vk::PipelineLayout,
    constants: &[u32],
) -> Result<vk::Pipeline, VulkanError> {
    let entries: Vec<vk::SpecializationMapEntry> = (0..constants.len() as u32)
        .map(|i| {
            vk::SpecializationMapEntry::default()
                .constant_id(i)
                .offset(4 * i)
                .size(4)
        })
        .collect();
    let data: Vec<u8> = constants.iter().flat_map(|c| c.to_le_bytes()).collect();
    let specialization = vk::SpecializationInfo::default()
        .map_entries(&entries)
        .data(&data);
    let code = load_spirv(kernel, kernel.spirv(checked))?;
    let info = vk::ShaderModuleCreateInfo::default().code(&code);
    inject::before("vkCreateShaderModule")?;
    // SAFETY: valid create infos on a live device (the caller's promise
    // covers the layout).
    unsafe {
        let module = device
            .create_shader_module(&info, None)
            .map_err(VulkanError::vk("vkCreateShaderModule"))?;
        let mut stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(c"main");
        if !constants.is_empty() {
            stage = stage.specialization_info(&specialization);
        }
        let info = [vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(layout)];
        let pipeline = inject::before("vkCreateComputePipelines").and_then(|()| {
            device
                .create_compute_pipelines(vk::PipelineCache::null(), &info, None)
                .map_err(|(_, e)| VulkanError::vk("vkCreateComputePipelines")(e))
        });
        // The module is only needed while the pipeline is made.
        device.destroy_shader_module(module, None);
        Ok(pipeline?[0])
    }
}

/// Every kernel's pipeline, their shared layout, and the one descriptor set.
pub(crate) struct Pipelines {
    ctx: Arc<Context>,
    set_layout: vk::DescriptorSetLayout,
    pub layout: vk::PipelineLayout,
    pool: vk::DescriptorPool,
    pub set: vk::DescriptorSet,
    pipelines: Vec<vk::Pipeline>,
}

impl Pipelines {
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
        let mut bindings = vec![vk::DescriptorSetLayoutBinding::default()
            .binding(0)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(KV_CHUNKS as u32)
            .stage_flags(vk::ShaderStageFlags::COMPUTE)];
        for b in 1..=IO_BINDINGS {
            bindings.push(
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE),
            );
        }
        let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
        // SAFETY: valid create infos on a live device; every handle created
        // here is stored in `this` at once, so its Drop destroys it on error.
        unsafe {
            inject::before("vkCreateDescriptorSetLayout")?;
            this.set_layout = device
                .create_descriptor_set_layout(&info, None)
                .map_err(VulkanError::vk("vkCreateDescriptorSetLayout"))?;
            let ranges = [vk::PushConstantRange::default()
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
                .size(std::mem::size_of::<Params>() as u32)];
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
                .descriptor_count(KV_CHUNKS as u32 + IO_BINDINGS)];
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
                // Variants the device cannot run (or that are turned off) get
                // no pipeline; the backend never picks them. Model ops have
                // their own layout (`ops.rs`).
                if kernel.is_op()
                    || !kernel.needs().met(Offered {
                        subgroups: ctx.info.use_subgroups,
                        float16: ctx.info.use_float16,
                        ..Offered::default()
                    })
                {
                    this.pipelines.push(vk::Pipeline::null());
                    continue;
                }
                this.pipelines
                    .push(create_pipeline(device, kernel, checked, this.layout, &[])?);
            }
        }
        Ok(this)
    }

    pub fn pipeline(&self, kernel: Kernel) -> vk::Pipeline {
        let pipeline = self.pipelines[kernel as usize];
        debug_assert!(
            pipeline != vk::Pipeline::null(),
            "{} was picked on a device without what it needs",
            kernel.name()
        );
        pipeline
    }

    /// Records a dispatch of `groups` workgroups.
    pub fn record(&self, cmd: vk::CommandBuffer, kernel: Kernel, params: &Params, groups: u32) {
        let device = &self.ctx.device;
        // SAFETY: `cmd` is recording; the pipeline, layout and set belong to
        // this device and the set's buffers stay alive until the submission
        // is waited for.
        unsafe {
            device.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, self.pipeline(kernel));
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

    /// Points the set at the KV chunks (the last repeated to fill the array)
    /// and the five I/O buffers.
    pub fn bind(&self, chunks: &[vk::Buffer], io: [vk::Buffer; IO_BINDINGS as usize]) {
        let whole = |b: vk::Buffer| {
            [vk::DescriptorBufferInfo::default()
                .buffer(b)
                .range(vk::WHOLE_SIZE)]
        };
        let kv: Vec<vk::DescriptorBufferInfo> = (0..KV_CHUNKS)
            .map(|i| whole(chunks[i.min(chunks.len() - 1)])[0])
            .collect();
        let io_infos: Vec<[vk::DescriptorBufferInfo; 1]> = io.iter().map(|&b| whole(b)).collect();
        let mut writes = vec![vk::WriteDescriptorSet::default()
            .dst_set(self.set)
            .dst_binding(0)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .buffer_info(&kv)];
        for (i, info) in io_infos.iter().enumerate() {
            writes.push(
                vk::WriteDescriptorSet::default()
                    .dst_set(self.set)
                    .dst_binding(i as u32 + 1)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(info),
            );
        }
        // SAFETY: the set is not in use by any pending submission (every
        // submission is waited for), and the buffers are live.
        unsafe { self.ctx.device.update_descriptor_sets(&writes, &[]) };
    }
}

impl Drop for Pipelines {
    fn drop(&mut self) {
        // SAFETY: the backend waits for every submission before returning,
        // so nothing uses these objects; null handles are ignored.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_committed_module_is_valid_spirv() {
        for kernel in Kernel::ALL {
            for checked in [false, true] {
                let words = load_spirv(kernel, kernel.spirv(checked)).unwrap();
                assert_eq!(words[0], 0x0723_0203, "{}", kernel.name());
            }
        }
    }

    #[test]
    fn a_truncated_or_foreign_module_is_refused() {
        let good = Kernel::Attention.spirv(false);
        assert!(load_spirv(Kernel::Attention, &good[..good.len() - 2]).is_err());
        assert!(load_spirv(Kernel::Attention, &[0u8; 64]).is_err());
    }

    #[test]
    fn push_constants_match_the_glsl_block() {
        // 22 four-byte fields, within the 128 bytes every device allows.
        assert_eq!(std::mem::size_of::<Params>(), 22 * 4);
        let p = Params {
            scale: 0.5,
            partial_words: 7,
            window: 512,
            softcap: 30.0,
            input_offset: 11,
            output_offset: 13,
            ..Params::default()
        };
        let bytes = p.bytes();
        assert_eq!(&bytes[40..44], &0.5f32.to_bits().to_le_bytes());
        assert_eq!(&bytes[68..72], &7u32.to_le_bytes());
        assert_eq!(&bytes[72..76], &512u32.to_le_bytes());
        assert_eq!(&bytes[76..80], &30.0f32.to_bits().to_le_bytes());
        assert_eq!(&bytes[80..84], &11u32.to_le_bytes());
        assert_eq!(&bytes[84..88], &13u32.to_le_bytes());
    }
}
