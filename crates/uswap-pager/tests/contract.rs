//! The fault-path contract of `docs/design.md` ("Deadlock freedom"), checked: across thousands
//! of steady-state faults (swap-in, zero-fill, refaults from the swap cache, direct reclaim
//! into the compressed pool and the swap file), in both fault modes and for 4 KiB and 64 KiB
//! folios, the code that resolves faults
//! - calls the process's allocator not once (a counting global allocator counts every call
//!   made on a thread inside a `uswap::sync::FaultScope`, whichever thread that is: the
//!   faulting thread in SIGBUS mode, the event thread in thread mode);
//! - takes only the engine lock classes the contract allows (`ALLOWED`; every engine mutex
//!   names its class, and the engine counts the ones taken inside a fault scope);
//! - is never entered by a thread that holds an engine lock (a fault taken inside engine code).
mod common;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use uswap::internals::sync::{fault_entries_holding_locks, fault_lock_counts, in_fault_path, LockClass};
use uswap_pager::{FaultMode, PagerConfig};

/// The lock classes the fault path may take (`docs/design.md`, "Deadlock freedom"): engine
/// locks that no holder keeps while it touches managed memory, calls the allocator, or waits
/// for anything but another lock of this list in the documented order.
const ALLOWED: &[LockClass] = &[
    LockClass::Cluster,
    LockClass::SpaceLists,
    LockClass::SpaceShard,
    LockClass::CacheFreeList,
    LockClass::FolioWait,
    LockClass::PoolClass,
    LockClass::PoolLarge,
    LockClass::PageHeap,
    LockClass::FileBufs,
    LockClass::FileDropBehind,
    LockClass::IoRing,
];

struct Counting;
static ARMED: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);
/// Calls by log2 of the size (+32 for a free, +48 for a realloc).
static SIZES: [AtomicUsize; 64] = [const { AtomicUsize::new(0) }; 64];

