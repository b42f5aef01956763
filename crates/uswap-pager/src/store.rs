//! Where evicted folios go: the [`PageStore`] trait the pager codes against, and
//! [`EngineStore`], the uswap engine behind it (the only store of the library; tests hand a
//! pager a store of their own with `Pager::with_store`).
//!
//! The trait mirrors the engine contract of `docs/design.md` (`uswap::vswap::Engine`): a folio
//! of `4096 << order` bytes is stored whole under `2^order` contiguous, naturally aligned swap
//! slots (one compression unit); each slot carries its own swap count (1 after `store`), so a
//! pager that swaps in one page of a large folio drops just that page's slot. When no
//! contiguous range of that order is free, `store` fails with [`StoreError::NoSpace`] and the
//! pager splits the folio and retries smaller (the kernel's `swpout_fallback`).
//!
//! Locking: none here. Implementations are called from SIGBUS handlers and reclaim in any
//! thread at once, so they keep the fault-path contract of `docs/design.md` ("Deadlock
//! freedom"): no allocator call in steady state, and no lock held while touching managed
//! memory or calling the allocator (the engine's locks are `uswap::sync::Mutex`es of the
//! classes that contract allows; `tests/contract.rs` counts them).

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
    /// A page read ahead was not read: its read would have been a wait of its own.
    #[error("read ahead skipped")]
    Skipped,
    /// Any other engine error.
    #[error("{0}")]
    Other(String),
}

/// One page of [`PageStore::load_pages`].
pub struct PageLoad<'a> {
    /// The page's entry (a 4 KiB stored object; the caller holds its reference, kept).
    pub entry: u64,
    /// Where its 4 KiB go.
    pub out: &'a mut [u8],
    /// Read ahead, not asked for: the store may skip it ([`StoreError::Skipped`]).
    pub ahead: bool,
    /// The outcome, set by `load_pages`.
    pub result: Result<(), StoreError>,
}

