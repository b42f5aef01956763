//! End-to-end tests of `uswap run` on real runtimes: every program of
//! `uswap bench programs` (CPython, with a multiprocessing pool, Node.js, the JVM, SQLite, GNU sort, Redis, GCC, make -j2, xz,
//! Perl, a shell pipeline) at a small size, run natively and under `uswap run` with a limit below its
//! native peak RSS (`--limit-fraction` of it), through the benchmark itself with
//! `--compare none --json`. Each test checks that the program finished under uswap, that its
//! output (stdout and output files) equals the native run's byte for byte, and that its peak
//! RSS stays within limit + fixed overhead (from `uswap run --stats`) + 8 MiB + limit / 4.
//!
//! Every run has a deadline of `USWAP_E2E_TIMEOUT` seconds (default 120): the benchmark prints
//! the stacks of every thread of the hung process tree (gdb, and the kernel's
//! `/proc/PID/task/*/stack`) and kills it, and the test fails with them. A test skips, saying
//! so, only when its runtime is not installed and `USWAP_REQUIRE_RUNTIMES` is unset; CI sets it,
//! so a missing runtime fails there. Tests also skip when userfaultfd is not permitted.

mod common;

use common::*;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// Each program's limit as a fraction of its native peak RSS.
const LIMIT_FRACTION: f64 = 0.5;

fn require_runtimes() -> bool {
    std::env::var_os("USWAP_REQUIRE_RUNTIMES").is_some_and(|v| !v.is_empty() && v != "0")
}

/// `uswap bench programs ARGS… --json` under an outer deadline (the benchmark's own per-run
/// deadline should fire first); the parsed JSON, or None when the program was skipped (its
/// runtime is missing) or userfaultfd is not permitted.
fn bench(args: &[&str], envs: &[(&str, &str)], per_run: Duration) -> (Ran, Option<Value>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uswap"));
    cmd.args(["bench", "programs", "--json", "--compare", "none", "--timeout"])
        .arg(per_run.as_secs().to_string())
        .args(args)
        .env("USWAP_PRELOAD", preload())
        .env_remove("LD_PRELOAD")
        .envs(envs.iter().copied());
    let what = format!("uswap bench programs {}", args.join(" "));
    // Native + uswap runs, input generation, and gdb's time if a run hangs.
    let r = run_with(cmd, &what, per_run * 3 + Duration::from_secs(120));
    let v = serde_json::from_slice(&r.stdout).ok();
    (r, v)
}

/// Run program `name` at `scale` and check it. Returns its JSON entry, or None when skipped.
fn runtime(name: &str, scale: f64) -> Option<Value> {
    runtime_within(name, scale, 120)
}

/// [`runtime`] with `secs` for each run (`USWAP_E2E_TIMEOUT` overrides it).
fn runtime_within(name: &str, scale: f64, secs: u64) -> Option<Value> {
    runtime_with(name, scale, LIMIT_FRACTION, &[], secs)
}

/// [`runtime`] in SIGBUS fault mode (`USWAP_FAULT_MODE=sigbus`), at `fraction` of the native
/// peak.
fn runtime_sigbus(name: &str, scale: f64, fraction: f64) -> Option<Value> {
    runtime_with(name, scale, fraction, &[("USWAP_FAULT_MODE", "sigbus")], 120)
}

