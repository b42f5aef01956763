//! Helpers shared by the end-to-end tests (`run_e2e.rs`, `runtimes.rs`): where the preload
//! library is, running a command with a deadline (on timeout: the stacks of every thread of
//! every process in its group, then SIGKILL), `uswap run` with statistics, and the peak-RSS
//! check against limit + fixed overhead + slack.
//!
//! Locking: none; each helper owns the processes it starts (two reader threads per command).
#![allow(
    dead_code,
    reason = "each test crate uses its own subset of these helpers; #[expect] would be unfulfilled in the crate that uses them all"
)]

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const MIB: u64 = 1 << 20;

/// How long one program may run (under uswap or not) before the test prints the stacks of
/// every thread of its process tree, kills it and fails: `default` seconds, or
/// `USWAP_E2E_TIMEOUT` seconds.
pub fn timeout_or(default: u64) -> Duration {
    let s = std::env::var("USWAP_E2E_TIMEOUT").ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    Duration::from_secs(s)
}

/// [`timeout_or`] with the default of `run_e2e.rs`, 60 s.
pub fn timeout() -> Duration {
    timeout_or(60)
}

/// The allowance over `limit + fixed overhead` for the peak RSS: 8 MiB (the engine's tables
/// and the library's own heap grow with use) + limit / 4 (reclaim keeps at least limit / 8
/// resident when the pool and the swap cache fill the limit, and lets the charge run over
/// rather than evict the page the last fault mapped).
pub fn slack(limit: u64) -> u64 {
    8 * MIB + limit / 4
}

// ---------------------------------------------------------------------------------------------
// Running things

/// `libuswap_ffi.so`: next to the `uswap` binary or in its `deps/` directory (where a
/// dev-dependency build puts it), the newest if both exist.
pub fn preload() -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_uswap"));
    let dir = exe.parent().expect("the uswap binary has a directory");
    let found = [dir.join("libuswap_ffi.so"), dir.join("deps").join("libuswap_ffi.so")]
        .into_iter()
        .filter_map(|p| {
            let t = std::fs::metadata(&p).and_then(|m| m.modified()).ok()?;
            Some((t, p))
        })
        .max();
    match found {
        Some((_, p)) => p,
        None => panic!(
            "libuswap_ffi.so is neither in {} nor in its deps/ directory: build it with \
             `cargo build -p uswap-ffi` (uswap-cli's dev-dependency on uswap-ffi should have)",
            dir.display()
        ),
    }
}

/// What a finished command did.
pub struct Ran {
    /// Exit code, or None when a signal ended it.
    pub code: Option<i32>,
    /// Everything it wrote to stdout.
    pub stdout: Vec<u8>,
    /// Everything it wrote to stderr.
    pub stderr: String,
    /// Wall time.
    pub secs: f64,
}

