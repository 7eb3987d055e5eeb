//! `--no-overlap` schedules: a fire time is skipped while an earlier run of its schedule is still
//! running. Checked by the worker that claimed the job, before it starts it: the job is then marked
//! as canceled by its schedule (the mark a cancel of a running job leaves, so its completion keeps
//! who and why) and completed as canceled without running.

use anyhow::Result;
use uuid::Uuid;

use crate::db::Session;

/// The first key of the two-key advisory lock space, reserved for the overlap checks of schedules
/// ("wfov"); the second is the hash of the schedule's name.
const OVERLAP_LOCK_CLASS: i32 = 0x7766_6f76;

/// Taken before the check: the checks of one schedule's runs go one after the other.
const LOCK_SQL: &str = "SELECT pg_advisory_xact_lock($1, hashtext(schedule_name)) FROM job WHERE id = $2";

/// Mark the claimed job `job_id` skipped when another run of its schedule is running; returns the
/// reason when it was. Running jobs are few: they are found by their index. Two runs claimed at
/// once (by two slots, or two workers) are checked one after the other, each after the other's
/// check committed: the second sees the first skipped, or running, so one of them runs, never both
/// and never neither.
pub(crate) fn skip_if_overlapping(session: &mut Session, job_id: Uuid, claim: &str) -> Result<Option<String>> {
    let mut tx = session.client().transaction()?;
    tx.execute(LOCK_SQL, &[&OVERLAP_LOCK_CLASS, &job_id])?;
    // A statement of its own, after the lock: its snapshot sees the checks that went before.
    let row = tx.query_opt(SKIP_SQL, &[&job_id, &claim])?;
    tx.commit()?;
    Ok(row.map(|row| row.get(0)))
}

/// Driven by the running rows (few, by their partial index, materialized so that a schedule's long
/// history is never walked; a run skipped already, marked by its schedule, does not count), each
/// looked up in `job` by its key. The job itself and each running
/// one are looked up by key on purpose (a CTE, a LATERAL with a LIMIT): left to itself, a generic
/// plan found the job by walking the index of every scheduled job ever enqueued, filtering on its
/// id (seen in `tests/it/depth.rs`). An operator's cancel mark set since the claim is kept: the
/// first mark wins, as for any cancel. Parameters: job id, claim id.
pub const SKIP_SQL: &str = "
WITH mine AS MATERIALIZED (
    SELECT schedule_name FROM job WHERE id = $1
),
running AS MATERIALIZED (
    SELECT job_id FROM job_queue
     WHERE running AND job_id <> $1 AND (canceled_by IS NULL OR canceled_by NOT LIKE 'schedule %')
),
earlier AS (
    SELECT m.schedule_name,
           format('skipped: the run %s of schedule %s is still running (no overlap)', r.job_id, m.schedule_name)
               AS reason
      FROM mine m
      JOIN running r ON true
      JOIN LATERAL (SELECT schedule_name FROM job WHERE id = r.job_id LIMIT 1) o
        ON o.schedule_name = m.schedule_name
     LIMIT 1
)
UPDATE job_queue
   SET canceled_by = coalesce(job_queue.canceled_by, 'schedule ' || e.schedule_name),
       canceled_reason = CASE WHEN job_queue.canceled_by IS NULL THEN e.reason ELSE job_queue.canceled_reason END
  FROM earlier e
 WHERE job_queue.job_id = $1 AND job_queue.worker = $2
RETURNING e.reason";
