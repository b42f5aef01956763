//! The runner owns its tree and runs where the environment lets it:
//! a `uswap run` killed with SIGKILL, mid-run or while it starts its program, takes every
//! process of its tree with it (managed or not, reparented orphans and `setsid` ones included)
//! and its run is then over in the metrics file and gone from `uswap status`; a stale tree is
//! listed as such; a missing or unusable `XDG_RUNTIME_DIR` falls back to the per-user
//! directory, and `uswap status` lists the runs of both. Every wait has a deadline; on failure
//! the processes the test started are killed and what was seen is printed.

mod common;

use common::*;
use std::ffi::OsStr;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// State, parent pid and start time (ticks since boot) of process `pid`.
fn stat_of(pid: i32) -> Option<(u8, i32, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = s.get(s.rfind(')')? + 2..)?.split_whitespace().collect();
    Some((*f.first()?.as_bytes().first()?, f.get(1)?.parse().ok()?, f.get(19)?.parse().ok()?))
}

/// A process by pid and start time, so that a later process with its pid is not taken for it.
#[derive(Clone, Copy, Debug)]
struct Proc {
    pid: i32,
    start: u64,
}

impl Proc {
    fn of(pid: i32) -> Option<Proc> {
        stat_of(pid).map(|(_, _, start)| Proc { pid, start })
    }

    /// Ended (and reaped, or a zombie).
    fn gone(&self) -> bool {
        stat_of(self.pid).is_none_or(|(state, _, start)| start != self.start || state == b'Z' || state == b'X')
    }

    fn kill(&self) {
        if !self.gone() {
            send(self.pid, libc::SIGKILL);
        }
    }
}

fn maps_library(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains("libuswap_ffi"))
}

fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().to_string()
}

/// `uswap ARGS…` with this build's library and `XDG_RUNTIME_DIR` set to `runtime`.
fn uswap(runtime: &OsStr, args: &[&OsStr]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_uswap"));
    c.args(args).env("USWAP_PRELOAD", preload()).env("XDG_RUNTIME_DIR", runtime).env_remove("LD_PRELOAD");
    c
}

/// Start `uswap run` as `cmd` in a process group of its own (so that killing it is the test's
/// choice alone), without stdin or stdout, its stderr kept for the failure messages.
fn spawn_runner(mut cmd: Command) -> Child {
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).process_group(0).spawn().expect("uswap run")
}

