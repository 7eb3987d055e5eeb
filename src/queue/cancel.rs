//! Cancel: a waiting job is completed as canceled at once; a running job gets the soft-cancel
//! mark that its worker's next heartbeat acts on; a failed job whose retry waits or runs has that
//! retry canceled. Cancel is terminal and idempotent.

use std::collections::{HashMap, HashSet};

use anyhow::{Result, bail};
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::ToSql;
use postgres::{Client, Transaction};
use uuid::Uuid;

use super::complete;
use super::job::JobStatus;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CancelOutcome {
    /// Completed as canceled (now, or earlier).
    Canceled,
    /// Running: the mark is set; its worker kills it and completes it as canceled.
    CancelRequested,
    /// It had already finished otherwise (success or failure).
    AlreadyCompleted,
}

impl CancelOutcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CancelOutcome::Canceled => "canceled",
            CancelOutcome::CancelRequested => "cancel_requested",
            CancelOutcome::AlreadyCompleted => "already_completed",
        }
    }
}

impl std::fmt::Display for CancelOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a cancel did to one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Canceled {
    pub id: Uuid,
    pub outcome: CancelOutcome,
    /// The job had failed and its retry was waiting or running: the outcome is that retry's (the
    /// last of the chain, when retries had failed too).
    pub retry: Option<Uuid>,
}

/// Where the ids of a cancel come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ids {
    /// Named by the operator: an unknown id fails the whole call and changes nothing.
    Named,
    /// Found by `matching`, with the status it asked for: each was a job when it was matched, and
    /// retention deletes no job while it is in the queue, so they are not looked up again (a
    /// million: 4 s of the server's, and the list sent once more); one that left the queue since
    /// is reported as it ended, and one still in it whose status no longer matches (a queued job a
    /// worker claimed while the operator read the prompt) is left as it is and not reported. One
    /// that failed since stands as its retry, which is canceled only if it has that status too (a
    /// retry waiting for its backoff is not queued).
    Matched(Option<JobStatus>),
}

/// Cancel jobs in one transaction: each job's outcome, in the order given.
pub(crate) fn cancel(
    client: &mut Client,
    ids: &[Uuid],
    from: Ids,
    by: &str,
    reason: Option<&str>,
) -> Result<Vec<Canceled>> {
    let mut tx = client.transaction()?;
    if from == Ids::Named {
        let unknown: Vec<String> = tx
            .query(
                "SELECT u.id::text FROM unnest($1::uuid[]) AS u(id)
                  WHERE NOT EXISTS (SELECT FROM job j WHERE j.id = u.id)",
                &[&ids],
            )?
            .iter()
            .map(|row| row.get(0))
            .collect();
        if !unknown.is_empty() {
            bail!("no such job: {} (nothing was canceled)", unknown.join(", "));
        }
    }
    let still = match from {
        Ids::Named => None,
        Ids::Matched(status) => status,
    };
    let outcomes = cancel_in(&mut tx, ids, still, by, reason)?;
    tx.commit()?;
    Ok(outcomes)
}

/// Cancel jobs that exist, in the caller's transaction: each job's outcome, in the order given;
/// with `still`, only those in the queue with that status now (`Ids::Matched`), the others left
/// out. A job that had failed and whose retry waits or runs (with `still`, has that status) has
/// that retry canceled: the retry is how the job goes on, which the operator asked to stop.
fn cancel_in(
    tx: &mut Transaction<'_>,
    ids: &[Uuid],
    still: Option<JobStatus>,
    by: &str,
    reason: Option<&str>,
) -> Result<Vec<Canceled>> {
    // Lock every queue row, waiting (not skipping): a claim or reaper pass in flight finishes
    // first, and we decide on the row as it is after them (a row locked after a wait is read as
    // its holder left it). Sorted to avoid lock-order deadlocks. Read as it streams: a bulk
    // cancel may hold a million rows.
    let params: [&(dyn ToSql + Sync); 2] = [&ids, &still.map(JobStatus::as_str)];
    let mut queued = tx.query_raw(
        &format!(
            "SELECT job_id, running, {} FROM job_queue q WHERE job_id = ANY($1) ORDER BY job_id FOR UPDATE",
            status_matches("$2")
        ),
        params.iter().copied(),
    )?;
    let mut waiting = Vec::new();
    let mut running = Vec::new();
    let mut changed = HashSet::new();
    while let Some(row) = queued.next()? {
        let id: Uuid = row.get(0);
        if !row.get::<_, bool>(2) {
            changed.insert(id);
        } else if row.get::<_, bool>(1) {
            running.push(id)
        } else {
            waiting.push(id)
        }
    }
    drop(queued);
    complete::finish_locked(tx, &waiting, JobStatus::Canceled, None, Some(by), reason)?;
    // The first mark wins: a second cancel of a running job does not rewrite who asked.
    tx.execute(
        "UPDATE job_queue SET canceled_by = $2, canceled_reason = $3
          WHERE job_id = ANY($1) AND running AND canceled_by IS NULL",
        &[&running, &by, &reason],
    )?;
    let mut outcomes: HashMap<Uuid, CancelOutcome> = waiting
        .into_iter()
        .map(|id| (id, CancelOutcome::Canceled))
        .chain(running.into_iter().map(|id| (id, CancelOutcome::CancelRequested)))
        .collect();
    // The rest had finished before: canceled already, or otherwise.
    let finished: Vec<Uuid> =
        ids.iter().filter(|id| !outcomes.contains_key(id) && !changed.contains(id)).copied().collect();
    let mut failed = Vec::new();
    for row in tx.query("SELECT job_id, status FROM job_completed WHERE job_id = ANY($1)", &[&finished])? {
        let status: JobStatus = row.get(1);
        let outcome =
            if status == JobStatus::Canceled { CancelOutcome::Canceled } else { CancelOutcome::AlreadyCompleted };
        if status == JobStatus::Failure {
            failed.push(row.get::<_, Uuid>(0));
        }
        outcomes.insert(row.get(0), outcome);
    }
    // A failure enqueues its retry in the transaction that records it, so a failed job has its
    // retry (at most one) or never will. Each retry is canceled as a job named here is: one that
    // failed since has its own retry followed the same way, as far as the chain goes (`retries.max`
    // at most).
    let mut retries: HashMap<Uuid, Canceled> = HashMap::new();
    if !failed.is_empty() {
        let mut retry_of = HashMap::new();
        for row in tx.query("SELECT id, retry_of FROM job WHERE retry_of = ANY($1)", &[&failed])? {
            retry_of.insert(row.get::<_, Uuid>(0), row.get::<_, Uuid>(1));
        }
        let retry_ids: Vec<Uuid> = retry_of.keys().copied().collect();
        for retry in cancel_in(tx, &retry_ids, still, by, reason)? {
            if retry.outcome != CancelOutcome::AlreadyCompleted || retry.retry.is_some() {
                let last = retry.retry.unwrap_or(retry.id);
                retries.insert(retry_of[&retry.id], Canceled { retry: Some(last), ..retry });
            }
        }
    }
    Ok(ids
        .iter()
        .filter(|id| !changed.contains(id))
        .map(|&id| {
            retries.get(&id).map(|retry| Canceled { id, ..*retry }).unwrap_or_else(|| Canceled {
                id,
                outcome: outcomes.get(&id).copied().unwrap_or(CancelOutcome::AlreadyCompleted),
                retry: None,
            })
        })
        .collect())
}

