//! `uswap bench programs`: real, unmodified programs across runtimes (CPython, Node.js, the
//! JVM, SQLite, GNU sort, Redis, GCC, xz, Perl, a shell pipeline), each run natively, under
//! kernel swap (zram with lz4 as the only swap, the program in a memory cgroup with the limit),
//! and under `uswap run --limit` (this same binary), interleaved per round. Every run has a
//! deadline; a run that misses it gets the stacks of every thread of its process tree printed
//! and is killed. Outputs (stdout and output files) are compared byte for byte with the native
//! run's; wall time and peak RSS are recorded; the kernel's own OOM kills are reported as such
//! and left out of the speed comparison. The suite is in [`suite`], the process handling in
//! [`runner`], the Redis scenario in [`redis`].
//!
//! Locking: none; the main thread runs everything in turn (each child has a waiter thread).

pub mod bgsave;
mod redis;
mod runner;
mod suite;

use super::usemem::size::{fmt_size, parse_size};
use super::{CliError, CliResult};
use crate::kernel::{self, restore::Restore, restore::Undo, setup, RealOps};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use suite::{Body, Program};

/// Options of `uswap bench programs`.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "\
Examples:
  uswap bench programs --compare kernel            the whole suite against kernel zram (root)
  uswap bench programs --only python-dict,redis --scale 0.3 --json
  uswap bench programs --list

Targets (reported, not asserted): no run hangs; every uswap output equals the native one; \
uswap's peak RSS (and a tree's peak anonymous Pss) stays within (limit + fixed overhead) + 10%; \
the geometric mean of \
kernel_s / uswap_s over the programs both finished is at least 1.0.

The limit of each program is --limit-fraction of its native peak RSS (measured by its first \
native run: the largest process's, counted twice for make-j2, which runs two compilers at \
once) unless --limit is given. Without --limit-fraction it is 0.4, or more for a program \
whose working set is its whole peak (xz's match finder and perl's hash resize walk all of \
it at random: 0.8; below that both thrash under any swap, see --list). The kernel side charges everything the program touches \
(page cache too) to a memory cgroup with that limit, shared by all its processes; uswap limits \
the anonymous memory of the whole tree (one budget shared by all its processes), and each \
process's fixed overhead (the RSS when its pager had started) comes on top. Programs the kernel OOM-kills are reported as kernel_outcome \"oom\" and left \
out of the geometric mean.

JSON (--json), per program: limit_bytes; native_s, kernel_s, uswap_s (medians of the runs that \
finished); speed_ratio = kernel_s / uswap_s; native_peak_rss_bytes, kernel_peak_bytes, \
uswap_peak_rss_bytes (wait4's ru_maxrss: the largest process of the tree); \
uswap_tree_peak_anon_pss_bytes (a tree of several processes: the largest sum of their Pss_Anon, \
from uswap run --stats) and uswap_tree_within_target (it against the same target); \
kernel_cgroup_peak_bytes (the cgroup's memory.max_usage_in_bytes, page cache included); \
uswap_fixed_overhead_bytes (from uswap run --stats); uswap_evicted_bytes; kernel_swapped_out_bytes, \
kernel_swapped_in_bytes, uswap_swapped_in_bytes; correct and \
kernel_correct (output == native output); native_outcome, kernel_outcome, uswap_outcome \
(ok | oom | timeout | error); *_stacks (the stacks printed at a timeout); runs (every run). \
Top level: geomean_speed_ratio with geomean_over and geomean_excluded (and why), failures \
(of the native and uswap runs: the kernel side's are its outcome and keep the program out of the mean), \
skipped (a runtime that is not installed), machine, date.")]
pub struct Args {
    /// What to compare uswap with: kernel (= zram: lz4 zram swap + memory cgroup; needs root) or none.
    #[arg(long, default_value = "none")]
    pub compare: String,
    /// Print one JSON object instead of a table (and no progress bar).
    #[arg(long)]
    pub json: bool,
    /// Only these programs (comma-separated names; see --list).
    #[arg(long)]
    pub only: Option<String>,
    /// Interleaved rounds per program (native, kernel, uswap each round); medians are reported.
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    /// Seconds one run may take before its stacks are printed and it is killed.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// Multiply every program's size by this (small values for smoke tests).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// The same limit for every program instead of a fraction of its native peak RSS.
    #[arg(long, value_parser = parse_size)]
    pub limit: Option<u64>,
    /// Each program's limit as a fraction of its native peak RSS (first native run)
    /// [default: 0.4, or the program's own floor where its working set is its whole peak].
    #[arg(long)]
    pub limit_fraction: Option<f64>,
    /// uswap tiers: `uswap run`'s default, a user's out-of-the-box setup. uswap charges its
    /// compressed pool to the limit (as cgroup v2 charges zswap), the kernel side's zram is
    /// not charged; so what does not fit goes to a swap file here. `zero,lz4` keeps all in RAM.
    #[arg(long, default_value = "zero,lz4:recomp=zstd,file:/var/tmp")]
    pub tiers: String,
    /// uswap folio size (4K, 64K or 2M).
    #[arg(long, default_value = "64K")]
    pub folio: String,
    /// Directory for generated inputs and outputs [default: a new directory in /var/tmp,
    /// removed at the end].
    #[arg(long)]
    pub workdir: Option<PathBuf>,
    /// Keep the work directory (outputs of every run).
    #[arg(long)]
    pub keep: bool,
    /// List the programs and exit.
    #[arg(long)]
    pub list: bool,
}

/// The smallest limit handed out (the cgroup must hold a runtime's own libraries).
const MIN_LIMIT: u64 = 16 << 20;
/// Allowance over limit + fixed overhead in the RSS target.
const RSS_TARGET_SLACK: f64 = 0.10;
/// Lines of a failed run's stderr quoted in the report.
const STDERR_TAIL: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Native,
    Kernel,
    Uswap,
}

impl Side {
    fn key(self) -> &'static str {
        match self {
            Side::Native => "native",
            Side::Kernel => "kernel",
            Side::Uswap => "uswap",
        }
    }
}

