//! The compressed pool (zswap/zram in user space): [`ZPool`], a [`Backend`] of kind
//! [`TierKind::Pool`]. This file holds the pool's state and its [`Backend`] face (store, load,
//! free); the parts it is made of have a file each:
//!
//! - `config.rs`: [`PoolConfig`] (algorithm, limit, threshold, incompressible policy, folio
//!   mode, secondary algorithm).
//! - `layout.rs`: the size classes' geometry, the 8-byte object header and the 41-bit handle.
//! - `class.rs`: one size class of the zsmalloc-like allocator (zspages, free lists, fullness
//!   groups, spare zspages).
//! - `large.rs`: the large-object area (objects larger than the biggest class).
//! - `codec.rs`: compression into and decoding out of the per-thread scratch (lz4, zstd;
//!   one unit or units of pages per folio).
//! - `objects.rs`: placing an object in a class or the large area, freeing it, lookups by
//!   handle.
//! - `load.rs`: reading an object where it lies (pinned, not copied out).
//! - `limit.rs`: the size limit with hysteresis.
//! - `compact.rs` and `recompress.rs`: passes that move objects (to fuller zspages; to smaller
//!   classes with a stronger algorithm), reporting every move through the [`Relocate`] hook.
//! - `stats.rs` ([`PoolStats`]) and `invariants.rs` (the consistency check of tests).
//!
//! Data path: a folio is compressed (lz4 by default, zstd level 1 selectable) *outside any
//! lock* into a per-thread scratch buffer that is reused, as are the compression states: no
//! allocation per page in steady state. The object is then copied into an object of a size
//! class. Pages that compress worse than the threshold (default 3/4 of the unit) are stored
//! raw or rejected to the next tier, by policy. Large folios are one compression unit
//! ([`FolioMode::Whole`]) or one unit per page or per 16 KiB inside one object
//! ([`FolioMode::PerPage`], [`FolioMode::Block16K`]).
//!
//! Density: idle objects can be re-encoded with a stronger secondary algorithm
//! ([`PoolConfig::recompress`], zstd at a high level; zram's `recomp_algorithm` and
//! `recompress type=idle`) by `ZPool::recompress`. Chosen over larger compression units for
//! 4 KiB pages because it keeps the fast lz4 store and the 4 KiB load granularity, and pays
//! the stronger codec's CPU only for data that stays swapped out (BENCHMARKS.md has the
//! pool's RAM per page against kernel zram's).
//!
//! Locking: one mutex per size class (cache-padded, class `PoolClass`) guards that class's
//! zspages and their memory; one mutex (`PoolLarge`) guards the large area; one mutex
//! (`PoolCompact`) serialises compaction and recompression passes (each takes it with
//! `try_lock`). No lock is held across compression, decompression or the relocate callback,
//! and no two pool locks are ever held together (the page heap's own locks may be taken under
//! a class or large-area lock, to get or give back a zspage). A load decodes a class object in
//! place, without copying it out: it pins the object's zspage under the class lock
//! (zsmalloc's `zs_obj_read_begin`), and compaction neither drains a pinned zspage nor frees a
//! relocated object while its zspage is pinned. Counters are relaxed atomics.

mod class;
mod codec;
mod compact;
mod config;
mod invariants;
mod large;
mod layout;
mod limit;
mod load;
mod objects;
mod recompress;
mod stats;

pub use codec::prepare_thread;
pub use config::{Compressor, FolioMode, Incompressible, PoolConfig};
pub(crate) use layout::NR_CLASSES;
pub use recompress::{hold_off, release_hold_off};
pub use stats::PoolStats;

use crate::backend::{Backend, Recompressed, Relocate, Stored, TierKind, Usage};
use crate::error::TierError;
use crate::swap_table::{SwapEntry, MAX_ORDER, PAGE_SIZE, PAYLOAD_MAX};
use crate::sync::{AtomicBool, AtomicU64, LockClass, Mutex, Ordering};
use class::{Class, SpareBudget};
use codec::{with_scratch, zstd_ctx};
use crossbeam_utils::CachePadded;
use large::LargeArea;
use layout::{class_of, hdr_codec, hdr_order, make_hdr, merged_classes, CODEC_RAW, HDR};

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

    /// The configuration.
    pub fn config(&self) -> &PoolConfig {
        &self.cfg
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
        with_scratch(|s| {
            let (codec, len) = match self.compress(s, data) {
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
            let st = self.place(s, make_hdr(codec, order, len, owner.0), len, true)?;
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
        with_scratch(|s| {
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
