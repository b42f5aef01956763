//! Swap cache: the resident copies of slots being swapped in or moved, and the single
//! synchronization point for swap-in (`mm/swap_state.c`; Kairui Song's series "mm/swap: always
//! use swap cache for synchronization", 2024).
//!
//! The cache is not a separate index: a slot is cached when its table word is CACHED and its
//! payload names a folio in this module's arena. Whoever turns the words of a range into
//! CACHED words (under the cluster lock, in [`SwapCache::add_or_get`]) owns the folio's
//! contents: the folio is LOCKED and not UPTODATE, and the owner fills it. Anyone else who
//! finds the CACHED word gets the same folio and waits until it is unlocked, then checks
//! UPTODATE / ERROR. Nobody bypasses the cache, so a racing mover (writeback, drain) and a
//! racing swap-in cannot both read and free the same backend object.
//!
//! A folio covers a whole stored object: a large folio occupies all its slots, which are in
//! one cluster. It remembers the location the words held before (its *backing*: a STORED
//! tier/handle, or nothing for a dirty folio that is the only copy), so a clean folio leaves
//! the cache by rewriting the words, without writing data anywhere ([`SwapCache::delete_locked`]).
//! A slot whose count is 0 while it is cached is freed when the folio leaves the cache.
//!
//! # Folio arena
//! Folios live in an arena of segments that are never freed while the cache exists, only
//! recycled, so a lock-free reader holding a stale folio id may still call
//! [`SwapCache::try_get`]: it increments the refcount only if it is non-zero (a folio on a free
//! list has refcount 0), then validates that the table word still names the folio (the
//! `folio_matches_swap_entry` check). Freed folios keep their data buffer and go to a per-shard,
//! per-order free list, so the steady-state fault path allocates nothing.
//!
//! # Locking
//! - Table words change only under the cluster lock (`ClusterGuard`); `add_or_get` and
//!   `delete_locked` run under it.
//! - The folio LOCKED bit is the owner's right to fill the data and to finish the folio. A
//!   folio that stays in the cache after its owner is done (a dirty, resident folio) is
//!   unlocked while the cluster lock is still held, so a `put` that frees the last count sees a
//!   consistent LOCKED bit.
//! - Waiting uses a per-folio `Mutex` + `Condvar` from [`crate::sync`] (so loom can model it)
//!   and a WAITERS bit so an uncontended unlock takes no mutex. Nobody spins.
//! - Lock order: cluster lock -> free-list shard lock (a leaf) and cluster lock -> folio wait
//!   mutex (a leaf).
//! - Folio data is written only by the LOCKED owner before UPTODATE is set (Release) and read
//!   only by reference holders after they observe UPTODATE (Acquire); it is recycled only at
//!   refcount 0.

use crate::cluster::{ClusterGuard, SwapSpace};
use crate::error::SwapError;
use crate::page_heap::PageBuf;
use crate::swap_table::{Kind, SwapEntry, Word, MAX_ORDER, NR_ORDERS, PAGE_SIZE, PAYLOAD_MAX, SLOTS_PER_CLUSTER};
use crate::sync::{lock, thread_shard, AtomicPtr, AtomicU32, AtomicU64, Condvar, LockClass, Mutex, Ordering};
use crossbeam_utils::CachePadded;
use std::cell::UnsafeCell;

/// A folio id that names no folio: the placeholder payload of slots whose data is being
/// stored by `swap_out` (allocated, not yet visible to anyone but the allocating thread).
pub(crate) const FOLIO_INFLIGHT: u64 = PAYLOAD_MAX;

const F_LOCKED: u32 = 1;
const F_UPTODATE: u32 = 2;
const F_ERROR: u32 = 4;
/// With F_ERROR: the owner read only the part it needed and dropped the folio on purpose; a
/// waiter retries without counting a failure.
const F_PARTIAL: u32 = 64;
const F_DIRTY: u32 = 8;
const F_WAITERS: u32 = 16;

const SWAP_NONE: u64 = u64::MAX;

/// log2 of the size of the first arena segment.
const SEG_BASE_SHIFT: u32 = if cfg!(loom) { 1 } else { 6 };
/// Segments: segment k holds `1 << (SEG_BASE_SHIFT + k)` folios.
const NR_SEGS: usize = 36;
/// Free-list shards.
const NR_SHARDS: usize = if cfg!(loom) { 1 } else { 8 };

