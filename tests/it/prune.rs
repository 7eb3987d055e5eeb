//! Retention: `wf prune` deletes old completed jobs in batches, never a queued or running one.

use serde_json::{Value, json};
use wf::queue::prune::BATCH_SQL;

use crate::support::fixtures::{enqueue, enqueue_batch, synced};
use crate::support::harness::{GitRepo, TestEnv};
use crate::support::plans::{explain, fill, nodes};
use crate::support::terminal::plain;

#[test]
fn prune_deletes_only_old_completed_jobs_with_their_logs() {
    let env = TestEnv::new();
    synced(&env);
    enqueue_batch(&env, "t/chatty", &vec![json!({}); 2500]);
    // Completing 2,500 jobs with bun proves nothing more about retention: complete them in SQL.
    env.db()
        .batch_execute(
            "WITH gone AS (DELETE FROM job_queue RETURNING job_id)
             INSERT INTO job_completed (job_id, status, result) SELECT job_id, 'success', '{}' FROM gone;
             INSERT INTO job_logs (job_id, attempt, stream, line) SELECT job_id, 1, 'stdout', 'x' FROM job_completed;",
        )
        .unwrap();
    let failed = enqueue(&env, "t/fail", json!({}));
    env.wf(["work", "--drain"]).ok();
    // Everything completed so far is old; then a recent job, a queued one, a running one.
    env.db().batch_execute("UPDATE job_completed SET completed_at = now() - interval '40 days'").unwrap();
    let recent = enqueue(&env, "t/echo", json!({}));
    env.wf(["work", "--drain"]).ok();
    let queued = env.wf(["enqueue", "t/echo", "--in", "1h"]).ok().stdout.trim().to_string();
    let running = enqueue(&env, "t/echo", json!({}));
    env.db()
        .execute(
            "UPDATE job_queue SET running = true, worker = 'w#1', started_at = now() - interval '90 days'
              WHERE job_id = $1::text::uuid",
            &[&running],
        )
        .unwrap();
    // A completion record beside a queue row (no completion leaves both; written by hand here, and
    // no foreign key of the queue refuses the job's delete): the job is still in the queue, kept.
    let in_queue = enqueue(&env, "t/echo", json!({}));
    env.db()
        .execute(
            "INSERT INTO job_completed (job_id, status, completed_at)
             VALUES ($1::text::uuid, 'success', now() - interval '90 days')",
            &[&in_queue],
        )
        .unwrap();
    let old_logs: i64 = env.scalar("SELECT count(*) FROM job_logs");
    assert!(old_logs > 0);

    // Without --yes and without a terminal: refused, nothing deleted.
    env.wf(["prune", "--older-than", "30d"]).run().expect_code(3);
    // --status chooses jobs only: with --sources alone it would change nothing it says.
    let status_alone = env.wf(["prune", "--sources", "--status", "failure", "--yes"]).run().expect_code(2);
    assert!(status_alone.stderr.contains("--older-than"), "{}", status_alone.stderr);
    // Nothing to prune given: either is named (`--older-than` alone was said to be required).
    let nothing = env.wf(["prune", "--yes"]).run().expect_code(2);
    assert!(nothing.stderr.contains("<--older-than <OLDER_THAN>|--sources>"), "{}", nothing.stderr);
    let dry = env.wf(["prune", "--older-than", "30d", "--dry-run", "--json"]).ok().json();
    assert_eq!(dry["would_delete"], 2501);
    assert_eq!(dry["deleted"], 0);
    let only_failures = env.wf(["prune", "--older-than", "30d", "--status", "failure", "--yes", "--json"]).ok().json();
    assert_eq!(only_failures, json!({"deleted": 1}));
    env.wf(["show", &failed]).run().expect_code(1);
    // On a terminal: a spinner while it counts, then the question; refused, nothing deleted.
    let mut terminal = env.wf(["prune", "--older-than", "30d"]).in_terminal();
    terminal.wait_for("delete 2500 completed job(s)");
    terminal.type_in(b"n");
    let (code, screen) = terminal.finish();
    assert_ne!(code, 0, "{screen:?}");
    assert!(plain(&screen).contains("counting the jobs completed before"), "a spinner while it counts: {screen:?}");
    let pruned = env.wf(["prune", "--older-than", "30d", "--yes", "--json"]).ok().json();
    assert_eq!(pruned, json!({"deleted": 2500}));

    let left: Vec<String> = env.column("SELECT id::text FROM job ORDER BY 1");
    let mut expected = vec![recent.clone(), queued, running, in_queue.clone()];
    expected.sort();
    assert_eq!(left, expected, "only the recent, queued and running jobs remain");
    let still_queued: i64 = env.scalar(&format!("SELECT count(*) FROM job_queue WHERE job_id = '{in_queue}'"));
    assert_eq!(still_queued, 1);
    let orphans: i64 = env.scalar(
        "SELECT (SELECT count(*) FROM job_logs WHERE job_id NOT IN (SELECT id FROM job))
              + (SELECT count(*) FROM job_completed WHERE job_id NOT IN (SELECT id FROM job))",
    );
    assert_eq!(orphans, 0, "logs and completion records went with their jobs");
    assert_eq!(env.wf(["show", &recent, "--json"]).ok().json()["status"], "success");
}

