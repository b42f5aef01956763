//! Swap-in of a part of a large stored folio (a 4 KiB fault on a 64 KiB folio): the engine
//! decodes only up to the end of the part (`Backend::load_part`) and drops the folio. Every
//! part reads back byte for byte, alone and with threads reading other parts of the same
//! object at the same time (a waiter on a dropped partial folio retries).

use rand::{RngCore, SeedableRng};
use std::sync::Arc;
use uswap::config::TiersConfig;
use uswap::vswap::{Engine, EngineConfig};
use uswap::PAGE_SIZE;

fn folio(order: u8, kind: u8, seed: u64) -> Vec<u8> {
    let mut d = vec![0u8; PAGE_SIZE << order];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    match kind {
        0 => rng.fill_bytes(&mut d),
        1 => d
            .chunks_exact_mut(8)
            .enumerate()
            .for_each(|(i, w)| w.copy_from_slice(&((i / 5) as u64 ^ seed).to_le_bytes())),
        _ => d.iter_mut().step_by(16).for_each(|b| *b = (seed as u8).wrapping_mul(7)),
    }
    d
}

fn engine(tiers: &str) -> Engine {
    let cfg = TiersConfig::parse(tiers).unwrap();
    let backends = cfg.build().unwrap();
    Engine::new(
        EngineConfig { virtual_slots: 1 << 16, zero_elision: cfg.zero_elision, ..EngineConfig::default() },
        backends,
    )
    .unwrap()
}

#[test]
fn every_part_of_a_large_folio_reads_back() {
    for tiers in ["zero,lz4", "zero,lz4:folio=page", "zero,lz4:folio=16k"] {
        let Ok(cfg) = TiersConfig::parse(tiers) else { continue };
        drop(cfg);
        let e = engine(tiers);
        for order in [4u8, 9] {
            for kind in 0..3u8 {
                let d = folio(order, kind, u64::from(order) * 10 + u64::from(kind));
                let ent = e.swap_out(0, &d).unwrap();
                for part in 0..order {
                    let len = PAGE_SIZE << part;
                    for (i, want) in d.chunks(len).enumerate() {
                        let mut out = vec![0xa5u8; len];
                        e.swap_in(uswap::SwapEntry(ent.0 + (i * (len / PAGE_SIZE)) as u64), &mut out, false).unwrap();
                        assert!(out == want, "{tiers} order {order} kind {kind} part {part} index {i}");
                    }
                }
                let mut out = vec![0u8; d.len()];
                e.swap_in(ent, &mut out, true).unwrap();
                assert!(out == d);
            }
        }
    }
}

#[test]
fn concurrent_parts_of_one_object() {
    let e = Arc::new(engine("zero,lz4"));
    let d = Arc::new(folio(4, 1, 99));
    let ent = e.swap_out(0, &d).unwrap();
    let th: Vec<_> = (0..4)
        .map(|t| {
            let (e, d) = (e.clone(), d.clone());
            std::thread::spawn(move || {
                for k in 0..2000usize {
                    let pg = (k * 7 + t * 5) % 16;
                    let mut out = vec![0u8; PAGE_SIZE];
                    e.swap_in(uswap::SwapEntry(ent.0 + pg as u64), &mut out, false).unwrap();
                    assert!(out[..] == d[pg * PAGE_SIZE..(pg + 1) * PAGE_SIZE], "page {pg}");
                }
            })
        })
        .collect();
    for t in th {
        t.join().unwrap();
    }
}
