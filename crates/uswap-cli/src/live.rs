//! The live view of running `uswap run` trees: where each tree's statistics live while it runs,
//! how they are read back, and what `uswap status`, `uswap top` and `run --metrics-file` show.
//!
//! Each `uswap run` makes a *tree directory* `<run dir>/<runner pid>/` (the run directory is
//! `$XDG_RUNTIME_DIR/uswap` when that directory can be used, else `/dev/shm/uswap-<uid>` where
//! `/dev/shm` is a tmpfs, else `/tmp/uswap-<uid>`; in memory because every process of a tree
//! writes a file there when it exits, which cost 0.45 ms on the ext4 `/tmp` here against
//! 0.02 ms on tmpfs, a sixth of what `uswap run` adds to a short-lived process; mode 0711 and
//! owned by the user: others may pass through it to load the cached library but not list or
//! write it; the tree directory is 0700, so nobody else can read or plant statistics) holding
//! `run.json` (the command, the limit, the runner's pid and start time, the metrics file) and,
//! for every process of the tree, the preload library's statistics: `<pid>.json`, a snapshot rewritten every `USWAP_STATS_INTERVAL_MS` (500 ms under
//! `uswap run`), and `<pid>.final.json`, written by `exit(3)`. A process that ends any other
//! way (`_exit`, a signal, SIGKILL) leaves its last snapshot, which the report marks as such.
//! The runner removes the directory when the program has ended; when the runner dies, its
//! guardian (`crate::guardian`) ends the tree and then the run ([`end_run`]). `uswap status`
//! looks in every run directory of the user ([`run_dirs`]) and shows a tree whose runner died
//! without that (its guardian died too) as stale, ending it once nothing of it runs.
//!
//! Locking: none. Writers write a temporary file and rename it, so readers see whole files;
//! every reader works on its own copy.

use crate::report;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The tree's shared budget file in its tree directory (`uswap_pager::tree`), mapped by every
/// process of the tree.
pub const BUDGET_FILE: &str = "budget";

/// The snapshot interval `uswap run` asks the preload library for.
pub const SNAPSHOT_MS: u64 = 500;

/// The user's runtime directory, `$XDG_RUNTIME_DIR`, when it can be used: an absolute path to
/// an existing directory of this user that nobody else may write and that this process may
/// write into. Otherwise (unset; a directory that does not exist, as after `su`, in cron or
/// over ssh; another user's; read-only) None, and the per-user directory is used instead,
/// without a word.
pub fn runtime_dir() -> Option<PathBuf> {
    usable_runtime_dir(std::env::var_os("XDG_RUNTIME_DIR"), uid())
}

fn uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// [`runtime_dir`] for the value `var` of `XDG_RUNTIME_DIR` and user `uid`.
fn usable_runtime_dir(var: Option<std::ffi::OsString>, uid: u32) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let d = PathBuf::from(var.filter(|d| !d.is_empty())?);
    let m = std::fs::metadata(&d).ok()?;
    let c = std::ffi::CString::new(d.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: access(2) of a NUL-terminated path.
    let writable = unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } == 0;
    (d.is_absolute() && m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0 && writable).then_some(d)
}

/// The per-user run directory used without a usable [`runtime_dir`]: `/dev/shm/uswap-<uid>`
/// where `/dev/shm` is a tmpfs, else `/tmp/uswap-<uid>`.
fn per_user_dir(uid: u32) -> PathBuf {
    if is_tmpfs(Path::new("/dev/shm")) {
        PathBuf::from(format!("/dev/shm/uswap-{uid}"))
    } else {
        PathBuf::from(format!("/tmp/uswap-{uid}"))
    }
}

/// The directory holding one tree directory per running `uswap run` (and the cached preload
/// library, `crate::preload`), created if missing: `<runtime dir>/uswap`, else the per-user
/// directory. An error says why it cannot be used (then the run keeps its statistics in a
/// private temporary directory, and `uswap status` cannot see it).
pub fn run_dir() -> Result<PathBuf, String> {
    let uid = uid();
    let dir = runtime_dir().map_or_else(|| per_user_dir(uid), |d| d.join("uswap"));
    owned_dir(&dir, uid)?;
    Ok(dir)
}

/// Every run directory where this user's runs may be, whatever the environment they started
/// in: `<runtime dir>/uswap`, `/run/user/<uid>/uswap` (the runtime directory of a login
/// session, also when this environment has no `XDG_RUNTIME_DIR`) and the per-user directory;
/// those that exist as directories of the user that nobody else may write, each once.
pub fn run_dirs() -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let uid = uid();
    let candidates = [
        runtime_dir().map(|d| d.join("uswap")),
        Some(PathBuf::from(format!("/run/user/{uid}/uswap"))),
        Some(per_user_dir(uid)),
    ];
    let mut out: Vec<PathBuf> = Vec::new();
    let mut seen = Vec::new();
    for d in candidates.into_iter().flatten() {
        let ours = std::fs::symlink_metadata(&d).is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0);
        let Ok(real) = std::fs::canonicalize(&d) else { continue };
        if ours && !seen.contains(&real) {
            seen.push(real);
            out.push(d);
        }
    }
    out
}

/// Whether `dir` is a directory on a tmpfs (memory, not a disk).
fn is_tmpfs(dir: &Path) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: statfs of a NUL-terminated path into a zeroed struct of the right type.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::statfs(c.as_ptr(), &mut st) }) == 0 && st.f_type as i64 == TMPFS_MAGIC && dir.is_dir()
}

