//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::sync::Arc;
use uswap_pager::{Pager, PagerConfig, PagerError};

/// A pager, or `None` with a printed reason when userfaultfd is not available here.
pub fn pager(cfg: PagerConfig) -> Option<Arc<Pager>> {
    match Pager::new(cfg) {
        Ok(p) => Some(p),
        Err(PagerError::Unavailable(why)) => {
            eprintln!("SKIPPED: userfaultfd unavailable: {why}");
            None
        }
        Err(e) => panic!("pager: {e}"),
    }
}

/// The byte pattern of page `pg` at offset `i` for a given seed (compressible but distinct).
pub fn pat(seed: u64, pg: usize, i: usize) -> u8 {
    let x = (pg as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed;
    ((x >> (8 * (i % 8))) as u8).wrapping_add((i / 64) as u8)
}

/// Fill one page of `buf` (4096 bytes) with the pattern.
pub fn fill_page(buf: &mut [u8], seed: u64, pg: usize) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pat(seed, pg, i);
    }
}

/// Check a page; returns the first bad offset.
pub fn check_page(buf: &[u8], seed: u64, pg: usize) -> Option<usize> {
    buf.iter().enumerate().find(|(i, &b)| b != pat(seed, pg, *i)).map(|(i, _)| i)
}
