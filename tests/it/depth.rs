//! Every per-job statement besides the claim (claim.rs has it) stays an index lookup on a deep
//! queue: the completion of one job, with the next claim and without, and of several, the heartbeat, the log append, the no-overlap
//! check, the reaper's look for zombies and its requeue, and an idle worker's look for the next
//! due time. Each runs as a worker's connection
//! runs it (prepared, with a generic plan and the worker's planner settings) under EXPLAIN ANALYZE,
//! on 200,000 due jobs in one tag: at rest after ANALYZE, and mid-drain (5,000 more jobs claimed
//! and completed, their dead index entries not vacuumed yet). No node may scan a table of the
//! queue, and each statement touches a bounded number of buffers, whatever the depth.
//!
//! The looks over the running rows (the reaper's, the no-overlap check) walk the partial index of
//! running rows: each completed job leaves a dead entry there, which the next look visits once (in
//! proportion, checked) and marks, and later looks skip. A worker's reaper looks every few seconds,
//! so mid-drain the test takes one pass before the rest. No other index of a queue table may be
//! walked without a condition.

use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use crate::support::harness::{TestEnv, wait_for};
use crate::support::plans::{buffers, explain, fill, nodes};
use wf::db::Session;
use wf::queue::CHANNEL_COMPLETED;
use wf::queue::claim;
use wf::queue::complete::{self, COMPLETE_ONE_SQL, COMPLETE_SQL};
use wf::queue::heartbeat::HEARTBEAT_SQL;
use wf::queue::logs::APPEND_SQL;
use wf::queue::overlap::SKIP_SQL;
use wf::queue::reaper::{REQUEUE_SQL, ZOMBIES_SQL};

const DEPTH: i64 = 200_000;
/// The jobs claimed and completed for the queue mid-drain.
const DRAINED: usize = 5_000;
/// The jobs left running while the statements are explained.
const RUNNING: usize = 10;
/// The window of the test's claims.
const WINDOW: Duration = Duration::from_secs(60);
/// What one statement may touch, however deep the queue: a few index pages and rows per table it
/// writes or reads. A scan of any of the queue's tables at this depth touches thousands.
const BUFFERS_MAX: i64 = 200;
/// The partial index of the running rows.
const RUNNING_INDEX: &str = "job_queue_running_idx";
/// The tables that grow with the queue and its history.
const DEEP_TABLES: [&str; 4] = ["job", "job_queue", "job_logs", "job_completed"];

/// A job claimed by the test, as a worker holds it.
struct Held {
    id: Uuid,
    claim: String,
}

/// Claim `count` jobs one by one with the worker's claim.
fn claim_jobs(session: &mut Session, count: usize, prefix: &str) -> Vec<Held> {
    let tags = vec!["default".to_string()];
    (0..count)
        .map(|n| {
            let claim = format!("{prefix}#{n}");
            let job = claim::claim(session, &tags, std::slice::from_ref(&claim), WINDOW).unwrap().pop().unwrap();
            Held { id: job.id, claim }
        })
        .collect()
}

/// The shared buffers a whole statement touched. The root's counts include its children's, and
/// those of every CTE a node reads (with the reading node); a data-modifying CTE that no node reads
/// runs after the rest, and its counts are only its own.
fn total_buffers(plan: &Value) -> i64 {
    let root = &plan[0]["Plan"];
    let all = nodes(root);
    let read = |cte: &str| all.iter().any(|node| node.get("CTE Name").and_then(Value::as_str) == Some(cte));
    let unread: i64 = root
        .get("Plans")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|child| {
            let name = child.get("Subplan Name").and_then(Value::as_str).unwrap_or_default();
            name.strip_prefix("CTE ").is_some_and(|cte| !read(cte))
        })
        .map(buffers)
        .sum();
    buffers(root) + unread
}

/// No sequential scan of a deep table, a bounded number of buffers, and `rows` rows out.
fn assert_bounded(plan: &Value, what: &str, rows: i64) {
    assert_bounded_within(plan, what, rows, BUFFERS_MAX);
}

