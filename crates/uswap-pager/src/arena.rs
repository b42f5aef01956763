//! A signal-safe size-class allocator over one big `MAP_NORESERVE` reservation.
//!
//! The fault path runs inside a SIGBUS handler that may have interrupted `malloc`, so it can
//! use neither the heap nor a lock. This arena gives it variable-sized objects without either:
//! objects are carved from a bump pointer, rounded up to one of ~150 size classes (64 B steps
//! up to 1 KiB, then ~6 % geometric steps up to 2 MiB + 64 B), and freed objects go on a
//! per-class lock-free stack (a Treiber stack whose head carries a 24-bit tag against ABA; the
//! link lives in the first 8 bytes of the free object, or, for a page-aligned object of a page
//! or more, in its first page's tag word, so that such an object can be released whole). The
//! reservation is never unmapped while the arena lives, so reading a stale link is harmless:
//! the tagged CAS then fails.
//!
//! Freed objects stay resident for reuse (re-faulting a released page costs more than it saves
//! while the cache is busy), so the arena's RSS is its high-water mark per class, not its live
//! bytes: [`Arena::resident_bytes`] is what the pager charges to its limit. [`Arena::trim`]
//! gives memory back: it moves free objects to a second per-class stack of *released*
//! objects after `madvise(MADV_DONTNEED)` of the whole pages inside them (all of a page-aligned
//! object's pages; an unaligned one keeps the page with its link); `alloc` prefers resident
//! free objects, then released ones, then the bump pointer. The bytes an object releases follow from its offset and class, so the
//! accounting needs no per-object state.
//!
//! Objects of a page or more also have one tag word per 4 KiB ([`Arena::tag`]) in a side
//! array, for their owner's use (the pager keeps a clean page's swap entry there).
//!
//! Locking: none; every operation is a CAS loop.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Allocation granule.
pub(crate) const GRANULE: usize = 64;
const EMPTY: u64 = (1 << 40) - 1;

fn class_sizes() -> &'static [usize] {
    static S: OnceLock<Vec<usize>> = OnceLock::new();
    S.get_or_init(|| {
        let mut v = Vec::new();
        let mut s = GRANULE;
        while s < (2 << 20) + GRANULE {
            v.push(s);
            let step = (s / 16).max(GRANULE).div_ceil(GRANULE) * GRANULE;
            s += step;
        }
        v.push((2 << 20) + GRANULE);
        // Exact folio sizes, so an uncompressed folio in the swap cache wastes nothing.
        v.extend((0..10).map(|o| 4096usize << o));
        v.sort_unstable();
        v.dedup();
        v
    })
}

/// The size class of `size` bytes, or `None` when it is larger than the largest class.
pub(crate) fn class_of(size: usize) -> Option<usize> {
    let s = class_sizes();
    let i = s.partition_point(|&c| c < size);
    (i < s.len()).then_some(i)
}

/// The byte size of a class.
pub(crate) fn class_size(class: usize) -> usize {
    class_sizes()[class]
}

/// An object in the arena: its byte offset and size class.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Obj {
    /// Byte offset from the arena base (a multiple of [`GRANULE`]).
    pub(crate) off: usize,
    /// Size class.
    pub(crate) class: usize,
}

/// The arena.
pub(crate) struct Arena {
    /// The reservation: `cap` bytes.
    base: crate::own::Mapping,
    cap: usize,
    bump: AtomicUsize,
    heads: Box<[AtomicU64]>,
    /// Per-class stacks of free objects whose inner pages were released by [`Arena::trim`].
    cold: Box<[AtomicU64]>,
    live_bytes: AtomicU64,
    /// Bytes of carved objects given back to the kernel (released objects' inner pages).
    released: AtomicU64,
    /// One tag word per 4 KiB of the reservation (`MAP_NORESERVE`: only used words cost).
    tags: crate::own::Mapping,
}

impl Arena {
    /// Reserve `cap` bytes of address space (no memory is committed until used).
    pub(crate) fn new(cap: usize) -> std::io::Result<Arena> {
        let cap = cap.div_ceil(4096) * 4096;
        let base = crate::own::Mapping::new(cap)?;
        let tags = crate::own::Mapping::new(cap / 4096 * 8)?;
        let n = class_sizes().len();
        Ok(Arena {
            tags,
            base,
            cap,
            bump: AtomicUsize::new(0),
            heads: (0..n).map(|_| AtomicU64::new(EMPTY)).collect(),
            cold: (0..n).map(|_| AtomicU64::new(EMPTY)).collect(),
            live_bytes: AtomicU64::new(0),
            released: AtomicU64::new(0),
        })
    }

    /// Whether a free object's stack link lives in its first page's tag word (a page-aligned
    /// object of a page or more: its tag word is its owner's only while it is allocated).
    fn link_in_tag(off: usize, class: usize) -> bool {
        off.is_multiple_of(4096) && class_size(class) >= 4096
    }

