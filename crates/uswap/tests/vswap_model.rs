//! Model test of the engine: random sequences of swap-out (all orders, zero and random data),
//! swap-in (with and without free, at the folio's order, below it and above it), dup, put,
//! move, writeback (second chance and by age), promotion of refaulted file-tier objects,
//! drain (batched, 1 or 2 threads, and with failing loads), compaction and injected tier
//! failures, checked after every step
//! against a HashMap model: every byte read back, counts, slots in use, where each object's
//! data is charged (tier usage, group counters), folios left in the swap cache; and at the end
//! that putting everything returns every counter to zero.

mod vswap_common;

use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use uswap::backend::{Backend, TierKind};
use uswap::internals::cluster::FragPolicy;
use uswap::vswap::{Engine, EngineConfig, Location};
use uswap::{SwapEntry, SwapError, PAGE_SIZE, SLOTS_PER_CLUSTER};
use vswap_common::{make_data, TestBackend};

const SLOTS: u64 = 4 * SLOTS_PER_CLUSTER as u64;
const KINDS: [TierKind; 3] = [TierKind::Pool, TierKind::File, TierKind::Memory];

#[derive(Clone, Debug)]
enum Op {
    Out { order: u8, seed: u64, group: u16 },
    In { pick: usize, order: u8, free: bool },
    Dup { pick: usize, nr: usize },
    Put { pick: usize, nr: usize },
    PutAt { slot: u64 },
    Move { pick: usize, tier: usize, fail: bool },
    LoadFail { pick: usize },
    Writeback { from: usize, to: usize, max: u64 },
    Drain { tier: usize, threads: usize },
    DrainFail { tier: usize },
    Promote { from: usize, to: usize, max: u64 },
    WritebackAge { from: usize, to: usize, old: bool, max: u64 },
    Compact { tier: usize },
}

fn op() -> impl Strategy<Value = Op> {
    let order = prop_oneof![4 => Just(0u8), 3 => 1u8..=4, 1 => 5u8..=9];
    prop_oneof![
        6 => (order, 0u64..12, 0u16..3).prop_map(|(order, seed, group)| Op::Out { order, seed, group }),
        4 => (any::<usize>(), 0u8..=9, any::<bool>()).prop_map(|(pick, order, free)| Op::In { pick, order, free }),
        2 => (any::<usize>(), 1usize..20).prop_map(|(pick, nr)| Op::Dup { pick, nr }),
        3 => (any::<usize>(), 1usize..20).prop_map(|(pick, nr)| Op::Put { pick, nr }),
        1 => (0..SLOTS + 600).prop_map(|slot| Op::PutAt { slot }),
        2 => (any::<usize>(), 0usize..3, prop::bool::weighted(0.2)).prop_map(|(pick, tier, fail)| Op::Move { pick, tier, fail }),
        1 => any::<usize>().prop_map(|pick| Op::LoadFail { pick }),
        1 => (0usize..3, 0usize..3, 1u64..64).prop_map(|(from, to, max)| Op::Writeback { from, to, max }),
        1 => (0usize..3, 1usize..3).prop_map(|(tier, threads)| Op::Drain { tier, threads }),
        1 => (0usize..3).prop_map(|tier| Op::DrainFail { tier }),
        2 => (0usize..3, 0usize..3, 1u64..64).prop_map(|(from, to, max)| Op::Promote { from, to, max }),
        2 => (0usize..3, 0usize..3, any::<bool>(), 1u64..64)
            .prop_map(|(from, to, old, max)| Op::WritebackAge { from, to, old, max }),
        1 => (0usize..3).prop_map(|tier| Op::Compact { tier }),
    ]
}

struct Obj {
    first: u64,
    order: u8,
    data: Vec<u8>,
    group: u16,
}

#[derive(Default)]
struct Model {
    /// Allocated slot -> (count, object id). Count-0 slots of a live object stay allocated.
    slots: BTreeMap<u64, (u32, usize)>,
    objs: HashMap<usize, Obj>,
    next: usize,
}

