//! Adopting the program's memory where it lies (`Pager::adopt`), against a racing address space.
mod common;
use uswap_pager::PagerConfig;

/// A reconciler reads `/proc/self/maps`, and by the time it adopts a range the program may have
/// unmapped it and the pager may have mapped its own memory there, even the page words of the
/// very region being adopted (made just before the registration). Registering that would make
/// a pager thread fault on memory only it can fill (a CI run hung so, in the scan thread). Here
/// the range is freed before `adopt`, so the words the adoption maps tend to land in it: the
/// adoption must then refuse, and whatever it does adopt must not be own memory. (It also
/// caught the pager's threads' signal stacks, mapped by the Rust runtime as each thread starts,
/// landing in the freed range unrecorded: the event thread's exit then unmapped registered
/// memory and waited for its own UNMAP event, a hang 1 run in 8; see `own::spawn`.)
#[test]
fn adopt_never_registers_the_pagers_own_memory() {
    let Some(p) = common::pager(PagerConfig { limit_bytes: 64 << 20, folio_size: 4096, ..Default::default() }) else {
        return;
    };
    // Large enough that the region's page words get a mapping of their own (over
    // `words::SLAB_MAX`, 2 KiB of words: smaller regions take theirs from a slab, which maps
    // only now and then).
    let len = 1 << 20;
    let mut landed = 0;
    for _ in 0..200 {
        let a = common::anon_map(len);
        // The kernel places a new mapping in the highest gap that fits: fill the page-sized
        // gaps above ours (left by mappings freed before), so the freed range is the first
        // the pager's next mapping can take. The fillers stay mapped.
        loop {
            let f = common::anon_map(4096);
            if f < a {
                // SAFETY: the filler just made; nothing uses it.
                assert_eq!(unsafe { libc::munmap(f as *mut libc::c_void, 4096) }, 0);
                break;
            }
        }
        // SAFETY: the mapping just made, unmapped at once; only its address is used.
        assert_eq!(unsafe { libc::munmap(a as *mut libc::c_void, len) }, 0);
        match p.adopt(a, len) {
            Ok(n) => assert!(
                n == 0 || !uswap_pager::own::is_own(a, a + len),
                "adopted {n} bytes of the pager's own memory at {a:#x}"
            ),
            // Refused because own memory took the range (the case this test is for); any
            // other refusal is the range simply being unmapped.
            Err(e) if e.to_string().contains("own") => landed += 1,
            Err(_) => {}
        }
    }
    // The case above must have happened, or this test proves nothing here.
    assert!(landed > 0, "the pager never mapped into the freed range in 200 tries");
    eprintln!("own memory landed in the freed range {landed} times of 200");
}

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
/// skips holes without an error, and an adoption across them used to count the holes as
/// registered: a fork child, which registers its parent's regions again from the pager's
/// list, registered pager memory made in a hole later (thread stacks, page words), and hung
/// faulting on its own page words (`fork_reads_swapped_out_thread_descriptors`, 1 run in 20
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
    let len = 4 << 20;
    let a = common::anon_map(len);
    let pages = len / PAGE;
    // SAFETY: the mapping just made, `len` bytes, ours alone.
    let mem = unsafe { std::slice::from_raw_parts_mut(a as *mut u8, len) };
    for pg in 0..pages {
        common::fill_page(&mut mem[pg * PAGE..(pg + 1) * PAGE], 7, pg, true);
    }
    let holes = [(0, 64), (256, 384), (pages - 32, pages)];
    for &(h0, h1) in &holes {
        // SAFETY: unmapping parts of our own mapping, which nothing else uses.
        assert_eq!(unsafe { libc::munmap((a + h0 * PAGE) as *mut libc::c_void, (h1 - h0) * PAGE) }, 0);
    }
    let mapped = [(a + 64 * PAGE, a + 256 * PAGE), (a + 384 * PAGE, a + (pages - 32) * PAGE)];
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
    // A mapping made in the first hole later is the program's new memory: adopted on its own.
    let h = a + 16 * PAGE;
    // SAFETY: a fixed anonymous mapping in our own hole (NOREPLACE: it replaces nothing).
    let m = unsafe {
        libc::mmap(
            h as *mut libc::c_void,
            16 * PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    assert_eq!(m as usize, h, "mmap into the hole");
    assert_eq!(p.adopt(h, 16 * PAGE).expect("adopt the new mapping"), 16 * PAGE);
    assert_eq!(kernel_registered(h, h + 16 * PAGE), [(h, h + 16 * PAGE)], "the new mapping, registered");
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
    unsafe { libc::munmap(h as *mut libc::c_void, 16 * PAGE) };
}
