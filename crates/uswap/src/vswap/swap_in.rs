//! Swap-in: a folio's data back out of the engine through the swap cache, whole or a part of
//! a larger object, optionally dropping the caller's counts in the same critical section.
//!
//! Locking: [`SwapCache::add_or_get`](crate::swap_cache::SwapCache::add_or_get) takes the
//! cluster lock to take the object into the cache; whoever adds the folio loads it with no
//! lock held and finishes it (`finish.rs`); every other caller waits on the folio's lock. No
//! allocation once the swap-cache folios are reserved ([`Engine::reserve_swapin`]). A batch
//! ([`Engine::swap_in_many`]) holds the folios it added across its one load and waits on no
//! folio while it holds one.

use super::{order_of_len, Engine};
use crate::backend::{LoadReq, TierKind};
use crate::error::{SwapError, TierError};
use crate::stats::{Event, OrderEvent};
use crate::swap_cache::{AddMode, LockedFolio, Lookup, RefBit};
use crate::swap_table::{Kind, SwapEntry, PAGE_SIZE};

/// Most pages one [`Engine::swap_in_many`] reads together.
pub const SWAP_IN_BATCH: usize = 16;

/// One page of [`Engine::swap_in_many`].
pub struct PageIn<'a> {
    /// The slot to read (its count is kept).
    pub entry: SwapEntry,
    /// Where its 4 KiB go.
    pub out: &'a mut [u8],
    /// Read ahead, not asked for: may be skipped where its read would be a wait of its own.
    pub ahead: bool,
    /// The outcome, set by `swap_in_many`.
    pub result: Result<(), SwapError>,
}

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
                Lookup::Added(lf) => return self.read_added(lf, entry, order, out, free),
                Lookup::Locked(lf) => {
                    // Not asked for; give it back.
                    let _ = lf.unlock();
                }
            }
        }
    }

    /// Read `[entry, entry + 2^order)` into `out` from the folio `lf` this thread just added
    /// to the cache, and finish it (see [`Self::read_range`] for `free` and the result).
    fn read_added(
        &self,
        mut lf: LockedFolio<'_>,
        entry: SwapEntry,
        order: u8,
        out: &mut [u8],
        free: bool,
    ) -> Result<bool, SwapError> {
        if !free && out.len() < lf.data_mut().map_or(0, |d| d.len()) {
            // A part of a larger object (a 4 KiB fault on a 64 KiB folio): decode only up to
            // the end of that part, copy it, and drop the folio (it is not uptodate; the words
            // go back to the stored object).
            let res = self.fill_part(&mut lf, entry, out);
            lf.set_partial();
            // A part read is a use of the object (REF: a second chance against writeback in
            // RAM, a refault to promote on a file tier).
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
        self.finish(lf, if free { RefBit::Keep } else { RefBit::Set }, put)
    }

    /// Swap in several single pages at once, keeping their counts (a fault's readahead
    /// window): each request as `swap_in(entry, out, false)` would, except that the 4 KiB
    /// objects on the tier of the first one stored in a tier are read with one
    /// [`Backend::load_many`](crate::backend::Backend::load_many) (a file tier reads adjacent
    /// slots with one read and submits the runs together), and that an `ahead` request may
    /// be skipped: its result is then `Err(SwapError::Tier(TierError::Reject))` and its `out`
    /// untouched. Every request gets its own result; a failure changes nothing but its `out`.
    /// At most [`SWAP_IN_BATCH`] requests are read together, the rest one by one.
    ///
    /// Locking: the folios of the batch stay locked across its one load (no other lock held);
    /// a request whose entry another thread has in the cache is read after the batch's
    /// folios are finished, so this thread never waits on a folio while it holds one.
    pub fn swap_in_many(&self, reqs: &mut [PageIn<'_>]) {
        let mut held: [Option<LockedFolio<'_>>; SWAP_IN_BATCH] = std::array::from_fn(|_| None);
        let mut later = [false; SWAP_IN_BATCH];
        let mut batch_tier = None;
        for (i, r) in reqs.iter_mut().enumerate().take(SWAP_IN_BATCH) {
            if r.out.len() != PAGE_SIZE {
                later[i] = true;
                continue;
            }
            if let Err(e) = self.check_range(r.entry, 1) {
                r.result = Err(e);
                continue;
            }
            self.stamps.touch(r.entry, 1);
            match self.cache.add_or_get(&self.space, r.entry, 0, AddMode::SwapIn) {
                Ok(Lookup::Added(lf)) => {
                    let b = lf.backing();
                    let t = usize::from(b.tier());
                    if lf.nr_pages() == 1 && b.kind() == Kind::Stored && batch_tier.is_none_or(|bt| bt == t) {
                        batch_tier = Some(t);
                        held[i] = Some(lf);
                    } else {
                        r.result = self.read_added(lf, r.entry, 0, r.out, false).map(|_| ());
                    }
                }
                Ok(Lookup::Zero) => {
                    r.out.fill(0);
                    self.stats.add(Event::SwpinZero, 1);
                    self.stats.add_order(OrderEvent::Swpin, 0, 1);
                    r.result = Ok(());
                }
                Ok(Lookup::Locked(lf)) => {
                    let _ = lf.unlock();
                    later[i] = true;
                }
                Ok(Lookup::Existing(_) | Lookup::Mixed) => later[i] = true,
                Err(e) => r.result = Err(e),
            }
        }
        if let Some(t) = batch_tier {
            self.read_batch(t, &mut held, reqs);
        }
        // With no folio held any more: what another thread has in the cache, and the rest.
        let rest = reqs.iter_mut().enumerate().filter(|(i, _)| *i >= SWAP_IN_BATCH || later[*i]);
        for (_, r) in rest {
            r.result = self.swap_in(r.entry, r.out, false);
        }
    }

    /// The batch of [`Self::swap_in_many`]: load the folios `held` (4 KiB objects of tier
    /// `t`, `held[i]` for `reqs[i]`) with one `load_many`, copy each into its request's `out`,
    /// and finish them.
    fn read_batch(&self, t: usize, held: &mut [Option<LockedFolio<'_>>; SWAP_IN_BATCH], reqs: &mut [PageIn<'_>]) {
        let Ok(tier) = self.tier(t) else { return };
        let mut results: [Result<(), TierError>; SWAP_IN_BATCH] = std::array::from_fn(|_| Err(TierError::Reject));
        let mut pages = 0;
        let t0 = crate::stats::now_ns();
        {
            let mut loads: [LoadReq<'_>; SWAP_IN_BATCH] =
                std::array::from_fn(|_| LoadReq { handle: 0, out: &mut [], optional: true, result: Ok(()) });
            let mut of = [0usize; SWAP_IN_BATCH];
            let mut k = 0;
            for (i, h) in held.iter_mut().enumerate() {
                let Some(lf) = h.as_mut() else { continue };
                let handle = lf.backing().payload();
                let Some(d) = lf.data_mut() else { continue };
                loads[k] = LoadReq { handle, out: d, optional: reqs[i].ahead, result: Ok(()) };
                of[k] = i;
                k += 1;
            }
            tier.backend.load_many(&mut loads[..k]);
            for (l, &i) in loads[..k].iter_mut().zip(&of) {
                results[i] = std::mem::replace(&mut l.result, Ok(()));
                pages += u64::from(results[i].is_ok());
            }
        }
        self.count_swapin(tier.kind, pages, t0);
        for (i, h) in held.iter_mut().enumerate() {
            let Some(mut lf) = h.take() else { continue };
            let r = &mut reqs[i];
            let res = std::mem::replace(&mut results[i], Ok(()));
            r.result = match res {
                Ok(()) => {
                    lf.set_uptodate();
                    if let Some(d) = lf.data() {
                        r.out.copy_from_slice(d);
                    }
                    self.stats.add_order(OrderEvent::Swpin, 0, 1);
                    // Read ahead is not a use yet (REF stays: no promotion out of the file
                    // for a page nobody asked for).
                    self.finish(lf, if r.ahead { RefBit::Keep } else { RefBit::Set }, None).map(|_| ())
                }
                Err(TierError::Reject) => {
                    // Skipped: dropped on purpose, the words go back.
                    lf.set_partial();
                    self.finish(lf, RefBit::Keep, None).and(Err(SwapError::Tier(TierError::Reject)))
                }
                Err(e) => {
                    lf.set_error();
                    self.finish(lf, RefBit::Keep, None).and(Err(SwapError::Tier(e)))
                }
            };
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
