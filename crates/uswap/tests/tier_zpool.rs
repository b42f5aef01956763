//! Compressed pool: round trips of every kind of data and folio size, the size-class allocator
//! against a model (random store/free/compact), the size limit with hysteresis, and
//! store/load/free racing with compaction.

use proptest::prelude::*;
use rand::{Rng, RngCore, SeedableRng};
use std::collections::HashMap;
use std::sync::Arc;
use uswap::backend::Backend;
use uswap::tier::zpool::{Compressor, FolioMode, Incompressible, PoolConfig, ZPool};
use uswap::{SwapEntry, TierError, PAGE_SIZE};

mod pool_race;

#[derive(Copy, Clone, Debug)]
enum Fill {
    Random,
    Pattern,
    Zero,
    /// Random for the first `n` bytes of each page, then a repeated byte: compresses to ~n.
    Partial(usize),
}

fn fill(buf: &mut [u8], f: Fill, seed: u64) {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    match f {
        Fill::Random => rng.fill_bytes(buf),
        Fill::Pattern => {
            for (i, w) in buf.chunks_exact_mut(8).enumerate() {
                w.copy_from_slice(&((i as u64 / 3) ^ seed).to_le_bytes());
            }
        }
        Fill::Zero => buf.fill(0),
        Fill::Partial(n) => {
            for p in buf.chunks_exact_mut(PAGE_SIZE) {
                rng.fill_bytes(&mut p[..n.min(PAGE_SIZE)]);
                p[n.min(PAGE_SIZE)..].fill(0x5a);
            }
        }
    }
}

fn configs() -> Vec<PoolConfig> {
    let mut v = Vec::new();
    for compressor in [Compressor::Lz4, Compressor::Zstd { level: 1 }] {
        for folio_mode in [FolioMode::Whole, FolioMode::PerPage, FolioMode::Block16K] {
            v.push(PoolConfig { compressor, folio_mode, ..PoolConfig::default() });
        }
    }
    v
}

#[test]
fn round_trip_every_kind_and_size() {
    for cfg in configs() {
        let pool = ZPool::new("zpool", cfg.clone());
        let mut kept = Vec::new();
        for order in 0..=9u8 {
            for f in [Fill::Random, Fill::Pattern, Fill::Zero, Fill::Partial(1000), Fill::Partial(3500)] {
                let mut data = vec![0u8; PAGE_SIZE << order];
                fill(&mut data, f, u64::from(order) * 100 + 7);
                let st = pool
                    .store(&data, SwapEntry(u64::from(order)))
                    .unwrap_or_else(|e| panic!("{cfg:?} {f:?} {order}: {e}"));
                let mut out = vec![0xffu8; data.len()];
                pool.load(st.handle, &mut out).unwrap();
                assert!(out == data, "{cfg:?} {f:?} order {order}");
                // A wrong-sized buffer is refused, not filled.
                let mut small = vec![0u8; PAGE_SIZE / 2];
                assert!(pool.load(st.handle, &mut small).is_err());
                kept.push((st, data));
            }
        }
        pool.check_invariants().unwrap();
        // Everything is still there after more stores, then freed to an empty pool.
        for (st, data) in &kept {
            let mut out = vec![0u8; data.len()];
            pool.load(st.handle, &mut out).unwrap();
            assert!(&out == data);
        }
        for (st, _) in &kept {
            assert!(pool.free(st.handle) > 0);
            assert_eq!(pool.free(st.handle), 0, "double free is a no-op");
        }
        assert_eq!(pool.usage().stored_pages, 0);
        assert_eq!(pool.usage().used_bytes, 0, "{cfg:?}");
        pool.check_invariants().unwrap();
    }
}

