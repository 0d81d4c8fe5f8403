//! The backend's error, with the kind an engine reacts to.

use std::fmt;

use ash::vk;
use pagoda_core::backend::{BackendError, BackendErrorKind, InputError};

/// Why the Vulkan backend refused or failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VulkanError {
    /// The input is wrong; nothing was dispatched.
    Input(InputError),
    /// The Vulkan loader (`libvulkan.so.1`) could not be loaded.
    Loader(String),
    /// No Vulkan device with a compute queue (or none matching the
    /// `PAGODA_VULKAN_DEVICE` choice).
    NoDevice(String),
    /// A Vulkan call failed.
    Vk {
        /// The call.
        call: &'static str,
        /// What it returned.
        result: vk::Result,
    },
    /// Memory could not be allocated.
    OutOfMemory(String),
    /// The device lacks something this backend needs, or the request is
    /// beyond its limits.
    Unsupported(String),
    /// A model op's operands disagree (weight bytes, row length, batch);
    /// nothing was dispatched.
    Shape(String),
    /// A bounds-checking kernel caught an out-of-range access (a bug in the
    /// backend, since inputs are validated first); the bits say which.
    ShaderFault(u32),
}

impl VulkanError {
    pub(crate) fn vk(call: &'static str) -> impl Fn(vk::Result) -> Self {
        move |result| Self::Vk { call, result }
    }
}

impl fmt::Display for VulkanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Input(e) => write!(f, "invalid input: {e}"),
            Self::Loader(e) => write!(f, "cannot load the Vulkan loader: {e}"),
            Self::NoDevice(e) => write!(f, "no usable Vulkan device: {e}"),
            Self::Vk { call, result } => write!(f, "{call} failed: {result}"),
            Self::OutOfMemory(e) => write!(f, "out of memory: {e}"),
            Self::Unsupported(e) => write!(f, "unsupported: {e}"),
            Self::Shape(e) => write!(f, "operand shapes disagree: {e}"),
            Self::ShaderFault(bits) => {
                write!(
                    f,
                    "a kernel caught an out-of-range access (fault bits {bits:#x})"
                )
            }
        }
    }
}

impl std::error::Error for VulkanError {}

impl BackendError for VulkanError {
    fn kind(&self) -> BackendErrorKind {
        match self {
            Self::Input(_) | Self::Shape(_) => BackendErrorKind::InvalidInput,
            Self::OutOfMemory(_) => BackendErrorKind::OutOfMemory,
            Self::Vk { result, .. } => match *result {
                vk::Result::ERROR_OUT_OF_DEVICE_MEMORY
                | vk::Result::ERROR_OUT_OF_HOST_MEMORY
                | vk::Result::ERROR_OUT_OF_POOL_MEMORY
                | vk::Result::ERROR_FRAGMENTED_POOL => BackendErrorKind::OutOfMemory,
                vk::Result::ERROR_DEVICE_LOST => BackendErrorKind::DeviceLost,
                _ => BackendErrorKind::Unsupported,
            },
            Self::ShaderFault(_) => BackendErrorKind::DeviceLost,
            Self::Loader(_) | Self::NoDevice(_) | Self::Unsupported(_) => {
                BackendErrorKind::Unsupported
            }
        }
    }
}

impl From<InputError> for VulkanError {
    fn from(e: InputError) -> Self {
        Self::Input(e)
    }
}

impl From<gpu_allocator::AllocationError> for VulkanError {
    fn from(e: gpu_allocator::AllocationError) -> Self {
        match e {
            gpu_allocator::AllocationError::OutOfMemory => Self::OutOfMemory(e.to_string()),
            other => Self::Unsupported(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_errors_map_to_their_kinds() {
        for (result, want) in [
            (
                vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
                BackendErrorKind::OutOfMemory,
            ),
            (
                vk::Result::ERROR_OUT_OF_HOST_MEMORY,
                BackendErrorKind::OutOfMemory,
            ),
            (vk::Result::ERROR_DEVICE_LOST, BackendErrorKind::DeviceLost),
            (
                vk::Result::ERROR_INITIALIZATION_FAILED,
                BackendErrorKind::Unsupported,
            ),
        ] {
            let error = VulkanError::Vk {
                call: "vkQueueSubmit",
                result,
            };
            assert_eq!(error.kind(), want, "{result:?}");
        }
        let alloc: VulkanError = gpu_allocator::AllocationError::OutOfMemory.into();
        assert_eq!(alloc.kind(), BackendErrorKind::OutOfMemory);
        let input: VulkanError = InputError::Scale.into();
        assert_eq!(input.kind(), BackendErrorKind::InvalidInput);
    }
}