/// The location part of a word (kind, tier, payload), without count, REF and group.
#[inline]
pub(crate) fn location(w: Word) -> Word {
    Word::FREE.with_location_of(w)
}

/// One folio: a resident copy of 2^order slots.
pub(crate) struct Folio {
    refcount: AtomicU32,
    flags: AtomicU32,
    /// `entry << 4 | order`, or `SWAP_NONE`.
    swap: AtomicU64,
    /// The location word the slots had before the folio was added (FREE = none).
    backing: AtomicU64,
    data: UnsafeCell<PageBuf>,
    wait_lock: Mutex<()>,
    wait_cv: Condvar,
}

// SAFETY: every field but `data` is a synchronization primitive. `data` is written only by
// the unique owner of the LOCKED bit before UPTODATE is published with Release, or by the
// unique owner of a folio popped off a free list (refcount 0, unreachable by `try_get`), and
// read only by reference holders after they observe UPTODATE with Acquire.
unsafe impl Sync for Folio {}
// SAFETY: as above; the buffer is an owned `PageBuf`.
unsafe impl Send for Folio {}

impl Folio {
    fn new() -> Self {
        Folio {
            refcount: AtomicU32::new(0),
            flags: AtomicU32::new(0),
            swap: AtomicU64::new(SWAP_NONE),
            backing: AtomicU64::new(0),
            data: UnsafeCell::new(PageBuf::EMPTY),
            wait_lock: Mutex::new(LockClass::FolioWait, ()),
            wait_cv: Condvar::new(),
        }
    }
}

struct Arena {
    segs: [AtomicPtr<Folio>; NR_SEGS],
    next: AtomicU64,
}

fn seg_of(id: u64) -> (usize, usize) {
    let q = (id >> SEG_BASE_SHIFT) + 1;
    let k = 63 - q.leading_zeros();
    let first = ((1u64 << k) - 1) << SEG_BASE_SHIFT;
    (k as usize, (id - first) as usize)
}

fn seg_len(k: usize) -> usize {
    1usize << (SEG_BASE_SHIFT as usize + k)
}

impl Arena {
    fn new() -> Self {
        Arena { segs: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())), next: AtomicU64::new(0) }
    }

    fn get(&self, id: u64) -> Option<&Folio> {
        if id >= FOLIO_INFLIGHT {
            return None;
        }
        let (k, i) = seg_of(id);
        let p = self.segs.get(k)?.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        if i >= seg_len(k) {
            return None;
        }
        // SAFETY: `p` points at a leaked `Box<[Folio]>` of `seg_len(k)` elements, published
        // with Release and freed only when the arena drops; `i < seg_len(k)`.
        Some(unsafe { &*p.add(i) })
    }

    /// A fresh id whose folio exists.
    fn new_id(&self) -> Result<u64, SwapError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        if id >= FOLIO_INFLIGHT {
            return Err(SwapError::Config("swap cache folio ids exhausted".into()));
        }
        let (k, _) = seg_of(id);
        if k >= NR_SEGS {
            return Err(SwapError::Config("swap cache folio ids exhausted".into()));
        }
        if self.segs[k].load(Ordering::Acquire).is_null() {
            let seg: Box<[Folio]> = (0..seg_len(k)).map(|_| Folio::new()).collect();
            let p = Box::into_raw(seg) as *mut Folio;
            if self.segs[k].compare_exchange(std::ptr::null_mut(), p, Ordering::AcqRel, Ordering::Acquire).is_err() {
                // SAFETY: `p` came from `Box::into_raw` of a slice of `seg_len(k)` folios just
                // above and was never published.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, seg_len(k))) });
            }
        }
        Ok(id)
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        for (k, s) in self.segs.iter().enumerate() {
            let p = s.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: `p` is a leaked `Box<[Folio]>` of `seg_len(k)` elements and no
                // reference into the arena outlives `&mut self`.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, seg_len(k))) });
            }
        }
    }
}

struct FreeLists {
    /// Folios whose buffer fits this order.
    by_order: [Vec<u64>; NR_ORDERS],
    /// Folios without a buffer.
    bare: Vec<u64>,
}

impl Default for FreeLists {
    fn default() -> Self {
        // Capacity for everything a shard may keep, so recycling never grows a Vec (the fault
        // path may run in a signal handler).
        FreeLists {
            by_order: std::array::from_fn(|o| Vec::with_capacity(keep_per_order(o))),
            bare: Vec::with_capacity(64),
        }
    }
}