#[test]
fn incompressible_pages_by_policy() {
    let mut data = vec![0u8; PAGE_SIZE];
    fill(&mut data, Fill::Random, 1);
    let raw = ZPool::new("zpool", PoolConfig::default());
    let st = raw.store(&data, SwapEntry(1)).unwrap();
    assert_eq!(raw.stats().stored_incompressible_pages, 1);
    let mut out = vec![0u8; PAGE_SIZE];
    raw.load(st.handle, &mut out).unwrap();
    assert_eq!(out, data);
    let rej = ZPool::new("zpool", PoolConfig { incompressible: Incompressible::Reject, ..PoolConfig::default() });
    assert_eq!(rej.store(&data, SwapEntry(1)), Err(TierError::Reject));
    assert_eq!(rej.stats().reject_compress_poor, 1);
    assert_eq!(rej.usage().stored_pages, 0);
    // Compressible data passes the same policy.
    fill(&mut data, Fill::Partial(500), 2);
    assert!(rej.store(&data, SwapEntry(2)).is_ok());
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let pool = ZPool::new("zpool", PoolConfig::default());
    assert!(pool.store(&[0u8; 100], SwapEntry(0)).is_err());
    assert!(pool.store(&vec![0u8; 3 * PAGE_SIZE], SwapEntry(0)).is_err());
    assert!(pool.store(&vec![0u8; PAGE_SIZE << 10], SwapEntry(0)).is_err());
    let mut out = vec![0u8; PAGE_SIZE];
    for h in [0u64, 1 << 40, (1 << 41) - 1, 12345] {
        assert!(matches!(pool.load(h, &mut out), Err(TierError::BadHandle(_))), "{h:#x}");
        assert_eq!(pool.free(h), 0);
    }
}

#[test]
fn full_pool_rejects_with_hysteresis_and_keeps_pages() {
    let max = 256 * 1024;
    let pool = ZPool::new("zpool", PoolConfig { max_bytes: max, accept_percent: 50, ..PoolConfig::default() });
    let mut kept = Vec::new();
    let mut i = 0u64;
    loop {
        let mut data = vec![0u8; PAGE_SIZE];
        fill(&mut data, Fill::Partial(1500), i);
        match pool.store(&data, SwapEntry(i)) {
            Ok(st) => kept.push((st, data)),
            Err(TierError::Reject) => break,
            Err(e) => panic!("{e}"),
        }
        i += 1;
        assert!(i < 10_000, "pool never filled");
    }
    assert!(pool.usage().used_bytes <= max);
    assert!(pool.over_limit());
    assert!(pool.stats().pool_limit_hit >= 1);
    // Every page stored before the reject is intact.
    for (st, data) in &kept {
        let mut out = vec![0u8; PAGE_SIZE];
        pool.load(st.handle, &mut out).unwrap();
        assert!(&out == data);
    }
    // Freeing a little does not reopen the pool (hysteresis) ...
    let (st, _) = kept.pop().unwrap();
    pool.free(st.handle);
    let mut small = vec![0u8; PAGE_SIZE];
    fill(&mut small, Fill::Partial(100), 999);
    assert_eq!(pool.store(&small, SwapEntry(999)), Err(TierError::Reject));
    // ... freeing below the accept threshold does.
    while pool.usage().used_bytes > max / 2 {
        let (st, _) = kept.pop().unwrap();
        pool.free(st.handle);
    }
    assert!(!pool.over_limit(), "{:?} max {max}", pool.usage());
    assert!(pool.store(&small, SwapEntry(999)).is_ok());
    pool.check_invariants().unwrap();
}

#[derive(Clone, Debug)]
enum Op {
    Store { n: usize, order: u8, seed: u64 },
    Free(usize),
    Load(usize),
    Compact,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..4200, prop_oneof![8 => Just(0u8), 1 => Just(1u8), 1 => Just(3u8)], any::<u64>())
            .prop_map(|(n, order, seed)| Op::Store { n, order, seed }),
        4 => any::<usize>().prop_map(Op::Free),
        2 => any::<usize>().prop_map(Op::Load),
        1 => Just(Op::Compact),
    ]
}

/// The engine side of the model: owner -> (handle, data).
type Model = HashMap<u64, (u64, Vec<u8>)>;

