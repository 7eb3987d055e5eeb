//! Claim: one job, one worker, in one atomic statement.
//!
//! The seed's literal form (`tag = ANY($1) ORDER BY priority DESC, scheduled_for`) makes
//! PostgreSQL read and sort every waiting job of those tags. This form keeps the seed's
//! semantics (highest priority first, then earliest due, among due jobs of the subscribed tags,
//! FOR UPDATE SKIP LOCKED, running=true and ping=now() together) but walks `job_queue_claim_idx`
//! (tag, priority DESC, scheduled_for) one (tag, priority) range at a time: a loose index scan
//! over the distinct priorities of each tag, stopping at the first priority that has a due job,
//! so future jobs of higher priority cost one index probe per distinct priority, not one per job.
//! Each step is one probe: the first entry of the tag's range below the last priority, in the
//! index's order, is that priority's earliest job, so it tells both the next priority and whether
//! it has a due job. (Asking those apart, `max(priority)` then a LIMIT 1 for a due job, walked the
//! head of the range twice, with the entries that claims left dead there: 136 buffers a claim
//! against 42 while one worker drains 5,000 jobs.) The probe is a LIMIT 1 subquery in the index's
//! order, not a NOT EXISTS: once the table is analyzed, PostgreSQL turns a NOT EXISTS inside the
//! recursion into a hash anti-join over the whole queue (about 100 ms per claim at 200k jobs in one
//! tag), and an unordered LIMIT 1 into a sequential scan that, mid-drain, walks every claimed row.
//! `tests/it/claim.rs` checks with EXPLAIN ANALYZE that no plan node reads more than a handful of
//! job_queue rows on a deep queue. The plan (200k jobs, 4 tags, worker on 2):
//!
//! ```text
//! Nested Loop -> Limit -> Sort (top-N over at most one candidate per subscribed tag)
//!   -> Nested Loop -> CTE Scan on priorities (Recursive Union of Limit ->
//!        Index Only Scan using job_queue_claim_idx ... Index Cond: tag = s.tag)
//!      -> Limit -> LockRows -> Index Scan using job_queue_claim_idx on job_queue q
//!           Index Cond: tag = p.tag AND priority = p.priority AND scheduled_for <= now()
//! ```

use std::sync::LazyLock;
use std::time::Duration;

use anyhow::Result;
use chrono::{DateTime, Utc};
use postgres::Row;
use postgres::types::ToSql;
use serde_json::Value;
use uuid::Uuid;

use crate::db::Session;

/// Everything a worker needs to run a claimed job, as pinned at enqueue.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub id: Uuid,
    /// The value written into job_queue.worker: unique per claim, fences this attempt.
    pub claim: String,
    pub app: String,
    pub action: String,
    pub git_source_id: Uuid,
    pub commit_sha: String,
    pub entrypoint: String,
    pub output_schema: Option<Value>,
    pub timeout_s: i32,
    pub tag: String,
    pub input: Value,
    pub trigger_kind: String,
    pub scheduled_for: DateTime<Utc>,
    /// The database's time of the claim.
    pub started_at: DateTime<Utc>,
    pub restarts: i32,
    /// Runs a clean shutdown put back in the queue.
    pub releases: i32,
    /// Its schedule skips it while an earlier run is running (`queue::overlap`).
    pub no_overlap: bool,
    /// The sandbox settings pinned from the manifest; None: the worker's default.
    pub network: Option<bool>,
    pub memory_mb: Option<i32>,
    pub max_processes: Option<i32>,
    /// Run in the slot's warm runner of its action (`"warm": true` in the manifest).
    pub warm: bool,
}

impl Claimed {
    /// 1 for the first run, + 1 per restart and per release.
    pub fn attempt(&self) -> i32 {
        self.restarts + self.releases + 1
    }
}

/// The most jobs one claim takes (the statement's LIMIT says the same).
pub const CLAIM_BATCH_MAX: usize = 64;

