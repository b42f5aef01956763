//! Where evicted folios go: the [`PageStore`] trait the pager codes against, and
//! [`Lz4Store`], a self-contained compressed store usable from a signal handler.
//!
//! The trait mirrors the engine contract of `docs/design.md` (`uswap::vswap::Engine`): a folio
//! of `4096 << order` bytes is stored whole under `2^order` contiguous, naturally aligned swap
//! slots (one compression unit); each slot carries its own swap count (1 after `store`), so a
//! pager that swaps in one page of a large folio drops just that page's slot. When no
//! contiguous range of that order is free, `store` fails with [`StoreError::NoSpace`] and the
//! pager splits the folio and retries smaller (the kernel's `swpout_fallback`).
//!
//! `Lz4Store` keeps one `AtomicU64` word per slot in a `MAP_NORESERVE` table and the
//! compressed bytes in an [`Arena`]; slot ranges come from a bump pointer plus per-order
//! lock-free free stacks with no merging, so freed small ranges really do fragment the space
//! (which the fallback tests rely on). Scratch buffers for compression come from a fixed pool
//! taken by CAS. Nothing here allocates or locks after construction.
//!
//! Locking: none. Slot words and stack heads change by CAS; a range is owned by whoever
//! popped it until it is published by `store`.

use crate::arena::{Arena, Obj};
use crate::PAGE_SIZE;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use uswap::swap_table::MAX_ORDER;
use uswap::tier::lz4::{decompress_exact, Lz4Table};

/// Errors of a [`PageStore`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// No free naturally aligned range of this order: split and retry smaller.
    #[error("no free swap range of order {order}")]
    NoSpace {
        /// The order that failed.
        order: u8,
    },
    /// The store is full (no memory for the data).
    #[error("swap store full")]
    Full,
    /// The entry does not name stored data (bug or double free).
    #[error("bad swap entry {0:#x}")]
    BadEntry(u64),
    /// Stored data failed to decode; it is never returned.
    #[error("corrupt data at entry {0:#x}")]
    Corrupt(u64),
    /// Any other engine error.
    #[error("{0}")]
    Other(String),
}

/// A store of swapped-out folios. Implementations must be callable from a SIGBUS handler:
/// no heap allocation and no lock that a thread interrupted by the handler may hold.
pub trait PageStore: Send + Sync {
    /// Store one folio (`data.len() == 4096 << order`, `order <= 9`) for `group`. Returns the
    /// first of `2^order` contiguous entries, each with swap count 1.
    fn store(&self, group: u16, data: &[u8]) -> Result<u64, StoreError>;
    /// Load `out.len() / 4096` pages from `entry` (aligned to that size): a whole stored folio,
    /// or a naturally aligned part of one (the caller holds references on those slots).
    fn load(&self, entry: u64, out: &mut [u8]) -> Result<(), StoreError>;
    /// Add one reference to each of `nr` slots from `entry`.
    fn dup(&self, entry: u64, nr: u32) -> Result<(), StoreError>;
    /// Drop one reference from each of `nr` slots from `entry`; the data is freed when no slot
    /// of its folio is referenced.
    fn put(&self, entry: u64, nr: u32);
    /// Bytes of memory holding stored data (charged to the group with its resident pages).
    fn pool_bytes(&self) -> u64;
    /// Engine counters for statistics (free-form JSON).
    fn stats_json(&self) -> serde_json::Value;
    /// Keep the RAM holding `group`'s stored data at most about `bytes`, sending what does not
    /// fit to a tier outside RAM (a file). Returns false, changing nothing, when every tier is
    /// in RAM: the store then grows with the data and the pager's limit holds only while the
    /// data compresses below it.
    fn limit_ram(&self, group: u16, bytes: u64) -> bool {
        let _ = (group, bytes);
        false
    }
    /// RAM bytes per stored page of `group`, on average (`None` when unknown). The pager keeps
    /// clean pages' entries only while this is under half a page: a kept copy then costs less
    /// than half of the page it saves writing (and nothing when it lives on a file tier).
    fn ram_per_page(&self, group: u16) -> Option<u64> {
        let _ = group;
        None
    }
}

