//! Fault injection for the tests of the crash guarantees: `WF_FAULT=<point>` makes wf fail at
//! that point the way a crash or a lost network answer would. Never set in production.
//!
//! Points: `sync-before-marker` (sync aborts after the tree is in place, before its marker),
//! `complete-lost-ack` (a worker's first completion commits but is treated as unacknowledged) and
//! `panic` (the command panics before it starts, as a bug would).

use std::sync::OnceLock;

/// Whether the fault at `point` is switched on for this process.
pub(crate) fn at(point: &str) -> bool {
    static FAULT: OnceLock<Option<String>> = OnceLock::new();
    FAULT.get_or_init(|| std::env::var("WF_FAULT").ok()).as_deref() == Some(point)
}
