//! Model test of the fault and reclaim state machines: random writes, reads, evictions and
//! discards on a small region under a tight limit, checked against a plain array.
mod common;
use proptest::prelude::*;
use uswap_pager::{PagerConfig, Replacement, SwapinPolicy};

#[derive(Clone, Debug)]
enum Op {
    Write(usize, u64),
    Read(usize),
    EvictAll,
    Discard(usize, usize),
}

fn op(pages: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..pages, any::<u64>()).prop_map(|(p, v)| Op::Write(p, v)),
        6 => (0..pages).prop_map(Op::Read),
        1 => Just(Op::EvictAll),
        1 => (0..pages, 1..8usize).prop_map(|(p, n)| Op::Discard(p, n)),
    ]
}

fn page_val(v: u64, i: usize) -> u64 {
    if v == 0 {
        0
    } else {
        v ^ (i as u64 / 4)
    }
}

/// Memory the charge may hold beyond live data at these sizes: a few free 4 KiB swap-cache
/// objects per class, a partly used zspage per size class in use, the pool's spare budget.
const MAX_OVERHEAD: u64 = (2 << 20) + (512 << 10);

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn pager_matches_a_plain_array(
        folio in prop_oneof![Just(4096usize), Just(65536usize)],
        two in any::<bool>(),
        never in any::<bool>(),
        lz4store in any::<bool>(),
        ops in proptest::collection::vec(op(64), 1..120),
    ) {
        let cfg = PagerConfig {
            limit_bytes: 4 * folio as u64 + 8 * 4096,
            folio_size: folio,
            replacement: if two { Replacement::TwoList } else { Replacement::Fifo },
            swapin: if never { SwapinPolicy::Never } else { SwapinPolicy::Always },
            tiers: "zero,lz4".into(),
            ..Default::default()
        };
        let p = if lz4store { common::pager_with_lz4store(cfg) } else { common::pager(cfg) };
        let Some(p) = p else { return Ok(()) };
        let r = p.map(64 * 4096 * if folio > 4096 { 4 } else { 1 }).unwrap();
        let pages = 64;
        let mut model = vec![0u64; pages];
        let base = r.as_ptr() as usize;
        for o in ops {
            match o {
                Op::Write(pg, v) => {
                    for i in 0..512 {
                        // SAFETY: inside the region.
                        unsafe { ((base + pg * 4096 + i * 8) as *mut u64).write_volatile(page_val(v, i)) };
                    }
                    model[pg] = v;
                }
                Op::Read(pg) => {
                    for i in (0..512).step_by(37) {
                        // SAFETY: inside the region.
                        let got = unsafe { ((base + pg * 4096 + i * 8) as *const u64).read_volatile() };
                        prop_assert_eq!(got, page_val(model[pg], i), "page {} word {}", pg, i);
                    }
                }
                Op::EvictAll => {
                    r.evict_all();
                }
                Op::Discard(pg, n) => {
                    let n = n.min(pages - pg);
                    r.discard(pg * 4096, n * 4096);
                    model[pg..pg + n].fill(0);
                }
            }
            let st = p.stats();
            // What the pager holds (resident pages, cached folios, stored objects) stays under
            // the limit, give or take one reclaim batch ...
            let group_pool = st.engine.group.map_or(st.pool_bytes, |g| g.pool_bytes);
            let live = st.resident_bytes + st.cache_live_bytes + group_pool.min(st.pool_bytes);
            prop_assert!(live <= st.limit_bytes + folio as u64 + 8 * 4096, "{:?}", st);
            // ... and the charge adds only allocator granularity on top (free swap-cache objects
            // too small to trim, partly used zspages, the pool's spare memory): a constant, not
            // a share of the data.
            prop_assert!(st.charged_bytes - live <= MAX_OVERHEAD, "{:?}", st);
        }
        for (pg, &v) in model.iter().enumerate() {
            for i in 0..512 {
                prop_assert_eq!(r.as_slice()[pg * 4096 + i * 8..pg * 4096 + i * 8 + 8].to_vec(), page_val(v, i).to_le_bytes().to_vec());
            }
        }
        drop(r);
        prop_assert_eq!(p.stats().engine.stored_pages, 0);
        prop_assert_eq!(p.stats().resident_bytes, 0);
    }
}
