//! Statistics with a stable schema (docs/stats.md, [`SCHEMA_VERSION`]): a translation layer
//! from what the preload library writes per process (and the pager's `PagerStats` with the
//! engine's counters inside) to what the CLI prints, for `run --stats`, `demo --json` and the
//! human summaries; and the keys every `--json` document starts with ([`header`]).
//!
//! The input keys are read leniently (a missing key reads as 0 / absent), so a pager that adds
//! counters does not break the report; the output keys only change with the schema version.
//! Per-order arrays become objects keyed by folio size as the kernel names them in
//! `/sys/kernel/mm/transparent_hugepage/hugepages-64kB/stats` (`"4kB"`, `"8kB"`, ... `"2048kB"`);
//! tiers are named (`zpool:lz4`, `file:/var/tmp`); `u64::MAX` ("no limit") and null become
//! absent keys.
//!
//! Locking: none (pure functions over JSON values).

use crate::stats_read::u;
use serde_json::{json, Map, Value};
use uswap_pager::record::ProcRecord;
use uswap_pager::PagerStats;

/// Version of the printed schema; bumped when a key changes meaning or goes away.
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// Civil date and time (UTC) of now, ISO 8601 (`2026-11-23T09:41:07Z`).
pub fn now_utc() -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    civil_utc(t)
}

/// `secs` since the Unix epoch as an ISO 8601 UTC date and time.
fn civil_utc(secs: u64) -> String {
    let (days, secs) = ((secs / 86400) as i64, secs % 86400);
    // Howard Hinnant's days_from_civil, inverted.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

/// The keys every `--json` document of `uswap bench NAME` and `uswap demo` starts with:
/// `schema_version`, `uswap_version`, `bench` (the command's name), `date` (UTC, when the
/// document was made) and `machine` (the benchmarks' description of the machine, taken before
/// the command changed anything). `doc`'s own keys are kept after them.
pub fn with_header(bench: &str, machine: Value, doc: Value) -> Value {
    let mut m = header(machine);
    m.insert("bench".into(), json!(bench));
    if let Value::Object(d) = doc {
        for (k, v) in d {
            m.insert(k, v);
        }
    }
    Value::Object(m)
}

/// `schema_version`, `uswap_version`, `date` and `machine` (see [`with_header`]).
pub fn header(machine: Value) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("schema_version".into(), json!(SCHEMA_VERSION));
    m.insert("uswap_version".into(), json!(env!("CARGO_PKG_VERSION")));
    m.insert("date".into(), json!(now_utc()));
    m.insert("machine".into(), machine);
    m
}

