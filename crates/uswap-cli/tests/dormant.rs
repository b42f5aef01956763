//! Dormant start (`USWAP_START_BYTES=16M`): a process of the tree that stays under that much
//! anonymous memory runs with no pager (no userfaultfd, no swap file, one watcher thread), and one that
//! grows past it starts its pager and keeps every byte it wrote before and after, a fork child
//! of a dormant process included. Each run checks the program's output byte for byte and is
//! killed after [`timeout`].

mod common;

use common::*;

/// What a shell sees of itself under `uswap run`: its thread count and how many of its
/// descriptors are userfaultfds.
fn threads_and_uffds(envs: &[(&str, &str)]) -> Option<(u32, u32)> {
    let script = "ls /proc/$$/task | wc -l; ls -l /proc/$$/fd | grep -c userfaultfd; true";
    let r = uswap_run_env(&["--limit", "256M", "--", "sh", "-c", script], envs);
    if no_uffd(&r) {
        return None;
    }
    assert_eq!(r.code, Some(0), "sh: stderr:\n{}", r.stderr);
    let out = r.out();
    let v: Vec<u32> = out.lines().map(|l| l.trim().parse().expect("a count")).collect();
    assert_eq!(v.len(), 2, "two counts: {out}");
    Some((v[0], v[1]))
}

/// `uswap run ARGS…` with the dormant start on at 16 MiB.
fn dormant_run(args: &[&str]) -> Ran {
    uswap_run_env(args, &[("USWAP_START_BYTES", "16M")])
}

#[test]
fn a_small_process_runs_with_no_pager_until_it_grows() {
    let Some((threads, uffds)) = threads_and_uffds(&[("USWAP_START_BYTES", "16M")]) else { return };
    assert_eq!((threads, uffds), (2, 0), "a dormant shell: itself and the watcher, no userfaultfd");
    // The same shell started eagerly (the default) has its pager's threads and userfaultfds:
    // what the counts above would be without the dormant start.
    let (threads, uffds) = threads_and_uffds(&[("USWAP_START_BYTES", "0")]).expect("uffd permitted");
    assert!(threads > 2 && uffds > 0, "an eager start: {threads} threads, {uffds} userfaultfds");
}

#[test]
fn dormant_processes_are_counted_in_the_summary() {
    let dir = tempdir();
    let st = dir.path().join("stats.json");
    let st_arg = st.to_string_lossy();
    let r =
        dormant_run(&["--limit", "256M", "--stats", &st_arg, "--", "sh", "-c", "for i in 1 2 3; do /bin/true; done"]);
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.code, Some(0), "stderr:\n{}", r.stderr);
    let s = stats(&st);
    let procs = records(&s);
    assert_eq!(procs.len(), 4, "the shell and its three children wrote statistics: {s:#}");
    for p in &procs {
        assert_eq!(p["dormant"], true, "every process stayed small: {p:#}");
        assert_eq!(num(p, "/start_bytes"), 16 << 20, "the default threshold: {p:#}");
        assert!(num(p, "/anon_peak_bytes") < 16 << 20, "{p:#}");
    }
    let r = dormant_run(&["--limit", "256M", "--", "sh", "-c", "/bin/true"]);
    assert!(
        r.stderr.contains("1 of them stayed small and started no pager") && r.stderr.contains("it ran with no pager"),
        "the summary names the dormant processes:\n{}",
        r.stderr
    );
}

/// `grow` writes 1 MiB while dormant, forks, and both processes grow to 96 MiB through the brk
/// heap (which no interposed call sees: the watcher starts each pager; their mallocs wait for
/// the reclaimer while over the limit) under a 32 MiB limit, then check every block twice.
#[test]
fn a_process_that_grows_starts_its_pager_and_keeps_every_byte() {
    let dir = tempdir();
    let prog = compile("grow", dir.path());
    let st = dir.path().join("stats.json");
    let limit = 32 * MIB;
    let r = dormant_run(&[
        "--limit",
        &limit_arg(limit),
        "--stats",
        &st.to_string_lossy(),
        "--",
        &prog.to_string_lossy(),
        "96",
    ]);
    if no_uffd(&r) {
        return;
    }
    let s = checked_grow_96(&r, &st);
    for p in &records(&s) {
        assert_eq!(p["dormant"], false, "each grew past the threshold and started its pager: {p:#}");
        assert!(num(p, "/swap/pswpout") * 4096 >= 32 * MIB, "each swapped out what did not fit: {p:#}");
    }
    check_tree_peak("grow", &s, limit);
}
