//! Backends: where the data of a stored slot lives.
//!
//! A backend stores whole folios (4 KiB << order) and names each by a handle of at most
//! `PAYLOAD_BITS` bits, which the engine keeps in the
//! slot's table word. Backends know nothing of swap counts or the swap cache; the engine calls
//! them with no cluster lock held except for `free` (lock order: cluster -> backend).
//!
//! Implementations: [`MemBackend`] (here, for tests), and the tiers in [`crate::tier`]
//! (compressed pool, swap file). A backend that moves its own data (pool compaction) reports
//! each move through [`Relocate`] so the engine can rewrite the word, keeping the entry the
//! caller holds unchanged.

use crate::error::TierError;
use crate::swap_table::SwapEntry;
use crate::sync::{lock, LockClass, Mutex};
use std::collections::HashMap;

/// What kind of storage a backend is; decides group charging and statistics.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum TierKind {
    /// RAM, uncompressed (tests, or a promotion target).
    Memory,
    /// Compressed RAM pool (zswap/zram analogue): counts `zswpout`/`zswpin`.
    Pool,
    /// A physical swap slot in a file or block device: counts `pswpout`/`pswpin`, and is the
    /// only kind charged to a group's swap limit.
    File,
    /// Remote memory.
    Remote,
}

/// Result of a successful store.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The handle to load or free the data with (at most 41 bits).
    pub handle: u64,
    /// Bytes of backend storage this object takes (compressed size for a pool, slot bytes
    /// for a file): what the group is charged.
    pub bytes: u64,
}

/// Occupancy of a backend.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Usage {
    /// Pages (4 KiB units of original data) stored.
    pub stored_pages: u64,
    /// Bytes of storage in use, including fragmentation (RAM for a pool, disk for a file).
    pub used_bytes: u64,
    /// Configured capacity in bytes (0 = unlimited).
    pub limit_bytes: u64,
    /// Processes sharing the tier's storage since a `fork`, this one included (0: a tier
    /// that is never shared, such as one in RAM, which the fork copies).
    pub sharers: u64,
    /// Bytes of the clusters frozen because another process may still read them.
    pub frozen_bytes: u64,
    /// Pages held as they are because they did not compress (a pool storing them raw: in
    /// RAM, such a page frees nothing).
    pub raw_pages: u64,
}

/// A step of sharing a tier's storage with the process's `fork` relatives
/// ([`Backend::fork_share`]), in the order the preload library's atfork handlers take them.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ShareStep {
    /// Parent, before a `fork` whose child keeps using the tier (no store or free of this
    /// process in flight): make what the child will share safe to share. False: the child
    /// needs a copy of the storage (a file tier with no holds row free).
    Prepare,
    /// Child, before anything else uses the tier: take the child's share. `shared` is what
    /// `Prepare` returned (false: the storage was copied and is the child's alone). False: the
    /// child cannot use the tier.
    Child {
        /// What `Prepare` returned.
        shared: bool,
    },
    /// Parent, after the fork: whether the child took its share (false: the fork failed or the
    /// child died first, and the share is given up). Returns true.
    Parent {
        /// The child said it took its share.
        child_took: bool,
    },
    /// Take back what the relatives sharing storage with this process gave up (they emptied,
    /// exited, were killed or called `exec`). Not on the fault path (it reads `/proc`).
    /// Returns true.
    Refresh,
}

/// One request of [`Backend::load_many`].
pub struct LoadReq<'a> {
    /// The object to load.
    pub handle: u64,
    /// Where to put it (as long as the object).
    pub out: &'a mut [u8],
    /// Read ahead, not asked for: a backend may skip it (result `Err(TierError::Reject)`,
    /// `out` untouched) where reading it would cost a wait of its own, one it cannot overlap
    /// with the reads of the requests that are not optional.
    pub optional: bool,
    /// The outcome, set by `load_many`.
    pub result: Result<(), TierError>,
}

/// Called by a backend that moved an object: returns true if the engine took the new handle
/// (the backend then frees the old location), false if the owner no longer points at the old
/// handle (the backend frees the new copy instead).
pub type Relocate<'a> = &'a mut dyn FnMut(SwapEntry, u64, u64) -> bool;

/// What a recompression pass did (see [`Backend::recompress`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Recompressed {
    /// Objects re-encoded and moved to a smaller slot (the engine took the new handle).
    pub objects: u64,
    /// 4 KiB pages of original data in them.
    pub pages: u64,
    /// Objects tried and left as they were (no smaller slot, or the move was refused).
    pub kept: u64,
    /// Bytes of slots given back (old slot size minus new, summed).
    pub saved_bytes: u64,
    /// Thread CPU time of the pass, ns.
    pub cpu_ns: u64,
}