/// One run of one program on one side.
#[derive(Debug, Clone, Default)]
struct RunRec {
    side: &'static str,
    round: u32,
    outcome: &'static str,
    secs: f64,
    peak_rss: u64,
    cgroup_peak: Option<u64>,
    correct: Option<bool>,
    diff: Option<String>,
    error: Option<String>,
    stacks: Option<String>,
    fixed_overhead: Option<u64>,
    evicted_bytes: Option<u64>,
    swapped_out_bytes: Option<u64>,
    /// Bytes swapped in (kernel: `pswpin`; uswap: every process's `swap.pswpin`).
    swapped_in_bytes: Option<u64>,
    processes: Option<u64>,
    /// uswap: [`UswapStats::tree_peak`].
    tree_peak: Option<u64>,
}

impl RunRec {
    fn json(&self) -> Value {
        json!({
            "side": self.side, "round": self.round, "outcome": self.outcome, "secs": r3(self.secs),
            "peak_rss_bytes": self.peak_rss, "cgroup_peak_bytes": self.cgroup_peak, "correct": self.correct,
            "diff": self.diff, "error": self.error, "fixed_overhead_bytes": self.fixed_overhead,
            "evicted_bytes": self.evicted_bytes, "swapped_out_bytes": self.swapped_out_bytes,
            "swapped_in_bytes": self.swapped_in_bytes, "processes_with_stats": self.processes,
            "tree_peak_anon_pss_bytes": self.tree_peak,
        })
    }
}

/// Kernel state for the comparison.
struct KernelSide {
    guard: Restore,
    zram: Option<setup::Zram>,
    disksize: u64,
    cgroup_version: Option<u8>,
    skipped: Option<String>,
    seq: u32,
}

fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    Some(if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 })
}

fn median_u(v: &[u64]) -> Option<u64> {
    median(&v.iter().map(|&x| x as f64).collect::<Vec<_>>()).map(|x| x.round() as u64)
}

fn geomean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp())
}

fn mib(b: u64) -> String {
    format!("{:.1}M", b as f64 / (1u64 << 20) as f64)
}

fn setup_kernel(want: bool) -> KernelSide {
    let mut k = KernelSide {
        guard: Restore::new(Box::new(RealOps::default())),
        zram: None,
        disksize: 0,
        cgroup_version: None,
        skipped: None,
        seq: 0,
    };
    if !want {
        k.skipped = Some("not requested (--compare none)".into());
        return k;
    }
    if !kernel::is_root() {
        k.skipped = Some("needs root (to set up zram, swapon and a memory cgroup); run with sudo".into());
        return k;
    }
    // Probe the cgroup (created and removed again).
    let probe = format!("uswap-programs-{}-probe", std::process::id());
    match setup::setup_cgroup(&mut k.guard, &probe, 1 << 30) {
        Ok(cg) => {
            k.cgroup_version = Some(cg.version);
            if let Err(e) = k.guard.undo_now(&Undo::Rmdir(cg.dir)) {
                k.skipped = Some(format!("memory cgroup: cannot remove {probe}: {e}"));
                return k;
            }
        }
        Err(e) => {
            k.skipped = Some(format!("memory cgroup: {e}"));
            return k;
        }
    }
    // zswap would sit in front of zram: off for the benchmark, restored afterwards.
    let zswap = Path::new("sys/module/zswap/parameters/enabled");
    if let Ok(old) = k.guard.ops().read(zswap) {
        if old == "Y" {
            match k.guard.ops().write(zswap, "N") {
                Ok(()) => k.guard.done(Undo::Write { rel: zswap.into(), value: old }),
                Err(e) => {
                    k.skipped = Some(format!("cannot turn zswap off for the zram runs: {e}"));
                    return k;
                }
            }
        }
    }
    // zram's disksize is virtual (it holds what is swapped out, compressed): half of RAM, as
    // zram-generator's default, is more than any program of the suite swaps out.
    let mem_total =
        k.guard.ops().read(Path::new("proc/meminfo")).ok().and_then(|s| kernel::kb_field(&s, "MemTotal:")).unwrap_or(0)
            * 1024;
    k.disksize = (mem_total / 2) & !4095;
    match setup::setup_zram(&mut k.guard, k.disksize, "lz4") {
        Ok(z) => k.zram = Some(z),
        Err(e) => k.skipped = Some(format!("zram: {e}")),
    }
    k
}

/// Everything one run needs to know about its side.
struct SideCtx<'a> {
    side: Side,
    limit: u64,
    /// `uswap run --tiers` and `--folio`.
    tiers: &'a str,
    folio: &'a str,
    exe: &'a Path,
    stats: PathBuf,
    procs: Option<PathBuf>,
}

impl SideCtx<'_> {
    /// The command that runs `argv` on this side.
    fn command(&self, argv: &[OsString]) -> Result<Command, String> {
        let mut cmd = match self.side {
            Side::Native | Side::Kernel => {
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]).env_remove("LD_PRELOAD");
                c
            }
            Side::Uswap => {
                let mut c = Command::new(self.exe);
                c.args(["run", "--limit", &self.limit.to_string(), "--tiers", self.tiers, "--folio", self.folio])
                    .arg("--stats")
                    .arg(&self.stats)
                    .arg("--")
                    .args(argv);
                c
            }
        };
        if let Some(p) = &self.procs {
            runner::join_cgroup_on_exec(&mut cmd, p)?;
        }
        Ok(cmd)
    }
}

/// Read `uswap run --stats` (docs/stats.md): (fixed overhead, swapped-out bytes, processes).
/// None when absent (killed before writing it, or empty).
fn uswap_stats(p: &Path) -> Option<UswapStats> {
    uswap_stats_of(&serde_json::from_slice(&std::fs::read(p).ok()?).ok()?)
}

