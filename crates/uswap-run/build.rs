//! Embeds the LD_PRELOAD library in release builds of `uswap`, so `cargo install` and
//! `cargo build --release -p uswap-cli` give a `uswap` whose `run` works on its own.
//!
//! In a release build (or with `USWAP_EMBED_PRELOAD=1`) this runs
//! `cargo build --release -p uswap-ffi` into `<target>/uswap-embed` (a target directory of its
//! own: the outer cargo holds the lock of the main one; kept across builds, so only the first
//! release build pays for it) and sets `USWAP_EMBED_PATH` for `include_bytes!`. Debug builds
//! (tests, clippy, CI) skip it and find `deps/libuswap_ffi.so` next to the binary instead;
//! `USWAP_EMBED_PRELOAD=0` skips it everywhere.
//!
//! Locking: none (cargo runs build scripts one at a time per package).

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=USWAP_EMBED_PRELOAD");
    println!("cargo:rustc-check-cfg=cfg(uswap_embed)");
    let want = match std::env::var("USWAP_EMBED_PRELOAD").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => std::env::var("PROFILE").as_deref() == Ok("release"),
    };
    if !want {
        return;
    }
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let ffi = manifest.join("../uswap-ffi");
    for d in [
        "../uswap-ffi/src",
        "../uswap-ffi/build.rs",
        "../uswap-ffi/Cargo.toml",
        "../uswap/src",
        "../uswap-pager/src",
        "../../Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", manifest.join(d).display());
    }
    // OUT_DIR is <target>/<profile>/build/uswap-cli-HASH/out: the target directory is 4 up.
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let target = out.ancestors().nth(4).map(PathBuf::from).unwrap_or_else(|| out.clone()).join("uswap-embed");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = std::process::Command::new(cargo)
        .args(["build", "--release", "--lib", "--manifest-path"])
        .arg(ffi.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        // No debug information in the copy `uswap run` writes to every user's cache directory
        // (often a tmpfs): 2.7 MB instead of 31 MB. Symbols stay, so `perf` still names the
        // library's functions; for line-level profiles use the workspace's own build of it
        // (`USWAP_PRELOAD=target/release/libuswap_ffi.so`).
        .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")
        // The outer build's flags for build scripts must not leak into this one.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .status();
    let lib = target.join("release/libuswap_ffi.so");
    match status {
        Ok(s) if s.success() && lib.is_file() => {
            println!("cargo:rustc-env=USWAP_EMBED_PATH={}", lib.display());
            // The name of its cache file, hashed here once rather than by every `uswap run`
            // (FNV-1a over 30 MiB took 25-30 ms of each start).
            match std::fs::read(&lib) {
                Ok(bytes) => {
                    println!("cargo:rustc-env=USWAP_EMBED_HASH={:016x}", fnv1a(&bytes));
                    println!("cargo:rustc-cfg=uswap_embed");
                }
                Err(e) => println!("cargo:warning=cannot read {} to hash it: {e}", lib.display()),
            }
        }
        other => {
            println!(
                "cargo:warning=could not build libuswap_ffi.so to embed ({other:?}); `uswap run` will need it next to \
                 the binary or in USWAP_PRELOAD"
            );
        }
    }
}

// `fn fnv1a(&[u8]) -> u64`, shared with `src/preload.rs`.
include!("src/fnv1a.rs");
