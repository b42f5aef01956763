//! Swap-in: a folio's data back out of the engine through the swap cache, whole or a part of
//! a larger object, optionally dropping the caller's counts in the same critical section.
//!
//! Locking: [`SwapCache::add_or_get`](crate::swap_cache::SwapCache::add_or_get) takes the
//! cluster lock to take the object into the cache; whoever adds the folio loads it with no
//! lock held and finishes it (`finish.rs`); every other caller waits on the folio's lock. No
//! allocation once the swap-cache folios are reserved ([`Engine::reserve_swapin`]).

use super::{order_of_len, Engine};
use crate::backend::TierKind;
use crate::error::{SwapError, TierError};
use crate::stats::{Event, OrderEvent};
use crate::swap_cache::{AddMode, LockedFolio, Lookup, RefBit};
use crate::swap_table::{SwapEntry, PAGE_SIZE};

impl Engine {
    /// Load a folio just added to the cache from its backing.
    pub(super) fn fill(&self, lf: &mut LockedFolio<'_>) -> Result<(), SwapError> {
        let b = lf.backing();
        let tier = self.tier(usize::from(b.tier()))?;
        let buf = lf.data_mut().ok_or_else(|| SwapError::Config("filling an uptodate folio".into()))?;
        let pages = (buf.len() / PAGE_SIZE) as u64;
        let t0 = crate::stats::now_ns();
        tier.backend.load(b.payload(), buf)?;
        self.count_swapin(tier.kind, pages, t0);
        lf.set_uptodate();
        Ok(())
    }

    /// Count `pages` loaded from a tier of `kind` by a load that began at `t0` (ns).
    fn count_swapin(&self, kind: TierKind, pages: u64, t0: u64) {
        let ns = crate::stats::now_ns().saturating_sub(t0);
        match kind {
            TierKind::Pool => {
                self.stats.add(Event::Zswpin, pages);
                self.stats.add(Event::ZswpinNs, ns);
            }
            TierKind::File => {
                self.stats.add(Event::Pswpin, pages);
                self.stats.add(Event::PswpinNs, ns);
            }
            _ => {}
        }
    }

    /// Decode the part `[entry, entry + out.len()/4096)` of the stored object of a folio just
    /// added to the cache and copy it into `out` (the folio is not made uptodate).
    fn fill_part(&self, lf: &mut LockedFolio<'_>, entry: SwapEntry, out: &mut [u8]) -> Result<(), SwapError> {
        let b = lf.backing();
        let first = lf.swap().0;
        let tier = self.tier(usize::from(b.tier()))?;
        let buf = lf.data_mut().ok_or_else(|| SwapError::Config("filling an uptodate folio".into()))?;
        let at = (entry.0 - first.0) as usize * PAGE_SIZE;
        let need = at + out.len();
        let t0 = crate::stats::now_ns();
        tier.backend.load_part(b.payload(), buf, at, out.len())?;
        self.count_swapin(tier.kind, (out.len() / PAGE_SIZE) as u64, t0);
        out.copy_from_slice(&buf[at..need]);
        Ok(())
    }

    /// Copy the part of folio data covering `[entry, entry + out.len()/4096)`.
    fn copy_out(first: SwapEntry, data: &[u8], entry: SwapEntry, out: &mut [u8]) {
        let at = (entry.0 - first.0) as usize * PAGE_SIZE;
        out.copy_from_slice(&data[at..at + out.len()]);
    }

