//! # uswap-pager: a userfaultfd pager
//!
//! A [`Pager`] manages [`Region`]s of anonymous memory under a resident limit, as a memory
//! cgroup does with swap: when the pages it keeps resident plus the memory of its compressed
//! pool exceed `limit_bytes`, cold folios are evicted to a [`PageStore`] and come back on the
//! next access. Code using a region sees ordinary memory.
//!
//! Design (the costs behind these choices are measured by `uswap bench`, results in `BENCHMARKS.md`):
//! - **Faults are resolved in the faulting thread** ([`FaultMode::Sigbus`], the default for
//!   programs that use the API). The userfaultfd is opened with `UFFD_FEATURE_SIGBUS`, so a
//!   missing or write-protected page raises SIGBUS in the thread that touched it; the handler
//!   (`fault`) swaps the folio in with `UFFDIO_COPY` and returns, and the instruction is
//!   retried, with no hand-off to another thread. A fault taken inside a system call then
//!   fails it with `EFAULT`, so buffers handed to the kernel go through [`syscall`]'s
//!   prefault-and-retry wrappers.
//! - **Unmodified programs use [`FaultMode::Thread`]** (`uswap run`): a handler thread reads the
//!   uffd and resolves faults while the faulting thread sleeps in the kernel, so a fault inside
//!   any system call blocks instead of failing; the thread polls for a short while after a fault
//!   so that a thrashing program's next fault finds it awake, and it moves to the CPU of the
//!   thread whose faults it serves, so that a hand-off is a context switch rather than a
//!   cross-CPU wake-up (`cpu`).
//! - **Reclaim is direct**, in the faulting thread, in batches (`reclaim`): folios are
//!   write-protected, copied out, and dropped with one `process_madvise(MADV_DONTNEED)` per
//!   batch. A write that races an eviction takes a write-protect fault and waits.
//! - **Replacement**: kernel-style active and inactive lists. An evicted folio first goes to
//!   the inactive list, unmapped but kept uncompressed in the swap cache; a refault there is
//!   cheap and promotes it back (workingset detection). Only folios that age out of the
//!   inactive list are compressed. A folio that comes back soon after it left (a short
//!   refault distance) is mapped onto a protected list, which gives its oldest folios back to
//!   the active list only when it holds most of the resident pages: user space sees no
//!   accessed bits, so a page's refaults are what tell a hot page from a cold one.
//! - **Clean pages keep their swap entry**: a page swapped in by a read is mapped
//!   write-protected and keeps its entry, as the kernel's swap cache keeps a clean folio's slot;
//!   evicting it again is just the `MADV_DONTNEED`, and the first write frees the entry. An
//!   adaptive policy turns this off while most such pages get written (`fault::KeepClean`).
//! - **Large folios**: a region pages in 4 KiB, 64 KiB or 2 MiB folios; a folio is stored whole
//!   (one compression unit, one `UFFDIO_COPY`) and split when the store has no contiguous slots.
//!
//! ```
//! use uswap_pager::{Pager, PagerConfig, PagerError};
//! let pager = match Pager::new(PagerConfig { limit_bytes: 16 << 20, ..Default::default() }) {
//!     Ok(p) => p,
//!     Err(PagerError::Unavailable(why)) => {
//!         eprintln!("skipped: {why}"); // not root and userfaultfd not permitted
//!         return;
//!     }
//!     Err(e) => panic!("{e}"),
//! };
//! let mut r = pager.map(64 << 20).unwrap();   // 4x the limit
//! r.as_mut_slice().fill(7);                    // pages out as it goes
//! assert!(r.as_slice().iter().step_by(4096).all(|&b| b == 7)); // and back in
//! assert!(pager.stats().evicted_pages > 0);
//! println!("{}", serde_json::to_string(&pager.stats()).unwrap());
//! ```
//! (`examples/basic.rs` runs the same and explains why it skips when userfaultfd is not
//! permitted.)

#![deny(missing_docs)]
#![expect(
    clippy::needless_range_loop,
    reason = "parallel per-page arrays (claimed[i], old[i], words[i]) read clearer with index loops"
)]

mod arena;
mod bufs;
mod charge;
mod cpu;
pub mod exe;
mod fault;
mod forkhold;
mod forkserve;
mod handle;
pub mod launch;
pub mod own;
mod page;
mod pool_share;
mod reclaim;
mod recomp;
pub mod record;
mod region;
mod slots;
mod stall;
mod stats;
mod store;
mod sync;
mod sys;
pub mod syscall;
pub mod tree;
pub mod uffd;
mod vma;
mod words;

/// The bottom layer's lock-free kernels, public only under `--cfg loom`, for the loom models
/// (`tests/loom_claim.rs`).
#[cfg(loom)]
#[doc(hidden)]
pub mod loom_api {
    pub use crate::page::{Claim, PageSet, PageWord};
    pub use crate::slots::Slots;
}

pub use fault::{sigbus_outside_regions, Outside};
pub use forkserve::{fault_from_fork_parent, ForkChildFault};
pub use handle::Region;
pub use region::manages as manages_page;
pub use region::overlaps as overlaps_region;
pub use stats::{now_ns, PagerStats};
pub use store::{PageLoad, PageStore, RecompressPass, StoreError, StoreStats, TierFailures, TierStats};
pub use sys::{copy_from_self, SignalsBlocked};
pub use syscall::prefault;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Size of a base page.
pub const PAGE_SIZE: usize = 4096;

/// When a large folio swaps in whole, like the kernel's `swapin_enabled`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum SwapinPolicy {
    /// Always swap a large folio in whole.
    Always,
    /// Never: swap in only the faulting 4 KiB page (`swpin_fallback`).
    Never,
    /// Whole only in regions marked with [`Region::advise_hugepage`].
    Madvise,
}

/// Where faults are resolved.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum FaultMode {
    /// In the faulting thread, from a SIGBUS handler (`UFFD_FEATURE_SIGBUS`). Fastest here.
    Sigbus,
    /// By a handler thread reading fault messages (the classic design, for comparison).
    Thread,
}