/// A folio buffer from the page heap ([`PageBuf::dirty`]): its data is written whole (a load)
/// before anyone reads it, as a recycled folio's is, so a block the heap is about to release
/// will do.
fn folio_buf(len: usize) -> Result<PageBuf, SwapError> {
    PageBuf::dirty(len).ok_or_else(|| SwapError::Config("no memory for a swap-cache folio".into()))
}

/// How many folios with a buffer of `order` a shard keeps.
fn keep_per_order(order: usize) -> usize {
    (64usize >> order).max(2)
}

/// The swap cache.
pub struct SwapCache {
    arena: Arena,
    shards: Box<[CachePadded<Mutex<FreeLists>>]>,
    in_cache: AtomicU64,
}

/// Who is asking in [`SwapCache::add_or_get`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AddMode {
    /// A swap-in: the target slot must have a count (the caller holds a reference).
    SwapIn,
    /// A mover (writeback, drain, move): the target may be a count-0 slot of a live object,
    /// and an unlocked resident folio is locked for the caller ([`Lookup::Locked`]).
    Move,
}

/// What [`SwapCache::add_or_get`] found.
pub enum Lookup<'a> {
    /// A new folio now covers the object: the caller owns it (LOCKED, not UPTODATE) and must
    /// fill it from its backing, then finish it (delete it or keep it) and unlock it.
    Added(LockedFolio<'a>),
    /// Another caller's folio covers the range: wait until unlocked, then check UPTODATE.
    Existing(FolioRef<'a>),
    /// An unlocked resident folio covered the range and the caller is a mover: the caller
    /// owns it now (UPTODATE).
    Locked(LockedFolio<'a>),
    /// Every slot of the range is a zero page: no folio needed.
    Zero,
    /// The range is mixed (several objects, or zero and stored slots): the caller falls back
    /// to a lower order (`EBUSY`, counted as `swpin_fallback`).
    Mixed,
}

/// What a folio leaving the cache (`SwapCache::delete_locked`) does to the REF bit of the
/// words that get its backing back. REF means "used since it got here": a swap-in sets it
/// (a second chance against writeback in RAM, a refault to promote on a file tier), a move
/// into a file tier clears it, and anything else leaves it as it was.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RefBit {
    /// As it was.
    Keep,
    /// Set.
    Set,
    /// Cleared.
    Clear,
}

/// What [`SwapCache::delete_locked`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deleted {
    /// Slots freed (their count was 0): all slots of the folio, or none.
    pub freed_slots: usize,
    /// The backing location no slot refers to any more: the caller frees it in its tier.
    pub dead_backing: Option<Word>,
    /// Group of the folio's slots.
    pub group: u16,
}

/// A counted reference to a folio; dropping it drops the reference.
pub struct FolioRef<'a> {
    cache: &'a SwapCache,
    folio: &'a Folio,
    id: u64,
}

/// A reference to a folio whose LOCKED bit this caller owns.
pub struct LockedFolio<'a> {
    r: FolioRef<'a>,
}