/// Make `dir` (mode 0711) unless it exists, and check that it is a real directory of `uid` that
/// nobody else may write or list. Others may *traverse* it: a program that drops privileges
/// under `uswap run` (`runuser`, `gosu`, a server's own `setuid`) must still be able to load
/// the cached library by its name (with 0700 its loader printed "cannot be preloaded" and it
/// ran without the pager). A 0700 directory of an older uswap is opened up to 0711.
pub fn owned_dir(dir: &std::path::Path, uid: u32) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    match std::fs::DirBuilder::new().mode(0o711).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mode = m.permissions().mode() & 0o7777;
    if !m.is_dir() || m.uid() != uid || mode & 0o066 != 0 {
        return Err(format!(
            "{} is not a directory of user {uid} that nobody else may write or list (mode {mode:o}, owner {})",
            dir.display(),
            m.uid()
        ));
    }
    if mode & 0o011 != 0o011 {
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o011));
    }
    Ok(())
}

/// A process's start time in clock ticks since boot (`/proc/PID/stat` field 22): with the pid,
/// it names a process even after its pid is reused.
pub fn start_ticks(pid: i32) -> Option<u64> {
    u32::try_from(pid).ok().and_then(uswap::tier::holds::start_time)
}

/// `/proc/PID/stat` from its third field (the state) on: the command name before it may hold
/// spaces and parentheses, so fields count from the last ')'.
fn stat_fields(pid: i64) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(s[s.rfind(')')? + 2..].to_string())
}

/// Milliseconds since the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A running tree's directory, removed on drop.
pub struct TreeDir {
    /// The directory.
    pub path: PathBuf,
}

impl TreeDir {
    /// Make this runner's tree directory, in the run directory if it can be used, else in a
    /// private temporary directory (with the reason, for a warning).
    pub fn create() -> Result<(TreeDir, Option<String>), String> {
        use std::os::unix::fs::DirBuilderExt;
        let me = std::process::id();
        let (base, why) = match run_dir() {
            Ok(d) => (d, None),
            Err(e) => (std::env::temp_dir(), Some(e)),
        };
        for i in 0..100u32 {
            let d = if why.is_none() && i == 0 {
                base.join(me.to_string())
            } else {
                base.join(format!("uswap-run-{me}-{i}"))
            };
            // A stale directory of an earlier runner with our pid: the runner is dead.
            if why.is_none() && i == 0 && d.exists() {
                let _ = std::fs::remove_dir_all(&d);
            }
            // 0700: the run directory lets others through (to load the cached library), the
            // tree's own statistics stay the user's.
            if std::fs::DirBuilder::new().mode(0o700).create(&d).is_ok() {
                return Ok((TreeDir { path: d }, why));
            }
        }
        Err(format!("cannot create a statistics directory in {}", base.display()))
    }

    /// Write `run.json`: what `uswap status` shows about the tree, and the metrics file to
    /// rewrite when the run ends without its runner ([`end_run`]).
    pub fn describe(&self, command: &[String], pid: i32, limit: u64, folio: u64, tiers: &str, metrics: Option<&Path>) {
        let me = std::process::id() as i32;
        let doc = json!({
            "runner_pid": me,
            "runner_start_ticks": start_ticks(me),
            "pid": pid,
            "command": command,
            "limit_bytes": limit,
            "folio_bytes": folio,
            "tiers": tiers,
            "started_unix_ms": now_ms(),
            "metrics_file": metrics.map(|m| std::path::absolute(m).unwrap_or_else(|_| m.to_path_buf())),
        });
        write_atomic(&self.path.join("run.json"), doc.to_string().as_bytes());
    }
}

impl Drop for TreeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The sum of one `smaps_rollup` field (`Pss:`, `Pss_Anon:`, in bytes) over processes `pids`
/// (those gone meanwhile count 0). Each read walks the process's page tables.
pub fn smaps_sum<P: std::fmt::Display>(pids: impl IntoIterator<Item = P>, key: &str) -> u64 {
    proc_sum(pids, "smaps_rollup", key)
}

/// The sum of one `/proc/PID/status` field (`VmRSS:`, `RssAnon:`, in bytes) over processes
/// `pids`: the kernel's counters, read without walking page tables. `RssAnon` bounds
/// `Pss_Anon` from above, and `VmRSS` bounds `Pss` (a proportional share is at most the page).
pub fn status_sum<P: std::fmt::Display>(pids: impl IntoIterator<Item = P>, key: &str) -> u64 {
    proc_sum(pids, "status", key)
}

/// Whether a sum of [`status_sum`] counters over `procs` processes may hide a proportional
/// size above `peak`. The counters are per-CPU batched in the kernel and may lag the page
/// tables by 32 pages per CPU; 512 KiB per process covers that on the machines we run on.
fn may_exceed(counters: u64, procs: usize, peak: u64) -> bool {
    counters + procs as u64 * COUNTER_LAG > peak
}

/// How far a process's `/proc/PID/status` counters may lag its page tables (see [`may_exceed`]).
const COUNTER_LAG: u64 = 512 << 10;

/// The sum of `pss_key` (`Pss:` or `Pss_Anon:`) over `pids` if it may be above `peak`: the
/// page tables are walked only when the counters that bound it (`VmRSS:`, `RssAnon:`) allow
/// a new peak.
pub fn pss_if_above<P: std::fmt::Display>(pids: &[P], pss_key: &str, peak: u64) -> Option<u64> {
    PssWatch::default().read(pids, pss_key, peak)
}

