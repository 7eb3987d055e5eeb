//! `diag!`: one line on stderr that never panics.
//!
//! The one way the library speaks: a worker's own lines (a job lost to the reaper, a database
//! outage and its recovery, a shutdown) and a warning the bench cannot return. They are written
//! from many threads at any moment to the one place they go, the worker's stderr (its log), so a
//! macro rather than a trait threaded into every slot, heart and reaper. Everything else the library
//! reports it returns, or tells a progress trait, and the commands say it.
//!
//! Why not `eprintln!`: stderr may be a pipe whose reader went away (`wf ... 2>&1 | head`, a
//! restarted journald); `eprintln!` panics then, and in the panic hook that panic becomes an abort.

use std::fmt;
use std::io::Write;

macro_rules! diag {
    ($($arg:tt)*) => {
        $crate::diag::write_stderr(format_args!($($arg)*))
    };
}
pub(crate) use diag;

/// What `diag!` calls: write the line, and ignore a failure, since there is nowhere left to tell.
pub(crate) fn write_stderr(line: fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
