//! What several commands print the same way: a job (`wf jobs`, `wf show`), a job enqueued (`wf
//! enqueue`, `wf rerun`) and how a job ended (`wf result`, `wf enqueue --wait`).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::CommandResult;
use crate::diag::diag;
use crate::error::Exit;
use crate::output::{Output, pretty, rfc3339, rfc3339_or_null};
use crate::queue::enqueue::Enqueued;
use crate::queue::inspect::JobView;
use crate::queue::job::{JobStatus, TriggerKind};

/// Print a job's outcome as `wf result` does, and return the matching exit. `waited`: the command
/// waited for it (`--wait`) until its `--timeout`.
pub(super) fn print_result(out: &Output, job: &JobView, waited: bool) -> CommandResult {
    let (ending, exit) = match job.status {
        JobStatus::Success => (Some(Ending::Result(job.result.clone().unwrap_or(Value::Null))), Exit::Ok),
        JobStatus::Failure => (Some(Ending::Error(job.error.clone().unwrap_or(Value::Null))), Exit::JobFailed),
        JobStatus::Canceled => {
            let cancellation = Cancellation {
                canceled_by: job.canceled_by.as_deref(),
                canceled_reason: job.canceled_reason.as_deref(),
            };
            (Some(Ending::Canceled(cancellation)), Exit::JobFailed)
        }
        JobStatus::Queued | JobStatus::Scheduled | JobStatus::Running => (None, Exit::NotFinished),
    };
    let written = if out.json {
        let (result, error) = match &ending {
            Some(ending @ Ending::Result(_)) => (Some(ending), None),
            Some(ending) => (None, Some(ending)),
            None => (None, None),
        };
        out.json(&ResultDocument { id: job.id, status: job.status, result, error })
    } else if let Some(ending) = ending {
        pretty(&ending).and_then(|text| out.line(&text))
    } else {
        if waited {
            diag!("job {} is {}: not finished within --timeout", job.id, job.status);
        } else {
            diag!("job {} is {}: not finished (use --wait to wait for it)", job.id, job.status);
        }
        Ok(())
    };
    match written {
        // The reader left early (`wf result ID | head -1`): the job's outcome is still the exit
        // code, which a script with pipefail reads.
        Err(error) if crate::error::is_broken_pipe(&error) => Ok(exit),
        written => written.map(|()| exit).map_err(Into::into),
    }
}

/// `wf show --json` and each job of `wf jobs --json`: the job, and the retry that followed its
/// failure.
#[derive(Serialize)]
pub(super) struct ShownJob<'a> {
    #[serde(flatten)]
    pub job: JobDocument<'a>,
    pub retried_as: Option<Uuid>,
}

/// Everything about one job (SPEC: `wf show --json`).
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
    /// Its runs so far, the one under way included.
    attempts: i32,
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
    /// The schedule that enqueued it.
    schedule: &'a Option<String>,
    rerun_of: Option<Uuid>,
    retry_of: Option<Uuid>,
    /// Its idempotency key (`wf enqueue --key`).
    key: &'a Option<String>,
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
            attempts: job.attempts,
            created_at: job.created_at,
            scheduled_for: job.scheduled_for,
            started_at: job.started_at,
            completed_at: job.completed_at,
            canceled_by: &job.canceled_by,
            canceled_reason: &job.canceled_reason,
            schedule: &job.schedule,
            rerun_of: job.rerun_of,
            retry_of: job.retry_of,
            key: &job.key,
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

/// A job the enqueue path created (SPEC: `{"id","app","action","tag","priority","commit_sha",
/// "scheduled_for","trigger_kind"}`), or found by its key (`existing`).
#[derive(Serialize)]
pub(super) struct EnqueuedDocument<'a> {
    id: Uuid,
    app: &'a str,
    action: &'a str,
    tag: &'a str,
    priority: i32,
    commit_sha: &'a str,
    #[serde(serialize_with = "rfc3339")]
    scheduled_for: DateTime<Utc>,
    trigger_kind: TriggerKind,
    existing: bool,
}

impl<'a> From<&'a Enqueued> for EnqueuedDocument<'a> {
    fn from(job: &'a Enqueued) -> EnqueuedDocument<'a> {
        EnqueuedDocument {
            id: job.id,
            app: &job.app,
            action: &job.action,
            tag: &job.tag,
            priority: job.priority,
            commit_sha: &job.commit_sha,
            scheduled_for: job.scheduled_for,
            trigger_kind: job.trigger_kind,
            existing: job.existing,
        }
    }
}
