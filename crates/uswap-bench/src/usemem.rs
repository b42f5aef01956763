//! `uswap bench usemem`: the side-by-side benchmark against the kernel, and `uswap demo`.
//!
//! One usemem-like workload ([`workload`]) runs, in child processes started from this same
//! executable, over (a) a uswap pager region under `--limit`, in a memory cgroup of its own at
//! the limit + `--uswap-allowance` with no kernel swap (its peak is uswap's footprint), (b)
//! plain memory in a memory cgroup with the same limit and the kernel's swap on zram (lz4), and
//! (c) plain memory in the cgroup with zswap in front of a swap file on /var/tmp: the kernel's
//! swap to disk, the `disk` baseline of `bench programs` (its keys say `kernel_zswap`, its
//! ratios also `_disk`). The kernel side is set up and torn down by [`crate::kernel`] (root
//! only; skipped with a reason otherwise). Runs are interleaved (A B C A B C ...), `--runs`
//! times per mode, unpinned and/or pinned to one CPU, and the medians and their ratios are
//! reported (MB = 2^20 bytes).
//!
//! Locking: none; the parent is single-threaded and each worker owns its region.

mod mem;
pub mod size;
mod worker;
pub mod workload;

use crate::kernel::{self, restore::Restore, restore::Undo, setup, RealOps};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Map, Value};
use size::{fmt_size, parse_limit, parse_size};
use std::path::{Path, PathBuf};
use uswap_run::exit::{CliError, CliResult};
use workload::{DataKind, WorkloadCfg, PAGE};

/// Options of `uswap bench usemem`.
#[derive(clap::Args, Debug, Clone)]
#[command(
    after_help = "Examples:\n  uswap bench usemem --quick\n  uswap bench usemem --size 1G --limit 1.5G --compare zram --json\n  uswap bench usemem --tiers zero,lz4,file:/var/tmp --verify"
)]
pub struct Args {
    /// Size of the region the workload writes [default: 1G; 256M with --quick].
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Resident limit, the same for uswap and the kernel's memory cgroup: a size or N% of RAM
    /// [default: 256M; 64M with --quick].
    #[arg(long, value_parser = parse_limit)]
    pub limit: Option<u64>,
    /// What to compare uswap with: kernel (= zram,zswap), zram, zswap (zswap in front of a swap
    /// file: the kernel's swap to disk; `disk` is the same) or none.
    #[arg(long, default_value = "kernel")]
    pub compare: String,
    /// The room the uswap worker's memory cgroup gives above the limit: the process's own
    /// fixed overhead (its binary's and libraries' pages, uswap's tables), which the limit does
    /// not cover. The cgroup's peak is reported as uswap's footprint.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub uswap_allowance: u64,
    /// Check every byte read back (each page is a function of its index and the round).
    #[arg(long)]
    pub verify: bool,
    /// Print one JSON object instead of a table (and no progress bar).
    #[arg(long)]
    pub json: bool,
    /// Interleaved runs per backend and mode (medians are reported) [default: 3; 1 with --quick].
    #[arg(long)]
    pub runs: Option<u32>,
    /// Pinning: `last` (every side pinned to the last CPU; stable figures), `none`
    /// (unpinned), `both` (unpinned runs, then pinned runs: both figures, twice the time), or
    /// a CPU number [default: last; none with --quick].
    #[arg(long)]
    pub pin: Option<String>,
    /// uswap folio size (4K, 64K or 2M).
    #[arg(long, default_value = "64K", value_parser = parse_size)]
    pub folio: u64,
    /// Page contents, one measurement each, in order: pattern (like usemem's, compresses
    /// ~14x) and mixed (per page 2/8 zero, 3/8 text-like, 2/8 random, 1/8 pattern: closer to
    /// a real heap). The first kind's figures are the JSON's top-level keys; every kind's
    /// headline figures are also under `KIND_seq_ratio`, `KIND_rand_ratio`, ... and all of
    /// them under `by_data`.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "pattern,mixed")]
    pub data: Vec<DataKind>,
    /// uswap tiers, in order (`default` = the pager's default, which adds an encrypted swap
    /// file). The benchmark defaults to RAM-only tiers, like the kernel side's zram; uswap still
    /// charges its pool to the limit, which cgroup v1 does not do for zram.
    #[arg(long, default_value = "zero,lz4")]
    pub tiers: String,
    /// uswap keeps the swap entry of a page swapped in by a read, so evicting it again writes
    /// nothing (`false` = free it at swap-in, as the kernel does for zram).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub keep_clean: bool,
    /// Let a `file:PATH` tier overwrite an existing file or device without uswap's header.
    #[arg(long)]
    pub force: bool,
    /// Sequential write rounds (steady state = rounds after the first) [default: 3; 2 with --quick].
    #[arg(long)]
    pub rounds: Option<u32>,
    /// zswap compressor for the zswap runs (the previous one is restored afterwards).
    #[arg(long, default_value = "lz4")]
    pub zswap_compressor: String,
    /// Smoke-test mode: 256M under 64M, one run, two rounds, unpinned (explicit options win).
    #[arg(long)]
    pub quick: bool,
    /// Internal: run one measurement as a worker (uswap or plain).
    #[arg(long, hide = true)]
    pub worker: Option<String>,
    /// Internal: the worker pins itself to this CPU.
    #[arg(long, hide = true)]
    pub pin_cpu: Option<usize>,
    /// Internal: the worker joins this cgroup (path of its cgroup.procs).
    #[arg(long, hide = true)]
    pub cgroup_procs: Option<PathBuf>,
}