impl Ran {
    /// stdout as text.
    pub fn out(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

pub fn send(pid: i32, sig: i32) {
    // SAFETY: kill(2) on a process (group) this test started; no memory is involved.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Run `cmd` in its own process group with [`timeout`]; see [`run_with`].
pub fn run(cmd: Command, what: &str) -> Ran {
    run_with(cmd, what, timeout())
}

/// One program under test at a time in a test binary: the tests measure peak RSS against tight
/// bounds, and under a debug build the pager's threads fall behind programs of other tests
/// running beside them, far enough to take a peak over a bound the program alone stays within.
/// Taken by [`run_with`] and by tests that start programs themselves; a test that panicked
/// while holding it does not stop the others.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Run `cmd` in its own process group with a deadline; on timeout print the stacks of every
/// thread of every process of the group ([`dump_stacks`]), send SIGTERM (uswap forwards it to
/// the program), then SIGKILL to the whole group, and fail.
pub fn run_with(mut cmd: Command, what: &str, deadline: Duration) -> Ran {
    let _one = one_at_a_time();
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let pid = child.id() as i32;
    let mut o = child.stdout.take().expect("piped stdout");
    let mut e = child.stderr.take().expect("piped stderr");
    let to = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = o.read_to_end(&mut v);
        v
    });
    let te = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = e.read_to_end(&mut v);
        v
    });
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > deadline && !timed_out {
            timed_out = true;
            eprintln!("{what}: still running after {} s: the stacks of its threads:", deadline.as_secs());
            eprintln!("{}", dump_stacks(pid));
            send(pid, libc::SIGTERM);
            let grace = Instant::now();
            while grace.elapsed() < Duration::from_secs(5) {
                if child.try_wait().expect("wait").is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            send(-pid, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let secs = start.elapsed().as_secs_f64();
    // Anything the program left behind in the group would keep the pipes open.
    send(-pid, libc::SIGKILL);
    let stdout = to.join().expect("stdout reader");
    let stderr = String::from_utf8_lossy(&te.join().expect("stderr reader")).into_owned();
    if timed_out {
        panic!(
            "{what}: still running after {} s: killed (the program thrashes or hangs under the pager; \
             stacks above)\nstdout: {}\nstderr: {stderr}",
            deadline.as_secs(),
            String::from_utf8_lossy(&stdout)
        );
    }
    Ran { code: status.code(), stdout, stderr, secs }
}

/// How long gdb may take for one process (it can hang reading memory a stuck pager should
/// supply): then it is killed and the kernel's stacks are all there is.
const GDB_TIMEOUT: Duration = Duration::from_secs(30);

/// The stacks of every thread of every process of group `pgid`: for each, the kernel's view
/// (`/proc/PID/task/*/{wchan,stack}`), then gdb's `thread apply all bt`.
pub fn dump_stacks(pgid: i32) -> String {
    let mut out = String::new();
    let field = |stat: &str, i: usize| {
        stat.rfind(')').and_then(|p| stat[p + 1..].split_whitespace().nth(i).map(str::to_string))
    };
    let mut pids: Vec<i32> = std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter(|p| {
                    let s = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
                    field(&s, 2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid)
                })
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    for pid in pids {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline: Vec<String> =
            cmdline.split(|c| *c == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        out += &format!("=== pid {pid}: {}\n", cmdline.join(" ").trim());
        let mut tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|rd| rd.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
            .unwrap_or_default();
        tids.sort_unstable();
        for tid in tids {
            let base = format!("/proc/{pid}/task/{tid}");
            let rd = |f: &str| std::fs::read_to_string(format!("{base}/{f}")).unwrap_or_default();
            let stat = rd("stat");
            out += &format!(
                "  tid {tid} ({}) state {} wchan {}\n",
                rd("comm").trim(),
                field(&stat, 0).unwrap_or_default(),
                rd("wchan").trim()
            );
            for l in rd("stack").lines() {
                out += &format!("      {l}\n");
            }
        }
        let gdb = Command::new("gdb")
            .args(["-batch", "-nx", "-q", "-iex", "set debuginfod enabled off", "-p", &pid.to_string()])
            .args(["-ex", "set pagination off", "-ex", "thread apply all bt"])
            .env_remove("LD_PRELOAD")
            .env("DEBUGINFOD_URLS", "")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut g = match gdb {
            Ok(g) => g,
            Err(e) => {
                out += &format!("  (no gdb: {e})\n");
                continue;
            }
        };
        let mut so = g.stdout.take().expect("piped");
        let reader = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = so.read_to_end(&mut v);
            v
        });
        let start = Instant::now();
        while g.try_wait().ok().flatten().is_none() {
            if start.elapsed() > GDB_TIMEOUT {
                let _ = g.kill();
                out += &format!("  (gdb did not finish in {} s: killed)\n", GDB_TIMEOUT.as_secs());
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = g.wait();
        for l in String::from_utf8_lossy(&reader.join().unwrap_or_default()).lines() {
            out += &format!("  {l}\n");
        }
    }
    out
}

/// `uswap run ARGS…` with the preload library of this build.
pub fn uswap_run<S: AsRef<OsStr>>(args: &[S]) -> Ran {
    uswap_run_env(args, &[])
}

/// [`uswap_run`] with extra environment variables for the program (`USWAP_MMAP_MIN`, …).
pub fn uswap_run_env<S: AsRef<OsStr>>(args: &[S], envs: &[(&str, &str)]) -> Ran {
    uswap_run_within(args, envs, timeout())
}

/// [`uswap_run_env`] with a deadline of its own (a test whose program is slow by design).
pub fn uswap_run_within<S: AsRef<OsStr>>(args: &[S], envs: &[(&str, &str)], deadline: Duration) -> Ran {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uswap"));
    cmd.arg("run").args(args).env("USWAP_PRELOAD", preload()).env_remove("LD_PRELOAD");
    cmd.envs(envs.iter().copied());
    let what = format!(
        "uswap run {}",
        args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
    );
    run_with(cmd, &what, deadline)
}

/// `uswap run --limit LIMIT --stats STATS -- PROGRAM ARGS…`.
pub fn uswap_run_stats(limit: &str, stats: &Path, program: &[&OsStr]) -> Ran {
    uswap_run_stats_within(limit, stats, program, timeout())
}

/// [`uswap_run_stats`] with a deadline of its own.
pub fn uswap_run_stats_within(limit: &str, stats: &Path, program: &[&OsStr], deadline: Duration) -> Ran {
    let mut args =
        vec![OsStr::new("--limit"), OsStr::new(limit), OsStr::new("--stats"), stats.as_os_str(), OsStr::new("--")];
    args.extend_from_slice(program);
    uswap_run_within(&args, &[], deadline)
}

/// True (with a printed reason) when the runner refused because userfaultfd is not permitted.
pub fn no_uffd(r: &Ran) -> bool {
    if r.code == Some(1) && r.stderr.contains("userfaultfd") {
        assert!(
            std::env::var_os("USWAP_REQUIRE_UFFD").is_none(),
            "userfaultfd is not permitted here and USWAP_REQUIRE_UFFD is set: {}",
            r.stderr.trim()
        );
        eprintln!("SKIPPED: userfaultfd is not permitted here: {}", r.stderr.trim());
        return true;
    }
    false
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("uswap-e2e-").tempdir().expect("temporary directory")
}

/// Compile tests/programs/NAME.c into DIR with `cc -O2 -pthread` and EXTRA flags. Err(stderr)
/// when cc fails; panics when there is no cc.
pub fn try_compile(name: &str, dir: &Path, extra: &[&str]) -> Result<PathBuf, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs").join(format!("{name}.c"));
    let out = dir.join(name);
    let o = Command::new("cc")
        .args(["-O2", "-pthread", "-Wall", "-Wextra"])
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run cc ({e}): these tests compile C programs, install a C compiler"));
    if !o.status.success() {
        return Err(String::from_utf8_lossy(&o.stderr).into_owned());
    }
    Ok(out)
}

pub fn compile(name: &str, dir: &Path) -> PathBuf {
    try_compile(name, dir, &[]).unwrap_or_else(|e| panic!("cc {name}.c failed:\n{e}"))
}

pub fn stats(path: &Path) -> serde_json::Value {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("--stats {}: {e}", path.display()));
    serde_json::from_slice(&b).unwrap_or_else(|e| panic!("--stats {}: not JSON: {e}", path.display()))
}

pub fn num(v: &serde_json::Value, p: &str) -> u64 {
    v.pointer(p).and_then(|x| x.as_u64()).unwrap_or_else(|| panic!("stats: no number at {p} in {v:#}"))
}

pub fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / MIB as f64)
}

