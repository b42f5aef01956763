//! The usemem-like workload, identical for every backend: rounds of sequential writes over the
//! whole region, then one read touch per 4 KiB page in a random order, with a per-page latency
//! histogram. Page contents are a pure function of (page index, round) so `--verify` can check
//! every byte read back before it is rewritten.
//!
//! No locking: one thread owns the region while the workload runs. The region may be memory
//! paged by uswap (faults resolved behind our back) or plain memory inside a memory cgroup; the
//! code is the same, so both sides write identical bytes and are timed the same way.

use hdrhistogram::Histogram;
use rand::{seq::SliceRandom, SeedableRng};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Page size of the workload (one touch per page).
pub const PAGE: usize = 4096;

/// Bytes in a MB as printed (binary: 2^20, the unit the kernel anchors use).
pub const MB: f64 = (1u64 << 20) as f64;

/// What the pages contain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataKind {
    /// Compressible pattern like usemem's (4 x 1 KiB segments, each a 64-byte motif repeated;
    /// LZ4 ratio about 14).
    Pattern,
    /// Per page: 2/8 zero, 3/8 text-like, 2/8 random, 1/8 pattern.
    Mixed,
}

impl DataKind {
    /// Name as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DataKind::Pattern => "pattern",
            DataKind::Mixed => "mixed",
        }
    }
}

/// The kind of one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PageKind {
    Zero,
    Text,
    Random,
    Pattern,
}

/// splitmix64 finaliser: a cheap, well-mixed hash of a word.
#[inline]
fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

const STAMP_MAGIC: u64 = 0x7573_7761_7050_4147; // "uswapPAG"
const CORPUS_LEN: usize = 64 << 10;

/// Generates and checks page contents. Deterministic: the same (page, round) always gives
/// the same bytes in every process.
pub struct Generator {
    kind: DataKind,
    corpus: Vec<u8>,
}

impl Generator {
    /// A generator for `kind`.
    pub fn new(kind: DataKind) -> Self {
        Generator { kind, corpus: make_corpus() }
    }

    fn page_kind(&self, page: u64) -> PageKind {
        match self.kind {
            DataKind::Pattern => PageKind::Pattern,
            DataKind::Mixed => match mix64(page ^ 0x6d69_7865_6400_0000) % 8 {
                0 | 1 => PageKind::Zero,
                2..=4 => PageKind::Text,
                5 | 6 => PageKind::Random,
                _ => PageKind::Pattern,
            },
        }
    }

    /// Write the content of `page` in `round` into `out` (exactly one page).
    pub fn fill(&self, page: u64, round: u32, out: &mut [u8]) {
        debug_assert_eq!(out.len(), PAGE);
        let seed = mix64(page.wrapping_mul(0x1_0000_0001) ^ u64::from(round) << 48);
        match self.page_kind(page) {
            PageKind::Zero => {
                out.fill(0);
                return;
            }
            PageKind::Pattern => {
                for (seg, chunk) in out.chunks_exact_mut(1024).enumerate() {
                    let mut motif = [0u8; 64];
                    for (k, w) in motif.chunks_exact_mut(8).enumerate() {
                        w.copy_from_slice(&mix64(seed ^ (seg as u64) << 8 ^ k as u64).to_le_bytes());
                    }
                    for m in chunk.chunks_exact_mut(64) {
                        m.copy_from_slice(&motif);
                    }
                }
            }
            PageKind::Text => {
                for (seg, chunk) in out.chunks_exact_mut(1024).enumerate() {
                    let off = (mix64(seed ^ seg as u64) % (CORPUS_LEN - 1024) as u64) as usize;
                    chunk.copy_from_slice(&self.corpus[off..off + 1024]);
                }
            }
            PageKind::Random => {
                let mut s = seed;
                for w in out.chunks_exact_mut(8) {
                    s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
                    w.copy_from_slice(&mix64(s).to_le_bytes());
                }
            }
        }
        out[..8].copy_from_slice(&(STAMP_MAGIC ^ page).to_le_bytes());
        out[8..16].copy_from_slice(&(u64::from(round) | 0x5253_0000_0000_0000).to_le_bytes());
    }

    /// Check that `got` holds the content of `page` in `round`; `scratch` is one page of
    /// working space. Returns the first differing byte offset on mismatch.
    pub fn check(&self, page: u64, round: u32, got: &[u8], scratch: &mut [u8]) -> Result<(), usize> {
        self.fill(page, round, scratch);
        if got == scratch {
            return Ok(());
        }
        Err(got.iter().zip(scratch.iter()).position(|(a, b)| a != b).unwrap_or(0))
    }
}

