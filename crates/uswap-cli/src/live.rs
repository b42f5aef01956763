//! The live view of running `uswap run` trees: where each tree's statistics live while it runs,
//! how they are read back ([`crate::stats_read`]), and what `uswap status`, `uswap top` and
//! `run --metrics-file` show.
//!
//! Each `uswap run` makes a *tree directory* `<run dir>/<runner pid>/` (the run directory is
//! `$XDG_RUNTIME_DIR/uswap` when that directory can be used, else `/dev/shm/uswap-<uid>` where
//! `/dev/shm` is a tmpfs, else `/tmp/uswap-<uid>`; in memory because every process of a tree
//! writes a file there when it exits, a large part of what `uswap run` adds to a short-lived
//! process on a disk file system; mode 0711 and
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
use crate::rundir::{run_dir, run_dirs, write_atomic};
use crate::stats_read::{read_procs, u};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The snapshot interval `uswap run` asks the preload library for.
pub const SNAPSHOT_MS: u64 = 500;

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
/// (e.g. the summed `RssAnon` before walking page tables for `Pss_Anon`, see
/// [`crate::procsum::status_sum`]): sampling a tree that sits at its limit then costs a few
/// counters, not a page-table walk every period, which takes CPU from the program.
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

/// Is the process `pid` alive (and not a zombie)?
fn alive(pid: u64) -> bool {
    stat_fields(pid as i64).and_then(|f| f.chars().next()).is_some_and(|c| c != 'Z' && c != 'X')
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
        // The limit's trust: stores that failed (and where, why), evictions no tier took,
        // faults mapped over the limit after waiting for room (`uswap_pager`'s `stall`).
        "store_errors": u(&p, "/reclaim/store_errors"),
        "store_failures": report::store_failures(&p),
        "store_rejected_pages": u(&p, "/swap/swpout_rejected"),
        "limit_breaks": u(&p, "/reclaim/limit_breaks"),
        "store_failing": raw.pointer("/pager/store_failing").and_then(Value::as_bool).unwrap_or(false),
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
        .filter_map(|v| v.strip_prefix(uswap_pager::launch::STATS_DIR.name.to_bytes())?.strip_prefix(b"="))
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
        // Counters of the limit's trust, over every process that ran (ended ones too).
        for k in ["store_errors", "store_rejected_pages", "limit_breaks"] {
            total.insert(k.into(), json!(procs.iter().map(|p| u(p, &format!("/{k}"))).sum::<u64>()));
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

/// The view as text, every line at most `width` columns (80 on anything but a terminal): per
/// tree a line naming it, a line of its tiers, a header naming the columns, its running
/// processes (`all`: ended ones too; else they are counted), a row of the tree's totals, then
/// its processes that run without the pager. Figures are compact (`1.5G`, `999M`, `12k`: see
/// [`compact_size`]); the command is cut to the room left. `--json` has every figure in full.
pub fn render(doc: &Value, all: bool, width: usize) -> String {
    let width = width.max(MIN_WIDTH);
    let size = |v: &Value| compact_size(v.as_u64().unwrap_or(0));
    let rate = |v: &Value| v.as_f64().map_or("-".into(), |x| compact_size(x as u64));
    let mut s = String::new();
    let mut line = |text: &str| {
        s.push_str(&fit(text, width));
        s.push('\n');
    };
    let trees = doc["trees"].as_array().cloned().unwrap_or_default();
    if trees.is_empty() {
        line("no uswap run is running (for this user)");
        return s;
    }
    for t in trees {
        let tot = &t["total"];
        let head = format!(
            "uswap run {}, {} s, limit {}, {} running: ",
            t["runner_pid"],
            t["elapsed_s"],
            compact_size(t["limit_bytes"].as_u64().unwrap_or(0)),
            t["running_processes"],
        );
        line(&format!("{head}{}", one_line(&t["command"], width.saturating_sub(head.chars().count() + 1))));
        if t["up"] == false {
            line(&format!(
                "  stale: its runner died without ending the run{}",
                if t["running_processes"] == 0 { "; nothing of it runs (its directory is removed now)" } else { "" }
            ));
        }
        line(&format!("  tiers {}", t["tiers"].as_str().unwrap_or("")));
        let (errors, breaks) = (tot["store_errors"].as_u64().unwrap_or(0), tot["limit_breaks"].as_u64().unwrap_or(0));
        if errors > 0 || breaks > 0 {
            let mut places: Vec<String> = procs_failures(&t);
            places.dedup();
            line(&format!(
                "  store failing: {} failed store(s){}{}",
                compact_count(errors),
                if places.is_empty() { String::new() } else { format!(" ({})", places.join("; ")) },
                if breaks > 0 {
                    format!("; limit broken by {} fault(s)", compact_count(breaks))
                } else {
                    String::new()
                }
            ));
        }
        line(&table_row(TABLE_HEADER.map(String::from), "COMMAND", width));
        let procs = t["processes"].as_array().cloned().unwrap_or_default();
        let ended = procs.iter().filter(|p| !running(p)).count();
        for p in procs.iter().filter(|p| all || running(p)) {
            let state = if running(p) {
                ""
            } else if p["final"].as_bool() == Some(true) {
                " (exited)"
            } else {
                // Without exit(3) (`_exit`, a signal): its figures are its last snapshot's.
                " (ended)"
            };
            let cells = [
                p["pid"].to_string(),
                size(&p["rss_bytes"]),
                size(&p["share_bytes"]),
                size(&p["resident_bytes"]),
                size(&p["swap_cache_bytes"]),
                size(&p["pool_bytes"]),
                p["compression_ratio"].as_f64().map_or("-".into(), compact_ratio),
                size(&p["file_bytes"]),
                p["faults_per_s"].as_f64().map_or("-".into(), |r| compact_count(r as u64)),
                rate(&p["swapin_bytes_per_s"]),
                rate(&p["swapout_bytes_per_s"]),
            ];
            // The program by its name, as top(1) shows it (the tree's line has it as typed).
            let mut argv = p["argv"].clone();
            if let Some(a0) = argv.get_mut(0) {
                *a0 = json!(a0.as_str().map_or("", |a| a.rsplit('/').next().unwrap_or(a)));
            }
            // What is left of the line after the figures, the state kept whole.
            let room = width.saturating_sub(TABLE_FIGURES + state.chars().count() + 1);
            line(&table_row(cells, &format!("{}{state}", one_line(&argv, room)), width));
        }
        let (stored, used) =
            (tot["pool_stored_bytes"].as_u64().unwrap_or(0), tot["pool_used_bytes"].as_u64().unwrap_or(0));
        let total = [
            "total".to_string(),
            size(&tot["rss_bytes"]),
            size(&t["limit_bytes"]),
            size(&tot["resident_bytes"]),
            size(&tot["swap_cache_bytes"]),
            size(&tot["pool_bytes"]),
            if stored > 0 && used > 0 { compact_ratio(stored as f64 / used as f64) } else { "-".into() },
            size(&tot["file_bytes"]),
            compact_count(tot["faults_per_s"].as_f64().unwrap_or(0.0) as u64),
            rate(&tot["swapin_bytes_per_s"]),
            rate(&tot["swapout_bytes_per_s"]),
        ];
        line(table_row(total, "", width).trim_end());
        if ended > 0 && !all {
            line(&format!("  and {ended} process(es) of the tree that ended (--all shows them)"));
        }
        for p in t["unmanaged_processes"].as_array().into_iter().flatten().filter(|p| all || running(p)) {
            line(&format!(
                "{:>7} {:>4} without the pager ({}{}), counted against the limit: {}",
                p["pid"].to_string(),
                size(&p["anon_bytes"]),
                p["reason"].as_str().unwrap_or(""),
                if running(p) { "" } else { "; ended" },
                p["command"].as_str().unwrap_or("")
            ));
        }
    }
    s
}

/// The tiers that failed in a tree's processes, as [`report::store_failures`] names them
/// (the first of each tier).
fn procs_failures(t: &Value) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for f in t["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["store_failures"].as_array().cloned().unwrap_or_default())
    {
        let f = f.as_str().unwrap_or("").to_string();
        let tier = f.split(": ").next().unwrap_or("").to_string();
        if !seen.iter().any(|s| s.starts_with(&format!("{tier}: "))) {
            seen.push(f);
        }
    }
    seen
}

/// The narrowest view [`render`] draws: every figure and a few characters of the command.
const MIN_WIDTH: usize = 80;

/// The columns of a tree's process table before the command (see [`table_row`]): the pid, the
/// RSS, its share of the tree's limit (the limit in the totals row), resident managed pages,
/// swap cache, compressed pool (and the compression ratio of what it holds), swap file,
/// faults, swap-in and swap-out per second.
const TABLE_HEADER: [&str; 11] =
    ["PID", "RSS", "SHARE", "RES", "CACHE", "POOL", "RATIO", "FILE", "FLT/S", "IN/S", "OUT/S"];

/// The widths of [`TABLE_HEADER`]'s columns: each holds its name and any figure of
/// [`compact_size`], [`compact_count`] or [`compact_ratio`] (four characters), a pid up to
/// the kernel's largest (4194304).
const TABLE_WIDTHS: [usize; 11] = [7, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5];

/// The characters of a table row before the command: the columns, a space after each.
const TABLE_FIGURES: usize = {
    let mut n = 0;
    let mut i = 0;
    while i < TABLE_WIDTHS.len() {
        n += TABLE_WIDTHS[i] + 1;
        i += 1;
    }
    n
};

/// One line of a tree's process table: the figures right-aligned in [`TABLE_WIDTHS`], then
/// the command, the whole at most `width` columns.
fn table_row(c: [String; 11], command: &str, width: usize) -> String {
    let mut s = String::new();
    for (cell, w) in c.iter().zip(TABLE_WIDTHS) {
        s.push_str(&format!("{cell:>w$} "));
    }
    s.push_str(command);
    fit(&s, width)
}

/// `text` cut to `width` characters, the last one `…` when it was longer.
fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut s: String = text.chars().take(width.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// A size in at most four characters, 1024-based: `0`, `512B`, `4.0K`, `999M`, `1.5G`, `16E`.
pub fn compact_size(b: u64) -> String {
    compact(b, 1024.0, ["B", "K", "M", "G", "T", "P", "E"])
}

/// A count in at most four characters, 1000-based: `0`, `999`, `1.2k`, `45k`, `3.4M`.
pub fn compact_count(n: u64) -> String {
    compact(n, 1000.0, ["", "k", "M", "G", "T", "P", "E"])
}

/// A compression ratio in at most four characters: `3.45`, `12.3`, `123`, `9999`, `>1e4`.
fn compact_ratio(r: f64) -> String {
    match r {
        r if r < 9.995 => format!("{r:.2}"),
        r if r < 99.95 => format!("{r:.1}"),
        r if r < 9999.5 => format!("{r:.0}"),
        _ => ">1e4".into(),
    }
}

/// `v` in the largest unit that keeps it below 1000, to two significant digits below 10
/// (`1.5G`) and whole above (`12G`, `999M`).
fn compact(v: u64, base: f64, units: [&str; 7]) -> String {
    if v == 0 {
        return "0".into();
    }
    if v < 1000 {
        return format!("{v}{}", units[0]);
    }
    let mut x = v as f64;
    let mut i = 0;
    // Rounding decides the unit: 999.6 of one is 1.0 of the next.
    while x >= 999.5 && i + 1 < units.len() {
        x /= base;
        i += 1;
    }
    if x < 9.95 {
        format!("{x:.1}{}", units[i])
    } else {
        format!("{x:.0}{}", units[i])
    }
}

/// The view in the Prometheus text exposition format, version 0.0.4 (what node_exporter's
/// textfile collector reads; not OpenMetrics: no `# EOF`, and a counter's `# HELP` and
/// `# TYPE` name its samples' name, `_total` included): per process of each tree (ended ones
/// with their last figures), labelled `runner` (the `uswap run` pid), `pid` and `comm`.
pub fn prometheus(doc: &Value) -> String {
    use prometheus::{Encoder, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};
    const TREE: &[&str] = &["runner"];
    const PROCESS: &[&str] = &["runner", "pid", "comm"];
    // Registering fails only for a name or label that is not valid or taken twice: fixed here.
    const FIXED: &str = "the metric names and labels are fixed and valid";
    let reg = Registry::new_custom(Some("uswap".into()), None).expect(FIXED);
    let gauge = |name: &str, help: &str, labels: &[&str]| {
        let f = IntGaugeVec::new(Opts::new(name, help), labels).expect(FIXED);
        reg.register(Box::new(f.clone())).expect(FIXED);
        f
    };
    // Counters are named with `_total`, as the format asks.
    let counter = |name: &str, help: &str| {
        let f = IntCounterVec::new(Opts::new(format!("{name}_total"), help), PROCESS).expect(FIXED);
        reg.register(Box::new(f.clone())).expect(FIXED);
        f
    };
    let limit = gauge("limit_bytes", "The --limit of the tree", TREE);
    let running = gauge("running_processes", "Processes of the tree that are running", TREE);
    let up = gauge("run_up", "1 while the tree's uswap run runs, 0 once the run is over", TREE);
    let unmanaged = gauge(
        "unmanaged_bytes",
        "Anonymous memory of the tree's processes that run without the pager (counted against the limit)",
        TREE,
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
    .map(|(n, help, k)| (gauge(n, help, PROCESS), k));
    let counters = [
        ("faults", "Page faults the pager resolved", "faults"),
        ("swapin_pages", "Pages swapped in (pswpin)", "swapin_pages"),
        ("swapout_pages", "Pages swapped out (pswpout)", "swapout_pages"),
        ("store_errors", "Evictions undone because the store failed (the page stayed in memory)", "store_errors"),
        ("store_rejected_pages", "Pages of evictions that no tier took (declined or failed)", "store_rejected_pages"),
        ("limit_breaks", "Faults mapped over the limit after waiting for room while the store failed", "limit_breaks"),
    ]
    .map(|(n, help, k)| (counter(n, help), k));
    for t in doc["trees"].as_array().into_iter().flatten() {
        let runner = t["runner_pid"].to_string();
        limit.with_label_values(&[&runner]).set(t["limit_bytes"].as_i64().unwrap_or(0));
        running.with_label_values(&[&runner]).set(t["running_processes"].as_i64().unwrap_or(0));
        up.with_label_values(&[&runner]).set(i64::from(t["up"] != false));
        unmanaged.with_label_values(&[&runner]).set(t["total"]["unmanaged_bytes"].as_i64().unwrap_or(0));
        // Every process, ended ones too (with their last figures): counters must not go
        // back, and the file is rewritten once more after the program ended.
        for p in t["processes"].as_array().into_iter().flatten() {
            let comm = p["argv"][0].as_str().map(|a| a.rsplit('/').next().unwrap_or(a).to_string()).unwrap_or_default();
            let l = [runner.as_str(), &p["pid"].to_string(), &comm];
            for (f, k) in &gauges {
                f.with_label_values(&l).set(p[*k].as_i64().unwrap_or(0));
            }
            for (f, k) in &counters {
                f.with_label_values(&l).inc_by(p[*k].as_u64().unwrap_or(0));
            }
        }
    }
    let mut out = Vec::new();
    // Writing into a Vec cannot fail, and the families are valid (registered above).
    let _ = TextEncoder::new().encode(&reg.gather(), &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metrics say whether the run goes on: `uswap_run_up` is 1, and 0 once marked over.
    #[test]
    fn the_metrics_say_when_the_run_is_over() {
        let mut doc = json!({"trees": [{"runner_pid": 7, "up": true, "limit_bytes": 1, "running_processes": 0}]});
        assert!(prometheus(&doc).contains("uswap_run_up{runner=\"7\"} 1"), "{}", prometheus(&doc));
        mark_over(&mut doc);
        assert!(prometheus(&doc).contains("uswap_run_up{runner=\"7\"} 0"), "{}", prometheus(&doc));
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

    /// A raw snapshot of the preload library for process `pid` (the fields `process_view`
    /// reads), its figures scaled by `k`.
    fn raw(pid: u32, argv: &[&str], is_final: bool, k: u64) -> Value {
        json!({
            "pid": pid, "ppid": 1, "argv": argv, "final": is_final, "written_unix_ms": 1_000 * k,
            "vm_rss_bytes": (40 << 20) * k, "vm_hwm_bytes": (48 << 20) * k, "rss_at_start_bytes": 4 << 20,
            "tree": { "use_rate_bytes_per_s": 1_500_000 * k },
            "pager": {
                "faults": 70_000 * k, "fault_zero": 1_000 * k, "fault_swapin": 60_000 * k,
                "evicted_pages": 90_000 * k, "evicted_folios": 6_000 * k,
                "swpout": [0, 0, 0, 0, 5_000 * k, 0, 0, 0, 0, 0], "swpin": [3_000 * k, 0, 0, 0, 100 * k, 0, 0, 0, 0, 0],
                "resident_bytes": (20 << 20) * k, "cache_bytes": (1 << 20) * k, "pool_bytes": (3 << 20) * k,
                "charged_bytes": (24 << 20) * k, "limit_bytes": (32 << 20) * k, "limit_in_force_bytes": (30 << 20) * k,
                "engine": {
                    "group": { "pool_max": 8 << 20, "swap_max": u64::MAX },
                    "tiers": [
                        { "stored_pages": 2_000 * k, "used_bytes": (3 << 20) * k },
                        { "stored_pages": 20_000 * k, "used_bytes": (70 << 20) * k }
                    ]
                }
            }
        })
    }

    /// `raw` with a swap file that filled its filesystem: evictions undone, pages no tier took,
    /// faults over the limit.
    fn failing(mut r: Value) -> Value {
        r["pager"]["store_errors"] = json!(5663);
        r["pager"]["limit_breaks"] = json!(40);
        r["pager"]["store_failing"] = json!(true);
        r["pager"]["engine"]["swpout_rejected"] = json!(1200);
        r["pager"]["engine"]["tiers"][1]["failures"] =
            json!({"nospace": 5663, "readonly": 0, "io": 0, "full": 0, "errno": libc::ENOSPC});
        r
    }

    /// A store that fails is said in the view, with its tier and error, and counted.
    #[test]
    fn a_failing_store_is_shown_with_its_tier_and_error() {
        let doc = realistic_doc();
        let text = render(&doc, true, 80);
        let l = text.lines().find(|l| l.contains("store failing")).unwrap_or_else(|| panic!("{text}"));
        assert!(l.contains("5.7k failed store(s)") && l.contains("file:/var/tmp: 5663"), "{l}");
        assert_eq!(doc["trees"][1]["total"]["limit_breaks"], 40);
        assert_eq!(doc["trees"][1]["processes"][0]["store_rejected_pages"], 1200);
        assert_eq!(text.matches("store failing").count(), 1, "only the tree that failed:\n{text}");
    }

    /// Two trees as `uswap status` and the metrics file see them: one with a running parent
    /// (this test's own pid, so that it counts as running), an exited child and a process that
    /// runs without the pager; one whose program ended without exit(3).
    fn realistic_doc() -> Value {
        let tiers = uswap_pager::launch::DEFAULT_TIERS;
        let me = std::process::id();
        let info = |runner: u32, pid: u32| {
            json!({"runner_pid": runner, "runner_start_ticks": 1, "pid": pid, "command": ["python3", "train.py"],
                   "limit_bytes": 512u64 << 20, "folio_bytes": 65536, "tiers": tiers, "started_unix_ms": now_ms()})
        };
        let view = |r: Value| process_view(&r, tiers);
        let a = Tree {
            dir: PathBuf::from("/nonexistent/4000001"),
            info: info(4_000_001, me),
            up: true,
            procs: vec![
                view(raw(me, &["/usr/bin/python3", "train.py", "--epochs", "3"], false, 1)),
                view(raw(4_000_003, &["/bin/sh", "-c", "gzip -9 out"], true, 2)),
            ],
            unmanaged: vec![json!({"pid": me, "command": "static-tool", "reason": "statically linked",
                                   "anon_bytes": 7u64 << 20, "running": true})],
        };
        let b = Tree {
            dir: PathBuf::from("/nonexistent/4100000"),
            info: info(4_100_000, 4_100_001),
            up: false,
            procs: vec![view(failing(raw(4_100_001, &["sort"], false, 3)))],
            unmanaged: vec![],
        };
        with_rates(&[], &[a, b])
    }

    /// The metrics file, read by a parser of the Prometheus text format: every family has the
    /// type it is declared with and the figures of the view, and the `# HELP` and `# TYPE`
    /// lines name the samples that follow them (0.0.4 has no `# EOF`, and a counter's family is
    /// named with its `_total`).
    #[test]
    fn the_metrics_file_is_prometheus_text_0_0_4_as_a_parser_reads_it() {
        use prometheus_parse::{LineInfo, SampleType, Scrape, Value as V};
        let doc = realistic_doc();
        let text = prometheus(&doc);
        // Each line as the parser's line reader sees it.
        let (mut help, mut typed, mut families) = (None::<String>, None::<(String, SampleType)>, Vec::new());
        for l in text.lines() {
            match LineInfo::parse(l) {
                LineInfo::Doc { metric_name, .. } => help = Some(metric_name.to_string()),
                LineInfo::Type { metric_name, sample_type, .. } => {
                    assert_eq!(help.as_deref(), Some(metric_name.as_str()), "TYPE without its HELP: {l}\n{text}");
                    assert!(!families.contains(&metric_name), "{metric_name} declared twice:\n{text}");
                    assert_eq!(
                        metric_name.ends_with("_total"),
                        sample_type == SampleType::Counter,
                        "0.0.4 counters are named *_total: {l}\n{text}"
                    );
                    families.push(metric_name.clone());
                    typed = Some((metric_name, sample_type));
                }
                LineInfo::Sample { metric_name, .. } => {
                    let family = typed.as_ref().map(|t| t.0.as_str());
                    assert_eq!(family, Some(metric_name), "a sample not of the family declared above it: {l}\n{text}");
                }
                LineInfo::Empty | LineInfo::Ignored => panic!("a line that is no HELP, TYPE or sample: {l:?}\n{text}"),
            }
        }
        let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("the parser reads it");
        // What every family must hold: (family, labels, value, counter?).
        /// A sample that must be there: family, labels, value, whether a counter.
        type Want<'a> = (String, Vec<(&'a str, String)>, f64, bool);
        let mut want: Vec<Want> = Vec::new();
        for t in doc["trees"].as_array().unwrap() {
            let runner = t["runner_pid"].to_string();
            for (name, v) in [
                ("limit_bytes", &t["limit_bytes"]),
                ("running_processes", &t["running_processes"]),
                ("unmanaged_bytes", &t["total"]["unmanaged_bytes"]),
            ] {
                want.push((format!("uswap_{name}"), vec![("runner", runner.clone())], v.as_f64().unwrap(), false));
            }
            let up = if t["up"] == false { 0.0 } else { 1.0 };
            want.push(("uswap_run_up".into(), vec![("runner", runner.clone())], up, false));
            for p in t["processes"].as_array().unwrap() {
                let comm = p["argv"][0].as_str().unwrap().rsplit('/').next().unwrap().to_string();
                let l = vec![("runner", runner.clone()), ("pid", p["pid"].to_string()), ("comm", comm)];
                for (name, key) in [
                    ("rss_bytes", "rss_bytes"),
                    ("charged_bytes", "charged_bytes"),
                    ("share_bytes", "share_bytes"),
                    ("use_rate_bytes_per_second", "use_rate_bytes_per_s"),
                    ("resident_bytes", "resident_bytes"),
                    ("swap_cache_bytes", "swap_cache_bytes"),
                    ("pool_bytes", "pool_bytes"),
                    ("pool_stored_bytes", "pool_stored_bytes"),
                    ("file_bytes", "file_bytes"),
                ] {
                    want.push((format!("uswap_{name}"), l.clone(), p[key].as_f64().unwrap(), false));
                }
                for name in
                    ["faults", "swapin_pages", "swapout_pages", "store_errors", "store_rejected_pages", "limit_breaks"]
                {
                    want.push((format!("uswap_{name}_total"), l.clone(), p[name].as_f64().unwrap(), true));
                }
            }
        }
        assert_eq!(scrape.samples.len(), want.len(), "{text}");
        for (name, labels, value, counter) in &want {
            let s = scrape
                .samples
                .iter()
                .find(|s| &s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(v.as_str())))
                .unwrap_or_else(|| panic!("no {name} {labels:?}:\n{text}"));
            assert_eq!(s.labels.len(), labels.len(), "{name}: {:?}", s.labels);
            match (&s.value, counter) {
                (V::Counter(v), true) | (V::Gauge(v), false) => assert_eq!(v, value, "{name} {labels:?}"),
                (v, _) => {
                    panic!("{name} {labels:?} reads as {v:?}, not a {}", if *counter { "counter" } else { "gauge" })
                }
            }
        }
        // The figures are the processes' own, not zeros: a few against the raw snapshots.
        let find = |name: &str, pid: &str| {
            scrape
                .samples
                .iter()
                .find(|s| s.metric == name && s.labels.get("pid") == Some(pid))
                .map(|s| s.value.clone())
        };
        let me = std::process::id().to_string();
        assert_eq!(find("uswap_faults_total", &me), Some(V::Counter(70_000.0)));
        assert_eq!(
            find("uswap_rss_bytes", "4000003"),
            Some(V::Gauge((80u64 << 20) as f64)),
            "ended processes keep their figures"
        );
        assert_eq!(find("uswap_file_bytes", "4100001"), Some(V::Gauge((210u64 << 20) as f64)));
        assert_eq!(find("uswap_share_bytes", &me), Some(V::Gauge((30u64 << 20) as f64)));
        assert_eq!(find("uswap_store_errors_total", "4100001"), Some(V::Counter(5663.0)));
        assert_eq!(find("uswap_limit_breaks_total", "4100001"), Some(V::Counter(40.0)));
        assert!(text.contains("uswap_limit_bytes{runner=\"4000001\"} 536870912\n"), "{text}");
    }

    /// `uswap status` and `uswap top` on an 80-column terminal: every line fits, with figures
    /// as large as they get and commands and tiers longer than any line; the table has a
    /// header naming its columns, a row per process with every figure, and a totals row.
    #[test]
    fn the_text_view_fits_80_columns_with_a_header_and_totals() {
        let mut doc = realistic_doc();
        let long = "x".repeat(300);
        let t = &mut doc["trees"][0];
        t["command"] = json!(["python3", "-c", format!("import os\n{long}")]);
        t["tiers"] = json!(format!("{}/{long}", uswap_pager::launch::DEFAULT_TIERS));
        t["runner_pid"] = json!(4_194_304);
        t["limit_bytes"] = json!(u64::MAX);
        for p in t["processes"].as_array_mut().unwrap() {
            for k in ["rss_bytes", "share_bytes", "resident_bytes", "swap_cache_bytes", "pool_bytes", "file_bytes"] {
                p[k] = json!(u64::MAX);
            }
            p["pid"] = json!(4_194_304);
            p["compression_ratio"] = json!(12345.678);
            p["faults_per_s"] = json!(1e15);
            p["swapin_bytes_per_s"] = json!(1.8e19);
            p["swapout_bytes_per_s"] = json!(999.6 * 1024f64.powi(5));
            p["argv"] = json!(["/usr/lib/jvm/bin/java", long.clone()]);
        }
        for k in ["rss_bytes", "resident_bytes", "swap_cache_bytes", "pool_bytes", "file_bytes", "pool_stored_bytes"] {
            t["total"][k] = json!(u64::MAX);
        }
        t["total"]["pool_used_bytes"] = json!(1);
        t["total"]["faults_per_s"] = json!(123_456.0);
        t["unmanaged_processes"][0]["command"] = json!(long);
        let text = render(&doc, true, 80);
        for l in text.lines() {
            assert!(l.chars().count() <= 80, "{} columns: {l}\n{text}", l.chars().count());
        }
        let header: Vec<&str> = text.lines().filter(|l| l.split_whitespace().next() == Some("PID")).collect();
        assert_eq!(header.len(), 2, "one header per tree:\n{text}");
        let mut names = TABLE_HEADER.to_vec();
        names.push("COMMAND");
        assert_eq!(header[0].split_whitespace().collect::<Vec<_>>(), names);
        let rows: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("4194304 ")).collect();
        assert_eq!(rows.len(), 2, "the running and the exited process (--all):\n{text}");
        for r in &rows {
            let cells: Vec<&str> = r.split_whitespace().take(11).collect();
            assert_eq!(
                cells,
                ["4194304", "16E", "16E", "16E", "16E", "16E", ">1e4", "16E", "1.0P", "16E", "1.0E"],
                "{r}"
            );
            // The command starts after the figures, by the program's name, cut with `…`.
            assert!(r.chars().skip(TABLE_FIGURES).collect::<String>().starts_with("java xx"), "{r}");
            assert!(r.contains('…'), "{r}");
        }
        assert!(rows[1].ends_with(" (exited)"), "the state is kept whole: {}", rows[1]);
        let total = text.lines().find(|l| l.trim_start().starts_with("total ")).expect("a totals row");
        let cells: Vec<&str> = total.split_whitespace().collect();
        assert_eq!(cells[..9], ["total", "16E", "16E", "16E", "16E", "16E", ">1e4", "16E", "123k"], "{total}");
        assert!(text.starts_with("uswap run 4194304, ") && text.lines().next().unwrap().ends_with('…'), "{text}");
        assert!(text.contains("without the pager (statically linked)"), "{text}");
        // A wider terminal shows more of the command.
        assert!(render(&doc, true, 160).lines().any(|l| l.chars().count() > 80));
    }

    /// Compact figures take at most four characters, whatever the value.
    #[test]
    fn compact_figures_take_four_characters_at_most() {
        for (v, s) in
            [(0, "0"), (512, "512B"), (1023, "1.0K"), (1536, "1.5K"), (999 << 20, "999M"), (1000 << 20, "1.0G")]
        {
            assert_eq!(compact_size(v), s);
        }
        assert_eq!(compact_size(u64::MAX), "16E");
        assert_eq!(
            (compact_count(999), compact_count(1_234), compact_count(45_678)),
            ("999".into(), "1.2k".into(), "46k".into())
        );
        for shift in 0..64 {
            for v in
                [(1u64 << shift) - 1, 1 << shift, (1 << shift) + (1 << shift) / 2, (1u64 << shift).saturating_mul(999)]
            {
                for f in [compact_size(v), compact_count(v), compact_count(v.saturating_mul(1000) / 1024)] {
                    assert!(f.chars().count() <= 4, "{v}: {f}");
                }
            }
        }
        for r in [1.0, 9.999, 12.34, 99.96, 1234.4, 9999.6, 1e9] {
            assert!(compact_ratio(r).chars().count() <= 4, "{r}: {}", compact_ratio(r));
        }
    }
}
