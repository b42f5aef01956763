//! Encryption at rest for the swap file: AES-256-GCM with a per-process random key.
//!
//! The key comes from the OS random source when the tier is created and lives only in this
//! process's memory (it is never written anywhere), so a swap file stolen after the process
//! is gone reveals nothing. Each 4 KiB page is its own AEAD message:
//!
//! - nonce (96 bits) = a 64-bit write counter, unique for the life of the key (an atomic
//!   `fetch_add`; the key is discarded long before 2^64 writes), followed by the low 32 bits
//!   of the slot. The counter alone guarantees a nonce is never reused under the key.
//! - associated data = the physical slot number, so a block copied to another slot fails
//!   authentication just like a flipped bit.
//! - the 12-byte nonce and 16-byte tag go to the file beside the data (see `file.rs`), so the
//!   RAM metadata of a stored page stays at the 8-byte reverse-map word.
//!
//! The cipher is immutable after creation and shared by all threads without a lock; the
//! counter is one relaxed atomic. Encryption and decryption work in place: no allocation.

use crate::error::TierError;
use crate::sync::{AtomicU64, Ordering};
use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};

/// Bytes of per-page metadata on disk: nonce (12) + tag (16) + 4 bytes reserved, so that
/// records are 32-byte aligned.
pub const META_BYTES: usize = 32;
const NONCE_BYTES: usize = 12;
const TAG_BYTES: usize = 16;

/// A per-process AES-256-GCM key and nonce counter.
pub struct PageCipher {
    aead: Aes256Gcm,
    counter: AtomicU64,
}

impl PageCipher {
    /// A cipher with a fresh random key.
    pub fn new_random() -> Result<Self, TierError> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| TierError::Io { op: "getrandom", msg: e.to_string() })?;
        let aead =
            Aes256Gcm::new_from_slice(&key).map_err(|_| TierError::Io { op: "key", msg: "bad key length".into() })?;
        // Do not leave a copy of the key on the stack longer than needed.
        key.fill(0);
        std::hint::black_box(&key);
        Ok(PageCipher { aead, counter: AtomicU64::new(1) })
    }

    /// Encrypt one page in place for physical slot `slot`; writes nonce and tag into `meta`
    /// (`META_BYTES` long).
    pub fn seal(&self, slot: u64, page: &mut [u8], meta: &mut [u8]) -> Result<(), TierError> {
        let ctr = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut nonce = [0u8; NONCE_BYTES];
        nonce[..8].copy_from_slice(&ctr.to_le_bytes());
        nonce[8..].copy_from_slice(&(slot as u32).to_le_bytes());
        let aad = slot.to_le_bytes();
        let tag = self
            .aead
            .encrypt_in_place_detached(Nonce::from_slice(&nonce), &aad, page)
            .map_err(|_| TierError::Io { op: "encrypt", msg: "AEAD encryption failed".into() })?;
        meta[..NONCE_BYTES].copy_from_slice(&nonce);
        meta[NONCE_BYTES..NONCE_BYTES + TAG_BYTES].copy_from_slice(&tag);
        meta[NONCE_BYTES + TAG_BYTES..META_BYTES].fill(0);
        Ok(())
    }

    /// Authenticate and decrypt one page in place. `false` if the page, its metadata or its
    /// slot do not match (the page content is then garbage and must not be returned).
    pub fn open(&self, slot: u64, page: &mut [u8], meta: &[u8]) -> bool {
        if meta.len() < META_BYTES {
            return false;
        }
        let nonce = Nonce::from_slice(&meta[..NONCE_BYTES]);
        let tag = Tag::from_slice(&meta[NONCE_BYTES..NONCE_BYTES + TAG_BYTES]);
        let aad = slot.to_le_bytes();
        self.aead.decrypt_in_place_detached(nonce, &aad, page, tag).is_ok()
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
        c.seal(42, &mut page, &mut meta).unwrap();
        assert_ne!(page, plain, "ciphertext differs from the plaintext");
        let sealed = page.clone();
        assert!(c.open(42, &mut page, &meta));
        assert_eq!(page, plain);
        // Another slot (block copied elsewhere) fails.
        let mut p2 = sealed.clone();
        assert!(!c.open(43, &mut p2, &meta));
        // A flipped bit in the data fails.
        let mut p3 = sealed.clone();
        p3[100] ^= 1;
        assert!(!c.open(42, &mut p3, &meta));
        // A flipped bit in the tag fails.
        let mut m2 = meta;
        m2[20] ^= 0x80;
        let mut p4 = sealed.clone();
        assert!(!c.open(42, &mut p4, &m2));
        // Another process's key fails.
        let other = PageCipher::new_random().unwrap();
        let mut p5 = sealed;
        assert!(!other.open(42, &mut p5, &meta));
    }

    #[test]
    fn nonces_never_repeat() {
        let c = PageCipher::new_random().unwrap();
        let mut seen = std::collections::HashSet::new();
        let mut page = [0u8; 64];
        for i in 0..1000u64 {
            let mut meta = [0u8; META_BYTES];
            c.seal(i % 3, &mut page, &mut meta).unwrap();
            assert!(seen.insert(meta[..NONCE_BYTES].to_vec()));
        }
    }
}
