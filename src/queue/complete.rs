//! Completion: all or nothing, gated by ownership.

use std::sync::LazyLock;
use std::time::Duration;

use anyhow::Result;
use postgres::Transaction;
use postgres::types::ToSql;
use serde_json::Value;
use uuid::Uuid;

use super::CHANNEL_COMPLETED;
use super::claim::{self, CLAIM_BATCH_MAX, Claimed};
use super::job::JobStatus;
use super::logs::LogLine;
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
/// (`DELETE FROM job_queue WHERE job_id=$1 AND worker=$2`; 0 rows means skip), the final log flush
/// (when there are lines), the completion record carrying what the queue row knew (worker,
/// started_at, restarts, cancel fields), and a notification for waiters; the heartbeat goes with
/// the queue row. If a result is recorded, the queue row is gone; if the queue row remains, there
/// is no result. Every part hangs on the gate's row, so a claim that no longer owns the job writes
/// nothing at all.
pub(crate) fn complete(session: &mut Session, completion: &Completion) -> Result<Recorded> {
    let columns = Columns::of(std::slice::from_ref(completion));
    let recorded = session.query_opt(COMPLETE_ONE_SQL.pick(columns.lines()), &columns.one())?;
    Ok(if recorded.is_some() { Recorded::Completed } else { Recorded::Fenced })
}

/// Several completions in one statement, each all or nothing behind its own gate: a job whose
/// claim no longer owns it is skipped without holding up the others. Returns the jobs recorded.
pub(crate) fn complete_many(session: &mut Session, completions: &[Completion]) -> Result<Vec<Uuid>> {
    let columns = Columns::of(completions);
    let rows = session.query(COMPLETE_SQL.pick(columns.lines()), &columns.params())?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// The same completion inside the caller's transaction, for a failure that commits together with
/// its retry (`retry::complete_failure`).
pub(crate) fn complete_in(tx: &mut Transaction<'_>, completion: &Completion) -> Result<Recorded> {
    let columns = Columns::of(std::slice::from_ref(completion));
    let recorded = tx.query_opt(COMPLETE_ONE_SQL.pick(columns.lines()), &columns.one())?;
    Ok(if recorded.is_some() { Recorded::Completed } else { Recorded::Fenced })
}

/// Completions as the arrays `COMPLETE_SQL` unnests: one element per completion, and the log
/// lines of all of them with the job each belongs to.
struct Columns<'a> {
    ids: Vec<Uuid>,
    claims: Vec<&'a str>,
    statuses: Vec<&'static str>,
    results: Vec<Option<&'a Value>>,
    errors: Vec<Option<&'a Value>>,
    attempts: Vec<i32>,
    line_jobs: Vec<Uuid>,
    line_streams: Vec<&'a str>,
    line_texts: Vec<&'a str>,
}

impl<'a> Columns<'a> {
    fn of(completions: &'a [Completion]) -> Self {
        let lines = completions.iter().flat_map(|c| c.logs.iter().map(move |line| (c.job_id, line)));
        let (line_jobs, line_streams, line_texts) =
            lines.map(|(job, line)| (job, line.stream, line.line.as_str())).collect();
        Columns {
            ids: completions.iter().map(|c| c.job_id).collect(),
            claims: completions.iter().map(|c| c.claim.as_str()).collect(),
            statuses: completions.iter().map(|c| c.status.as_str()).collect(),
            results: completions.iter().map(|c| c.result.as_ref()).collect(),
            errors: completions.iter().map(|c| c.error.as_ref()).collect(),
            attempts: completions.iter().map(|c| c.attempt).collect(),
            line_jobs,
            line_streams,
            line_texts,
        }
    }

    /// Whether any completion has lines to flush: the statement to run has the part that writes them.
    fn lines(&self) -> bool {
        !self.line_jobs.is_empty()
    }