/// Run program `name` at `scale` under a limit of `fraction` of its native peak, with `envs`
/// set for the runs, and check it.
fn runtime_with(name: &str, scale: f64, fraction: f64, envs: &[(&str, &str)], secs: u64) -> Option<Value> {
    let per_run = timeout_or(secs);
    let (r, v) = bench(
        &["--only", name, "--scale", &scale.to_string(), "--limit-fraction", &fraction.to_string()],
        envs,
        per_run,
    );
    let v =
        v.unwrap_or_else(|| panic!("{name}: no JSON from the benchmark (exit {:?}); stderr:\n{}", r.code, r.stderr));
    if let Some(s) = v["skipped"].as_array().and_then(|a| a.first()) {
        let why = s["reason"].as_str().unwrap_or("?");
        if require_runtimes() {
            panic!("{name}: its runtime is missing ({why}) and USWAP_REQUIRE_RUNTIMES is set");
        }
        eprintln!("SKIPPED: {name}: {why} (set USWAP_REQUIRE_RUNTIMES=1 to make this a failure)");
        return None;
    }
    let p = v["programs"][0].clone();
    assert_eq!(p["name"], name, "{v:#}");
    let runs = serde_json::to_string_pretty(&p["runs"]).unwrap_or_default();
    assert_eq!(
        p["native_outcome"], "ok",
        "{name}: the program failed without uswap (the test's environment is broken): {runs}\nstderr:\n{}",
        r.stderr
    );
    let uswap_err = p["runs"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["side"] == "uswap"))
        .and_then(|x| x["error"].as_str())
        .unwrap_or("")
        .to_string();
    if uswap_err.contains("userfaultfd") {
        assert!(
            std::env::var_os("USWAP_REQUIRE_UFFD").is_none(),
            "userfaultfd is not permitted here and USWAP_REQUIRE_UFFD is set: {uswap_err}"
        );
        eprintln!("SKIPPED: userfaultfd is not permitted here: {uswap_err}");
        return None;
    }
    let limit = p["limit_bytes"].as_u64().expect("limit_bytes");
    let native_peak = p["native_peak_rss_bytes"].as_u64().expect("native peak");
    eprintln!(
        "{name}: {}\n  native {:.2} s, peak RSS {}; uswap --limit {}: {} s, peak RSS {}, fixed overhead {}, swapped out {}",
        p["command"].as_str().unwrap_or("?"),
        p["native_s"].as_f64().unwrap_or(0.0),
        mib(native_peak),
        mib(limit),
        p["uswap_s"],
        p["uswap_peak_rss_bytes"].as_u64().map_or("-".into(), mib),
        p["uswap_fixed_overhead_bytes"].as_u64().map_or("-".into(), mib),
        p["uswap_evicted_bytes"].as_u64().map_or("-".into(), mib),
    );
    // On a hang the stacks are in the JSON (the benchmark printed them on stderr as well).
    let why = match p["uswap_stacks"].as_str() {
        Some(s) => format!("it hung; the stacks of its threads:\n{s}"),
        None => format!("benchmark stderr:\n{}", r.stderr),
    };
    assert_eq!(
        p["uswap_outcome"],
        "ok",
        "{name} under uswap run --limit {}: {uswap_err}\nruns: {runs}\n{why}",
        mib(limit)
    );
    assert_eq!(p["correct"], true, "{name}: output under uswap differs from the native run's: {runs}");
    assert!(
        limit < native_peak,
        "{name}: the limit {} is not below the native peak RSS {}",
        mib(limit),
        mib(native_peak)
    );
    let peak = p["uswap_peak_rss_bytes"].as_u64().expect("uswap peak");
    let fixed = p["uswap_fixed_overhead_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("{name}: uswap run --stats reported no process statistics: {runs}"));
    let bound = limit + fixed + slack(limit);
    assert!(
        peak <= bound,
        "{name}: peak RSS {} under uswap exceeds limit {} + fixed overhead {} + slack {} = {}",
        mib(peak),
        mib(limit),
        mib(fixed),
        mib(slack(limit)),
        mib(bound)
    );
    Some(p)
}

#[test]
fn cpython_list() {
    runtime("python-list", 0.1);
}

#[test]
fn cpython_multiprocessing_fork() {
    runtime("python-fork", 0.1);
}

#[test]
fn cpython_dict() {
    runtime("python-dict", 0.1);
}

#[test]
fn nodejs_objects() {
    runtime("node-objects", 0.1);
}

#[test]
fn jvm_hashmap() {
    runtime("java-hashmap", 0.1);
}

#[test]
fn sqlite_in_memory() {
    runtime("sqlite", 0.1);
}

#[test]
fn gnu_sort() {
    runtime("sort", 0.2);
}

/// Redis loading, a BGSAVE under GET load, the dump reloaded.
#[test]
fn redis_bgsave_under_load() {
    runtime("redis", 0.05);
}

#[test]
fn gcc_compiles_a_large_file() {
    runtime("gcc", 0.1);
}

/// Two compilers at once under one limit for the tree (make, its shells, two gcc drivers, two
/// cc1 and two as).
#[test]
fn make_j2_builds_two_files_at_once() {
    runtime("make-j2", 0.1);
}

/// xz's match finder reads its whole window at random, so at half its peak it thrashes: it
/// runs many times slower than native and swaps out many times its data, its peak RSS within
/// its bound. It runs for what it checks (no hang, every byte right, the peak), with room for
/// a slower machine: 240 s a run.
#[test]
fn xz_compresses() {
    runtime_within("xz", 0.1, 240);
}

/// A Perl hash at half its peak thrashes like xz, its peak RSS within its bound. It runs for
/// 150-170 s alone on a 2-vCPU machine (1.5 M faults, steadily), longer beside the other
/// tests: 480 s a run, so that only a hang reaches the deadline.
#[test]
fn perl_hash() {
    runtime_within("perl-hash", 0.1, 480);
}

#[test]
fn shell_pipeline() {
    runtime("pipeline", 0.1);
}