/// A store of swapped-out folios. Implementations must be callable from a SIGBUS handler:
/// no heap allocation and no lock that a thread interrupted by the handler may hold (that is,
/// no lock held across managed memory). `store`'s `data` may be managed memory (the folio
/// being evicted, in SIGBUS mode): read it with no lock held. `load`'s `out` never is.
pub trait PageStore: Send + Sync {
    /// Store one folio (`data.len() == 4096 << order`, `order <= 9`) for `group`. Returns the
    /// first of `2^order` contiguous entries, each with swap count 1.
    fn store(&self, group: u16, data: &[u8]) -> Result<u64, StoreError>;
    /// Load `out.len() / 4096` pages from `entry` (aligned to that size): a whole stored folio,
    /// or a naturally aligned part of one (the caller holds references on those slots).
    fn load(&self, entry: u64, out: &mut [u8]) -> Result<(), StoreError>;
    /// Load several 4 KiB pages at once (a readahead window), each as [`PageStore::load`]
    /// would; an `ahead` one may be skipped. Default: `load` each.
    fn load_pages(&self, reqs: &mut [PageLoad<'_>]) {
        for r in reqs {
            r.result = self.load(r.entry, r.out);
        }
    }
    /// Whether the data of `entry` lies on a tier outside RAM (a file), where a swap-in waits
    /// for a device: what readahead is for. Lock-free. Default: false.
    fn on_file(&self, entry: u64) -> bool {
        let _ = entry;
        false
    }
    /// Add one reference to each of `nr` slots from `entry`.
    fn dup(&self, entry: u64, nr: u32) -> Result<(), StoreError>;
    /// Drop one reference from each of `nr` slots from `entry`; the data is freed when no slot
    /// of its folio is referenced.
    fn put(&self, entry: u64, nr: u32);
    /// Bytes of memory holding stored data (charged to the group with its resident pages).
    fn pool_bytes(&self) -> u64;
    /// The store's counters for statistics ([`StoreStats`]).
    fn stats(&self) -> StoreStats;
    /// Keep the RAM holding `group`'s stored data at most about `bytes`, sending what does not
    /// fit to a tier outside RAM (a file). Returns false, changing nothing, when every tier is
    /// in RAM: the store then grows with the data and the pager's limit holds only while the
    /// data compresses below it.
    fn limit_ram(&self, group: u16, bytes: u64) -> bool {
        let _ = (group, bytes);
        false
    }
    /// Move up to `max_pages` pages of the coldest stored data out of RAM to a tier outside
    /// it, while the RAM the store holds is over `bytes` (after [`PageStore::limit_ram`] was
    /// lowered: new data then goes to the file, this moves what is already there). Not on the
    /// fault path: it does I/O. Returns the pages moved (0 when nothing can move).
    fn shrink_ram(&self, bytes: u64, max_pages: u64) -> u64 {
        let _ = (bytes, max_pages);
        0
    }
    /// RAM bytes per stored page of `group`, on average (`None` when unknown). The pager keeps
    /// clean pages' entries only while this is under half a page: a kept copy then costs less
    /// than half of the page it saves writing (and nothing when it lives on a file tier).
    fn ram_per_page(&self, group: u16) -> Option<u64> {
        let _ = group;
        None
    }
    /// True when data can move between a tier in RAM and one outside it (a pool and a file):
    /// the pager then runs [`PageStore::move_by_use`] in the background.
    fn tiers_movable(&self) -> bool {
        false
    }
    /// What the split of the limit between resident pages and the pool is decided from
    /// (`crate::pool_share`): swap-ins from the pool and from the file with their time, and
    /// what each tier holds. `None` without both a pool and a file.
    fn tier_refaults(&self) -> Option<TierRefaults> {
        None
    }
    /// Tiers both ways, up to `max_pages` each: write back to the tier outside RAM what stayed
    /// in the pool unused for `age_ms` (0: none), and promote into the pool what was read back
    /// from the outside tier since it got there, while the RAM the store holds is under
    /// `ram_cap` (0: none). Returns (pages written back, pages promoted). Not on the fault
    /// path: it does I/O. Default: nothing.
    fn move_by_use(&self, age_ms: u64, ram_cap: u64, max_pages: u64) -> (u64, u64) {
        let _ = (age_ms, ram_cap, max_pages);
        (0, 0)
    }
    /// True when some tier has a secondary algorithm to recompress idle data with (a pool
    /// tier's `recomp=`): the pager then runs its background recompressor (`recomp`).
    fn recompress_configured(&self) -> bool {
        false
    }
    /// One background recompression pass (zram's `recompress type=idle` then `echo all >
    /// idle`): in every tier with a secondary algorithm, re-encode what stayed idle since the
    /// previous pass, compact if anything moved, and mark everything idle again. Never called
    /// on the fault path (it allocates and takes pool locks for long stretches). Default:
    /// nothing to do.
    fn recompress_idle(&self) -> RecompressPass {
        RecompressPass::default()
    }
    /// One step of sharing the store's storage with `fork` relatives
    /// ([`uswap::vswap::Engine::fork_share`]: `Prepare` false means the child needs a copy of
    /// the store's files, `Child` false that it cannot use the store). Default: true.
    fn fork_share(&self, step: uswap::backend::ShareStep) -> bool {
        let _ = step;
        true
    }
    /// Tier `t`'s name and store failures so far ([`uswap::fails`]); `None` past the last
    /// tier. Default: a store with no tiers of its own.
    fn tier_fails(&self, t: usize) -> Option<(String, uswap::fails::FailCounts)> {
        let _ = t;
        None
    }
    /// Pages no tier took (every one declined or failed), so far.
    fn rejected_pages(&self) -> u64 {
        0
    }
    /// Store failures of every tier so far (what [`PageStore::tier_fails`] counts), summed:
    /// cheap, for noticing one.
    fn tier_fails_total(&self) -> u64 {
        0
    }
}

/// Cumulative swap-in counters of the pool and the file tier, and what they hold now
/// ([`PageStore::tier_refaults`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TierRefaults {
    /// Pages swapped in from the pool, and the nanoseconds spent decoding them.
    pub pool_in: u64,
    pub pool_in_ns: u64,
    /// Pages swapped in from the file, and the nanoseconds spent reading them.
    pub file_in: u64,
    pub file_in_ns: u64,
    /// Bytes of original data the pool holds, and the RAM it takes.
    pub pool_data: u64,
    pub pool_ram: u64,
    /// Bytes of data the file holds.
    pub file_data: u64,
}

