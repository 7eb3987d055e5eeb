//! The `--json` document of every subcommand, pinned (see `checks::pin`): field names, nesting,
//! value kinds and the printed form. Outside scripts rely on them (SPEC), so each one changes only
//! on purpose. `db up` and `db down` are pinned in `embedded`, `bench --bun` in `bench`.

use serde_json::{Value, json};

use crate::support::checks::{kind_of, pin};
use crate::support::fixtures::{enqueue, synced};
use crate::support::harness::TestEnv;

/// A job completed in SQL as a worker would have (these tests are about documents, not runs).
fn complete(env: &TestEnv, id: &str, status: &str, result: Option<Value>, error: Option<Value>) {
    let id: uuid::Uuid = id.parse().unwrap();
    env.db()
        .execute(
            "WITH gone AS (DELETE FROM job_queue WHERE job_id = $1 RETURNING job_id, restarts)
             INSERT INTO job_completed (job_id, status, result, error, worker, started_at, restarts)
             SELECT job_id, $2, $3, $4, 'w#1', now(), restarts FROM gone",
            &[&id, &status, &result, &error],
        )
        .unwrap();
}

#[test]
fn db_status_and_migrate() {
    let env = TestEnv::new();
    let status = env.wf(["db", "status", "--json"]).ok();
    pin(
        &status,
        env.dir.path(),
        &["location", "schema_version", "latest_version"],
        r#"
{
  "created": true,
  "embedded": false,
  "held_down": false,
  "latest_version": "<number>",
  "location": "<text>",
  "running": true,
  "schema_version": "<number>",
  "tls": null
}"#,
    );
    let migrate = env.wf(["db", "migrate", "--json"]).ok();
    pin(
        &migrate,
        env.dir.path(),
        &["schema_version"],
        r#"
{
  "applied": [],
  "schema_version": "<number>"
}"#,
    );
}

#[test]
fn source_add_list_rm() {
    let env = TestEnv::new();
    let repo = crate::support::fixtures::actions_repo();
    let added = env.wf(["source", "add", "tests", &repo.url(), "--branch", "main", "--json"]).ok();
    pin(
        &added,
        env.dir.path(),
        &["url"],
        r#"
{
  "branch": "main",
  "id": "<uuid>",
  "name": "tests",
  "url": "<text>"
}"#,
    );
    env.wf(["sync", "tests"]).ok();
    let list = env.wf(["source", "list", "--json"]).ok();
    pin(
        &list,
        env.dir.path(),
        &["url"],
        r#"
[
  {
    "branch": "main",
    "commit_sha": "<sha>",
    "id": "<uuid>",
    "name": "tests",
    "synced_at": "<time>",
    "url": "<text>"
  }
]"#,
    );
    let removed = env.wf(["source", "rm", "tests", "--yes", "--json"]).ok();
    pin(
        &removed,
        env.dir.path(),
        &[],
        r#"
{
  "actions": 17,
  "apps": 2,
  "id": "<uuid>",
  "name": "tests"
}"#,
    );
}

#[test]
fn sync() {
    let env = TestEnv::new();
    let repo = crate::support::harness::GitRepo::new();
    repo.manifest(&json!({"apps": {"a": {"tag": "t1", "actions": {"x": {"entrypoint": "x.ts", "timeout": 9}}}}}));
    repo.file("x.ts", "export function main() {}\n");
    repo.commit("one action");
    env.wf(["source", "add", "s", &repo.url()]).ok();
    let synced = env.wf(["sync", "s", "--json"]).ok();
    pin(
        &synced,
        env.dir.path(),
        &[],
        r#"
{
  "actions": [
    {
      "action": "x",
      "app": "a",
      "tag": "t1",
      "timeout": 9
    }
  ],
  "changed": true,
  "commit_sha": "<sha>",
  "removed": [],
  "source": "s"
}"#,
    );
}

#[test]
fn actions() {
    let env = TestEnv::new();
    let repo = crate::support::harness::GitRepo::new();
    repo.manifest(&json!({"apps": {"a": {"actions": {"x": {"entrypoint": "x.ts"}}}}}));
    repo.file("x.ts", "export function main() {}\n");
    repo.commit("one action");
    env.wf(["source", "add", "s", &repo.url()]).ok();
    env.wf(["sync", "s"]).ok();
    let actions = env.wf(["actions", "--json"]).ok();
    pin(
        &actions,
        env.dir.path(),
        &[],
        r#"
[
  {
    "action": "x",
    "app": "a",
    "commit_sha": "<sha>",
    "entrypoint": "x.ts",
    "source": "s",
    "tag": "default",
    "timeout": 300
  }
]"#,
    );
}