/// [`pss_if_above`] that also skips the walk when it cannot find a new peak: the processes
/// are the same as at the last walk, their counters (`RssAnon:` or `VmRSS:`) sum to no more
/// than then, and that walk found no page shared between them (the proportional sum equal to
/// the counters' within their lag). Pages come to be shared only through a `fork`, which
/// brings a new process, so the sum is still the counters', at most the last reading. A
/// program at rest under its limit had its page tables walked every 200 ms: 86 % of the
/// runner's time, about 1 % of a CPU (more with a large resident set).
#[derive(Default)]
pub struct PssWatch {
    /// (processes, counters' sum) at the last walk that found nothing shared.
    unshared: Option<(Vec<String>, u64)>,
}

impl PssWatch {
    /// As [`pss_if_above`].
    pub fn read<P: std::fmt::Display>(&mut self, pids: &[P], pss_key: &str, peak: u64) -> Option<u64> {
        let bound = if pss_key == "Pss_Anon:" { "RssAnon:" } else { "VmRSS:" };
        let counters = status_sum(pids, bound);
        if !may_exceed(counters, pids.len(), peak) {
            return None;
        }
        let names: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
        if self.unshared.as_ref().is_some_and(|(n, c)| *n == names && counters <= *c) {
            return None;
        }
        let pss = smaps_sum(pids, pss_key);
        let unshared = pss + pids.len() as u64 * COUNTER_LAG >= counters;
        self.unshared = unshared.then_some((names, counters));
        Some(pss)
    }
}

fn proc_sum<P: std::fmt::Display>(pids: impl IntoIterator<Item = P>, file: &str, key: &str) -> u64 {
    pids.into_iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/{file}")).ok())
        .filter_map(|st| crate::kernel::kb_field(&st, key))
        .sum::<u64>()
        * 1024
}

/// The largest reading a [`PeakSampler`] saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peak {
    /// The largest reading's value.
    pub value: u64,
    /// What came with it (e.g. the processes it was summed over).
    pub with: u64,
    /// Readings taken.
    pub samples: u64,
}

/// A thread that takes a reading (a value and what came with it) right away and then every
/// `every`, until [`PeakSampler::finish`], keeping the largest. The reading is given the
/// largest value so far and may answer `None` when a cheap bound shows it cannot beat it
/// (e.g. the summed `RssAnon` before walking page tables for `Pss_Anon`, see [`status_sum`]):
/// sampling a tree that sits at its limit then costs a few counters, not a page-table walk
/// every period, which took a tenth of a CPU from the program on two cores.
pub struct PeakSampler {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<Peak>,
}

impl PeakSampler {
    /// Start sampling with `read`.
    pub fn start(
        every: std::time::Duration,
        mut read: impl FnMut(u64) -> Option<(u64, u64)> + Send + 'static,
    ) -> PeakSampler {
        let (stop, rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut peak = Peak::default();
            loop {
                if let Some((value, with)) = read(peak.value) {
                    if value > peak.value {
                        (peak.value, peak.with) = (value, with);
                    }
                }
                peak.samples += 1;
                if !matches!(rx.recv_timeout(every), Err(std::sync::mpsc::RecvTimeoutError::Timeout)) {
                    return peak;
                }
            }
        });
        PeakSampler { stop, thread }
    }

    /// Stop, and the largest reading.
    pub fn finish(self) -> Peak {
        let _ = self.stop.send(());
        self.thread.join().unwrap_or_default()
    }
}

/// Write `bytes` to `path` through a temporary name in the same directory and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> bool {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, path).is_ok()
}

/// The per-process statistics in a tree directory, one per pid: its final file if it wrote
/// one, else its last snapshot.
pub fn read_procs(dir: &Path) -> Vec<Value> {
    let mut by_pid: std::collections::BTreeMap<u64, Value> = std::collections::BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".json") else { continue };
        let (pid, is_final) = match stem.strip_suffix(".final") {
            Some(p) => (p, true),
            None => (stem, false),
        };
        let Ok(pid) = pid.parse::<u64>() else { continue };
        let Some(v) = std::fs::read(e.path()).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok()) else {
            continue;
        };
        if is_final || !by_pid.contains_key(&pid) {
            by_pid.insert(pid, v);
        }
    }
    by_pid.into_values().collect()
}

/// Is the process `pid` alive (and not a zombie)?
fn alive(pid: u64) -> bool {
    stat_fields(pid as i64).and_then(|f| f.chars().next()).is_some_and(|c| c != 'Z' && c != 'X')
}

fn u(v: &Value, p: &str) -> u64 {
    v.pointer(p).and_then(Value::as_u64).unwrap_or(0)
}

