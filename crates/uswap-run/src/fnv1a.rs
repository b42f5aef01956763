/// FNV-1a 64 of `b` (included by `build.rs` and by `preload.rs`, which names the embedded
/// library's cache file with it).
fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3))
}
