//! The view in the Prometheus text format ([`prometheus`](fn@prometheus)): what `uswap run --metrics-file`
//! writes for node_exporter's textfile collector, one family per figure, labelled by tree and
//! process.
//!
//! Locking: none. Each call builds and encodes a registry of its own.

use serde_json::Value;

/// The view in the Prometheus text exposition format, version 0.0.4 (what node_exporter's
/// textfile collector reads; not OpenMetrics: no `# EOF`, and a counter's `# HELP` and
/// `# TYPE` name its samples' name, `_total` included): per process of each tree (ended ones
/// with their last figures), labelled `runner` (the `uswap run` pid), `pid` and `comm`.
pub(crate) fn prometheus(doc: &Value) -> String {
    use prometheus::{Encoder, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};
    const TREE: &[&str] = &["runner"];
    const PROCESS: &[&str] = &["runner", "pid", "comm"];
    // Registering fails only for a name or label that is not valid or taken twice: fixed here.
    const FIXED: &str = "the metric names and labels are fixed and valid";
    let reg = Registry::new_custom(Some("uswap".into()), None).expect(FIXED);
    let gauge = |name: &str, help: &str, labels: &[&str]| {
        let f = IntGaugeVec::new(Opts::new(name, help), labels).expect(FIXED);
        reg.register(Box::new(f.clone())).expect(FIXED);
        f
    };
    // Counters are named with `_total`, as the format asks.
    let counter = |name: &str, help: &str| {
        let f = IntCounterVec::new(Opts::new(format!("{name}_total"), help), PROCESS).expect(FIXED);
        reg.register(Box::new(f.clone())).expect(FIXED);
        f
    };
    let limit = gauge("limit_bytes", "The --limit of the tree", TREE);
    let running = gauge("running_processes", "Processes of the tree that are running", TREE);
    let up = gauge("run_up", "1 while the tree's uswap run runs, 0 once the run is over", TREE);
    let unmanaged = gauge(
        "unmanaged_bytes",
        "Anonymous memory of the tree's processes that run without the pager (counted against the limit)",
        TREE,
    );
    let gauges = [
        ("rss_bytes", "Resident set size of the process", "rss_bytes"),
        ("charged_bytes", "Memory charged to the limit: resident + swap cache + pool", "charged_bytes"),
        ("share_bytes", "The process's share of the tree's limit (its limit in force)", "share_bytes"),
        (
            "use_rate_bytes_per_second",
            "Bytes its faults bring in per second plus its CPU fraction times its charge: over the limit, the lowest rates for their charge give memory first",
            "use_rate_bytes_per_s",
        ),
        ("resident_bytes", "Managed pages mapped in the process", "resident_bytes"),
        ("swap_cache_bytes", "Uncompressed swap cache (the inactive list)", "swap_cache_bytes"),
        ("pool_bytes", "Compressed pool memory", "pool_bytes"),
        ("pool_stored_bytes", "Bytes of pages held by the compressed pool", "pool_stored_bytes"),
        ("file_bytes", "Bytes used in the swap file tier", "file_bytes"),
    ]
    .map(|(n, help, k)| (gauge(n, help, PROCESS), k));
    let counters = [
        ("faults", "Page faults the pager resolved", "faults"),
        ("swapin_pages", "Pages swapped in (pswpin)", "swapin_pages"),
        ("swapout_pages", "Pages swapped out (pswpout)", "swapout_pages"),
        ("store_errors", "Evictions undone because the store failed (the page stayed in memory)", "store_errors"),
        ("store_rejected_pages", "Pages of evictions that no tier took (declined or failed)", "store_rejected_pages"),
        ("limit_breaks", "Faults mapped over the limit after waiting for room while the store failed", "limit_breaks"),
    ]
    .map(|(n, help, k)| (counter(n, help), k));
    for t in doc["trees"].as_array().into_iter().flatten() {
        let runner = t["runner_pid"].to_string();
        limit.with_label_values(&[&runner]).set(t["limit_bytes"].as_i64().unwrap_or(0));
        running.with_label_values(&[&runner]).set(t["running_processes"].as_i64().unwrap_or(0));
        up.with_label_values(&[&runner]).set(i64::from(t["up"] != false));
        unmanaged.with_label_values(&[&runner]).set(t["total"]["unmanaged_bytes"].as_i64().unwrap_or(0));
        // Every process, ended ones too (with their last figures): counters must not go
        // back, and the file is rewritten once more after the program ended.
        for p in t["processes"].as_array().into_iter().flatten() {
            let comm = p["argv"][0].as_str().map(|a| a.rsplit('/').next().unwrap_or(a).to_string()).unwrap_or_default();
            let l = [runner.as_str(), &p["pid"].to_string(), &comm];
            for (f, k) in &gauges {
                f.with_label_values(&l).set(p[*k].as_i64().unwrap_or(0));
            }
            for (f, k) in &counters {
                f.with_label_values(&l).inc_by(p[*k].as_u64().unwrap_or(0));
            }
        }
    }
    let mut out = Vec::new();
    // Writing into a Vec cannot fail, and the families are valid (registered above).
    let _ = TextEncoder::new().encode(&reg.gather(), &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::fixtures::realistic_doc;
    use crate::live::view::mark_over;
    use serde_json::json;

    /// The metrics say whether the run goes on: `uswap_run_up` is 1, and 0 once marked over.
    #[test]
    fn the_metrics_say_when_the_run_is_over() {
        let mut doc = json!({"trees": [{"runner_pid": 7, "up": true, "limit_bytes": 1, "running_processes": 0}]});
        assert!(prometheus(&doc).contains("uswap_run_up{runner=\"7\"} 1"), "{}", prometheus(&doc));
        mark_over(&mut doc);
        assert!(prometheus(&doc).contains("uswap_run_up{runner=\"7\"} 0"), "{}", prometheus(&doc));
    }

    /// The metrics file, read by a parser of the Prometheus text format: every family has the
    /// type it is declared with and the figures of the view, and the `# HELP` and `# TYPE`
    /// lines name the samples that follow them (0.0.4 has no `# EOF`, and a counter's family is
    /// named with its `_total`).
    #[test]
    fn the_metrics_file_is_prometheus_text_0_0_4_as_a_parser_reads_it() {
        use prometheus_parse::{LineInfo, SampleType, Scrape, Value as V};
        let doc = realistic_doc();
        let text = prometheus(&doc);
        // Each line as the parser's line reader sees it.
        let (mut help, mut typed, mut families) = (None::<String>, None::<(String, SampleType)>, Vec::new());
        for l in text.lines() {
            match LineInfo::parse(l) {
                LineInfo::Doc { metric_name, .. } => help = Some(metric_name.to_string()),
                LineInfo::Type { metric_name, sample_type, .. } => {
                    assert_eq!(help.as_deref(), Some(metric_name.as_str()), "TYPE without its HELP: {l}\n{text}");
                    assert!(!families.contains(&metric_name), "{metric_name} declared twice:\n{text}");
                    assert_eq!(
                        metric_name.ends_with("_total"),
                        sample_type == SampleType::Counter,
                        "0.0.4 counters are named *_total: {l}\n{text}"
                    );
                    families.push(metric_name.clone());
                    typed = Some((metric_name, sample_type));
                }
                LineInfo::Sample { metric_name, .. } => {
                    let family = typed.as_ref().map(|t| t.0.as_str());
                    assert_eq!(family, Some(metric_name), "a sample not of the family declared above it: {l}\n{text}");
                }
                LineInfo::Empty | LineInfo::Ignored => panic!("a line that is no HELP, TYPE or sample: {l:?}\n{text}"),
            }
        }
        let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("the parser reads it");
        // What every family must hold: (family, labels, value, counter?).
        /// A sample that must be there: family, labels, value, whether a counter.
        type Want<'a> = (String, Vec<(&'a str, String)>, f64, bool);
        let mut want: Vec<Want> = Vec::new();
        for t in doc["trees"].as_array().unwrap() {
            let runner = t["runner_pid"].to_string();
            for (name, v) in [
                ("limit_bytes", &t["limit_bytes"]),
                ("running_processes", &t["running_processes"]),
                ("unmanaged_bytes", &t["total"]["unmanaged_bytes"]),
            ] {
                want.push((format!("uswap_{name}"), vec![("runner", runner.clone())], v.as_f64().unwrap(), false));
            }
            let up = if t["up"] == false { 0.0 } else { 1.0 };
            want.push(("uswap_run_up".into(), vec![("runner", runner.clone())], up, false));
            for p in t["processes"].as_array().unwrap() {
                let comm = p["argv"][0].as_str().unwrap().rsplit('/').next().unwrap().to_string();
                let l = vec![("runner", runner.clone()), ("pid", p["pid"].to_string()), ("comm", comm)];
                for (name, key) in [
                    ("rss_bytes", "rss_bytes"),
                    ("charged_bytes", "charged_bytes"),
                    ("share_bytes", "share_bytes"),
                    ("use_rate_bytes_per_second", "use_rate_bytes_per_s"),
                    ("resident_bytes", "resident_bytes"),
                    ("swap_cache_bytes", "swap_cache_bytes"),
                    ("pool_bytes", "pool_bytes"),
                    ("pool_stored_bytes", "pool_stored_bytes"),
                    ("file_bytes", "file_bytes"),
                ] {
                    want.push((format!("uswap_{name}"), l.clone(), p[key].as_f64().unwrap(), false));
                }
                for name in
                    ["faults", "swapin_pages", "swapout_pages", "store_errors", "store_rejected_pages", "limit_breaks"]
                {
                    want.push((format!("uswap_{name}_total"), l.clone(), p[name].as_f64().unwrap(), true));
                }
            }
        }
        assert_eq!(scrape.samples.len(), want.len(), "{text}");
        for (name, labels, value, counter) in &want {
            let s = scrape
                .samples
                .iter()
                .find(|s| &s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(v.as_str())))
                .unwrap_or_else(|| panic!("no {name} {labels:?}:\n{text}"));
            assert_eq!(s.labels.len(), labels.len(), "{name}: {:?}", s.labels);
            match (&s.value, counter) {
                (V::Counter(v), true) | (V::Gauge(v), false) => assert_eq!(v, value, "{name} {labels:?}"),
                (v, _) => {
                    panic!("{name} {labels:?} reads as {v:?}, not a {}", if *counter { "counter" } else { "gauge" })
                }
            }
        }
        // The figures are the processes' own, not zeros: a few against the raw snapshots.
        let find = |name: &str, pid: &str| {
            scrape
                .samples
                .iter()
                .find(|s| s.metric == name && s.labels.get("pid") == Some(pid))
                .map(|s| s.value.clone())
        };
        let me = std::process::id().to_string();
        assert_eq!(find("uswap_faults_total", &me), Some(V::Counter(70_000.0)));
        assert_eq!(
            find("uswap_rss_bytes", "4000003"),
            Some(V::Gauge((80u64 << 20) as f64)),
            "ended processes keep their figures"
        );
        assert_eq!(find("uswap_file_bytes", "4100001"), Some(V::Gauge((210u64 << 20) as f64)));
        assert_eq!(find("uswap_share_bytes", &me), Some(V::Gauge((30u64 << 20) as f64)));
        assert_eq!(find("uswap_store_errors_total", "4100001"), Some(V::Counter(5663.0)));
        assert_eq!(find("uswap_limit_breaks_total", "4100001"), Some(V::Counter(40.0)));
        assert!(text.contains("uswap_limit_bytes{runner=\"4000001\"} 536870912\n"), "{text}");
    }
}
