//! Cancel is terminal: a canceled job never runs (again), whether it was waiting, running, left
//! behind by a dead worker, or caught in a race with a claim or with a reaper's requeue.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::checks::{
    assert_no_job_processes, assert_queue_empty, completed, counts, kill, make_zombies, ping_age, reap, stop_worker,
    uuid, wait_completed, wait_server_up_longer_than,
};
use crate::support::fixtures::{all_gone, enqueue, enqueue_batch, executions, path, spawned_pids, synced};
use crate::support::harness::{Run, TestEnv, wait_for};

/// `wf cancel IDS --yes --json [--reason R]`: the exit code and the outcome of each id.
fn cancel(env: &TestEnv, ids: &[&str], reason: Option<&str>) -> (i32, BTreeMap<String, String>) {
    let mut args = vec!["cancel", "--yes", "--json"];
    args.extend_from_slice(ids);
    if let Some(reason) = reason {
        args.extend_from_slice(&["--reason", reason]);
    }
    let run = env.wf(args).run();
    (run.code, outcomes(&run))
}

fn outcomes(run: &Run) -> BTreeMap<String, String> {
    run.json()
        .as_array()
        .unwrap_or_else(|| panic!("cancel --json prints an array: {run:?}"))
        .iter()
        .map(|o| (o["id"].as_str().unwrap().to_string(), o["outcome"].as_str().unwrap().to_string()))
        .collect()
}

fn one(outcomes: &BTreeMap<String, String>, job: &str) -> String {
    outcomes.get(job).cloned().unwrap_or_else(|| panic!("no outcome for {job}: {outcomes:?}"))
}

/// A waiting or scheduled job is completed as canceled at once and never runs, even when a worker
/// drains the queue afterwards; canceling it again succeeds; a finished job is reported as such.
#[test]
fn a_job_canceled_while_queued_never_runs() {
    let env = TestEnv::new();
    synced(&env);
    let log = path(&env, "executions.log");
    let canceled = enqueue(&env, "t/echo", json!({"log": log, "n": 1}));
    let other = enqueue(&env, "t/echo", json!({"log": log, "n": 2}));
    let scheduled =
        env.wf(["enqueue", "t/echo", "--in", "1h", "--input", &json!({"log": log, "n": 3}).to_string()]).ok();
    let scheduled = scheduled.stdout.trim().to_string();

    let (code, out) = cancel(&env, &[&canceled, &scheduled], Some("not needed"));
    assert_eq!(code, 0);
    assert_eq!((one(&out, &canceled).as_str(), one(&out, &scheduled).as_str()), ("canceled", "canceled"));
    for job in [&canceled, &scheduled] {
        let done = completed(&env, job).expect("a waiting job is completed as canceled at once");
        assert_eq!(done.status, "canceled");
        assert!(done.canceled_by.is_some());
        assert_eq!(done.canceled_reason.as_deref(), Some("not needed"));
        let queued: i64 =
            env.db().query_one("SELECT count(*) FROM job_queue WHERE job_id = $1", &[&uuid(job)]).unwrap().get(0);
        assert_eq!(queued, 0);
    }
    let (code, again) = cancel(&env, &[&canceled], None);
    assert_eq!((code, one(&again, &canceled).as_str()), (0, "canceled"), "canceling a canceled job succeeds");

    env.wf(["work", "--drain", "--heartbeat", "1s", "--no-reap"]).ok();
    assert_eq!(executions(&log), vec![(other.clone(), 1)], "only the job that was not canceled ran");
    assert_eq!(completed(&env, &other).unwrap().status, "success");
    let (code, finished) = cancel(&env, &[&other], None);
    assert_eq!((code, one(&finished, &other).as_str()), (1, "already_completed"));
    let show = env.wf(["show", &canceled, "--json"]).ok().json();
    assert_eq!((show["status"].as_str(), show["canceled_reason"].as_str()), (Some("canceled"), Some("not needed")));
    assert_eq!(completed(&env, &canceled).unwrap().status, "canceled", "a later cancel changes nothing");
    assert_queue_empty(&env);
}