/// CPU time of this process so far (user, system), in seconds, three decimals.
pub fn self_cpu_s() -> (f64, f64) {
    // SAFETY: zeroed rusage is valid storage for getrusage to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage with RUSAGE_SELF and a valid pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let tv = |t: libc::timeval| ((t.tv_sec as f64 + t.tv_usec as f64 / 1e6) * 1000.0).round() / 1000.0;
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

/// A number, or absent when "unlimited" (u64::MAX).
fn limited(n: u64) -> Option<u64> {
    (n != u64::MAX).then_some(n)
}

fn insert_opt(m: &mut Map<String, Value>, k: &str, v: Option<u64>) {
    if let Some(v) = v {
        m.insert(k.into(), json!(v));
    }
}

/// The kernel's name of an order's folio size: 0 -> "4kB", 4 -> "64kB", 9 -> "2048kB".
pub(crate) fn order_key(order: usize) -> String {
    format!("{}kB", 4u64 << order)
}

/// A per-order array as an object keyed by folio size (all orders, zeros included, so the keys
/// are always the same).
pub(crate) fn per_order(a: &[u64]) -> Value {
    Value::Object(a.iter().enumerate().map(|(o, &n)| (order_key(o), json!(n))).collect())
}

/// Pages in a per-order array (folios × pages per folio).
fn pages_of(a: &[u64]) -> u64 {
    a.iter().enumerate().map(|(o, &n)| n << o).sum()
}

/// Names of the tiers a `--tiers` string configures, in order (the engine's tier list has no
/// names; it has one entry per backend in this order).
pub(crate) fn tier_names(tiers: &str) -> Vec<String> {
    use uswap::config::{TierSpec, TiersConfig};
    use uswap::tier::file::FileTarget;
    use uswap::tier::zpool::Compressor;
    let spec = if tiers == "default" { uswap_pager::launch::DEFAULT_TIERS } else { tiers };
    let Ok(c) = TiersConfig::parse(spec) else { return Vec::new() };
    c.tiers
        .iter()
        .map(|t| match t {
            TierSpec::Pool(p) => match p.compressor {
                Compressor::Lz4 => "zpool:lz4".to_string(),
                Compressor::Zstd { level } => format!("zpool:zstd-{level}"),
            },
            TierSpec::File(f) => match &f.target {
                FileTarget::TempIn(d) | FileTarget::Path(d) => format!("file:{}", d.display()),
            },
            TierSpec::Memory(_) => "mem".to_string(),
        })
        .collect()
}

/// The pager's statistics (the record's `pager` section, the store's inside under `engine`) in
/// the schema. `tiers` is the `--tiers` string, to name the tiers.
pub fn pager(p: &PagerStats, tiers: &str) -> Value {
    let e = &p.engine;
    let names = tier_names(tiers);
    let mut tier_map = Map::new();
    let (mut pool_orig, mut pool_used) = (0u64, 0u64);
    // The tiers in RAM and what each holds there: the parts of `memory.pool_bytes` (none when
    // the store is not the engine, which has no tiers).
    let mut pool_parts: Option<Map<String, Value>> = (!e.tiers.is_empty()).then(Map::new);
    for (i, t) in e.tiers.iter().enumerate() {
        let name = names.get(i).cloned().unwrap_or_else(|| format!("tier{i}"));
        let (stored, used) = (t.usage.stored_pages, t.usage.used_bytes);
        if name.starts_with("zpool") {
            pool_orig += stored * 4096;
            pool_used += used;
        }
        if name.starts_with("zpool") || name == "mem" {
            if let Some(parts) = pool_parts.as_mut() {
                parts.insert(name.clone(), json!(used));
            }
        }
        let mut m = Map::new();
        m.insert("index".into(), json!(i));
        m.insert("stored_pages".into(), json!(stored));
        m.insert("stored_bytes".into(), json!(stored * 4096));
        m.insert("used_bytes".into(), json!(used));
        insert_opt(&mut m, "limit_bytes", limited(t.usage.limit_bytes).filter(|&l| l > 0));
        // A swap file shared with fork relatives: how many processes, and what is frozen
        // for them (design.md, "One swap file for a fork tree").
        if t.usage.sharers > 1 || t.usage.frozen_bytes > 0 {
            m.insert("sharers".into(), json!(t.usage.sharers));
            m.insert("frozen_bytes".into(), json!(t.usage.frozen_bytes));
        }
        if used > 0 && name.starts_with("zpool") {
            m.insert("compression_ratio".into(), json!(ratio(stored * 4096, used)));
        }
        // Its store failures by kind (`uswap::fails`), when it had any.
        if t.failures.total() > 0 {
            m.insert("failures".into(), json!(t.failures));
        }
        tier_map.insert(name, Value::Object(m));
    }
    let (resident, cache, pool) = (p.resident_bytes, p.cache_bytes, p.pool_bytes);
    let mut memory = Map::new();
    memory.insert("charged_bytes".into(), json!(p.charged_bytes.max(resident + cache + pool)));
    memory.insert("resident_bytes".into(), json!(resident));
    memory.insert("swap_cache_bytes".into(), json!(cache));
    memory.insert("pool_bytes".into(), json!(pool));
    // The engine's pool figure is the RAM its tiers hold: each RAM tier's bytes (compressed
    // objects with the fragmentation of their pages) plus emptied memory kept for reuse.
    if let Some(mut parts) = pool_parts {
        let in_tiers: u64 = parts.values().filter_map(Value::as_u64).sum();
        parts.insert("spare".into(), json!(pool.saturating_sub(in_tiers)));
        memory.insert("pool_parts".into(), Value::Object(parts));
    }
    insert_opt(&mut memory, "pool_max_bytes", e.group.and_then(|g| limited(g.pool_max)));
    insert_opt(&mut memory, "limit_bytes", limited(p.limit_bytes));
    insert_opt(&mut memory, "limit_in_force_bytes", limited(p.limit_in_force_bytes));
    insert_opt(&mut memory, "outside_bytes", limited(p.outside_bytes));
    memory.insert("pool_capped".into(), json!(p.pool_capped));
    let mut faults = Map::new();
    for (k, n) in [
        ("total", p.faults),
        ("zero_fill", p.fault_zero),
        ("swapin", p.fault_swapin),
        ("swap_cache", p.fault_cache),
        ("write_protect", p.fault_wp),
        ("spurious", p.fault_spurious),
        ("waits", p.fault_waits),
        ("throttled", p.fault_throttled),
        ("alloc_throttled", p.alloc_throttled),
        ("cpu_moves", p.fault_cpu_moves),
        ("cpu_pins", p.fault_cpu_pins),
        ("cpu_pin_backoffs", p.fault_cpu_pin_backoffs),
        ("held_ms", p.fault_held_ns / 1_000_000),
    ] {
        faults.insert(k.into(), json!(n));
    }
    insert_opt(&mut faults, "latency_p50_ns", p.fault_p50_ns);
    insert_opt(&mut faults, "latency_p99_ns", p.fault_p99_ns);
    let c = &e.counters;
    json!({
        "memory": memory,
        "faults": faults,
        "swap": {
            "pswpout": p.evicted_pages,
            "stored_pages": e.stored_pages,
            // Pages swapped in: every swap-in is counted once in `swpin`, at the order it was
            // made; a fallback (`swpin_fallback`) is a large folio that was not, and its pages
            // are in `swpin` at order 0 (adding both counted them twice).
            "pswpin": pages_of(&p.swpin),
            "swpout": per_order(&p.swpout),
            "swpout_fallback": per_order(&p.swpout_fallback),
            "swpin": per_order(&p.swpin),
            "swpin_fallback": per_order(&p.swpin_fallback),
            "swpout_zero": c.swpout_zero,
            "swpin_zero": c.swpin_zero,
            "zswpout": c.zswpout,
            "zswpin": c.zswpin,
            "zswpwb": c.zswpwb,
            "zswpwb_proactive": c.zswpwb_proactive,
            "swp_promote": c.swp_promote,
            "swp_promote_reject": c.swp_promote_reject,
            "swap_ra": p.swap_ra,
            "swap_ra_hit": p.swap_ra_hit,
            "swpout_tier_fallback": c.swpout_tier_fallback,
            "zswpout_over_cap": c.zswpout_over_cap,
            "swpout_rejected": c.swpout_rejected,
        },
        "compression": {
            "stored_bytes": pool_orig,
            "pool_used_bytes": pool_used,
            "ratio": ratio(pool_orig, pool_used),
        },
        "tiers": tier_map,
        "reclaim": {
            "batches": p.reclaim_batches,
            "failed": p.reclaim_fail,
            "demoted_pages": p.demoted_pages,
            "workingset_activate": p.workingset_activate,
            "pgdeactivate": p.pgdeactivate,
            "evicted_folios": p.evicted_folios,
            "clean_kept": p.clean_kept,
            "clean_evicted": p.clean_evicted,
            "store_errors": p.store_errors,
            "limit_breaks": p.limit_breaks,
            "handed_back": p.reclaim_handed_back,
            "cow_skipped": p.reclaim_cow_skipped,
            "pinned_skipped": p.reclaim_pinned_skipped,
            "write_protect_calls": p.wp_calls,
            "madvise_calls": p.madvise_calls,
        },
        // Background recompression of idle pool objects (zram's names where it has them).
        "recompression": {
            "passes": p.recompress_passes,
            "deferred": p.recompress_deferred,
            "num_recompressed": p.num_recompressed,
            "recompressed_pages": p.recompressed_pages,
            "kept": p.recompress_kept,
            "saved_bytes": p.recompress_saved_bytes,
            "compacted_bytes": p.recompress_compacted_bytes,
            "cpu_ns": p.recompress_cpu_ns,
        },
    })
}

/// Original bytes per stored byte, two decimals; null when nothing is stored.
fn ratio(orig: u64, used: u64) -> Value {
    if orig == 0 || used == 0 {
        Value::Null
    } else {
        json!((orig as f64 / used as f64 * 100.0).round() / 100.0)
    }
}

/// One process of `uswap run`, from the record its preload library wrote.
pub fn process(r: &ProcRecord, tiers: &str) -> Value {
    let mut m = Map::new();
    m.insert("pid".into(), json!(r.pid));
    m.insert("ppid".into(), json!(r.ppid));
    m.insert("argv".into(), json!(r.argv));
    m.insert("peak_rss_bytes".into(), json!(r.vm_hwm_bytes));
    // False: the process ended without exit(3) (`_exit`, a signal), and these are its last
    // snapshot's figures (at most USWAP_STATS_INTERVAL_MS old).
    m.insert("stats_final".into(), json!(r.is_final));
    // True: the process never grew to its start threshold (`start_bytes`) and ran with no
    // pager; `anon_peak_bytes` is the most anonymous memory it was seen with.
    m.insert("dormant".into(), json!(r.dormant));
    if r.dormant {
        m.insert("start_bytes".into(), json!(r.start_bytes));
        m.insert("anon_peak_bytes".into(), json!(r.anon_peak_bytes));
    }
    // The fixed overhead: the RSS when the pager had started (binary, libraries, the pager's
    // reservations) plus what the library's own heap grew by since (the engine's tables).
    m.insert("fixed_overhead_bytes".into(), json!(r.fixed_overhead_bytes.max(r.rss_at_start_bytes)));
    m.insert("rss_at_start_bytes".into(), json!(r.rss_at_start_bytes));
    m.insert("file_rss_growth_bytes".into(), json!(r.file_rss_growth_bytes));
    // Shared memory (not in the fixed overhead: the pager cannot swap it).
    m.insert("shmem_rss_growth_bytes".into(), json!(r.shmem_rss_growth_bytes));
    m.insert("engine_meta_peak_bytes".into(), json!(r.engine_meta_peak_bytes));
    m.insert("forks".into(), json!(r.forks));
    // Of the forks, per swap file: children sharing it (nothing copied) and children that got
    // a copy (the parent could not share).
    m.insert("forks_file_shared".into(), json!(r.forks_file_shared));
    m.insert("forks_file_copied".into(), json!(r.forks_file_copied));
    // Forks during whose hold the event thread had to work while the forking thread could
    // still reach `clone` (uswap_pager's `forkhold`).
    let (hold_forced, child_faults) = r.pager.as_ref().map_or((0, 0), |p| (p.fork_hold_forced, p.fork_child_faults));
    m.insert("forks_hold_forced".into(), json!(hold_forced));
    m.insert("fork_child_faults".into(), json!(child_faults));
    // What the library said on stderr while the program ran about the limit not holding.
    if let Some(said) = &r.said {
        m.insert("said".into(), json!(said));
    }
    if let Some(p) = &r.pager {
        if let Value::Object(pm) = pager(p, tiers) {
            m.extend(pm);
        }
    }
    m.insert(
        "preload".into(),
        json!({
            "internal_heap_bytes": r.internal_heap_bytes,
            "internal_heap_growth_bytes": r.internal_heap_growth_bytes,
            "adopt_calls": r.adopt_calls,
            "adopt_bytes": r.adopt_bytes,
            "adopt_errors": r.adopt_errors,
            "adopt_deferred": r.adopt_deferred,
            "mmap_small": r.mmap_small,
            "reservations": r.reservations,
        }),
    );
    // The thrashing check (preload/thrash.rs), passed through as written.
    if let Some(t) = &r.thrash {
        m.insert("thrash".into(), json!(t));
    }
    // The tree's shared limit as this process last saw it (uswap_pager::tree), as written.
    if let Some(t) = &r.tree {
        m.insert("tree".into(), json!(t));
    }
    // Anonymous memory the pager does not manage (thread stacks, shared memory, what it could
    // not adopt), as the reconciler measured it.
    if let Some(un) = &r.unmanaged {
        m.insert("unmanaged".into(), json!(un));
    }
    Value::Object(m)
}

/// What `uswap run` measured, for the report.
pub(crate) struct Run<'a> {
    /// The program and its arguments.
    pub command: &'a [String],
    /// Its pid.
    pub pid: i32,
    /// Exit code uswap exits with.
    pub exit_code: u8,
    /// The signal that killed it.
    pub signal: Option<i32>,
    /// Wall-clock time from start to exit.
    pub elapsed_s: f64,
    /// CPU time of the program and everything it waited for (user, system).
    pub cpu_s: (f64, f64),
    /// Limit, folio, tiers as given.
    pub limit: u64,
    /// Folio size.
    pub folio: u64,
    /// `--tiers`.
    pub tiers: &'a str,
    /// The program's peak RSS (wait4).
    pub peak_rss: u64,
    /// The tree's memory, sampled from outside (`uswap run`'s sampler).
    pub tree_peak: TreePeak,
    /// The processes of the tree found running without the pager.
    pub unmanaged: &'a [crate::unmanaged::Unmanaged],
    /// The largest shared memory the tree held (not swappable by uswap, counted against the
    /// limit: see `unmanaged::tree_shmem`).
    pub shmem_peak: u64,
}

