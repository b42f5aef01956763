//! Loom models of the swap cache and the engine (run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p uswap --release --test loom_vswap`, or `.ci/loom.sh`):
//! - two add-or-gets on one entry: exactly one loader, the other waits and sees its bytes;
//! - add-or-get racing with the winner's delete: every caller gets the bytes, the word ends
//!   as it began and no folio stays cached;
//! - an online drain racing with an exclusive swap-in: the reader gets the bytes and
//!   everything is freed afterwards.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use uswap::backend::{Backend, MemBackend};
use uswap::internals::cluster::{SpaceConfig, SwapSpace};
use uswap::internals::swap_cache::{AddMode, Lookup, SwapCache};
use uswap::internals::swap_table::{Kind, Word};
use uswap::vswap::{Engine, EngineConfig};
use uswap::PAGE_SIZE;

fn space() -> SwapSpace {
    SwapSpace::new(SpaceConfig { nr_slots: 512, nr_shards: 1, ..SpaceConfig::default() }).unwrap()
}

/// One swap-in through the cache: returns 1 if this caller loaded the folio. With `delete`,
/// the loader takes the folio out of the cache when done (as the engine does).
fn swapin(space: &SwapSpace, cache: &SwapCache, e: uswap::SwapEntry, delete: bool) -> u32 {
    loop {
        match cache.add_or_get(space, e, 0, AddMode::SwapIn).unwrap() {
            Lookup::Added(mut lf) => {
                assert_eq!(lf.backing().payload(), 7);
                lf.data_mut().unwrap().fill(0x5a);
                lf.set_uptodate();
                if delete {
                    let d = cache.delete(space, &lf, uswap::internals::swap_cache::RefBit::Keep).unwrap();
                    assert_eq!(d.freed_slots, 0);
                }
                let _ = lf.unlock();
                return 1;
            }
            Lookup::Existing(f) => {
                f.wait_unlocked();
                match f.data() {
                    Some(d) => {
                        assert!(d.iter().all(|&b| b == 0x5a));
                        return 0;
                    }
                    None => continue,
                }
            }
            _ => panic!("unexpected lookup result"),
        }
    }
}

#[test]
fn add_or_get_races_add_or_get_one_loader() {
    loom::model(|| {
        let space = Arc::new(space());
        let cache = Arc::new(SwapCache::new());
        let e = space.alloc(0, &mut |_| Word::stored(0, 0, 7, 1)).unwrap();
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let (s, c) = (space.clone(), cache.clone());
                thread::spawn(move || swapin(&s, &c, e, false))
            })
            .collect();
        let loaders: u32 = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(loaders, 1);
        let f = cache.lookup(&space, e).unwrap().expect("folio stays cached");
        cache.delete(&space, &f, uswap::internals::swap_cache::RefBit::Keep).unwrap();
        drop(f);
        let w = space.load(e).unwrap();
        assert_eq!((w.kind(), w.payload()), (Kind::Stored, 7));
        assert_eq!(cache.nr_cached(), 0);
    });
}

#[test]
fn add_or_get_races_delete() {
    loom::model(|| {
        let space = Arc::new(space());
        let cache = Arc::new(SwapCache::new());
        let e = space.alloc(0, &mut |_| Word::stored(0, 0, 7, 1)).unwrap();
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let (s, c) = (space.clone(), cache.clone());
                thread::spawn(move || swapin(&s, &c, e, true))
            })
            .collect();
        let loaders: u32 = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert!((1..=2).contains(&loaders));
        let w = space.load(e).unwrap();
        assert_eq!((w.kind(), w.payload(), w.count()), (Kind::Stored, 7, 1));
        assert_eq!(cache.nr_cached(), 0);
    });
}

#[test]
fn drain_races_swap_in() {
    // The drain scans a whole cluster (512 word loads per pass): raise the branch limit.
    let mut b = loom::model::Builder::new();
    b.max_branches = 200_000;
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.check(|| {
        let t0 = std::sync::Arc::new(MemBackend::new("a", 0));
        let t1 = std::sync::Arc::new(MemBackend::new("b", 0));
        let tiers: Vec<std::sync::Arc<dyn Backend>> = vec![t0.clone(), t1.clone()];
        let eng = Arc::new(
            Engine::new(EngineConfig { virtual_slots: 512, nr_groups: 1, ..EngineConfig::default() }, tiers).unwrap(),
        );
        let data = vec![0x3cu8; PAGE_SIZE];
        let e = eng.swap_out(0, &data).unwrap();
        let r = {
            let eng = eng.clone();
            thread::spawn(move || {
                let mut out = vec![0u8; PAGE_SIZE];
                eng.swap_in(e, &mut out, true).unwrap();
                assert!(out.iter().all(|&b| b == 0x3c));
            })
        };
        eng.drain_tier(0).unwrap();
        r.join().unwrap();
        assert_eq!(t0.usage().stored_pages, 0);
        assert_eq!(t1.usage().stored_pages, 0);
        assert_eq!(eng.space().used_slots(), 0);
        assert_eq!(eng.cache().nr_cached(), 0);
    });
}
