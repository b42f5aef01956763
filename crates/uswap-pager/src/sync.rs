//! Synchronization shim for the pager's lock-free kernels that loom can model: `std`'s atomics
//! normally, loom's under `--cfg loom` (as the engine's `uswap::sync`).
//!
//! Only the kernels checked by the loom models go through here: the slot pools ([`crate::slots`])
//! and the page claim's word cells in the models ([`crate::page::WordCell`]). Page words
//! themselves live in mmap'ed memory ([`crate::page::AtomicPageWord`], always `std`'s
//! `AtomicU64`, which loom's atomics cannot be), as do the registry's and the table of own
//! mappings' `static` atomics (loom's have no `const` constructor); the claim logic is generic
//! over the cell, so the models run the very code the pager runs, over loom's atomics.
//!
//! Locking: none (re-exports only).

#[cfg(not(loom))]
pub use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicU64, Ordering};