/// The largest anonymous memory of the whole tree seen while it ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TreePeak {
    /// The largest sum of `Pss_Anon` over the processes under the pager.
    pub anon_pss_bytes: u64,
    /// How many processes that sum was over.
    pub processes: u64,
    /// Samples taken.
    pub samples: u64,
    /// The sampling period, milliseconds.
    pub every_ms: u64,
}

/// The anonymous memory the processes of a `run --stats` document hold that the limit does not
/// cover, at the tree's peak (`tree_peak`): each process's anonymous RSS when its pager had
/// started, its library heap's growth and the engine's tables (its part of
/// `fixed_overhead_bytes` that is anonymous memory), for the main process and the largest of
/// the others, as many as were running at the peak (processes that ran one after another do
/// not hold their overhead at once).
pub(crate) fn tree_anon_overhead(doc: &Value) -> u64 {
    let own = |p: &Value| {
        u(p, "/unmanaged/anon_at_start_bytes")
            + u(p, "/preload/internal_heap_growth_bytes")
            + u(p, "/engine_meta_peak_bytes")
    };
    let main = doc.get("main").filter(|m| !m.is_null());
    let mut others: Vec<u64> = doc["other_processes"].as_array().into_iter().flatten().map(own).collect();
    others.sort_unstable_by(|a, b| b.cmp(a));
    let at_peak = u(doc, "/tree_peak/processes").max(1) as usize;
    let others_at_peak = at_peak - usize::from(main.is_some()).min(at_peak);
    main.map_or(0, own) + others.iter().take(others_at_peak).sum::<u64>()
}

