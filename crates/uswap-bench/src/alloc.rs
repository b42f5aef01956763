//! `uswap bench alloc`: a fragmenting allocation replay run under each fragment policy.
//!
//! The same seeded workload is replayed against a fresh [`SwapSpace`] per policy in this
//! process: folios of orders 0/2/4/9 are allocated until the space is 90 % used, then the run
//! churns at that level. Entries are short-lived (exponential lifetimes) or long-lived (freed
//! only by random frees); some large folios are freed partially, slot by slot (as a partial
//! unmap does), and a large allocation that fails is split into order-0 allocations, as the
//! kernel's reclaim does after `swpout_fallback`. Reported per policy: the fallback (failure)
//! rate per order over the churn phase and over the whole run, the mean time of an `alloc`
//! call, where allocations came from, the lists, and the fragment bucket statistics.

use indicatif::ProgressBar;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Instant;
use uswap::internals::cluster::{AllocStats, BucketStats, FragPolicy, SpaceConfig, SwapSpace};
use uswap::internals::swap_table::{Word, NR_ORDERS, SLOTS_PER_CLUSTER};
use uswap::{SwapEntry, SwapError};
use uswap_run::exit::{CliError, CliResult};

/// Which policies to run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyArg {
    /// The kernel's "scan only one fragment cluster".
    ScanOne,
    /// Chris Li's fragment buckets.
    Buckets,
    /// Both, same seed, same process.
    Both,
}

/// Options of `uswap bench alloc`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  uswap bench alloc\n  uswap bench alloc --json | jq .")]
pub struct Args {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Slots in the swap space (rounded up to 512-slot clusters).
    #[arg(long, default_value_t = 1 << 18)]
    pub slots: u64,
    /// Fragment policy to run.
    #[arg(long, value_enum, default_value_t = PolicyArg::Both)]
    pub policy: PolicyArg,
    /// Replay steps (one allocation or free decision each).
    #[arg(long, default_value_t = 1_000_000)]
    pub ops: u64,
    /// Random seed of the first run; run `i` uses `seed + i`.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Number of runs (seeds) per policy; results are averaged.
    #[arg(long, default_value_t = 4)]
    pub seeds: u64,
    /// Fill level the churn phase holds (fraction of slots in use).
    #[arg(long, default_value_t = 0.9)]
    pub fill: f64,
    /// Chance that a random free of a large folio frees only about half of its slots (the
    /// rest become order-0 entries), as a partial unmap does.
    #[arg(long, default_value_t = 0.05)]
    pub partial: f64,
}

/// Orders of the replay and their share of allocation requests.
const ORDERS: [(u8, f64); 4] = [(0, 0.60), (2, 0.25), (4, 0.14), (9, 0.01)];
/// Share of entries that live until a random free picks them.
const LONG_LIVED: f64 = 0.3;
/// Replay steps per progress update (the bar is advanced between steps, off the timed calls).
const PROGRESS_STEPS: u64 = 1 << 16;

struct Item {
    e: SwapEntry,
    order: u8,
}

#[derive(Default, serde::Serialize)]
struct OrderResult {
    order: u8,
    attempts: u64,
    fallbacks: u64,
    fallback_rate: f64,
    steady_attempts: u64,
    steady_fallbacks: u64,
    steady_fallback_rate: f64,
}

#[derive(serde::Serialize)]
struct PolicyResult {
    policy: FragPolicy,
    /// Fallback rate per replay order, churn phase (`"0"`, `"2"`, `"4"`, `"9"`).
    fallback_rate: BTreeMap<String, f64>,
    /// Fallback rate per replay order over the whole run including the fill.
    fallback_rate_all: BTreeMap<String, f64>,
    /// Slots requested at order > 0 in the churn phase that had to be split, / requested.
    large_slot_fallback_rate: f64,
    ns_per_alloc: f64,
    /// Median and 99th percentile of one `alloc` call (robust to preemption on a busy host).
    ns_p50: u64,
    ns_p99: u64,
    ns_per_alloc_by_order: BTreeMap<String, f64>,
    orders: Vec<OrderResult>,
    allocs: u64,
    frees: u64,
    used_fraction_end: f64,
    metadata_bytes_end: usize,
    wall_s: f64,
    stats: AllocStats,
}

fn pick_order(rng: &mut SmallRng) -> u8 {
    let mut x: f64 = rng.random();
    for (o, p) in ORDERS {
        if x < p {
            return o;
        }
        x -= p;
    }
    0
}

