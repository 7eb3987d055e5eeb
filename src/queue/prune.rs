//! Retention: delete completed jobs (job_completed, job, job_logs) in batches. Queued and running
//! jobs are never touched: only jobs with a completion record are candidates, and job_queue's
//! foreign key to job would refuse the delete of a job still in the queue.

use std::time::Duration;

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::{Client, GenericClient};

use super::job::JobStatus;

/// Jobs deleted per transaction.
pub(crate) const BATCH: i64 = 1000;

/// The cutoff on the database's clock: jobs completed before it are pruned.
pub(crate) fn cutoff(client: &mut Client, older_than: Duration) -> Result<DateTime<Utc>> {
    let row = client.query_one("SELECT now() - make_interval(secs => $1)", &[&older_than.as_secs_f64()])?;
    Ok(row.get(0))
}

pub(crate) fn count(client: &mut Client, cutoff: DateTime<Utc>, status: Option<JobStatus>) -> Result<i64> {
    let row = client.query_one(
        "SELECT count(*) FROM job_completed WHERE completed_at < $1 AND ($2::text IS NULL OR status = $2)",
        &[&cutoff, &status.map(JobStatus::as_str)],
    )?;
    Ok(row.get(0))
}

/// Delete one batch (its own transaction); returns how many jobs went. Logs and completion
/// records go with their job (ON DELETE CASCADE).
pub(crate) fn prune_batch(client: &mut Client, cutoff: DateTime<Utc>, status: Option<JobStatus>) -> Result<u64> {
    let deleted = client.execute(
        "DELETE FROM job
          WHERE id IN (SELECT job_id FROM job_completed
                        WHERE completed_at < $1 AND ($2::text IS NULL OR status = $2)
                        ORDER BY completed_at
                        LIMIT $3)",
        &[&cutoff, &status.map(JobStatus::as_str), &BATCH],
    )?;
    Ok(deleted)
}

/// Delete every job of `tag`, queued, running or completed, with its queue, heartbeat, completion
/// and log rows: for a tag nothing else uses (the bench's own), never for retention. job_queue refers
/// to job without a cascade, so its rows go first; the statement's CTEs all run before the
/// foreign keys are checked at its end.
pub(crate) fn delete_tag(client: &mut impl GenericClient, tag: &str) -> Result<()> {
    client
        .execute(
            "WITH doomed AS (SELECT id FROM job WHERE tag = $1),
             runtime AS (DELETE FROM job_runtime WHERE job_id IN (SELECT id FROM doomed)),
             queued AS (DELETE FROM job_queue WHERE job_id IN (SELECT id FROM doomed))
             DELETE FROM job WHERE id IN (SELECT id FROM doomed)",
            &[&tag],
        )
        .with_context(|| format!("deleting the jobs of tag {tag}"))?;
    Ok(())
}
