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

/// Swap out every folio of `datas`, keeping each entry with its data.
fn store_all(e: &Engine, datas: impl Iterator<Item = Vec<u8>>) -> Vec<(SwapEntry, Vec<u8>)> {
    datas.map(|d| (e.swap_out(0, &d).unwrap(), d)).collect()
}

/// Threads that swap in random entries of `kept` and check every byte, until `stop` is set and
/// each has done at least `min` reads.
fn spawn_readers(
    e: &Arc<Engine>,
    kept: &Arc<Vec<(SwapEntry, Vec<u8>)>>,
    stop: &Arc<std::sync::atomic::AtomicBool>,
    seed: u64,
    min: u64,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..2u64)
        .map(|t| {
            let (e, kept, stop) = (e.clone(), kept.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = rand::rngs::SmallRng::seed_from_u64(seed + t);
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || n < min {
                    let (ent, d) = &kept[rng.random_range(0..kept.len())];
                    let mut out = vec![0u8; d.len()];
                    e.swap_in(*ent, &mut out, false).unwrap();
                    assert!(&out == d, "entry {:#x} differs", ent.0);
                    n += 1;
                }
            })
        })
        .collect()
}

fn check(e: &Engine, kept: &[(SwapEntry, Vec<u8>)]) {
    for (ent, d) in kept {
        let mut out = vec![0u8; d.len()];
        e.swap_in(*ent, &mut out, false).unwrap();
        assert!(&out == d, "entry {:#x} len {}", ent.0, d.len());
    }
}

/// By default (`incompressible=auto`) a pool with a file below it stores only what compresses:
/// an incompressible folio goes straight to the file, a move of it into the pool is refused
/// and leaves it where it was, and every byte reads back.
#[test]
fn incompressible_folios_go_past_a_pool_with_a_file_below_it() {
    let e = engine("zero,lz4:pool=64M,file:TMP:size=64M");
    let mut kept = Vec::new();
    for order in [0u8, 4] {
        for kind in [0u8, 1] {
            let d = folio(order, kind, u64::from(order * 10 + kind));
            let ent = e.swap_out(0, &d).unwrap();
            let want = if kind == 0 { Location::Tier(1) } else { Location::Tier(0) };
            assert_eq!(e.location(ent).unwrap(), want, "order {order} kind {kind}");
            kept.push((ent, d, want));
        }
    }
    for (ent, _, want) in &kept {
        if *want == Location::Tier(1) {
            assert!(e.move_entry(*ent, 0).is_err(), "an incompressible folio moved into the pool");
            assert_eq!(e.location(*ent).unwrap(), Location::Tier(1));
        }
    }
    check(&e, &kept.iter().map(|(ent, d, _)| (*ent, d.clone())).collect::<Vec<_>>());
}

