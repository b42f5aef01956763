//! When the table of the pager's own mappings overflows, some own mapping is unrecorded and
//! could be anywhere: adoption must stop rather than risk registering the pager's own memory
//! (a program with many small mappings, as node's engine makes, can overflow the table, and
//! the pager hangs on own memory it registered). A test
//! binary of its own: it fills the process-wide table for good.
mod common;
use uswap_pager::PagerConfig;

#[test]
fn a_full_own_table_stops_adoption() {
    let Some(p) = common::pager(PagerConfig { limit_bytes: 64 << 20, folio_size: 4096, ..Default::default() }) else {
        return;
    };
    let len = 64 * 4096;
    let map = || common::anon_map(len);
    let a = map();
    assert_eq!(p.adopt(a, len).unwrap_or(0), len, "a program mapping is adopted while the table has room");
    // Fill the table with ranges nobody uses (high in the address space, page sized).
    let base = 0x7f00_0000_0000usize;
    let mut i = 0;
    while uswap_pager::own::overflowed() == 0 {
        uswap_pager::own::add(base + i * 2 * 4096, 4096);
        i += 1;
        assert!(i < 1 << 20, "the table never filled");
    }
    let b = map();
    assert_eq!(p.adopt(b, len).unwrap_or(0), 0, "with own mappings unrecorded, nothing is adopted");
}
