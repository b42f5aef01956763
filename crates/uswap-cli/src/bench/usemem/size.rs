//! Byte sizes on the command line: `4096`, `64K`, `256M`, `1G`, `2T` (binary units; `KiB`,
//! `MB`, `m` and friends are accepted too). No locking: pure functions.

/// Parse a size such as `1G`, `256M`, `64K` or `4096` into bytes (binary units: K = 1024).
///
/// Returns a message naming the problem for empty input, a bad number, an unknown suffix,
/// zero, or overflow. Used as a clap `value_parser`, so a bad size exits with code 2.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty size (expected e.g. 1G, 256M, 64K or 4096)".into());
    }
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    if num.is_empty() {
        return Err(format!("size {s:?} does not start with a number (expected e.g. 1G, 256M, 64K or 4096)"));
    }
    let n: u64 = num.parse().map_err(|_| format!("size {s:?}: number too large"))?;
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => {
            return Err(format!("size {s:?}: unknown unit {other:?} (use K, M, G or T; binary units)"));
        }
    };
    let bytes = n.checked_mul(1u64 << shift).ok_or_else(|| format!("size {s:?} overflows 64 bits"))?;
    if bytes == 0 {
        return Err(format!("size {s:?} must be greater than zero"));
    }
    Ok(bytes)
}

/// Format a byte count the way `parse_size` reads it back when it is a whole unit
/// (`1G`, `256M`, `64K`), else as plain bytes.
pub fn fmt_size(b: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{}{unit}", b >> shift);
        }
    }
    format!("{b}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size(" 2 GB "), Ok(2 << 30));
        assert_eq!(parse_size("3T"), Ok(3 << 40));
        assert_eq!(parse_size("12b"), Ok(12));
    }

    #[test]
    fn rejects_bad_sizes_with_a_reason() {
        for (bad, why) in [
            ("", "empty"),
            ("G", "does not start with a number"),
            ("-1G", "does not start with a number"),
            ("1.5G", "unknown unit"),
            ("12Q", "unknown unit"),
            ("0", "greater than zero"),
            ("0M", "greater than zero"),
            ("99999999999999999999", "too large"),
            ("20000000T", "overflows"),
        ] {
            let e = parse_size(bad).expect_err(bad);
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn formats_round_trip() {
        for b in [4096u64, 64 << 10, 256 << 20, 1 << 30, 3 << 40, 12345] {
            assert_eq!(parse_size(&fmt_size(b)), Ok(b));
        }
        assert_eq!(fmt_size(1 << 30), "1G");
        assert_eq!(fmt_size(64 << 10), "64K");
    }
}