/// Who reclaims when the group is over its limit.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum ReclaimMode {
    /// The faulting thread, before it maps the new folio (memcg direct reclaim).
    Direct,
    /// A background thread keeps usage under a low watermark (the faulting thread still
    /// reclaims directly when usage reaches the limit).
    Background,
}

/// Replacement policy.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Replacement {
    /// First in, first out straight to the store (umap's policy; for comparison).
    Fifo,
    /// Active and inactive lists with an uncompressed swap cache for the inactive list.
    TwoList,
}

/// The compressed pool's cap as a share of the limit, in percent, when a tier outside RAM takes
/// the rest: [`PagerConfig::pool_percent`]'s default, for a pager an embedder configures.
/// `uswap run` gives its programs a smaller share ([`launch::RUN_POOL_PERCENT`]); a pool tier's
/// own size is a share of RAM (`uswap::config::DEFAULT_POOL_PERCENT_OF_RAM`).
pub const DEFAULT_POOL_PERCENT_OF_LIMIT: u8 = 50;

/// Pager configuration.
#[derive(Clone, Debug)]
pub struct PagerConfig {
    /// Resident limit in bytes: resident pages + swap cache + compressed pool.
    pub limit_bytes: u64,
    /// Folio size of new regions: 4096, 65536 or 2 MiB.
    pub folio_size: usize,
    /// Storage tiers for the uswap engine, e.g. `"zero,lz4"` or `"zero,lz4,file:/var/tmp"`
    /// (parsed by `uswap::config`). Unused by [`Pager::with_store`] with a store of its own.
    pub tiers: String,
    /// Large-folio swap-in policy.
    pub swapin: SwapinPolicy,
    /// Where faults are resolved.
    pub fault_mode: FaultMode,
    /// Who reclaims.
    pub reclaim: ReclaimMode,
    /// Replacement policy.
    pub replacement: Replacement,
    /// Share of the limit the inactive list (swap cache) may hold, in percent.
    pub inactive_percent: u8,
    /// Share of the limit the compressed pool may hold when a tier outside RAM takes the rest,
    /// in percent: where it starts, with `pool_adapt`.
    pub pool_percent: u8,
    /// Let the pool's share follow the workload (`pool_share`) instead of staying at
    /// `pool_percent` (off by default: it loses on some programs, see `pool_share`).
    pub pool_adapt: bool,
    /// Pages per reclaim batch (one `process_madvise` per batch).
    pub reclaim_batch: usize,
    /// Swap-in readahead window for 4 KiB folios, in pages (0 = off; kernel-like growth on
    /// sequential faults up to this).
    pub readahead_pages: usize,
    /// Readahead window of a random 4 KiB swap-in whose data is on a tier outside RAM (a
    /// file), in pages (at most `uswap::SWAP_IN_BATCH`; 0 or 1 = off): the window's other
    /// stored 4 KiB pages that come with the same wait go to the swap cache, clean, while
    /// faults take enough of them (the kernel's `swap_vma_readahead`).
    pub file_readahead_pages: usize,
    /// Adapt granularity per region: sequential faults take the whole folio, random faults in
    /// large-folio regions take only the 4 KiB page.
    pub adaptive: bool,
    /// Virtual swap slots of the engine's store (4 KiB each).
    pub swap_slots: u64,
    /// Group id charged for the pages (the memcg analogue).
    pub group: u16,
    /// Record the latency of every fault (p50/p99 in [`PagerStats`]).
    pub record_latency: bool,
    /// Deliver `UFFD_EVENT_REMOVE` (madvise(DONTNEED) by the program). Off by default: every
    /// madvise on a region, the pager's own evictions included, then waits for the event
    /// thread (a cross-CPU round trip per range).
    pub event_remove: bool,
    /// Keep the swap entry of a page swapped in by a read fault and map it write-protected, so
    /// that evicting it again writes nothing (see `fault::KeepClean`; both fault modes).
    pub keep_clean: bool,
    /// Period of background recompression in ms (0 = off): every period, a low-priority
    /// thread recompresses the pool objects idle since the previous pass with the tier's
    /// secondary algorithm (`recomp=zstd`; nothing runs without one). See `recomp`.
    pub recompress_ms: u64,
    /// CPU budget of background recompression: at most this share of one core, on average,
    /// in percent (1..=100).
    pub recompress_cpu_percent: u8,
    /// Tiers both ways, run by the same background thread every `recompress_ms` when the store
    /// has a pool and a file: pool objects neither stored nor swapped in for this long are
    /// written back to the file (proactive writeback by age, as the zswap proposal; 0 = off).
    pub writeback_age_ms: u64,
    /// ... and file objects swapped in since they got there (refaulted) are promoted back into
    /// the pool while it is under its cap.
    pub promote: bool,
    /// In thread fault mode, run the event thread on the CPU of the thread whose faults it
    /// serves and the background threads on the other CPUs (see `cpu`).
    pub follow_cpu: bool,
    /// With `follow_cpu`: pin the followed thread beside the event thread too (the `cpu`
    /// module), while it has the faults to itself and no other process of the tree is busy.
    pub pin_thread: bool,
    /// Start the background reclaimer and the recompressor only when
    /// [`Pager::start_background`] is called (the LD_PRELOAD library's scanner does, once the
    /// charge reaches half the limit), not with the pager: most processes of a shell script or
    /// a build never come near their limit, and each thread costs its start-up (about 0.2 ms
    /// here) at every exec and in every fork child. The embedder must start it in time: until
    /// then, a fault over the limit waits up to 20 ms for a reclaimer that is not there. A fork
    /// child that inherits half its limit starts it with its event thread.
    pub lazy_background: bool,
    /// While the store fails (a full or failing swap file, data no tier takes), how long
    /// faults that would map pages over the limit wait for room before they are mapped over
    /// it, in ms; 0 waits for ever (`stall`).
    pub full_wait_ms: u64,
}