/// `uswap status --json --interval 0` under `runtime`.
fn status(runtime: &OsStr) -> serde_json::Value {
    let o = uswap(runtime, &["status".as_ref(), "--json".as_ref(), "--interval".as_ref(), "0".as_ref()])
        .output()
        .expect("uswap status");
    assert!(o.status.success(), "uswap status: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("uswap status --json prints JSON")
}

/// The tree of runner `runner` in a status document.
fn tree_of(doc: &serde_json::Value, runner: i32) -> Option<serde_json::Value> {
    doc["trees"].as_array()?.iter().find(|t| t["runner_pid"] == runner).cloned()
}

/// The guardian of runner `runner` (its child named uswap-guardian).
fn guardian_of(runner: i32) -> Option<Proc> {
    let dir = std::fs::read_dir("/proc").ok()?;
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .find(|&p| stat_of(p).is_some_and(|(_, ppid, _)| ppid == runner) && comm(p) == "uswap-guardian")
        .and_then(Proc::of)
}

/// Wait until `done` or the deadline; false at the deadline.
fn until(deadline: Instant, mut done: impl FnMut() -> bool) -> bool {
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// A runner SIGKILLed mid-run: its tree (the shell the program is, a managed child, a managed
/// orphan reparented away from its parent, an unmanaged child that cleared `LD_PRELOAD`, and an
/// unmanaged orphan in a session of its own) ends within a few seconds; then the metrics file
/// says the run is over, the tree directory is gone and `uswap status` no longer shows it
/// running. A runner that did not own its tree would leave all of them running, reparented to
/// init, and the metrics saying `uswap_running_processes 5` for ever.
#[test]
fn a_sigkilled_runner_ends_its_whole_tree_and_the_run() {
    let _one = one_at_a_time();
    let runtime = tempdir();
    let dir = tempdir();
    let (pids, prom) = (dir.path().join("pids"), dir.path().join("uswap.prom"));
    let script = format!(
        "p={}\n\
         sleep 300 & echo managed $! >> $p\n\
         env -u LD_PRELOAD sleep 300 & echo unmanaged $! >> $p\n\
         (sleep 300 & echo managed-orphan $! >> $p)\n\
         (env -u LD_PRELOAD setsid sleep 300 & echo unmanaged-setsid-orphan $! >> $p)\n\
         echo main $$ >> $p\n\
         wait\n",
        pids.display()
    );
    let mut runner = spawn_runner(uswap(
        runtime.path().as_os_str(),
        &[
            "run".as_ref(),
            "--limit".as_ref(),
            "64M".as_ref(),
            "--metrics-file".as_ref(),
            prom.as_os_str(),
            "--".as_ref(),
            "sh".as_ref(),
            "-c".as_ref(),
            script.as_ref(),
        ],
    ));
    let rpid = runner.id() as i32;
    let deadline = Instant::now() + timeout_or(60);
    let mut procs: Vec<(String, Proc)> = Vec::new();
    let fail = |what: &str, procs: &[(String, Proc)], runner: &mut Child| -> ! {
        let seen: Vec<String> = procs
            .iter()
            .map(|(n, p)| format!("{n} {} ({}, {})", p.pid, comm(p.pid), if p.gone() { "gone" } else { "alive" }))
            .collect();
        for (_, p) in procs {
            p.kill();
        }
        if let Some(g) = guardian_of(rpid) {
            g.kill();
        }
        send(-rpid, libc::SIGKILL);
        let _ = runner.wait();
        let mut err = String::new();
        let _ = std::io::Read::read_to_string(&mut runner.stderr.take().unwrap(), &mut err);
        panic!("{what}\nthe tree's processes: {seen:?}\nuswap run's stderr: {err}");
    };
    // Every process started, the managed ones under the pager, the tree shown by status.
    let ready = until(deadline, || {
        let text = std::fs::read_to_string(&pids).unwrap_or_default();
        procs = text
            .lines()
            .filter_map(|l| {
                let (name, pid) = l.split_once(' ')?;
                Some((name.to_string(), Proc::of(pid.parse().ok()?)?))
            })
            .collect();
        procs.len() == 5
            && procs.iter().all(|(name, p)| {
                let want = if name == "main" { "sh" } else { "sleep" };
                comm(p.pid) == want && maps_library(p.pid) != name.starts_with("unmanaged")
            })
            && tree_of(&status(runtime.path().as_os_str()), rpid).is_some_and(|t| t["up"] != false)
    });
    if !ready {
        fail(
            "the tree did not come up (five processes, the managed ones with the library, shown by status)",
            &procs,
            &mut runner,
        );
    }
    // The orphans are no longer the shell's children.
    for (name, p) in procs.iter().filter(|(n, _)| n.ends_with("orphan")) {
        let ppid = stat_of(p.pid).map_or(0, |s| s.1);
        if ppid == procs.iter().find(|(n, _)| n == "main").unwrap().1.pid {
            fail(&format!("{name} is still the shell's child"), &procs, &mut runner);
        }
    }
    send(rpid, libc::SIGKILL);
    let killed = Instant::now();
    let _ = runner.wait();
    let ended = until(killed + Duration::from_secs(5), || procs.iter().all(|(_, p)| p.gone()));
    let took = killed.elapsed();
    if !ended {
        fail("5 s after uswap run was SIGKILLed, processes of its tree still run", &procs, &mut runner);
    }
    eprintln!(
        "the tree of {} processes ended {:.1} ms after uswap run was killed",
        procs.len(),
        took.as_secs_f64() * 1e3
    );
    // The run is over: the metrics file says so, its directory is gone, status does not show it
    // running.
    let tree_dir = runtime.path().join("uswap").join(rpid.to_string());
    let mut text = String::new();
    let over = until(Instant::now() + Duration::from_secs(10), || {
        text = std::fs::read_to_string(&prom).unwrap_or_default();
        !tree_dir.exists()
            && text.contains(&format!("uswap_run_up{{runner=\"{rpid}\"}} 0"))
            && text.contains(&format!("uswap_running_processes{{runner=\"{rpid}\"}} 0"))
    });
    assert!(over, "the run is not over: tree directory exists {}, metrics file:\n{text}", tree_dir.exists());
    let s = status(runtime.path().as_os_str());
    assert!(tree_of(&s, rpid).is_none_or(|t| t["up"] == false), "status still shows the run as running: {s:#}");
}

/// A runner SIGKILLed at any moment of its start, before or after it forked its program, leaves
/// no process behind: the program (`sleep` with an argument of this test's own) never runs on.
/// A runner that did not own its tree would leave the program running after any kill that
/// comes after the fork.
#[test]
fn a_runner_killed_while_it_starts_its_program_leaves_nothing() {
    let _one = one_at_a_time();
    let runtime = tempdir();
    let arg = format!("300.{}", std::process::id());
    let wanted: Vec<u8> = [b"sleep\0".as_slice(), arg.as_bytes(), b"\0"].concat();
    let marked = || -> Vec<Proc> {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|p| std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c == wanted))
            .filter_map(Proc::of)
            .filter(|p| !p.gone())
            .collect()
    };
    let start = || {
        uswap(runtime.path().as_os_str(), &["run".as_ref(), "-q".as_ref(), "--limit".as_ref(), "32M".as_ref()])
            .args(["--", "sleep", &arg])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("uswap run")
    };
    let check = |what: &str| {
        if !until(Instant::now() + Duration::from_secs(5), || marked().is_empty()) {
            let left = marked();
            for p in &left {
                p.kill();
            }
            panic!("{what}: 5 s after uswap run was SIGKILLed its program still runs: {left:?}");
        }
    };
    // How long the runner takes to start its program.
    let mut r = start();
    let t0 = Instant::now();
    let up = until(t0 + timeout_or(60), || !marked().is_empty());
    let to_start = t0.elapsed();
    send(r.id() as i32, libc::SIGKILL);
    let _ = r.wait();
    assert!(up, "uswap run never started its program");
    check("killed once its program ran");
    // Killed at points spread over that time and past it.
    let mut after_fork = 0;
    for k in 0..16u32 {
        let mut r = start();
        std::thread::sleep(to_start * k / 10);
        after_fork += usize::from(!marked().is_empty());
        send(r.id() as i32, libc::SIGKILL);
        let _ = r.wait();
        check(&format!("killed after {:.1} ms", (to_start * k / 10).as_secs_f64() * 1e3));
    }
    eprintln!(
        "the program started {:.1} ms after uswap run; {after_fork} of 16 runs were killed after that",
        to_start.as_secs_f64() * 1e3
    );
    assert!(after_fork > 0, "no run was killed after its program started: the test proved nothing");
}

