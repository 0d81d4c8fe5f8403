//! What the scheduler needs to know about a request, and its priority class.
//!
//! The core never owns prompt text or token buffers: a request is any type
//! that can show its prompt tokens and how many tokens it may generate. The
//! host uses an owned type; an embedded caller can use borrowed slices.

/// A request's priority class. Higher classes are served first; within a
/// class, arrival order decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Priority {
    /// Background work.
    Low = 0,
    /// The default class.
    #[default]
    Normal = 1,
    /// Interactive traffic.
    High = 2,
    /// Served before everything else.
    Critical = 3,
}

impl Priority {
    /// Number of classes.
    pub const COUNT: usize = 4;

    /// Every class, highest first: the order requests are handed out in.
    pub const HIGHEST_FIRST: [Priority; Self::COUNT] = [
        Priority::Critical,
        Priority::High,
        Priority::Normal,
        Priority::Low,
    ];

    /// The class's index, `0` for [`Low`](Self::Low) to `3` for
    /// [`Critical`](Self::Critical).
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// An inference request as the queue and scheduler see it.
///
/// ```
/// use pagoda_core::Request;
/// struct Prompt { tokens: Vec<u32>, max_new: u32 }
/// impl Request for Prompt {
///     fn prompt(&self) -> &[u32] { &self.tokens }
///     fn max_output_tokens(&self) -> u32 { self.max_new }
/// }
/// ```
pub trait Request {
    /// The prompt's token ids. The prefix cache matches on them.
    fn prompt(&self) -> &[u32];

    /// The most tokens the request may generate.
    fn max_output_tokens(&self) -> u32;

    /// Whether the prefix cache may serve the prompt (the default). A
    /// request that needs every prompt row computed (to score its prompt)
    /// says no: it is admitted with no cached prefix, as vLLM admits
    /// requests for prompt log probabilities.
    fn reuses_prefix(&self) -> bool {
        true
    }

    /// Whether its computed pages enter the prefix cache for later
    /// requests (the default). A request no later one could start from
    /// says no: a recurrent model's, whose state no page holds. Its pages
    /// are then released unpublished, as a cancelled request's are.
    fn shares_pages(&self) -> bool {
        true
    }
}

impl<R: Request + ?Sized> Request for &R {
    fn prompt(&self) -> &[u32] {
        (**self).prompt()
    }

    fn max_output_tokens(&self) -> u32 {
        (**self).max_output_tokens()
    }

    fn reuses_prefix(&self) -> bool {
        (**self).reuses_prefix()
    }

    fn shares_pages(&self) -> bool {
        (**self).shares_pages()
    }
}
