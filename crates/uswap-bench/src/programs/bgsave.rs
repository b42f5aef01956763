//! `uswap bench redis`: the virtual-swap series' own case. A Redis server holding
//! several times the limit in 1 KiB values serves GETs with and without a BGSAVE running, under
//! kernel swap in a memory cgroup with the limit (the `zram` side: lz4 zram; the `disk` side:
//! zswap in front of a swap file; set up and torn down here) and under `uswap run --limit` in a
//! memory cgroup at the limit + `--uswap-allowance` (its footprint), in the same run,
//! interleaved per round. The dump of every run is reloaded natively and checked (DBSIZE,
//! sampled values). Ratios are uswap / kernel: above 1 is uswap ahead. The `_kernel` keys are
//! the zram side's.
//!
//! Locking: none (one thread drives the runs; each scenario has a GET-load thread and an RSS
//! sampler of its own).

use super::redis::{self, Plan, Throughput};
use super::{median, parse_compare, r3, setup_kernel, side_begin, side_end, uswap_stats_of, Side, SideCtx};
use crate::kernel::{self, RealOps};
use crate::usemem::size::parse_size;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use uswap_run::exit::{CliError, CliResult};

/// `uswap bench redis`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// What to compare uswap with: kernel (= zram,disk), zram (lz4 zram swap), disk (zswap in
    /// front of a swap file), or none; the kernel sides run in a memory cgroup at the limit and
    /// need root.
    #[arg(long, default_value = "kernel")]
    pub compare: String,
    /// The room the uswap side's memory cgroup gives above the limit: the processes' own fixed
    /// overhead (binaries, libraries, uswap's tables), which the limit does not cover.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub uswap_allowance: u64,
    /// One JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The memory limit of both sides.
    #[arg(long, value_parser = parse_size, default_value = "128M")]
    pub limit: u64,
    /// The values loaded, as a multiple of the limit.
    #[arg(long, default_value_t = 3.0)]
    pub data_ratio: f64,
    /// Bytes per value.
    #[arg(long, default_value_t = 1000)]
    pub value_len: usize,
    /// GET requests per measurement (random loaded keys, 8 connections).
    #[arg(long, default_value_t = 200_000)]
    pub requests: u64,
    /// Interleaved rounds (zram, disk, uswap each round); medians are reported.
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    /// Seconds one scenario may take before it is stopped (stacks printed).
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// uswap tiers (`uswap run`'s default).
    #[arg(long, default_value = uswap_pager::launch::DEFAULT_TIERS)]
    pub tiers: String,
    /// uswap folio size.
    #[arg(long, default_value = "64K")]
    pub folio: String,
}

fn need(name: &str) -> Result<PathBuf, CliError> {
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|f| f.is_file()))
        .ok_or_else(|| CliError::fail(format!("{name} is not installed (apt-get install redis-server redis-tools)")))
}

/// One side's runs.
#[derive(Default)]
struct SideRes {
    runs: Vec<Value>,
    ok: Vec<Throughput>,
}

impl SideRes {
    fn med(&self, f: impl Fn(&Throughput) -> f64) -> Option<f64> {
        median(&self.ok.iter().map(f).collect::<Vec<_>>()).map(r3)
    }
    /// The median of a figure some runs may lack.
    fn med_some(&self, f: impl Fn(&Throughput) -> Option<f64>) -> Option<f64> {
        median(&self.ok.iter().filter_map(f).collect::<Vec<_>>()).map(r3)
    }
}

