//! Logging of rare events (evictions, preemptions) that vanishes when the
//! `defmt` feature is off.

/// Logs at debug level through `defmt` when the feature is on; expands to
/// nothing otherwise, so the arguments cost nothing.
macro_rules! event {
    ($($arg:tt)*) => {
        #[cfg(feature = "defmt")]
        defmt::debug!($($arg)*);
    };
}

pub(crate) use event;
