//! `uswap bench programs`: real, unmodified programs across runtimes (CPython, Node.js, the
//! JVM, SQLite, GNU sort, Redis, GCC, xz, Perl, a shell pipeline), each run natively, under two
//! kernel swap baselines, and under `uswap run --limit` (this same binary), interleaved per
//! round. The baselines, each with the program in a memory cgroup at the limit and one swap
//! device active at a time: `zram` (lz4 zram, zswap off) and `disk` (a swap file on /var/tmp
//! with zswap in front, its pool as the kernel sizes it). The uswap side runs in a memory
//! cgroup too, at the limit plus an allowance for the processes' own fixed overhead, with no
//! kernel swap: everything it holds in RAM (its pool, its swap file's page cache, its tables)
//! is charged there, and the cgroup's peak is its footprint. Every run has a deadline; a run
//! that misses it gets the stacks of every thread of its process tree printed and is killed.
//! Outputs (stdout and output files) are compared byte for byte with the native run's; wall
//! time and peak RSS are recorded; the kernel's own OOM kills are reported as such and left out
//! of the speed comparison, an OOM kill in uswap's cgroup is a failure. The suite is in
//! `suite`, the process handling in `runner`, the Redis scenario in `redis`.
//!
//! Locking: none; the main thread runs everything in turn (each child has a waiter thread).

pub mod bgsave;
mod redis;
mod rng;
mod runner;
mod suite;

use crate::kernel::{self, restore::Restore, restore::Undo, setup, RealOps, SysOps};
use crate::usemem::size::{fmt_size, parse_size};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use suite::{Body, Program};
use uswap_run::exit::{CliError, CliResult};

/// Options of `uswap bench programs`.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "\
Examples:
  uswap bench programs --compare kernel            the whole suite against kernel zram and disk swap (root)
  uswap bench programs --compare disk --only sqlite,redis --scale 0.3 --json
  uswap bench programs --list

Sides, interleaved per round: native; zram (lz4 zram as the only swap, zswap off, the program in \
a memory cgroup at the limit); disk (a swap file on /var/tmp as the only swap, the program in a \
memory cgroup at the limit; zswap in front of it with the kernel's own pool size where the cgroup \
charges zswap's pool, cgroup v2, not under v1: USWAP_BENCH_DISK_ZSWAP=on|off decides otherwise); uswap (uswap \
run --limit, in a memory cgroup at the limit + --uswap-allowance with no kernel swap, so that \
its pool, its swap file's page cache and its tables are charged: the cgroup's peak is its \
footprint). A cgroup v1 charges page cache but neither zram's RAM nor zswap's pool (v2 charges \
zswap's): the kernel sides hold more RAM than their limit.

Targets (reported, not asserted): no run hangs; every uswap output equals the native one; \
uswap's peak RSS (and a tree's peak anonymous Pss) stays within (limit + fixed overhead) + 10%; \
uswap's footprint stays within (limit + the fixed overheads of the tree's processes, summed) + \
10%; no OOM kill in uswap's cgroup; the geometric mean of kernel secs / uswap secs over the \
programs both finished is at least 1.0, against zram and against disk.

The limit of each program is --limit-fraction of its native peak RSS (measured by its first \
native run: the largest process's, counted twice for make-j2, which runs two compilers at \
once) unless --limit is given. Without --limit-fraction it is 0.4, or more for a program \
whose working set is its whole peak (xz's match finder and perl's hash resize walk all of \
it at random: 0.8; below that both thrash under any swap, see --list). The kernel sides charge \
everything the program touches (page cache too) to a memory cgroup with that limit, shared by \
all its processes; uswap limits the anonymous memory of the whole tree (one budget shared by \
all its processes), and each process's fixed overhead (the RSS when its pager had started) \
comes on top. Programs a kernel side OOM-kills are reported as its outcome \"oom\" and left out \
of that side's geometric mean.

JSON (--json), per program: limit_bytes; native_secs, kernel_zram_secs, kernel_disk_secs, \
uswap_secs (medians of the runs that finished; native_s and uswap_s are the same figures); \
speed_ratio_zram = kernel_zram_secs / uswap_secs, speed_ratio_disk = kernel_disk_secs / \
uswap_secs; footprint_peak_bytes (the largest peak of uswap's cgroup over the rounds: \
memory.max_usage_in_bytes, v2 memory.peak), footprint_bound_bytes (limit + the \
fixed_overhead_bytes of every process of the tree in uswap run --stats, summed: each process's \
libraries, runtime and uswap tables come on top of the shared limit), footprint_within \
(footprint_peak_bytes <= 1.1 x footprint_bound_bytes in every round); native_peak_rss_bytes, \
zram_peak_rss_bytes, disk_peak_rss_bytes, uswap_peak_rss_bytes (wait4's ru_maxrss: the largest \
process of the tree); uswap_tree_peak_anon_pss_bytes (a tree of several processes: the largest \
sum of their Pss_Anon, from uswap run --stats) and uswap_tree_within_target; \
zram_cgroup_peak_bytes, disk_cgroup_peak_bytes; uswap_fixed_overhead_bytes (the largest \
process's) and uswap_fixed_overhead_sum_bytes; uswap_evicted_bytes, uswap_swapped_in_bytes; \
zram_swapped_out_bytes, zram_swapped_in_bytes; disk_swapped_out_bytes, disk_swapped_in_bytes \
(pswpout, pswpin: the swap file's own I/O), disk_zswap_out_bytes, disk_zswap_in_bytes (zswpout, \
zswpin), disk_written_back_bytes (zswpwb); correct, zram_correct, disk_correct (output == native \
output); native_outcome, zram_outcome, disk_outcome, uswap_outcome (ok | oom | timeout | \
error); *_stacks (the stacks printed at a timeout); runs (every run). Top level: \
geomean_speed_ratio_zram with geomean_zram_over and geomean_zram_excluded (and why), the same \
for disk, min_speed_ratio_zram, min_speed_ratio_disk, footprints_within (every program's \
footprint_within) and footprints_over, uswap_allowance_bytes, failures (of the native and uswap \
runs: a kernel side's are its outcome and keep the program out of its mean), skipped (a runtime \
that is not installed), zram_skipped, disk_skipped, uswap_cgroup_skipped, kernel_setup, notes, \
machine, date.")]
pub struct Args {
    /// What to compare uswap with: kernel (= zram,disk), zram (lz4 zram swap), disk (zswap in
    /// front of a swap file), or none; the kernel sides run in a memory cgroup at the limit and
    /// need root.
    #[arg(long, default_value = "none")]
    pub compare: String,
    /// The room the uswap side's memory cgroup gives above the limit: the processes' own fixed
    /// overhead (their binaries' and libraries' pages, a runtime's text, uswap's tables), which
    /// the limit does not cover. An OOM kill there is a failure.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub uswap_allowance: u64,
    /// Print one JSON object instead of a table (and no progress bar).
    #[arg(long)]
    pub json: bool,
    /// Only these programs (comma-separated names; see --list).
    #[arg(long)]
    pub only: Option<String>,
    /// Interleaved rounds per program (native, zram, disk, uswap each round); medians are
    /// reported.
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
    #[arg(long, default_value = uswap_pager::launch::DEFAULT_TIERS)]
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
/// The largest --uswap-allowance accepted.
const MAX_ALLOWANCE: u64 = 64 << 30;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Native,
    /// Kernel swap on lz4 zram, zswap off, in a memory cgroup at the limit.
    Zram,
    /// Kernel swap on a swap file with zswap in front, in a memory cgroup at the limit.
    Disk,
    /// `uswap run --limit`, in a memory cgroup at the limit + the allowance.
    Uswap,
}

impl Side {
    fn key(self) -> &'static str {
        match self {
            Side::Native => "native",
            Side::Zram => "zram",
            Side::Disk => "disk",
            Side::Uswap => "uswap",
        }
    }
    /// The two kernel baselines.
    const KERNEL: [Side; 2] = [Side::Zram, Side::Disk];
}

/// Which kernel baselines `--compare` asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Want {
    zram: bool,
    disk: bool,
}