/// A deterministic text-like corpus: words from a small vocabulary, spaces and newlines
/// (compresses about 2-3x with LZ4, like source text).
fn make_corpus() -> Vec<u8> {
    let mut vocab: Vec<Vec<u8>> = Vec::with_capacity(256);
    let mut s = 0x7465_7874u64;
    for _ in 0..256 {
        s = mix64(s);
        let len = 2 + (s % 9) as usize;
        vocab.push((0..len).map(|i| b'a' + (mix64(s ^ i as u64) % 26) as u8).collect());
    }
    let mut out = Vec::with_capacity(CORPUS_LEN + 16);
    let mut line = 0;
    while out.len() < CORPUS_LEN {
        s = mix64(s);
        // Zipf-like: small indices are much more frequent.
        let r = (s % 256) as usize;
        let idx = (r * r) / 256;
        out.extend_from_slice(&vocab[idx]);
        line += vocab[idx].len() + 1;
        if line > 72 {
            out.push(b'\n');
            line = 0;
        } else {
            out.push(b' ');
        }
    }
    out.truncate(CORPUS_LEN);
    out
}

/// How to run the workload.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct WorkloadCfg {
    /// Sequential write rounds over the whole region (>= 1).
    pub rounds: u32,
    /// Check every byte read back.
    pub verify: bool,
    /// Page contents.
    pub data: DataKind,
    /// Seed of the random touch order.
    pub seed: u64,
}

/// What one run of the workload measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WorkloadResult {
    /// 4 KiB pages in the region.
    pub pages: u64,
    /// Seconds per sequential round.
    pub round_secs: Vec<f64>,
    /// MB/s per sequential round.
    pub round_mb_s: Vec<f64>,
    /// Steady-state sequential MB/s (rounds after the first; round 0 if there is only one).
    pub seq_mb_s: f64,
    /// Per-page latency of the steady rounds (write, plus the check when verifying), µs.
    pub seq_p50_us: f64,
    /// 99th percentile of the same.
    pub seq_p99_us: f64,
    /// Maximum of the same.
    pub seq_max_us: f64,
    /// Seconds of the random touch pass.
    pub rand_secs: f64,
    /// Touches (one per page) per second in the random pass.
    pub rand_touches_s: f64,
    /// The same in MB/s (4 KiB per touch).
    pub rand_mb_s: f64,
    /// Per-touch latency in the random pass, µs.
    pub rand_p50_us: f64,
    /// 99th percentile of the same.
    pub rand_p99_us: f64,
    /// Maximum of the same.
    pub rand_max_us: f64,
    /// Bytes compared against the expected contents (0 without `--verify`).
    pub verified_bytes: u64,
}

/// A byte read back differs from what was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyError {
    /// Page index in the region.
    pub page: u64,
    /// Offset of the first bad byte in the page.
    pub offset: usize,
    /// The round whose content was expected (`None`: the untouched region must be zero).
    pub round: Option<u32>,
    /// Which pass found it.
    pub pass: &'static str,
}

impl std::fmt::Display for VerifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.round {
            Some(r) => write!(
                f,
                "verify failed in {} pass: page {} byte {} differs from round {r}'s content",
                self.pass, self.page, self.offset
            ),
            None => write!(f, "verify failed: page {} byte {} of fresh memory is not zero", self.page, self.offset),
        }
    }
}

fn new_hist() -> Histogram<u64> {
    // 1 ns .. 100 s at 3 significant digits; allocated once, never resized.
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid histogram bounds")
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        return 0.0;
    }
    h.value_at_quantile(q) as f64 / 1000.0
}

/// How often (in pages) `progress` is called.
pub const PROGRESS_PAGES: u64 = 4096;

