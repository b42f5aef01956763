//! A fragmenting store for tests: [`Lz4Store`], a self-contained compressed [`PageStore`]
//! usable from a SIGBUS handler, handed to a pager with `Pager::with_store`.
//!
//! It keeps one `AtomicU64` word per slot in a `MAP_NORESERVE` table and a folio's compressed
//! bytes at its head slot's place in a `MAP_NORESERVE` data mapping (`4096` bytes per slot,
//! so a folio always has room, and freeing gives the pages back with `MADV_DONTNEED`); slot
//! ranges come from a bump pointer plus per-order lock-free free stacks with no merging, so
//! freed small ranges really do fragment the space (which the fallback tests rely on).
//! Scratch buffers for compression come from a fixed pool taken by CAS. Nothing here
//! allocates or locks after construction.
//!
//! Locking: none. Slot words and stack heads change by CAS; a range is owned by whoever
//! popped it until it is published by `store`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use uswap::internals::lz4::{decompress_exact, Lz4Table};
use uswap::MAX_ORDER;
use uswap_pager::{PageStore, StoreError, PAGE_SIZE};

use uswap_pager::own::Mapping;

const NR_ORDERS: usize = MAX_ORDER as usize + 1;
const EMPTY: u64 = (1 << 40) - 1;
// Slot word: bits 0..16 count, 16..20 order, 20 in-use; head only: 32..43 live slots.
const IN_USE: u64 = 1 << 20;
// Object word (head slot only): bits 40..62 length, 62 raw, 63 zero (the data lives in the
// head slot's part of the data mapping, so there is no offset).
const OBJ_RAW: u64 = 1 << 62;
const OBJ_ZERO: u64 = 1 << 63;

struct Scratch {
    buf: *mut u8,
    /// liblz4's compression state, preallocated (no allocation per store).
    table: std::cell::UnsafeCell<Lz4Table>,
}

/// A compressed in-memory store (the `lz4` tier with zero-page elision), signal-safe.
pub struct Lz4Store {
    slots: Mapping,
    objs: Mapping,
    nslots: u64,
    bump: AtomicU64,
    free: [AtomicU64; NR_ORDERS],
    /// `4096 * nslots` bytes (`MAP_NORESERVE`): a folio's data at its head slot's offset.
    data: Mapping,
    /// Bytes of stored (compressed) data, and the most it may hold.
    live: AtomicU64,
    pool_cap: u64,
    scratch: Box<[Scratch]>,
    scratch_free: AtomicU64,
    /// The scratch buffers' memory (`Scratch::buf` points into it).
    _scratch_mem: Mapping,
    compress: bool,
    counters: Counters,
}

#[derive(Default)]
struct Counters {
    stored: AtomicU64,
    stored_zero: AtomicU64,
    stored_raw: AtomicU64,
    loads: AtomicU64,
    no_space: AtomicU64,
    pages_in_store: AtomicU64,
    orig_bytes: AtomicU64,
    busy_waits: AtomicUsize,
}

// SAFETY: all shared state is atomic; a scratch buffer (raw pointer into `_scratch_mem`, and its
// table) is used only by the thread that took it from `scratch_free` by CAS.
unsafe impl Send for Lz4Store {}
// SAFETY: as above.
unsafe impl Sync for Lz4Store {}

const SCRATCH: usize = 64;
const SCRATCH_BYTES: usize = (2 << 20) + (2 << 20) / 255 + 64;

