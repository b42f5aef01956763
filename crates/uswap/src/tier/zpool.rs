//! The compressed pool (zswap/zram in user space): [`ZPool`], a [`Backend`] of kind
//! [`TierKind::Pool`].
//!
//! Data path: a folio is compressed (lz4 by default, zstd level 1 selectable) *outside any
//! lock* into a per-thread scratch buffer that is reused, as are the compression states (the
//! LZ4 hash table of [`super::lz4`], zstd contexts): no allocation per page in steady state.
//! Decompression uses liblz4's safe decoder and zstd. The object is then copied into
//! an object of a size class. Pages that compress worse than the threshold (default 3/4 of
//! the unit) are stored raw or rejected to the next tier, by policy. Large folios are one
//! compression unit ([`FolioMode::Whole`]) or one unit per page inside one object
//! ([`FolioMode::PerPage`]).
//!
//! Allocator (zsmalloc, `mm/zsmalloc.c`): 255 size classes, from 48 B to 3360 B spaced by
//! 16 B (compressed 4 KiB pages), then up to 7872 B spaced by 96 B (a raw page, and whole 64 KiB
//! folios that compress 8–19x, which would otherwise round up to 8 KiB in the large area); each
//! class carves objects out of "zspages" of 1..=8 contiguous 4 KiB pages (the count that wastes
//! the least; up to 64 for classes above a page), so objects straddle page boundaries. Every object starts with an
//! 8-byte header (used bit, codec, order, length, owner virtual slot) so compaction knows
//! whom to report a move to; free objects thread a free list through the same 8 bytes. A
//! class keeps its partially used zspages in four fullness groups; allocation takes from the
//! fullest group, compaction empties the sparsest zspages into the fullest ones and reports
//! every move through the [`Relocate`] hook. Objects larger than the biggest class (whole
//! large folios) live in a separate large-object area of exact, page-rounded allocations.
//! Classes that pack identically (same pages and objects per zspage) are merged into the
//! largest of them, as zsmalloc does: an object costs the same there, and fewer classes in use
//! mean fewer partly used zspages.
//!
//! Density: idle objects can be re-encoded with a stronger secondary algorithm
//! ([`PoolConfig::recompress`], zstd at a high level; zram's `recomp_algorithm` and
//! `recompress type=idle`) by [`ZPool::recompress`], which moves them to smaller classes
//! through the same [`Relocate`] hook (see `zpool/recompress.rs`). Chosen over larger
//! compression units for 4 KiB pages because it keeps the fast lz4 store and the 4 KiB load
//! granularity, and pays the stronger codec's CPU only for data that stays swapped out; on
//! `uswap bench zpool`'s corpus it takes the pool from ~1.02x kernel zram's RAM per page to
//! ~0.81x (see BENCHMARKS.md).
//!
//! Handles (41 bits): `class (8) | zspage index (21) | object index (12)`; class 255 is the
//! large area (the low 33 bits index it).
//!
//! Limit: `max_bytes` with hysteresis like zswap's `max_pool_percent` and
//! `accept_threshold_percent`: once a store would exceed the limit the pool is "full" and
//! rejects every store until its size falls below the accept threshold; [`Backend::over_limit`]
//! says so, so the engine writes back.
//!
//! Locking: one mutex per size class (cache-padded) guards that class's zspages and their
//! memory; one mutex guards the large area; one mutex serialises compaction and recompression
//! passes (each takes it with `try_lock`). No lock is
//! held across compression, decompression or the relocate callback, and no two pool locks
//! are ever held together. A load decodes a class object in place, without copying it out:
//! it pins the object's zspage under the class lock (zsmalloc's `zs_obj_read_begin`), and
//! compaction neither drains a pinned zspage nor frees a relocated object while its zspage is
//! pinned. Counters are relaxed atomics.

use super::lz4::Lz4Table;
use crate::backend::{Backend, Recompressed, Relocate, Stored, TierKind, Usage};
use crate::error::TierError;
use crate::page_heap::{self, PageVec};
use crate::swap_table::{SwapEntry, MAX_ORDER, PAGE_SIZE, PAYLOAD_MAX};
use crate::sync::{lock, AtomicBool, AtomicU64, LockClass, Mutex, Ordering};
use crossbeam_utils::CachePadded;
use std::cell::RefCell;
use std::ptr::NonNull;

mod recompress;
pub use recompress::{hold_off, release_hold_off};

/// Compression algorithm.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Compressor {
    /// LZ4 block format (liblz4).
    Lz4,
    /// zstd at the given level (1 recommended).
    Zstd {
        /// Compression level.
        level: i32,
    },
}

/// What to do with a unit that does not compress below the threshold.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Incompressible {
    /// Keep it raw in the pool (zswap since v6.18 with writeback; zram's "huge" pages).
    StoreRaw,
    /// Reject it to the next tier.
    Reject,
    /// `Reject` when a tier outside RAM follows the pool, else `StoreRaw`: what a `--tiers`
    /// string means when it does not say (resolved by [`crate::config::TiersConfig::parse`];
    /// a pool given it unresolved stores raw). Where the pool is charged to a limit, a raw
    /// page in it frees nothing: reclaim storing incompressible pages there has to evict
    /// another page for every one it stored, until writeback empties the pool (`xz -T2 -6`
    /// under `uswap run --limit 200M`: 919 k swap-ins and 205 s stored raw, 37 k and 65 s
    /// rejected to the swap file; the kernel, zram uncharged, 38 k and 38 s).
    Auto,
}

/// How a large folio is compressed. In every mode a folio is one object (one allocation,
/// one contiguous slot range, one store and one load); the modes differ in the compression
/// units inside it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum FolioMode {
    /// The whole folio is one compression unit (best ratio; a 4 KiB swap-in of page `k` of
    /// it decodes pages `0..=k`).
    Whole,
    /// Each 4 KiB page is its own unit, packed into one object (a 4 KiB swap-in decodes one
    /// page; the ratio of 4 KiB compression).
    PerPage,
    /// Each 16 KiB of the folio is its own unit, packed into one object: a 4 KiB swap-in
    /// decodes at most 16 KiB, at a ratio close to whole-folio compression (the default).
    Block16K,
}

impl FolioMode {
    /// log2 of the pages per unit inside an object (`None`: the whole folio).
    fn unit_shift(self) -> Option<u64> {
        match self {
            FolioMode::Whole => None,
            FolioMode::PerPage => Some(0),
            FolioMode::Block16K => Some(2),
        }
    }
}

/// Configuration of a pool.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PoolConfig {
    /// Algorithm.
    pub compressor: Compressor,
    /// Largest pool size in bytes of RAM (0 = unlimited).
    pub max_bytes: u64,
    /// Once full, accept stores again below this percent of `max_bytes` (zswap default 90).
    pub accept_percent: u8,
    /// A unit is stored compressed only if it compresses to at most this percent of its size.
    pub threshold_percent: u8,
    /// Policy for units above the threshold.
    pub incompressible: Incompressible,
    /// Large-folio compression unit.
    pub folio_mode: FolioMode,
    /// Secondary algorithm for [`ZPool::recompress`] (zram's `recomp_algorithm`), normally
    /// zstd at a high level; None: recompression off.
    pub recompress: Option<Compressor>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            compressor: Compressor::Lz4,
            max_bytes: 0,
            accept_percent: 90,
            threshold_percent: 75,
            incompressible: Incompressible::StoreRaw,
            // 16 KiB units: a 4 KiB swap-in decodes at most 4 pages instead of up to 16, for
            // about 5 % more RAM per large folio than one unit (BENCHMARKS.md, 2026-11-25).
            folio_mode: FolioMode::Block16K,
            recompress: None,
        }
    }
}

