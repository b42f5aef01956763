//! End-to-end: a program whose executable defines `malloc` itself. rustc links jemalloc
//! unprefixed into its executable, so every `malloc`/`calloc` in the process (glibc's own
//! included) goes to it, and the preload library's routing of uswap's allocations to its
//! internal heap never sees them. Three hangs come of that unless the library guards against
//! them (see `uswap_ffi::preload::tls`, `uswap_pager::own` and `crates/uswap-ffi/build.rs`):
//! - a fork child's pager threads that register their thread-local destructors through glibc
//!   wait in its `calloc` for jemalloc's fork lock: every `rustc` that forks its linker hangs;
//! - the pager threads' thread vectors (glibc's DTV, allocated with that `calloc`) are evicted
//!   with the program's heap, and the event thread's next thread-local access waits for itself;
//! - zstd's contexts, made with `malloc` on the event thread, live in the program's heap.
//!
//! Each test has a deadline and prints every thread's stack when it fires (`common::run`).
//! rustc is needed to build this crate, so it is always here.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

fn rustc() -> String {
    std::env::var("USWAP_TEST_RUSTC").unwrap_or_else(|_| "rustc".into())
}

/// Say whether rustc's executable defines `malloc` (what these tests are about); they run
/// either way.
fn note_allocator() {
    let sysroot = Command::new(rustc()).args(["--print", "sysroot"]).output().expect("rustc --print sysroot");
    let exe = Path::new(String::from_utf8_lossy(&sysroot.stdout).trim()).join("bin/rustc");
    let defines = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&exe)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().any(|l| l.ends_with(" malloc")))
        .unwrap_or(false);
    eprintln!("{} defines malloc: {defines}", exe.display());
}

fn uswap(limit: &str, stats: &Path, args: &[&str], dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uswap"));
    cmd.args(["run", "--limit", limit, "--stats"])
        .arg(stats)
        .arg("--")
        .arg(rustc())
        .args(args)
        .current_dir(dir)
        .env("USWAP_PRELOAD", preload())
        .env_remove("LD_PRELOAD");
    cmd
}

#[test]
fn rustc_forks_its_linker_under_uswap() {
    note_allocator();
    let dir = tempdir();
    std::fs::write(dir.path().join("hello.rs"), "fn main() { println!(\"hello {}\", std::env::args().count()); }\n")
        .unwrap();
    let st = dir.path().join("stats.json");
    // rustc on a hello world stays near 16 MiB of anonymous memory: started at once, so that
    // its fork is a managed process's.
    let mut cmd = uswap("256M", &st, &["-o", "hello", "hello.rs"], dir.path());
    cmd.env("USWAP_START_BYTES", "0");
    let r = run(cmd, "uswap run -- rustc hello.rs");
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.code, Some(0), "rustc under uswap; stderr:\n{}", r.stderr);
    let out = Command::new(dir.path().join("hello")).arg("x").output().expect("run the linked program");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello 2\n");
    // The link forked: rustc's child ran under the pager too, then exec'd the linker.
    let forks: u64 = records(&stats(&st)).iter().map(|p| num(p, "/forks")).sum();
    assert!(forks >= 1, "rustc did not fork under the pager: {}", r.stderr);
}

#[test]
fn rustc_under_a_limit_keeps_its_pager_threads_memory() {
    note_allocator();
    let dir = tempdir();
    // rustc's RSS on this source without uswap is a few times the limit of 180 MiB, which
    // makes it swap its heap several times over.
    let mut src = String::new();
    for i in 0..6000 {
        src += &format!(
            "pub fn f{i}(x: u64) -> u64 {{ let v: Vec<u64> = (0..{}).map(|k| k * {i} + x).collect(); \
             match x % 7 {{ 0 => v.iter().sum(), 1 => v.len() as u64 + {i}, 2 => v.iter().max().copied().unwrap_or({i}), \
             _ => x.wrapping_mul({}) }} }}\n",
            i % 17 + 3,
            i + 1
        );
    }
    std::fs::write(dir.path().join("big.rs"), src).unwrap();
    let args = ["--edition", "2021", "--crate-type=lib", "--emit=metadata"];
    let mut native = Command::new(rustc());
    native.args(args).args(["-o", "native.rmeta", "big.rs"]).current_dir(dir.path());
    let want = run(native, "rustc big.rs (without uswap)");
    assert_eq!(want.code, Some(0), "rustc without uswap: {}", want.stderr);
    let st = dir.path().join("stats.json");
    let mut uargs = args.to_vec();
    uargs.extend(["-o", "uswap.rmeta", "big.rs"]);
    let r = run(uswap("180M", &st, &uargs, dir.path()), "uswap run -- rustc big.rs");
    if no_uffd(&r) {
        return;
    }
    assert_eq!(r.code, Some(0), "rustc under uswap; stderr:\n{}", r.stderr);
    let (a, b) = (
        std::fs::read(dir.path().join("native.rmeta")).unwrap(),
        std::fs::read(dir.path().join("uswap.rmeta")).unwrap(),
    );
    assert!(a == b, "the metadata rustc wrote under uswap differs from the native run's");
    let s = stats(&st);
    let main = records(&s).into_iter().find(|p| num(p, "/swap/pswpin") > 0).expect("no process swapped in");
    eprintln!(
        "rustc: {:.1} s native, {:.1} s under uswap; swapped in {} pages; folios passed over for a pinned thread vector: {}",
        want.secs,
        r.secs,
        num(main, "/swap/pswpin"),
        num(main, "/reclaim/pinned_skipped")
    );
}
