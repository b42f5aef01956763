//! Non-cooperative events: munmap (and, when enabled, madvise(DONTNEED)) of region memory by
//! the program releases the swap entries of that memory.
mod common;
use uswap_pager::PagerConfig;

fn stored(p: &uswap_pager::Pager) -> u64 {
    p.stats().engine.stored_pages
}

fn wait_for(p: &uswap_pager::Pager, what: &str, f: impl Fn(&uswap_pager::Pager) -> bool) {
    let t = std::time::Instant::now();
    while !f(p) {
        assert!(t.elapsed().as_secs() < 10, "timed out waiting for {what}: {:?}", p.stats());
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn munmap_of_region_memory_releases_its_entries() {
    let Some(p) = common::pager(PagerConfig { limit_bytes: 4 << 20, folio_size: 65536, ..Default::default() }) else {
        return;
    };
    let mut r = p.map(8 << 20).unwrap();
    for (pg, page) in r.as_mut_slice().chunks_mut(4096).enumerate() {
        common::fill_page(page, 11, pg, false);
    }
    r.evict_all();
    assert_eq!(stored(&p), 2048);
    // SAFETY: unmapping the second half of our own region; it is not touched afterwards.
    assert_eq!(unsafe { libc::munmap(r.as_ptr().add(4 << 20).cast(), 4 << 20) }, 0);
    wait_for(&p, "the unmap event", |p| p.stats().events_unmap >= 1 && stored(p) == 1024);
    for (pg, page) in r.as_slice()[..4 << 20].chunks(4096).enumerate() {
        assert_eq!(common::check_page(page, 11, pg, false), None, "page {pg}");
    }
    drop(r);
    assert_eq!(stored(&p), 0);
}

#[test]
fn madvise_dontneed_releases_entries_when_remove_events_are_on() {
    let cfg = PagerConfig { limit_bytes: 4 << 20, folio_size: 65536, event_remove: true, ..Default::default() };
    let Some(p) = common::pager(cfg) else { return };
    let mut r = p.map(4 << 20).unwrap();
    for (pg, page) in r.as_mut_slice().chunks_mut(4096).enumerate() {
        common::fill_page(page, 12, pg, false);
    }
    r.evict_all();
    assert_eq!(stored(&p), 1024);
    // SAFETY: advice on our own region.
    assert_eq!(unsafe { libc::madvise(r.as_ptr().cast(), 1 << 20, libc::MADV_DONTNEED) }, 0);
    wait_for(&p, "the remove event", |p| stored(p) == 768);
    assert!(r.as_slice()[..1 << 20].iter().all(|&b| b == 0), "dropped memory reads as zero");
    for (pg, page) in r.as_slice().chunks(4096).enumerate().skip(256) {
        assert_eq!(common::check_page(page, 12, pg, false), None, "page {pg}");
    }
}

/// After the program unmaps part of a region, that address may become somebody else's
/// mapping: dropping the region must leave it alone (unmapping its whole original range would
/// take the new mapping with it), and faults there are not the region's.
#[test]
fn dropping_a_region_leaves_what_now_lives_in_its_unmapped_part() {
    let Some(p) = common::pager(PagerConfig { limit_bytes: 4 << 20, folio_size: 65536, ..Default::default() }) else {
        return;
    };
    let mut r = p.map(8 << 20).unwrap();
    r.as_mut_slice().fill(3);
    // SAFETY: the second half of our own region.
    let hole = unsafe { r.as_ptr().add(4 << 20) };
    // SAFETY: unmapping that half; it is not touched through `r` again.
    assert_eq!(unsafe { libc::munmap(hole.cast(), 4 << 20) }, 0);
    wait_for(&p, "the unmap event", |p| p.stats().events_unmap >= 1);
    // Somebody else's mapping in the hole.
    // SAFETY: a new anonymous mapping exactly at the freed address (refused if taken).
    let m = unsafe {
        libc::mmap(
            hole.cast(),
            4 << 20,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if m != hole.cast() {
        // Another test's mapping took the hole first (tests run side by side): the very case
        // this guards; dropping the region must leave that mapping alone too.
        if m != libc::MAP_FAILED {
            // SAFETY: a mapping made above, somewhere else.
            unsafe { libc::munmap(m, 4 << 20) };
        }
        drop(r);
        return;
    }
    // SAFETY: the new mapping is ours, 4 MiB long.
    let other = unsafe { std::slice::from_raw_parts_mut(m as *mut u8, 4 << 20) };
    other.fill(7);
    assert!(r.as_slice()[..4 << 20].iter().all(|&b| b == 3));
    drop(r);
    assert!(other.iter().all(|&b| b == 7), "the other mapping changed");
    // SAFETY: unmapping the mapping made above.
    unsafe { libc::munmap(m, 4 << 20) };
}
