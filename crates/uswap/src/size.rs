//! Byte sizes, read and printed the same way by every command and by the preload library.
//!
//! Accepted (case-insensitive, spaces around the number and unit allowed):
//!
//! | input | meaning |
//! |---|---|
//! | `4096`, `4096B` | bytes |
//! | `64K`, `256M`, `2G`, `1T` | 1024-based, as systemd's `MemoryMax=` and the kernel's `memparse` |
//! | `64KiB`, `256MiB`, `2GiB`, `1TiB` | the same, spelled as IEC units |
//! | `64kB`, `256MB`, `2GB`, `1TB` | 1000-based (SI), as GNU `dd` and disk vendors: `1MB` = 10^6 |
//! | `1.5G`, `0.5GiB` | decimals (rounded down to whole bytes) |
//! | `50%` | (only where a total applies, e.g. `--limit`) a share of physical memory |
//!
//! Zero, negative numbers, unknown units and overflow are errors whose message names the
//! input. [`format()`] prints every size the same way: `4.0 KiB`, `12.3 MiB`, `1.50 GiB`.
//!
//! Locking: none (pure functions; [`parse_limit`] reads `/proc/meminfo` once per call).

use std::fmt;

/// Why a size did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeError {
    /// The input, as given.
    pub input: String,
    /// What is wrong with it.
    pub why: String,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad size '{}': {}", self.input, self.why)
    }
}

impl std::error::Error for SizeError {}

/// The units, for messages and help texts.
pub(crate) const UNITS_HELP: &str =
    "a number with an optional unit: K, M, G, T or KiB, MiB, GiB, TiB (1024-based), kB, MB, GB, TB (1000-based); \
     decimals such as 1.5G are allowed";

fn err(input: &str, why: impl Into<String>) -> SizeError {
    SizeError { input: input.to_string(), why: why.into() }
}

fn unit(u: &str) -> Option<u64> {
    Some(match u.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    })
}

/// `int.frac * mul`, rounded down; `None` on overflow.
fn scale(input: &str, int: &str, frac: &str, mul: u64) -> Result<u64, SizeError> {
    let overflow = || err(input, "too large (over 16 EiB)");
    let i: u64 = if int.is_empty() { 0 } else { int.parse().map_err(|_| overflow())? };
    let whole = i.checked_mul(mul).ok_or_else(overflow)?;
    // At most 12 fractional digits matter for a multiplier up to 2^40.
    let frac = &frac[..frac.len().min(12)];
    let f: u128 = if frac.is_empty() { 0 } else { frac.parse().map_err(|_| overflow())? };
    let part = f * u128::from(mul) / 10u128.pow(frac.len() as u32);
    whole.checked_add(part as u64).ok_or_else(overflow)
}

/// Split `s` into (integer digits, fraction digits, unit), or say why it is not a number.
fn split(s: &str) -> Result<(&str, &str, &str), SizeError> {
    let t = s.trim();
    if t.is_empty() {
        return Err(err(s, format!("empty (expected {UNITS_HELP})")));
    }
    if t.starts_with('-') {
        return Err(err(s, "negative"));
    }
    let t = t.strip_prefix('+').unwrap_or(t);
    let int_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (int, rest) = t.split_at(int_end);
    let (frac, rest) = match rest.strip_prefix('.') {
        Some(r) => {
            let e = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
            r.split_at(e)
        }
        None => ("", rest),
    };
    if int.is_empty() && frac.is_empty() {
        return Err(err(s, format!("does not start with a number (expected {UNITS_HELP})")));
    }
    Ok((int, frac, rest.trim()))
}

/// Parse a size in bytes. Zero is an error: no size the commands take can be zero.
pub fn parse(s: &str) -> Result<u64, SizeError> {
    let (int, frac, u) = split(s)?;
    if u.ends_with('%') {
        return Err(err(s, "a percentage is not accepted here (only for --limit)"));
    }
    let mul = unit(u).ok_or_else(|| err(s, format!("unknown unit '{u}' (expected {UNITS_HELP})")))?;
    let v = scale(s, int, frac, mul)?;
    if v == 0 {
        return Err(err(s, "must be greater than zero"));
    }
    Ok(v)
}

/// Parse a size, or `N%` (decimals allowed, 0 < N <= 100) of `total()` bytes.
pub(crate) fn parse_share(s: &str, total: impl FnOnce() -> Result<u64, String>) -> Result<u64, SizeError> {
    let (int, frac, u) = split(s)?;
    if u != "%" {
        return parse(s);
    }
    // Hundredths of a percent.
    let bp = scale(s, int, frac, 100)?;
    if bp == 0 || bp > 100 * 100 {
        return Err(err(s, "a percentage must be above 0% and at most 100%"));
    }
    let total = total().map_err(|e| err(s, e))?;
    let v = (u128::from(total) * u128::from(bp) / 10_000) as u64;
    if v == 0 {
        return Err(err(s, "is zero bytes"));
    }
    Ok(v)
}

/// Physical memory in bytes (`MemTotal` of /proc/meminfo).
pub fn mem_total() -> Result<u64, String> {
    let s = std::fs::read_to_string("/proc/meminfo").map_err(|e| format!("cannot read /proc/meminfo: {e}"))?;
    s.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| "no MemTotal in /proc/meminfo".to_string())
}

/// Parse a memory limit: a size, or `N%` of physical memory (as systemd's `MemoryMax=`).
pub fn parse_limit(s: &str) -> Result<u64, SizeError> {
    parse_share(s, mem_total)
}

