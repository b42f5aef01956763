//! glibc `memcpy` of 8 KiB by source and destination offset (modulo 64) on page-aligned
//! buffers. The `main.rs` of a scratch crate with no dependencies; `cargo run --release`.
use std::time::Instant;

extern "C" {
    fn mmap(a: *mut u8, l: usize, p: i32, f: i32, fd: i32, o: i64) -> *mut u8;
    fn memcpy(d: *mut u8, s: *const u8, n: usize) -> *mut u8;
}

/// A fresh private anonymous mapping of `n` bytes, every byte 7 (resident before timing).
fn alloc(n: usize) -> *mut u8 {
    // SAFETY: an anonymous mapping with no address hint (PROT_READ|PROT_WRITE = 3,
    // MAP_PRIVATE|MAP_ANONYMOUS = 0x22); checked before it is written.
    let p = unsafe { mmap(std::ptr::null_mut(), n, 3, 0x22, -1, 0) };
    assert!(!p.is_null() && p as isize != -1, "mmap failed");
    // SAFETY: `p` is a writable mapping of `n` bytes made above.
    unsafe { std::ptr::write_bytes(p, 7, n) };
    p
}

fn main() {
    let (src, dst) = (alloc(1 << 22), alloc(1 << 22));
    let (n, sz) = (100_000, 8192usize);
    let offsets = [
        (0usize, 0usize), (0, 16), (0, 32), (0, 48), (16, 0), (16, 16), (16, 32), (16, 48), (32, 0), (32, 16),
        (32, 48), (48, 0), (48, 16), (48, 32), (8, 0), (8, 8), (8, 24), (0, 8), (1, 0), (0, 1), (100, 200),
    ];
    for (so, doff) in offsets {
        let t = Instant::now();
        for i in 0..n {
            let k = (i % 16) * 65536;
            // SAFETY: k + 200 + 8192 <= 16 * 65536 < 4 MiB: both ranges lie inside their
            // mappings, which are distinct, so they do not overlap.
            unsafe { memcpy(dst.add(k + doff), src.add(k + so), sz) };
            std::hint::black_box(dst);
        }
        let a = t.elapsed().as_secs_f64() * 1e9 / n as f64;
        println!("{sz:6} src+{so:<4} dst+{doff:<5}: {a:8.1} ns  {:.1} GB/s", sz as f64 / a);
    }
}
