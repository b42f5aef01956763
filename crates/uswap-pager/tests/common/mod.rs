//! Shared helpers for the integration tests.
#![expect(dead_code, reason = "each test uses only some of the helpers")]

pub mod lz4store;

use std::sync::Arc;
use uswap_pager::{FaultMode, Pager, PagerConfig, PagerError, ReclaimMode};

/// The reclaim mode a fault mode runs with in `uswap run` and the C API: thread mode reclaims
/// in the background (its event thread never reclaims), SIGBUS mode directly.
pub fn reclaim_for(mode: FaultMode) -> ReclaimMode {
    if mode == FaultMode::Thread {
        ReclaimMode::Background
    } else {
        ReclaimMode::Direct
    }
}

/// A pager, or `None` with a printed reason when userfaultfd is not available here.
pub fn pager(cfg: PagerConfig) -> Option<Arc<Pager>> {
    check(Pager::new(cfg))
}

/// A pager over the test store ([`lz4store::Lz4Store`], `cfg.swap_slots` slots, compressing)
/// instead of the engine, or `None` as for [`pager`].
pub fn pager_with_lz4store(cfg: PagerConfig) -> Option<Arc<Pager>> {
    let store = lz4store::Lz4Store::new(cfg.swap_slots, 64 << 30, true).expect("test store");
    check(Pager::with_store(cfg, Some(Box::new(store))))
}

/// Unwrap a pager result, printing why the test is skipped when userfaultfd is unavailable.
pub fn check(r: Result<Arc<Pager>, PagerError>) -> Option<Arc<Pager>> {
    match r {
        Ok(p) => Some(p),
        Err(PagerError::Unavailable(why)) => {
            skip_without_uffd(&why);
            None
        }
        Err(e) => panic!("pager: {e}"),
    }
}

/// Userfaultfd is not available here: a failure when `USWAP_REQUIRE_UFFD` is set (CI, where it
/// must work, sets it in `.ci/test.sh`), else a printed skip.
pub fn skip_without_uffd(why: &str) {
    if std::env::var_os("USWAP_REQUIRE_UFFD").is_some() {
        panic!("userfaultfd unavailable and USWAP_REQUIRE_UFFD is set: {why}");
    }
    eprintln!("SKIPPED: userfaultfd unavailable: {why} (set USWAP_REQUIRE_UFFD=1 to make this a failure)");
}

/// A fresh anonymous private read-write mapping of `len` bytes that the test owns (and leaks
/// or unmaps itself); its address.
pub fn anon_map(len: usize) -> usize {
    // SAFETY: a fresh anonymous private mapping with no address hint: it replaces nothing.
    let a = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(a, libc::MAP_FAILED, "mmap of {len} bytes");
    a as usize
}

/// splitmix64.
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Word `i` of page `pg` for `seed`: patterned (compressible: a motif of 8 words repeated)
/// or random.
pub fn word(seed: u64, pg: usize, i: usize, random: bool) -> u64 {
    if random {
        mix64(seed ^ ((pg as u64) << 20) ^ i as u64)
    } else {
        mix64(seed ^ ((pg as u64) << 20) ^ (i % 8) as u64 ^ ((i / 128) as u64) << 8)
    }
}

/// Fill page `pg` (a 4096-byte slice) with its words.
pub fn fill_page(page: &mut [u8], seed: u64, pg: usize, random: bool) {
    for (i, c) in page.chunks_exact_mut(8).enumerate() {
        c.copy_from_slice(&word(seed, pg, i, random).to_le_bytes());
    }
}

/// Check page `pg`; returns the first bad byte offset.
pub fn check_page(page: &[u8], seed: u64, pg: usize, random: bool) -> Option<usize> {
    for (i, c) in page.chunks_exact(8).enumerate() {
        if c != word(seed, pg, i, random).to_le_bytes() {
            return Some(i * 8);
        }
    }
    None
}