/// What one [`PageStore::recompress_idle`] pass did (summed over the tiers it went through).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RecompressPass {
    /// Objects re-encoded and moved to a smaller slot (zram's `num_recompressed`).
    pub objects: u64,
    /// 4 KiB pages of original data in them.
    pub pages: u64,
    /// Objects tried and left as they were (no smaller slot, or the move was refused).
    pub kept: u64,
    /// Bytes of slots given back (old slot size minus new).
    pub saved_bytes: u64,
    /// Bytes released by the compaction that followed.
    pub compacted_bytes: u64,
}

impl<T: PageStore + ?Sized> PageStore for std::sync::Arc<T> {
    fn store(&self, group: u16, data: &[u8]) -> Result<u64, StoreError> {
        (**self).store(group, data)
    }
    fn load(&self, entry: u64, out: &mut [u8]) -> Result<(), StoreError> {
        (**self).load(entry, out)
    }
    fn load_pages(&self, reqs: &mut [PageLoad<'_>]) {
        (**self).load_pages(reqs)
    }
    fn on_file(&self, entry: u64) -> bool {
        (**self).on_file(entry)
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
    fn stats(&self) -> StoreStats {
        (**self).stats()
    }
    fn limit_ram(&self, group: u16, bytes: u64) -> bool {
        (**self).limit_ram(group, bytes)
    }
    fn shrink_ram(&self, bytes: u64, max_pages: u64) -> u64 {
        (**self).shrink_ram(bytes, max_pages)
    }
    fn ram_per_page(&self, group: u16) -> Option<u64> {
        (**self).ram_per_page(group)
    }
    fn recompress_configured(&self) -> bool {
        (**self).recompress_configured()
    }
    fn tiers_movable(&self) -> bool {
        (**self).tiers_movable()
    }
    fn tier_refaults(&self) -> Option<TierRefaults> {
        (**self).tier_refaults()
    }
    fn move_by_use(&self, age_ms: u64, ram_cap: u64, max_pages: u64) -> (u64, u64) {
        (**self).move_by_use(age_ms, ram_cap, max_pages)
    }
    fn recompress_idle(&self) -> RecompressPass {
        (**self).recompress_idle()
    }
    fn fork_share(&self, step: uswap::backend::ShareStep) -> bool {
        (**self).fork_share(step)
    }
    fn tier_fails(&self, t: usize) -> Option<(String, uswap::fails::FailCounts)> {
        (**self).tier_fails(t)
    }
    fn rejected_pages(&self) -> u64 {
        (**self).rejected_pages()
    }
    fn tier_fails_total(&self) -> u64 {
        (**self).tier_fails_total()
    }
}

/// A store's counters, as [`crate::PagerStats::engine`] carries them into the statistics
/// record (`crate::record`): the engine's event counters under the kernel's names, its
/// group's usage and each tier's. A store other than the engine (a test's) fills what it has.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct StoreStats {
    /// Which store: `uswap` (the engine) or a test store's name.
    pub engine: String,
    /// The engine's counters (`pswpout`, `zswpout`, `swpout_zero`, ...), flattened into this
    /// object as the kernel's `/proc/vmstat` lists them.
    #[serde(flatten)]
    pub counters: uswap::StatsSnapshot,
    /// The pager's group in the engine: pages held, pool bytes and the limits on them.
    pub group: Option<uswap::GroupUsage>,
    /// One entry per tier, in the configured order (the tiers string names them).
    pub tiers: Vec<TierStats>,
    /// Pages the store holds for this pager (the group's `swapped_pages`).
    pub stored_pages: u64,
}

/// One tier's occupancy and store failures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct TierStats {
    /// Pages, bytes, limit and sharing of the tier (flattened: `stored_pages`, `used_bytes`,
    /// ...).
    #[serde(flatten)]
    pub usage: uswap::backend::Usage,
    /// Its failed stores by kind.
    pub failures: TierFailures,
}