impl<T: PageStore + ?Sized> PageStore for std::sync::Arc<T> {
    fn store(&self, group: u16, data: &[u8]) -> Result<u64, StoreError> {
        (**self).store(group, data)
    }
    fn load(&self, entry: u64, out: &mut [u8]) -> Result<(), StoreError> {
        (**self).load(entry, out)
    }
    fn dup(&self, entry: u64, nr: u32) -> Result<(), StoreError> {
        (**self).dup(entry, nr)
    }
    fn put(&self, entry: u64, nr: u32) {
        (**self).put(entry, nr)
    }
    fn pool_bytes(&self) -> u64 {
        (**self).pool_bytes()
    }
    fn stats_json(&self) -> serde_json::Value {
        (**self).stats_json()
    }
    fn limit_ram(&self, group: u16, bytes: u64) -> bool {
        (**self).limit_ram(group, bytes)
    }
    fn ram_per_page(&self, group: u16) -> Option<u64> {
        (**self).ram_per_page(group)
    }
}

const NR_ORDERS: usize = MAX_ORDER as usize + 1;
const EMPTY: u64 = (1 << 40) - 1;
// Slot word: bits 0..16 count, 16..20 order, 20 in-use; head only: 32..43 live slots.
const IN_USE: u64 = 1 << 20;
// Object word (head slot only): bits 0..40 arena offset / 64, 40..62 length, 62 raw, 63 zero.
const OBJ_RAW: u64 = 1 << 62;
const OBJ_ZERO: u64 = 1 << 63;

struct Scratch {
    buf: *mut u8,
    /// liblz4's compression state, preallocated (no allocation per store).
    table: std::cell::UnsafeCell<Lz4Table>,
}

/// A compressed in-memory store (the `lz4` tier with zero-page elision), signal-safe.
pub struct Lz4Store {
    slots: *mut AtomicU64,
    objs: *mut AtomicU64,
    nslots: u64,
    bump: AtomicU64,
    free: [AtomicU64; NR_ORDERS],
    arena: Arena,
    scratch: Box<[Scratch]>,
    scratch_free: AtomicU64,
    scratch_mem: (*mut u8, usize),
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

// SAFETY: all shared state is atomic; the raw pointers name mappings owned by the store.
unsafe impl Send for Lz4Store {}
// SAFETY: as above.
unsafe impl Sync for Lz4Store {}

const SCRATCH: usize = 64;
const SCRATCH_BYTES: usize = (2 << 20) + (2 << 20) / 255 + 64;

impl Lz4Store {
    /// A store of at most `nslots` 4 KiB slots and `pool_cap` bytes of compressed data;
    /// `compress = false` stores raw (the "zero" tier alone, for comparisons).
    pub fn new(nslots: u64, pool_cap: usize, compress: bool) -> std::io::Result<Lz4Store> {
        let nslots = nslots.clamp(512, 1 << 36);
        let slots = crate::own::map_noreserve(nslots as usize * 8)?.cast();
        let objs = crate::own::map_noreserve(nslots as usize * 8)?.cast();
        let per = SCRATCH_BYTES.div_ceil(4096) * 4096;
        let mem = crate::own::map_noreserve(per * SCRATCH)?;
        let scratch = (0..SCRATCH)
            .map(|i| {
                // SAFETY: inside the scratch mapping.
                let buf = unsafe { mem.add(i * per) };
                Scratch { buf, table: std::cell::UnsafeCell::new(Lz4Table::default()) }
            })
            .collect();
        Ok(Lz4Store {
            slots,
            objs,
            nslots,
            bump: AtomicU64::new(0),
            free: std::array::from_fn(|_| AtomicU64::new(EMPTY)),
            arena: Arena::new(pool_cap)?,
            scratch,
            scratch_free: AtomicU64::new(u64::MAX),
            scratch_mem: (mem, per * SCRATCH),
            compress,
            counters: Counters::default(),
        })
    }

