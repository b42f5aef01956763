//! Adopting the program's memory where it lies (`Pager::adopt`), against a racing address space.
mod common;
use uswap_pager::PagerConfig;

/// A reconciler reads `/proc/self/maps`, and by the time it adopts a range the program may have
/// unmapped it and the pager may have mapped its own memory there, even the page words of the
/// very region being adopted (made just before the registration). Registering that would make
/// a pager thread fault on memory only it can fill (the scan thread would hang so). Here the
/// range is freed before `adopt`, so the words the adoption maps tend to land in it: the
/// adoption must then refuse, and whatever it does adopt must not be own memory. (It also
/// covers the pager's threads' signal stacks, mapped by the Rust runtime as each thread starts:
/// one landing in the freed range unrecorded would have the event thread's exit unmap
/// registered memory and wait for its own UNMAP event, a hang; see `own::spawn`.)
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
