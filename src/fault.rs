//! Fault injection for the tests of the crash guarantees: `WF_FAULT=<point>` makes wf fail at
//! that point the way a crash or a lost network answer would. Never set in production.
//!
//! Points: `sync-before-marker` (sync aborts after the tree is in place, before its marker),
//! `complete-lost-ack` (a worker's completions commit but are treated as unacknowledged: a
//! completion alone the first time it is sent, every completion committed with the next claim),
//! `start-late` (a worker starts each job it claimed two zombie windows after its claim, as one
//! whose commit took that long to write from the database would), `enqueue-late` (an enqueue waits
//! 2 s between reading the commit it pins and inserting its jobs), `claim-late` (a worker's idle
//! slot, its claim answered, waits 2 s before it hands out the jobs: as a worker told to stop while
//! its claim was on the way), `failure-stalls-before-commit`
//! (a failed job's completion, its statements sent, waits an hour before its COMMIT, as one whose
//! link was cut then would) and `panic` (the command panics before it starts, as a bug would).
//!
//! A process-wide switch rather than a value passed down: the points sit deep inside the store and
//! the worker's slots, and only the tests ever turn one on.

use std::sync::OnceLock;

static ARMED: OnceLock<String> = OnceLock::new();

/// Switch on the fault at `point` for the rest of this process (`commands::dispatch`, from the
/// configuration).
pub(crate) fn arm(point: Option<String>) {
    if let Some(point) = point {
        let _ = ARMED.set(point);
    }
}

/// Whether the fault at `point` is switched on for this process.
pub(crate) fn at(point: &str) -> bool {
    ARMED.get().is_some_and(|armed| armed == point)
}