/// A storage tier.
pub trait Backend: Send + Sync {
    /// Short name for statistics and errors ("zpool", "file:/var/tmp").
    fn name(&self) -> &str;
    /// The kind of storage.
    fn kind(&self) -> TierKind;
    /// Store one folio. `owner` is the virtual slot it belongs to (kept as a reverse map for
    /// compaction and drain). `Err(TierError::Reject)` means "try the next tier".
    fn store(&self, data: &[u8], owner: SwapEntry) -> Result<Stored, TierError>;
    /// Load the folio stored under `handle` into `out` (same length as stored). Data that
    /// fails its integrity check is an error, never returned.
    fn load(&self, handle: u64, out: &mut [u8]) -> Result<(), TierError>;
    /// Decode at least bytes `[at, at + len)` of the folio under `handle` into the same place
    /// of `out` (`out` as long as the folio; the rest of it is unspecified). Lets a 4 KiB
    /// swap-in of a large folio decode only what it needs. Default: the whole
    /// [`Backend::load`].
    fn load_part(&self, handle: u64, out: &mut [u8], at: usize, len: usize) -> Result<(), TierError> {
        let _ = (at, len);
        self.load(handle, out)
    }
    /// Load several objects (the batched drain): `reqs[i].result` gets the outcome of loading
    /// `reqs[i].handle` into `reqs[i].out`, as [`Backend::load`] would. A failed request
    /// changes nothing but its own `out`. Backends that can coalesce I/O override it (the file
    /// tier reads runs of adjacent slots with one large read, and skips optional requests
    /// that need a read of their own where its I/O engine runs reads one after another).
    /// Default: `load` each (optional ones too: a tier in RAM has no wait to save).
    fn load_many(&self, reqs: &mut [LoadReq<'_>]) {
        for r in reqs {
            r.result = self.load(r.handle, r.out);
        }
    }
    /// Free the data under `handle`; returns the bytes released (as charged by `store`).
    /// A handle is not freed while a `load` or `load_part` of it is running (the engine frees
    /// an object only once its folio has left the swap cache, where every load holds it).
    fn free(&self, handle: u64) -> u64;
    /// Occupancy.
    fn usage(&self) -> Usage;
    /// Bytes of this process's memory the backend holds: what its data occupies in RAM with
    /// fragmentation and memory kept for reuse, i.e. its share of the RSS. Default 0 (storage
    /// outside RAM).
    fn ram_bytes(&self) -> u64 {
        0
    }
    /// True when the backend is above its high watermark and wants entries moved out
    /// (writeback). Default: never.
    fn over_limit(&self) -> bool {
        false
    }
    /// Compact storage, reporting every moved object through `relocate`. Returns bytes
    /// reclaimed. Default: nothing to do.
    fn compact(&self, _relocate: Relocate<'_>) -> u64 {
        0
    }
    /// Mark everything stored idle (zram's `echo all > idle`); a store or load of an object
    /// makes it not idle again. Default: nothing to do.
    fn mark_idle(&self) {}
    /// Re-encode stored objects with a stronger secondary algorithm (zram's `recompress`):
    /// those idle since the last [`Backend::mark_idle`] if `idle_only`, else all. Every object
    /// that moves is reported through `relocate`, as compaction does. Default: nothing to do.
    fn recompress(&self, _idle_only: bool, _relocate: Relocate<'_>) -> Recompressed {
        Recompressed::default()
    }
    /// One step of sharing the tier's storage with `fork` relatives ([`ShareStep`]; what the
    /// result means depends on the step). Default: true, nothing to do (memory is copied by the
    /// fork itself).
    fn fork_share(&self, step: ShareStep) -> bool {
        let _ = step;
        true
    }
}

/// An uncompressed in-memory backend: the reference implementation every path is tested with.
pub struct MemBackend {
    name: String,
    inner: Mutex<MemInner>,
    limit_pages: u64,
}

struct MemInner {
    next: u64,
    map: HashMap<u64, Box<[u8]>>,
    pages: u64,
}

impl MemBackend {
    /// A memory backend holding at most `limit_pages` pages (0 = unlimited).
    pub fn new(name: &str, limit_pages: u64) -> Self {
        MemBackend {
            name: name.to_string(),
            inner: Mutex::new(LockClass::MemBackend, MemInner { next: 1, map: HashMap::new(), pages: 0 }),
            limit_pages,
        }
    }
}

impl Backend for MemBackend {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> TierKind {
        TierKind::Memory
    }
    fn store(&self, data: &[u8], _owner: SwapEntry) -> Result<Stored, TierError> {
        let pages = (data.len() / crate::PAGE_SIZE) as u64;
        let mut g = lock(&self.inner);
        if self.limit_pages != 0 && g.pages + pages > self.limit_pages {
            return Err(TierError::Reject);
        }
        let h = g.next;
        g.next += 1;
        g.map.insert(h, data.into());
        g.pages += pages;
        Ok(Stored { handle: h, bytes: data.len() as u64 })
    }
    fn load(&self, handle: u64, out: &mut [u8]) -> Result<(), TierError> {
        let g = lock(&self.inner);
        let d = g.map.get(&handle).ok_or(TierError::BadHandle(handle))?;
        if d.len() != out.len() {
            return Err(TierError::BadHandle(handle));
        }
        out.copy_from_slice(d);
        Ok(())
    }
    fn free(&self, handle: u64) -> u64 {
        let mut g = lock(&self.inner);
        match g.map.remove(&handle) {
            Some(d) => {
                g.pages -= (d.len() / crate::PAGE_SIZE) as u64;
                d.len() as u64
            }
            None => 0,
        }
    }
    fn usage(&self) -> Usage {
        let g = lock(&self.inner);
        Usage {
            stored_pages: g.pages,
            used_bytes: g.pages * crate::PAGE_SIZE as u64,
            limit_bytes: self.limit_pages * crate::PAGE_SIZE as u64,
            ..Usage::default()
        }
    }
    fn ram_bytes(&self) -> u64 {
        lock(&self.inner).pages * crate::PAGE_SIZE as u64
    }
}
