use std::time::Instant;
fn alloc(n: usize) -> *mut u8 {
    unsafe { libc_mmap(n) }
}
unsafe fn libc_mmap(n: usize) -> *mut u8 {
    extern "C" { fn mmap(a: *mut u8, l: usize, p: i32, f: i32, fd: i32, o: i64) -> *mut u8; }
    let p = mmap(std::ptr::null_mut(), n, 3, 0x22, -1, 0);
    std::ptr::write_bytes(p, 7, n);
    p
}
extern "C" { fn memcpy(d: *mut u8, s: *const u8, n: usize) -> *mut u8; }
fn main() {
    let src = alloc(1 << 22);
    let dst = alloc(1 << 22);
    let n = 100_000;
    for &sz in &[8192usize] {
        for &(so, doff) in &[(0usize,0usize),(0,16),(0,32),(0,48),(16,0),(16,16),(16,32),(16,48),(32,0),(32,16),(32,48),(48,0),(48,16),(48,32),(8,0),(8,8),(8,24),(0,8),(1,0),(0,1),(100,200)] {
            let t = Instant::now();
            for i in 0..n {
                let k = (i % 16) * 65536;
                unsafe { memcpy(dst.add(k + doff), src.add(k + so), sz); }
                std::hint::black_box(dst);
            }
            let a = t.elapsed().as_secs_f64() * 1e9 / n as f64;
            println!("{sz:6} src+{so:<4} dst+{doff:<5}: {a:8.1} ns  {:.1} GB/s", sz as f64 / a);
        }
    }
}
