//! Encryption at rest for the swap file: AES-256-GCM with a per-process random key.
//!
//! The key comes from the OS random source when the tier is created and lives only in this
//! process's memory (it is never written anywhere), so a swap file stolen after the process
//! is gone reveals nothing. Each 4 KiB page is its own AEAD message:
//!
//! - nonce (96 bits) = a 64-bit write counter, unique for the life of the key (an atomic
//!   `fetch_add`; the key is discarded long before 2^64 writes), followed by the low 32 bits
//!   of the slot. The counter alone guarantees a nonce is never reused under the key. It lives
//!   in a page of its own mapped `MAP_SHARED`: a `fork` child inherits the key (it must read
//!   the pages its parent wrote) and shares the counter with its parent instead of copying
//!   it, so the two processes never seal two pages under one nonce (a copied counter would
//!   hand both the same sequence: GCM with a repeated nonce leaks the XOR of the two pages
//!   and the authentication key).
//! - associated data = the physical slot number and the owning virtual slot, so a block
//!   copied to another slot, or read back for another owner after the slot was reused, fails
//!   authentication just like a flipped bit.
//! - the record of a sealed page is the 8-byte counter and the 16-byte tag ([`META_BYTES`]);
//!   the slot half of the nonce is known to the reader. The file tier keeps the records in
//!   RAM ([`records`](super::records)), so that a swap-in is one read of the data alone.
//!
//! The cipher is immutable after creation and shared by all threads without a lock; the
//! counter is one relaxed atomic. Encryption and decryption work in place: no allocation.

use super::shared::SharedMap;
use crate::error::TierError;
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM};

/// Bytes of a sealed page's record: the nonce's counter (8) and the tag (16).
pub const META_BYTES: usize = CTR_BYTES + TAG_BYTES;
const CTR_BYTES: usize = 8;
const NONCE_BYTES: usize = 12;
const TAG_BYTES: usize = 16;

fn nonce(ctr: [u8; CTR_BYTES], slot: u64) -> Nonce {
    let mut n = [0u8; NONCE_BYTES];
    n[..CTR_BYTES].copy_from_slice(&ctr);
    n[CTR_BYTES..].copy_from_slice(&(slot as u32).to_le_bytes());
    Nonce::assume_unique_for_key(n)
}

fn aad(slot: u64, owner: u64) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..8].copy_from_slice(&slot.to_le_bytes());
    a[8..].copy_from_slice(&owner.to_le_bytes());
    a
}

/// A per-process AES-256-GCM key and nonce counter.
pub struct PageCipher {
    aead: LessSafeKey,
    /// The write counter: one `u64` of memory shared with `fork` descendants (a private copy
    /// would repeat the parent's values).
    counter: SharedMap,
}