/// The whole `run --stats` document. `procs` are the preload's per-process files.
pub(crate) fn run_report(r: &Run, procs: &[ProcRecord]) -> Value {
    let main = procs.iter().find(|v| v.pid == r.pid).map(|v| process(v, r.tiers));
    let others: Vec<Value> = procs.iter().filter(|v| v.pid != r.pid).map(|v| process(v, r.tiers)).collect();
    json!({
        "schema_version": SCHEMA_VERSION,
        "uswap_version": env!("CARGO_PKG_VERSION"),
        "command": r.command,
        "pid": r.pid,
        "exit_code": r.exit_code,
        "signal": r.signal,
        "elapsed_s": (r.elapsed_s * 1000.0).round() / 1000.0,
        "cpu_user_s": (r.cpu_s.0 * 1000.0).round() / 1000.0,
        "cpu_system_s": (r.cpu_s.1 * 1000.0).round() / 1000.0,
        "limit_bytes": r.limit,
        "folio_bytes": r.folio,
        "tiers": r.tiers,
        "peak_rss_bytes": r.peak_rss,
        "tree_peak": {
            "anon_pss_bytes": r.tree_peak.anon_pss_bytes,
            "processes": r.tree_peak.processes,
            "samples": r.tree_peak.samples,
            "every_ms": r.tree_peak.every_ms,
            "shmem_bytes": r.shmem_peak,
        },
        "main": main,
        "other_processes": others,
        "unmanaged_processes": r.unmanaged.iter().map(crate::unmanaged::Unmanaged::to_json).collect::<Vec<_>>(),
    })
}

