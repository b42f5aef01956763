//! Builds `examples/c/region.c` with the system C compiler against the committed header
//! (`include/uswap.h`) and the `libuswap_ffi.so` that cargo built for this test run, then runs it.
//!
//! The compiler is `$CC` or `cc` (CI installs gcc). The program exits 77 when this process may not
//! use userfaultfd: the test then prints SKIPPED and passes (fails when `USWAP_REQUIRE_UFFD` is set).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory holding `libuswap_ffi.so`: this test binary's `deps/` (where `cargo test` builds
/// the cdylib) or its parent, the profile directory (`target/debug`, where `cargo build` puts it).
/// When both have one, the newer.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary has a directory").to_path_buf();
    let candidates = [Some(deps.clone()), deps.parent().map(Path::to_path_buf)];
    let found = candidates
        .into_iter()
        .flatten()
        .filter_map(|dir| {
            let modified = std::fs::metadata(dir.join("libuswap_ffi.so")).ok()?.modified().ok()?;
            Some((modified, dir))
        })
        .max_by_key(|(modified, _)| *modified);
    match found {
        Some((_, dir)) => dir,
        None => panic!(
            "libuswap_ffi.so not found in {} or its parent; build the cdylib first \
             (`cargo build -p uswap-ffi`; `cargo test -p uswap-ffi` builds it too)",
            deps.display()
        ),
    }
}

fn run(cmd: &mut Command, what: &str) -> std::process::Output {
    match cmd.output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            panic!(
                "{what}: `{}` not found ({e}); install a C compiler or set CC",
                Path::new(cmd.get_program()).display()
            )
        }
        Err(e) => panic!("{what}: cannot run {cmd:?}: {e}"),
    }
}

#[test]
fn c_region_example() {
    let krate = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = lib_dir();
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c_example");
    std::fs::create_dir_all(&out_dir).unwrap();
    let bin = out_dir.join("region");

    // CC may carry arguments ("ccache gcc"): the first word is the program.
    let cc = std::env::var("CC").ok().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "cc".into());
    let mut words = cc.split_whitespace();
    let mut build = Command::new(words.next().unwrap());
    build
        .args(words)
        .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-I"])
        .arg(krate.join("include"))
        .arg(krate.join("examples/c/region.c"))
        .arg("-o")
        .arg(&bin)
        .arg("-L")
        .arg(&lib)
        .arg("-luswap_ffi")
        .arg(format!("-Wl,-rpath,{}", lib.display()));
    let o = run(&mut build, "compiling examples/c/region.c");
    assert!(
        o.status.success(),
        "compiling examples/c/region.c failed ({}): {build:?}\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );

    // The library's LD_PRELOAD face stays inert without USWAP_LIMIT: make sure it is unset even
    // when the tests themselves run under `uswap run`.
    let o = run(Command::new(&bin).env_remove("USWAP_LIMIT"), "running the C example");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    if o.status.code() == Some(77) {
        assert!(stdout.contains("SKIPPED"), "exit 77 without a SKIPPED line");
        assert!(
            std::env::var_os("USWAP_REQUIRE_UFFD").is_none(),
            "the C example cannot use userfaultfd and USWAP_REQUIRE_UFFD is set"
        );
        println!("SKIPPED: the C example cannot use userfaultfd here");
        return;
    }
    assert!(o.status.success(), "the C example failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}", o.status);
    let version = format!("uswap {}", env!("CARGO_PKG_VERSION"));
    assert!(stdout.lines().any(|l| l == version), "no `{version}` line:\n{stdout}");
    assert!(
        stdout.lines().any(|l| l.starts_with("error path: uswap_pager_new(folio_size=12345) -> NULL: ")),
        "no error-path line:\n{stdout}"
    );
    assert!(stdout.lines().any(|l| l.starts_with("region: ok: ")), "no summary line:\n{stdout}");
}
