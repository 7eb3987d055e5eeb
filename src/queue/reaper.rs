//! The reaper: recovers jobs whose worker stopped sending heartbeats.

use std::time::Duration;

use anyhow::Result;
use postgres::Client;
use uuid::Uuid;

use super::CHANNEL_ENQUEUED;
use super::complete;
use super::job::{JobError, JobStatus};

/// What one reaper pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reaped {
    pub requeued: u64,
    pub failed: u64,
    pub canceled: u64,
    /// Queue rows of jobs deleted outside wf (`DELETE FROM job`): nothing to run, dropped.
    pub dropped: u64,
}

/// The zombies, locked for this pass (see `reap_once`). Parameter: the reaper's window in seconds.
/// The running rows come from their partial index; each carries its ping and its worker's window.
pub const ZOMBIES_SQL: &str = "
SELECT q.job_id, q.canceled_by IS NOT NULL AS cancel_marked, q.restarts, q.worker, q.ping
  FROM job_queue q
 WHERE q.running
   AND (q.ping IS NULL
        OR greatest(q.ping, pg_postmaster_start_time())
           < now() - make_interval(secs => greatest($1, q.window_s)))
   FOR UPDATE OF q SKIP LOCKED";

/// Zombies back to waiting, after a backoff that doubles with their restarts (1 s, 2 s, 4 s, ... at
/// most 5 minutes); returns their tags. Parameter: the job ids.
pub const REQUEUE_SQL: &str = "
UPDATE job_queue
   SET running = false, worker = NULL, started_at = NULL, ping = NULL, window_s = NULL,
       restarts = restarts + 1, scheduled_for = now() + least(power(2, least(restarts, 9)), 300) * interval '1 second'
 WHERE job_id = ANY($1)
RETURNING tag";

/// One pass, one transaction. A zombie is a running job whose ping is missing or older than the
/// window, and never younger than the window of the worker that claimed it (its worker stops the
/// attempt by itself within its own window, so an earlier reap would run two attempts at once). A
/// ping older than the database server's own start is counted from that start, so a database
/// restart does not turn every running job into a zombie at once. SKIP LOCKED lets any
/// number of reapers run at once without touching the same zombie twice, and skips jobs whose
/// worker is heartbeating at this very moment (the heartbeat locks the row it writes).
pub(crate) fn reap_once(client: &mut Client, zombie_timeout: Duration, restart_limit: i32) -> Result<Reaped> {
    let mut tx = client.transaction()?;
    let zombies = tx.query(ZOMBIES_SQL, &[&zombie_timeout.as_secs_f64()])?;
    let orphans = dropped_jobs(&mut tx, zombies.iter().map(|row| row.get(0)).collect())?;
    let mut canceled = Vec::new();
    let mut failed = Vec::new();
    let mut requeued = Vec::new();
    for row in &zombies {
        let id: Uuid = row.get(0);
        if orphans.contains(&id) {
            continue;
        }
        let restarts: i32 = row.get(2);
        if row.get::<_, bool>(1) {
            canceled.push(id);
        } else if restarts >= restart_limit {
            failed.push(id);
        } else {
            requeued.push(id);
        }
    }
    // A canceled job is not run again even though its worker died: cancel is terminal.
    complete::finish_locked(&mut tx, &canceled, JobStatus::Canceled, None, None, None)?;
    let error = JobError::new(
        "RestartLimitExceeded",
        format!(
            "the job kept dying: its worker stopped sending heartbeats {} times (restart limit {restart_limit})",
            restart_limit + 1
        ),
    );
    complete::finish_locked(&mut tx, &failed, JobStatus::Failure, Some(&error.to_value()), None, None)?;
    requeue(&mut tx, &requeued)?;
    tx.commit()?;
    Ok(Reaped {
        requeued: requeued.len() as u64,
        failed: failed.len() as u64,
        canceled: canceled.len() as u64,
        dropped: orphans.len() as u64,
    })
}

/// Of these zombies, those whose job is gone, their queue rows deleted. The queue holds no key to
/// the job (migration 13), so a job deleted outside wf leaves its row, which a worker claims with
/// nothing to run: completing it or logging its requeue would break the keys of the completion and
/// the logs, and fail every pass, every other zombie with it, for ever.
fn dropped_jobs(tx: &mut postgres::Transaction<'_>, zombies: Vec<Uuid>) -> Result<Vec<Uuid>> {
    if zombies.is_empty() {
        return Ok(zombies);
    }
    let rows = tx.query(
        "DELETE FROM job_queue q
          WHERE q.job_id = ANY($1) AND NOT EXISTS (SELECT FROM job j WHERE j.id = q.job_id)
         RETURNING q.job_id",
        &[&zombies],
    )?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// Back to waiting (`REQUEUE_SQL`), with a log line in the dead attempt's logs.
fn requeue(tx: &mut postgres::Transaction<'_>, ids: &[Uuid]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    tx.execute(
        "INSERT INTO job_logs (job_id, attempt, stream, line)
         SELECT q.job_id, q.restarts + q.releases + 1, 'wf',
                format('reaped: worker %s stopped sending heartbeats (last ping %s); '
                       'requeued as attempt %s after %s s', q.worker,
                       coalesce(to_char(q.ping AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), 'never'),
                       q.restarts + q.releases + 2, least(power(2, least(q.restarts, 9)), 300))
           FROM job_queue q
          WHERE q.job_id = ANY($1)",
        &[&ids],
    )?;
    let tags: Vec<String> = tx.query(REQUEUE_SQL, &[&ids])?.iter().map(|r| r.get(0)).collect();
    for tag in dedup(tags) {
        tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL_ENQUEUED, &tag])?;
    }
    Ok(())
}

fn dedup(mut items: Vec<String>) -> Vec<String> {
    items.sort();
    items.dedup();
    items
}