    fn slot(&self, e: u64) -> &AtomicU64 {
        debug_assert!(e < self.nslots);
        // SAFETY: e < nslots, inside the slot table mapping which lives as long as self.
        unsafe { &*self.slots.add(e as usize) }
    }
    fn obj(&self, e: u64) -> &AtomicU64 {
        // SAFETY: as for slot().
        unsafe { &*self.objs.add(e as usize) }
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
            let off = ((w & EMPTY) as usize) * crate::arena::GRANULE;
            let len = ((w >> 40) & ((1 << 22) - 1)) as usize;
            if let Some(class) = crate::arena::class_of(len) {
                self.arena.free(Obj { off, class });
            }
        }
    }

    fn load_whole(&self, entry: u64, out: &mut [u8]) -> Result<(), StoreError> {
        let w = self.obj(entry).load(Ordering::Acquire);
        self.counters.loads.fetch_add(1, Ordering::Relaxed);
        if w & OBJ_ZERO != 0 {
            out.fill(0);
            return Ok(());
        }
        let off = ((w & EMPTY) as usize) * crate::arena::GRANULE;
        let len = ((w >> 40) & ((1 << 22) - 1)) as usize;
        // SAFETY: the object at off holds len bytes written by store and stays allocated while
        // the caller holds a reference on a slot of the folio.
        let src = unsafe { std::slice::from_raw_parts(self.arena.ptr(Obj { off, class: 0 }), len) };
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

    /// Number of slots in the space.
    pub fn nslots(&self) -> u64 {
        self.nslots
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
            let Some(o) = self.arena.alloc(len) else {
                self.give_scratch(si);
                self.push_range(e, order);
                return Err(StoreError::Full);
            };
            // SAFETY: the object is ours and at least len bytes long; src is len bytes.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.arena.ptr(o), len) };
            self.give_scratch(si);
            if raw {
                self.counters.stored_raw.fetch_add(1, Ordering::Relaxed);
            }
            ((o.off / crate::arena::GRANULE) as u64) | ((len as u64) << 40) | if raw { OBJ_RAW } else { 0 }
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
        self.arena.live_bytes()
    }

    fn stats_json(&self) -> serde_json::Value {
        let c = &self.counters;
        serde_json::json!({
            "engine": "lz4store",
            "stored_folios": c.stored.load(Ordering::Relaxed),
            "stored_zero": c.stored_zero.load(Ordering::Relaxed),
            "stored_raw": c.stored_raw.load(Ordering::Relaxed),
            "loads": c.loads.load(Ordering::Relaxed),
            "no_space": c.no_space.load(Ordering::Relaxed),
            "stored_pages": c.pages_in_store.load(Ordering::Relaxed),
            "orig_bytes": c.orig_bytes.load(Ordering::Relaxed),
            "pool_bytes": self.arena.live_bytes(),
            "pool_footprint": self.arena.footprint(),
            "scratch_waits": c.busy_waits.load(Ordering::Relaxed),
        })
    }
}

impl Drop for Lz4Store {
    fn drop(&mut self) {
        // SAFETY: the three mappings were created in new with these sizes; nothing borrows them.
        unsafe {
            libc::munmap(self.slots.cast(), self.nslots as usize * 8);
            libc::munmap(self.objs.cast(), self.nslots as usize * 8);
            libc::munmap(self.scratch_mem.0.cast(), self.scratch_mem.1);
        }
    }
}

/// The uswap engine ([`uswap::vswap::Engine`]) as a [`PageStore`]: virtual swap entries over
/// the configured tiers (zero elision, compressed pool, swap file). This is the default store;
/// `tiers = "builtin:..."` selects [`Lz4Store`] instead.
pub(crate) struct EngineStore {
    engine: uswap::vswap::Engine,
    group: u16,
    /// Some tier is not in RAM (a file): the pool can be capped.
    has_disk: bool,
}

impl EngineStore {
    /// Build the engine from a tiers string (`"zero,lz4"`, `"zero,lz4,file:/var/tmp"`, ...).
    pub fn new(tiers: &str, virtual_slots: u64, group: u16) -> Result<EngineStore, StoreError> {
        let tc = uswap::config::TiersConfig::parse(tiers).map_err(|e| StoreError::Other(e.to_string()))?;
        let has_disk = tc.tiers.iter().any(|t| matches!(t, uswap::config::TierSpec::File(_)));
        let backends = tc.build().map_err(|e| StoreError::Other(e.to_string()))?;
        let cfg = uswap::vswap::EngineConfig {
            virtual_slots: virtual_slots.max(512),
            zero_elision: tc.zero_elision,
            nr_groups: (usize::from(group) + 1).max(64),
            ..Default::default()
        };
        let engine = uswap::vswap::Engine::new(cfg, backends).map_err(|e| StoreError::Other(e.to_string()))?;
        let s = EngineStore { engine, group, has_disk };
        s.reserve_swapin(4)?;
        Ok(s)
    }