/// Run the benchmark.
pub fn run(a: &Args) -> CliResult {
    let want = parse_compare(&a.compare).map_err(CliError::usage)?;
    if !(a.data_ratio > 0.0 && a.value_len > 0 && a.requests > 0 && a.runs > 0) {
        return Err(CliError::usage("--data-ratio, --value-len, --requests and --runs must be above 0"));
    }
    let plan = Plan {
        server: need("redis-server")?,
        benchmark: need("redis-benchmark")?,
        keys: ((a.limit as f64 * a.data_ratio) as u64 / a.value_len as u64).max(1000),
        value_len: a.value_len,
    };
    kernel::install_signal_handlers();
    let exe = std::env::current_exe().map_err(|e| CliError::fail(format!("cannot find my own executable: {e}")))?;
    let work = PathBuf::from(format!("/var/tmp/uswap-bench-redis-{}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| CliError::fail(format!("{}: {e}", work.display())))?;
    let mut k = setup_kernel(want, a.uswap_allowance);
    let mut sides = Vec::new();
    for (side, asked, why) in [(Side::Zram, want.zram, &k.zram_skipped), (Side::Disk, want.disk, &k.disk_skipped)] {
        match why {
            None => sides.push(side),
            Some(w) if asked => eprintln!("kernel {}: skipped: {w}", side.key()),
            Some(_) => {}
        }
    }
    if let Some(w) = &k.uswap_cgroup_skipped {
        eprintln!("uswap runs without a memory cgroup (no footprint measured): {w}");
    }
    sides.push(Side::Uswap);
    let mut res: Vec<SideRes> = sides.iter().map(|_| SideRes::default()).collect();
    let stats = work.join("uswap-stats.json");
    let mut fixed = Vec::new();
    for round in 1..=a.runs {
        for (si, &side) in sides.iter().enumerate() {
            if !a.json {
                eprintln!(
                    "round {round}/{}: {} ({} keys x {} B, limit {} MiB)",
                    a.runs,
                    side.key(),
                    plan.keys,
                    a.value_len,
                    a.limit >> 20
                );
            }
            let dir = work.join(format!("{}-{round}", side.key()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).map_err(|e| CliError::fail(format!("{}: {e}", dir.display())))?;
            let sr =
                side_begin(&mut k, side, a.limit).map_err(|e| CliError::fail(format!("{} side: {e}", side.key())))?;
            let procs = sr.as_ref().map(|sr| sr.cg.procs_file(k.guard.ops()));
            let sc = SideCtx {
                side,
                limit: a.limit,
                tiers: &a.tiers,
                folio: &a.folio,
                exe: &exe,
                stats: stats.clone(),
                procs,
            };
            let _ = std::fs::remove_file(&stats);
            let deadline = Instant::now() + Duration::from_secs(a.timeout);
            // Pages swapped in so far: the kernel's `pswpin` (the side's device is the
            // machine's only swap) plus, on the disk side, the pages loaded from zswap; or the
            // sum over the `uswap run` tree's processes.
            let swapins = |pid: i32| -> Option<u64> {
                match side {
                    Side::Uswap => {
                        let tree = uswap_run::live::tree_at(&uswap_run::rundir::run_dir().ok()?.join(pid.to_string()))?;
                        Some(tree.procs.iter().filter_map(|v| v["swapin_pages"].as_u64()).sum())
                    }
                    _ => {
                        let v = kernel::vmstat(&RealOps::default());
                        let zswap = if side == Side::Disk { v.get("zswpin").copied().unwrap_or(0) } else { 0 };
                        v.get("pswpin").map(|n| n + zswap)
                    }
                }
            };
            let (out, waited) =
                redis::throughput(&plan, &dir, &|argv| sc.command(argv), &swapins, a.requests, deadline);
            kernel::set_child(0);
            let mut rec = json!({ "side": side.key(), "round": round });
            let mut ooms = 0;
            if let Some(sr) = sr {
                let e = side_end(&mut k, sr);
                ooms = e.ooms;
                rec["cgroup_peak_bytes"] = json!(e.peak);
                rec["cgroup_limit_bytes"] = json!(e.limit);
                rec["oom_kills"] = json!(e.ooms);
                if side != Side::Uswap {
                    rec["swapped_out_bytes"] = json!(e.out_bytes);
                    rec["swapped_in_bytes"] = json!(e.in_bytes);
                }
                if side == Side::Disk {
                    rec["zswap_out_bytes"] = json!(e.zswap_out_bytes);
                    rec["zswap_in_bytes"] = json!(e.zswap_in_bytes);
                    rec["written_back_bytes"] = json!(e.written_back_bytes);
                }
                if side == Side::Uswap {
                    rec["footprint_peak_bytes"] = json!(e.peak);
                }
                if !e.errs.is_empty() {
                    return Err(CliError::fail(format!("{} side: {}", side.key(), e.errs.join("; "))));
                }
            }
            if side == Side::Uswap {
                if let Some(v) = std::fs::read(&stats).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok()) {
                    let f = v.pointer("/main/fixed_overhead_bytes").and_then(Value::as_u64);
                    rec["fixed_overhead_bytes"] = json!(f);
                    fixed.extend(f);
                    rec["processes"] = json!(1 + v["other_processes"].as_array().map_or(0, Vec::len));
                    let u = uswap_stats_of(&v);
                    rec["swapped_in_bytes"] = json!(u.as_ref().map(|u| u.swapped_in));
                    if let Some(u) = u {
                        let bound = a.limit + u.fixed_sum;
                        rec["fixed_overhead_sum_bytes"] = json!(u.fixed_sum);
                        rec["footprint_bound_bytes"] = json!(bound);
                        if let Some(p) = rec["footprint_peak_bytes"].as_u64() {
                            rec["footprint_within"] = json!(p as f64 <= bound as f64 * (1.0 + super::RSS_TARGET_SLACK));
                        }
                    }
                }
            }
            if let Some(w) = &waited {
                if let Some(st) = &w.stacks {
                    rec["stacks"] = json!(st);
                }
            }
            match out {
                // An OOM kill in the cgroup fails the run even when the scenario got through it.
                _ if ooms > 0 => {
                    rec["outcome"] = json!("oom");
                    rec["error"] = json!(format!(
                        "OOM-killed in its memory cgroup (limit {} MiB){}",
                        rec["cgroup_limit_bytes"].as_u64().unwrap_or(0) >> 20,
                        out.as_ref().err().map(|e| format!(": {e}")).unwrap_or_default()
                    ));
                }
                Ok(t) => {
                    rec["outcome"] = json!(if t.correct { "ok" } else { "wrong" });
                    rec["load_s"] = json!(r3(t.load_s));
                    rec["get_rps"] = json!(t.get_rps.round());
                    rec["bgsave_get_rps"] = json!(t.bgsave_get_rps.round());
                    rec["bgsave_s"] = json!(r3(t.bgsave_s));
                    rec["fork_ms"] = json!(r3(t.fork_ms));
                    rec["get_swapin_pages_per_get"] = json!(t.get_swapin_pages_per_get.map(r3));
                    rec["bgsave_swapin_pages"] = json!(t.bgsave_swapin_pages);
                    rec["tree_peak_pss_bytes"] = json!(t.tree_peak_pss);
                    rec["check"] = json!(t.detail);
                    if t.correct {
                        res[si].ok.push(t);
                    }
                }
                Err(e) => {
                    rec["outcome"] = json!(if e.starts_with("timeout") { "timeout" } else { "error" });
                    rec["error"] = json!(e);
                }
            }
            if !a.json {
                eprintln!("  {}", rec);
                if side == Side::Uswap && ooms > 0 {
                    eprintln!("  FAILED: OOM KILL IN USWAP'S MEMORY CGROUP");
                }
            }
            res[si].runs.push(rec);
            if kernel::interrupted() {
                return Err(CliError::fail("interrupted; the machine was restored"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    let of = |s: Side| sides.iter().position(|x| *x == s).map(|i| &res[i]);
    let empty = SideRes::default();
    let (zram, disk, usw) = (of(Side::Zram).unwrap_or(&empty), of(Side::Disk).unwrap_or(&empty), &res[res.len() - 1]);
    let ratio = |u: Option<f64>, k: Option<f64>| match (u, k) {
        (Some(u), Some(k)) if k > 0.0 => Some(r3(u / k)),
        _ => None,
    };
    let upeak = usw.ok.iter().map(|t| t.tree_peak_pss).max();
    let fixed = fixed.into_iter().max();
    let within = match (upeak, fixed) {
        (Some(p), Some(f)) => Some(p <= a.limit + f),
        _ => None,
    };
    let fp_runs: Vec<&Value> = usw.runs.iter().filter(|r| r["footprint_peak_bytes"].is_u64()).collect();
    let fp_top = fp_runs.iter().max_by_key(|r| r["footprint_peak_bytes"].as_u64());
    let fp_within: Vec<bool> = usw.runs.iter().filter_map(|r| r["footprint_within"].as_bool()).collect();
    let failures = res.iter().flat_map(|r| &r.runs).filter(|r| r["outcome"] != "ok").count();
    let mut doc = json!({
        "limit_bytes": a.limit,
        "keys": plan.keys,
        "value_len": a.value_len,
        "requests": a.requests,
        "runs": a.runs,
        "tiers": a.tiers,
        "folio": a.folio,
        "uswap_allowance_bytes": a.uswap_allowance,
        "sides": sides.iter().map(|s| s.key()).collect::<Vec<_>>(),
        "command": format!(
            "{} (under `uswap run --limit {}` in a memory cgroup at the limit + {}, and in a memory cgroup at the limit with lz4 zram, or zswap and a swap file)",
            plan.display(), a.limit, a.uswap_allowance
        ),
        "get_rps_uswap": usw.med(|t| t.get_rps),
        "bgsave_get_rps_uswap": usw.med(|t| t.bgsave_get_rps),
        "bgsave_seconds_uswap": usw.med(|t| t.bgsave_s),
        "fork_ms_uswap": usw.med(|t| t.fork_ms),
        "load_seconds_uswap": usw.med(|t| t.load_s),
        "get_swapin_pages_per_get_uswap": usw.med_some(|t| t.get_swapin_pages_per_get),
        "bgsave_swapin_pages_uswap": usw.med_some(|t| t.bgsave_swapin_pages.map(|n| n as f64)),
        "uswap_tree_peak_pss_bytes": upeak,
        "uswap_fixed_overhead_bytes": fixed,
        "uswap_tree_within_limit_plus_overhead": within,
        "footprint_peak_bytes": fp_top.map(|r| r["footprint_peak_bytes"].clone()),
        "footprint_bound_bytes": fp_top.map(|r| r["footprint_bound_bytes"].clone()),
        "footprint_within": (!fp_within.is_empty()).then(|| fp_within.iter().all(|&w| w)),
        "zram_skipped": k.zram_skipped,
        "disk_skipped": k.disk_skipped,
        "uswap_cgroup_skipped": k.uswap_cgroup_skipped,
        "failures": failures,
        "uswap_runs": usw.runs,
    });
    // The kernel sides' figures: `KEY_kernel` and the unsuffixed ratios are the zram side's,
    // `KEY_disk` and `*_ratio_disk` the disk side's.
    for (r, suffix) in [(zram, "kernel"), (disk, "disk")] {
        let ratio_suffix = if suffix == "kernel" { String::new() } else { format!("_{suffix}") };
        let add = [
            (format!("get_rps_{suffix}"), json!(r.med(|t| t.get_rps))),
            (format!("bgsave_get_rps_{suffix}"), json!(r.med(|t| t.bgsave_get_rps))),
            (format!("nobgsave_get_ratio{ratio_suffix}"), json!(ratio(usw.med(|t| t.get_rps), r.med(|t| t.get_rps)))),
            (
                format!("bgsave_get_ratio{ratio_suffix}"),
                json!(ratio(usw.med(|t| t.bgsave_get_rps), r.med(|t| t.bgsave_get_rps))),
            ),
            (format!("bgsave_seconds_{suffix}"), json!(r.med(|t| t.bgsave_s))),
            (format!("fork_ms_{suffix}"), json!(r.med(|t| t.fork_ms))),
            (format!("load_seconds_{suffix}"), json!(r.med(|t| t.load_s))),
            (format!("get_swapin_pages_per_get_{suffix}"), json!(r.med_some(|t| t.get_swapin_pages_per_get))),
            (format!("bgsave_swapin_pages_{suffix}"), json!(r.med_some(|t| t.bgsave_swapin_pages.map(|n| n as f64)))),
            (format!("{suffix}_tree_peak_pss_bytes"), json!(r.ok.iter().map(|t| t.tree_peak_pss).max())),
            (format!("{suffix}_runs"), json!(r.runs)),
        ];
        for (key, v) in add {
            doc[key] = v;
        }
    }
    let doc = uswap_run::report::with_header("redis", kernel::machine_facts(&RealOps::default()), doc);
    if a.json {
        println!("{doc:#}");
    } else {
        let f = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x}"));
        println!(
            "redis, {} keys x {} B, limit {} MiB, {} GETs per measurement",
            plan.keys,
            a.value_len,
            a.limit >> 20,
            a.requests
        );
        println!("{:<26} {:>10} {:>10} {:>10} {:>7} {:>7}", "", "zram", "disk", "uswap", "u/zram", "u/disk");
        for (label, key, ratio_key) in
            [("GET/s", "get_rps", "nobgsave_get_ratio"), ("GET/s during BGSAVE", "bgsave_get_rps", "bgsave_get_ratio")]
        {
            println!(
                "{:<26} {:>10} {:>10} {:>10} {:>7} {:>7}",
                label,
                f(&doc[format!("{key}_kernel")]),
                f(&doc[format!("{key}_disk")]),
                f(&doc[format!("{key}_uswap")]),
                f(&doc[ratio_key]),
                f(&doc[format!("{ratio_key}_disk")]),
            );
        }
        // Rows without a ratio.
        for (label, key) in [
            ("BGSAVE s", "bgsave_seconds"),
            ("fork ms (server)", "fork_ms"),
            ("pages swapped in per GET", "get_swapin_pages_per_get"),
            ("pages swapped in, BGSAVE", "bgsave_swapin_pages"),
        ] {
            println!(
                "{:<26} {:>10} {:>10} {:>10}",
                label,
                f(&doc[format!("{key}_kernel")]),
                f(&doc[format!("{key}_disk")]),
                f(&doc[format!("{key}_uswap")])
            );
        }
        println!(
            "uswap tree peak Pss {} (limit {} + fixed overhead {}); failures {failures}",
            upeak.map_or("-".into(), uswap::size::format),
            uswap::size::format(a.limit),
            fixed.map_or("-".into(), uswap::size::format)
        );
        let size = |v: &Value| v.as_u64().map_or("-".into(), uswap::size::format);
        println!(
            "uswap footprint (its cgroup's peak) {} against limit + fixed overheads summed {}: {}",
            size(&doc["footprint_peak_bytes"]),
            size(&doc["footprint_bound_bytes"]),
            match doc["footprint_within"].as_bool() {
                Some(true) => "within + 10%",
                Some(false) => "OVER + 10%",
                None => "-",
            }
        );
    }
    if failures > 0 {
        // Say which side failed: a kernel side's memory cgroup sometimes OOM-kills the server
        // at this limit, which is not uswap's failure; an OOM kill in uswap's cgroup is.
        let side = |runs: &[Value], name: &str| {
            let bad: Vec<&Value> = runs.iter().filter(|r| r["outcome"] != "ok").collect();
            let ooms = bad.iter().filter(|r| r["oom_kills"].as_u64().unwrap_or(0) > 0).count();
            let why =
                if ooms > 0 { format!(", {ooms} of them OOM-killed in the memory cgroup") } else { String::new() };
            format!("{} of {} {name} runs{why}", bad.len(), runs.len())
        };
        let each: Vec<String> = sides.iter().zip(&res).map(|(s, r)| side(&r.runs, s.key())).collect();
        return Err(CliError::fail(format!("runs failed: {} (see the runs in --json)", each.join("; "))));
    }
    Ok(())
}
