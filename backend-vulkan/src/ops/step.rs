//! Step programs: model ops and paged attention in one command buffer, so a
//! whole model step is one submission. The ops keep their own buffers
//! (weights, activations, meta); a [`StepOp::Scatter`] or
//! [`StepOp::Attention`] copies its operands from the activations into the
//! attention kernels' input buffer with `vkCmdCopyBuffer`, runs the same
//! kernels as [`Backend::scatter`](pagoda_core::backend::Backend::scatter)
//! and [`Backend::attention`](pagoda_core::backend::Backend::attention)
//! (the scatter variant that converts f32 to the store's dtype on the
//! device), and copies the outputs back. Every layer of a step attends over
//! the same batch, so the attention plan is made and uploaded once.

use std::ops::Range;

use ash::vk;
use pagoda_core::backend::{validate_attention, validate_scatter, AttentionShape, SeqAttention};
use pagoda_core::Slot;

use super::hazard::{Access, Hazards, Resource};
use super::op::{shape, Op};
use super::pipelines::OpParams;
use super::rounding::round_inputs;
use crate::commands::Dispatch;
use crate::kernels::{Kernel, Params};
use crate::{
    plan, slot_words, VulkanBackend, VulkanError, VulkanKvStore, VulkanWeights, MAX_GROUPS,
};

/// One step of a [`StepProgram`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepOp {
    /// A model op over the weights, activations and meta.
    Op(Op),
    /// Writes the program's new keys and values into `layer` of the store:
    /// from element `kv` of the activations, one row per slot of
    /// `[k | v]`, each `kv_heads × head_dim` f32 (converted to the store's
    /// dtype on the device).
    Scatter {
        /// Layer written.
        layer: u32,
        /// First element of the `[k | v]` rows.
        kv: u32,
    },
    /// Paged attention of `layer` for the program's batch: queries as
    /// contiguous rows of `q_heads × head_dim` from element `q`, outputs in
    /// the same layout from element `out` (rows no sequence owns are left
    /// as they were); the program's head layout with this op's scale,
    /// sliding window and soft cap (see [`AttentionShape`]).
    Attention {
        /// Layer read.
        layer: u32,
        /// First query element.
        q: u32,
        /// First output element.
        out: u32,
        /// Softmax scale.
        scale: f32,
        /// Sliding window (0: the whole context).
        window: u32,
        /// Soft cap of the scaled scores (0: none).
        softcap: f32,
    },
}

/// A whole program: its ops, the buffers they run over, the batch its
/// attention ops share, and what comes back.
#[derive(Debug, Clone)]
pub struct StepProgram<'a> {
    /// Run in order, one submission.
    pub ops: &'a [StepOp],
    /// Elements of the activation buffer.
    pub act_len: u32,
    /// Written at the start of the activations before the first op (the
    /// rest starts as zeros).
    pub init: &'a [f32],
    /// Meta words (token ids, positions; argmax results land here).
    pub meta: &'a [u32],
    /// The KV slot of each new row, for every scatter.
    pub slots: &'a [Slot],
    /// Head layout of every attention op.
    pub shape: AttentionShape,
    /// The attention batch of every attention op.
    pub batch: &'a [SeqAttention<'a>],
    /// Activation elements read back.
    pub read: Range<u32>,
    /// Meta words read back.
    pub read_meta: Range<u32>,
}

/// What one op of a program records.
enum Planned {
    Op(Kernel, OpParams, u32, usize, Vec<Access>),
    Scatter(Params, u32),
    Attention {
        layer: u32,
        q: u32,
        out: u32,
        shape: AttentionShape,
    },
}

/// The dispatches of a program in order, each with what it touches.
pub(super) type Dispatches = Vec<(Recorded, Vec<Access>)>;

/// One dispatch of a step program: an op kernel, or an attention kernel.
pub(super) enum Recorded {
    Op(Kernel, OpParams, u32, usize),
    Attention(Dispatch),
}

/// The attention plan shared by every attention op, and where its pieces
/// sit in the attention kernels' meta buffer.
struct Shared {
    plan: plan::AttentionPlan,
    rows: u32,
    /// Where the slot list starts in the attention meta.
    slots_at: u32,
}