/// zswap-style debug counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    /// Bytes of RAM the pool holds in zspages and large objects.
    pub pool_total_size: u64,
    /// Bytes of emptied zspages and large allocations kept for reuse (resident too).
    pub pool_spare_bytes: u64,
    /// 4 KiB pages of original data stored.
    pub stored_pages: u64,
    /// Pages stored raw because they did not compress.
    pub stored_incompressible_pages: u64,
    /// Stores refused by the size limit.
    pub pool_limit_hit: u64,
    /// Stores refused because they did not compress (policy `Reject`).
    pub reject_compress_poor: u64,
    /// Objects moved by compaction.
    pub compacted_objects: u64,
    /// Bytes released by compaction.
    pub pages_compacted_bytes: u64,
    /// Loads that failed to decompress.
    pub decompress_fail: u64,
    /// Objects re-encoded by [`ZPool::recompress`] and moved to a smaller size class (zram's
    /// `num_recompressed`, counted in objects; see `recompressed_pages`).
    pub num_recompressed: u64,
    /// 4 KiB pages of original data in those objects.
    pub recompressed_pages: u64,
    /// Objects recompression tried and left as they were: the secondary algorithm did not
    /// reach a smaller class (zram marks such slots `incompressible`), or the move was refused.
    pub recompress_kept: u64,
    /// Bytes of object slots given back by recompression (old class size minus new).
    pub recompress_saved_bytes: u64,
    /// Thread CPU time spent in recompression passes, ns.
    pub recompress_cpu_ns: u64,
}

const HDR: usize = 8;
const CLASS_MIN: usize = 48;
const CLASS_STEP: usize = 16;
/// Classes spaced by `CLASS_STEP`: 48..=3360 B.
const FINE_CLASSES: usize = 208;
const FINE_MAX: usize = CLASS_MIN + CLASS_STEP * (FINE_CLASSES - 1);
/// Spacing of the classes above `FINE_MAX`.
const COARSE_STEP: usize = 96;
/// Number of size classes (the class index 255 names the large-object area).
pub const NR_CLASSES: usize = 255;
const LARGE_CLASS: u64 = 255;
/// Largest object in a size class (header included).
pub const CLASS_MAX: usize = FINE_MAX + COARSE_STEP * (NR_CLASSES - FINE_CLASSES);
const MAX_CHAIN: usize = 8;
const HUGE_CHAIN: usize = 64;
const NR_GROUPS: usize = 4;
const FULL: u8 = u8::MAX;
const ZS_BITS: u32 = 21;
const OBJ_BITS: u32 = 12;
const NO_OBJ: u16 = u16::MAX;

// Object header (used): bit 63 used, 62..60 codec, 59..56 order, 55..43 length, 42..41 unit
// shift (units of 2^shift pages, with CODEC_PERPAGE), 40..0 owner. The codec values below
// carry the unit shift in their bits 4..3.
const USED: u64 = 1 << 63;
const CODEC_RAW: u64 = 0;
const CODEC_LZ4: u64 = 1;
const CODEC_ZSTD: u64 = 2;
/// The object is a table of unit lengths and then the units (of `1 << unit_shift` pages).
const CODEC_PERPAGE: u64 = 4;

fn make_hdr(codec: u64, order: u8, len: usize, owner: u64) -> u64 {
    USED | (codec & 7) << 60
        | ((codec >> 3) & 3) << 41
        | u64::from(order) << 56
        | ((len as u64) & 0x1fff) << 43
        | (owner & PAYLOAD_MAX)
}
fn hdr_codec(h: u64) -> u64 {
    (h >> 60) & 7 | ((h >> 41) & 3) << 3
}
fn hdr_order(h: u64) -> u8 {
    ((h >> 56) & 0xf) as u8
}
fn hdr_len(h: u64) -> usize {
    ((h >> 43) & 0x1fff) as usize
}
fn hdr_owner(h: u64) -> u64 {
    h & PAYLOAD_MAX
}

fn class_size(c: usize) -> usize {
    if c < FINE_CLASSES {
        CLASS_MIN + CLASS_STEP * c
    } else {
        FINE_MAX + COARSE_STEP * (c + 1 - FINE_CLASSES)
    }
}
fn class_of(size: usize) -> usize {
    if size <= FINE_MAX {
        size.saturating_sub(CLASS_MIN).div_ceil(CLASS_STEP)
    } else {
        FINE_CLASSES - 1 + (size - FINE_MAX).div_ceil(COARSE_STEP)
    }
}
/// Pages per zspage for a class: the chain length with the least waste (ties: shortest).
/// Classes above a page (raw pages, whose header makes them a little larger, and whole large
/// folios) may chain up to `HUGE_CHAIN` pages, so a raw page costs ~1.6% more than 4 KiB
/// instead of ~7%.
fn pages_per_zspage(size: usize) -> usize {
    let max = if size > PAGE_SIZE { HUGE_CHAIN } else { MAX_CHAIN };
    let mut best = (1, usize::MAX);
    for k in 1..=max {
        let waste = (k * PAGE_SIZE) % size;
        // Compare waste fractions: waste/k*PAGE.
        if waste * best.0 < best.1.saturating_mul(k) || best.1 == usize::MAX {
            best = (k, waste);
        }
    }
    best.0
}

// Every class object's length fits the header's 13-bit length field.
const _: () = assert!(CLASS_MAX - HDR <= 0x1fff);

// Every handle, the large area's included, fits the table word's payload.
const _: () = assert!((LARGE_CLASS + 1) << (ZS_BITS + OBJ_BITS) <= PAYLOAD_MAX + 1);

fn handle(class: usize, zs: u32, obj: u16) -> u64 {
    (class as u64) << (ZS_BITS + OBJ_BITS) | u64::from(zs) << OBJ_BITS | u64::from(obj)
}
fn split(h: u64) -> (usize, u32, u16) {
    (
        (h >> (ZS_BITS + OBJ_BITS)) as usize,
        ((h >> OBJ_BITS) & ((1 << ZS_BITS) - 1)) as u32,
        (h & ((1 << OBJ_BITS) - 1)) as u16,
    )
}

/// A zspage: `pages` contiguous 4 KiB pages carved into objects of one class.
#[derive(Clone, Copy)]
struct Zspage {
    mem: NonNull<u8>,
    inuse: u16,
    free_head: u16,
    group: u8,
    pos: u32,
    draining: bool,
    /// Loads decoding an object of this zspage in place (see [`ZPool::pin`]): compaction
    /// moves nothing out of it meanwhile.
    pins: u16,
    /// An object of it was stored or loaded since the last [`ZPool::mark_idle`]: its objects
    /// are not idle (zram's per-slot idle flag, kept per zspage; see `recompress`).
    touched: bool,
    /// A recompression pass went through it and no object was stored into it since: nothing
    /// in it is worth another try.
    swept: bool,
}

struct Class {
    size: usize,
    pages: usize,
    objs: u16,
    zspages: PageVec<Option<Zspage>>,
    free_ids: PageVec<u32>,
    groups: [PageVec<u32>; NR_GROUPS],
    used_objs: u64,
    /// Up to [`SPARE_ZSPAGES`] emptied zspages kept for the next `new_zspage`, so a pool whose
    /// size hovers (the steady state of a pager under its limit) does not release and fault in
    /// memory on every swap-out/swap-in pair. Bounded pool-wide by [`SpareBudget`] and counted
    /// in the pool's memory use: it is resident.
    spare: Vec<NonNull<u8>>,
}

/// Empty zspages a class keeps (see `Class::spare`).
const SPARE_ZSPAGES: usize = 8;

/// Memory of emptied zspages and large objects kept for reuse (see `Class::spare`,
/// `LargeArea::spare`), at most [`SPARE_MAX_BYTES`] per pool.
#[derive(Default)]
struct SpareBudget {
    bytes: AtomicU64,
}

/// Bytes of spare memory a pool keeps resident at most.
const SPARE_MAX_BYTES: u64 = 2 << 20;

impl SpareBudget {
    /// Reserve `n` bytes of the budget; false when it would exceed the maximum.
    fn take(&self, n: u64) -> bool {
        self.bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| (b + n <= SPARE_MAX_BYTES).then_some(b + n))
            .is_ok()
    }
    fn give(&self, n: u64) {
        self.bytes.fetch_sub(n, Ordering::Relaxed);
    }
}

// SAFETY: a Class owns its zspages' memory exclusively; it is only touched under its mutex.
unsafe impl Send for Class {}