fn check_model(pool: &ZPool, model: &Model) {
    pool.check_invariants().unwrap();
    let pages: u64 = model.values().map(|(_, d)| (d.len() / PAGE_SIZE) as u64).sum();
    assert_eq!(pool.usage().stored_pages, pages);
    let mut spans: Vec<(usize, usize)> =
        model.values().map(|(h, _)| pool.object_span(*h).expect("live handle")).collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "objects overlap: {w:?}");
    }
    for (owner, (h, data)) in model {
        assert_eq!(pool.owner_of(*h).unwrap(), SwapEntry(*owner));
        let mut out = vec![0u8; data.len()];
        pool.load(*h, &mut out).unwrap();
        assert!(&out == data, "owner {owner}");
    }
    if model.is_empty() {
        assert_eq!(pool.usage().used_bytes, 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn allocator_matches_model(ops in proptest::collection::vec(op(), 1..160), mode in 0..3u8) {
        let cfg = PoolConfig {
            threshold_percent: 100,
            folio_mode: [FolioMode::Whole, FolioMode::PerPage, FolioMode::Block16K][usize::from(mode)],
            ..PoolConfig::default()
        };
        let pool = ZPool::new("zpool", cfg);
        let mut model: Model = HashMap::new();
        let mut next_owner = 0u64;
        for op in ops {
            match op {
                Op::Store { n, order, seed } => {
                    let mut data = vec![0u8; PAGE_SIZE << order];
                    fill(&mut data, Fill::Partial(n), seed);
                    let st = pool.store(&data, SwapEntry(next_owner)).unwrap();
                    prop_assert!(model.insert(next_owner, (st.handle, data)).is_none());
                    next_owner += 1;
                }
                Op::Free(i) if !model.is_empty() => {
                    let owner = *model.keys().nth(i % model.len()).unwrap();
                    let (h, _) = model.remove(&owner).unwrap();
                    prop_assert!(pool.free(h) > 0);
                }
                Op::Load(i) if !model.is_empty() => {
                    let (h, data) = model.values().nth(i % model.len()).unwrap();
                    let mut out = vec![0u8; data.len()];
                    pool.load(*h, &mut out).unwrap();
                    prop_assert!(&out == data);
                }
                Op::Compact => {
                    let before = pool.usage().used_bytes;
                    let mut moves = 0;
                    let reclaimed = pool.compact(&mut |owner, old, new| {
                        let e = model.get_mut(&owner.0).expect("relocate of a live owner");
                        assert_eq!(e.0, old);
                        e.0 = new;
                        moves += 1;
                        true
                    });
                    prop_assert_eq!(before - pool.usage().used_bytes, reclaimed);
                }
                _ => {}
            }
            check_model(&pool, &model);
        }
        // After a full compaction no class could free a zspage by another pass.
        let mut again = 0;
        pool.compact(&mut |owner, old, new| {
            let e = model.get_mut(&owner.0).unwrap();
            assert_eq!(e.0, old);
            e.0 = new;
            again += 1;
            true
        });
        check_model(&pool, &model);
    }
}

#[test]
fn compaction_frees_sparse_zspages_and_respects_refusals() {
    let pool = ZPool::new("zpool", PoolConfig::default());
    let mut model: Model = HashMap::new();
    for i in 0..2000u64 {
        let mut data = vec![0u8; PAGE_SIZE];
        fill(&mut data, Fill::Partial(700), i);
        let st = pool.store(&data, SwapEntry(i)).unwrap();
        model.insert(i, (st.handle, data));
    }
    // Free 3 of every 4: zspages become sparse.
    for i in 0..2000u64 {
        if !i.is_multiple_of(4) {
            let (h, _) = model.remove(&i).unwrap();
            pool.free(h);
        }
    }
    let before = pool.usage().used_bytes;
    // The "engine" refuses the moves of some entries (busy in its swap cache): those stay put.
    let mut refused = 0;
    let reclaimed = pool.compact(&mut |owner, old, new| {
        if owner.0.is_multiple_of(512) {
            refused += 1;
            return false;
        }
        let e = model.get_mut(&owner.0).unwrap();
        assert_eq!(e.0, old);
        e.0 = new;
        true
    });
    assert!(reclaimed > 0 && refused > 0);
    assert_eq!(before - pool.usage().used_bytes, reclaimed);
    check_model(&pool, &model);
    // A second, unhindered pass compacts the rest.
    let r2 = pool.compact(&mut |owner, old, new| {
        let e = model.get_mut(&owner.0).unwrap();
        assert_eq!(e.0, old);
        e.0 = new;
        true
    });
    check_model(&pool, &model);
    let after = pool.usage().used_bytes;
    assert!(after < before - reclaimed || r2 == 0, "before {before} reclaimed {reclaimed} r2 {r2} after {after}");
    assert!(pool.stats().compacted_objects > 0);
}

/// The engine's protocol in miniature (`pool_race`): a loader marks its entry busy (the swap
/// cache's CACHED word), so a relocate of a busy entry is refused and the old handle stays
/// valid; compaction runs in its own thread against stores, loads and frees.
#[test]
fn store_load_free_race_with_compaction() {
    /// An entry's bytes: one page of `Fill::Partial(n)` from `seed`.
    #[derive(Clone, Copy)]
    struct Meta {
        seed: u64,
        n: usize,
    }
    let pool = Arc::new(ZPool::new("zpool", PoolConfig::default()));
    let table = pool_race::table::<Meta>();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let compactor = {
        let (pool, table, stop) = (pool.clone(), table.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                pool.compact(&mut |o, old, new| pool_race::relocate(&table, o, old, new));
                std::thread::yield_now();
            }
        })
    };
    fn page(m: &Meta) -> Vec<u8> {
        let mut data = vec![0u8; PAGE_SIZE];
        fill(&mut data, Fill::Partial(m.n), m.seed);
        data
    }
    let owner = |thread| pool_race::Owner {
        thread,
        steps: 3000,
        stores: 1,
        of: 3,
        make: |rng: &mut rand::rngs::SmallRng| {
            let m = Meta { seed: rng.random::<u64>(), n: rng.random_range(0..4000) };
            (page(&m), m)
        },
        expect: page,
    };
    pool_race::race(&pool, &table, 3, owner);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    compactor.join().unwrap();
    owner(0).check_all(&pool, &table, |_| 1);
}

