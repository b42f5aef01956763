//! Swap file tier: round trips through both I/O engines with encryption on and off, the
//! reverse map, a stolen file revealing nothing, corruption detection, fault injection at
//! every I/O edge (the page stays where it was), a full file, discard, and concurrent use.

use rand::{Rng, RngCore, SeedableRng};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::Arc;
use uswap::backend::Backend;
use uswap::internals::drop_behind::WINDOW_BYTES;
use uswap::internals::io_engine::{Fault, FaultEngine, IoEngine, PsyncEngine, UringEngine};
use uswap::internals::swapfile::{HEADER_BYTES, MAGIC};
use uswap::tier::file::{open_target, EngineKind, FileConfig, FileTarget, FileTier, CLUSTER_STRIDE};
use uswap::{SwapEntry, TierError, PAGE_SIZE};

/// A swap file's lock belongs to its open file description, so a child forked by another test
/// between `fork` and `exec` keeps a dropped tier's file locked for a moment. Tests that open a
/// file again after dropping its tier hold this shared; the test that spawns programs holds it
/// exclusively.
static SPAWNING: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn reopening() -> std::sync::RwLockReadGuard<'static, ()> {
    SPAWNING.read().unwrap_or_else(|e| e.into_inner())
}

fn engines() -> Vec<EngineKind> {
    let mut v = vec![EngineKind::Psync];
    if io_uring::IoUring::new(4).is_ok() {
        v.push(EngineKind::Uring);
    } else {
        eprintln!("io_uring unavailable: testing psync only");
    }
    v
}

fn cfg(engine: EngineKind, encrypt: bool) -> FileConfig {
    FileConfig {
        target: FileTarget::TempIn(std::env::temp_dir()),
        size_bytes: 64 << 20,
        engine,
        encrypt,
        discard: false,
        direct: false,
        force: false,
    }
}

/// A directory on a file system that supports O_DIRECT (not tmpfs), if any.
fn direct_dir() -> Option<std::path::PathBuf> {
    for d in ["/var/tmp", "/tmp"] {
        let p = std::path::PathBuf::from(d);
        let c = FileConfig { target: FileTarget::TempIn(p.clone()), direct: true, ..cfg(EngineKind::Psync, true) };
        if FileTier::open(&c).is_ok_and(|t| t.direct()) {
            return Some(p);
        }
    }
    eprintln!("no directory supports O_DIRECT: direct mode not tested");
    None
}

fn data(order: u8, kind: u8, seed: u64) -> Vec<u8> {
    let mut d = vec![0u8; PAGE_SIZE << order];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    match kind {
        0 => rng.fill_bytes(&mut d),
        1 => d.iter_mut().enumerate().for_each(|(i, b)| *b = (i % 251) as u8 ^ seed as u8),
        2 => {}
        _ => d.iter_mut().step_by(64).for_each(|b| *b = rng.random()),
    }
    d
}

#[test]
fn round_trip_every_engine_size_and_kind() {
    let mut modes = vec![false];
    let ddir = direct_dir();
    if ddir.is_some() {
        modes.push(true);
    }
    for engine in engines() {
        for (encrypt, direct) in [true, false].into_iter().flat_map(|e| modes.iter().map(move |&d| (e, d))) {
            let mut c = cfg(engine, encrypt);
            if direct {
                c = FileConfig { target: FileTarget::TempIn(ddir.clone().unwrap()), direct, ..c };
            }
            let t = FileTier::open(&c).unwrap();
            let mut kept = Vec::new();
            for order in 0..=9u8 {
                for kind in 0..4u8 {
                    if order >= 6 && kind % 2 == 1 {
                        continue;
                    }
                    let d = data(order, kind, u64::from(order) * 10 + u64::from(kind));
                    let owner = SwapEntry(u64::from(order) << 20 | u64::from(kind) << 10);
                    let st = t.store(&d, owner).unwrap();
                    assert_eq!(st.bytes, d.len() as u64);
                    assert_eq!(t.owner_of(st.handle).unwrap(), owner);
                    kept.push((st.handle, d));
                }
            }
            for (h, d) in &kept {
                let mut out = vec![0u8; d.len()];
                t.load(*h, &mut out).unwrap();
                assert!(&out == d, "{engine:?} encrypt={encrypt} direct={direct} len {}", d.len());
            }
            let pages: usize = kept.iter().map(|(_, d)| d.len() / PAGE_SIZE).sum();
            assert_eq!(t.usage().stored_pages, pages as u64);
            for (h, d) in &kept {
                assert_eq!(t.free(*h), d.len() as u64);
                assert_eq!(t.free(*h), 0, "double free");
                let mut out = vec![0u8; d.len()];
                assert!(matches!(t.load(*h, &mut out), Err(TierError::BadHandle(_))));
            }
            assert_eq!(t.usage().stored_pages, 0);
            assert_eq!(t.space().used_slots(), 0);
        }
    }
}

