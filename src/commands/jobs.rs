//! `wf jobs`, `wf show`, `wf result`, `wf logs`, `wf status`: reading jobs and the queue.

use std::time::Duration;

use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::{CommandResult, Ctx};
use crate::cli::{JobsArgs, LogsArgs, ResultArgs, ShowArgs};
use crate::error::Exit;
use crate::output::{Output, diag, pretty, rfc3339, rfc3339_or_null, time_cell};
use crate::queue::inspect::{self, JobView, LogEntry};
use crate::queue::job::{JobStatus, TriggerKind};

pub(super) fn jobs(ctx: &Ctx, args: JobsArgs) -> CommandResult {
    let mut client = ctx.connect()?;
    let jobs = inspect::list(&mut client, args.status, args.app.as_deref(), args.tag.as_deref(), args.limit)?;
    if ctx.out.json {
        ctx.out.json(&jobs.iter().map(JobDocument::from).collect::<Vec<_>>())?;
        return Ok(Exit::Ok);
    }
    let rows = jobs
        .iter()
        .map(|job| {
            vec![
                job.id.to_string(),
                job.status.to_string(),
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
        ctx.out.json(&JobDocument::from(&job))?;
        return Ok(Exit::Ok);
    }
    let compact = |value: &Option<Value>| value.as_ref().map_or("-".to_string(), Value::to_string);
    let text = |value: &Option<String>| value.clone().unwrap_or_else(|| "-".to_string());
    let rows = vec![
        ("id", job.id.to_string()),
        ("status", job.status.to_string()),
        ("action", format!("{}/{}", job.app, job.action)),
        ("commit", job.commit_sha.clone()),
        ("tag", job.tag.clone()),
        ("priority", job.priority.to_string()),
        ("trigger", job.trigger_kind.to_string()),
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

/// Print a job's outcome as `wf result` does, and return the matching exit.
pub(super) fn print_result(out: &Output, job: &JobView) -> CommandResult {
    let cancellation =
        || Cancellation { canceled_by: job.canceled_by.as_deref(), canceled_reason: job.canceled_reason.as_deref() };
    let (ending, exit) = match job.status {
        JobStatus::Success => (Some(Ending::Result(job.result.clone().unwrap_or(Value::Null))), Exit::Ok),
        JobStatus::Failure => (Some(Ending::Error(job.error.clone().unwrap_or(Value::Null))), Exit::JobFailed),
        JobStatus::Canceled => (Some(Ending::Canceled(cancellation())), Exit::JobFailed),
        JobStatus::Queued | JobStatus::Scheduled | JobStatus::Running => (None, Exit::NotFinished),
    };
    if out.json {
        let (result, error) = match &ending {
            Some(ending @ Ending::Result(_)) => (Some(ending), None),
            Some(ending) => (None, Some(ending)),
            None => (None, None),
        };
        out.json(&ResultDocument { id: job.id, status: job.status, result, error })?;
    } else if let Some(ending) = ending {
        out.line(&pretty(&ending)?)?;
    } else {
        diag!("job {} is {}: not finished (use --wait to wait for it)", job.id, job.status);
    }
    Ok(exit)
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

pub(super) fn status(ctx: &Ctx) -> CommandResult {
    let mut client = ctx.connect()?;
    let tags = inspect::status(&mut client, crate::config::zombie_timeout()?)?;
    if ctx.out.json {
        let document: Vec<TagDocument> = tags
            .iter()
            .map(|t| TagDocument {
                tag: &t.tag,
                queued: t.queued,
                scheduled: t.scheduled,
                running: t.running,
                zombies: t.zombies,
                oldest_wait_s: t.oldest_wait_s,
            })
            .collect();
        ctx.out.json(&document)?;
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

/// Everything about one job (SPEC: `wf show --json`); `wf jobs --json` lists these.
#[derive(Serialize)]
pub(super) struct JobDocument<'a> {
    id: Uuid,
    status: JobStatus,
    app: &'a str,
    action: &'a str,
    commit_sha: &'a str,
    tag: &'a str,
    priority: i32,
    trigger_kind: TriggerKind,
    input: &'a Value,
    result: &'a Option<Value>,
    error: &'a Option<Value>,
    worker: &'a Option<String>,
    restarts: i32,
    #[serde(serialize_with = "rfc3339")]
    created_at: DateTime<Utc>,
    #[serde(serialize_with = "rfc3339")]
    scheduled_for: DateTime<Utc>,
    #[serde(serialize_with = "rfc3339_or_null")]
    started_at: Option<DateTime<Utc>>,
    #[serde(serialize_with = "rfc3339_or_null")]
    completed_at: Option<DateTime<Utc>>,
    canceled_by: &'a Option<String>,
    canceled_reason: &'a Option<String>,
}

impl<'a> From<&'a JobView> for JobDocument<'a> {
    fn from(job: &'a JobView) -> JobDocument<'a> {
        JobDocument {
            id: job.id,
            status: job.status,
            app: &job.app,
            action: &job.action,
            commit_sha: &job.commit_sha,
            tag: &job.tag,
            priority: job.priority,
            trigger_kind: job.trigger_kind,
            input: &job.input,
            result: &job.result,
            error: &job.error,
            worker: &job.worker,
            restarts: job.restarts,
            created_at: job.created_at,
            scheduled_for: job.scheduled_for,
            started_at: job.started_at,
            completed_at: job.completed_at,
            canceled_by: &job.canceled_by,
            canceled_reason: &job.canceled_reason,
        }
    }
}

/// `wf result --json`: `{"id","status"}` and, once the job finished, its `result` or its `error`
/// (a canceled job's error is its cancellation).
#[derive(Serialize)]
struct ResultDocument<'a> {
    id: Uuid,
    status: JobStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Ending<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a Ending<'a>>,
}

/// How a finished job ended; without `--json`, `wf result` prints this alone.
#[derive(Serialize)]
#[serde(untagged)]
enum Ending<'a> {
    Result(Value),
    Error(Value),
    Canceled(Cancellation<'a>),
}

/// Who canceled a job, and why.
#[derive(Serialize)]
struct Cancellation<'a> {
    canceled_by: Option<&'a str>,
    canceled_reason: Option<&'a str>,
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

/// The queue of one tag (`wf status --json` lists them by tag).
#[derive(Serialize)]
struct TagDocument<'a> {
    tag: &'a str,
    queued: i64,
    scheduled: i64,
    running: i64,
    zombies: i64,
    oldest_wait_s: Option<f64>,
}
