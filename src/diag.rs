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
//!
//! A worker may write its lines as JSON (`wf work --log-format json`): then every line, its own
//! and the final `error:` alike, is one JSON object with its time, so that a log collector never
//! meets a line it cannot parse.

use std::fmt;
use std::io::Write;
use std::sync::OnceLock;

use chrono::{SecondsFormat, Utc};
use serde_json::{Map, Value};

macro_rules! diag {
    ($($arg:tt)*) => {
        $crate::diag::write_stderr(format_args!($($arg)*))
    };
}
pub(crate) use diag;

/// How lines are written on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogFormat {
    /// One line of text each.
    Text,
    /// One JSON object per line: `time`, then `message` or the fields of an event.
    Json,
}

static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Decided once, by the command (`wf work --log-format`), before its first line.
pub(crate) fn set_format(format: LogFormat) {
    let _ = FORMAT.set(format);
}

fn format() -> LogFormat {
    FORMAT.get().copied().unwrap_or(LogFormat::Text)
}

/// What `diag!` calls: write the line, and ignore a failure, since there is nowhere left to tell.
pub(crate) fn write_stderr(line: fmt::Arguments<'_>) {
    match format() {
        LogFormat::Text => {
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        }
        LogFormat::Json => {
            let mut fields = Map::new();
            fields.insert("message".to_string(), Value::String(line.to_string()));
            write_json(fields);
        }
    }
}

/// A line with fields: `text` as text, or the fields (and the time) as JSON.
pub(crate) fn write_record(text: fmt::Arguments<'_>, fields: Map<String, Value>) {
    match format() {
        LogFormat::Text => write_stderr(text),
        LogFormat::Json => write_json(fields),
    }
}

fn write_json(mut fields: Map<String, Value>) {
    let time = Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true);
    fields.insert("time".to_string(), Value::String(time));
    let _ = writeln!(std::io::stderr().lock(), "{}", Value::Object(fields));
}
