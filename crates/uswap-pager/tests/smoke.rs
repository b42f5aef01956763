//! Basic paging at each folio size: write 4x the limit, read it back, check the limit held.
mod common;
use uswap_pager::PagerConfig;

fn roundtrip(folio: usize, size: usize, limit: u64) {
    let Some(p) = common::pager(PagerConfig { limit_bytes: limit, folio_size: folio, ..Default::default() }) else {
        return;
    };
    let mut r = p.map(size).unwrap();
    for (pg, page) in r.as_mut_slice().chunks_mut(4096).enumerate() {
        common::fill_page(page, 1, pg, false);
    }
    let st = p.stats();
    assert!(st.charged_bytes <= st.limit_bytes + folio as u64, "{st:?}");
    assert!(st.evicted_pages > 0, "{st:?}");
    for (pg, page) in r.as_slice().chunks(4096).enumerate() {
        assert_eq!(common::check_page(page, 1, pg, false), None, "page {pg}");
    }
    let st = p.stats();
    assert!(st.fault_swapin > 0, "{st:?}");
    assert!(st.swpout[folio.trailing_zeros() as usize - 12] > 0, "{st:?}");
}

#[test]
fn roundtrip_4k() {
    roundtrip(4096, 16 << 20, 4 << 20);
}
#[test]
fn roundtrip_64k() {
    roundtrip(65536, 32 << 20, 8 << 20);
}
#[test]
fn roundtrip_2m() {
    roundtrip(2 << 20, 64 << 20, 16 << 20);
}

#[test]
fn bad_config_is_an_error_not_a_panic() {
    for cfg in [
        PagerConfig { folio_size: 8192, ..Default::default() },
        PagerConfig { limit_bytes: 4096, ..Default::default() },
        PagerConfig { tiers: "zero,nosuch".into(), ..Default::default() },
    ] {
        match uswap_pager::Pager::new(cfg) {
            Err(uswap_pager::PagerError::Config(m)) => assert!(!m.is_empty()),
            Err(uswap_pager::PagerError::Unavailable(w)) => common::skip_without_uffd(&w),
            Err(e) => panic!("wrong error {e}"),
            Ok(_) => panic!("accepted a bad configuration"),
        }
    }
}

#[test]
fn unavailable_message_names_the_ways_to_permit_it() {
    let m = uswap_pager::uffd::PERMIT_HINT;
    for w in ["root", "CAP_SYS_PTRACE", "vm.unprivileged_userfaultfd=1", "/dev/userfaultfd"] {
        assert!(m.contains(w), "{m}");
    }
}

#[test]
fn discard_and_drop_free_swap_entries() {
    let Some(p) = common::pager(PagerConfig { limit_bytes: 4 << 20, folio_size: 65536, ..Default::default() }) else {
        return;
    };
    {
        let mut r = p.map(16 << 20).unwrap();
        for (pg, page) in r.as_mut_slice().chunks_mut(4096).enumerate() {
            common::fill_page(page, 2, pg, false);
        }
        r.evict_all();
        let s = r.page_states();
        assert_eq!(s[1] + s[2] + s[3], 0, "all swapped: {s:?}");
        r.discard(0, 8 << 20);
        let s = r.page_states();
        assert_eq!(s[0], 2048, "{s:?}");
        assert!(r.as_slice()[..8 << 20].iter().all(|&b| b == 0));
        for (pg, page) in r.as_slice().chunks(4096).enumerate().skip(2048) {
            assert_eq!(common::check_page(page, 2, pg, false), None, "page {pg}");
        }
    }
    let st = p.stats();
    assert_eq!(st.engine.stored_pages, 0, "{st:?}");
    assert_eq!(st.pool_bytes, 0);
    assert_eq!(st.cache_live_bytes, 0, "a cached folio leaked");
    assert_eq!(st.resident_bytes, 0);
}