#[test]
fn the_file_reveals_nothing_and_tampering_is_detected() {
    let dir = tempfile::tempdir_in(direct_dir().unwrap_or_else(std::env::temp_dir)).unwrap();
    let path = dir.path().join("swap");
    let direct_ok = direct_dir().is_some();
    for (encrypt, direct) in [(false, false), (true, false), (true, direct_ok)] {
        // An existing file is used in place (and kept) with force; a missing one would be
        // unlinked at once.
        std::fs::File::create(&path).unwrap();
        let c = FileConfig {
            target: FileTarget::Path(path.clone()),
            direct,
            force: true,
            ..cfg(EngineKind::Psync, encrypt)
        };
        let t = FileTier::open(&c).unwrap();
        let secret: Vec<u8> = b"correct horse battery staple ".iter().copied().cycle().take(PAGE_SIZE).collect();
        let a = t.store(&secret, SwapEntry(1)).unwrap();
        let b = t.store(&secret, SwapEntry(2)).unwrap();
        let raw = std::fs::read(&path).unwrap();
        let found = raw.windows(12).any(|w| w == b"horse batter");
        assert_eq!(found, !encrypt, "plaintext visible in the file: {found}, encrypt={encrypt}");
        if !encrypt {
            continue;
        }
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        let mut out = vec![0u8; PAGE_SIZE];
        // A flipped bit in the data.
        let off = FileTier::data_offset(a.handle) + 1000;
        let mut byte = [0u8; 1];
        f.read_exact_at(&mut byte, off).unwrap();
        f.write_all_at(&[byte[0] ^ 0x04], off).unwrap();
        assert!(matches!(t.load(a.handle, &mut out), Err(TierError::Corrupt { .. })));
        assert!(out.iter().all(|&x| x == 0), "nothing returned as data");
        f.write_all_at(&byte, off).unwrap();
        t.load(a.handle, &mut out).unwrap();
        assert_eq!(out, secret);
        // A block copied to another slot fails too (its seal is bound to its slot).
        let (da, db) = (FileTier::data_offset(a.handle), FileTier::data_offset(b.handle));
        let mut blk = vec![0u8; PAGE_SIZE];
        f.read_exact_at(&mut blk, da).unwrap();
        f.write_all_at(&blk, db).unwrap();
        assert!(matches!(t.load(b.handle, &mut out), Err(TierError::Corrupt { .. })));
        // The same ciphertext written back where it came from opens again.
        t.load(a.handle, &mut out).unwrap();
        assert_eq!(out, secret);
        std::fs::remove_file(&path).unwrap();
    }
}