/// The kinds of store failure a tier's `failures` counts (`uswap::fails::FailKind::name`).
pub(crate) const FAIL_KINDS: [&str; 4] = ["nospace", "readonly", "io", "full"];

/// What a kind of store failure means, for people.
fn fail_text(kind: &str, errno: i64) -> String {
    let os =
        || if errno > 0 { format!(": {}", std::io::Error::from_raw_os_error(errno as i32)) } else { String::new() };
    match kind {
        "nospace" => format!("no space left on its filesystem{}", os()),
        "readonly" => format!("its file could not be written{}", os()),
        "io" => format!("I/O errors{}", os()),
        _ => "the swap file was full".to_string(),
    }
}

/// The store's failures in a process's report, one phrase per tier that failed ("file:/x:
/// 12 failed stores, no space left on its filesystem: ..."); empty when none failed.
pub(crate) fn store_failures(p: &Value) -> Vec<String> {
    let Some(Value::Object(ts)) = p.get("tiers") else { return Vec::new() };
    ts.iter()
        .filter_map(|(name, t)| {
            let f = t.get("failures")?;
            let n: u64 = FAIL_KINDS.iter().map(|k| u(f, &format!("/{k}"))).sum();
            let worst = FAIL_KINDS.iter().max_by_key(|k| u(f, &format!("/{k}")))?;
            (n > 0)
                .then(|| format!("{name}: {n} failed store(s), {}", fail_text(worst, f["errno"].as_i64().unwrap_or(0))))
        })
        .collect()
}

