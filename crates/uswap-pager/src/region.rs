//! Managed regions: the mapping, its per-page state words, and the process-wide registry the
//! SIGBUS handler searches. This layer knows nothing of reclaim: retiring a region takes the
//! release of its pages as an argument (see `reclaim::retire_region`), and the public
//! [`crate::Region`] handle lives above reclaim (`handle.rs`).
//!
//! Every 4 KiB page of a region has one state word ([`crate::page::PageWord`], in a
//! `MAP_NORESERVE` array so untouched parts cost nothing) and a 4-byte shadow.
//!
//! Locking: a page changes state only by CAS ([`crate::page`]: `BUSY` is the per-page lock).
//! The registry is a fixed array of slots read lock-free by
//! the handler; a region is retired by clearing its slot and waiting until no thread is inside
//! pager code ([`enter`]/[`leave`]).

use crate::page::{kind, AtomicPageWord, PageWord};
use crate::Pager;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// The swap-cache object a CACHED word of a folio of `order` points at.
pub(crate) fn cached_obj(w: PageWord, order: u32) -> crate::arena::Obj {
    crate::arena::Obj {
        off: w.payload() as usize * crate::arena::GRANULE,
        class: crate::arena::class_of(crate::PAGE_SIZE << order).unwrap_or(0),
    }
}

/// Bytes of per-page state: the state word and the shadow.
const WORD_BYTES: usize = 12;

/// Maximum number of live regions in the process (a slot index fits the 16 bits a reclaim
/// queue entry has for it, `reclaim::entry_raw`). As many as that, because a runtime may map
/// its heap in many small pieces, a region each (Ruby maps 16 KiB pages), and an adoption
/// refused for want of a slot leaves that memory outside the pager.
pub(crate) const MAX_REGIONS: usize = 1 << 16;
/// Bits of a slot's generation kept in a reclaim queue entry (12): an entry left in a queue
/// after its region was retired names the slot's next region only after 4096 reuses of the
/// slot, and then at worst picks a wrong folio to evict (reclaim checks every page word).
pub(crate) const GEN_MASK: u32 = 0xfff;

struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    ptr: AtomicPtr<RegionInner>,
    gen: AtomicU32,
}

static REGISTRY: [Slot; MAX_REGIONS] = [const {
    Slot {
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
        ptr: AtomicPtr::new(std::ptr::null_mut()),
        gen: AtomicU32::new(0),
    }
}; MAX_REGIONS];
static HIGH: AtomicUsize = AtomicUsize::new(0);
/// Where the search for a free slot starts: no slot below it was free when it was last moved
/// up (a hint; the search wraps round). Before, every new region scanned from slot 0, past
/// every live one.
static FREE_FROM: AtomicUsize = AtomicUsize::new(0);
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Mark this thread as using region pointers from the registry (handler, reclaim, events).
#[inline]
pub(crate) fn enter() {
    ACTIVE.fetch_add(1, Ordering::SeqCst);
}
/// End of [`enter`].
#[inline]
pub(crate) fn leave() {
    ACTIVE.fetch_sub(1, Ordering::SeqCst);
}

/// Recently found regions by address (`(addr >> 14) % HINTS`): slot + 1, 0 = none. A hint is
/// only a guess, checked against the slot's range like a scan would. One hint per 16 KiB over
/// 1 GiB (256 KiB of table, touched only where regions are): a runtime that maps its heap in
/// 16 KiB pieces (Ruby 3.1) has a region per piece, and with one hint per 64 KiB over 32 MiB
/// most of its faults missed and scanned the registry (11 500 regions).
const HINTS: usize = 1 << 16;
static HINT: [AtomicU32; HINTS] = [const { AtomicU32::new(0) }; HINTS];

#[inline]
fn hint_index(addr: usize) -> usize {
    (addr >> 14) % HINTS
}

