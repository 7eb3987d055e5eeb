//! `wf logs ID [--follow]`: a job's output, attempt by attempt.

use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::args::parse_id;
use super::{CommandResult, Ctx};
use crate::cli::LogsArgs;
use crate::error::Exit;
use crate::output::rfc3339;
use crate::queue::inspect::{self, LogEntry};

pub(super) fn run(ctx: &Ctx, args: LogsArgs) -> CommandResult {
    let id = parse_id(&args.id)?;
    let mut client = ctx.connect()?;
    inspect::show_existing(&mut client, id)?;
    let mut all = Vec::new();
    let mut attempt = 0;
    let mut show = |entries: &[LogEntry]| -> Result<()> {
        for entry in entries {
            if ctx.out.json {
                all.push(LogDocument {
                    attempt: entry.attempt,
                    stream: entry.stream.clone(),
                    line: entry.line.clone(),
                    time: entry.created_at,
                });
                continue;
            }
            if entry.attempt != attempt {
                attempt = entry.attempt;
                ctx.out.info(&format!("--- attempt {attempt} ---"));
            }
            match entry.stream.as_str() {
                "stdout" => ctx.out.line(&entry.line)?,
                stream => ctx.out.line(&format!("[{stream}] {}", entry.line))?,
            }
        }
        Ok(())
    };
    if args.follow {
        inspect::follow_logs(&mut client, id, &mut show)?;
    } else {
        show(&inspect::logs(&mut client, id, 0)?)?;
    }
    if ctx.out.json {
        ctx.out.json(&all)?;
    }
    Ok(Exit::Ok)
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