/// A tree whose runner died without ending it (here made by hand: `run.json` naming a runner that
/// is gone) is listed as stale, with the one process of it that still runs (by its environment,
/// not by a pid that may have been reused); once nothing of it runs it is listed one last time,
/// its metrics file says the run is over, and its directory is removed; it is never removed
/// without a word.
#[test]
fn a_stale_tree_is_listed_as_such_and_ended_when_nothing_of_it_runs() {
    use std::os::unix::fs::PermissionsExt;
    let runtime = tempdir();
    let run_dir = runtime.path().join("uswap");
    std::fs::create_dir(&run_dir).unwrap();
    std::fs::set_permissions(&run_dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    let mut gone = Command::new("true").spawn().expect("true");
    let runner = gone.id() as i32;
    gone.wait().unwrap();
    let tree = run_dir.join(runner.to_string());
    std::fs::create_dir(&tree).unwrap();
    std::fs::set_permissions(&tree, std::fs::Permissions::from_mode(0o700)).unwrap();
    let prom = runtime.path().join("uswap.prom");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let info = serde_json::json!({
        "runner_pid": runner, "runner_start_ticks": 1, "pid": runner + 1, "command": ["prog", "--flag"],
        "limit_bytes": 16 << 20, "folio_bytes": 65536, "tiers": "zero,lz4", "started_unix_ms": now,
        "metrics_file": prom,
    });
    std::fs::write(tree.join("run.json"), info.to_string()).unwrap();
    // A process of the tree still running, and the snapshot of one whose pid another process
    // (this test) has now.
    let mut left = Command::new("sleep").arg("60").env("USWAP_STATS_DIR", &tree).spawn().expect("sleep");
    let me = std::process::id();
    for (pid, argv) in [(left.id(), ["sleep", "60"]), (me, ["prog", "--flag"])] {
        let snap = serde_json::json!({"pid": pid, "final": false, "argv": argv, "written_unix_ms": now});
        std::fs::write(tree.join(format!("{pid}.json")), snap.to_string()).unwrap();
    }
    let rt = runtime.path().as_os_str();
    let s = status(rt);
    let t = tree_of(&s, runner);
    let _ = left.kill();
    let _ = left.wait();
    let t = t.unwrap_or_else(|| panic!("the stale tree is not listed: {s:#}"));
    assert_eq!(t["up"], false, "{t:#}");
    assert_eq!(t["running_processes"], 1, "only the process that is of the tree runs: {t:#}");
    assert!(tree.exists(), "a stale tree with a process running stays");
    // Nothing of it runs now: listed once more (in text), then ended.
    let o = uswap(rt, &["status".as_ref(), "--interval".as_ref(), "0".as_ref()]).output().expect("uswap status");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains(&format!("uswap run {runner},")) && text.contains("stale: its runner died"), "{text}");
    assert!(!tree.exists(), "a stale tree with nothing running is removed once shown");
    let metrics = std::fs::read_to_string(&prom).unwrap_or_default();
    assert!(metrics.contains(&format!("uswap_run_up{{runner=\"{runner}\"}} 0")), "{metrics}");
    assert!(tree_of(&status(rt), runner).is_none());
}

