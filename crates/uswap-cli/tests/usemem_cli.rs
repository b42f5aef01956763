//! `uswap bench usemem` and `uswap demo` as a user runs them: exit codes and the JSON contract.

use std::process::Command;

fn uswap(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_uswap")).args(args).output().expect("run uswap")
}

/// The one JSON document a successful `--json` run printed. A run that needs userfaultfd
/// fails the test where it is not permitted (it cannot pass untested).
fn json_of(o: &std::process::Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "uswap failed (userfaultfd must be permitted for this test): {err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not one JSON object ({e}): {out}"))
}

#[test]
fn bad_arguments_exit_2_with_a_clear_message() {
    for (args, msg) in [
        (&["bench", "usemem", "--size", "1X"][..], "unknown unit"),
        (&["bench", "usemem", "--limit", ""], "empty"),
        (&["bench", "usemem", "--folio", "8K"], "must be 4K, 64K or 2M"),
        (&["bench", "usemem", "--compare", "swapfile"], "expected kernel, zram, zswap or none"),
        (&["bench", "usemem", "--pin", "many"], "expected last, none, both or a CPU number"),
        (&["demo", "--limit", "1M"], "at least 16M"),
    ] {
        let o = uswap(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(msg), "{args:?}: {err}");
    }
}

/// A quick uswap-only `bench usemem --json` of 16M under 16M, with `extra` arguments.
fn quick_json(extra: &[&str]) -> std::process::Output {
    let mut args = vec!["bench", "usemem", "--quick", "--size", "16M", "--limit", "16M", "--compare", "none", "--json"];
    args.extend_from_slice(extra);
    uswap(&args)
}

#[test]
fn small_uswap_only_run_prints_the_json_keys() {
    let o = quick_json(&["--verify"]);
    let v = json_of(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    for k in [
        "seq_uswap_mb_s",
        "seq_kernel_zram_mb_s",
        "seq_ratio",
        "rand_uswap_mb_s",
        "rand_kernel_zram_mb_s",
        "rand_ratio",
        "seq_uswap_p50_us",
        "rand_uswap_p99_us",
        "runs",
        "pinned",
        "machine",
        "schema_version",
        "uswap_version",
        "date",
    ] {
        assert!(v.get(k).is_some(), "missing key {k} in {out}");
    }
    assert_eq!(v["bench"], "usemem");
    assert!(v["seq_uswap_mb_s"].as_f64().unwrap() > 0.0);
    // Every byte was checked: 2 rounds (fresh-zero check + one rewrite check) + the random pass.
    assert_eq!(v["modes"]["unpinned"]["uswap_verified_bytes"].as_u64(), Some(3 * (16 << 20)));
    assert!(v["kernel_zram_skipped"].as_str().unwrap().contains("not requested"));
    // Mixed data is measured beside pattern data by default, each verified, each with its
    // headline figures at the top level.
    assert_eq!(v["data"], "pattern,mixed", "{out}");
    for kind in ["pattern", "mixed"] {
        let m = &v["by_data"][kind];
        assert_eq!(m["modes"]["unpinned"]["uswap_verified_bytes"].as_u64(), Some(3 * (16 << 20)), "{kind}: {out}");
        assert!(v[format!("{kind}_seq_uswap_mb_s")].as_f64().is_some_and(|x| x > 0.0), "{kind}: {out}");
        assert!(v.get(format!("{kind}_rand_ratio")).is_some(), "{kind}: {out}");
    }
    assert_eq!(v["seq_uswap_mb_s"], v["by_data"]["pattern"]["seq_uswap_mb_s"], "the top level is the first kind's");
}

#[test]
fn data_picks_the_kinds_measured() {
    let o = quick_json(&["--data", "mixed"]);
    let v = json_of(&o);
    assert_eq!(v["data"], "mixed");
    assert!(v["by_data"].get("pattern").is_none(), "{v}");
    assert!(v.get("pattern_seq_ratio").is_none(), "{v}");
    assert_eq!(v["seq_uswap_mb_s"], v["mixed_seq_uswap_mb_s"]);
}

#[test]
fn demo_json_is_one_document_of_the_schema() {
    let o = uswap(&["demo", "--size", "32M", "--limit", "16M", "--rounds", "1", "--tiers", "zero,lz4", "--json"]);
    let v = json_of(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    // --json: no progress bar or banner on stderr.
    assert!(err.trim().is_empty(), "{err}");
    assert_eq!(v["schema_version"], 1);
    for k in ["uswap_version", "date", "machine", "elapsed_s", "cpu_user_s", "cpu_system_s", "workload", "backing"] {
        assert!(v.get(k).is_some(), "missing key {k} in {out}");
    }
    let st = &v["stats"];
    // Swapped through the pool: one pool figure whose parts add up to it, a compression ratio,
    // per-order counters keyed by folio size, tiers by name.
    let pool = st["memory"]["pool_bytes"].as_u64().unwrap();
    let parts: u64 = st["memory"]["pool_parts"].as_object().unwrap().values().map(|x| x.as_u64().unwrap()).sum();
    // (Read a moment apart while the reclaimer may still run: equal within 5 %.)
    assert!(parts.abs_diff(pool) <= pool / 20, "{st}");
    assert!(st["compression"]["ratio"].as_f64().is_some_and(|r| r > 1.0), "{st}");
    assert!(st["swap"]["swpout"]["64kB"].as_u64().unwrap() > 0, "{st}");
    assert!(st["tiers"]["zpool:lz4"].is_object(), "{st}");
}
