//! Byte sizes on the command line, for clap: thin wrappers over [`uswap::size`], the one parser
//! and printer every command uses (`1.5G`, `256MiB`, `64kB`, `50%` for limits). No locking.

/// Parse a size such as `1G`, `1.5G`, `256MiB` or `4096` (clap `value_parser`: a bad size
/// exits with code 2 and the reason).
pub fn parse_size(s: &str) -> Result<u64, String> {
    uswap::size::parse(s).map_err(|e| e.to_string())
}

/// Parse a memory limit: a size, or `N%` of physical memory.
pub fn parse_limit(s: &str) -> Result<u64, String> {
    uswap::size::parse_limit(s).map_err(|e| e.to_string())
}

/// A size as the shortest exact input [`parse_size`] reads back (`1G`, `64K`, `4097`).
pub fn fmt_size(b: u64) -> String {
    uswap::size::format_exact(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_grammar() {
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert!(parse_size("0").unwrap_err().contains("greater than zero"));
        assert!(parse_size("1.5X").unwrap_err().contains("unknown unit 'X'"));
        assert!(parse_limit("50%").is_ok());
        assert_eq!(fmt_size(1 << 30), "1G");
    }
}