/// Whether the queue row `q` stands as the status in the parameter `param` says (any, when null):
/// running, queued (due) or scheduled (not due yet).
fn status_matches(param: &str) -> String {
    format!(
        "CASE {param}::text
             WHEN 'running' THEN q.running
             WHEN 'queued' THEN NOT q.running AND q.scheduled_for <= now()
             WHEN 'scheduled' THEN NOT q.running AND q.scheduled_for > now()
             ELSE true
         END"
    )
}

/// Which jobs a bulk cancel takes: waiting or running ones, by app, action, tag and how they
/// stand (queued: due; scheduled: not due yet; running).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Matching<'a> {
    pub app: Option<&'a str>,
    pub action: Option<&'a str>,
    pub tag: Option<&'a str>,
    pub status: Option<JobStatus>,
}

impl Matching<'_> {
    /// How an operator reads it: `app billing, status queued`.
    pub(crate) fn describe(&self) -> String {
        let parts: Vec<String> = [
            self.app.map(|app| format!("app {app}")),
            self.action.map(|action| format!("action {action}")),
            self.tag.map(|tag| format!("tag {tag}")),
            self.status.map(|status| format!("status {status}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        parts.join(", ")
    }
}

/// How many of `ids` a cancel would change: those waiting or running, and those finished whose
/// retry (or the retry of that retry...) waits or runs, which the cancel takes. Only for the
/// confirmation: jobs change meanwhile.
pub(crate) fn changing(client: &mut Client, ids: &[Uuid]) -> Result<usize> {
    let count: i64 = client
        .query_one(
            "WITH RECURSIVE chain (named, id) AS (
                 SELECT n.id, n.id FROM unnest($1::uuid[]) AS n(id)
                 UNION ALL
                 SELECT c.named, r.id FROM chain c JOIN job r ON r.retry_of = c.id
             )
             SELECT count(DISTINCT c.named) FROM chain c
              WHERE EXISTS (SELECT 1 FROM job_queue q WHERE q.job_id = c.id)",
            &[&ids],
        )?
        .get(0);
    Ok(usize::try_from(count)?)
}

/// The ids of the jobs in the queue that match. The queue holds only waiting and running jobs, so
/// this reads the queue, not the history.
pub(crate) fn matching(client: &mut Client, matching: &Matching<'_>) -> Result<Vec<Uuid>> {
    let params: [&(dyn ToSql + Sync); 4] =
        [&matching.app, &matching.action, &matching.tag, &matching.status.map(JobStatus::as_str)];
    let rows = client.query_raw(
        &format!(
            "SELECT q.job_id
               FROM job_queue q JOIN job j ON j.id = q.job_id
              WHERE ($1::text IS NULL OR j.app_key = $1)
                AND ($2::text IS NULL OR j.action_key = $2)
                AND ($3::text IS NULL OR q.tag = $3)
                AND {}
              ORDER BY q.job_id",
            status_matches("$4")
        ),
        params.iter().copied(),
    )?;
    Ok(rows.map(|row| Ok(row.get(0))).collect()?)
}
