//! `uswap run`: run an unmodified, dynamically linked program with its anonymous memory under
//! the pager, through the LD_PRELOAD library `libuswap_ffi.so` (looked up next to the `uswap`
//! binary, or named by `USWAP_PRELOAD`).
//!
//! Before starting the program it checks everything that would make the run meaningless and
//! says so: the limit, folio and tiers parse (exit 2), the swap directory is writable (exit 2),
//! userfaultfd is permitted (exit 1, with the ways to permit it), the program exists (exit 127)
//! and is executable (126), and it is dynamically linked (a static program never loads the
//! library: exit 2). It then passes the configuration in `USWAP_*` variables, forwards
//! SIGINT/SIGTERM/SIGHUP/SIGQUIT/SIGUSR1/SIGUSR2 that were *sent* to uswap (a terminal's Ctrl-C
//! already reaches the whole process group), and exits with the program's status, or 128+N when
//! signal N killed it, as a shell does. The program runs under a guardian process
//! ([`crate::guardian`]) through which this process owns the program's whole tree: should
//! `uswap run` die, however it dies, every process of the tree is killed and the run ended.
//!
//! Programs started in turn inherit the library and the variables: each process gets its own
//! pager and its share of the one limit. Every process writes its statistics at exit; the
//! summary shows the program's own and counts the others. A process of the tree that runs
//! without the library (a static program started by a shell) is found, reported and counted
//! against the limit ([`crate::unmanaged`]).
//!
//! Locking: the tree sampler's thread and the main thread share the [`crate::unmanaged::Watch`]
//! behind a mutex (held for one sample, and once at the end); the signal handler only reads an
//! atomic pid and calls kill.

use crate::live;
use crate::stats_read::u;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use uswap_pager::launch;

/// Arguments of `uswap run`. Options end at `--` or at the first word that is not an option
/// (the program), as for `env` and `systemd-run`; an unknown option is an error.
#[derive(clap::Args, Debug)]
#[command(trailing_var_arg = true)]
pub struct RunArgs {
    /// Memory limit: resident pages + swap cache + compressed pool of the memory the pager
    /// manages (a size such as 512M, 1.5G, 256MiB, or N% of physical memory).
    // Values may start with `-`, so that a negative size gets uswap's own message rather than
    // clap's advice to write `-- -5`, which would run `-5` as the program.
    #[arg(long, value_name = "SIZE|N%", allow_hyphen_values = true)]
    pub limit: String,
    /// Storage tiers, in order (grammar in --help). The default sends what does not fit in
    /// 8 % of the limit (USWAP_POOL_PERCENT) as compressed pages to an encrypted, unlinked
    /// swap file in /var/tmp, so the limit holds for data that compresses poorly; `zero,lz4`
    /// keeps everything in RAM. `recomp=zstd`: pool objects idle for a whole period are
    /// recompressed with zstd in the background (`recomp=off` to turn it off).
    #[arg(long, default_value = launch::DEFAULT_TIERS)]
    pub tiers: String,
    /// Folio size: 4K, 64K or 2M.
    #[arg(long, default_value = "64K")]
    pub folio: String,
    /// Write the statistics as JSON (docs/stats.md) instead of the summary: to FILE, to
    /// stderr with `-`, or to file descriptor N with `fd:N` (opened by the shell, e.g.
    /// `3> stats.json`; the program does not inherit it). Never to stdout, which is the
    /// program's.
    #[arg(long, value_name = "FILE|-|fd:N")]
    pub stats: Option<PathBuf>,
    /// Let a `file:PATH` tier overwrite an existing file or block device that has no uswap
    /// header (never one that is in use).
    #[arg(long)]
    pub force: bool,
    /// Keep the tree's statistics in this file in the Prometheus text exposition format 0.0.4
    /// (not OpenMetrics), rewritten every second while the program runs (for node_exporter's
    /// textfile collector), and once more at the end.
    #[arg(long, value_name = "FILE")]
    pub metrics_file: Option<PathBuf>,
    /// Print nothing after the run (the exit status still passes through).
    #[arg(long, short)]
    pub quiet: bool,
    /// The program and its arguments (passed unchanged).
    #[arg(required = true, value_name = "PROGRAM [ARGS]...")]
    pub command: Vec<OsString>,
}