/// The same, within `buffers_max` buffers.
fn assert_bounded_within(plan: &Value, what: &str, rows: i64, buffers_max: i64) {
    let root = &plan[0]["Plan"];
    let text = serde_json::to_string_pretty(root).unwrap();
    for node in nodes(root) {
        let relation = node.get("Relation Name").and_then(Value::as_str).unwrap_or_default();
        let kind = node["Node Type"].as_str().unwrap_or_default();
        assert!(
            !(kind == "Seq Scan" && DEEP_TABLES.contains(&relation)),
            "{what}: a sequential scan of {relation}:\n{text}"
        );
        // An index walked without a condition is walked whole, dead entries and all: only the
        // partial index of the running rows (few) may be.
        let index = node.get("Index Name").and_then(Value::as_str).unwrap_or_default();
        assert!(
            !DEEP_TABLES.contains(&relation)
                || index.is_empty()
                || index == RUNNING_INDEX
                || node.get("Index Cond").is_some(),
            "{what}: {index} walked whole:\n{text}"
        );
    }
    let buffers = total_buffers(plan);
    assert!(buffers <= buffers_max, "{what}: {buffers} buffers:\n{text}");
    assert_eq!(root["Actual Rows"].as_i64(), Some(rows), "{what}: rows out:\n{text}");
}

/// Every statement, on jobs the test holds (each explained run is rolled back: the jobs stay as
/// they are for the next).
fn assert_statements_bounded(env: &TestEnv, held: &[Held], when: &str) {
    let (one, two) = (&held[0], &held[1]);
    let what = |statement: &str| format!("{statement}, {when}");

    let heartbeat = explain(env, HEARTBEAT_SQL, "uuid, text, float8", &format!("'{}', '{}', 60", one.id, one.claim));
    assert_bounded(&heartbeat, &what("the heartbeat"), 1);

    let append = explain(
        env,
        APPEND_SQL,
        "uuid, text, int, text[], text[]",
        &format!("'{}', '{}', 1, '{{stdout,stderr}}', '{{one,two}}'", one.id, one.claim),
    );
    assert_bounded(&append, &what("the log append"), 0);

    // Each completion statement in both forms: with the last lines to flush, and without.
    for lines in [true, false] {
        let form = if lines { "with lines" } else { "without lines" };
        let (types, values) = if lines {
            (", uuid[], text[], text[]", format!(", '{{{}}}', '{{stdout}}', '{{last}}'", one.id))
        } else {
            ("", String::new())
        };
        let completion = explain(
            env,
            COMPLETE_ONE_SQL.pick(lines),
            &format!("uuid, text, text, jsonb, jsonb, int, text{types}"),
            &format!(
                "'{id}', '{claim}', 'success', '{{\"ok\": true}}', NULL, 1, '{CHANNEL_COMPLETED}'{values}",
                id = one.id,
                claim = one.claim
            ),
        );
        assert_bounded(&completion, &what(&format!("the completion of one job {form}")), 1);

        let completion_and_claim = explain(
            env,
            complete::then_claim_sql(1, lines),
            &format!("text[], text[], float8, uuid, text, text, jsonb, jsonb, int, text{types}"),
            &format!(
                "'{{default}}', '{{next#1}}', 60, \
                 '{id}', '{claim}', 'success', '{{\"ok\": true}}', NULL, 1, '{CHANNEL_COMPLETED}'{values}",
                id = one.id,
                claim = one.claim
            ),
        );
        // The completion's statement and the claim's in one: each within the bound of one statement.
        assert_bounded_within(
            &completion_and_claim,
            &what(&format!("the completion of one job {form} with the next claim")),
            1,
            2 * BUFFERS_MAX,
        );

        let completions = explain(
            env,
            COMPLETE_SQL.pick(lines),
            &format!("uuid[], text[], text[], jsonb[], jsonb[], int[], text{types}"),
            &format!(
                "'{{{a},{b}}}', '{{{ca},{cb}}}', '{{success,failure}}', '{{\"{{}}\",NULL}}', '{{NULL,\"{{}}\"}}', \
                 '{{1,1}}', '{CHANNEL_COMPLETED}'{values}",
                a = one.id,
                b = two.id,
                ca = one.claim,
                cb = two.claim
            ),
        );
        assert_bounded(&completions, &what(&format!("the completion of two jobs {form}")), 2);
    }

    // The job has no schedule: nothing to skip, but the running rows are looked at.
    let skip = explain(env, SKIP_SQL, "uuid, text", &format!("'{}', '{}'", one.id, one.claim));
    assert_bounded(&skip, &what("the no-overlap check"), 0);

    // Old pings under a window of 0 s make every held job a zombie (a ping older than the server's
    // start counts from the start): each is looked at and locked.
    let ids: Vec<Uuid> = held.iter().map(|job| job.id).collect();
    env.db()
        .execute("UPDATE job_queue SET ping = now() - interval '1 hour', window_s = 0 WHERE job_id = ANY($1)", &[&ids])
        .unwrap();
    let zombies = explain(env, ZOMBIES_SQL, "float8", "0");
    assert_bounded(&zombies, &what("the reaper's look"), held.len() as i64);

    let requeue = explain(env, REQUEUE_SQL, "uuid[]", &format!("'{{{},{}}}'", one.id, two.id));
    assert_bounded(&requeue, &what("the reaper's requeue"), 2);

    let next_due = explain(env, claim::NEXT_DUE_SQL, "text[]", "'{default,other}'");
    assert_bounded(&next_due, &what("an idle worker's look for the next due time"), 1);
}

