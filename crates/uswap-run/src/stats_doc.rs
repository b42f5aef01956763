//! `docs/stats.md` checked against the code: the keys of the process record files
//! (`uswap_pager::record::ProcRecord`, a generated list between markers) and every key the
//! printed schema has (`report::run_report` on a record with every section filled).
//!
//! `USWAP_BLESS=1 cargo test -p uswap-run stats_doc` rewrites the generated list after the
//! record changed.
//!
//! Locking: none (tests only).

use crate::report::{run_report, Run, TreePeak};
use crate::unmanaged::{Reason, Unmanaged};
use serde_json::Value;
use std::collections::BTreeSet;
use uswap_pager::record::{ProcRecord, Said, Thrash, Unmanaged as UnmanagedMem};
use uswap_pager::{PagerStats, StoreStats, TierFailures, TierStats};

const BEGIN: &str =
    "<!-- record keys: generated from uswap_pager::record::ProcRecord by crates/uswap-run/src/stats_doc.rs -->";
const END: &str = "<!-- end of record keys -->";

fn doc_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/stats.md")
}

/// A record with every optional section present and every limit set, so that serializing it
/// shows every key the type has.
fn full_record(pid: i32) -> ProcRecord {
    let tier = TierStats {
        usage: uswap::backend::Usage {
            stored_pages: 8,
            used_bytes: 8192,
            limit_bytes: 1 << 30,
            sharers: 2,
            ..Default::default()
        },
        failures: TierFailures { nospace: 1, errno: libc::ENOSPC, ..Default::default() },
    };
    let engine = StoreStats {
        engine: "uswap".into(),
        group: Some(uswap::GroupUsage { pool_max: 8 << 20, ..Default::default() }),
        tiers: vec![tier, tier],
        ..Default::default()
    };
    ProcRecord {
        pid,
        pager: Some(PagerStats {
            limit_bytes: 64 << 20,
            limit_in_force_bytes: 64 << 20,
            fault_p50_ns: Some(1000),
            fault_p99_ns: Some(9000),
            engine,
            ..Default::default()
        }),
        unmanaged: Some(UnmanagedMem::default()),
        thrash: Some(Thrash::default()),
        tree: Some(uswap_pager::tree::TreeShare::default()),
        said: Some(Said::default()),
        ..Default::default()
    }
}

/// The keys of `v` by section: `("", [pid, ...])`, `("pager", [...])`, `("pager.engine.tiers[]",
/// [...])`. Arrays of numbers (per-order counters) are leaves.
fn sections(v: &Value, at: &str, out: &mut Vec<(String, Vec<String>)>) {
    match v {
        Value::Object(m) => {
            out.push((at.to_string(), m.keys().cloned().collect()));
            for (k, c) in m {
                let sub = if at.is_empty() { k.clone() } else { format!("{at}.{k}") };
                sections(c, &sub, out);
            }
        }
        Value::Array(a) => {
            if let Some(first) = a.first().filter(|f| f.is_object()) {
                sections(first, &format!("{at}[]"), out);
            }
        }
        _ => {}
    }
}

/// The generated list of the record's keys, as it stands in `docs/stats.md`.
fn record_keys_text() -> String {
    let v = serde_json::to_value(full_record(1)).expect("a record serializes");
    let mut secs = Vec::new();
    sections(&v, "", &mut secs);
    let mut text = format!("{BEGIN}\n\n| section | keys |\n|---|---|\n");
    for (at, keys) in secs {
        let name = if at.is_empty() { "(top level)".to_string() } else { format!("`{at}`") };
        let keys: Vec<String> = keys.iter().map(|k| format!("`{k}`")).collect();
        text += &format!("| {name} | {} |\n", keys.join(", "));
    }
    text + "\n" + END
}

#[test]
fn the_record_keys_in_docs_stats_md_are_the_record_types_keys() {
    let path = doc_path();
    let doc = std::fs::read_to_string(&path).expect("docs/stats.md");
    let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("docs/stats.md has no generated record-key list (markers {BEGIN:?} ... {END:?})")
    };
    let want = record_keys_text();
    let have = &doc[b..e + END.len()];
    if have != want {
        if std::env::var_os("USWAP_BLESS").is_some() {
            std::fs::write(&path, format!("{}{want}{}", &doc[..b], &doc[e + END.len()..])).expect("rewrite");
            return;
        }
        panic!("docs/stats.md's record keys differ from ProcRecord's (USWAP_BLESS=1 rewrites them):\n{want}");
    }
}

/// Every word that stands in backquotes in `doc`, split at dots, commas and spaces.
fn documented_words(doc: &str) -> BTreeSet<String> {
    let mut words = BTreeSet::new();
    for (i, span) in doc.split('`').enumerate() {
        if i % 2 == 1 {
            words.extend(span.split(['.', ',', ' ', '[', ']']).filter(|w| !w.is_empty()).map(str::to_string));
        }
    }
    words
}

/// Keys of the printed schema whose names are data (tier names, folio sizes, a process's
/// tiers in `pool_parts`), not schema.
fn is_data_key(parent: &str, key: &str) -> bool {
    parent.ends_with(".tiers") || parent == "tiers" || parent.ends_with("pool_parts") || key.ends_with("kB")
}

#[test]
fn every_key_of_the_printed_schema_is_in_docs_stats_md() {
    let doc = std::fs::read_to_string(doc_path()).expect("docs/stats.md");
    // The record's generated list names input keys: it documents none of the printed ones.
    let (b, e) = (doc.find(BEGIN).unwrap_or(0), doc.find(END).unwrap_or(0));
    let words = documented_words(&format!("{}{}", &doc[..b], &doc[e..]));
    let cmd = vec!["prog".to_string()];
    let unmanaged = [Unmanaged {
        pid: 3,
        command: "static-tool".into(),
        reason: Reason::Static,
        peak_anon_bytes: 1,
        anon_bytes: 1,
        running: false,
    }];
    let run = Run {
        command: &cmd,
        pid: 1,
        exit_code: 0,
        signal: None,
        elapsed_s: 1.0,
        cpu_s: (0.5, 0.5),
        limit: 64 << 20,
        folio: 65536,
        tiers: "zero,lz4,file:/var/tmp",
        peak_rss: 1,
        tree_peak: TreePeak::default(),
        unmanaged: &unmanaged,
        shmem_peak: 0,
    };
    let mut dormant = full_record(2);
    dormant.dormant = true;
    let doc_v = run_report(&run, &[full_record(1), dormant]);
    let mut secs = Vec::new();
    sections(&doc_v, "", &mut secs);
    let missing: Vec<String> = secs
        .iter()
        .flat_map(|(at, keys)| keys.iter().map(move |k| (at, k)))
        .filter(|(at, k)| !is_data_key(at, k) && !words.contains(k.as_str()))
        .map(|(at, k)| if at.is_empty() { k.clone() } else { format!("{at}.{k}") })
        .collect();
    assert!(missing.is_empty(), "keys `uswap run --stats` prints that docs/stats.md does not name: {missing:?}");
}