/// A tier's failed stores by kind (`uswap::fails::FailKind`, under its names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct TierFailures {
    /// ENOSPC, EDQUOT.
    pub nospace: u64,
    /// EROFS, EACCES, EPERM.
    pub readonly: u64,
    /// Any other I/O error.
    pub io: u64,
    /// A swap file with no free slot.
    pub full: u64,
    /// The last failure's errno (0: none).
    pub errno: i32,
}

impl TierFailures {
    /// Failures of every kind.
    pub fn total(&self) -> u64 {
        self.nospace + self.readonly + self.io + self.full
    }
}

impl From<uswap::fails::FailCounts> for TierFailures {
    fn from(f: uswap::fails::FailCounts) -> Self {
        use uswap::fails::FailKind;
        TierFailures {
            nospace: f.get(FailKind::NoSpace),
            readonly: f.get(FailKind::ReadOnly),
            io: f.get(FailKind::Io),
            full: f.get(FailKind::Full),
            errno: f.errno,
        }
    }
}

/// The uswap engine ([`uswap::vswap::Engine`]) as a [`PageStore`]: virtual swap entries over
/// the configured tiers (zero elision, compressed pool, swap file). This is the store of
/// [`Pager::new`](crate::Pager::new).
pub(crate) struct EngineStore {
    engine: uswap::vswap::Engine,
    group: u16,
    /// Some tier is not in RAM (a file): the pool can be capped.
    has_disk: bool,
    /// The first compressed-pool tier and the first file tier: where [`PageStore::shrink_ram`]
    /// writes back from and to.
    writeback: Option<(usize, usize)>,
    /// Indexes of the pool tiers with a secondary algorithm (`recomp=`).
    recomp_tiers: Vec<usize>,
}