/// [`uswap_stats`] of the statistics already read.
fn uswap_stats_of(v: &Value) -> Option<UswapStats> {
    let procs: Vec<&Value> = v
        .get("main")
        .filter(|m| !m.is_null())
        .into_iter()
        .chain(v.get("other_processes").and_then(Value::as_array).into_iter().flatten())
        .collect();
    // docs/stats.md (schema 1); the keys before it as a fallback.
    let u = |x: &Value, p: &[&str]| p.iter().find_map(|p| x.pointer(p).and_then(Value::as_u64)).unwrap_or(0);
    let fixed = procs.iter().map(|x| u(x, &["/fixed_overhead_bytes", "/rss_at_start_bytes"])).max().unwrap_or(0);
    let evicted = procs.iter().map(|x| u(x, &["/swap/pswpout", "/pager/evicted_pages"]) * 4096).sum();
    let swapped_in = procs.iter().map(|x| u(x, &["/swap/pswpin"]) * 4096).sum();
    let tree_peak = v.pointer("/tree_peak/anon_pss_bytes").and_then(Value::as_u64);
    (!procs.is_empty()).then_some(UswapStats { fixed, evicted, swapped_in, processes: procs.len() as u64, tree_peak })
}

/// What [`uswap_stats`] reads from `uswap run --stats`.
struct UswapStats {
    /// The largest process's fixed overhead.
    fixed: u64,
    /// Bytes swapped out and in, every process.
    evicted: u64,
    swapped_in: u64,
    /// Processes with statistics.
    processes: u64,
    /// The tree's peak anonymous memory (the largest sum of `Pss_Anon` over its processes,
    /// sampled every 200 ms by `uswap run`), when it ran several processes.
    tree_peak: Option<u64>,
}

/// Compare two files byte for byte: None when equal, else where they differ.
fn compare_files(a: &Path, b: &Path) -> Option<String> {
    use std::io::Read;
    let open = |p: &Path| std::fs::File::open(p).map(|f| std::io::BufReader::with_capacity(1 << 20, f));
    let (mut fa, mut fb) = match (open(a), open(b)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) => return Some(format!("{}: {e}", a.display())),
        (_, Err(e)) => return Some(format!("{}: {e}", b.display())),
    };
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    let mut off = 0u64;
    loop {
        let na = read_full(&mut fa, &mut ba);
        let nb = read_full(&mut fb, &mut bb);
        if let Some(i) = ba[..na.min(nb)].iter().zip(&bb[..na.min(nb)]).position(|(x, y)| x != y) {
            return Some(format!("differs at byte {}", off + i as u64));
        }
        if na != nb {
            let len = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
            return Some(format!("{} bytes instead of {}", len(b), len(a)));
        }
        if na == 0 {
            return None;
        }
        off += na as u64;
    }
    fn read_full(r: &mut impl Read, buf: &mut [u8]) -> usize {
        let mut n = 0;
        while n < buf.len() {
            match r.read(&mut buf[n..]) {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
        n
    }
}

fn tail(p: &Path) -> String {
    let s = std::fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(STDERR_TAIL)..].join(" | ")
}

