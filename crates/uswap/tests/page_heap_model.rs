//! The page heap (`tier::pages::PageHeap`) against a simple model, under random sequences of
//! `alloc`, `alloc_dirty`, `free` and `flush`, and from several threads at once.
//!
//! Every live block is filled with a tag of its own when it is handed out and checked when it
//! is freed: a block handed out twice, split wrongly, or released (`MADV_DONTNEED` reads back as
//! zeros) while still live fails the check. The model also checks that no two live blocks
//! overlap, that what `alloc` hands out reads as zeros, that `live_bytes` is the sum of the
//! live blocks, and that after `flush` no freed block of the reservation is still resident.

use proptest::prelude::*;
use std::ptr::NonNull;
use uswap::tier::pages::PageHeap;

const PAGE: usize = 4096;

#[derive(Clone, Debug)]
enum Op {
    Alloc(usize),
    AllocDirty(usize),
    Free(usize),
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1usize..9).prop_map(Op::Alloc),
        3 => (1usize..9).prop_map(Op::AllocDirty),
        4 => any::<usize>().prop_map(Op::Free),
        1 => Just(Op::Flush),
    ]
}

struct Live {
    ptr: NonNull<u8>,
    pages: usize,
    tag: u8,
}

fn fill(b: &Live) {
    // SAFETY: a live block of `pages` pages handed out by the heap under test, ours alone.
    unsafe { std::ptr::write_bytes(b.ptr.as_ptr(), b.tag, b.pages * PAGE) };
}

fn intact(b: &Live) -> bool {
    // SAFETY: as in `fill`.
    let s = unsafe { std::slice::from_raw_parts(b.ptr.as_ptr(), b.pages * PAGE) };
    s.iter().all(|&x| x == b.tag)
}

fn resident(p: usize, len: usize) -> bool {
    let mut v = vec![0u8; len / PAGE];
    // SAFETY: a page-aligned range inside the heap's reservation; one byte out per page.
    let r = unsafe { libc::mincore(p as *mut libc::c_void, len, v.as_mut_ptr()) };
    r == 0 && v.iter().any(|&b| b & 1 != 0)
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let h = PageHeap::new(1 << 30);
    let mut live: Vec<Live> = Vec::new();
    let mut freed: Vec<(usize, usize)> = Vec::new();
    let mut next_tag = 1u8;
    for o in ops {
        match *o {
            Op::Alloc(n) | Op::AllocDirty(n) => {
                let dirty = matches!(o, Op::AllocDirty(_));
                let ptr = if dirty { h.alloc_dirty(n * PAGE) } else { h.alloc(n * PAGE) };
                let ptr = ptr.ok_or_else(|| TestCaseError::fail("out of memory"))?;
                let (a, e) = (ptr.as_ptr() as usize, ptr.as_ptr() as usize + n * PAGE);
                prop_assert_eq!(a % PAGE, 0);
                for l in &live {
                    let (b, f) = (l.ptr.as_ptr() as usize, l.ptr.as_ptr() as usize + l.pages * PAGE);
                    prop_assert!(e <= b || f <= a, "block {:#x}+{} overlaps a live one", a, n);
                }
                if !dirty {
                    // SAFETY: the block just handed out, n pages.
                    let s = unsafe { std::slice::from_raw_parts(ptr.as_ptr(), n * PAGE) };
                    prop_assert!(s.iter().all(|&x| x == 0), "alloc handed out a block that is not zero");
                }
                freed.retain(|&(b, m)| b + m * PAGE <= a || e <= b);
                let l = Live { ptr, pages: n, tag: next_tag };
                next_tag = next_tag.wrapping_add(1).max(1);
                fill(&l);
                live.push(l);
            }
            Op::Free(i) if !live.is_empty() => {
                let l = live.swap_remove(i % live.len());
                prop_assert!(intact(&l), "a live block's contents changed");
                // SAFETY: handed out by `h` with this size, freed once.
                unsafe { h.free(l.ptr, l.pages * PAGE) };
                freed.push((l.ptr.as_ptr() as usize, l.pages));
            }
            Op::Free(_) => {}
            Op::Flush => {
                h.flush();
                for &(a, n) in &freed {
                    prop_assert!(!resident(a, n * PAGE), "a freed block stayed resident after flush");
                }
            }
        }
        let sum: usize = live.iter().map(|l| l.pages * PAGE).sum();
        prop_assert_eq!(h.live_bytes(), sum as u64);
        for l in &live {
            prop_assert!(intact(l), "a live block's contents changed");
        }
    }
    for l in live {
        prop_assert!(intact(&l));
        // SAFETY: as above.
        unsafe { h.free(l.ptr, l.pages * PAGE) };
    }
    h.flush();
    prop_assert_eq!(h.live_bytes(), 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn page_heap_agrees_with_the_model(ops in proptest::collection::vec(op(), 1..400)) {
        run(&ops)?;
    }
}

/// Threads allocating (clean and dirty), tagging, checking and freeing blocks of one heap at
/// once: the release batch and the free lists are shared, so a race that hands one block to two
/// threads or releases a live one shows as a changed tag.
#[test]
fn threads_share_the_release_batch_without_losing_a_block() {
    let h = PageHeap::new(1 << 30);
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let h = &h;
            s.spawn(move || {
                let mut mine: Vec<Live> = Vec::new();
                let mut x = 0x9e37_79b9_u32.wrapping_mul(u32::from(t) + 1);
                for i in 0..20_000u32 {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    if mine.len() < 32 && (!x.is_multiple_of(3) || mine.is_empty()) {
                        let n = 1 + (x as usize >> 8) % 4;
                        let p = if x & 16 == 0 { h.alloc_dirty(n * PAGE) } else { h.alloc(n * PAGE) };
                        let l = Live { ptr: p.expect("memory"), pages: n, tag: (t * 64 + (i % 63) as u8) | 1 };
                        fill(&l);
                        mine.push(l);
                    } else {
                        let l = mine.swap_remove((x as usize >> 4) % mine.len());
                        assert!(intact(&l), "thread {t}: a live block's contents changed");
                        // SAFETY: handed out by `h` with this size, freed once.
                        unsafe { h.free(l.ptr, l.pages * PAGE) };
                    }
                }
                for l in mine {
                    assert!(intact(&l), "thread {t}: a live block's contents changed");
                    // SAFETY: as above.
                    unsafe { h.free(l.ptr, l.pages * PAGE) };
                }
            });
        }
    });
    h.flush();
    assert_eq!(h.live_bytes(), 0);
}