    /// Read `[entry, entry + 2^order)` into `out` through the swap cache. With `free`, and if
    /// this thread loads the object itself, the counts are dropped in the same critical
    /// section (exclusive load); returns whether that happened.
    fn read_range(&self, entry: SwapEntry, order: u8, out: &mut [u8], free: bool) -> Result<bool, SwapError> {
        let mut failures = 0;
        loop {
            match self.cache.add_or_get(&self.space, entry, order, AddMode::SwapIn)? {
                Lookup::Zero => {
                    out.fill(0);
                    self.stats.add(Event::SwpinZero, 1 << order);
                    self.stats.add_order(OrderEvent::Swpin, order, 1);
                    return Ok(false);
                }
                Lookup::Mixed => {
                    if order == 0 {
                        return Err(SwapError::BadFolio { entry: entry.0, order });
                    }
                    self.stats.add_order(OrderEvent::SwpinFallback, order, 1);
                    let half = out.len() / 2;
                    let (a, b) = out.split_at_mut(half);
                    self.read_range(entry, order - 1, a, false)?;
                    self.read_range(entry.add(1 << (order - 1)), order - 1, b, false)?;
                    return Ok(false);
                }
                Lookup::Existing(f) => {
                    f.wait_unlocked();
                    if let Some(d) = f.data() {
                        Self::copy_out(f.swap().0, d, entry, out);
                        self.stats.add_order(OrderEvent::Swpin, order, 1);
                        return Ok(false);
                    }
                    if f.is_partial() {
                        // Its owner read only its own part; the words are back: look again.
                        drop(f);
                        std::thread::yield_now();
                        continue;
                    }
                    // The owner failed; the words are back: try again (and meet the error
                    // ourselves if it persists).
                    failures += 1;
                    if failures > 16 {
                        return Err(SwapError::Tier(TierError::Io {
                            errno: 0,
                            op: "swap_in",
                            msg: "the folio's loader failed repeatedly".into(),
                        }));
                    }
                }
                Lookup::Added(mut lf) => {
                    if !free && out.len() < lf.data_mut().map_or(0, |d| d.len()) {
                        // A part of a larger object (a 4 KiB fault on a 64 KiB folio): decode
                        // only up to the end of that part, copy it, and drop the folio
                        // (it is not uptodate; the words go back to the stored object).
                        let res = self.fill_part(&mut lf, entry, out);
                        lf.set_partial();
                        // A part read is a use of the object (REF: a second chance against
                        // writeback in RAM, a refault to promote on a file tier).
                        self.finish(lf, if res.is_ok() { RefBit::Set } else { RefBit::Keep }, None)?;
                        res?;
                        self.stats.add_order(OrderEvent::Swpin, order, 1);
                        return Ok(false);
                    }
                    if let Err(e) = self.fill(&mut lf) {
                        lf.set_error();
                        self.finish(lf, RefBit::Keep, None)?;
                        return Err(e);
                    }
                    let first = lf.swap().0;
                    if let Some(d) = lf.data() {
                        Self::copy_out(first, d, entry, out);
                    }
                    self.stats.add_order(OrderEvent::Swpin, order, 1);
                    let put = free.then_some((entry, 1usize << order));
                    return self.finish(lf, if free { RefBit::Keep } else { RefBit::Set }, put);
                }
                Lookup::Locked(lf) => {
                    // Not asked for; give it back.
                    let _ = lf.unlock();
                }
            }
        }
    }

    /// Preallocate swap-cache folios for swap-ins of up to `max_order` (see
    /// `SwapCache::reserve`), so a swap-in from a signal handler does not call malloc.
    pub fn reserve_swapin(&self, max_order: u8) -> Result<(), SwapError> {
        self.cache.reserve(max_order, 2)
    }

    /// Swap in `[entry, entry + out.len()/4096)` (`out.len()` = 4096 << order, `entry` aligned
    /// to it) through the swap cache. With `free`, drop the caller's count on each slot
    /// afterwards; when an object's last count goes, its slots and backend data are freed.
    pub fn swap_in(&self, entry: SwapEntry, out: &mut [u8], free: bool) -> Result<(), SwapError> {
        let order = order_of_len(out.len())?;
        let n = 1usize << order;
        self.check_range(entry, n)?;
        if entry.offset() & (n - 1) != 0 {
            return Err(SwapError::BadFolio { entry: entry.0, order });
        }
        self.stamps.touch(entry, n);
        let done = self.read_range(entry, order, out, free)?;
        if free && !done {
            self.put(entry, n)?;
        }
        Ok(())
    }
}
