//! Compact figures for the table of the text view: a size, a count or a compression ratio in
//! at most four characters (`1.5G`, `12k`, `3.45`).
//!
//! Locking: none.

/// A size in at most four characters, 1024-based: `0`, `512B`, `4.0K`, `999M`, `1.5G`, `16E`.
pub(crate) fn compact_size(b: u64) -> String {
    compact(b, 1024.0, ["B", "K", "M", "G", "T", "P", "E"])
}

/// A count in at most four characters, 1000-based: `0`, `999`, `1.2k`, `45k`, `3.4M`.
pub(crate) fn compact_count(n: u64) -> String {
    compact(n, 1000.0, ["", "k", "M", "G", "T", "P", "E"])
}

/// A compression ratio in at most four characters: `3.45`, `12.3`, `123`, `9999`, `>1e4`.
pub(super) fn compact_ratio(r: f64) -> String {
    match r {
        r if r < 9.995 => format!("{r:.2}"),
        r if r < 99.95 => format!("{r:.1}"),
        r if r < 9999.5 => format!("{r:.0}"),
        _ => ">1e4".into(),
    }
}

/// `v` in the largest unit that keeps it below 1000, to two significant digits below 10
/// (`1.5G`) and whole above (`12G`, `999M`).
fn compact(v: u64, base: f64, units: [&str; 7]) -> String {
    if v == 0 {
        return "0".into();
    }
    if v < 1000 {
        return format!("{v}{}", units[0]);
    }
    let mut x = v as f64;
    let mut i = 0;
    // Rounding decides the unit: 999.6 of one is 1.0 of the next.
    while x >= 999.5 && i + 1 < units.len() {
        x /= base;
        i += 1;
    }
    if x < 9.95 {
        format!("{x:.1}{}", units[i])
    } else {
        format!("{x:.0}{}", units[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compact figures take at most four characters, whatever the value.
    #[test]
    fn compact_figures_take_four_characters_at_most() {
        for (v, s) in
            [(0, "0"), (512, "512B"), (1023, "1.0K"), (1536, "1.5K"), (999 << 20, "999M"), (1000 << 20, "1.0G")]
        {
            assert_eq!(compact_size(v), s);
        }
        assert_eq!(compact_size(u64::MAX), "16E");
        assert_eq!(
            (compact_count(999), compact_count(1_234), compact_count(45_678)),
            ("999".into(), "1.2k".into(), "46k".into())
        );
        for shift in 0..64 {
            for v in
                [(1u64 << shift) - 1, 1 << shift, (1 << shift) + (1 << shift) / 2, (1u64 << shift).saturating_mul(999)]
            {
                for f in [compact_size(v), compact_count(v), compact_count(v.saturating_mul(1000) / 1024)] {
                    assert!(f.chars().count() <= 4, "{v}: {f}");
                }
            }
        }
        for r in [1.0, 9.999, 12.34, 99.96, 1234.4, 9999.6, 1e9] {
            assert!(compact_ratio(r).chars().count() <= 4, "{r}: {}", compact_ratio(r));
        }
    }
}
