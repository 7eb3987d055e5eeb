//! Doing what operators do: rerun, bulk cancel, retries on failure, idempotency keys, and
//! schedules that withdraw, update, list, catch up and skip overlaps.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::support::fixtures::{enqueue, synced};
use crate::support::harness::{GitRepo, TestEnv};
use crate::support::terminal::plain;

fn show(env: &TestEnv, id: &str) -> Value {
    env.wf(["show", id, "--json"]).ok().json()
}

/// A source whose `r/flaky` fails (with its attempt in the message) and retries.
fn retrying(env: &TestEnv, retries: Value) -> GitRepo {
    let repo = GitRepo::new();
    repo.manifest(&json!({"apps": {"r": {"retries": retries, "actions": {
        "flaky": {"entrypoint": "flaky.ts"},
        "once": {"entrypoint": "flaky.ts", "retries": {"max": 1, "backoff": "1s"}},
    }}}}));
    repo.file(
        "flaky.ts",
        "export function main(input: any) { throw new Error(`failed: ${JSON.stringify(input)}`); }\n",
    );
    repo.commit("flaky");
    env.wf(["source", "add", "r", &repo.url()]).ok();
    env.wf(["sync", "r"]).ok();
    repo
}

#[test]
fn rerun_enqueues_the_job_again_pinned_to_its_commit_or_the_latest() {
    let env = TestEnv::new();
    let repo = synced(&env);
    let first = enqueue(&env, "t/echo", json!({"n": 7}));
    env.wf(["work", "--drain"]).ok();
    let pinned = show(&env, &first)["commit_sha"].as_str().unwrap().to_string();
    repo.file("t/echo.ts", "export function main(input: any) { return { input, version: 2 }; }\n");
    let latest = repo.commit("echo v2");
    env.wf(["sync", "tests"]).ok();

    let rerun = env.wf(["rerun", &first[..8], "--json"]).ok().json();
    assert_eq!(rerun["rerun_of"], first.as_str());
    assert_eq!((&rerun["commit_sha"], &rerun["trigger_kind"]), (&json!(pinned), &json!("manual")));
    let again = rerun["id"].as_str().unwrap();
    let shown = show(&env, again);
    assert_eq!(
        (&shown["rerun_of"], &shown["input"], &shown["retry_of"]),
        (&json!(first), &json!({"n": 7}), &Value::Null)
    );
    let on_latest = env.wf(["rerun", &first, "--latest", "--json"]).ok().json();
    assert_eq!(on_latest["commit_sha"], latest.as_str());
    // A job not finished yet may be rerun too: the rerun is a second job, and wf says so.
    let beside = env.wf(["rerun", again, "--json"]).ok();
    let second = beside.json()["id"].as_str().unwrap().to_string();
    let warning = format!("warning: job {again} is queued still: its rerun {second} is a second job beside it");
    assert!(beside.stderr.contains(&warning), "{}", beside.stderr);
    env.wf(["work", "--drain"]).ok();
    assert_eq!(show(&env, &second)["status"], "success");
    assert_eq!(env.wf(["result", again]).ok().json()["version"], 1, "the rerun ran the first commit");
    let latest_result = env.wf(["result", on_latest["id"].as_str().unwrap()]).ok().json();
    assert_eq!(latest_result["version"], 2);
    let text = env.wf(["show", again]).ok().stdout;
    assert!(text.lines().any(|line| line.contains("rerun of") && line.contains(&first)), "{text}");
    let plain_rerun = env.wf(["rerun", &first]).ok();
    assert!(uuid::Uuid::parse_str(plain_rerun.stdout.trim()).is_ok(), "the id alone on stdout: {plain_rerun:?}");
    assert!(!plain_rerun.stderr.contains("warning"), "a finished job's rerun is no second job: {}", plain_rerun.stderr);
}

#[test]
fn bulk_cancel_takes_the_matching_waiting_and_running_jobs_after_a_confirmation_with_the_count() {
    let env = TestEnv::new();
    synced(&env);
    let t: Vec<String> = (0..3).map(|n| enqueue(&env, "t/echo", json!({"n": n}))).collect();
    let later = env.wf(["enqueue", "t/echo", "--in", "1h"]).ok().stdout.trim().to_string();
    let other = enqueue(&env, "other/echo", json!({}));

    let refused = env.wf(["cancel", "--app", "t"]).run().expect_code(3);
    assert!(refused.stderr.contains("cancel 4 job(s) of app t: refused without a terminal"), "{}", refused.stderr);
    let none = env.wf(["cancel", "--app", "t", "--status", "running", "--json"]).ok().json();
    assert_eq!(none, json!([]));

    let scheduled = env.wf(["cancel", "--app", "t", "--status", "scheduled", "--yes", "--json"]).ok().json();
    assert_eq!(scheduled, json!([{"id": later, "outcome": "canceled"}]));
    let mut terminal = env.wf(["cancel", "--tag", "default", "--action", "echo"]).in_terminal();
    terminal.wait_for("cancel 3 job(s) of action echo, tag default");
    terminal.type_in(b"y");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 0, "{screen:?}");
    assert!(plain(&screen).contains("canceling 3 job(s)"), "a spinner while it works: {screen:?}");
    assert!(
        plain(&screen).contains("finding the waiting and running jobs of action echo, tag default"),
        "a spinner while it matches: {screen:?}"
    );
    for id in &t {
        assert!(plain(&screen).contains(id.as_str()), "{id} in {screen:?}");
        assert_eq!(show(&env, id)["status"], "canceled");
    }
    assert_eq!(show(&env, &other)["status"], "queued");
    env.wf(["cancel", "--app", "t", "t/echo"]).run().expect_code(2);
}

/// A job a bulk cancel matched may finish, and even be pruned, while the operator reads the prompt:
/// the cancel goes on with the others and reports it as completed.
#[test]
fn a_bulk_cancel_reports_a_matched_job_that_finished_and_was_pruned_meanwhile() {
    let env = TestEnv::new();
    synced(&env);
    let waiting = enqueue(&env, "t/echo", json!({"n": 1}));
    let finishing = env.wf(["enqueue", "t/echo", "--tag", "fast", "--input", "{}"]).ok().stdout.trim().to_string();

    let mut terminal = env.wf(["cancel", "--app", "t"]).in_terminal();
    terminal.wait_for("cancel 2 job(s) of app t");
    env.wf(["work", "--drain", "--tag", "fast"]).ok();
    env.db()
        .execute(
            "UPDATE job_completed SET completed_at = now() - interval '31 days' WHERE job_id = $1::text::uuid",
            &[&finishing],
        )
        .unwrap();
    let pruned = env.wf(["prune", "--older-than", "30d", "--yes", "--json"]).ok().json();
    assert_eq!(pruned["deleted"], 1, "{pruned}");
    terminal.type_in(b"y");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 0, "{screen:?}");
    let screen = plain(&screen);
    // The table's row of the job: its id, then its outcome (between the table's rules).
    let outcome = |id: &str| {
        let row = screen.lines().find(|line| line.contains(id))?;
        let mut words = row.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'));
        words.rfind(|word| !word.is_empty()).map(str::to_string)
    };
    assert_eq!(outcome(&waiting).as_deref(), Some("canceled"), "{screen}");
    assert_eq!(outcome(&finishing).as_deref(), Some("already_completed"), "{screen}");
    assert_eq!(show(&env, &waiting)["status"], "canceled");
}

