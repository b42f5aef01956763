//! Swap-out: a folio's data into a fresh entry of the virtual space, stored whole in the first
//! tier that takes it (or as ZERO words, stored nowhere).
//!
//! Locking: the allocation takes the space's shard, cluster and list locks inside
//! [`SwapSpace::alloc`](crate::cluster::SwapSpace::alloc). Slots being stored hold a
//! placeholder CACHED word (`FOLIO_INFLIGHT`), which nobody but this thread acts on; the
//! store runs with no lock held, and one cluster lock section then writes the real words.
//! The tier's in-flight count covers the store until those words are written.

use super::{order_of_len, Engine};
use crate::backend::TierKind;
use crate::error::SwapError;
use crate::stats::{Event, OrderEvent};
use crate::swap_cache::FOLIO_INFLIGHT;
use crate::swap_table::{SwapEntry, Word};
use crate::sync::Ordering;
use crate::tier::zero::is_zero;

impl Engine {
    fn alloc(&self, order: u8, word: Word) -> Result<SwapEntry, SwapError> {
        self.space.alloc(order, &mut |_| word).inspect_err(|e| {
            if matches!(e, SwapError::NoSpace { .. }) {
                self.stats.add_order(OrderEvent::SwpoutFallback, order, 1);
            }
        })
    }

    /// Swap out one folio (`data.len()` = 4096 << order) for `group`. Returns the entry of
    /// its first slot; the 2^order slots have count 1 each. `NoSpace { order }` means no
    /// contiguous range is free (counted in `swpout_fallback`): split and retry.
    pub fn swap_out(&self, group: u16, data: &[u8]) -> Result<SwapEntry, SwapError> {
        let order = order_of_len(data.len())?;
        self.groups.check(group)?;
        let pages = 1u64 << order;
        if self.zero_elision && is_zero(data) {
            let e = self.alloc(order, Word::zero(group, 1))?;
            self.stats.add(Event::SwpoutZero, pages);
            self.stats.add_order(OrderEvent::Swpout, order, 1);
            self.groups.add_swapped(group, pages);
            return Ok(e);
        }
        let e = self.alloc(order, Word::cached(group, FOLIO_INFLIGHT, 1))?;
        let n = 1usize << order;
        let off = e.offset();
        match self.store_anywhere(group, data, e, None) {
            Ok((t, s)) => {
                let loc = Word::stored(0, t as u8, s.handle, 0);
                // REF = "used since it got here": a fresh store in a RAM tier gets its second
                // chance against writeback; on a file tier REF means a refault (promotion).
                let fresh_ref = self.tiers[t].kind != TierKind::File;
                let res = self.space.lock_cluster(e).and_then(|mut g| {
                    for i in off..off + n {
                        let w = g.word(i);
                        g.set(i, w.with_location_of(loc).with_referenced(fresh_ref))?;
                    }
                    Ok(())
                });
                self.tiers[t].inflight.fetch_sub(1, Ordering::SeqCst);
                if let Err(err) = res {
                    self.free_data(group, loc, pages);
                    return Err(err);
                }
                self.stats.add_order(OrderEvent::Swpout, order, 1);
                self.groups.add_swapped(group, pages);
                self.stamps.touch(e, n);
                Ok(e)
            }
            Err(err) => {
                if let Ok(mut g) = self.space.lock_cluster(e) {
                    let _ = g.free_range(off, n);
                }
                Err(err)
            }
        }
    }
}
