//! `--no-overlap` schedules: a fire time is skipped while an earlier run of its schedule is still
//! running. Checked by the worker that claimed the job, before it starts it: the job is then marked
//! as canceled by its schedule (the mark a cancel of a running job leaves, so its completion keeps
//! who and why) and completed as canceled without running.

use anyhow::Result;
use uuid::Uuid;

use crate::db::Session;

/// Mark the claimed job `job_id` skipped when another job of its schedule is running; returns the
/// reason when it was. Running jobs are few: they are found by their index.
pub(crate) fn skip_if_overlapping(session: &mut Session, job_id: Uuid, claim: &str) -> Result<Option<String>> {
    let row = session.query_opt(SKIP_SQL, &[&job_id, &claim])?;
    Ok(row.map(|row| row.get(0)))
}

/// Driven by the running rows (few, by their partial index, materialized so that a schedule's long
/// history is never walked), each looked up in `job` by its key. Parameters: job id, claim id.
pub const SKIP_SQL: &str = "
WITH running AS MATERIALIZED (
    SELECT job_id FROM job_queue WHERE running AND job_id <> $1
),
earlier AS (
    SELECT j.schedule_name, r.job_id
      FROM job j
      JOIN running r ON true
      JOIN job o ON o.id = r.job_id AND o.schedule_name = j.schedule_name
     WHERE j.id = $1
     LIMIT 1
)
UPDATE job_queue
   SET canceled_by = 'schedule ' || e.schedule_name,
       canceled_reason = format('skipped: the run %s of schedule %s is still running (no overlap)',
                                e.job_id, e.schedule_name)
  FROM earlier e
 WHERE job_queue.job_id = $1 AND job_queue.worker = $2
RETURNING job_queue.canceled_reason";
