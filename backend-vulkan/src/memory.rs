//! Buffers in device or host-visible memory from `gpu-allocator`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ash::vk;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme};
use gpu_allocator::MemoryLocation;

use crate::context::Context;
use crate::VulkanError;

/// One buffer and its memory. Freed by [`Buffer::destroy`] (its owner calls
/// it); a buffer dropped without it is counted as a leak by the context.
pub(crate) struct Buffer {
    pub handle: vk::Buffer,
    pub bytes: u64,
    pub location: MemoryLocation,
    allocation: Option<Allocation>,
}

impl Buffer {
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
        // SAFETY: a valid create info on a live device.
        let handle = unsafe { ctx.device.create_buffer(&info, None) }
            .map_err(VulkanError::vk("vkCreateBuffer"))?;
        // SAFETY: `handle` was just created on this device.
        let requirements = unsafe { ctx.device.get_buffer_memory_requirements(handle) };
        let allocation = ctx
            .allocator
            .lock()
            .map_err(|_| VulkanError::Unsupported("allocator lock poisoned".into()))?
            .as_mut()
            .ok_or_else(|| VulkanError::Unsupported("allocator already destroyed".into()))?
            .allocate(&AllocationCreateDesc {
                name,
                requirements,
                location,
                linear: true,
                allocation_scheme: AllocationScheme::GpuAllocatorManaged,
            });
        let allocation = match allocation {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: the buffer is unused and bound to nothing.
                unsafe { ctx.device.destroy_buffer(handle, None) };
                return Err(e.into());
            }
        };
        // SAFETY: the allocation satisfies the buffer's requirements and is
        // not bound to anything else.
        if let Err(e) = unsafe {
            ctx.device
                .bind_buffer_memory(handle, allocation.memory(), allocation.offset())
        } {
            // SAFETY: as above, nothing uses the buffer.
            unsafe { ctx.device.destroy_buffer(handle, None) };
            if let Ok(mut a) = ctx.allocator.lock() {
                if let Some(a) = a.as_mut() {
                    let _ = a.free(allocation);
                }
            }
            return Err(VulkanError::vk("vkBindBufferMemory")(e));
        }
        ctx.live_buffers.fetch_add(1, Ordering::Relaxed);
        Ok(Self {
            handle,
            bytes,
            location,
            allocation: Some(allocation),
        })
    }

    /// The mapped bytes of a host-visible buffer.
    pub fn mapped(&mut self) -> Result<&mut [u8], VulkanError> {
        self.allocation
            .as_mut()
            .and_then(|a| a.mapped_slice_mut())
            .ok_or_else(|| VulkanError::Unsupported("buffer is not host-visible".into()))
    }

    /// Frees the buffer. The device must not be using it.
    pub fn destroy(mut self, ctx: &Context) {
        // SAFETY: the owner guarantees no submitted work uses the buffer
        // (every submission is waited for before returning).
        unsafe { ctx.device.destroy_buffer(self.handle, None) };
        if let (Some(allocation), Ok(mut allocator)) =
            (self.allocation.take(), ctx.allocator.lock())
        {
            if let Some(allocator) = allocator.as_mut() {
                let _ = allocator.free(allocation);
            }
        }
        ctx.live_buffers.fetch_sub(1, Ordering::Relaxed);
        self.handle = vk::Buffer::null();
    }
}