/// Print a size for people: bytes below 1 KiB, else 1024-based units with three significant
/// digits (`4.0 KiB`, `12.3 MiB`, `256 MiB`, `1.50 GiB`).
pub fn format(b: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    // Rounding may carry into the next unit (1023.96 KiB prints as 1024 KiB, which is fine).
    if v >= 100.0 {
        format!("{v:.0} {}", UNITS[i])
    } else if v >= 10.0 {
        format!("{v:.1} {}", UNITS[i])
    } else {
        format!("{v:.2} {}", UNITS[i])
    }
}

/// Print a size as the shortest exact input [`parse`] reads back (`64K`, `1G`, `4097`): for
/// commands that echo a configuration.
pub fn format_exact(b: u64) -> String {
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
    use proptest::prelude::*;

    #[test]
    fn units() {
        for (s, v) in [
            ("4096", 4096u64),
            ("12b", 12),
            ("64K", 64 << 10),
            ("64k", 64 << 10),
            ("64KiB", 64 << 10),
            ("64kB", 64_000),
            ("256M", 256 << 20),
            ("256MiB", 256 << 20),
            ("256mib", 256 << 20),
            ("256MB", 256_000_000),
            ("1G", 1 << 30),
            (" 2 GiB ", 2 << 30),
            ("2GB", 2_000_000_000),
            ("3T", 3 << 40),
            ("1TB", 1_000_000_000_000),
            ("1.5G", 3 << 29),
            ("0.5K", 512),
            (".5M", 512 << 10),
            ("1.", 1),
            ("+7M", 7 << 20),
            ("1.0000000000000000001G", 1 << 30),
        ] {
            assert_eq!(parse(s), Ok(v), "{s:?}");
        }
    }

    #[test]
    fn bad_sizes_say_why() {
        for (s, why) in [
            ("", "empty"),
            ("  ", "empty"),
            ("G", "does not start with a number"),
            ("-1G", "negative"),
            ("1.5X", "unknown unit 'X'"),
            ("12Q", "unknown unit"),
            ("1 2", "unknown unit"),
            ("1..5G", "unknown unit"),
            ("0", "greater than zero"),
            ("0M", "greater than zero"),
            ("0.0001K", "greater than zero"),
            ("99999999999999999999", "too large"),
            ("20000000T", "too large"),
            ("50%", "percentage is not accepted"),
            ("lots", "does not start with a number"),
        ] {
            let e = parse(s).expect_err(s);
            assert!(e.to_string().contains(why), "{s:?}: {e}");
            assert!(e.to_string().contains(&format!("'{s}'")), "{s:?}: {e}");
        }
    }

    #[test]
    fn shares_of_memory() {
        let total = || Ok(8u64 << 30);
        assert_eq!(parse_share("50%", total), Ok(4 << 30));
        assert_eq!(parse_share("12.5%", total), Ok(1 << 30));
        assert_eq!(parse_share("100%", total), Ok(8 << 30));
        assert_eq!(parse_share("1G", total), Ok(1 << 30));
        for s in ["0%", "101%", "-5%", "%", "0.001%"] {
            assert!(parse_share(s, total).is_err(), "{s}");
        }
        assert!(parse_share("5%", || Err("no meminfo".into())).unwrap_err().to_string().contains("no meminfo"));
        let ram = mem_total().unwrap();
        assert_eq!(parse_limit("100%"), Ok(ram));
    }

    #[test]
    fn formats() {
        assert_eq!(format(0), "0 B");
        assert_eq!(format(1023), "1023 B");
        assert_eq!(format(4096), "4.00 KiB");
        assert_eq!(format(12_900_000), "12.3 MiB");
        assert_eq!(format(256 << 20), "256 MiB");
        assert_eq!(format(3 << 29), "1.50 GiB");
        assert_eq!(format(u64::MAX), "16.0 EiB");
        assert_eq!(format_exact(1 << 30), "1G");
        assert_eq!(format_exact(64 << 10), "64K");
        assert_eq!(format_exact(4097), "4097");
    }

    proptest! {
        #[test]
        fn exact_round_trip(b in 1u64..u64::MAX) {
            prop_assert_eq!(parse(&format_exact(b)), Ok(b));
        }

        #[test]
        fn binary_units_scale(n in 1u64..1_000_000, u in 0usize..4) {
            let (sfx, shift) = [("K", 10), ("MiB", 20), ("g", 30), ("TiB", 40)][u];
            prop_assert_eq!(parse(&format!("{n}{sfx}")), Ok(n << shift));
        }

        #[test]
        fn decimals_round_down(a in 0u64..100_000_000) {
            let s = format!("{}.{:04}M", a / 10_000, a % 10_000);
            let want = a * (1 << 20) / 10_000;
            match parse(&s) {
                Ok(v) => prop_assert_eq!(v, want),
                Err(e) => prop_assert!(want == 0 && e.why.contains("zero"), "{}: {}", s, e),
            }
        }

        #[test]
        fn printed_sizes_parse_back_close(b in 1024u64..(1u64 << 50)) {
            let s = format(b).replace(' ', "");
            let v = parse(&s).unwrap();
            prop_assert!(v.abs_diff(b) <= b / 100 + 1, "{} -> {} -> {}", b, s, v);
        }

        #[test]
        fn never_panics(s in "\\PC{0,12}") {
            let _ = parse(&s);
            let _ = parse_share(&s, || Ok(1 << 30));
        }
    }
}
