//! The view as text, what `uswap status` prints and `uswap top` redraws ([`render`]): per tree
//! a heading, its tiers, any failing store, a table of its processes (a fixed column per
//! figure, the command in what is left of the line) with a totals row, and its processes that
//! run without the pager; every line fits the terminal's width.
//!
//! Locking: none (it works on its caller's document).

use super::compact::{compact_count, compact_ratio, compact_size};
use super::sample::running;
use serde_json::{json, Value};

/// A command line on one line: control characters (a `python3 -c` script's newlines) as
/// spaces, at most `max` characters.
fn one_line(argv: &Value, max: usize) -> String {
    let words: Vec<&str> = argv.as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let mut line: String = words.join(" ").chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if line.chars().count() > max {
        line = line.chars().take(max).collect();
        line.push('…');
    }
    line
}

/// The view as text, every line at most `width` columns (80 on anything but a terminal): per
/// tree a line naming it, a line of its tiers, a header naming the columns, its running
/// processes (`all`: ended ones too; else they are counted), a row of the tree's totals, then
/// its processes that run without the pager. Figures are compact (`1.5G`, `999M`, `12k`: see
/// `compact_size`); the command is cut to the room left. `--json` has every figure in full.
pub fn render(doc: &Value, all: bool, width: usize) -> String {
    let width = width.max(MIN_WIDTH);
    let size = |v: &Value| compact_size(v.as_u64().unwrap_or(0));
    let rate = |v: &Value| v.as_f64().map_or("-".into(), |x| compact_size(x as u64));
    let mut s = String::new();
    let mut line = |text: &str| {
        s.push_str(&fit(text, width));
        s.push('\n');
    };
    let trees = doc["trees"].as_array().cloned().unwrap_or_default();
    if trees.is_empty() {
        line("no uswap run is running (for this user)");
        return s;
    }
    for t in trees {
        let tot = &t["total"];
        let head = format!(
            "uswap run {}, {} s, limit {}, {} running: ",
            t["runner_pid"],
            t["elapsed_s"],
            compact_size(t["limit_bytes"].as_u64().unwrap_or(0)),
            t["running_processes"],
        );
        line(&format!("{head}{}", one_line(&t["command"], width.saturating_sub(head.chars().count() + 1))));
        if t["up"] == false {
            line(&format!(
                "  stale: its runner died without ending the run{}",
                if t["running_processes"] == 0 { "; nothing of it runs (its directory is removed now)" } else { "" }
            ));
        }
        line(&format!("  tiers {}", t["tiers"].as_str().unwrap_or("")));
        let (errors, breaks) = (tot["store_errors"].as_u64().unwrap_or(0), tot["limit_breaks"].as_u64().unwrap_or(0));
        if errors > 0 || breaks > 0 {
            let mut places: Vec<String> = procs_failures(&t);
            places.dedup();
            line(&format!(
                "  store failing: {} failed store(s){}{}",
                compact_count(errors),
                if places.is_empty() { String::new() } else { format!(" ({})", places.join("; ")) },
                if breaks > 0 {
                    format!("; limit broken by {} fault(s)", compact_count(breaks))
                } else {
                    String::new()
                }
            ));
        }
        line(&table_row(TABLE_HEADER.map(String::from), "COMMAND", width));
        let procs = t["processes"].as_array().cloned().unwrap_or_default();
        let ended = procs.iter().filter(|p| !running(p)).count();
        for p in procs.iter().filter(|p| all || running(p)) {
            let state = if running(p) {
                ""
            } else if p["final"].as_bool() == Some(true) {
                " (exited)"
            } else {
                // Without exit(3) (`_exit`, a signal): its figures are its last snapshot's.
                " (ended)"
            };
            let cells = [
                p["pid"].to_string(),
                size(&p["rss_bytes"]),
                size(&p["share_bytes"]),
                size(&p["resident_bytes"]),
                size(&p["swap_cache_bytes"]),
                size(&p["pool_bytes"]),
                p["compression_ratio"].as_f64().map_or("-".into(), compact_ratio),
                size(&p["file_bytes"]),
                p["faults_per_s"].as_f64().map_or("-".into(), |r| compact_count(r as u64)),
                rate(&p["swapin_bytes_per_s"]),
                rate(&p["swapout_bytes_per_s"]),
            ];
            // The program by its name, as top(1) shows it (the tree's line has it as typed).
            let mut argv = p["argv"].clone();
            if let Some(a0) = argv.get_mut(0) {
                *a0 = json!(a0.as_str().map_or("", |a| a.rsplit('/').next().unwrap_or(a)));
            }
            // What is left of the line after the figures, the state kept whole.
            let room = width.saturating_sub(TABLE_FIGURES + state.chars().count() + 1);
            line(&table_row(cells, &format!("{}{state}", one_line(&argv, room)), width));
        }
        let (stored, used) =
            (tot["pool_stored_bytes"].as_u64().unwrap_or(0), tot["pool_used_bytes"].as_u64().unwrap_or(0));
        let total = [
            "total".to_string(),
            size(&tot["rss_bytes"]),
            size(&t["limit_bytes"]),
            size(&tot["resident_bytes"]),
            size(&tot["swap_cache_bytes"]),
            size(&tot["pool_bytes"]),
            if stored > 0 && used > 0 { compact_ratio(stored as f64 / used as f64) } else { "-".into() },
            size(&tot["file_bytes"]),
            compact_count(tot["faults_per_s"].as_f64().unwrap_or(0.0) as u64),
            rate(&tot["swapin_bytes_per_s"]),
            rate(&tot["swapout_bytes_per_s"]),
        ];
        line(table_row(total, "", width).trim_end());
        if ended > 0 && !all {
            line(&format!("  and {ended} process(es) of the tree that ended (--all shows them)"));
        }
        for p in t["unmanaged_processes"].as_array().into_iter().flatten().filter(|p| all || running(p)) {
            line(&format!(
                "{:>7} {:>4} without the pager ({}{}), counted against the limit: {}",
                p["pid"].to_string(),
                size(&p["anon_bytes"]),
                p["reason"].as_str().unwrap_or(""),
                if running(p) { "" } else { "; ended" },
                p["command"].as_str().unwrap_or("")
            ));
        }
    }
    s
}