/// `uswap run` keeps its processes' statistics in its tree directory (`live.rs`: the run
/// directory's `PID`, or `$TMPDIR/uswap-run-PID-N`) and removes it when the program ends; a
/// `uswap run` we killed (timeout) leaves it behind: remove it.
fn remove_run_statsdir(pid: i32) {
    if pid <= 0 {
        return;
    }
    if let Ok(d) = crate::live::run_dir() {
        let _ = std::fs::remove_dir_all(d.join(pid.to_string()));
    }
    let prefix = format!("uswap-run-{pid}-");
    if let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) {
        for e in rd.flatten() {
            if e.file_name().to_str().is_some_and(|n| n.strip_prefix(&prefix).is_some_and(|r| r.parse::<u32>().is_ok()))
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

/// What the kernel side adds around a run.
struct KernelRun {
    cg: setup::Cgroup,
    dev: PathBuf,
    before: std::collections::BTreeMap<String, u64>,
}

fn kernel_begin(k: &mut KernelSide, limit: u64) -> Result<KernelRun, String> {
    let z = k.zram.clone().ok_or("no zram")?;
    k.seq += 1;
    let name = format!("uswap-programs-{}-{}", std::process::id(), k.seq);
    let cg = setup::setup_cgroup(&mut k.guard, &name, limit)?;
    if let Err(e) = setup::swapon(&mut k.guard, &z.dev) {
        let _ = k.guard.undo_now(&Undo::Rmdir(cg.dir.clone()));
        return Err(e);
    }
    let before = kernel::vmstat(k.guard.ops());
    Ok(KernelRun { cg, dev: z.dev, before })
}

/// What the kernel side measured around one run.
struct KernelEnd {
    /// The cgroup's peak usage.
    peak: Option<u64>,
    /// OOM kills in the cgroup.
    ooms: u64,
    /// Bytes swapped out and in (`/proc/vmstat` `pswpout`, `pswpin`: the cgroup's zram device
    /// is the machine's only swap while it runs).
    out_bytes: u64,
    in_bytes: u64,
    /// What failed while restoring the machine.
    errs: Vec<String>,
}

/// Measure the run's end; swapoff and remove the cgroup.
fn kernel_end(k: &mut KernelSide, kr: KernelRun) -> KernelEnd {
    let ops = k.guard.ops();
    let after = kernel::vmstat(ops);
    let diff = |key: &str| {
        after.get(key).copied().unwrap_or(0).saturating_sub(kr.before.get(key).copied().unwrap_or(0)) * 4096
    };
    let (out_bytes, in_bytes) = (diff("pswpout"), diff("pswpin"));
    let (peak_file, events) = if kr.cg.version == 1 {
        ("memory.max_usage_in_bytes", "memory.oom_control")
    } else {
        ("memory.peak", "memory.events")
    };
    let peak = ops.read(&kr.cg.dir.join(peak_file)).ok().and_then(|s| s.parse().ok());
    let ooms = ops
        .read(&kr.cg.dir.join(events))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill ").and_then(|n| n.trim().parse::<u64>().ok()))
        .unwrap_or(0);
    let mut errs = Vec::new();
    if let Err(e) = setup::swapoff(&mut k.guard, &kr.dev) {
        errs.push(e);
    }
    if let Err(e) = k.guard.undo_now(&Undo::Rmdir(kr.cg.dir.clone())) {
        errs.push(e);
    }
    KernelEnd { peak, ooms, out_bytes, in_bytes, errs }
}

/// Run `body` once on `sc.side` in `dir`.
fn run_once(
    body: &Body,
    sc: &SideCtx,
    dir: &Path,
    k: &mut KernelSide,
    timeout: Duration,
    pb: &ProgressBar,
) -> Result<RunRec, String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let _ = std::fs::remove_file(&sc.stats);
    let stdout = dir.join("stdout");
    let stderr = dir.join("stderr");
    let kr = if sc.side == Side::Kernel { Some(kernel_begin(k, sc.limit)?) } else { None };
    let procs = kr.as_ref().map(|kr| kr.cg.procs_file(k.guard.ops()));
    let sc = SideCtx { procs, stats: sc.stats.clone(), ..*sc };
    let mut print = |s: &str| pb.suspend(|| eprintln!("{s}"));
    let deadline = Instant::now() + timeout;
    let (waited, error) = match body {
        Body::Cmd(spec) => {
            let res = (|| -> Result<runner::Waited, String> {
                let mut cmd = sc.command(&spec.argv)?;
                let out = std::fs::File::create(&stdout).map_err(|e| e.to_string())?;
                let err = std::fs::File::create(&stderr).map_err(|e| e.to_string())?;
                let inp = match &spec.stdin {
                    Some(p) => Stdio::from(std::fs::File::open(p).map_err(|e| format!("{}: {e}", p.display()))?),
                    None => Stdio::null(),
                };
                cmd.current_dir(dir).stdin(inp).stdout(out).stderr(err);
                for (key, v) in &spec.env {
                    cmd.env(key, v);
                }
                let mut p = runner::spawn(&mut cmd, None)?;
                Ok(p.wait(deadline, &mut print))
            })();
            match res {
                Ok(w) => (Some(w), None),
                Err(e) => (None, Some(e)),
            }
        }
        Body::Redis(plan) => {
            let o = redis::run(plan, dir, &stdout, &|argv| sc.command(argv), deadline, &mut print);
            (Some(o.waited), o.error)
        }
    };
    kernel::set_child(0);
    let mut rec = RunRec { side: sc.side.key(), ..Default::default() };
    let mut oom = false;
    if let Some(kr) = kr {
        let e = kernel_end(k, kr);
        rec.cgroup_peak = e.peak;
        rec.swapped_out_bytes = Some(e.out_bytes);
        rec.swapped_in_bytes = Some(e.in_bytes);
        oom = e.ooms > 0;
        if !e.errs.is_empty() {
            return Err(format!("kernel side: {}", e.errs.join("; ")));
        }
    }
    if sc.side == Side::Uswap {
        if let Some(u) = uswap_stats(&sc.stats) {
            rec.fixed_overhead = Some(u.fixed);
            rec.evicted_bytes = Some(u.evicted);
            rec.swapped_in_bytes = Some(u.swapped_in);
            rec.processes = Some(u.processes);
            rec.tree_peak = u.tree_peak;
        }
    }
    match waited {
        Some(w) => {
            if sc.side == Side::Uswap && (w.stacks.is_some() || w.signal().is_some()) {
                remove_run_statsdir(w.pid);
            }
            rec.secs = w.secs;
            rec.peak_rss = w.peak_rss;
            // An OOM kill anywhere in the cgroup is the kernel's failure even when the command
            // exits 0: a pipeline whose `awk` the kernel killed still ends with `sha256sum`'s
            // success, over a truncated input (2026-11-28: counted once as a wrong output and a
            // speed ratio).
            rec.outcome = if w.stacks.is_some() {
                "timeout"
            } else if oom {
                "oom"
            } else if w.success() && error.is_none() {
                "ok"
            } else {
                "error"
            };
            if rec.outcome == "error" || rec.outcome == "oom" {
                let what = match &error {
                    Some(e) => e.clone(),
                    None if w.success() => "the kernel OOM-killed a process of the tree (the command exited 0)".into(),
                    None => w.describe(),
                };
                let t = tail(&stderr);
                rec.error = Some(if t.is_empty() { what } else { format!("{what}; stderr: {t}") });
            }
            rec.stacks = w.stacks;
        }
        None => {
            rec.outcome = "error";
            rec.error = error;
        }
    }
    Ok(rec)
}

/// One program's results.
struct ProgRes {
    name: &'static str,
    runtime: &'static str,
    about: &'static str,
    command: String,
    limit: Option<u64>,
    /// The fraction of the native peak the limit was set to (None with `--limit`).
    fraction: Option<f64>,
    runs: Vec<RunRec>,
}

impl ProgRes {
    fn side(&self, s: Side) -> Vec<&RunRec> {
        self.runs.iter().filter(|r| r.side == s.key()).collect()
    }
    /// ok / oom / timeout / error (the worst of the runs), None when the side did not run.
    fn outcome(&self, s: Side) -> Option<&'static str> {
        let v = self.side(s);
        if v.is_empty() {
            return None;
        }
        ["timeout", "oom", "error"].into_iter().find(|o| v.iter().any(|r| r.outcome == *o)).or(Some("ok"))
    }
    fn correct(&self, s: Side) -> Option<bool> {
        let v = self.side(s);
        (!v.is_empty()).then(|| v.iter().all(|r| r.outcome == "ok" && r.correct != Some(false)))
    }
    fn secs(&self, s: Side) -> Option<f64> {
        median(&self.side(s).iter().filter(|r| r.outcome == "ok").map(|r| r.secs).collect::<Vec<_>>())
    }
    fn peak(&self, s: Side) -> Option<u64> {
        // A run killed at its deadline has no peak of its own (wait4 then reports the runner's).
        median_u(
            &self
                .side(s)
                .iter()
                .filter(|r| r.peak_rss > 0 && r.outcome != "timeout")
                .map(|r| r.peak_rss)
                .collect::<Vec<_>>(),
        )
    }
    fn opt(&self, s: Side, f: impl Fn(&RunRec) -> Option<u64>) -> Option<u64> {
        median_u(&self.side(s).iter().filter_map(|r| f(r)).collect::<Vec<_>>())
    }
    fn ratio(&self) -> Option<f64> {
        match (self.secs(Side::Kernel), self.secs(Side::Uswap)) {
            (Some(k), Some(u))
                if u > 0.0
                    && self.outcome(Side::Kernel) == Some("ok")
                    && self.correct(Side::Kernel) != Some(false)
                    && self.correct(Side::Uswap) == Some(true) =>
            {
                Some(k / u)
            }
            _ => None,
        }
    }
    /// Whether the tree's peak anonymous memory (several processes) stayed within the same
    /// bound as the largest process's RSS (None: one process, or no statistics).
    fn tree_within(&self) -> Option<bool> {
        self.rss_bound().zip(self.opt(Side::Uswap, |r| r.tree_peak)).map(|(b, t)| t <= b)
    }

    fn rss_bound(&self) -> Option<u64> {
        let fixed = self.opt(Side::Uswap, |r| r.fixed_overhead)?;
        Some(((self.limit? + fixed) as f64 * (1.0 + RSS_TARGET_SLACK)) as u64)
    }

    fn json(&self) -> Value {
        let first_stacks = |s: Side| self.side(s).iter().find_map(|r| r.stacks.clone());
        json!({
            "name": self.name,
            "runtime": self.runtime,
            "about": self.about,
            "command": self.command,
            "limit_bytes": self.limit,
            "limit_fraction": self.fraction,
            "native_s": self.secs(Side::Native).map(r3),
            "kernel_s": self.secs(Side::Kernel).map(r3),
            "uswap_s": self.secs(Side::Uswap).map(r3),
            "speed_ratio": self.ratio().map(r3),
            "native_peak_rss_bytes": self.peak(Side::Native),
            "kernel_peak_bytes": self.peak(Side::Kernel),
            "kernel_cgroup_peak_bytes": self.opt(Side::Kernel, |r| r.cgroup_peak),
            "kernel_swapped_out_bytes": self.opt(Side::Kernel, |r| r.swapped_out_bytes),
            "kernel_swapped_in_bytes": self.opt(Side::Kernel, |r| r.swapped_in_bytes),
            "uswap_peak_rss_bytes": self.peak(Side::Uswap),
            "uswap_fixed_overhead_bytes": self.opt(Side::Uswap, |r| r.fixed_overhead),
            "uswap_evicted_bytes": self.opt(Side::Uswap, |r| r.evicted_bytes),
            "uswap_swapped_in_bytes": self.opt(Side::Uswap, |r| r.swapped_in_bytes),
            "uswap_rss_target_bytes": self.rss_bound(),
            "uswap_rss_within_target": self.rss_bound().zip(self.peak(Side::Uswap)).map(|(b, p)| p <= b),
            "uswap_tree_peak_anon_pss_bytes": self.opt(Side::Uswap, |r| r.tree_peak),
            "uswap_tree_within_target": self.tree_within(),
            "correct": self.correct(Side::Uswap),
            "kernel_correct": self.correct(Side::Kernel),
            "native_outcome": self.outcome(Side::Native),
            "kernel_outcome": self.outcome(Side::Kernel),
            "uswap_outcome": self.outcome(Side::Uswap),
            "native_stacks": first_stacks(Side::Native),
            "kernel_stacks": first_stacks(Side::Kernel),
            "uswap_stacks": first_stacks(Side::Uswap),
            "runs": self.runs.iter().map(RunRec::json).collect::<Vec<_>>(),
        })
    }
}