impl Default for PagerConfig {
    fn default() -> Self {
        PagerConfig {
            limit_bytes: 256 << 20,
            folio_size: 65536,
            tiers: "zero,lz4,file:/var/tmp".into(),
            swapin: SwapinPolicy::Always,
            fault_mode: FaultMode::Sigbus,
            reclaim: ReclaimMode::Direct,
            replacement: Replacement::TwoList,
            inactive_percent: 25,
            pool_percent: DEFAULT_POOL_PERCENT_OF_LIMIT,
            pool_adapt: false,
            reclaim_batch: 256,
            readahead_pages: 8,
            file_readahead_pages: 16,
            adaptive: true,
            swap_slots: 1 << 24,
            group: 0,
            record_latency: false,
            event_remove: false,
            keep_clean: true,
            recompress_ms: 5000,
            recompress_cpu_percent: 5,
            writeback_age_ms: 60_000,
            promote: true,
            follow_cpu: true,
            pin_thread: true,
            lazy_background: false,
            full_wait_ms: 10_000,
        }
    }
}

/// Errors of the pager.
#[derive(Debug, thiserror::Error)]
pub enum PagerError {
    /// userfaultfd is not available or not permitted (the message says how to permit it).
    #[error("{0}")]
    Unavailable(String),
    /// Bad configuration.
    #[error("invalid pager configuration: {0}")]
    Config(String),
    /// A system call failed.
    #[error("{0}")]
    Os(String),
    /// Not now: try again later (an adoption met the pager's own mappings in flight, or a range
    /// that changed since the maps were read).
    #[error("busy: {0}")]
    Busy(String),
}

/// A fork child's pager threads, started by [`Pager::start_threads_in_fork_child`] and waiting
/// for [`Pager::restart_in_fork_child`]. Dropped without that, they wait forever: the child
/// cannot go on without its pager anyway (the preload library's handler exits it).
#[must_use = "the threads wait until restart_in_fork_child is given this"]
pub struct ForkChildThreads {
    gate: Arc<forkserve::StartGate>,
}

/// A pager: one userfaultfd, one store, one limit, any number of regions.
pub struct Pager {
    pub(crate) cfg: PagerConfig,
    pub(crate) uffd: uffd::Uffd,
    pub(crate) store: Box<dyn PageStore>,
    pub(crate) cache: arena::Arena,
    /// The resident page count, the limit in force and the pool's share (see
    /// [`charge::Charge`]).
    pub(crate) charge: charge::Charge,
    /// The reclaim lists and the workingset state (see [`reclaim::Lru`]).
    pub(crate) lru: reclaim::Lru,
    pub(crate) counters: stats::Counters,
    pub(crate) bufs: bufs::BufPool,
    pub(crate) stop: AtomicBool,
    /// Where the event thread and the background threads run (thread fault mode).
    pub(crate) place: cpu::Placement,
    /// What the event thread shares with the threads that wait for it (see
    /// [`fault::EventState`]).
    pub(crate) ev: fault::EventState,
    /// The background reclaimer's futex word and state (see [`reclaim::Kswapd`]).
    pub(crate) kswapd: reclaim::Kswapd,
    /// The recompressor's futex word and state (see [`recomp::Recomp`]).
    pub(crate) recomp: recomp::Recomp,
    pub(crate) keep: fault::KeepClean,
    /// Whether readahead from a tier outside RAM pays ([`fault::AheadTracker`]).
    pub(crate) ahead: fault::AheadTracker,
    /// Eviction batches (off the stack of the thread that reclaims).
    pub(crate) batches: reclaim::BatchPool,
    /// Serializes adoption, remap and retirement of adopted regions ([`vma`]).
    pub(crate) vma_lock: sys::YieldLock,
    /// [`Pager::quiesce`] asks the pager's threads to hold no page (before a fork).
    pub(crate) pause: AtomicBool,
    /// The event thread's fork hold ([`Pager::hold_for_fork`]).
    pub(crate) hold: forkhold::ForkHold,
    /// The background threads run (see [`PagerConfig::lazy_background`]).
    background: AtomicBool,
    /// Serving a fork child's faults until its own pager runs.
    pub(crate) fork_serve: forkserve::ForkServe,
    /// Whether the store fails, and since when ([`stall`]).
    pub(crate) health: stall::StoreHealth,
    /// Some resident pages are shared copy-on-write with a fork relative
    /// ([`Pager::set_cow_shared`]): reclaim prefers folios mapped here alone.
    pub(crate) cow_shared: AtomicBool,
    /// `/proc/self/pagemap` for that preference, opened by the first reclaim that needs it
    /// (a fork child opens its own).
    pub(crate) pagemap: uswap::tier::pages::ProcessFd,
    /// The pager's thread handles, locked only to start and stop threads
    /// ([`Pager::start_background`], whose caller excludes a fork, and `Drop`), so that a
    /// fork child does not inherit it held.
    threads: std::sync::Mutex<Vec<own::Thread<()>>>,
    /// Kernel thread ids of the pager's running threads (0 = free slot), each written by its
    /// thread as it starts: [`Pager::threads_cpu_ns`] reads their CPU clocks without the
    /// `threads` lock, which a fork could otherwise copy held.
    thread_tids: [std::sync::atomic::AtomicI32; MAX_THREADS],
}

/// The pager's threads at most: the event thread, the background reclaimer, the recompressor.
const MAX_THREADS: usize = 3;

// SAFETY: all shared state is atomic or internally synchronized.
unsafe impl Sync for Pager {}
// SAFETY: as above.
unsafe impl Send for Pager {}

/// Start this process's `uswap-procfs` thread (`uswap::procfs`) as a pager thread, so that its
/// stack is the library's own memory. If it cannot run (no table of its own for it), the file
/// work runs on the threads that ask for it, as it did before.
fn start_procfs() {
    let _ = uswap::procfs::start(|work| {
        let t = own::spawn("uswap-procfs", Some(256 << 10), move || {
            sys::block_async_signals_forever();
            work()
        })?;
        // It serves until the process exits: never joined.
        std::mem::forget(t);
        Ok(())
    });
}

struct PagerPtr(*const Pager);
// SAFETY: the pointer is only dereferenced by threads joined before the pager is freed.
unsafe impl Send for PagerPtr {}

