//! Tests of the fault path through a real pager: the event thread's lazy start, the pool's
//! cap under faults, a swap-in that finds a page present, and a write-protect fault in SIGBUS
//! mode. Each skips when userfaultfd is unavailable.
//!
//! Locking: as the fault path (the tests hold a page `BUSY` by hand in one case).

use super::resolve::{resolve, Wait};
use crate::page::{kind, PageWord};
use crate::region;
use crate::{Pager, PagerConfig, PagerError, PAGE_SIZE};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A pager, or `None` (the test skips, loudly, or fails under `USWAP_REQUIRE_UFFD`) when
/// userfaultfd is unavailable.
fn pager(cfg: PagerConfig) -> Option<Arc<Pager>> {
    match Pager::new(cfg) {
        Ok(p) => Some(p),
        Err(PagerError::Unavailable(w)) => {
            assert!(std::env::var_os(crate::launch::REQUIRE_UFFD.os_name()).is_none(), "userfaultfd unavailable: {w}");
            eprintln!("SKIPPED: userfaultfd unavailable: {w}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// With `lazy_background` only the event thread starts with the pager; the reclaimer starts
/// at `start_background` (once, however often it is called), and pages then still go out
/// under the limit and come back intact.
#[test]
fn lazy_background_threads_start_when_asked_and_reclaim() {
    let cfg = PagerConfig {
        limit_bytes: 8 << 20,
        tiers: "zero,lz4".into(),
        fault_mode: crate::FaultMode::Thread,
        lazy_background: true,
        ..Default::default()
    };
    let Some(p) = pager(cfg) else { return };
    assert_eq!(p.threads.lock().unwrap().len(), 1, "only the event thread before start_background");
    p.start_background();
    p.start_background();
    assert_eq!(p.threads.lock().unwrap().len(), 2, "the event thread and the reclaimer");
    let mut r = p.map(32 << 20).unwrap();
    for (i, b) in r.as_mut_slice().iter_mut().enumerate().step_by(PAGE_SIZE) {
        *b = (i / PAGE_SIZE) as u8 | 1;
    }
    assert!(r.as_slice().iter().enumerate().step_by(PAGE_SIZE).all(|(i, &b)| b == (i / PAGE_SIZE) as u8 | 1));
    assert!(p.stats().evicted_pages > 0, "nothing was evicted under the limit");
}

/// The pool keeps to its cap (its share of the limit) under a random read and write load
/// over poorly compressible pages (three quarters random) at a 16M limit with an 8 % pool.
/// The load whose pool goes over its cap while the charge is under the low mark (git's packed
/// objects) is `git_repack_writes_back_what_its_pool_holds_over_its_cap` in `uswap-cli`'s e2e
/// tests.
#[test]
fn the_pool_is_written_back_to_its_cap() {
    let dir = std::env::temp_dir();
    let cfg = PagerConfig {
        limit_bytes: 16 << 20,
        folio_size: 4096,
        tiers: format!("zero,lz4,file:{}", dir.display()),
        fault_mode: crate::FaultMode::Thread,
        pool_percent: 8,
        pool_adapt: false,
        ..Default::default()
    };
    let Some(p) = pager(cfg) else { return };
    let mut r = p.map(48 << 20).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let pages = r.len() / PAGE_SIZE;
    for page in r.as_mut_slice().chunks_mut(PAGE_SIZE) {
        for w in page[..PAGE_SIZE * 3 / 4].chunks_mut(8) {
            w.copy_from_slice(&next().to_le_bytes());
        }
    }
    // Random reads and writes: swap-ins leave holes in the pool's pages.
    let mut sum = 0u64;
    for _ in 0..40_000 {
        let pg = next() as usize % pages;
        let s = r.as_mut_slice();
        sum = sum.wrapping_add(u64::from(s[pg * PAGE_SIZE + 8]));
        if next() % 4 == 0 {
            s[pg * PAGE_SIZE + 16] ^= 1;
        }
    }
    std::hint::black_box(sum);
    // The reclaimer works in the background: give it a moment after the last writes.
    let cap = p.pool_cap();
    let t0 = std::time::Instant::now();
    while p.pool_bytes() > 2 * cap && t0.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(p.pool_bytes() <= 2 * cap, "pool {} bytes against a cap of {cap}", p.pool_bytes());
    assert!(p.stats().evicted_pages > 0);
}

/// A swap-in that finds a page of its folio present already (an earlier copy of the folio,
/// cut short by `EAGAIN` on the event thread and rolled back, left it mapped and writable)
/// must not publish that page `CLEAN`: the program writes it without a write-protect fault,
/// and a clean eviction would then drop the write and bring back the stale entry.
#[test]
fn a_page_present_before_a_clean_swapin_is_not_published_clean() {
    let cfg = PagerConfig { limit_bytes: 64 << 20, folio_size: 65536, tiers: "zero,lz4".into(), ..Default::default() };
    let Some(p) = pager(cfg) else { return };
    let r = p.map(65536).unwrap();
    let a = r.as_ptr() as usize;
    let page = |pg: usize| (a + pg * PAGE_SIZE) as *mut u8;
    for pg in 0..16 {
        // SAFETY: page pg of the region.
        unsafe { std::ptr::write_bytes(page(pg), pg as u8 + 1, PAGE_SIZE) };
    }
    assert_eq!(r.evict_all(), 16);
    // What a cut-short copy leaves: page 5 mapped writable (here with the program's later
    // bytes), its word still the stored one.
    let later = [0xbbu8; PAGE_SIZE];
    // SAFETY: page 5 is missing (evicted); `later` is one readable page.
    unsafe { p.uffd.copy(a + 5 * PAGE_SIZE, later.as_ptr(), PAGE_SIZE, false, true) }.unwrap();
    // A read fault on page 0 swaps the folio in; a read keeps its entries (clean).
    region::enter();
    // SAFETY: between enter and leave; the reference is not used after the leave.
    let inner = unsafe { region::lookup(a) }.unwrap();
    assert!(resolve(&p, inner, 0, false, false, Wait::Block));
    region::leave();
    // SAFETY: pages of the region, mapped now.
    let byte = |pg: usize| unsafe { page(pg).add(100).read_volatile() };
    assert_eq!(byte(0), 1);
    assert_eq!(byte(5), 0xbb, "the present page is the kernel's truth");
    // The program writes page 5 (no fault if it is writable), then everything is evicted.
    // SAFETY: page 5 of the region.
    unsafe { std::ptr::write_bytes(page(5), 0xcc, PAGE_SIZE) };
    r.evict_all();
    assert_eq!(byte(5), 0xcc, "a write to a page published clean without its protection was lost");
    for pg in (0..16).filter(|&pg| pg != 5) {
        assert_eq!(byte(pg), pg as u8 + 1, "page {pg}");
    }
}

/// A write to a write-protected page in SIGBUS mode reaches our handler (as SIGBUS), which
/// waits while the page is BUSY (being evicted) and lets the write through afterwards.
#[test]
fn wp_fault_is_delivered_as_sigbus_and_waits_for_the_eviction() {
    let Some(p) = pager(PagerConfig { limit_bytes: 4 << 20, folio_size: 4096, ..Default::default() }) else {
        return;
    };
    let r = p.map(4096 * 4).unwrap();
    let a = r.as_ptr() as usize;
    // SAFETY: inside the region.
    unsafe { (a as *mut u64).write_volatile(1) };
    region::enter();
    // SAFETY: between enter and leave; inner is not used after the leave.
    let inner = unsafe { region::lookup(a) }.unwrap();
    let w = inner.word(0).swap(PageWord::BUSY, Ordering::AcqRel);
    region::leave();
    assert_eq!(w.kind(), kind::RESIDENT);
    p.uffd.writeprotect(a, PAGE_SIZE, true, false).unwrap();
    let waits0 = p.stats().fault_waits;
    let t = std::thread::spawn(move || {
        // SAFETY: inside the region (kept alive by the outer scope until join).
        unsafe { (a as *mut u64).write_volatile(2) };
    });
    let t0 = std::time::Instant::now();
    while p.stats().fault_waits == waits0 {
        assert!(t0.elapsed().as_secs() < 10, "the writer never reached the handler");
        std::thread::yield_now();
    }
    // The writer is parked in our handler: the page still holds the old value.
    // SAFETY: reading a write-protected (readable) page.
    assert_eq!(unsafe { (a as *const u64).read_volatile() }, 1);
    p.uffd.writeprotect(a, PAGE_SIZE, false, true).unwrap();
    region::enter();
    // SAFETY: between enter and leave; the reference is not kept.
    unsafe { region::lookup(a) }.unwrap().word(0).store(w, Ordering::Release);
    region::leave();
    t.join().unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { (a as *const u64).read_volatile() }, 2);
    drop(r);
}