/// A failed job retried by a job that may still run, directly or along its chain of retries, is
/// kept however old: its id is how an operator cancels its retries and finds them (pruned, `wf
/// cancel` of it said "no such job" while its retry ran later). Once the chain has ended, it goes.
#[test]
fn a_failed_job_whose_retries_may_still_run_is_kept() {
    let env = TestEnv::new();
    let repo = GitRepo::new();
    repo.manifest(&json!({"apps": {"r": {"actions": {
        "flaky": {"entrypoint": "flaky.ts", "retries": {"max": 3, "backoff": "1h"}},
    }}}}));
    repo.file("flaky.ts", "export function main() { throw new Error(\"failed\"); }\n");
    repo.commit("flaky");
    env.wf(["source", "add", "r", &repo.url()]).ok();
    env.wf(["sync", "r"]).ok();
    let first = enqueue(&env, "r/flaky", json!({}));
    env.wf(["work", "--max-jobs", "1", "--isolation", "none"]).ok();
    // The first retry due now, to fail in turn: its retry waits for its backoff.
    env.db().execute("UPDATE job_queue SET scheduled_for = now()", &[]).unwrap();
    env.wf(["work", "--max-jobs", "1", "--isolation", "none"]).ok();
    let chain: Vec<String> = env.column("SELECT id::text FROM job ORDER BY retry_number");
    assert_eq!(chain.len(), 3, "{chain:?}");
    let queued: Vec<String> = env.column("SELECT job_id::text FROM job_queue");
    assert_eq!(queued, [chain[2].clone()]);
    env.db().batch_execute("UPDATE job_completed SET completed_at = now() - interval '40 days'").unwrap();

    let dry = env.wf(["prune", "--older-than", "30d", "--dry-run", "--json"]).ok().json();
    assert_eq!(dry["would_delete"], 0, "{dry}");
    let pruned = env.wf(["prune", "--older-than", "30d", "--yes", "--json"]).ok().json();
    assert_eq!(pruned, json!({"deleted": 0}));
    let canceled = env.wf(["cancel", &first, "--json"]).ok().json();
    assert_eq!(
        canceled.to_string().matches(&chain[2]).count(),
        1,
        "the failed job's id reaches its last retry: {canceled}"
    );
    env.db().batch_execute("UPDATE job_completed SET completed_at = now() - interval '40 days'").unwrap();
    let pruned = env.wf(["prune", "--older-than", "30d", "--yes", "--json"]).ok().json();
    assert_eq!(pruned, json!({"deleted": 3}), "the chain has ended");
}

/// A batch of retention walks the completion records by age and probes the queue by its key for
/// each, however deep the queue and the history: no scan of either, nothing hashed. (As a NOT
/// EXISTS, the probe became a hash anti-join over the whole queue.)
#[test]
fn a_prune_batch_walks_the_oldest_records_and_probes_the_queue_by_its_key() {
    let env = TestEnv::new();
    fill(&env, 100_000, &["default"], "0", "now()");
    env.db()
        .batch_execute(
            "WITH old AS (
                 SELECT gen_random_uuid() AS id, n FROM generate_series(1, 100000) AS n
             ), jobs AS (
                 INSERT INTO job (id, app_key, action_key, git_source_id, commit_sha, entrypoint,
                                  timeout_s, tag, priority, input, trigger_kind, scheduled_for)
                 SELECT id, 'a', 'b', gen_random_uuid(), 'c', 'e.ts', 60, 'default', 0, '{}', 'manual', now()
                   FROM old
             )
             INSERT INTO job_completed (job_id, status, completed_at)
             SELECT id, 'success', now() - interval '90 days' + n * interval '1 s' FROM old;
             ANALYZE job; ANALYZE job_queue; ANALYZE job_completed;",
        )
        .unwrap();
    let plan = explain(&env, BATCH_SQL, "timestamptz, text, bigint", "now() - interval '30 days', NULL, 1000");
    let root = &plan[0]["Plan"];
    let text = serde_json::to_string_pretty(root).unwrap();
    for node in nodes(root) {
        let kind = node["Node Type"].as_str().unwrap_or_default();
        let relation = node.get("Relation Name").and_then(Value::as_str).unwrap_or_default();
        assert!(!kind.starts_with("Hash") || kind == "HashAggregate", "a {kind} node:\n{text}");
        if ["job_queue", "job_completed"].contains(&relation) {
            assert!(kind.starts_with("Index") && node.get("Index Cond").is_some(), "{relation} read whole:\n{text}");
        }
    }
    let walked = nodes(root)
        .into_iter()
        .find(|node| node.get("Relation Name").and_then(Value::as_str) == Some("job_completed"))
        .expect("the completion records are read");
    assert_eq!(walked["Index Name"], "job_completed_completed_at_idx", "{text}");
    assert_eq!(walked["Actual Rows"], 1000, "a batch's worth of records walked:\n{text}");
    // The walk along a job's retries goes by the index of `retry_of`.
    assert!(nodes(root).iter().all(|node| node["Node Type"] != "Seq Scan"), "a table read whole:\n{text}");
    let chain = nodes(root)
        .into_iter()
        .filter(|node| node.get("Index Name").and_then(Value::as_str) == Some("job_retry_of_idx"))
        .count();
    assert_eq!(chain, 2, "the first retries and the retries of those:\n{text}");
}