/// One replay of `a.ops` steps; advances `pb` by `a.ops` in all.
fn replay(a: &Args, policy: FragPolicy, seed: u64, pb: &ProgressBar) -> Result<PolicyResult, CliError> {
    let s = SwapSpace::new(SpaceConfig { nr_slots: a.slots, frag_policy: policy, discard: false, nr_shards: 1 })
        .map_err(|e| CliError::usage(e.to_string()))?;
    let nr = s.nr_slots() as usize;
    let target = (nr as f64 * a.fill) as usize;
    let mut rng = SmallRng::seed_from_u64(seed);
    // Live entries: a slab with generation-checked deadlines for the short-lived ones.
    let mut slab: Vec<Option<(Item, u32)>> = Vec::new();
    let mut free_ids: Vec<usize> = Vec::new();
    let mut gens: Vec<u32> = Vec::new();
    let mut live = 0usize;
    let mut deaths: BinaryHeap<Reverse<(u64, usize, u32)>> = BinaryHeap::new();
    // Mean short lifetime in steps: half the number of slots kept in use.
    let mean_life = (target as f64 / 2.0).max(1000.0);
    let mut attempts = [0u64; NR_ORDERS];
    let mut fails = [0u64; NR_ORDERS];
    let mut s_attempts = [0u64; NR_ORDERS];
    let mut s_fails = [0u64; NR_ORDERS];
    let mut ns = [0u128; NR_ORDERS];
    let mut hist = hdrhistogram::Histogram::<u64>::new(3).map_err(|e| CliError::fail(e.to_string()))?;
    let (mut allocs, mut frees) = (0u64, 0u64);
    let mut steady = false;
    let mut large_req = 0u64;
    let mut large_fail = 0u64;
    let t0 = Instant::now();

    let free_item = |s: &SwapSpace, it: &Item| -> Result<(), CliError> {
        s.lock_cluster(it.e)
            .and_then(|mut g| g.free_range(it.e.offset(), 1 << it.order))
            .map_err(|e| CliError::fail(format!("free {:?}: {e}", it.e)))
    };

    macro_rules! insert {
        ($e:expr, $order:expr, $step:expr) => {{
            let id = match free_ids.pop() {
                Some(id) => id,
                None => {
                    slab.push(None);
                    gens.push(0);
                    slab.len() - 1
                }
            };
            gens[id] = gens[id].wrapping_add(1);
            slab[id] = Some((Item { e: $e, order: $order }, gens[id]));
            live += 1;
            if !rng.random_bool(LONG_LIVED) {
                let life = (-(1.0 - rng.random::<f64>()).ln() * mean_life) as u64 + 1;
                deaths.push(Reverse(($step + life, id, gens[id])));
            }
        }};
    }

    for step in 0..a.ops {
        if step % PROGRESS_STEPS == 0 && step > 0 {
            pb.inc(PROGRESS_STEPS);
        }
        // Deadlines.
        while let Some(&Reverse((t, id, g))) = deaths.peek() {
            if t > step {
                break;
            }
            deaths.pop();
            if matches!(&slab[id], Some((_, g2)) if *g2 == g) {
                let (it, _) = slab[id].take().unwrap_or_else(|| unreachable!());
                free_item(&s, &it)?;
                free_ids.push(id);
                live -= 1;
                frees += 1;
            }
        }
        if s.used_slots() < target {
            let order = pick_order(&mut rng);
            let o = order as usize;
            let t = Instant::now();
            let r = s.alloc(order, &mut |_| Word::zero(0, 1));
            let d = t.elapsed().as_nanos();
            ns[o] += d;
            hist.saturating_record(d as u64);
            attempts[o] += 1;
            if steady {
                s_attempts[o] += 1;
                if order > 0 {
                    large_req += 1 << order;
                }
            }
            match r {
                Ok(e) => {
                    allocs += 1;
                    insert!(e, order, step);
                }
                Err(SwapError::NoSpace { .. }) => {
                    fails[o] += 1;
                    if steady {
                        s_fails[o] += 1;
                        if order > 0 {
                            large_fail += 1 << order;
                        }
                    }
                    // Split and store the pages one by one (reclaim after swpout_fallback).
                    if order > 0 {
                        for _ in 0..1 << order {
                            let t = Instant::now();
                            let r0 = s.alloc(0, &mut |_| Word::zero(0, 1));
                            let d = t.elapsed().as_nanos();
                            ns[0] += d;
                            hist.saturating_record(d as u64);
                            attempts[0] += 1;
                            if steady {
                                s_attempts[0] += 1;
                            }
                            match r0 {
                                Ok(e) => {
                                    allocs += 1;
                                    insert!(e, 0, step);
                                }
                                Err(_) => {
                                    fails[0] += 1;
                                    if steady {
                                        s_fails[0] += 1;
                                    }
                                    break;
                                }
                            }
                        }
                    }
                }
                Err(e) => return Err(CliError::fail(format!("alloc: {e}"))),
            }
        } else {
            steady = true;
            // Random free of any live entry (long-lived ones only leave this way).
            if live == 0 {
                continue;
            }
            let id = loop {
                let id = rng.random_range(0..slab.len());
                if slab[id].is_some() {
                    break id;
                }
            };
            let (it, _) = slab[id].take().unwrap_or_else(|| unreachable!());
            free_ids.push(id);
            live -= 1;
            frees += 1;
            if it.order > 0 && rng.random_bool(a.partial) {
                // Partial unmap: free half of the slots now, keep the others as order-0 entries.
                let n = 1usize << it.order;
                let mut g = s.lock_cluster(it.e).map_err(|e| CliError::fail(e.to_string()))?;
                let mut keep = Vec::new();
                for i in 0..n {
                    if rng.random_bool(0.5) {
                        g.free_range(it.e.offset() + i, 1).map_err(|e| CliError::fail(e.to_string()))?;
                    } else {
                        keep.push(it.e.add(i as u64));
                    }
                }
                drop(g);
                for e in keep {
                    insert!(e, 0, step);
                }
            } else {
                free_item(&s, &it)?;
            }
        }
    }
    let wall_s = t0.elapsed().as_secs_f64();
    pb.inc(a.ops - a.ops.saturating_sub(1) / PROGRESS_STEPS * PROGRESS_STEPS);
    s.check_invariants().map_err(|e| CliError::fail(format!("allocator invariant broken: {e}")))?;
    let stats = s.alloc_stats();
    let rate = |f: u64, n: u64| if n == 0 { 0.0 } else { f as f64 / n as f64 };
    let mut orders = Vec::new();
    let mut fallback_rate = BTreeMap::new();
    let mut fallback_rate_all = BTreeMap::new();
    let mut ns_by = BTreeMap::new();
    for (o, _) in ORDERS {
        let i = o as usize;
        orders.push(OrderResult {
            order: o,
            attempts: attempts[i],
            fallbacks: fails[i],
            fallback_rate: rate(fails[i], attempts[i]),
            steady_attempts: s_attempts[i],
            steady_fallbacks: s_fails[i],
            steady_fallback_rate: rate(s_fails[i], s_attempts[i]),
        });
        fallback_rate.insert(o.to_string(), rate(s_fails[i], s_attempts[i]));
        fallback_rate_all.insert(o.to_string(), rate(fails[i], attempts[i]));
        ns_by.insert(o.to_string(), if attempts[i] == 0 { 0.0 } else { ns[i] as f64 / attempts[i] as f64 });
    }
    let total_attempts: u64 = attempts.iter().sum();
    Ok(PolicyResult {
        policy,
        fallback_rate,
        fallback_rate_all,
        large_slot_fallback_rate: rate(large_fail, large_req),
        ns_per_alloc: ns.iter().sum::<u128>() as f64 / total_attempts.max(1) as f64,
        ns_p50: hist.value_at_quantile(0.5),
        ns_p99: hist.value_at_quantile(0.99),
        ns_per_alloc_by_order: ns_by,
        orders,
        allocs,
        frees,
        used_fraction_end: s.used_slots() as f64 / nr as f64,
        metadata_bytes_end: s.metadata_bytes(),
        wall_s,
        stats,
    })
}

