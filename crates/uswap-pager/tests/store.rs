//! The test store ([`common::lz4store::Lz4Store`]) on its own: folios of every order round
//! trip, slots are counted one by one, and freed single slots fragment the space.
mod common;
use common::lz4store::Lz4Store;
use proptest::prelude::*;
use uswap_pager::{PageStore, StoreError, PAGE_SIZE};

fn folio(order: u8, seed: u64) -> Vec<u8> {
    (0..(PAGE_SIZE << order) / 8).flat_map(|i| ((i as u64 / 2).wrapping_mul(seed) >> 3).to_le_bytes()).collect()
}

#[test]
fn store_load_put_roundtrip_all_orders() {
    let s = Lz4Store::new(4096, 64 << 20, true).unwrap();
    for order in [0u8, 4, 9] {
        let d = folio(order, 77 + u64::from(order));
        let e = s.store(0, &d).unwrap();
        assert_eq!(e % (1 << order), 0, "naturally aligned");
        let mut out = vec![0u8; d.len()];
        s.load(e, &mut out).unwrap();
        assert_eq!(out, d);
        s.put(e, 1 << order);
    }
    assert_eq!(s.pool_bytes(), 0);
    let z = vec![0u8; PAGE_SIZE * 16];
    let e = s.store(0, &z).unwrap();
    assert_eq!(s.pool_bytes(), 0);
    let mut out = vec![1u8; z.len()];
    s.load(e, &mut out).unwrap();
    assert_eq!(out, z);
}

#[test]
fn partial_put_keeps_data_until_last_slot() {
    let s = Lz4Store::new(4096, 16 << 20, true).unwrap();
    let d = folio(4, 3);
    let e = s.store(0, &d).unwrap();
    s.put(e + 3, 1);
    s.put(e, 1);
    let mut out = vec![0u8; d.len()];
    s.load(e, &mut out).unwrap();
    assert_eq!(out, d);
    for i in 1..16 {
        if i != 3 {
            s.put(e + i, 1);
        }
    }
    assert_eq!(s.pool_bytes(), 0);
    assert!(s.load(e, &mut out).is_err());
}

#[test]
fn fragmented_space_reports_no_space_for_large_orders() {
    // 512 slots: fill with order-0, free every other one: no order-4 range is left.
    let s = Lz4Store::new(512, 16 << 20, true).unwrap();
    let d = folio(0, 5);
    let es: Vec<u64> = (0..512).map(|_| s.store(0, &d).unwrap()).collect();
    assert!(matches!(s.store(0, &d), Err(StoreError::NoSpace { order: 0 })));
    for e in es.iter().step_by(2) {
        s.put(*e, 1);
    }
    assert_eq!(s.store(0, &folio(4, 1)), Err(StoreError::NoSpace { order: 4 }));
    assert!(s.store(0, &d).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn model_of_counts(ops in proptest::collection::vec((0u8..3, 0usize..8, 0u8..4), 1..80)) {
        // Model: live entries -> (order, data, count per slot).
        let s = Lz4Store::new(2048, 32 << 20, true).unwrap();
        let mut live: Vec<(u64, u8, Vec<u8>, Vec<u32>)> = Vec::new();
        for (op, idx, order) in ops {
            match op {
                0 => {
                    let d = folio(order, idx as u64 + 1);
                    match s.store(0, &d) {
                        Ok(e) => {
                            prop_assert!(live.iter().all(|l| e + (1 << order) <= l.0 || l.0 + (1 << l.1) <= e), "overlap");
                            live.push((e, order, d, vec![1; 1 << order]));
                        }
                        Err(StoreError::NoSpace { .. }) => {}
                        Err(x) => prop_assert!(false, "{x}"),
                    }
                }
                1 if !live.is_empty() => {
                    let li = idx % live.len();
                    let l = &mut live[li];
                    let i = idx % l.3.len();
                    if l.3[i] > 0 {
                        s.put(l.0 + i as u64, 1);
                        l.3[i] -= 1;
                    }
                }
                2 if !live.is_empty() => {
                    let li = idx % live.len();
                    let l = &mut live[li];
                    let i = idx % l.3.len();
                    if l.3[i] > 0 {
                        s.dup(l.0 + i as u64, 1).unwrap();
                        l.3[i] += 1;
                    }
                }
                _ => {}
            }
            live.retain(|l| l.3.iter().any(|&c| c > 0));
            for l in &live {
                let mut out = vec![0u8; l.2.len()];
                s.load(l.0, &mut out).unwrap();
                prop_assert_eq!(&out, &l.2);
            }
        }
    }
}