/// One process as `uswap status` shows it, from its raw statistics (`tiers` names the tiers).
pub fn process_view(raw: &Value, tiers: &str) -> Value {
    let p = report::process(raw, tiers);
    let pid = u(raw, "/pid");
    let is_final = raw.get("final").and_then(Value::as_bool).unwrap_or(true);
    // Summed over the file tiers. A swap file shared with fork relatives (their `used_bytes`
    // then count the data stored before the fork in each of them) has clusters frozen for them.
    let files = |key: &str| -> u64 {
        p.get("tiers")
            .and_then(Value::as_object)
            .map(|t| t.iter().filter(|(k, _)| k.starts_with("file:")).map(|(_, v)| u(v, key)).sum())
            .unwrap_or(0)
    };
    let (file_bytes, file_frozen_bytes) = (files("/used_bytes"), files("/frozen_bytes"));
    json!({
        "pid": pid,
        "argv": raw.get("argv").cloned().unwrap_or(json!([])),
        "running": !is_final && alive(pid),
        "final": is_final,
        "written_unix_ms": u(raw, "/written_unix_ms"),
        "rss_bytes": u(raw, "/vm_rss_bytes"),
        "charged_bytes": u(&p, "/memory/charged_bytes"),
        // Its share of the tree's limit, and the use rate that decides it (`uswap_pager::tree`).
        "share_bytes": u(&p, "/memory/limit_in_force_bytes"),
        "use_rate_bytes_per_s": u(raw, "/tree/use_rate_bytes_per_s"),
        "resident_bytes": u(&p, "/memory/resident_bytes"),
        "swap_cache_bytes": u(&p, "/memory/swap_cache_bytes"),
        "pool_bytes": u(&p, "/memory/pool_bytes"),
        "pool_stored_bytes": u(&p, "/compression/stored_bytes"),
        "pool_used_bytes": u(&p, "/compression/pool_used_bytes"),
        "compression_ratio": p.pointer("/compression/ratio").cloned().unwrap_or(Value::Null),
        "file_bytes": file_bytes,
        "file_frozen_bytes": file_frozen_bytes,
        "faults": u(&p, "/faults/total"),
        "swapin_pages": u(&p, "/swap/pswpin"),
        "swapout_pages": u(&p, "/swap/pswpout"),
    })
}

/// A tree as seen now: `run.json` and its processes.
#[derive(Clone)]
pub struct Tree {
    /// Its tree directory.
    pub dir: PathBuf,
    /// `run.json`.
    pub info: Value,
    /// Whether its runner runs (the pid and start time of `run.json`): else the tree is
    /// *stale*, its runner died without ending it.
    pub up: bool,
    /// [`process_view`] of each process, by pid.
    pub procs: Vec<Value>,
    /// The processes of the tree found running without the pager (`crate::unmanaged`).
    pub unmanaged: Vec<Value>,
}

/// Whether the runner that `run.json` names still runs: the same pid with the same start time
/// (a pid reused since names another process), and not a zombie.
fn runner_alive(info: &Value) -> bool {
    let runner = info["runner_pid"].as_i64().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    runner > 0
        && start_ticks(runner).is_some()
        && start_ticks(runner) == info["runner_start_ticks"].as_u64()
        && alive(runner as u64)
}

/// Whether the live process `pid` belongs to the tree whose directory is `dir` (canonical): its
/// environment names that directory in `USWAP_STATS_DIR`. Asked of the processes of a stale
/// tree, whose pids may have been reused since its runner last looked.
fn of_tree(pid: u64, dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { return false };
    env.split(|&b| b == 0)
        .filter_map(|v| v.strip_prefix(b"USWAP_STATS_DIR="))
        .any(|v| std::fs::canonicalize(std::ffi::OsStr::from_bytes(v)).is_ok_and(|d| d == dir))
}

/// The tree in directory `dir` (None without a readable `run.json`).
pub fn tree_at(dir: &Path) -> Option<Tree> {
    let info = std::fs::read(dir.join("run.json")).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok())?;
    let tiers = info["tiers"].as_str().unwrap_or("").to_string();
    let mut procs: Vec<Value> = read_procs(dir).iter().map(|v| process_view(v, &tiers)).collect();
    let mut unmanaged = std::fs::read(dir.join(crate::unmanaged::UNMANAGED_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<Vec<Value>>(&b).ok())
        .unwrap_or_default();
    let up = runner_alive(&info);
    if !up {
        // Nobody keeps these figures current any more: a process runs only if it is still
        // of the tree.
        let canon = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        for p in procs.iter_mut().chain(unmanaged.iter_mut()) {
            let pid = u(p, "/pid");
            if p["running"] == true && !(alive(pid) && of_tree(pid, &canon)) {
                p["running"] = json!(false);
            }
        }
    }
    Some(Tree { dir: dir.to_path_buf(), info, up, procs, unmanaged })
}

/// Every `uswap run` tree of this user, in every run directory ([`run_dirs`]): those whose
/// runner runs, and the stale ones (`up` false) that [`forget_stale`] ends once shown.
pub fn trees() -> Vec<Tree> {
    let mut out = Vec::new();
    for base in run_dirs() {
        let Ok(rd) = std::fs::read_dir(&base) else { continue };
        out.extend(rd.flatten().filter_map(|e| tree_at(&e.path())));
    }
    out.sort_by_key(|t| t.info["runner_pid"].as_i64());
    out
}

/// End the stale trees of `shown` (their runner died, e.g. with its guardian) that have no
/// process left running ([`end_run`]); a stale tree with processes running stays listed.
pub fn forget_stale(shown: &[Tree]) {
    for t in shown.iter().filter(|t| !t.up) {
        if !t.procs.iter().chain(&t.unmanaged).any(running) {
            end_run(&t.dir);
        }
    }
}

