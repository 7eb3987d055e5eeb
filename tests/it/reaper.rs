//! The reaper is safe to run from many hosts at once: concurrent passes never process the same
//! zombie twice.

use serde_json::json;

use crate::support::checks::{counts, make_zombies, wait_server_up_longer_than};
use crate::support::fixtures::{path, synced};
use crate::support::harness::TestEnv;

const PLAIN: usize = 300;
const MARKED: usize = 40;
const AT_LIMIT: usize = 40;
const REAPERS: usize = 4;

/// Start REAPERS `wf reap --json` at once and add up what they report.
fn reap_concurrently(env: &TestEnv) -> (u64, u64, u64) {
    let children: Vec<_> = (0..REAPERS)
        .map(|_| env.wf(["reap", "--json", "--zombie-timeout", "3s", "--restart-limit", "10"]).start())
        .collect();
    let mut total = (0, 0, 0);
    let mut busy = 0;
    for child in children {
        let run = child.finish();
        assert_eq!(run.code, 0, "wf reap failed: {run:?}");
        let (requeued, failed, canceled) = counts(&run.json());
        busy += usize::from(requeued + failed + canceled > 0);
        total = (total.0 + requeued, total.1 + failed, total.2 + canceled);
    }
    eprintln!("{busy} of {REAPERS} reapers found zombies: {total:?}");
    total
}

/// 300 plain zombies (plus 40 with a cancel mark and 40 at the restart limit), four `wf reap` at
/// once, three rounds: the counts add up exactly, each plain job gains exactly one restart, one
/// reaper log line and the next backoff per round, and each marked or exhausted job is completed
/// exactly once.
#[test]
fn concurrent_reapers_never_process_the_same_zombie_twice() {
    let env = TestEnv::new();
    synced(&env);
    let total = PLAIN + MARKED + AT_LIMIT;
    let batch = path(&env, "batch.jsonl");
    let lines: Vec<String> = (0..total).map(|n| json!({"n": n}).to_string()).collect();
    std::fs::write(&batch, lines.join("\n") + "\n").unwrap();
    let run = env.wf(["enqueue", "t/echo", "--batch", batch.to_str().unwrap(), "--json"]).ok();
    let ids: Vec<uuid::Uuid> =
        run.json()["ids"].as_array().unwrap().iter().map(|id| id.as_str().unwrap().parse().unwrap()).collect();
    let (plain, rest) = ids.split_at(PLAIN);
    let (marked, at_limit) = rest.split_at(MARKED);
    let mut db = env.db();
    wait_server_up_longer_than(&env, 3.0);

    for round in 1..=3 {
        let zombies = if round == 1 { &ids[..] } else { plain };
        make_zombies(&mut db, zombies);
        if round == 1 {
            db.execute(
                "UPDATE job_queue SET canceled_by = 'operator', canceled_reason = 'test' WHERE job_id = ANY($1)",
                &[&marked],
            )
            .unwrap();
            db.execute("UPDATE job_queue SET restarts = 10 WHERE job_id = ANY($1)", &[&at_limit]).unwrap();
        }
        let expected = if round == 1 { (PLAIN as u64, AT_LIMIT as u64, MARKED as u64) } else { (PLAIN as u64, 0, 0) };
        assert_eq!(reap_concurrently(&env), expected, "round {round}: every zombie processed exactly once");

        // Requeued after a backoff of 1 s, 2 s, 4 s... (2^restarts before this pass).
        let backoff = 2f64.powi(round - 1);
        let wrong: i64 = db
            .query_one(
                "SELECT count(*) FROM job_queue q
                  WHERE q.job_id = ANY($1)
                    AND (q.running OR q.restarts <> $2
                         OR (SELECT count(*) FROM job_logs l WHERE l.job_id = q.job_id AND l.stream = 'wf') <> $2::bigint
                         OR q.scheduled_for > now() + make_interval(secs => $3)
                         OR q.scheduled_for < now() + make_interval(secs => $3 - 2))",
                &[&plain, &round, &backoff],
            )
            .unwrap()
            .get(0);
        assert_eq!(wrong, 0, "round {round}: each plain zombie requeued exactly once (restarts, log lines, backoff)");
        let pinged: i64 = db
            .query_one("SELECT count(*) FROM job_queue WHERE ping IS NOT NULL OR window_s IS NOT NULL", &[])
            .unwrap()
            .get(0);
        assert_eq!(pinged, 0, "round {round}: requeued jobs have no ping");
    }
    for (set, status, n) in [(marked, "canceled", MARKED), (at_limit, "failure", AT_LIMIT)] {
        let done: i64 = db
            .query_one("SELECT count(*) FROM job_completed WHERE job_id = ANY($1) AND status = $2", &[&set, &status])
            .unwrap()
            .get(0);
        assert_eq!(done, n as i64, "each {status} zombie completed exactly once");
    }
    let queued: i64 = db.query_one("SELECT count(*) FROM job_queue", &[]).unwrap().get(0);
    assert_eq!(queued, PLAIN as i64, "only the plain jobs wait");
}