/// `--compare`: kernel (= zram,disk), zram, disk or none, comma-separated.
fn parse_compare(s: &str) -> Result<Want, String> {
    let mut w = Want::default();
    for c in s.split(',').map(str::trim) {
        match c {
            "kernel" => w = Want { zram: true, disk: true },
            "zram" => w.zram = true,
            "disk" => w.disk = true,
            "none" | "" => {}
            other => return Err(format!("--compare {other:?}: expected kernel (= zram,disk), zram, disk or none")),
        }
    }
    Ok(w)
}

/// One run of one program on one side.
#[derive(Debug, Clone, Default)]
struct RunRec {
    side: &'static str,
    round: u32,
    outcome: &'static str,
    secs: f64,
    peak_rss: u64,
    /// The peak of the run's memory cgroup (page cache included).
    cgroup_peak: Option<u64>,
    /// uswap: the peak of what its cgroup held other than unmapped page cache (sampled; see
    /// [`HeldSampler`]): its footprint, without the program's own file I/O.
    held_peak: Option<u64>,
    /// The limit of the run's memory cgroup.
    cgroup_limit: Option<u64>,
    /// Processes the kernel OOM-killed in the run's cgroup.
    oom_kills: Option<u64>,
    correct: Option<bool>,
    diff: Option<String>,
    error: Option<String>,
    stacks: Option<String>,
    /// uswap: the largest process's fixed overhead, and the sum over the tree's processes.
    fixed_overhead: Option<u64>,
    fixed_overhead_sum: Option<u64>,
    /// uswap: the limit + `fixed_overhead_sum`, what its footprint is held to.
    footprint_bound: Option<u64>,
    evicted_bytes: Option<u64>,
    /// Bytes written to the swap device (kernel: `pswpout`).
    swapped_out_bytes: Option<u64>,
    /// Bytes swapped in (kernel: `pswpin`; uswap: every process's `swap.pswpin`).
    swapped_in_bytes: Option<u64>,
    /// Disk side: bytes stored in zswap and loaded from it (`zswpout`, `zswpin`), and written
    /// back from it to the swap file (`zswpwb`).
    zswap_out_bytes: Option<u64>,
    zswap_in_bytes: Option<u64>,
    written_back_bytes: Option<u64>,
    processes: Option<u64>,
    /// uswap: [`UswapStats::tree_peak`].
    tree_peak: Option<u64>,
}

impl RunRec {
    /// uswap: the footprint against its bound + 10 % (None without both figures).
    fn footprint_within(&self) -> Option<bool> {
        let (p, b) = (self.footprint_peak()?, self.footprint_bound?);
        Some(p as f64 <= b as f64 * (1.0 + RSS_TARGET_SLACK))
    }

    /// uswap: its footprint ([`RunRec::held_peak`], or the cgroup's peak where it was not
    /// sampled).
    fn footprint_peak(&self) -> Option<u64> {
        self.held_peak.or(self.cgroup_peak)
    }

    fn json(&self) -> Value {
        let mut v = json!({
            "side": self.side, "round": self.round, "outcome": self.outcome, "secs": r3(self.secs),
            "peak_rss_bytes": self.peak_rss, "cgroup_peak_bytes": self.cgroup_peak,
            "cgroup_limit_bytes": self.cgroup_limit, "oom_kills": self.oom_kills, "correct": self.correct,
            "diff": self.diff, "error": self.error, "fixed_overhead_bytes": self.fixed_overhead,
            "fixed_overhead_sum_bytes": self.fixed_overhead_sum,
            "evicted_bytes": self.evicted_bytes, "swapped_out_bytes": self.swapped_out_bytes,
            "swapped_in_bytes": self.swapped_in_bytes, "zswap_out_bytes": self.zswap_out_bytes,
            "zswap_in_bytes": self.zswap_in_bytes, "written_back_bytes": self.written_back_bytes,
            "processes_with_stats": self.processes, "tree_peak_anon_pss_bytes": self.tree_peak,
        });
        if self.side == Side::Uswap.key() {
            v["footprint_peak_bytes"] = json!(self.footprint_peak());
            v["footprint_bound_bytes"] = json!(self.footprint_bound);
            v["footprint_within"] = json!(self.footprint_within());
        }
        v
    }
}