impl Class {
    fn new(c: usize) -> Self {
        let size = class_size(c);
        let pages = pages_per_zspage(size);
        Class {
            size,
            pages,
            objs: (pages * PAGE_SIZE / size) as u16,
            zspages: PageVec::new(),
            free_ids: PageVec::new(),
            groups: Default::default(),
            used_objs: 0,
            spare: Vec::with_capacity(SPARE_ZSPAGES),
        }
    }
    fn zspage_bytes(&self) -> usize {
        self.pages * PAGE_SIZE
    }
    fn group_of(&self, inuse: u16) -> u8 {
        if inuse >= self.objs {
            FULL
        } else {
            ((usize::from(inuse) * NR_GROUPS) / usize::from(self.objs)) as u8
        }
    }
    fn obj_ptr(&self, zs: &Zspage, obj: u16) -> *mut u8 {
        // SAFETY: obj < objs, so obj*size + size <= pages*PAGE_SIZE: inside the allocation.
        unsafe { zs.mem.as_ptr().add(usize::from(obj) * self.size) }
    }
    fn read_hdr(&self, zs: &Zspage, obj: u16) -> u64 {
        let mut b = [0u8; HDR];
        // SAFETY: the object (>= 48 bytes) is inside the zspage; the bytes were initialised
        // (zeroed allocation, then written).
        unsafe { std::ptr::copy_nonoverlapping(self.obj_ptr(zs, obj), b.as_mut_ptr(), HDR) };
        u64::from_le_bytes(b)
    }
    fn write_hdr(&self, zs: &Zspage, obj: u16, h: u64) {
        // SAFETY: as in read_hdr; we hold the class lock (exclusive access to zspage memory).
        unsafe { std::ptr::copy_nonoverlapping(h.to_le_bytes().as_ptr(), self.obj_ptr(zs, obj), HDR) };
    }
    fn group_remove(&mut self, id: u32) {
        let zs = self.zspages[id as usize].as_ref().expect("zspage");
        let (g, pos) = (zs.group, zs.pos as usize);
        if g == FULL || zs.draining {
            return;
        }
        let v = &mut self.groups[usize::from(g)];
        v.swap_remove(pos);
        if let Some(&moved) = v.get(pos) {
            self.zspages[moved as usize].as_mut().expect("zspage").pos = pos as u32;
        }
    }
    fn group_insert(&mut self, id: u32) {
        let objs = self.objs;
        let zs = self.zspages[id as usize].as_ref().expect("zspage");
        if zs.draining {
            return;
        }
        let g = if zs.inuse >= objs { FULL } else { ((usize::from(zs.inuse) * NR_GROUPS) / usize::from(objs)) as u8 };
        let pos = if g == FULL {
            0
        } else {
            let v = &mut self.groups[usize::from(g)];
            v.push(id);
            v.len() - 1
        };
        let zs = self.zspages[id as usize].as_mut().expect("zspage");
        zs.group = g;
        zs.pos = pos as u32;
    }
    /// Allocate an object slot in an existing partial zspage (fullest group first).
    fn alloc_existing(&mut self) -> Option<(u32, u16)> {
        let id = (0..NR_GROUPS).rev().find_map(|g| self.groups[g].last().copied())?;
        Some((id, self.take_slot(id)))
    }
    fn take_slot(&mut self, id: u32) -> u16 {
        self.group_remove(id);
        let zs = self.zspages[id as usize].as_ref().expect("zspage");
        let obj = zs.free_head;
        debug_assert_ne!(obj, NO_OBJ);
        let next = (self.read_hdr(zs, obj) & 0xffff) as u16;
        let zs = self.zspages[id as usize].as_mut().expect("zspage");
        zs.free_head = next;
        zs.inuse += 1;
        self.used_objs += 1;
        self.group_insert(id);
        obj
    }
    /// Create a zspage; returns its id, or None if the id space or memory is exhausted.
    fn new_zspage(&mut self, spare: &SpareBudget) -> Option<u32> {
        let id = match self.free_ids.pop() {
            Some(id) => id,
            None if self.zspages.len() < (1 << ZS_BITS) => {
                self.zspages.push(None);
                (self.zspages.len() - 1) as u32
            }
            None => return None,
        };
        let mem = match self.spare.pop() {
            Some(m) => {
                spare.give(self.zspage_bytes() as u64);
                m
            }
            None => match page_heap::heap().alloc(self.zspage_bytes()) {
                Some(m) => m,
                None => {
                    self.free_ids.push(id);
                    return None;
                }
            },
        };
        let zs = Zspage {
            mem,
            inuse: 0,
            free_head: 0,
            group: 0,
            pos: 0,
            draining: false,
            pins: 0,
            touched: false,
            swept: false,
        };
        // Thread the free list: object i -> i+1, last -> NO_OBJ.
        for i in 0..self.objs {
            let next = if i + 1 == self.objs { NO_OBJ } else { i + 1 };
            self.write_hdr(&zs, i, u64::from(next));
        }
        self.zspages[id as usize] = Some(zs);
        self.group_insert(id);
        Some(id)
    }
    /// Validate a handle's zspage/object and return its header if it is in use.
    fn used_hdr(&self, zs_id: u32, obj: u16) -> Option<u64> {
        let zs = self.zspages.get(zs_id as usize)?.as_ref()?;
        if obj >= self.objs {
            return None;
        }
        let h = self.read_hdr(zs, obj);
        (h & USED != 0).then_some(h)
    }
    /// Free an object; returns true if its zspage was released (bytes = zspage_bytes).
    /// An emptied zspage is kept for reuse when `spare` has room, else released. A draining
    /// zspage is never released here, even empty: its id and slots stay reserved until the
    /// pass that drains it calls [`Class::undrain`], so a handle that pass still holds cannot
    /// come to name a new object (no ABA through a reused zspage id or slot).
    fn free_obj(&mut self, id: u32, obj: u16, spare: Option<&SpareBudget>) -> bool {
        self.group_remove(id);
        let zs = self.zspages[id as usize].as_ref().expect("zspage");
        self.write_hdr(zs, obj, u64::from(zs.free_head));
        let zs = self.zspages[id as usize].as_mut().expect("zspage");
        zs.free_head = obj;
        zs.inuse -= 1;
        self.used_objs -= 1;
        if zs.inuse == 0 && !zs.draining {
            self.release(id, spare);
            return true;
        }
        self.group_insert(id);
        false
    }
    /// End of a pass over a draining zspage: back into its fullness group, or released if it
    /// was emptied meanwhile (returns true then; bytes = zspage_bytes). No-op if not draining.
    fn undrain(&mut self, id: u32) -> bool {
        let Some(zs) = self.zspages.get_mut(id as usize).and_then(|z| z.as_mut()).filter(|z| z.draining) else {
            return false;
        };
        zs.draining = false;
        if zs.inuse == 0 {
            self.release(id, None);
            return true;
        }
        self.group_insert(id);
        false
    }
    /// Release the empty zspage `id` (out of every group list already).
    fn release(&mut self, id: u32, spare: Option<&SpareBudget>) {
        let zs = self.zspages[id as usize].take().expect("zspage");
        if self.spare.len() < SPARE_ZSPAGES && spare.is_some_and(|b| b.take(self.zspage_bytes() as u64)) {
            self.spare.push(zs.mem);
        } else {
            // SAFETY: allocated in new_zspage with this size; no handle names it now.
            unsafe { page_heap::heap().free(zs.mem, self.zspage_bytes()) };
        }
        self.free_ids.push(id);
    }
}

impl Drop for Class {
    fn drop(&mut self) {
        let bytes = self.zspage_bytes();
        for m in self.spare.drain(..) {
            // SAFETY: allocated in new_zspage with this size, freed exactly once here.
            unsafe { page_heap::heap().free(m, bytes) };
        }
        for zs in self.zspages.iter().flatten() {
            // SAFETY: allocated in new_zspage with this size, freed exactly once here.
            unsafe { page_heap::heap().free(zs.mem, bytes) };
        }
    }
}

