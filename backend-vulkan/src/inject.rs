//! A test-only hook in front of every call that creates a Vulkan object or
//! allocates memory: a test makes the n-th such call on its thread fail, as
//! a device out of memory would, and checks that everything made before it
//! is freed. In other builds the hook is an inlined `Ok(())`.

/// Called just before `call` creates something.
#[cfg(not(test))]
#[inline(always)]
pub(crate) fn before(_call: &'static str) -> Result<(), crate::VulkanError> {
    Ok(())
}

#[cfg(test)]
pub(crate) use hook::{before, calls_seen, fail_call, failed_call, injected};

#[cfg(test)]
mod hook {
    use std::cell::Cell;

    use ash::vk;

    use crate::VulkanError;

    thread_local! {
        /// Calls seen on this thread since the last `fail_call`.
        static SEEN: Cell<usize> = const { Cell::new(0) };
        /// The call (counted from 0) to fail, if any.
        static FAIL_AT: Cell<Option<usize>> = const { Cell::new(None) };
        /// The call that was failed.
        static FAILED: Cell<Option<&'static str>> = const { Cell::new(None) };
    }

    /// What an injected failure of `call` returns.
    pub(crate) fn injected(call: &'static str) -> VulkanError {
        VulkanError::Vk {
            call,
            result: vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
        }
    }

    /// Counts the call, and fails it if it is the one [`fail_call`] picked.
    pub(crate) fn before(call: &'static str) -> Result<(), VulkanError> {
        let seen = SEEN.get();
        SEEN.set(seen + 1);
        if FAIL_AT.get() == Some(seen) {
            FAILED.set(Some(call));
            return Err(injected(call));
        }
        Ok(())
    }

    /// Restarts the count and makes call `n` on this thread (counted from
    /// 0) fail; `None` fails none.
    pub(crate) fn fail_call(n: Option<usize>) {
        SEEN.set(0);
        FAIL_AT.set(n);
        FAILED.set(None);
    }

    /// The call that was failed since the last [`fail_call`], if any.
    pub(crate) fn failed_call() -> Option<&'static str> {
        FAILED.get()
    }

    /// Calls seen on this thread since the last [`fail_call`].
    pub(crate) fn calls_seen() -> usize {
        SEEN.get()
    }
}