impl Lz4Store {
    /// A store of at most `nslots` 4 KiB slots and `pool_cap` bytes of compressed data;
    /// `compress = false` stores raw (the "zero" tier alone, for comparisons).
    pub fn new(nslots: u64, pool_cap: usize, compress: bool) -> std::io::Result<Lz4Store> {
        let nslots = nslots.clamp(512, 1 << 28);
        let slots = Mapping::new(nslots as usize * 8)?;
        let objs = Mapping::new(nslots as usize * 8)?;
        let data = Mapping::new(nslots as usize * PAGE_SIZE)?;
        let per = SCRATCH_BYTES.div_ceil(4096) * 4096;
        let mem = Mapping::new(per * SCRATCH)?;
        let scratch = (0..SCRATCH)
            .map(|i| {
                // SAFETY: inside the scratch mapping.
                let buf = unsafe { mem.as_ptr().add(i * per) };
                Scratch { buf, table: std::cell::UnsafeCell::new(Lz4Table::default()) }
            })
            .collect();
        Ok(Lz4Store {
            slots,
            objs,
            nslots,
            bump: AtomicU64::new(0),
            free: std::array::from_fn(|_| AtomicU64::new(EMPTY)),
            data,
            live: AtomicU64::new(0),
            pool_cap: pool_cap as u64,
            scratch,
            scratch_free: AtomicU64::new(u64::MAX),
            _scratch_mem: mem,
            compress,
            counters: Counters::default(),
        })
    }

    fn slot(&self, e: u64) -> &AtomicU64 {
        &self.slots.atomic_words()[e as usize]
    }
    fn obj(&self, e: u64) -> &AtomicU64 {
        &self.objs.atomic_words()[e as usize]
    }

    fn push_range(&self, e: u64, order: usize) {
        let head = &self.free[order];
        let mut h = head.load(Ordering::Acquire);
        loop {
            self.obj(e).store(h & EMPTY, Ordering::Relaxed);
            let tag = (h >> 40).wrapping_add(1) & 0xff_ffff;
            match head.compare_exchange_weak(h, e | (tag << 40), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(x) => h = x,
            }
        }
    }

    fn pop_range(&self, order: usize) -> Option<u64> {
        let head = &self.free[order];
        let mut h = head.load(Ordering::Acquire);
        while h & EMPTY != EMPTY {
            let e = h & EMPTY;
            let next = self.obj(e).load(Ordering::Relaxed) & EMPTY;
            let tag = (h >> 40).wrapping_add(1) & 0xff_ffff;
            match head.compare_exchange_weak(h, next | (tag << 40), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(e),
                Err(x) => h = x,
            }
        }
        None
    }

    /// Allocate a naturally aligned range of `2^order` slots.
    fn alloc_range(&self, order: usize) -> Option<u64> {
        if let Some(e) = self.pop_range(order) {
            return Some(e);
        }
        // Split a larger free range.
        for o in order + 1..NR_ORDERS {
            if let Some(e) = self.pop_range(o) {
                for k in (order..o).rev() {
                    self.push_range(e + (1 << k), k);
                }
                return Some(e);
            }
        }
        let n = 1u64 << order;
        let mut b = self.bump.load(Ordering::Relaxed);
        loop {
            let start = b.div_ceil(n) * n;
            if start + n > self.nslots {
                return None;
            }
            match self.bump.compare_exchange_weak(b, start + n, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => {
                    // Give the alignment gap back as smaller free ranges.
                    let mut p = b;
                    while p < start {
                        let k = (p.trailing_zeros() as usize).min(order).min(63);
                        let mut k = k;
                        while p + (1 << k) > start {
                            k -= 1;
                        }
                        self.push_range(p, k);
                        p += 1 << k;
                    }
                    return Some(start);
                }
                Err(x) => b = x,
            }
        }
    }

    fn take_scratch(&self) -> usize {
        loop {
            let f = self.scratch_free.load(Ordering::Acquire);
            if f == 0 {
                self.counters.busy_waits.fetch_add(1, Ordering::Relaxed);
                std::thread::yield_now();
                continue;
            }
            let i = f.trailing_zeros() as usize;
            if self.scratch_free.compare_exchange_weak(f, f & !(1 << i), Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                return i;
            }
        }
    }

    fn give_scratch(&self, i: usize) {
        self.scratch_free.fetch_or(1 << i, Ordering::Release);
    }