/// `XDG_RUNTIME_DIR` naming a directory that does not exist, or one of another user, is passed
/// over for the per-user directory without a word (before: every run warned that status would
/// not see it, and a release build, whose library is cached there, exited 1); and `uswap
/// status` lists the runs of both that directory and the runtime directory it is given. The
/// runners forward SIGTERM to their programs through their guardians.
#[test]
fn an_unusable_runtime_directory_falls_back_and_status_lists_both() {
    let _one = one_at_a_time();
    let runtime = tempdir();
    let others = tempdir();
    let c = std::ffi::CString::new(others.path().as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: chown(2) of a directory this test made (to nobody), by a NUL-terminated path.
    assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0, "this test runs as root");
    for bad in [OsStr::new("/nonexistent"), others.path().as_os_str()] {
        // The library as users get it (not USWAP_PRELOAD): cached in the run directory by a
        // release build.
        let o = Command::new(env!("CARGO_BIN_EXE_uswap"))
            .args(["run", "--limit", "64M", "--", "true"])
            .env("XDG_RUNTIME_DIR", bad)
            .env_remove("USWAP_PRELOAD")
            .env_remove("LD_PRELOAD")
            .output()
            .expect("uswap run");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "XDG_RUNTIME_DIR={}: {err}", bad.to_string_lossy());
        assert!(
            !err.contains("will not see") && !err.contains("cannot find"),
            "XDG_RUNTIME_DIR={}: {err}",
            bad.to_string_lossy()
        );
    }
    let sleeper = |rt: &OsStr| {
        let mut c = uswap(rt, &["run".as_ref(), "-q".as_ref(), "--limit".as_ref(), "32M".as_ref(), "--".as_ref()]);
        c.args(["sleep", "60"]);
        spawn_runner(c)
    };
    let mut fallback = sleeper(OsStr::new("/nonexistent"));
    let mut usual = sleeper(runtime.path().as_os_str());
    let (f, u) = (fallback.id() as i32, usual.id() as i32);
    let mut s = serde_json::Value::Null;
    let both = until(Instant::now() + timeout_or(60), || {
        s = status(runtime.path().as_os_str());
        [f, u].iter().all(|&r| tree_of(&s, r).is_some_and(|t| t["up"] == true && t["running_processes"] == 1))
    });
    let fallback_only = tree_of(&status(OsStr::new("/nonexistent")), f).is_some();
    for r in [f, u] {
        send(r, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut codes = Vec::new();
    for r in [&mut fallback, &mut usual] {
        if !until(deadline, || r.try_wait().ok().flatten().is_some()) {
            send(-(r.id() as i32), libc::SIGKILL);
        }
        codes.push(r.wait().ok().and_then(|s| s.code()));
    }
    assert!(both, "status under XDG_RUNTIME_DIR={} lacks run {f} (fallback) or {u}: {s:#}", runtime.path().display());
    assert!(fallback_only, "status without a usable XDG_RUNTIME_DIR lacks run {f}");
    assert_eq!(codes, [Some(128 + libc::SIGTERM); 2], "SIGTERM is forwarded and ends the programs");
}

/// The guardian killed alone: the program dies with it, the rest of the tree (reparented to the
/// runner, a subreaper too) is ended by the runner, which fails saying so.
#[test]
fn a_killed_guardian_takes_the_tree_with_it() {
    let _one = one_at_a_time();
    let runtime = tempdir();
    let dir = tempdir();
    let pids = dir.path().join("pids");
    let script = format!("(sleep 300 & echo $! > {0}.tmp; mv {0}.tmp {0})\nsleep 300\n", pids.display());
    let mut runner = spawn_runner(uswap(
        runtime.path().as_os_str(),
        &[
            "run".as_ref(),
            "--limit".as_ref(),
            "32M".as_ref(),
            "--".as_ref(),
            "sh".as_ref(),
            "-c".as_ref(),
            script.as_ref(),
        ],
    ));
    let rpid = runner.id() as i32;
    let mut orphan = None;
    let mut guardian = None;
    let up = until(Instant::now() + timeout_or(60), || {
        orphan = std::fs::read_to_string(&pids).ok().and_then(|p| Proc::of(p.trim().parse().ok()?));
        guardian = guardian_of(rpid);
        orphan.is_some() && guardian.is_some()
    });
    if !up {
        send(-rpid, libc::SIGKILL);
        let _ = runner.wait();
        panic!("no orphan or no guardian (uswap-guardian, a child of uswap run {rpid}) showed up");
    }
    let (orphan, guardian) = (orphan.unwrap(), guardian.unwrap());
    send(guardian.pid, libc::SIGKILL);
    let ended = until(Instant::now() + Duration::from_secs(10), || runner.try_wait().ok().flatten().is_some());
    if !ended {
        send(-rpid, libc::SIGKILL);
        orphan.kill();
    }
    let out = runner.wait_with_output().expect("uswap run");
    let gone = orphan.gone();
    orphan.kill();
    assert!(ended, "uswap run did not end when its guardian was killed");
    assert!(gone, "the orphan of the tree still runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("guardian") && err.contains("were ended"), "{err}");
}
