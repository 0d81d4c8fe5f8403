//! The op kernels' pipelines: their own descriptor layout (weights,
//! activations, the fault word, meta) and push constants, field for field
//! as `shaders/ops_common.glsl` declares them.

use std::sync::Arc;

use ash::vk;
use pagoda_core::QuantKind;

use super::program::MAX_WEIGHT_CHUNKS;
use crate::context::Context;
use crate::kernels::{create_pipeline, Kernel, Offered};
use crate::MatvecShape;
use crate::{inject, VulkanError};

/// Bindings of the op layout: weights, activations, faults, meta.
pub(crate) const BINDINGS: u32 = 4;

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
    pub meta_words: u32,
    pub aux0: u32,
    pub aux1: u32,
    pub aux2: u32,
    pub aux3: u32,
    pub eps: f32,
}

impl OpParams {
    pub(crate) fn bytes(&self) -> [u8; 68] {
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
            self.meta_words,
            self.aux0,
            self.aux1,
            self.aux2,
            self.aux3,
            self.eps.to_bits(),
        ];
        let mut out = [0u8; 68];
        for (dst, w) in out.chunks_exact_mut(4).zip(words) {
            dst.copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

/// Activation rows the decode product (`shaders/matmul.comp`) takes in one
/// pass; the host gives larger batches to the tiled product.
pub(crate) const DECODE_MAX_BATCH: u32 = 8;

/// Output rows per workgroup of the decode product without subgroups.
pub(crate) const DECODE_ROWS: u32 = 4;

/// Output rows × activation rows per workgroup of the tiled product
/// (`TR`, `TB` in `shaders/matmul_tiled.comp`).
pub(crate) const TILE_ROWS: u32 = 64;
pub(crate) const TILE_BATCH: u32 = 32;

/// The matrix-product kernels of one weight block type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatmulKernels {
    /// Batches up to 8 activation rows, reduced in shared memory.
    pub decode: Kernel,
    /// The same, one subgroup per output row, reduced by subgroup add
    /// (where the device has subgroup arithmetic).
    pub decode_subgroup: Kernel,
    /// Larger batches: tiles of weights dequantized once into shared
    /// memory for many activation rows.
    pub tiled: Kernel,
    /// The same tiles multiplied as f16 cooperative matrices (where the
    /// device has `VK_KHR_cooperative_matrix`).
    pub coopmat: Kernel,
    /// The decode product shaped for GPU memory bandwidth
    /// (`shaders/matvec.comp`: four rows a workgroup sharing each
    /// activation load, wide weight loads), for the quantized types, where
    /// the device has subgroup arithmetic.
    pub vector: Option<Kernel>,
    /// The same on activations rounded to 8 bits, in integer dot products
    /// (devices with `VK_KHR_shader_integer_dot_product`).
    pub vector_dot: Option<Kernel>,
}

/// The workgroup size of a kernel that takes a whole row per workgroup and
/// reduces it by halves: the largest power of two up to `most` that the
/// device allows (at least 128, which every Vulkan device allows).
fn row_workgroup(info: &crate::DeviceInfo, most: u32) -> u32 {
    let allowed = info.max_workgroup.clamp(128, most);
    1 << (31 - allowed.leading_zeros())
}

/// The matrix-product kernels for a weight block type, if there are any.
pub fn matmul_kernels(kind: QuantKind) -> Option<MatmulKernels> {
    use Kernel as K;
    #[rustfmt::skip]
    let vector = match kind {
        QuantKind::Q4_0 => Some(K::MatvecQ40),
        QuantKind::Q4_1 => Some(K::MatvecQ41),
        QuantKind::Q5_0 => Some(K::MatvecQ50),
        QuantKind::Q5_1 => Some(K::MatvecQ51),
        QuantKind::Q8_0 => Some(K::MatvecQ80),
        QuantKind::Q4_K => Some(K::MatvecQ4K),
        QuantKind::Q5_K => Some(K::MatvecQ5K),
        QuantKind::Q6_K => Some(K::MatvecQ6K),
        _ => None,
    };
    #[rustfmt::skip]
    let vector_dot = match kind {
        QuantKind::Q4_0 => Some(K::MatvecDotQ40),
        QuantKind::Q4_1 => Some(K::MatvecDotQ41),
        QuantKind::Q5_0 => Some(K::MatvecDotQ50),
        QuantKind::Q5_1 => Some(K::MatvecDotQ51),
        QuantKind::Q8_0 => Some(K::MatvecDotQ80),
        QuantKind::Q4_K => Some(K::MatvecDotQ4K),
        QuantKind::Q5_K => Some(K::MatvecDotQ5K),
        QuantKind::Q6_K => Some(K::MatvecDotQ6K),
        _ => None,
    };
    #[rustfmt::skip]
    let (decode, decode_subgroup, tiled, coopmat) = match kind {
        QuantKind::F32 => (K::MatmulF32, K::MatmulF32Subgroup, K::MatmulTiledF32, K::MatmulCoopF32),
        QuantKind::F16 => (K::MatmulF16, K::MatmulF16Subgroup, K::MatmulTiledF16, K::MatmulCoopF16),
        QuantKind::Q4_0 => (K::MatmulQ40, K::MatmulQ40Subgroup, K::MatmulTiledQ40, K::MatmulCoopQ40),
        QuantKind::Q4_1 => (K::MatmulQ41, K::MatmulQ41Subgroup, K::MatmulTiledQ41, K::MatmulCoopQ41),
        QuantKind::Q5_0 => (K::MatmulQ50, K::MatmulQ50Subgroup, K::MatmulTiledQ50, K::MatmulCoopQ50),
        QuantKind::Q5_1 => (K::MatmulQ51, K::MatmulQ51Subgroup, K::MatmulTiledQ51, K::MatmulCoopQ51),
        QuantKind::Q8_0 => (K::MatmulQ80, K::MatmulQ80Subgroup, K::MatmulTiledQ80, K::MatmulCoopQ80),
        QuantKind::Q4_K => (K::MatmulQ4K, K::MatmulQ4KSubgroup, K::MatmulTiledQ4K, K::MatmulCoopQ4K),
        QuantKind::Q5_K => (K::MatmulQ5K, K::MatmulQ5KSubgroup, K::MatmulTiledQ5K, K::MatmulCoopQ5K),
        QuantKind::Q6_K => (K::MatmulQ6K, K::MatmulQ6KSubgroup, K::MatmulTiledQ6K, K::MatmulCoopQ6K),
        QuantKind::Q2_K => (K::MatmulQ2K, K::MatmulQ2KSubgroup, K::MatmulTiledQ2K, K::MatmulCoopQ2K),
        QuantKind::Q3_K => (K::MatmulQ3K, K::MatmulQ3KSubgroup, K::MatmulTiledQ3K, K::MatmulCoopQ3K),
        QuantKind::IQ4_NL => (K::MatmulIq4Nl, K::MatmulIq4NlSubgroup, K::MatmulTiledIq4Nl, K::MatmulCoopIq4Nl),
        QuantKind::IQ4_XS => (K::MatmulIq4Xs, K::MatmulIq4XsSubgroup, K::MatmulTiledIq4Xs, K::MatmulCoopIq4Xs),
        // No kernel reads BF16: the host widens it to f32 on upload.
        QuantKind::BF16 => return None,
        // No kernel reads MXFP4 (gpt-oss's experts, whose mixture runs on
        // the host): its products stay on the host.
        QuantKind::MXFP4 => return None,
    };
    Some(MatmulKernels {
        decode,
        decode_subgroup,
        tiled,
        coopmat,
        vector,
        vector_dot,
    })
}

/// The decode matrix-product kernel for a weight block type, if there is
/// one (see [`matmul_kernels`] for the others).
pub fn matmul_kernel(kind: QuantKind) -> Option<Kernel> {
    matmul_kernels(kind).map(|k| k.decode)
}

/// The op kernels' pipelines, their layout and their descriptor sets: one
/// per storage binding of the weights, the rest of each set alike.
pub(crate) struct OpPipelines {
    ctx: Arc<Context>,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pool: vk::DescriptorPool,
    sets: Vec<vk::DescriptorSet>,
    /// Indexed by `Kernel as usize`; null for attention kernels.
    pipelines: Vec<vk::Pipeline>,
    /// The GPU decode product specialised for one activation row (a pass
    /// of one row: fewer registers, no per-row branches), taken for
    /// batch-1 products; indexed as `pipelines`, null for other kernels.
    single: Vec<vk::Pipeline>,
}

impl OpPipelines {
    pub fn new(ctx: &Arc<Context>, checked: bool) -> Result<Self, VulkanError> {
        let mut this = Self {
            ctx: ctx.clone(),
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pool: vk::DescriptorPool::null(),
            sets: Vec::new(),
            pipelines: Vec::new(),
            single: Vec::new(),
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
                .descriptor_count(BINDINGS * MAX_WEIGHT_CHUNKS as u32)];
            let info = vk::DescriptorPoolCreateInfo::default()
                .max_sets(MAX_WEIGHT_CHUNKS as u32)
                .pool_sizes(&sizes);
            inject::before("vkCreateDescriptorPool")?;
            this.pool = device
                .create_descriptor_pool(&info, None)
                .map_err(VulkanError::vk("vkCreateDescriptorPool"))?;
            let set_layouts = [this.set_layout; MAX_WEIGHT_CHUNKS];
            let info = vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(this.pool)
                .set_layouts(&set_layouts);
            inject::before("vkAllocateDescriptorSets")?;
            this.sets = device
                .allocate_descriptor_sets(&info)
                .map_err(VulkanError::vk("vkAllocateDescriptorSets"))?;
            let info = &ctx.info;
            for kernel in Kernel::ALL {
                // Variants the device cannot run (subgroups) are left out;
                // the planner never picks them there.
                let needs = kernel.needs();
                let runs = needs.met(Offered {
                    subgroups: info.use_subgroups,
                    float16: info.use_float16,
                    coopmat: info.use_coopmat,
                    integer_dot: info.use_integer_dot,
                });
                let pipeline = if kernel.is_op() && runs {
                    // The cooperative-matrix kernel takes its shape as
                    // specialization constants, the GPU decode product its
                    // rows per workgroup and variant.
                    let constants = match info.cooperative_matrix {
                        Some(shape) if needs.cooperative_matrix => shape.constants().to_vec(),
                        _ if kernel.name().starts_with("matvec_") => {
                            info.matvec_shape.constants().to_vec()
                        }
                        // One workgroup a row: as wide as the device
                        // allows, up to what the kernel's shared memory
                        // holds.
                        _ if matches!(kernel, Kernel::RmsNorm | Kernel::RmsNormRound) => {
                            vec![row_workgroup(info, 512)]
                        }
                        _ if kernel == Kernel::Argmax => vec![row_workgroup(info, 1024)],
                        _ => Vec::new(),
                    };
                    create_pipeline(device, kernel, checked, this.layout, &constants)?
                } else {
                    vk::Pipeline::null()
                };
                this.pipelines.push(pipeline);
                let single = if runs && kernel.name().starts_with("matvec_") {
                    let shape = MatvecShape {
                        batch: 1,
                        ..info.matvec_shape
                    };
                    create_pipeline(device, kernel, checked, this.layout, &shape.constants())?
                } else {
                    vk::Pipeline::null()
                };
                this.single.push(single);
            }
        }
        Ok(this)
    }

