//! `uswap bench table`: the swap table against the pre-swap-table design, in one process.
//!
//! - *Table*: a [`SwapSpace`] — lock-free lookups (`SwapSpace::load`: epoch pin, table
//!   pointer, word) and inserts (`SwapSpace::alloc` of one slot writing its word under the
//!   cluster lock).
//! - *Baseline*: what the swap table replaced — one `Mutex` around a `BTreeMap<u64, u64>` (the
//!   swap cache / location index) plus a `Vec<u8>` count per slot (`swap_map`); a lookup locks
//!   and reads both, an insert locks, scans the count map for a free slot from a cursor, sets
//!   its count and inserts into the map.
//!
//! Both run at 1 and 2 threads on the same slot count and the same random index sequence.
//! Memory is measured from real allocations: glibc's `mallinfo2()` (bytes in use, heap and
//! mmapped) before and after building each structure on the main thread, plus the space's own
//! `metadata_bytes()`. All-in bytes per stored page are measured the same way through an
//! [`Engine`] for zero pages (table only) and for the uncompressed memory tier (minus the page
//! data itself); the pool and file tiers are measured by their own benchmarks.
//!
//! No locking of its own beyond the structures under test; threads start together on a barrier.

use indicatif::ProgressBar;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant;
use uswap::backend::{Backend, MemBackend};
use uswap::internals::cluster::{SpaceConfig, SwapSpace};
use uswap::internals::swap_table::Word;
use uswap::vswap::{Engine, EngineConfig};
use uswap::{SwapEntry, PAGE_SIZE};
use uswap_run::exit::{CliError, CliResult};

/// Options of `uswap bench table`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  uswap bench table\n  uswap bench table --json > table.json")]
pub struct Args {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Slots in the swap space (and in the baseline).
    #[arg(long, default_value_t = 1 << 20)]
    pub slots: u64,
    /// Lookups per thread.
    #[arg(long, default_value_t = 2_000_000)]
    pub lookups: u64,
    /// Pages stored through the engine for the all-in memory measurement.
    #[arg(long, default_value_t = 65_536)]
    pub pages: u64,
}

/// The pre-swap-table design: one lock, an ordered map and a byte-per-slot count map.
struct Baseline {
    inner: Mutex<BaseInner>,
}

struct BaseInner {
    map: BTreeMap<u64, u64>,
    counts: Vec<u8>,
    cursor: usize,
}

impl Baseline {
    fn new(slots: usize) -> Self {
        Baseline { inner: Mutex::new(BaseInner { map: BTreeMap::new(), counts: vec![0; slots], cursor: 0 }) }
    }
    fn insert(&self, val: u64) -> Option<u64> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let n = g.counts.len();
        let start = g.cursor;
        let slot = (0..n).map(|i| (start + i) % n).find(|&i| g.counts[i] == 0)?;
        g.counts[slot] = 1;
        g.map.insert(slot as u64, val);
        g.cursor = slot + 1;
        Some(slot as u64)
    }
    fn lookup(&self, slot: u64) -> u64 {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let c = g.counts.get(slot as usize).copied().unwrap_or(0);
        g.map.get(&slot).copied().unwrap_or(0) ^ u64::from(c)
    }
}

/// Bytes currently allocated by malloc (heap + mmapped chunks).
fn heap_bytes() -> i64 {
    // SAFETY: mallinfo2 only reads allocator statistics; no preconditions.
    let m = unsafe { libc::mallinfo2() };
    (m.uordblks + m.hblkhd) as i64
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Run `f(thread, ops)` on `threads` threads started together; returns million ops per second.
fn mops(threads: usize, ops_per_thread: u64, f: Arc<dyn Fn(usize, u64) + Send + Sync>) -> f64 {
    let bar = Arc::new(Barrier::new(threads + 1));
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let (bar, f) = (bar.clone(), f.clone());
            std::thread::spawn(move || {
                bar.wait();
                f(t, ops_per_thread);
            })
        })
        .collect();
    bar.wait();
    let t0 = Instant::now();
    for h in hs {
        let _ = h.join();
    }
    let s = t0.elapsed().as_secs_f64();
    (threads as u64 * ops_per_thread) as f64 / s / 1e6
}

fn space(slots: u64) -> Result<SwapSpace, CliError> {
    SwapSpace::new(SpaceConfig { nr_slots: slots, ..SpaceConfig::default() })
        .map_err(|e| CliError::usage(format!("--slots: {e}")))
}

