//! The one error type of the paged KV cache.
//!
//! Every operation a caller can get wrong returns [`KvError`]; nothing in the
//! cache panics on input. Errors are small `Copy` values so they can be
//! returned from hot paths and logged on embedded targets.

use core::fmt;

use crate::geometry::GeometryError;

/// Why a paged-KV-cache operation was refused. The operation changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum KvError {
    /// The geometry or the byte budget cannot describe a usable pool.
    InvalidGeometry(GeometryError),
    /// The storage handed in is empty, or larger than page ids can address.
    InvalidStorage,
    /// Not enough pages are free or evictable for the request.
    PoolExhausted {
        /// Pages the operation needed.
        needed: u32,
        /// Pages that were free or evictable at the time.
        available: u32,
    },
    /// The page id is outside the pool.
    UnknownPage,
    /// The operation needs a page that somebody references, and this one is free
    /// or only cached.
    PageNotReferenced,
    /// A page's reference count would overflow `u32`.
    TooManyReferences,
    /// The sequence id was never issued by this table, or was released.
    UnknownSequence,
    /// Every sequence row of the page table is taken.
    NoFreeSequenceSlot,
    /// The sequence would grow past its page-table row.
    SequenceTooLong {
        /// The most tokens one sequence can hold in this table.
        max_tokens: u32,
    },
    /// The pages are not a path of the prefix cache from its root.
    NotCached,
    /// The tokens given for a sequence do not match what the prefix cache
    /// already holds in its pages.
    TokensMismatch,
    /// A token position at or past the sequence's length was asked for.
    PositionOutOfRange {
        /// The sequence's length in tokens.
        len: u32,
    },
}

impl fmt::Display for KvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidGeometry(e) => write!(f, "invalid KV geometry: {e}"),
            Self::InvalidStorage => {
                f.write_str("storage is empty or larger than page ids can address")
            }
            Self::PoolExhausted { needed, available } => write!(
                f,
                "page pool exhausted: needed {needed} pages, {available} free or evictable"
            ),
            Self::UnknownPage => f.write_str("page id is outside the pool"),
            Self::PageNotReferenced => f.write_str("page is not referenced"),
            Self::TooManyReferences => f.write_str("page reference count would overflow"),
            Self::UnknownSequence => f.write_str("unknown or released sequence"),
            Self::NoFreeSequenceSlot => f.write_str("every page-table row is in use"),
            Self::SequenceTooLong { max_tokens } => {
                write!(f, "sequence would exceed its row of {max_tokens} tokens")
            }
            Self::NotCached => f.write_str("pages are not a cached path of the prefix cache"),
            Self::TokensMismatch => {
                f.write_str("tokens do not match the pages the prefix cache holds for them")
            }
            Self::PositionOutOfRange { len } => {
                write!(
                    f,
                    "token position out of range for a sequence of {len} tokens"
                )
            }
        }
    }
}

impl From<GeometryError> for KvError {
    fn from(e: GeometryError) -> Self {
        Self::InvalidGeometry(e)
    }
}

impl core::error::Error for KvError {}