/// `load_part` returns the bytes asked for, exact, for every page range of a large folio,
/// through every engine, plain, encrypted and direct; it opens only the pages it reads: a
/// corrupt page fails the parts that cover it and no other.
#[test]
fn partial_loads_read_and_open_only_the_pages_asked_for() {
    let dir = tempfile::tempdir_in(direct_dir().unwrap_or_else(std::env::temp_dir)).unwrap();
    let path = dir.path().join("swap");
    let mut cases: Vec<(EngineKind, bool, bool)> =
        engines().into_iter().flat_map(|e| [(e, false, false), (e, true, false)]).collect();
    if direct_dir().is_some() {
        cases.push((EngineKind::Psync, true, true));
    }
    for (engine, encrypt, direct) in cases {
        std::fs::File::create(&path).unwrap();
        let c = FileConfig { target: FileTarget::Path(path.clone()), direct, force: true, ..cfg(engine, encrypt) };
        let t = FileTier::open(&c).unwrap();
        let d = data(4, 0, 7);
        let s = t.store(&d, SwapEntry(32)).unwrap();
        let n = 16;
        for first in 0..n {
            for k in 1..=n - first {
                let mut out = vec![0xA5u8; d.len()];
                let (at, len) = (first * PAGE_SIZE, k * PAGE_SIZE);
                t.load_part(s.handle, &mut out, at, len).unwrap();
                assert_eq!(out[at..at + len], d[at..at + len], "{engine:?} enc {encrypt} direct {direct} {first}+{k}");
            }
        }
        // Less than a page, across a page boundary.
        let mut out = vec![0u8; d.len()];
        t.load_part(s.handle, &mut out, 3 * PAGE_SIZE + 100, PAGE_SIZE).unwrap();
        assert_eq!(out[3 * PAGE_SIZE + 100..4 * PAGE_SIZE + 100], d[3 * PAGE_SIZE + 100..4 * PAGE_SIZE + 100]);
        // Out of range is an error, not a read past the folio.
        assert!(t.load_part(s.handle, &mut out, 15 * PAGE_SIZE, 2 * PAGE_SIZE).is_err());
        if encrypt {
            // Corrupt page 5: parts covering it fail and return nothing; the others read.
            let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
            let off = FileTier::data_offset(s.handle) + 5 * PAGE_SIZE as u64 + 17;
            let mut byte = [0u8; 1];
            f.read_exact_at(&mut byte, off).unwrap();
            f.write_all_at(&[byte[0] ^ 0x10], off).unwrap();
            let mut out = vec![0u8; d.len()];
            assert!(matches!(
                t.load_part(s.handle, &mut out, 4 * PAGE_SIZE, 2 * PAGE_SIZE),
                Err(TierError::Corrupt { .. })
            ));
            assert!(out.iter().all(|&x| x == 0), "nothing returned as data");
            assert!(matches!(t.load(s.handle, &mut out), Err(TierError::Corrupt { .. })));
            t.load_part(s.handle, &mut out, 6 * PAGE_SIZE, PAGE_SIZE).unwrap();
            assert_eq!(out[6 * PAGE_SIZE..7 * PAGE_SIZE], d[6 * PAGE_SIZE..7 * PAGE_SIZE]);
        }
        drop(t);
        std::fs::remove_file(&path).unwrap();
    }
}

fn faulty(encrypt: bool) -> (FileTier, Arc<FaultEngine>) {
    let file = Arc::new(tempfile::tempfile().unwrap());
    file.set_len(4 * CLUSTER_STRIDE).unwrap();
    let fe = Arc::new(FaultEngine::new(Box::new(PsyncEngine::new(file.clone()))));
    let t =
        FileTier::with_engine("file:fault", file, 4 * 512, fe.clone() as Arc<dyn IoEngine>, encrypt, false).unwrap();
    (t, fe)
}

#[test]
fn write_faults_fail_cleanly_and_keep_everything_else() {
    for f in [Fault::WriteEnospc, Fault::WriteEio, Fault::ShortWrite] {
        for order in [0u8, 4, 9] {
            let (t, fe) = faulty(true);
            let old = data(order, 0, 1);
            let st = t.store(&old, SwapEntry(0)).unwrap();
            let used = t.space().used_slots();
            fe.inject(f);
            let new = data(order, 1, 2);
            let e = t.store(&new, SwapEntry(512)).unwrap_err();
            assert!(matches!(e, TierError::Io { .. }), "{f:?}: {e}");
            let msg = e.to_string();
            assert!(msg.contains("write"), "{f:?}: unclear error {msg}");
            // No slot leaked, counters unchanged, the old page intact.
            assert_eq!(t.space().used_slots(), used, "{f:?}");
            assert_eq!(t.usage().stored_pages, 1 << order);
            let mut out = vec![0u8; old.len()];
            t.load(st.handle, &mut out).unwrap();
            assert!(out == old);
            // The next store works.
            let st2 = t.store(&new, SwapEntry(512)).unwrap();
            t.load(st2.handle, &mut out).unwrap();
            assert!(out == new);
        }
    }
}

#[test]
fn read_faults_fail_cleanly_and_the_page_stays() {
    for encrypt in [true, false] {
        for f in [Fault::ReadEio, Fault::ShortRead, Fault::FlipReadByte { at: 77 }] {
            let (t, fe) = faulty(encrypt);
            let d = data(2, 0, 3);
            let st = t.store(&d, SwapEntry(8)).unwrap();
            fe.inject(f);
            let mut out = vec![0u8; d.len()];
            let r = t.load(st.handle, &mut out);
            match f {
                Fault::FlipReadByte { .. } if !encrypt => {
                    // Without authentication a flipped byte cannot be detected: that is why
                    // encryption is on by default.
                    assert!(r.is_ok());
                }
                Fault::FlipReadByte { .. } => assert!(matches!(r, Err(TierError::Corrupt { .. })), "{r:?}"),
                _ => assert!(matches!(r, Err(TierError::Io { .. })), "{f:?}: {r:?}"),
            }
            if r.is_err() {
                assert!(out.iter().all(|&x| x == 0), "{f:?}: data returned on error");
            }
            t.load(st.handle, &mut out).unwrap();
            assert!(out == d, "{f:?}: page lost");
        }
    }
}