/// The results.
#[derive(serde::Serialize, Default)]
struct Report {
    slots: u64,
    lookups_per_thread: u64,
    inserts_total: u64,
    table_lookup_mops_1t: f64,
    table_lookup_mops_2t: f64,
    baseline_lookup_mops_1t: f64,
    baseline_lookup_mops_2t: f64,
    table_insert_mops_1t: f64,
    table_insert_mops_2t: f64,
    baseline_insert_mops_1t: f64,
    baseline_insert_mops_2t: f64,
    /// Table metadata per used slot, from malloc statistics.
    bytes_per_slot: f64,
    /// Table metadata per used slot, from `SwapSpace::metadata_bytes()`.
    table_metadata_bytes_per_slot: f64,
    /// Baseline (map + count byte) per used slot, from malloc statistics.
    baseline_bytes_per_slot: f64,
    /// All-in engine metadata per zero page (no data stored anywhere).
    allin_bytes_per_page_zero: f64,
    /// All-in engine + memory-tier metadata per stored page, minus the 4096 data bytes.
    allin_bytes_per_page_memory: f64,
}

/// Operations the benchmark does, for its progress bar: the two memory fills, lookups at 1 and
/// 2 threads on both structures, inserts at 1 and 2 threads on both, and the two all-in fills.
fn total_ops(inserts: u64, lookups: u64, pages: u64) -> u64 {
    let fills = 2 * inserts;
    let lookups = [1u64, 2].iter().map(|t| 2 * t * lookups).sum::<u64>();
    let inserts = [1u64, 2].iter().map(|t| 2 * (inserts / t) * t).sum::<u64>();
    fills + lookups + inserts + 2 * pages
}

/// Run the benchmark.
pub fn run(a: &Args) -> CliResult {
    if a.slots < 1024 || a.slots > 1 << 32 {
        return Err(CliError::usage("--slots must be between 1024 and 2^32"));
    }
    if a.lookups == 0 || a.pages == 0 {
        return Err(CliError::usage("--lookups and --pages must be positive"));
    }
    let t0 = Instant::now();
    let machine = crate::kernel::machine();
    let inserts = a.slots * 8 / 10;
    let bar = uswap_run::progress::Bar::new(
        a.json,
        "uswap bench table",
        total_ops(inserts, a.lookups, a.pages.min(inserts)),
        uswap_run::progress::Unit::Count("ops"),
    );
    let r = measure(a, &bar)?;
    bar.done();
    if a.json {
        let mut doc = serde_json::to_value(&r).map_err(|e| CliError::fail(e.to_string()))?;
        if let Some(m) = doc.as_object_mut() {
            m.insert("elapsed_s".into(), ((t0.elapsed().as_secs_f64() * 100.0).round() / 100.0).into());
        }
        println!("{}", uswap_run::report::with_header("table", machine, doc));
    } else {
        print_human(a, &r);
    }
    Ok(())
}