/// Why the peak went over limit + fixed overhead, from a process's report: the store's
/// failures first (a tier that failed, pages no tier took), then the tier list and reclaim.
pub(crate) fn why_over(p: &Value, limit: u64) -> String {
    let pool = u(p, "/memory/pool_bytes");
    let capped = p.pointer("/memory/pool_capped").and_then(Value::as_bool).unwrap_or(false);
    let failed = u(p, "/reclaim/failed");
    let f = uswap::size::format;
    let failures = store_failures(p);
    let rejected = u(p, "/swap/swpout_rejected");
    let breaks = u(p, "/reclaim/limit_breaks");
    let then = if breaks > 0 {
        format!("; faults waited for room, then {breaks} were mapped over the limit")
    } else {
        String::new()
    };
    let no_tiers = p.get("tiers").and_then(Value::as_object).is_none_or(|t| t.is_empty());
    if !failures.is_empty() {
        format!("the store failed ({}), and what no other tier took stayed in memory{then}", failures.join("; "))
    } else if rejected > 0 && no_tiers {
        format!(
            "no tier stores pages (--tiers zero keeps only zero pages out of memory): {} stayed in memory{then}",
            f(rejected * 4096)
        )
    } else if rejected > 0 {
        format!(
            "{} of pages did not compress and no tier outside RAM takes them, so they stayed in memory{then} (add a \
             file tier, e.g. --tiers zero,lz4,file:/var/tmp)",
            f(rejected * 4096)
        )
    } else if !capped && (pool > limit / 2 || p.pointer("/said/rejected") == Some(&json!(true))) {
        format!(
            "every tier is in RAM and the compressed pool held data that did not compress below the limit (it \
             holds {} at the end): the limit holds only while the data compresses below it (add a file tier, e.g. \
             --tiers zero,lz4,file:/var/tmp)",
            f(pool)
        )
    } else if failed > 0 {
        format!("reclaim could not free memory {failed} time(s) (the store was full or nothing could be evicted)")
    } else {
        format!(
            "while the pool and swap cache fill the limit, reclaim keeps 1/8 of it ({}) resident, and the engine's \
             tables add a few MiB",
            f(limit / 8)
        )
    }
}

/// The human lines for one process's pager statistics (run's summary and demo's table).
pub fn human_lines(p: &Value) -> Vec<String> {
    let f = uswap::size::format;
    let mut v = vec![format!(
        "swapped out {} ({} folios), swapped in {}; {} faults ({} swap-in, {} zero-fill)",
        f(u(p, "/swap/pswpout") * 4096),
        u(p, "/reclaim/evicted_folios"),
        f(u(p, "/swap/pswpin") * 4096),
        u(p, "/faults/total"),
        u(p, "/faults/swapin"),
        u(p, "/faults/zero_fill"),
    )];
    let ratio = p.pointer("/compression/ratio").and_then(Value::as_f64);
    let spare = u(p, "/memory/pool_parts/spare");
    v.push(format!(
        "memory: resident {}, swap cache {}, compressed pool {}{}{}",
        f(u(p, "/memory/resident_bytes")),
        f(u(p, "/memory/swap_cache_bytes")),
        f(u(p, "/memory/pool_bytes")),
        if spare > 0 { format!(" ({} of it spare, kept for reuse)", f(spare)) } else { String::new() },
        match ratio {
            Some(r) => format!(" (compression ratio {r:.2}: {} stored)", f(u(p, "/compression/stored_bytes"))),
            None => String::new(),
        }
    ));
    if let Some(Value::Object(ts)) = p.get("tiers") {
        let parts: Vec<String> = ts
            .iter()
            .filter(|(_, t)| u(t, "/stored_pages") > 0)
            .map(|(n, t)| {
                let shared = match t.get("sharers").and_then(Value::as_u64) {
                    Some(s) => format!(" (shared by {s} processes, {} frozen)", f(u(t, "/frozen_bytes"))),
                    None => String::new(),
                };
                format!("{n} {} in {}{shared}", f(u(t, "/stored_bytes")), f(u(t, "/used_bytes")))
            })
            .collect();
        if !parts.is_empty() {
            v.push(format!("tiers: {}", parts.join(", ")));
        }
    }
    let failures = store_failures(p);
    let (over_cap, rejected) = (u(p, "/swap/zswpout_over_cap"), u(p, "/swap/swpout_rejected"));
    if !failures.is_empty() || rejected > 0 {
        let mut line =
            format!("store: {}", if failures.is_empty() { "no tier failed".into() } else { failures.join("; ") });
        if over_cap > 0 {
            line += &format!("; {} went to the compressed pool past its share", f(over_cap * 4096));
        }
        if rejected > 0 {
            line += &format!("; {} of evictions no tier took (undone)", f(rejected * 4096));
        }
        let breaks = u(p, "/reclaim/limit_breaks");
        if breaks > 0 {
            line += &format!("; {breaks} fault(s) mapped over the limit after waiting for room");
        }
        v.push(line);
    }
    v
}