impl<'a> FolioRef<'a> {
    /// First slot and order, or None if the folio has been recycled (cannot happen while
    /// a reference is held).
    pub(crate) fn swap(&self) -> (SwapEntry, u8) {
        let s = self.folio.swap.load(Ordering::Acquire);
        (SwapEntry(s >> 4), (s & 0xf) as u8)
    }
    /// Pages in the folio.
    pub(crate) fn nr_pages(&self) -> usize {
        1 << self.swap().1
    }
    /// True if the slot range `[e, e + n)` lies inside this folio.
    pub(crate) fn covers(&self, e: SwapEntry, n: u64) -> bool {
        let (f, o) = self.swap();
        e.0 >= f.0 && e.0 + n <= f.0 + (1u64 << o)
    }
    /// The location the slots had before the folio (FREE for a dirty resident folio).
    pub fn backing(&self) -> Word {
        Word(self.folio.backing.load(Ordering::Acquire))
    }
    fn flags(&self) -> u32 {
        self.folio.flags.load(Ordering::Acquire)
    }
    /// The owner is still filling or finishing the folio.
    pub(crate) fn is_locked(&self) -> bool {
        self.flags() & F_LOCKED != 0
    }
    /// The data is valid.
    pub(crate) fn is_uptodate(&self) -> bool {
        self.flags() & F_UPTODATE != 0
    }
    /// The owner read only part of the object and dropped the folio (see
    /// [`LockedFolio::set_partial`]): not a failure.
    pub(crate) fn is_partial(&self) -> bool {
        self.flags() & F_PARTIAL != 0
    }
    /// Block until the owner unlocks the folio.
    pub fn wait_unlocked(&self) {
        let f = self.folio;
        if f.flags.load(Ordering::Acquire) & F_LOCKED == 0 {
            return;
        }
        let mut g = lock(&f.wait_lock);
        f.flags.fetch_or(F_WAITERS, Ordering::SeqCst);
        while f.flags.load(Ordering::SeqCst) & F_LOCKED != 0 {
            g = f.wait_cv.wait(g);
        }
    }
    /// The data, if UPTODATE.
    pub fn data(&self) -> Option<&[u8]> {
        if self.is_uptodate() {
            // SAFETY: UPTODATE was observed with Acquire after the owner's writes (Release);
            // nobody writes the buffer again until the refcount (which we hold) drops to 0.
            Some(unsafe { &**self.folio.data.get() })
        } else {
            None
        }
    }
    /// Try to take the LOCKED bit of an unlocked folio.
    fn try_lock(&self) -> bool {
        let f = &self.folio.flags;
        let mut cur = f.load(Ordering::Acquire);
        loop {
            if cur & F_LOCKED != 0 {
                return false;
            }
            match f.compare_exchange_weak(cur, cur | F_LOCKED, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(v) => cur = v,
            }
        }
    }
}

impl Clone for FolioRef<'_> {
    fn clone(&self) -> Self {
        self.folio.refcount.fetch_add(1, Ordering::Relaxed);
        FolioRef { cache: self.cache, folio: self.folio, id: self.id }
    }
}

impl Drop for FolioRef<'_> {
    fn drop(&mut self) {
        if self.folio.refcount.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.cache.recycle(self.id, self.folio);
        }
    }
}

impl<'a> LockedFolio<'a> {
    /// The buffer to fill, if the folio is not UPTODATE yet.
    pub fn data_mut(&mut self) -> Option<&mut [u8]> {
        if self.r.is_uptodate() {
            return None;
        }
        // SAFETY: we own LOCKED and UPTODATE is not set, so no reader touches the buffer;
        // `&mut self` makes this the only borrow through this owner.
        Some(unsafe { &mut **self.r.folio.data.get() })
    }
    /// Publish the data.
    pub fn set_uptodate(&mut self) {
        self.r.folio.flags.fetch_or(F_UPTODATE, Ordering::Release);
    }
    /// Mark the folio failed (waiters retry).
    pub(crate) fn set_error(&mut self) {
        self.r.folio.flags.fetch_or(F_ERROR, Ordering::Release);
    }
    /// Mark the folio dropped after a partial read: not uptodate, waiters retry (and do not
    /// count it as a failure); finish it like a failed folio.
    pub(crate) fn set_partial(&mut self) {
        self.r.folio.flags.fetch_or(F_ERROR | F_PARTIAL, Ordering::Release);
    }
    /// Change the backing location (after the data was stored elsewhere, or FREE to make the
    /// folio the only copy, which also marks it dirty). Call under the cluster lock.
    pub(crate) fn set_backing(&mut self, loc: Word) {
        self.r.folio.backing.store(location(loc).0, Ordering::Release);
        if loc.is_free() {
            self.r.folio.flags.fetch_or(F_DIRTY, Ordering::Release);
        } else {
            self.r.folio.flags.fetch_and(!F_DIRTY, Ordering::Release);
        }
    }
    /// Release LOCKED and wake waiters. For a folio that stays in the cache, call this while
    /// still holding the cluster lock.
    pub fn unlock(self) -> FolioRef<'a> {
        let f = self.r.folio;
        let old = f.flags.fetch_and(!F_LOCKED, Ordering::SeqCst);
        if old & F_WAITERS != 0 {
            let _g = lock(&f.wait_lock);
            f.wait_cv.notify_all();
        }
        self.r
    }
}

impl<'a> std::ops::Deref for LockedFolio<'a> {
    type Target = FolioRef<'a>;
    fn deref(&self) -> &FolioRef<'a> {
        &self.r
    }
}

