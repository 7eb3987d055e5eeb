//! `wf show ID`: everything about one job.

use serde_json::Value;

use super::render::{JobDocument, ShownJob};
use super::{CommandResult, Ctx};
use crate::cli::ShowArgs;
use crate::error::Exit;
use crate::output::{escape_c1, escape_controls, time_cell};
use crate::queue::inspect;

pub(super) fn run(ctx: &Ctx, args: ShowArgs) -> CommandResult {
    let mut client = ctx.connect()?;
    let id = inspect::resolve_id(&mut client, &args.id)?;
    let job = inspect::show_existing(&mut client, id)?;
    let retried_as = inspect::retried_as(&mut client, id)?;
    if ctx.out.json {
        ctx.out.json(&ShownJob { job: JobDocument::from(&job), retried_as })?;
        return Ok(Exit::Ok);
    }
    let compact =
        |value: &Option<Value>| value.as_ref().map_or("-".to_string(), |value| shown(escape_c1(value.to_string())));
    // What operators and actions wrote (a cancel's reason, a key, a worker's name of an older wf)
    // is shown, not acted on by the terminal.
    let text = |value: &Option<String>| {
        value.as_deref().map_or("-".to_string(), |text| shown(escape_controls(text).into_owned()))
    };
    let rows = vec![
        ("id", job.id.to_string()),
        ("status", job.status.to_string()),
        ("action", format!("{}/{}", job.app, job.action)),
        ("commit", job.commit_sha.clone()),
        ("tag", job.tag.clone()),
        ("priority", job.priority.to_string()),
        ("trigger", job.trigger_kind.to_string()),
        ("input", shown(escape_c1(job.input.to_string()))),
        ("result", compact(&job.result)),
        ("error", compact(&job.error)),
        ("worker", text(&job.worker)),
        ("restarts", job.restarts.to_string()),
        ("attempts", job.attempts.to_string()),
        ("created", time_cell(Some(job.created_at))),
        ("scheduled for", time_cell(Some(job.scheduled_for))),
        ("started", time_cell(job.started_at)),
        ("completed", time_cell(job.completed_at)),
        ("canceled by", text(&job.canceled_by)),
        ("cancel reason", text(&job.canceled_reason)),
        ("schedule", text(&job.schedule)),
        ("rerun of", job.rerun_of.map_or("-".to_string(), |id| id.to_string())),
        ("retry of", job.retry_of.map_or("-".to_string(), |id| id.to_string())),
        ("retried as", retried_as.map_or("-".to_string(), |id| id.to_string())),
        ("key", text(&job.key)),
    ];
    ctx.out.table(&["field", "value"], rows.into_iter().map(|(k, v)| vec![k.to_string(), v]).collect())?;
    Ok(Exit::Ok)
}

/// The most of a value a table shows.
const SHOWN_BYTES: usize = 2000;

/// A value as a table shows it: its beginning, and how long it is, when it is long (the table of a
/// 50 MB input took a minute to lay out, and filled the terminal).
fn shown(text: String) -> String {
    if text.len() <= SHOWN_BYTES {
        return text;
    }
    let mut end = SHOWN_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all: --json shows it whole)", &text[..end], text.len())
}
