//! (swap_cache: being written; see docs/design.md)