    /// The parameters of `COMPLETE_SQL`: one array per field, the channel, then the lines' arrays
    /// if there are lines.
    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        let completions: [&(dyn ToSql + Sync); 6] =
            [&self.ids, &self.claims, &self.statuses, &self.results, &self.errors, &self.attempts];
        self.with_channel_and_lines(&completions)
    }

    /// The parameters of `COMPLETE_ONE_SQL`: the first completion's as scalars, then as `params`.
    fn one(&self) -> Vec<&(dyn ToSql + Sync)> {
        let completion: [&(dyn ToSql + Sync); 6] =
            [&self.ids[0], &self.claims[0], &self.statuses[0], &self.results[0], &self.errors[0], &self.attempts[0]];
        self.with_channel_and_lines(&completion)
    }

    fn with_channel_and_lines<'s>(&'s self, completion: &[&'s (dyn ToSql + Sync)]) -> Vec<&'s (dyn ToSql + Sync)> {
        let mut params = completion.to_vec();
        params.push(&CHANNEL_COMPLETED);
        if self.lines() {
            params.extend([&self.line_jobs as &(dyn ToSql + Sync), &self.line_streams, &self.line_texts]);
        }
        params
    }
}

/// A completion statement in two forms: with the part that flushes the last log lines, and
/// without it, for a completion that has none (its action printed nothing since the last flush,
/// once a second while it runs). PostgreSQL starts every part of a statement at every call,
/// whether it writes or not.
pub struct ByLines {
    pub with: &'static str,
    pub without: &'static str,
}

impl ByLines {
    pub fn pick(&self, lines: bool) -> &'static str {
        if lines { self.with } else { self.without }
    }
}

/// The part of a completion that flushes its last log lines: one parameter per log line field ($8
/// job ids, $9 streams, $10 lines).
macro_rules! logged_cte {
    () => {
        "logged AS (
    INSERT INTO job_logs (job_id, attempt, stream, line)
    SELECT l.job_id, d.attempt, l.stream, l.line
      FROM unnest($8::uuid[], $9::text[], $10::text[]) WITH ORDINALITY AS l(job_id, stream, line, n)
      JOIN gate g ON g.job_id = l.job_id
      JOIN done d ON d.job_id = l.job_id
     ORDER BY l.n
),
"
    };
}

/// The completion's common table expressions around `done`, the completions as rows (job_id, claim,
/// status, result, error, attempt); then the channel to notify ($7), and `$logged`: `logged_cte!()`
/// or nothing. `recorded` returns the jobs completed; `notified` notifies those a client waits for
/// (job_queue.awaited; migration 0011 says why not every one), and runs only when read. The gate
/// deletes the queue rows of `done`, waiting for a row another transaction holds; or of the CTE
/// `$gated`, defined in `$before_gate`.
macro_rules! completion_ctes {
    ($done:expr, $logged:expr) => {
        completion_ctes!($done, $logged, "", "done")
    };
    ($done:expr, $logged:expr, $before_gate:expr, $gated:expr) => {
        concat!(
            "done AS (",
            $done,
            "),
",
            $before_gate,
            "gate AS (
    DELETE FROM job_queue q USING ",
            $gated,
            " d
     WHERE q.job_id = d.job_id AND q.worker = d.claim
    RETURNING q.job_id, q.worker, q.started_at, q.restarts, q.releases, q.canceled_by, q.canceled_reason,
              q.awaited
),
",
            $logged,
            "recorded AS (
    INSERT INTO job_completed (job_id, status, result, error, worker, started_at, restarts,
                               releases, canceled_by, canceled_reason)
    SELECT g.job_id, d.status, d.result, d.error, g.worker, g.started_at, g.restarts,
           g.releases, g.canceled_by, g.canceled_reason
      FROM gate g JOIN done d ON d.job_id = g.job_id
    RETURNING job_id
),
notified AS (
    SELECT pg_notify($7, g.job_id::text) FROM recorded r JOIN gate g ON g.job_id = r.job_id WHERE g.awaited
)"
        )
    };
}

/// The completion statement: its CTEs, then the jobs recorded, each with the number of
/// notifications sent.
macro_rules! complete_sql {
    ($done:expr) => {
        ByLines { with: complete_sql!($done, logged_cte!()), without: complete_sql!($done, "") }
    };
    ($done:expr, $logged:expr) => {
        concat!(
            "\nWITH ",
            completion_ctes!($done, $logged),
            "\nSELECT job_id, (SELECT count(*) FROM notified) FROM recorded"
        )
    };
}

/// The completion of a batch of attempts (see `complete_many`): one array element per completion
/// ($1 job ids, $2 claim ids, $3 statuses, $4 results, $5 errors, $6 attempts).
pub const COMPLETE_SQL: ByLines = complete_sql!(
    "
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[], $6::int[])
        AS d(job_id, claim, status, result, error, attempt)
