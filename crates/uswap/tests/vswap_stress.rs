//! Real-thread stress test: swap-out, shared swap-ins of the same entries (many readers
//! racing on add-or-get), dup/put, and a background mover doing writeback, moves, drains and
//! compaction, all at once. Every read is checked byte for byte, and at the end every counter
//! must be back to zero.

mod vswap_common;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use uswap::backend::{Backend, TierKind};
use uswap::vswap::{Engine, EngineConfig};
use uswap::{SwapEntry, SwapError, PAGE_SIZE};
use vswap_common::{make_data, TestBackend};

struct Shared {
    eng: Engine,
    /// Published entries other threads may read: (entry, data).
    pub_: Mutex<Vec<(SwapEntry, Arc<Vec<u8>>)>>,
}

fn worker(s: &Shared, seed: u64, iters: usize) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut mine: Vec<(SwapEntry, Arc<Vec<u8>>)> = Vec::new();
    for _ in 0..iters {
        match rng.random_range(0..10) {
            0..=3 => {
                let order = rng.random_range(0..=3u8);
                let dseed = if rng.random_bool(0.2) { 0 } else { rng.random::<u64>() | 2 };
                let data = Arc::new(make_data(order, dseed));
                match s.eng.swap_out(0, &data) {
                    Ok(e) => {
                        if rng.random_bool(0.5) {
                            s.pub_.lock().unwrap().push((e, data));
                        } else {
                            mine.push((e, data));
                        }
                    }
                    // NoSpace: the space is full. Reject: every tier that would take it was
                    // offline at the moment it was tried (back-to-back drains) or full.
                    Err(SwapError::NoSpace { .. }) | Err(SwapError::Tier(uswap::TierError::Reject)) => {}
                    Err(e) => panic!("swap_out: {e}"),
                }
            }
            4..=6 => {
                // Read a published entry: take a reference under the list lock so its owner
                // cannot free it, then read and drop the reference.
                let got = {
                    let p = s.pub_.lock().unwrap();
                    if p.is_empty() {
                        None
                    } else {
                        let (e, d) = p[rng.random_range(0..p.len())].clone();
                        let n = d.len() / PAGE_SIZE;
                        s.eng.dup(e, n).unwrap();
                        Some((e, d))
                    }
                };
                if let Some((e, d)) = got {
                    let mut out = vec![0u8; d.len()];
                    s.eng.swap_in(e, &mut out, true).unwrap();
                    assert!(out == *d, "shared read of {e:?} differs");
                }
            }
            7 => {
                let p = &mut *s.pub_.lock().unwrap();
                if !p.is_empty() {
                    let i = rng.random_range(0..p.len());
                    mine.push(p.swap_remove(i));
                }
            }
            _ => {
                if !mine.is_empty() {
                    let i = rng.random_range(0..mine.len());
                    let (e, d) = mine.swap_remove(i);
                    let mut out = vec![0u8; d.len()];
                    let free = rng.random_bool(0.7);
                    s.eng.swap_in(e, &mut out, free).unwrap();
                    assert!(out == *d, "read of {e:?} differs");
                    if !free {
                        s.eng.put(e, d.len() / PAGE_SIZE).unwrap();
                    }
                }
            }
        }
    }
    for (e, d) in mine {
        let mut out = vec![0u8; d.len()];
        s.eng.swap_in(e, &mut out, true).unwrap();
        assert!(out == *d);
    }
}

#[test]
fn stress_swap_in_out_with_movers() {
    let tiers: Vec<Arc<TestBackend>> = vec![
        Arc::new(TestBackend::new("pool", TierKind::Pool, 300)),
        Arc::new(TestBackend::new("file", TierKind::File, 0)),
        Arc::new(TestBackend::new("mem", TierKind::Memory, 0)),
    ];
    let dyn_tiers: Vec<Arc<dyn Backend>> = tiers.iter().map(|t| t.clone() as Arc<dyn Backend>).collect();
    let eng =
        Engine::new(EngineConfig { virtual_slots: 8192, nr_groups: 1, ..EngineConfig::default() }, dyn_tiers).unwrap();
    let s = Shared { eng, pub_: Mutex::new(Vec::new()) };
    let stop = AtomicBool::new(false);
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..3)
            .map(|i| {
                let s = &s;
                sc.spawn(move || worker(s, 100 + i, 3000))
            })
            .collect();
        let s2 = &s;
        let stop2 = &stop;
        sc.spawn(move || {
            let mut rng = SmallRng::seed_from_u64(7);
            while !stop2.load(Ordering::Relaxed) {
                match rng.random_range(0..5) {
                    0 => {
                        s2.eng.writeback(0, 1, 64).unwrap();
                    }
                    1 => {
                        let t = rng.random_range(0..3);
                        s2.eng.drain_tier(t).unwrap();
                        s2.eng.set_tier_online(t, true).unwrap();
                    }
                    2 => {
                        s2.eng.compact_tier(rng.random_range(0..3)).unwrap();
                    }
                    _ => {
                        let e = s2.pub_.lock().unwrap().first().map(|x| x.0);
                        if let Some(e) = e {
                            // The entry may be freed meanwhile by its owner: errors are fine,
                            // wrong data is not (checked by the readers).
                            let _ = s2.eng.move_entry(e, rng.random_range(0..3));
                        }
                    }
                }
            }
        });
        let res: Vec<_> = hs.into_iter().map(|h| h.join()).collect();
        stop.store(true, Ordering::Relaxed);
        for r in res {
            if let Err(p) = r {
                std::panic::resume_unwind(p);
            }
        }
    });
    for (e, d) in std::mem::take(&mut *s.pub_.lock().unwrap()) {
        let mut out = vec![0u8; d.len()];
        s.eng.swap_in(e, &mut out, true).unwrap();
        assert!(out == *d);
    }
    assert_eq!(s.eng.space().used_slots(), 0);
    assert_eq!(s.eng.cache().nr_cached(), 0);
    for t in &tiers {
        assert_eq!(t.usage().stored_pages, 0, "{} not empty", t.name());
    }
    let u = s.eng.groups().usage(0).unwrap();
    assert_eq!((u.swapped_pages, u.pool_bytes, u.swap_pages), (0, 0, 0));
}