#[test]
fn enqueue_single_batch_and_wait() {
    let env = TestEnv::new();
    synced(&env);
    let single = env.wf(["enqueue", "t/echo", "--priority", "3", "--json"]).ok();
    pin(
        &single,
        env.dir.path(),
        &[],
        r#"
{
  "action": "echo",
  "app": "t",
  "commit_sha": "<sha>",
  "existing": false,
  "id": "<uuid>",
  "priority": 3,
  "scheduled_for": "<time>",
  "tag": "default",
  "trigger_kind": "manual"
}"#,
    );
    let batch = crate::support::fixtures::path(&env, "batch.jsonl");
    std::fs::write(&batch, "{}\n{}\n").unwrap();
    let ids = env.wf(["enqueue", "t/echo", "--batch", batch.to_str().unwrap(), "--json"]).ok();
    pin(
        &ids,
        env.dir.path(),
        &[],
        r#"
{
  "ids": [
    "<uuid>",
    "<uuid>"
  ]
}"#,
    );
    let waited = env.wf(["enqueue", "t/echo", "--wait", "--timeout", "1s", "--json"]).run().expect_code(3);
    pin(
        &waited,
        env.dir.path(),
        &[],
        r#"
{
  "id": "<uuid>",
  "status": "queued"
}"#,
    );
}

#[test]
fn work() {
    let env = TestEnv::new();
    let summary = env.wf(["work", "--drain", "--json"]).ok();
    pin(
        &summary,
        env.dir.path(),
        &[],
        r#"
{
  "canceled": 0,
  "failed": 0,
  "fenced": 0,
  "released": 0,
  "succeeded": 0
}"#,
    );
}

#[test]
fn cancel() {
    let env = TestEnv::new();
    synced(&env);
    let id = enqueue(&env, "t/echo", json!({}));
    let canceled = env.wf(["cancel", &id, "--json"]).ok();
    pin(
        &canceled,
        env.dir.path(),
        &[],
        r#"
[
  {
    "id": "<uuid>",
    "outcome": "canceled"
  }
]"#,
    );
}

#[test]
fn rerun() {
    let env = TestEnv::new();
    synced(&env);
    let id = enqueue(&env, "t/echo", json!({}));
    let rerun = env.wf(["rerun", &id, "--json"]).ok();
    pin(
        &rerun,
        env.dir.path(),
        &[],
        r#"
{
  "action": "echo",
  "app": "t",
  "commit_sha": "<sha>",
  "existing": false,
  "id": "<uuid>",
  "priority": 0,
  "rerun_of": "<uuid>",
  "scheduled_for": "<time>",
  "tag": "default",
  "trigger_kind": "manual"
}"#,
    );
}

#[test]
fn schedule_update() {
    let env = TestEnv::new();
    synced(&env);
    env.wf(["schedule", "add", "s", "t/echo", "--cron", "0 3 * * *"]).ok();
    let updated = env.wf(["schedule", "update", "s", "--cron", "0 4 * * *", "--no-overlap", "true", "--json"]).ok();
    pin(
        &updated,
        env.dir.path(),
        &[],
        r#"
{
  "action": "echo",
  "app": "t",
  "cron": "0 4 * * *",
  "enabled": true,
  "enqueued": 0,
  "enqueued_up_to": "<time>",
  "input": {},
  "last_fire_time": "<time>",
  "name": "s",
  "next_fire_time": "<time>",
  "no_overlap": true,
  "priority": 0,
  "problem": null,
  "state": "active",
  "tag": null,
  "tz": "UTC",
  "withdrawn": 0
}"#,
    );
}

#[test]
fn reap() {
    let env = TestEnv::new();
    let reaped = env.wf(["reap", "--json"]).ok();
    pin(
        &reaped,
        env.dir.path(),
        &[],
        r#"
{
  "canceled": 0,
  "failed": 0,
  "requeued": 0
}"#,
    );
}

/// The job every document of `jobs`, `show` and `status` describes: completed with a result.
fn one_completed_job(env: &TestEnv) -> String {
    synced(env);
    let id = enqueue(env, "t/echo", json!({"n": 1}));
    complete(env, &id, "success", Some(json!({"ok": true})), None);
    id
}