#[test]
fn every_kind_through_every_tier_and_move() {
    // Incompressible folios kept raw in the pool, so every kind goes through both tiers.
    let e = engine("zero,lz4:pool=64M:incompressible=raw,file:TMP:size=64M");
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
    let kept = store_all(&e, (0..1500u64).map(|i| folio(0, 3, i)));
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
    let kept = store_all(&e, (0..3000u64).map(|i| folio(0, 3, i)));
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
        let readers = spawn_readers(&e, &kept, &stop, 0, 200);
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

#[test]
fn tiers_move_both_ways_while_swap_ins_run() {
    // Pool (tier 0) and encrypted file (tier 1). Readers swap in random entries (REF set on
    // file-tier objects: refaults) while the main thread cycles proactive writeback by age,
    // promotion back into the pool, second-chance writeback, and drains of either tier
    // (batched, with 2 threads). Every read must be exact, and so must everything at the end.
    let e = Arc::new(engine("zero,lz4:pool=256M,file:TMP:size=64M"));
    e.set_drain_threads(2);
    let kept = store_all(
        &e,
        (0..1200u64).map(|i| {
            let order = [0u8, 0, 0, 2, 4][(i % 5) as usize];
            folio(order, (i % 4) as u8, i)
        }),
    );
    let kept = Arc::new(kept);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers = spawn_readers(&e, &kept, &stop, 10, 300);
    let (mut wb, mut promoted, mut drained) = (0, 0, 0);
    for round in 0..6 {
        wb += e.writeback_older_than(0, 1, std::time::Duration::ZERO, 400).unwrap();
        promoted += e.promote(1, 0, 300).unwrap();
        wb += e.writeback(0, 1, 200).unwrap();
        let t = round % 2;
        drained += e.drain_tier(t).unwrap();
        e.set_tier_online(t, true).unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert!(wb > 0 && drained > 0, "wb {wb} drained {drained}");
    assert!(promoted > 0, "nothing promoted although readers refaulted file-tier pages");
    let s = e.stats().snapshot();
    assert_eq!(s.swp_promote, promoted);
    assert!(s.zswpwb_proactive > 0 && s.zswpwb >= s.zswpwb_proactive);
    assert_eq!(s.swp_drain, drained);
    check(&e, &kept);
}

#[test]
fn promotion_takes_only_refaulted_pages_and_stops_at_a_full_pool() {
    let e = engine("lz4:pool=256M,file:TMP:size=64M");
    let mut kept = Vec::new();
    for i in 0..64u64 {
        let d = folio(0, 3, i);
        let ent = e.swap_out(0, &d).unwrap();
        assert_eq!(e.move_entry(ent, 1).unwrap(), 1);
        kept.push((ent, d));
    }
    // Nothing read since it reached the file: nothing to promote.
    assert_eq!(e.promote(1, 0, u64::MAX).unwrap(), 0);
    // Refault every 4th page: exactly those come back.
    let mut out = vec![0u8; PAGE_SIZE];
    for (ent, _) in kept.iter().step_by(4) {
        e.swap_in(*ent, &mut out, false).unwrap();
    }
    assert_eq!(e.promote(1, 0, u64::MAX).unwrap(), 16);
    for (i, (ent, _)) in kept.iter().enumerate() {
        let want = if i % 4 == 0 { Location::Tier(0) } else { Location::Tier(1) };
        assert_eq!(e.location(*ent).unwrap(), want, "entry {i}");
    }
    assert_eq!(e.stats().snapshot().swp_promote, 16);
    check(&e, &kept);
    // A pool that takes nothing: promotion stops, counts the rejection, loses nothing.
    e.set_tier_online(0, false).unwrap();
    assert_eq!(e.promote(1, 0, u64::MAX).unwrap(), 0);
    assert!(e.stats().snapshot().swp_promote_reject > 0);
    check(&e, &kept);
}

#[test]
fn writeback_by_age_leaves_young_pages() {
    let e = engine("lz4:pool=256M,file:TMP:size=64M");
    let kept = store_all(&e, (0..100u64).map(|i| folio(0, 3, i)));
    // Nothing is an hour old; everything is at least 0 old.
    assert_eq!(e.writeback_older_than(0, 1, std::time::Duration::from_secs(3600), u64::MAX).unwrap(), 0);
    assert_eq!(e.writeback_older_than(0, 1, std::time::Duration::ZERO, 30).unwrap(), 30);
    assert_eq!(e.tier_usage(1).unwrap().stored_pages, 30);
    let s = e.stats().snapshot();
    assert_eq!((s.zswpwb, s.zswpwb_proactive), (30, 30));
    check(&e, &kept);
}

#[test]
fn swap_in_many_reads_every_page_asked_for_and_keeps_its_count() {
    use uswap::vswap::PageIn;
    for tiers in ["zero,file:TMP", "zero,lz4,file:TMP", "lz4"] {
        let e = engine(tiers);
        // 4 KiB pages: random (to the file where there is one), patterned, zero.
        let kept = store_all(&e, (0..24u64).map(|i| folio(0, (i % 3) as u8, 500 + i)));
        let mut outs = vec![vec![0xa5u8; PAGE_SIZE]; 16];
        let mut reqs: Vec<PageIn<'_>> = outs
            .iter_mut()
            .enumerate()
            .map(|(i, o)| PageIn { entry: kept[i + 4].0, out: o, ahead: i % 2 == 1, result: Ok(()) })
            .collect();
        e.swap_in_many(&mut reqs);
        let results: Vec<_> = reqs.into_iter().map(|r| r.result).collect();
        for (i, (r, o)) in results.iter().zip(&outs).enumerate() {
            let ahead = i % 2 == 1;
            match r {
                Ok(()) => assert!(o == &kept[i + 4].1, "{tiers}: page {i}: wrong bytes"),
                Err(uswap::SwapError::Tier(uswap::TierError::Reject)) if ahead => {
                    assert!(o.iter().all(|&b| b == 0xa5), "{tiers}: a skipped page's out was written")
                }
                Err(err) => panic!("{tiers}: page {i} (ahead {ahead}): {err}"),
            }
        }
        // The counts are kept: every page reads again, then frees.
        for (entry, d) in &kept {
            let mut o = vec![0u8; PAGE_SIZE];
            e.swap_in(*entry, &mut o, true).unwrap();
            assert!(&o == d, "{tiers}: {entry:?} lost");
        }
        if tiers.starts_with("zero") {
            assert!(e.stats().get(uswap::Event::SwpinZero) > 0, "{tiers}: no zero page read as zero");
        }
        for t in 0..e.nr_tiers() {
            assert_eq!(e.tier_usage(t).unwrap().stored_pages, 0, "{tiers}: tier {t} still holds pages");
        }
    }
}