#[test]
fn a_full_file_rejects_to_the_next_tier() {
    let (t, _) = faulty(false);
    let d = data(9, 1, 4);
    let mut hs = Vec::new();
    for i in 0..4 {
        hs.push(t.store(&d, SwapEntry(i * 512)).unwrap());
    }
    assert_eq!(t.store(&d, SwapEntry(9999)), Err(TierError::Reject));
    assert_eq!(t.store(&d[..PAGE_SIZE], SwapEntry(9999)), Err(TierError::Reject));
    t.free(hs[1].handle);
    assert!(t.store(&d[..PAGE_SIZE], SwapEntry(9999)).is_ok());
    let mut out = vec![0u8; d.len()];
    t.load(hs[3].handle, &mut out).unwrap();
    assert!(out == d);
}

#[test]
fn bad_input_is_an_error() {
    let t = FileTier::open(&cfg(EngineKind::Psync, true)).unwrap();
    assert!(t.store(&[1u8; 100], SwapEntry(0)).is_err());
    assert!(t.store(&vec![1u8; 3 * PAGE_SIZE], SwapEntry(0)).is_err());
    let mut out = vec![0u8; PAGE_SIZE];
    for h in [0u64, 5, 1 << 40, u64::MAX >> 23] {
        assert!(t.load(h, &mut out).is_err());
        assert_eq!(t.free(h), 0);
    }
    let bad = FileConfig { target: FileTarget::TempIn("/nonexistent/dir".into()), ..cfg(EngineKind::Psync, true) };
    assert!(matches!(FileTier::open(&bad), Err(TierError::Io { .. })));
}

#[test]
fn discard_punches_holes_for_empty_clusters() {
    let c = FileConfig { discard: true, ..cfg(EngineKind::Psync, true) };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("swap");
    std::fs::File::create(&path).unwrap();
    let t = FileTier::open(&FileConfig { target: FileTarget::Path(path.clone()), force: true, ..c }).unwrap();
    let d = data(9, 0, 5);
    let hs: Vec<_> = (0..4).map(|i| t.store(&d, SwapEntry(i * 512)).unwrap()).collect();
    let full = std::fs::metadata(&path).unwrap().blocks();
    for h in &hs {
        t.free(h.handle);
    }
    let after = std::fs::metadata(&path).unwrap().blocks();
    assert!(after < full / 4, "blocks {full} -> {after}");
    // Reused clusters work after the discard.
    let h = t.store(&d, SwapEntry(0)).unwrap();
    let mut out = vec![0u8; d.len()];
    t.load(h.handle, &mut out).unwrap();
    assert!(out == d);
}