/// Options of `uswap demo`.
#[derive(clap::Args, Debug, Clone)]
pub struct DemoArgs {
    /// Size of the region.
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    pub size: u64,
    /// Resident limit: resident pages + swap cache + compressed pool (a size such as 256M or
    /// 1.5G, or N% of RAM).
    #[arg(long, default_value = "256M", value_parser = parse_limit)]
    pub limit: u64,
    /// Folio size (4K, 64K or 2M).
    #[arg(long, default_value = "64K", value_parser = parse_size)]
    pub folio: u64,
    /// Page contents.
    #[arg(long, value_enum, default_value = "mixed")]
    pub data: DataKind,
    /// Tiers (`default` = the pager's default).
    #[arg(long, default_value = "default")]
    pub tiers: String,
    /// Sequential write rounds.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Skip checking every byte read back (checked by default).
    #[arg(long)]
    pub no_verify: bool,
    /// Print one JSON object (schema: docs/stats.md).
    #[arg(long)]
    pub json: bool,
    /// Let a `file:PATH` tier overwrite an existing file or device without uswap's header.
    #[arg(long)]
    pub force: bool,
}

/// The resolved settings of one benchmark invocation.
#[derive(Debug, Clone)]
struct Plan {
    size: u64,
    limit: u64,
    folio: u64,
    runs: u32,
    rounds: u32,
    modes: Vec<Option<usize>>,
    zram: bool,
    zswap: bool,
    /// The page contents measured, in order (no repeats).
    kinds: Vec<DataKind>,
}

fn check_common(size: u64, limit: u64, folio: u64) -> Result<(), CliError> {
    if !matches!(folio, 4096 | 65536 | 2097152) {
        return Err(CliError::usage(format!("--folio {}: must be 4K, 64K or 2M", fmt_size(folio))));
    }
    if !size.is_multiple_of(folio) || size < folio {
        return Err(CliError::usage(format!(
            "--size {}: must be a multiple of the folio size {}",
            fmt_size(size),
            fmt_size(folio)
        )));
    }
    if size > (1u64 << 40) {
        return Err(CliError::usage(format!("--size {}: at most 1T", fmt_size(size))));
    }
    if limit < (16 << 20) {
        return Err(CliError::usage(format!(
            "--limit {}: at least 16M (the kernel's cgroup must hold the program itself)",
            fmt_size(limit)
        )));
    }
    Ok(())
}

fn plan(a: &Args) -> Result<Plan, CliError> {
    let q = a.quick;
    let size = a.size.unwrap_or(if q { 256 << 20 } else { 1 << 30 });
    let limit = a.limit.unwrap_or(if q { 64 << 20 } else { 256 << 20 });
    check_common(size, limit, a.folio)?;
    let runs = a.runs.unwrap_or(if q { 1 } else { 3 });
    let rounds = a.rounds.unwrap_or(if q { 2 } else { 3 });
    if runs == 0 || runs > 100 {
        return Err(CliError::usage(format!("--runs {runs}: must be 1..=100")));
    }
    if rounds == 0 || rounds > 1000 {
        return Err(CliError::usage(format!("--rounds {rounds}: must be 1..=1000")));
    }
    let ncpu = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let pin = a.pin.clone().unwrap_or_else(|| if q { "none".into() } else { "last".into() });
    let modes = match pin.as_str() {
        "none" | "unpinned" => vec![None],
        "last" | "pinned" => vec![Some(ncpu - 1)],
        "both" => vec![None, Some(ncpu - 1)],
        n => match n.parse::<usize>() {
            Ok(c) if c < ncpu => vec![Some(c)],
            Ok(c) => return Err(CliError::usage(format!("--pin {c}: this machine has CPUs 0..{}", ncpu - 1))),
            Err(_) => return Err(CliError::usage(format!("--pin {n:?}: expected last, none, both or a CPU number"))),
        },
    };
    let (mut zram, mut zswap) = (false, false);
    for c in a.compare.split(',').map(str::trim) {
        match c {
            "kernel" => (zram, zswap) = (true, true),
            "zram" => zram = true,
            "zswap" | "disk" => zswap = true,
            "none" | "" => {}
            other => {
                return Err(CliError::usage(format!(
                    "--compare {other:?}: expected kernel, zram, zswap or none (disk = zswap)"
                )));
            }
        }
    }
    let mut kinds: Vec<DataKind> = Vec::new();
    for &d in &a.data {
        if !kinds.contains(&d) {
            kinds.push(d);
        }
    }
    if kinds.is_empty() {
        return Err(CliError::usage("--data: name at least one of pattern, mixed"));
    }
    Ok(Plan { size, limit, folio: a.folio, runs, rounds, modes, zram, zswap, kinds })
}

/// The three sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Uswap,
    Zram,
    Zswap,
}

impl Side {
    fn key(self) -> &'static str {
        match self {
            Side::Uswap => "uswap",
            Side::Zram => "kernel_zram",
            Side::Zswap => "kernel_zswap",
        }
    }
}

fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn r2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (a > 0.0 && b > 0.0).then(|| r2(a / b))
}

/// Kernel state for the comparison: the guard plus what was set up.
struct KernelSide {
    guard: Restore,
    cgroup: Option<setup::Cgroup>,
    zram: Option<setup::Zram>,
    zswap: Option<setup::Zswap>,
    zram_skipped: Option<String>,
    zswap_skipped: Option<String>,
    /// Why the uswap worker runs without a memory cgroup (None: it runs in one).
    uswap_cgroup_skipped: Option<String>,
    /// Cgroups created for uswap runs so far.
    seq: u32,
}