#[cfg(test)]
mod tests {
    /// The overhead allowed at the tree's peak counts as many processes as ran then: the main
    /// one and the largest others, not every process that ever ran.
    #[test]
    fn the_trees_overhead_counts_the_processes_at_its_peak() {
        let p = |at_start: u64, heap: u64, meta: u64| {
            serde_json::json!({"unmanaged": {"anon_at_start_bytes": at_start},
                               "preload": {"internal_heap_growth_bytes": heap}, "engine_meta_peak_bytes": meta})
        };
        let others: Vec<Value> = (1..=10).map(|i| p(i, 0, 0)).collect();
        let doc = |n: u64| serde_json::json!({"main": p(100, 20, 3), "other_processes": others, "tree_peak": {"processes": n}});
        assert_eq!(super::tree_anon_overhead(&doc(1)), 123);
        assert_eq!(super::tree_anon_overhead(&doc(3)), 123 + 10 + 9);
        assert_eq!(super::tree_anon_overhead(&doc(50)), 123 + 55);
        let no_main = serde_json::json!({"main": null, "other_processes": others, "tree_peak": {"processes": 2}});
        assert_eq!(super::tree_anon_overhead(&no_main), 10 + 9);
    }

    use super::*;

    /// A record from its JSON, as `stats_read::read_procs` reads it.
    fn rec(v: Value) -> ProcRecord {
        serde_json::from_value(v).expect("a record")
    }

    fn sample() -> Value {
        json!({
            "pid": 7, "ppid": 1, "argv": ["a"], "vm_hwm_bytes": 100 << 20, "rss_at_start_bytes": 10 << 20,
            "pager": {
                "faults": 10, "fault_zero": 4, "fault_swapin": 6, "evicted_pages": 32, "evicted_folios": 2,
                "swpout": [0, 0, 0, 0, 2, 0, 0, 0, 0, 0], "swpin": [3, 0, 0, 0, 1, 0, 0, 0, 0, 0],
                "swpin_fallback": [0, 0, 0, 0, 1, 0, 0, 0, 0, 0], "resident_bytes": 1 << 20, "cache_bytes": 0, "pool_bytes": 8192 + 4096,
                "charged_bytes": (1 << 20) + 8192 + 4096, "limit_bytes": 64 << 20, "pool_capped": true,
                "fault_p50_ns": null,
                "engine": {
                    "group": { "pool_max": 8388608u64, "swap_max": u64::MAX },
                    "tiers": [
                        { "stored_pages": 8, "used_bytes": 8192, "limit_bytes": 1u64 << 30 },
                        { "stored_pages": 0, "used_bytes": 0, "limit_bytes": 8u64 << 30 }
                    ]
                }
            }
        })
    }

    #[test]
    fn translates_to_the_schema() {
        let p = process(&rec(sample()), "zero,lz4,file:/var/tmp");
        assert_eq!(p["peak_rss_bytes"], 100 << 20);
        assert_eq!(p["swap"]["swpout"]["64kB"], 2);
        assert_eq!(p["swap"]["swpout"]["4kB"], 0);
        assert_eq!(p["swap"]["swpout"]["2048kB"], 0);
        assert_eq!(p["swap"]["swpin"]["4kB"], 3);
        // A fallback's pages are among the order-0 swap-ins, not counted again.
        assert_eq!(p["swap"]["pswpin"], 3 + 16);
        assert_eq!(p["swap"]["swpin_fallback"]["64kB"], 1);
        assert_eq!(p["tiers"]["zpool:lz4"]["stored_pages"], 8);
        assert_eq!(p["tiers"]["zpool:lz4"]["compression_ratio"], 4.0);
        assert!(p["tiers"]["file:/var/tmp"].is_object());
        assert_eq!(p["compression"]["ratio"], 4.0);
        assert_eq!(p["memory"]["pool_max_bytes"], 8388608);
        // One pool figure, and its parts add up to it.
        assert_eq!(p["memory"]["pool_bytes"], 8192 + 4096);
        assert_eq!(p["memory"]["pool_parts"], json!({ "zpool:lz4": 8192, "spare": 4096 }));
        // Null latency and "unlimited" are absent, never null or 18446744073709551615.
        assert!(p["faults"].get("latency_p50_ns").is_none());
        assert!(!p.to_string().contains("18446744073709551615"));
        assert!(!p.to_string().contains("null"));
        let lines = human_lines(&p).join("\n");
        assert!(lines.contains("compression ratio 4.00"), "{lines}");
        assert!(lines.contains("compressed pool 12.0 KiB (4.00 KiB of it spare"), "{lines}");
        assert!(lines.contains("zpool:lz4"), "{lines}");
    }