"
);

/// One completion as scalars: `done` of `COMPLETE_ONE_SQL` and `then_claim_sql`.
macro_rules! one_done {
    () => {
        "
    SELECT $1::uuid AS job_id, $2::text AS claim, $3::text AS status, $4::jsonb AS result, $5::jsonb AS error,
           $6::int AS attempt
"
    };
}

/// The completion of one attempt, the worker's: the same with scalars. PostgreSQL plans it once per
/// connection (a generic plan); the arrays of `COMPLETE_SQL` have it plan every call (0.3 ms, more
/// than the execution), since only a custom plan knows their lengths.
pub const COMPLETE_ONE_SQL: ByLines = complete_sql!(one_done!());

/// `COMPLETE_ONE_SQL` and the claim of the slot's next jobs (`claim::claim_sql`) as one statement,
/// with `k` claim ids: one round trip and one commit where a transaction took four round trips.
/// Parameters: the claim's ($1 tags, $2 claim ids, $3 window), then the completion's, each moved
/// up by three ($4 to $10, and with `lines` $11 to $13). Each row is one claimed job after whether
/// the job was recorded and whether its waiters were notified (`notified` runs only when read, and
/// has one row at most); a single row of nulls after them when nothing was claimed. One snapshot
/// serves both: the job completed is running, so the claim could not take it anyway.
///
/// The statement waits for no other transaction: its gate locks the job's queue row with SKIP
/// LOCKED (`held`), and its claim skips locked rows too. A locking read that meets a row updated
/// since its snapshot began locks the row's new version even when it no longer qualifies, and keeps
/// that lock until its commit: so another worker's claim, whose snapshot predates our last claim,
/// can hold the row of the job we now complete. Had the gate waited for it, that wait would have
/// aged this statement's snapshot and its own claim would have held other workers' rows the same
/// way (and with the claim before the gate, two such statements deadlocked, each waiting in its gate
/// for the other). A row held is written nowhere: the caller completes a job not recorded with
/// `complete`, which waits for the holder (a statement that itself waits for nothing), and finds
/// whether the claim still owns the job.
pub fn then_claim_sql(k: usize, lines: bool) -> &'static str {
    macro_rules! completion_held {
        ($logged:expr) => {
            completion_ctes!(
                one_done!(),
                $logged,
                "held AS MATERIALIZED (
    SELECT d.* FROM done d JOIN job_queue q ON q.job_id = d.job_id AND q.worker = d.claim
       FOR UPDATE OF q SKIP LOCKED
),
",
                "held"
            )
        };
    }
    static BY_LIMIT: LazyLock<[Vec<String>; 2]> = LazyLock::new(|| {
        [completion_held!(""), completion_held!(logged_cte!())]
            .map(|completion| by_limit(&parameters_moved(completion, 3)))
    });
    &BY_LIMIT[usize::from(lines)][k.clamp(1, CLAIM_BATCH_MAX) - 1]
}

/// The completion that claims for each number of claims, from its completion's CTEs.
fn by_limit(completion: &str) -> Vec<String> {
    (1..=CLAIM_BATCH_MAX)
        .map(|k| {
            let claim = claim::with_limits(claim::CLAIM_CTES, k);
            format!(
                "\nWITH RECURSIVE\n{completion},
subscribed AS (SELECT DISTINCT unnest($1::text[]) AS tag FROM (SELECT count(*) FROM gate) AS completed_first),
{claim}
SELECT EXISTS (SELECT FROM recorded) AS recorded, EXISTS (SELECT FROM notified) AS notified,
       {}
  FROM (SELECT) AS one
  LEFT JOIN (claimed c JOIN job j ON j.id = c.job_id) ON true",
                claim::CLAIMED_COLUMNS
            )
        })
        .collect()
}

/// `sql` with every parameter number moved up by `by`.
fn parameters_moved(sql: &str, by: usize) -> String {
    let mut moved = String::with_capacity(sql.len());
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        moved.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits > 0 {
            let number: usize = rest[..digits].parse().expect("a parameter number");
            moved.push_str(&(number + by).to_string());
        }
        rest = &rest[digits..];
    }
    moved.push_str(rest);
    moved
}