/// The process records of a `run --stats` document: the program's, if it wrote one, then every
/// other process's.
pub fn records(st: &serde_json::Value) -> Vec<&serde_json::Value> {
    st.get("main")
        .filter(|m| !m.is_null())
        .into_iter()
        .chain(st["other_processes"].as_array().into_iter().flatten())
        .collect()
}

/// Check a run of `grow 96` (`programs/grow.c`): it exited 0, both processes printed no
/// mismatch, and each wrote statistics in which its mallocs waited for the reclaimer
/// (`alloc_throttled`). Returns the statistics.
pub fn checked_grow_96(r: &Ran, st: &Path) -> serde_json::Value {
    assert_eq!(r.code, Some(0), "grow: stdout:\n{}\nstderr:\n{}", r.out(), r.stderr);
    let mut lines: Vec<String> = r.out().lines().map(str::to_owned).collect();
    lines.sort();
    assert_eq!(lines, ["grow: child 96 MiB mismatches 0", "grow: parent 96 MiB mismatches 0"], "stderr:\n{}", r.stderr);
    let s = stats(st);
    let procs = records(&s);
    assert_eq!(procs.len(), 2, "the parent and the child wrote statistics: {s:#}");
    for p in &procs {
        assert!(num(p, "/faults/alloc_throttled") > 0, "its mallocs waited for the reclaimer: {p:#}");
    }
    s
}

/// Check the whole tree's peak anonymous memory (`tree_peak.anon_pss_bytes`: the largest sum
/// of `Pss_Anon` over the processes under the pager, sampled by `uswap run`) against `limit +
/// slack + every process's own anonymous overhead` (its anonymous RSS when its pager had
/// started, its library heap's growth and the engine's tables), so that processes sharing one
/// limit are checked together, not one by one. Requires more than one sample.
pub fn check_tree_peak(name: &str, st: &serde_json::Value, limit: u64) {
    check_tree_peak_within(name, st, limit, slack(limit));
}

/// [`check_tree_peak`] with a slack of the caller's.
pub fn check_tree_peak_within(name: &str, st: &serde_json::Value, limit: u64, slack: u64) {
    let procs = records(st);
    let own: u64 = procs
        .iter()
        .map(|p| {
            p.pointer("/unmanaged/anon_at_start_bytes").and_then(|v| v.as_u64()).unwrap_or(0)
                + p.pointer("/preload/internal_heap_growth_bytes").and_then(|v| v.as_u64()).unwrap_or(0)
                + p.pointer("/engine_meta_peak_bytes").and_then(|v| v.as_u64()).unwrap_or(0)
        })
        .sum();
    let peak = num(st, "/tree_peak/anon_pss_bytes");
    let samples = num(st, "/tree_peak/samples");
    let bound = limit + own + slack;
    eprintln!(
        "{name}: the tree's anonymous memory peaked at {} over {} processes ({samples} samples); bound {} = limit {} + own {} + slack {}",
        mib(peak),
        num(st, "/tree_peak/processes"),
        mib(bound),
        mib(limit),
        mib(own),
        mib(slack)
    );
    assert!(samples > 1 && peak > 0, "{name}: the tree's memory was not sampled: {st:#}");
    assert!(peak <= bound, "{name}: the tree's anonymous memory {} exceeds {}", mib(peak), mib(bound));
}