impl PageCipher {
    /// A cipher with a fresh random key.
    pub fn new_random() -> Result<Self, TierError> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| TierError::Io { errno: 0, op: "getrandom", msg: e.to_string() })?;
        let aead = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &key).map_err(|_| TierError::Io {
            errno: 0,
            op: "key",
            msg: "bad key length".into(),
        })?);
        // Do not leave a copy of the key on the stack longer than needed.
        key.fill(0);
        std::hint::black_box(&key);
        let counter = SharedMap::new(8)?;
        counter.u64_at(0).store(1, std::sync::atomic::Ordering::Relaxed);
        Ok(PageCipher { aead, counter })
    }

    /// Encrypt one page in place for physical slot `slot` owned by virtual slot `owner`;
    /// writes its record (counter and tag) into `meta` (`META_BYTES` long).
    pub fn seal(&self, slot: u64, owner: u64, page: &mut [u8], meta: &mut [u8]) -> Result<(), TierError> {
        let ctr = self.counter.u64_at(0).fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_le_bytes();
        let tag = self
            .aead
            .seal_in_place_separate_tag(nonce(ctr, slot), Aad::from(aad(slot, owner)), page)
            .map_err(|_| TierError::Io { errno: 0, op: "encrypt", msg: "AEAD encryption failed".into() })?;
        meta[..CTR_BYTES].copy_from_slice(&ctr);
        meta[CTR_BYTES..META_BYTES].copy_from_slice(tag.as_ref());
        Ok(())
    }

    /// Authenticate and decrypt one page in place. `false` if the page, its metadata or its
    /// slot do not match (the page content is then garbage and must not be returned).
    pub fn open(&self, slot: u64, owner: u64, page: &mut [u8], meta: &[u8]) -> bool {
        if meta.len() < META_BYTES {
            return false;
        }
        let (Ok(ctr), Ok(tag)) = (meta[..CTR_BYTES].try_into(), Tag::try_from(&meta[CTR_BYTES..META_BYTES])) else {
            return false;
        };
        self.aead.open_in_place_separate_tag(nonce(ctr, slot), Aad::from(aad(slot, owner)), tag, page, 0..).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_open_round_trip_and_tamper() {
        let c = PageCipher::new_random().unwrap();
        let plain: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let mut page = plain.clone();
        let mut meta = [0u8; META_BYTES];
        c.seal(42, 7, &mut page, &mut meta).unwrap();
        assert_ne!(page, plain, "ciphertext differs from the plaintext");
        let sealed = page.clone();
        assert!(c.open(42, 7, &mut page, &meta));
        assert_eq!(page, plain);
        // Another slot (block copied elsewhere) fails.
        let mut p2 = sealed.clone();
        assert!(!c.open(43, 7, &mut p2, &meta));
        // Another owner (slot reused) fails.
        let mut p6 = sealed.clone();
        assert!(!c.open(42, 8, &mut p6, &meta));
        // A flipped bit in the data fails.
        let mut p3 = sealed.clone();
        p3[100] ^= 1;
        assert!(!c.open(42, 7, &mut p3, &meta));
        // A flipped bit in the tag fails.
        let mut m2 = meta;
        m2[20] ^= 0x80;
        let mut p4 = sealed.clone();
        assert!(!c.open(42, 7, &mut p4, &m2));
        // Another process's key fails.
        let other = PageCipher::new_random().unwrap();
        let mut p5 = sealed;
        assert!(!other.open(42, 7, &mut p5, &meta));
    }

    /// A fork child shares the nonce counter with its parent: pages sealed by the two after
    /// the fork never share a nonce (a child with a copy of the counter would repeat the
    /// parent's nonces under the same key).
    #[test]
    fn fork_child_and_parent_never_share_a_nonce() {
        let c = PageCipher::new_random().unwrap();
        let mut fds = [0i32; 2];
        // SAFETY: a valid two-int array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        const N: usize = 100;
        // SAFETY: the child only seals (no allocation, no lock), writes to the pipe and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let mut page = [0u8; 64];
            let mut out = [0u8; N * CTR_BYTES];
            for i in 0..N {
                let mut meta = [0u8; META_BYTES];
                let _ = c.seal(5, 0, &mut page, &mut meta);
                out[i * CTR_BYTES..(i + 1) * CTR_BYTES].copy_from_slice(&meta[..CTR_BYTES]);
            }
            // SAFETY: writing our own buffer to the pipe, then leaving without running the
            // parent's destructors or test harness.
            unsafe {
                libc::write(fds[1], out.as_ptr().cast(), out.len());
                libc::_exit(0);
            }
        }
        let mut mine = std::collections::HashSet::new();
        let mut page = [0u8; 64];
        for _ in 0..N {
            let mut meta = [0u8; META_BYTES];
            c.seal(5, 0, &mut page, &mut meta).unwrap();
            mine.insert(meta[..CTR_BYTES].to_vec());
        }
        // SAFETY: closing our copy of the write end; reading into a buffer of that length.
        unsafe { libc::close(fds[1]) };
        let mut theirs = vec![0u8; N * CTR_BYTES];
        let mut got = 0;
        while got < theirs.len() {
            // SAFETY: as above.
            let n = unsafe { libc::read(fds[0], theirs[got..].as_mut_ptr().cast(), theirs.len() - got) };
            assert!(n > 0, "the child sent {got} of {} bytes", theirs.len());
            got += n as usize;
        }
        let mut status = 0;
        // SAFETY: our child.
        unsafe {
            libc::waitpid(pid, &mut status, 0);
            libc::close(fds[0]);
        }
        for n in theirs.chunks(CTR_BYTES) {
            assert!(!mine.contains(n), "parent and child sealed under the same nonce {n:?}");
        }
    }

    #[test]
    fn nonces_never_repeat() {
        let c = PageCipher::new_random().unwrap();
        let mut seen = std::collections::HashSet::new();
        let mut page = [0u8; 64];
        for i in 0..1000u64 {
            let mut meta = [0u8; META_BYTES];
            c.seal(i % 3, 0, &mut page, &mut meta).unwrap();
            assert!(seen.insert(meta[..CTR_BYTES].to_vec()));
        }
    }
}
