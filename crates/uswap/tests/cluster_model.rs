//! State-machine property test of the cluster allocator against a simple model.
//!
//! The model is a map slot -> (word without count, full count) plus the set of clusters
//! waiting for discard. Random sequences of allocations of every order, dup/put through
//! `set_count` (crossing the inline limit of 15 both ways), word updates, folio and slot frees,
//! double frees and out-of-range accesses run against a small space under both fragment
//! policies, with and without discard. After every step: the step's result matches the
//! model, `check_invariants()` holds (lists/flags/bitmap/tables/extend tables consistent), and
//! tables and extend tables exist exactly for the clusters the model says need them.
#![cfg(not(loom))]

use proptest::prelude::*;
use proptest::sample::Index;
use std::collections::{BTreeMap, BTreeSet};
use uswap::internals::cluster::{FragPolicy, SpaceConfig, SwapSpace};
use uswap::internals::swap_table::{Word, COUNT_MAX, NR_ORDERS, SLOTS_PER_CLUSTER};
use uswap::{SwapEntry, SwapError};

const N: usize = SLOTS_PER_CLUSTER;
const CLUSTERS: usize = 4;

#[derive(Clone, Debug)]
enum Op {
    Alloc(u8),
    Dup(Index, u32),
    Put(Index, u32),
    Set(Index, u64),
    FreeFolio(Index),
    FreeSlot(Index),
    FreeUnused(u64),
    OutOfRange(u64),
    FreeAcrossClusterEnd(Index),
    Discard,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => prop_oneof![3 => Just(0u8), 2 => 1u8..=4, 1 => 5u8..=9].prop_map(Op::Alloc),
        2 => (any::<Index>(), prop_oneof![Just(1u32), Just(7), Just(20), Just(100_000)]).prop_map(|(i, d)| Op::Dup(i, d)),
        2 => (any::<Index>(), prop_oneof![Just(1u32), Just(3), Just(30), Just(u32::MAX)]).prop_map(|(i, d)| Op::Put(i, d)),
        1 => (any::<Index>(), 0u64..1 << 40).prop_map(|(i, p)| Op::Set(i, p)),
        3 => any::<Index>().prop_map(Op::FreeFolio),
        1 => any::<Index>().prop_map(Op::FreeSlot),
        1 => (0u64..(CLUSTERS * N) as u64).prop_map(Op::FreeUnused),
        1 => (0u64..1 << 20).prop_map(Op::OutOfRange),
        1 => any::<Index>().prop_map(Op::FreeAcrossClusterEnd),
        1 => Just(Op::Discard),
    ]
}

#[derive(Default)]
struct Model {
    /// slot -> (word with count field cleared, full count)
    slots: BTreeMap<u64, (u64, u32)>,
    /// Live folios as allocated (start, order); slots may since have been freed one by one.
    folios: Vec<(u64, u8)>,
    /// Clusters emptied while discard is on and not processed yet.
    pending: BTreeSet<usize>,
    next_payload: u64,
}

const COUNT_BITS: u64 = 0xf << 60;

impl Model {
    fn cluster_used(&self, c: usize) -> usize {
        self.slots.range((c * N) as u64..((c + 1) * N) as u64).count()
    }
    fn free_usable_slots(&self) -> usize {
        CLUSTERS * N - self.slots.len() - self.pending.len() * N
    }
    fn pick_slot(&self, i: &Index) -> Option<u64> {
        if self.slots.is_empty() {
            return None;
        }
        self.slots.keys().nth(i.index(self.slots.len())).copied()
    }
    fn after_free(&mut self, c: usize, discard: bool) {
        if discard && self.cluster_used(c) == 0 {
            self.pending.insert(c);
        }
    }
}

fn check_slot(s: &SwapSpace, m: &Model, slot: u64) -> Result<(), TestCaseError> {
    let w = s.load(SwapEntry(slot)).unwrap();
    let g = s.lock_cluster(SwapEntry(slot)).unwrap();
    let off = SwapEntry(slot).offset();
    match m.slots.get(&slot) {
        None => {
            prop_assert!(w.is_free(), "slot {slot} should be free, is {w:?}");
            prop_assert_eq!(g.count(off), 0);
        }
        Some(&(bits, count)) => {
            prop_assert_eq!(w.0 & !COUNT_BITS, bits, "slot {} word", slot);
            prop_assert_eq!(g.count(off), count, "slot {} count", slot);
            prop_assert_eq!(u32::from(w.count()), count.min(u32::from(COUNT_MAX)));
        }
    }
    Ok(())
}

