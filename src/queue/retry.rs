//! Retries on failure, opt-in per action (`"retries"` in windforce.json, pinned on the job): a
//! failed attempt's completion and the job that retries it commit in one transaction, so a failure
//! is never recorded without its retry nor retried without being recorded. The retry is a new job
//! through the single enqueue path, pinned exactly as the failed job (same commit, input, tag,
//! priority, trigger kind), recording `retry_of`; the failed job's completion is what it would be
//! without retries. Only failures a worker records are retried: not a cancel (nor a failure of a job
//! an operator asked to cancel), not a job its workers kept dying on (the reaper's
//! `RestartLimitExceeded`).

use std::time::Duration;

use anyhow::Result;
use serde_json::Value;
use uuid::Uuid;

use super::complete::{self, Completion, Recorded};
use super::enqueue::{self, Origin, Pin, Request, ScheduleFire, When};
use super::job::TriggerKind;
use crate::db::Session;

/// The retry enqueued after a failure.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retry {
    pub id: Uuid,
    /// Which retry of the first job it is (1 for the first).
    pub number: i32,
    pub after: Duration,
}

/// Complete a failed attempt and, when its job has retries left, enqueue the next retry, in one
/// transaction. Fenced: nothing is written.
pub(crate) fn complete_failure(session: &mut Session, completion: &Completion) -> Result<(Recorded, Option<Retry>)> {
    let mut tx = session.client().transaction()?;
    if complete::complete_in(&mut tx, completion)? == Recorded::Fenced {
        tx.rollback()?;
        return Ok((Recorded::Fenced, None));
    }
    // The n-th retry waits backoff * 2^(n-1), at most max_backoff. A job an operator asked to
    // cancel is not retried, also when it failed on its own before its worker saw the mark: the
    // completion just recorded keeps the mark. Nor a run of a schedule paused or removed while it
    // ran: a pause withdraws the retries waiting, and one enqueued after it would run all the same.
    // The schedule's row is locked for that (FOR SHARE): a pause or a removal committing meanwhile is
    // waited for and seen; one that comes after waits for this retry, and withdraws it.
    let left = tx.query_opt(
        "SELECT app_key, action_key, input, priority, trigger_kind, retry_number + 1,
                least(retry_backoff_s * power(2, retry_number), retry_max_backoff_s), schedule_name, no_overlap
           FROM job
          WHERE id = $1 AND retry_max > retry_number
            AND NOT EXISTS (SELECT FROM job_completed c WHERE c.job_id = job.id AND c.canceled_by IS NOT NULL)
            AND (schedule_name IS NULL
                 OR EXISTS (SELECT FROM schedule s WHERE s.name = job.schedule_name AND s.enabled FOR SHARE))",
        &[&completion.job_id],
    )?;
    let mut retry = None;
    if let Some(row) = left {
        let (app, action): (String, String) = (row.get(0), row.get(1));
        let number: i32 = row.get(5);
        let after = Duration::try_from_secs_f64(row.get::<_, f64>(6).max(0.0)).unwrap_or(Duration::ZERO);
        // A retry of a schedule's run is a run of that schedule (not a fire time of its own): an
        // overlap check counts it, and a pause or a removal withdraws it while it waits.
        let schedule_name: Option<String> = row.get(7);
        let request = Request {
            schedule: schedule_name.as_deref().map(|name| ScheduleFire { name, no_overlap: row.get(8) }),
            priority: row.get(3),
            when: When::In(after),
            trigger_kind: row.get::<_, TriggerKind>(4),
            pin: Pin::Job(completion.job_id),
            origin: Origin::RetryOf { job: completion.job_id, number },
            ..Request::new(&app, &action, vec![row.get::<_, Value>(2)])
        };
        let enqueued = enqueue::enqueue(&mut tx, &request)?;
        retry = enqueued.first().map(|job| Retry { id: job.id, number, after });
    }
    if crate::fault::at("failure-stalls-before-commit") {
        // As a link cut before COMMIT leaves it: the transaction open, the job's row locked.
        std::thread::sleep(Duration::from_secs(3600));
    }
    tx.commit()?;
    Ok((Recorded::Completed, retry))
}