#[test]
fn concurrent_store_load_free() {
    let ddir = direct_dir();
    let mut cfgs: Vec<FileConfig> = engines().into_iter().map(|e| cfg(e, true)).collect();
    if let Some(d) = ddir {
        // Direct mode: concurrent aligned I/O of neighbouring slots.
        cfgs.extend(engines().into_iter().map(|e| FileConfig {
            target: FileTarget::TempIn(d.clone()),
            direct: true,
            ..cfg(e, true)
        }));
    }
    for c in cfgs {
        let t = Arc::new(FileTier::open(&c).unwrap());
        let hs: Vec<_> = (0..3u64)
            .map(|id| {
                let t = t.clone();
                std::thread::spawn(move || {
                    let mut rng = rand::rngs::SmallRng::seed_from_u64(id);
                    let mut mine = Vec::new();
                    for i in 0..150u64 {
                        let order = [0u8, 0, 2, 4][rng.random_range(0..4)];
                        let d = data(order, 0, id << 32 | i);
                        let st = t.store(&d, SwapEntry((id << 30) + (i << 9))).unwrap();
                        mine.push((st.handle, d));
                        if rng.random_bool(0.4) {
                            let (h, d) = mine.swap_remove(rng.random_range(0..mine.len()));
                            let mut out = vec![0u8; d.len()];
                            t.load(h, &mut out).unwrap();
                            assert!(out == d);
                            t.free(h);
                        }
                    }
                    mine
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in hs {
            all.extend(h.join().unwrap());
        }
        for (h, d) in &all {
            let mut out = vec![0u8; d.len()];
            t.load(*h, &mut out).unwrap();
            assert!(&out == d);
        }
        let pages: usize = all.iter().map(|(_, d)| d.len() / PAGE_SIZE).sum();
        assert_eq!(t.usage().stored_pages, pages as u64);
        t.space().check_invariants().unwrap();
    }
}

#[test]
fn uring_engine_owns_buffers() {
    // Smoke test that the engine API cannot be used to free a buffer mid-I/O: the buffer is
    // moved in and only handed back after completion (compile-time property), and the data
    // that comes back is what was written.
    if io_uring::IoUring::new(4).is_err() {
        return;
    }
    let file = Arc::new(tempfile::tempfile().unwrap());
    let e = UringEngine::new(file, 1, 4).unwrap();
    let mut b = uswap::internals::io_engine::IoBuf::new(2 << 20);
    b.as_mut_slice().iter_mut().enumerate().for_each(|(i, x)| *x = i as u8);
    let (b, r) = e.submit(b, &[uswap::internals::io_engine::IoOp::write(0, 0, 2 << 20)]);
    r.unwrap();
    let mut b = b.unwrap();
    b.as_mut_slice().fill(0);
    let (b, r) = e.submit(b, &[uswap::internals::io_engine::IoOp::read(0, 0, 2 << 20)]);
    r.unwrap();
    assert!(b.unwrap().as_slice().iter().enumerate().all(|(i, &x)| x == i as u8));
}

/// A swap file path that does not exist is created for the tier and unlinked at once, so
/// nothing is left behind when the process ends (however it ends); an existing one is kept.
#[test]
fn a_new_swap_file_leaves_nothing_behind() {
    let _g = reopening();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.swap");
    let t =
        FileTier::open(&FileConfig { target: FileTarget::Path(path.clone()), ..cfg(EngineKind::Psync, true) }).unwrap();
    assert!(!path.exists(), "the new swap file is still linked");
    let d = data(3, 0, 2);
    let h = t.store(&d, SwapEntry(7)).unwrap();
    let mut out = vec![0u8; d.len()];
    t.load(h.handle, &mut out).unwrap();
    assert!(out == d);
    drop(t);
    let kept = dir.path().join("kept.swap");
    std::fs::File::create(&kept).unwrap();
    let t = FileTier::open(&FileConfig {
        target: FileTarget::Path(kept.clone()),
        force: true,
        ..cfg(EngineKind::Psync, true)
    })
    .unwrap();
    assert!(kept.exists());
    drop(t);
    assert!(kept.exists(), "an existing swap file was removed");
    // It has uswap's header now: reused without force.
    FileTier::open(&FileConfig { target: FileTarget::Path(kept.clone()), ..cfg(EngineKind::Psync, true) }).unwrap();
}

fn open_err(c: &FileConfig) -> String {
    match FileTier::open(c) {
        Ok(_) => panic!("{:?} opened", c.target),
        Err(e) => e.to_string(),
    }
}

/// A file that is not uswap's is never written without force: neither its data nor its size
/// change. With force it gets a header, and data never starts at offset 0.
#[test]
fn an_existing_file_without_a_header_is_refused_unless_forced() {
    let _g = reopening();
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.bin");
    let content: Vec<u8> = (0..4u32 << 20).map(|i| (i % 253) as u8).collect();
    std::fs::write(&path, &content).unwrap();
    for c in [
        FileConfig { target: FileTarget::Path(path.clone()), ..cfg(EngineKind::Psync, true) },
        FileConfig { target: FileTarget::Path(path.clone()), size_bytes: 0, ..cfg(EngineKind::Psync, false) },
    ] {
        let e = open_err(&c);
        assert!(e.contains("without a uswap swap header") && e.contains("force"), "{e}");
    }
    // An empty file is refused too: the user may have meant another path.
    let empty = dir.path().join("empty");
    std::fs::File::create(&empty).unwrap();
    assert!(open_err(&FileConfig { target: FileTarget::Path(empty), ..cfg(EngineKind::Psync, true) })
        .contains("without a uswap swap header"));
    assert_eq!(std::fs::read(&path).unwrap(), content, "the refused file changed");
    // Force: a header at 0, the data after it.
    let t = FileTier::open(&FileConfig {
        target: FileTarget::Path(path.clone()),
        force: true,
        ..cfg(EngineKind::Psync, false)
    })
    .unwrap();
    let d = data(0, 0, 9);
    let h = t.store(&d, SwapEntry(0)).unwrap();
    assert!(FileTier::data_offset(h.handle) >= HEADER_BYTES);
    let raw = std::fs::read(&path).unwrap();
    assert_eq!(&raw[..8], &MAGIC);
    assert_eq!(&raw[FileTier::data_offset(h.handle) as usize..][..PAGE_SIZE], &d[..]);
    drop(t);
    // Files uswap creates are private.
    for target in [FileTarget::TempIn(dir.path().into()), FileTarget::Path(dir.path().join("new"))] {
        let (f, _) = open_target(&target, false, false).unwrap();
        let md = f.metadata().unwrap();
        assert_eq!(md.permissions().mode() & 0o777, 0o600, "{target:?}");
        let mut m = [0u8; 8];
        f.read_exact_at(&mut m, 0).unwrap();
        assert_eq!(m, MAGIC, "{target:?}");
    }
    // A bad header version is named.
    let old = dir.path().join("old.swap");
    let mut b = vec![0u8; 8192];
    b[..8].copy_from_slice(&MAGIC);
    b[8] = 99;
    std::fs::write(&old, &b).unwrap();
    assert!(
        open_err(&FileConfig { target: FileTarget::Path(old), ..cfg(EngineKind::Psync, true) }).contains("version 99")
    );
    // Something that is neither a file nor a block device.
    assert!(open_err(&FileConfig {
        target: FileTarget::Path("/dev/null".into()),
        force: true,
        ..cfg(EngineKind::Psync, true)
    })
    .contains("neither a regular file nor a block device"));
}

/// Two tiers (two processes) never share one swap file.
#[test]
fn a_file_in_use_is_refused_even_with_force() {
    let _g = reopening();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.swap");
    std::fs::File::create(&path).unwrap();
    let c = FileConfig { target: FileTarget::Path(path.clone()), force: true, ..cfg(EngineKind::Psync, true) };
    let t = FileTier::open(&c).unwrap();
    let e = open_err(&c);
    assert!(e.contains("in use by another uswap process"), "{e}");
    drop(t);
    FileTier::open(&c).unwrap();
}

/// A loop device (root only; skipped where losetup is missing): refused without the header,
/// usable with force, and refused while another program holds it exclusively.
#[test]
fn block_devices_need_a_header_and_must_be_free() {
    let _spawning = SPAWNING.write().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("disk.img");
    std::fs::File::create(&img).unwrap().set_len(16 << 20).unwrap();
    let out = std::process::Command::new("losetup").args(["-f", "--show"]).arg(&img).output();
    let dev = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        _ => {
            eprintln!("losetup unavailable: block device cases skipped");
            return;
        }
    };
    struct Detach(String);
    impl Drop for Detach {
        fn drop(&mut self) {
            let _ = std::process::Command::new("losetup").args(["-d", &self.0]).status();
        }
    }
    let _g = Detach(dev.clone());
    let c = FileConfig { target: FileTarget::Path(dev.clone().into()), size_bytes: 0, ..cfg(EngineKind::Psync, true) };
    let e = open_err(&c);
    assert!(e.contains("block device without a uswap swap header"), "{e}");
    {
        use std::os::unix::fs::OpenOptionsExt;
        let _held = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_EXCL).open(&dev).unwrap();
        let e = open_err(&FileConfig { force: true, ..c.clone() });
        assert!(e.contains("in use"), "{e}");
    }
    let t = FileTier::open(&FileConfig { force: true, ..c.clone() }).unwrap();
    // 16 MiB minus the header: 7 clusters of data + metadata.
    assert_eq!(t.usage().limit_bytes, 7 * 512 * PAGE_SIZE as u64);
    let d = data(4, 0, 11);
    let h = t.store(&d, SwapEntry(16)).unwrap();
    let mut out = vec![0u8; d.len()];
    t.load(h.handle, &mut out).unwrap();
    assert!(out == d);
    drop(t);
    // The header is there now: no force needed.
    FileTier::open(&c).unwrap();
}

#[test]
fn load_many_reads_runs_and_fails_per_run_without_losing_pages() {
    use uswap::backend::LoadReq;
    for encrypt in [true, false] {
        for f in [None, Some(Fault::ReadEio), Some(Fault::ShortRead), Some(Fault::FlipReadByte { at: 5000 })] {
            let (t, fe) = faulty(encrypt);
            // Two runs: slots 0..3, then slot 4 (slot 3 is stored but not asked for).
            let mut stored = Vec::new();
            for i in 0..5u64 {
                let d = data(0, 0, i);
                let h = t.store(&d, SwapEntry(i * 4)).unwrap().handle;
                if i != 3 {
                    stored.push((h, d));
                }
            }
            if let Some(f) = f {
                fe.inject(f);
            }
            let mut outs: Vec<Vec<u8>> = stored.iter().map(|(_, d)| vec![0u8; d.len()]).collect();
            let mut reqs: Vec<LoadReq<'_>> = stored
                .iter()
                .zip(outs.iter_mut())
                .map(|((h, _), o)| LoadReq { handle: *h, out: o.as_mut_slice(), optional: false, result: Ok(()) })
                .collect();
            t.load_many(&mut reqs);
            let results: Vec<_> = reqs.into_iter().map(|r| r.result).collect();
            let fails = results.iter().filter(|r| r.is_err()).count();
            match f {
                None => assert_eq!(fails, 0, "{results:?}"),
                Some(Fault::FlipReadByte { .. }) if !encrypt => assert_eq!(fails, 0),
                // The fault hits the one submission both runs share (a small batch): every
                // object, or with a flipped byte one object (byte 5000 of the first run: slot 1).
                Some(Fault::FlipReadByte { .. }) => assert_eq!(fails, 1, "{results:?}"),
                Some(_) => assert_eq!(fails, 4, "{f:?}: {results:?}"),
            }
            // (Without authentication a flipped byte cannot be detected: that is why encryption
            // is on by default.)
            let undetectable = !encrypt && matches!(f, Some(Fault::FlipReadByte { .. }));
            for ((r, o), (_, d)) in results.iter().zip(&outs).zip(&stored) {
                if r.is_ok() && !undetectable {
                    assert!(o == d, "{f:?}: wrong bytes returned as good");
                }
            }
            // Every page is still there, exact.
            for (h, d) in &stored {
                let mut o = vec![0u8; d.len()];
                t.load(*h, &mut o).unwrap();
                assert!(&o == d, "{f:?}: page lost");
            }
        }
    }
}

#[test]
fn a_drain_through_a_failing_file_keeps_every_page() {
    use uswap::backend::MemBackend;
    use uswap::vswap::{Engine, EngineConfig, Location};
    let data_of = |i: u64| data(0, 0, i);
    // Reads fail: drain of the file into memory (one run of 40 pages, one read).
    for f in [Fault::ReadEio, Fault::ShortRead, Fault::FlipReadByte { at: 100 }] {
        let (t, fe) = faulty(true);
        let t: Arc<dyn Backend> = Arc::new(t);
        let e = Engine::new(EngineConfig { virtual_slots: 4096, ..EngineConfig::default() }, vec![t.clone()]).unwrap();
        let kept: Vec<_> = (0..40u64).map(|i| (e.swap_out(0, &data_of(i)).unwrap(), data_of(i))).collect();
        fe.inject(f);
        let r = e.drain_tier(0);
        assert!(r.is_err(), "{f:?}: {r:?}");
        let left = t.usage().stored_pages;
        assert!(left > 0, "{f:?}: nothing left although a read failed");
        let mut out = vec![0u8; PAGE_SIZE];
        for (ent, d) in &kept {
            e.swap_in(*ent, &mut out, false).unwrap();
            assert!(&out == d, "{f:?}: page lost");
        }
        // Retried, the drain finishes; everything is in memory and exact.
        e.drain_tier(0).unwrap();
        assert_eq!(t.usage().stored_pages, 0);
        for (ent, d) in &kept {
            assert_eq!(e.location(*ent).unwrap(), Location::Cache);
            e.swap_in(*ent, &mut out, false).unwrap();
            assert!(&out == d, "{f:?}: page lost after the retry");
        }
    }
    // Writes fail: drain of a memory tier into the file; the object whose store failed stays.
    for f in [Fault::WriteEio, Fault::WriteEnospc, Fault::ShortWrite] {
        let (t, fe) = faulty(true);
        let t: Arc<dyn Backend> = Arc::new(t);
        let mem: Arc<dyn Backend> = Arc::new(MemBackend::new("mem", 0));
        let e =
            Engine::new(EngineConfig { virtual_slots: 4096, ..EngineConfig::default() }, vec![mem.clone(), t.clone()])
                .unwrap();
        let kept: Vec<_> = (0..40u64).map(|i| (e.swap_out(0, &data_of(i)).unwrap(), data_of(i))).collect();
        fe.inject(f);
        assert!(e.drain_tier(0).is_err(), "{f:?}");
        assert_eq!(mem.usage().stored_pages, 1, "{f:?}: the failed store's page left its tier");
        assert_eq!(t.usage().stored_pages, 39);
        let mut out = vec![0u8; PAGE_SIZE];
        for (ent, d) in &kept {
            e.swap_in(*ent, &mut out, false).unwrap();
            assert!(&out == d, "{f:?}: page lost");
        }
    }
}

/// Pages of `path` in the page cache (`mincore` of a mapping of it).
fn cached_bytes(path: &std::path::Path) -> u64 {
    let f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    // SAFETY: a fresh shared read-only mapping of a file we opened; only mincore looks at it.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, std::os::fd::AsRawFd::as_raw_fd(&f), 0)
    };
    assert_ne!(p, libc::MAP_FAILED);
    let mut vec = vec![0u8; len.div_ceil(PAGE_SIZE)];
    // SAFETY: `vec` has one byte per page of the mapping.
    assert_eq!(unsafe { libc::mincore(p, len, vec.as_mut_ptr()) }, 0);
    // SAFETY: our mapping, unused afterwards.
    unsafe { libc::munmap(p, len) };
    vec.iter().filter(|&&b| b & 1 != 0).count() as u64 * PAGE_SIZE as u64
}

/// The swap file keeps no unbounded page cache: after 64 MiB stored and read back, the file's
/// cached pages are none with O_DIRECT, and within the drop-behind window (plus the header and
/// the last range read) buffered. Needs a file system with page cache of its own (not tmpfs).
#[test]
fn the_swap_file_keeps_its_page_cache_bounded() {
    let dir = direct_dir().expect("this test needs a directory on a disk file system (/var/tmp or /tmp)");
    let path = dir.join(format!("uswap-cache-test-{}", std::process::id()));
    for (direct, bound) in [(true, 0u64), (false, WINDOW_BYTES + (1 << 20))] {
        let _ = std::fs::remove_file(&path);
        std::fs::File::create(&path).unwrap();
        let c = FileConfig {
            target: FileTarget::Path(path.clone()),
            direct,
            force: true,
            size_bytes: 128 << 20,
            ..cfg(EngineKind::Psync, true)
        };
        let t = FileTier::open(&c).unwrap();
        assert_eq!(t.direct(), direct);
        let mut stored = Vec::new();
        for i in 0..1024u64 {
            let d = data(4, 3, i);
            stored.push((t.store(&d, SwapEntry(i << 4)).unwrap().handle, d));
        }
        let after_stores = cached_bytes(&path);
        for (h, d) in &stored {
            let mut out = vec![0u8; d.len()];
            t.load(*h, &mut out).unwrap();
            assert!(&out == d);
        }
        let after_loads = cached_bytes(&path);
        assert!(
            after_stores <= bound + 4096 && after_loads <= bound + 4096,
            "direct={direct}: {after_stores} bytes cached after 64 MiB stored, {after_loads} after reading it back \
             (bound {bound})"
        );
        drop(t);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn optional_requests_are_read_along_only_where_they_cost_no_wait() {
    use uswap::backend::LoadReq;
    for engine in engines() {
        let t = FileTier::open(&cfg(engine, true)).unwrap();
        let stored: Vec<(u64, Vec<u8>)> = (0..8u64)
            .map(|i| {
                let d = data(0, 0, 100 + i);
                (t.store(&d, SwapEntry(i)).unwrap().handle, d)
            })
            .collect();
        // Asked for: slot 2. Read ahead: slot 3 (its neighbour, the same read) and slot 6 (a
        // read of its own).
        let want = [(2usize, false), (3, true), (6, true)];
        let mut outs = vec![vec![0u8; PAGE_SIZE]; want.len()];
        let mut reqs: Vec<LoadReq<'_>> = want
            .iter()
            .zip(outs.iter_mut())
            .map(|(&(i, optional), o)| LoadReq { handle: stored[i].0, out: o, optional, result: Ok(()) })
            .collect();
        t.load_many(&mut reqs);
        let results: Vec<_> = reqs.into_iter().map(|r| r.result).collect();
        let overlaps = engine == EngineKind::Uring;
        for ((&(i, _), r), o) in want.iter().zip(&results).zip(&outs) {
            if i == 6 && !overlaps {
                assert!(matches!(r, Err(TierError::Reject)), "{engine:?}: slot 6 read on its own: {r:?}");
                assert!(o.iter().all(|&b| b == 0), "{engine:?}: a skipped request's out was written");
            } else {
                assert!(r.is_ok(), "{engine:?}: slot {i}: {r:?}");
                assert!(o == &stored[i].1, "{engine:?}: slot {i}: wrong bytes");
            }
        }
        // Nothing was consumed: every page is still there.
        for (h, d) in &stored {
            let mut o = vec![0u8; PAGE_SIZE];
            t.load(*h, &mut o).unwrap();
            assert!(&o == d);
        }
    }
}
