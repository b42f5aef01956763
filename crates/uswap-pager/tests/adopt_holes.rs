//! Adopting a range whose maps were read before the program cut holes in it (`Pager::adopt`
//! registers only what is mapped). A file of its own: the kernel puts a new mapping in the
//! highest gap that fits, so another test's mappings made meanwhile would land in the holes.
mod common;
use uswap_pager::PagerConfig;

/// The ranges of `[a, b)` the kernel has registered with a userfaultfd (`um` in the
/// mapping's `VmFlags` in `/proc/self/smaps`), adjacent ones merged.
fn kernel_registered(a: usize, b: usize) -> Vec<(usize, usize)> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read /proc/self/smaps");
    let mut out: Vec<(usize, usize)> = Vec::new();
    let mut cur = None;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((s, e)) = first.split_once('-').filter(|_| !line.starts_with("VmFlags")) {
            if let (Ok(s), Ok(e)) = (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16)) {
                cur = Some((s, e));
                continue;
            }
        }
        if let (Some(flags), Some((s, e))) = (line.strip_prefix("VmFlags:"), cur) {
            let (s, e) = (s.max(a), e.min(b));
            if s < e && flags.split_whitespace().any(|f| f == "um") {
                match out.last_mut() {
                    Some(last) if last.1 == s => last.1 = e,
                    _ => out.push((s, e)),
                }
            }
        }
    }
    out
}

/// The maps a reconciler read may list a mapping the program has since cut: glibc's malloc
/// maps twice an arena's size and unmaps the misaligned ends at once. `UFFDIO_REGISTER`
/// skips holes without an error, and an adoption across them that counted the holes as
/// registered would have a fork child, which registers its parent's regions again from the
/// pager's list, register pager memory made in a hole later (thread stacks, page words) and
/// hang faulting on its own page words (as `fork_reads_swapped_out_thread_descriptors` can
/// under load). Here a range cut at both ends and in the middle is adopted as if its maps
/// were read before the cuts: the pager's registered ranges must be exactly what the kernel
/// registered, the mapped parts only; a mapping made in a hole later is adopted on its own;
/// and every page keeps its bytes through eviction (the limit is a quarter of the data).
#[test]
fn adopt_across_holes_registers_only_what_is_mapped() {
    let cfg = PagerConfig {
        limit_bytes: 1 << 20,
        folio_size: 4096,
        reclaim: uswap_pager::ReclaimMode::Background,
        ..Default::default()
    };
    let Some(p) = common::pager(cfg) else {
        return;
    };
    const PAGE: usize = 4096;
    // Holes of two pages: the adoption's page words (three pages) cannot land in them.
    const HOLE: usize = 2;
    let len = 4 << 20;
    let a = common::anon_map(len);
    let pages = len / PAGE;
    // SAFETY: the mapping just made, `len` bytes, ours alone.
    let mem = unsafe { std::slice::from_raw_parts_mut(a as *mut u8, len) };
    for pg in 0..pages {
        common::fill_page(&mut mem[pg * PAGE..(pg + 1) * PAGE], 7, pg, true);
    }
    let holes = [(0, HOLE), (256, 256 + HOLE), (pages - HOLE, pages)];
    for &(h0, h1) in &holes {
        // SAFETY: unmapping parts of our own mapping, which nothing else uses.
        assert_eq!(unsafe { libc::munmap((a + h0 * PAGE) as *mut libc::c_void, (h1 - h0) * PAGE) }, 0);
    }
    let mapped = [(a + HOLE * PAGE, a + 256 * PAGE), (a + (256 + HOLE) * PAGE, a + (pages - HOLE) * PAGE)];
    let want: usize = mapped.iter().map(|(s, e)| e - s).sum();
    let n = p.adopt(a, len).expect("adopt across holes");
    assert_eq!(n, want, "bytes adopted: only the mapped parts count");
    let mut listed = Vec::new();
    p.registered_ranges(|s, l| {
        let (s, e) = (s.max(a), (s + l).min(a + len));
        if s < e {
            listed.push((s, e));
        }
    });
    assert_eq!(listed, mapped, "the pager's registered ranges");
    assert_eq!(kernel_registered(a, a + len), mapped, "the kernel's registered ranges");
    // A mapping made in a hole later is the program's new memory: adopted on its own. The
    // kernel may have put other mappings in the holes meanwhile (this adoption's page words,
    // other tests' memory): the first hole still free is taken.
    let try_map = |h: usize| {
        // SAFETY: a fixed anonymous mapping in one of our holes (NOREPLACE: it replaces
        // nothing; it fails where something else was mapped since).
        let m = unsafe {
            libc::mmap(
                h as *mut libc::c_void,
                HOLE * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if m != libc::MAP_FAILED && m as usize != h {
            // SAFETY: a mapping just made elsewhere (a kernel without NOREPLACE), unused.
            unsafe { libc::munmap(m, HOLE * PAGE) };
        }
        m as usize == h
    };
    let h = holes
        .iter()
        .flat_map(|&(h0, h1)| (h0..h1 + 1 - HOLE).map(move |pg| a + pg * PAGE))
        .find(|&h| try_map(h))
        .expect("every hole was taken by another mapping");
    assert_eq!(p.adopt(h, HOLE * PAGE).expect("adopt the new mapping"), HOLE * PAGE);
    assert_eq!(kernel_registered(h, h + HOLE * PAGE), [(h, h + HOLE * PAGE)], "the new mapping, registered");
    // The mapped parts' data, read back through eviction and faults, twice round (the
    // background reclaimer brings the charge under the limit meanwhile).
    let t0 = std::time::Instant::now();
    while p.stats().evicted_pages == 0 && t0.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    for _ in 0..2 {
        for &(s, e) in &mapped {
            for pg in (s - a) / PAGE..(e - a) / PAGE {
                let got = common::check_page(&mem[pg * PAGE..(pg + 1) * PAGE], 7, pg, true);
                assert_eq!(got, None, "page {pg} of the adopted mapping changed");
            }
        }
    }
    let st = p.stats();
    assert!(st.evicted_pages > 0, "nothing was evicted under a limit of a quarter of the data: {st:?}");
    for &(s, e) in &mapped {
        // SAFETY: our own mapping's parts, no longer used.
        unsafe { libc::munmap(s as *mut libc::c_void, e - s) };
    }
    // SAFETY: as above.
    unsafe { libc::munmap(h as *mut libc::c_void, HOLE * PAGE) };
}
