//! Recompression of idle pool objects (`ZPool::recompress`): against a model (random
//! store/free/load/compact/mark-idle/recompress, every byte checked after every step), idle
//! marks respected, recompression racing with loads, frees, stores and compaction in threads,
//! no allocation when a thread loads a recompressed object, and the engine's entry point.

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;
use uswap::backend::Backend;
use uswap::config::TiersConfig;
use uswap::tier::zpool::{Compressor, FolioMode, PoolConfig, ZPool};
use uswap::vswap::{Engine, EngineConfig};
use uswap::{SwapEntry, PAGE_SIZE};

mod pool_race;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

/// Counts the calls of threads that armed it.
struct Counting;

fn count() {
    if ARMED.with(Cell::get) {
        ALLOCS.with(|a| a.set(a.get() + 1));
    }
}

// SAFETY: forwards to the system allocator; the counting allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's layout, forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        count();
        // SAFETY: `p` came from this allocator with layout `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

const WORDS: &[&str] = &[
    "the ",
    "swap ",
    "page ",
    "folio ",
    "memory ",
    "kernel ",
    "zram ",
    "pool ",
    "object ",
    "class ",
    "of ",
    "and ",
    "compressed ",
    "idle ",
    "handle ",
    "entry ",
    "cluster ",
    "table ",
    "word ",
    "load ",
    "store ",
    "free ",
    "move ",
];

/// Text-like data (lz4 leaves room that zstd takes), random in its first `raw` bytes.
fn text(len: usize, raw: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut v = Vec::with_capacity(len + 16);
    while v.len() < len {
        v.extend_from_slice(WORDS[rng.random_range(0..WORDS.len())].as_bytes());
    }
    v.truncate(len);
    for b in v.iter_mut().take(raw.min(len)) {
        *b = rng.random();
    }
    v
}

fn recomp_cfg(folio_mode: FolioMode) -> PoolConfig {
    PoolConfig { recompress: Some(Compressor::Zstd { level: 3 }), folio_mode, ..PoolConfig::default() }
}

/// owner -> (handle, data).
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
}

#[derive(Clone, Debug)]
enum Op {
    Store { raw: usize, order: u8, seed: u64 },
    Free(usize),
    Load(usize),
    Compact,
    MarkIdle,
    Recompress { idle_only: bool, refuse: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (prop_oneof![2 => Just(0usize), 1 => 0usize..4200], prop_oneof![8 => Just(0u8), 1 => Just(2u8), 1 => Just(4u8)], any::<u64>())
            .prop_map(|(raw, order, seed)| Op::Store { raw, order, seed }),
        3 => any::<usize>().prop_map(Op::Free),
        2 => any::<usize>().prop_map(Op::Load),
        1 => Just(Op::Compact),
        1 => Just(Op::MarkIdle),
        2 => (any::<bool>(), 0u64..4).prop_map(|(idle_only, refuse)| Op::Recompress { idle_only, refuse }),
    ]
}

fn relocate_in(model: &mut Model, refuse: u64) -> impl FnMut(SwapEntry, u64, u64) -> bool + '_ {
    move |owner, old, new| {
        // The "engine" refuses some moves (entry busy in its swap cache).
        if refuse != 0 && owner.0 % 4 == refuse {
            return false;
        }
        let e = model.get_mut(&owner.0).expect("relocate of a live owner");
        assert_eq!(e.0, old);
        e.0 = new;
        true
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]
    #[test]
    fn recompression_matches_model(ops in proptest::collection::vec(op(), 1..120), mode in 0..3u8) {
        let pool = ZPool::new("zpool", recomp_cfg([FolioMode::Whole, FolioMode::PerPage, FolioMode::Block16K][usize::from(mode)]));
        let mut model: Model = HashMap::new();
        let mut next_owner = 0u64;
        for op in ops {
            match op {
                Op::Store { raw, order, seed } => {
                    let data = text(PAGE_SIZE << order, raw, seed);
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
                    let reclaimed = pool.compact(&mut relocate_in(&mut model, 0));
                    prop_assert_eq!(before - pool.usage().used_bytes, reclaimed);
                }
                Op::MarkIdle => pool.mark_idle(),
                Op::Recompress { idle_only, refuse } => {
                    let before = pool.stats();
                    let r = pool.recompress(idle_only, &mut relocate_in(&mut model, refuse));
                    let after = pool.stats();
                    prop_assert_eq!(after.num_recompressed - before.num_recompressed, r.objects);
                    prop_assert_eq!(after.recompressed_pages - before.recompressed_pages, r.pages);
                    prop_assert!(r.pages >= r.objects);
                }
                _ => {}
            }
            check_model(&pool, &model);
        }
        // Everything recompressible is recompressed by an unhindered pass, then nothing is left.
        pool.recompress(false, &mut relocate_in(&mut model, 0));
        check_model(&pool, &model);
        let r = pool.recompress(false, &mut relocate_in(&mut model, 0));
        prop_assert_eq!(r.objects, 0);
        for (_, (h, _)) in model.drain() {
            pool.free(h);
        }
        prop_assert_eq!(pool.usage().used_bytes, 0);
    }
}