fn name(p: FragPolicy) -> &'static str {
    match p {
        FragPolicy::ScanOne => "scan_one",
        FragPolicy::Buckets => "buckets",
    }
}

#[derive(serde::Serialize)]
struct PolicySummary {
    policy: FragPolicy,
    /// Mean over the seeds of the churn-phase fallback rate, per replay order.
    fallback_rate: BTreeMap<String, f64>,
    /// The same per seed.
    fallback_rate_per_seed: BTreeMap<String, Vec<f64>>,
    /// Mean over the seeds of split slots / requested slots at orders > 0 (churn phase).
    large_slot_fallback_rate: f64,
    /// Mean time of one `alloc` call (all orders, failed calls included), over the seeds.
    ns_per_alloc: f64,
    /// Mean over the seeds of the median / 99th percentile time of one `alloc` call.
    ns_p50: f64,
    ns_p99: f64,
    /// Seeds where this policy split fewer slots than the other one.
    seeds_won: usize,
    /// Frag clusters scanned / found a window, summed over the seeds.
    frag_scans: u64,
    frag_hits: u64,
    /// Bucket statistics: scans and hits summed over the seeds, clusters at the end of the
    /// last run.
    buckets: Vec<BucketStats>,
    runs: Vec<PolicyResult>,
}