    fn link(&self, off: usize, class: usize) -> &AtomicU64 {
        if Self::link_in_tag(off, class) {
            return &self.tags.atomic_words()[off / 4096];
        }
        // SAFETY: off is a granule-aligned offset of an object inside the reservation, which
        // stays mapped for the arena's life; AtomicU64 has the alignment of u64 (8 <= 64).
        unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(off).cast()) }
    }

    /// Pop an object from a tagged Treiber stack of `class`.
    fn pop(&self, head: &AtomicU64, class: usize) -> Option<usize> {
        let mut h = head.load(Ordering::Acquire);
        while h & EMPTY != EMPTY {
            let off = ((h & EMPTY) as usize) * GRANULE;
            // A stale read (the object was popped and reused meanwhile) is harmless: the
            // tagged CAS below then fails.
            let next = self.link(off, class).load(Ordering::Relaxed) & EMPTY;
            let tag = (h >> 40).wrapping_add(1) & 0xff_ffff;
            match head.compare_exchange_weak(h, next | (tag << 40), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    if Self::link_in_tag(off, class) {
                        // The owner finds its tag word 0.
                        self.link(off, class).store(0, Ordering::Relaxed);
                    }
                    return Some(off);
                }
                Err(x) => h = x,
            }
        }
        None
    }

    /// Push an object onto a tagged Treiber stack of `class`.
    fn push(&self, head: &AtomicU64, off: usize, class: usize) {
        let mut h = head.load(Ordering::Acquire);
        loop {
            self.link(off, class).store(h & EMPTY, Ordering::Relaxed);
            let tag = (h >> 40).wrapping_add(1) & 0xff_ffff;
            let new = ((off / GRANULE) as u64) | (tag << 40);
            match head.compare_exchange_weak(h, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(x) => h = x,
            }
        }
    }

    /// The whole pages inside an object, besides an in-object link: what [`Arena::trim`]
    /// releases.
    fn inner_pages(off: usize, class: usize) -> (usize, usize) {
        let a = if Self::link_in_tag(off, class) { off } else { (off + 8).div_ceil(4096) * 4096 };
        let b = (off + class_size(class)) / 4096 * 4096;
        (a, b.max(a))
    }

    /// Allocate an object of at least `size` bytes. `None` when the reservation is exhausted
    /// or `size` is too large.
    pub(crate) fn alloc(&self, size: usize) -> Option<Obj> {
        let class = class_of(size)?;
        let sz = class_size(class);
        if let Some(off) = self.pop(&self.heads[class], class) {
            self.live_bytes.fetch_add(sz as u64, Ordering::Relaxed);
            return Some(Obj { off, class });
        }
        if let Some(off) = self.pop(&self.cold[class], class) {
            let (a, b) = Self::inner_pages(off, class);
            self.released.fetch_sub((b - a) as u64, Ordering::Relaxed);
            self.live_bytes.fetch_add(sz as u64, Ordering::Relaxed);
            return Some(Obj { off, class });
        }
        let off = self.bump.fetch_add(sz, Ordering::Relaxed);
        if off + sz > self.cap {
            self.bump.fetch_sub(sz, Ordering::Relaxed);
            return None;
        }
        self.live_bytes.fetch_add(sz as u64, Ordering::Relaxed);
        Some(Obj { off, class })
    }

    /// Return an object to its class's free stack (it stays resident for reuse).
    pub(crate) fn free(&self, o: Obj) {
        self.push(&self.heads[o.class], o.off, o.class);
        self.live_bytes.fetch_sub(class_size(o.class) as u64, Ordering::Relaxed);
    }

    /// Give the memory of free objects back to the kernel, largest classes first, until at most
    /// `keep` bytes of free objects stay resident (classes too small to hold a whole page
    /// besides their link are kept). Returns the bytes released. One `madvise` per object.
    pub(crate) fn trim(&self, keep: u64) -> u64 {
        let mut done = 0;
        for class in (0..self.heads.len()).rev() {
            if class_size(class) < 4096 {
                break;
            }
            while self.free_resident_bytes() > keep {
                let Some(off) = self.pop(&self.heads[class], class) else { break };
                let (a, b) = Self::inner_pages(off, class);
                // SAFETY: [a, b) lies inside a free object of the reservation that this thread
                // popped, so nobody reads or writes it until it is allocated again.
                unsafe { libc::madvise(self.base.as_ptr().add(a).cast(), b - a, libc::MADV_DONTNEED) };
                self.released.fetch_add((b - a) as u64, Ordering::Relaxed);
                self.push(&self.cold[class], off, class);
                done += (b - a) as u64;
            }
        }
        done
    }

    /// The tag word of page `i` of object `o`, an object of at least `(i + 1)` pages: 0 until
    /// its owner sets it; the arena never reads or clears it (clear it before `free`). Two
    /// objects of a page or more never share a tag word (an object starting in a page's
    /// owns the tags of the 4 KiB page it starts in and of the next ones).
    pub(crate) fn tag(&self, o: Obj, i: usize) -> &AtomicU64 {
        debug_assert!(class_size(o.class) >= (i + 1) * 4096);
        &self.tags.atomic_words()[o.off / 4096 + i]
    }

    /// Pointer to an object's first byte.
    pub(crate) fn ptr(&self, o: Obj) -> *mut u8 {
        self.base.as_ptr().wrapping_add(o.off)
    }

    /// Bytes in live objects (rounded to their classes).
    pub(crate) fn live_bytes(&self) -> u64 {
        self.live_bytes.load(Ordering::Relaxed)
    }

    /// Bytes ever carved from the reservation (live + free lists): the arena's footprint.
    pub(crate) fn footprint(&self) -> u64 {
        self.bump.load(Ordering::Relaxed) as u64
    }

    /// Bytes the arena holds in memory: carved objects, live or free, less what
    /// [`Arena::trim`] released. This is its share of the process's RSS.
    pub(crate) fn resident_bytes(&self) -> u64 {
        self.footprint().saturating_sub(self.released.load(Ordering::Relaxed))
    }

    /// Free objects that are still resident (what [`Arena::trim`] can give back, roughly).
    pub(crate) fn free_resident_bytes(&self) -> u64 {
        self.resident_bytes().saturating_sub(self.live_bytes())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn classes_cover_sizes_with_bounded_waste() {
        for s in [1usize, 63, 64, 65, 1000, 4096, 4097, 65536, 65600, 2 << 20, (2 << 20) + 64] {
            let c = class_of(s).unwrap();
            let cs = class_size(c);
            assert!(cs >= s);
            assert!(cs <= s + s / 8 + GRANULE, "{s} -> {cs}");
        }
        assert!(class_of((2 << 20) + 65).is_none());
    }

    /// Resident bytes of `[base, base+len)`, from mincore(2) (exact for this range, unlike
    /// smaps, where the kernel may merge the mapping with its neighbours). `base` is page
    /// aligned and the range mapped.
    pub(crate) fn resident(base: usize, len: usize) -> u64 {
        let mut v = vec![0u8; len.div_ceil(4096)];
        // SAFETY: a page-aligned range of our mapping and a vector of one byte per page.
        let r = unsafe { libc::mincore(base as *mut libc::c_void, len, v.as_mut_ptr()) };
        assert_eq!(r, 0);
        v.iter().filter(|&&b| b & 1 != 0).count() as u64 * 4096
    }

    #[test]
    fn trim_releases_free_objects_and_they_are_reused_intact() {
        let a = Arena::new(64 << 20).unwrap();
        let objs: Vec<Obj> = (0..64).map(|i| a.alloc(if i % 2 == 0 { 65536 } else { 4096 }).unwrap()).collect();
        for &o in &objs {
            // SAFETY: our object of at least this many bytes.
            unsafe { std::ptr::write_bytes(a.ptr(o), 0xa5, class_size(o.class)) };
        }
        let full = a.resident_bytes();
        assert_eq!(full, 32 * 65536 + 32 * 4096);
        let rss_full = resident(a.base.as_ptr() as usize, full as usize);
        for &o in &objs {
            a.free(o);
        }
        assert_eq!(a.live_bytes(), 0);
        assert_eq!(a.resident_bytes(), full, "free objects stay resident until trimmed");
        let released = a.trim(0);
        // Page-aligned objects keep their links in tag words: every page goes back.
        assert_eq!(released, 32 * 65536 + 32 * 4096);
        assert_eq!(a.resident_bytes(), full - released);
        let rss_trimmed = resident(a.base.as_ptr() as usize, full as usize);
        assert_eq!(rss_full, full);
        assert_eq!(rss_full - rss_trimmed, released, "RSS {rss_full} -> {rss_trimmed}");
        // Released objects are reused before the bump pointer moves, and accounted again.
        let bump = a.footprint();
        let o = a.alloc(65536).unwrap();
        assert_eq!(a.footprint(), bump);
        assert_eq!(a.resident_bytes(), full - released + 65536);
        assert_eq!(a.tag(o, 0).load(Ordering::Relaxed), 0, "a reused object's tag word starts at 0");
        // SAFETY: our object.
        unsafe { std::ptr::write_bytes(a.ptr(o), 0x5a, 65536) };
        // SAFETY: reading our object.
        let s = unsafe { std::slice::from_raw_parts(a.ptr(o), 65536) };
        assert!(s.iter().all(|&b| b == 0x5a));
        a.free(o);
    }

    #[test]
    fn alloc_free_reuse_from_threads() {
        let a = std::sync::Arc::new(Arena::new(64 << 20).unwrap());
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let a = a.clone();
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    for i in 0..5000usize {
                        let sz = 64 + (i * 37 + t * 11) % 9000;
                        let o = a.alloc(sz).unwrap();
                        // SAFETY: the object is ours and at least sz bytes long.
                        unsafe { std::ptr::write_bytes(a.ptr(o), t as u8, sz) };
                        held.push((o, sz));
                        if i % 3 == 0 {
                            let (o, sz) = held.swap_remove(i % held.len());
                            // SAFETY: reading our own object.
                            let s = unsafe { std::slice::from_raw_parts(a.ptr(o), sz) };
                            assert!(s.iter().all(|&b| b == t as u8), "object overwritten by another thread");
                            a.free(o);
                        }
                    }
                    for (o, _) in held {
                        a.free(o);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(a.live_bytes(), 0);
    }
}