/// Complete one attempt and claim up to `claims.len()` jobs of `tags` for the slot, in one
/// statement (`then_claim_sql`): each keeps its meaning, the completion its gate (a refused one
/// writes nothing, and the claim goes on), the claim its order and window. Returns whether the
/// completion was recorded, and the jobs claimed. Not recorded: another transaction held the job's
/// queue row, or the claim no longer owns the job; nothing of it was written either way, and the
/// caller completes it with `complete`, which tells which (a second statement, on those rare paths
/// only; the jobs claimed are claimed either way).
pub(crate) fn then_claim(
    session: &mut Session,
    completion: &Completion,
    tags: &[String],
    claims: &[String],
    window: Duration,
) -> Result<(bool, Vec<Claimed>)> {
    let claims = &claims[..claims.len().min(CLAIM_BATCH_MAX)];
    let columns = Columns::of(std::slice::from_ref(completion));
    let window = window.as_secs_f64();
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&tags, &claims, &window];
    params.extend(columns.one());
    let rows = claim::run(session, then_claim_sql(claims.len(), columns.lines()), &params)?;
    let recorded = rows.first().is_some_and(|row| row.get::<_, bool>(0));
    let jobs = rows.iter().filter(|row| row.get::<_, Option<Uuid>>(2).is_some()).map(|row| claim::claimed(row, 2));
    Ok((recorded, claim::in_claim_order(jobs.collect(), claims)))
}

/// After a completion whose commit acknowledgement was lost, the gate finds no row: the record
/// kept with this claim tells whether the job ended, and how. It may be another's record of the
/// claim (the reaper's, once the window passed): its status is the one that stands.
pub(crate) fn recorded_for(session: &mut Session, job_id: Uuid, claim: &str) -> Result<Option<JobStatus>> {
    let row =
        session.query_opt("SELECT status FROM job_completed WHERE job_id = $1 AND worker = $2", &[&job_id, &claim])?;
    Ok(row.map(|row| row.get(0)))
}

/// Complete queue rows the caller has already locked (cancel, reaper), keeping what each row
/// knew; the cancel fields given are used where the row has none. Like a completion, it notifies
/// only the jobs someone waits for (`job_queue.awaited`): a bulk cancel of a million jobs queues
/// no million notifications.
pub(crate) fn finish_locked(
    tx: &mut Transaction<'_>,
    ids: &[Uuid],
    status: JobStatus,
    error: Option<&Value>,
    canceled_by: Option<&str>,
    canceled_reason: Option<&str>,
) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    tx.execute(
        "WITH gone AS (
             DELETE FROM job_queue WHERE job_id = ANY($1)
             RETURNING job_id, worker, started_at, restarts, releases, canceled_by, canceled_reason, awaited
         ),
         recorded AS (
             INSERT INTO job_completed (job_id, status, error, worker, started_at, restarts, releases,
                                        canceled_by, canceled_reason)
             SELECT job_id, $2, $3, worker, started_at, restarts, releases,
                    coalesce(canceled_by, $4), coalesce(canceled_reason, $5)
               FROM gone
         )
         SELECT pg_notify($6, job_id::text) FROM gone WHERE awaited",
        &[&ids, &status.as_str(), &error, &canceled_by, &canceled_reason, &CHANNEL_COMPLETED],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_move_up_whatever_their_number_of_digits() {
        assert_eq!(parameters_moved("a $1, $9::text, $10 and $ alone", 3), "a $4, $12::text, $13 and $ alone");
    }

    #[test]
    fn the_completion_that_claims_takes_the_claims_parameters_then_the_completions() {
        for (k, lines) in [(1, true), (2, true), (64, true), (1, false), (64, false)] {
            let sql = then_claim_sql(k, lines);
            let used = |n: usize| {
                let name = format!("${n}");
                sql.match_indices(&name)
                    .any(|(at, _)| !sql[at + name.len()..].starts_with(|c: char| c.is_ascii_digit()))
            };
            let last = if lines { 13 } else { 10 };
            assert!((1..=last).all(used) && !used(last + 1), "{sql}");
            assert_eq!(sql.contains("INSERT INTO job_logs"), lines, "{sql}");
            assert_eq!(sql.matches(&format!("LIMIT {k}\n")).count(), 2, "{sql}");
        }
    }
}