fn within(what: &str, index: usize, start: u32, len: u64, size: u64) -> Result<(), VulkanError> {
    if u64::from(start) + len <= size {
        Ok(())
    } else {
        Err(shape(format!(
            "op {index}: {what} runs past the activations ({size})"
        )))
    }
}

impl VulkanBackend {
    /// Runs `program` over the resident `weights` and `store` in one
    /// submission; on success `act_out` holds the activations in
    /// `program.read` and `meta_out` the meta words in `program.read_meta`.
    /// Everything is checked first (op ranges, token ids and positions,
    /// slots, the batch, the copies); a refused program dispatches nothing.
    pub fn run_step_on(
        &mut self,
        weights: &VulkanWeights,
        store: &mut VulkanKvStore,
        program: &StepProgram<'_>,
        act_out: &mut Vec<f32>,
        meta_out: &mut Vec<u32>,
    ) -> Result<(), VulkanError> {
        let started = std::time::Instant::now();
        self.check_store(store)?;
        if !weights.belongs_to(&self.ctx) {
            return Err(VulkanError::Unsupported(
                "the weights belong to another Vulkan backend".into(),
            ));
        }
        let act_len = u64::from(program.act_len);
        let meta = program.meta;
        if meta.len() as u64 > u64::from(u32::MAX) {
            return Err(shape("meta beyond 2^32 words".into()));
        }
        if program.init.len() as u64 > act_len
            || program.read.start > program.read.end
            || u64::from(program.read.end) > act_len
            || program.read_meta.start > program.read_meta.end
            || program.read_meta.end as usize > meta.len()
        {
            return Err(shape(
                "initial values or read-back past their buffers".into(),
            ));
        }
        let geometry = store.geometry;
        let (q_row, kv_row) = (program.shape.q_row() as u64, program.shape.kv_row() as u64);
        let t = program.slots.len() as u64;
        let needs_plan = program
            .ops
            .iter()
            .any(|op| matches!(op, StepOp::Attention { .. }));
        let shared = if needs_plan && !program.batch.is_empty() {
            // The rows the batch covers, checked again for each layer.
            let rows = validate_attention(
                &geometry,
                store.pages,
                0,
                &program.shape,
                program.batch,
                usize::MAX,
                usize::MAX,
            )?;
            let plan = plan::plan_attention(&program.shape, program.batch);
            let slots_at = plan.meta.len() as u32;
            Some(Shared {
                plan,
                rows: rows as u32,
                slots_at,
            })
        } else {
            None
        };
        let slots_at = shared.as_ref().map_or(0, |s| s.slots_at);
        // The attention kernels' buffers, grown for the largest operand
        // before any push constants (which carry their sizes) are made.
        let mut attn_meta = Vec::new();
        // The attention kernels read their queries, keys and values from
        // the activations and write their outputs there (push-constant
        // offsets): only their meta and partial records have buffers here.
        if let Some(s) = &shared {
            attn_meta.extend_from_slice(&s.plan.meta);
            let partials =
                u64::from(s.plan.partial_records) * (u64::from(program.shape.head_dim) + 2) * 4;
            self.ensure(|io| &mut io.partials, partials)?;
        }
        attn_meta.extend(slot_words(program.slots));
        self.ensure(|io| &mut io.meta, 4 * attn_meta.len() as u64)?;
        let map = weights.map();
        let mut planned = Vec::with_capacity(program.ops.len());
        for (i, op) in program.ops.iter().enumerate() {
            planned.push(match *op {
                StepOp::Op(op) => {
                    let (kernel, params, groups, set) =
                        op.plan_in(i, &map, act_len, meta, self.kernel_choice())?;
                    Planned::Op(kernel, params, groups, set, op.accesses())
                }
                StepOp::Scatter { layer, kv } => {
                    let len = (t * kv_row) as usize;
                    validate_scatter(&geometry, store.pages, layer, program.slots, len, len)?;
                    within("the keys and values", i, kv, 2 * t * kv_row, act_len)?;
                    let mut params = self.params(store, layer, t as u32);
                    params.seq_offset = slots_at;
                    Planned::Scatter(params, kv)
                }
                StepOp::Attention {
                    layer,
                    q,
                    out,
                    scale,
                    window,
                    softcap,
                } => {
                    let rows = shared.as_ref().map_or(0, |s| u64::from(s.rows));
                    let floats = (rows * q_row) as usize;
                    let shape = AttentionShape {
                        scale,
                        window,
                        softcap,
                        ..program.shape
                    };
                    validate_attention(
                        &geometry,
                        store.pages,
                        layer,
                        &shape,
                        program.batch,
                        floats,
                        floats,
                    )?;
                    within("the queries", i, q, rows * q_row, act_len)?;
                    within("the outputs", i, out, rows * q_row, act_len)?;
                    Planned::Attention {
                        layer,
                        q,
                        out,
                        shape,
                    }
                }
            });
        }
        let limit = self.ctx.info.max_storage_buffer_range;
        let act_bytes = (4 * act_len).max(4);
        let meta_bytes = (4 * meta.len() as u64).max(4);
        if act_bytes > limit || meta_bytes > limit {
            return Err(VulkanError::Unsupported(format!(
                "activations of {act_bytes} bytes are more than one binding covers ({limit})"
            )));
        }

        // Attention reads queries, keys and values from the activations and
        // writes its outputs there; their bounds are the activations'.
        let act_words = (act_bytes / 4) as u32;
        let attention_params =
            |this: &Self, layer: u32, q: u32, out: u32, shape: &AttentionShape| {
                let Some(s) = &shared else {
                    return Vec::new();
                };
                let mut params = this.params(store, layer, s.plan.items);
                params.q_heads = shape.q_heads;
                params.scale = shape.scale;
                params.window = shape.window;
                params.softcap = shape.softcap;
                params.item_offset = s.plan.item_offset;
                params.input_words = act_words;
                params.output_words = act_words;
                params.input_offset = q;
                params.output_offset = out;
                let rows = u64::from(s.rows) * q_row;
                let reads = |with_kv: bool| {
                    let mut a = vec![
                        Access::read(Resource::Act, u64::from(q)..u64::from(q) + rows),
                        Access::write(Resource::Act, u64::from(out)..u64::from(out) + rows),
                        Access::write(Resource::Partials, 0..u64::MAX),
                    ];
                    if with_kv {
                        a.push(Access::read(Resource::Kv(layer), 0..1));
                    }
                    a
                };
                let mut dispatches = Vec::with_capacity(3);
                if s.plan.items > 0 {
                    let d = Dispatch {
                        kernel: Kernel::Attention,
                        params,
                        groups: s.plan.items.min(MAX_GROUPS),
                    };
                    dispatches.push((d, reads(true)));
                }
                if s.plan.decode_items > 0 {
                    let d = Dispatch {
                        kernel: this.decode_kernel(geometry.dtype()),
                        params: Params {
                            count: s.plan.decode_items,
                            item_offset: s.plan.decode_offset,
                            ..params
                        },
                        groups: s.plan.decode_items.min(MAX_GROUPS),
                    };
                    dispatches.push((d, reads(true)));
                }
                if s.plan.merges > 0 {
                    let d = Dispatch {
                        kernel: Kernel::Merge,
                        params: Params {
                            count: s.plan.merges,
                            item_offset: s.plan.merge_offset,
                            ..params
                        },
                        groups: s.plan.merges.min(MAX_GROUPS),
                    };
                    let access = vec![
                        Access::read(Resource::Partials, 0..u64::MAX),
                        Access::write(Resource::Act, u64::from(out)..u64::from(out) + rows),
                    ];
                    dispatches.push((d, access));
                }
                dispatches
            };
        // Every dispatch of the program, in order, with what it touches.
        let mut recorded: Vec<(Recorded, Vec<Access>)> = Vec::with_capacity(planned.len() + 8);
        for p in planned {
            match p {
                Planned::Op(kernel, params, groups, set, access) => {
                    recorded.push((Recorded::Op(kernel, params, groups, set), access));
                }
                Planned::Scatter(params, kv) => {
                    if params.count > 0 {
                        let mut params = params;
                        params.input_offset = kv;
                        params.input_words = act_words;
                        let at = u64::from(kv);
                        let access = vec![
                            Access::read(
                                Resource::Act,
                                at..at + u64::from(params.count) * 2 * kv_row,
                            ),
                            Access::write(Resource::Kv(params.layer), 0..1),
                        ];
                        let d = Dispatch {
                            kernel: Kernel::ScatterF32,
                            params,
                            groups: params.count.min(MAX_GROUPS),
                        };
                        recorded.push((Recorded::Attention(d), access));
                    }
                }
                Planned::Attention {
                    layer,
                    q,
                    out,
                    shape,
                } => {
                    for (d, access) in attention_params(self, layer, q, out, &shape) {
                        recorded.push((Recorded::Attention(d), access));
                    }
                }
            }
        }

        // The integer-dot products' rounded inputs, past the activations.
        let (recorded, act_bytes) = with_rounded_inputs(recorded, act_bytes, limit)?;

        self.ensure_op_pipelines()?;
        // The step buffers are kept and grown, not made per step.
        let init_bytes = 4 * program.init.len() as u64;
        let attn_meta_bytes = 4 * attn_meta.len() as u64;
        let read_bytes = 4 * u64::from(program.read.end - program.read.start);
        let read_meta_bytes = 4 * u64::from(program.read_meta.end - program.read_meta.start);
        self.ensure(|io| &mut io.step_act, act_bytes)?;
        self.ensure(|io| &mut io.step_meta, meta_bytes)?;
        self.ensure(
            |io| &mut io.upload,
            init_bytes + meta_bytes + attn_meta_bytes,
        )?;
        self.ensure(|io| &mut io.download, read_bytes + read_meta_bytes)?;
        {
            let staged = self.io.upload.mapped()?;
            let words = program
                .init
                .iter()
                .map(|v| v.to_bits())
                .chain(meta.iter().copied())
                .chain(std::iter::repeat_n(
                    0,
                    (meta_bytes / 4) as usize - meta.len(),
                ))
                .chain(attn_meta.iter().copied());
            for (dst, w) in staged.chunks_exact_mut(4).zip(words) {
                dst.copy_from_slice(&w.to_le_bytes());
            }
        }
        self.io.faults.mapped()?[..4].copy_from_slice(&0u32.to_le_bytes());
        let ops = self
            .ops
            .as_ref()
            .ok_or_else(|| VulkanError::Unsupported("no op pipelines".into()))?;
        ops.bind(
            &weights.handles(),
            [
                self.io.step_act.handle,
                self.io.faults.handle,
                self.io.step_meta.handle,
            ],
        );
        let io = &self.io;
        let chunks: Vec<vk::Buffer> = store.chunks.iter().map(|c| c.handle).collect();
        self.pipelines.bind(
            &chunks,
            [
                io.step_act.handle,
                io.step_act.handle,
                io.meta.handle,
                io.partials.handle,
                io.faults.handle,
            ],
        );
        let (up, down, act_dev, meta_dev) = (
            io.upload.handle,
            io.download.handle,
            io.step_act.handle,
            io.step_meta.handle,
        );
        let attn_meta_dev = io.meta.handle;
        let queries = self.commands.query_pool();
        // A timestamp before the first dispatch and after each.
        let profile = if self.profiling {
            self.commands.profile_pool(recorded.len() as u32 + 1)?
        } else {
            None
        };
        let pipelines = &self.pipelines;
        let read = program.read.clone();
        let read_meta = program.read_meta.clone();
        let mut barriers = 0usize;
        // The dispatches in parts that grow (16, 48, 128, the rest), so
        // that the device starts early and the host records each part
        // while the device runs the ones before it.
        let ends: Vec<usize> = [16usize, 64, 192]
            .into_iter()
            .filter(|&end| end < recorded.len())
            .chain(std::iter::once(recorded.len()))
            .collect();
        let parts = ends.len();
        let mut hazards = Hazards::default();
        self.commands
            .submit_in_parts_and_wait(parts, |device, cmd, part| {
                let first = part == 0;
                let last = part + 1 == parts;
                let range = if first { 0 } else { ends[part - 1] }..ends[part];
                let rw = vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE;
                let transfer = vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE;
                let after_fill = [vk::MemoryBarrier::default()
                    .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                    .dst_access_mask(transfer)];
                let after_copy = [vk::MemoryBarrier::default()
                    .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                    .dst_access_mask(rw)];
                let after_dispatch = [vk::MemoryBarrier::default()
                    .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                    .dst_access_mask(rw)];
                let before_readback = [vk::MemoryBarrier::default()
                    .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                    .dst_access_mask(vk::AccessFlags::TRANSFER_READ)];
                let to_host = [vk::MemoryBarrier::default()
                    .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                    .dst_access_mask(vk::AccessFlags::HOST_READ)];
                let region = |src_offset: u64, dst_offset: u64, size: u64| {
                    vk::BufferCopy::default()
                        .src_offset(src_offset)
                        .dst_offset(dst_offset)
                        .size(size)
                };
                // SAFETY: `cmd` is recording; every buffer, store chunk and
                // descriptor set recorded stays alive and as large as checked
                // above until the wait that follows.
                unsafe {
                    let barrier = |src, dst, access: &[vk::MemoryBarrier<'_>]| {
                        device.cmd_pipeline_barrier(
                            cmd,
                            src,
                            dst,
                            vk::DependencyFlags::empty(),
                            access,
                            &[],
                            &[],
                        );
                    };
                    let transfer_stage = vk::PipelineStageFlags::TRANSFER;
                    let compute = vk::PipelineStageFlags::COMPUTE_SHADER;
                    if first {
                        device.cmd_fill_buffer(cmd, act_dev, 0, act_bytes, 0);
                        barrier(transfer_stage, transfer_stage, &after_fill);
                        if init_bytes > 0 {
                            device.cmd_copy_buffer(cmd, up, act_dev, &[region(0, 0, init_bytes)]);
                        }
                        device.cmd_copy_buffer(
                            cmd,
                            up,
                            meta_dev,
                            &[region(init_bytes, 0, meta_bytes)],
                        );
                        if attn_meta_bytes > 0 {
                            let at = init_bytes + meta_bytes;
                            let r = region(at, 0, attn_meta_bytes);
                            device.cmd_copy_buffer(cmd, up, attn_meta_dev, &[r]);
                        }
                        barrier(transfer_stage, compute, &after_copy);
                        if let Some(pool) = queries {
                            device.cmd_reset_query_pool(cmd, pool, 0, 2);
                            device.cmd_write_timestamp(cmd, compute, pool, 0);
                        }
                        if let Some(pool) = profile {
                            let count = recorded.len() as u32 + 1;
                            device.cmd_reset_query_pool(cmd, pool, 0, count);
                            device.cmd_write_timestamp(cmd, compute, pool, 0);
                        }
                    }
                    let first_index = range.start;
                    for (i, (what, access)) in recorded[range].iter().enumerate() {
                        if hazards.conflicts(access) {
                            barrier(compute, compute, &after_dispatch);
                            barriers += 1;
                            hazards.clear();
                        }
                        match what {
                            Recorded::Op(kernel, params, groups, set) => {
                                ops.record(cmd, *kernel, params, *groups, *set);
                            }
                            Recorded::Attention(d) => {
                                pipelines.record(cmd, d.kernel, &d.params, d.groups);
                            }
                        }
                        if let Some(pool) = profile {
                            let query = (first_index + i) as u32 + 1;
                            device.cmd_write_timestamp(cmd, compute, pool, query);
                        }
                        hazards.add(access);
                    }
                    if !last {
                        return;
                    }
                    if let Some(pool) = queries {
                        device.cmd_write_timestamp(cmd, compute, pool, 1);
                    }
                    barrier(compute, transfer_stage, &before_readback);
                    if read_bytes > 0 {
                        let at = 4 * u64::from(read.start);
                        device.cmd_copy_buffer(cmd, act_dev, down, &[region(at, 0, read_bytes)]);
                    }
                    if read_meta_bytes > 0 {
                        let at = 4 * u64::from(read_meta.start);
                        let r = region(at, read_bytes, read_meta_bytes);
                        device.cmd_copy_buffer(cmd, meta_dev, down, &[r]);
                    }
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
        self.close_program(recorded.len(), queries.is_some())?;
        self.program_barriers = barriers;
        self.program_profile.clear();
        if profile.is_some() {
            let spans = self.commands.read_profile(recorded.len() as u32 + 1)?;
            self.program_profile = profile_by_kernel(&recorded, &spans);
        }
        let back = self.io.download.mapped()?;
        act_out.clear();
        act_out.extend(
            back[..read_bytes as usize]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        );
        meta_out.clear();
        meta_out.extend(
            back[read_bytes as usize..(read_bytes + read_meta_bytes) as usize]
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        );
        self.program_host = Some(ProgramHostTime {
            total: started.elapsed(),
            recording: self.commands.last_recording,
            waiting: self.commands.last_waiting,
        });
        Ok(())
    }
}

/// `recorded` with the integer-dot products' inputs rounded first
/// ([`round_inputs`]) in a scratch area after the `act_bytes` of
/// activations, and the bytes the activation buffer then needs (at most
/// `limit`, one binding's range); every op dispatch's bounds cover it.
pub(super) fn with_rounded_inputs(
    recorded: Dispatches,
    act_bytes: u64,
    limit: u64,
) -> Result<(Dispatches, u64), VulkanError> {
    let scratch = (act_bytes / 4).next_multiple_of(4);
    let Ok(scratch) = u32::try_from(scratch) else {
        return Ok((recorded, act_bytes));
    };
    let (mut recorded, words) = round_inputs(recorded, scratch);
    if words == 0 {
        return Ok((recorded, act_bytes));
    }
    let total = 4 * (u64::from(scratch) + words);
    if total > limit {
        return Err(VulkanError::Unsupported(format!(
            "activations and their 8-bit copies of {total} bytes are more than one binding covers ({limit})"
        )));
    }
    for (what, _) in &mut recorded {
        if let Recorded::Op(_, params, _, _) = what {
            params.act_words = (total / 4) as u32;
        }
    }
    Ok((recorded, total))
}

/// Device time per kernel of the dispatches `recorded`, from `spans` (the
/// time from each dispatch's previous timestamp to its own), slowest first.
fn profile_by_kernel(recorded: &[(Recorded, Vec<Access>)], spans: &[f64]) -> Vec<KernelProfile> {
    let mut by_kernel: Vec<KernelProfile> = Vec::new();
    for ((what, _), &nanos) in recorded.iter().zip(spans) {
        let (kernel, weight_bytes) = match what {
            Recorded::Op(kernel, params, _, _) => {
                let product = kernel.name().starts_with("mat");
                let bytes = u64::from(params.rows) * u64::from(params.row_bytes);
                (kernel.name(), if product { bytes } else { 0 })
            }
            Recorded::Attention(d) => (d.kernel.name(), 0),
        };
        match by_kernel.iter_mut().find(|k| k.kernel == kernel) {
            Some(k) => {
                k.dispatches += 1;
                k.nanos += nanos;
                k.weight_bytes += weight_bytes;
            }
            None => by_kernel.push(KernelProfile {
                kernel,
                dispatches: 1,
                nanos,
                weight_bytes,
            }),
        }
    }
    by_kernel.sort_by(|a, b| b.nanos.total_cmp(&a.nanos));
    by_kernel
}

/// One kernel's share of a profiled step program
/// ([`VulkanBackend::last_program_profile`]).
#[derive(Debug, Clone, PartialEq)]
pub struct KernelProfile {
    /// The kernel's name in `shaders/kernels.list`.
    pub kernel: &'static str,
    /// Its dispatches in the step.
    pub dispatches: usize,
    /// Device time of those dispatches, each from the timestamp after the
    /// dispatch before it to the one after it.
    pub nanos: f64,
    /// Weight bytes the products among them read (0 for other kernels).
    pub weight_bytes: u64,
}

/// Where a step program's host time went: what a step costs beyond its
/// device time is the host's (recording its dispatches, planning,
/// uploading and reading back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramHostTime {
    /// The whole `run_step_on` call.
    pub total: std::time::Duration,
    /// Recording the command buffer.
    pub recording: std::time::Duration,
    /// From submission until the fence signalled (device time included).
    pub waiting: std::time::Duration,
}
