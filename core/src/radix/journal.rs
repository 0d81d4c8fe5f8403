//! The growth journal: a ring of the keys where recent inserts grew the
//! tree, so a scheduler rescores only the waiting prompts an insert extends.

use super::RadixCache;

/// How many growth points [`RadixCache::growth_since`] remembers.
pub const GROWTH_JOURNAL: usize = 64;

/// Where the tree grew since a cursor, from [`RadixCache::growth_since`].
#[derive(Debug, Clone, Copy)]
pub enum Growth<'c> {
    /// The keys of the first new node of each insert, oldest first.
    Keys(GrowthKeys<'c>),
    /// More inserts happened than the journal holds: rescore everything.
    Overflowed,
}

/// The growth keys since a cursor.
#[derive(Debug, Clone, Copy)]
pub struct GrowthKeys<'c> {
    ring: &'c [u64; GROWTH_JOURNAL],
    next: u64,
    end: u64,
}

impl Iterator for GrowthKeys<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        if self.next == self.end {
            return None;
        }
        let key = self.ring[(self.next % GROWTH_JOURNAL as u64) as usize];
        self.next += 1;
        Some(key)
    }
}

impl RadixCache<'_> {
    /// A cursor for [`growth_since`](Self::growth_since): now.
    pub fn growth_cursor(&self) -> u64 {
        self.growth_count
    }

    /// The keys ([`PrefixProbe::next_key`](crate::PrefixProbe::next_key)) of
    /// the places where inserts grew the tree since `cursor`, or
    /// [`Growth::Overflowed`] if the journal lost some. Evictions are not
    /// listed: they only shorten matches, which a scheduler confirms anyway
    /// before it admits a request.
    pub fn growth_since(&self, cursor: u64) -> Growth<'_> {
        if self.growth_count - cursor.min(self.growth_count) > GROWTH_JOURNAL as u64 {
            return Growth::Overflowed;
        }
        Growth::Keys(GrowthKeys {
            ring: &self.growth,
            next: cursor.min(self.growth_count),
            end: self.growth_count,
        })
    }

    #[inline]
    pub(super) fn record_growth(&mut self, key: u64) {
        self.growth[(self.growth_count % GROWTH_JOURNAL as u64) as usize] = key;
        self.growth_count += 1;
    }
}