    fn free_range_data(&self, head: u64) {
        let w = self.obj(head).swap(0, Ordering::AcqRel);
        if w & OBJ_ZERO == 0 && w != 0 {
            let len = ((w >> 40) & ((1 << 22) - 1)) as usize;
            self.live.fetch_sub(len as u64, Ordering::Relaxed);
            // Give the memory back (the range is free: nobody reads it any more).
            // SAFETY: advice on pages of our own data mapping, inside it.
            unsafe {
                libc::madvise(self.data_ptr(head).cast(), len.div_ceil(PAGE_SIZE) * PAGE_SIZE, libc::MADV_DONTNEED)
            };
        }
    }

    fn load_whole(&self, entry: u64, out: &mut [u8]) -> Result<(), StoreError> {
        let w = self.obj(entry).load(Ordering::Acquire);
        self.counters.loads.fetch_add(1, Ordering::Relaxed);
        if w & OBJ_ZERO != 0 {
            out.fill(0);
            return Ok(());
        }
        let len = ((w >> 40) & ((1 << 22) - 1)) as usize;
        // SAFETY: the head slot's data holds len bytes written by store and stays there while
        // the caller holds a reference on a slot of the folio.
        let src = unsafe { std::slice::from_raw_parts(self.data_ptr(entry), len) };
        if w & OBJ_RAW != 0 {
            if len != out.len() {
                return Err(StoreError::Corrupt(entry));
            }
            out.copy_from_slice(src);
            return Ok(());
        }
        if decompress_exact(src, out) {
            Ok(())
        } else {
            Err(StoreError::Corrupt(entry))
        }
    }

    /// The data of the folio whose head slot is `e`.
    fn data_ptr(&self, e: u64) -> *mut u8 {
        debug_assert!(e < self.nslots);
        // SAFETY: e < nslots: inside the data mapping, which lives as long as self.
        unsafe { self.data.as_ptr().add(e as usize * PAGE_SIZE) }
    }
}

fn is_zero(d: &[u8]) -> bool {
    let (pre, mid, post) = unsafe_align(d);
    pre.iter().all(|&b| b == 0)
        && post.iter().all(|&b| b == 0)
        && mid.chunks(8).all(|c| c.iter().fold(0, |a, &x| a | x) == 0)
}

fn unsafe_align(d: &[u8]) -> (&[u8], &[u64], &[u8]) {
    // SAFETY: reinterpreting initialized bytes as u64 is valid for any bit pattern.
    unsafe { d.align_to::<u64>() }
}

impl PageStore for Lz4Store {
    fn store(&self, _group: u16, data: &[u8]) -> Result<u64, StoreError> {
        let pages = data.len() / PAGE_SIZE;
        if pages == 0 || !pages.is_power_of_two() || !data.len().is_multiple_of(PAGE_SIZE) || pages > 512 {
            return Err(StoreError::Other(format!("bad folio length {}", data.len())));
        }
        let order = pages.trailing_zeros() as usize;
        let e = match self.alloc_range(order) {
            Some(e) => e,
            None => {
                self.counters.no_space.fetch_add(1, Ordering::Relaxed);
                return Err(StoreError::NoSpace { order: order as u8 });
            }
        };
        let objw = if is_zero(data) {
            self.counters.stored_zero.fetch_add(1, Ordering::Relaxed);
            OBJ_ZERO
        } else {
            let si = self.take_scratch();
            let sc = &self.scratch[si];
            // SAFETY: scratch si (its buffer, SCRATCH_BYTES long, and its table) is exclusively
            // ours until given back.
            let (buf, table) = unsafe { (std::slice::from_raw_parts_mut(sc.buf, data.len()), &mut *sc.table.get()) };
            let clen = if self.compress { table.compress(data, &mut buf[..data.len() - 1]) } else { None };
            let (src, len, raw): (&[u8], usize, bool) = match clen {
                Some(n) => (&buf[..n], n, false),
                None => (data, data.len(), true),
            };
            if self.live.fetch_add(len as u64, Ordering::Relaxed) + len as u64 > self.pool_cap {
                self.live.fetch_sub(len as u64, Ordering::Relaxed);
                self.give_scratch(si);
                self.push_range(e, order);
                return Err(StoreError::Full);
            }
            // SAFETY: the range [e, e + pages) is ours (popped above), and its data is
            // `pages * 4096 >= len` bytes of the data mapping; src is len bytes.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.data_ptr(e), len) };
            self.give_scratch(si);
            if raw {
                self.counters.stored_raw.fetch_add(1, Ordering::Relaxed);
            }
            ((len as u64) << 40) | if raw { OBJ_RAW } else { 0 }
        };
        self.obj(e).store(objw, Ordering::Relaxed);
        for i in 1..pages as u64 {
            self.slot(e + i).store(1 | ((order as u64) << 16) | IN_USE, Ordering::Relaxed);
        }
        self.slot(e).store(1 | ((order as u64) << 16) | IN_USE | ((pages as u64) << 32), Ordering::Release);
        self.counters.stored.fetch_add(1, Ordering::Relaxed);
        self.counters.pages_in_store.fetch_add(pages as u64, Ordering::Relaxed);
        self.counters.orig_bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(e)
    }

