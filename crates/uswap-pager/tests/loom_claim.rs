//! Loom models of the pager's bottom-layer kernels (run with `.ci/loom.sh`, or
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom cargo test --release -p uswap-pager --test loom_claim`).
//! The claim is the pager's own `page::Claim`, run over loom's atomics instead of a region's
//! mmap'ed words; the pool is the `slots::Slots` core of `BufPool` and `BatchPool`:
//! - two all-or-nothing claims on overlapping runs (taking their pages in opposite orders):
//!   exactly one wins, the loser's pages are back to their old words, the winner's hold what
//!   it published, and no page is left `BUSY`;
//! - a partial claim (it takes what it can, gives some pages back, publishes the rest) against
//!   an all-or-nothing one: each page is won by exactly one, and what was given back is as it was;
//! - what a claim's holder wrote under the claim is visible to the next claimer of the page;
//! - slots: no slot is handed to two takers at once (loom's cells catch a second writer), a
//!   slot's next taker sees what its last holder wrote, and every slot comes back.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use uswap_pager::loom_api::{Claim, PageSet, PageWord, Slots};

fn cells(init: &[PageWord]) -> Arc<Vec<AtomicU64>> {
    Arc::new(init.iter().map(|w| AtomicU64::new(w.bits())).collect())
}

fn word(cells: &[AtomicU64], i: usize) -> PageWord {
    PageWord::from_bits(cells[i].load(Ordering::Acquire))
}

const INIT: [PageWord; 3] = [PageWord::swapped(0, 10), PageWord::swapped(0, 11), PageWord::swapped(0, 12)];

/// Claim every page of `run` (pages `first..first + run.len()` of `cells`, in `order`) or none;
/// on success publish `new(old)` for each. Returns whether it won.
fn all_or_nothing(cells: &[AtomicU64], first: usize, n: usize, order: &[usize], new: fn(PageWord) -> PageWord) -> bool {
    let mut old = [PageWord::NONE; 3];
    let mut c = Claim::new(&cells[first..first + n], &mut old);
    for &i in order {
        if !c.take(i, INIT[first + i]) {
            return false; // dropped: rolls back what it took
        }
    }
    c.publish(|_, o| new(o));
    true
}

fn no_page_busy(cells: &[AtomicU64]) {
    for i in 0..cells.len() {
        assert!(!word(cells, i).is_busy(), "page {i} left {:?}", word(cells, i));
    }
}

#[test]
fn overlapping_all_or_nothing_claims_one_wins() {
    loom::model(|| {
        let w = cells(&INIT);
        let w2 = w.clone();
        // B: pages 1..3, taking page 2 first, so it may hold a page when it loses page 1.
        let b = thread::spawn(move || all_or_nothing(&w2, 1, 2, &[1, 0], |o| PageWord::swapped(1, o.payload() + 100)));
        // A: pages 0..2, page 0 first.
        let a = all_or_nothing(&w, 0, 2, &[0, 1], |_| PageWord::resident(1));
        let b = b.join().unwrap();
        assert!(a != b, "exactly one claim wins the shared page (a {a}, b {b})");
        no_page_busy(&w);
        if a {
            assert_eq!(
                [word(&w, 0), word(&w, 1), word(&w, 2)],
                [PageWord::resident(1), PageWord::resident(1), INIT[2]]
            );
        } else {
            let pub_b = |i: usize| PageWord::swapped(1, INIT[i].payload() + 100);
            assert_eq!([word(&w, 0), word(&w, 1), word(&w, 2)], [INIT[0], pub_b(1), pub_b(2)]);
        }
    });
}

#[test]
fn partial_claim_gives_back_and_publishes_the_rest() {
    loom::model(|| {
        let w = cells(&INIT);
        let w2 = w.clone();
        // B: takes what it can of pages 1..3, gives page 2 back (as a fill does with a page the
        // kernel refused), publishes the rest from its old words.
        let b = thread::spawn(move || {
            let mut old = [PageWord::NONE; 2];
            let mut c = Claim::new(&w2[1..3], &mut old);
            let got1 = c.take(0, INIT[1]);
            assert!(c.take(1, INIT[2]), "nobody else wants page 2");
            let mut back = PageSet::default();
            back.insert(1);
            c.roll_back(&back);
            assert!(!c.held(1) && c.held(0) == got1);
            c.publish(|_, o| PageWord::clean(0, o.payload(), 0));
            got1
        });
        let a = all_or_nothing(&w, 0, 2, &[0, 1], |_| PageWord::resident(0));
        let b = b.join().unwrap();
        assert!(a != b, "page 1 is won by exactly one (a {a}, b {b})");
        no_page_busy(&w);
        assert_eq!(word(&w, 2), INIT[2], "the page given back has its old word");
        let (w0, w1) = (word(&w, 0), word(&w, 1));
        if a {
            assert_eq!((w0, w1), (PageWord::resident(0), PageWord::resident(0)));
        } else {
            assert_eq!((w0, w1), (INIT[0], PageWord::clean(0, INIT[1].payload(), 0)));
        }
    });
}

#[test]
fn data_written_under_a_claim_is_seen_by_the_next_claimer() {
    loom::model(|| {
        let w = cells(&[PageWord::NONE]);
        let data = Arc::new(UnsafeCell::new(0u64));
        let (w2, d2) = (w.clone(), data.clone());
        let filler = thread::spawn(move || {
            let mut old = [PageWord::NONE; 1];
            let mut c = Claim::new(&w2[..], &mut old);
            assert!(c.take(0, PageWord::NONE));
            // SAFETY: the page is claimed (BUSY): its data is this thread's alone.
            d2.with_mut(|p| unsafe { *p = 42 });
            c.publish(|_, _| PageWord::resident(0));
        });
        // An evictor: waits for the page to be mapped, claims it, reads what the filler wrote.
        let mut old = [PageWord::NONE; 1];
        let mut c = Claim::new(&w[..], &mut old);
        while !c.take(0, PageWord::resident(0)) {
            thread::yield_now();
        }
        // SAFETY: the page is claimed by this thread now; loom checks the hand-over.
        assert_eq!(data.with(|p| unsafe { *p }), 42);
        c.publish(|_, _| PageWord::swapped(0, 7));
        drop(c);
        filler.join().unwrap();
        assert_eq!(word(&w, 0), PageWord::swapped(0, 7));
    });
}

#[test]
fn slots_hand_each_slot_to_one_taker_and_all_come_back() {
    loom::model(|| {
        let slots = Arc::new(Slots::new(2));
        let bufs: Arc<[UnsafeCell<u64>; 2]> = Arc::new([UnsafeCell::new(0), UnsafeCell::new(0)]);
        let hs: Vec<_> = (1..=3u64)
            .map(|t| {
                let (s, b) = (slots.clone(), bufs.clone());
                thread::spawn(move || {
                    // A BatchPool-style taker: gives up when every slot is taken.
                    let Some(i) = s.try_take() else { return };
                    // SAFETY: slot i is this taker's until put (what the model checks: loom
                    // reports two takers' accesses as a data race).
                    b[i].with_mut(|p| unsafe { *p = t });
                    // SAFETY: as above.
                    assert_eq!(b[i].with(|p| unsafe { *p }), t, "slot {i} written by another taker");
                    s.put(i);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(slots.free_count(), 2);
    });
}

#[test]
fn a_slots_next_taker_sees_what_its_last_holder_wrote() {
    loom::model(|| {
        let slots = Arc::new(Slots::new(1));
        let buf = Arc::new(UnsafeCell::new(0u64));
        let take = |s: &Slots| loop {
            // A BufPool-style taker: waits (yields) for a slot.
            match s.try_take() {
                Some(i) => return i,
                None => thread::yield_now(),
            }
        };
        let (s2, b2) = (slots.clone(), buf.clone());
        let t = thread::spawn(move || {
            let i = take(&s2);
            // SAFETY: the one slot is this thread's until put.
            b2.with_mut(|p| unsafe { *p += 1 });
            s2.put(i);
        });
        let i = take(&slots);
        // SAFETY: as above.
        buf.with_mut(|p| unsafe { *p += 1 });
        slots.put(i);
        t.join().unwrap();
        // SAFETY: both threads are done with the slot (joined).
        assert_eq!(buf.with(|p| unsafe { *p }), 2);
        assert_eq!(slots.free_count(), 1);
    });
}