#[test]
fn jobs() {
    let env = TestEnv::new();
    one_completed_job(&env);
    let jobs = env.wf(["jobs", "--json"]).ok();
    pin(
        &jobs,
        env.dir.path(),
        &[],
        r#"
[
  {
    "action": "echo",
    "app": "t",
    "attempts": 1,
    "canceled_by": null,
    "canceled_reason": null,
    "commit_sha": "<sha>",
    "completed_at": "<time>",
    "created_at": "<time>",
    "error": null,
    "id": "<uuid>",
    "input": {
      "n": 1
    },
    "key": null,
    "priority": 0,
    "rerun_of": null,
    "restarts": 0,
    "result": {
      "ok": true
    },
    "retried_as": null,
    "retry_of": null,
    "schedule": null,
    "scheduled_for": "<time>",
    "started_at": "<time>",
    "status": "success",
    "tag": "default",
    "trigger_kind": "manual",
    "worker": "w#1"
  }
]"#,
    );
}

#[test]
fn show() {
    let env = TestEnv::new();
    synced(&env);
    let id = enqueue(&env, "t/echo", json!({}));
    let shown = env.wf(["show", &id, "--json"]).ok();
    pin(
        &shown,
        env.dir.path(),
        &[],
        r#"
{
  "action": "echo",
  "app": "t",
  "attempts": 0,
  "canceled_by": null,
  "canceled_reason": null,
  "commit_sha": "<sha>",
  "completed_at": null,
  "created_at": "<time>",
  "error": null,
  "id": "<uuid>",
  "input": {},
  "key": null,
  "priority": 0,
  "rerun_of": null,
  "restarts": 0,
  "result": null,
  "retried_as": null,
  "retry_of": null,
  "schedule": null,
  "scheduled_for": "<time>",
  "started_at": null,
  "status": "queued",
  "tag": "default",
  "trigger_kind": "manual",
  "worker": null
}"#,
    );
}

#[test]
fn result_of_each_ending() {
    let env = TestEnv::new();
    let ok = one_completed_job(&env);
    let success = env.wf(["result", &ok, "--json"]).ok();
    pin(
        &success,
        env.dir.path(),
        &[],
        r#"
{
  "id": "<uuid>",
  "result": {
    "ok": true
  },
  "status": "success"
}"#,
    );
    let failed = enqueue(&env, "t/fail", json!({}));
    let error = json!({"name": "TypeError", "message": "this action fails", "stack": "at main"});
    complete(&env, &failed, "failure", None, Some(error));
    let failure = env.wf(["result", &failed, "--json"]).run().expect_code(4);
    pin(
        &failure,
        env.dir.path(),
        &[],
        r#"
{
  "error": {
    "message": "this action fails",
    "name": "TypeError",
    "stack": "at main"
  },
  "id": "<uuid>",
  "status": "failure"
}"#,
    );
    let canceled = enqueue(&env, "t/echo", json!({}));
    env.wf(["cancel", &canceled, "--reason", "not needed"]).ok();
    let cancellation = env.wf(["result", &canceled, "--json"]).run().expect_code(4);
    pin(
        &cancellation,
        env.dir.path(),
        &["canceled_by"],
        r#"
{
  "error": {
    "canceled_by": "<text>",
    "canceled_reason": "not needed"
  },
  "id": "<uuid>",
  "status": "canceled"
}"#,
    );
    // Without --json, the result, the error or the cancellation alone.
    let plain = env.wf(["result", &canceled]).run().expect_code(4);
    pin(
        &plain,
        env.dir.path(),
        &["canceled_by"],
        r#"
{
  "canceled_by": "<text>",
  "canceled_reason": "not needed"
}"#,
    );
    let waiting = enqueue(&env, "t/echo", json!({}));
    let not_finished = env.wf(["result", &waiting, "--json"]).run().expect_code(3);
    pin(
        &not_finished,
        env.dir.path(),
        &[],
        r#"
{
  "id": "<uuid>",
  "status": "queued"
}"#,
    );
}

#[test]
fn logs() {
    let env = TestEnv::new();
    let id = one_completed_job(&env);
    let job: uuid::Uuid = id.parse().unwrap();
    env.db()
        .execute(
            "INSERT INTO job_logs (job_id, attempt, stream, line) VALUES ($1, 1, 'stdout', 'hello'), ($1, 1, 'wf', 'note')",
            &[&job],
        )
        .unwrap();
    let logs = env.wf(["logs", &id, "--json"]).ok();
    pin(
        &logs,
        env.dir.path(),
        &[],
        r#"
[
  {
    "attempt": 1,
    "line": "hello",
    "stream": "stdout",
    "time": "<time>"
  },
  {
    "attempt": 1,
    "line": "note",
    "stream": "wf",
    "time": "<time>"
  }
]"#,
    );
}