/// The end of the run of tree directory `dir`, whose runner is gone (its guardian calls it
/// once it has ended the tree, `uswap status` for a stale tree): the metrics file named in
/// `run.json` is rewritten once more saying the run is over (`uswap_run_up 0`), and the
/// directory is removed. Nothing when its runner still runs.
pub fn end_run(dir: &Path) {
    let Some(t) = tree_at(dir) else {
        // Its runner died before it described the tree: nothing to tell.
        let _ = std::fs::remove_dir_all(dir);
        return;
    };
    if t.up {
        return;
    }
    if let Some(m) = t.info["metrics_file"].as_str() {
        let mut doc = with_rates(&[], std::slice::from_ref(&t));
        mark_over(&mut doc);
        write_atomic(Path::new(m), prometheus(&doc).as_bytes());
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Mark every tree of a [`with_rates`] document as over (its last metrics: `uswap_run_up 0`).
pub fn mark_over(doc: &mut Value) {
    for t in doc["trees"].as_array_mut().into_iter().flatten() {
        t["up"] = json!(false);
    }
}

/// Rates between two readings of the same process (`None` if the snapshot did not change).
fn rates(prev: Option<&Value>, now: &Value) -> Option<(f64, f64, f64)> {
    let prev = prev?;
    let dt = u(now, "/written_unix_ms").checked_sub(u(prev, "/written_unix_ms")).filter(|&d| d > 0)? as f64 / 1000.0;
    let d = |k: &str| u(now, k).saturating_sub(u(prev, k)) as f64 / dt;
    Some((d("/faults"), d("/swapin_pages") * 4096.0, d("/swapout_pages") * 4096.0))
}

/// Add `faults_per_s`, `swapin_bytes_per_s`, `swapout_bytes_per_s` to each process of `now`
/// that `prev` also saw with an older snapshot, and the tree's totals over running processes.
pub fn with_rates(prev: &[Tree], now: &[Tree]) -> Value {
    /// The byte figures summed over a tree's running processes.
    const SUMMED: [&str; 8] = [
        "rss_bytes",
        "charged_bytes",
        "resident_bytes",
        "swap_cache_bytes",
        "pool_bytes",
        "pool_stored_bytes",
        "pool_used_bytes",
        "file_bytes",
    ];
    const RATES: [&str; 3] = ["faults_per_s", "swapin_bytes_per_s", "swapout_bytes_per_s"];
    let mut out = Vec::new();
    for t in now {
        let before = prev.iter().find(|p| p.info["runner_pid"] == t.info["runner_pid"]);
        let mut total = serde_json::Map::new();
        let mut rate_tot = [0f64; 3];
        let mut procs = Vec::new();
        for p in &t.procs {
            let mut p = p.clone();
            let old = before.and_then(|b| b.procs.iter().find(|q| q["pid"] == p["pid"]));
            let r = rates(old, &p).map(|r| [r.0, r.1, r.2]);
            for (i, k) in RATES.iter().enumerate() {
                p[*k] = r.map_or(Value::Null, |r| json!(r[i].round()));
                if running(&p) {
                    rate_tot[i] += r.map_or(0.0, |r| r[i]);
                }
            }
            if running(&p) {
                for k in SUMMED {
                    let sum = total.get(k).and_then(Value::as_u64).unwrap_or(0) + u(&p, &format!("/{k}"));
                    total.insert(k.into(), json!(sum));
                }
            }
            procs.push(p);
        }
        for k in SUMMED {
            total.entry(k).or_insert(json!(0));
        }
        for (i, k) in RATES.iter().enumerate() {
            total.insert((*k).into(), json!(rate_tot[i].round()));
        }
        let unmanaged_bytes: u64 = t.unmanaged.iter().filter(|p| running(p)).map(|p| u(p, "/anon_bytes")).sum();
        total.insert("unmanaged_bytes".into(), json!(unmanaged_bytes));
        let started = t.info["started_unix_ms"].as_u64().unwrap_or(0);
        out.push(json!({
            "runner_pid": t.info["runner_pid"],
            "up": t.up,
            "pid": t.info["pid"],
            "command": t.info["command"],
            "limit_bytes": t.info["limit_bytes"],
            "tiers": t.info["tiers"],
            "elapsed_s": (now_ms().saturating_sub(started) as f64 / 100.0).round() / 10.0,
            "running_processes": procs.iter().filter(|p| running(p)).count(),
            "total": total,
            "processes": procs,
            "unmanaged_processes": t.unmanaged,
        }));
    }
    json!({ "trees": out })
}

/// Is process record `p` of a running process?
fn running(p: &Value) -> bool {
    p["running"].as_bool() == Some(true)
}

/// A command line on one line: control characters (a `python3 -c` script's newlines) as
/// spaces, at most `max` characters.
fn one_line(argv: &Value, max: usize) -> String {
    let words: Vec<&str> = argv.as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let mut line: String = words.join(" ").chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if line.chars().count() > max {
        line = line.chars().take(max).collect();
        line.push('…');
    }
    line
}

/// The view as text: one block per tree, a line of totals and a table of its running
/// processes (`all`: ended ones too; else they are counted).
pub fn render(doc: &Value, all: bool) -> String {
    use std::fmt::Write;
    let h = |v: &Value| uswap::size::format(v.as_u64().unwrap_or(0));
    let rate = |v: &Value| match v.as_f64() {
        Some(x) => format!("{}/s", uswap::size::format(x as u64)),
        None => "-".into(),
    };
    let mut s = String::new();
    let trees = doc["trees"].as_array().cloned().unwrap_or_default();
    if trees.is_empty() {
        s.push_str("no uswap run is running (for this user)\n");
        return s;
    }
    for t in trees {
        let tot = &t["total"];
        let _ = writeln!(
            s,
            "uswap run (pid {}, {} s): {}\n  limit {} for the tree, tiers {}; {} running: RSS {}, resident {}, swap cache {}, pool {} \
             (holding {}), file {}; faults {:.0}/s, swap-in {}, swap-out {}",
            t["runner_pid"],
            t["elapsed_s"],
            one_line(&t["command"], 100),
            h(&t["limit_bytes"]),
            t["tiers"].as_str().unwrap_or(""),
            t["running_processes"],
            h(&tot["rss_bytes"]),
            h(&tot["resident_bytes"]),
            h(&tot["swap_cache_bytes"]),
            h(&tot["pool_bytes"]),
            h(&tot["pool_stored_bytes"]),
            h(&tot["file_bytes"]),
            tot["faults_per_s"].as_f64().unwrap_or(0.0),
            rate(&tot["swapin_bytes_per_s"]),
            rate(&tot["swapout_bytes_per_s"]),
        );
        if t["up"] == false {
            let _ = writeln!(
                s,
                "  stale: its runner died without ending the run{}",
                if t["running_processes"] == 0 { "; nothing of it runs (its directory is removed now)" } else { "" }
            );
        }
        table_row(
            &mut s,
            [
                "PID", "RSS", "SHARE", "USE/S", "RESIDENT", "CACHE", "POOL", "STORED", "RATIO", "FILE", "FAULTS/S",
                "IN/S", "OUT/S",
            ]
            .map(String::from),
            "COMMAND",
        );
        let procs = t["processes"].as_array().cloned().unwrap_or_default();
        let ended = procs.iter().filter(|p| !running(p)).count();
        for p in procs.iter().filter(|p| all || running(p)) {
            let state = if running(p) {
                ""
            } else if p["final"].as_bool() == Some(true) {
                " (exited)"
            } else {
                " (ended without exit: last snapshot)"
            };
            let line = one_line(&p["argv"], 60);
            table_row(
                &mut s,
                [
                    p["pid"].to_string(),
                    h(&p["rss_bytes"]),
                    h(&p["share_bytes"]),
                    rate(&p["use_rate_bytes_per_s"]),
                    h(&p["resident_bytes"]),
                    h(&p["swap_cache_bytes"]),
                    h(&p["pool_bytes"]),
                    h(&p["pool_stored_bytes"]),
                    p["compression_ratio"].as_f64().map_or("-".into(), |r| format!("{r:.2}")),
                    h(&p["file_bytes"]),
                    p["faults_per_s"].as_f64().map_or("-".into(), |r| format!("{r:.0}")),
                    rate(&p["swapin_bytes_per_s"]),
                    rate(&p["swapout_bytes_per_s"]),
                ],
                &format!("{line}{state}"),
            );
        }
        if ended > 0 && !all {
            let _ = writeln!(s, "  and {ended} process(es) of the tree that ended (--all shows them)");
        }
        for p in t["unmanaged_processes"].as_array().into_iter().flatten().filter(|p| all || running(p)) {
            let _ = writeln!(
                s,
                "  {:>8} {:>10} runs without the pager ({}{}): not swappable, counted against the limit  {}",
                p["pid"],
                h(&p["anon_bytes"]),
                p["reason"].as_str().unwrap_or(""),
                if running(p) { "" } else { "; ended" },
                p["command"].as_str().unwrap_or("")
            );
        }
    }
    s
}

/// One line of a tree's process table: the thirteen figures right-aligned, then the command.
fn table_row(s: &mut String, c: [String; 13], command: &str) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "  {:>8} {:>10} {:>10} {:>11} {:>10} {:>10} {:>10} {:>10} {:>6} {:>10} {:>9} {:>11} {:>11}  {command}",
        c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11], c[12]
    );
}