/// A failure before the program started: message and exit code.
pub struct RunError(pub String, pub u8);

fn usage(msg: String) -> RunError {
    RunError(msg, crate::exit::USAGE)
}

/// Parse a limit such as 512M, 1.5G or 25% (of physical memory).
pub fn parse_limit(s: &str) -> Result<u64, RunError> {
    const EXPECTED: &str = "a memory limit such as 512M, 1.5G, 2GiB or 25% of RAM";
    if let Some(rest) = s.strip_prefix('-') {
        return Err(usage(if rest.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            format!("--limit: a size cannot be negative: {s}")
        } else {
            // `--limit --tiers ...`: the value is missing.
            format!("--limit needs a value ({EXPECTED}), not the option {s}")
        }));
    }
    uswap::size::parse_limit(s).map_err(|e| usage(format!("--limit: {e} ({EXPECTED})")))
}

/// Where `--stats` goes.
enum StatsTo {
    File(PathBuf),
    Stderr,
    /// A descriptor of uswap's own (close-on-exec), duplicated from the one the user named.
    Fd(std::os::fd::OwnedFd),
}

/// Parse `--stats`: `-` is stderr, `fd:N` a descriptor uswap was started with, open for
/// writing, anything else a file. Called before uswap opens any file of its own, so `fd:N`
/// names the caller's descriptor and not one of uswap's. N itself is made close-on-exec (for
/// N > 2), so the program and its children never hold it: a reader of a pipe there sees the
/// statistics and then the end of the file when uswap exits, however long the program's
/// descendants live.
fn stats_to(arg: &Path) -> Result<StatsTo, RunError> {
    use std::os::fd::{AsFd, BorrowedFd};
    if arg == Path::new("-") {
        return Ok(StatsTo::Stderr);
    }
    let Some(n) = arg.to_str().and_then(|s| s.strip_prefix("fd:")) else { return Ok(StatsTo::File(arg.into())) };
    let bad = |why: String| usage(format!("--stats fd:{n}: {why}"));
    let fd: i32 = n.parse().ok().filter(|&v| v >= 0).ok_or_else(|| bad("expected fd:N, N a file descriptor".into()))?;
    // SAFETY: F_GETFL only asks whether `fd` is open; no memory is involved.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fl < 0 {
        return Err(bad(format!("not an open file descriptor (open it for the command, e.g. `{fd}> stats.json`)")));
    }
    if fl & libc::O_ACCMODE == libc::O_RDONLY {
        return Err(bad("open for reading only".into()));
    }
    // SAFETY: `fd` was checked open above and stays open while borrowed here (uswap closes no
    // descriptor it did not open).
    let user = unsafe { BorrowedFd::borrow_raw(fd) };
    let own = rustix::io::fcntl_dupfd_cloexec(user.as_fd(), 3).map_err(|e| bad(e.to_string()))?;
    if fd > 2 {
        rustix::io::fcntl_setfd(user, rustix::io::FdFlags::CLOEXEC).map_err(|e| bad(e.to_string()))?;
    }
    Ok(StatsTo::Fd(own))
}

/// Warn when `limit` is above physical memory: the machine runs out before the limit matters.
fn warn_above_ram(arg: &str, limit: u64) {
    if let Ok(total) = uswap::size::mem_total() {
        if limit > total {
            eprintln!(
                "uswap: warning: --limit {arg} ({}) is above this machine's physical memory ({}): it cannot take \
                 effect before the machine runs out of memory",
                uswap::size::format(limit),
                uswap::size::format(total)
            );
        }
    }
}

/// A tier list that cannot bound memory is said before the program runs: `zero` alone stores
/// no page, and tiers all in RAM hold only what compresses (the pager says it again while
/// the program runs if that is why the limit cannot hold).
fn warn_unbounded_tiers(tc: &uswap::config::TiersConfig, tiers: &str) {
    use uswap::config::TierSpec;
    if tc.tiers.is_empty() {
        eprintln!(
            "uswap: warning: --tiers {tiers} stores no page (zero keeps only zero pages out of memory): once the \
             program's data outgrows the limit, the limit cannot hold; add a pool or a file tier, e.g. --tiers \
             zero,lz4,file:/var/tmp"
        );
    } else if !tc.tiers.iter().any(|t| matches!(t, TierSpec::File(_))) {
        eprintln!(
            "uswap: warning: --tiers {tiers} keeps every page in RAM: the limit holds only while the data \
             compresses below it (pages that do not compress stay in memory); add a file tier to bound it, e.g. \
             --tiers {tiers},file:/var/tmp"
        );
    }
}

