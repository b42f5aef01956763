//! Reconciling with the process's mappings: adopting the anonymous memory that no interposed
//! call saw, and counting what stays outside the pager.
//!
//! glibc's brk heap, the blocks and thread arenas glibc maps with its internal `mmap`, and
//! whatever a runtime maps through a raw system call never pass through this library. The
//! `uswap-scan` thread watches the resident set size and, when it has grown by 1/128 of the
//! limit since the last pass (or every 500 ms), reads `/proc/self/maps` and adopts every
//! anonymous private writable mapping that is not the pager's own, not a thread stack (a small
//! `PROT_NONE` guard right below it) and not a loaded object's `.bss` (anonymous memory right
//! after one of its file mappings: libc's malloc state lives there, and the pager's threads
//! use it). Each pass also retires regions the program has unmapped, and measures the
//! anonymous memory outside the pager, whose program part is charged against the limit. A
//! program thread that gets a large block no region covers runs a pass itself before it
//! writes the block.
//!
//! The files, one role each, lowest layer first:
//!
//! - `resident`: the resident set from procfs ([`statm`], [`file_and_shmem`],
//!   [`status_bytes`]) and the peaks of what is resident but not managed (file-backed and
//!   shared memory growth, the engine's metadata).
//! - `maps`: reading `/proc/self/maps` ([`parse_maps`]), why a mapping is not adopted
//!   ([`skip_reason`]), the loader's data, and this library's own image
//!   ([`record_own_image`]).
//! - `unmanaged`: measuring the memory outside the pager, charging it, the warning.
//! - `pass`: one reconciliation pass ([`scan_once`]) and its counters.
//! - `block`: passes run by program threads for a new block ([`note_block`]).
//! - `thread`: the `uswap-scan` thread, its loop and its period ([`start_thread`],
//!   [`restart_in_child`]).
//! - `report`: the scan's part of the statistics ([`unmanaged()`]).
//!
//! Locking: a pass runs under [`crate::BIG`] (so a fork never copies a half-adopted mapping),
//! and inside it the previous pass's mappings are behind a lock of their own (see `pass`);
//! the counters are atomics. The thread allocates from the library's internal heap.

mod block;
mod maps;
mod pass;
mod report;
mod resident;
mod thread;
mod unmanaged;

pub use block::{note_block, ALWAYS_PASS_MIN, NEW_MEMORY_MIN, SYNC_GAP_MS};
pub use maps::{is_anon_private_range, parse_maps, record_own_image, skip_reason, Map};
pub use pass::scan_once;
pub use report::unmanaged;
pub use resident::{
    engine_meta_peak, file_and_shmem, file_growth_peak, shmem_growth_peak, statm, status_bytes, FILE_AT_START,
    SHARED_AT_SPLIT, SHMEM_AT_START,
};
pub use thread::{restart_in_child, start_thread};
pub use unmanaged::ANON_AT_INIT;