/// The benchmark's own timeout path: a run past its deadline gets its stacks printed (the
/// kernel's, and gdb's when gdb is installed), is killed with its whole tree, and is reported as
/// a timeout and a failure (exit 1), not waited for.
#[test]
fn bench_timeout_prints_stacks_and_kills_the_tree() {
    let dir = tempdir();
    let work = dir.path().join("work");
    let (r, v) = bench(
        &[
            "--only",
            "python-list",
            "--scale",
            "5",
            "--limit",
            "64M",
            "--workdir",
            work.to_str().expect("UTF-8 temp path"),
            "--keep",
        ],
        &[],
        Duration::from_secs(1),
    );
    let v = v.unwrap_or_else(|| panic!("no JSON (exit {:?}); stderr:\n{}", r.code, r.stderr));
    if v["skipped"].as_array().is_some_and(|a| !a.is_empty()) {
        assert!(!require_runtimes(), "python3 missing: {v:#}");
        eprintln!("SKIPPED: no python3");
        return;
    }
    let p = &v["programs"][0];
    assert_eq!(p["native_outcome"], "timeout", "{p:#}");
    assert_eq!(r.code, Some(1), "a timeout is a failure; stderr:\n{}", r.stderr);
    assert!(v["failures"].as_array().is_some_and(|f| !f.is_empty()), "{v:#}");
    for want in ["TIMEOUT after", "=== pid", "wchan", "python"] {
        assert!(r.stderr.contains(want), "stderr should contain {want:?}:\n{}", r.stderr);
    }
    let stacks = p["native_stacks"].as_str().expect("stacks in the JSON");
    let has_gdb = Command::new("gdb").arg("--version").output().is_ok_and(|o| o.status.success());
    if has_gdb || require_runtimes() {
        assert!(stacks.contains("Thread 1") || stacks.contains("#0"), "gdb's backtrace is missing:\n{stacks}");
    }
    // Nothing of the tree is left: no process runs with the work directory in its command line.
    std::thread::sleep(Duration::from_millis(200));
    let marker = work.to_string_lossy().into_owned();
    let left: Vec<String> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit())))
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&marker))
        .collect();
    assert!(left.is_empty(), "left running after the timeout: {left:?}");
}

/// `uswap bench redis` at a small size, uswap side only: Redis holding 1.5x the limit serves
/// GETs with and without a BGSAVE under `uswap run`, and the dump reloads with every key.
#[test]
fn redis_gets_during_bgsave_and_the_dump_reloads() {
    let per_run = timeout_or(120);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uswap"));
    cmd.args(["bench", "redis", "--json", "--compare", "none", "--limit", "16M", "--data-ratio", "1.5"])
        .args(["--requests", "3000", "--timeout"])
        .arg(per_run.as_secs().to_string())
        .env("USWAP_PRELOAD", preload())
        .env_remove("LD_PRELOAD");
    let r = run_with(cmd, "uswap bench redis", per_run + Duration::from_secs(60));
    if r.code == Some(1) && r.stderr.contains("is not installed") {
        assert!(!require_runtimes(), "redis is missing and USWAP_REQUIRE_RUNTIMES is set: {}", r.stderr);
        eprintln!("SKIPPED: {}", r.stderr.trim());
        return;
    }
    let v: Value = serde_json::from_slice(&r.stdout)
        .unwrap_or_else(|_| panic!("no JSON from uswap bench redis (exit {:?}); stderr:\n{}", r.code, r.stderr));
    assert_eq!(r.code, Some(0), "{v:#}\nstderr:\n{}", r.stderr);
    assert_eq!(v["failures"], 0, "{v:#}");
    let run = &v["uswap_runs"][0];
    // "ok": DBSIZE, the sampled values and the reloaded dump all right ("wrong" otherwise).
    assert_eq!(run["outcome"], "ok", "{v:#}");
    assert!(v["get_rps_uswap"].as_f64().is_some_and(|x| x > 0.0), "{v:#}");
    assert!(v["bgsave_seconds_uswap"].as_f64().is_some_and(|x| x > 0.0), "{v:#}");
}

/// SIGBUS fault mode: a pipeline whose last reader's buffer is adopted while it reads.
#[test]
fn shell_pipeline_in_sigbus_mode() {
    runtime_sigbus("pipeline", 0.25, 0.4);
}

/// SIGBUS fault mode: a list whose item array glibc's `realloc` grows in place with `mremap`
/// (the grown tail is registered, sends no event, and no region holds it).
#[test]
fn cpython_list_in_sigbus_mode() {
    runtime_sigbus("python-list", 0.25, 0.4);
}