/// The work directory, removed at the end unless kept.
struct WorkDir {
    path: PathBuf,
    keep: bool,
    created: bool,
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.created && !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

fn select(a: &Args) -> Result<Vec<Program>, CliError> {
    let all = suite::all();
    let Some(only) = &a.only else { return Ok(all) };
    let names: Vec<&str> = only.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    for n in &names {
        if !all.iter().any(|p| p.name == *n) {
            let known: Vec<&str> = all.iter().map(|p| p.name).collect();
            return Err(CliError::usage(format!("--only {n}: no such program (known: {})", known.join(", "))));
        }
    }
    Ok(all.into_iter().filter(|p| names.contains(&p.name)).collect())
}

fn check(a: &Args) -> Result<(), CliError> {
    if !matches!(a.compare.as_str(), "kernel" | "zram" | "none") {
        return Err(CliError::usage(format!("--compare {:?}: expected kernel, zram or none", a.compare)));
    }
    if a.runs == 0 || a.runs > 100 {
        return Err(CliError::usage(format!("--runs {}: must be 1..=100", a.runs)));
    }
    if a.timeout == 0 {
        return Err(CliError::usage("--timeout must be at least 1 second"));
    }
    if !(a.scale > 0.0 && a.scale <= 100.0) {
        return Err(CliError::usage(format!("--scale {}: must be in (0, 100]", a.scale)));
    }
    if let Some(f) = a.limit_fraction {
        if !(f > 0.0 && f <= 1.0) {
            return Err(CliError::usage(format!("--limit-fraction {f}: must be in (0, 1]")));
        }
    }
    if let Some(l) = a.limit {
        if l < MIN_LIMIT {
            return Err(CliError::usage(format!("--limit {}: at least {}", fmt_size(l), fmt_size(MIN_LIMIT))));
        }
    }
    match parse_size(&a.folio) {
        Ok(4096 | 65536 | 2097152) => {}
        _ => return Err(CliError::usage(format!("--folio {:?}: expected 4K, 64K or 2M", a.folio))),
    }
    Ok(())
}

/// Run the benchmark.
pub fn run(a: &Args) -> CliResult {
    check(a)?;
    let progs = select(a)?;
    if a.list {
        for p in &progs {
            let floor = if p.floor > suite::DEFAULT_FRACTION {
                format!(" (limit {} x native peak: its working set is its whole peak)", p.floor)
            } else {
                String::new()
            };
            println!("{:<14} {:<14} {}{floor}", p.name, p.runtime, p.about);
        }
        return Ok(());
    }
    kernel::install_signal_handlers();
    let exe = std::env::current_exe().map_err(|e| CliError::fail(format!("cannot find my own executable: {e}")))?;
    let facts = kernel::machine_facts(&RealOps::default());
    let path =
        a.workdir.clone().unwrap_or_else(|| PathBuf::from(format!("/var/tmp/uswap-programs-{}", std::process::id())));
    let mut work = WorkDir { path, keep: a.keep, created: false };
    if !work.path.exists() {
        std::fs::create_dir_all(&work.path).map_err(|e| CliError::fail(format!("{}: {e}", work.path.display())))?;
        work.created = true;
    }
    let mut k = setup_kernel(a.compare != "none");
    if kernel::interrupted() {
        return Err(CliError::fail("interrupted; the machine was restored"));
    }
    let mut sides = vec![Side::Native];
    if k.zram.is_some() {
        sides.push(Side::Kernel);
    }
    sides.push(Side::Uswap);

    let total = progs.len() as u64 * u64::from(a.runs) * sides.len() as u64;
    let pb = if a.json {
        ProgressBar::hidden()
    } else {
        let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        pb.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        pb.enable_steady_tick(Duration::from_millis(250));
        pb
    };
    if let Some(w) = &k.skipped {
        if a.compare != "none" {
            pb.println(format!("kernel zram: skipped: {w}"));
        }
    }
    let timeout = Duration::from_secs(a.timeout);
    let mut results: Vec<ProgRes> = Vec::new();
    let mut skipped: Vec<Value> = Vec::new();
    for prog in &progs {
        let pdir = work.path.join(prog.name);
        let _ = std::fs::remove_dir_all(&pdir);
        let inputs = pdir.join("inputs");
        if let Err(e) = std::fs::create_dir_all(&inputs) {
            return Err(CliError::fail(format!("{}: {e}", inputs.display())));
        }
        pb.set_message(format!("{}: preparing", prog.name));
        let body = match prog.prepare(&suite::Ctx { dir: &inputs, scale: a.scale }) {
            Ok(b) => b,
            Err(e) => {
                pb.println(format!("{}: skipped: {e}", prog.name));
                skipped.push(json!({ "name": prog.name, "reason": e }));
                pb.inc(u64::from(a.runs) * sides.len() as u64);
                continue;
            }
        };
        let command = match &body {
            Body::Cmd(c) => c.display(),
            Body::Redis(p) => p.display(),
        };
        let mut res = ProgRes {
            name: prog.name,
            runtime: prog.runtime,
            about: prog.about,
            command,
            limit: a.limit,
            fraction: a.limit.is_none().then(|| prog.limit_fraction(a.limit_fraction)),
            runs: vec![],
        };
        let reference = pdir.join("native-1");
        let mut outputs: Vec<String> = vec!["stdout".into()];
        if let Body::Cmd(c) = &body {
            outputs.extend(c.outputs.iter().map(|s| s.to_string()));
        }
        let mut have_reference = false;
        'rounds: for round in 1..=a.runs {
            for &side in &sides {
                pb.set_message(format!(
                    "{} round {round}/{}: {}{}",
                    prog.name,
                    a.runs,
                    side.key(),
                    res.limit.map(|l| format!(" (limit {})", mib(l))).unwrap_or_default()
                ));
                let limit = match (side, res.limit) {
                    (Side::Native, _) => 0,
                    (_, Some(l)) => l,
                    (_, None) => {
                        res.runs.push(RunRec {
                            side: side.key(),
                            round,
                            outcome: "error",
                            error: Some("no limit: the native run that sets it failed".into()),
                            ..Default::default()
                        });
                        pb.inc(1);
                        continue;
                    }
                };
                let dir = pdir.join(format!("{}-{round}", side.key()));
                let sc = SideCtx {
                    side,
                    limit,
                    tiers: &a.tiers,
                    folio: &a.folio,
                    exe: &exe,
                    stats: pdir.join("uswap-stats.json"),
                    procs: None,
                };
                let mut rec = match run_once(&body, &sc, &dir, &mut k, timeout, &pb) {
                    Ok(r) => r,
                    Err(e) => RunRec { side: side.key(), outcome: "error", error: Some(e), ..Default::default() },
                };
                rec.round = round;
                if kernel::interrupted() {
                    pb.finish_and_clear();
                    return Err(CliError::fail("interrupted; the machine was restored"));
                }
                if side == Side::Native && round == 1 && rec.outcome == "ok" {
                    have_reference = true;
                    if let (None, Some(f)) = (res.limit, res.fraction) {
                        let peak = rec.peak_rss * u64::from(prog.at_once);
                        let l = ((peak as f64 * f) as u64).max(MIN_LIMIT) >> 20 << 20;
                        res.limit = Some(l);
                    }
                } else if rec.outcome == "ok" && have_reference {
                    let diffs: Vec<String> = outputs
                        .iter()
                        .filter_map(|f| compare_files(&reference.join(f), &dir.join(f)).map(|d| format!("{f}: {d}")))
                        .collect();
                    rec.correct = Some(diffs.is_empty());
                    if !diffs.is_empty() {
                        rec.diff = Some(diffs.join("; "));
                    }
                    if !a.keep {
                        let _ = std::fs::remove_dir_all(&dir);
                    }
                } else if rec.outcome != "ok" && !a.keep {
                    // Keep only stderr: the output is of no use.
                    for f in &outputs {
                        let _ = std::fs::remove_file(dir.join(f));
                    }
                }
                if side == Side::Native && round == 1 && rec.outcome == "ok" {
                    rec.correct = Some(true);
                }
                if !a.json {
                    pb.println(format!(
                        "{:<13} {:<6} round {round}: {:<7} {:>8.2} s  peak RSS {:>8}{}{}{}",
                        prog.name,
                        side.key(),
                        rec.outcome,
                        rec.secs,
                        mib(rec.peak_rss),
                        rec.cgroup_peak.map(|c| format!(" (cgroup {})", mib(c))).unwrap_or_default(),
                        match rec.correct {
                            Some(false) => format!("  WRONG OUTPUT: {}", rec.diff.clone().unwrap_or_default()),
                            _ => String::new(),
                        },
                        rec.error.as_ref().map(|e| format!("  {e}")).unwrap_or_default(),
                    ));
                }
                let stop = side == Side::Native && round == 1 && rec.outcome != "ok" && a.limit.is_none();
                res.runs.push(rec);
                pb.inc(1);
                if stop {
                    pb.inc((u64::from(a.runs) * sides.len() as u64).saturating_sub(1));
                    break 'rounds;
                }
            }
        }
        if !a.keep {
            let _ = std::fs::remove_dir_all(&inputs);
        }
        results.push(res);
    }
    pb.finish_and_clear();
    let restore_errors = k.guard.restore();

