//! One reconciliation pass: read `/proc/self/maps` (a stable reading if it can), adopt every
//! mapping [`super::maps`] finds adoptable that no live region holds yet, record the dynamic
//! loader's data as the pager's own at start-up, count the thread stacks and small or
//! executable mappings left out, retire the regions the program has unmapped, start the
//! background threads once the charge reaches half the limit, and measure the memory outside
//! the pager ([`super::unmanaged`](mod@super::unmanaged)).
//!
//! A mapping the kernel merged out of program memory and a small own mapping of the same flags
//! (a pager thread's signal stack beside a program's fresh buffer) is adopted around the own
//! part, from a stable reading: left alone, as [`Pager::adopt`] leaves it, the program's whole
//! buffer would stay outside the pager.
//!
//! Locking: a pass runs under [`crate::BIG`] (so a fork never copies a half-adopted mapping),
//! taken by [`scan_once`] or by the caller of `pass_locked`; inside it, the previous pass's
//! mappings are behind their own [`RawLock`], held while this pass compares its reading with
//! them, adopts, and replaces them (only a pass, under [`crate::BIG`], takes it). The
//! counters are relaxed atomics; the time of the last reading is published with `Release`.
//! A pass allocates from the library's internal heap ([`crate::reentry::internal`]).

use super::maps::{is_loader_data, read_maps, skip_reason, Map};
use crate::lock::RawLock;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};
use uswap_pager::{now_ns, Pager};

/// The passes' counters (for the statistics) and the time of the last reading.
pub(super) struct Passes {
    /// When the last pass began reading the maps (monotonic ns): a block mapped before that is
    /// in its reading.
    pub(super) read_at_ns: AtomicU64,
    /// Passes run.
    pub(super) passes: AtomicU64,
    /// Passes that adopted nothing because pager mappings kept being made while the maps were
    /// read.
    pub(super) unstable: AtomicU64,
    /// Bytes adopted by passes.
    pub(super) adopted_bytes: AtomicU64,
    /// Mappings found merged out of program memory and an own mapping (adopted around it).
    pub(super) merged_with_own: AtomicU64,
    /// The dynamic loader's data recorded as the pager's own at start-up
    /// (`maps::is_loader_data`).
    pub(super) loader_bytes: AtomicU64,
    /// Adoptions put off to the next pass because own mappings were in flight.
    pub(super) busy_retries: AtomicU64,
    /// Thread stacks seen by the last pass.
    pub(super) stack_bytes: AtomicU64,
    /// Small or executable mappings left out by the last pass.
    pub(super) skipped_bytes: AtomicU64,
}

/// The passes' counters.
pub(super) static PASSES: Passes = Passes {
    read_at_ns: AtomicU64::new(0),
    passes: AtomicU64::new(0),
    unstable: AtomicU64::new(0),
    adopted_bytes: AtomicU64::new(0),
    merged_with_own: AtomicU64::new(0),
    loader_bytes: AtomicU64::new(0),
    busy_retries: AtomicU64::new(0),
    stack_bytes: AtomicU64::new(0),
    skipped_bytes: AtomicU64::new(0),
};

/// The previous pass's mappings (an unchanged line is not adopted again while regions still
/// hold it: see [`covered`]), behind their lock.
struct Seen {
    lock: RawLock,
    maps: UnsafeCell<Vec<(usize, usize)>>,
}
// SAFETY: `maps` is only touched under `lock`.
unsafe impl Sync for Seen {}
static SEEN: Seen = Seen { lock: RawLock::new(), maps: UnsafeCell::new(Vec::new()) };

/// Whether live regions hold the first and last page of `[start, end)`: not merely whether a
/// region's range lies there. A freed block's region stays in the registry, its pages
/// UNMAPPED, until a pass reaps it, and a program that frees a large block and allocates
/// another of the same size gets the same addresses back (glibc's `munmap` then `mmap`), so
/// its maps line is also the one the previous pass saw: judged by range, the new block would
/// wait for the scan thread's next pass, while the program fills it.
pub(super) fn covered(start: usize, end: usize) -> bool {
    uswap_pager::manages_page(start) && uswap_pager::manages_page(end - 1)
}

/// Adopt mapping `m` (found adoptable in a reading of the maps, `stable` if no own mapping
/// was in flight during it). A mapping that overlaps the pager's own memory is the kernel's
/// merge of program memory with a small own mapping of the same flags: from a stable
/// reading, its parts that are not the pager's are adopted; otherwise it is left alone, as
/// [`Pager::adopt`] does.
fn adopt_mapping(p: &Pager, m: &Map, stable: bool) -> Result<usize, uswap_pager::PagerError> {
    if !stable || !uswap_pager::own::is_own(m.start, m.end) {
        return p.adopt(m.start, m.end - m.start);
    }
    PASSES.merged_with_own.fetch_add(1, Ordering::Relaxed);
    let mut n = 0;
    for (a, b) in uswap_pager::own::gaps(m.start, m.end) {
        n += p.adopt(a, b - a)?;
    }
    Ok(n)
}