/// An object too large for a size class: an exact page-rounded allocation.
#[derive(Clone, Copy)]
struct Large {
    mem: NonNull<u8>,
    alloc: usize,
    len: usize,
    hdr: u64,
    /// Stored or loaded since the last [`ZPool::mark_idle`] (see `Zspage::touched`).
    touched: bool,
    /// Tried by a recompression pass (see `Zspage::swept`).
    swept: bool,
    /// A recompression pass holds its handle: once freed, its slot index is not reused until
    /// that pass lets go of it (no ABA through a reused index).
    held: bool,
}

struct LargeArea {
    slots: PageVec<Option<Large>>,
    free: PageVec<u32>,
    /// Freed allocations (pointer, size) kept for reuse by an object of the same page-rounded
    /// size: large folios store objects of a few sizes over and over, and the store/free pair
    /// may run in a SIGBUS handler. At most [`SPARE_LARGE`], within the pool's [`SpareBudget`].
    spare: Vec<(NonNull<u8>, usize)>,
}

/// Freed large-object allocations kept for reuse.
const SPARE_LARGE: usize = 32;

impl Default for LargeArea {
    fn default() -> Self {
        // `spare` never grows past its capacity (the fault path must not allocate).
        LargeArea { slots: PageVec::new(), free: PageVec::new(), spare: Vec::with_capacity(SPARE_LARGE) }
    }
}

// SAFETY: the area owns its allocations exclusively and is only touched under its mutex.
unsafe impl Send for LargeArea {}

impl Drop for LargeArea {
    fn drop(&mut self) {
        for (m, alloc) in self.spare.drain(..) {
            // SAFETY: allocated with this size in place(); kept here only.
            unsafe { page_heap::heap().free(m, alloc) };
        }
        for l in self.slots.iter().flatten() {
            // SAFETY: allocated with this size in place(); freed once.
            unsafe { page_heap::heap().free(l.mem, l.alloc) };
        }
    }
}

/// Per-thread scratch: compression output and reused zstd contexts.
struct Scratch {
    buf: Vec<u8>,
    zc: Option<(i32, zstd::bulk::Compressor<'static>)>,
    zd: Option<zstd::bulk::Decompressor<'static>>,
    lz4: Option<Lz4Table>,
}

impl Scratch {
    /// Reserve (once per thread, without touching it) room for compressing the largest folio
    /// the engine stores, in any folio mode and with either codec: its growth later, when the
    /// thread first stores a larger folio than before, would be an allocation on the fault
    /// path (SIGBUS-mode direct reclaim), which the contract allows only on a thread's first
    /// fault (`docs/design.md`, "Deadlock freedom", 3). Capacity only: the pages are touched
    /// when a folio that large is compressed.
    fn reserve_for_largest_folio(&mut self) {
        if self.buf.capacity() == 0 {
            let pages = 1usize << crate::swap_table::MAX_ORDER;
            let per_page = bound(Compressor::Lz4, PAGE_SIZE).max(bound(Compressor::Zstd { level: 1 }, PAGE_SIZE));
            self.buf.reserve_exact(HDR + 2 * pages + pages * per_page);
        }
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = const { RefCell::new(Scratch { buf: Vec::new(), zc: None, zd: None, lz4: None }) };
}

/// Make this thread's decoding state now (the zstd decompression context a pool that may
/// hold zstd objects uses): a thread that serves faults calls it when it starts, so its first
/// swap-in of a zstd object does not allocate on the fault path.
pub fn prepare_thread() {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        // The context allocates its workspace on its first frame: decode one now.
        let page = [7u8; 4096];
        if let (Some(zd), Ok(frame)) = (zstd_ctx(&mut s.zd), zstd::bulk::compress(&page, 3)) {
            let mut out = [0u8; 4096];
            let _ = zd.decompress_to_buffer(&frame, &mut out);
        }
    });
}

fn corrupt(handle: u64) -> TierError {
    TierError::Corrupt { tier: "zpool".into(), handle }
}

/// Compress `src` into `dst` (sized by the caller) with `codec`; None if it did not fit.
fn compress_unit(s: &mut Scratch, comp: Compressor, src: &[u8], dst: &mut [u8]) -> Option<usize> {
    match comp {
        Compressor::Lz4 => s.lz4.get_or_insert_with(Lz4Table::default).compress(src, dst),
        Compressor::Zstd { level } => {
            if s.zc.as_ref().is_none_or(|(l, _)| *l != level) {
                s.zc = Some((level, zstd::bulk::Compressor::new(level).ok()?));
            }
            s.zc.as_mut()?.1.compress_to_buffer(src, dst).ok()
        }
    }
}

/// Decode (at least) pages `first..first + n` of an object of units (`src`: a table of 2-byte
/// unit sizes, then the units of `2^shift` pages each, the shift in `codec`; a unit as long as
/// its data is stored raw) into the same place of `out`: every unit those pages touch, the
/// last one (LZ4) only up to page `first + n` (the rest of `out` is left as it was).
/// Decoding through the last unit also checks that the units end where `src` ends.
fn decode_pages(
    zd: &mut Option<zstd::bulk::Decompressor<'static>>,
    codec: u64,
    src: &[u8],
    out: &mut [u8],
    first: usize,
    n: usize,
) -> bool {
    let pages = out.len() / PAGE_SIZE;
    let upages = 1usize << ((codec >> 3) & 3);
    let ulen = upages * PAGE_SIZE;
    let units = pages / upages;
    let table = units * 2;
    if units == 0 || src.len() < table || n == 0 || first + n > pages {
        return false;
    }
    let size = |i: usize| usize::from(u16::from_le_bytes([src[2 * i], src[2 * i + 1]]));
    let (u0, u1) = (first / upages, (first + n - 1) / upages + 1);
    let mut at = table + (0..u0).map(size).sum::<usize>();
    for u in u0..u1 {
        let len = size(u);
        if at + len > src.len() {
            return false;
        }
        let c = if len == ulen { CODEC_RAW } else { codec & 3 };
        let (unit, dst) = (&src[at..at + len], &mut out[u * ulen..(u + 1) * ulen]);
        // The last unit only up to the part's end: a random 4 KiB read from a 16 KiB unit
        // decodes 2.5 pages on average instead of 4 (LZ4 can stop, not start, mid-block).
        let tail = (first + n) * PAGE_SIZE - u * ulen;
        let ok = if u + 1 == u1 && c == CODEC_LZ4 && tail < ulen {
            lz4_decompress_prefix(unit, dst, tail)
        } else {
            decompress_unit(zd, c, unit, dst)
        };
        if !ok {
            return false;
        }
        at += len;
    }
    u1 < units || at == src.len()
}

/// This thread's zstd decompression context, made on first use (it allocates).
fn zstd_ctx<'a>(
    zd: &'a mut Option<zstd::bulk::Decompressor<'static>>,
) -> Option<&'a mut zstd::bulk::Decompressor<'static>> {
    if zd.is_none() {
        *zd = zstd::bulk::Decompressor::new().ok();
    }
    zd.as_mut()
}

fn decompress_unit(zd: &mut Option<zstd::bulk::Decompressor<'static>>, codec: u64, src: &[u8], out: &mut [u8]) -> bool {
    match codec & 3 {
        CODEC_RAW => {
            if src.len() != out.len() {
                return false;
            }
            out.copy_from_slice(src);
            true
        }
        CODEC_LZ4 => super::lz4::decompress_exact(src, out),
        CODEC_ZSTD => zstd_ctx(zd).is_some_and(|d| d.decompress_to_buffer(src, out).is_ok_and(|n| n == out.len())),
        _ => false,
    }
}

extern "C" {
    fn LZ4_decompress_safe_partial(
        src: *const std::ffi::c_char,
        dst: *mut std::ffi::c_char,
        src_size: std::ffi::c_int,
        target_output_size: std::ffi::c_int,
        dst_capacity: std::ffi::c_int,
    ) -> std::ffi::c_int;
}

/// Decode the first `need` bytes (at least) of one LZ4 block into `out`.
fn lz4_decompress_prefix(src: &[u8], out: &mut [u8], need: usize) -> bool {
    let (Ok(n), Ok(cap), Ok(want)) =
        (std::ffi::c_int::try_from(src.len()), std::ffi::c_int::try_from(out.len()), std::ffi::c_int::try_from(need))
    else {
        return false;
    };
    // SAFETY: `src` is readable for `n` bytes and `out` writable for `cap` bytes; liblz4's
    // safe partial decoder never reads or writes outside them and returns < 0 on bad input.
    let r = unsafe { LZ4_decompress_safe_partial(src.as_ptr().cast(), out.as_mut_ptr().cast(), n, want, cap) };
    r >= want
}

