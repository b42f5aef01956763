//! The `uswap` command (being written).
fn main() {}