/// `prune --sources` looks up, under the job table's lock (enqueues wait), which of the stored
/// commits and the store's trees no job pins: one pass over the jobs, however many commits. (As a
/// NOT EXISTS per commit, with no index on a job's commit, it read the whole table once per commit.)
#[test]
fn the_pinned_check_reads_the_jobs_once_for_any_number_of_commits() {
    let env = TestEnv::new();
    synced(&env);
    let source: uuid::Uuid = env.scalar("SELECT id FROM git_source WHERE name = 'tests'");
    let catalog: String = env.scalar("SELECT commit_sha FROM git_source WHERE name = 'tests'");
    // 50,000 jobs of this source on 2 commits, then commits no job pins.
    env.db()
        .execute(
            "INSERT INTO job (id, app_key, action_key, git_source_id, commit_sha, entrypoint,
                              timeout_s, tag, priority, input, trigger_kind, scheduled_for)
             SELECT gen_random_uuid(), 't', 'echo', $1, 'pinned-' || n % 2, 'e.ts', 60, 'default', 0, '{}',
                    'manual', now()
               FROM generate_series(1, 50000) AS n",
            &[&source],
        )
        .unwrap();
    env.db().batch_execute("ANALYZE job").unwrap();
    let unused: Vec<String> = (0..9).map(|n| format!("unused-{n}")).collect();
    let mut shas = unused.clone();
    shas.extend(["pinned-1".to_string(), catalog]);
    let ids = vec![source; shas.len()];

    let sql = wf::source::unpinned_sql();
    let mut found: Vec<String> = env.db().query(sql, &[&ids, &shas]).unwrap().iter().map(|row| row.get(1)).collect();
    found.sort();
    assert_eq!(found, unused, "the commits no job pins and the catalog is not on");

    // A hash of 50,000 jobs' commits fits the default work_mem, and the planner makes it, whatever
    // the statement; one of 1,000,000 does not, and it read the jobs once per commit instead (2 s
    // for 9). The same proportion here: 64 kB for 50,000 jobs.
    let mut client = env.db();
    client.batch_execute("SET work_mem = '64kB'").unwrap();
    let plan: Value =
        client.query_one(&format!("EXPLAIN (ANALYZE, FORMAT JSON) {sql}"), &[&ids, &shas]).unwrap().get(0);
    let root = &plan[0]["Plan"];
    let text = serde_json::to_string_pretty(root).unwrap();
    let reads_jobs = |node: &Value| {
        let on_job = |node: &Value| node.get("Relation Name").and_then(Value::as_str) == Some("job");
        // A copy of the rows read, read again at each loop, counts as reading them again.
        on_job(node) || (node["Node Type"] == "Materialize" && nodes(node).into_iter().any(on_job))
    };
    let loops: i64 = nodes(root)
        .into_iter()
        .filter(|node| node.get("Relation Name").and_then(Value::as_str) == Some("job"))
        .map(|node| node["Actual Loops"].as_i64().unwrap_or(0))
        .sum();
    assert_eq!(loops, 1, "the jobs read once:\n{text}");
    let rows: f64 = nodes(root)
        .into_iter()
        .filter(|node| reads_jobs(node))
        .map(|node| node["Actual Rows"].as_f64().unwrap_or(0.0) * node["Actual Loops"].as_f64().unwrap_or(1.0))
        .sum();
    assert!(rows <= 50_000.0, "{rows} job rows read (50,000 jobs):\n{text}");
}