fn setup_kernel(p: &Plan) -> KernelSide {
    let mut k = KernelSide {
        guard: Restore::new(Box::new(RealOps::default())),
        cgroup: None,
        zram: None,
        zswap: None,
        zram_skipped: (!p.zram).then(|| "not requested (--compare)".to_string()),
        zswap_skipped: (!p.zswap).then(|| "not requested (--compare)".to_string()),
        uswap_cgroup_skipped: None,
        seq: 0,
    };
    if !kernel::is_root() {
        let why = "needs root (to set up zram, zswap, swapon and memory cgroups); run with sudo".to_string();
        k.zram_skipped.get_or_insert(why.clone());
        k.zswap_skipped.get_or_insert(why.clone());
        k.uswap_cgroup_skipped = Some(why);
        return k;
    }
    // The uswap worker gets a cgroup of its own per run: probe that it can (created and
    // removed again).
    let probe = format!("uswap-usemem-{}-probe", std::process::id());
    match setup::setup_cgroup(&mut k.guard, &probe, 1 << 30) {
        Ok(cg) => {
            if let Err(e) = k.guard.undo_now(&Undo::Rmdir(cg.dir)) {
                k.uswap_cgroup_skipped = Some(format!("memory cgroup: cannot remove {probe}: {e}"));
            }
        }
        Err(e) => k.uswap_cgroup_skipped = Some(format!("memory cgroup: {e}")),
    }
    if !p.zram && !p.zswap {
        return k;
    }
    let name = format!("uswap-usemem-{}", std::process::id());
    match setup::setup_cgroup(&mut k.guard, &name, p.limit) {
        Ok(c) => k.cgroup = Some(c),
        Err(e) => {
            k.zram_skipped.get_or_insert(format!("memory cgroup: {e}"));
            k.zswap_skipped.get_or_insert(format!("memory cgroup: {e}"));
            return k;
        }
    }
    let area = p.size + (64 << 20);
    if p.zram {
        match setup::setup_zram(&mut k.guard, area, "lz4") {
            Ok(z) => k.zram = Some(z),
            Err(e) => k.zram_skipped = Some(format!("zram: {e}")),
        }
    }
    if p.zswap {
        let file = PathBuf::from(format!("var/tmp/uswap-usemem-{}.swap", std::process::id()));
        match setup::setup_zswap(&mut k.guard, &file, area, "lz4") {
            Ok(z) => k.zswap = Some(z),
            Err(e) => k.zswap_skipped = Some(format!("zswap: {e}")),
        }
    }
    k
}

/// The tiers string, with `force` on its file tiers when `--force` was given.
fn tiers_of(tiers: &str, force: bool) -> String {
    if force {
        uswap::config::with_force(tiers)
    } else {
        tiers.to_string()
    }
}

fn worker_args(
    a: &Args,
    p: &Plan,
    data: DataKind,
    kind: &str,
    pin: Option<usize>,
    procs: Option<&Path>,
) -> Vec<String> {
    let mut v: Vec<String> = ["bench", "usemem", "--worker", kind].iter().map(|s| s.to_string()).collect();
    let kv = [
        ("--size", p.size.to_string()),
        ("--limit", p.limit.to_string()),
        ("--folio", p.folio.to_string()),
        ("--data", data.name().to_string()),
        ("--tiers", tiers_of(&a.tiers, a.force)),
        ("--keep-clean", a.keep_clean.to_string()),
        ("--rounds", p.rounds.to_string()),
    ];
    for (k, val) in kv {
        v.push(k.into());
        v.push(val);
    }
    if a.verify {
        v.push("--verify".into());
    }
    if let Some(c) = pin {
        v.push("--pin-cpu".into());
        v.push(c.to_string());
    }
    if let Some(pr) = procs {
        v.push("--cgroup-procs".into());
        v.push(pr.display().to_string());
    }
    v
}

/// One side's runs in one mode.
#[derive(Default)]
struct Runs {
    reports: Vec<worker::Report>,
}

impl Runs {
    fn col(&self, f: impl Fn(&workload::WorkloadResult) -> f64) -> Vec<f64> {
        self.reports.iter().map(|r| f(&r.workload)).collect()
    }
}

fn run_one(
    a: &Args,
    p: &Plan,
    data: DataKind,
    k: &mut KernelSide,
    side: Side,
    pin: Option<usize>,
    pb: &ProgressBar,
) -> Result<worker::Report, String> {
    let procs = k.cgroup.as_ref().map(|c| c.procs_file(k.guard.ops()));
    let mut prog = |n: u64| pb.inc(n);
    match side {
        Side::Uswap => {
            let Some(cg) = uswap_cgroup(a, p, k)? else {
                let args = worker_args(a, p, data, "uswap", pin, None);
                return worker::spawn(&args, &mut prog, &mut || Value::Null);
            };
            let args = worker_args(a, p, data, "uswap", pin, Some(&cg.procs_file(k.guard.ops())));
            let res = worker::spawn(&args, &mut prog, &mut || Value::Null);
            let (peak, ooms) = (cg.peak(k.guard.ops()), cg.oom_kills(k.guard.ops()));
            let limit = p.limit + a.uswap_allowance;
            let rm = k.guard.undo_now(&Undo::Rmdir(cg.dir.clone()));
            let mut r = match res {
                Err(e) if ooms > 0 => {
                    return Err(format!("OOM-killed in uswap's memory cgroup (limit {}): {e}", fmt_size(limit)))
                }
                r => r?,
            };
            rm?;
            r.kernel = json!({ "footprint_peak_bytes": peak, "cgroup_limit_bytes": limit, "oom_kills": ooms });
            Ok(r)
        }
        Side::Zram => {
            let z = k.zram.clone().ok_or("no zram")?;
            if let Some(zs) = &k.zswap {
                zs.set_enabled(k.guard.ops(), false)?;
            }
            setup::swapon(&mut k.guard, &z.dev)?;
            let args = worker_args(a, p, data, "plain", pin, procs.as_deref());
            let before = kernel::vmstat(k.guard.ops());
            let ops = k.guard.ops();
            let cg = k.cgroup.clone();
            let cg_before = cg.as_ref().map(|c| c.stat(ops));
            let res = worker::spawn(&args, &mut prog, &mut || {
                json!({
                    "zram_mm_stat": z.mm_stat(ops),
                    "swaps_active": setup::active_swaps(ops),
                    "vmstat": kernel::delta(&before, &kernel::vmstat(ops)),
                    "memcg": cg.as_ref().map(|c| c.stat_delta(ops, cg_before.as_ref())),
                })
            });
            let off = setup::swapoff(&mut k.guard, &z.dev);
            let r = res?;
            off?;
            Ok(r)
        }
        Side::Zswap => {
            let zs = k.zswap.clone().ok_or("no zswap")?;
            zs.set_enabled(k.guard.ops(), true)?;
            setup::swapon(&mut k.guard, &zs.file)?;
            let args = worker_args(a, p, data, "plain", pin, procs.as_deref());
            let before = kernel::vmstat(k.guard.ops());
            let ops = k.guard.ops();
            let cg = k.cgroup.clone();
            let cg_before = cg.as_ref().map(|c| c.stat(ops));
            let comp = zs.compressor.clone();
            let res = worker::spawn(&args, &mut prog, &mut || {
                json!({
                    "zswap_compressor": comp,
                    "swaps_active": setup::active_swaps(ops),
                    "vmstat": kernel::delta(&before, &kernel::vmstat(ops)),
                    "memcg": cg.as_ref().map(|c| c.stat_delta(ops, cg_before.as_ref())),
                })
            });
            let off = setup::swapoff(&mut k.guard, &zs.file);
            let dis = zs.set_enabled(k.guard.ops(), false);
            let r = res?;
            off?;
            dis?;
            Ok(r)
        }
    }
}