/// The tiers that failed in a tree's processes, as [`crate::report::store_failures`] names them
/// (the first of each tier).
fn procs_failures(t: &Value) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for f in t["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["store_failures"].as_array().cloned().unwrap_or_default())
    {
        let f = f.as_str().unwrap_or("").to_string();
        let tier = f.split(": ").next().unwrap_or("").to_string();
        if !seen.iter().any(|s| s.starts_with(&format!("{tier}: "))) {
            seen.push(f);
        }
    }
    seen
}

/// The narrowest view [`render`] draws: every figure and a few characters of the command.
const MIN_WIDTH: usize = 80;

/// The columns of a tree's process table before the command (see [`table_row`]): the pid, the
/// RSS, its share of the tree's limit (the limit in the totals row), resident managed pages,
/// swap cache, compressed pool (and the compression ratio of what it holds), swap file,
/// faults, swap-in and swap-out per second.
const TABLE_HEADER: [&str; 11] =
    ["PID", "RSS", "SHARE", "RES", "CACHE", "POOL", "RATIO", "FILE", "FLT/S", "IN/S", "OUT/S"];

/// The widths of [`TABLE_HEADER`]'s columns: each holds its name and any figure of
/// [`compact_size`], [`compact_count`] or [`compact_ratio`] (four characters), a pid up to
/// the kernel's largest (4194304).
const TABLE_WIDTHS: [usize; 11] = [7, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5];

/// The characters of a table row before the command: the columns, a space after each.
const TABLE_FIGURES: usize = {
    let mut n = 0;
    let mut i = 0;
    while i < TABLE_WIDTHS.len() {
        n += TABLE_WIDTHS[i] + 1;
        i += 1;
    }
    n
};

/// One line of a tree's process table: the figures right-aligned in [`TABLE_WIDTHS`], then
/// the command, the whole at most `width` columns.
fn table_row(c: [String; 11], command: &str, width: usize) -> String {
    let mut s = String::new();
    for (cell, w) in c.iter().zip(TABLE_WIDTHS) {
        s.push_str(&format!("{cell:>w$} "));
    }
    s.push_str(command);
    fit(&s, width)
}