    fn load(&self, entry: u64, out: &mut [u8]) -> Result<(), StoreError> {
        if entry >= self.nslots || out.is_empty() || !out.len().is_power_of_two() || out.len() < PAGE_SIZE {
            return Err(StoreError::BadEntry(entry));
        }
        let s = self.slot(entry).load(Ordering::Acquire);
        let order = (s >> 16) & 0xf;
        let want = (out.len() / PAGE_SIZE).trailing_zeros() as u64;
        if s & IN_USE == 0 || want > order || entry & ((1 << want) - 1) != 0 {
            return Err(StoreError::BadEntry(entry));
        }
        let head = entry & !((1u64 << order) - 1);
        if want < order {
            // Part of a larger stored folio: decode it whole into scratch, copy the part.
            let si = self.take_scratch();
            let sc = &self.scratch[si];
            // SAFETY: scratch si is ours until given back; it holds at least 2 MiB.
            let buf = unsafe { std::slice::from_raw_parts_mut(sc.buf, PAGE_SIZE << order) };
            let r = self.load_whole(head, buf);
            if r.is_ok() {
                let off = (entry - head) as usize * PAGE_SIZE;
                out.copy_from_slice(&buf[off..off + out.len()]);
            }
            self.give_scratch(si);
            return r;
        }
        self.load_whole(head, out)
    }

    fn dup(&self, entry: u64, nr: u32) -> Result<(), StoreError> {
        for i in 0..u64::from(nr) {
            let e = entry + i;
            if e >= self.nslots || self.slot(e).load(Ordering::Relaxed) & IN_USE == 0 {
                return Err(StoreError::BadEntry(e));
            }
            self.slot(e).fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }

    fn put(&self, entry: u64, nr: u32) {
        for i in 0..u64::from(nr) {
            let e = entry + i;
            if e >= self.nslots {
                return;
            }
            let prev = self.slot(e).fetch_sub(1, Ordering::AcqRel);
            if prev & 0xffff == 1 {
                let order = (prev >> 16) & 0xf;
                let head = e & !((1u64 << order) - 1);
                self.counters.pages_in_store.fetch_sub(1, Ordering::Relaxed);
                if head != e {
                    self.slot(e).fetch_and(!IN_USE, Ordering::AcqRel);
                }
                // Drop one live slot from the head; the last one frees data and range.
                let hv = self.slot(head).fetch_sub(1 << 32, Ordering::AcqRel);
                if (hv >> 32) & 0x7ff == 1 {
                    self.counters.orig_bytes.fetch_sub((PAGE_SIZE as u64) << order, Ordering::Relaxed);
                    self.free_range_data(head);
                    self.slot(head).store(0, Ordering::Release);
                    self.push_range(head, order as usize);
                }
            }
        }
    }

    fn pool_bytes(&self) -> u64 {
        self.live.load(Ordering::Relaxed)
    }

    fn stats(&self) -> uswap_pager::StoreStats {
        let c = &self.counters;
        uswap_pager::StoreStats {
            engine: "lz4store".into(),
            stored_pages: c.pages_in_store.load(Ordering::Relaxed),
            ..Default::default()
        }
    }
}