    #[test]
    fn run_documents_have_a_version_and_times() {
        let cmd = vec!["a".to_string()];
        let r = Run {
            command: &cmd,
            pid: 7,
            exit_code: 0,
            signal: None,
            elapsed_s: 1.23456,
            cpu_s: (0.5, 0.25),
            limit: 64 << 20,
            folio: 65536,
            tiers: "zero,lz4",
            peak_rss: 1,
            tree_peak: TreePeak::default(),
            unmanaged: &[],
            shmem_peak: 0,
        };
        let d = run_report(&r, &[rec(sample()), rec(json!({"pid": 8, "argv": ["b"]}))]);
        assert_eq!(d["schema_version"], SCHEMA_VERSION);
        assert_eq!(d["elapsed_s"], 1.235);
        assert_eq!(d["cpu_user_s"], 0.5);
        assert_eq!(d["main"]["pid"], 7);
        assert!(d["main"]["memory"]["pool_parts"].is_object());
        assert_eq!(d["other_processes"][0]["pid"], 8);
        assert_eq!(d["other_processes"][0]["peak_rss_bytes"], 0);
    }

    #[test]
    fn bench_documents_start_with_the_header() {
        assert_eq!(civil_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(civil_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(civil_utc(1_795_434_067), "2026-11-23T11:41:07Z");
        let d = with_header("table", json!({ "cpus": 2 }), json!({ "slots": 1024 }));
        assert_eq!(d["schema_version"], SCHEMA_VERSION);
        assert_eq!(d["uswap_version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(d["bench"], "table");
        assert_eq!(d["machine"]["cpus"], 2);
        assert_eq!(d["slots"], 1024);
        let date = d["date"].as_str().unwrap();
        assert!(date.len() == 20 && date.starts_with("20") && date.ends_with('Z'), "{date}");
    }

    #[test]
    fn says_why_the_peak_went_over() {
        let mut p = process(&rec(sample()), "zero,lz4");
        assert!(why_over(&p, 64 << 20).contains("1/8"));
        p["memory"]["pool_capped"] = json!(false);
        p["memory"]["pool_bytes"] = json!(40 << 20);
        assert!(why_over(&p, 64 << 20).contains("every tier is in RAM"));
        // The pool emptied by the end, but the library said it held the data over the limit.
        let mut early = p.clone();
        early["memory"]["pool_bytes"] = json!(1 << 20);
        assert!(why_over(&early, 64 << 20).contains("1/8"));
        early["said"] = json!({"rejected": true});
        assert!(why_over(&early, 64 << 20).contains("every tier is in RAM"), "{}", why_over(&early, 64 << 20));
        // Data that does not compress, RAM-only tiers: the pages no tier took.
        p["swap"]["swpout_rejected"] = json!(2560);
        let w = why_over(&p, 64 << 20);
        assert!(w.contains("10.0 MiB of pages did not compress") && w.contains("file tier"), "{w}");
        // --tiers zero: no tier at all.
        let mut z = p.clone();
        z["tiers"] = json!({});
        assert!(why_over(&z, 64 << 20).contains("--tiers zero"), "{}", why_over(&z, 64 << 20));
        // A tier that failed comes first, with its error and what the faults did.
        let mut raw = sample();
        raw["pager"]["engine"]["tiers"][1]["failures"] =
            json!({"nospace": 5663, "readonly": 0, "io": 0, "full": 0, "errno": libc::ENOSPC});
        raw["pager"]["limit_breaks"] = json!(40);
        raw["pager"]["engine"]["swpout_rejected"] = json!(100);
        let q = process(&rec(raw), "zero,lz4,file:/mnt/small");
        let w = why_over(&q, 64 << 20);
        assert!(w.contains("file:/mnt/small: 5663 failed store(s), no space left"), "{w}");
        assert!(w.contains("No space left on device") && w.contains("40 were mapped over the limit"), "{w}");
        let lines = human_lines(&q).join("\n");
        assert!(lines.contains("store: file:/mnt/small: 5663") && lines.contains("400 KiB of evictions"), "{lines}");
        // No failure: not said.
        assert!(!human_lines(&process(&rec(sample()), "zero,lz4,file:/var/tmp")).join("\n").contains("store:"));
    }
}