fn note(size: usize, kind: usize) {
    if ARMED.load(Ordering::Relaxed) && in_fault_path() {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        SIZES[((size.max(1).ilog2() as usize).min(15)) + kind].fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards to the system allocator; the bookkeeping allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note(l.size(), 0);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note(l.size(), 0);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        note(l.size(), 32);
        // SAFETY: forwarded.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        note(n, 48);
        // SAFETY: forwarded.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn touch_pass(r: &mut uswap_pager::Region, seed: u64, write: bool) -> u64 {
    let pages = r.len() / 4096;
    let s = r.as_mut_slice();
    let mut acc = 0u64;
    for i in 0..pages * 2 {
        let pg = (common::mix64(seed ^ i as u64) % pages as u64) as usize;
        let off = pg * 4096 + (i % 512) * 8;
        if write {
            s[off] = s[off].wrapping_add(1);
        } else {
            acc = acc.wrapping_add(u64::from(s[off]));
        }
    }
    acc
}

/// Touch the first `mib` MiB page by page, `rounds` times: a working set a little over the
/// limit, whose pages come back from the swap cache (the inactive list) while it holds them.
fn cycle_pass(r: &mut uswap_pager::Region, mib: usize, rounds: usize) -> u64 {
    let s = r.as_mut_slice();
    let mut acc = 0u64;
    for _ in 0..rounds {
        for pg in 0..(mib << 20) / 4096 {
            acc = acc.wrapping_add(u64::from(s[pg * 4096 + 8]));
        }
    }
    acc
}

fn check_contract(mode: FaultMode, folio: usize, tiers: Option<&str>) {
    let reclaim = common::reclaim_for(mode);
    let mut cfg =
        PagerConfig { limit_bytes: 4 << 20, folio_size: folio, fault_mode: mode, reclaim, ..Default::default() };
    if let Some(t) = tiers {
        cfg.tiers = t.into();
        // No background recompressor: its pass, every `recompress_ms`, could take the idle
        // objects between the two passes below, which must find them.
        cfg.recompress_ms = 0;
    }
    let Some(p) = common::pager(cfg) else { return };
    let mut r = p.map(16 << 20).unwrap();
    // A third of the pages random (they go raw to the pool or to the file), the rest patterned
    // (compressed in the pool), some never written (zero-fill).
    for (pg, page) in r.as_mut_slice().chunks_mut(4096).enumerate() {
        if pg % 7 != 6 {
            common::fill_page(page, 9, pg, pg % 3 == 0);
        }
    }
    // Warm-up: every path once (swap-in of each order, eviction, the cache's free lists, the
    // pool's classes and their metadata at their working size).
    for seed in 0..4 {
        touch_pass(&mut r, seed, seed % 2 == 0);
    }
    cycle_pass(&mut r, 5, 2);
    if tiers.is_some() {
        // Recompressed objects in the pool (the first pass marks, the second recompresses what
        // stayed idle), so the measured swap-ins decode zstd too.
        p.recompress_now();
        let done = p.recompress_now();
        assert!(done.objects > 0, "nothing recompressed: {done:?}");
    }
    let before = p.stats();
    let locks0 = fault_lock_counts();
    let held0 = fault_entries_holding_locks();
    ARMED.store(true, Ordering::SeqCst);
    let x = touch_pass(&mut r, 100, false)
        ^ touch_pass(&mut r, 101, true)
        ^ cycle_pass(&mut r, 5, 3)
        ^ touch_pass(&mut r, 102, false);
    ARMED.store(false, Ordering::SeqCst);
    let after = p.stats();
    let locks1 = fault_lock_counts();
    std::hint::black_box(x);
    let faults = after.faults - before.faults;
    assert!(faults > 2000, "{after:?}");
    assert!(after.evicted_pages > before.evicted_pages, "{after:?}");
    let taken: Vec<(LockClass, u64)> =
        LockClass::ALL.iter().map(|&c| (c, locks1[c as usize] - locks0[c as usize])).filter(|&(_, n)| n > 0).collect();
    let allocs = ALLOCS.swap(0, Ordering::Relaxed);
    let sizes: Vec<(usize, usize)> =
        SIZES.iter().enumerate().map(|(i, a)| (i, a.swap(0, Ordering::Relaxed))).filter(|&(_, n)| n > 0).collect();
    eprintln!(
        "{mode:?} folio {folio}: {faults} faults ({} swap-ins, {} zero, {} from the swap cache, {} pages evicted); \
         {allocs} heap calls {sizes:?}; locks {taken:?}",
        after.fault_swapin - before.fault_swapin,
        after.fault_zero - before.fault_zero,
        after.fault_cache - before.fault_cache,
        after.evicted_pages - before.evicted_pages,
    );
    assert_eq!(
        allocs, 0,
        "{mode:?} folio {folio}: heap calls on the fault path, by log2 size (+32 free, +48 realloc): {sizes:?}"
    );
    let forbidden: Vec<_> = taken.iter().filter(|(c, _)| !ALLOWED.contains(c)).collect();
    assert!(forbidden.is_empty(), "{mode:?} folio {folio}: forbidden locks on the fault path: {forbidden:?}");
    assert!(taken.iter().any(|&(c, _)| c == LockClass::Cluster), "the count sees no lock at all: {taken:?}");
    assert_eq!(fault_entries_holding_locks(), held0, "a fault was taken while its thread held an engine lock");
}

/// The check on entry is live: a fault taken by a thread that holds an engine lock (here a
/// lock of the test's own, which the fault path never takes) is counted.
fn check_entry_under_a_lock_is_seen() {
    let cfg = PagerConfig { limit_bytes: 4 << 20, folio_size: 4096, ..Default::default() };
    let Some(p) = common::pager(cfg) else { return };
    let mut r = p.map(16 << 20).unwrap();
    for (pg, page) in r.as_mut_slice().chunks_mut(4096).enumerate() {
        common::fill_page(page, 9, pg, false);
    }
    let [.., swapped] = r.page_states();
    assert!(swapped > 0, "{:?}", r.page_states());
    let m = uswap::internals::sync::Mutex::new(LockClass::MemBackend, ());
    let before = fault_entries_holding_locks();
    let g = m.lock();
    assert_eq!(uswap::internals::sync::held_locks(), 1);
    // The first pages were evicted first (FIFO): reading them faults.
    let sum: u64 = (0..64).map(|pg| u64::from(r.as_slice()[pg * 4096])).sum();
    drop(g);
    std::hint::black_box(sum);
    assert!(fault_entries_holding_locks() > before, "a fault under an engine lock went unseen");
}

#[test]
fn fault_path_allocates_nothing_and_takes_only_allowed_locks() {
    // One test: the counters are process-wide and tests run in parallel threads.
    for mode in [FaultMode::Sigbus, FaultMode::Thread] {
        check_contract(mode, 4096, None);
        check_contract(mode, 65536, None);
    }
    // `uswap run`'s default pool (lz4, idle objects recompressed with zstd): the event thread
    // decodes zstd objects without allocating.
    check_contract(FaultMode::Thread, 65536, Some("zero,lz4:recomp=zstd:recomp_level=3"));
    check_entry_under_a_lock_is_seen();
}