fn summarize(policy: FragPolicy, runs: Vec<PolicyResult>) -> PolicySummary {
    let k = runs.len().max(1) as f64;
    let mut fallback_rate = BTreeMap::new();
    let mut per_seed = BTreeMap::new();
    for (o, _) in ORDERS {
        let key = o.to_string();
        let v: Vec<f64> = runs.iter().map(|r| r.fallback_rate[&key]).collect();
        fallback_rate.insert(key.clone(), v.iter().sum::<f64>() / k);
        per_seed.insert(key, v);
    }
    let mut buckets = runs.last().map(|r| r.stats.buckets.clone()).unwrap_or_default();
    for b in buckets.iter_mut() {
        b.scans = 0;
        b.hits = 0;
    }
    for r in &runs {
        for (acc, b) in buckets.iter_mut().zip(&r.stats.buckets) {
            acc.scans += b.scans;
            acc.hits += b.hits;
        }
    }
    PolicySummary {
        policy,
        fallback_rate,
        fallback_rate_per_seed: per_seed,
        large_slot_fallback_rate: runs.iter().map(|r| r.large_slot_fallback_rate).sum::<f64>() / k,
        ns_per_alloc: runs.iter().map(|r| r.ns_per_alloc).sum::<f64>() / k,
        ns_p50: runs.iter().map(|r| r.ns_p50 as f64).sum::<f64>() / k,
        ns_p99: runs.iter().map(|r| r.ns_p99 as f64).sum::<f64>() / k,
        seeds_won: 0,
        frag_scans: runs.iter().map(|r| r.stats.frag_scans.iter().sum::<u64>()).sum(),
        frag_hits: buckets.iter().map(|b| b.hits).sum(),
        buckets,
        runs,
    }
}