fn codec_of(comp: Compressor) -> u64 {
    match comp {
        Compressor::Lz4 => CODEC_LZ4,
        Compressor::Zstd { .. } => CODEC_ZSTD,
    }
}

/// [`ZPool::merge`]: each class maps to the largest class of its run of classes with the same
/// pages per zspage and objects per zspage.
fn merged_classes() -> [u8; NR_CLASSES] {
    let geometry = |c: usize| {
        let (size, pages) = (class_size(c), pages_per_zspage(class_size(c)));
        (pages, pages * PAGE_SIZE / size)
    };
    let mut m = [0u8; NR_CLASSES];
    for c in (0..NR_CLASSES).rev() {
        m[c] = if c + 1 < NR_CLASSES && geometry(c) == geometry(c + 1) { m[c + 1] } else { c as u8 };
    }
    m
}

fn bound(comp: Compressor, n: usize) -> usize {
    match comp {
        Compressor::Lz4 => super::lz4::max_compressed_size(n),
        Compressor::Zstd { .. } => zstd::zstd_safe::compress_bound(n),
    }
}

/// The compressed pool.
pub struct ZPool {
    name: String,
    cfg: PoolConfig,
    classes: Box<[CachePadded<Mutex<Class>>]>,
    large: Mutex<LargeArea>,
    compacting: Mutex<()>,
    spare: SpareBudget,
    full: AtomicBool,
    total: AtomicU64,
    stored_pages: AtomicU64,
    incompressible: AtomicU64,
    limit_hit: AtomicU64,
    poor: AtomicU64,
    compacted_objs: AtomicU64,
    compacted_bytes: AtomicU64,
    decompress_fail: AtomicU64,
    /// Class used for each class's sizes: the largest class with the same zspage geometry
    /// (zsmalloc merges such classes: they pack identically, and fewer classes mean fewer
    /// partly used zspages).
    merge: [u8; NR_CLASSES],
    /// Loads may meet zstd objects: each thread's decompression context is made on its first
    /// load, not on its first zstd object (which may come after a recompression pass).
    zstd_loads: bool,
    recomp: recompress::Counters,
}

impl ZPool {
    /// A pool with this configuration.
    pub fn new(name: &str, cfg: PoolConfig) -> Self {
        let zstd_loads = matches!(cfg.compressor, Compressor::Zstd { .. })
            || matches!(cfg.recompress, Some(Compressor::Zstd { .. }));
        ZPool {
            name: name.to_string(),
            cfg,
            classes: (0..NR_CLASSES)
                .map(|c| CachePadded::new(Mutex::new(LockClass::PoolClass, Class::new(c))))
                .collect(),
            large: Mutex::new(LockClass::PoolLarge, LargeArea::default()),
            compacting: Mutex::new(LockClass::PoolCompact, ()),
            spare: SpareBudget::default(),
            full: AtomicBool::new(false),
            total: AtomicU64::new(0),
            stored_pages: AtomicU64::new(0),
            incompressible: AtomicU64::new(0),
            limit_hit: AtomicU64::new(0),
            poor: AtomicU64::new(0),
            compacted_objs: AtomicU64::new(0),
            compacted_bytes: AtomicU64::new(0),
            decompress_fail: AtomicU64::new(0),
            merge: merged_classes(),
            zstd_loads,
            recomp: recompress::Counters::default(),
        }
    }

    /// The class an object of `size` bytes (header included, at most `CLASS_MAX`) goes to.
    fn class_for(&self, size: usize) -> usize {
        usize::from(self.merge[class_of(size)])
    }

    /// Count `pages` freed; when the pool holds nothing more, give its spare memory back too
    /// (an empty pool holds no memory).
    fn note_freed(&self, pages: u64) {
        if self.stored_pages.fetch_sub(pages, Ordering::Relaxed) == pages {
            self.release_spares();
        }
    }