    /// Preallocate the engine's swap-cache folios for swap-ins of up to `max_order` (done for
    /// 64 KiB at creation; the pager adds 2 MiB for 2 MiB folios): swap-ins run in the SIGBUS
    /// handler and must not call malloc.
    pub fn reserve_swapin(&self, max_order: u8) -> Result<(), StoreError> {
        self.engine.reserve_swapin(max_order).map_err(|e| StoreError::Other(e.to_string()))
    }
}

fn engine_err(e: uswap::SwapError, entry: u64) -> StoreError {
    match e {
        uswap::SwapError::NoSpace { order } => StoreError::NoSpace { order },
        uswap::SwapError::OutOfRange(_) | uswap::SwapError::NotInUse(_) | uswap::SwapError::BadFolio { .. } => {
            StoreError::BadEntry(entry)
        }
        uswap::SwapError::Tier(uswap::TierError::Corrupt { .. }) => StoreError::Corrupt(entry),
        other => StoreError::Other(other.to_string()),
    }
}

impl PageStore for EngineStore {
    fn store(&self, group: u16, data: &[u8]) -> Result<u64, StoreError> {
        self.engine.swap_out(group, data).map(|e| e.0).map_err(|e| engine_err(e, u64::MAX))
    }
    fn load(&self, entry: u64, out: &mut [u8]) -> Result<(), StoreError> {
        self.engine.swap_in(uswap::SwapEntry(entry), out, false).map_err(|e| engine_err(e, entry))
    }
    fn dup(&self, entry: u64, nr: u32) -> Result<(), StoreError> {
        self.engine.dup(uswap::SwapEntry(entry), nr as usize).map_err(|e| engine_err(e, entry))
    }
    fn put(&self, entry: u64, nr: u32) {
        let _ = self.engine.put(uswap::SwapEntry(entry), nr as usize);
    }
    /// The RAM the engine's tiers hold (the store's engine is its own, so all of it is ours):
    /// the pool with its fragmentation and spare memory, which is what the process's RSS sees.
    /// It covers the group's charge (objects are charged at most the memory they occupy). On
    /// the fault path (every `charged_bytes`): a few atomic loads per tier.
    fn pool_bytes(&self) -> u64 {
        self.engine.ram_bytes()
    }
    fn ram_per_page(&self, group: u16) -> Option<u64> {
        let u = self.engine.groups().usage(group).ok()?;
        Some(u.pool_bytes / u.swapped_pages.max(1))
    }
    fn limit_ram(&self, group: u16, bytes: u64) -> bool {
        // The group's pool_max: a store over it is refused by the pool and goes to the file.
        self.has_disk && self.engine.groups().set_pool_max(group, bytes).is_ok()
    }
    fn stats_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self.engine.stats().snapshot()).unwrap_or_default();
        if let (Some(m), Ok(u)) = (v.as_object_mut(), self.engine.groups().usage(self.group)) {
            m.insert("engine".into(), "uswap".into());
            m.insert("group".into(), serde_json::to_value(u).unwrap_or_default());
            let tiers: Vec<serde_json::Value> = (0..self.engine.nr_tiers())
                .filter_map(|t| self.engine.tier_usage(t).ok())
                .map(|u| serde_json::to_value(u).unwrap_or_default())
                .collect();
            m.insert("tiers".into(), tiers.into());
            m.insert("stored_pages".into(), u.swapped_pages.into());
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn folio(order: u8, seed: u64) -> Vec<u8> {
        (0..(PAGE_SIZE << order) / 8).flat_map(|i| ((i as u64 / 2).wrapping_mul(seed) >> 3).to_le_bytes()).collect()
    }

    #[test]
    fn store_load_put_roundtrip_all_orders() {
        let s = Lz4Store::new(4096, 64 << 20, true).unwrap();
        for order in [0u8, 4, 9] {
            let d = folio(order, 77 + u64::from(order));
            let e = s.store(0, &d).unwrap();
            assert_eq!(e % (1 << order), 0, "naturally aligned");
            let mut out = vec![0u8; d.len()];
            s.load(e, &mut out).unwrap();
            assert_eq!(out, d);
            s.put(e, 1 << order);
        }
        assert_eq!(s.pool_bytes(), 0);
        let z = vec![0u8; PAGE_SIZE * 16];
        let e = s.store(0, &z).unwrap();
        assert_eq!(s.pool_bytes(), 0);
        let mut out = vec![1u8; z.len()];
        s.load(e, &mut out).unwrap();
        assert_eq!(out, z);
    }

    #[test]
    fn partial_put_keeps_data_until_last_slot() {
        let s = Lz4Store::new(4096, 16 << 20, true).unwrap();
        let d = folio(4, 3);
        let e = s.store(0, &d).unwrap();
        s.put(e + 3, 1);
        s.put(e, 1);
        let mut out = vec![0u8; d.len()];
        s.load(e, &mut out).unwrap();
        assert_eq!(out, d);
        for i in 1..16 {
            if i != 3 {
                s.put(e + i, 1);
            }
        }
        assert_eq!(s.pool_bytes(), 0);
        assert!(s.load(e, &mut out).is_err());
    }

    #[test]
    fn fragmented_space_reports_no_space_for_large_orders() {
        // 512 slots: fill with order-0, free every other one: no order-4 range is left.
        let s = Lz4Store::new(512, 16 << 20, true).unwrap();
        let d = folio(0, 5);
        let es: Vec<u64> = (0..512).map(|_| s.store(0, &d).unwrap()).collect();
        assert!(matches!(s.store(0, &d), Err(StoreError::NoSpace { order: 0 })));
        for e in es.iter().step_by(2) {
            s.put(*e, 1);
        }
        assert_eq!(s.store(0, &folio(4, 1)), Err(StoreError::NoSpace { order: 4 }));
        assert!(s.store(0, &d).is_ok());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        #[test]
        fn model_of_counts(ops in proptest::collection::vec((0u8..3, 0usize..8, 0u8..4), 1..80)) {
            // Model: live entries -> (order, data, count per slot).
            let s = Lz4Store::new(2048, 32 << 20, true).unwrap();
            let mut live: Vec<(u64, u8, Vec<u8>, Vec<u32>)> = Vec::new();
            for (op, idx, order) in ops {
                match op {
                    0 => {
                        let d = folio(order, idx as u64 + 1);
                        match s.store(0, &d) {
                            Ok(e) => {
                                prop_assert!(live.iter().all(|l| e + (1 << order) <= l.0 || l.0 + (1 << l.1) <= e), "overlap");
                                live.push((e, order, d, vec![1; 1 << order]));
                            }
                            Err(StoreError::NoSpace { .. }) => {}
                            Err(x) => prop_assert!(false, "{x}"),
                        }
                    }
                    1 if !live.is_empty() => {
                        let li = idx % live.len();
                        let l = &mut live[li];
                        let i = idx % l.3.len();
                        if l.3[i] > 0 {
                            s.put(l.0 + i as u64, 1);
                            l.3[i] -= 1;
                        }
                    }
                    2 if !live.is_empty() => {
                        let li = idx % live.len();
                        let l = &mut live[li];
                        let i = idx % l.3.len();
                        if l.3[i] > 0 {
                            s.dup(l.0 + i as u64, 1).unwrap();
                            l.3[i] += 1;
                        }
                    }
                    _ => {}
                }
                live.retain(|l| l.3.iter().any(|&c| c > 0));
                for l in &live {
                    let mut out = vec![0u8; l.2.len()];
                    s.load(l.0, &mut out).unwrap();
                    prop_assert_eq!(&out, &l.2);
                }
            }
        }
    }
}
