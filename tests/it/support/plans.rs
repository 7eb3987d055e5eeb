//! Deep queues and the plans of statements run on them: a queue filled straight in SQL, a statement
//! explained as a worker runs it, and the nodes of an EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON).

use serde_json::Value;

use crate::support::harness::TestEnv;

/// Fill the queue with `count` jobs spread over `tags`, straight in SQL as an enqueue writes them
/// (the queue row with its job's creation time), then ANALYZE it.
pub(crate) fn fill(env: &TestEnv, count: i64, tags: &[&str], priority: &str, due: &str) {
    let tags: Vec<String> = tags.iter().map(|t| t.to_string()).collect();
    env.db()
        .execute(
            &format!(
                "WITH new AS (
                     SELECT gen_random_uuid() AS id, ($2::text[])[1 + n % array_length($2::text[], 1)] AS tag,
                            {priority} AS priority, {due} AS due
                       FROM generate_series(1, $1::bigint) AS n
                 ), jobs AS (
                     INSERT INTO job (id, app_key, action_key, git_source_id, commit_sha, entrypoint,
                                      timeout_s, tag, priority, input, trigger_kind, scheduled_for)
                     SELECT id, 'a', 'b', gen_random_uuid(), 'c', 'e.ts', 60, tag, priority, '{{}}', 'manual', due
                       FROM new
                 )
                 INSERT INTO job_queue (job_id, tag, priority, scheduled_for, created_at)
                 SELECT id, tag, priority, due, now() FROM new"
            ),
            &[&count, &tags],
        )
        .unwrap();
    env.db().batch_execute("ANALYZE job_queue").unwrap();
}

/// EXPLAIN ANALYZE `sql`, prepared with these parameter types and run with these literal
/// arguments (EXPLAIN EXECUTE takes no others), as a worker's connection runs it: with a generic
/// plan and the worker's planner settings; rolled back.
pub(crate) fn explain(env: &TestEnv, sql: &str, types: &str, arguments: &str) -> Value {
    let mut client = env.db();
    let mut tx = client.transaction().unwrap();
    tx.batch_execute(&format!("SET LOCAL {}", wf::db::PLANNER.join("; SET LOCAL "))).unwrap();
    tx.batch_execute(&format!("PREPARE statement({types}) AS {sql}")).unwrap();
    let plan: Value = tx
        .query_one(&format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE statement({arguments})"), &[])
        .unwrap()
        .get(0);
    tx.rollback().unwrap();
    plan
}

/// EXPLAIN ANALYZE the page of `wf jobs` for `filter` (21 jobs, the first page), as `wf jobs`
/// runs it: the statement of `inspect::list_statement` with its parameters.
pub(crate) fn explain_listing(env: &TestEnv, filter: &wf::queue::inspect::Filter<'_>) -> Value {
    let (sql, params) = wf::queue::inspect::list_statement(filter, 21, 0);
    let params: Vec<&(dyn postgres::types::ToSql + Sync)> = params.iter().map(|param| param.as_ref()).collect();
    env.db().query_one(&format!("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}"), &params).unwrap().get(0)
}

/// The shared buffers a plan node touched (its children's included), read or found in memory.
pub(crate) fn buffers(node: &Value) -> i64 {
    node["Shared Hit Blocks"].as_i64().unwrap_or(0) + node["Shared Read Blocks"].as_i64().unwrap_or(0)
}

/// Every plan node, depth first.
pub(crate) fn nodes(plan: &Value) -> Vec<&Value> {
    let mut all = vec![plan];
    if let Some(children) = plan.get("Plans").and_then(Value::as_array) {
        for child in children {
            all.extend(nodes(child));
        }
    }
    all
}