impl Model {
    fn add(&mut self, first: u64, order: u8, data: Vec<u8>, group: u16) {
        let id = self.next;
        self.next += 1;
        for i in 0..1u64 << order {
            assert!(self.slots.insert(first + i, (1, id)).is_none(), "slot {} handed out twice", first + i);
        }
        self.objs.insert(id, Obj { first, order, data, group });
    }
    fn live(&self) -> Vec<u64> {
        self.slots.iter().filter(|(_, (c, _))| *c > 0).map(|(s, _)| *s).collect()
    }
    fn is_live(&self, s: u64) -> bool {
        self.slots.get(&s).is_some_and(|(c, _)| *c > 0)
    }
    fn byte_range(&self, s: u64, n: u64) -> Vec<u8> {
        let mut v = Vec::with_capacity((n as usize) * PAGE_SIZE);
        for i in s..s + n {
            let (_, id) = self.slots[&i];
            let o = &self.objs[&id];
            let at = (i - o.first) as usize * PAGE_SIZE;
            v.extend_from_slice(&o.data[at..at + PAGE_SIZE]);
        }
        v
    }
    fn put(&mut self, s: u64, n: u64) {
        for i in s..s + n {
            let e = self.slots.get_mut(&i).unwrap();
            e.0 -= 1;
            let id = e.1;
            let o = &self.objs[&id];
            let (f, ord) = (o.first, o.order);
            if (f..f + (1 << ord)).all(|j| self.slots[&j].0 == 0) {
                for j in f..f + (1 << ord) {
                    self.slots.remove(&j);
                }
                self.objs.remove(&id);
            }
        }
    }
}

struct Rig {
    eng: Engine,
    tiers: Vec<Arc<TestBackend>>,
    m: Model,
    zero_elision: bool,
}

fn rig(zero_elision: bool) -> Rig {
    let tiers: Vec<Arc<TestBackend>> = vec![
        Arc::new(TestBackend::new("pool", KINDS[0], 48)),
        Arc::new(TestBackend::new("file", KINDS[1], 700)),
        Arc::new(TestBackend::new("mem", KINDS[2], 0)),
    ];
    let dyn_tiers: Vec<Arc<dyn Backend>> = tiers.iter().map(|t| t.clone() as Arc<dyn Backend>).collect();
    let eng = Engine::new(
        EngineConfig { virtual_slots: SLOTS, frag_policy: FragPolicy::ScanOne, zero_elision, nr_groups: 4 },
        dyn_tiers,
    )
    .unwrap();
    eng.groups().set_swap_max(1, 200).unwrap();
    eng.groups().set_pool_max(2, 40 * PAGE_SIZE as u64).unwrap();
    Rig { eng, tiers, m: Model::default(), zero_elision }
}

impl Rig {
    /// An aligned range of order <= `order` around live slot `s` whose slots are all live.
    fn range(&self, s: u64, order: u8) -> (u64, u64) {
        let mut o = order;
        loop {
            let n = 1u64 << o;
            let start = s & !(n - 1);
            if (start..start + n).all(|i| self.m.is_live(i)) {
                return (start, n);
            }
            o -= 1;
        }
    }

    fn read(&self, s: u64, n: u64, free: bool) {
        let mut out = vec![0xa5u8; n as usize * PAGE_SIZE];
        self.eng.swap_in(SwapEntry(s), &mut out, free).unwrap_or_else(|e| panic!("swap_in {s:#x}+{n}: {e}"));
        assert!(out == self.m.byte_range(s, n), "bytes differ at {s:#x}+{n}");
    }

    fn check(&self) {
        let e = &self.eng;
        assert_eq!(e.space().used_slots(), self.m.slots.len(), "slots in use");
        let mut tier_pages = [0u64; 3];
        let mut swap_pages = [0u64; 4];
        let mut pool_bytes = [0u64; 4];
        let mut swapped = [0u64; 4];
        let mut cached = 0;
        for o in self.m.objs.values() {
            let pages = 1u64 << o.order;
            swapped[o.group as usize] += pages;
            let loc = e.location(SwapEntry(o.first)).unwrap();
            if self.zero_elision && o.data.iter().all(|&b| b == 0) && o.order == 0 && loc == Location::Zero {
                continue;
            }
            for i in 0..pages {
                assert_eq!(e.location(SwapEntry(o.first + i)).unwrap(), loc, "object {:#x} split", o.first);
            }
            match loc {
                Location::Zero => panic!("non-zero object {:#x} is ZERO", o.first),
                Location::Cache => cached += 1,
                Location::Tier(t) => {
                    tier_pages[t] += pages;
                    match KINDS[t] {
                        TierKind::File => swap_pages[o.group as usize] += pages,
                        _ => pool_bytes[o.group as usize] += pages * PAGE_SIZE as u64,
                    }
                }
            }
        }
        for (t, b) in self.tiers.iter().enumerate() {
            assert_eq!(b.usage().stored_pages, tier_pages[t], "tier {t} pages");
        }
        for g in 0..4u16 {
            let u = e.groups().usage(g).unwrap();
            assert_eq!(u.swap_pages, swap_pages[g as usize], "group {g} swap pages");
            assert_eq!(u.pool_bytes, pool_bytes[g as usize], "group {g} pool bytes");
            assert_eq!(u.swapped_pages, swapped[g as usize], "group {g} swapped pages");
            assert!(u.swap_pages <= u.swap_max);
        }
        assert_eq!(e.cache().nr_cached(), cached, "folios in the swap cache");
        for (s, (c, _)) in &self.m.slots {
            assert_eq!(e.count(SwapEntry(*s)).unwrap(), *c, "count of {s:#x}");
        }
    }