    fn release_spares(&self) {
        for m in self.classes.iter() {
            let mut cl = lock(m);
            let bytes = cl.zspage_bytes();
            while let Some(z) = cl.spare.pop() {
                self.spare.give(bytes as u64);
                // SAFETY: a spare zspage of this class, allocated with this size; no handle names it.
                unsafe { page_heap::heap().free(z, bytes) };
            }
        }
        let mut la = lock(&self.large);
        while let Some((m, a)) = la.spare.pop() {
            self.spare.give(a as u64);
            // SAFETY: a spare large allocation of this size; no handle names it.
            unsafe { page_heap::heap().free(m, a) };
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PoolConfig {
        &self.cfg
    }

    /// zswap-style counters.
    pub fn stats(&self) -> PoolStats {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PoolStats {
            pool_total_size: r(&self.total),
            pool_spare_bytes: r(&self.spare.bytes),
            stored_pages: r(&self.stored_pages),
            stored_incompressible_pages: r(&self.incompressible),
            pool_limit_hit: r(&self.limit_hit),
            reject_compress_poor: r(&self.poor),
            compacted_objects: r(&self.compacted_objs),
            pages_compacted_bytes: r(&self.compacted_bytes),
            decompress_fail: r(&self.decompress_fail),
            num_recompressed: r(&self.recomp.objects),
            recompressed_pages: r(&self.recomp.pages),
            recompress_kept: r(&self.recomp.kept),
            recompress_saved_bytes: r(&self.recomp.saved_bytes),
            recompress_cpu_ns: r(&self.recomp.cpu_ns),
        }
    }

    fn accept_bytes(&self) -> u64 {
        (u128::from(self.cfg.max_bytes) * u128::from(self.cfg.accept_percent) / 100) as u64
    }

    /// Hysteresis: true while the pool refuses stores.
    fn refusing(&self) -> bool {
        if self.cfg.max_bytes == 0 || !self.full.load(Ordering::Relaxed) {
            return false;
        }
        if self.total.load(Ordering::Relaxed) <= self.accept_bytes() {
            self.full.store(false, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Would adding `bytes` of RAM pass the limit? Sets the full flag if so.
    fn would_overflow(&self, bytes: u64) -> bool {
        if self.cfg.max_bytes != 0 && self.total.load(Ordering::Relaxed) + bytes > self.cfg.max_bytes {
            self.full.store(true, Ordering::Relaxed);
            self.limit_hit.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Compress `data` into `s.buf[HDR..]`; returns (codec, payload length) or None if it is
    /// above the threshold (the caller then stores raw or rejects).
    fn compress(&self, s: &mut Scratch, data: &[u8]) -> Option<(u64, usize)> {
        self.compress_with(s, data, self.cfg.compressor, self.cfg.threshold_percent)
    }

    /// [`ZPool::compress`] with algorithm `comp` and threshold `threshold_percent`.
    fn compress_with(
        &self,
        s: &mut Scratch,
        data: &[u8],
        comp: Compressor,
        threshold_percent: u8,
    ) -> Option<(u64, usize)> {
        s.reserve_for_largest_folio();
        let base = codec_of(comp);
        let limit = data.len() / 100 * usize::from(threshold_percent.min(100));
        let pages = data.len() / PAGE_SIZE;
        let shift = self.cfg.folio_mode.unit_shift().filter(|&sh| pages > 1 << sh);
        let Some(shift) = shift else {
            let need = HDR + bound(comp, data.len());
            if s.buf.len() < need {
                s.buf.resize(need, 0);
            }
            let mut buf = std::mem::take(&mut s.buf);
            let r = compress_unit(s, comp, data, &mut buf[HDR..]);
            s.buf = buf;
            return r.filter(|&n| n <= limit).map(|n| (base, n));
        };
        // Units of 2^shift pages: a table of u16 lengths (the unit's size = stored raw), then
        // the units.
        let ulen = PAGE_SIZE << shift;
        let units = data.len() / ulen;
        let table = units * 2;
        let need = HDR + table + units * bound(comp, ulen);
        if s.buf.len() < need {
            s.buf.resize(need, 0);
        }
        let mut buf = std::mem::take(&mut s.buf);
        let mut at = HDR + table;
        for (i, unit) in data.chunks_exact(ulen).enumerate() {
            let n = match compress_unit(s, comp, unit, &mut buf[at..]) {
                Some(n) if n < ulen => n,
                _ => {
                    buf[at..at + ulen].copy_from_slice(unit);
                    ulen
                }
            };
            buf[HDR + 2 * i..HDR + 2 * i + 2].copy_from_slice(&(n as u16).to_le_bytes());
            at += n;
        }
        s.buf = buf;
        let n = at - HDR;
        (n <= limit).then_some((base | CODEC_PERPAGE | shift << 3, n))
    }

    /// Place `s.buf[..HDR+len]` (header filled in here) into a class or the large area. A
    /// `fresh` object (a store, not a recompressed copy) marks its zspage touched and unswept.
    fn place(&self, s: &mut Scratch, hdr: u64, len: usize, fresh: bool) -> Result<Stored, TierError> {
        let size = HDR + len;
        s.buf[..HDR].copy_from_slice(&hdr.to_le_bytes());
        if size <= CLASS_MAX {
            let c = self.class_for(size);
            let mut cl = lock(&self.classes[c]);
            let (id, obj, grown) = match cl.alloc_existing() {
                Some((id, obj)) => (id, obj, 0),
                None => {
                    let zb = cl.zspage_bytes() as u64;
                    if self.would_overflow(zb) {
                        return Err(TierError::Reject);
                    }
                    let id = cl.new_zspage(&self.spare).ok_or(TierError::Reject)?;
                    (id, cl.take_slot(id), zb)
                }
            };
            if fresh {
                let zs = cl.zspages[id as usize].as_mut().expect("zspage");
                zs.touched = true;
                zs.swept = false;
            }
            let zs = cl.zspages[id as usize].as_ref().expect("zspage");
            // SAFETY: the object slot is `cl.size >= size` bytes inside the zspage, we hold the
            // class lock, and s.buf holds at least `size` bytes.
            unsafe { std::ptr::copy_nonoverlapping(s.buf.as_ptr(), cl.obj_ptr(zs, obj), size) };
            let bytes = cl.size as u64;
            drop(cl);
            self.total.fetch_add(grown, Ordering::Relaxed);
            return Ok(Stored { handle: handle(c, id, obj), bytes });
        }
        let alloc = size.next_multiple_of(PAGE_SIZE);
        if self.would_overflow(alloc as u64) {
            return Err(TierError::Reject);
        }
        // Reuse the smallest spare allocation that fits and wastes at most a quarter.
        let reuse = {
            let mut la = lock(&self.large);
            let best = (0..la.spare.len())
                .filter(|&i| la.spare[i].1 >= alloc && la.spare[i].1 <= alloc + alloc / 4)
                .min_by_key(|&i| la.spare[i].1);
            best.map(|i| la.spare.swap_remove(i))
        };
        let (mem, alloc) = match reuse {
            Some((m, a)) => {
                self.spare.give(a as u64);
                (m, a)
            }
            None => (page_heap::heap().alloc(alloc).ok_or(TierError::Reject)?, alloc),
        };
        // SAFETY: `mem` has `alloc >= size` bytes, s.buf has `size` bytes, they do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(s.buf.as_ptr(), mem.as_ptr(), size) };
        let mut la = lock(&self.large);
        let idx = match la.free.pop() {
            Some(i) => i,
            None => {
                la.slots.push(None);
                (la.slots.len() - 1) as u32
            }
        };
        la.slots[idx as usize] = Some(Large { mem, alloc, len, hdr, touched: fresh, swept: false, held: false });
        drop(la);
        self.total.fetch_add(alloc as u64, Ordering::Relaxed);
        Ok(Stored { handle: LARGE_CLASS << (ZS_BITS + OBJ_BITS) | u64::from(idx), bytes: alloc as u64 })
    }

    /// A large object where it lies: (header, payload pointer, payload length). Read without
    /// copying and without a pin: large objects never move (compaction is per size class), and
    /// the caller's handle keeps the object from being freed while it is loaded. No scratch
    /// memory is needed, so a thread's first load of a large object allocates nothing.
    fn large_in_place(&self, h: u64) -> Result<(u64, *const u8, usize), TierError> {
        let mut la = lock(&self.large);
        let idx = (h & ((1 << (ZS_BITS + OBJ_BITS)) - 1)) as usize;
        let l = la.slots.get_mut(idx).and_then(|x| x.as_mut()).ok_or(TierError::BadHandle(h))?;
        l.touched = true;
        let hdr = (l.hdr & !(0x1fff << 43)) | USED;
        // SAFETY: `l.mem` holds the header and `l.len` payload bytes (written in place()).
        Ok((hdr, unsafe { l.mem.as_ptr().add(HDR) }, l.len))
    }

    /// For a class object: check it, pin its zspage and return (header, payload pointer,
    /// payload length); `None` for a large object (see [`ZPool::large_in_place`]). Every `Some` must be
    /// followed by [`ZPool::unpin`]. This is zsmalloc's `zs_obj_read_begin`: the object is read
    /// in place instead of copied out under the class lock.
    fn pin(&self, h: u64) -> Result<Option<(u64, *const u8, usize)>, TierError> {
        let (c, zs_id, obj) = split(h);
        if c as u64 == LARGE_CLASS {
            return Ok(None);
        }
        let mut cl = lock(&self.classes[c]);
        let hdr = cl.used_hdr(zs_id, obj).ok_or(TierError::BadHandle(h))?;
        let len = hdr_len(hdr);
        if HDR + len > cl.size {
            return Err(corrupt(h));
        }
        let zs = cl.zspages[zs_id as usize].as_mut().expect("zspage");
        zs.pins += 1;
        zs.touched = true;
        let zs = cl.zspages[zs_id as usize].as_ref().expect("zspage");
        // SAFETY: the object lies inside its zspage; its payload follows the header.
        let p = unsafe { cl.obj_ptr(zs, obj).add(HDR) };
        Ok(Some((hdr, p, len)))
    }

    /// End of [`ZPool::pin`].
    fn unpin(&self, h: u64) {
        let (c, zs_id, _) = split(h);
        let mut cl = lock(&self.classes[c]);
        if let Some(zs) = cl.zspages.get_mut(zs_id as usize).and_then(|z| z.as_mut()) {
            zs.pins = zs.pins.saturating_sub(1);
        }
    }

    /// Decode bytes `part` of the object `h` (header `hdr`, payload `src`) into the same place
    /// of `out` (the whole folio's buffer: an LZ4 unit decodes the prefix up to the part's end).
    fn decode_part(
        &self,
        h: u64,
        hdr: u64,
        src: &[u8],
        zd: &mut Option<zstd::bulk::Decompressor<'static>>,
        out: &mut [u8],
        part: std::ops::Range<usize>,
    ) -> Result<(), TierError> {
        let codec = hdr_codec(hdr);
        let (at, need) = (part.start, part.end);
        let ok = if codec & CODEC_PERPAGE != 0 {
            if at.is_multiple_of(PAGE_SIZE) && need.is_multiple_of(PAGE_SIZE) {
                // Units of pages: decode just the units of the part.
                decode_pages(zd, codec, src, out, at / PAGE_SIZE, (need - at) / PAGE_SIZE)
            } else {
                decode_pages(zd, codec, src, out, 0, out.len() / PAGE_SIZE)
            }
        } else if codec & 3 == CODEC_LZ4 && need < out.len() {
            // One LZ4 unit: liblz4 stops once `need` bytes are out (the prefix is exact: a
            // corrupt block fails here as it would in a full decode of that prefix).
            lz4_decompress_prefix(src, out, need)
        } else {
            decompress_unit(zd, codec, src, out)
        };
        if ok {
            Ok(())
        } else {
            self.decompress_fail.fetch_add(1, Ordering::Relaxed);
            Err(corrupt(h))
        }
    }

    /// Free the object `h`'s memory (`pool_total_size` follows; the page counters are the
    /// caller's): returns its header and the bytes it took, None for a bad handle. `keep`:
    /// emptied memory may be kept as spare (a free by the engine; passes give it back).
    fn free_object(&self, h: u64, keep: bool) -> Option<(u64, u64)> {
        let (c, zs_id, obj) = split(h);
        if c as u64 == LARGE_CLASS {
            let idx = (h & ((1 << (ZS_BITS + OBJ_BITS)) - 1)) as usize;
            let mut la = lock(&self.large);
            let l = la.slots.get_mut(idx).and_then(Option::take)?;
            if !l.held {
                la.free.push(idx as u32);
            }
            let kept = keep && la.spare.len() < SPARE_LARGE && self.spare.take(l.alloc as u64);
            if kept {
                la.spare.push((l.mem, l.alloc));
            }
            drop(la);
            self.total.fetch_sub(l.alloc as u64, Ordering::Relaxed);
            if !kept {
                // SAFETY: allocated in place() with this size; removed from the area above.
                unsafe { page_heap::heap().free(l.mem, l.alloc) };
            }
            return Some((l.hdr, l.alloc as u64));
        }
        let mut cl = lock(self.classes.get(c)?);
        let hdr = cl.used_hdr(zs_id, obj)?;
        let released = cl.free_obj(zs_id, obj, keep.then_some(&self.spare));
        let (size, zb) = (cl.size as u64, cl.zspage_bytes() as u64);
        drop(cl);
        if released {
            self.total.fetch_sub(zb, Ordering::Relaxed);
        }
        Some((hdr, size))
    }

    /// The owner (virtual slot) recorded in the object's header.
    pub fn owner_of(&self, h: u64) -> Result<SwapEntry, TierError> {
        let (c, zs_id, obj) = split(h);
        if c as u64 == LARGE_CLASS {
            let la = lock(&self.large);
            let idx = (h & ((1 << (ZS_BITS + OBJ_BITS)) - 1)) as usize;
            return la
                .slots
                .get(idx)
                .and_then(|x| x.as_ref())
                .map(|l| SwapEntry(hdr_owner(l.hdr)))
                .ok_or(TierError::BadHandle(h));
        }
        let cl = lock(&self.classes[c]);
        cl.used_hdr(zs_id, obj).map(|hd| SwapEntry(hdr_owner(hd))).ok_or(TierError::BadHandle(h))
    }

    /// Address range (start, length of the class slot) of an object, for overlap checks in
    /// tests. None for a bad handle.
    #[doc(hidden)]
    pub fn object_span(&self, h: u64) -> Option<(usize, usize)> {
        let (c, zs_id, obj) = split(h);
        if c as u64 == LARGE_CLASS {
            let la = lock(&self.large);
            let idx = (h & ((1 << (ZS_BITS + OBJ_BITS)) - 1)) as usize;
            return la.slots.get(idx)?.as_ref().map(|l| (l.mem.as_ptr() as usize, l.alloc));
        }
        let cl = lock(&self.classes[c]);
        cl.used_hdr(zs_id, obj)?;
        let zs = cl.zspages[zs_id as usize].as_ref()?;
        Some((cl.obj_ptr(zs, obj) as usize, cl.size))
    }

    /// Check the allocator's internal accounting; Err describes the first inconsistency.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut total = 0u64;
        for (c, m) in self.classes.iter().enumerate() {
            let cl = lock(m);
            let mut used = 0u64;
            for (id, zs) in cl.zspages.iter().enumerate() {
                let Some(zs) = zs else { continue };
                total += cl.zspage_bytes() as u64;
                let mut free = 0;
                let mut f = zs.free_head;
                while f != NO_OBJ {
                    if f >= cl.objs || free > cl.objs {
                        return Err(format!("class {c} zspage {id}: bad free list"));
                    }
                    free += 1;
                    f = (cl.read_hdr(zs, f) & 0xffff) as u16;
                }
                let marked = (0..cl.objs).filter(|&o| cl.read_hdr(zs, o) & USED != 0).count() as u16;
                if marked != zs.inuse || free + zs.inuse != cl.objs {
                    return Err(format!("class {c} zspage {id}: inuse {} marked {marked} free {free}", zs.inuse));
                }
                if zs.inuse == 0 {
                    return Err(format!("class {c} zspage {id}: empty zspage kept"));
                }
                if zs.pins != 0 {
                    return Err(format!("class {c} zspage {id}: {} pins left by loads", zs.pins));
                }
                if !zs.draining && zs.group != cl.group_of(zs.inuse) {
                    return Err(format!("class {c} zspage {id}: wrong fullness group"));
                }
                if zs.group != FULL
                    && !zs.draining
                    && cl.groups[usize::from(zs.group)].get(zs.pos as usize) != Some(&(id as u32))
                {
                    return Err(format!("class {c} zspage {id}: not in its group list"));
                }
                used += u64::from(zs.inuse);
            }
            if used != cl.used_objs {
                return Err(format!("class {c}: used {used} != counter {}", cl.used_objs));
            }
            let listed: usize = cl.groups.iter().map(|g| g.len()).sum();
            let partial = cl.zspages.iter().flatten().filter(|z| z.group != FULL && !z.draining).count();
            if listed != partial {
                return Err(format!("class {c}: {listed} listed, {partial} partial"));
            }
        }
        total += lock(&self.large).slots.iter().flatten().map(|l| l.alloc as u64).sum::<u64>();
        let counted = self.total.load(Ordering::Relaxed);
        if total != counted {
            return Err(format!("pool_total_size {counted} != sum of allocations {total}"));
        }
        Ok(())
    }

    /// One compaction pass over class `c`; returns (objects moved).
    fn compact_class(&self, c: usize, relocate: &mut dyn FnMut(SwapEntry, u64, u64) -> bool) -> u64 {
        // Pick sources: the sparsest partial zspages whose objects fit in the free slots of
        // the others.
        let sources: Vec<u32> = {
            let mut cl = lock(&self.classes[c]);
            let mut partial: Vec<(u16, u32)> = cl
                .groups
                .iter()
                .flatten()
                .map(|&id| cl.zspages[id as usize].as_ref().map(|z| (z.inuse, z.pins, id)).expect("zspage"))
                .filter(|&(_, pins, _)| pins == 0)
                .map(|(inuse, _, id)| (inuse, id))
                .collect();
            if partial.len() < 2 {
                return 0;
            }
            partial.sort_unstable();
            let objs = cl.objs;
            let mut free_dst: u64 = partial.iter().map(|&(u, _)| u64::from(objs - u)).sum();
            let mut srcs = Vec::new();
            for &(inuse, id) in &partial {
                // Moving this zspage's objects removes its own free slots from the destinations.
                let own_free = u64::from(objs - inuse);
                if u64::from(inuse) > free_dst.saturating_sub(own_free) {
                    break;
                }
                free_dst -= own_free + u64::from(inuse);
                srcs.push(id);
            }
            for &id in &srcs {
                cl.group_remove(id);
                cl.zspages[id as usize].as_mut().expect("zspage").draining = true;
            }
            srcs
        };
        let mut moved = 0;
        for src in sources {
            let mut next = 0u16;
            loop {
                // Copy one object to a destination under the lock.
                let (old, new, owner) = {
                    let mut cl = lock(&self.classes[c]);
                    // A load pinned the zspage since: leave the rest of it alone.
                    let Some(zs) = cl.zspages[src as usize].as_ref().filter(|z| z.draining && z.pins == 0) else {
                        break;
                    };
                    let Some(obj) = (next..cl.objs).find(|&o| cl.read_hdr(zs, o) & USED != 0) else { break };
                    next = obj + 1;
                    let Some((dst, dobj)) = cl.alloc_existing() else { break };
                    // The moved object may be one a recompression pass has not tried yet.
                    cl.zspages[dst as usize].as_mut().expect("zspage").swept = false;
                    let size = cl.size;
                    let sp = cl.obj_ptr(cl.zspages[src as usize].as_ref().expect("zspage"), obj);
                    let dp = cl.obj_ptr(cl.zspages[dst as usize].as_ref().expect("zspage"), dobj);
                    // SAFETY: two distinct object slots of `size` bytes in live zspages of this
                    // class; we hold the class lock.
                    unsafe { std::ptr::copy_nonoverlapping(sp, dp, size) };
                    let hdr = cl.read_hdr(cl.zspages[src as usize].as_ref().expect("zspage"), obj);
                    (handle(c, src, obj), handle(c, dst, dobj), hdr_owner(hdr))
                };
                let ok = relocate(SwapEntry(owner), old, new);
                let mut cl = lock(&self.classes[c]);
                // A load may have pinned the old object's zspage (with the old handle) before
                // the relocation: let it finish before the old object is freed.
                while ok && cl.zspages[src as usize].as_ref().is_some_and(|z| z.pins > 0) {
                    drop(cl);
                    std::thread::yield_now();
                    cl = lock(&self.classes[c]);
                }
                let (id, o) = if ok { (src, split(old).2) } else { (split(new).1, split(new).2) };
                // The old object may have been freed by the engine meanwhile (then relocate
                // failed and we free the new copy, which is still ours).
                // Compaction is there to give memory back: emptied zspages are not kept.
                if cl.used_hdr(id, o).is_some() && cl.free_obj(id, o, None) {
                    let zb = cl.zspage_bytes() as u64;
                    self.total.fetch_sub(zb, Ordering::Relaxed);
                    self.compacted_bytes.fetch_add(zb, Ordering::Relaxed);
                }
                if ok {
                    moved += 1;
                }
            }
            let mut cl = lock(&self.classes[c]);
            if cl.undrain(src) {
                let zb = cl.zspage_bytes() as u64;
                self.total.fetch_sub(zb, Ordering::Relaxed);
                self.compacted_bytes.fetch_add(zb, Ordering::Relaxed);
            }
        }
        moved
    }
}

impl Backend for ZPool {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> TierKind {
        TierKind::Pool
    }
    fn store(&self, data: &[u8], owner: SwapEntry) -> Result<Stored, TierError> {
        let pages = data.len() / PAGE_SIZE;
        if data.is_empty()
            || !data.len().is_multiple_of(PAGE_SIZE)
            || !pages.is_power_of_two()
            || pages > 1 << MAX_ORDER
        {
            return Err(TierError::Io {
                errno: 0,
                op: "zpool store",
                msg: format!("{} bytes is not a folio", data.len()),
            });
        }
        if owner.0 > PAYLOAD_MAX {
            return Err(TierError::Io {
                errno: 0,
                op: "zpool store",
                msg: format!("owner {:#x} does not fit a handle", owner.0),
            });
        }
        if self.refusing() {
            self.limit_hit.fetch_add(1, Ordering::Relaxed);
            return Err(TierError::Reject);
        }
        let order = pages.trailing_zeros() as u8;
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            let (codec, len) = match self.compress(&mut s, data) {
                Some(x) => x,
                None if self.cfg.incompressible == Incompressible::Reject => {
                    self.poor.fetch_add(1, Ordering::Relaxed);
                    return Err(TierError::Reject);
                }
                None => {
                    if s.buf.len() < HDR + data.len() {
                        s.buf.resize(HDR + data.len(), 0);
                    }
                    s.buf[HDR..HDR + data.len()].copy_from_slice(data);
                    (CODEC_RAW, data.len())
                }
            };
            let st = self.place(&mut s, make_hdr(codec, order, len, owner.0), len, true)?;
            self.stored_pages.fetch_add(pages as u64, Ordering::Relaxed);
            if codec == CODEC_RAW {
                self.incompressible.fetch_add(pages as u64, Ordering::Relaxed);
            }
            Ok(st)
        })
    }

    fn load(&self, handle: u64, out: &mut [u8]) -> Result<(), TierError> {
        self.load_part(handle, out, 0, out.len())
    }

    fn load_part(&self, handle: u64, out: &mut [u8], at: usize, part: usize) -> Result<(), TierError> {
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            let s = &mut *s;
            if self.zstd_loads {
                zstd_ctx(&mut s.zd);
            }
            // An object is decoded where it lies: a class object with its zspage pinned, a large
            // one as it is (large objects never move).
            let pinned = self.pin(handle)?;
            let (hdr, src) = match pinned {
                Some((hdr, p, len)) => {
                    // SAFETY: `pin` checked that the object is in use with `len` payload bytes
                    // at `p`, inside its zspage; while pinned, compaction neither moves nor
                    // frees it, and the caller's handle keeps it from being freed (a
                    // [`Backend`] handle is not freed while it is being loaded). Stores write
                    // other objects' bytes only.
                    (hdr, unsafe { std::slice::from_raw_parts(p, len) })
                }
                None => {
                    let (hdr, p, len) = self.large_in_place(handle)?;
                    // SAFETY: the object's payload, `len` bytes at `p`; it neither moves nor is
                    // freed while the caller holds the handle (see large_in_place).
                    (hdr, unsafe { std::slice::from_raw_parts(p, len) })
                }
            };
            let res = if out.len() != PAGE_SIZE << hdr_order(hdr) || at + part > out.len() {
                Err(TierError::BadHandle(handle))
            } else {
                self.decode_part(handle, hdr, src, &mut s.zd, out, at..at + part)
            };
            if pinned.is_some() {
                self.unpin(handle);
            }
            res
        })
    }

    fn free(&self, h: u64) -> u64 {
        let Some((hdr, bytes)) = self.free_object(h, true) else { return 0 };
        self.note_freed(1 << hdr_order(hdr));
        if hdr_codec(hdr) == CODEC_RAW {
            self.incompressible.fetch_sub(1 << hdr_order(hdr), Ordering::Relaxed);
        }
        bytes
    }

    fn usage(&self) -> Usage {
        Usage {
            stored_pages: self.stored_pages.load(Ordering::Relaxed),
            used_bytes: self.total.load(Ordering::Relaxed),
            limit_bytes: self.cfg.max_bytes,
            raw_pages: self.incompressible.load(Ordering::Relaxed),
            ..Usage::default()
        }
    }

    fn over_limit(&self) -> bool {
        self.refusing()
    }

    fn ram_bytes(&self) -> u64 {
        self.total.load(Ordering::Relaxed) + self.spare.bytes.load(Ordering::Relaxed)
    }

    fn compact(&self, relocate: Relocate<'_>) -> u64 {
        let Some(_g) = self.compacting.try_lock() else { return 0 };
        let before = self.compacted_bytes.load(Ordering::Relaxed);
        for c in 0..NR_CLASSES {
            let n = self.compact_class(c, relocate);
            self.compacted_objs.fetch_add(n, Ordering::Relaxed);
        }
        self.compacted_bytes.load(Ordering::Relaxed) - before
    }

    fn mark_idle(&self) {
        ZPool::mark_idle(self);
    }

    fn recompress(&self, idle_only: bool, relocate: Relocate<'_>) -> Recompressed {
        ZPool::recompress(self, idle_only, relocate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_geometry() {
        assert_eq!(class_size(NR_CLASSES - 1), CLASS_MAX);
        assert_eq!(CLASS_MAX, 7872);
        // A raw page (header included) wastes under 1% of its class.
        assert!(class_size(class_of(PAGE_SIZE + HDR)) - (PAGE_SIZE + HDR) <= 32);
        for size in 1..=CLASS_MAX {
            let c = class_of(size);
            assert!(class_size(c) >= size && (c == 0 || class_size(c - 1) < size), "size {size}");
        }
        for c in 0..NR_CLASSES {
            let s = class_size(c);
            let k = pages_per_zspage(s);
            let objs = k * PAGE_SIZE / s;
            assert!((1..1 << OBJ_BITS).contains(&objs));
            // Never worse than a single page per object would be (zram's "huge" case).
            assert!((objs * s) as f64 / (k * PAGE_SIZE) as f64 >= 0.5, "class {c}");
        }
        assert_eq!(pages_per_zspage(48), 3);
        let h = handle(254, (1 << ZS_BITS) - 1, (1 << OBJ_BITS) - 1);
        assert!(h <= PAYLOAD_MAX);
        assert_eq!(split(h), (254, (1 << ZS_BITS) - 1, (1 << OBJ_BITS) - 1));
    }
}