#[test]
fn recompression_shrinks_and_respects_idle_marks() {
    let pool = ZPool::new("zpool", recomp_cfg(FolioMode::Whole));
    let mut model: Model = HashMap::new();
    for i in 0..3000u64 {
        let order = if i % 10 == 0 { 4 } else { 0 };
        let data = text(PAGE_SIZE << order, 0, i);
        model.insert(i, (pool.store(&data, SwapEntry(i)).unwrap().handle, data));
    }
    // Stored since no mark: nothing is idle yet... after the mark, everything is but what is
    // loaded since.
    assert_eq!(pool.recompress(true, &mut relocate_in(&mut model, 0)).objects, 0);
    pool.mark_idle();
    let hot: Vec<u64> = (0..3000).step_by(97).collect();
    let mut out = vec![0u8; 16 * PAGE_SIZE];
    for o in &hot {
        let (h, d) = &model[o];
        pool.load(*h, &mut out[..d.len()]).unwrap();
    }
    let hot_handles: Vec<u64> = hot.iter().map(|o| model[o].0).collect();
    let before = pool.usage().used_bytes;
    let r = pool.recompress(true, &mut relocate_in(&mut model, 0));
    assert!(r.objects > 1000 && r.saved_bytes > 0, "{r:?}");
    for (o, h) in hot.iter().zip(&hot_handles) {
        assert_eq!(model[o].0, *h, "owner {o} was loaded since the mark, yet moved");
    }
    pool.compact(&mut relocate_in(&mut model, 0));
    assert!(pool.usage().used_bytes < before, "{} !< {before}", pool.usage().used_bytes);
    check_model(&pool, &model);
    // Tried zspages are not tried again until something is stored in them.
    assert_eq!(pool.recompress(true, &mut relocate_in(&mut model, 0)).objects, 0);
    let s = pool.stats();
    assert_eq!(s.num_recompressed, r.objects);
    assert!(s.recompress_cpu_ns > 0);
}

/// After recompression, a thread that has loaded once before loads zstd objects without a
/// call to the allocator (the fault path's contract).
#[test]
fn loading_recompressed_objects_allocates_nothing() {
    let pool = Arc::new(ZPool::new("zpool", recomp_cfg(FolioMode::Whole)));
    let mut model: Model = HashMap::new();
    for i in 0..500u64 {
        let order = if i % 10 == 0 { 4 } else { 0 };
        let data = text(PAGE_SIZE << order, 0, i);
        model.insert(i, (pool.store(&data, SwapEntry(i)).unwrap().handle, data));
    }
    let list: Vec<(u64, Vec<u8>)> = model.values().cloned().collect();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<(u64, Vec<u8>)>>();
    let (warm_tx, warm_rx) = std::sync::mpsc::channel::<()>();
    let p2 = pool.clone();
    // A "fault thread": one warm-up load (lz4) before any zstd object exists, and before the
    // recompression below may move the object it loads (its handle would then be stale).
    let t = std::thread::spawn(move || {
        let mut out = vec![0u8; 16 * PAGE_SIZE];
        let (h, d) = &list[0];
        p2.load(*h, &mut out[..d.len()]).unwrap();
        warm_tx.send(()).unwrap();
        let after = rx.recv().unwrap();
        ARMED.with(|a| a.set(true));
        for (h, d) in &after {
            p2.load(*h, &mut out[..d.len()]).unwrap();
            assert!(out[..d.len()] == d[..]);
        }
        ARMED.with(|a| a.set(false));
        ALLOCS.with(Cell::get)
    });
    warm_rx.recv().unwrap();
    let r = pool.recompress(false, &mut relocate_in(&mut model, 0));
    assert!(r.objects > 100, "{r:?}");
    tx.send(model.values().cloned().collect()).unwrap();
    assert_eq!(t.join().unwrap(), 0, "allocator calls while loading recompressed objects");
}