#[test]
fn status() {
    let env = TestEnv::new();
    synced(&env);
    enqueue(&env, "t/echo", json!({}));
    let status = env.wf(["status", "--json"]).ok();
    pin(
        &status,
        env.dir.path(),
        &["oldest_wait_s"],
        r#"
[
  {
    "oldest_wait_s": "<number>",
    "queued": 1,
    "running": 0,
    "scheduled": 0,
    "tag": "default",
    "zombies": 0
  }
]"#,
    );
}

#[test]
fn workers() {
    let env = TestEnv::new();
    env.db()
        .batch_execute(
            "INSERT INTO worker (id, name, host, pid, tags, slots, window_s, stopped_at)
             VALUES ('w#1', 'w', 'h', 7, '{default}', 2, 60, now())",
        )
        .unwrap();
    let workers = env.wf(["workers", "--json"]).ok();
    pin(
        &workers,
        env.dir.path(),
        &[],
        r#"
[
  {
    "busy": 0,
    "host": "h",
    "jobs": [],
    "last_seen": "<time>",
    "name": "w",
    "pid": 7,
    "slots": 2,
    "started_at": "<time>",
    "state": "gone",
    "tags": [
      "default"
    ]
  }
]"#,
    );
}

#[test]
fn token_verify() {
    let secret = "0123456789abcdef0123456789abcdef-documents";
    let env = TestEnv::new().env("WF_SECRET", secret);
    let claims = wf::token::Claims::for_claim(uuid::Uuid::new_v4(), "w#1", chrono::Utc::now(), 60);
    let token = wf::token::issue(secret.as_bytes(), &claims);
    let verified = env.wf(["token", "verify", &token, "--json"]).run().expect_code(1);
    pin(
        &verified,
        env.dir.path(),
        &[],
        r#"
{
  "claim": "w#1",
  "current": false,
  "expires_at": "<time>",
  "job": "<uuid>",
  "valid": false
}"#,
    );
}

#[test]
fn schedule_add_list_pause_resume_tick_rm() {
    let env = TestEnv::new();
    synced(&env);
    let schedule = r#"
{
  "action": "echo",
  "app": "t",
  "cron": "0 3 * * *",
  "enabled": true,
  "enqueued_up_to": null,
  "input": {
    "n": 1
  },
  "last_fire_time": null,
  "name": "nightly",
  "next_fire_time": "<time>",
  "no_overlap": false,
  "priority": 2,
  "problem": null,
  "state": "active",
  "tag": "gpu",
  "tz": "UTC"
}"#;
    let input = r#"{"n":1}"#;
    let add = ["schedule", "add", "nightly", "t/echo", "--cron", "0 3 * * *", "--input", input, "--priority", "2"];
    let added = env.wf(add.iter().chain(&["--tag", "gpu", "--json"])).ok();
    pin(&added, env.dir.path(), &[], schedule);
    let list = env.wf(["schedule", "list", "--json"]).ok();
    pin(&list, env.dir.path(), &[], &format!("[\n{}\n]", indent(schedule.trim())));
    let paused = env.wf(["schedule", "pause", "nightly", "--json"]).ok();
    pin(
        &paused,
        env.dir.path(),
        &[],
        r#"
{
  "enabled": false,
  "name": "nightly",
  "paused": true,
  "withdrawn": 0
}"#,
    );
    // A horizon of 0 s: within two minutes before 03:00 UTC, the default one would enqueue a job.
    let resumed = env.wf(["schedule", "resume", "nightly", "--horizon", "0s", "--json"]).ok();
    pin(
        &resumed,
        env.dir.path(),
        &[],
        r#"
{
  "enabled": true,
  "enqueued": 0,
  "name": "nightly",
  "resumed": true,
  "withdrawn": 0
}"#,
    );
    // Paused again: run within a minute before 03:00 UTC, the tick would fire it too.
    env.wf(["schedule", "pause", "nightly"]).ok();
    env.wf(["schedule", "add", "often", "t/echo", "--cron", "* * * * *"]).ok();
    let ticked = env.wf(["schedule", "tick", "--horizon", "1m", "--json"]).ok();
    let fired: Value = ticked.json();
    let often = fired["fired"].as_array().unwrap().iter().find(|f| f["schedule"] == "often").unwrap();
    let ids = often["ids"].as_array().unwrap().len();
    let expected_ids = vec!["<uuid>"; ids];
    let expected =
        json!({"fired": [{"error": null, "ids": expected_ids, "late": 0, "schedule": "often", "skipped": 0}]});
    pin(&ticked, env.dir.path(), &[], &serde_json::to_string_pretty(&expected).unwrap());
    let removed = env.wf(["schedule", "rm", "nightly", "--yes", "--json"]).ok();
    pin(
        &removed,
        env.dir.path(),
        &[],
        r#"
{
  "removed": "nightly",
  "withdrawn": 0
}"#,
    );
}