fn parse_folio(s: &str) -> Result<usize, RunError> {
    let v = uswap::size::parse(s).map_err(|e| usage(format!("--folio: {e}")))?;
    match v {
        4096 | 65536 | 2097152 => Ok(v as usize),
        _ => Err(usage(format!("bad --folio '{s}' (expected 4K, 64K or 2M)"))),
    }
}

/// Search `PATH` like execvp. Err(127) when not found, Err(126) when not executable.
fn find_program(p: &OsString) -> Result<PathBuf, RunError> {
    let name = Path::new(p);
    let is_exec = |q: &Path| {
        std::fs::metadata(q).is_ok_and(|m| m.is_file())
            && std::ffi::CString::new(q.as_os_str().as_encoded_bytes())
                // SAFETY: access(2) with a NUL-terminated path.
                .is_ok_and(|c| unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0)
    };
    if p.as_encoded_bytes().contains(&b'/') {
        match std::fs::metadata(name) {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                // A directory on the way is not searchable: found or not, it cannot run (126,
                // as a shell says).
                return Err(RunError(format!("{}: permission denied", name.display()), crate::exit::NOT_EXECUTABLE));
            }
            Err(_) => {
                return Err(RunError(format!("{}: no such file or directory", name.display()), crate::exit::NOT_FOUND))
            }
            Ok(_) => {}
        }
        if !is_exec(name) {
            return Err(RunError(
                format!("{}: permission denied (not an executable file)", name.display()),
                crate::exit::NOT_EXECUTABLE,
            ));
        }
        return Ok(name.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut denied = None;
    for dir in std::env::split_paths(&path) {
        let q = dir.join(name);
        if is_exec(&q) {
            return Ok(q);
        }
        let here = std::fs::metadata(&q).map_or_else(|e| e.kind() == std::io::ErrorKind::PermissionDenied, |_| true);
        if here && denied.is_none() {
            denied = Some(q);
        }
    }
    match denied {
        Some(q) => Err(RunError(format!("{}: permission denied", q.display()), crate::exit::NOT_EXECUTABLE)),
        None => Err(RunError(format!("{}: command not found", name.display()), crate::exit::NOT_FOUND)),
    }
}

pub use uswap_pager::exe::{exe_kind, ExeKind, GO_REFUSED};

extern "C" fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo.
    let from_kernel = unsafe { (*info).si_code > 0 || (*info).si_pid() == 0 };
    if !from_kernel {
        crate::guardian::forward(sig);
    }
}

