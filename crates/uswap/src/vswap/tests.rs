//! Unit tests of the engine's helpers (folio orders, zero detection).
//!
//! Locking: none.

use super::order_of_len;
use crate::tier::zero::is_zero;

#[test]
fn order_of_len_accepts_only_folio_sizes() {
    assert_eq!(order_of_len(4096), Ok(0));
    assert_eq!(order_of_len(4096 << 9), Ok(9));
    assert!(order_of_len(0).is_err());
    assert!(order_of_len(4095).is_err());
    assert!(order_of_len(3 * 4096).is_err());
    assert!(order_of_len(4096 << 10).is_err());
}

#[test]
fn zero_check() {
    let mut v = vec![0u8; 4096 + 3];
    assert!(is_zero(&v));
    v[4098] = 1;
    assert!(!is_zero(&v));
    v[4098] = 0;
    v[17] = 0x80;
    assert!(!is_zero(&v));
}