fn indent(text: &str) -> String {
    text.lines().map(|line| format!("  {line}")).collect::<Vec<_>>().join("\n")
}

#[test]
fn prune_dry_run_and_real() {
    let env = TestEnv::new();
    one_completed_job(&env);
    let dry = env.wf(["prune", "--older-than", "0s", "--dry-run", "--json"]).ok();
    pin(
        &dry,
        env.dir.path(),
        &[],
        r#"
{
  "deleted": 0,
  "would_delete": 1
}"#,
    );
    let pruned = env.wf(["prune", "--older-than", "0s", "--yes", "--json"]).ok();
    pin(
        &pruned,
        env.dir.path(),
        &[],
        r#"
{
  "deleted": 1
}"#,
    );
}

#[test]
fn bench() {
    let env = TestEnv::new();
    let report = env.wf(["bench", "--jobs", "3", "--workers", "1", "--json"]).ok();
    pin(
        &report,
        env.dir.path(),
        &crate::bench::MEASURED,
        r#"
{
  "bare_bun_cpu_ms_per_job": null,
  "bare_bun_per_s": null,
  "batch": 1,
  "bun_cpu_ms_per_job": null,
  "bun_db_cpu_ms_per_job": null,
  "bun_end_to_end_per_s": null,
  "bun_jobs": null,
  "bun_no_sandbox_cpu_ms_per_job": null,
  "bun_no_sandbox_db_cpu_ms_per_job": null,
  "bun_no_sandbox_per_s": null,
  "bun_vs_bare": null,
  "bun_warm_cpu_ms_per_job": null,
  "bun_warm_db_cpu_ms_per_job": null,
  "bun_warm_jobs": null,
  "bun_warm_per_s": null,
  "claim_complete_db_cpu_ms_per_job": "<number>",
  "claim_complete_per_s": "<number>",
  "cpus": "<number>",
  "enqueue_batch_per_s": "<number>",
  "enqueue_single_per_s": "<number>",
  "floor_db_cpu_ms_per_job": null,
  "floor_per_s": null,
  "jobs": 3,
  "pickup_latency_ms": {
    "p50": "<number>",
    "p99": "<number>",
    "samples": 3
  },
  "sandbox_ms_per_attempt": null,
  "spine_vs_floor": null,
  "steal_share": "<number>",
  "tag": "<text>",
  "warm_vs_bare": null,
  "workers": 1
}"#,
    );
}

#[test]
fn generate_docs() {
    let env = TestEnv::new();
    let out = env.dir.path().join("docs");
    let written = env.wf(["generate-docs", "--json", "--out", out.to_str().unwrap()]).ok();
    let files = written.json()["files"].as_array().unwrap().len();
    let paths: Vec<String> = written.json()["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|path| kind_of(path.as_str().unwrap(), &env.dir.path().display().to_string()))
        .collect();
    assert!(files > 3 && paths.iter().all(|path| path.starts_with("<dir>/docs/")), "{paths:?}");
    pin(&written, env.dir.path(), &[], &serde_json::to_string_pretty(&json!({ "files": paths })).unwrap());
}

/// `--version` with `--json` (or `--output json`) prints a document; without, the plain line.
#[test]
fn the_version_is_a_document_when_json_is_asked_for() {
    let env = TestEnv::new();
    let version = env!("CARGO_PKG_VERSION");
    for args in [&["--json", "--version"][..], &["--version", "--output", "json"], &["--output=json", "-V"]] {
        let run = env.wf(args.iter().copied()).ok();
        assert_eq!(run.json(), json!({ "version": version }), "{args:?}: {run:?}");
    }
    let plain = env.wf(["--version"]).ok();
    assert_eq!(plain.stdout.trim(), format!("wf {version}"));
}
