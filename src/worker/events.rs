//! A worker's journal of its jobs: one line on stderr per event of a job (claimed, finished,
//! killed, requeued), as text or as JSON (`wf work --log-format`), so that the worker's log shows
//! what ran, where, for how long and how it ended.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::Shared;
use crate::diag::write_record;
use crate::queue::claim::Claimed;
use crate::queue::job::JobStatus;
use crate::queue::release::Why;
use crate::queue::retry::Retry;

/// What happened to a job in this worker.
#[derive(Debug, Clone, Copy)]
pub(super) enum JobEvent {
    Claimed,
    /// Its completion was recorded, `took` after the claim.
    Finished {
        status: JobStatus,
        took: Duration,
    },
    /// The worker stopped its processes: `timeout`, `cancel`, `lost` (no longer owned) or
    /// `shutdown` (the grace is over).
    Killed {
        reason: &'static str,
    },
    /// The worker put it back in the queue: a clean shutdown, or a job that cannot start here now.
    Requeued(Why),
    /// Its failure is followed by this retry, a new job.
    Retried(Retry),
}

/// Write one event of `job`, unless the worker is quiet.
pub(super) fn job_event(shared: &Shared, job: &Claimed, event: JobEvent) {
    if shared.options.quiet {
        return;
    }
    let name = &shared.options.name;
    let mut fields = Map::new();
    let (word, detail) = match event {
        JobEvent::Claimed => ("claimed", String::new()),
        JobEvent::Finished { status, took } => {
            fields.insert("status".to_string(), json!(status));
            fields.insert("duration_ms".to_string(), json!(took.as_millis() as u64));
            ("finished", format!(" {status} in {:.3} s", took.as_secs_f64()))
        }
        JobEvent::Killed { reason } => {
            fields.insert("reason".to_string(), json!(reason));
            ("killed", format!(" ({reason})"))
        }
        JobEvent::Requeued(why) => {
            fields.insert("reason".to_string(), json!(why.said()));
            ("requeued", format!(" ({})", why.said()))
        }
        JobEvent::Retried(retry) => {
            fields.insert("retry".to_string(), json!(retry.id));
            fields.insert("retry_number".to_string(), json!(retry.number));
            fields.insert("after_ms".to_string(), json!(retry.after.as_millis() as u64));
            let after = crate::output::duration(retry.after);
            ("retried", format!(" as job {} (retry {}) in {after}", retry.id, retry.number))
        }
    };
    for (key, value) in [
        ("worker", json!(name)),
        ("event", json!(word)),
        ("job", json!(job.id)),
        ("app", json!(job.app)),
        ("action", json!(job.action)),
        ("attempt", Value::from(job.attempt())),
    ] {
        fields.insert(key.to_string(), value);
    }
    write_record(
        format_args!(
            "worker {name}: job {} {}/{} attempt {}: {word}{detail}",
            job.id,
            job.app,
            job.action,
            job.attempt()
        ),
        fields,
    );
}
