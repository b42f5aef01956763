//! userfaultfd pager (being written).
