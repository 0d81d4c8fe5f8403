//! What the Khronos validation layer reports, kept where a caller can read
//! it after the device is gone: the layer reports leaked objects when the
//! device and the instance are destroyed, which is after every owner of the
//! backend has let go of it.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use ash::vk;

/// The validation layer's errors and warnings, in the order reported.
///
/// A shared handle: clones see the same messages. Pass one in
/// [`VulkanOptions::validation_log`](crate::VulkanOptions::validation_log)
/// (or take the backend's from
/// [`VulkanBackend::validation_log`](crate::VulkanBackend::validation_log))
/// and read it after the backend and its stores are dropped to see what
/// the layer said at teardown, leaks included.
#[derive(Debug, Clone, Default)]
pub struct ValidationLog(Arc<Mutex<Vec<String>>>);

impl ValidationLog {
    /// A new, empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every message so far.
    pub fn messages(&self) -> Vec<String> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// The messenger's create info, delivering errors and warnings to this
    /// log. The pointer it carries stays valid while any clone of the log
    /// lives; the instance keeps one until it is destroyed.
    pub(crate) fn messenger_info(&self) -> vk::DebugUtilsMessengerCreateInfoEXT<'static> {
        vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(
                vk::DebugUtilsMessageSeverityFlagsEXT::ERROR
                    | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
            )
            .message_type(
                vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                    | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                    | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
            )
            .pfn_user_callback(Some(on_message))
            .user_data(Arc::as_ptr(&self.0) as *mut c_void)
    }
}

unsafe extern "system" fn on_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    if severity.intersects(
        vk::DebugUtilsMessageSeverityFlagsEXT::ERROR
            | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
    ) {
        // SAFETY: `user` is the log's `Arc` contents, kept alive by the
        // clone the instance owner holds until after the instance (and so
        // every messenger) is destroyed; `data` and its message are valid
        // for the duration of the callback, as Vulkan guarantees.
        let (log, message) = unsafe {
            let log = &*(user as *const Mutex<Vec<String>>);
            let message = (*data)
                .message_as_c_str()
                .map(|m| m.to_string_lossy().into_owned());
            (log, message.unwrap_or_default())
        };
        if let Ok(mut messages) = log.lock() {
            messages.push(format!("{severity:?}: {message}"));
        }
    }
    vk::FALSE
}