/// Every measurement; advances `bar` by [`total_ops`] in all, after each measured phase (never
/// inside one: the memory phases read malloc statistics, the others are timed).
fn measure(a: &Args, bar: &ProgressBar) -> Result<Report, CliError> {
    let inserts = a.slots * 8 / 10;
    let pages = a.pages.min(inserts);
    let mut r = Report { slots: a.slots, lookups_per_thread: a.lookups, inserts_total: inserts, ..Report::default() };

    // --- memory: table, filled on the main thread ---
    bar.set_message("memory: swap table");
    let h0 = heap_bytes();
    let sp = space(a.slots)?;
    for i in 0..inserts {
        sp.alloc(0, &mut |_| Word::stored(0, 1, i + 1, 1)).map_err(|e| CliError::fail(format!("alloc: {e}")))?;
    }
    let h1 = heap_bytes();
    r.bytes_per_slot = (h1 - h0) as f64 / inserts as f64;
    r.table_metadata_bytes_per_slot = sp.metadata_bytes() as f64 / sp.used_slots().max(1) as f64;
    bar.inc(inserts);

    // --- memory: baseline ---
    bar.set_message("memory: baseline");
    let h0 = heap_bytes();
    let base = Baseline::new(a.slots as usize);
    for i in 0..inserts {
        base.insert(i + 1).ok_or(CliError::fail("baseline full"))?;
    }
    let h1 = heap_bytes();
    r.baseline_bytes_per_slot = (h1 - h0) as f64 / inserts as f64;
    bar.inc(inserts);

    // --- lookups, 1 and 2 threads, same index sequence ---
    let sp = Arc::new(sp);
    let base = Arc::new(base);
    let slots = a.slots;
    for threads in [1usize, 2] {
        bar.set_message(format!("lookups, {threads} thread(s)"));
        let s = sp.clone();
        let t = mops(
            threads,
            a.lookups,
            Arc::new(move |th, n| {
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (th as u64 + 1);
                let mut acc = 0u64;
                for _ in 0..n {
                    let e = SwapEntry(xorshift(&mut x) % slots);
                    acc ^= s.load(e).map(|w| w.0).unwrap_or(0);
                }
                black_box(acc);
            }),
        );
        let b = base.clone();
        let bl = mops(
            threads,
            a.lookups,
            Arc::new(move |th, n| {
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (th as u64 + 1);
                let mut acc = 0u64;
                for _ in 0..n {
                    acc ^= b.lookup(xorshift(&mut x) % slots);
                }
                black_box(acc);
            }),
        );
        bar.inc(2 * threads as u64 * a.lookups);
        if threads == 1 {
            (r.table_lookup_mops_1t, r.baseline_lookup_mops_1t) = (t, bl);
        } else {
            (r.table_lookup_mops_2t, r.baseline_lookup_mops_2t) = (t, bl);
        }
    }
    drop(sp);
    drop(base);

    // --- inserts into fresh structures, 80 % of the slots split over the threads ---
    for threads in [1usize, 2] {
        bar.set_message(format!("inserts, {threads} thread(s)"));
        let per = inserts / threads as u64;
        let s = Arc::new(space(a.slots)?);
        let t = mops(
            threads,
            per,
            Arc::new(move |_, n| {
                for i in 0..n {
                    let _ = black_box(s.alloc(0, &mut |_| Word::stored(0, 1, i + 1, 1)));
                }
            }),
        );
        let b = Arc::new(Baseline::new(a.slots as usize));
        let bl = mops(
            threads,
            per,
            Arc::new(move |_, n| {
                for i in 0..n {
                    black_box(b.insert(i + 1));
                }
            }),
        );
        bar.inc(2 * per * threads as u64);
        if threads == 1 {
            (r.table_insert_mops_1t, r.baseline_insert_mops_1t) = (t, bl);
        } else {
            (r.table_insert_mops_2t, r.baseline_insert_mops_2t) = (t, bl);
        }
    }

    // --- all-in per stored page through the engine ---
    bar.set_message("all-in bytes per page");
    let cfg = EngineConfig { virtual_slots: a.slots, nr_groups: 1, ..EngineConfig::default() };
    let zero = vec![0u8; PAGE_SIZE];
    let h0 = heap_bytes();
    let eng = Engine::new(cfg.clone(), vec![]).map_err(|e| CliError::fail(e.to_string()))?;
    for _ in 0..pages {
        eng.swap_out(0, &zero).map_err(|e| CliError::fail(format!("swap_out: {e}")))?;
    }
    let h1 = heap_bytes();
    r.allin_bytes_per_page_zero = (h1 - h0) as f64 / pages as f64;
    drop(eng);
    bar.inc(pages);
    let mut page = vec![0u8; PAGE_SIZE];
    let h0 = heap_bytes();
    let mem: Arc<dyn Backend> = Arc::new(MemBackend::new("mem", 0));
    let eng = Engine::new(cfg, vec![mem]).map_err(|e| CliError::fail(e.to_string()))?;
    for i in 0..pages {
        page[..8].copy_from_slice(&(i + 1).to_le_bytes());
        eng.swap_out(0, &page).map_err(|e| CliError::fail(format!("swap_out: {e}")))?;
    }
    let h1 = heap_bytes();
    r.allin_bytes_per_page_memory = (h1 - h0) as f64 / pages as f64 - PAGE_SIZE as f64;
    drop(eng);
    bar.inc(pages);
    Ok(r)
}

fn print_human(a: &Args, r: &Report) {
    println!("uswap bench table: {} slots, {} lookups/thread, {} inserts", r.slots, a.lookups, r.inserts_total);
    println!("{:<28} {:>12} {:>12}", "", "swap table", "baseline");
    println!("{:<28} {:>12.2} {:>12.2}", "lookup Mops/s, 1 thread", r.table_lookup_mops_1t, r.baseline_lookup_mops_1t);
    println!("{:<28} {:>12.2} {:>12.2}", "lookup Mops/s, 2 threads", r.table_lookup_mops_2t, r.baseline_lookup_mops_2t);
    println!("{:<28} {:>12.2} {:>12.2}", "insert Mops/s, 1 thread", r.table_insert_mops_1t, r.baseline_insert_mops_1t);
    println!("{:<28} {:>12.2} {:>12.2}", "insert Mops/s, 2 threads", r.table_insert_mops_2t, r.baseline_insert_mops_2t);
    println!("{:<28} {:>12.2} {:>12.2}", "bytes per used slot (malloc)", r.bytes_per_slot, r.baseline_bytes_per_slot);
    println!("{:<28} {:>12.2}", "bytes per slot (metadata)", r.table_metadata_bytes_per_slot);
    println!("{:<28} {:>12.2}", "all-in bytes/page, zero", r.allin_bytes_per_page_zero);
    println!("{:<28} {:>12.2}", "all-in bytes/page, memory", r.allin_bytes_per_page_memory);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bar_counts_every_operation() {
        let a = Args { json: true, slots: 4096, lookups: 1000, pages: 100 };
        let inserts = a.slots * 8 / 10;
        let total = total_ops(inserts, a.lookups, a.pages);
        assert_eq!(total, 2 * inserts + 6 * a.lookups + 4 * inserts + 2 * a.pages);
        let bar = ProgressBar::hidden();
        bar.set_length(total);
        let r = measure(&a, &bar).unwrap();
        assert_eq!(bar.position(), total);
        assert!(r.table_lookup_mops_1t > 0.0 && r.baseline_insert_mops_2t > 0.0);
    }
}
