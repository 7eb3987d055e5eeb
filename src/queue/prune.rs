//! Retention: delete completed jobs (job_completed, job, job_logs) in batches. Queued and running
//! jobs are never touched: only jobs with a completion record and no queue row are candidates.
//! (A completion deletes the queue row in the transaction that writes the record, so the second
//! condition only matters against rows written by hand; job_queue has no foreign key to job, see
//! migration 13, so it is this statement that keeps such a job.)

use std::time::Duration;

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::{Client, GenericClient, Transaction};

use super::job::JobStatus;

/// Jobs deleted per transaction.
pub(crate) const BATCH: i64 = 1000;

/// The completion records of the jobs retention may delete: completed before $1, of status $2 (or
/// any), not holding a schedule's fire time still ahead (a fire time canceled ahead of time: its
/// job's record is what keeps the schedule from enqueueing it again, after a change of the
/// schedule too), not retried by a job still queued or running, nor by one retried so (the failed
/// job an operator knows is how `wf cancel` and `wf show` reach its retries: its id must keep
/// working while they may run; the retries of a job are few, found by the index of `retry_of`),
/// and no longer in the queue, `$not_queued` saying the last: a batch probes the queue by its
/// key for each record it walks (as a NOT EXISTS, PostgreSQL made that a hash anti-join over the
/// whole queue: with 200,000 jobs queued and 200,000 old records, 297 ms a batch instead of 45);
/// the count, which reads every record anyway, hashes the queue once (146 ms there, 804 probing).
macro_rules! candidates {
    ($not_queued:expr) => {
        concat!(
            "job_completed c WHERE c.completed_at < $1 AND ($2::text IS NULL OR c.status = $2)
               AND NOT EXISTS (SELECT FROM job f WHERE f.id = c.job_id AND f.schedule_fire > now())
               AND NOT EXISTS (
                   WITH RECURSIVE later (id) AS (
                       SELECT r.id FROM job r WHERE r.retry_of = c.job_id AND r.retry_of IS NOT NULL
                       UNION ALL
                       SELECT r.id FROM later JOIN job r ON r.retry_of = later.id AND r.retry_of IS NOT NULL)
                   SELECT FROM later WHERE (SELECT lq.job_id FROM job_queue lq WHERE lq.job_id = later.id) IS NOT NULL)
               AND ",
            $not_queued
        )
    };
}

/// The cutoff on the database's clock: jobs completed before it are pruned.
pub(crate) fn cutoff(client: &mut Client, older_than: Duration) -> Result<DateTime<Utc>> {
    let row = client.query_one("SELECT now() - make_interval(secs => $1)", &[&older_than.as_secs_f64()])?;
    Ok(row.get(0))
}

/// The jobs retention may delete ($1 cutoff, $2 status or NULL).
pub const COUNT_SQL: &str =
    concat!("SELECT count(*) FROM ", candidates!("NOT EXISTS (SELECT FROM job_queue q WHERE q.job_id = c.job_id)"));

/// Their ids ($1 cutoff, $2 status or NULL): what a dry run of `wf prune --older-than --sources`
/// counts as gone when it looks for the commits no job pins.
pub const CANDIDATES_SQL: &str =
    concat!("SELECT c.job_id FROM ", candidates!("NOT EXISTS (SELECT FROM job_queue q WHERE q.job_id = c.job_id)"));

/// One batch of them, oldest first ($1 cutoff, $2 status or NULL, $3 batch size).
pub const BATCH_SQL: &str = concat!(
    "DELETE FROM job WHERE id IN (SELECT c.job_id FROM ",
    candidates!("(SELECT q.job_id FROM job_queue q WHERE q.job_id = c.job_id) IS NULL"),
    " ORDER BY c.completed_at LIMIT $3)"
);

pub(crate) fn count(client: &mut Client, cutoff: DateTime<Utc>, status: Option<JobStatus>) -> Result<i64> {
    without_jit(client, |tx| Ok(tx.query_one(COUNT_SQL, &[&cutoff, &status.map(JobStatus::as_str)])?.get(0)))
}

/// Delete one batch (its own transaction); returns how many jobs went. Logs and completion
/// records go with their job (ON DELETE CASCADE).
pub(crate) fn prune_batch(client: &mut Client, cutoff: DateTime<Utc>, status: Option<JobStatus>) -> Result<u64> {
    without_jit(client, |tx| Ok(tx.execute(BATCH_SQL, &[&cutoff, &status.map(JobStatus::as_str), &BATCH])?))
}

/// `run` in a transaction of its own without JIT compilation. The probe of the queue for each
/// record is costed for every record the cutoff admits, before the batch's LIMIT: PostgreSQL
/// compiled the statement with LLVM at every batch, 100 to 300 ms for a batch that runs in 45.
fn without_jit<T>(client: &mut Client, run: impl FnOnce(&mut Transaction<'_>) -> Result<T>) -> Result<T> {
    let mut tx = client.transaction()?;
    tx.batch_execute("SET LOCAL jit = off")?;
    let done = run(&mut tx)?;
    tx.commit()?;
    Ok(done)
}

/// Delete every job of `tag`, queued, running or completed, with its queue, completion and log
/// rows: for a tag nothing else uses (the bench's own), never for retention. The completion and log
/// rows go with their job (ON DELETE CASCADE); the queue rows, which no key ties to the job, are
/// deleted by the statement's CTE, joined to their jobs by the keys of both: matched against a
/// list of the tag's job ids instead, with statistics taken while the queue was empty, PostgreSQL
/// went through the whole list for each queue row (30,000 jobs: minutes).
pub(crate) fn delete_tag(client: &mut impl GenericClient, tag: &str) -> Result<()> {
    client
        .execute(
            "WITH queued AS (DELETE FROM job_queue q USING job j WHERE j.id = q.job_id AND j.tag = $1)
             DELETE FROM job WHERE tag = $1",
            &[&tag],
        )
        .with_context(|| format!("deleting the jobs of tag {tag}"))?;
    Ok(())
}
