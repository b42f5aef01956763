//! A limit that cannot hold says so at once, and the engine falls back before it gives up:
//! a swap file on a full filesystem (a 16 MiB tmpfs in a mount namespace of the test's own),
//! `--tiers zero`, and RAM-only tiers with data that does not compress. Each run checks the
//! program's data byte for byte (`programs/fill.c`), the message on stderr while it ran, the
//! summary's cause, and the statistics. Needs root (the tmpfs), as CI has.

mod common;

use common::*;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// `uswap run ARGS…` in a mount namespace with a 16 MiB tmpfs at `small` (faults wait 2 s
/// for room while the store fails, not 10).
fn run_with_small_fs(small: &Path, args: &[&str]) -> Ran {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uswap"));
    cmd.arg("run").args(args).env("USWAP_PRELOAD", preload()).env("USWAP_FULL_WAIT_MS", "2000");
    let dir = std::ffi::CString::new(small.as_os_str().as_encoded_bytes()).expect("a path without NUL");
    // SAFETY: in the child between fork and exec: system calls only, on NUL-terminated
    // strings made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let ok = libc::unshare(libc::CLONE_NEWNS) == 0
                && libc::mount(
                    c"none".as_ptr(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) == 0
                && libc::mount(c"tmpfs".as_ptr(), dir.as_ptr(), c"tmpfs".as_ptr(), 0, c"size=16m".as_ptr().cast()) == 0;
            if ok {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    run(cmd, &format!("uswap run {}", args.join(" ")))
}

fn fill(dir: &Path) -> String {
    compile("fill", dir).to_string_lossy().into_owned()
}

/// A test directory with `fill` built in it, the directory the small tmpfs goes on, and the
/// tiers that put the swap file there.
fn small_fs_setup() -> (tempfile::TempDir, String, std::path::PathBuf, String) {
    let d = tempdir();
    let prog = fill(d.path());
    let small = d.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let tiers = format!("zero,lz4,file:{}", small.display());
    (d, prog, small, tiers)
}

fn checked(r: &Ran, mib: u32, mode: &str) {
    assert_eq!(r.code, Some(0), "stderr:\n{}", r.stderr);
    assert_eq!(r.out(), format!("fill: {mib} MiB {mode} mismatches 0\n"), "stderr:\n{}", r.stderr);
}

#[test]
fn a_swap_file_on_a_full_filesystem_is_said_at_once_and_no_page_is_lost() {
    let (_dir, prog, small, tiers) = small_fs_setup();
    let r = run_with_small_fs(&small, &["--limit", "64M", "--tiers", &tiers, "--", &prog, "100", "random"]);
    if no_uffd(&r) {
        return;
    }
    checked(&r, 100, "random");
    let e = &r.stderr;
    // While it ran: the tier, its path and the error, then the limit giving way.
    let said = format!("tier file:{} cannot store pages: no space left on its filesystem", small.display());
    assert!(e.contains(&said) && e.contains("No space left on device"), "{e}");
    assert!(e.contains("the limit is broken: the store has failed for 2 s"), "{e}");
    // After: the cause, from the counters, not reclaim's resident share.
    assert!(e.contains(&format!("over because the store failed (file:{}: ", small.display())), "{e}");
    assert!(e.contains("store: file:") && e.contains("of evictions no tier took"), "{e}");
    assert!(!e.contains("reclaim keeps 1/8"), "{e}");
}

#[test]
fn data_that_compresses_goes_to_the_pool_past_its_share_when_the_file_is_full() {
    let (d, prog, small, tiers) = small_fs_setup();
    let stats = d.path().join("stats.json");
    let st = stats.to_string_lossy().into_owned();
    let r =
        run_with_small_fs(&small, &["--limit", "64M", "--tiers", &tiers, "--stats", &st, "--", &prog, "100", "text"]);
    if no_uffd(&r) {
        return;
    }
    checked(&r, 100, "text");
    assert!(r.stderr.contains("no space left on its filesystem"), "{}", r.stderr);
    let s = common::stats(&stats);
    assert!(num(&s, "/main/swap/zswpout_over_cap") > 0, "{s}");
    let file = &s["main"]["tiers"][format!("file:{}", small.display())];
    assert!(file["failures"]["nospace"].as_u64().unwrap_or(0) > 0, "{s}");
    // The pool past its share is still charged to the limit: it holds.
    check_peak("fill text, full file", &s, 64 << 20, r.secs);
}

#[test]
fn tiers_zero_alone_are_warned_at_start_and_when_the_limit_breaks() {
    let d = tempdir();
    let prog = fill(d.path());
    let r = uswap_run_env(
        &["--limit", "48M", "--tiers", "zero", "--", &prog, "80", "text"],
        &[("USWAP_FULL_WAIT_MS", "2000")],
    );
    if no_uffd(&r) {
        return;
    }
    checked(&r, 80, "text");
    let e = &r.stderr;
    let start = e.find("uswap: warning: --tiers zero stores no page").unwrap_or_else(|| panic!("{e}"));
    let during = e
        .find("--tiers zero stores no page: what the limit pushes out stays in memory")
        .unwrap_or_else(|| panic!("{e}"));
    assert!(start < during, "{e}");
    assert!(e.contains("the limit is broken"), "{e}");
    assert!(e.contains("over because no tier stores pages"), "{e}");
}

#[test]
fn ram_only_tiers_with_data_that_does_not_compress_are_warned() {
    let d = tempdir();
    let prog = fill(d.path());
    let r = uswap_run(&["--limit", "48M", "--tiers", "zero,lz4", "--", &prog, "100", "random"]);
    if no_uffd(&r) {
        return;
    }
    checked(&r, 100, "random");
    let e = &r.stderr;
    assert!(e.contains("uswap: warning: --tiers zero,lz4 keeps every page in RAM"), "{e}");
    assert!(e.contains("pages that do not compress cannot leave memory"), "{e}");
    assert!(e.contains("over because every tier is in RAM"), "{e}");
}
