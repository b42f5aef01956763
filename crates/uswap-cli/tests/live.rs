//! The live view: `uswap status` sees a running tree, `--metrics-file` is kept
//! current, and a process killed with SIGKILL still leaves its figures in `--stats` (its last
//! snapshot, marked `stats_final: false`). Every wait has a deadline; on timeout the stacks of
//! the tree are printed and the test fails.

mod common;

use common::*;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn python() -> std::path::PathBuf {
    let o = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output();
    match o {
        Ok(o) if o.status.success() => std::path::PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()),
        _ => panic!("python3 is needed by this test and was not found (CI installs it)"),
    }
}

/// `uswap run --limit LIMIT --stats STATS EXTRA… -- python3 -c SCRIPT` with its own run
/// directory, in a process group of its own, stdout and stderr piped.
fn python_under_uswap(runtime: &Path, limit: &str, stats: &Path, extra: &[&std::ffi::OsStr], script: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uswap"));
    cmd.args(["run", "--limit", limit, "--stats"])
        .arg(stats)
        .args(extra)
        .arg("--")
        .arg(python())
        .args(["-c", script])
        .env("USWAP_PRELOAD", preload())
        .env("XDG_RUNTIME_DIR", runtime)
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    cmd
}

fn status(runtime: &Path) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(["status", "--json", "--interval", "0"])
        .env("XDG_RUNTIME_DIR", runtime)
        .output()
        .expect("uswap status");
    assert!(o.status.success(), "uswap status: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("uswap status --json prints JSON")
}

