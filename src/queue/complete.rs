//! Completion: all or nothing, gated by ownership.

use anyhow::Result;
use postgres::Transaction;
use serde_json::Value;
use uuid::Uuid;

use super::CHANNEL_COMPLETED;
use super::job::JobStatus;
use super::logs::{self, LogLine};
use crate::db::Session;

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

/// One statement, so one transaction and one round trip: the ownership gate
/// (`DELETE FROM job_queue WHERE job_id=$1 AND worker=$2`; 0 rows means skip), the final log flush,
/// the completion record carrying what the queue row knew (worker, started_at, restarts, cancel
/// fields), the runtime row removed, and a notification for waiters. If a result is recorded, the
/// queue row is gone; if the queue row remains, there is no result. Every part hangs on the gate's
/// row, so a claim that no longer owns the job writes nothing at all.
pub(crate) fn complete(session: &mut Session, completion: &Completion) -> Result<Recorded> {
    let (streams, texts) = logs::columns(&completion.logs);
    let recorded = session.query_opt(
        COMPLETE_SQL,
        &[
            &completion.job_id,
            &completion.claim,
            &completion.status.as_str(),
            &completion.result,
            &completion.error,
            &completion.attempt,
            &streams,
            &texts,
            &CHANNEL_COMPLETED,
        ],
    )?;
    Ok(if recorded.is_some() { Recorded::Completed } else { Recorded::Fenced })
}

/// The same completion inside the caller's transaction, for a failure that commits together with
/// its retry (`retry::complete_failure`).
pub(crate) fn complete_in(tx: &mut Transaction<'_>, completion: &Completion) -> Result<Recorded> {
    let (streams, texts) = logs::columns(&completion.logs);
    let recorded = tx.query_opt(
        COMPLETE_SQL,
        &[
            &completion.job_id,
            &completion.claim,
            &completion.status.as_str(),
            &completion.result,
            &completion.error,
            &completion.attempt,
            &streams,
            &texts,
            &CHANNEL_COMPLETED,
        ],
    )?;
    Ok(if recorded.is_some() { Recorded::Completed } else { Recorded::Fenced })
}

const COMPLETE_SQL: &str = "
WITH gate AS (
    DELETE FROM job_queue WHERE job_id = $1 AND worker = $2
    RETURNING job_id, worker, started_at, restarts, canceled_by, canceled_reason
),
runtime AS (
    DELETE FROM job_runtime WHERE job_id IN (SELECT job_id FROM gate)
),
logged AS (
    INSERT INTO job_logs (job_id, attempt, stream, line)
    SELECT g.job_id, $6, l.stream, l.line
      FROM gate g, unnest($7::text[], $8::text[]) WITH ORDINALITY AS l(stream, line, n)
     ORDER BY l.n
),
recorded AS (
    INSERT INTO job_completed (job_id, status, result, error, worker, started_at, restarts,
                               canceled_by, canceled_reason)
    SELECT job_id, $3, $4, $5, worker, started_at, restarts, canceled_by, canceled_reason
      FROM gate
    RETURNING job_id
)
SELECT job_id, pg_notify($9, job_id::text) FROM recorded";

/// After a completion whose commit acknowledgement was lost, the gate finds no row: the record
/// tells whether our own commit landed.
pub(crate) fn completed_by(session: &mut Session, job_id: Uuid, claim: &str) -> Result<bool> {
    let row = session.query_opt("SELECT 1 FROM job_completed WHERE job_id = $1 AND worker = $2", &[&job_id, &claim])?;
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
