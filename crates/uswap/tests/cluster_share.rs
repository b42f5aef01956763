//! Property test of cluster holds (`cluster/share.rs`) against a model: two swap spaces `A`
//! and `B` over one shared set of clusters, as two processes sharing a swap file, plus `G`, a
//! fork child of `A` modelled by its holds alone (it inherited `A`'s tables: it holds what `A`
//! held at the fork, and gives holds up when it empties a cluster or dies). Random sequences
//! of allocations and frees in `A` and `B`, forks of `A`, `G` emptying clusters or dying, and
//! refreshes. After every step: no process allocated a slot in a cluster another holds (no
//! slot `G` or the other space may read is ever written), each space's invariants hold, and the
//! holds agree with the model. At the end, with `G` gone and everything freed, every cluster
//! is free and allocatable again in both spaces.
#![cfg(not(loom))]

use proptest::prelude::*;
use proptest::sample::Index;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use uswap::internals::cluster::{ClusterHolds, SpaceConfig, SwapSpace};
use uswap::internals::swap_table::{Word, SLOTS_PER_CLUSTER};
use uswap::SwapEntry;

const N: usize = SLOTS_PER_CLUSTER;
const CLUSTERS: usize = 6;

/// The shared holds: per process (0 = A, 1 = B, 2 = G), the clusters it holds.
#[derive(Default)]
struct Shared {
    held: [BTreeSet<usize>; 3],
}

struct View {
    shared: Arc<Mutex<Shared>>,
    me: usize,
}

impl ClusterHolds for View {
    fn claim(&self, ci: usize) -> bool {
        let mut s = self.shared.lock().unwrap();
        if s.held[self.me].contains(&ci) {
            return true;
        }
        if s.held.iter().any(|h| h.contains(&ci)) {
            return false;
        }
        s.held[self.me].insert(ci);
        true
    }
    fn sole(&self, ci: usize) -> bool {
        let s = self.shared.lock().unwrap();
        s.held[self.me].contains(&ci) && s.held.iter().filter(|h| h.contains(&ci)).count() == 1
    }
    fn free(&self, ci: usize) -> bool {
        !self.shared.lock().unwrap().held.iter().any(|h| h.contains(&ci))
    }
    fn release(&self, ci: usize) {
        self.shared.lock().unwrap().held[self.me].remove(&ci);
    }
}

#[derive(Clone, Debug)]
enum Op {
    Alloc(usize, u8),
    Free(usize, Index),
    Fork,
    ChildEmpties(Index),
    ChildDies,
    Refresh(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..2, prop_oneof![3 => Just(0u8), 1 => 1u8..=4, 1 => Just(9u8)]).prop_map(|(p, o)| Op::Alloc(p, o)),
        4 => (0usize..2, any::<Index>()).prop_map(|(p, i)| Op::Free(p, i)),
        1 => Just(Op::Fork),
        1 => any::<Index>().prop_map(Op::ChildEmpties),
        1 => Just(Op::ChildDies),
        2 => (0usize..2).prop_map(Op::Refresh),
    ]
}

