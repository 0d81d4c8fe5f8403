//! Buffers in device or host-visible memory from `gpu-allocator`.

use std::sync::Arc;

use ash::vk;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme};
use gpu_allocator::MemoryLocation;

use crate::context::Context;
use crate::{inject, VulkanError};

/// One buffer and its memory, freed when dropped. It holds the context, so
/// the device and the allocator outlive it.
///
/// The device must not be using it when it is dropped: every call of the
/// backend waits for its submission before returning (see `commands.rs`),
/// so no work is ever pending outside a call.
pub(crate) struct Buffer {
    pub handle: vk::Buffer,
    pub bytes: u64,
    pub location: MemoryLocation,
    /// The null allocation until memory is bound (freeing it is a no-op).
    allocation: Allocation,
    ctx: Arc<Context>,
}

impl Buffer {
    /// Whether the buffer was made on the device of `ctx`.
    pub(crate) fn belongs_to(&self, ctx: &Arc<Context>) -> bool {
        Arc::ptr_eq(&self.ctx, ctx)
    }

    /// A storage buffer of `bytes` (at least 16) in `location`.
    pub fn new(
        ctx: &Arc<Context>,
        name: &str,
        bytes: u64,
        location: MemoryLocation,
    ) -> Result<Self, VulkanError> {
        let bytes = bytes.max(16);
        let info = vk::BufferCreateInfo::default()
            .size(bytes)
            .usage(
                vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::TRANSFER_DST
                    | vk::BufferUsageFlags::TRANSFER_SRC,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        inject::before("vkCreateBuffer")?;
        // SAFETY: a valid create info on a live device.
        let handle = unsafe { ctx.device.create_buffer(&info, None) }
            .map_err(VulkanError::vk("vkCreateBuffer"))?;
        // From here on, a failure drops `buffer`, which frees what exists.
        let mut buffer = Self {
            handle,
            bytes,
            location,
            allocation: Allocation::default(),
            ctx: ctx.clone(),
        };
        // SAFETY: `handle` was just created on this device.
        let requirements = unsafe { ctx.device.get_buffer_memory_requirements(handle) };
        inject::before("gpu_allocator::vulkan::Allocator::allocate")?;
        buffer.allocation = ctx.allocator().allocate(&AllocationCreateDesc {
            name,
            requirements,
            location,
            linear: true,
            allocation_scheme: AllocationScheme::GpuAllocatorManaged,
        })?;
        inject::before("vkBindBufferMemory")?;
        let memory = &buffer.allocation;
        // SAFETY: the allocation satisfies the buffer's requirements and
        // neither is bound to anything else.
        unsafe {
            ctx.device
                .bind_buffer_memory(handle, memory.memory(), memory.offset())
        }
        .map_err(VulkanError::vk("vkBindBufferMemory"))?;
        Ok(buffer)
    }

    /// The mapped bytes of a host-visible buffer.
    pub fn mapped(&mut self) -> Result<&mut [u8], VulkanError> {
        self.allocation
            .mapped_slice_mut()
            .ok_or_else(|| VulkanError::Unsupported("buffer is not host-visible".into()))
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: the buffer was created on this device and no pending work
        // uses it (see the type's docs).
        unsafe { self.ctx.device.destroy_buffer(self.handle, None) };
        // A failure to free leaves the memory to the allocator, which
        // releases every block when the context drops it.
        let _ = self
            .ctx
            .allocator()
            .free(std::mem::take(&mut self.allocation));
    }
}
