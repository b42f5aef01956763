//! The committed C header `include/uswap.h` must be what cbindgen generates from `src/capi.rs`
//! with `cbindgen.toml`. This test regenerates it in memory and fails if the file differs.
//!
//! After changing the C ABI (or cbindgen.toml), rewrite the header and commit it:
//!
//! ```text
//! USWAP_BLESS=1 cargo test -p uswap-ffi --test header
//! ```
//!
//! Only `src/capi.rs` is parsed (not the crate): the preload module's interposition symbols
//! (`malloc`, `mmap`, `read`, ...) live in the same .so but are no part of the C API.

use std::path::{Path, PathBuf};

const BLESS: &str = "USWAP_BLESS=1 cargo test -p uswap-ffi --test header";

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn generate(dir: &Path) -> String {
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/capi.rs"))
        .generate()
        .expect("cbindgen failed on src/capi.rs");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("cbindgen wrote UTF-8")
}

/// Names declared as functions in the header: the identifier before each `(` that ends a
/// declaration line's return type (good enough for cbindgen's one-declaration-per-line output).
fn declared_functions(header: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in header.lines() {
        let l = line.trim_start();
        if l.starts_with("//") || l.starts_with('*') || l.starts_with("/*") || l.starts_with('#') {
            continue;
        }
        if let Some(open) = l.find('(') {
            let head = &l[..open];
            let name: String = head
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            if !name.is_empty() {
                names.push(name);
            }
        }
    }
    names
}

/// A line diff (longest common subsequence; changed lines with two lines of context, at most
/// 60 lines shown), for the failure message.
fn diff(committed: &str, generated: &str) -> String {
    let a: Vec<&str> = committed.lines().collect();
    let b: Vec<&str> = generated.lines().collect();
    // lcs[i][j]: length of the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    // (sign, committed line number, text)
    let mut ops = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', i + 1, a[i]));
            (i, j) = (i + 1, j + 1);
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', i + 1, a[i]));
            i += 1;
        } else {
            ops.push(('+', i + 1, b[j]));
            j += 1;
        }
    }
    let near_change = |k: usize| ops[k.saturating_sub(2)..(k + 3).min(ops.len())].iter().any(|o| o.0 != ' ');
    let mut out = String::from("--- include/uswap.h (committed)\n+++ generated\n");
    let (mut shown, mut gap) = (0, true);
    for (k, (sign, line, text)) in ops.iter().enumerate() {
        if !near_change(k) {
            gap = true;
            continue;
        }
        if shown == 60 {
            out += "...\n";
            break;
        }
        if gap {
            out += &format!("@@ line {line} @@\n");
            gap = false;
        }
        out += &format!("{sign} {text}\n");
        shown += 1;
    }
    if ops.iter().all(|o| o.0 == ' ') {
        out += "(the lines are equal: the files differ in line endings or the final newline)\n";
    }
    out
}

#[test]
fn header_is_up_to_date() {
    let dir = crate_dir();
    let path = dir.join("include/uswap.h");
    let generated = generate(&dir);

    // Sanity: a header with the whole API and nothing from the preload module. (Also guards
    // against cbindgen's recursion guard, which yields empty bindings under _CBINDGEN_IS_RUNNING.)
    let fns = declared_functions(&generated);
    for want in ["uswap_version", "uswap_pager_new", "uswap_map", "uswap_stats_json"] {
        assert!(fns.iter().any(|f| f == want), "generated header lacks {want}: {fns:?}");
    }
    let foreign: Vec<_> = fns.iter().filter(|f| !f.starts_with("uswap_")).collect();
    assert!(foreign.is_empty(), "generated header declares non-uswap functions: {foreign:?}");
    assert!(generated.contains("USWAP_OK = 0"), "UswapStatus constants missing or renamed");

    if std::env::var_os("USWAP_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &generated).unwrap();
        eprintln!("wrote {}", path.display());
        return;
    }

    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}\nGenerate it with:\n    {BLESS}", path.display()));
    if committed != generated {
        panic!(
            "{} is stale: it differs from what cbindgen generates from src/capi.rs.\n{}\n\
             Regenerate it and commit the result:\n    {BLESS}",
            path.display(),
            diff(&committed, &generated)
        );
    }
}
