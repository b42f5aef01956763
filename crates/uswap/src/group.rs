//! (group: being written; see docs/design.md)