impl EngineStore {
    /// Build the engine from a tiers string (`"zero,lz4"`, `"zero,lz4,file:/var/tmp"`, ...).
    pub fn new(tiers: &str, virtual_slots: u64, group: u16) -> Result<EngineStore, StoreError> {
        let tc = uswap::config::TiersConfig::parse(tiers).map_err(|e| StoreError::Other(e.to_string()))?;
        let has_disk = tc.tiers.iter().any(|t| matches!(t, uswap::config::TierSpec::File(_)));
        let recomp_tiers = (tc.tiers.iter().enumerate())
            .filter(|(_, t)| matches!(t, uswap::config::TierSpec::Pool(p) if p.recompress.is_some()))
            .map(|(i, _)| i)
            .collect();
        let backends = tc.build().map_err(|e| StoreError::Other(e.to_string()))?;
        let first = |k| backends.iter().position(|b| b.kind() == k);
        let writeback = first(uswap::backend::TierKind::Pool).zip(first(uswap::backend::TierKind::File));
        let cfg = uswap::vswap::EngineConfig {
            virtual_slots: virtual_slots.max(512),
            zero_elision: tc.zero_elision,
            nr_groups: (usize::from(group) + 1).max(64),
            ..Default::default()
        };
        let engine = uswap::vswap::Engine::new(cfg, backends).map_err(|e| StoreError::Other(e.to_string()))?;
        let s = EngineStore { engine, group, has_disk, writeback, recomp_tiers };
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
    fn load_pages(&self, reqs: &mut [PageLoad<'_>]) {
        let nb = reqs.len().min(uswap::SWAP_IN_BATCH);
        let (batch, rest) = reqs.split_at_mut(nb);
        let results = {
            let mut ins: [uswap::PageIn<'_>; uswap::SWAP_IN_BATCH] = std::array::from_fn(|_| uswap::PageIn {
                entry: uswap::SwapEntry(0),
                out: &mut [],
                ahead: true,
                result: Ok(()),
            });
            for (i, r) in ins.iter_mut().zip(batch.iter_mut()) {
                *i = uswap::PageIn {
                    entry: uswap::SwapEntry(r.entry),
                    out: &mut *r.out,
                    ahead: r.ahead,
                    result: Ok(()),
                };
            }
            self.engine.swap_in_many(&mut ins[..nb]);
            // Taken out, so `batch` is free of the loans in `ins` again.
            ins.map(|i| i.result)
        };
        for (r, res) in batch.iter_mut().zip(results) {
            r.result = match res {
                Ok(()) => Ok(()),
                Err(uswap::SwapError::Tier(uswap::TierError::Reject)) => Err(StoreError::Skipped),
                Err(e) => Err(engine_err(e, r.entry)),
            };
        }
        for r in rest {
            r.result = self.load(r.entry, r.out);
        }
    }
    fn on_file(&self, entry: u64) -> bool {
        self.engine.tier_kind(uswap::SwapEntry(entry)) == Some(uswap::TierKind::File)
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
    fn shrink_ram(&self, bytes: u64, max_pages: u64) -> u64 {
        let Some((from, to)) = self.writeback else { return 0 };
        if self.engine.ram_bytes() <= bytes {
            return 0;
        }
        // Second-chance writeback, as the zswap shrinker: the coldest objects first.
        self.engine.writeback(from, to, max_pages).unwrap_or(0)
    }
    fn recompress_configured(&self) -> bool {
        !self.recomp_tiers.is_empty()
    }
    fn fork_share(&self, step: uswap::backend::ShareStep) -> bool {
        self.engine.fork_share(step)
    }
    fn tier_fails(&self, t: usize) -> Option<(String, uswap::fails::FailCounts)> {
        Some((self.engine.tier_name(t).ok()?, self.engine.tier_fails(t).ok()?))
    }
    fn rejected_pages(&self) -> u64 {
        self.engine.stats().get(uswap::stats::Event::SwpoutRejected)
    }
    fn tier_fails_total(&self) -> u64 {
        (0..self.engine.nr_tiers()).filter_map(|t| self.engine.tier_fails(t).ok()).map(|f| f.total()).sum()
    }
    fn tiers_movable(&self) -> bool {
        self.writeback.is_some()
    }
    fn tier_refaults(&self) -> Option<TierRefaults> {
        let (pool, file) = self.writeback?;
        let s = self.engine.stats().snapshot();
        let (p, f) = (self.engine.tier_usage(pool).ok()?, self.engine.tier_usage(file).ok()?);
        Some(TierRefaults {
            pool_in: s.zswpin,
            pool_in_ns: s.zswpin_ns,
            file_in: s.pswpin,
            file_in_ns: s.pswpin_ns,
            pool_data: p.stored_pages * 4096,
            pool_ram: self.engine.ram_bytes(),
            file_data: f.stored_pages * 4096,
        })
    }
    fn move_by_use(&self, age_ms: u64, ram_cap: u64, max_pages: u64) -> (u64, u64) {
        let Some((pool, file)) = self.writeback else { return (0, 0) };
        let age = std::time::Duration::from_millis(age_ms);
        let written =
            if age_ms > 0 { self.engine.writeback_older_than(pool, file, age, max_pages).unwrap_or(0) } else { 0 };
        let promoted =
            if self.engine.ram_bytes() < ram_cap { self.engine.promote(file, pool, max_pages).unwrap_or(0) } else { 0 };
        (written, promoted)
    }
    fn recompress_idle(&self) -> RecompressPass {
        let mut out = RecompressPass::default();
        for &t in &self.recomp_tiers {
            // Idle since the previous pass's mark (the first pass finds nothing marked).
            let Ok(r) = self.engine.recompress_tier(t, true) else { continue };
            out.objects += r.objects;
            out.pages += r.pages;
            out.kept += r.kept;
            out.saved_bytes += r.saved_bytes;
            if r.objects > 0 {
                // Moves leave holes in the zspages they came from: fill them.
                out.compacted_bytes += self.engine.compact_tier(t).unwrap_or(0);
            }
            let _ = self.engine.mark_idle_tier(t);
        }
        out
    }
    fn stats(&self) -> StoreStats {
        let tiers = (0..self.engine.nr_tiers())
            .filter_map(|t| Some((self.engine.tier_usage(t).ok()?, self.engine.tier_fails(t).ok()?)))
            .map(|(usage, f)| TierStats { usage, failures: TierFailures::from(f) })
            .collect();
        let group = self.engine.groups().usage(self.group).ok();
        StoreStats {
            engine: "uswap".into(),
            counters: self.engine.stats().snapshot(),
            stored_pages: group.map_or(0, |g| g.swapped_pages),
            group,
            tiers,
        }
    }
}