/// A part of a stored large folio (what a 4 KiB swap-in needs) reads back exactly, whether the
/// folio is one compression unit (prefix decode), one unit per page or one per 16 KiB (only
/// the part's units).
#[test]
fn load_part_reads_each_page_of_a_large_folio() {
    for mode in [FolioMode::Whole, FolioMode::PerPage, FolioMode::Block16K] {
        let pool = ZPool::new("zpool", PoolConfig { folio_mode: mode, ..PoolConfig::default() });
        let mut data = vec![0u8; 16 * PAGE_SIZE];
        // Pages of every kind in one folio: pattern, random (stored raw per page), zero, partial.
        for (i, page) in data.chunks_exact_mut(PAGE_SIZE).enumerate() {
            let f = [Fill::Pattern, Fill::Random, Fill::Zero, Fill::Partial(700)][i % 4];
            fill(page, f, i as u64);
        }
        let st = pool.store(&data, SwapEntry(0)).unwrap();
        for first in 0..16 {
            for n in [1usize, 2] {
                if first + n > 16 {
                    continue;
                }
                let mut out = vec![0xeeu8; data.len()];
                let (at, len) = (first * PAGE_SIZE, n * PAGE_SIZE);
                pool.load_part(st.handle, &mut out, at, len).unwrap();
                assert!(out[at..at + len] == data[at..at + len], "{mode:?} pages {first}+{n}");
            }
        }
        let mut out = vec![0u8; data.len()];
        assert!(pool.load_part(st.handle, &mut out, 15 * PAGE_SIZE, 2 * PAGE_SIZE).is_err(), "part past the end");
        pool.free(st.handle);
    }
}
