//! Release: a worker shutting down cleanly puts its running jobs back in the queue at once. Not a
//! crash, so not a restart; gated by ownership like a completion.

use anyhow::Result;
use postgres::Client;
use uuid::Uuid;

use super::CHANNEL_ENQUEUED;
use super::complete;
use super::job::JobStatus;
use super::logs::{self, LogLine};

/// Put a job back in the queue at once because its worker is shutting down cleanly (not a crash:
/// restarts unchanged; its next run is the next attempt), with the attempt's last log lines in the same transaction. Gated by
/// ownership; a job with a cancel mark is completed as canceled instead. Returns false when the
/// claim no longer owned the job (nothing is written then).
pub(crate) fn release(client: &mut Client, job_id: Uuid, claim: &str, attempt: i32, lines: &[LogLine]) -> Result<bool> {
    let mut tx = client.transaction()?;
    logs::append_in(&mut tx, job_id, claim, attempt, lines)?;
    let row = tx.query_opt(
        "SELECT canceled_by IS NOT NULL, tag FROM job_queue WHERE job_id = $1 AND worker = $2 FOR UPDATE",
        &[&job_id, &claim],
    )?;
    let Some(row) = row else {
        tx.rollback()?;
        return Ok(false);
    };
    if row.get::<_, bool>(0) {
        complete::finish_locked(&mut tx, &[job_id], JobStatus::Canceled, None, None, None)?;
    } else {
        logs::note(&mut tx, job_id, attempt, "worker shutting down: the job was stopped and put back in the queue")?;
        tx.execute(
            "UPDATE job_queue SET running = false, worker = NULL, started_at = NULL, ping = NULL, window_s = NULL,
                                 scheduled_for = now(), releases = releases + 1
              WHERE job_id = $1 AND worker = $2",
            &[&job_id, &claim],
        )?;
        tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL_ENQUEUED, &row.get::<_, String>(1)])?;
    }
    tx.commit()?;
    Ok(true)
}