impl Pager {
    /// Create a pager. Fails with [`PagerError::Unavailable`] (naming the ways to permit it)
    /// when this process may not use userfaultfd, and with [`PagerError::Config`] on bad input.
    pub fn new(cfg: PagerConfig) -> Result<Arc<Pager>, PagerError> {
        Self::with_store(cfg, None)
    }

    /// Create a pager over `store`, or with `None` over the uswap engine configured by
    /// `cfg.tiers` (what [`Pager::new`] does). A given store (a test's, for instance) is used as
    /// it is: `cfg.tiers` and `cfg.swap_slots` are ignored. It must be callable from a SIGBUS
    /// handler (see [`PageStore`]).
    pub fn with_store(cfg: PagerConfig, store: Option<Box<dyn PageStore>>) -> Result<Arc<Pager>, PagerError> {
        if ![PAGE_SIZE, 16 * PAGE_SIZE, 512 * PAGE_SIZE].contains(&cfg.folio_size) {
            return Err(PagerError::Config(format!(
                "folio_size must be 4096, 65536 or 2097152, not {}",
                cfg.folio_size
            )));
        }
        if cfg.limit_bytes < 4 * cfg.folio_size as u64 {
            return Err(PagerError::Config(format!(
                "limit_bytes {} is below four folios ({} bytes)",
                cfg.limit_bytes,
                4 * cfg.folio_size
            )));
        }
        // In thread fault mode the thread that reads the uffd never reclaims (reclaim drops
        // pages with madvise, whose REMOVE event only that thread can read): a background
        // reclaimer does, and faults wait for it while the charge is over the limit.
        let mut cfg = cfg;
        if cfg.fault_mode == FaultMode::Thread {
            cfg.reclaim = ReclaimMode::Background;
        }
        if cfg.inactive_percent > 90 {
            return Err(PagerError::Config("inactive_percent must be at most 90".into()));
        }
        let store: Box<dyn PageStore> = match store {
            Some(s) => s,
            None => {
                let s = store::EngineStore::new(&cfg.tiers, cfg.swap_slots, cfg.group)
                    .map_err(|e| PagerError::Config(format!("tiers `{}`: {e}", cfg.tiers)))?;
                s.reserve_swapin(cfg.folio_size.trailing_zeros() as u8 - 12)
                    .map_err(|e| PagerError::Os(e.to_string()))?;
                Box::new(s)
            }
        };
        // resident + swap cache + pool <= limit: with a tier outside RAM, cap the pool at
        // `pool_percent` of the limit so reclaim always has resident pages to evict (without
        // one, the pool grows with the data and the limit holds only while the data
        // compresses below it).
        let pool_capped = store.limit_ram(cfg.group, cfg.limit_bytes * u64::from(cfg.pool_percent) / 100);
        let mut features = uffd::feature::PAGEFAULT_FLAG_WP
            | uffd::feature::EVENT_UNMAP
            | uffd::feature::EVENT_REMAP
            | uffd::feature::EVENT_FORK;
        if cfg.fault_mode == FaultMode::Sigbus {
            features |= uffd::feature::SIGBUS;
        }
        if cfg.event_remove {
            features |= uffd::feature::EVENT_REMOVE;
        }
        // The fork event is optional here: without CAP_SYS_PTRACE a pager still works, but a
        // forked child does not inherit the registration (the runner requires it).
        let uffd = uffd::Uffd::open(
            features & !uffd::feature::EVENT_FORK,
            uffd::feature::THREAD_ID | (features & uffd::feature::EVENT_FORK),
            true,
        )
        .map_err(PagerError::Unavailable)?;
        let os = |e: std::io::Error| PagerError::Os(e.to_string());
        // SAFETY: eventfd with valid flags returns a new fd or -1.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            return Err(PagerError::Os(format!("eventfd: {}", std::io::Error::last_os_error())));
        }
        // SAFETY: a new fd we own.
        let stop_fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(efd) };
        // Folio references on the lists: twice the limit in pages, and room for adopted memory
        // found resident all at once (it is queued before reclaim can catch up).
        let ring_cap = ((cfg.limit_bytes as usize / PAGE_SIZE) * 2 + (1 << 20)).next_power_of_two();
        let pager = Arc::new(Pager {
            cache: arena::Arena::new(64 << 30).map_err(os)?,
            lru: reclaim::Lru::new(ring_cap).map_err(os)?,
            charge: charge::Charge::new(cfg.limit_bytes, pool_capped, cfg.pool_percent),
            counters: stats::Counters::default(),
            bufs: bufs::BufPool::new().map_err(os)?,
            stop: AtomicBool::new(false),
            place: cpu::Placement::new(cfg.follow_cpu && cfg.fault_mode == FaultMode::Thread, cfg.pin_thread),
            ev: fault::EventState::new(stop_fd),
            kswapd: reclaim::Kswapd::default(),
            recomp: recomp::Recomp::default(),
            keep: fault::KeepClean::new(cfg.keep_clean),
            ahead: fault::AheadTracker::new(),
            batches: reclaim::BatchPool::new().map_err(os)?,
            vma_lock: sys::YieldLock::new(),
            pause: AtomicBool::new(false),
            hold: forkhold::ForkHold::default(),
            background: AtomicBool::new(false),
            fork_serve: forkserve::ForkServe::new(),
            health: stall::StoreHealth::default(),
            cow_shared: AtomicBool::new(false),
            pagemap: uswap::tier::pages::ProcessFd::new(),
            threads: std::sync::Mutex::new(Vec::new()),
            thread_tids: Default::default(),
            cfg,
            uffd,
            store,
        });
        if pager.cfg.fault_mode == FaultMode::Sigbus {
            fault::install_sigbus_handler().map_err(PagerError::Os)?;
        }
        let th = pager.spawn_threads(!pager.cfg.lazy_background, None).map_err(os)?;
        *pager.threads.lock().unwrap_or_else(|e| e.into_inner()) = th;
        Ok(pager)
    }

    /// In a fork child, first thing (before [`Pager::fork_child_release`], and for every pager
    /// before any is released): start the child's pager threads while the parent's event thread
    /// still serves this child's faults. A new thread's start touches program memory that may be
    /// swapped out (glibc's `__ctype_init` reads the locale data `setlocale` allocated on the
    /// program's heap), and once the child has a uffd of its own only its event thread serves
    /// it: started after the registration, the event thread would fault on that page and wait
    /// for itself (the child hangs in `start_thread`, and its parent on the atfork pipe). The
    /// threads wait until [`Pager::restart_in_fork_child`], given the
    /// returned [`ForkChildThreads`], has set up the child's pager.
    pub fn start_threads_in_fork_child(&self) -> Result<ForkChildThreads, PagerError> {
        let Ok(mut threads) = self.threads.try_lock() else {
            return Err(PagerError::Os("the pager was being dropped during fork".into()));
        };
        // The parent's threads do not exist here: forget their handles (joining one would be
        // undefined) and their ids.
        std::mem::forget(std::mem::take(&mut *threads));
        for t in &self.thread_tids {
            t.store(0, Ordering::SeqCst);
        }
        let gate = Arc::new(forkserve::StartGate::default());
        // The child inherits its parent's charge: near the limit, it needs its reclaimer now
        // (as the scanner would start it, `start_background`).
        let background = !self.cfg.lazy_background || self.charged_bytes() * 2 >= self.limit();
        *threads = self.spawn_threads(background, Some(&gate)).map_err(|e| PagerError::Os(e.to_string()))?;
        Ok(ForkChildThreads { gate })
    }

    /// In a fork child (before it registers anything): the parent's event thread,
    /// which has served this child's faults from the parent's state since the fork (glibc's
    /// own fork code runs before any atfork handler, and touches pages that may be swapped
    /// out), may stop and close the kernel's copy of the registrations. The child's new uffd
    /// can be registered once it has (`EBUSY` until then).
    pub fn fork_child_release(&self) {
        self.fork_serve.release(self.hold.generation());
    }

    /// Restart the pager in a fork child.
    ///
    /// `fork` copies the pager's memory but none of its threads, and the child's copy of the
    /// uffd descriptor still names the parent's userfaultfd. The caller (the LD_PRELOAD
    /// library's atfork child handler) first puts a new userfaultfd with the same features on
    /// the same descriptor number and registers every region on it again; this then gives the
    /// child a stop eventfd of its own (the inherited one is shared with the parent, whose
    /// `Drop` would wake this child's event thread forever) and starts the child's event
    /// thread, which serves its faults in [`FaultMode::Thread`] and its events in every mode:
    /// the threads [`Pager::start_threads_in_fork_child`] started run from here.
    ///
    /// Call it only in a fork child, with what `start_threads_in_fork_child` returned, before
    /// the child starts threads of its own.
    pub fn restart_in_fork_child(&self, started: ForkChildThreads) -> Result<(), PagerError> {
        let os = |what: &str| PagerError::Os(format!("{what}: {}", std::io::Error::last_os_error()));
        // SAFETY: eventfd with valid flags returns a new fd or -1.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            return Err(os("eventfd"));
        }
        let old = std::os::fd::AsRawFd::as_raw_fd(&self.ev.stop_fd);
        // SAFETY: dup3 replaces our inherited descriptor number with the new eventfd; then the
        // temporary number is closed.
        let r = unsafe { libc::dup3(efd, old, libc::O_CLOEXEC) };
        // SAFETY: closing the temporary descriptor we own.
        unsafe { libc::close(efd) };
        if r < 0 {
            return Err(os("dup3 of the stop eventfd"));
        }
        // Evictions wait for event reads to be processed; reads in flight in the parent at the
        // fork are not ours.
        self.ev.done.store(self.ev.reads.load(Ordering::SeqCst), Ordering::SeqCst);
        self.ev.pending.store(0, Ordering::SeqCst);
        // The parent's event thread held for the fork (`forkhold`): nothing of its was in
        // flight when the address space was copied, unless the hold had to be forced.
        self.hold.reset_in_fork_child().map_err(PagerError::Os)?;
        self.vma_lock.force_unlock();
        self.ev.read_gate.force_unlock();
        words::reset_in_fork_child();
        self.batches.reset_in_fork_child();
        self.bufs.reset_in_fork_child();
        self.place.reset_in_fork_child();
        // The child's statistics are its own from here (a tree's sum counts each event once).
        self.counters.reset();
        self.pause.store(false, Ordering::SeqCst);
        self.ev.quiet.store(true, Ordering::SeqCst);
        self.kswapd.quiet.store(true, Ordering::SeqCst);
        region::enter();
        // SAFETY: between enter and leave.
        unsafe { reclaim::forget_clean(self) };
        region::leave();
        // Pages the parent's event thread filled for this child before it had a uffd of its own
        // (`forkserve`) are present: their words become resident, their entries freed, as a
        // fault that finds its page present does.
        self.fork_serve.reset_in_fork_child();
        self.fork_serve.take_served(self.hold.generation(), |a| fault::settle_present(self, a));
        started.gate.open();
        Ok(())
    }

    /// Start the background reclaimer and the recompressor (when configured) if they are not
    /// running yet ([`PagerConfig::lazy_background`]). Call it where no `fork` can copy the
    /// process meanwhile (the preload's scanner holds the library's lock, as its prepare handler
    /// does).
    pub fn start_background(&self) {
        if self.background.swap(true, Ordering::SeqCst) {
            return;
        }
        let Ok(mut threads) = self.threads.lock() else { return };
        match self.spawn_background(None) {
            Ok(mut th) => threads.append(&mut th),
            Err(_) => self.background.store(false, Ordering::SeqCst),
        }
    }

    /// Start the event thread (and the background reclaimer and recompressor when configured,
    /// with `background`); with a `gate`, each waits for it to open before it does anything.
    fn spawn_threads(
        &self,
        background: bool,
        gate: Option<&Arc<forkserve::StartGate>>,
    ) -> std::io::Result<Vec<own::Thread<()>>> {
        self.background.store(background, Ordering::SeqCst);
        // The descriptors the threads would otherwise open on first use, and the thread that
        // does their file work: opened here, where no number the program is about to use is
        // taken (`uswap::procfs`).
        start_procfs();
        uswap::tier::pages::prime_pidfd();
        self.pagemap.get(|_| sys::open_raw(c"/proc/self/pagemap"));
        let mut th = vec![self.spawn_thread("uswap-uffd", gate, fault::event_loop)?];
        if background {
            th.append(&mut self.spawn_background(gate)?);
        }
        Ok(th)
    }

    /// Start the background reclaimer and the recompressor (when configured); with a `gate`,
    /// each waits for it to open first.
    fn spawn_background(&self, gate: Option<&Arc<forkserve::StartGate>>) -> std::io::Result<Vec<own::Thread<()>>> {
        let mut th = Vec::new();
        if self.cfg.reclaim == ReclaimMode::Background {
            th.push(self.spawn_thread("uswap-kswapd", gate, reclaim::kswapd)?);
        }
        let moves = self.store.tiers_movable() && (self.cfg.writeback_age_ms > 0 || self.cfg.promote);
        if self.cfg.recompress_ms > 0 && (self.store.recompress_configured() || moves) {
            th.push(self.spawn_thread("uswap-recomp", gate, recomp::recompressor)?);
        }
        Ok(th)
    }

    /// Start pager thread `name` running `run` on this pager with asynchronous signals blocked;
    /// with a `gate`, it waits for the gate to open first.
    fn spawn_thread(
        &self,
        name: &str,
        gate: Option<&Arc<forkserve::StartGate>>,
        run: fn(&Pager),
    ) -> std::io::Result<own::Thread<()>> {
        let p = PagerPtr(self as *const Pager);
        let gate = gate.cloned();
        own::spawn(name, None, move || {
            let p = p;
            sys::block_async_signals_forever();
            if let Some(g) = gate {
                g.wait();
            }
            // SAFETY: the pager outlives its threads (joined in Drop).
            let p = unsafe { &*p.0 };
            let tid = cpu::gettid();
            let slot =
                p.thread_tids.iter().find(|t| t.compare_exchange(0, tid, Ordering::SeqCst, Ordering::SeqCst).is_ok());
            run(p);
            if let Some(t) = slot {
                t.store(0, Ordering::SeqCst);
            }
        })
    }

    /// Map a new region of `len` bytes (rounded up to the folio size). The region may be larger
    /// than RAM: only what fits under the limit stays resident.
    pub fn map(self: &Arc<Self>, len: usize) -> Result<Region, PagerError> {
        Region::create(self, len)
    }

    /// Put the program's existing anonymous private mapping `[start, start + len)` under the
    /// pager, where it lies (`vma`): it is registered with the uffd, the pages already present
    /// count as resident and join the active list, and parts already managed are skipped.
    /// Returns the bytes newly managed. Fails when no part could be registered (not an
    /// anonymous private mapping, unmapped meanwhile, no free region slot).
    ///
    /// The caller must make sure the range is not memory a pager thread uses (see [`own`]).
    pub fn adopt(&self, start: usize, len: usize) -> Result<usize, PagerError> {
        let _signals = sys::SignalsBlocked::new();
        vma::adopt(self, start, len)
    }

    /// The program released `[start, start + len)` (`madvise(MADV_DONTNEED/FREE/REMOVE)`, about
    /// to be applied): the pages' swap entries and cache copies are freed and they read as zero
    /// from then on. Call before the madvise itself, from a program thread (it waits for pages
    /// other threads hold).
    pub fn discard_range(&self, start: usize, len: usize) {
        // Not while a fork child is served from this process's state (`forkserve`).
        self.fork_serve.wait_idle();
        let _signals = sys::SignalsBlocked::new();
        vma::discard(self, start, len)
    }

    /// Retire adopted regions the program has unmapped completely; returns how many.
    pub fn reap(&self) -> usize {
        vma::reap(self)
    }

    /// Call `f(start, len)` for every range of the pager's regions still registered (for a fork
    /// child that registers them again on a new uffd).
    pub fn registered_ranges(&self, f: impl FnMut(usize, usize)) {
        vma::registered_runs(self, f)
    }

    /// Wait until every event the uffd has delivered so far is applied (unmaps, remaps,
    /// removes): a program's `munmap` returns once its event is *read*. A no-op on the event
    /// thread itself.
    pub fn sync_events(&self) {
        if fault::on_event_thread() {
            return;
        }
        let target = self.ev.reads.load(Ordering::SeqCst);
        while (self.ev.done.load(Ordering::SeqCst) < target || self.ev.pending.load(Ordering::SeqCst) > 0)
            && !self.stop.load(Ordering::Relaxed)
        {
            std::thread::yield_now();
        }
    }

    /// Pause the background reclaimer and the recompressor until [`Pager::resume`]: a `fork`
    /// then copies no page an eviction holds half-done and no pool lock a recompression pass
    /// holds (the child will not have those threads), and nothing made resident before the
    /// fork is evicted meanwhile. Faults and events are still served (the
    /// kernel blocks `fork` until its event is read). Both threads check the pause between
    /// steps of bounded work (a reclaim batch, 256 pages of writeback or promotion, one object
    /// of a recompression pass). Gives up after ten seconds (false): the fork then goes ahead
    /// and its child may find a lock those threads held.
    pub fn quiesce(&self) -> bool {
        self.pause.store(true, Ordering::SeqCst);
        // A recompression pass in flight stops at its next object (none may hold a pool lock
        // or a zspage's draining mark when the address space is copied).
        if !self.recomp.held.swap(true, Ordering::SeqCst) {
            uswap::tier::zpool::hold_off();
        }
        sys::futex_wake(&self.kswapd.wake);
        let t0 = std::time::Instant::now();
        // Only the reclaimer and the recompressor pause: the event thread keeps serving faults,
        // because the forking thread still runs glibc's own fork preparation after our handler
        // (it locks malloc arenas, whose state lives in memory the pager may have swapped out).
        while !self.kswapd.quiet.load(Ordering::SeqCst) || self.recomp.busy.load(Ordering::SeqCst) {
            if t0.elapsed().as_secs() >= 10 {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }

    /// The last step before a `fork` copies the address space, on the forking thread (its
    /// atfork prepare handler, after [`Pager::quiesce`]): from here until the fork's event is
    /// read or [`Pager::end_fork_hold`], the event thread does pager work only while this
    /// thread cannot be in `clone` (see `forkhold`). Waits for the event thread to finish the
    /// round it is in. False if it did not within ten seconds (the fork goes ahead, and its
    /// child may find a lock the event thread held: a hang to report).
    pub fn hold_for_fork(&self) -> bool {
        self.hold.begin(&self.ev.quiet)
    }

    /// End of [`Pager::hold_for_fork`] (the parent's atfork handler, whether the fork
    /// succeeded or not).
    pub fn end_fork_hold(&self) {
        self.hold.end();
    }

    /// End of [`Pager::quiesce`].
    pub fn resume(&self) {
        self.pause.store(false, Ordering::SeqCst);
        if self.recomp.held.swap(false, Ordering::SeqCst) {
            uswap::tier::zpool::release_hold_off();
        }
        sys::futex_wake(&self.kswapd.wake);
    }

    /// One step of sharing the store's swap files with a `fork` child instead of copying them
    /// ([`PageStore::fork_share`]); `Prepare` only with the pager quiesced ([`Pager::quiesce`]
    /// returned true: no store in flight).
    pub fn fork_share(&self, step: uswap::backend::ShareStep) -> bool {
        self.store.fork_share(step)
    }

    /// The configuration.
    pub fn config(&self) -> &PagerConfig {
        &self.cfg
    }

    /// The calling thread works for this pager in the background (the preload's scanner):
    /// in thread fault mode it is kept off the CPU the event thread follows (see `cpu`).
    pub fn join_background(&self) {
        self.place.join();
    }

    /// Called by a program thread before it uses memory that takes no fault of this pager (the
    /// preload calls it as `malloc` returns: a heap grown with `brk` is resident before the
    /// embedder's next reconciliation adopts it): while the charge is over the limit, it wakes
    /// the reclaimer and waits for it, at most 20 ms, so a program that fills such memory fast
    /// keeps to the limit as one that faults does. Holds nothing while it waits (call it with
    /// no lock the reclaimer might need) and leaves `errno` as it was; under half the limit it
    /// is two loads, inlined. Returns whether it waited (counted as `alloc_throttled`).
    #[inline]
    pub fn wait_for_room(&self) -> bool {
        self.resident_bytes() >= self.limit() / 2 && fault::wait_for_room(self)
    }

    /// Bytes of the resident pages (the first part of [`Pager::charged_bytes`]).
    #[inline]
    pub(crate) fn resident_bytes(&self) -> u64 {
        self.charge.resident_pages.load(Ordering::Relaxed).max(0) as u64 * PAGE_SIZE as u64
    }

    /// Bytes charged to the group: resident pages + swap cache + compressed pool. The swap
    /// cache counts what its arena holds in memory (free objects too, until trimmed), so the
    /// charge is the pager's share of the process's RSS.
    pub fn charged_bytes(&self) -> u64 {
        self.resident_bytes() + self.cache.resident_bytes() + self.store.pool_bytes()
    }

    /// Pages that entered the resident set since the pager started: mapped by faults, or
    /// found present when the program's memory was adopted. Their rate is how fast the
    /// process brings memory in (the tree's coldest-first shares, [`crate::tree`]).
    pub fn inflow_pages(&self) -> u64 {
        self.counters.pages_mapped.load(Ordering::Relaxed) + self.counters.adopted_pages.load(Ordering::Relaxed)
    }

    /// CPU time the pager's own threads have used (event thread, background reclaimer,
    /// recompressor), in nanoseconds: what to take off the process's CPU time to see the
    /// program's (a thread counts from when it runs its loop).
    pub fn threads_cpu_ns(&self) -> u64 {
        self.thread_tids
            .iter()
            .map(|t| t.load(Ordering::Relaxed))
            .filter(|&tid| tid != 0)
            .filter_map(sys::thread_cpu_ns)
            .sum()
    }

    /// Bytes the compressed pool holds in RAM (its part of [`Pager::charged_bytes`]).
    pub fn pool_bytes(&self) -> u64 {
        self.store.pool_bytes()
    }

    /// The limit in force for the pager's charge (resident pages, swap cache, pool): the
    /// budget ([`Pager::set_limit`]) less the memory outside the pager
    /// ([`Pager::set_outside`]).
    #[inline]
    pub fn limit(&self) -> u64 {
        self.charge.limit.load(Ordering::Relaxed)
    }

    /// Change the budget while the pager runs (as writing a memory cgroup's `memory.max`):
    /// at most the configured `limit_bytes` (which sized the pager's rings and pool), at least
    /// four folios. Lowered below the charge, the background reclaimer is woken and faults
    /// that need memory wait for it, as at the limit. Returns the limit now in force.
    pub fn set_limit(&self, bytes: u64) -> u64 {
        let v = bytes.clamp(4 * self.cfg.folio_size as u64, self.cfg.limit_bytes);
        self.charge.budget.store(v, Ordering::Relaxed);
        self.apply_limit()
    }

    /// Tell the pager how much of the program's anonymous memory lies outside it (what its
    /// embedder found and could not manage, or has not adopted yet: thread stacks, locked
    /// memory, a heap grown since the last reconciliation). A memory cgroup charges all of
    /// it, so the pager's own charge makes room: its limit in force is the budget less this,
    /// but never less than a quarter of the budget (past that the program is over its limit
    /// whatever the pager does, and the embedder warns). Returns the limit now in force.
    pub fn set_outside(&self, bytes: u64) -> u64 {
        self.charge.outside.store(bytes, Ordering::Relaxed);
        self.apply_limit()
    }

    /// Tell the pager whether some of its resident pages are shared copy-on-write with a fork
    /// parent or child (its embedder reads `Anonymous - Pss_Anon` of smaps_rollup). While they are, reclaim
    /// passes over folios whose every page the relative maps too, back to the young end of
    /// the active list, before it takes them: evicting such a folio here frees no memory
    /// (the relative still maps it) and costs a refault if it is used, whereas the kernel
    /// evicts a shared page from every process at once. A Redis `BGSAVE` child starts with
    /// all of its parent's resident memory shared.
    pub fn set_cow_shared(&self, shared: bool) {
        self.cow_shared.store(shared, Ordering::Relaxed);
    }

    /// Run `f` with the calling thread's CPU pin lifted if the event thread pinned it beside
    /// itself (thread fault mode, `follow_cpu`; the `cpu` module): the preload wraps the
    /// calls that start a thread or a process with it, so that these get the program's mask,
    /// not the pin. Pinned again after `f`, unless the pin was given up meanwhile.
    pub fn without_cpu_pin<R>(&self, f: impl FnOnce() -> R) -> R {
        self.place.without_pin(f)
    }

    /// Give the calling thread the program's CPU mask back for good if the pager pinned it
    /// (the preload's `vfork` and `execl` trampolines, which cannot put the pin back).
    pub fn leave_cpu_pin(&self) {
        self.place.leave_pin();
    }

    /// The CPU mask to report to thread `tid` asking for its own (`sched_getaffinity`): the
    /// program's mask if the pager pinned that thread, else None.
    pub fn reported_cpu_mask(&self, tid: i32) -> Option<libc::cpu_set_t> {
        self.place.reported_mask(tid)
    }

    /// The program sets CPU masks itself: the pager gives a pinned thread its mask back and
    /// pins no thread from now on.
    pub fn program_sets_cpu_masks(&self) {
        self.place.program_sets_masks();
    }

    /// This process's budget: `limit_bytes` of the configuration, or what
    /// [`Pager::set_limit`] set since (its share of a tree's limit). The pager's own limit
    /// in force, [`Pager::limit`], is this less [`Pager::outside_bytes`].
    pub fn budget(&self) -> u64 {
        self.charge.budget.load(Ordering::Relaxed)
    }

    /// The most RAM the store may hold under the limit in force (the pool's share of it).
    pub(crate) fn pool_cap(&self) -> u64 {
        self.limit() * u64::from(self.charge.pool_permille.load(Ordering::Relaxed)) / 1000
    }

    /// Give the pool `permille` of the limit (the background reclaimer's [`pool_share`]).
    pub(crate) fn set_pool_share(&self, permille: u32) {
        self.charge.pool_permille.store(permille, Ordering::Relaxed);
        self.apply_pool_cap();
    }

    /// Hand the store the pool's cap in force (the background reclaimer writes back what the
    /// pool holds over a lowered one).
    fn apply_pool_cap(&self) {
        if self.charge.pool_capped {
            self.store.limit_ram(self.cfg.group, self.pool_cap());
        }
    }

    /// What [`Pager::set_outside`] last set.
    pub fn outside_bytes(&self) -> u64 {
        self.charge.outside.load(Ordering::Relaxed)
    }

    fn apply_limit(&self) -> u64 {
        let budget = self.charge.budget.load(Ordering::Relaxed);
        let floor = (budget / 4).max(4 * self.cfg.folio_size as u64);
        let v = budget.saturating_sub(self.charge.outside.load(Ordering::Relaxed)).max(floor).min(budget);
        self.charge.limit.store(v, Ordering::Relaxed);
        // The pool's cap follows.
        self.apply_pool_cap();
        if self.charged_bytes() > reclaim::wake_mark(self) {
            sys::futex_wake(&self.kswapd.wake);
        }
        v
    }

    /// Run one background recompression pass now, in the calling thread (what the
    /// `uswap-recomp` thread does every `recompress_ms`; see `recomp`): recompress what stayed
    /// idle since the previous pass, then mark everything idle. Not for the fault path; call
    /// it from a thread that touches no managed memory meanwhile. Counted in the statistics.
    pub fn recompress_now(&self) -> RecompressPass {
        recomp::pass(self).0
    }

    /// Tier `t`'s name and store failures so far; `None` past the last tier.
    pub fn tier_fails(&self, t: usize) -> Option<(String, uswap::fails::FailCounts)> {
        self.store.tier_fails(t)
    }

    /// Store failures the pager met (evictions undone), failures of the store's tiers (some
    /// passed over for another tier), and faults mapped over the limit because of them: a
    /// cheap sum that moves whenever something failed.
    pub fn failure_events(&self) -> u64 {
        self.counters.store_errors.load(Ordering::Relaxed) + self.store.tier_fails_total() + self.limit_breaks()
    }

    /// Faults mapped over the limit because the store had failed for longer than faults wait.
    pub fn limit_breaks(&self) -> u64 {
        self.counters.limit_breaks.load(Ordering::Relaxed)
    }

    /// Pages no tier of the store took (every one declined or failed), so far.
    pub fn rejected_pages(&self) -> u64 {
        self.store.rejected_pages()
    }

    /// True when the store's RAM is capped (a tier outside RAM takes what the pool's share
    /// does not hold): without, the limit holds only while the data compresses.
    pub fn pool_capped(&self) -> bool {
        self.charge.pool_capped
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> PagerStats {
        stats::snapshot(self, region::live_regions_of(self))
    }
}

impl Drop for Pager {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the event thread out of poll() (it never blocks in read(): the uffd is
        // non-blocking) and the background reclaimer out of its futex wait.
        let one = 1u64;
        // SAFETY: an 8-byte write of a valid u64 to our eventfd.
        unsafe { libc::write(std::os::fd::AsRawFd::as_raw_fd(&self.ev.stop_fd), (&one as *const u64).cast(), 8) };
        sys::futex_wake(&self.kswapd.wake);
        sys::futex_wake(&self.recomp.wake);
        let th = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in th {
            let _ = t.join();
        }
        vma::retire_all(self);
    }
}