#[test]
fn status_and_metrics_see_a_running_tree_and_sigkill_leaves_its_figures() {
    let _one = one_at_a_time();
    let runtime = tempdir();
    let dir = tempdir();
    let (st, prom) = (dir.path().join("stats.json"), dir.path().join("uswap.prom"));
    // 48 MiB of data under a 16 MiB limit, then a long sleep: it is paged and then idle.
    let script =
        "import time\nx = [bytes([i % 251]) * 4096 for i in range(12288)]\nprint('ready', flush=True)\ntime.sleep(120)";
    let mut cmd =
        python_under_uswap(runtime.path(), "16M", &st, &["--metrics-file".as_ref(), prom.as_os_str()], script);
    cmd.stdout(Stdio::null());
    let mut child = cmd.spawn().expect("uswap run");
    let group = child.id() as i32;
    let deadline = Instant::now() + timeout_or(90);
    let fail = |what: &str| -> ! {
        eprintln!("{what}: the stacks of the tree:\n{}", dump_stacks(group));
        send(-group, libc::SIGKILL);
        panic!("{what}");
    };
    // The tree shows up with the program's memory under the pager.
    let pid = loop {
        if Instant::now() > deadline {
            fail("uswap status never showed the program with paged memory");
        }
        let s = status(runtime.path());
        let trees = s["trees"].as_array().cloned().unwrap_or_default();
        // Runs in the user's other run directories are listed too: this one by its runner.
        let tree = trees.iter().find(|t| t["runner_pid"] == group);
        let found = tree.and_then(|t| {
            t["processes"]
                .as_array()?
                .iter()
                .find(|p| {
                    p["running"] == true
                        && p["argv"][1] == "-c"
                        && num(p, "/pool_stored_bytes") + num(p, "/file_bytes") > 0
                })
                .cloned()
        });
        if let Some(p) = found {
            assert!(num(&p, "/charged_bytes") > 0, "{p:#}");
            assert_eq!(tree.unwrap()["limit_bytes"], 16u64 << 20, "{s:#}");
            break num(&p, "/pid") as i32;
        }
        if let Some(s) = child.try_wait().expect("wait") {
            panic!("uswap run ended early: {s}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // The metrics file names it.
    loop {
        let text = std::fs::read_to_string(&prom).unwrap_or_default();
        // Labels in the order of their names (comm, pid, runner), as the encoder writes them.
        let labels = format!(",pid=\"{pid}\",runner=\"{group}\"}}");
        let has =
            |family: &str| text.lines().any(|l| l.starts_with(&format!("{family}{{comm=")) && l.contains(&labels));
        if has("uswap_charged_bytes") {
            assert!(has("uswap_faults_total"), "{text}");
            break;
        }
        if Instant::now() > deadline {
            fail(&format!("the metrics file never named pid {pid}:\n{text}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // SIGKILL: no exit handler runs; the runner reports the last snapshot.
    send(pid, libc::SIGKILL);
    let code = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s.code();
        }
        if Instant::now() > deadline {
            fail("uswap run did not end after its program was killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(128 + libc::SIGKILL));
    let s = stats(&st);
    assert_eq!(s["main"]["stats_final"], false, "{s:#}");
    assert!(num(&s, "/main/swap/pswpout") > 0, "the last snapshot has the program's figures: {s:#}");
    // The tree is gone from the view, and its directory with it.
    let after = status(runtime.path());
    assert!(!after["trees"].as_array().unwrap().iter().any(|t| t["runner_pid"] == group), "{after:#}");
    assert!(!runtime.path().join("uswap").join(group.to_string()).exists());
}

#[test]
fn status_with_nothing_running_says_so() {
    let runtime = tempdir();
    let o = isolated(Command::new(env!("CARGO_BIN_EXE_uswap")).args(["status", "--interval", "0"]))
        .env("XDG_RUNTIME_DIR", runtime.path())
        .output()
        .expect("uswap status in a mount namespace of its own (this test needs root)");
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout), "no uswap run is running (for this user)\n");
    // A directory someone else could write is refused, not used.
    let shared = runtime.path().join("uswap");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let r = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(["run", "--limit", "16M", "--", "true"])
        .env("USWAP_PRELOAD", preload())
        .env("XDG_RUNTIME_DIR", runtime.path())
        .output()
        .expect("uswap run");
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("`uswap status` will not see this run") && err.contains("nobody else may write or list"),
        "{err}"
    );
}

/// The anonymous memory of a tree, as the kernel apportions it: the sum of `Pss_Anon` over
/// every descendant of `root` (pages shared copy-on-write count once in the sum).
fn tree_pss_anon(root: i32) -> u64 {
    let mut procs = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else { continue };
        let ppid = rest.split_whitespace().nth(1).and_then(|x| x.parse::<i32>().ok()).unwrap_or(0);
        procs.push((pid, ppid));
    }
    let mut tree = vec![root];
    loop {
        let more: Vec<i32> =
            procs.iter().filter(|(p, pp)| tree.contains(pp) && !tree.contains(p)).map(|(p, _)| *p).collect();
        if more.is_empty() {
            break;
        }
        tree.extend(more);
    }
    tree.iter()
        .skip(1)
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/smaps_rollup")).ok())
        .filter_map(|s| {
            s.lines()
                .find(|l| l.starts_with("Pss_Anon:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .sum::<u64>()
        * 1024
}

/// `--limit` covers the whole tree: a process and its fork child, each building 48 MiB of its
/// own data (and keeping what they inherited), stay together near one 48 MiB limit instead of
/// two, and their results are right.
#[test]
fn a_forked_tree_shares_one_limit() {
    let _one = one_at_a_time();
    let runtime = tempdir();
    let dir = tempdir();
    let st = dir.path().join("stats.json");
    let script = "import os, hashlib\n\
        def work(tag):\n    \
            x = [bytes([(i * 7 + tag) % 251]) * 4096 for i in range(12288)]\n    \
            h = hashlib.sha256()\n    \
            for _ in range(3):\n        \
                for b in x: h.update(b[:64])\n    \
            return h.hexdigest()[:16]\n\
        pid = os.fork()\n\
        r = work(1 if pid == 0 else 2)\n\
        print(('child ' if pid == 0 else 'parent ') + r, flush=True)\n\
        if pid: os.waitpid(pid, 0)\n";
    let expect = |tag: u64| {
        let o = Command::new(python())
            .args(["-c", &format!("{}\nprint(work({tag}))", script.split("pid = os.fork()").next().unwrap())])
            .output()
            .expect("python3");
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let (child_sum, parent_sum) = (expect(1), expect(2));
    let limit = 48u64 << 20;
    let child = python_under_uswap(runtime.path(), "48M", &st, &[], script).spawn().expect("uswap run");
    let runner = child.id() as i32;
    let deadline = Instant::now() + timeout_or(120);
    let mut peak = 0u64;
    let out = {
        let waiter = std::thread::spawn(move || child.wait_with_output());
        while !waiter.is_finished() {
            if Instant::now() > deadline {
                eprintln!("the tree is still running: its stacks:\n{}", dump_stacks(runner));
                send(-runner, libc::SIGKILL);
                panic!("a forked tree under one limit did not finish in time");
            }
            peak = peak.max(tree_pss_anon(runner));
            std::thread::sleep(Duration::from_millis(20));
        }
        waiter.join().unwrap().expect("uswap run output")
    };
    assert_eq!(out.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    lines.sort();
    assert_eq!(lines, [format!("child {child_sum}"), format!("parent {parent_sum}")]);
    let s = stats(&st);
    let procs: Vec<&serde_json::Value> =
        std::iter::once(&s["main"]).chain(s["other_processes"].as_array().unwrap().iter()).collect();
    let pythons: Vec<&&serde_json::Value> =
        procs.iter().filter(|p| p["argv"][1] == "-c" && num(p, "/swap/pswpout") > 0).collect();
    assert_eq!(pythons.len(), 2, "both processes paged: {s:#}");
    // Anonymous memory only: the binaries and libraries are file pages. What the limit does not
    // cover is each process's own heap growth and its anonymous memory at start (the
    // interpreter's, the pager's tables): bounded here by their fixed overheads.
    let fixed: u64 = pythons.iter().map(|p| num(p, "/fixed_overhead_bytes")).sum();
    eprintln!("tree peak Pss_Anon {} MiB; limit 48 MiB + fixed overheads {} MiB", peak >> 20, fixed >> 20);
    assert!(
        peak <= limit + fixed + limit / 8,
        "the tree's anonymous memory peaked at {} MiB, over the one limit 48 MiB + fixed overheads {} MiB + 1/8 \
         (two separate limits would allow 96 MiB): {s:#}",
        peak >> 20,
        fixed >> 20
    );
    assert!(pythons.iter().all(|p| p["tree"]["limit_bytes"] == limit), "{s:#}");
}