/// The extent (first offset in the cluster, order) of the object that slot `off` belongs to,
/// read under the cluster lock. A STORED object of order m is the aligned block of 2^m slots
/// that all hold the same location (tier and handle are unique among live objects, and all
/// slots of an object stay allocated until the whole object is freed). A ZERO slot is its
/// own object. CACHED slots: the caller asks the folio instead.
pub(crate) fn object_extent(g: &ClusterGuard<'_>, off: usize) -> (usize, u8) {
    let w = g.word(off);
    if w.kind() != Kind::Stored {
        return (off, 0);
    }
    let loc = location(w);
    let mut order = 0u8;
    while order < MAX_ORDER {
        let k = order + 1;
        let start = off & !((1usize << k) - 1);
        let n = 1usize << k;
        if start + n > SLOTS_PER_CLUSTER {
            break;
        }
        if (start..start + n).all(|i| location(g.word(i)) == loc) {
            order = k;
        } else {
            break;
        }
    }
    (off & !((1usize << order) - 1), order)
}

impl Default for SwapCache {
    fn default() -> Self {
        Self::new()
    }
}

impl SwapCache {
    /// An empty cache.
    pub fn new() -> Self {
        SwapCache {
            arena: Arena::new(),
            shards: (0..NR_SHARDS)
                .map(|_| CachePadded::new(Mutex::new(LockClass::CacheFreeList, FreeLists::default())))
                .collect(),
            in_cache: AtomicU64::new(0),
        }
    }

    /// Folios currently in the cache.
    pub fn nr_cached(&self) -> u64 {
        self.in_cache.load(Ordering::Relaxed)
    }