/// One job named twice (its id and a prefix of it) is canceled and reported once, and the prompt
/// counts one job (it counted and reported two).
#[test]
fn a_job_named_twice_is_canceled_once() {
    let env = TestEnv::new();
    synced(&env);
    let id = enqueue(&env, "t/echo", json!({}));
    let canceled = env.wf(["cancel", &id, &id[..12], "--json"]).ok().json();
    assert_eq!(canceled.as_array().map(Vec::len), Some(1), "{canceled}");
    assert_eq!(canceled[0]["outcome"], "canceled", "{canceled}");
}

/// A bulk cancel of the queued jobs does not cancel one a worker started while the operator read
/// the prompt: it is no longer queued, and is left to run (before: it got the cancel mark and was
/// killed).
#[test]
fn a_bulk_cancel_by_status_leaves_a_matched_job_that_changed_status_meanwhile() {
    let env = TestEnv::new();
    synced(&env);
    let log = crate::support::fixtures::path(&env, "runs.log");
    let started = enqueue(&env, "t/sleep", json!({"ms": 3000, "log": log}));
    let waiting = enqueue(&env, "t/echo", json!({"n": 1}));

    // With --json, whose array lists only the job it canceled: stderr says of the other too.
    let mut terminal = env.wf(["cancel", "--tag", "default", "--status", "queued", "--json"]).in_terminal();
    terminal.wait_for("cancel 2 job(s) of tag default, status queued");
    let mut w = crate::support::fixtures::worker(&env, "w", &["--once", "--tag", "default"]);
    crate::support::harness::wait_for(Duration::from_secs(30), "the worker to start the job", || {
        (!crate::support::fixtures::executions(&log).is_empty()).then_some(())
    });
    terminal.type_in(b"y");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 0, "{screen:?}");
    let screen = plain(&screen);
    assert!(screen.contains("1 job(s) no longer queued when canceled: left as they are"), "{screen}");
    assert!(screen.contains(&format!("\"id\": \"{waiting}\"")), "{screen}");
    assert!(!screen.contains(started.as_str()), "{screen}");
    assert!(crate::support::checks::wait_exit(&mut w, Duration::from_secs(60), "the worker").success());
    assert_eq!(show(&env, &started)["status"], "success");
    assert_eq!(show(&env, &started)["canceled_by"], Value::Null);
    assert_eq!(show(&env, &waiting)["status"], "canceled");
}

/// A queued job a bulk cancel of the queued jobs matched, which failed while the operator read the
/// prompt, stands as its retry: one waiting for its backoff is not queued, and is left (before: it
/// was canceled, unlike a matched job that was still running).
#[test]
fn a_bulk_cancel_by_status_leaves_the_retry_of_a_matched_job_that_failed_meanwhile_unless_it_matches() {
    let env = TestEnv::new();
    retrying(&env, json!({"max": 1, "backoff": "1h"}));
    let retry_of = |failing: &str| -> String {
        env.db().query_one("SELECT id::text FROM job WHERE retry_of = $1::text::uuid", &[&failing]).unwrap().get(0)
    };
    let failing = env.wf(["enqueue", "r/flaky", "--input", "{}"]).ok().stdout.trim().to_string();

    let mut terminal = env.wf(["cancel", "--app", "r", "--status", "queued"]).in_terminal();
    terminal.wait_for("cancel 1 job(s) of app r, status queued");
    env.wf(["work", "--drain"]).ok();
    let retry = retry_of(&failing);
    terminal.type_in(b"y");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 0, "{screen:?}");
    assert_eq!(show(&env, &failing)["status"], "failure");
    let retry = show(&env, &retry);
    assert_eq!((&retry["status"], &retry["canceled_by"]), (&json!("scheduled"), &Value::Null), "{retry}");

    // Due, the retry is queued: canceled by the same cancel as its job.
    let failing = env.wf(["enqueue", "r/once", "--input", "{}"]).ok().stdout.trim().to_string();
    let mut terminal = env.wf(["cancel", "--app", "r", "--action", "once", "--status", "queued"]).in_terminal();
    terminal.wait_for("cancel 1 job(s) of app r, action once, status queued");
    env.wf(["work", "--drain"]).ok();
    let retry = retry_of(&failing);
    crate::support::harness::wait_for(Duration::from_secs(30), "the retry to be due", || {
        (show(&env, &retry)["status"] == "queued").then_some(())
    });
    terminal.type_in(b"y");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 0, "{screen:?}");
    assert_eq!(show(&env, &retry)["status"], "canceled");
}