/// A running job's cancel mark is seen at the next heartbeat: the whole process tree dies,
/// including a grandchild in its own session, and the job completes as canceled with who and why.
#[test]
fn a_job_canceled_while_running_has_its_process_tree_killed_and_completes_as_canceled() {
    let env = TestEnv::new();
    synced(&env);
    let pids_file = path(&env, "pids");
    let job = enqueue(&env, "t/spawn_long", json!({"pids": pids_file}));
    let mut w = crate::support::fixtures::worker(&env, "w", &["--heartbeat", "1s", "--no-reap"]);
    let pids = spawned_pids(&job, &pids_file);
    let (code, out) = cancel(&env, &[&job], Some("stop it"));
    assert_eq!((code, one(&out, &job).as_str()), (0, "cancel_requested"));
    all_gone(&pids, "the canceled job's process tree to die");
    let done = wait_completed(&env, &job, Duration::from_secs(20));
    assert_eq!(done.status, "canceled");
    assert!(done.canceled_by.is_some());
    assert_eq!(done.canceled_reason.as_deref(), Some("stop it"));
    assert!(done.worker.as_deref().unwrap().starts_with("w#"), "{done:?}");
    assert_eq!(done.result, None);
    let canceled = env.wf(["result", &job]).run().expect_code(4).stdout;
    assert!(canceled.contains("stop it"), "`wf result` prints who canceled it and why: {canceled}");
    assert_no_job_processes(std::slice::from_ref(&job), "the canceled job");
    stop_worker(&mut w, "the worker");
    assert_queue_empty(&env);
}

/// Canceled, then its worker SIGKILLed before the next heartbeat could act on the mark: the
/// reaper completes the job as canceled (keeping who, why and the start time) once the window
/// has passed, and it never runs again.
#[test]
fn a_canceled_job_whose_worker_died_is_completed_as_canceled_by_the_reaper_and_never_runs_again() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "9");
    synced(&env);
    let log = path(&env, "executions.log");
    let job = enqueue(&env, "t/sleep", json!({"ms": 600000, "log": log}));
    let mut w = crate::support::fixtures::worker(&env, "w", &["--heartbeat", "3s", "--no-reap"]);
    wait_for(Duration::from_secs(30), "the job to start", || {
        executions(&log).contains(&(job.clone(), 1)).then_some(())
    });
    let mut db = env.db();
    // Right after a heartbeat (one seen to come, not one some time ago), so that the next one
    // (3 s later) never comes.
    let ping = |db: &mut postgres::Client| -> chrono::DateTime<chrono::Utc> {
        db.query_one("SELECT ping FROM job_queue WHERE job_id = $1", &[&uuid(&job)]).unwrap().get(0)
    };
    let before = ping(&mut db);
    wait_for(Duration::from_secs(10), "a heartbeat", || (ping(&mut db) > before).then_some(()));
    let (code, out) = cancel(&env, &[&job], Some("changed my mind"));
    kill(&mut w);
    assert_eq!((code, one(&out, &job).as_str()), (0, "cancel_requested"));
    let row = db
        .query_one(
            "SELECT running, canceled_by IS NOT NULL, started_at FROM job_queue WHERE job_id = $1",
            &[&uuid(&job)],
        )
        .unwrap();
    assert!(row.get::<_, bool>(0) && row.get::<_, bool>(1), "the dead worker never acted on the mark");
    let started_at: chrono::DateTime<chrono::Utc> = row.get(2);
    assert_no_job_processes(std::slice::from_ref(&job), "the dead worker's job");

    assert_eq!(reap(&env, &[]), (0, 0, 0), "inside the window the job is left alone");
    wait_for(Duration::from_secs(15), "the ping to leave the window", || {
        ping_age(&env, &job).is_some_and(|age| age > 9.0).then_some(())
    });
    assert_eq!(reap(&env, &[]), (0, 0, 1), "the reaper completes the canceled zombie as canceled");
    let done = completed(&env, &job).unwrap();
    assert_eq!(done.status, "canceled");
    assert!(done.canceled_by.is_some());
    assert_eq!(done.canceled_reason.as_deref(), Some("changed my mind"));
    assert_eq!(done.restarts, 0);
    let kept: chrono::DateTime<chrono::Utc> =
        db.query_one("SELECT started_at FROM job_completed WHERE job_id = $1", &[&uuid(&job)]).unwrap().get(0);
    assert_eq!(kept, started_at, "the start time is kept");
    assert_queue_empty(&env);

    env.wf(["work", "--drain", "--heartbeat", "3s"]).ok();
    assert_eq!(reap(&env, &[]), (0, 0, 0));
    assert_eq!(executions(&log), vec![(job.clone(), 1)], "a canceled job never runs again");
    assert_eq!(completed(&env, &job).unwrap().status, "canceled");
}