/// A running job without a ping (a NULL, as migration 14 leaves a job that had no job_runtime row)
/// is a zombie whatever the window, and a running job with a fresh ping is not.
#[test]
fn a_running_job_without_a_ping_is_a_zombie_and_one_with_a_fresh_ping_is_not() {
    let env = TestEnv::new();
    synced(&env);
    let run = |input: serde_json::Value| env.wf(["enqueue", "t/echo", "--input", &input.to_string()]).ok();
    let silent: uuid::Uuid = run(json!({"n": 1})).stdout.trim().parse().unwrap();
    let fresh: uuid::Uuid = run(json!({"n": 2})).stdout.trim().parse().unwrap();
    let mut db = env.db();
    make_zombies(&mut db, &[silent, fresh]);
    db.execute("UPDATE job_queue SET ping = NULL WHERE job_id = $1", &[&silent]).unwrap();
    db.execute("UPDATE job_queue SET ping = now() WHERE job_id = $1", &[&fresh]).unwrap();
    let reaped = env.wf(["reap", "--json", "--zombie-timeout", "1h"]).ok();
    assert_eq!(counts(&reaped.json()), (1, 0, 0));
    let rows = db.query("SELECT job_id, running, restarts FROM job_queue ORDER BY running", &[]).unwrap();
    let state: Vec<(uuid::Uuid, bool, i32)> = rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    assert_eq!(state, vec![(silent, false, 1), (fresh, true, 0)]);
}

/// Two jobs of `t/echo` whose worker is gone (pinged an hour ago): their ids, `{"n": 1}`'s first.
fn two_zombies(env: &TestEnv, db: &mut postgres::Client) -> Vec<uuid::Uuid> {
    synced(env);
    let ids = crate::support::fixtures::enqueue_batch(env, "t/echo", &[json!({"n": 1}), json!({"n": 2})]);
    let ids: Vec<uuid::Uuid> = ids.iter().map(|id| id.parse().unwrap()).collect();
    make_zombies(db, &ids);
    ids
}

/// The backoff doubles with the restarts up to five minutes: a job restarted a thousand times (a
/// restart limit meant as "for ever") made `power(2, restarts)` overflow, and every reaper pass
/// fail for every zombie.
#[test]
fn a_job_restarted_a_thousand_times_is_reaped_with_the_others() {
    let env = TestEnv::new();
    let mut db = env.db();
    let ids = two_zombies(&env, &mut db);
    db.execute("UPDATE job_queue SET restarts = 1024 WHERE job_id = $1", &[&ids[0]]).unwrap();
    // A ping counts from the server's start at the earliest.
    wait_server_up_longer_than(&env, 3.0);
    let run = env.wf(["reap", "--json", "--zombie-timeout", "3s", "--restart-limit", "5000"]).ok();
    assert_eq!(counts(&run.json()), (2, 0, 0), "{run:?}");
    let delays: Vec<f64> = env.column(
        "SELECT round(extract(epoch FROM scheduled_for - now()))::float8 FROM job_queue ORDER BY restarts DESC",
    );
    assert_eq!(delays.len(), 2);
    assert!((295.0..=300.0).contains(&delays[0]), "five minutes at most: {delays:?}");
}

/// A job deleted outside wf (`DELETE FROM job`) leaves its queue row, which the queue's lack of a
/// key allows; once that row is a zombie, the reaper drops it and reaps the others. Before, the
/// log line of its requeue broke the logs' key and failed every pass: no zombie was reaped again.
#[test]
fn a_zombie_whose_job_was_deleted_outside_wf_is_dropped_and_the_others_are_reaped() {
    let env = TestEnv::new();
    let mut db = env.db();
    let ids = two_zombies(&env, &mut db);
    db.execute("DELETE FROM job WHERE id = $1", &[&ids[0]]).unwrap();
    wait_server_up_longer_than(&env, 3.0);
    let run = env.wf(["reap", "--json", "--zombie-timeout", "3s"]).ok();
    assert_eq!(counts(&run.json()), (1, 0, 0), "{run:?}");
    assert!(run.stderr.contains("dropped 1 running queue row(s) whose job was deleted outside wf"), "{run:?}");
    let left: Vec<uuid::Uuid> = env.column("SELECT job_id FROM job_queue");
    assert_eq!(left, [ids[1]], "the deleted job's row is gone, the other waits again");
    // Due at once rather than after its backoff, for the drain.
    db.execute("UPDATE job_queue SET scheduled_for = now()", &[]).unwrap();
    env.wf(["work", "--drain"]).ok();
    let result = env.wf(["result", &ids[1].to_string()]).ok().json();
    assert_eq!((&result["input"], &result["attempt"]), (&json!({"n": 2}), &json!(2)), "{result}");

    // A waiting job deleted so: a worker claims its row, which has nothing to run, and goes on;
    // the row, never beaten for, is a zombie once its window passes.
    let waiting: uuid::Uuid = crate::support::fixtures::enqueue(&env, "t/echo", json!({})).parse().unwrap();
    db.execute("DELETE FROM job WHERE id = $1", &[&waiting]).unwrap();
    env.wf(["work", "--drain"]).ok();
    let claimed: bool = env.scalar("SELECT running FROM job_queue");
    assert!(claimed, "the worker claimed the row");
    db.execute("UPDATE job_queue SET ping = now() - interval '1 hour', window_s = 3", &[]).unwrap();
    let run = env.wf(["reap", "--json", "--zombie-timeout", "3s"]).ok();
    assert_eq!(counts(&run.json()), (0, 0, 0), "{run:?}");
    assert!(run.stderr.contains("dropped 1 running queue row(s)"), "{run:?}");
    assert_eq!(env.scalar::<i64>("SELECT count(*) FROM job_queue"), 0);
}