/// The view in the Prometheus text exposition format (for node_exporter's textfile collector):
/// per process of each tree (ended ones with their last figures), labelled `runner` (the
/// `uswap run` pid), `pid` and `comm`.
pub fn prometheus(doc: &Value) -> String {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::registry::Registry;
    type Labels = Vec<(String, String)>;
    let mut reg = Registry::with_prefix("uswap");
    let gauge = |reg: &mut Registry, name: &str, help: &str| {
        let f = Family::<Labels, Gauge>::default();
        reg.register(name, help, f.clone());
        f
    };
    let counter = |reg: &mut Registry, name: &str, help: &str| {
        let f = Family::<Labels, Counter>::default();
        reg.register(name, help, f.clone());
        f
    };
    let limit = gauge(&mut reg, "limit_bytes", "The --limit of the tree (per process)");
    let running = gauge(&mut reg, "running_processes", "Processes of the tree that are running");
    let up = gauge(&mut reg, "run_up", "1 while the tree's uswap run runs, 0 once the run is over");
    let unmanaged = gauge(
        &mut reg,
        "unmanaged_bytes",
        "Anonymous memory of the tree's processes that run without the pager (counted against the limit)",
    );
    let gauges = [
        ("rss_bytes", "Resident set size of the process", "rss_bytes"),
        ("charged_bytes", "Memory charged to the limit: resident + swap cache + pool", "charged_bytes"),
        ("share_bytes", "The process's share of the tree's limit (its limit in force)", "share_bytes"),
        (
            "use_rate_bytes_per_second",
            "Bytes its faults bring in per second plus its CPU fraction times its charge: over the limit, the lowest rates for their charge give memory first",
            "use_rate_bytes_per_s",
        ),
        ("resident_bytes", "Managed pages mapped in the process", "resident_bytes"),
        ("swap_cache_bytes", "Uncompressed swap cache (the inactive list)", "swap_cache_bytes"),
        ("pool_bytes", "Compressed pool memory", "pool_bytes"),
        ("pool_stored_bytes", "Bytes of pages held by the compressed pool", "pool_stored_bytes"),
        ("file_bytes", "Bytes used in the swap file tier", "file_bytes"),
    ]
    .map(|(n, help, k)| (gauge(&mut reg, n, help), k));
    let counters = [
        ("faults", "Page faults the pager resolved", "faults"),
        ("swapin_pages", "Pages swapped in (pswpin)", "swapin_pages"),
        ("swapout_pages", "Pages swapped out (pswpout)", "swapout_pages"),
    ]
    .map(|(n, help, k)| (counter(&mut reg, n, help), k));
    for t in doc["trees"].as_array().into_iter().flatten() {
        let runner = t["runner_pid"].to_string();
        let tl: Labels = vec![("runner".into(), runner.clone())];
        limit.get_or_create(&tl).set(t["limit_bytes"].as_i64().unwrap_or(0));
        running.get_or_create(&tl).set(t["running_processes"].as_i64().unwrap_or(0));
        up.get_or_create(&tl).set(i64::from(t["up"] != false));
        unmanaged.get_or_create(&tl).set(t["total"]["unmanaged_bytes"].as_i64().unwrap_or(0));
        // Every process, ended ones too (with their last figures): counters must not go
        // back, and the file is rewritten once more after the program ended.
        for p in t["processes"].as_array().into_iter().flatten() {
            let comm = p["argv"][0].as_str().map(|a| a.rsplit('/').next().unwrap_or(a).to_string()).unwrap_or_default();
            let l: Labels =
                vec![("runner".into(), runner.clone()), ("pid".into(), p["pid"].to_string()), ("comm".into(), comm)];
            for (f, k) in &gauges {
                f.get_or_create(&l).set(p[*k].as_i64().unwrap_or(0));
            }
            for (f, k) in &counters {
                f.get_or_create(&l).inc_by(p[*k].as_u64().unwrap_or(0));
            }
        }
    }
    let mut s = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut s, &reg);
    s
}