/// Run the workload over `len` bytes at `base` (rounded down to whole pages). `progress` is
/// called with the number of pages done since the last call, every `PROGRESS_PAGES` pages
/// and at the end of each pass. Total progress units: `pages * (rounds + 1)`.
///
/// # Safety
/// - `base` is page-aligned and valid for reads and writes of `len` bytes for the whole call
///   (memory paged by uswap counts: its faults are resolved transparently).
/// - Nothing else accesses that memory during the call, except `progress` itself (the
///   workload holds no reference into the region while `progress` runs).
pub unsafe fn run(
    base: *mut u8,
    len: usize,
    cfg: &WorkloadCfg,
    progress: &mut dyn FnMut(u64),
) -> Result<WorkloadResult, VerifyError> {
    let rounds = cfg.rounds.max(1);
    let pages = (len / PAGE) as u64;
    let page_at = |i: u64| -> &mut [u8] {
        // SAFETY: `i < pages`, so the page lies inside the region, which the caller guarantees
        // valid and unaliased; each slice lives only until the next `progress` call.
        unsafe { std::slice::from_raw_parts_mut(base.add(i as usize * PAGE), PAGE) }
    };
    let gen = Generator::new(cfg.data);
    let mut scratch = vec![0u8; PAGE];
    let mut res = WorkloadResult { pages, ..Default::default() };
    let mut seq_hist = new_hist();
    let mut rand_hist = new_hist();
    let bytes = pages as f64 * PAGE as f64;

    for round in 0..rounds {
        // Round 0 lands on fresh memory; its latency would mix first-touch faults with swap-out,
        // so only the steady rounds feed the histogram (unless there is only one round).
        let record = round > 0 || rounds == 1;
        let t_round = Instant::now();
        let mut since = 0u64;
        for i in 0..pages {
            let page = page_at(i);
            let t0 = Instant::now();
            if cfg.verify {
                if round == 0 {
                    if let Some(off) = page.iter().position(|&b| b != 0) {
                        return Err(VerifyError { page: i, offset: off, round: None, pass: "sequential" });
                    }
                } else {
                    gen.check(i, round - 1, page, &mut scratch).map_err(|offset| VerifyError {
                        page: i,
                        offset,
                        round: Some(round - 1),
                        pass: "sequential",
                    })?;
                }
                res.verified_bytes += PAGE as u64;
            }
            gen.fill(i, round, page);
            if record {
                seq_hist.saturating_record(t0.elapsed().as_nanos() as u64);
            }
            since += 1;
            if since == PROGRESS_PAGES {
                progress(since);
                since = 0;
            }
        }
        progress(since);
        let secs = t_round.elapsed().as_secs_f64();
        res.round_secs.push(secs);
        res.round_mb_s.push(bytes / MB / secs.max(1e-9));
    }
    let steady: &[f64] = if rounds > 1 { &res.round_secs[1..] } else { &res.round_secs[..] };
    let steady_secs: f64 = steady.iter().sum();
    res.seq_mb_s = bytes * steady.len() as f64 / MB / steady_secs.max(1e-9);
    res.seq_p50_us = us(&seq_hist, 0.5);
    res.seq_p99_us = us(&seq_hist, 0.99);
    res.seq_max_us = seq_hist.max() as f64 / 1000.0;

    // Random pass: one read touch per page, in a random order.
    let mut order: Vec<u32> = (0..pages as u32).collect();
    order.shuffle(&mut rand::rngs::SmallRng::seed_from_u64(cfg.seed));
    let last = rounds - 1;
    let t_rand = Instant::now();
    let mut since = 0u64;
    let mut sink = 0u64;
    for &p in &order {
        let p = p as u64;
        let t0 = Instant::now();
        if cfg.verify {
            let page = page_at(p);
            gen.check(p, last, page, &mut scratch).map_err(|offset| VerifyError {
                page: p,
                offset,
                round: Some(last),
                pass: "random",
            })?;
            res.verified_bytes += PAGE as u64;
        } else {
            // SAFETY: `p < pages`, so the word lies inside the region the caller guarantees
            // valid; it is 8-aligned (the region is page-aligned). The volatile read keeps the
            // touch from being optimised away.
            sink ^= unsafe { std::ptr::read_volatile(base.add(p as usize * PAGE + 64) as *const u64) };
        }
        rand_hist.saturating_record(t0.elapsed().as_nanos() as u64);
        since += 1;
        if since == PROGRESS_PAGES {
            progress(since);
            since = 0;
        }
    }
    progress(since);
    std::hint::black_box(sink);
    res.rand_secs = t_rand.elapsed().as_secs_f64();
    res.rand_touches_s = pages as f64 / res.rand_secs.max(1e-9);
    res.rand_mb_s = res.rand_touches_s * PAGE as f64 / MB;
    res.rand_p50_us = us(&rand_hist, 0.5);
    res.rand_p99_us = us(&rand_hist, 0.99);
    res.rand_max_us = rand_hist.max() as f64 / 1000.0;
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(data: DataKind) -> WorkloadCfg {
        WorkloadCfg { rounds: 3, verify: true, data, seed: 7 }
    }

    /// A zeroed, 8-aligned buffer of `pages` pages and its base pointer.
    fn buf(pages: usize) -> (Vec<u64>, *mut u8) {
        let mut v = vec![0u64; pages * PAGE / 8];
        let p = v.as_mut_ptr() as *mut u8;
        (v, p)
    }

    /// Run over `pages` pages at `p` (from `buf`).
    fn run_raw(
        p: *mut u8,
        pages: usize,
        c: &WorkloadCfg,
        progress: &mut dyn FnMut(u64),
    ) -> Result<WorkloadResult, VerifyError> {
        // SAFETY: `p` comes from `buf(pages)`, whose Vec outlives the call and is 8-aligned;
        // only the workload and its progress hook touch it during the call (the alignment to
        // a page only matters for the 8-byte touch, and 8 is enough for it).
        unsafe { run(p, pages * PAGE, c, progress) }
    }

    #[test]
    fn clean_run_verifies_every_byte() {
        for data in [DataKind::Pattern, DataKind::Mixed] {
            let (_mem, p) = buf(64);
            let mut units = 0;
            let r = run_raw(p, 64, &cfg(data), &mut |n| units += n).unwrap();
            assert_eq!(units, 64 * 4);
            // rounds 1 and 2 check the previous round, the random pass checks the last round,
            // round 0 checks that fresh memory is zero.
            assert_eq!(r.verified_bytes, 4 * 64 * PAGE as u64);
            assert_eq!(r.round_mb_s.len(), 3);
        }
    }

    #[test]
    fn contents_depend_on_page_and_round() {
        let g = Generator::new(DataKind::Mixed);
        let (mut a, mut b) = (vec![0u8; PAGE], vec![0u8; PAGE]);
        let mut kinds = [0usize; 4];
        for p in 0..256u64 {
            g.fill(p, 1, &mut a);
            g.fill(p, 1, &mut b);
            assert_eq!(a, b, "deterministic");
            g.fill(p, 2, &mut b);
            let k = g.page_kind(p);
            kinds[k as usize] += 1;
            if k == PageKind::Zero {
                assert!(a.iter().all(|&x| x == 0));
            } else {
                assert_ne!(a, b, "page {p} must change between rounds");
                g.fill(p + 1, 1, &mut b);
                assert_ne!(a, b, "pages must differ");
            }
        }
        assert!(kinds.iter().all(|&n| n > 10), "every page kind appears: {kinds:?}");
    }

    #[test]
    fn detects_a_flipped_byte_between_rounds() {
        // Flip one byte of one page after round 0 wrote it (in the progress callback, which
        // runs between pages): the check before round 1 rewrites it must catch it.
        for (flip_page, flip_off) in [(0usize, 0usize), (5, 17), (31, PAGE - 1)] {
            let (_mem, ptr) = buf(32);
            let mut calls = 0;
            let mut flip = |_n: u64| {
                calls += 1;
                if calls == 1 {
                    // SAFETY: the callback runs after the first sequential pass, when the
                    // workload holds no reference into `mem` across the call; the offset is
                    // inside the 32-page buffer.
                    unsafe { *ptr.add(flip_page * PAGE + flip_off) ^= 0x10 };
                }
            };
            let c = WorkloadCfg { rounds: 2, verify: true, data: DataKind::Mixed, seed: 1 };
            let e = run_raw(ptr, 32, &c, &mut flip).unwrap_err();
            assert_eq!((e.page, e.offset, e.round, e.pass), (flip_page as u64, flip_off, Some(0), "sequential"));
        }
    }

    #[test]
    fn detects_a_flipped_byte_in_the_random_pass() {
        let (_mem, ptr) = buf(16);
        let mut calls = 0;
        let mut flip = |_n: u64| {
            calls += 1;
            if calls == 2 {
                // SAFETY: as above: between passes, inside the buffer.
                unsafe { *ptr.add(9 * PAGE + 100) ^= 1 };
            }
        };
        let c = WorkloadCfg { rounds: 2, verify: true, data: DataKind::Pattern, seed: 1 };
        let e = run_raw(ptr, 16, &c, &mut flip).unwrap_err();
        assert_eq!((e.page, e.offset, e.round, e.pass), (9, 100, Some(1), "random"));
    }

    #[test]
    fn dirty_fresh_memory_is_reported() {
        let (_mem, p) = buf(4);
        // SAFETY: inside the 4-page buffer, before the workload runs.
        unsafe { *p.add(2 * PAGE + 3) = 1 };
        let e = run_raw(p, 4, &cfg(DataKind::Pattern), &mut |_| {}).unwrap_err();
        assert_eq!((e.page, e.offset, e.round), (2, 3, None));
    }

    #[test]
    fn without_verify_nothing_is_checked() {
        let (_mem, p) = buf(8);
        let c = WorkloadCfg { rounds: 1, verify: false, data: DataKind::Pattern, seed: 1 };
        let r = run_raw(p, 8, &c, &mut |_| {}).unwrap();
        assert_eq!(r.verified_bytes, 0);
        assert_eq!(r.round_secs.len(), 1);
    }
}