fn sig_name(s: i32) -> &'static str {
    match s {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

/// The variables the program is started with: the library to preload, and the library's
/// configuration ([`uswap_pager::launch`]). The snapshot period is the live view's
/// ([`live::SNAPSHOT_MS`]) unless the user set one (`interval_set`).
fn launch_env(
    preload: OsString,
    limit: u64,
    folio: u64,
    tiers: &str,
    statsdir: &Path,
    budget: &Path,
    interval_set: bool,
) -> Vec<(OsString, OsString)> {
    let mut env = vec![
        ("LD_PRELOAD".into(), preload),
        launch::LIMIT.pair(limit),
        launch::FOLIO.pair(folio),
        launch::TIERS.pair(tiers),
        launch::STATS_DIR.pair(statsdir),
        launch::TREE_BUDGET.pair(budget),
    ];
    if !interval_set {
        env.push(launch::STATS_INTERVAL_MS.pair(live::SNAPSHOT_MS));
    }
    env
}

/// Check the configuration, start the program under the pager, wait, report. Returns the exit
/// code to use.
pub fn run(a: RunArgs) -> Result<u8, RunError> {
    // First: `fd:N` must be a descriptor uswap was given, not one it opened.
    let stats_to = a.stats.as_deref().map(stats_to).transpose()?;
    let limit = parse_limit(&a.limit)?;
    let folio = parse_folio(&a.folio)?;
    if limit < 4 * folio as u64 {
        return Err(usage(format!(
            "--limit {} is below four folios ({}): the pager needs room to work",
            a.limit,
            uswap::size::format(4 * folio as u64)
        )));
    }
    if !a.quiet {
        warn_above_ram(&a.limit, limit);
    }
    let tiers = if a.force { uswap::config::with_force(&a.tiers) } else { a.tiers.clone() };
    // Tiers: parse and build once here, so a bad tier or an unwritable directory is reported
    // before the program runs (each process builds its own).
    let tc = uswap::config::TiersConfig::parse(&tiers).map_err(|e| usage(format!("--tiers: {e}")))?;
    tc.build().map_err(|e| usage(format!("--tiers: {e}")))?;
    if !a.quiet {
        warn_unbounded_tiers(&tc, &a.tiers);
    }
    if let Some(StatsTo::File(s)) = &stats_to {
        std::fs::write(s, b"").map_err(|e| usage(format!("--stats {}: {e}", s.display())))?;
    }
    // userfaultfd: the same features the pager asks for.
    let f = uswap_pager::uffd::feature::PAGEFAULT_FLAG_WP
        | uswap_pager::uffd::feature::EVENT_UNMAP
        | uswap_pager::uffd::feature::EVENT_REMAP
        | uswap_pager::uffd::feature::EVENT_FORK
        | uswap_pager::uffd::feature::SIGBUS;
    match uswap_pager::uffd::Uffd::open(f, 0, true) {
        Err(e) => {
            return Err(RunError(
                format!("cannot run under the pager: {e}; the program was not started"),
                crate::exit::NO_UFFD,
            ))
        }
        // Not enough for an unmodified program: a read(2) into swapped-out memory would fail
        // with EFAULT instead of being paged in.
        Ok(u) if u.user_mode_only() => {
            return Err(RunError(
                format!(
                    "cannot run under the pager: this process may use userfaultfd only for faults in user mode, \
                     so system calls that touch swapped-out memory would fail with EFAULT; {}; the program was \
                     not started",
                    uswap_pager::uffd::PERMIT_HINT
                ),
                crate::exit::NO_UFFD,
            ))
        }
        Ok(_) => {}
    }
    let prog = find_program(&a.command[0])?;
    match exe_kind(&prog) {
        Ok(ExeKind::Go) => {
            return Err(usage(format!(
                "{} is a Go program, which uswap cannot page yet: {GO_REFUSED}. It was not started; run it \
                 without uswap (a memory cgroup limits it, e.g. systemd-run --scope -p MemoryMax=...).",
                prog.display()
            )))
        }
        Ok(ExeKind::Static) => {
            return Err(usage(format!(
                "{} is statically linked: uswap puts a program under the pager with an LD_PRELOAD library, \
                 which only the dynamic loader loads, so its memory would be neither paged nor limited. \
                 Use a dynamically linked build, or the uswap library API inside the program.",
                prog.display()
            )))
        }
        Ok(ExeKind::Sanitized(name)) => {
            return Err(usage(format!(
                "{} is built with {name}, whose runtime must be the first library the program loads (it \
                 refuses to start after uswap's LD_PRELOAD library) and which maps its own shadow memory: \
                 uswap cannot page it. It was not started; run it without uswap, or a build without the \
                 sanitizer under uswap.",
                prog.display()
            )))
        }
        Ok(_) => {}
        Err(e) => return Err(RunError(format!("{}: {e}", prog.display()), crate::exit::NOT_EXECUTABLE)),
    }
    let lib = crate::preload::locate().map_err(|m| RunError(m, 1))?;
    let lib = lib.canonicalize().unwrap_or(lib);
    if let Some(m) = &a.metrics_file {
        crate::rundir::write_atomic(m, b"")
            .then_some(())
            .ok_or_else(|| usage(format!("--metrics-file {}: cannot write it", m.display())))?;
    }
    let (tree, why) = live::TreeDir::create().map_err(|e| RunError(e, 1))?;
    if let (Some(why), false) = (why, a.quiet) {
        eprintln!("uswap: `uswap status` will not see this run: {why}");
    }
    let statsdir = tree.path.clone();
    let preload = match std::env::var_os("LD_PRELOAD") {
        Some(old) if !old.is_empty() => {
            let mut s = lib.clone().into_os_string();
            s.push(":");
            s.push(old);
            s
        }
        _ => lib.clone().into_os_string(),
    };
    // One limit for the whole tree (uswap_pager::tree): every process under the pager takes
    // its share from this file.
    let budget = statsdir.join(crate::rundir::BUDGET_FILE);
    uswap_pager::tree::create(&budget, limit).map_err(|e| RunError(format!("{}: {e}", budget.display()), 1))?;
    let interval_set = std::env::var_os(launch::STATS_INTERVAL_MS.os_name()).is_some();
    let env = launch_env(preload, limit, folio as u64, &tiers, &statsdir, &budget, interval_set);
    // Forward signals sent to us.
    for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2] {
        // SAFETY: installing an SA_SIGINFO handler that only calls kill(2).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = forward as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(s, &sa, std::ptr::null_mut());
        }
    }
    crate::preload::shed_before_spawn();
    let t0 = std::time::Instant::now();
    // The program runs under a guardian that ends its whole tree if this process dies
    // (`crate::guardian`).
    let mut child = crate::guardian::spawn(&prog, &a.command, &env, &statsdir).map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 };
        RunError(format!("{}: {e}", prog.display()), code)
    })?;
    let pid = child.pid;
    let command: Vec<String> = a.command.iter().map(|s| s.to_string_lossy().into_owned()).collect();
    tree.describe(&command, pid, limit, folio as u64, &tiers, a.metrics_file.as_deref());
    let metrics = a.metrics_file.clone().map(|m| MetricsWriter::start(m, statsdir.clone()));
    let watch = std::sync::Arc::new(std::sync::Mutex::new(
        crate::unmanaged::Watch::new(pid, budget.clone(), &lib, !a.quiet).owned_by(child.guardian),
    ));
    let sampler = sample_tree(watch.clone());
    let crate::guardian::Exit { status, rusage: ru } = child.wait().map_err(|e| RunError(e, 1))?;
    let (code, signal) = if libc::WIFSIGNALED(status) {
        let s = libc::WTERMSIG(status);
        (128 + s as u8, Some(s))
    } else {
        (libc::WEXITSTATUS(status) as u8, None)
    };
    let peak_rss = ru.ru_maxrss as u64 * 1024;
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    if let Some(m) = metrics {
        m.finish();
    }
    let tp = sampler.finish();
    let tree_peak = crate::report::TreePeak {
        anon_pss_bytes: tp.value,
        processes: tp.with,
        samples: tp.samples,
        every_ms: TREE_SAMPLE_MS,
    };
    let procs = crate::stats_read::read_procs(&statsdir);
    drop(tree);
    let (unmanaged, shmem_peak) = {
        let w = watch.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (w.found().to_vec(), w.shmem_peak())
    };
    let r = crate::report::Run {
        command: &command,
        pid,
        exit_code: code,
        signal,
        elapsed_s: t0.elapsed().as_secs_f64(),
        cpu_s: (tv(ru.ru_utime), tv(ru.ru_stime)),
        limit,
        folio: folio as u64,
        tiers: &tiers,
        peak_rss,
        tree_peak,
        unmanaged: &unmanaged,
        shmem_peak,
    };
    let doc = crate::report::run_report(&r, &procs);
    let json = format!("{doc:#}\n");
    let written = match stats_to {
        Some(StatsTo::File(s)) => std::fs::write(s, json),
        // One write: the document is not interleaved with what the program writes to stderr.
        Some(StatsTo::Stderr) => std::io::Write::write_all(&mut std::io::stderr().lock(), json.as_bytes()),
        Some(StatsTo::Fd(fd)) => std::io::Write::write_all(&mut std::fs::File::from(fd), json.as_bytes()),
        None => {
            if !a.quiet {
                summary(&prog, limit, peak_rss, &doc);
            }
            Ok(())
        }
    };
    if let (Err(e), Some(s)) = (written, &a.stats) {
        eprintln!("uswap: --stats {}: {e}", s.display());
    }
    if let Some(s) = signal {
        if !a.quiet {
            eprintln!("uswap: {} killed by {} ({s})", prog.display(), sig_name(s));
        }
    }
    child.release();
    Ok(code)
}