/// The loose index scan over the priorities of each subscribed tag (`subscribed`, one row each):
/// one row per priority with its earliest job's `scheduled_for` and whether that job is `due`,
/// down to the first priority with a due job. Each step is one ordered probe of
/// `job_queue_claim_idx`. Shared by the claim (`claim_ctes!`) and the idle look (`NEXT_DUE_SQL`).
macro_rules! priorities_cte {
    () => {
        "priorities AS (
    SELECT s.tag, h.priority, h.scheduled_for, h.scheduled_for <= now() AS due
      FROM subscribed s
     CROSS JOIN LATERAL (
           SELECT q.priority, q.scheduled_for FROM job_queue q
            WHERE q.tag = s.tag AND NOT q.running AND q.canceled_by IS NULL
            ORDER BY q.priority DESC, q.scheduled_for
            LIMIT 1) h
    UNION ALL
    SELECT p.tag, h.priority, h.scheduled_for, h.scheduled_for <= now()
      FROM priorities p
     CROSS JOIN LATERAL (
           SELECT q.priority, q.scheduled_for FROM job_queue q
            WHERE q.tag = p.tag AND q.priority < p.priority AND NOT q.running AND q.canceled_by IS NULL
            ORDER BY q.priority DESC, q.scheduled_for
            LIMIT 1) h
     WHERE NOT p.due
)"
    };
}

/// The claim's common table expressions after `subscribed` (the tags, one row each), `priorities`
/// to `claimed` (parameters: $2 claim ids, $3 window), shared by `CLAIM_SQL` and the completion
/// that claims (`complete::then_claim_sql`).
macro_rules! claim_ctes {
    () => {
        concat!(
            priorities_cte!(),
            ",
-- The best due jobs, numbered in that order: at most $2's cardinality, and never more than 64
-- (CLAIM_BATCH_MAX). A worker runs the statement with the batch's size written into this LIMIT and
-- the fetch's (`claim_sql`): a plan made once for any $2 would take a LIMIT it cannot see for a
-- tenth of the queue. The numbering and the LIMIT share one order, so one sort serves both.
peek AS (
    SELECT c.job_id, row_number() OVER (ORDER BY p.priority DESC, c.scheduled_for) AS n
      FROM priorities p
     CROSS JOIN LATERAL (
           SELECT q.job_id, q.scheduled_for
             FROM job_queue q
            WHERE q.tag = p.tag AND q.priority = p.priority
              AND NOT q.running AND q.canceled_by IS NULL
              AND q.scheduled_for <= now()
            ORDER BY q.scheduled_for
            LIMIT cardinality($2::text[])
              FOR UPDATE SKIP LOCKED) c
     WHERE p.due
     ORDER BY p.priority DESC, c.scheduled_for
     LIMIT least(cardinality($2::text[]), 64)
),
-- Each job its own claim id: one owner per job, fenced per attempt, however many come at once.
-- Ping is stamped with running = true: a worker that dies before its first heartbeat leaves a
-- ping the reaper's guard catches. The worker's window goes with it: no reaper takes the job
-- before that window has passed.
claimed AS (
    UPDATE job_queue q
       SET running = true, started_at = now(), worker = ($2::text[])[p.n], ping = now(), window_s = $3
      FROM peek p
     WHERE q.job_id = p.job_id
    RETURNING q.job_id, q.started_at, q.restarts, q.releases, q.worker
)"
        )
    };
}

/// What a claim returns of each job, from `claimed c` and `job j`.
macro_rules! claimed_columns {
    () => {
        "j.id, j.app_key, j.action_key, j.git_source_id, j.commit_sha, j.entrypoint,
       j.output_schema, j.timeout_s, j.tag, j.input, j.trigger_kind, j.scheduled_for,
       c.started_at, c.restarts, j.network, j.memory_mb, j.max_processes, c.worker, c.releases, j.no_overlap,
       j.warm"
    };
}

pub(crate) const CLAIM_CTES: &str = claim_ctes!();
pub(crate) const CLAIMED_COLUMNS: &str = claimed_columns!();

pub const CLAIM_SQL: &str = concat!(
    "\nWITH RECURSIVE\nsubscribed AS (SELECT DISTINCT unnest($1::text[]) AS tag),\n",
    claim_ctes!(),
    "\nSELECT ",
    claimed_columns!(),
    "\n  FROM claimed c JOIN job j ON j.id = c.job_id"
);

/// `CLAIM_SQL` for at most `k` jobs, with `k` written into both limits: a generic plan (a
/// worker's, see `db::Session`) sees them. Otherwise it takes `cardinality($2)` for a tenth of the
/// queue (a sort of every due job of the tag), and the batch for 64 jobs (a hash join over the
/// whole queue to update them).
pub fn claim_sql(k: usize) -> &'static str {
    static BY_LIMIT: LazyLock<Vec<String>> =
        LazyLock::new(|| (1..=CLAIM_BATCH_MAX).map(|k| with_limits(CLAIM_SQL, k)).collect());
    &BY_LIMIT[k.clamp(1, CLAIM_BATCH_MAX) - 1]
}