#[test]
fn a_failure_is_followed_by_its_retries_through_the_enqueue_path_and_keeps_its_completion() {
    let env = TestEnv::new();
    retrying(&env, json!({"max": 2, "backoff": "1s", "max_backoff": "1s"}));
    let first = env.wf(["enqueue", "r/flaky", "--input", r#"{"k":1}"#, "--trigger-kind", "api"]).ok().stdout;
    let first = first.trim();
    let mut chain = vec![first.to_string()];
    let run = env.wf(["work", "--max-jobs", "3", "--log-format", "json"]).ok();
    while let Some(next) = env
        .db()
        .query_opt("SELECT id::text FROM job WHERE retry_of = $1::text::uuid", &[chain.last().unwrap()])
        .unwrap()
    {
        chain.push(next.get(0));
    }
    assert_eq!(chain.len(), 3, "the job and its 2 retries: {chain:?}");
    for (n, id) in chain.iter().enumerate() {
        let job = show(&env, id);
        assert_eq!(
            (&job["status"], &job["trigger_kind"], &job["input"]),
            (&json!("failure"), &json!("api"), &json!({"k": 1}))
        );
        assert_eq!(job["error"]["message"], r#"failed: {"k":1}"#, "the completion is the failure's: {job}");
        assert_eq!(job["retry_of"], if n == 0 { Value::Null } else { json!(chain[n - 1]) });
        let next = chain.get(n + 1).map_or(Value::Null, |next| json!(next));
        assert_eq!(job["retried_as"], next, "wf show names the retry that followed: {job}");
        let listed = env.wf(["jobs", "--json"]).ok().json();
        let listed = listed.as_array().unwrap().iter().find(|listed| listed["id"] == json!(id)).unwrap().clone();
        assert_eq!(listed["retried_as"], next, "and so does wf jobs --json: {listed}");
        if n > 0 {
            let waited: f64 = env.scalar_of(
                "SELECT extract(epoch FROM r.scheduled_for - c.completed_at)::float8
                   FROM job r, job_completed c WHERE r.id = $1::text::uuid AND c.job_id = r.retry_of",
                &[id],
            );
            assert!((0.9..2.0).contains(&waited), "retried 1 s after the failure: {waited}");
        }
    }
    let retried: Vec<Value> = run
        .stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["event"] == "retried")
        .collect();
    assert_eq!(retried.len(), 2, "{}", run.stderr);
    assert_eq!((&retried[0]["retry"], &retried[0]["retry_number"]), (&json!(chain[1]), &json!(1)));
    // No retry of the last one, none of a cancel.
    let jobs: i64 = env.scalar("SELECT count(*) FROM job");
    assert_eq!(jobs, 3);

    // An action's own retries win over its app's: one retry.
    env.wf(["enqueue", "r/once"]).ok();
    env.wf(["work", "--max-jobs", "2"]).ok();
    let once: i64 = env.scalar("SELECT count(*) FROM job WHERE app_key = 'r' AND action_key = 'once'");
    assert_eq!(once, 2);
}

/// A failed job goes on as its retry: canceling the failed job cancels the retry that waits, the
/// last of the chain when retries failed too, and says which; again, the same (cancel is
/// idempotent). Before, the failed job was `already_completed` (exit 1) and its retry ran.
#[test]
fn canceling_a_failed_job_cancels_its_waiting_retry() {
    let env = TestEnv::new();
    retrying(&env, json!({"max": 2, "backoff": "1s", "max_backoff": "1s"}));
    let first = enqueue(&env, "r/flaky", json!({}));
    // The job and its first retry fail; the second retry waits.
    env.wf(["work", "--max-jobs", "2"]).ok();
    let waiting: String = env.scalar_of(
        "SELECT r2.id::text FROM job r1 JOIN job r2 ON r2.retry_of = r1.id WHERE r1.retry_of = $1::text::uuid",
        &[&first],
    );
    // Named with another waiting job, the failed one counts as a job the cancel changes (its
    // retry's retry): two, so a confirmation is asked (refused without a terminal).
    let other = env.wf(["enqueue", "r/flaky", "--in", "1h"]).ok().stdout.trim().to_string();
    let refused = env.wf(["cancel", &first, &other]).run().expect_code(3);
    assert!(refused.stderr.contains("cancel 2 jobs: refused"), "{refused:?}");
    env.wf(["cancel", &other]).ok();
    for _ in 0..2 {
        let run = env.wf(["cancel", &first, "--json"]).ok();
        assert_eq!(run.json(), json!([{"id": first, "outcome": "canceled", "retry_id": waiting}]));
    }
    let retry = show(&env, &waiting);
    assert_eq!((&retry["status"], &retry["canceled_by"].is_string()), (&json!("canceled"), &true), "{retry}");
    assert_eq!(show(&env, &first)["status"], "failure", "the failed job keeps its completion");
    let text = env.wf(["cancel", &first]).ok().stdout;
    assert!(text.contains(&format!("canceled (its retry {waiting})")), "{text}");
    env.wf(["work", "--drain"]).ok();
    let jobs: i64 = env.scalar("SELECT count(*) FROM job");
    assert_eq!(jobs, 4, "nothing ran after the cancel (the 4th: the other job, canceled)");
}

#[test]
fn a_job_asked_to_cancel_that_fails_before_its_worker_sees_the_mark_is_not_retried() {
    let env = TestEnv::new();
    let repo = GitRepo::new();
    repo.manifest(&json!({"apps": {"r": {"actions": {
        "late": {"entrypoint": "late.ts", "retries": {"max": 2, "backoff": "1s"}},
    }}}}));
    repo.file(
        "late.ts",
        r#"
import { existsSync } from "node:fs";
export async function main(input: any) {
  while (!existsSync(input.go)) await new Promise((resolve) => setTimeout(resolve, 20));
  throw new Error("failed on its own");
}
"#,
    );
    repo.commit("late");
    env.wf(["source", "add", "r", &repo.url()]).ok();
    env.wf(["sync", "r"]).ok();
    let go = env.dir.path().join("go");
    let id = enqueue(&env, "r/late", json!({"go": go}));
    // Heartbeats far apart: the mark is not seen before the action fails.
    let worker = env.wf(["work", "--once", "--heartbeat", "20s", "--isolation", "none"]).start();
    crate::support::harness::wait_for(Duration::from_secs(30), "the job to run", || {
        (show(&env, &id)["status"] == "running").then_some(())
    });
    env.wf(["cancel", &id]).ok();
    std::fs::write(&go, "").unwrap();
    worker.finish();

    let job = show(&env, &id);
    assert_eq!((&job["status"], &job["error"]["message"]), (&json!("failure"), &json!("failed on its own")), "{job}");
    assert!(job["canceled_by"].is_string(), "the cancel request stays on record: {job}");
    let retries: i64 = env.scalar_of("SELECT count(*) FROM job WHERE retry_of = $1::text::uuid", &[&id]);
    assert_eq!(retries, 0, "a job an operator asked to cancel is not retried");
}

#[test]
fn retries_in_the_manifest_are_checked_by_sync() {
    let env = TestEnv::new();
    let repo = GitRepo::new();
    repo.manifest(&json!({"apps": {"r": {"retries": {"max": 0}, "actions": {
        "a": {"entrypoint": "a.ts", "retries": {"max": 2, "backoff": "soon"}},
        "b": {"entrypoint": "a.ts", "retries": {"backoff": "1s", "every": 1}},
    }}}}));
    repo.file("a.ts", "export function main() {}\n");
    repo.commit("bad retries");
    env.wf(["source", "add", "r", &repo.url()]).ok();
    let sync = env.wf(["sync", "r"]).run().expect_code(1);
    for problem in [
        "apps.r.retries.max: must be a whole number of retries from 1 to 100, not 0",
        "apps.r.actions.a.retries.backoff: must be a duration such as 10s, 5m or 2h, not \"soon\"",
        "apps.r.actions.b.retries.max: missing",
        "apps.r.actions.b.retries: unknown field `every`",
    ] {
        assert!(sync.stderr.contains(problem), "{problem} in {}", sync.stderr);
    }
}

/// A key is unique by a btree index, which refused a key of some kilobytes with its own error
/// ("index row size 8016 exceeds btree version 4 maximum 2704"): a key over 1,000 bytes is a usage
/// error, found before anything is written; one of 1,000 bytes is a key.
#[test]
fn an_idempotency_key_longer_than_1000_bytes_is_a_usage_error() {
    let env = TestEnv::new();
    synced(&env);
    // Random, as a key of 6 KB that PostgreSQL cannot compress below the index's limit.
    let random: String = (0..190).map(|_| uuid::Uuid::new_v4().simple().to_string()).collect();
    for long in [random, "é".repeat(501)] {
        let run = env.wf(["enqueue", "t/echo", "--key", &long]).run().expect_code(2);
        assert!(run.stderr.contains("at most 1000 bytes"), "{}", run.stderr);
        assert!(!run.stderr.contains("index row size"), "{}", run.stderr);
    }
    let jobs: i64 = env.scalar("SELECT count(*) FROM job");
    assert_eq!(jobs, 0, "nothing was written");
    let longest = "é".repeat(500);
    let first = env.wf(["enqueue", "t/echo", "--key", &longest, "--json"]).ok().json();
    let again = env.wf(["enqueue", "t/echo", "--key", &longest, "--json"]).ok().json();
    assert_eq!((&again["id"], &again["existing"]), (&first["id"], &json!(true)));
}

#[test]
fn an_idempotency_key_returns_the_job_it_enqueued_while_that_job_exists() {
    let env = TestEnv::new();
    synced(&env);
    let first = env.wf(["enqueue", "t/echo", "--key", "order-42", "--json"]).ok().json();
    assert_eq!(first["existing"], false);
    let second = env.wf(["enqueue", "t/echo", "--key", "order-42", "--input", r#"{"other": 1}"#, "--json"]).ok().json();
    assert_eq!((&second["id"], &second["existing"]), (&first["id"], &json!(true)));
    let text = env.wf(["enqueue", "t/echo", "--key", "order-42"]).ok();
    assert_eq!(text.stdout.trim(), first["id"].as_str().unwrap());
    assert!(text.stderr.contains("has the key \"order-42\" already"), "{}", text.stderr);
    // Also with `--json --wait`, whose document has no `existing`.
    let waited = env.wf(["enqueue", "t/echo", "--key", "order-42", "--json", "--wait", "--timeout", "1s"]).run();
    assert_eq!(waited.code, 3, "not run: no worker: {waited:?}");
    assert!(waited.stderr.contains("has the key \"order-42\" already"), "{waited:?}");
    let elsewhere = env.wf(["enqueue", "other/echo", "--key", "order-42"]).run().expect_code(1);
    assert!(elsewhere.stderr.contains("belongs to job"), "{}", elsewhere.stderr);
    assert_eq!(show(&env, first["id"].as_str().unwrap())["key"], "order-42");
    let jobs: i64 = env.scalar("SELECT count(*) FROM job");
    assert_eq!(jobs, 1);

    // Concurrent enqueues with one key make one job.
    let children: Vec<_> = (0..4).map(|_| env.wf(["enqueue", "t/echo", "--key", "race", "--json"]).start()).collect();
    let ids: std::collections::BTreeSet<String> =
        children.into_iter().map(|child| child.finish().json()["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids.len(), 1, "{ids:?}");

    // Once the job is gone (pruned), the key enqueues anew.
    let id = first["id"].as_str().unwrap();
    env.wf(["cancel", id]).ok();
    env.wf(["prune", "--older-than", "0s", "--yes"]).ok();
    let fresh = env.wf(["enqueue", "t/echo", "--key", "order-42", "--json"]).ok().json();
    assert_eq!(fresh["existing"], false);
    assert_ne!(fresh["id"], first["id"]);
}

fn schedule_jobs(env: &TestEnv, name: &str, status: &str) -> Vec<Value> {
    let jobs = env.wf(["jobs", "--schedule", name, "--status", status, "--limit", "1000", "--json"]).ok().json();
    jobs.as_array().unwrap().clone()
}

#[test]
fn pause_and_rm_withdraw_the_jobs_enqueued_ahead_and_resume_never_trips_over_them() {
    let env = TestEnv::new();
    synced(&env);
    env.wf(["schedule", "add", "often", "t/echo", "--cron", "*/2 * * * * *"]).ok();
    env.wf(["schedule", "tick", "--horizon", "30s"]).ok();
    let ahead = schedule_jobs(&env, "often", "scheduled");
    assert!(ahead.len() >= 12, "{ahead:?}");
    assert!(ahead.iter().all(|job| job["schedule"] == "often"), "{ahead:?}");

    let paused = env.wf(["schedule", "pause", "often", "--json"]).ok().json();
    let withdrawn = paused["withdrawn"].as_u64().unwrap();
    assert!(withdrawn as usize >= ahead.len() - 1, "{paused} of {}", ahead.len());
    assert!(schedule_jobs(&env, "often", "scheduled").is_empty());
    let canceled = schedule_jobs(&env, "often", "canceled");
    assert_eq!(canceled.len() as u64, withdrawn);
    assert!(canceled[0]["canceled_reason"].as_str().unwrap().contains("schedule often was paused"), "{canceled:?}");

    env.wf(["schedule", "resume", "often"]).ok();
    for _ in 0..3 {
        env.wf(["schedule", "tick", "--horizon", "30s"]).ok();
    }
    let again = schedule_jobs(&env, "often", "scheduled");
    assert!(again.len() >= 12, "the withdrawn fire times are enqueued again: {again:?}");
    let fires: std::collections::BTreeSet<&str> =
        again.iter().map(|job| job["scheduled_for"].as_str().unwrap()).collect();
    assert_eq!(fires.len(), again.len(), "each fire time once");

    let removed = env.wf(["schedule", "rm", "often", "--yes"]).ok();
    assert!(removed.stderr.contains("job(s) it enqueued ahead withdrawn"), "{}", removed.stderr);
    assert!(schedule_jobs(&env, "often", "scheduled").is_empty());
}

#[test]
fn update_replans_the_jobs_enqueued_ahead_with_the_new_cron_and_input() {
    let env = TestEnv::new();
    synced(&env);
    env.wf(["schedule", "add", "u", "t/echo", "--cron", "*/2 * * * * *", "--input", r#"{"v":1}"#]).ok();
    env.wf(["schedule", "tick", "--horizon", "20s"]).ok();
    let updated = env
        .wf([
            "schedule",
            "update",
            "u",
            "--cron",
            "*/5 * * * * *",
            "--input",
            r#"{"v":2}"#,
            "--tz",
            "europe/paris",
            "--json",
        ])
        .ok()
        .json();
    assert!(updated["withdrawn"].as_u64().unwrap() >= 8, "{updated}");
    assert_eq!(
        (&updated["cron"], &updated["tz"], &updated["input"]),
        (&json!("*/5 * * * * *"), &json!("Europe/Paris"), &json!({"v": 2}))
    );
    env.wf(["schedule", "tick", "--horizon", "20s"]).ok();
    let ahead = schedule_jobs(&env, "u", "scheduled");
    assert!(!ahead.is_empty());
    for job in &ahead {
        assert_eq!(job["input"], json!({"v": 2}), "{job}");
        let fire: DateTime<Utc> = job["scheduled_for"].as_str().unwrap().parse().unwrap();
        assert_eq!(fire.timestamp() % 5, 0, "on the new cron: {fire}");
    }
    let bad = env.wf(["schedule", "update", "u", "--cron", "0 25 * * *"]).run().expect_code(1);
    assert!(bad.stderr.contains("its hour field \"25\""), "{}", bad.stderr);
    env.wf(["schedule", "update", "nope", "--cron", "* * * * *"]).run().expect_code(1);
}

/// A schedule's jobs waiting in the queue: fire time, priority, input, and whether it was enqueued
/// before it was due.
fn waiting(env: &TestEnv, name: &str) -> Vec<(DateTime<Utc>, i32, Value, bool)> {
    env.db()
        .query(
            "SELECT j.scheduled_for, j.priority, j.input, j.created_at < j.scheduled_for
               FROM job j JOIN job_queue q ON q.job_id = j.id
              WHERE j.schedule_name = $1
              ORDER BY 1",
            &[&name],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
        .collect()
}

/// Every fire time of a `*/5 * * * * *` schedule from the first to the last, each once.
fn every_fire_once(fires: &[DateTime<Utc>]) {
    assert!(fires.iter().all(|fire| fire.timestamp() % 5 == 0), "{fires:?}");
    assert!(fires.windows(2).all(|pair| pair[1] - pair[0] == chrono::Duration::seconds(5)), "{fires:?}");
}

/// Waits until the database's clock is past this time.
fn wait_past(env: &TestEnv, time: DateTime<Utc>) {
    while env.scalar::<DateTime<Utc>>("SELECT now()") <= time {
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The tick after a change finds no fire time due before it was enqueued: the fire times the
/// change withdrew were enqueued again by the change itself, not left to this tick to enqueue late
/// (with a warning blaming the interval between ticks). Every fire time after `after` waits once.
fn tick_finds_none_late(env: &TestEnv, name: &str, after: DateTime<Utc>) {
    let ticked = env.wf(["schedule", "tick", "--horizon", "30s", "--json"]).ok();
    let fired: Value = ticked.json();
    let late: u64 = fired["fired"].as_array().unwrap().iter().filter_map(|f| f["late"].as_u64()).sum();
    assert_eq!(late, 0, "{fired}");
    assert!(!ticked.stderr.contains("run late"), "{}", ticked.stderr);
    let fires: Vec<DateTime<Utc>> = waiting(env, name).iter().map(|job| job.0).filter(|fire| *fire > after).collect();
    every_fire_once(&fires);
}

#[test]
fn update_enqueues_again_at_once_the_fire_times_it_withdrew_so_none_runs_late() {
    let env = TestEnv::new();
    synced(&env);
    env.wf(["schedule", "add", "sec", "t/echo", "--cron", "*/5 * * * * *", "--input", r#"{"v":1}"#]).ok();
    env.wf(["schedule", "tick", "--horizon", "30s"]).ok();
    let up_to: DateTime<Utc> = env.scalar("SELECT last_fire_time FROM schedule");
    let updated =
        env.wf(["schedule", "update", "sec", "--priority", "5", "--input", r#"{"v":2}"#, "--json"]).ok().json();
    let withdrawn = updated["withdrawn"].as_u64().unwrap();
    assert!(withdrawn >= 3, "{updated}");
    assert_eq!(updated["enqueued"], withdrawn, "each fire time withdrawn is enqueued again: {updated}");
    assert_eq!(updated["enqueued_up_to"].as_str().unwrap().parse::<DateTime<Utc>>().unwrap(), up_to);
    let jobs = waiting(&env, "sec");
    let fires: Vec<DateTime<Utc>> = jobs.iter().map(|job| job.0).collect();
    every_fire_once(&fires);
    assert_eq!(fires.last(), Some(&up_to), "up to where the ticks had enqueued it");
    // The fire times after the update, as it now says, enqueued by it before they were due; those
    // due before it stay as they were.
    let again: Vec<_> = jobs.iter().filter(|job| job.1 == 5).collect();
    assert_eq!(again.len() as u64, withdrawn, "{jobs:?}");
    assert!(again.iter().all(|job| job.2 == json!({"v": 2}) && job.3), "{jobs:?}");
    assert!(jobs.iter().filter(|job| job.1 != 5).all(|job| job.2 == json!({"v": 1})), "{jobs:?}");
    assert!(jobs.iter().skip_while(|job| job.1 != 5).all(|job| job.1 == 5), "{jobs:?}");

    wait_past(&env, again[0].0);
    tick_finds_none_late(&env, "sec", fires[0] - chrono::Duration::seconds(1));
}

/// Ticks behind (enqueued up to an hour ago), or none run yet since the schedule was added an hour
/// ago: an update enqueues nothing from before it as the schedule now says, and the next tick
/// starts from the update (a never-ticked one started from its creation, and ran the fire times
/// of before the update late).
#[test]
fn an_update_while_ticks_are_behind_enqueues_no_fire_time_from_before_it() {
    let env = TestEnv::new();
    synced(&env);
    env.wf(["schedule", "add", "behind", "t/echo", "--cron", "0 * * * *"]).ok();
    env.wf(["schedule", "add", "never", "t/echo", "--cron", "0 * * * *"]).ok();
    env.db()
        .batch_execute(
            "UPDATE schedule SET last_fire_time = now() - interval '61 minutes' WHERE name = 'behind';
             UPDATE schedule SET created_at = now() - interval '61 minutes' WHERE name = 'never'",
        )
        .unwrap();
    let mut updated_at = Vec::new();
    for name in ["behind", "never"] {
        let updated = env.wf(["schedule", "update", name, "--cron", "*/5 * * * * *", "--json"]).ok().json();
        assert_eq!(updated["enqueued"], 0, "{updated}");
        let up_to: DateTime<Utc> = env.scalar_of("SELECT last_fire_time FROM schedule WHERE name = $1", &[&name]);
        let changed: DateTime<Utc> = env.scalar("SELECT now() - interval '5 seconds'");
        assert!(up_to > changed, "{name}: enqueued up to the update: {up_to}");
        updated_at.push((name, up_to));
    }
    env.wf(["schedule", "tick", "--horizon", "10s"]).ok();
    for (name, up_to) in updated_at {
        let fires: Vec<DateTime<Utc>> = waiting(&env, name).into_iter().map(|job| job.0).collect();
        assert!(
            !fires.is_empty() && fires.iter().all(|fire| *fire > up_to),
            "{name}: none before the update: {fires:?}"
        );
    }
}

#[test]
fn resume_enqueues_at_once_as_a_tick_would_so_none_runs_late_and_none_of_the_pause_runs() {
    let env = TestEnv::new();
    synced(&env);
    env.wf(["schedule", "add", "sec", "t/echo", "--cron", "*/5 * * * * *"]).ok();
    env.wf(["schedule", "tick", "--horizon", "30s"]).ok();
    env.wf(["schedule", "pause", "sec"]).ok();
    let paused: DateTime<Utc> = env.scalar("SELECT last_fire_time FROM schedule");
    // A fire time passes while paused.
    wait_past(&env, paused + chrono::Duration::seconds(5));
    let resumed = env.wf(["schedule", "resume", "sec", "--horizon", "30s", "--json"]).ok().json();
    assert_eq!(resumed["enqueued"], 6, "the fire times of the next 30 s: {resumed}");
    let resumed_at: DateTime<Utc> = env.scalar("SELECT max(created_at) FROM job");
    // Those due before the pause wait still (no worker runs here).
    let jobs: Vec<_> = waiting(&env, "sec").into_iter().filter(|job| job.0 > paused).collect();
    assert_eq!(jobs.len(), 6, "{jobs:?}");
    assert!(jobs.iter().all(|job| job.0 > resumed_at && job.3), "none of the pause, each before it is due: {jobs:?}");
    let up_to: DateTime<Utc> = env.scalar("SELECT last_fire_time FROM schedule");
    assert_eq!(Some(&up_to), jobs.last().map(|job| &job.0));

    wait_past(&env, jobs[0].0);
    tick_finds_none_late(&env, "sec", paused);
    // Resuming an active schedule changes nothing.
    let again = env.wf(["schedule", "resume", "sec", "--json"]).ok().json();
    assert_eq!(again["enqueued"], 0, "{again}");
}

#[test]
fn schedule_list_tells_enqueued_up_to_from_next_fire_in_the_schedules_zone_and_shows_broken_ones() {
    let env = TestEnv::new();
    let repo = synced(&env);
    env.wf(["schedule", "add", "paris", "t/echo", "--cron", "*/10 * * * *", "--tz", "Europe/Paris"]).ok();
    env.wf(["schedule", "add", "typed", "t/typed", "--cron", "@midnight", "--input", r#"{"n": 1}"#]).ok();
    env.wf(["schedule", "add", "held", "t/echo", "--cron", "0 0 0 1 1 * 2099"]).ok();
    env.wf(["schedule", "pause", "held"]).ok();
    env.wf(["schedule", "tick", "--horizon", "1h"]).ok();
    let listed = env.wf(["schedule", "list", "--json"]).ok().json();
    let by_name = |name: &str| listed.as_array().unwrap().iter().find(|s| s["name"] == name).unwrap().clone();
    let paris = by_name("paris");
    let up_to: DateTime<Utc> = paris["enqueued_up_to"].as_str().unwrap().parse().unwrap();
    let next: DateTime<Utc> = paris["next_fire_time"].as_str().unwrap().parse().unwrap();
    assert!(up_to > next, "enqueued an hour ahead, next fire within 10 minutes: {paris}");
    assert_eq!(paris["last_fire_time"], paris["enqueued_up_to"]);
    assert_eq!((&paris["state"], &paris["problem"]), (&json!("active"), &Value::Null));
    let held = by_name("held");
    assert_eq!(
        (&held["state"], &held["next_fire_time"], &held["enabled"]),
        (&json!("paused"), &Value::Null, &json!(false))
    );
    let midnight: DateTime<Utc> = by_name("typed")["next_fire_time"].as_str().unwrap().parse().unwrap();
    assert_eq!(midnight.format("%H:%M:%S").to_string(), "00:00:00");

    let table = env.wf(["schedule", "list"]).ok().stdout;
    assert!(table.contains("enqueued up to") && table.contains("next fire"), "{table}");
    let row = table.lines().find(|line| line.trim_start().starts_with("paris")).unwrap();
    assert!(row.contains(" CET") || row.contains(" CEST"), "times in the schedule's zone, labelled: {row}");
    let held_row = table.lines().find(|line| line.trim_start().starts_with("held")).unwrap();
    assert!(held_row.contains("paused") && held_row.trim_end().ends_with('-'), "{held_row}");

    // A sync that removes t/typed leaves its schedule broken: sync says so, list shows it.
    let mut manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(repo.path().join("windforce.json")).unwrap()).unwrap();
    manifest["apps"]["t"]["actions"].as_object_mut().unwrap().remove("typed");
    repo.manifest(&manifest);
    repo.commit("no typed");
    let sync = env.wf(["sync", "tests"]).ok();
    assert!(
        sync.stderr.contains("schedule typed is broken: its action t/typed is not in the catalog any more"),
        "{}",
        sync.stderr
    );
    let typed = env.wf(["schedule", "list", "--json"]).ok().json();
    let typed = typed.as_array().unwrap().iter().find(|s| s["name"] == "typed").unwrap();
    // It fires at no time until it is mended, as a paused one (a tick passes it over).
    assert_eq!((&typed["state"], &typed["next_fire_time"]), (&json!("broken"), &Value::Null), "{typed}");
    let listed = env.wf(["schedule", "list"]).ok();
    assert!(listed.stderr.contains("warning: schedule typed is broken"), "{}", listed.stderr);
    let row = listed.stdout.lines().find(|line| line.contains("typed")).unwrap_or_default();
    assert!(row.contains("broken") && row.trim_end().ends_with('-'), "{}", listed.stdout);
}

/// A tick that meets a broken schedule says which in `--json` too (its stderr used to point "above"
/// at nothing), and the advice sync gives works: `update --action` mends the schedule.
#[test]
fn a_schedule_broken_by_a_sync_is_named_by_the_tick_and_mended_by_update_action() {
    let env = TestEnv::new();
    let repo = synced(&env);
    env.wf(["schedule", "add", "typed", "t/typed", "--cron", "* * * * *", "--input", r#"{"n": 1}"#]).ok();
    let mut manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(repo.path().join("windforce.json")).unwrap()).unwrap();
    let typed = manifest["apps"]["t"]["actions"].as_object_mut().unwrap().remove("typed").unwrap();
    manifest["apps"]["t"]["actions"]["renamed"] = typed;
    repo.manifest(&manifest);
    repo.commit("typed renamed");
    let sync = env.wf(["sync", "tests"]).ok();
    assert!(sync.stderr.contains("`wf schedule update typed` with --action or --input"), "{}", sync.stderr);

    let tick = env.wf(["schedule", "tick", "--horizon", "2m", "--json"]).run().expect_code(1);
    let fired = tick.json();
    assert!(fired["fired"][0]["error"].as_str().unwrap().contains("t/typed"), "{fired}");
    assert!(
        tick.stderr.contains("1 schedule(s) could not enqueue: typed (see the `error` of each in the document)"),
        "{}",
        tick.stderr
    );
    let text = env.wf(["schedule", "tick", "--horizon", "2m"]).run().expect_code(1);
    assert!(text.stderr.contains("typed: nothing enqueued:") && text.stderr.contains("(see above)"), "{}", text.stderr);

    let unknown = env.wf(["schedule", "update", "typed", "--action", "t/nope"]).run().expect_code(1);
    assert!(unknown.stderr.contains("t/nope"), "{}", unknown.stderr);
    let updated = env.wf(["schedule", "update", "typed", "--action", "t/renamed", "--json"]).ok().json();
    assert_eq!((&updated["action"], &updated["state"]), (&json!("renamed"), &json!("active")), "{updated}");
    let ticked = env.wf(["schedule", "tick", "--horizon", "2m", "--json"]).ok().json();
    let ids = ticked["fired"][0]["ids"].as_array().unwrap();
    assert!(!ids.is_empty(), "{ticked}");
    let actions: Vec<String> = env.column("SELECT DISTINCT action_key FROM job WHERE schedule_name = 'typed'");
    assert_eq!(actions, ["renamed"]);
}

/// A tag override can be taken away again, and an update of a paused schedule names no next fire
/// (as `list` shows none).
#[test]
fn update_takes_a_tag_override_away_and_names_no_next_fire_of_a_paused_schedule() {
    let env = TestEnv::new();
    synced(&env);
    env.wf(["schedule", "add", "gpu", "t/echo", "--cron", "@hourly", "--tag", "gpu"]).ok();
    env.wf(["schedule", "update", "gpu", "--tag", ""]).run().expect_code(1);
    env.wf(["schedule", "update", "gpu", "--tag", "gpu", "--no-tag"]).run().expect_code(2);
    let untagged = env.wf(["schedule", "update", "gpu", "--no-tag", "--json"]).ok().json();
    assert_eq!(untagged["tag"], Value::Null, "{untagged}");
    env.wf(["schedule", "tick", "--horizon", "2h"]).ok();
    let tags: Vec<String> = env.column("SELECT DISTINCT tag FROM job WHERE schedule_name = 'gpu'");
    assert_eq!(tags, ["default"], "the action's own tag");

    env.wf(["schedule", "pause", "gpu"]).ok();
    let paused = env.wf(["schedule", "update", "gpu", "--priority", "3", "--json"]).ok().json();
    assert_eq!((&paused["next_fire_time"], &paused["state"]), (&Value::Null, &json!("paused")), "{paused}");
    let text = env.wf(["schedule", "update", "gpu", "--priority", "4"]).ok();
    assert!(text.stderr.contains("paused;") && !text.stderr.contains("next fire"), "{}", text.stderr);
    let resumed = env.wf(["schedule", "resume", "gpu", "--json"]).ok().json();
    assert_eq!(resumed["resumed"], true, "{resumed}");
    let again = env.wf(["schedule", "resume", "gpu", "--json"]).ok().json();
    assert_eq!((&again["resumed"], &again["enqueued"]), (&json!(false), &json!(0)), "{again}");
}

#[test]
fn the_cron_dialect_takes_nicknames_seven_fields_and_any_case_zones_and_names_the_bad_field() {
    let env = TestEnv::new();
    synced(&env);
    for (name, cron) in [("a", "@midnight"), ("b", "@hourly"), ("c", "0 30 9 * * MON-FRI 2099")] {
        env.wf(["schedule", "add", name, "t/echo", "--cron", cron, "--tz", "AMERICA/new_york"]).ok();
    }
    let listed = env.wf(["schedule", "list", "--json"]).ok().json();
    assert!(listed.as_array().unwrap().iter().all(|s| s["tz"] == "America/New_York"), "{listed}");
    let seven: DateTime<Utc> = listed[2]["next_fire_time"].as_str().unwrap().parse().unwrap();
    assert_eq!(seven.format("%Y").to_string(), "2099");
    for (cron, said) in [
        ("61 * * * *", "its minute field \"61\""),
        ("* * 32 * *", "its day-of-month field \"32\""),
        ("* * * * * 8", "its day-of-week field \"8\""),
        ("* * * * 13 * *", "its month field \"13\""),
        ("* * *", "has 3 fields; a cron has 5"),
        ("@fortnightly", "not a cron nickname"),
    ] {
        let run = env.wf(["schedule", "add", "bad", "t/echo", "--cron", cron]).run().expect_code(1);
        assert!(run.stderr.contains(said), "{cron}: {}", run.stderr);
    }
}

#[test]
fn a_tick_whose_horizon_is_shorter_than_the_interval_between_ticks_loses_no_fire_time() {
    let env = TestEnv::new();
    synced(&env);
    env.wf(["schedule", "add", "quarter", "t/echo", "--cron", "*/15 * * * * *"]).ok();
    let start: DateTime<Utc> = "2030-01-01T00:00:00Z".parse().unwrap();
    env.db().execute("UPDATE schedule SET created_at = $1", &[&start]).unwrap();
    // Ticks every minute ± 20 s for an hour, each with a horizon of one minute.
    let mut rng = fastrand::Rng::with_seed(11);
    let mut now = start;
    let mut late = 0;
    while now < start + chrono::Duration::hours(1) {
        let fired = wf::schedule::tick(&mut env.db(), Duration::from_secs(60), Some(now)).unwrap();
        late += fired.iter().map(|f| f.late).sum::<usize>();
        assert!(fired.iter().all(|f| f.error.is_none()), "{fired:?}");
        now += chrono::Duration::seconds(rng.i64(40..=80));
    }
    let fires: Vec<DateTime<Utc>> =
        env.column("SELECT scheduled_for FROM job WHERE schedule_name = 'quarter' ORDER BY 1");
    let expected: Vec<DateTime<Utc>> =
        (1..=fires.len() as i64).map(|n| start + chrono::Duration::seconds(15 * n)).collect();
    assert_eq!(fires, expected, "every fire time, each once");
    assert!(fires.len() >= 236, "{}", fires.len());
    assert!(late > 0, "fire times due before their tick are counted as late");
}

/// Fire times due together are claimed together, one per slot: each run's check saw the other
/// running, and every one of them was skipped. Checked one after the other, one of each pair runs.
#[test]
fn runs_of_a_no_overlap_schedule_claimed_together_never_all_skip_each_other() {
    let env = TestEnv::new();
    synced(&env);
    let input = r#"{"ms": 300}"#;
    env.wf(["schedule", "add", "pair", "t/sleep", "--cron", "* * * * * *", "--input", input, "--no-overlap"]).ok();
    env.wf(["schedule", "tick", "--horizon", "10s"]).ok();
    let fires: i64 = env.scalar("SELECT count(*) FROM job WHERE schedule_name = 'pair'");
    assert!(fires >= 10, "{fires}");
    crate::support::harness::wait_for(Duration::from_secs(20), "every fire time to be due", || {
        let waiting: i64 = env.scalar("SELECT count(*) FROM job_queue WHERE scheduled_for > now()");
        (waiting == 0).then_some(())
    });
    env.wf(["work", "--concurrency", "3", "--max-jobs", &fires.to_string()]).ok();
    let ran = schedule_jobs(&env, "pair", "success");
    let skipped = schedule_jobs(&env, "pair", "canceled");
    assert_eq!(ran.len() + skipped.len(), fires as usize);
    assert!(!skipped.is_empty(), "the runs due together overlapped: ran {ran:?}");
    // Each skip names the run it saw running; that one was skipped in turn only for another, and
    // so on until a run that ran: never two runs skipped for each other.
    let skipped_for: std::collections::HashMap<&str, &str> = skipped
        .iter()
        .map(|job| {
            let reason = job["canceled_reason"].as_str().unwrap();
            let run = reason.strip_prefix("skipped: the run ").and_then(|rest| rest.split(' ').next());
            (job["id"].as_str().unwrap(), run.unwrap_or_else(|| panic!("{reason}")))
        })
        .collect();
    for start in skipped_for.keys() {
        let mut at = *start;
        for _ in 0..=skipped_for.len() {
            match skipped_for.get(at) {
                Some(next) => at = next,
                None => break,
            }
        }
        assert!(
            ran.iter().any(|run| run["id"] == at),
            "{start} was skipped for runs that were all skipped: {skipped_for:?}, ran {ran:?}"
        );
    }
}

#[test]
fn a_no_overlap_schedule_skips_a_fire_time_while_an_earlier_run_is_still_running() {
    let env = TestEnv::new();
    synced(&env);
    let input = r#"{"ms": 2500}"#;
    env.wf(["schedule", "add", "slow", "t/sleep", "--cron", "* * * * * *", "--input", input, "--no-overlap"]).ok();
    env.wf(["schedule", "tick", "--horizon", "4s"]).ok();
    // Counted in one look: two (scheduled, then queued) would count twice a job due in between,
    // and the worker would wait for a job that does not exist.
    let fires: i64 = env.scalar("SELECT count(*) FROM job WHERE schedule_name = 'slow'");
    assert!(fires >= 4, "{fires}");
    env.wf(["work", "--concurrency", "3", "--max-jobs", &fires.to_string()]).ok();
    let skipped = schedule_jobs(&env, "slow", "canceled");
    let ran = schedule_jobs(&env, "slow", "success");
    assert!(!skipped.is_empty() && !ran.is_empty(), "skipped {skipped:?}, ran {ran:?}");
    assert_eq!(skipped[0]["canceled_by"], "schedule slow");
    assert!(skipped[0]["canceled_reason"].as_str().unwrap().contains("is still running (no overlap)"), "{skipped:?}");
    let mut runs: Vec<(DateTime<Utc>, DateTime<Utc>)> = ran
        .iter()
        .map(|job| {
            (
                job["started_at"].as_str().unwrap().parse().unwrap(),
                job["completed_at"].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect();
    runs.sort();
    assert!(runs.windows(2).all(|pair| pair[0].1 <= pair[1].0), "no two runs overlapped: {runs:?}");
    let listed = env.wf(["schedule", "list", "--json"]).ok().json();
    assert_eq!(listed[0]["no_overlap"], true);
    let logs = env.wf(["logs", skipped[0]["id"].as_str().unwrap()]).ok().stdout;
    assert!(logs.contains("[wf] skipped: the run"), "{logs}");
}

/// An operator's cancel of a run claimed but not yet checked for overlap keeps who asked and why
/// (the first mark wins); the run is still skipped. The check's statement on the rows as a claim
/// and the cancel leave them (before: the mark became the schedule's).
#[test]
fn a_skipped_run_keeps_an_operators_cancel_mark_set_before_the_check() {
    let env = TestEnv::new();
    synced(&env);
    let earlier = enqueue(&env, "t/echo", json!({"n": 1}));
    let later = enqueue(&env, "t/echo", json!({"n": 2}));
    let mut db = env.db();
    db.execute("UPDATE job SET schedule_name = 'pair', no_overlap = true WHERE app_key = 't'", &[]).unwrap();
    db.execute(
        "UPDATE job_queue SET running = true, worker = 'w', started_at = now(), ping = now()
          WHERE job_id = $1::text::uuid",
        &[&earlier],
    )
    .unwrap();
    db.execute(
        "UPDATE job_queue SET running = true, worker = 'claim-2', started_at = now(), ping = now(),
                canceled_by = 'alice', canceled_reason = 'wrong input'
          WHERE job_id = $1::text::uuid",
        &[&later],
    )
    .unwrap();
    let reason: String = db
        .query_one(wf::queue::overlap::SKIP_SQL, &[&uuid::Uuid::parse_str(&later).unwrap(), &"claim-2"])
        .unwrap()
        .get(0);
    assert!(reason.contains(&format!("the run {earlier} of schedule pair is still running")), "{reason}");
    let mark: (String, String) = db
        .query_one("SELECT canceled_by, canceled_reason FROM job_queue WHERE job_id = $1::text::uuid", &[&later])
        .map(|row| (row.get(0), row.get(1)))
        .unwrap();
    assert_eq!(mark, ("alice".to_string(), "wrong input".to_string()));
}