    fn pick(&self, pick: usize) -> Option<u64> {
        let live = self.m.live();
        (!live.is_empty()).then(|| live[pick % live.len()])
    }

    fn step(&mut self, op: &Op) {
        let e = &self.eng;
        match *op {
            Op::Out { order, seed, group } => {
                let data = make_data(order, seed);
                let used = e.space().used_slots();
                match e.swap_out(group, &data) {
                    Ok(ent) => {
                        assert_eq!(ent.0 % (1 << order), 0, "misaligned folio");
                        if seed == 0 && self.zero_elision {
                            for i in 0..1u64 << order {
                                self.m.add(ent.0 + i, 0, vec![0; PAGE_SIZE], group);
                            }
                        } else {
                            self.m.add(ent.0, order, data, group);
                        }
                    }
                    Err(SwapError::NoSpace { .. } | SwapError::GroupLimit(_)) => {
                        assert_eq!(e.space().used_slots(), used)
                    }
                    Err(err) => panic!("swap_out: {err}"),
                }
            }
            Op::In { pick, order, free } => {
                let Some(s) = self.pick(pick) else { return };
                let (start, n) = self.range(s, order);
                self.read(start, n, free);
                if free {
                    self.m.put(start, n);
                }
            }
            Op::Dup { pick, nr } | Op::Put { pick, nr } => {
                let Some(s) = self.pick(pick) else { return };
                let nr = nr.min(SLOTS_PER_CLUSTER - (s as usize % SLOTS_PER_CLUSTER));
                let ok = (s..s + nr as u64).all(|i| self.m.is_live(i));
                let r = if matches!(op, Op::Dup { .. }) { e.dup(SwapEntry(s), nr) } else { e.put(SwapEntry(s), nr) };
                assert_eq!(r.is_ok(), ok, "{op:?} at {s:#x}: {r:?}");
                if ok {
                    if matches!(op, Op::Dup { .. }) {
                        for i in s..s + nr as u64 {
                            self.m.slots.get_mut(&i).unwrap().0 += 1;
                        }
                    } else {
                        self.m.put(s, nr as u64);
                    }
                }
            }
            Op::PutAt { slot } => {
                if !self.m.is_live(slot) {
                    let r = e.put(SwapEntry(slot), 1);
                    assert!(r.is_err(), "put of a dead slot {slot:#x} succeeded");
                    let r = e.dup(SwapEntry(slot), 1);
                    assert!(r.is_err(), "dup of a dead slot {slot:#x} succeeded");
                }
            }
            Op::Move { pick, tier, fail } => {
                let Some(s) = self.pick(pick) else { return };
                let before = e.location(SwapEntry(s)).unwrap();
                self.tiers[tier].fail_store.store(fail, Ordering::SeqCst);
                let r = e.move_entry(SwapEntry(s), tier);
                self.tiers[tier].fail_store.store(false, Ordering::SeqCst);
                match r {
                    Ok(p) if p > 0 => assert_eq!(e.location(SwapEntry(s)).unwrap(), Location::Tier(tier)),
                    Ok(_) => assert_eq!(e.location(SwapEntry(s)).unwrap(), before),
                    Err(_) => assert_eq!(e.location(SwapEntry(s)).unwrap(), before, "failed move changed the entry"),
                }
                if fail && before != Location::Tier(tier) && before != Location::Zero {
                    assert!(r.is_err(), "move with failing store succeeded");
                }
            }
            Op::LoadFail { pick } => {
                let Some(s) = self.pick(pick) else { return };
                let Location::Tier(t) = e.location(SwapEntry(s)).unwrap() else { return };
                self.tiers[t].fail_load.store(true, Ordering::SeqCst);
                let mut out = vec![0u8; PAGE_SIZE];
                let r = e.swap_in(SwapEntry(s), &mut out, true);
                self.tiers[t].fail_load.store(false, Ordering::SeqCst);
                assert!(r.is_err(), "swap_in with a failing load succeeded");
                assert_eq!(e.location(SwapEntry(s)).unwrap(), Location::Tier(t));
            }
            Op::Writeback { from, to, max } => {
                let before = self.tiers[from].usage().stored_pages;
                let moved = e.writeback(from, to, max).unwrap();
                if from != to {
                    assert_eq!(self.tiers[from].usage().stored_pages, before - moved);
                }
            }
            Op::Drain { tier, threads } => {
                e.set_drain_threads(threads);
                e.drain_tier(tier).unwrap();
                assert_eq!(self.tiers[tier].usage().stored_pages, 0, "drain left pages");
                e.set_tier_online(tier, true).unwrap();
            }
            Op::DrainFail { tier } => {
                // Every load fails: the drain reports it and every page stays where it was.
                let before = self.tiers[tier].usage().stored_pages;
                self.tiers[tier].fail_load.store(true, Ordering::SeqCst);
                let r = e.drain_tier(tier);
                self.tiers[tier].fail_load.store(false, Ordering::SeqCst);
                e.set_tier_online(tier, true).unwrap();
                if before > 0 {
                    assert!(r.is_err(), "a drain with failing loads succeeded");
                }
                assert_eq!(self.tiers[tier].usage().stored_pages, before, "a failed drain moved pages");
            }
            Op::Promote { from, to, max } => {
                let before = self.tiers[from].usage().stored_pages;
                let promoted = e.stats().snapshot().swp_promote;
                let moved = e.promote(from, to, max).unwrap();
                if from != to {
                    assert_eq!(self.tiers[from].usage().stored_pages, before - moved);
                    assert_eq!(e.stats().snapshot().swp_promote, promoted + moved);
                } else {
                    assert_eq!(moved, 0);
                }
            }
            Op::WritebackAge { from, to, old, max } => {
                // `old`: age 0, every object qualifies; else an hour, none does.
                let age = std::time::Duration::from_secs(if old { 0 } else { 3600 });
                let before = self.tiers[from].usage().stored_pages;
                let wb = e.stats().snapshot();
                let moved = e.writeback_older_than(from, to, age, max).unwrap();
                if !old || from == to {
                    assert_eq!(moved, 0, "young objects written back");
                }
                assert_eq!(self.tiers[from].usage().stored_pages, before - moved);
                let after = e.stats().snapshot();
                assert_eq!(after.zswpwb_proactive, wb.zswpwb_proactive + moved);
                assert_eq!(after.zswpwb, wb.zswpwb + moved);
            }
            Op::Compact { tier } => {
                e.compact_tier(tier).unwrap();
            }
        }
        self.check();
    }

    fn finish(mut self) {
        // Read every live slot back, then put everything.
        for s in self.m.live() {
            self.read(s, 1, false);
        }
        let slots: Vec<(u64, u32)> = self.m.slots.iter().map(|(s, (c, _))| (*s, *c)).collect();
        for (s, c) in slots {
            for _ in 0..c {
                self.eng.put(SwapEntry(s), 1).unwrap();
                self.m.put(s, 1);
            }
        }
        self.check();
        assert_eq!(self.eng.space().used_slots(), 0);
        assert_eq!(self.eng.cache().nr_cached(), 0);
        for t in &self.tiers {
            assert_eq!(t.usage().stored_pages, 0);
            assert_eq!(t.objects(), 0);
        }
        assert!(self.eng.put(SwapEntry(0), 1).is_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_model(ops in prop::collection::vec(op(), 1..60), zero_elision in any::<bool>()) {
        let mut r = rig(zero_elision);
        for o in &ops {
            r.step(o);
        }
        r.finish();
    }
}