/// Check the peak RSS in the stats against `limit + fixed overhead + slack`, printing the
/// figures. The fixed overhead is the largest `fixed_overhead_bytes` of the processes that wrote
/// statistics (each process under uswap has its own pager and limit; a shell that leaves
/// through `_exit`, as dash does, writes none).
pub fn check_peak(name: &str, st: &serde_json::Value, limit: u64, secs: f64) {
    let (peak, bound) = peak_and_bound(name, st, limit, secs);
    assert!(peak <= bound, "{name}: peak RSS {} exceeds its bound {} (see above)", mib(peak), mib(bound));
}

/// The peak RSS of a run and its bound (limit + fixed overhead + [`slack`]), printed with each
/// process's figures.
pub fn peak_and_bound(name: &str, st: &serde_json::Value, limit: u64, secs: f64) -> (u64, u64) {
    assert_eq!(num(st, "/limit_bytes"), limit, "{name}: limit in the stats");
    let procs = records(st);
    assert!(!procs.is_empty(), "{name}: no process wrote statistics: {st:#}");
    let fixed = procs.iter().map(|p| num(p, "/fixed_overhead_bytes")).max().unwrap_or(0);
    let peak = num(st, "/peak_rss_bytes");
    let slack = slack(limit);
    let bound = limit + fixed + slack;
    eprintln!(
        "{name}: {secs:.1} s; peak RSS {} = limit {} + fixed overhead {} {} {} (slack {}, bound {})",
        mib(peak),
        mib(limit),
        mib(fixed),
        if peak >= limit + fixed { "+" } else { "-" },
        mib(peak.abs_diff(limit + fixed)),
        mib(slack),
        mib(bound),
    );
    for p in &procs {
        if p["dormant"] == true {
            eprintln!(
                "  pid {} {}: VmHWM {}, dormant (at most {} anonymous, no pager)",
                num(p, "/pid"),
                p.pointer("/argv/0").and_then(|a| a.as_str()).unwrap_or("?"),
                mib(num(p, "/peak_rss_bytes")),
                mib(num(p, "/anon_peak_bytes")),
            );
            continue;
        }
        let pg = &p["memory"];
        eprintln!(
            "  pid {} {}: VmHWM {}, RSS at start {}, internal heap {}; at exit: charged {}, resident {}, \
             cache {}, pool {}; evicted {} pages",
            num(p, "/pid"),
            p.pointer("/argv/0").and_then(|a| a.as_str()).unwrap_or("?"),
            mib(num(p, "/peak_rss_bytes")),
            mib(num(p, "/fixed_overhead_bytes")),
            mib(num(p, "/preload/internal_heap_bytes")),
            mib(num(pg, "/charged_bytes")),
            mib(num(pg, "/resident_bytes")),
            mib(num(pg, "/swap_cache_bytes")),
            mib(num(pg, "/pool_bytes")),
            num(p, "/swap/pswpout"),
        );
    }
    (peak, bound)
}

pub fn limit_arg(limit: u64) -> String {
    format!("{}M", limit / MIB)
}

/// `uswap status` lists the runs of every run directory of the user, so it runs here where
/// no other run can be seen: in a mount namespace of its own with empty file systems over
/// `/dev/shm` and `/run/user` (the other run directories; the per-user one is in `/dev/shm`
/// once that is a tmpfs). Needs root, as CI has.
pub fn isolated(cmd: &mut Command) -> &mut Command {
    // SAFETY: in the child between fork and exec: system calls only, on NUL-terminated
    // literals.
    unsafe {
        cmd.pre_exec(|| {
            let fail = || Err(std::io::Error::last_os_error());
            if libc::unshare(libc::CLONE_NEWNS) != 0
                || libc::mount(
                    c"none".as_ptr(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
            {
                return fail();
            }
            for d in [c"/dev/shm", c"/run/user"] {
                let mounted = libc::mount(c"tmpfs".as_ptr(), d.as_ptr(), c"tmpfs".as_ptr(), 0, std::ptr::null()) == 0;
                if !mounted && std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOENT) {
                    return fail();
                }
            }
            Ok(())
        })
    }
}
