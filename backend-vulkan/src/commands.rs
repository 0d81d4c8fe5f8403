//! Recording, submitting and timing one batch of dispatches: one command
//! buffer, one fence, one timestamp query pool, reused for every call.

use std::sync::Arc;

use ash::vk;

use crate::context::Context;
use crate::kernels::{Kernel, Params, Pipelines};
use crate::{inject, VulkanError};

/// Dispatches one submission may time.
pub(crate) const MAX_DISPATCHES: u32 = 8;

/// Command buffers a submission in parts may use
/// ([`Commands::submit_in_parts_and_wait`]).
pub(crate) const MAX_PARTS: usize = 4;

/// One kernel dispatch of a submission.
pub(crate) struct Dispatch {
    pub kernel: Kernel,
    pub params: Params,
    pub groups: u32,
}

/// A buffer-to-buffer copy recorded around the dispatches.
pub(crate) struct Transfer {
    pub src: vk::Buffer,
    pub src_offset: u64,
    pub dst: vk::Buffer,
    pub bytes: u64,
}

impl Transfer {
    /// # Safety
    /// `cmd` is recording and both buffers are live and large enough.
    unsafe fn record(&self, device: &ash::Device, cmd: vk::CommandBuffer) {
        if self.bytes > 0 {
            let region = [vk::BufferCopy::default()
                .src_offset(self.src_offset)
                .size(self.bytes)];
            // SAFETY: as the caller guarantees.
            unsafe { device.cmd_copy_buffer(cmd, self.src, self.dst, &region) };
        }
    }
}

/// A kernel's time on the device, from GPU timestamps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelTime {
    /// The kernel.
    pub kernel: Kernel,
    /// Nanoseconds between the timestamps around its dispatch.
    pub nanos: f64,
}

pub(crate) struct Commands {
    ctx: Arc<Context>,
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    /// The command buffers of a submission in parts (the first is `cmd`).
    parts: Vec<vk::CommandBuffer>,
    fence: vk::Fence,
    queries: vk::QueryPool,
    /// A timestamp after every dispatch of a profiled step program, and
    /// how many it holds (grown on demand).
    profile_queries: vk::QueryPool,
    profile_capacity: u32,
    /// Host time of the last submission: recording, then submit to fence.
    pub last_recording: std::time::Duration,
    pub last_waiting: std::time::Duration,
}

impl Commands {
    pub fn new(ctx: &Arc<Context>) -> Result<Self, VulkanError> {
        let mut this = Self {
            ctx: ctx.clone(),
            pool: vk::CommandPool::null(),
            cmd: vk::CommandBuffer::null(),
            parts: Vec::new(),
            fence: vk::Fence::null(),
            queries: vk::QueryPool::null(),
            profile_queries: vk::QueryPool::null(),
            profile_capacity: 0,
            last_recording: std::time::Duration::ZERO,
            last_waiting: std::time::Duration::ZERO,
        };
        let device = &ctx.device;
        // SAFETY: valid create infos on a live device; each handle is stored
        // in `this` at once so its Drop destroys it if a later step fails.
        unsafe {
            inject::before("vkCreateCommandPool")?;
            let info = vk::CommandPoolCreateInfo::default()
                .queue_family_index(ctx.queue_family)
                .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
            this.pool = device
                .create_command_pool(&info, None)
                .map_err(VulkanError::vk("vkCreateCommandPool"))?;
            let info = vk::CommandBufferAllocateInfo::default()
                .command_pool(this.pool)
                .level(vk::CommandBufferLevel::PRIMARY)
                .command_buffer_count(MAX_PARTS as u32);
            inject::before("vkAllocateCommandBuffers")?;
            this.parts = device
                .allocate_command_buffers(&info)
                .map_err(VulkanError::vk("vkAllocateCommandBuffers"))?;
            this.cmd = this.parts[0];
            inject::before("vkCreateFence")?;
            this.fence = device
                .create_fence(&vk::FenceCreateInfo::default(), None)
                .map_err(VulkanError::vk("vkCreateFence"))?;
            if ctx.info.timestamp_period_ns.is_some() {
                let info = vk::QueryPoolCreateInfo::default()
                    .query_type(vk::QueryType::TIMESTAMP)
                    .query_count(2 * MAX_DISPATCHES);
                inject::before("vkCreateQueryPool")?;
                this.queries = device
                    .create_query_pool(&info, None)
                    .map_err(VulkanError::vk("vkCreateQueryPool"))?;
            }
        }
        Ok(this)
    }

