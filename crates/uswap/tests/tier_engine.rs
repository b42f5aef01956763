//! The real tiers under the engine: round trips of random, patterned, zero and incompressible
//! folios (4 KiB..2 MiB) through the pool and the encrypted file and every move between them,
//! writeback of a full pool, compaction through the engine's relocate hook, and drains racing
//! with swap-ins. Byte for byte, from `TiersConfig` strings.

use rand::{Rng, RngCore, SeedableRng};
use std::sync::Arc;
use uswap::backend::Backend;
use uswap::config::TiersConfig;
use uswap::tier::zpool::{PoolConfig, ZPool};
use uswap::vswap::{Engine, EngineConfig, Location};
use uswap::{SwapEntry, PAGE_SIZE};

fn folio(order: u8, kind: u8, seed: u64) -> Vec<u8> {
    let mut d = vec![0u8; PAGE_SIZE << order];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    match kind {
        0 => rng.fill_bytes(&mut d),
        1 => d
            .chunks_exact_mut(8)
            .enumerate()
            .for_each(|(i, w)| w.copy_from_slice(&((i / 5) as u64 ^ seed).to_le_bytes())),
        2 => {}
        _ => d.iter_mut().step_by(16).for_each(|b| *b = rng.random()),
    }
    d
}

fn engine(tiers: &str) -> Engine {
    let dir = std::env::temp_dir();
    let cfg = TiersConfig::parse(&tiers.replace("TMP", &dir.display().to_string())).unwrap();
    let backends = cfg.build().unwrap();
    Engine::new(
        EngineConfig { virtual_slots: 1 << 16, zero_elision: cfg.zero_elision, ..EngineConfig::default() },
        backends,
    )
    .unwrap()
}

fn check(e: &Engine, kept: &[(SwapEntry, Vec<u8>)]) {
    for (ent, d) in kept {
        let mut out = vec![0u8; d.len()];
        e.swap_in(*ent, &mut out, false).unwrap();
        assert!(&out == d, "entry {:#x} len {}", ent.0, d.len());
    }
}

#[test]
fn every_kind_through_every_tier_and_move() {
    let e = engine("zero,lz4:pool=64M,file:TMP:size=64M");
    let mut kept = Vec::new();
    for order in [0u8, 1, 4, 9] {
        for kind in 0..4u8 {
            let d = folio(order, kind, u64::from(order * 10 + kind));
            let ent = e.swap_out(0, &d).unwrap();
            let loc = e.location(ent).unwrap();
            if kind == 2 {
                assert_eq!(loc, Location::Zero);
            } else {
                assert_eq!(loc, Location::Tier(0));
            }
            kept.push((ent, d));
        }
    }
    check(&e, &kept);
    // pool -> file -> pool -> file, checking after each move.
    for to in [1usize, 0, 1] {
        for (ent, _) in &kept {
            e.move_entry(*ent, to).unwrap();
        }
        for (ent, d) in &kept {
            if d.iter().any(|&b| b != 0) {
                assert_eq!(e.location(*ent).unwrap(), Location::Tier(to));
            }
        }
        check(&e, &kept);
    }
    // Free everything: both tiers empty.
    for (ent, d) in &kept {
        e.put(*ent, d.len() / PAGE_SIZE).unwrap();
    }
    assert_eq!(e.tier_usage(0).unwrap().stored_pages, 0);
    assert_eq!(e.tier_usage(1).unwrap().stored_pages, 0);
}

#[test]
fn full_pool_spills_to_the_file_and_writeback_moves_cold_pages() {
    // A pool of 1 MiB: stores beyond it go to the file; writeback then empties the pool.
    let e = engine("zero,lz4:pool=1M,file:TMP:size=64M");
    let mut kept = Vec::new();
    for i in 0..1500u64 {
        let d = folio(0, 3, i);
        kept.push((e.swap_out(0, &d).unwrap(), d));
    }
    let in_file = kept.iter().filter(|(ent, _)| e.location(*ent).unwrap() == Location::Tier(1)).count();
    assert!(in_file > 0, "nothing spilled to the file");
    check(&e, &kept);
    let moved = e.writeback(0, 1, u64::MAX).unwrap() + e.writeback(0, 1, u64::MAX).unwrap();
    assert!(moved > 0);
    assert_eq!(e.stats().snapshot().zswpwb, moved);
    check(&e, &kept);
}

#[test]
fn compaction_through_the_engine_keeps_entries() {
    let e = engine("lz4:pool=256M");
    let mut kept = Vec::new();
    for i in 0..3000u64 {
        let d = folio(0, 3, i);
        kept.push((e.swap_out(0, &d).unwrap(), d));
    }
    // Free most, leaving sparse zspages.
    let mut rest = Vec::new();
    for (i, (ent, d)) in kept.into_iter().enumerate() {
        if i % 5 == 0 {
            rest.push((ent, d));
        } else {
            e.put(ent, 1).unwrap();
        }
    }
    let before = e.tier_usage(0).unwrap().used_bytes;
    let reclaimed = e.compact_tier(0).unwrap();
    assert!(reclaimed > 0);
    assert_eq!(e.tier_usage(0).unwrap().used_bytes, before - reclaimed);
    check(&e, &rest);
}

#[test]
fn drain_races_with_swap_in() {
    for (spec, drain) in [("zero,lz4:pool=256M,file:TMP:size=64M", 0usize), ("zero,file:TMP:size=64M,lz4:pool=256M", 0)]
    {
        let e = Arc::new(engine(spec));
        let mut kept = Vec::new();
        for i in 0..800u64 {
            let order = [0u8, 0, 2, 4][(i % 4) as usize];
            let d = folio(order, (i % 4) as u8, i);
            kept.push((e.swap_out(0, &d).unwrap(), d));
        }
        let kept = Arc::new(kept);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2u64)
            .map(|t| {
                let (e, kept, stop) = (e.clone(), kept.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut rng = rand::rngs::SmallRng::seed_from_u64(t);
                    let mut n = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) || n < 200 {
                        let (ent, d) = &kept[rng.random_range(0..kept.len())];
                        let mut out = vec![0u8; d.len()];
                        e.swap_in(*ent, &mut out, false).unwrap();
                        assert!(&out == d);
                        n += 1;
                    }
                })
            })
            .collect();
        let moved = e.drain_tier(drain).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        assert!(moved > 0);
        assert_eq!(e.tier_usage(drain).unwrap().stored_pages, 0, "{spec}");
        check(&e, &kept);
    }
}

#[test]
fn a_pool_built_by_hand_matches_the_config() {
    let c = TiersConfig::parse("lz4:pool=1M:accept=50%").unwrap();
    let b = c.build().unwrap();
    let hand = ZPool::new("zpool:lz4", PoolConfig { max_bytes: 1 << 20, accept_percent: 50, ..PoolConfig::default() });
    assert_eq!(b[0].usage(), hand.usage());
    assert_eq!(b[0].name(), hand.name());
}
