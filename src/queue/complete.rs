//! Completion: all or nothing, gated by ownership.

use anyhow::Result;
use postgres::{Client, Transaction};
use serde_json::Value;
use uuid::Uuid;

use super::CHANNEL_COMPLETED;
use super::job::JobStatus;
use super::logs::{self, LogLine};

/// A worker's completion of one attempt.
#[derive(Debug, Clone)]
pub(crate) struct Completion {
    pub job_id: Uuid,
    pub claim: String,
    pub attempt: i32,
    pub status: JobStatus,
    pub result: Option<Value>,
    pub error: Option<Value>,
    /// The last lines of output, flushed inside the completion transaction.
    pub logs: Vec<LogLine>,
}

/// Whether the completion was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recorded {
    Completed,
    /// The claim no longer owned the job (reaped, or completed elsewhere): nothing recorded.
    Fenced,
}

/// One transaction: the ownership gate (`DELETE FROM job_queue WHERE job_id=$1 AND worker=$2`;
/// 0 rows means skip), the final log flush, the completion record carrying what the queue row
/// knew (worker, started_at, restarts, cancel fields), the runtime row removed, and a notification
/// for waiters. If a result is recorded, the queue row is gone; if the queue row remains, there is
/// no result.
pub(crate) fn complete(client: &mut Client, completion: &Completion) -> Result<Recorded> {
    let mut tx = client.transaction()?;
    logs::append(&mut tx, completion.job_id, &completion.claim, completion.attempt, &completion.logs)?;
    let recorded = tx.query_opt(
        "WITH gate AS (
             DELETE FROM job_queue WHERE job_id = $1 AND worker = $2
             RETURNING job_id, worker, started_at, restarts, canceled_by, canceled_reason
         ),
         runtime AS (
             DELETE FROM job_runtime WHERE job_id IN (SELECT job_id FROM gate)
         )
         INSERT INTO job_completed (job_id, status, result, error, worker, started_at, restarts,
                                    canceled_by, canceled_reason)
         SELECT job_id, $3, $4, $5, worker, started_at, restarts, canceled_by, canceled_reason
           FROM gate
         RETURNING job_id",
        &[&completion.job_id, &completion.claim, &completion.status.as_str(), &completion.result, &completion.error],
    )?;
    if recorded.is_none() {
        tx.rollback()?;
        return Ok(Recorded::Fenced);
    }
    notify_completed(&mut tx, &[completion.job_id])?;
    tx.commit()?;
    Ok(Recorded::Completed)
}

/// After a completion whose commit acknowledgement was lost, the gate finds no row: the record
/// tells whether our own commit landed.
pub(crate) fn completed_by(client: &mut Client, job_id: Uuid, claim: &str) -> Result<bool> {
    let row = client.query_opt("SELECT 1 FROM job_completed WHERE job_id = $1 AND worker = $2", &[&job_id, &claim])?;
    Ok(row.is_some())
}

/// Complete queue rows the caller has already locked (cancel, reaper), keeping what each row
/// knew; the cancel fields given are used where the row has none.
pub(crate) fn finish_locked(
    tx: &mut Transaction<'_>,
    ids: &[Uuid],
    status: JobStatus,
    error: Option<&Value>,
    canceled_by: Option<&str>,
    canceled_reason: Option<&str>,
) -> Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    let finished = tx.execute(
        "WITH gone AS (
             DELETE FROM job_queue WHERE job_id = ANY($1)
             RETURNING job_id, worker, started_at, restarts, canceled_by, canceled_reason
         ),
         runtime AS (
             DELETE FROM job_runtime WHERE job_id IN (SELECT job_id FROM gone)
         )
         INSERT INTO job_completed (job_id, status, error, worker, started_at, restarts,
                                    canceled_by, canceled_reason)
         SELECT job_id, $2, $3, worker, started_at, restarts,
                coalesce(canceled_by, $4), coalesce(canceled_reason, $5)
           FROM gone",
        &[&ids, &status.as_str(), &error, &canceled_by, &canceled_reason],
    )?;
    notify_completed(tx, ids)?;
    Ok(finished)
}

fn notify_completed(tx: &mut Transaction<'_>, ids: &[Uuid]) -> Result<()> {
    tx.execute("SELECT pg_notify($1, id::text) FROM unnest($2::uuid[]) AS id", &[&CHANNEL_COMPLETED, &ids])?;
    Ok(())
}
