//! `wf logs ID [--follow] [--tail N] [--since D] [--timestamps]`: a job's output, attempt by
//! attempt.

use std::cell::{Cell, RefCell};
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::SeqCst;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Local, SecondsFormat, Utc};
use serde::Serialize;
use signal_hook::consts::{SIGINT, SIGTERM};

use super::{CommandResult, Ctx};
use crate::cli::LogsArgs;
use crate::error::Exit;
use crate::output::{escape_controls, rfc3339};
use crate::queue::inspect::{self, Followed, LogEntry};
use crate::queue::job::JobStatus;

pub(super) fn run(ctx: &Ctx, args: LogsArgs) -> CommandResult {
    let database = ctx.database()?;
    let mut client = database.connect()?;
    let id = inspect::resolve_id(&mut client, &args.id)?;
    let job = inspect::show_existing(&mut client, id)?;
    // Each line is written as it is read: a job may have millions. A follower's lines leave the
    // buffer as they come (the plain lines: stdout is line-buffered).
    let json = RefCell::new(ctx.out.json.then(|| ctx.out.json_array_writer()));
    let following = Cell::new(false);
    // A follower with --json stopped by a signal ends its array (at the next line, or the next look
    // within half a second): what was written stays one JSON document.
    let signaled = Arc::new(AtomicUsize::new(0));
    if args.follow && ctx.out.json {
        stop_on_signals(&signaled)?;
    }
    let stopped = || signaled.load(SeqCst) != 0;
    // On a terminal the action's control characters are shown, not acted on; into a pipe or a
    // file, each line is written as the action wrote it.
    let terminal = std::io::stdout().is_terminal();
    let mut attempt = 0;
    let mut show = |entry: LogEntry| -> Result<()> {
        if stopped() {
            bail!("stopped by a signal");
        }
        if let Some(array) = json.borrow_mut().as_mut() {
            let document =
                LogDocument { attempt: entry.attempt, stream: entry.stream, line: entry.line, time: entry.created_at };
            array.push(&document)?;
            return if following.get() { array.flush() } else { Ok(()) };
        }
        if entry.attempt != attempt {
            attempt = entry.attempt;
            ctx.out.info(&format!("--- attempt {attempt} ---"));
        }
        let time = match args.timestamps {
            true => {
                format!("{} ", entry.created_at.with_timezone(&Local).to_rfc3339_opts(SecondsFormat::Millis, false))
            }
            false => String::new(),
        };
        let line = if terminal { escape_controls(&entry.line) } else { entry.line.as_str().into() };
        // A line of stdout goes unmarked, unless it starts as a mark does: then it is marked too,
        // so that a line starting with `[wf]` is always wf's own, never an action's forgery.
        match entry.stream.as_str() {
            "stdout" if !line.starts_with('[') => ctx.out.line(&format!("{time}{line}")),
            stream => ctx.out.line(&format!("{time}[{stream}] {line}")),
        }
    };
    let last = inspect::last_logs(&mut client, id, args.tail, args.since, &mut show);
    if stopped() {
        return interrupted(json.into_inner(), &signaled);
    }
    let last = last?;
    if last.is_none() && !args.follow && args.tail.is_none() && args.since.is_none() {
        ctx.out.info(&format!("job {id} has printed nothing ({})", job.status));
    }
    if args.follow {
        if let Some(array) = json.borrow_mut().as_mut() {
            array.flush()?;
        }
        following.set(true);
        let after = match last {
            Some(last) => last,
            // Nothing shown yet: from the start, unless --tail 0 or --since asked for nothing older.
            None if args.tail.is_some() || args.since.is_some() => inspect::last_log_id(&mut client, id)?,
            None => 0,
        };
        let followed = inspect::follow_logs(&mut client, &|| database.connect(), id, after, &mut show, &stopped)?;
        if followed == Followed::Stopped {
            return interrupted(json.into_inner(), &signaled);
        }
        // How it ended, which the lines alone do not say (a cancel writes none), and where a retry
        // goes on.
        let ended = inspect::show_existing(&mut client, id)?.status;
        let retry =
            inspect::retried_as(&mut client, id)?.map_or(String::new(), |retry| format!(", retried as {retry}"));
        ctx.out.info(&format!("job {id} ended: {ended}{retry}"));
        if let Some(array) = json.into_inner() {
            array.finish()?;
        }
        // The exit says how it ended, as `wf result`'s does: with --json, stderr says nothing.
        return Ok(match ended {
            JobStatus::Failure | JobStatus::Canceled => Exit::JobFailed,
            _ => Exit::Ok,
        });
    }
    if let Some(array) = json.into_inner() {
        array.finish()?;
    }
    Ok(Exit::Ok)
}

/// Have SIGINT and SIGTERM set `signaled` to their number, unless the signal was ignored when wf
/// started (a follower in the background of a script); a second one ends the process at once (a
/// look may be waiting for a database that is away).
fn stop_on_signals(signaled: &Arc<AtomicUsize>) -> Result<()> {
    for signal in [SIGINT, SIGTERM] {
        // SAFETY: sigaction only reads the disposition into a zeroed structure of its own.
        let ignored = unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            libc::sigaction(signal, std::ptr::null(), &mut current) == 0 && current.sa_sigaction == libc::SIG_IGN
        };
        if ignored {
            continue;
        }
        let signaled = Arc::clone(signaled);
        let handler = move || {
            if signaled.swap(signal as usize, SeqCst) != 0 {
                signal_hook::low_level::exit(128 + signal);
            }
        };
        // SAFETY: the handler swaps an atomic and may call _exit: both async-signal-safe.
        unsafe { signal_hook::low_level::register(signal, handler) }.context("installing signal handlers")?;
    }
    Ok(())
}

/// End the array a signal cut short; exit as the signal would have ended wf.
fn interrupted(array: Option<crate::output::JsonArray<impl std::io::Write>>, signaled: &AtomicUsize) -> CommandResult {
    if let Some(array) = array {
        array.finish()?;
    }
    Ok(Exit::Interrupted(signaled.load(SeqCst) as i32))
}

/// One log line (`wf logs --json` lists them in order).
#[derive(Serialize)]
struct LogDocument {
    attempt: i32,
    stream: String,
    line: String,
    #[serde(serialize_with = "rfc3339")]
    time: DateTime<Utc>,
}