/// `sql`, holding the claim's CTEs, with `k` written into their two limits.
pub(crate) fn with_limits(sql: &str, k: usize) -> String {
    sql.replace(FETCH_LIMIT, &format!("LIMIT {k}\n")).replace(BATCH_LIMIT, &format!("LIMIT {k}\n),"))
}

/// A claim slower than this is slow (a claim takes well under a millisecond on a deep queue): see
/// `Session::slow_call`.
const REPLAN_AFTER: Duration = Duration::from_millis(10);

/// The limits `claim_sql` writes in: the locking fetch's, and the batch's.
const FETCH_LIMIT: &str = "LIMIT cardinality($2::text[])\n";
const BATCH_LIMIT: &str = "LIMIT least(cardinality($2::text[]), 64)\n),";

/// Claim the best due jobs of `tags`, up to as many as there are claim ids (one for each job),
/// best first: a worker with k free slots claims up to k jobs in one statement. A batch takes from
/// the best priority of each tag that has due jobs; the next claim goes down when it is used up. `window` is the claiming
/// worker's zombie window.
pub fn claim(session: &mut Session, tags: &[String], claims: &[String], window: Duration) -> Result<Vec<Claimed>> {
    let claims = &claims[..claims.len().min(CLAIM_BATCH_MAX)];
    let rows = run(session, claim_sql(claims.len()), &[&tags, &claims, &window.as_secs_f64()])?;
    Ok(in_claim_order(rows.iter().map(|row| claimed(row, 0)).collect(), claims))
}

/// Run a statement that claims (`claim_sql`, `complete::then_claim_sql`).
pub(crate) fn run(session: &mut Session, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
    // A plan made while the queue was nearly empty scans it once it is deep, until the next ANALYZE:
    // claims slow again and again have the next one planned anew, for the queue as it is then.
    session.query_watched(sql, params, REPLAN_AFTER)
}

/// A claimed job from `CLAIMED_COLUMNS`, read from the row's column `first` on.
pub(crate) fn claimed(row: &Row, first: usize) -> Claimed {
    Claimed {
        id: row.get(first),
        app: row.get(first + 1),
        action: row.get(first + 2),
        git_source_id: row.get(first + 3),
        commit_sha: row.get(first + 4),
        entrypoint: row.get(first + 5),
        output_schema: row.get(first + 6),
        timeout_s: row.get(first + 7),
        tag: row.get(first + 8),
        input: row.get(first + 9),
        trigger_kind: row.get(first + 10),
        scheduled_for: row.get(first + 11),
        started_at: row.get(first + 12),
        restarts: row.get(first + 13),
        network: row.get(first + 14),
        memory_mb: row.get(first + 15),
        max_processes: row.get(first + 16),
        claim: row.get(first + 17),
        releases: row.get(first + 18),
        no_overlap: row.get(first + 19),
        warm: row.get(first + 20),
    }
}

/// Claimed jobs in the order of their claim ids, which is the order of preference.
pub(crate) fn in_claim_order(mut claimed: Vec<Claimed>, claims: &[String]) -> Vec<Claimed> {
    claimed.sort_by_key(|job| claims.iter().position(|claim| *claim == job.claim));
    claimed
}

/// Seconds until the next unclaimed job of `tags` is due (<= 0: one is due now, not since when);
/// None when there is none. A plain look: used by idle workers to decide how long to sleep, and by
/// --drain.
pub fn next_due_in(session: &mut Session, tags: &[String]) -> Result<Option<f64>> {
    let row = session.query_one(NEXT_DUE_SQL, &[&tags])?;
    Ok(row.get(0))
}

/// The earliest job of each priority of each tag (the claim's `priorities`), down to the first
/// priority with a due job.
pub const NEXT_DUE_SQL: &str = concat!(
    "\nWITH RECURSIVE\nsubscribed AS (SELECT DISTINCT unnest($1::text[]) AS tag),\n",
    priorities_cte!(),
    "\nSELECT extract(epoch FROM min(scheduled_for) - now())::float8 FROM priorities"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_claim_statement_has_its_limits_written_in() {
        assert_eq!((CLAIM_SQL.matches(FETCH_LIMIT).count(), CLAIM_SQL.matches(BATCH_LIMIT).count()), (1, 1));
        for k in [1, 2, 63] {
            let sql = claim_sql(k);
            let written = sql.matches(&format!("LIMIT {k}\n")).count();
            assert!(!sql.contains(FETCH_LIMIT) && !sql.contains(BATCH_LIMIT) && written == 2, "{sql}");
        }
        assert_eq!(claim_sql(0), claim_sql(1));
        assert_eq!(claim_sql(1000), claim_sql(64));
    }
}
