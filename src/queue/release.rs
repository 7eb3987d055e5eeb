//! Release: a worker shutting down cleanly puts its running jobs back in the queue at once, and one
//! that cannot start a job now (its commit cannot be written from the database) puts it back for
//! later. Not a crash, so not a restart; gated by ownership like a completion.

use anyhow::Result;
use postgres::Client;
use uuid::Uuid;

use super::CHANNEL_ENQUEUED;
use super::complete;
use super::job::JobStatus;
use super::logs::{self, LogLine};

/// Why a worker puts back a job it claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// A clean shutdown: due again at once, in the place in the queue it had (its `scheduled_for`
    /// kept), so that a restart of the workers sends no job behind those enqueued after it.
    Shutdown,
    /// A clean shutdown came before the job started (claimed as the worker began to stop, or
    /// for a slot that was to run it next): due again at once, in its place, unstarted.
    ShutdownUnstarted,
    /// The job could not start on this worker now (its commit could not be written from the
    /// database): due again after this wait, so that a worker meeting the same trouble does not
    /// claim it again and again.
    CannotStart(std::time::Duration),
    /// The warm runner it was handed to ended before it took the job (what an earlier job left
    /// running ended it): due again at once, for a fresh runner.
    RunnerEnded,
    /// The claim's answer never reached the worker, which never started the job: due again at once.
    Unanswered,
}

impl Why {
    /// As the worker's journal and the job's logs say it.
    pub(crate) fn said(self) -> &'static str {
        match self {
            Why::Shutdown | Why::ShutdownUnstarted => "worker shutting down",
            Why::CannotStart(_) => "the job could not start here now",
            Why::RunnerEnded => "the warm runner ended before it took the job",
            Why::Unanswered => "the worker's claim of the job went unanswered",
        }
    }
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// Back in the queue.
    Requeued,
    /// It had a cancel mark: completed as canceled instead.
    Canceled,
    /// The claim no longer owned the job: nothing was written.
    NotOurs,
}

/// Put a job back in the queue (not a crash: restarts unchanged; its next run is the next attempt,
/// but for a job no runner took), with the attempt's last log lines in the same transaction. Gated
/// by ownership; a job with a cancel mark is completed as canceled instead.
pub(crate) fn release(
    client: &mut Client,
    job_id: Uuid,
    claim: &str,
    attempt: i32,
    lines: &[LogLine],
    why: Why,
) -> Result<Released> {
    let mut tx = client.transaction()?;
    logs::append_in(&mut tx, job_id, claim, attempt, lines)?;
    let row = tx.query_opt(
        "SELECT canceled_by IS NOT NULL, tag FROM job_queue WHERE job_id = $1 AND worker = $2 FOR UPDATE",
        &[&job_id, &claim],
    )?;
    let Some(row) = row else {
        tx.rollback()?;
        return Ok(Released::NotOurs);
    };
    let released = if row.get::<_, bool>(0) {
        complete::finish_locked(&mut tx, &[job_id], JobStatus::Canceled, None, None, None)?;
        Released::Canceled
    } else {
        // A job whose claim never reached a runner that took it keeps its attempt number: its next
        // run is the attempt this claim would have been. Otherwise the next run is a new attempt.
        // Either keeps its place in the queue, but for one that cannot start here now: due after
        // `wait`.
        let (started, wait, note) = match why {
            Why::Shutdown => (true, None, format!("{}: the job was stopped and put back in the queue", why.said())),
            Why::ShutdownUnstarted | Why::RunnerEnded | Why::Unanswered => {
                (false, None, format!("{}: the job is put back in the queue, unstarted", why.said()))
            }
            Why::CannotStart(wait) => {
                let wait = wait.as_secs_f64();
                (true, Some(wait), format!("{}: the job is put back in the queue, due in {wait:.0} s", why.said()))
            }
        };
        logs::note(&mut tx, job_id, attempt, &note)?;
        tx.execute(
            "UPDATE job_queue SET running = false, worker = NULL, started_at = NULL, ping = NULL, window_s = NULL,
                                 scheduled_for = coalesce(now() + make_interval(secs => $3), scheduled_for),
                                 releases = releases + CASE WHEN $4 THEN 1 ELSE 0 END
              WHERE job_id = $1 AND worker = $2",
            &[&job_id, &claim, &wait, &started],
        )?;
        tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL_ENQUEUED, &row.get::<_, String>(1)])?;
        Released::Requeued
    };
    tx.commit()?;
    Ok(released)
}

/// Put back the jobs that `claims` hold (running, owned by one of them), each as `release` does for
/// `Why::Unanswered`: claims whose statement committed after its worker gave up waiting for the
/// answer. Returns each job put back (or completed as canceled) and its claim. The running rows
/// are read by their partial index: as few as the slots of every worker.
pub(crate) fn release_unanswered(client: &mut Client, claims: &[String]) -> Result<Vec<(Uuid, String)>> {
    let held = client.query(
        "SELECT job_id, worker, restarts + releases + 1 FROM job_queue WHERE running AND worker = ANY($1)",
        &[&claims],
    )?;
    let mut released = Vec::new();
    for row in held {
        let (job_id, claim): (Uuid, String) = (row.get(0), row.get(1));
        if release(client, job_id, &claim, row.get(2), &[], Why::Unanswered)? != Released::NotOurs {
            released.push((job_id, claim));
        }
    }
    Ok(released)
}