fn run(ops: Vec<Op>, policy: FragPolicy, discard: bool) -> Result<(), TestCaseError> {
    let s = SwapSpace::new(SpaceConfig { nr_slots: (CLUSTERS * N) as u64, frag_policy: policy, discard, nr_shards: 2 })
        .unwrap();
    let mut m = Model::default();
    for op in ops {
        let mut touched: Vec<u64> = Vec::new();
        match op {
            Op::Alloc(order) => {
                let n = 1u64 << order;
                let base = m.next_payload;
                m.next_payload += n;
                let r = s.alloc(order, &mut |i| Word::stored((i % 7) as u16, 1, base + i as u64, 1));
                match r {
                    Ok(e) => {
                        prop_assert_eq!(e.0 % n, 0, "order {} entry {:#x} misaligned", order, e.0);
                        for i in 0..n {
                            prop_assert!(!m.slots.contains_key(&(e.0 + i)), "slot {} handed out twice", e.0 + i);
                            prop_assert!(
                                !m.pending.contains(&((e.0 + i) as usize / N)),
                                "slot in a cluster awaiting discard"
                            );
                            let w = Word::stored((i % 7) as u16, 1, base + i, 0);
                            m.slots.insert(e.0 + i, (w.0, 1));
                            touched.push(e.0 + i);
                        }
                        m.folios.push((e.0, order));
                    }
                    Err(SwapError::NoSpace { order: o }) => {
                        prop_assert_eq!(o, order);
                        if order == 0 {
                            prop_assert_eq!(m.free_usable_slots(), 0, "order 0 failed with free slots");
                        }
                        let empty = (0..CLUSTERS).any(|c| m.cluster_used(c) == 0 && !m.pending.contains(&c));
                        prop_assert!(!empty, "order {} failed although a cluster is free", order);
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("alloc: {e}"))),
                }
            }
            Op::Dup(i, d) => {
                if let Some(slot) = m.pick_slot(&i) {
                    let e = SwapEntry(slot);
                    let new = m.slots[&slot].1.saturating_add(d);
                    s.lock_cluster(e).unwrap().set_count(e.offset(), new).unwrap();
                    m.slots.get_mut(&slot).unwrap().1 = new;
                    touched.push(slot);
                }
            }
            Op::Put(i, d) => {
                if let Some(slot) = m.pick_slot(&i) {
                    let e = SwapEntry(slot);
                    let new = m.slots[&slot].1.saturating_sub(d);
                    let mut g = s.lock_cluster(e).unwrap();
                    if new == 0 {
                        g.free_range(e.offset(), 1).unwrap();
                        drop(g);
                        m.slots.remove(&slot);
                        m.after_free(e.cluster(), discard);
                    } else {
                        g.set_count(e.offset(), new).unwrap();
                        m.slots.get_mut(&slot).unwrap().1 = new;
                    }
                    touched.push(slot);
                }
            }
            Op::Set(i, payload) => {
                if let Some(slot) = m.pick_slot(&i) {
                    let e = SwapEntry(slot);
                    // A word with a different count: set() must keep the slot's count.
                    let w = Word::cached(3, payload, 9);
                    s.lock_cluster(e).unwrap().set(e.offset(), w).unwrap();
                    m.slots.get_mut(&slot).unwrap().0 = w.0 & !COUNT_BITS;
                    touched.push(slot);
                }
            }
            Op::FreeFolio(i) => {
                if !m.folios.is_empty() {
                    let k = i.index(m.folios.len());
                    let (start, order) = m.folios[k];
                    let n = 1u64 << order;
                    let e = SwapEntry(start);
                    let r = s.lock_cluster(e).unwrap().free_range(e.offset(), n as usize);
                    let first_free = (start..start + n).find(|x| !m.slots.contains_key(x));
                    match first_free {
                        None => {
                            prop_assert_eq!(r, Ok(()));
                            for x in start..start + n {
                                m.slots.remove(&x);
                            }
                            m.after_free(e.cluster(), discard);
                        }
                        Some(x) => prop_assert_eq!(r, Err(SwapError::NotInUse(x)), "partial folio free must fail"),
                    }
                    m.folios.swap_remove(k);
                    touched.extend(start..start + n);
                }
            }
            Op::FreeSlot(i) => {
                if let Some(slot) = m.pick_slot(&i) {
                    let e = SwapEntry(slot);
                    s.lock_cluster(e).unwrap().free_range(e.offset(), 1).unwrap();
                    m.slots.remove(&slot);
                    m.after_free(e.cluster(), discard);
                    // Freeing it again is an error, not corruption.
                    let mut g = s.lock_cluster(e).unwrap();
                    prop_assert_eq!(g.free_range(e.offset(), 1), Err(SwapError::NotInUse(slot)));
                    prop_assert_eq!(g.set_count(e.offset(), 2), Err(SwapError::NotInUse(slot)));
                    prop_assert_eq!(g.set(e.offset(), Word::zero(0, 1)), Err(SwapError::NotInUse(slot)));
                    touched.push(slot);
                }
            }
            Op::FreeUnused(slot) => {
                if !m.slots.contains_key(&slot) {
                    let e = SwapEntry(slot);
                    let mut g = s.lock_cluster(e).unwrap();
                    prop_assert_eq!(g.free_range(e.offset(), 1), Err(SwapError::NotInUse(slot)));
                    prop_assert_eq!(g.set_count(e.offset(), 1), Err(SwapError::NotInUse(slot)));
                }
                touched.push(slot);
            }
            Op::OutOfRange(k) => {
                let e = SwapEntry(s.nr_slots() + k);
                prop_assert_eq!(s.load(e), Err(SwapError::OutOfRange(e.0)));
                prop_assert!(matches!(s.lock_cluster(e), Err(SwapError::OutOfRange(_))));
                prop_assert!(s.lock_cluster_index(CLUSTERS + k as usize).is_err());
            }
            Op::FreeAcrossClusterEnd(i) => {
                if let Some(slot) = m.pick_slot(&i) {
                    let e = SwapEntry(slot);
                    let mut g = s.lock_cluster(e).unwrap();
                    let r = g.free_range(e.offset(), N - e.offset() + 1);
                    prop_assert!(matches!(r, Err(SwapError::OutOfRange(_))), "{r:?}");
                    prop_assert!(g.set_count(N, 1).is_err());
                    prop_assert!(g.word(N).is_free());
                    touched.push(slot);
                }
            }
            Op::Discard => {
                let mut seen = BTreeSet::new();
                let n = s.process_discards(&mut |c| {
                    seen.insert(c);
                });
                prop_assert_eq!(n, m.pending.len());
                prop_assert_eq!(&seen, &m.pending);
                m.pending.clear();
            }
        }
        for slot in touched {
            check_slot(&s, &m, slot)?;
        }
        s.check_invariants().map_err(TestCaseError::fail)?;
        prop_assert_eq!(s.used_slots(), m.slots.len());
        let with_tables = (0..CLUSTERS).filter(|&c| m.cluster_used(c) > 0).count();
        prop_assert_eq!(s.live_tables(), with_tables, "tables exactly for clusters in use");
        let with_ext = (0..CLUSTERS)
            .filter(|&c| m.slots.range((c * N) as u64..((c + 1) * N) as u64).any(|(_, v)| v.1 >= u32::from(COUNT_MAX)))
            .count();
        prop_assert_eq!(s.live_extend_tables(), with_ext, "extend tables exactly where counts overflow");
        for c in 0..CLUSTERS {
            prop_assert_eq!(s.lock_cluster_index(c).unwrap().used(), m.cluster_used(c));
        }
        let first_used = (0..CLUSTERS).find(|&c| m.cluster_used(c) > 0);
        prop_assert_eq!(s.next_used_cluster(0), first_used);
    }
    // Final sweep of every slot, then free everything: no table may remain.
    for slot in 0..(CLUSTERS * N) as u64 {
        check_slot(&s, &m, slot)?;
    }
    let slots: Vec<u64> = m.slots.keys().copied().collect();
    for slot in slots {
        let e = SwapEntry(slot);
        s.lock_cluster(e).unwrap().free_range(e.offset(), 1).unwrap();
    }
    s.process_discards(&mut |_| {});
    s.check_invariants().map_err(TestCaseError::fail)?;
    prop_assert_eq!((s.used_slots(), s.live_tables(), s.live_extend_tables()), (0, 0, 0));
    let st = s.alloc_stats();
    prop_assert_eq!(st.free_clusters, CLUSTERS);
    prop_assert_eq!(st.alloc.len(), NR_ORDERS);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn scan_one_matches_model(ops in prop::collection::vec(op(), 1..160)) {
        run(ops, FragPolicy::ScanOne, false)?;
    }

    #[test]
    fn buckets_match_model(ops in prop::collection::vec(op(), 1..160)) {
        run(ops, FragPolicy::Buckets, false)?;
    }

    #[test]
    fn discard_matches_model(ops in prop::collection::vec(op(), 1..160), buckets in any::<bool>()) {
        run(ops, if buckets { FragPolicy::Buckets } else { FragPolicy::ScanOne }, true)?;
    }
}