/// `text` cut to `width` characters, the last one `…` when it was longer.
fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut s: String = text.chars().take(width.saturating_sub(1)).collect();
    s.push('…');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::fixtures::realistic_doc;

    /// A store that fails is said in the view, with its tier and error, and counted.
    #[test]
    fn a_failing_store_is_shown_with_its_tier_and_error() {
        let doc = realistic_doc();
        let text = render(&doc, true, 80);
        let l = text.lines().find(|l| l.contains("store failing")).unwrap_or_else(|| panic!("{text}"));
        assert!(l.contains("5.7k failed store(s)") && l.contains("file:/var/tmp: 5663"), "{l}");
        assert_eq!(doc["trees"][1]["total"]["limit_breaks"], 40);
        assert_eq!(doc["trees"][1]["processes"][0]["store_rejected_pages"], 1200);
        assert_eq!(text.matches("store failing").count(), 1, "only the tree that failed:\n{text}");
    }

    /// `uswap status` and `uswap top` on an 80-column terminal: every line fits, with figures
    /// as large as they get and commands and tiers longer than any line; the table has a
    /// header naming its columns, a row per process with every figure, and a totals row.
    #[test]
    fn the_text_view_fits_80_columns_with_a_header_and_totals() {
        let mut doc = realistic_doc();
        let long = "x".repeat(300);
        let t = &mut doc["trees"][0];
        t["command"] = json!(["python3", "-c", format!("import os\n{long}")]);
        t["tiers"] = json!(format!("{}/{long}", uswap_pager::launch::DEFAULT_TIERS));
        t["runner_pid"] = json!(4_194_304);
        t["limit_bytes"] = json!(u64::MAX);
        for p in t["processes"].as_array_mut().unwrap() {
            for k in ["rss_bytes", "share_bytes", "resident_bytes", "swap_cache_bytes", "pool_bytes", "file_bytes"] {
                p[k] = json!(u64::MAX);
            }
            p["pid"] = json!(4_194_304);
            p["compression_ratio"] = json!(12345.678);
            p["faults_per_s"] = json!(1e15);
            p["swapin_bytes_per_s"] = json!(1.8e19);
            p["swapout_bytes_per_s"] = json!(999.6 * 1024f64.powi(5));
            p["argv"] = json!(["/usr/lib/jvm/bin/java", long.clone()]);
        }
        for k in ["rss_bytes", "resident_bytes", "swap_cache_bytes", "pool_bytes", "file_bytes", "pool_stored_bytes"] {
            t["total"][k] = json!(u64::MAX);
        }
        t["total"]["pool_used_bytes"] = json!(1);
        t["total"]["faults_per_s"] = json!(123_456.0);
        t["unmanaged_processes"][0]["command"] = json!(long);
        let text = render(&doc, true, 80);
        for l in text.lines() {
            assert!(l.chars().count() <= 80, "{} columns: {l}\n{text}", l.chars().count());
        }
        let header: Vec<&str> = text.lines().filter(|l| l.split_whitespace().next() == Some("PID")).collect();
        assert_eq!(header.len(), 2, "one header per tree:\n{text}");
        let mut names = TABLE_HEADER.to_vec();
        names.push("COMMAND");
        assert_eq!(header[0].split_whitespace().collect::<Vec<_>>(), names);
        let rows: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("4194304 ")).collect();
        assert_eq!(rows.len(), 2, "the running and the exited process (--all):\n{text}");
        for r in &rows {
            let cells: Vec<&str> = r.split_whitespace().take(11).collect();
            assert_eq!(
                cells,
                ["4194304", "16E", "16E", "16E", "16E", "16E", ">1e4", "16E", "1.0P", "16E", "1.0E"],
                "{r}"
            );
            // The command starts after the figures, by the program's name, cut with `…`.
            assert!(r.chars().skip(TABLE_FIGURES).collect::<String>().starts_with("java xx"), "{r}");
            assert!(r.contains('…'), "{r}");
        }
        assert!(rows[1].ends_with(" (exited)"), "the state is kept whole: {}", rows[1]);
        let total = text.lines().find(|l| l.trim_start().starts_with("total ")).expect("a totals row");
        let cells: Vec<&str> = total.split_whitespace().collect();
        assert_eq!(cells[..9], ["total", "16E", "16E", "16E", "16E", "16E", ">1e4", "16E", "123k"], "{total}");
        assert!(text.starts_with("uswap run 4194304, ") && text.lines().next().unwrap().ends_with('…'), "{text}");
        assert!(text.contains("without the pager (statically linked)"), "{text}");
        // A wider terminal shows more of the command.
        assert!(render(&doc, true, 160).lines().any(|l| l.chars().count() > 80));
    }
}