#[cfg(test)]
mod tests {
    /// The run directory is made 0711 (others may traverse it to load the cached library, not
    /// list or write it), an older 0700 one is opened to 0711, and one others may list or
    /// write is refused.
    #[test]
    fn the_run_directory_is_traversable_and_nothing_more() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        let mode = |d: &std::path::Path| std::fs::metadata(d).unwrap().permissions().mode() & 0o7777;
        let d = base.path().join("new");
        owned_dir(&d, uid).unwrap();
        assert_eq!(mode(&d), 0o711);
        let old = base.path().join("old");
        std::fs::create_dir(&old).unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o700)).unwrap();
        owned_dir(&old, uid).unwrap();
        assert_eq!(mode(&old), 0o711, "a 0700 directory is opened to traversal");
        for bad in [0o755, 0o733, 0o777] {
            std::fs::set_permissions(&old, std::fs::Permissions::from_mode(bad)).unwrap();
            let e = owned_dir(&old, uid).expect_err("a directory others may list or write is refused");
            assert!(e.contains("nobody else may write or list"), "{e}");
        }
        assert!(owned_dir(&d, uid + 1).is_err(), "another user's directory is refused");
    }

    use super::*;

    /// `XDG_RUNTIME_DIR` is used only when it names an existing directory of this user, by an
    /// absolute path, that nobody else may write: else the per-user directory is.
    #[test]
    fn an_unusable_runtime_directory_is_passed_over() {
        use std::os::unix::fs::PermissionsExt;
        let me = uid();
        let d = tempfile::tempdir().unwrap();
        let var = |p: &Path| Some(p.as_os_str().to_os_string());
        assert_eq!(usable_runtime_dir(var(d.path()), me), Some(d.path().to_path_buf()));
        for missing in [None, Some("".into()), Some("/nonexistent".into()), Some(".".into())] {
            assert_eq!(usable_runtime_dir(missing.clone(), me), None, "{missing:?}");
        }
        assert_eq!(usable_runtime_dir(var(d.path()), me + 1), None, "another user's directory");
        let file = d.path().join("file");
        std::fs::write(&file, b"").unwrap();
        assert_eq!(usable_runtime_dir(var(&file), me), None, "not a directory");
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(usable_runtime_dir(var(d.path()), me), None, "others may write it");
    }

    /// The metrics say whether the run goes on: `uswap_run_up` is 1, and 0 once marked over.
    #[test]
    fn the_metrics_say_when_the_run_is_over() {
        let mut doc = json!({"trees": [{"runner_pid": 7, "up": true, "limit_bytes": 1, "running_processes": 0}]});
        assert!(prometheus(&doc).contains("uswap_run_up{runner=\"7\"} 1"), "{}", prometheus(&doc));
        mark_over(&mut doc);
        assert!(prometheus(&doc).contains("uswap_run_up{runner=\"7\"} 0"), "{}", prometheus(&doc));
    }

    /// A process alone: once walked, a reading with its counters no higher is skipped. With a
    /// fork child sharing its pages: every reading walks (the shared part can move while the
    /// counters stay).
    #[test]
    fn pss_watch_skips_walks_only_while_nothing_is_shared() {
        let me = std::process::id();
        let mut w = PssWatch::default();
        // Other tests of this binary allocate meanwhile: of 50 readings some must find the
        // counters no higher than at the last walk.
        let walks: Vec<bool> = (0..50).map(|_| w.read(&[me], "Pss_Anon:", 0).is_some()).collect();
        assert!(walks[0], "the first reading walks");
        assert!(walks.contains(&false), "a reading with nothing grown and nothing shared was never skipped");
        let mut block = vec![1u8; 16 << 20];
        std::hint::black_box(&mut block);
        // SAFETY: fork; the child only sleeps until killed.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            loop {
                // SAFETY: pause(2) in the child.
                unsafe { libc::pause() };
            }
        }
        let pids = [me, child as u32];
        let walked = (0..5).filter(|_| w.read(&pids, "Pss_Anon:", 0).is_some()).count();
        // SAFETY: our own child.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, std::ptr::null_mut(), 0);
        }
        assert_eq!(walked, 5, "16 MiB shared with a fork child: every reading walks");
    }

    /// The reading sees the largest value so far, and a reading that declines (`None`) leaves
    /// the peak as it was.
    #[test]
    fn peak_sampler_keeps_the_largest_reading_and_skips_declined_ones() {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let mut values = [5u64, 3, 9, 2, 9, 1].into_iter();
        let sampler = PeakSampler::start(std::time::Duration::from_millis(1), move |peak| {
            s2.lock().unwrap().push(peak);
            let v = values.next()?;
            // Decline what cannot beat the peak, as the callers' cheap bound does.
            (v > peak).then_some((v, v * 10))
        });
        while seen.lock().unwrap().len() < 8 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let peak = sampler.finish();
        assert_eq!((peak.value, peak.with), (9, 90));
        assert!(peak.samples >= 8);
        assert_eq!(seen.lock().unwrap()[..7], [0, 5, 5, 9, 9, 9, 9]);
    }

    /// The counters bound the page-table walk from above, which is what lets the samplers
    /// skip the walk.
    #[test]
    fn status_counters_bound_the_proportional_sizes() {
        let me = [std::process::id()];
        let block = std::hint::black_box(vec![1u8; 8 << 20]);
        let (anon, pss_anon) = (status_sum(me, "RssAnon:"), smaps_sum(me, "Pss_Anon:"));
        let (rss, pss) = (status_sum(me, "VmRSS:"), smaps_sum(me, "Pss:"));
        assert!(pss_anon >= 8 << 20, "Pss_Anon {pss_anon} without the 8 MiB block");
        assert!(may_exceed(anon, 1, pss_anon - 1), "RssAnon {anon} against Pss_Anon {pss_anon}");
        assert!(may_exceed(rss, 1, pss - 1), "VmRSS {rss} against Pss {pss}");
        assert_eq!(std::hint::black_box(&block)[(4 << 20) + 7], 1);
    }

    #[test]
    fn final_files_win_over_snapshots_and_bad_files_are_skipped() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("10.json"), r#"{"pid":10,"final":false,"written_unix_ms":1}"#).unwrap();
        std::fs::write(d.path().join("10.final.json"), r#"{"pid":10,"final":true,"written_unix_ms":2}"#).unwrap();
        std::fs::write(d.path().join("11.json"), r#"{"pid":11,"final":false}"#).unwrap();
        std::fs::write(d.path().join("12.json"), "{half a fi").unwrap();
        std::fs::write(d.path().join("run.json"), "{}").unwrap();
        let v = read_procs(d.path());
        assert_eq!(v.len(), 2, "{v:?}");
        assert_eq!(v[0]["final"], true);
        assert_eq!(v[1]["pid"], 11);
    }

    #[test]
    fn start_ticks_name_this_process() {
        let me = std::process::id() as i32;
        assert!(start_ticks(me).is_some());
        assert_eq!(start_ticks(me), start_ticks(me));
        assert_eq!(start_ticks(i32::MAX), None);
    }

    #[test]
    fn rates_come_from_two_snapshots() {
        let a = json!({"written_unix_ms": 1000, "faults": 10, "swapin_pages": 0, "swapout_pages": 5});
        let b = json!({"written_unix_ms": 3000, "faults": 210, "swapin_pages": 512, "swapout_pages": 5});
        assert_eq!(rates(Some(&a), &b), Some((100.0, 512.0 * 4096.0 / 2.0, 0.0)));
        assert_eq!(rates(Some(&b), &b), None, "the same snapshot twice gives no rate");
        assert_eq!(rates(None, &b), None);
    }

    #[test]
    fn prometheus_text_has_every_metric_per_running_process() {
        let doc = json!({"trees": [{"runner_pid": 7, "limit_bytes": 1048576, "running_processes": 1, "processes": [
            {"pid": 8, "argv": ["/usr/bin/python3", "x.py"], "running": true, "rss_bytes": 5, "charged_bytes": 4,
             "resident_bytes": 3, "swap_cache_bytes": 0, "pool_bytes": 1, "pool_stored_bytes": 2, "file_bytes": 0,
             "faults": 9, "swapin_pages": 1, "swapout_pages": 2, "share_bytes": 6, "use_rate_bytes_per_s": 7},
            {"pid": 9, "argv": ["sh"], "running": false, "rss_bytes": 99}
        ]}]});
        let s = prometheus(&doc);
        assert!(s.contains("uswap_limit_bytes{runner=\"7\"} 1048576"), "{s}");
        assert!(s.contains("uswap_rss_bytes{runner=\"7\",pid=\"8\",comm=\"python3\"} 5"), "{s}");
        assert!(s.contains("uswap_faults_total{runner=\"7\",pid=\"8\",comm=\"python3\"} 9"), "{s}");
        assert!(s.contains("uswap_share_bytes{runner=\"7\",pid=\"8\",comm=\"python3\"} 6"), "{s}");
        assert!(s.contains("uswap_use_rate_bytes_per_second{runner=\"7\",pid=\"8\",comm=\"python3\"} 7"), "{s}");
        assert!(
            s.contains("uswap_rss_bytes{runner=\"7\",pid=\"9\",comm=\"sh\"} 99"),
            "ended processes keep their figures: {s}"
        );
        assert!(s.trim_end().ends_with("# EOF"), "{s}");
    }
}