/// The memory the whole tree holds, sampled every [`TREE_SAMPLE_MS`]: the sum of the anonymous
/// proportional set sizes (`Pss_Anon`: a page shared copy-on-write by a fork parent and child
/// counts half in each) of the processes of the tree (every process under the pager, and
/// their descendants, those that run without one included), the largest sum kept with the
/// processes it was taken over. The limit covers the tree's charges; this is what checks it
/// from outside, across processes. Each sample also looks for processes that run without
/// the pager and counts their memory against the limit ([`crate::unmanaged`]).
fn sample_tree(watch: std::sync::Arc<std::sync::Mutex<crate::unmanaged::Watch>>) -> live::PeakSampler {
    let mut pss = crate::procsum::PssWatch::default();
    live::PeakSampler::start(std::time::Duration::from_millis(TREE_SAMPLE_MS), move |peak| {
        let pids = watch.lock().unwrap_or_else(std::sync::PoisonError::into_inner).sample();
        pss.read(&pids, "Pss_Anon:", peak).map(|v| (v, pids.len() as u64))
    })
}

/// Period of [`sample_tree`] (a reading that may be a new peak walks the processes' page tables).
const TREE_SAMPLE_MS: u64 = 200;

/// `--metrics-file`: a thread that rewrites the file every second from the tree's statistics,
/// and once more when told to finish (the final figures of the processes that exited, and the
/// run over: `uswap_run_up 0`).
struct MetricsWriter {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl MetricsWriter {
    fn start(path: PathBuf, dir: PathBuf) -> MetricsWriter {
        let (stop, rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let (mut prev, mut last) = (Vec::new(), false);
            loop {
                let now: Vec<live::Tree> = live::tree_at(&dir).into_iter().collect();
                let mut doc = live::with_rates(&prev, &now);
                if last {
                    live::mark_over(&mut doc);
                }
                crate::rundir::write_atomic(&path, live::prometheus(&doc).as_bytes());
                if last {
                    return;
                }
                prev = now;
                let waited = rx.recv_timeout(std::time::Duration::from_secs(1));
                last = !matches!(waited, Err(std::sync::mpsc::RecvTimeoutError::Timeout));
            }
        });
        MetricsWriter { stop, thread }
    }

    fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

fn summary(prog: &Path, limit: u64, peak: u64, doc: &serde_json::Value) {
    let human = uswap::size::format;
    let name = prog.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let main = doc.get("main").filter(|m| !m.is_null());
    let others = doc["other_processes"].as_array().cloned().unwrap_or_default();
    eprintln!(
        "uswap: {name}: {:.2} s, CPU {:.2} s user + {:.2} s system",
        doc["elapsed_s"].as_f64().unwrap_or(0.0),
        doc["cpu_user_s"].as_f64().unwrap_or(0.0),
        doc["cpu_system_s"].as_f64().unwrap_or(0.0)
    );
    // The limit covers what the pager manages; the library, the pager's own tables and the
    // program's binary and libraries (RSS when the pager had started) come on top.
    match main.map(|m| u(m, "/fixed_overhead_bytes")) {
        Some(fixed) => {
            let bound = limit + fixed;
            eprintln!(
                "uswap: {name}: peak RSS {}; limit {} + fixed overhead {} = {} ({} {})",
                human(peak),
                human(limit),
                human(fixed),
                human(bound),
                human(peak.abs_diff(bound)),
                if peak > bound { "over" } else { "under" }
            );
            if let Some(m) = main {
                eprintln!(
                    "uswap: fixed overhead = RSS at start {} + uswap's own heap growth {} + the engine's tables and I/O buffers {} + file-backed pages loaded since {}",
                    human(u(m, "/rss_at_start_bytes")),
                    human(u(m, "/preload/internal_heap_growth_bytes")),
                    human(u(m, "/engine_meta_peak_bytes")),
                    human(u(m, "/file_rss_growth_bytes")),
                );
            }
            let unmanaged = doc["unmanaged_processes"].as_array().map_or(0, Vec::len);
            let shmem = main.map_or(0, |m| u(m, "/shmem_rss_growth_bytes"));
            if shmem >= 1 << 20 {
                // Not fixed overhead, and not managed: said whether or not it went over.
                eprintln!(
                    "uswap: {name}: shared memory (MAP_SHARED or memfd) grew by {}: uswap cannot swap it out; it is \
                     counted against the limit",
                    human(shmem)
                );
            }
            if peak > bound && shmem >= 1 << 20 {
                eprintln!("uswap: over because of the shared memory above");
            } else if peak > bound && unmanaged > 0 {
                // The peak RSS is the largest of the program's and its waited-for children's.
                eprintln!("uswap: over because {unmanaged} process(es) of the tree ran without the pager (below)");
            } else if peak > bound {
                if let Some(m) = main {
                    eprintln!("uswap: over because {}", crate::report::why_over(m, limit));
                }
            }
        }
        // Without the program's statistics its fixed overhead is unknown: say so rather
        // than compare against the bare limit.
        None => eprintln!(
            "uswap: {name}: peak RSS {}; limit {} (+ a fixed overhead not reported)",
            human(peak),
            human(limit)
        ),
    }
    match main {
        Some(m) if m["dormant"] == true => eprintln!(
            "uswap: {name} never reached {} of anonymous memory (it held at most {}): it ran with no pager",
            human(u(m, "/start_bytes")),
            human(u(m, "/anon_peak_bytes"))
        ),
        Some(m) => {
            for l in crate::report::human_lines(m) {
                eprintln!("uswap: {l}");
            }
        }
        None => eprintln!("uswap: no statistics from the program (it did not exit through exit(3), or exec'd)"),
    }
    if !others.is_empty() {
        let out: u64 = others.iter().map(|o| u(o, "/swap/pswpout")).sum();
        let hwm = others.iter().map(|o| u(o, "/peak_rss_bytes")).max().unwrap_or(0);
        let dormant = others.iter().filter(|o| o["dormant"] == true).count();
        eprintln!(
            "uswap: {} more process(es) ran under uswap, sharing the {} limit{}: swapped out {}, largest peak RSS {}",
            others.len(),
            human(limit),
            if dormant > 0 { format!(" ({dormant} of them stayed small and started no pager)") } else { String::new() },
            human(out * 4096),
            human(hwm)
        );
        let failed: Vec<&serde_json::Value> = others.iter().filter(|o| u(o, "/reclaim/store_errors") > 0).collect();
        if let Some(first) = failed.first() {
            let breaks: u64 = failed.iter().map(|o| u(o, "/reclaim/limit_breaks")).sum();
            eprintln!(
                "uswap: the store failed in {} of them ({} failed store(s){}){}",
                failed.len(),
                failed.iter().map(|o| u(o, "/reclaim/store_errors")).sum::<u64>(),
                crate::report::store_failures(first).first().map_or(String::new(), |f| format!(", first {f}")),
                if breaks > 0 {
                    format!("; {breaks} fault(s) mapped over the limit after waiting for room")
                } else {
                    String::new()
                }
            );
        }
    }
    // By reason, in the order found: each process when there are a few, else one line.
    let listed: Vec<&serde_json::Value> = doc["unmanaged_processes"].as_array().into_iter().flatten().collect();
    let mut reasons: Vec<&str> = Vec::new();
    for un in &listed {
        let r = un["reason"].as_str().unwrap_or("");
        if !reasons.contains(&r) {
            reasons.push(r);
        }
    }
    for reason in reasons {
        let of: Vec<&&serde_json::Value> = listed.iter().filter(|un| un["reason"].as_str() == Some(reason)).collect();
        if of.len() <= 3 {
            for un in of {
                eprintln!(
                    "uswap: pid {} ({}) ran without the pager ({reason}): anonymous memory peaked at {}, not swappable, counted against the limit",
                    u(un, "/pid"),
                    un["command"].as_str().unwrap_or(""),
                    human(u(un, "/peak_anon_bytes"))
                );
            }
        } else if let Some(big) = of.iter().max_by_key(|un| u(un, "/peak_anon_bytes")) {
            eprintln!(
                "uswap: {} processes ran without the pager ({reason}): anonymous memory peaked at {} in the largest, pid {} ({}); not swappable, counted against the limit (all in --stats)",
                of.len(),
                human(u(big, "/peak_anon_bytes")),
                u(big, "/pid"),
                big["command"].as_str().unwrap_or("")
            );
        }
    }
    let tp = u(doc, "/tree_peak/anon_pss_bytes");
    if u(doc, "/tree_peak/processes") > 1 && tp > 0 {
        let own = crate::report::tree_anon_overhead(doc);
        eprintln!(
            "uswap: the tree's anonymous memory peaked at {} (Pss of {} processes, sampled every {} ms): limit {} + the processes' own anonymous overhead {} = {} ({} {})",
            human(tp),
            u(doc, "/tree_peak/processes"),
            u(doc, "/tree_peak/every_ms"),
            human(limit),
            human(own),
            human(limit + own),
            human(tp.abs_diff(limit + own)),
            if tp > limit + own { "over" } else { "under" }
        );
    }
    let shm = u(doc, "/tree_peak/shmem_bytes");
    if u(doc, "/tree_peak/processes") > 1 && shm >= 1 << 20 {
        eprintln!(
            "uswap: the tree's shared memory peaked at {}: not swappable by uswap, counted against the limit",
            human(shm)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_limits_and_folios() {
        assert_eq!(parse_limit("512M").ok(), Some(512 << 20));
        assert_eq!(parse_limit("256MiB").ok(), Some(256 << 20));
        assert_eq!(parse_limit("1.5G").ok(), Some(3 << 29));
        assert!(parse_limit("50%").is_ok_and(|v| v > 0));
        assert!(parse_limit("lots").is_err());
        let RunError(m, code) = parse_limit("0").err().unwrap();
        assert!(m.contains("greater than zero") && m.contains("--limit") && code == 2, "{m}");
        assert_eq!(parse_folio("64K").ok(), Some(65536));
        assert!(parse_folio("8K").is_err());
    }

    /// Every variable the runner sets (but `LD_PRELOAD`) is one the launch module declares for
    /// the runner, and the library reads back what the runner meant.
    #[test]
    fn the_runner_sets_only_declared_variables_and_the_library_reads_them_back() {
        use uswap_pager::launch::{Scope, FOLIO, LIMIT, STATS_DIR, STATS_INTERVAL_MS, TIERS, TREE_BUDGET};
        let (dir, budget) = (Path::new("/run/uswap/tree-1"), Path::new("/run/uswap/tree-1/budget"));
        for interval_set in [false, true] {
            let env = launch_env("/lib/x.so".into(), 3 << 29, 65536, "zero,lz4", dir, budget, interval_set);
            assert_eq!(env[0], ("LD_PRELOAD".into(), "/lib/x.so".into()));
            for (k, _) in &env[1..] {
                let d = launch::lookup(k).unwrap_or_else(|| panic!("{k:?} is not declared in uswap_pager::launch"));
                assert!(d.scope == Scope::Runner || d.name == STATS_INTERVAL_MS.name, "{k:?} is not the runner's");
            }
            let get = |name: &std::ffi::CStr| -> Option<&'static str> {
                let v = env.iter().find(|(k, _)| k.as_encoded_bytes() == name.to_bytes())?;
                Some(Box::leak(v.1.to_str().unwrap().to_owned().into_boxed_str()))
            };
            assert_eq!(LIMIT.read(get).unwrap(), 3 << 29);
            assert_eq!(FOLIO.read(get).unwrap(), 65536);
            assert_eq!(TIERS.read(get), Some("zero,lz4"));
            assert_eq!(STATS_DIR.read(get), Some("/run/uswap/tree-1"));
            assert_eq!(TREE_BUDGET.read(get), Some("/run/uswap/tree-1/budget"));
            let interval = STATS_INTERVAL_MS.read(get).unwrap();
            assert_eq!(interval, if interval_set { STATS_INTERVAL_MS.default } else { live::SNAPSHOT_MS });
        }
    }
}