    // Summary.
    let mut failures: Vec<String> = Vec::new();
    let mut ratios = Vec::new();
    let mut over = Vec::new();
    let mut excluded: Vec<Value> = Vec::new();
    for r in &results {
        // The kernel side's own failures (OOM kills, a wrong output, a timeout) are reported in
        // its outcome and keep the program out of the geometric mean; they are not uswap's.
        for rec in r.runs.iter().filter(|rec| rec.side != Side::Kernel.key()) {
            let what = format!("{} {} round {}", r.name, rec.side, rec.round);
            match rec.outcome {
                "ok" if rec.correct == Some(false) => {
                    failures.push(format!("{what}: wrong output: {}", rec.diff.clone().unwrap_or_default()))
                }
                "ok" => {}
                "oom" => {}
                "timeout" => failures.push(format!("{what}: timeout after {} s (stacks printed)", a.timeout)),
                _ => failures.push(format!("{what}: {}", rec.error.clone().unwrap_or_else(|| rec.outcome.into()))),
            }
        }
        if sides.contains(&Side::Kernel) {
            match r.ratio() {
                Some(x) => {
                    ratios.push(x);
                    over.push(r.name);
                }
                None => {
                    let why = match (r.outcome(Side::Kernel), r.outcome(Side::Uswap), r.correct(Side::Uswap)) {
                        (Some("oom"), _, _) => {
                            "the kernel OOM-killed it under this limit (not counted as a uswap win)".to_string()
                        }
                        (Some("ok"), _, _) if r.correct(Side::Kernel) == Some(false) => {
                            "the kernel's output was wrong (not counted as a uswap win)".to_string()
                        }
                        (k, u, c) => format!(
                            "kernel {}, uswap {}{}",
                            k.unwrap_or("-"),
                            u.unwrap_or("-"),
                            if c == Some(false) && u == Some("ok") { " (wrong output)" } else { "" }
                        ),
                    };
                    excluded.push(json!({ "name": r.name, "reason": why }));
                }
            }
        }
    }
    let geo = geomean(&ratios);
    let doc = json!({
        "scale": a.scale,
        "runs": a.runs,
        "timeout_s": a.timeout,
        "limit": a.limit,
        "limit_fraction": if a.limit.is_some() { None } else { Some(a.limit_fraction.unwrap_or(suite::DEFAULT_FRACTION)) },
        "tiers": a.tiers,
        "folio": a.folio,
        "compare": a.compare,
        "kernel_skipped": k.skipped,
        "kernel_setup": {
            "zram_device": k.zram.as_ref().map(|z| format!("/dev/zram{}", z.id)),
            "zram_comp_algorithm": k.zram.as_ref().map(|_| "lz4"),
            "zram_disksize_bytes": k.zram.as_ref().map(|_| k.disksize),
            "cgroup_version": k.cgroup_version,
        },
        "programs": results.iter().map(ProgRes::json).collect::<Vec<_>>(),
        "skipped": skipped,
        "geomean_speed_ratio": geo.map(r3),
        "geomean_over": over,
        "geomean_excluded": excluded,
        "failures": failures,
        "restore_errors": restore_errors,
        "workdir": work.path,
        "targets": "no hang; uswap output == native output; uswap peak RSS <= (limit + fixed overhead) * 1.1; geomean kernel_s/uswap_s >= 1.0",
    });
    let out = crate::report::with_header("programs", facts, doc);
    if a.json {
        println!("{out}");
    } else {
        print_table(a, &results, &sides, &k, geo, &over, &excluded, &skipped);
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
    if !failures.is_empty() {
        return Err(CliError::fail(format!("{} failure(s) (see above)", failures.len())));
    }
    Ok(())
}

#[expect(clippy::too_many_arguments, reason = "one call site; the pieces of the report")]
fn print_table(
    a: &Args,
    results: &[ProgRes],
    sides: &[Side],
    k: &KernelSide,
    geo: Option<f64>,
    over: &[&str],
    excluded: &[Value],
    skipped: &[Value],
) {
    println!(
        "programs: scale {}, {} round(s) (medians), timeout {} s; limit = {}; uswap tiers {} folio {}; kernel: {}",
        a.scale,
        a.runs,
        a.timeout,
        a.limit.map_or_else(
            || match a.limit_fraction {
                Some(f) => format!("{f} x native peak RSS"),
                None => format!("{} x native peak RSS (or the program's floor)", suite::DEFAULT_FRACTION),
            },
            fmt_size
        ),
        a.tiers,
        a.folio,
        match &k.skipped {
            None => format!("zram lz4 swap + memory cgroup v{}", k.cgroup_version.unwrap_or(0)),
            Some(w) => format!("skipped ({w})"),
        }
    );
    let f = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.2}"));
    let m = |x: Option<u64>| x.map_or("-".to_string(), mib);
    // Correctness only means something for a run that finished.
    let c = |r: &ProgRes, s: Side| match (r.outcome(s), r.correct(s)) {
        (Some("ok"), Some(true)) => "yes",
        (Some("ok"), Some(false)) => "NO",
        _ => "-",
    };
    let mut rows: Vec<[String; 14]> = vec![[
        "program",
        "limit",
        "native s",
        "kernel s",
        "uswap s",
        "k/u",
        "nat RSS",
        "kern RSS",
        "usw RSS",
        "fixed",
        "evicted",
        "RSS<=tgt",
        "outcome n/k/u",
        "correct k/u",
    ]
    .map(String::from)];
    for r in results {
        rows.push([
            r.name.to_string(),
            m(r.limit),
            f(r.secs(Side::Native)),
            f(r.secs(Side::Kernel)),
            f(r.secs(Side::Uswap)),
            r.ratio().map_or("-".into(), |x| format!("{x:.2}x")),
            m(r.peak(Side::Native)),
            m(r.peak(Side::Kernel)),
            m(r.peak(Side::Uswap)),
            m(r.opt(Side::Uswap, |x| x.fixed_overhead)),
            m(r.opt(Side::Uswap, |x| x.evicted_bytes)),
            match r.rss_bound().zip(r.peak(Side::Uswap)) {
                Some((b, p)) if p <= b && r.tree_within() != Some(false) => "yes".into(),
                Some(_) => "NO".into(),
                None => "-".into(),
            },
            format!(
                "{}/{}/{}",
                r.outcome(Side::Native).unwrap_or("-"),
                r.outcome(Side::Kernel).unwrap_or("-"),
                r.outcome(Side::Uswap).unwrap_or("-")
            ),
            format!("{}/{}", c(r, Side::Kernel), c(r, Side::Uswap)),
        ]);
    }
    for row in &rows {
        let mut line = format!("{:<13}", row[0]);
        for cell in &row[1..12] {
            line += &format!(" {cell:>8}");
        }
        line += &format!("  {:<17} {}", row[12], row[13]);
        println!("{line}");
    }
    if sides.contains(&Side::Kernel) {
        match geo {
            Some(g) => println!(
                "geomean speed ratio kernel_s/uswap_s: {g:.2}x over {} program(s): {}",
                over.len(),
                over.join(", ")
            ),
            None => println!("geomean speed ratio kernel_s/uswap_s: - (no program finished on both sides)"),
        }
        for e in excluded {
            println!(
                "  excluded from the geomean: {}: {}",
                e["name"].as_str().unwrap_or("?"),
                e["reason"].as_str().unwrap_or("?")
            );
        }
    }
    for s in skipped {
        println!("skipped: {}: {}", s["name"].as_str().unwrap_or("?"), s["reason"].as_str().unwrap_or("?"));
    }
    println!("RSS = peak RSS (wait4 ru_maxrss: the largest process of the tree); M = MiB; k/u = kernel_s / uswap_s (> 1: uswap faster)");
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

