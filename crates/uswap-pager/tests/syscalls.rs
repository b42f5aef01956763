//! Faults inside system calls: in SIGBUS mode the kernel returns EFAULT for a missing page;
//! the wrappers prefault and retry so that read()/write() on swapped-out buffers work.
mod common;
use std::io::{Seek, Write};
use std::os::fd::AsRawFd;
use uswap_pager::{FaultMode, PagerConfig};

#[test]
fn read_into_a_swapped_out_buffer() {
    let Some(p) = common::pager(PagerConfig { limit_bytes: 4 << 20, folio_size: 65536, ..Default::default() }) else {
        return;
    };
    assert_eq!(p.config().fault_mode, FaultMode::Sigbus);
    let mut r = p.map(1 << 20).unwrap();
    for (pg, page) in r.as_mut_slice().chunks_mut(4096).enumerate() {
        common::fill_page(page, 9, pg, false);
    }
    r.evict_all();
    let s = r.page_states();
    assert_eq!(s[4], 256, "all swapped out: {s:?}");

    let mut f = tempfile::tempfile().unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + 3) as u8).collect();
    f.write_all(&data).unwrap();
    f.rewind().unwrap();
    let off = 4096 * 3 + 100;

    // The premise: a plain read() into swapped-out memory fails with EFAULT in SIGBUS mode.
    // SAFETY: reading into our own region.
    let n = unsafe { libc::read(f.as_raw_fd(), r.as_ptr().add(off).cast(), data.len()) };
    assert_eq!(n, -1);
    assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EFAULT));
    f.rewind().unwrap();

    // The wrapper serves it.
    let buf = &mut r.as_mut_slice()[off..off + data.len()];
    assert_eq!(uswap_pager::syscall::read(f.as_raw_fd(), buf).unwrap(), data.len());
    assert_eq!(&r.as_slice()[off..off + data.len()], &data[..]);
    // Pages around the read keep their data.
    for pg in [0usize, 1, 2, 200, 255] {
        assert_eq!(common::check_page(&r.as_slice()[pg * 4096..(pg + 1) * 4096], 9, pg, false), None);
    }

    // write() from a swapped-out buffer, and pread() into one.
    r.evict_all();
    let mut out = tempfile::tempfile().unwrap();
    let n = uswap_pager::syscall::write(out.as_raw_fd(), &r.as_slice()[off..off + data.len()]).unwrap();
    assert_eq!(n, data.len());
    r.evict_all();
    let buf = &mut r.as_mut_slice()[..data.len()];
    assert_eq!(uswap_pager::syscall::pread(out.as_raw_fd(), buf, 0).unwrap(), data.len());
    assert_eq!(&r.as_slice()[..data.len()], &data[..]);
    out.rewind().unwrap();
    let _ = out.flush();
}

#[test]
fn prefault_makes_pages_resident() {
    let Some(p) = common::pager(PagerConfig { limit_bytes: 4 << 20, folio_size: 4096, ..Default::default() }) else {
        return;
    };
    let mut r = p.map(256 << 10).unwrap();
    r.as_mut_slice().fill(0xab);
    r.evict_all();
    // SAFETY: the range is our region.
    unsafe { uswap_pager::prefault(r.as_ptr().add(8192), 3 * 4096, true) };
    assert_eq!(r.page_states()[1], 3);
    let v = vec![1u8; 4096];
    // SAFETY: memory outside any region is left alone.
    unsafe { uswap_pager::prefault(v.as_ptr(), v.len(), false) };
    assert!(r.as_slice().iter().all(|&b| b == 0xab));
}