/// The live region in slot `s` if it contains `addr` at a page that is still the region's.
///
/// # Safety
/// - The caller is between [`enter`] and [`leave`].
#[inline]
unsafe fn slot_hit(s: &Slot, addr: usize) -> Option<&'static RegionInner> {
    if addr < s.start.load(Ordering::Relaxed) || addr >= s.end.load(Ordering::Relaxed) {
        return None;
    }
    let p = s.ptr.load(Ordering::Acquire);
    if p.is_null() {
        return None;
    }
    // SAFETY: a non-null slot pointer names a live RegionInner; retirement clears the slot
    // and waits for ACTIVE to drain before freeing it (the caller is inside enter()).
    let r = unsafe { &*p };
    (addr >= r.start
        && addr < r.start + r.len
        && r.word((addr - r.start) / crate::PAGE_SIZE).load(Ordering::Acquire).kind() != kind::UNMAPPED)
        .then_some(r)
}

/// Find the region containing `addr`.
///
/// The `'static` is a lie the caller keeps honest: the region lives only until it is retired,
/// which waits for every thread between [`enter`] and [`leave`].
///
/// # Safety
/// - The calling thread is between [`enter`] and [`leave`] (or otherwise keeps the region from
///   being retired, as the owner of its [`crate::Region`] does).
/// - It uses the reference only until its matching [`leave`].
#[inline]
pub(crate) unsafe fn lookup(addr: usize) -> Option<&'static RegionInner> {
    let h = &HINT[hint_index(addr)];
    let guess = h.load(Ordering::Relaxed) as usize;
    if guess != 0 {
        // SAFETY: the caller is inside enter()/leave() (this function's contract).
        if let Some(r) = unsafe { slot_hit(&REGISTRY[guess - 1], addr) } {
            return Some(r);
        }
    }
    let n = HIGH.load(Ordering::Acquire);
    for (i, s) in REGISTRY[..n].iter().enumerate() {
        // SAFETY: as above.
        if let Some(r) = unsafe { slot_hit(s, addr) } {
            h.store(i as u32 + 1, Ordering::Relaxed);
            return Some(r);
        }
    }
    None
}

/// True if a live region holds the page at `addr` (its word is not `UNMAPPED`): unlike
/// [`overlaps`], false for a region whose range the program unmapped and that is not reaped
/// yet, and false for addresses reused by a new mapping meanwhile.
pub fn manages(addr: usize) -> bool {
    enter();
    // SAFETY: between enter and leave; the reference is not kept.
    let hit = unsafe { lookup(addr) }.is_some();
    leave();
    hit
}

/// True if `[a, b)` overlaps a live region (no dereference: safe outside `enter`).
pub fn overlaps(a: usize, b: usize) -> bool {
    let n = HIGH.load(Ordering::Acquire);
    REGISTRY[..n].iter().any(|s| {
        let (st, en) = (s.start.load(Ordering::Relaxed), s.end.load(Ordering::Relaxed));
        en != 0 && st < b && en > a
    })
}

/// The distinct pagers that hold live regions, at most `out.len()` of them, into `out`;
/// returns how many. Allocates nothing. The pointers stay valid only while those pagers live
/// (a pager is dropped after its regions; under `uswap run` it lives for the process).
pub(crate) fn live_pagers(out: &mut [*const Pager]) -> usize {
    let mut k = 0;
    enter();
    for s in &REGISTRY[..HIGH.load(Ordering::Acquire)] {
        let r = s.ptr.load(Ordering::Acquire);
        if r.is_null() {
            continue;
        }
        // SAFETY: a non-null slot names a live region while this thread is inside enter().
        let pager = unsafe { &*r }.pager() as *const Pager;
        if !out[..k].contains(&pager) {
            if k == out.len() {
                break;
            }
            out[k] = pager;
            k += 1;
        }
    }
    leave();
    k
}