    fn parse(v: &[&str]) -> Args {
        T::try_parse_from(std::iter::once("t").chain(v.iter().copied())).map(|t| t.a).unwrap()
    }

    /// A program's floor raises the default fraction, never one given on the command line.
    #[test]
    fn a_programs_floor_raises_the_default_fraction_only() {
        let all = suite::all();
        let by = |n: &str| all.iter().find(|p| p.name == n).unwrap();
        assert_eq!(by("python-list").limit_fraction(None), suite::DEFAULT_FRACTION);
        assert_eq!(by("xz").limit_fraction(None), 0.8);
        assert_eq!(by("perl-hash").limit_fraction(None), 0.8);
        assert_eq!(by("xz").limit_fraction(Some(0.3)), 0.3);
        assert_eq!(by("python-list").limit_fraction(Some(0.9)), 0.9);
    }

    #[test]
    fn bad_arguments_exit_2() {
        for bad in [
            &["--compare", "btrfs"][..],
            &["--runs", "0"],
            &["--scale", "0"],
            &["--limit-fraction", "1.5"],
            &["--limit", "1M"],
            &["--folio", "lots"],
            &["--timeout", "0"],
        ] {
            let e = check(&parse(bad)).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad:?}: {}", e.msg);
        }
        let e = select(&parse(&["--only", "python-list,cobol"])).err().unwrap();
        assert!(e.msg.contains("cobol") && e.msg.contains("python-dict"), "{}", e.msg);
        assert_eq!(select(&parse(&["--only", "sort, redis"])).unwrap().len(), 2);
    }

    #[test]
    fn medians_geomean_dates() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[]), None);
        assert_eq!(median_u(&[4, 1, 2, 3]), Some(3));
        assert!((geomean(&[2.0, 0.5]).unwrap() - 1.0).abs() < 1e-12);
        let d = crate::report::now_utc();
        assert_eq!(d.len(), 20, "{d}");
        assert!(d.starts_with("20"), "{d}");
    }

    #[test]
    fn compares_files() {
        let d = std::env::temp_dir().join(format!("uswap-cmp-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let (a, b) = (d.join("a"), d.join("b"));
        std::fs::write(&a, vec![7u8; 200_000]).unwrap();
        std::fs::write(&b, vec![7u8; 200_000]).unwrap();
        assert_eq!(compare_files(&a, &b), None);
        let mut v = vec![7u8; 200_000];
        v[150_000] = 8;
        std::fs::write(&b, &v).unwrap();
        assert_eq!(compare_files(&a, &b).unwrap(), "differs at byte 150000");
        std::fs::write(&b, vec![7u8; 100]).unwrap();
        assert!(compare_files(&a, &b).unwrap().contains("100 bytes instead of 200000"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn outcomes_and_ratio_exclude_kernel_oom() {
        let rec = |side: &'static str, outcome: &'static str, secs: f64| RunRec {
            side,
            outcome,
            secs,
            peak_rss: 1,
            correct: Some(true),
            ..Default::default()
        };
        let mut p = ProgRes {
            name: "x",
            runtime: "x",
            about: "x",
            command: "x".into(),
            limit: Some(1 << 20),
            fraction: Some(0.4),
            runs: vec![rec("native", "ok", 1.0), rec("kernel", "ok", 4.0), rec("uswap", "ok", 2.0)],
        };
        assert_eq!(p.ratio(), Some(2.0));
        p.runs[1].outcome = "oom";
        assert_eq!(p.outcome(Side::Kernel), Some("oom"));
        assert_eq!(p.ratio(), None);
        p.runs[1].outcome = "ok";
        p.runs[2].correct = Some(false);
        assert_eq!(p.ratio(), None);
        assert_eq!(p.correct(Side::Uswap), Some(false));
        // A kernel run that finished with a wrong output (a pipeline stage OOM-killed) is no
        // ratio either.
        p.runs[2].correct = Some(true);
        assert_eq!(p.ratio(), Some(2.0));
        p.runs[1].correct = Some(false);
        assert_eq!(p.ratio(), None);
    }
}