/// The machine's side of the comparison: the restore guard and what was set up.
struct KernelSide {
    guard: Restore,
    zram: Option<setup::Zram>,
    zram_disksize: u64,
    /// The disk side's swap file.
    disk: Option<setup::Zswap>,
    /// zswap in front of it: only where the memory cgroup charges zswap's pool (cgroup v2);
    /// under v1 its pool is RAM outside the limit, as zram's is, and the disk side would not
    /// be bounded. `USWAP_BENCH_DISK_ZSWAP=on|off` decides otherwise.
    disk_zswap: bool,
    disk_bytes: u64,
    cgroup_version: Option<u8>,
    /// Why a side does not run (None: it runs).
    zram_skipped: Option<String>,
    disk_skipped: Option<String>,
    /// Why uswap runs without a memory cgroup (None: it runs in one).
    uswap_cgroup_skipped: Option<String>,
    /// The uswap cgroup's room above the limit.
    allowance: u64,
    /// Prefix of the cgroups and of the swap file (`uswap-programs-PID`).
    tag: String,
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

/// Set up what `want` asks for on this machine (root only; the reasons otherwise).
fn setup_kernel(want: Want, allowance: u64) -> KernelSide {
    let tag = format!("uswap-programs-{}", std::process::id());
    setup_kernel_on(Box::new(RealOps::default()), kernel::is_root(), want, allowance, &tag)
}

/// [`setup_kernel`] through `ops`, as root or not. The uswap side's cgroup is set up whenever
/// the machine allows, whatever `want` says.
fn setup_kernel_on(ops: Box<dyn SysOps>, root: bool, want: Want, allowance: u64, tag: &str) -> KernelSide {
    let not_asked = |w: bool| (!w).then(|| "not requested (--compare)".to_string());
    let mut k = KernelSide {
        guard: Restore::new(ops),
        zram: None,
        zram_disksize: 0,
        disk: None,
        disk_zswap: false,
        disk_bytes: 0,
        cgroup_version: None,
        zram_skipped: not_asked(want.zram),
        disk_skipped: not_asked(want.disk),
        uswap_cgroup_skipped: None,
        allowance,
        tag: tag.to_string(),
        seq: 0,
    };
    let skip_all = |k: &mut KernelSide, why: String| {
        k.zram_skipped.get_or_insert(why.clone());
        k.disk_skipped.get_or_insert(why.clone());
        k.uswap_cgroup_skipped = Some(why);
    };
    if !root {
        skip_all(&mut k, "needs root (to set up zram, a swap file, swapon and memory cgroups); run with sudo".into());
        return k;
    }
    // Probe the cgroup (created and removed again).
    let probe = format!("{tag}-probe");
    match setup::setup_cgroup(&mut k.guard, &probe, 1 << 30) {
        Ok(cg) => {
            k.cgroup_version = Some(cg.version);
            k.disk_zswap = uswap_pager::launch::BENCH_DISK_ZSWAP.read_std().ok().flatten().unwrap_or(cg.version == 2);
            if let Err(e) = k.guard.undo_now(&Undo::Rmdir(cg.dir)) {
                skip_all(&mut k, format!("memory cgroup: cannot remove {probe}: {e}"));
                return k;
            }
        }
        Err(e) => {
            skip_all(&mut k, format!("memory cgroup: {e}"));
            return k;
        }
    }
    let mem_total =
        k.guard.ops().read(Path::new("proc/meminfo")).ok().and_then(|s| kernel::kb_field(&s, "MemTotal:")).unwrap_or(0)
            * 1024;
    if want.disk {
        // zswap's parameters are recorded for restore and it is left off: each disk run turns
        // it on with its swap file, and off again.
        k.disk_bytes = setup::swap_file_bytes(mem_total);
        let file = PathBuf::from(format!("var/tmp/{tag}.swap"));
        match setup::setup_zswap(&mut k.guard, &file, k.disk_bytes, "lz4") {
            Ok(z) => k.disk = Some(z),
            Err(e) => k.disk_skipped = Some(format!("disk swap: {e}")),
        }
    }
    if want.zram {
        // zswap would sit in front of zram: off for the zram runs, restored afterwards.
        let zswap = Path::new("sys/module/zswap/parameters/enabled");
        if let Ok(old) = k.guard.ops().read(zswap) {
            if old == "Y" {
                match k.guard.ops().write(zswap, "N") {
                    Ok(()) => k.guard.done(Undo::Write { rel: zswap.into(), value: old }),
                    Err(e) => {
                        k.zram_skipped = Some(format!("cannot turn zswap off for the zram runs: {e}"));
                        return k;
                    }
                }
            }
        }
        // zram's disksize is virtual (it holds what is swapped out, compressed): half of RAM,
        // as zram-generator's default, is more than any program of the suite swaps out.
        k.zram_disksize = (mem_total / 2) & !4095;
        match setup::setup_zram(&mut k.guard, k.zram_disksize, "lz4") {
            Ok(z) => k.zram = Some(z),
            Err(e) => k.zram_skipped = Some(format!("zram: {e}")),
        }
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
            Side::Native | Side::Zram | Side::Disk => {
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

/// Read `uswap run --stats` (docs/stats.md): fixed overheads, swapped bytes, processes.
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
    let fixed_of: Vec<u64> = procs.iter().map(|x| u(x, &["/fixed_overhead_bytes", "/rss_at_start_bytes"])).collect();
    let fixed = fixed_of.iter().copied().max().unwrap_or(0);
    let fixed_sum = fixed_of.iter().sum();
    let evicted = procs.iter().map(|x| u(x, &["/swap/pswpout", "/pager/evicted_pages"]) * 4096).sum();
    let swapped_in = procs.iter().map(|x| u(x, &["/swap/pswpin"]) * 4096).sum();
    let tree_peak = v.pointer("/tree_peak/anon_pss_bytes").and_then(Value::as_u64);
    (!procs.is_empty()).then_some(UswapStats {
        fixed,
        fixed_sum,
        evicted,
        swapped_in,
        processes: procs.len() as u64,
        tree_peak,
    })
}

/// What [`uswap_stats`] reads from `uswap run --stats`.
struct UswapStats {
    /// The largest process's fixed overhead.
    fixed: u64,
    /// The fixed overheads of every process, summed: each process has its own binary,
    /// libraries and uswap tables on top of the tree's shared limit (a forked child's shared
    /// pages count in both, so the sum errs on the generous side).
    fixed_sum: u64,
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

/// `uswap run` keeps its processes' statistics in its tree directory (`live`: the run
/// directory's `PID`, or `$TMPDIR/uswap-run-PID-N`) and removes it when the program ends; a
/// `uswap run` we killed (timeout) leaves it behind: remove it.
fn remove_run_statsdir(pid: i32) {
    if pid <= 0 {
        return;
    }
    if let Ok(d) = uswap_run::rundir::run_dir() {
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

/// What a side adds around a run: its memory cgroup and, for a kernel side, its swap.
#[derive(Debug)]
struct SideRun {
    side: Side,
    cg: setup::Cgroup,
    /// The cgroup's limit.
    limit: u64,
    before: BTreeMap<String, u64>,
    /// uswap: what samples its footprint.
    held: Option<HeldSampler>,
}

/// Samples a cgroup's `memory.stat` every 50 ms for the largest sum of its anonymous, shared
/// and mapped file pages ([`setup::Cgroup::held_bytes`]): what the processes hold, without the
/// unmapped page cache of the files they read and write (sort's temporary files, SQLite's,
/// Redis's dump), which the kernel sides' cgroups carry as well and which is not uswap's.
/// uswap's own swap file keeps at most its 4 MiB drop-behind window of page cache (none with
/// `direct=on`), which this leaves out too (`tests/tier_file.rs` checks the window).
#[derive(Debug)]
struct HeldSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl HeldSampler {
    fn start(version: u8, stat: PathBuf) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            loop {
                if let Ok(text) = std::fs::read_to_string(&stat) {
                    peak = peak.max(setup::Cgroup::held_bytes(version, &text));
                }
                if s.load(Ordering::Relaxed) {
                    return peak;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        HeldSampler { stop, thread }
    }
    /// Stop; the peak (None if the thread panicked).
    fn finish(self) -> Option<u64> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().ok()
    }
}

/// Put a run of `side` under `limit` in place: a new memory cgroup (at the limit; uswap's at
/// the limit + the allowance, kept out of kernel swap) and, for a kernel side, its swap turned
/// on (zram; or zswap and the swap file). None for the native side, and for uswap when it
/// runs without a cgroup.
fn side_begin(k: &mut KernelSide, side: Side, limit: u64) -> Result<Option<SideRun>, String> {
    let cg_limit = match side {
        Side::Native => return Ok(None),
        Side::Uswap if k.uswap_cgroup_skipped.is_some() => return Ok(None),
        Side::Uswap => limit.saturating_add(k.allowance),
        Side::Zram | Side::Disk => limit,
    };
    k.seq += 1;
    let name = format!("{}-{}-{}", k.tag, side.key(), k.seq);
    let cg = setup::setup_cgroup(&mut k.guard, &name, cg_limit)?;
    let on = match side {
        Side::Zram => match k.zram.clone() {
            Some(z) => setup::swapon(&mut k.guard, &z.dev),
            None => Err("zram was not set up".into()),
        },
        Side::Disk => match k.disk.clone() {
            Some(d) => setup::disk_swapon(&mut k.guard, &d, k.disk_zswap),
            None => Err("the disk swap file was not set up".into()),
        },
        Side::Uswap | Side::Native => cg.forbid_swap(k.guard.ops()),
    };
    if let Err(e) = on {
        let _ = k.guard.undo_now(&Undo::Rmdir(cg.dir.clone()));
        return Err(e);
    }
    let before = kernel::vmstat(k.guard.ops());
    let held =
        (side == Side::Uswap).then(|| HeldSampler::start(cg.version, k.guard.ops().path(&cg.dir.join("memory.stat"))));
    Ok(Some(SideRun { side, cg, limit: cg_limit, before, held }))
}

/// What a side's cgroup and the kernel's counters measured around one run.
#[derive(Debug, Default)]
struct SideEnd {
    /// The cgroup's limit and peak usage.
    limit: u64,
    peak: Option<u64>,
    /// uswap: [`HeldSampler`]'s peak.
    held_peak: Option<u64>,
    /// OOM kills in the cgroup.
    ooms: u64,
    /// Bytes written to and read from the swap device (`/proc/vmstat` `pswpout`, `pswpin`:
    /// the side's device is the machine's only swap while it runs).
    out_bytes: u64,
    in_bytes: u64,
    /// zswap: stores, loads and writebacks (`zswpout`, `zswpin`, `zswpwb`), bytes.
    zswap_out_bytes: u64,
    zswap_in_bytes: u64,
    written_back_bytes: u64,
    /// What failed while restoring the machine.
    errs: Vec<String>,
}

/// Measure the run's end; turn the side's swap off and remove its cgroup.
fn side_end(k: &mut KernelSide, run: SideRun) -> SideEnd {
    let ops = k.guard.ops();
    let after = kernel::vmstat(ops);
    let diff = |key: &str| {
        after.get(key).copied().unwrap_or(0).saturating_sub(run.before.get(key).copied().unwrap_or(0)) * 4096
    };
    let mut e = SideEnd {
        limit: run.limit,
        held_peak: run.held.and_then(HeldSampler::finish),
        peak: run.cg.peak(ops),
        ooms: run.cg.oom_kills(ops),
        out_bytes: diff("pswpout"),
        in_bytes: diff("pswpin"),
        zswap_out_bytes: diff("zswpout"),
        zswap_in_bytes: diff("zswpin"),
        written_back_bytes: diff("zswpwb"),
        errs: Vec::new(),
    };
    let off = match run.side {
        Side::Zram => k.zram.clone().map(|z| setup::swapoff(&mut k.guard, &z.dev)),
        Side::Disk => k.disk.clone().map(|d| setup::disk_swapoff(&mut k.guard, &d)),
        Side::Uswap | Side::Native => None,
    };
    if let Some(Err(err)) = off {
        e.errs.push(err);
    }
    if let Err(err) = k.guard.undo_now(&Undo::Rmdir(run.cg.dir.clone())) {
        e.errs.push(err);
    }
    e
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
    let sr = side_begin(k, sc.side, sc.limit)?;
    let procs = sr.as_ref().map(|sr| sr.cg.procs_file(k.guard.ops()));
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
    let mut rec = RunRec { side: sc.side.key(), ..Default::default() };
    let mut oom = false;
    if let Some(sr) = sr {
        let e = side_end(k, sr);
        rec.cgroup_peak = e.peak;
        rec.held_peak = e.held_peak;
        rec.cgroup_limit = Some(e.limit);
        rec.oom_kills = Some(e.ooms);
        if sc.side != Side::Uswap {
            rec.swapped_out_bytes = Some(e.out_bytes);
            rec.swapped_in_bytes = Some(e.in_bytes);
        }
        if sc.side == Side::Disk {
            rec.zswap_out_bytes = Some(e.zswap_out_bytes);
            rec.zswap_in_bytes = Some(e.zswap_in_bytes);
            rec.written_back_bytes = Some(e.written_back_bytes);
        }
        oom = e.ooms > 0;
        if !e.errs.is_empty() {
            return Err(format!("{} side: {}", sc.side.key(), e.errs.join("; ")));
        }
    }
    if sc.side == Side::Uswap {
        if let Some(u) = uswap_stats(&sc.stats) {
            rec.fixed_overhead = Some(u.fixed);
            rec.fixed_overhead_sum = Some(u.fixed_sum);
            rec.footprint_bound = Some(sc.limit + u.fixed_sum);
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
            // An OOM kill anywhere in the cgroup is the side's failure even when the command
            // exits 0: a pipeline whose `awk` the kernel killed still ends with `sha256sum`'s
            // success, over a truncated input.
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
                let what = match (rec.outcome, rec.cgroup_limit) {
                    ("oom", Some(l)) => format!("OOM-killed in its memory cgroup (limit {}): {what}", mib(l)),
                    _ => what,
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
    /// `k`'s secs / uswap's, when both finished with the right output (`k`: a kernel side).
    fn ratio(&self, k: Side) -> Option<f64> {
        match (self.secs(k), self.secs(Side::Uswap)) {
            (Some(ks), Some(u))
                if u > 0.0
                    && self.outcome(k) == Some("ok")
                    && self.correct(k) != Some(false)
                    && self.correct(Side::Uswap) == Some(true) =>
            {
                Some(ks / u)
            }
            _ => None,
        }
    }
    /// Why there is no ratio against kernel side `k`.
    fn no_ratio_reason(&self, k: Side) -> String {
        match (self.outcome(k), self.outcome(Side::Uswap), self.correct(Side::Uswap)) {
            (Some("oom"), _, _) => {
                format!("the kernel ({}) OOM-killed it under this limit (not counted as a uswap win)", k.key())
            }
            (Some("ok"), _, _) if self.correct(k) == Some(false) => {
                format!("the kernel's ({}) output was wrong (not counted as a uswap win)", k.key())
            }
            (ko, u, c) => format!(
                "{} {}, uswap {}{}",
                k.key(),
                ko.unwrap_or("-"),
                u.unwrap_or("-"),
                if c == Some(false) && u == Some("ok") { " (wrong output)" } else { "" }
            ),
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

    /// uswap's footprint: the largest cgroup peak of its rounds, the bound of that round (or
    /// the median bound when that round has none), and whether every round with both figures
    /// stayed within bound + 10 % (None: no round had both).
    fn footprint(&self) -> (Option<u64>, Option<u64>, Option<bool>) {
        let runs = self.side(Side::Uswap);
        let top = runs.iter().filter(|r| r.footprint_peak().is_some()).max_by_key(|r| r.footprint_peak());
        let peak = top.and_then(|r| r.footprint_peak());
        let bound = top.and_then(|r| r.footprint_bound).or_else(|| self.opt(Side::Uswap, |r| r.footprint_bound));
        let within: Vec<bool> = runs.iter().filter_map(|r| r.footprint_within()).collect();
        (peak, bound, (!within.is_empty()).then(|| within.iter().all(|&w| w)))
    }

    fn json(&self) -> Value {
        let first_stacks = |s: Side| self.side(s).iter().find_map(|r| r.stacks.clone());
        let (fp_peak, fp_bound, fp_within) = self.footprint();
        let mut v = json!({
            "name": self.name,
            "runtime": self.runtime,
            "about": self.about,
            "command": self.command,
            "limit_bytes": self.limit,
            "limit_fraction": self.fraction,
            "native_secs": self.secs(Side::Native).map(r3),
            "kernel_zram_secs": self.secs(Side::Zram).map(r3),
            "kernel_disk_secs": self.secs(Side::Disk).map(r3),
            "uswap_secs": self.secs(Side::Uswap).map(r3),
            "native_s": self.secs(Side::Native).map(r3),
            "uswap_s": self.secs(Side::Uswap).map(r3),
            "speed_ratio_zram": self.ratio(Side::Zram).map(r3),
            "speed_ratio_disk": self.ratio(Side::Disk).map(r3),
            "footprint_peak_bytes": fp_peak,
            "footprint_bound_bytes": fp_bound,
            "footprint_within": fp_within,
        });
        // Two objects: one json! of every key exceeds the macro's recursion limit.
        let more = json!({
            "native_peak_rss_bytes": self.peak(Side::Native),
            "zram_peak_rss_bytes": self.peak(Side::Zram),
            "disk_peak_rss_bytes": self.peak(Side::Disk),
            "zram_cgroup_peak_bytes": self.opt(Side::Zram, |r| r.cgroup_peak),
            "disk_cgroup_peak_bytes": self.opt(Side::Disk, |r| r.cgroup_peak),
            "zram_swapped_out_bytes": self.opt(Side::Zram, |r| r.swapped_out_bytes),
            "zram_swapped_in_bytes": self.opt(Side::Zram, |r| r.swapped_in_bytes),
            "disk_swapped_out_bytes": self.opt(Side::Disk, |r| r.swapped_out_bytes),
            "disk_swapped_in_bytes": self.opt(Side::Disk, |r| r.swapped_in_bytes),
            "disk_zswap_out_bytes": self.opt(Side::Disk, |r| r.zswap_out_bytes),
            "disk_zswap_in_bytes": self.opt(Side::Disk, |r| r.zswap_in_bytes),
            "disk_written_back_bytes": self.opt(Side::Disk, |r| r.written_back_bytes),
            "uswap_peak_rss_bytes": self.peak(Side::Uswap),
            "uswap_cgroup_limit_bytes": self.opt(Side::Uswap, |r| r.cgroup_limit),
            "uswap_fixed_overhead_bytes": self.opt(Side::Uswap, |r| r.fixed_overhead),
            "uswap_fixed_overhead_sum_bytes": self.opt(Side::Uswap, |r| r.fixed_overhead_sum),
            "uswap_evicted_bytes": self.opt(Side::Uswap, |r| r.evicted_bytes),
            "uswap_swapped_in_bytes": self.opt(Side::Uswap, |r| r.swapped_in_bytes),
        });
        let last = json!({
            "uswap_rss_target_bytes": self.rss_bound(),
            "uswap_rss_within_target": self.rss_bound().zip(self.peak(Side::Uswap)).map(|(b, p)| p <= b),
            "uswap_tree_peak_anon_pss_bytes": self.opt(Side::Uswap, |r| r.tree_peak),
            "uswap_tree_within_target": self.tree_within(),
            "correct": self.correct(Side::Uswap),
            "zram_correct": self.correct(Side::Zram),
            "disk_correct": self.correct(Side::Disk),
            "native_outcome": self.outcome(Side::Native),
            "zram_outcome": self.outcome(Side::Zram),
            "disk_outcome": self.outcome(Side::Disk),
            "uswap_outcome": self.outcome(Side::Uswap),
            "native_stacks": first_stacks(Side::Native),
            "zram_stacks": first_stacks(Side::Zram),
            "disk_stacks": first_stacks(Side::Disk),
            "uswap_stacks": first_stacks(Side::Uswap),
            "runs": self.runs.iter().map(RunRec::json).collect::<Vec<_>>(),
        });
        for part in [more, last] {
            if let (Value::Object(into), Value::Object(from)) = (&mut v, part) {
                into.extend(from);
            }
        }
        v
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
    parse_compare(&a.compare).map_err(CliError::usage)?;
    if a.uswap_allowance > MAX_ALLOWANCE {
        return Err(CliError::usage(format!(
            "--uswap-allowance {}: at most {}",
            fmt_size(a.uswap_allowance),
            fmt_size(MAX_ALLOWANCE)
        )));
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
    let want = parse_compare(&a.compare).map_err(CliError::usage)?;
    let mut k = setup_kernel(want, a.uswap_allowance);
    if kernel::interrupted() {
        return Err(CliError::fail("interrupted; the machine was restored"));
    }
    let mut sides = vec![Side::Native];
    if k.zram.is_some() {
        sides.push(Side::Zram);
    }
    if k.disk.is_some() {
        sides.push(Side::Disk);
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
    for (name, asked, why) in [("kernel zram", want.zram, &k.zram_skipped), ("kernel disk", want.disk, &k.disk_skipped)]
    {
        if let (true, Some(w)) = (asked, why) {
            pb.println(format!("{name}: skipped: {w}"));
        }
    }
    if let Some(w) = &k.uswap_cgroup_skipped {
        pb.println(format!("uswap runs without a memory cgroup (no footprint measured): {w}"));
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
                    let cgroup = match (side, rec.footprint_peak()) {
                        (Side::Uswap, Some(c)) => format!(
                            " (footprint {} of bound {}{})",
                            mib(c),
                            rec.footprint_bound.map_or("-".into(), mib),
                            if rec.footprint_within() == Some(false) { ": OVER" } else { "" }
                        ),
                        (_, Some(c)) => format!(" (cgroup {})", mib(c)),
                        _ => String::new(),
                    };
                    pb.println(format!(
                        "{:<13} {:<6} round {round}: {:<7} {:>8.2} s  peak RSS {:>8}{cgroup}{}{}{}",
                        prog.name,
                        side.key(),
                        rec.outcome,
                        rec.secs,
                        mib(rec.peak_rss),
                        if side == Side::Uswap && rec.outcome == "oom" { "  OOM KILL IN USWAP'S CGROUP" } else { "" },
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

    let sum = summarize(&results, &sides, a.timeout);
    let geo_of = |s: Side| sum.geo.iter().find(|g| g.side == s);
    let geo_json = |s: Side, f: &dyn Fn(&Geo) -> Value| geo_of(s).map_or(Value::Null, f);
    let v1 = k.cgroup_version == Some(1);
    let mut notes = vec![
        "zram's RAM (its compressed pages) is outside a memory cgroup's charge: the zram side holds more RAM than its limit".to_string(),
        format!(
            "uswap's cgroup (the limit + {} allowance, no kernel swap) charges its pool, its swap file's page cache and its tables",
            fmt_size(a.uswap_allowance)
        ),
    ];
    if let Some(d) = k.disk.as_ref().filter(|d| d.compressor != "lz4") {
        notes.push(format!(
            "zswap compresses with {}: this kernel's crypto API refused lz4 (zram has lz4 of its own)",
            d.compressor
        ));
    }
    if v1 && k.disk_zswap {
        notes.push(
            "cgroup v1 does not charge zswap's pool either (v2 does): the disk side keeps up to zswap's max_pool_percent of \
             RAM compressed outside its limit and writes to the swap file only beyond it (disk_written_back_bytes) or for \
             pages that do not compress"
                .into(),
        );
    }
    if k.disk.is_some() && !k.disk_zswap {
        notes.push(
            "the disk side runs without zswap: this cgroup does not charge zswap's pool (v1), which would hold the \
             program's swapped pages in RAM outside its limit (USWAP_BENCH_DISK_ZSWAP=on to put it back)"
                .into(),
        );
    }
    let doc = json!({
        "scale": a.scale,
        "runs": a.runs,
        "timeout_s": a.timeout,
        "limit": a.limit,
        "limit_fraction": if a.limit.is_some() { None } else { Some(a.limit_fraction.unwrap_or(suite::DEFAULT_FRACTION)) },
        "tiers": a.tiers,
        "folio": a.folio,
        "compare": a.compare,
        "sides": sides.iter().map(|s| s.key()).collect::<Vec<_>>(),
        "uswap_allowance_bytes": a.uswap_allowance,
        "zram_skipped": k.zram_skipped,
        "disk_skipped": k.disk_skipped,
        "uswap_cgroup_skipped": k.uswap_cgroup_skipped,
        "kernel_setup": {
            "zram_device": k.zram.as_ref().map(|z| format!("/dev/zram{}", z.id)),
            "zram_comp_algorithm": k.zram.as_ref().map(|_| "lz4"),
            "zram_disksize_bytes": k.zram.as_ref().map(|_| k.zram_disksize),
            "disk_swapfile": k.disk.as_ref().map(|d| format!("/{}", d.file.display())),
            "disk_swapfile_bytes": k.disk.as_ref().map(|_| k.disk_bytes),
            "disk_zswap": k.disk.as_ref().map(|_| k.disk_zswap),
            "zswap_compressor": k.disk.as_ref().map(|d| d.compressor.clone()),
            "zswap_max_pool_percent": k.disk.as_ref().and_then(|_| setup::Zswap::max_pool_percent(k.guard.ops())),
            "cgroup_version": k.cgroup_version,
        },
        "programs": results.iter().map(ProgRes::json).collect::<Vec<_>>(),
        "skipped": skipped,
        "geomean_speed_ratio_zram": geo_json(Side::Zram, &|g| json!(g.mean.map(r3))),
        "geomean_zram_over": geo_json(Side::Zram, &|g| json!(g.over)),
        "geomean_zram_excluded": geo_json(Side::Zram, &|g| json!(g.excluded)),
        "min_speed_ratio_zram": geo_json(Side::Zram, &|g| json!(g.min.map(r3))),
        "geomean_speed_ratio_disk": geo_json(Side::Disk, &|g| json!(g.mean.map(r3))),
        "geomean_disk_over": geo_json(Side::Disk, &|g| json!(g.over)),
        "geomean_disk_excluded": geo_json(Side::Disk, &|g| json!(g.excluded)),
        "min_speed_ratio_disk": geo_json(Side::Disk, &|g| json!(g.min.map(r3))),
        "footprints_within": sum.footprints_within,
        "footprints_over": sum.footprints_over,
        "failures": sum.failures,
        "restore_errors": restore_errors,
        "workdir": work.path,
        "notes": notes,
        "targets": "no hang; uswap output == native output; uswap peak RSS <= (limit + fixed overhead) * 1.1; \
                    uswap footprint <= (limit + the tree's fixed overheads summed) * 1.1; no OOM kill in uswap's cgroup; \
                    geomean kernel secs / uswap secs >= 1.0 against zram and against disk",
    });
    let out = uswap_run::report::with_header("programs", facts, doc);
    if a.json {
        println!("{out}");
    } else {
        print_table(a, &results, &k, &sum, &skipped, &notes);
        for f in &sum.failures {
            println!("FAILED: {f}");
        }
        for e in &restore_errors {
            eprintln!("uswap: could not restore: {e}");
        }
    }
    if !restore_errors.is_empty() {
        return Err(CliError::fail("the machine was not fully restored (see above)"));
    }
    if !sum.failures.is_empty() {
        return Err(CliError::fail(format!("{} failure(s) (see above)", sum.failures.len())));
    }
    Ok(())
}

/// One kernel side's speed comparison over the suite.
#[derive(Debug)]
struct Geo {
    side: Side,
    /// The geometric mean and the smallest of kernel secs / uswap secs over `over`.
    mean: Option<f64>,
    min: Option<f64>,
    /// The programs both sides finished correctly.
    over: Vec<&'static str>,
    /// The others, with the reason (`name`, `reason`).
    excluded: Vec<Value>,
}

/// What the suite's results add up to.
#[derive(Debug)]
struct Summary {
    /// Failures of the native and uswap runs (a kernel side's are its outcome and keep the
    /// program out of its mean: they are not uswap's).
    failures: Vec<String>,
    /// One per kernel side that ran, in the order of `sides`.
    geo: Vec<Geo>,
    /// Every program whose footprint was measured stayed within its bound (None: none was).
    footprints_within: Option<bool>,
    /// The programs whose footprint was over.
    footprints_over: Vec<&'static str>,
}

fn summarize(results: &[ProgRes], sides: &[Side], timeout: u64) -> Summary {
    let mut failures: Vec<String> = Vec::new();
    for r in results {
        for rec in r.runs.iter().filter(|rec| rec.side == Side::Native.key() || rec.side == Side::Uswap.key()) {
            let what = format!("{} {} round {}", r.name, rec.side, rec.round);
            match rec.outcome {
                "ok" if rec.correct == Some(false) => {
                    failures.push(format!("{what}: wrong output: {}", rec.diff.clone().unwrap_or_default()))
                }
                "ok" => {}
                "timeout" => failures.push(format!("{what}: timeout after {timeout} s (stacks printed)")),
                _ => failures.push(format!("{what}: {}", rec.error.clone().unwrap_or_else(|| rec.outcome.into()))),
            }
        }
    }
    let geo = Side::KERNEL
        .into_iter()
        .filter(|s| sides.contains(s))
        .map(|side| {
            let (mut ratios, mut over, mut excluded) = (Vec::new(), Vec::new(), Vec::new());
            for r in results {
                match r.ratio(side) {
                    Some(x) => {
                        ratios.push(x);
                        over.push(r.name);
                    }
                    None => excluded.push(json!({ "name": r.name, "reason": r.no_ratio_reason(side) })),
                }
            }
            let min = ratios.iter().copied().reduce(f64::min);
            Geo { side, mean: geomean(&ratios), min, over, excluded }
        })
        .collect();
    let measured: Vec<(&'static str, bool)> =
        results.iter().filter_map(|r| r.footprint().2.map(|w| (r.name, w))).collect();
    Summary {
        failures,
        geo,
        footprints_within: (!measured.is_empty()).then(|| measured.iter().all(|m| m.1)),
        footprints_over: measured.iter().filter(|m| !m.1).map(|m| m.0).collect(),
    }
}

/// Lines of at most `width` columns: `text` split at spaces, every line after the first
/// indented by `indent`.
fn wrap(text: &str, width: usize, indent: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
            line.push_str(indent);
        } else if !line.is_empty() && !line.ends_with(' ') {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.trim().is_empty() {
        lines.push(line);
    }
    lines
}

/// Seconds in at most 6 columns.
fn secs6(x: Option<f64>) -> String {
    match x {
        None => "-".into(),
        Some(v) if v < 100.0 => format!("{v:.2}"),
        Some(v) if v < 1000.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.0}"),
    }
}

/// Whole MiB.
fn mib0(b: u64) -> String {
    format!("{}", (b + (1 << 19)) >> 20)
}

/// A side's outcome in 3 columns: ok, bad (wrong output), oom, tmo (timeout), err, - (no run).
fn outcome3(r: &ProgRes, s: Side) -> &'static str {
    match (r.outcome(s), r.correct(s)) {
        (None, _) => "-",
        (Some("ok"), Some(false)) => "bad",
        (Some("ok"), _) => "ok",
        (Some("oom"), _) => "oom",
        (Some("timeout"), _) => "tmo",
        _ => "err",
    }
}

/// The report for people, in 100 columns.
fn print_table(a: &Args, results: &[ProgRes], k: &KernelSide, sum: &Summary, skipped: &[Value], notes: &[String]) {
    const W: usize = 100;
    let say = |text: &str| {
        for l in wrap(text, W, "  ") {
            println!("{l}");
        }
    };
    say(&format!(
        "programs: scale {}, {} round(s) (medians), timeout {} s; limit = {}; uswap tiers {} folio {}",
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
    ));
    let cgv = k.cgroup_version.unwrap_or(0);
    say(&format!(
        "zram: {}",
        match &k.zram_skipped {
            None => format!("lz4 zram swap, zswap off, memory cgroup v{cgv} at the limit"),
            Some(w) => format!("skipped: {w}"),
        }
    ));
    say(&format!(
        "disk: {}",
        match (&k.disk_skipped, &k.disk) {
            (None, Some(d)) => format!(
                "zswap ({}, pool up to {}% of RAM) in front of a swap file of {} (/{}), memory cgroup v{cgv} at the limit",
                d.compressor,
                setup::Zswap::max_pool_percent(k.guard.ops()).map_or("?".into(), |p| p.to_string()),
                fmt_size(k.disk_bytes),
                d.file.display()
            ),
            (Some(w), _) => format!("skipped: {w}"),
            (None, None) => "skipped".into(),
        }
    ));
    say(&format!(
        "uswap: {}",
        match &k.uswap_cgroup_skipped {
            None => format!(
                "memory cgroup v{cgv} at the limit + {} allowance, no kernel swap; footprint = its peak",
                fmt_size(a.uswap_allowance)
            ),
            Some(w) => format!("no memory cgroup, no footprint ({w})"),
        }
    ));
    let ratio =
        |x: Option<f64>| x.map_or("-".to_string(), |v| if v < 10.0 { format!("{v:.2}x") } else { format!("{v:.1}x") });
    println!(
        "{:<13} {:>5} {:>6} {:>6} {:>6} {:>6} {:>5} {:>5} {:>10} {:>4} {:>3}  n/z/d/u",
        "program", "limit", "native", "zram", "disk", "uswap", "z/u", "d/u", "footprint", "fp", "rss"
    );
    for r in results {
        let (fp_peak, fp_bound, fp_within) = r.footprint();
        let footprint = match (fp_peak, fp_bound) {
            (Some(p), Some(b)) => format!("{}/{}M", mib0(p), mib0(b)),
            (Some(p), None) => format!("{}/-M", mib0(p)),
            _ => "-".into(),
        };
        let yes_no = |w: Option<bool>| match w {
            Some(true) => "ok",
            Some(false) => "NO",
            None => "-",
        };
        let rss = r.rss_bound().zip(r.peak(Side::Uswap)).map(|(b, p)| p <= b && r.tree_within() != Some(false));
        println!(
            "{:<13} {:>5} {:>6} {:>6} {:>6} {:>6} {:>5} {:>5} {:>10} {:>4} {:>3}  {}/{}/{}/{}",
            r.name,
            r.limit.map_or("-".into(), |l| format!("{}M", mib0(l))),
            secs6(r.secs(Side::Native)),
            secs6(r.secs(Side::Zram)),
            secs6(r.secs(Side::Disk)),
            secs6(r.secs(Side::Uswap)),
            ratio(r.ratio(Side::Zram)),
            ratio(r.ratio(Side::Disk)),
            footprint,
            yes_no(fp_within),
            yes_no(rss),
            outcome3(r, Side::Native),
            outcome3(r, Side::Zram),
            outcome3(r, Side::Disk),
            outcome3(r, Side::Uswap),
        );
    }
    let m = |x: Option<u64>| x.map_or("-".to_string(), mib0);
    println!(
        "{:<13} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "MiB", "nat RSS", "zram cg", "disk cg", "usw RSS", "usw tree", "fixed", "fix sum", "evicted", "disk wb"
    );
    for r in results {
        println!(
            "{:<13} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            r.name,
            m(r.peak(Side::Native)),
            m(r.opt(Side::Zram, |x| x.cgroup_peak)),
            m(r.opt(Side::Disk, |x| x.cgroup_peak)),
            m(r.peak(Side::Uswap)),
            m(r.opt(Side::Uswap, |x| x.tree_peak)),
            m(r.opt(Side::Uswap, |x| x.fixed_overhead)),
            m(r.opt(Side::Uswap, |x| x.fixed_overhead_sum)),
            m(r.opt(Side::Uswap, |x| x.evicted_bytes)),
            m(r.opt(Side::Disk, |x| x.written_back_bytes)),
        );
    }
    for g in &sum.geo {
        match g.mean {
            Some(mean) => say(&format!(
                "{} secs / uswap secs: geomean {mean:.2}x, min {:.2}x, over {} program(s): {}",
                g.side.key(),
                g.min.unwrap_or(mean),
                g.over.len(),
                g.over.join(", ")
            )),
            None => {
                say(&format!("{} secs / uswap secs: - (no program finished correctly on both sides)", g.side.key()))
            }
        }
        for e in &g.excluded {
            say(&format!(
                "  excluded from the {} geomean: {}: {}",
                g.side.key(),
                e["name"].as_str().unwrap_or("?"),
                e["reason"].as_str().unwrap_or("?")
            ));
        }
    }
    match sum.footprints_within {
        Some(true) => say("uswap footprint within (limit + fixed overheads summed) + 10%: every program"),
        Some(false) => say(&format!(
            "uswap footprint OVER (limit + fixed overheads summed) + 10%: {}",
            sum.footprints_over.join(", ")
        )),
        None => say("uswap footprint: not measured"),
    }
    for s in skipped {
        say(&format!("skipped: {}: {}", s["name"].as_str().unwrap_or("?"), s["reason"].as_str().unwrap_or("?")));
    }
    for n in notes {
        say(&format!("note: {n}"));
    }
    say("secs: medians; z/u, d/u = zram or disk secs / uswap secs (> 1: uswap faster); footprint = peak of \
         uswap's cgroup / (limit + fixed overheads summed), MiB; fp: footprint within bound + 10%; rss: peak RSS \
         (wait4, the largest process) within (limit + fixed overhead) + 10%; n/z/d/u: native, zram, disk, uswap \
         outcome (ok, bad = wrong output, oom, tmo = timeout, err); cg = a cgroup's peak; wb = zswap written back");
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
            &["--compare", "kernel,btrfs"],
            &["--uswap-allowance", "100G"],
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
        let d = uswap_run::report::now_utc();
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

    fn rec(side: &'static str, outcome: &'static str, secs: f64) -> RunRec {
        RunRec { side, outcome, secs, peak_rss: 1, correct: Some(true), ..Default::default() }
    }

    fn prog(name: &'static str, runs: Vec<RunRec>) -> ProgRes {
        ProgRes {
            name,
            runtime: "x",
            about: "x",
            command: "x".into(),
            limit: Some(100 << 20),
            fraction: Some(0.4),
            runs,
        }
    }

    #[test]
    fn compare_names_the_kernel_sides() {
        assert_eq!(parse_compare("kernel"), Ok(Want { zram: true, disk: true }));
        assert_eq!(parse_compare("zram"), Ok(Want { zram: true, disk: false }));
        assert_eq!(parse_compare("disk"), Ok(Want { zram: false, disk: true }));
        assert_eq!(parse_compare("zram, disk"), Ok(Want { zram: true, disk: true }));
        assert_eq!(parse_compare("none"), Ok(Want::default()));
        assert!(parse_compare("zswap").unwrap_err().contains("zram, disk or none"));
        assert_eq!(parse(&[]).uswap_allowance, 64 << 20);
        assert_eq!(parse(&["--uswap-allowance", "128M"]).uswap_allowance, 128 << 20);
    }

    #[test]
    fn outcomes_and_ratios_exclude_kernel_oom_per_side() {
        let mut p = prog(
            "x",
            vec![rec("native", "ok", 1.0), rec("zram", "ok", 4.0), rec("disk", "ok", 3.0), rec("uswap", "ok", 2.0)],
        );
        assert_eq!((p.ratio(Side::Zram), p.ratio(Side::Disk)), (Some(2.0), Some(1.5)));
        p.runs[1].outcome = "oom";
        assert_eq!(p.outcome(Side::Zram), Some("oom"));
        assert_eq!((p.ratio(Side::Zram), p.ratio(Side::Disk)), (None, Some(1.5)));
        assert!(
            p.no_ratio_reason(Side::Zram).contains("kernel (zram) OOM-killed"),
            "{}",
            p.no_ratio_reason(Side::Zram)
        );
        p.runs[1].outcome = "ok";
        // A kernel run that finished with a wrong output (a pipeline stage OOM-killed) is no
        // ratio either.
        p.runs[2].correct = Some(false);
        assert_eq!((p.ratio(Side::Zram), p.ratio(Side::Disk)), (Some(2.0), None));
        assert!(p.no_ratio_reason(Side::Disk).contains("output was wrong"));
        p.runs[2].correct = Some(true);
        p.runs[3].correct = Some(false);
        assert_eq!((p.ratio(Side::Zram), p.ratio(Side::Disk)), (None, None));
        assert_eq!(p.correct(Side::Uswap), Some(false));
        assert!(p.no_ratio_reason(Side::Disk).contains("(wrong output)"));
    }

    #[test]
    fn footprint_is_the_worst_round_against_limit_plus_summed_overheads() {
        let u = |peak: u64, bound: Option<u64>| RunRec {
            cgroup_peak: Some(peak << 20),
            footprint_bound: bound.map(|b| b << 20),
            ..rec("uswap", "ok", 1.0)
        };
        // 120 MiB against a bound of 110 MiB: within 110 * 1.1 = 121.
        let p = prog("a", vec![u(100, Some(110)), u(120, Some(110))]);
        assert_eq!(p.footprint(), (Some(120 << 20), Some(110 << 20), Some(true)));
        let p = prog("b", vec![u(100, Some(110)), u(122, Some(110))]);
        assert_eq!(p.footprint().2, Some(false));
        // A round without statistics (killed before writing them) has no bound of its own.
        let p = prog("c", vec![u(130, None), u(90, Some(100))]);
        assert_eq!(p.footprint(), (Some(130 << 20), Some(100 << 20), Some(true)));
        let p = prog("d", vec![rec("uswap", "ok", 1.0)]);
        assert_eq!(p.footprint(), (None, None, None));
        let j = p.json();
        assert!(j["footprint_peak_bytes"].is_null() && j["footprint_within"].is_null());
        let j = RunRec { side: "uswap", ..u(100, Some(110)) }.json();
        assert_eq!(j["footprint_peak_bytes"], 100 << 20);
        assert_eq!(j["footprint_within"], true);
        assert!(rec("zram", "ok", 1.0).json().get("footprint_peak_bytes").is_none());
    }

    #[test]
    fn summed_fixed_overheads_from_uswap_stats() {
        let v = json!({
            "main": { "fixed_overhead_bytes": 30, "swap": { "pswpout": 2, "pswpin": 1 } },
            "other_processes": [ { "fixed_overhead_bytes": 20 }, { "rss_at_start_bytes": 5 } ],
            "tree_peak": { "anon_pss_bytes": 77 },
        });
        let s = uswap_stats_of(&v).unwrap();
        assert_eq!((s.fixed, s.fixed_sum, s.processes, s.evicted, s.swapped_in), (30, 55, 3, 8192, 4096));
        assert_eq!(s.tree_peak, Some(77));
        assert!(uswap_stats_of(&json!({ "main": null })).is_none());
    }

    #[test]
    fn summary_geomeans_per_side_and_uswap_oom_is_a_failure() {
        let fp = |peak: u64, bound: u64| RunRec {
            cgroup_peak: Some(peak),
            footprint_bound: Some(bound),
            ..rec("uswap", "ok", 1.0)
        };
        let a = prog("a", vec![rec("native", "ok", 1.0), rec("zram", "ok", 4.0), rec("disk", "ok", 2.0), fp(1, 1)]);
        let b = prog("b", vec![rec("native", "ok", 1.0), rec("zram", "ok", 1.0), rec("disk", "oom", 9.0), fp(5, 1)]);
        let mut oom = fp(2, 1);
        oom.outcome = "oom";
        oom.error = Some("OOM-killed in its memory cgroup (limit 164.0M)".into());
        oom.round = 1;
        let c = prog("c", vec![rec("native", "ok", 1.0), rec("zram", "ok", 1.0), rec("disk", "ok", 1.0), oom]);
        let sides = [Side::Native, Side::Zram, Side::Disk, Side::Uswap];
        let s = summarize(&[a, b, c], &sides, 300);
        assert_eq!(s.geo.len(), 2);
        let (z, d) = (&s.geo[0], &s.geo[1]);
        assert_eq!((z.side, z.over.clone()), (Side::Zram, vec!["a", "b"]));
        assert!((z.mean.unwrap() - 2.0).abs() < 1e-9, "{z:?}");
        assert_eq!(z.min, Some(1.0));
        assert_eq!((d.side, d.over.clone(), d.min), (Side::Disk, vec!["a"], Some(2.0)));
        assert_eq!(d.excluded.len(), 2);
        assert!(d.excluded[0]["reason"].as_str().unwrap().contains("OOM-killed"));
        assert_eq!(s.failures.len(), 1, "{:?}", s.failures);
        assert!(s.failures[0].starts_with("c uswap round 1: OOM-killed in its memory cgroup"), "{:?}", s.failures);
        assert_eq!((s.footprints_within, s.footprints_over.clone()), (Some(false), vec!["b", "c"]));
        // Without the disk side there is no disk geomean.
        assert_eq!(summarize(&[], &[Side::Native, Side::Zram, Side::Uswap], 1).geo.len(), 1);
        assert_eq!(summarize(&[], &sides, 1).footprints_within, None);
    }

    #[test]
    fn table_lines_fit_in_100_columns() {
        let text = "zram secs / uswap secs: geomean 1.10x, min 0.42x, over 8 program(s): sqlite, node-objects, \
                    make-j2, pipeline, python-list, java-hashmap, redis, python-dict, and a very-long-name-here";
        let lines = wrap(text, 100, "  ");
        assert!(lines.len() > 1);
        assert!(lines.iter().all(|l| l.chars().count() <= 100), "{lines:?}");
        assert!(lines[1].starts_with("  "));
        assert_eq!(lines.join(" ").split_whitespace().collect::<Vec<_>>(), text.split_whitespace().collect::<Vec<_>>());
        assert_eq!(
            (secs6(Some(1.234)), secs6(Some(123.45)), secs6(Some(1234.5)), secs6(None)),
            ("1.23".into(), "123.5".into(), "1234".into(), "-".into())
        );
    }

    /// The kernel sides on a fake machine: what each run turns on and off, and that the guard
    /// puts everything back.
    #[test]
    fn each_side_gets_its_cgroup_and_swap_and_everything_is_restored() {
        use crate::kernel::fake;
        let (tmp, ops, log) = fake::machine("programs-sides", false);
        let root = tmp.0.clone();
        fake::write(&root, "sys/module/zswap/parameters/enabled", "Y\n");
        let want = Want { zram: true, disk: true };
        {
            let mut k = setup_kernel_on(Box::new(ops), true, want, 64 << 20, "t");
            assert_eq!(
                (k.zram_skipped.clone(), k.disk_skipped.clone(), k.uswap_cgroup_skipped.clone()),
                (None, None, None)
            );
            assert_eq!(k.cgroup_version, Some(1));
            let d = k.disk.clone().unwrap();
            assert_eq!(d.file, PathBuf::from("var/tmp/t.swap"));
            assert_eq!(d.compressor, "lz4");
            assert_eq!(std::fs::metadata(root.join("var/tmp/t.swap")).unwrap().len(), 32 << 20);
            assert_eq!(fake::read(&root, "sys/module/zswap/parameters/enabled"), "N");
            assert_eq!(k.zram.as_ref().map(|z| z.id), Some(1));

            let cg = "sys/fs/cgroup/memory/t";
            assert!(side_begin(&mut k, Side::Native, 100 << 20).unwrap().is_none());

            let sr = side_begin(&mut k, Side::Zram, 100 << 20).unwrap().unwrap();
            assert_eq!(fake::read(&root, &format!("{cg}-zram-1/memory.limit_in_bytes")), (100u64 << 20).to_string());
            assert_eq!(fake::read(&root, "sys/module/zswap/parameters/enabled"), "N");
            fake::write(&root, "proc/vmstat", "pswpin 1\npswpout 3\nzswpin 0\nzswpout 0\nzswpwb 0\n");
            let e = side_end(&mut k, sr);
            assert_eq!((e.out_bytes, e.in_bytes, e.ooms, e.peak), (3 * 4096, 4096, 0, Some(0)));

            // cgroup v1 does not charge zswap's pool: the disk side runs without it.
            assert!(!k.disk_zswap);
            let sr = side_begin(&mut k, Side::Disk, 100 << 20).unwrap().unwrap();
            assert_eq!(fake::read(&root, "sys/module/zswap/parameters/enabled"), "N");
            fake::write(&root, &format!("{cg}-disk-2/memory.max_usage_in_bytes"), "104857600");
            fake::write(
                &root,
                &format!("{cg}-disk-2/memory.oom_control"),
                "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
            );
            fake::write(&root, "proc/vmstat", "pswpin 1\npswpout 4\nzswpin 5\nzswpout 9\nzswpwb 1\n");
            let e = side_end(&mut k, sr);
            assert_eq!((e.peak, e.ooms), (Some(100 << 20), 2));
            assert_eq!(
                (e.out_bytes, e.zswap_out_bytes, e.zswap_in_bytes, e.written_back_bytes),
                (4096, 9 * 4096, 5 * 4096, 4096)
            );
            assert_eq!(fake::read(&root, "sys/module/zswap/parameters/enabled"), "N");

            let sr = side_begin(&mut k, Side::Uswap, 100 << 20).unwrap().unwrap();
            assert_eq!(fake::read(&root, &format!("{cg}-uswap-3/memory.limit_in_bytes")), (164u64 << 20).to_string());
            assert_eq!(fake::read(&root, &format!("{cg}-uswap-3/memory.swappiness")), "0");
            assert_eq!(sr.limit, 164 << 20);
            // Its footprint leaves the unmapped page cache out.
            fake::write(
                &root,
                &format!("{cg}-uswap-3/memory.stat"),
                "total_cache 5000\ntotal_rss 1000\ntotal_mapped_file 24\n",
            );
            let e = side_end(&mut k, sr);
            assert!(e.errs.is_empty(), "{:?}", e.errs);
            assert_eq!(e.held_peak, Some(1024));

            // Interrupted during a disk run: the guard turns its swap off on the way out.
            let _sr = side_begin(&mut k, Side::Disk, 100 << 20).unwrap().unwrap();
        }
        assert_eq!(
            log.borrow().clone(),
            vec![
                "rmdir sys/fs/cgroup/memory/t-probe",
                "swapon dev/zram1 32000",
                "swapoff dev/zram1",
                "rmdir sys/fs/cgroup/memory/t-zram-1",
                "swapon var/tmp/t.swap 32000",
                "swapoff var/tmp/t.swap",
                "rmdir sys/fs/cgroup/memory/t-disk-2",
                "rmdir sys/fs/cgroup/memory/t-uswap-3",
                "swapon var/tmp/t.swap 32000",
                "swapoff var/tmp/t.swap",
                "rmdir sys/fs/cgroup/memory/t-disk-4",
            ]
        );
        assert!(!root.join("var/tmp/t.swap").exists());
        assert_eq!(fake::read(&root, "sys/module/zswap/parameters/enabled"), "Y");
        assert_eq!(fake::read(&root, "sys/module/zswap/parameters/compressor"), "lzo");
        assert_eq!(fake::read(&root, "sys/block/zram1/reset"), "1");
        assert_eq!(fake::read(&root, "sys/class/zram-control/hot_remove"), "1");
    }

    #[test]
    fn without_root_every_side_says_why_and_disk_alone_leaves_zram_alone() {
        use crate::kernel::fake;
        let (_tmp, ops, log) = fake::machine("programs-noroot", false);
        let k = setup_kernel_on(Box::new(ops), false, Want { zram: true, disk: true }, 64 << 20, "n");
        assert!(k.zram_skipped.as_deref().unwrap().contains("needs root"));
        assert!(k.disk_skipped.as_deref().unwrap().contains("needs root"));
        assert!(k.uswap_cgroup_skipped.as_deref().unwrap().contains("needs root"));
        drop(k);
        assert!(log.borrow().is_empty());

        let (tmp, ops, _log) = fake::machine("programs-disk", true);
        let mut k = setup_kernel_on(Box::new(ops), true, Want { zram: false, disk: true }, 64 << 20, "d");
        assert!(k.zram.is_none() && k.disk.is_some());
        assert_eq!(k.zram_skipped.as_deref(), Some("not requested (--compare)"));
        assert_eq!(k.cgroup_version, Some(2));
        assert!(side_begin(&mut k, Side::Zram, 100 << 20).unwrap_err().contains("zram was not set up"));
        // The failed begin removed its cgroup again.
        assert!(!tmp.0.join("sys/fs/cgroup/d-zram-1").exists());
        let sr = side_begin(&mut k, Side::Uswap, 100 << 20).unwrap().unwrap();
        assert_eq!(fake::read(&tmp.0, "sys/fs/cgroup/d-uswap-2/memory.max"), (164u64 << 20).to_string());
        assert_eq!(fake::read(&tmp.0, "sys/fs/cgroup/d-uswap-2/memory.swap.max"), "0");
        side_end(&mut k, sr);
        drop(k);
        assert!(!tmp.0.join("var/tmp/d.swap").exists());
        assert!(!tmp.0.join("sys/class/zram-control/hot_remove").metadata().map(|m| m.len() > 0).unwrap_or(false));
    }
}