/// Call `f` for every live region of pager `p`.
///
/// # Safety
/// - As for [`lookup`]: the caller is between [`enter`] and [`leave`] and uses the references
///   `f` gets (`'static` only in name) only until its matching [`leave`].
pub(crate) unsafe fn for_each_of(p: &Pager, f: impl FnMut(&'static RegionInner)) {
    // SAFETY: the caller's obligations are for_each_in's.
    unsafe { for_each_in(p, 0, usize::MAX, f) }
}

/// Call `f` for every live region of pager `p` that overlaps `[a, b)`.
///
/// The slots' own ranges are checked first, so regions elsewhere cost a read of two words
/// each and no visit to their `RegionInner` (28 600 regions of a Ruby heap made every
/// adoption and unmap event chase 28 600 pointers: 8 % of a run's samples). `f` checks the
/// overlap itself, as before: a slot's range is only a filter.
///
/// # Safety
/// - As for [`lookup`]: the caller is between [`enter`] and [`leave`] and uses the references
///   `f` gets (`'static` only in name) only until its matching [`leave`].
pub(crate) unsafe fn for_each_in(p: &Pager, a: usize, b: usize, mut f: impl FnMut(&'static RegionInner)) {
    let n = HIGH.load(Ordering::Acquire);
    for s in &REGISTRY[..n] {
        let (st, en) = (s.start.load(Ordering::Relaxed), s.end.load(Ordering::Relaxed));
        if en == 0 || st >= b || en <= a {
            continue;
        }
        let ptr = s.ptr.load(Ordering::Acquire);
        if !ptr.is_null() {
            // SAFETY: a non-null slot pointer names a live RegionInner, kept alive while the
            // caller is inside enter() (this function's contract).
            let r = unsafe { &*ptr };
            if std::ptr::eq(r.pager, p) {
                f(r);
            }
        }
    }
}

/// Find a region by slot and generation (from a reclaim queue entry).
///
/// # Safety
/// - As for [`lookup`]: the caller is between [`enter`] and [`leave`] and uses the reference
///   (`'static` only in name) only until its matching [`leave`].
#[inline]
pub(crate) unsafe fn by_slot(slot: usize, gen: u32) -> Option<&'static RegionInner> {
    let s = REGISTRY.get(slot)?;
    let p = s.ptr.load(Ordering::Acquire);
    if p.is_null() {
        return None;
    }
    // SAFETY: a non-null slot pointer names a live RegionInner, kept alive while the caller is
    // inside enter() (this function's contract).
    let r = unsafe { &*p };
    (r.gen == gen && s.gen.load(Ordering::Relaxed) == gen).then_some(r)
}

/// Call `f(i, j)` for each maximal run `[i, j)` of `[0, n)` where `is` holds, in order, until
/// it returns false; returns whether every call succeeded.
pub(crate) fn runs(n: usize, is: &dyn Fn(usize) -> bool, mut f: impl FnMut(usize, usize) -> bool) -> bool {
    let mut i = 0;
    while i < n {
        if !is(i) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < n && is(j) {
            j += 1;
        }
        if !f(i, j) {
            return false;
        }
        i = j;
    }
    true
}

/// The shared part of a region, reachable from the signal handler.
pub(crate) struct RegionInner {
    /// First byte (folio aligned).
    pub(crate) start: usize,
    /// Length in bytes (multiple of the folio size).
    pub(crate) len: usize,
    /// Number of 4 KiB pages.
    pub(crate) npages: usize,
    /// Folio order of the region.
    pub(crate) folio_order: u32,
    /// The pager (outlives the region: the Region holds an Arc).
    pub(crate) pager: *const Pager,
    /// The state words (`npages` of them), then one 4-byte shadow per page.
    words: crate::words::Words,
    /// Registry slot.
    pub(crate) slot: usize,
    /// Registry generation.
    pub(crate) gen: u32,
    /// `madvise(MADV_HUGEPAGE)`-like hint for the `Madvise` swap-in policy.
    pub(crate) huge_hint: std::sync::atomic::AtomicBool,
    /// Last faulting page (sequential detection) and the current readahead window.
    pub(crate) last_fault: AtomicUsize,
    /// Sequential-fault streak (adaptive granularity and readahead window).
    pub(crate) seq_streak: AtomicU32,
    /// Last readahead window: `end << 16 | pages read ahead` (for swap_ra_hit).
    pub(crate) ra_end: AtomicUsize,
    /// Some page was ever mapped CLEAN (a fork child has clean pages to forget).
    pub(crate) had_clean: std::sync::atomic::AtomicBool,
    /// The program's own mapping, adopted where it lies ([`crate::vma`]): the pager never
    /// unmaps it, and the program's munmap/mremap decide its life.
    pub(crate) adopted: bool,
    /// Pages marked `UNMAPPED` (an adopted region whose pages are all unmapped is retired).
    pub(crate) unmapped: AtomicUsize,
    map_len: usize,
    map_base: usize,
}

// SAFETY: every shared field is atomic or immutable (the words are Send + Sync themselves);
// `pager` points to a Pager, which is Sync, that outlives the region.
unsafe impl Send for RegionInner {}
// SAFETY: as above.
unsafe impl Sync for RegionInner {}

impl RegionInner {
    /// The state word of page `i`. Panics unless `i < npages`.
    #[inline]
    pub(crate) fn word(&self, i: usize) -> &AtomicPageWord {
        assert!(i < self.npages, "page {i} of a region of {} pages", self.npages);
        // SAFETY: i < npages and the words hold npages words (8-aligned, see `words`) for the
        // region's life; any bits are a valid PageWord.
        unsafe { &*self.words.as_ptr().cast::<AtomicPageWord>().add(i) }
    }

    /// The state words of pages `[first, first + n)` (for a [`crate::page::Claim`]). Panics
    /// unless the run lies in the region.
    #[inline]
    pub(crate) fn words(&self, first: usize, n: usize) -> &[AtomicPageWord] {
        assert!(first <= self.npages && n <= self.npages - first, "pages {first}+{n} of {}", self.npages);
        // SAFETY: the run lies within the npages words, which live as long as
        // the region (8-aligned; any bits are a valid PageWord).
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<AtomicPageWord>().add(first), n) }
    }

    /// The shadow of page `i`: the reclaim clock when it was last evicted straight to the store
    /// while the inactive list was bypassed (0 = none); see `Workingset` (`reclaim/workingset.rs`).
    #[inline]
    /// Panics unless `i < npages`.
    pub(crate) fn shadow(&self, i: usize) -> &AtomicU32 {
        assert!(i < self.npages, "page {i} of a region of {} pages", self.npages);
        // SAFETY: i < npages, and the npages shadows follow the npages words in the same
        // block (4-aligned), which lives as long as the region.
        unsafe { &*self.words.as_ptr().cast::<AtomicU64>().add(self.npages).cast::<AtomicU32>().add(i) }
    }

    /// Address of page `i`.
    #[inline]
    pub(crate) fn addr(&self, i: usize) -> usize {
        self.start + i * crate::PAGE_SIZE
    }

    /// Mark page `i` `UNMAPPED` (its entries must have been released).
    pub(crate) fn mark_unmapped(&self, i: usize) {
        if self.word(i).swap(PageWord::UNMAPPED, Ordering::AcqRel).kind() != kind::UNMAPPED {
            self.unmapped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// True once every page of the region is unmapped.
    pub(crate) fn all_unmapped(&self) -> bool {
        self.unmapped.load(Ordering::Relaxed) >= self.npages
    }

    /// The pager.
    #[inline]
    pub(crate) fn pager(&self) -> &Pager {
        // SAFETY: a Region owning this inner holds an Arc<Pager> until after retirement; an
        // adopted region is retired by its pager before the pager is freed.
        unsafe { &*self.pager }
    }
}

/// A new region's memory: `len` bytes of anonymous private `MAP_NORESERVE` memory, the
/// program's (not recorded as the pager's own). Unmapped piecewise when the region is retired.
fn mmap_region(len: usize) -> std::io::Result<usize> {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    // SAFETY: anonymous mapping with no address hint: it replaces nothing.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p as usize)
}

/// Where a new region's memory comes from.
struct Placement {
    start: usize,
    len: usize,
    folio_order: u32,
    adopted: bool,
    map_base: usize,
    map_len: usize,
}

/// Make a region's state (page words, all `NONE`) and publish it in the registry. Faults on
/// its pages are served from then on (registration with the uffd is the caller's).
fn publish_region(pager: &Pager, pl: Placement) -> Result<*mut RegionInner, crate::PagerError> {
    let npages = pl.len / crate::PAGE_SIZE;
    // The state words, then one 4-byte shadow per page (see `RegionInner::shadow`).
    let words = crate::words::Words::new(npages * WORD_BYTES)
        .map_err(|e| crate::PagerError::Os(format!("mmap of page table: {e}")))?;
    // Claim a registry slot: the lowest free one at or above the cursor (slots below it
    // were all taken when it was set; a retirement moves it down).
    let mut slot = None;
    let from = FREE_FROM.load(Ordering::Relaxed).min(MAX_REGIONS);
    for (i, s) in REGISTRY.iter().enumerate().skip(from).chain(REGISTRY.iter().enumerate().take(from)) {
        if s.ptr.load(Ordering::Relaxed).is_null()
            && s.start.load(Ordering::Relaxed) == 0
            && s.start.compare_exchange(0, pl.start, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        {
            slot = Some(i);
            break;
        }
    }
    if let Some(i) = slot {
        let _ = FREE_FROM.compare_exchange(from, i + 1, Ordering::Relaxed, Ordering::Relaxed);
    }
    let Some(slot) = slot else {
        drop(words);
        return Err(crate::PagerError::Os(format!("too many regions (at most {MAX_REGIONS})")));
    };
    let s = &REGISTRY[slot];
    let gen = s.gen.fetch_add(1, Ordering::AcqRel).wrapping_add(1) & GEN_MASK;
    s.gen.store(gen, Ordering::Release);
    let inner = Box::into_raw(Box::new(RegionInner {
        start: pl.start,
        len: pl.len,
        npages,
        folio_order: pl.folio_order,
        pager: pager as *const Pager,
        words,
        slot,
        gen,
        huge_hint: std::sync::atomic::AtomicBool::new(false),
        last_fault: AtomicUsize::new(usize::MAX),
        seq_streak: AtomicU32::new(0),
        ra_end: AtomicUsize::new(usize::MAX),
        had_clean: std::sync::atomic::AtomicBool::new(false),
        adopted: pl.adopted,
        unmapped: AtomicUsize::new(0),
        map_len: pl.map_len,
        map_base: pl.map_base,
    }));
    s.end.store(pl.start + pl.len, Ordering::Release);
    s.ptr.store(inner, Ordering::Release);
    HIGH.fetch_max(slot + 1, Ordering::AcqRel);
    Ok(inner)
}

/// Take a region out of the registry and free it: its pages are released with `release` (see
/// [`free_unpublished`]), the pages still its own are unregistered (and unmapped, unless
/// adopted: the program's mapping stays the program's).
///
/// # Safety
/// - `inner` came from [`publish_region`] and is retired once.
/// - The calling thread is not between [`enter`] and [`leave`].
pub(crate) unsafe fn retire_region(inner: *mut RegionInner, release: impl FnOnce(&RegionInner)) {
    // SAFETY: the caller's obligations are ours.
    unsafe {
        unpublish(inner);
        free_unpublished(inner, release);
    }
}

/// First half of [`retire_region`]: take the region out of the registry (no new lookup finds
/// it). Cheap; may be called under locks.
///
/// # Safety
/// - `inner` came from [`publish_region`] and is unpublished once.
pub(crate) unsafe fn unpublish(inner: *mut RegionInner) {
    // SAFETY: live until freed (caller's obligation).
    let r = unsafe { &*inner };
    let s = &REGISTRY[r.slot];
    s.ptr.store(std::ptr::null_mut(), Ordering::SeqCst);
    s.end.store(0, Ordering::SeqCst);
}

/// Second half of [`retire_region`]: wait until no thread can hold a pointer to the region,
/// then release its pages with `release` (which frees their swap entries and cache copies:
/// the reclaim layer's `release_pages`), and free it. Waits for threads inside [`enter`], so
/// call it holding no lock that such a thread may wait for.
///
/// # Safety
/// - `inner` was unpublished with [`unpublish`] and is freed once.
/// - The calling thread is not between [`enter`] and [`leave`].
pub(crate) unsafe fn free_unpublished(inner: *mut RegionInner, release: impl FnOnce(&RegionInner)) {
    // SAFETY: live until freed below (caller's obligation).
    let r = unsafe { &*inner };
    let s = &REGISTRY[r.slot];
    // Wait until no thread can still hold a pointer obtained from the registry.
    while ACTIVE.load(Ordering::SeqCst) != 0 {
        std::thread::yield_now();
    }
    release(r);
    // Unregister (and unmap) what is still ours: not the pages the program unmapped (the
    // address may be another mapping's now).
    let ours = |i: usize| r.word(i).load(Ordering::Acquire).kind() != kind::UNMAPPED;
    let adopted = r.adopted;
    runs(r.npages, &ours, |i, j| {
        let _ = r.pager().uffd.unregister(r.addr(i), (j - i) * crate::PAGE_SIZE);
        if !adopted {
            // SAFETY: pages [i, j) of the region are still the mapping created in create();
            // nothing references them any more.
            unsafe { libc::munmap(r.addr(i) as *mut _, (j - i) * crate::PAGE_SIZE) };
        }
        true
    });
    let end = r.start + r.len;
    if !adopted {
        // SAFETY: the slack before and after the region belongs to the mapping made in
        // create() and was never handed out.
        unsafe {
            if r.start > r.map_base {
                libc::munmap(r.map_base as *mut _, r.start - r.map_base);
            }
            if r.map_base + r.map_len > end {
                libc::munmap(end as *mut _, r.map_base + r.map_len - end);
            }
        }
    }
    let slot = r.slot;
    // SAFETY: inner came from Box::into_raw in publish_region and is no longer reachable
    // (dropping it unmaps its words).
    drop(unsafe { Box::from_raw(inner) });
    s.start.store(0, Ordering::SeqCst);
    FREE_FROM.fetch_min(slot, Ordering::Relaxed);
}

/// Publish a region over the program's existing mapping `[start, start + len)` (page aligned,
/// `len` a multiple of the folio `folio_order`). The caller registers it with the uffd and
/// fills in the words of the pages that are present ([`crate::vma`]).
pub(crate) fn publish_adopted(
    pager: &Pager,
    start: usize,
    len: usize,
    folio_order: u32,
) -> Result<&'static RegionInner, crate::PagerError> {
    let inner = publish_region(pager, Placement { start, len, folio_order, adopted: true, map_base: 0, map_len: 0 })?;
    // SAFETY: published; freed only by retire_region, which the pager calls for adopted
    // regions once they are unmapped or when it is dropped.
    Ok(unsafe { &*inner })
}

/// Live regions of pager `p`.
pub(crate) fn live_regions_of(p: &Pager) -> usize {
    enter();
    let mut n = 0;
    // SAFETY: between enter and leave; the references are not kept.
    unsafe { for_each_of(p, |_| n += 1) };
    leave();
    n
}

/// Map a new region of `len` bytes (rounded up to the folio size) for [`Pager::map`]: a fresh
/// anonymous mapping, registered with the uffd and published.
pub(crate) fn create_mapped(pager: &Pager, len: usize) -> Result<*mut RegionInner, crate::PagerError> {
    let folio = pager.cfg.folio_size;
    let len = len.max(1).div_ceil(folio) * folio;
    let map_len = len + folio;
    let base = mmap_region(map_len).map_err(|e| crate::PagerError::Os(format!("mmap of {map_len} bytes: {e}")))?;
    // The program's memory, not the pager's own (in the LD_PRELOAD library the interposed
    // `mmap` records what uswap code maps).
    crate::own::remove(base, map_len);
    let start = base.div_ceil(folio) * folio;
    let mode = crate::uffd::mode::MISSING | crate::uffd::mode::WP;
    if let Err(e) = pager.uffd.register(start, len, mode) {
        // SAFETY: unmapping the mapping we just created.
        unsafe { libc::munmap(base as *mut _, map_len) };
        return Err(crate::PagerError::Os(format!("{e} (region of {len} bytes)")));
    }
    let pl = Placement {
        start,
        len,
        folio_order: (folio / crate::PAGE_SIZE).trailing_zeros(),
        adopted: false,
        map_base: base,
        map_len,
    };
    match publish_region(pager, pl) {
        Ok(inner) => Ok(inner),
        Err(e) => {
            let _ = pager.uffd.unregister(start, len);
            // SAFETY: unmapping the mapping we just created.
            unsafe { libc::munmap(base as *mut _, map_len) };
            Err(e)
        }
    }
}

/// Every live adopted region of pager `p`, as raw pointers (for retirement; call outside
/// [`enter`]: the pointers stay valid because only the caller retires adopted regions).
pub(crate) fn adopted_of(p: &Pager) -> Vec<*mut RegionInner> {
    let n = HIGH.load(Ordering::Acquire);
    let mut v = Vec::new();
    for s in &REGISTRY[..n] {
        let ptr = s.ptr.load(Ordering::Acquire);
        if ptr.is_null() {
            continue;
        }
        // SAFETY: a published region; adopted ones are retired only by their pager's vma code.
        let r = unsafe { &*ptr };
        if r.adopted && std::ptr::eq(r.pager, p) {
            v.push(ptr);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PagerConfig, PagerError};

    /// `for_each_in` visits exactly the regions `for_each_of` finds overlapping the range, and
    /// regions published into slots freed by retired ones are found.
    #[test]
    fn for_each_in_finds_exactly_the_overlapping_regions() {
        let p = match crate::Pager::new(PagerConfig { limit_bytes: 16 << 20, ..Default::default() }) {
            Ok(p) => p,
            Err(PagerError::Unavailable(w)) => {
                assert!(
                    std::env::var_os(crate::launch::REQUIRE_UFFD.os_name()).is_none(),
                    "userfaultfd unavailable: {w}"
                );
                eprintln!("SKIPPED: userfaultfd unavailable: {w}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let mut regions: Vec<crate::Region> = (0..24).map(|_| p.map(64 << 10).unwrap()).collect();
        let seen = |a: usize, b: usize| {
            let (mut got, mut want) = (Vec::new(), Vec::new());
            enter();
            // SAFETY: between enter and leave; only the start addresses are kept.
            unsafe {
                for_each_in(&p, a, b, |r| got.push(r.start));
                for_each_of(&p, |r| {
                    if r.start < b && r.start + r.len > a {
                        want.push(r.start);
                    }
                });
            }
            leave();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want, "[{a:#x}, {b:#x})");
            got.len()
        };
        for r in &regions {
            let a = r.as_ptr() as usize;
            assert!(seen(a, a + 1) >= 1);
            assert!(seen(a + (64 << 10) - 1, a + (64 << 10) + 4096) >= 1);
            seen(a - 4096, a + (64 << 10) + 4096);
        }
        assert_eq!(seen(0, usize::MAX), live_regions_of(&p));
        assert_eq!(seen(1 << 12, 1 << 13), 0);
        // Retire every other region, then map as many again (into the freed slots, unless
        // another test took them meanwhile: the registry is the process's).
        let kept: Vec<_> = regions.drain(..).enumerate().filter(|(i, _)| i % 2 == 0).map(|(_, r)| r).collect();
        p.reap();
        let again: Vec<crate::Region> = (0..12).map(|_| p.map(64 << 10).unwrap()).collect();
        assert_eq!(seen(0, usize::MAX), live_regions_of(&p));
        for r in kept.iter().chain(&again) {
            let a = r.as_ptr() as usize;
            assert!(manages(a), "{a:#x} found after the slots were reused");
        }
    }
}
