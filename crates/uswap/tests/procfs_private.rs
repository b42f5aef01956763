//! `uswap::procfs::private`: file work of uswap's threads takes no number of the process's
//! descriptor table. One test in its own binary: no other test thread opens files meanwhile,
//! so a number this test frees stays free unless the work takes it.

use uswap::procfs::{private, running, start, try_private};

fn spawn_plain(f: Box<dyn FnOnce() + Send>) -> std::io::Result<()> {
    std::thread::Builder::new().name("uswap-procfs".into()).spawn(f).map(drop)
}

fn open_statm() -> i32 {
    // SAFETY: open of a NUL-terminated path.
    unsafe { libc::open(c"/proc/self/statm".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) }
}

/// The lowest free number now (made and freed again).
fn lowest_free() -> i32 {
    // SAFETY: dup of standard error gives the lowest free number; it is closed at once.
    let fd = unsafe { libc::dup(2) };
    assert!(fd >= 0, "dup");
    // SAFETY: closing the number just made.
    unsafe { libc::close(fd) };
    fd
}

fn is_open(fd: i32) -> bool {
    // SAFETY: F_GETFD on a number: -1 (EBADF) when it is free.
    (unsafe { libc::fcntl(fd, libc::F_GETFD) }) != -1
}

/// Inline (no helper yet) the work's open takes the lowest free number; threads starting at
/// once start one helper; on the helper it never
/// does, the work still reads what it opened, and the helper's table has none of the
/// process's descriptors (not even standard error).
#[test]
fn work_opens_in_a_table_of_its_own() {
    assert!(!running());
    let probe = lowest_free();
    let fd = private(open_statm);
    assert_eq!(fd, probe, "without a helper the work runs inline and takes the lowest free number");
    // SAFETY: closing what was opened.
    unsafe { libc::close(fd) };

    // Pagers made on several threads at once start one helper.
    static SPAWNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let starters: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(|| {
                start(|f| {
                    SPAWNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    spawn_plain(f)
                })
                .expect("a helper with a table of its own")
            })
        })
        .collect();
    starters.into_iter().for_each(|h| h.join().unwrap());
    assert_eq!(SPAWNS.load(std::sync::atomic::Ordering::Relaxed), 1, "one helper for the process");
    assert!(running());
    start(|_| panic!("a second start spawns nothing")).expect("start again");
    for _ in 0..200 {
        let probe = lowest_free();
        let (fd, n) = private(|| {
            let fd = open_statm();
            let mut b = [0u8; 128];
            // SAFETY: read into a local buffer from the descriptor just opened, then close it.
            let n = unsafe {
                let n = libc::read(fd, b.as_mut_ptr().cast(), b.len());
                libc::close(fd);
                n
            };
            (fd, n)
        });
        assert!(fd >= 0 && n > 0, "the work opened and read /proc/self/statm");
        assert!(!is_open(probe), "number {probe} stayed free while the work opened a file");
    }
    // SAFETY: a write of one byte from a static buffer to number 2.
    let wrote = private(|| unsafe { libc::write(2, b"x".as_ptr().cast(), 1) });
    assert_eq!(wrote, -1, "the helper's table holds no copy of the process's descriptors");
    assert_eq!(try_private(|| 7), Some(7), "try_private serves when nobody else is served");

    // Callers from several threads are served one at a time, each with its own result.
    let threads: Vec<_> = (0..4u64)
        .map(|t| std::thread::spawn(move || (0..200u64).map(|i| private(move || t * 1000 + i)).sum::<u64>()))
        .collect();
    for (t, h) in threads.into_iter().enumerate() {
        let t = t as u64;
        assert_eq!(h.join().unwrap(), (0..200).map(|i| t * 1000 + i).sum::<u64>());
    }
}