/// One reconciliation pass (see the module docs). `first`: the pass at start-up.
pub fn scan_once(p: &Pager, first: bool) {
    crate::BIG.lock();
    pass_locked(p, first);
    crate::BIG.unlock();
}

/// The pass itself, [`crate::BIG`] held.
pub(super) fn pass_locked(p: &Pager, first: bool) {
    crate::reentry::internal(|| {
        let min_len = crate::preload::MMAP_MIN.load(Ordering::Relaxed);
        // A reading of the maps in which every pager mapping is recorded as its own: no own
        // mapping in flight, and none recorded or forgotten, between the two tokens (see
        // `own::Making`). The window is a system call long; after 100 tries the pass goes on
        // with an unstable reading, in which only mappings that overlap no own memory are
        // adopted (`vma::adopt` checks again under its guard, so one that became own since is
        // refused); one that overlaps own memory may hold an own part not recorded yet, so it
        // waits for a stable reading (a later pass) instead of being taken as seen. (A pass
        // that gave up whole would leave a program's fresh blocks unmanaged for as long as the
        // pager kept making and unmapping its own memory.)
        let mut maps = Vec::new();
        let mut stable = false;
        // Unmaps read so far are applied first, so [`covered`] sees no region of a mapping
        // that is gone.
        p.sync_events();
        for _ in 0..100 {
            let g0 = uswap_pager::own::quiet_generation();
            PASSES.read_at_ns.store(now_ns(), Ordering::Release);
            maps = read_maps();
            if g0.is_some() && g0 == uswap_pager::own::quiet_generation() {
                stable = true;
                break;
            }
            std::thread::yield_now();
        }
        if !stable {
            PASSES.unstable.fetch_add(1, Ordering::Relaxed);
        }
        SEEN.lock.lock();
        // SAFETY: under SEEN.lock.
        let seen = unsafe { &mut *SEEN.maps.get() };
        let mut now = Vec::new();
        let (mut stacks, mut skipped) = (0u64, 0u64);
        for (i, m) in maps.iter().enumerate() {
            match skip_reason(&maps, i, min_len) {
                None | Some("small") if first && is_loader_data(m) => {
                    uswap_pager::own::add(m.start, m.end - m.start);
                    PASSES.loader_bytes.fetch_add((m.end - m.start) as u64, Ordering::Relaxed);
                }
                None => {
                    let key = (m.start, m.end);
                    let mut retry = false;
                    // From an unstable reading: overlapping own memory (before, or after
                    // adopting: an own part in flight at the reading is recorded by then).
                    let own_part = || !stable && uswap_pager::own::is_own(m.start, m.end);
                    if own_part() {
                        retry = true;
                    } else if seen.binary_search(&key).is_err() || !covered(m.start, m.end) {
                        match adopt_mapping(p, m, stable) {
                            Ok(n) => {
                                PASSES.adopted_bytes.fetch_add(n as u64, Ordering::Relaxed);
                            }
                            // Not now (the pager's own mappings in flight): the next pass tries
                            // this mapping again instead of taking it as seen.
                            Err(uswap_pager::PagerError::Busy(_)) => {
                                PASSES.busy_retries.fetch_add(1, Ordering::Relaxed);
                                retry = true;
                            }
                            Err(_) => {}
                        }
                        retry |= own_part();
                    }
                    if !retry {
                        now.push(key);
                    }
                }
                Some("thread stack") => stacks += (m.end - m.start) as u64,
                Some("small") | Some("executable") => skipped += (m.end - m.start) as u64,
                Some(_) => {}
            }
        }
        now.sort_unstable();
        *seen = now;
        SEEN.lock.unlock();
        PASSES.stack_bytes.store(stacks, Ordering::Relaxed);
        PASSES.skipped_bytes.store(skipped, Ordering::Relaxed);
        p.reap();
        PASSES.passes.fetch_add(1, Ordering::Relaxed);
        // The background reclaimer and recompressor start once the charge reaches half the
        // limit in force (`PagerConfig::lazy_background`); under BIG, so no fork copies a
        // thread half started.
        if p.charged_bytes().saturating_mul(2) >= p.limit() {
            p.start_background();
        }
        super::unmanaged::measure(p, first);
    });
}