/// The engine's protocol in miniature (as in `tier_zpool.rs`): a loader marks its entry busy,
/// a relocate of a busy entry is refused. Recompression (with idle marks) and compaction run
/// in their own threads against stores, loads and frees; every byte is checked.
#[test]
fn recompression_races_with_loads_frees_and_compaction() {
    /// An entry's bytes: `text(PAGE_SIZE << order, raw, seed)`.
    #[derive(Clone, Copy)]
    struct Meta {
        seed: u64,
        raw: usize,
        order: u8,
    }
    let pool = Arc::new(ZPool::new("zpool", recomp_cfg(FolioMode::Whole)));
    let table = pool_race::table::<Meta>();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let passes: Vec<_> = [true, false]
        .into_iter()
        .map(|recompress| {
            let (pool, table, stop) = (pool.clone(), table.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut relocate = |o, old, new| pool_race::relocate(&table, o, old, new);
                let (mut n, mut pass) = (0u64, 0u64);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    pass += 1;
                    if recompress {
                        n += pool.recompress(!pass.is_multiple_of(3), &mut relocate).objects;
                        pool.mark_idle();
                    } else {
                        pool.compact(&mut relocate);
                    }
                    std::thread::yield_now();
                }
                n
            })
        })
        .collect();
    // Stores (half the steps; one in eight a 16-page folio, some with random heads), loads, frees.
    let owner = |thread| pool_race::Owner {
        thread,
        steps: 4000,
        stores: 2,
        of: 4,
        make: |rng: &mut rand::rngs::SmallRng| {
            let (seed, raw) = (rng.random::<u64>(), [0, 0, 500, 4096][rng.random_range(0..4)]);
            let order = if rng.random_range(0..8) == 0 { 4 } else { 0 };
            (text(PAGE_SIZE << order, raw, seed), Meta { seed, raw, order })
        },
        expect: |m: &Meta| text(PAGE_SIZE << m.order, m.raw, m.seed),
    };
    pool_race::race(&pool, &table, 2, owner);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let moved: Vec<u64> = passes.into_iter().map(|p| p.join().unwrap()).collect();
    owner(0).check_all(&pool, &table, |m| 1 << m.order);
    assert!(moved[0] > 0, "no object was recompressed during the race");
}

#[test]
fn the_engine_recompresses_through_its_relocate_hook() {
    let cfg = TiersConfig::parse("zero,lz4:pool=256M:recomp=zstd:recomp_level=3").unwrap();
    let e = Engine::new(
        EngineConfig { virtual_slots: 1 << 16, zero_elision: cfg.zero_elision, ..EngineConfig::default() },
        cfg.build().unwrap(),
    )
    .unwrap();
    let mut kept = Vec::new();
    for i in 0..2000u64 {
        let order = if i % 8 == 0 { 2 } else { 0 };
        let d = text(PAGE_SIZE << order, 0, i);
        kept.push((e.swap_out(0, &d).unwrap(), d));
    }
    e.mark_idle_tier(0).unwrap();
    let r = e.recompress_tier(0, true).unwrap();
    assert!(r.objects > 1000, "{r:?}");
    e.compact_tier(0).unwrap();
    for (ent, d) in &kept {
        let mut out = vec![0u8; d.len()];
        e.swap_in(*ent, &mut out, false).unwrap();
        assert!(&out == d, "entry {:#x}", ent.0);
    }
    assert!(e.recompress_tier(7, true).is_err());
}