    /// Records `fill` (zeroing whole buffers) and the `uploads` (staging to
    /// device-local buffers), then the dispatches with a barrier after each,
    /// then the `downloads` (device-local to host-visible); submits and
    /// waits. Returns each dispatch's time when the device has timestamps.
    pub fn run(
        &mut self,
        pipelines: &Pipelines,
        fill: &[vk::Buffer],
        uploads: &[Transfer],
        dispatches: &[Dispatch],
        downloads: &[Transfer],
    ) -> Result<Vec<KernelTime>, VulkanError> {
        let timed = self.timed() && dispatches.len() as u32 <= MAX_DISPATCHES;
        let shader_rw = vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE;
        let fill_to_compute = [vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(shader_rw)];
        let to_compute = [vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::SHADER_WRITE)
            .dst_access_mask(shader_rw | vk::AccessFlags::TRANSFER_READ)];
        let to_host = [vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(vk::AccessFlags::HOST_READ)];
        let queries = self.queries;
        self.submit_and_wait(|device, cmd| {
            // SAFETY: `cmd` is recording; every handle recorded belongs to
            // this device and outlives the wait that follows.
            unsafe {
                if timed {
                    device.cmd_reset_query_pool(cmd, queries, 0, 2 * MAX_DISPATCHES);
                }
                for &buffer in fill {
                    device.cmd_fill_buffer(cmd, buffer, 0, vk::WHOLE_SIZE, 0);
                }
                for t in uploads {
                    t.record(device, cmd);
                }
                if !fill.is_empty() || !uploads.is_empty() {
                    device.cmd_pipeline_barrier(
                        cmd,
                        vk::PipelineStageFlags::TRANSFER,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::DependencyFlags::empty(),
                        &fill_to_compute,
                        &[],
                        &[],
                    );
                }
                let stamp = vk::PipelineStageFlags::COMPUTE_SHADER;
                for (i, d) in (0u32..).zip(dispatches) {
                    if timed {
                        device.cmd_write_timestamp(cmd, stamp, queries, 2 * i);
                    }
                    pipelines.record(cmd, d.kernel, &d.params, d.groups);
                    if timed {
                        device.cmd_write_timestamp(cmd, stamp, queries, 2 * i + 1);
                    }
                    device.cmd_pipeline_barrier(
                        cmd,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                        vk::DependencyFlags::empty(),
                        &to_compute,
                        &[],
                        &[],
                    );
                }
                for t in downloads {
                    t.record(device, cmd);
                }
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
        if !timed || dispatches.is_empty() {
            return Ok(Vec::new());
        }
        let nanos = self.read_timestamps(dispatches.len())?;
        Ok(dispatches
            .iter()
            .zip(nanos)
            .map(|(d, nanos)| KernelTime {
                kernel: d.kernel,
                nanos,
            })
            .collect())
    }

    /// Times one `vkCmdCopyBuffer` of `bytes` from `src` to `dst` with GPU
    /// timestamps (wall clock if the device has none); returns nanoseconds.
    pub fn time_copy(
        &mut self,
        src: vk::Buffer,
        dst: vk::Buffer,
        bytes: u64,
    ) -> Result<f64, VulkanError> {
        let timed = self.timed();
        let queries = self.queries;
        let started = std::time::Instant::now();
        self.submit_and_wait(|device, cmd| {
            let stage = vk::PipelineStageFlags::TRANSFER;
            let region = [vk::BufferCopy::default().size(bytes)];
            // SAFETY: `cmd` is recording; the buffers are live and at least
            // `bytes` long until the wait that follows.
            unsafe {
                if timed {
                    device.cmd_reset_query_pool(cmd, queries, 0, 2);
                    device.cmd_write_timestamp(cmd, stage, queries, 0);
                }
                device.cmd_copy_buffer(cmd, src, dst, &region);
                if timed {
                    device.cmd_write_timestamp(cmd, stage, queries, 1);
                }
            }
        })?;
        if timed {
            Ok(self.read_timestamps(1)?[0])
        } else {
            Ok(started.elapsed().as_secs_f64() * 1e9)
        }
    }

    fn timed(&self) -> bool {
        self.queries != vk::QueryPool::null()
    }

    /// The timestamp query pool, if the device has timestamps: a caller
    /// recording its own commands through [`Self::submit_and_wait`] writes
    /// queries 0 and 1 around its work and reads them with
    /// [`Self::read_timestamps`].
    pub(crate) fn query_pool(&self) -> Option<vk::QueryPool> {
        self.timed().then_some(self.queries)
    }

    /// A query pool of at least `count` timestamps for profiling a step
    /// program (`None` if the device has no timestamps), made or grown now.
    pub(crate) fn profile_pool(
        &mut self,
        count: u32,
    ) -> Result<Option<vk::QueryPool>, VulkanError> {
        if !self.timed() {
            return Ok(None);
        }
        if self.profile_capacity < count {
            let device = &self.ctx.device;
            let capacity = count.next_power_of_two();
            let info = vk::QueryPoolCreateInfo::default()
                .query_type(vk::QueryType::TIMESTAMP)
                .query_count(capacity);
            // SAFETY: no submission is pending (each is waited for), so the
            // old pool is unused; the create info is valid.
            unsafe {
                device.destroy_query_pool(self.profile_queries, None);
                self.profile_queries = vk::QueryPool::null();
                self.profile_capacity = 0;
                inject::before("vkCreateQueryPool")?;
                self.profile_queries = device
                    .create_query_pool(&info, None)
                    .map_err(VulkanError::vk("vkCreateQueryPool"))?;
            }
            self.profile_capacity = capacity;
        }
        Ok(Some(self.profile_queries))
    }

    /// Nanoseconds between each profiling timestamp and the next, of the
    /// first `count`.
    pub(crate) fn read_profile(&self, count: u32) -> Result<Vec<f64>, VulkanError> {
        let stamps = self.stamps(self.profile_queries, count.min(self.profile_capacity))?;
        Ok(stamps.windows(2).map(|s| self.nanos(s[0], s[1])).collect())
    }

    /// Resets the command buffer, lets `record` fill it, submits it and
    /// waits for the device to finish it. Nothing is pending when it
    /// returns, even on error: buffers may be freed between calls.
    pub(crate) fn submit_and_wait(
        &mut self,
        record: impl FnOnce(&ash::Device, vk::CommandBuffer),
    ) -> Result<(), VulkanError> {
        // One part: the same submission and wait.
        let mut record = Some(record);
        self.submit_in_parts_and_wait(1, |device, cmd, _| {
            if let Some(record) = record.take() {
                record(device, cmd);
            }
        })
    }

    /// Records and submits `parts` command buffers in turn (at most
    /// [`MAX_PARTS`]; `record` is called with each and its index), then
    /// waits for the last. The device starts on the first part while the
    /// host records the next, so a long program's recording is hidden
    /// behind its execution; barriers order work across the parts as
    /// within one (they cover everything earlier in submission order).
    pub(crate) fn submit_in_parts_and_wait(
        &mut self,
        parts: usize,
        mut record: impl FnMut(&ash::Device, vk::CommandBuffer, usize),
    ) -> Result<(), VulkanError> {
        let parts = parts.clamp(1, MAX_PARTS);
        let device = &self.ctx.device;
        let started = std::time::Instant::now();
        let mut submitted = 0;
        let mut recording = std::time::Duration::ZERO;
        let mut result = Ok(());
        for (i, &cmd) in self.parts[..parts].iter().enumerate() {
            let began = std::time::Instant::now();
            // SAFETY: no part is pending (the last submission of every
            // call is waited for, so all of its parts are done), the fence
            // is unsignalled, and `record` records valid commands.
            let step = unsafe {
                device
                    .reset_command_buffer(cmd, vk::CommandBufferResetFlags::empty())
                    .map_err(VulkanError::vk("vkResetCommandBuffer"))
                    .and_then(|()| {
                        let begin = vk::CommandBufferBeginInfo::default()
                            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
                        device
                            .begin_command_buffer(cmd, &begin)
                            .map_err(VulkanError::vk("vkBeginCommandBuffer"))
                    })
                    .and_then(|()| {
                        record(device, cmd, i);
                        device
                            .end_command_buffer(cmd)
                            .map_err(VulkanError::vk("vkEndCommandBuffer"))
                    })
                    .and_then(|()| {
                        recording += began.elapsed();
                        let cmds = [cmd];
                        let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
                        let fence = if i + 1 == parts {
                            self.fence
                        } else {
                            vk::Fence::null()
                        };
                        device
                            .queue_submit(self.ctx.queue, &submit, fence)
                            .map_err(VulkanError::vk("vkQueueSubmit"))
                    })
            };
            if let Err(e) = step {
                result = Err(e);
                break;
            }
            submitted += 1;
        }
        self.last_recording = recording;
        let waiting_from = started + recording;
        // SAFETY: the fence was submitted with the last part if every part
        // was; otherwise the device is waited idle so that no part is left
        // pending.
        unsafe {
            if submitted == parts {
                let waited = device.wait_for_fences(&[self.fence], true, u64::MAX);
                if waited.is_err() {
                    let _ = device.device_wait_idle();
                }
                let reset = device.reset_fences(&[self.fence]);
                waited.map_err(VulkanError::vk("vkWaitForFences"))?;
                reset.map_err(VulkanError::vk("vkResetFences"))?;
            } else if submitted > 0 {
                let _ = device.device_wait_idle();
            }
        }
        self.last_waiting = waiting_from.elapsed();
        result
    }

    /// Nanoseconds between each pair of the first `pairs` × 2 timestamps.
    pub(crate) fn read_timestamps(&self, pairs: usize) -> Result<Vec<f64>, VulkanError> {
        let stamps = self.stamps(self.queries, 2 * pairs as u32)?;
        Ok(stamps
            .chunks_exact(2)
            .map(|s| self.nanos(s[0], s[1]))
            .collect())
    }

    /// The first `count` timestamps of `pool`, in ticks.
    fn stamps(&self, pool: vk::QueryPool, count: u32) -> Result<Vec<u64>, VulkanError> {
        let mut stamps = vec![0u64; count as usize];
        // SAFETY: the queries were written by the submission just waited for.
        unsafe {
            self.ctx
                .device
                .get_query_pool_results(pool, 0, &mut stamps, vk::QueryResultFlags::TYPE_64)
                .map_err(VulkanError::vk("vkGetQueryPoolResults"))?;
        }
        Ok(stamps)
    }

    /// Nanoseconds from timestamp `from` to `to`.
    fn nanos(&self, from: u64, to: u64) -> f64 {
        to.wrapping_sub(from) as f64 * f64::from(self.ctx.info.timestamp_period_ns.unwrap_or(1.0))
    }
}

impl Drop for Commands {
    fn drop(&mut self) {
        // SAFETY: no submission is pending (each is waited for); null
        // handles are ignored by Vulkan.
        unsafe {
            let device = &self.ctx.device;
            let _ = device.device_wait_idle();
            device.destroy_query_pool(self.queries, None);
            device.destroy_query_pool(self.profile_queries, None);
            device.destroy_fence(self.fence, None);
            device.destroy_command_pool(self.pool, None);
        }
    }
}