/// 200 cancels, each right behind its job's enqueue, four at a time, against a busy worker: a job
/// whose cancel found it waiting ("canceled") never runs; one found running
/// ("cancel_requested") ran once and completes as canceled or, if it finished first, with its real
/// outcome and the request on record; one that had already finished is reported so.
#[test]
fn a_cancel_racing_a_claim_never_lets_a_canceled_job_run() {
    let env = TestEnv::new();
    synced(&env);
    let log = path(&env, "executions.log");
    let mut w = crate::support::fixtures::worker(&env, "w", &["--concurrency", "2", "--heartbeat", "1s", "--no-reap"]);
    const THREADS: usize = 4;
    const ROUNDS: usize = 50;
    let results: Vec<(String, i32, String)> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let env = &env;
                let log = &log;
                scope.spawn(move || {
                    (0..ROUNDS)
                        .map(|n| {
                            let job = enqueue(env, "t/echo", json!({"log": log, "n": t * ROUNDS + n}));
                            let (code, out) = cancel(env, &[&job], None);
                            let outcome = one(&out, &job);
                            (job, code, outcome)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
    });
    let total = (THREADS * ROUNDS) as i64;
    wait_for(Duration::from_secs(120), "every job to complete", || {
        (env.scalar::<i64>("SELECT count(*) FROM job_completed") == total).then_some(())
    });
    stop_worker(&mut w, "the worker");

    let mut runs: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (job, attempt) in executions(&log) {
        runs.entry(job).or_default().push(attempt);
    }
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    for (job, code, outcome) in &results {
        let done = completed(&env, job).expect("every job completed");
        let ran = runs.get(job).map_or(0, Vec::len);
        *tally.entry(format!("{outcome}/{}", done.status)).or_default() += 1;
        match outcome.as_str() {
            "canceled" => {
                assert_eq!(*code, 0);
                assert_eq!(ran, 0, "job {job} was canceled while waiting and yet it ran");
                assert_eq!(done.status, "canceled", "{job}: {done:?}");
            }
            "cancel_requested" => {
                assert_eq!(*code, 0);
                assert!(ran <= 1, "job {job} ran {ran} times");
                assert!(["canceled", "success"].contains(&done.status.as_str()), "{job}: {done:?}");
                assert!(done.canceled_by.is_some(), "{job}: the cancel request stays on record: {done:?}");
            }
            "already_completed" => {
                assert_eq!(*code, 1);
                assert_eq!((ran, done.status.as_str()), (1, "success"), "{job}: {done:?}");
                assert_eq!(done.canceled_by, None, "{job}: {done:?}");
            }
            other => panic!("unexpected outcome {other} for {job}"),
        }
        assert_eq!(done.restarts, 0);
    }
    eprintln!("cancel outcome / final status: {tally:?}");
    assert_queue_empty(&env);
}

/// Zombies canceled while a reaper pass runs, in both orders and overlapping: whoever locks the
/// row first, the job never ends canceled-but-waiting (the CHECK holds: neither command fails),
/// it ends canceled, and it never runs.
#[test]
fn a_cancel_racing_a_reapers_requeue_ends_canceled() {
    let env = TestEnv::new();
    synced(&env);
    let log = path(&env, "executions.log");
    const ROUNDS: usize = 40;
    const PER_ROUND: usize = 5;
    let inputs: Vec<Value> = (0..ROUNDS * PER_ROUND).map(|n| json!({"log": log, "n": n})).collect();
    let ids = enqueue_batch(&env, "t/echo", &inputs);
    let mut db = env.db();
    wait_server_up_longer_than(&env, 3.0);
    let mut rng = fastrand::Rng::with_seed(8);
    let mut tally: BTreeMap<&str, usize> = BTreeMap::new();
    for round in ids.chunks(PER_ROUND) {
        let uuids: Vec<uuid::Uuid> = round.iter().map(|id| uuid(id)).collect();
        make_zombies(&mut db, &uuids);
        let mut cancel_args = vec!["cancel", "--yes", "--json"];
        cancel_args.extend(round.iter().map(String::as_str));
        let spawn = |args: &[&str]| env.wf(args).start();
        let delay = Duration::from_millis(rng.u64(0..30));
        let (canceler, reaper) = if rng.bool() {
            let canceler = spawn(&cancel_args);
            std::thread::sleep(delay);
            (canceler, spawn(&["reap", "--json", "--zombie-timeout", "3s"]))
        } else {
            let reaper = spawn(&["reap", "--json", "--zombie-timeout", "3s"]);
            std::thread::sleep(delay);
            (spawn(&cancel_args), reaper)
        };
        let canceled = canceler.finish();
        let reaped = reaper.finish();
        assert_eq!(canceled.code, 0, "cancel failed: {canceled:?}");
        assert_eq!(reaped.code, 0, "reap failed: {reaped:?}");
        let (requeued, failed, _) = counts(&reaped.json());
        assert_eq!(failed, 0);
        let out = outcomes(&canceled);
        for job in round {
            match (one(&out, job).as_str(), completed(&env, job)) {
                // The reaper requeued it first, then the cancel found it waiting.
                ("canceled", Some(done)) => {
                    assert_eq!((done.status.as_str(), done.restarts), ("canceled", 1), "{job}: {done:?}");
                    *tally.entry("requeued, then canceled").or_default() += 1;
                }
                // The mark came first; the reaper then completed the canceled zombie.
                ("cancel_requested", Some(done)) => {
                    assert_eq!((done.status.as_str(), done.restarts), ("canceled", 0), "{job}: {done:?}");
                    *tally.entry("marked, then reaped as canceled").or_default() += 1;
                }
                // The reaper skipped the row the cancel held: a marked zombie, still running.
                ("cancel_requested", None) => {
                    let row = db
                        .query_one(
                            "SELECT running, canceled_by IS NOT NULL FROM job_queue WHERE job_id = $1",
                            &[&uuid(job)],
                        )
                        .unwrap();
                    assert!(row.get::<_, bool>(0) && row.get::<_, bool>(1), "{job}: a marked job must be running");
                    *tally.entry("marked, reaper skipped it").or_default() += 1;
                }
                (outcome, done) => panic!("{job}: outcome {outcome} with completion {done:?}"),
            }
        }
        let requeued_and_canceled =
            round.iter().filter(|job| completed(&env, job).is_some_and(|done| done.restarts == 1)).count();
        assert_eq!(requeued as usize, requeued_and_canceled, "every requeued job was then canceled");
    }
    // The marked zombies the reapers skipped: the next pass completes them as canceled.
    let (requeued, failed, _) = reap(&env, &["--zombie-timeout", "3s"]);
    assert_eq!((requeued, failed), (0, 0));
    let (code, out) = cancel(&env, &ids.iter().map(String::as_str).collect::<Vec<_>>(), None);
    assert_eq!(code, 0);
    assert!(out.values().all(|outcome| outcome == "canceled"), "{out:?}");
    let canceled: i64 =
        env.scalar("SELECT count(*) FROM job_completed WHERE status = 'canceled' AND canceled_by IS NOT NULL");
    assert_eq!(canceled, ids.len() as i64);
    assert_queue_empty(&env);
    env.wf(["work", "--drain", "--heartbeat", "1s", "--no-reap"]).ok();
    assert_eq!(executions(&log), Vec::new(), "no canceled job ever runs");
    eprintln!("cancel vs reaper: {tally:?}");
}

/// One transaction for all ids: an unknown id fails the call and cancels nothing; several ids
/// without a TTY and without --yes are refused (exit 3) and cancel nothing.
#[test]
fn a_cancel_naming_an_unknown_id_or_refused_changes_nothing() {
    let env = TestEnv::new();
    synced(&env);
    let job = enqueue(&env, "t/echo", json!({}));
    let other = enqueue(&env, "t/echo", json!({}));
    let unknown = uuid::Uuid::new_v4().to_string();
    let run = env.wf(["cancel", &job, &unknown, "--yes", "--json"]).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains(&unknown), "the error names the unknown id: {run:?}");
    let refused = env.wf(["cancel", &job, &other]).run();
    assert_eq!(refused.code, 3, "{refused:?}");
    let waiting: i64 = env.scalar("SELECT count(*) FROM job_queue WHERE NOT running AND canceled_by IS NULL");
    let completions: i64 = env.scalar("SELECT count(*) FROM job_completed");
    assert_eq!((waiting, completions), (2, 0), "nothing was canceled");
    let (code, out) = cancel(&env, &[&job, &other], None);
    assert_eq!(code, 0);
    assert!(out.values().all(|outcome| outcome == "canceled"), "{out:?}");
    assert_queue_empty(&env);

    // Of several ids, one still waiting: canceled at once, as one id is (it asked for a
    // confirmation of "2 jobs" and, without a terminal, refused); the one canceled already is
    // reported so again.
    let waiting = enqueue(&env, "t/echo", json!({}));
    let run = env.wf(["cancel", &waiting, &job, "--json"]).run().expect_code(0);
    let out = outcomes(&run);
    assert_eq!((one(&out, &waiting), one(&out, &job)), ("canceled".to_string(), "canceled".to_string()));
    // Two of three still waiting: asked, and the prompt counts them.
    let (a, b) = (enqueue(&env, "t/echo", json!({})), enqueue(&env, "t/echo", json!({})));
    let refused = env.wf(["cancel", &a, &b, &job]).run().expect_code(3);
    assert!(refused.stderr.contains("cancel 2 jobs (1 more named finished already)"), "{refused:?}");
}

/// A cancel whose job another transaction holds (a psql `SELECT ... FOR UPDATE`) waits for it, and
/// after a few seconds says which session it waits for; it cancels the job when that ends. It waited
/// without a word, and looked hung.
#[test]
fn a_cancel_waiting_for_a_held_job_says_who_holds_it_and_goes_on() {
    let env = TestEnv::new();
    synced(&env);
    let job = enqueue(&env, "t/echo", json!({"n": 1}));
    let mut holder_connection = env.db();
    let mut holder = holder_connection.transaction().unwrap();
    holder
        .execute("SET application_name = 'the holder'", &[])
        .and_then(|_| holder.execute("SELECT 1 FROM job_queue WHERE job_id = $1::text::uuid FOR UPDATE", &[&job]))
        .unwrap();
    let log = env.dir.path().join("cancel.log");
    let mut canceling = env.wf(["cancel", "--yes", &job]).spawn(&log);
    wait_for(Duration::from_secs(60), "the cancel to say what it waits for", || {
        std::fs::read_to_string(&log).unwrap().contains("waiting for a lock held by other sessions").then_some(())
    });
    // Said once, however long it waits (the watcher looks every second).
    std::thread::sleep(Duration::from_secs(3));
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("the holder") && said.contains("idle in transaction"), "{said}");
    assert_eq!(said.matches("waiting for a lock").count(), 1, "{said}");
    assert!(canceling.try_wait().unwrap().is_none(), "it waits: {said}");
    assert!(completed(&env, &job).is_none(), "nothing is canceled while the job is held");
    holder.rollback().unwrap();
    assert!(canceling.wait().unwrap().success(), "{}", std::fs::read_to_string(&log).unwrap());
    assert_eq!(completed(&env, &job).expect("canceled once let go").status, "canceled");
}
