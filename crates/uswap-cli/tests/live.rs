//! The live view (issue 12): `uswap status` sees a running tree, `--metrics-file` is kept
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
    let runtime = tempdir();
    let dir = tempdir();
    let (st, prom) = (dir.path().join("stats.json"), dir.path().join("uswap.prom"));
    // 48 MiB of data under a 16 MiB limit, then a long sleep: it is paged and then idle.
    let script =
        "import time\nx = [bytes([i % 251]) * 4096 for i in range(12288)]\nprint('ready', flush=True)\ntime.sleep(120)";
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uswap"));
    cmd.args(["run", "--limit", "16M", "--stats"])
        .arg(&st)
        .arg("--metrics-file")
        .arg(&prom)
        .arg("--")
        .arg(python())
        .args(["-c", script])
        .env("USWAP_PRELOAD", preload())
        .env("XDG_RUNTIME_DIR", runtime.path())
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
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
        let found = trees.iter().find(|t| t["runner_pid"] == group).and_then(|t| {
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
            assert_eq!(trees[0]["limit_bytes"], 16u64 << 20, "{s:#}");
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
        if text.contains(&format!("uswap_charged_bytes{{runner=\"{group}\",pid=\"{pid}\"")) && text.contains("# EOF") {
            assert!(text.contains(&format!("uswap_faults_total{{runner=\"{group}\",pid=\"{pid}\"")), "{text}");
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
    let o = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(["status", "--interval", "0"])
        .env("XDG_RUNTIME_DIR", runtime.path())
        .output()
        .expect("uswap status");
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
    assert!(err.contains("`uswap status` will not see this run") && err.contains("only its owner"), "{err}");
}