/// Run the benchmark.
pub fn run(a: &Args) -> CliResult {
    if !(0.05..=0.99).contains(&a.fill) {
        return Err(CliError::usage("--fill must be between 0.05 and 0.99"));
    }
    if !(0.0..=1.0).contains(&a.partial) {
        return Err(CliError::usage("--partial must be between 0 and 1"));
    }
    if a.seeds == 0 {
        return Err(CliError::usage("--seeds must be at least 1"));
    }
    let policies: &[FragPolicy] = match a.policy {
        PolicyArg::ScanOne => &[FragPolicy::ScanOne],
        PolicyArg::Buckets => &[FragPolicy::Buckets],
        PolicyArg::Both => &[FragPolicy::ScanOne, FragPolicy::Buckets],
    };
    let t0 = Instant::now();
    let seeds: Vec<u64> = (0..a.seeds).map(|i| a.seed + i).collect();
    let bar = uswap_run::progress::Bar::new(
        a.json,
        "uswap bench alloc",
        policies.len() as u64 * a.seeds * a.ops,
        uswap_run::progress::Unit::Count("steps"),
    );
    let mut results = Vec::new();
    for &p in policies {
        let mut runs = Vec::new();
        for &seed in &seeds {
            bar.set_message(format!("{}, seed {seed}", name(p)));
            runs.push(replay(a, p, seed, &bar)?);
        }
        results.push(summarize(p, runs));
    }
    if results.len() == 2 {
        for i in 0..seeds.len() {
            let (x, y) = (results[0].runs[i].large_slot_fallback_rate, results[1].runs[i].large_slot_fallback_rate);
            if x < y {
                results[0].seeds_won += 1;
            } else if y < x {
                results[1].seeds_won += 1;
            }
        }
    }
    // Verdict: fewer split slots (mean over the seeds) wins; time per allocation beside it.
    let verdict = (results.len() == 2).then(|| {
        let (x, y) = (&results[0], &results[1]);
        let lower = if x.large_slot_fallback_rate <= y.large_slot_fallback_rate { x } else { y };
        let faster = if x.ns_per_alloc <= y.ns_per_alloc { x } else { y };
        serde_json::json!({
            "lower_fallback": name(lower.policy),
            "faster": name(faster.policy),
            "large_slot_fallback_rate": { name(x.policy): x.large_slot_fallback_rate, name(y.policy): y.large_slot_fallback_rate },
            "seeds_won": { name(x.policy): x.seeds_won, name(y.policy): y.seeds_won },
            "ns_per_alloc": { name(x.policy): x.ns_per_alloc, name(y.policy): y.ns_per_alloc },
            "ns_p50": { name(x.policy): x.ns_p50, name(y.policy): y.ns_p50 },
        })
    });
    bar.done();
    if a.json {
        let mut obj = serde_json::Map::new();
        obj.insert("slots".into(), a.slots.into());
        obj.insert("clusters".into(), a.slots.div_ceil(SLOTS_PER_CLUSTER as u64).into());
        obj.insert("ops".into(), a.ops.into());
        obj.insert("seeds".into(), serde_json::json!(seeds));
        obj.insert("fill".into(), a.fill.into());
        obj.insert("partial".into(), a.partial.into());
        obj.insert(
            "orders_mix".into(),
            serde_json::json!(ORDERS
                .iter()
                .map(|(o, p)| serde_json::json!({"order": o, "share": p}))
                .collect::<Vec<_>>()),
        );
        for r in &results {
            obj.insert(name(r.policy).into(), serde_json::to_value(r).map_err(|e| CliError::fail(e.to_string()))?);
        }
        if let Some(v) = verdict {
            obj.insert("verdict".into(), v);
        }
        obj.insert("elapsed_s".into(), ((t0.elapsed().as_secs_f64() * 100.0).round() / 100.0).into());
        println!(
            "{}",
            uswap_run::report::with_header("alloc", crate::kernel::machine(), serde_json::Value::Object(obj))
        );
        return Ok(());
    }
    println!(
        "alloc replay: {} slots ({} clusters), {} steps x seeds {:?}, fill {:.0}%, partial frees {:.0}%, orders 0/2/4/9 = {:?}",
        a.slots,
        a.slots.div_ceil(SLOTS_PER_CLUSTER as u64),
        a.ops,
        seeds,
        a.fill * 100.0,
        a.partial * 100.0,
        ORDERS.iter().map(|x| x.1).collect::<Vec<_>>()
    );
    println!(
        "{:<9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>4} {:>9} {:>7} {:>7} {:>10} {:>9}",
        "policy",
        "fb o0",
        "fb o2",
        "fb o4",
        "fb o9",
        "large-fb",
        "won",
        "ns/alloc",
        "p50",
        "p99",
        "fragscans",
        "fraghits"
    );
    for r in &results {
        println!(
            "{:<9} {:>8.4} {:>8.4} {:>8.4} {:>8.4} {:>9.4} {:>4} {:>9.1} {:>7.0} {:>7.0} {:>10} {:>9}",
            name(r.policy),
            r.fallback_rate["0"],
            r.fallback_rate["2"],
            r.fallback_rate["4"],
            r.fallback_rate["9"],
            r.large_slot_fallback_rate,
            r.seeds_won,
            r.ns_per_alloc,
            r.ns_p50,
            r.ns_p99,
            r.frag_scans,
            r.frag_hits,
        );
    }
    println!(
        "(fb = churn-phase fallback rate, mean over seeds; large-fb = split slots / requested slots at orders > 0; \
         won = seeds with the lower large-fb)"
    );
    for r in &results {
        println!("frag buckets ({}): order bucket used-range clusters scans hits p_model", name(r.policy));
        for b in r.buckets.iter().filter(|b| b.clusters > 0 || b.scans > 0) {
            println!(
                "  o{} b{} [{:>3},{:>3}) {:>6} {:>9} {:>9} {}",
                b.order,
                b.bucket,
                b.min_used,
                b.max_used,
                b.clusters,
                b.scans,
                b.hits,
                b.p_model.map_or("-".to_string(), |p| format!("{p:.3e}"))
            );
        }
    }
    if let Some(v) = verdict {
        println!("verdict: lower fallback = {}, faster = {}", v["lower_fallback"], v["faster"]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_advances_the_bar_by_its_steps() {
        for ops in [0, 1, PROGRESS_STEPS, PROGRESS_STEPS + 1, 3 * PROGRESS_STEPS - 1] {
            let a = Args {
                json: true,
                slots: 4096,
                policy: PolicyArg::Buckets,
                ops,
                seed: 1,
                seeds: 1,
                fill: 0.9,
                partial: 0.05,
            };
            let bar = ProgressBar::hidden();
            replay(&a, FragPolicy::Buckets, 1, &bar).unwrap();
            assert_eq!(bar.position(), ops, "ops {ops}");
        }
    }
}