fn space(shared: &Arc<Mutex<Shared>>, me: usize) -> SwapSpace {
    let mut s = SwapSpace::new(SpaceConfig { nr_slots: (CLUSTERS * N) as u64, nr_shards: 2, ..Default::default() })
        .expect("space");
    s.set_holds(Arc::new(View { shared: shared.clone(), me }));
    s
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let spaces = [space(&shared, 0), space(&shared, 1)];
    // Live folios per space: (first slot, order).
    let mut live: [Vec<(u64, u8)>; 2] = [Vec::new(), Vec::new()];
    // The clusters G may read: what A held at the fork, until G empties them.
    let mut child: BTreeSet<usize> = BTreeSet::new();
    let mut payload = 1u64;
    for op in ops {
        match op {
            Op::Alloc(p, order) => {
                let r = spaces[p].alloc(order, &mut |i| Word::rmap(0, payload + i as u64));
                payload += 1 << order;
                if let Ok(e) = r {
                    let ci = e.0 as usize / N;
                    let other = &live[1 - p];
                    prop_assert!(
                        !other.iter().any(|&(s, _)| s as usize / N == ci),
                        "space {p} allocated in cluster {ci}, which the other space uses"
                    );
                    prop_assert!(
                        !(p == 0 && child.contains(&ci)),
                        "A allocated in cluster {ci}, which its child reads"
                    );
                    prop_assert!(
                        !(p == 1 && child.contains(&ci)),
                        "B allocated in cluster {ci}, which A's child reads"
                    );
                    live[p].push((e.0, order));
                }
            }
            Op::Free(p, i) => {
                if !live[p].is_empty() {
                    let (s, o) = live[p].swap_remove(i.index(live[p].len()));
                    let mut g = spaces[p].lock_cluster(SwapEntry(s)).expect("lock");
                    g.free_range(SwapEntry(s).offset(), 1 << o).expect("free");
                }
            }
            Op::Fork => {
                // Only one child at a time in this model; a fork while one lives is skipped.
                if child.is_empty() && shared.lock().unwrap().held[2].is_empty() {
                    let held = shared.lock().unwrap().held[0].clone();
                    spaces[0].freeze_held();
                    shared.lock().unwrap().held[2] = held.clone();
                    // The child reads the clusters A used at the fork.
                    child = live[0].iter().map(|&(s, _)| s as usize / N).collect();
                    prop_assert!(child.is_subset(&held), "A used clusters it did not hold");
                }
            }
            Op::ChildEmpties(i) => {
                let held: Vec<usize> = shared.lock().unwrap().held[2].iter().copied().collect();
                if !held.is_empty() {
                    let ci = held[i.index(held.len())];
                    shared.lock().unwrap().held[2].remove(&ci);
                    child.remove(&ci);
                }
            }
            Op::ChildDies => {
                shared.lock().unwrap().held[2].clear();
                child.clear();
            }
            Op::Refresh(p) => {
                spaces[p].refresh_holds();
            }
        }
        for (p, s) in spaces.iter().enumerate() {
            s.check_invariants().map_err(|e| TestCaseError::fail(format!("space {p}: {e}")))?;
            // A space holds every cluster it uses.
            let held = shared.lock().unwrap().held[p].clone();
            for &(slot, _) in &live[p] {
                prop_assert!(held.contains(&(slot as usize / N)), "space {p} uses a cluster it does not hold");
            }
        }
    }
    // The child dies, everything is freed: every cluster comes back to both spaces.
    shared.lock().unwrap().held[2].clear();
    for p in 0..2 {
        for (s, o) in live[p].drain(..) {
            let mut g = spaces[p].lock_cluster(SwapEntry(s)).expect("lock");
            g.free_range(SwapEntry(s).offset(), 1 << o).expect("free");
        }
    }
    prop_assert!(shared.lock().unwrap().held.iter().all(BTreeSet::is_empty), "holds left after everything was freed");
    for s in &spaces {
        s.refresh_holds();
        let st = s.alloc_stats();
        prop_assert_eq!((st.free_clusters, st.shared_clusters, st.foreign_clusters), (CLUSTERS, 0, 0));
    }
    // And A can fill the whole space with 2 MiB folios.
    for _ in 0..CLUSTERS {
        prop_assert!(spaces[0].alloc(9, &mut |i| Word::rmap(0, 1 + i as u64)).is_ok(), "a cluster was lost");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    #[test]
    fn holds_keep_processes_out_of_each_others_clusters(ops in proptest::collection::vec(op(), 1..120)) {
        run(ops)?;
    }
}

/// Relatives start with the same free list: a free cluster a sibling claimed first is passed
/// over for the next one, so an allocation succeeds while a free cluster is left (else a
/// store in a fork burst's child could fail with the file all but empty).
#[test]
fn a_cluster_a_relative_claimed_first_is_passed_over() {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let (a, b) = (space(&shared, 0), space(&shared, 1));
    let ea = a.alloc(0, &mut |_| Word::rmap(0, 1)).expect("a allocates");
    let eb = b.alloc(0, &mut |_| Word::rmap(0, 2)).expect("b allocates in the next free cluster");
    assert_ne!(ea.0 as usize / N, eb.0 as usize / N);
    // Every cluster but one claimed by A: B still finds the last.
    for _ in 0..CLUSTERS - 2 {
        a.alloc(9, &mut |i| Word::rmap(0, 1 + i as u64)).expect("a takes a whole cluster");
    }
    assert!(b.alloc(9, &mut |i| Word::rmap(0, 1 + i as u64)).is_err(), "no free cluster is left for a whole one");
}