    /// Points set `i` at weight binding `weights[i]` (at most
    /// [`MAX_WEIGHT_CHUNKS`]), and every set at the activations, the fault
    /// word and meta (`rest`).
    pub(crate) fn bind(&self, weights: &[vk::Buffer], rest: [vk::Buffer; BINDINGS as usize - 1]) {
        let info = |b: vk::Buffer| {
            [vk::DescriptorBufferInfo::default()
                .buffer(b)
                .range(vk::WHOLE_SIZE)]
        };
        let infos: Vec<(vk::DescriptorSet, u32, [vk::DescriptorBufferInfo; 1])> = weights
            .iter()
            .zip(&self.sets)
            .flat_map(|(&w, &set)| {
                std::iter::once((set, 0, info(w)))
                    .chain((1u32..).zip(rest).map(move |(i, b)| (set, i, info(b))))
            })
            .collect();
        let writes: Vec<_> = infos
            .iter()
            .map(|(set, binding, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(*set)
                    .dst_binding(*binding)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(info)
            })
            .collect();
        // SAFETY: the sets are not in use by any pending submission (every
        // submission is waited for), and the buffers are live.
        unsafe { self.ctx.device.update_descriptor_sets(&writes, &[]) };
    }

    /// Records one dispatch of an op kernel over weight binding `set`.
    ///
    /// # Safety
    /// `cmd` is recording, and the buffers last bound stay alive until the
    /// submission is waited for.
    pub(crate) unsafe fn record(
        &self,
        cmd: vk::CommandBuffer,
        kernel: Kernel,
        params: &OpParams,
        groups: u32,
        set: usize,
    ) {
        let device = &self.ctx.device;
        // SAFETY: as the caller guarantees; the pipeline, layout and set
        // belong to this device.
        unsafe {
            let single = self.single[kernel as usize];
            let pipeline = if params.batch == 1 && single != vk::Pipeline::null() {
                single
            } else {
                self.pipelines[kernel as usize]
            };
            device.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipeline);
            device.cmd_bind_descriptor_sets(
                cmd,
                vk::PipelineBindPoint::COMPUTE,
                self.layout,
                0,
                &[self.sets[set.min(self.sets.len() - 1)]],
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
            for &p in self.pipelines.iter().chain(&self.single) {
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
    fn push_constants_match_the_glsl_block() {
        // 17 four-byte fields, within the 128 bytes every device allows.
        let p = OpParams {
            rows: 3,
            act_words: 9,
            eps: 0.5,
            ..OpParams::default()
        };
        let bytes = p.bytes();
        assert_eq!(&bytes[0..4], &3u32.to_le_bytes());
        assert_eq!(&bytes[40..44], &9u32.to_le_bytes());
        assert_eq!(&bytes[64..68], &0.5f32.to_bits().to_le_bytes());
    }

    #[test]
    fn every_product_kernel_is_an_op_and_no_attention_kernel_is() {
        for kind in QuantKind::ALL {
            if let Some(k) = matmul_kernels(kind) {
                for k in [k.decode, k.decode_subgroup, k.tiled, k.coopmat] {
                    assert!(k.is_op(), "{}", k.name());
                }
                assert!(k.decode_subgroup.needs().subgroup_arithmetic);
                assert!(k.coopmat.needs().cooperative_matrix);
                assert!(!k.tiled.needs().cooperative_matrix);
            }
        }
        assert!(!Kernel::Attention.is_op());
        assert!(!Kernel::Decode.is_op());
    }
}