#[test]
fn every_per_job_statement_stays_bounded_on_a_deep_queue_at_rest_and_mid_drain() {
    let env = TestEnv::new();
    fill(&env, DEPTH, &["default"], "0", "now() - interval '1 hour' + n * interval '1 ms'");
    let mut session = Session::new(env.db());
    let held = claim_jobs(&mut session, RUNNING, "held");
    env.db().batch_execute("ANALYZE").unwrap();
    assert_statements_bounded(&env, &held, "at rest: 200,000 due jobs after ANALYZE");

    // Mid-drain: 5,000 more jobs through claim and completion, nothing vacuumed; then the ANALYZE
    // autovacuum would run on a queue in this state.
    let mut db = env.db();
    // No autovacuum of any of them either: its snapshot would keep the dead entries of the
    // completed jobs from being marked by the looks over them (the reaper pass below).
    for table in DEEP_TABLES {
        db.batch_execute(&format!("ALTER TABLE {table} SET (autovacuum_enabled = false)")).unwrap();
    }
    for job in claim_jobs(&mut session, DRAINED, "drained") {
        assert_eq!(crate::statements::complete(&mut db, job.id, &job.claim, true), 1, "{} completed", job.id);
    }
    // A reaper pass, as a worker's reaper makes one every few seconds: its look over the running
    // rows visits the dead index entries the completed jobs left once, in proportion to them, and
    // marks them, so that every later look skips them.
    let pass = total_buffers(&explain(&env, ZOMBIES_SQL, "float8", "60"));
    assert!(pass <= BUFFERS_MAX + 2 * DRAINED as i64, "the first reaper pass after the drain: {pass} buffers");
    // An entry is marked only once no snapshot may still see its row, which a busy cluster can
    // delay a moment (seen once in CI: the look after the pass walked 235 buffers of them): the
    // next passes, as a worker's reaper makes them, until one finds them marked.
    wait_for(Duration::from_secs(30), "a reaper pass to find the dead entries marked", || {
        (total_buffers(&explain(&env, ZOMBIES_SQL, "float8", "60")) <= BUFFERS_MAX).then_some(())
    });
    assert_statements_bounded(&env, &held, "mid-drain, before ANALYZE");
    db.batch_execute("ANALYZE").unwrap();
    assert_statements_bounded(&env, &held, "mid-drain, after ANALYZE");
}
