//! Fault-path benchmark: SIGBUS-in-the-faulting-thread against a handler thread, per folio
//! size, plus direct against background reclaim and FIFO against the two-list policy under a
//! limit.
//!
//! ```text
//! cargo run --release -p uswap-pager --example fault_paths -- [--size MB] [--limit MB] [--json]
//! ```
//! Prints what it measured (µs per fault, pages/s, MB/s); `--json` prints one JSON object.

use std::time::Instant;
use uswap_pager::{FaultMode, Pager, PagerConfig, PagerError, ReclaimMode, Replacement, SwapinPolicy};

fn arg(name: &str, default: usize) -> usize {
    let a: Vec<String> = std::env::args().collect();
    a.iter().position(|x| x == name).and_then(|i| a.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// usemem-like page contents: per 1 KiB segment a 64-byte motif repeated (compresses ~14x
/// with LZ4), different per page and round.
fn fill_word(buf: &mut [u8], round: u64) {
    let base = buf.as_ptr() as u64 / 4096;
    for (pg, page) in buf.chunks_mut(4096).enumerate() {
        let seed = mix64((base + pg as u64) ^ (round << 48));
        for (seg, chunk) in page.chunks_mut(1024).enumerate() {
            let mut motif = [0u8; 64];
            for (k, w) in motif.chunks_exact_mut(8).enumerate() {
                w.copy_from_slice(&mix64(seed ^ (seg as u64) << 8 ^ k as u64).to_le_bytes());
            }
            for m in chunk.chunks_mut(64) {
                m.copy_from_slice(&motif[..m.len()]);
            }
        }
    }
}

#[derive(serde::Serialize)]
struct Row {
    case: String,
    mode: String,
    folio_kb: usize,
    faults: u64,
    us_per_fault: f64,
    pages_per_s: f64,
    mb_s: f64,
    p50_ns: Option<u64>,
    p99_ns: Option<u64>,
}

fn pager(cfg: PagerConfig) -> Option<std::sync::Arc<Pager>> {
    match Pager::new(cfg) {
        Ok(p) => Some(p),
        Err(PagerError::Unavailable(w)) => {
            eprintln!("skipped: {w}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// Pure fault cost: first touch (zero fill) and swap-in of evicted pages, no limit pressure.
fn fault_cost(mode: FaultMode, folio: usize, size: usize, rows: &mut Vec<Row>) {
    let cfg = PagerConfig {
        limit_bytes: (size as u64) * 4,
        folio_size: folio,
        fault_mode: mode,
        record_latency: true,
        adaptive: false,
        readahead_pages: 0,
        ..Default::default()
    };
    let Some(p) = pager(cfg) else { return };
    let r = p.map(size).unwrap();
    let base = r.as_ptr();
    // First touch: one write per page (zero-fill faults).
    let t = Instant::now();
    for off in (0..size).step_by(4096) {
        // SAFETY: inside the region.
        unsafe { base.add(off).write_volatile(off as u8) };
    }
    let dt = t.elapsed().as_secs_f64();
    let s = p.stats();
    rows.push(Row {
        case: "zero-fill".into(),
        mode: format!("{mode:?}"),
        folio_kb: folio / 1024,
        faults: s.faults,
        us_per_fault: dt * 1e6 / s.faults.max(1) as f64,
        pages_per_s: (size / 4096) as f64 / dt,
        mb_s: size as f64 / dt / 1e6,
        p50_ns: s.fault_p50_ns,
        p99_ns: s.fault_p99_ns,
    });
    // Swap-in: evict everything (compressed), then read one byte per page.
    r.evict_all();
    let f0 = p.stats().faults;
    let t = Instant::now();
    let mut x = 0u8;
    for off in (0..size).step_by(4096) {
        // SAFETY: inside the region.
        x ^= unsafe { base.add(off).read_volatile() };
    }
    let dt = t.elapsed().as_secs_f64();
    std::hint::black_box(x);
    let s = p.stats();
    let faults = s.faults - f0;
    rows.push(Row {
        case: "swap-in".into(),
        mode: format!("{mode:?}"),
        folio_kb: folio / 1024,
        faults,
        us_per_fault: dt * 1e6 / faults.max(1) as f64,
        pages_per_s: (size / 4096) as f64 / dt,
        mb_s: size as f64 / dt / 1e6,
        p50_ns: s.fault_p50_ns,
        p99_ns: s.fault_p99_ns,
    });
}

/// usemem-like sequential rewrite of `size` under `limit`, 3 rounds; MB/s of rounds 1-2.
fn rewrite(cfg: PagerConfig, label: &str, size: usize, rows: &mut Vec<Row>) {
    let folio = cfg.folio_size;
    let mode = format!("{label}");
    let Some(p) = pager(cfg) else { return };
    let mut r = p.map(size).unwrap();
    let s = r.as_mut_slice();
    fill_word(s, 0);
    let f0 = p.stats().faults;
    let t = Instant::now();
    for round in 1..3u64 {
        for chunk in s.chunks_mut(1 << 20) {
            fill_word(chunk, round);
        }
    }
    let dt = t.elapsed().as_secs_f64();
    let st = p.stats();
    rows.push(Row {
        case: "seq-rewrite".into(),
        mode,
        folio_kb: folio / 1024,
        faults: st.faults - f0,
        us_per_fault: dt * 1e6 / (st.faults - f0).max(1) as f64,
        pages_per_s: (2 * size / 4096) as f64 / dt,
        mb_s: (2 * size) as f64 / dt / 1e6,
        p50_ns: st.fault_p50_ns,
        p99_ns: st.fault_p99_ns,
    });
}

/// Random one-word touches, one per 4 KiB page (random order) under `limit`; touches/s.
fn random_touch(cfg: PagerConfig, label: &str, size: usize, skew: bool, rows: &mut Vec<Row>) {
    let folio = cfg.folio_size;
    let Some(p) = pager(cfg) else { return };
    let mut r = p.map(size).unwrap();
    fill_word(r.as_mut_slice(), 0);
    let pages = size / 4096;
    let base = r.as_ptr();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let f0 = p.stats().faults;
    let hits0 = p.stats();
    let t = Instant::now();
    let n = pages * 2;
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let pg = if skew && x % 10 < 8 {
            // 80 % of touches go to 10 % of the pages.
            (x >> 8) as usize % (pages / 10)
        } else {
            (x >> 8) as usize % pages
        };
        // SAFETY: inside the region.
        unsafe {
            let q = base.add(pg * 4096 + 64) as *mut u64;
            q.write_volatile(q.read_volatile().wrapping_add(1));
        }
    }
    let dt = t.elapsed().as_secs_f64();
    let st = p.stats();
    if std::env::var_os("FP_STATS").is_some() {
        eprintln!("{label}: {}", serde_json::to_string(&st).unwrap());
    }
    let faults = st.faults - f0;
    let major = st.fault_swapin - hits0.fault_swapin;
    rows.push(Row {
        case: if skew { format!("skewed-touch major={major}") } else { format!("random-touch major={major}") },
        mode: label.into(),
        folio_kb: folio / 1024,
        faults,
        us_per_fault: dt * 1e6 / faults.max(1) as f64,
        pages_per_s: n as f64 / dt,
        mb_s: (n * 4096) as f64 / dt / 1e6,
        p50_ns: st.fault_p50_ns,
        p99_ns: st.fault_p99_ns,
    });
}

fn main() {
    let size = arg("--size", 256) << 20;
    let limit = (arg("--limit", 64) as u64) << 20;
    let json = std::env::args().any(|a| a == "--json");
    let a: Vec<String> = std::env::args().collect();
    let only = a.iter().position(|x| x == "--only").and_then(|i| a.get(i + 1)).cloned().unwrap_or_default();
    let want = |s: &str| only.is_empty() || only.split(',').any(|o| s.contains(o));
    let mut rows = Vec::new();
    for folio in [4096usize, 65536, 2 << 20] {
        if !want(&format!("cost{}", folio / 1024)) {
            continue;
        }
        for mode in [FaultMode::Sigbus, FaultMode::Thread] {
            fault_cost(mode, folio, size / 2, &mut rows);
        }
    }
    let base = PagerConfig { limit_bytes: limit, record_latency: true, ..Default::default() };
    for folio in [4096usize, 65536] {
        if !want(&format!("rewrite{}", folio / 1024)) {
            continue;
        }
        for (label, mode, rec, repl) in [
            ("sigbus+direct+2list", FaultMode::Sigbus, ReclaimMode::Direct, Replacement::TwoList),
            ("sigbus+background+2list", FaultMode::Sigbus, ReclaimMode::Background, Replacement::TwoList),
            ("sigbus+direct+fifo", FaultMode::Sigbus, ReclaimMode::Direct, Replacement::Fifo),
            ("thread+direct+2list", FaultMode::Thread, ReclaimMode::Direct, Replacement::TwoList),
        ] {
            let cfg =
                PagerConfig { folio_size: folio, fault_mode: mode, reclaim: rec, replacement: repl, ..base.clone() };
            rewrite(cfg, label, size, &mut rows);
        }
    }
    for folio in [4096usize, 65536] {
        if !want(&format!("random{}", folio / 1024)) {
            continue;
        }
        for (label, adaptive, swapin) in
            [("adaptive", true, SwapinPolicy::Always), ("whole-folio", false, SwapinPolicy::Always)]
        {
            if folio == 4096 && !adaptive {
                continue;
            }
            let cfg = PagerConfig { folio_size: folio, adaptive, swapin, ..base.clone() };
            random_touch(cfg, label, size, false, &mut rows);
        }
    }
    for repl in [Replacement::Fifo, Replacement::TwoList] {
        if !want("skew") {
            continue;
        }
        let cfg = PagerConfig { folio_size: 4096, replacement: repl, ..base.clone() };
        random_touch(cfg, &format!("{repl:?}"), size, true, &mut rows);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows).unwrap());
        return;
    }
    println!("size {} MiB, limit {} MiB", size >> 20, limit >> 20);
    println!(
        "{:<26} {:<26} {:>6} {:>8} {:>9} {:>11} {:>8} {:>8} {:>8}",
        "case", "mode", "folio", "faults", "us/fault", "pages/s", "MB/s", "p50us", "p99us"
    );
    for r in &rows {
        println!(
            "{:<26} {:<26} {:>5}K {:>8} {:>9.2} {:>11.0} {:>8.0} {:>8.1} {:>8.1}",
            r.case,
            r.mode,
            r.folio_kb,
            r.faults,
            r.us_per_fault,
            r.pages_per_s,
            r.mb_s,
            r.p50_ns.unwrap_or(0) as f64 / 1e3,
            r.p99_ns.unwrap_or(0) as f64 / 1e3
        );
    }
}