/// A new memory cgroup for one uswap run at the limit + the allowance, kept out of kernel swap
/// (None when uswap runs without one).
fn uswap_cgroup(a: &Args, p: &Plan, k: &mut KernelSide) -> Result<Option<setup::Cgroup>, String> {
    if k.uswap_cgroup_skipped.is_some() {
        return Ok(None);
    }
    k.seq += 1;
    let name = format!("uswap-usemem-{}-uswap-{}", std::process::id(), k.seq);
    let cg = setup::setup_cgroup(&mut k.guard, &name, p.limit + a.uswap_allowance)?;
    if let Err(e) = cg.forbid_swap(k.guard.ops()) {
        let _ = k.guard.undo_now(&Undo::Rmdir(cg.dir.clone()));
        return Err(e);
    }
    Ok(Some(cg))
}

/// Run the benchmark.
pub fn run(a: &Args) -> CliResult {
    if let Some(kind) = &a.worker {
        return worker_main(a, kind);
    }
    let p = plan(a)?;
    kernel::install_signal_handlers();
    let facts = kernel::machine_facts(&RealOps::default());
    let mut k = setup_kernel(&p);
    if kernel::interrupted() {
        return Err(CliError::fail("interrupted; the machine was restored"));
    }
    let mut sides = vec![Side::Uswap];
    if k.zram.is_some() {
        sides.push(Side::Zram);
    }
    if k.zswap.is_some() {
        sides.push(Side::Zswap);
    }
    let pages = p.size / PAGE as u64;
    let per_run = pages * (u64::from(p.rounds) + 1);
    let total = per_run * sides.len() as u64 * u64::from(p.runs) * p.modes.len() as u64 * p.kinds.len() as u64;
    let pb = if a.json {
        ProgressBar::hidden()
    } else {
        let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        pb.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {percent:>3}% {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        pb
    };
    if !a.json {
        for (s, why) in [("kernel zram", &k.zram_skipped), ("kernel zswap", &k.zswap_skipped)] {
            if let Some(w) = why {
                pb.println(format!("{s}: skipped: {w}"));
            }
        }
        if let Some(w) = &k.uswap_cgroup_skipped {
            pb.println(format!("uswap runs without a memory cgroup (no footprint measured): {w}"));
        }
    }

    // results[data kind][mode][side]
    let mut results: Vec<Vec<Vec<Runs>>> = p
        .kinds
        .iter()
        .map(|_| p.modes.iter().map(|_| sides.iter().map(|_| Runs::default()).collect()).collect())
        .collect();
    let mut failures: Vec<String> = Vec::new();
    // Every data kind in every mode, in order.
    let cells: Vec<(usize, DataKind, usize, Option<usize>)> = p
        .kinds
        .iter()
        .enumerate()
        .flat_map(|(di, &data)| p.modes.iter().enumerate().map(move |(mi, &pin)| (di, data, mi, pin)))
        .collect();
    for (di, data, mi, pin) in cells {
        let mode = pin.map_or("unpinned".to_string(), |c| format!("pinned cpu {c}"));
        for run in 0..p.runs {
            for (si, &side) in sides.iter().enumerate() {
                pb.set_message(format!("{} data, {mode}, run {}/{}, {}", data.name(), run + 1, p.runs, side.key()));
                match run_one(a, &p, data, &mut k, side, pin, &pb) {
                    Ok(r) => results[di][mi][si].reports.push(r),
                    Err(e) => {
                        if kernel::interrupted() {
                            pb.finish_and_clear();
                            drop(k);
                            return Err(CliError::fail("interrupted; the machine was restored"));
                        }
                        if side == Side::Uswap && a.verify && e.contains("verify") {
                            pb.finish_and_clear();
                            return Err(CliError::fail(format!("uswap ({} data): {e}", data.name())));
                        }
                        pb.println(format!("{} ({} data): run {} failed: {e}", side.key(), data.name(), run + 1));
                        failures.push(format!("{} {} data {mode} run {}: {e}", side.key(), data.name(), run + 1));
                    }
                }
            }
        }
    }
    pb.finish_and_clear();
    let restore_errors = k.guard.restore();

    // Per data kind: its modes, and the primary mode's keys.
    let primary = if p.modes.iter().any(Option::is_some) { "pinned" } else { "unpinned" };
    let mut by_data = Map::new();
    let mut modes_of = Vec::new();
    for (di, &data) in p.kinds.iter().enumerate() {
        let mut modes = Map::new();
        for (mi, &pin) in p.modes.iter().enumerate() {
            let name = if pin.is_some() { "pinned" } else { "unpinned" };
            modes.insert(name.into(), mode_json(&sides, &results[di][mi], pin));
        }
        let mut m = match modes.get(primary) {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        };
        m.insert("modes".into(), Value::Object(modes.clone()));
        by_data.insert(data.name().into(), Value::Object(m));
        modes_of.push(modes);
    }
    let mut out = Map::new();
    // The first kind's figures at the top level (the keys this benchmark always had).
    if let Some(Value::Object(m)) = by_data.get(p.kinds[0].name()) {
        for (key, v) in m {
            out.insert(key.clone(), v.clone());
        }
    }
    for (name, m) in &by_data {
        for key in HEADLINE_KEYS {
            out.insert(format!("{name}_{key}"), m.get(key).cloned().unwrap_or(Value::Null));
        }
    }
    out.insert("by_data".into(), Value::Object(by_data));
    out.insert("primary_mode".into(), json!(primary));
    out.insert("pinned".into(), json!(primary == "pinned"));
    out.insert("size".into(), json!(p.size));
    out.insert("limit".into(), json!(p.limit));
    out.insert("folio".into(), json!(p.folio));
    out.insert("data".into(), json!(p.kinds.iter().map(|d| d.name()).collect::<Vec<_>>().join(",")));
    out.insert("tiers".into(), json!(a.tiers));
    out.insert("keep_clean".into(), json!(a.keep_clean));
    out.insert("runs".into(), json!(p.runs));
    out.insert("rounds".into(), json!(p.rounds));
    out.insert("verify".into(), json!(a.verify));
    out.insert("mb".into(), json!("2^20 bytes"));
    out.insert("uswap_allowance_bytes".into(), json!(a.uswap_allowance));
    out.insert(
        "uswap_cgroup_limit_bytes".into(),
        json!(k.uswap_cgroup_skipped.is_none().then_some(p.limit + a.uswap_allowance)),
    );
    out.insert("uswap_cgroup_skipped".into(), json!(k.uswap_cgroup_skipped));
    out.insert(
        "kernel_disk_side".into(),
        json!("kernel_zswap: zswap in front of a swap file on /var/tmp, the cgroup at the limit (speed_ratio_disk)"),
    );
    out.insert("kernel_zram_skipped".into(), json!(k.zram_skipped));
    out.insert("kernel_zswap_skipped".into(), json!(k.zswap_skipped));
    out.insert(
        "kernel_setup".into(),
        json!({
            "zram_device": k.zram.as_ref().map(|z| format!("/dev/zram{}", z.id)),
            "zram_hot_added": k.zram.as_ref().map(|z| z.hot_added),
            "zram_comp_algorithm": k.zram.as_ref().map(|_| "lz4"),
            "cgroup": k.cgroup.as_ref().map(|c| format!("/{}", c.dir.display())),
            "cgroup_version": k.cgroup.as_ref().map(|c| c.version),
            "zswap_swapfile": k.zswap.as_ref().map(|z| format!("/{}", z.file.display())),
            "zswap_compressor": k.zswap.as_ref().map(|z| z.compressor.clone()),
        }),
    );
    out.insert("failures".into(), json!(failures));
    out.insert("restore_errors".into(), json!(restore_errors));
    if a.json {
        println!("{}", uswap_run::report::with_header("usemem", facts, Value::Object(out)));
    } else {
        for (di, &data) in p.kinds.iter().enumerate() {
            print_table(a, &p, data, &sides, &modes_of[di], &k, &results[di]);
        }
        for f in &failures {
            println!("FAILED: {f}");
        }
        for e in &restore_errors {
            eprintln!("uswap: could not restore: {e}");
        }
    }
    if !restore_errors.is_empty() {
        return Err(CliError::fail("the machine was not fully restored (see above)"));
    }
    if results.iter().flatten().any(|m| m[0].reports.is_empty()) {
        return Err(CliError::fail("every uswap run failed"));
    }
    Ok(())
}

/// The figures repeated per data kind as `KIND_KEY` at the JSON's top level.
const HEADLINE_KEYS: [&str; 15] = [
    "seq_ratio",
    "rand_ratio",
    "seq_ratio_zswap",
    "rand_ratio_zswap",
    "seq_ratio_disk",
    "rand_ratio_disk",
    "speed_ratio_zram",
    "speed_ratio_disk",
    "footprint_peak_bytes",
    "seq_uswap_mb_s",
    "rand_uswap_mb_s",
    "rand_uswap_touches_s",
    "seq_kernel_zram_mb_s",
    "rand_kernel_zram_mb_s",
    "rand_kernel_zram_touches_s",
];

fn mode_json(sides: &[Side], runs: &[Runs], pin: Option<usize>) -> Value {
    let mut m = Map::new();
    m.insert("pinned_cpu".into(), json!(pin));
    let mut seq = [0.0f64; 3];
    let mut rnd = [0.0f64; 3];
    // The whole workload's seconds (every write round and the random pass), per side.
    let mut total = [0.0f64; 3];
    for (si, &side) in sides.iter().enumerate() {
        let r = &runs[si];
        let k = side.key();
        let s = r.col(|w| w.seq_mb_s);
        let rm = r.col(|w| w.rand_mb_s);
        seq[side as usize] = median(&s);
        rnd[side as usize] = median(&rm);
        let secs = r.col(|w| w.round_secs.iter().sum::<f64>() + w.rand_secs);
        total[side as usize] = median(&secs);
        m.insert(format!("{k}_secs"), json!((median(&secs) * 1000.0).round() / 1000.0));
        if side == Side::Uswap {
            let fp: Vec<u64> =
                r.reports.iter().filter_map(|x| x.kernel.get("footprint_peak_bytes").and_then(Value::as_u64)).collect();
            m.insert("footprint_peak_bytes".into(), json!(fp.iter().max()));
            m.insert("footprint_runs_bytes".into(), json!(fp));
        }
        m.insert(format!("seq_{k}_mb_s"), json!(r2(median(&s))));
        m.insert(format!("rand_{k}_mb_s"), json!(r2(median(&rm))));
        m.insert(format!("rand_{k}_touches_s"), json!(median(&r.col(|w| w.rand_touches_s)).round()));
        m.insert(format!("seq_{k}_p50_us"), json!(r2(median(&r.col(|w| w.seq_p50_us)))));
        m.insert(format!("seq_{k}_p99_us"), json!(r2(median(&r.col(|w| w.seq_p99_us)))));
        m.insert(format!("rand_{k}_p50_us"), json!(r2(median(&r.col(|w| w.rand_p50_us)))));
        m.insert(format!("rand_{k}_p99_us"), json!(r2(median(&r.col(|w| w.rand_p99_us)))));
        m.insert(format!("seq_{k}_runs_mb_s"), json!(s.iter().map(|x| r2(*x)).collect::<Vec<_>>()));
        m.insert(format!("rand_{k}_runs_mb_s"), json!(rm.iter().map(|x| r2(*x)).collect::<Vec<_>>()));
        m.insert(
            format!("{k}_round_mb_s"),
            json!(r
                .reports
                .iter()
                .map(|x| x.workload.round_mb_s.iter().map(|v| r2(*v)).collect::<Vec<_>>())
                .collect::<Vec<_>>()),
        );
        m.insert(
            format!("{k}_verified_bytes"),
            json!(r.reports.iter().map(|x| x.workload.verified_bytes).sum::<u64>()),
        );
        if let Some(last) = r.reports.last() {
            let st = if side == Side::Uswap { last.stats.clone() } else { last.kernel.clone() };
            m.insert(format!("{k}_stats"), st);
            m.insert(format!("{k}_backing"), json!(last.backing));
        }
        if side != Side::Uswap {
            // Paired ratios: uswap run i against kernel run i (interleaved neighbours).
            let u = runs[0].col(|w| w.seq_mb_s);
            let ur = runs[0].col(|w| w.rand_mb_s);
            let pairs: Vec<f64> = u.iter().zip(&s).filter(|(_, b)| **b > 0.0).map(|(a, b)| a / b).collect();
            let rpairs: Vec<f64> = ur.iter().zip(&rm).filter(|(_, b)| **b > 0.0).map(|(a, b)| a / b).collect();
            let suffix = if side == Side::Zram { "" } else { "_zswap" };
            m.insert(
                format!("seq_ratio{suffix}_paired_median"),
                json!((!pairs.is_empty()).then(|| r2(median(&pairs)))),
            );
            m.insert(
                format!("rand_ratio{suffix}_paired_median"),
                json!((!rpairs.is_empty()).then(|| r2(median(&rpairs)))),
            );
        }
    }
    m.insert("seq_ratio".into(), json!(ratio(seq[0], seq[1])));
    m.insert("rand_ratio".into(), json!(ratio(rnd[0], rnd[1])));
    m.insert("seq_ratio_zswap".into(), json!(ratio(seq[0], seq[2])));
    m.insert("rand_ratio_zswap".into(), json!(ratio(rnd[0], rnd[2])));
    m.insert("seq_ratio_disk".into(), json!(ratio(seq[0], seq[2])));
    m.insert("rand_ratio_disk".into(), json!(ratio(rnd[0], rnd[2])));
    // Kernel seconds / uswap seconds, as in `bench programs`: above 1 is uswap ahead.
    m.insert("speed_ratio_zram".into(), json!(ratio(total[1], total[0])));
    m.insert("speed_ratio_disk".into(), json!(ratio(total[2], total[0])));
    for k in ["seq_kernel_zram_mb_s", "rand_kernel_zram_mb_s", "seq_kernel_zswap_mb_s", "rand_kernel_zswap_mb_s"] {
        m.entry(k.to_string()).or_insert(Value::Null);
    }
    Value::Object(m)
}

fn print_table(
    a: &Args,
    p: &Plan,
    data: DataKind,
    sides: &[Side],
    modes: &Map<String, Value>,
    k: &KernelSide,
    results: &[Vec<Runs>],
) {
    println!(
        "usemem: {} under a {} limit, folio {}, data {}, tiers {}, {} rounds (steady = rounds 1..), {} interleaved run(s), medians; MB = 2^20 bytes{}",
        fmt_size(p.size),
        fmt_size(p.limit),
        fmt_size(p.folio),
        data.name(),
        a.tiers,
        p.rounds,
        p.runs,
        if a.verify { ", every byte verified" } else { "" }
    );
    println!(
        "{:<10} {:<13} {:>9} {:>16} {:>12} {:>10} {:>16}",
        "mode", "side", "seq MB/s", "seq p50/p99 us", "rand touch/s", "rand MB/s", "rand p50/p99 us"
    );
    for (mi, pin) in p.modes.iter().enumerate() {
        let name = if pin.is_some() { "pinned" } else { "unpinned" };
        let Some(m) = modes.get(name) else { continue };
        for (si, &side) in sides.iter().enumerate() {
            let kk = side.key();
            if results[mi][si].reports.is_empty() {
                println!("{name:<10} {kk:<13} every run failed (see FAILED below)");
                continue;
            }
            let g = |key: String| m.get(&key).and_then(Value::as_f64).unwrap_or(0.0);
            println!(
                "{:<10} {:<13} {:>9.1} {:>16} {:>12.0} {:>10.1} {:>16}",
                name,
                kk,
                g(format!("seq_{kk}_mb_s")),
                format!("{:.1}/{:.1}", g(format!("seq_{kk}_p50_us")), g(format!("seq_{kk}_p99_us"))),
                g(format!("rand_{kk}_touches_s")),
                g(format!("rand_{kk}_mb_s")),
                format!("{:.1}/{:.1}", g(format!("rand_{kk}_p50_us")), g(format!("rand_{kk}_p99_us"))),
            );
        }
        let f = |key: &str| m.get(key).and_then(Value::as_f64).map_or("-".to_string(), |v| format!("{v:.2}x"));
        println!(
            "{:<10} ratio uswap/zram: seq {}  rand {}   uswap/zswap: seq {}  rand {}",
            name,
            f("seq_ratio"),
            f("rand_ratio"),
            f("seq_ratio_zswap"),
            f("rand_ratio_zswap")
        );
        println!(
            "{:<10} whole workload, kernel s / uswap s: zram {}  disk (zswap + swap file) {}; uswap footprint {}",
            name,
            f("speed_ratio_zram"),
            f("speed_ratio_disk"),
            m.get("footprint_peak_bytes").and_then(Value::as_u64).map_or("-".to_string(), |b| format!(
                "{} (cgroup limit {} + {})",
                fmt_size(b),
                fmt_size(p.limit),
                fmt_size(a.uswap_allowance)
            )),
        );
    }
    for (s, why) in [("kernel zram", &k.zram_skipped), ("kernel zswap", &k.zswap_skipped)] {
        if let Some(w) = why {
            println!("{s}: skipped: {w}");
        }
    }
    if let Some(last) = results.last().and_then(|m| m[0].reports.last()) {
        println!("uswap ({}): {}", last.backing, last.stats);
    }
    for (si, &side) in sides.iter().enumerate().skip(1) {
        if let Some(last) = results.last().and_then(|m| m[si].reports.last()) {
            println!("{}: {}", side.key(), last.kernel);
        }
    }
}

/// `--worker KIND`: one measurement in this (child) process.
fn worker_main(a: &Args, kind: &str) -> CliResult {
    let size = a.size.ok_or_else(|| CliError::usage("--worker needs --size"))?;
    let limit = a.limit.ok_or_else(|| CliError::usage("--worker needs --limit"))?;
    let data = *a.data.first().ok_or_else(|| CliError::usage("--worker needs --data"))?;
    let cfg = WorkloadCfg { rounds: a.rounds.unwrap_or(3).max(1), verify: a.verify, data, seed: 0x5eed };
    let place = worker::Placement { pin: a.pin_cpu, cgroup_procs: a.cgroup_procs.as_deref() };
    let folio = a.folio;
    let tiers = tiers_of(&a.tiers, a.force);
    let res = worker::child_main(size as usize, &cfg, &place, || match kind {
        "plain" => Ok(Box::new(mem::PlainMem) as Box<dyn mem::Backing>),
        "uswap" => mem::uswap(limit, folio, &tiers, a.keep_clean),
        other => Err(format!("unknown worker kind {other:?}")),
    });
    res.map_err(|e| {
        println!("error {e}");
        CliError::fail(e)
    })
}

/// `uswap demo`: the workload on a uswap region under a limit, in this process, ending in
/// throughput and the pager's swap statistics.
pub fn demo(d: &DemoArgs) -> CliResult {
    check_common(d.size, d.limit, d.folio)?;
    if d.rounds == 0 {
        return Err(CliError::usage("--rounds must be at least 1"));
    }
    let t0 = std::time::Instant::now();
    let backing = mem::uswap(d.limit, d.folio, &tiers_of(&d.tiers, d.force), true).map_err(CliError::fail)?;
    let mut region = backing.map(d.size as usize).map_err(CliError::fail)?;
    let cfg = WorkloadCfg { rounds: d.rounds, verify: !d.no_verify, data: d.data, seed: 0x5eed };
    let pages = d.size / PAGE as u64;
    if !d.json {
        eprintln!(
            "uswap demo: {} of {} data under a {} limit, folio {}, {}",
            fmt_size(d.size),
            d.data.name(),
            fmt_size(d.limit),
            fmt_size(d.folio),
            backing.describe()
        );
    }
    let pb = if uswap_run::progress::visible(d.json) {
        ProgressBar::with_draw_target(Some(pages * (u64::from(d.rounds) + 1)), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    let (ptr, len) = (region.as_mut_ptr(), region.len());
    // SAFETY: the region is page-aligned, `len` bytes, owned by `region` (alive until the end
    // of this function) and touched only by the workload.
    let res = unsafe { workload::run(ptr, len, &cfg, &mut |n| pb.inc(n)) };
    pb.finish_and_clear();
    let res = res.map_err(|e| CliError::fail(e.to_string()))?;
    let stats = uswap_run::report::pager(&backing.stats(), &d.tiers);
    let (cpu_user, cpu_system) = uswap_run::report::self_cpu_s();
    if d.json {
        let mut doc = uswap_run::report::header(crate::kernel::machine());
        doc.insert("elapsed_s".into(), json!((t0.elapsed().as_secs_f64() * 1000.0).round() / 1000.0));
        doc.insert("cpu_user_s".into(), json!(cpu_user));
        doc.insert("cpu_system_s".into(), json!(cpu_system));
        doc.insert("workload".into(), serde_json::to_value(&res).map_err(|e| CliError::fail(e.to_string()))?);
        doc.insert("stats".into(), stats);
        doc.insert("backing".into(), json!(backing.describe()));
        println!("{:#}", Value::Object(doc));
    } else {
        for (i, mb) in res.round_mb_s.iter().enumerate() {
            println!("write round {i}: {mb:.1} MB/s");
        }
        println!(
            "sequential rewrite (steady): {:.1} MB/s, per-page p50 {:.1} us, p99 {:.1} us",
            res.seq_mb_s, res.seq_p50_us, res.seq_p99_us
        );
        println!(
            "random touches: {:.0}/s ({:.1} MB/s), p50 {:.1} us, p99 {:.1} us",
            res.rand_touches_s, res.rand_mb_s, res.rand_p50_us, res.rand_p99_us
        );
        if cfg.verify {
            println!("verified: {} bytes read back, all correct", res.verified_bytes);
        }
        println!(
            "swap statistics ({}), {:.1} s, CPU {cpu_user:.2} s user + {cpu_system:.2} s system:",
            backing.describe(),
            t0.elapsed().as_secs_f64()
        );
        for l in uswap_run::report::human_lines(&stats) {
            println!("  {l}");
        }
        if let (Some(p50), Some(p99)) =
            (stats.pointer("/faults/latency_p50_ns"), stats.pointer("/faults/latency_p99_ns"))
        {
            println!("  fault latency: p50 {p50} ns, p99 {p99} ns");
        }
    }
    drop(region);
    drop(backing);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: Args,
    }

    fn parse(v: &[&str]) -> Result<Args, clap::Error> {
        T::try_parse_from(std::iter::once("t").chain(v.iter().copied())).map(|t| t.a)
    }

    #[test]
    fn defaults_and_quick_mode() {
        let p = plan(&parse(&[]).unwrap()).unwrap();
        assert_eq!((p.size, p.limit, p.runs, p.rounds, p.folio), (1 << 30, 256 << 20, 3, 3, 64 << 10));
        let ncpu = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        assert_eq!(p.modes, vec![Some(ncpu - 1)]);
        assert_eq!(plan(&parse(&["--pin", "both"]).unwrap()).unwrap().modes, vec![None, Some(ncpu - 1)]);
        assert!(p.zram && p.zswap);
        let q = plan(&parse(&["--quick"]).unwrap()).unwrap();
        assert_eq!((q.size, q.limit, q.runs, q.rounds, q.modes.clone()), (256 << 20, 64 << 20, 1, 2, vec![None]));
        let q = plan(&parse(&["--quick", "--size", "128M", "--pin", "0", "--compare", "zram"]).unwrap()).unwrap();
        assert_eq!((q.size, q.modes.clone(), q.zram, q.zswap), (128 << 20, vec![Some(0)], true, false));
    }

    #[test]
    fn bad_arguments_exit_2() {
        // clap's own errors (bad size syntax) exit 2 as well.
        let e = parse(&["--size", "1Q"]).err().unwrap();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("unknown unit"), "{e}");
        for bad in [
            &["--folio", "8K"][..],
            &["--size", "100K"],
            &["--limit", "1M"],
            &["--runs", "0"],
            &["--pin", "999"],
            &["--pin", "x"],
            &["--compare", "btrfs"],
        ] {
            let a = parse(bad).unwrap();
            let e = plan(&a).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}: {}", e.msg);
        }
    }

    #[test]
    fn medians_and_ratios() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        assert_eq!(ratio(700.0, 350.0), Some(2.0));
        assert_eq!(ratio(700.0, 0.0), None);
    }

    #[test]
    fn disk_is_the_zswap_side() {
        let p = plan(&parse(&["--compare", "disk"]).unwrap()).unwrap();
        assert!(!p.zram && p.zswap);
        assert_eq!(parse(&[]).unwrap().uswap_allowance, 64 << 20);
    }

    #[test]
    fn speed_ratios_and_footprint_per_mode() {
        let report = |secs: f64, mb_s: f64, footprint: Option<u64>| worker::Report {
            backing: "x".into(),
            pinned_cpu: None,
            workload: workload::WorkloadResult {
                round_secs: vec![secs / 2.0, secs / 4.0],
                rand_secs: secs / 4.0,
                seq_mb_s: mb_s,
                rand_mb_s: mb_s,
                ..Default::default()
            },
            stats: Value::Null,
            kernel: footprint.map_or(Value::Null, |b| json!({ "footprint_peak_bytes": b })),
        };
        let runs = |v: Vec<worker::Report>| Runs { reports: v };
        let sides = [Side::Uswap, Side::Zram, Side::Zswap];
        let m = mode_json(
            &sides,
            &[
                runs(vec![report(2.0, 100.0, Some(90)), report(2.0, 100.0, Some(120))]),
                runs(vec![report(3.0, 50.0, None)]),
                runs(vec![report(8.0, 25.0, None)]),
            ],
            None,
        );
        assert_eq!(m["speed_ratio_zram"], 1.5);
        assert_eq!(m["speed_ratio_disk"], 4.0);
        assert_eq!((m["seq_ratio"].as_f64(), m["seq_ratio_disk"].as_f64()), (Some(2.0), Some(4.0)));
        assert_eq!(m["seq_ratio_disk"], m["seq_ratio_zswap"]);
        assert_eq!(m["footprint_peak_bytes"], 120);
        assert_eq!(m["uswap_secs"], 2.0);
        // Without the kernel sides there are no ratios.
        let m = mode_json(&sides[..1], &[runs(vec![report(2.0, 100.0, None)])], None);
        assert!(m["speed_ratio_disk"].is_null() && m["footprint_peak_bytes"].is_null());
    }
}