    /// Take a reference to folio `id` if it is live (refcount CAS-increment-if-nonzero). The
    /// caller must still check that the folio is the one it wanted (see [`Self::lookup`]).
    pub(crate) fn try_get(&self, id: u64) -> Option<FolioRef<'_>> {
        let folio = self.arena.get(id)?;
        let mut cur = folio.refcount.load(Ordering::Acquire);
        loop {
            if cur == 0 {
                return None;
            }
            match folio.refcount.compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(FolioRef { cache: self, folio, id }),
                Err(v) => cur = v,
            }
        }
    }

    /// Lock-free lookup: the folio caching `entry`, if any (`swap_cache_get_folio`).
    pub fn lookup(&self, space: &SwapSpace, entry: SwapEntry) -> Result<Option<FolioRef<'_>>, SwapError> {
        loop {
            let w = space.load(entry)?;
            if w.kind() != Kind::Cached || w.payload() == FOLIO_INFLIGHT {
                return Ok(None);
            }
            let Some(f) = self.try_get(w.payload()) else {
                // Refcount 0: the folio left the cache, and its words were rewritten before
                // the cache reference was dropped. Look again.
                continue;
            };
            let again = space.load(entry)?;
            if again.kind() == Kind::Cached && again.payload() == f.id && f.covers(entry, 1) {
                return Ok(Some(f));
            }
            // The folio was recycled for another range; drop it and look again.
        }
    }

    /// Preallocate folios with buffers so that swap-in of folios up to `max_order` takes its
    /// folio from a free list instead of the heap (the pager's fault path runs in a SIGBUS
    /// handler, where malloc is forbidden): every shard gets `per_shard` folios of each order
    /// up to 64 KiB, and shards 0 and 1 one of each larger order (any shard can take them,
    /// see `Self::alloc_folio`). Call outside the fault path; idempotent (tops up).
    pub(crate) fn reserve(&self, max_order: u8, per_shard: usize) -> Result<(), SwapError> {
        for o in 0..=usize::from(max_order.min(MAX_ORDER)) {
            for sh in 0..NR_SHARDS {
                let want = if o <= 4 { per_shard.min(keep_per_order(o)) } else { usize::from(sh < 2) };
                loop {
                    if lock(&self.shards[sh]).by_order[o].len() >= want {
                        break;
                    }
                    let id = self.arena.new_id()?;
                    let folio =
                        self.arena.get(id).ok_or_else(|| SwapError::Config("swap cache arena lost a folio".into()))?;
                    // SAFETY: a fresh folio: refcount 0, no reference reads `data`.
                    unsafe { *folio.data.get() = folio_buf(PAGE_SIZE << o)? };
                    lock(&self.shards[sh]).by_order[o].push(id);
                }
            }
        }
        Ok(())
    }

    /// A free folio with a buffer for `order`, refcount 0, owned by the caller: from this
    /// thread's shard, else from any other shard whose lock is free (the reserve), and only
    /// when every list is empty from the heap.
    fn alloc_folio(&self, order: u8) -> Result<(u64, &Folio), SwapError> {
        let o = usize::from(order);
        let home = thread_shard() % NR_SHARDS;
        let mut popped = lock(&self.shards[home]).by_order[o].pop().map(|id| (id, true));
        if popped.is_none() {
            for k in 1..NR_SHARDS {
                if let Some(mut fl) = self.shards[(home + k) % NR_SHARDS].try_lock() {
                    if let Some(id) = fl.by_order[o].pop() {
                        popped = Some((id, true));
                        break;
                    }
                }
            }
        }
        if popped.is_none() {
            popped = lock(&self.shards[home]).bare.pop().map(|id| (id, false));
        }
        let (id, has_buf) = match popped {
            Some(x) => x,
            None => (self.arena.new_id()?, false),
        };
        let folio = self.arena.get(id).ok_or_else(|| SwapError::Config("swap cache arena lost a folio".into()))?;
        if !has_buf {
            let buf = folio_buf(PAGE_SIZE << order)?;
            // SAFETY: the folio came off a free list or is fresh: refcount 0, so `try_get`
            // cannot hand it out and no reference reads `data`; we are its only owner.
            unsafe { *folio.data.get() = buf };
        }
        Ok((id, folio))
    }

    fn recycle(&self, id: u64, folio: &Folio) {
        folio.flags.store(0, Ordering::Relaxed);
        folio.swap.store(SWAP_NONE, Ordering::Relaxed);
        folio.backing.store(0, Ordering::Relaxed);
        // SAFETY: refcount is 0: no reference exists and `try_get` refuses the folio, so this
        // thread (the one that dropped the last reference) owns it.
        let len = unsafe { (&*folio.data.get()).len() };
        let order = (len / PAGE_SIZE).trailing_zeros() as usize;
        let mut fl = lock(&self.shards[thread_shard() % NR_SHARDS]);
        if len >= PAGE_SIZE && order < NR_ORDERS && fl.by_order[order].len() < keep_per_order(order) {
            fl.by_order[order].push(id);
        } else {
            // SAFETY: as above. The buffer is taken out before the folio goes on the bare list
            // (where another thread may pop it) and freed once the shard lock is let go.
            let buf = unsafe { std::mem::take(&mut *folio.data.get()) };
            fl.bare.push(id);
            drop(fl);
            drop(buf);
        }
    }

    /// Add-or-get (`swap_cache_alloc_folio` + `swap_cache_get_folio` in one step under the
    /// cluster lock). `entry` must be aligned to `order`. Target slot:
    /// - CACHED: `Existing` (or `Locked` for a mover if the folio is unlocked), or `Mixed`
    ///   if the folio does not cover the range;
    /// - ZERO: `Zero` if the whole range is ZERO, else `Mixed`;
    /// - STORED with a count (any count for a mover): a folio covering the whole object is added (`Added`), or
    ///   `Mixed` if the object is smaller than the range;
    /// - FREE, a zero count, a slot still being stored, anything else: `NotInUse`.
    pub fn add_or_get<'a>(
        &'a self,
        space: &SwapSpace,
        entry: SwapEntry,
        order: u8,
        mode: AddMode,
    ) -> Result<Lookup<'a>, SwapError> {
        let n = 1usize << order;
        if order > MAX_ORDER || entry.offset() & (n - 1) != 0 {
            return Err(SwapError::BadFolio { entry: entry.0, order });
        }
        let mut g = space.lock_cluster(entry)?;
        self.add_or_get_locked(&mut g, entry, order, mode)
    }

    /// [`Self::add_or_get`] under the cluster lock `g` of `entry`, which the caller holds
    /// (and may keep, to add several objects of one cluster in one critical section: the
    /// batched drain).
    pub(crate) fn add_or_get_locked<'a>(
        &'a self,
        g: &mut ClusterGuard<'_>,
        entry: SwapEntry,
        order: u8,
        mode: AddMode,
    ) -> Result<Lookup<'a>, SwapError> {
        let n = 1usize << order;
        if order > MAX_ORDER || entry.offset() & (n - 1) != 0 || g.entry(0).0 != entry.0 - entry.offset() as u64 {
            return Err(SwapError::BadFolio { entry: entry.0, order });
        }
        let off = entry.offset();
        let w = g.word(off);
        match w.kind() {
            Kind::Cached => {
                if w.payload() == FOLIO_INFLIGHT {
                    return Err(SwapError::NotInUse(entry.0));
                }
                let f = self
                    .try_get(w.payload())
                    .ok_or_else(|| SwapError::Config(format!("swap cache: slot {:#x} names a freed folio", entry.0)))?;
                if !f.covers(entry, n as u64) {
                    return Ok(Lookup::Mixed);
                }
                if mode == AddMode::Move && f.try_lock() {
                    return Ok(Lookup::Locked(LockedFolio { r: f }));
                }
                Ok(Lookup::Existing(f))
            }
            Kind::Zero => {
                if (off..off + n).all(|i| g.word(i).kind() == Kind::Zero) {
                    Ok(Lookup::Zero)
                } else {
                    Ok(Lookup::Mixed)
                }
            }
            Kind::Stored => {
                if mode == AddMode::SwapIn && g.count(off) == 0 {
                    return Err(SwapError::NotInUse(entry.0));
                }
                let (start, m) = object_extent(g, off);
                if m < order {
                    return Ok(Lookup::Mixed);
                }
                let (id, folio) = self.alloc_folio(m)?;
                let first = entry.0 - (off - start) as u64;
                folio.flags.store(F_LOCKED, Ordering::Relaxed);
                folio.swap.store(first << 4 | u64::from(m), Ordering::Relaxed);
                folio.backing.store(location(w).0, Ordering::Relaxed);
                // Cache reference + the caller's reference; Release publishes the fields above
                // to any `try_get` that succeeds.
                folio.refcount.store(2, Ordering::Release);
                let cached = Word::cached(0, id, 0);
                for i in start..start + (1 << m) {
                    let old = g.word(i);
                    g.set(i, old.with_location_of(cached))?;
                }
                self.in_cache.fetch_add(1, Ordering::Relaxed);
                Ok(Lookup::Added(LockedFolio { r: FolioRef { cache: self, folio, id } }))
            }
            _ => Err(SwapError::NotInUse(entry.0)),
        }
    }

    /// Take folio `f` out of the cache under its cluster lock `g` (`__swap_cache_del_folio`).
    /// If every slot's count is 0 the slots are freed and the backing (if any) is returned
    /// as dead, for the caller to free in its tier. Otherwise each word gets the backing
    /// location back (keeping count and group; REF as `r` says); a dirty folio (no
    /// backing) with live counts cannot leave the cache and is refused.
    pub(crate) fn delete_locked(
        &self,
        g: &mut ClusterGuard<'_>,
        f: &FolioRef<'_>,
        r: RefBit,
    ) -> Result<Deleted, SwapError> {
        let (first, order) = f.swap();
        let start = first.offset();
        let n = 1usize << order;
        let mut group = 0;
        for i in start..start + n {
            let w = g.word(i);
            if w.kind() != Kind::Cached || w.payload() != f.id {
                return Err(SwapError::BadFolio { entry: first.0, order });
            }
            group = w.group();
        }
        let all_zero = (start..start + n).all(|i| g.count(i) == 0);
        let backing = f.backing();
        let res = if all_zero {
            g.free_range(start, n)?;
            Deleted { freed_slots: n, dead_backing: (!backing.is_free()).then_some(backing), group }
        } else if backing.is_free() {
            return Err(SwapError::BadFolio { entry: first.0, order });
        } else {
            for i in start..start + n {
                let w = g.word(i);
                let nw = w.with_location_of(backing);
                g.set(
                    i,
                    match r {
                        RefBit::Keep => nw,
                        RefBit::Set => nw.with_referenced(true),
                        RefBit::Clear => nw.with_referenced(false),
                    },
                )?;
            }
            Deleted { freed_slots: 0, dead_backing: None, group }
        };
        // Drop the cache's reference; the caller still holds its own, so this never frees.
        f.folio.refcount.fetch_sub(1, Ordering::AcqRel);
        self.in_cache.fetch_sub(1, Ordering::Relaxed);
        Ok(res)
    }

    /// [`Self::delete_locked`] taking the cluster lock itself.
    pub fn delete(&self, space: &SwapSpace, f: &FolioRef<'_>, r: RefBit) -> Result<Deleted, SwapError> {
        let mut g = space.lock_cluster(f.swap().0)?;
        self.delete_locked(&mut g, f, r)
    }
}
