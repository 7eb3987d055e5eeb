//! `wf jobs`, `wf show`, `wf result`, `wf logs`, `wf status`: reading jobs and the queue.

use std::time::Duration;

use anyhow::Result;
use serde_json::{Value, json};

use super::{CommandResult, Ctx};
use crate::cli::{JobsArgs, LogsArgs, ResultArgs, ShowArgs};
use crate::error::Exit;
use crate::output::{Output, diag, time_cell};
use crate::queue::inspect::{self, JobView, LogEntry};

pub(super) fn jobs(ctx: &Ctx, args: JobsArgs) -> CommandResult {
    let mut client = ctx.connect()?;
    let status = args.status.map(|s| s.as_str());
    let jobs = inspect::list(&mut client, status, args.app.as_deref(), args.tag.as_deref(), args.limit)?;
    if ctx.out.json {
        ctx.out.json(&Value::Array(jobs.iter().map(JobView::to_json).collect()))?;
        return Ok(Exit::Ok);
    }
    let rows = jobs
        .iter()
        .map(|job| {
            vec![
                job.id.to_string(),
                job.status.clone(),
                format!("{}/{}", job.app, job.action),
                job.tag.clone(),
                job.priority.to_string(),
                job.restarts.to_string(),
                time_cell(Some(job.created_at)),
                time_cell(job.completed_at),
            ]
        })
        .collect();
    ctx.out.table(&["id", "status", "action", "tag", "priority", "restarts", "created", "completed"], rows)?;
    Ok(Exit::Ok)
}

pub(super) fn show(ctx: &Ctx, args: ShowArgs) -> CommandResult {
    let id = inspect::parse_id(&args.id)?;
    let mut client = ctx.connect()?;
    let job = inspect::show_existing(&mut client, id)?;
    if ctx.out.json {
        ctx.out.json(&job.to_json())?;
        return Ok(Exit::Ok);
    }
    let compact = |value: &Option<Value>| value.as_ref().map_or("-".to_string(), Value::to_string);
    let text = |value: &Option<String>| value.clone().unwrap_or_else(|| "-".to_string());
    let rows = vec![
        ("id", job.id.to_string()),
        ("status", job.status.clone()),
        ("action", format!("{}/{}", job.app, job.action)),
        ("commit", job.commit_sha.clone()),
        ("tag", job.tag.clone()),
        ("priority", job.priority.to_string()),
        ("trigger", job.trigger_kind.clone()),
        ("input", job.input.to_string()),
        ("result", compact(&job.result)),
        ("error", compact(&job.error)),
        ("worker", text(&job.worker)),
        ("restarts", job.restarts.to_string()),
        ("created", time_cell(Some(job.created_at))),
        ("scheduled for", time_cell(Some(job.scheduled_for))),
        ("started", time_cell(job.started_at)),
        ("completed", time_cell(job.completed_at)),
        ("canceled by", text(&job.canceled_by)),
        ("cancel reason", text(&job.canceled_reason)),
    ];
    ctx.out.table(&["field", "value"], rows.into_iter().map(|(k, v)| vec![k.to_string(), v]).collect())?;
    Ok(Exit::Ok)
}

pub(super) fn result(ctx: &Ctx, args: ResultArgs) -> CommandResult {
    let id = inspect::parse_id(&args.id)?;
    let mut client = ctx.connect()?;
    let job = if args.wait {
        inspect::wait_until_finished(&mut client, id, args.timeout)?
    } else {
        inspect::show_existing(&mut client, id)?
    };
    print_result(&ctx.out, &job)
}

/// Print a job's outcome as `wf result` does, and return the matching exit outcome.
pub(super) fn print_result(out: &Output, job: &JobView) -> CommandResult {
    let cancel = json!({"canceled_by": job.canceled_by, "canceled_reason": job.canceled_reason});
    let (document, outcome) = match job.status.as_str() {
        "success" => (job.result.clone().unwrap_or(Value::Null), Exit::Ok),
        "failure" => (job.error.clone().unwrap_or(Value::Null), Exit::JobFailed),
        "canceled" => (cancel.clone(), Exit::JobFailed),
        _ => (Value::Null, Exit::NotFinished),
    };
    if out.json {
        let mut full = json!({"id": job.id, "status": job.status});
        match job.status.as_str() {
            "success" => full["result"] = document,
            "failure" => full["error"] = document,
            "canceled" => full["error"] = cancel,
            _ => {}
        }
        out.json(&full)?;
    } else if outcome == Exit::NotFinished {
        diag!("job {} is {}: not finished (use --wait to wait for it)", job.id, job.status);
    } else {
        out.line(&serde_json::to_string_pretty(&document)?)?;
    }
    Ok(outcome)
}

pub(super) fn logs(ctx: &Ctx, args: LogsArgs) -> CommandResult {
    let id = inspect::parse_id(&args.id)?;
    let mut client = ctx.connect()?;
    inspect::show_existing(&mut client, id)?;
    let mut all = Vec::new();
    let mut attempt = 0;
    let mut show = |entries: &[LogEntry]| -> Result<()> {
        for entry in entries {
            if ctx.out.json {
                all.push(json!({
                    "attempt": entry.attempt, "stream": entry.stream, "line": entry.line,
                    "time": crate::output::time_json(Some(entry.created_at)),
                }));
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
        ctx.out.json(&Value::Array(all))?;
    }
    Ok(Exit::Ok)
}

pub(super) fn status(ctx: &Ctx) -> CommandResult {
    let mut client = ctx.connect()?;
    let tags = inspect::status(&mut client, crate::config::zombie_timeout()?)?;
    if ctx.out.json {
        let document: Vec<Value> = tags
            .iter()
            .map(|t| {
                json!({"tag": t.tag, "queued": t.queued, "scheduled": t.scheduled, "running": t.running,
                       "zombies": t.zombies, "oldest_wait_s": t.oldest_wait_s})
            })
            .collect();
        ctx.out.json(&Value::Array(document))?;
        return Ok(Exit::Ok);
    }
    let rows = tags
        .iter()
        .map(|t| {
            vec![
                t.tag.clone(),
                t.queued.to_string(),
                t.scheduled.to_string(),
                t.running.to_string(),
                t.zombies.to_string(),
                t.oldest_wait_s
                    .map_or("-".to_string(), |s| humantime::format_duration(Duration::from_secs(s as u64)).to_string()),
            ]
        })
        .collect();
    ctx.out.table(&["tag", "queued", "scheduled", "running", "zombies", "oldest wait"], rows)?;
    Ok(Exit::Ok)
}
