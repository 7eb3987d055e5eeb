//! Crash safety with real processes: workers SIGKILLed, stopped and resumed, killed by their own
//! job, and PostgreSQL restarted under them. Every test ends with the seed page's guarantees
//! checked in SQL: one completion record per job with the right outcome, an empty queue, and no
//! more executions (counted from the action's own log) than the job's restarts allow.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::checks::{
    assert_each_succeeded_once, assert_no_job_processes, assert_queue_empty, captured_json, completed, kill, ping_age,
    reap, spawn_capturing, stop_worker, uuid, wait_completed, wait_exit,
};
use crate::support::fixtures::{enqueue, enqueue_batch, executions, path, signal, synced};
use crate::support::harness::{Process, TestEnv, wait_for};

fn completed_count(env: &TestEnv) -> i64 {
    env.scalar("SELECT count(*) FROM job_completed")
}

const CHAOS_JOBS: usize = 500;
const CHAOS_WORKERS: usize = 4;
/// How long workers get killed; after that they are left to finish.
const CHAOS_PHASE: Duration = Duration::from_secs(40);

/// 500 jobs of 0.1-1 s on 4 workers (2 slots each) that are SIGKILLed at random moments and
/// restarted, with the workers' reaper passes and an occasional `wf reap` besides.
fn chaos(seed: u64) {
    eprintln!("chaos seed {seed}");
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "3").env("WF_RESTART_LIMIT", "50");
    synced(&env);
    let log = path(&env, "executions.log");
    let mut rng = fastrand::Rng::with_seed(seed);
    let inputs: Vec<Value> = (0..CHAOS_JOBS).map(|n| json!({"n": n, "ms": rng.u32(100..=1000), "log": log})).collect();
    let ids = enqueue_batch(&env, "t/sleep", &inputs);
    assert_eq!(ids.len(), CHAOS_JOBS);

    let start = |slot: usize, generation: u32| -> Process {
        crate::support::fixtures::worker(
            &env,
            &format!("w{slot}g{generation}"),
            &["--concurrency", "2", "--heartbeat", "1s"],
        )
    };
    let mut generations = [0u32; CHAOS_WORKERS];
    let mut workers: Vec<Process> = (0..CHAOS_WORKERS).map(|slot| start(slot, 0)).collect();
    let began = Instant::now();
    let deadline = began + Duration::from_secs(170);
    let (mut kills, mut reaps) = (0, 0);
    loop {
        let done = completed_count(&env);
        if done == CHAOS_JOBS as i64 {
            break;
        }
        assert!(Instant::now() < deadline, "seed {seed}: only {done} of {CHAOS_JOBS} jobs completed in time");
        std::thread::sleep(Duration::from_millis(rng.u64(100..1500)));
        if began.elapsed() > CHAOS_PHASE {
            continue;
        }
        match rng.u8(0..10) {
            0..=5 => {
                let slot = rng.usize(0..CHAOS_WORKERS);
                kill(&mut workers[slot]);
                kills += 1;
                generations[slot] += 1;
                workers[slot] = start(slot, generations[slot]);
            }
            6 => {
                reap(&env, &["--zombie-timeout", "3s"]);
                reaps += 1;
            }
            _ => {}
        }
    }
    for (slot, child) in workers.iter_mut().enumerate() {
        stop_worker(child, &format!("seed {seed}: worker w{slot}g{}", generations[slot]));
    }
    let restarts = assert_each_succeeded_once(&env, &ids, &log, &format!("seed {seed}"));
    eprintln!(
        "chaos seed {seed}: {kills} kills, {reaps} extra reaps, {restarts} restarts, {} executions, {:?}",
        executions(&log).len(),
        began.elapsed()
    );
    assert!(kills >= 10, "seed {seed}: the chaos phase killed only {kills} workers");
    assert!(restarts > 0, "seed {seed}: no job was ever recovered: the test proved nothing");
    assert_no_job_processes(&ids, &format!("seed {seed}: after the workers stopped"));
}

/// A seed from WF_CHAOS_SEED (to replay a failure), else the given one.
fn seed(default: u64) -> u64 {
    std::env::var("WF_CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

#[test]
fn chaos_every_job_completes_exactly_once_seed_1() {
    chaos(seed(1));
}

#[test]
fn chaos_every_job_completes_exactly_once_seed_2() {
    chaos(seed(0x5eed_2024));
}

/// Ping is stamped at claim: a worker SIGKILLed between its claim and its first heartbeat leaves
/// a ping the reaper's guard catches once the window has passed (and not before), and another
/// worker then completes the job.
#[test]
fn a_worker_killed_before_its_first_heartbeat_has_its_job_recovered_after_the_window() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "4");
    synced(&env);
    let log = path(&env, "executions.log");
    let job = enqueue(&env, "t/sleep", json!({"ms_by_attempt": {"1": 60000, "2": 100}, "log": log}));
    let mut first = crate::support::fixtures::worker(&env, "first", &["--heartbeat", "1s", "--no-reap"]);
    let mut db = env.db();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !db.query_one("SELECT running FROM job_queue WHERE job_id = $1", &[&uuid(&job)]).unwrap().get::<_, bool>(0) {
        assert!(Instant::now() < deadline, "the worker never claimed the job");
        std::thread::sleep(Duration::from_millis(5));
    }
    kill(&mut first);
    let row = db
        .query_one(
            "SELECT q.ping = q.started_at, q.worker FROM job_queue q WHERE q.job_id = $1 AND q.running",
            &[&uuid(&job)],
        )
        .unwrap();
    assert!(row.get::<_, bool>(0), "the ping must be the claim's own stamp (no heartbeat happened)");
    assert!(row.get::<_, String>(1).starts_with("first#"));
    assert_no_job_processes(std::slice::from_ref(&job), "the killed worker's job");

    assert_eq!(reap(&env, &[]), (0, 0, 0), "a reap inside the window must leave the job alone");
    wait_for(Duration::from_secs(10), "the ping to leave the window", || {
        ping_age(&env, &job).is_some_and(|age| age > 4.0).then_some(())
    });
    assert_eq!(reap(&env, &[]), (1, 0, 0), "the next reap after the window requeues the job");
    let row =
        db.query_one("SELECT running, worker, restarts FROM job_queue WHERE job_id = $1", &[&uuid(&job)]).unwrap();
    assert!(!row.get::<_, bool>(0));
    assert_eq!(row.get::<_, Option<String>>(1), None);
    assert_eq!(row.get::<_, i32>(2), 1);

    let mut second = crate::support::fixtures::worker(&env, "second", &["--once", "--heartbeat", "1s", "--no-reap"]);
    assert!(wait_exit(&mut second, Duration::from_secs(30), "the second worker").success());
    let done = completed(&env, &job).expect("the second worker completed the job");
    assert_eq!(done.status, "success");
    assert_eq!(done.restarts, 1);
    assert!(done.worker.as_deref().unwrap().starts_with("second#"), "{done:?}");
    assert_eq!(done.result.as_ref().unwrap()["slept"], 100);
    let runs = executions(&log);
    assert_eq!(runs.iter().filter(|(_, attempt)| *attempt == 2).count(), 1, "{runs:?}");
    assert!(runs.iter().all(|(id, attempt)| id == &job && *attempt <= 2), "{runs:?}");
    assert_queue_empty(&env);
}

/// A worker stopped past the window is presumed dead: its job is reaped and run by another
/// worker. Its attempt does not run on beside the other's: the supervisor stops it once the worker
/// has been stopped about as long as it may go without a heartbeat, before the job may be reaped
/// (it ran on, and two attempts of one job ran at once). Resumed, the first worker records nothing.
/// `resume_early`: it resumes while the second worker still runs the job (the queue row exists,
/// owned by the other claim); else after the second worker completed it.
fn resumed_after_reap(resume_early: bool) {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "3");
    synced(&env);
    let second_ms = if resume_early { 6000 } else { 200 };
    let (log, job, mut first) = attempt_1_started(&env, json!({"1": 60000, "2": second_ms}));
    let jobs = [job.clone()].into_iter().collect();
    let attempt_1: Vec<i32> = crate::support::checks::job_processes(&jobs).iter().map(|(pid, _, _)| *pid).collect();
    assert!(!attempt_1.is_empty(), "the processes of attempt 1 must be visible");

    signal(&first, libc::SIGSTOP);
    wait_for(Duration::from_secs(15), "the stopped worker's ping to leave the window", || {
        ping_age(&env, &job).is_some_and(|age| age > 3.0).then_some(())
    });
    assert!(
        attempt_1.iter().all(|&pid| !crate::support::fixtures::alive(pid)),
        "attempt 1 is over before its job may be reaped"
    );
    assert_eq!(reap(&env, &["--zombie-timeout", "3s"]), (1, 0, 0));
    let mut second = crate::support::fixtures::worker(&env, "second", &["--once", "--heartbeat", "1s", "--no-reap"]);
    if resume_early {
        wait_for(Duration::from_secs(30), "attempt 2 to start", || {
            executions(&log).contains(&(job.clone(), 2)).then_some(())
        });
    } else {
        wait_completed(&env, &job, Duration::from_secs(30));
    }

    signal(&first, libc::SIGCONT);
    if resume_early {
        assert!(completed(&env, &job).is_none(), "attempt 2 still runs when attempt 1 is gone");
    }
    assert!(wait_exit(&mut second, Duration::from_secs(30), "the second worker").success());
    let done = completed(&env, &job).expect("the second worker completed the job");
    assert_eq!((done.status.as_str(), done.restarts), ("success", 1));
    assert!(done.worker.as_deref().unwrap().starts_with("second#"), "{done:?}");
    assert_eq!(done.result.as_ref().unwrap()["slept"], second_ms);
    stop_worker(&mut first, "the resumed worker");
    let summary = captured_json(&env, "first");
    assert_eq!((summary["fenced"].as_u64(), summary["succeeded"].as_u64()), (Some(1), Some(0)), "{summary}");
    assert_eq!(completed(&env, &job).unwrap().worker, done.worker, "the record stays the second worker's");
    let records: i64 = env.scalar("SELECT count(*) FROM job_completed");
    assert_eq!(records, 1);
    assert_eq!(executions(&log), vec![(job.clone(), 1), (job.clone(), 2)]);
    assert_queue_empty(&env);
}

/// A `t/sleep` job sleeping `ms_by_attempt`, run by worker `first` (heartbeat 1 s, no reaper, a
/// JSON summary), once its attempt 1 has started: the job's executions log, the job, the worker.
fn attempt_1_started(env: &TestEnv, ms_by_attempt: Value) -> (std::path::PathBuf, String, Process) {
    let log = path(env, "executions.log");
    let job = enqueue(env, "t/sleep", json!({"ms_by_attempt": ms_by_attempt, "log": log}));
    let first = spawn_capturing(env, "first", &["work", "--name", "first", "--heartbeat", "1s", "--no-reap", "--json"]);
    wait_for(Duration::from_secs(30), "attempt 1 to start", || {
        executions(&log).contains(&(job.clone(), 1)).then_some(())
    });
    (log, job, first)
}

#[test]
fn a_worker_resumed_after_its_job_was_reaped_kills_its_action_and_records_nothing() {
    resumed_after_reap(false);
}

#[test]
fn a_worker_resumed_while_its_job_runs_elsewhere_kills_its_action_and_records_nothing() {
    resumed_after_reap(true);
}

/// A worker resumed after its supervisor stopped the attempt (the worker stopped too long) but
/// before a reaper took the job: it records nothing (a failure, it was the worker's, not the job's),
/// and the job, left to the reaper, runs again elsewhere.
#[test]
fn a_worker_resumed_after_its_supervisor_stopped_the_attempt_leaves_the_job_to_the_reaper() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "4");
    synced(&env);
    let (log, job, mut first) = attempt_1_started(&env, json!({"1": 60000, "2": 100}));
    signal(&first, libc::SIGSTOP);
    assert_no_job_processes(std::slice::from_ref(&job), "the supervisor to stop attempt 1");
    // No reaper runs (`--no-reap`, and none by hand until below): the job is still the worker's.
    signal(&first, libc::SIGCONT);
    stop_worker(&mut first, "the resumed worker");
    let summary = captured_json(&env, "first");
    assert_eq!((summary["fenced"].as_u64(), summary["failed"].as_u64()), (Some(1), Some(0)), "{summary}");
    assert!(completed(&env, &job).is_none(), "nothing recorded");
    let said = std::fs::read_to_string(env.dir.path().join("first.log")).unwrap();
    assert!(said.contains("was stopped by its supervisor while this worker was stopped"), "{said}");

    wait_for(Duration::from_secs(15), "the ping to leave the window", || {
        ping_age(&env, &job).is_some_and(|age| age > 4.0).then_some(())
    });
    assert_eq!(reap(&env, &["--zombie-timeout", "4s"]), (1, 0, 0));
    let mut second = crate::support::fixtures::worker(&env, "second", &["--once", "--heartbeat", "1s", "--no-reap"]);
    assert!(wait_exit(&mut second, Duration::from_secs(30), "the second worker").success());
    let done = completed(&env, &job).expect("the second worker completed the job");
    assert_eq!((done.status.as_str(), done.restarts), ("success", 1));
    assert_eq!(executions(&log), vec![(job.clone(), 1), (job.clone(), 2)]);
    assert_queue_empty(&env);
}

/// A worker stopped past the window while its action finishes on its own (before its supervisor
/// would stop it): on resume it holds a result for a job that was reaped and is running again
/// elsewhere. The completion gate (or the heartbeat, whichever it reaches first) refuses it: it
/// records nothing, and the job's record is the second worker's.
#[test]
fn a_worker_resumed_with_a_finished_result_for_a_reaped_job_records_nothing() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "5");
    synced(&env);
    let (log, job, mut first) = attempt_1_started(&env, json!({"1": 1500, "2": 4000}));
    signal(&first, libc::SIGSTOP);
    assert_no_job_processes(std::slice::from_ref(&job), "attempt 1 to finish while its worker is stopped");
    wait_for(Duration::from_secs(15), "the stopped worker's ping to leave the window", || {
        ping_age(&env, &job).is_some_and(|age| age > 5.0).then_some(())
    });
    assert_eq!(reap(&env, &["--zombie-timeout", "5s"]), (1, 0, 0));
    let mut second = crate::support::fixtures::worker(&env, "second", &["--once", "--heartbeat", "1s", "--no-reap"]);
    wait_for(Duration::from_secs(30), "attempt 2 to start", || {
        executions(&log).contains(&(job.clone(), 2)).then_some(())
    });

    signal(&first, libc::SIGCONT);
    assert!(wait_exit(&mut second, Duration::from_secs(30), "the second worker").success());
    let done = completed(&env, &job).expect("the second worker completed the job");
    assert_eq!((done.status.as_str(), done.restarts), ("success", 1));
    assert!(done.worker.as_deref().unwrap().starts_with("second#"), "{done:?}");
    assert_eq!(done.result.as_ref().unwrap()["slept"], 4000, "the record is attempt 2's result");
    stop_worker(&mut first, "the resumed worker");
    let summary = captured_json(&env, "first");
    assert_eq!((summary["fenced"].as_u64(), summary["succeeded"].as_u64()), (Some(1), Some(0)), "{summary}");
    assert_eq!(executions(&log), vec![(job.clone(), 1), (job.clone(), 2)]);
    assert_queue_empty(&env);
}

/// A job that SIGKILLs its own worker every time is retried up to the restart limit, then
/// completed as failure saying it kept dying: 1 + limit executions, restarts visible in `wf show`.
/// Without a sandbox, so that the action can reach its worker: a job whose worker keeps dying for
/// any reason (the OOM killer, a bug) is what is tested here; the sandbox tests show that an action
/// in a sandbox cannot do this.
#[test]
fn a_poison_job_ends_as_failure_after_the_restart_limit() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "3").env("WF_RESTART_LIMIT", "2");
    synced(&env);
    let log = path(&env, "executions.log");
    let job = enqueue(&env, "t/killer", json!({"log": log}));
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut current: Option<Process> = None;
    let mut killed = 0;
    let mut generation = 0;
    while completed(&env, &job).is_none() {
        assert!(Instant::now() < deadline, "the poison job never completed");
        match current.as_mut().map(|child| child.try_wait().unwrap()) {
            None => {
                current = Some(crate::support::fixtures::worker(
                    &env,
                    &format!("w{generation}"),
                    &["--once", "--heartbeat", "1s", "--no-reap", "--isolation", "none"],
                ));
                generation += 1;
            }
            Some(Some(status)) => {
                use std::os::unix::process::ExitStatusExt;
                assert_eq!(status.signal(), Some(libc::SIGKILL), "the job kills its worker");
                killed += 1;
                current = None;
            }
            Some(None) => {}
        }
        reap(&env, &[]);
        std::thread::sleep(Duration::from_millis(250));
    }
    if let Some(mut child) = current {
        kill(&mut child);
    }
    assert_eq!(killed, 3, "three workers died of the job");
    assert_eq!(executions(&log), vec![(job.clone(), 1), (job.clone(), 2), (job.clone(), 3)]);
    let show = env.wf(["show", &job, "--json"]).ok().json();
    assert_eq!(show["status"], "failure", "{show}");
    assert_eq!((&show["restarts"], &show["attempts"]), (&json!(2), &json!(3)), "{show}");
    let message = show["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("kept dying"), "{show}");
    assert_queue_empty(&env);
    assert_no_job_processes(std::slice::from_ref(&job), "the poison job");
}

/// PostgreSQL restarted (and later stopped for longer than a reaper window) under three busy
/// workers: they reconnect and carry on; a reaper pass right after each restart requeues
/// nothing, because pings older than the server's start count from that start; every job ends
/// completed exactly once.
#[test]
fn workers_carry_on_across_a_postgres_restart_and_nothing_is_lost_or_done_twice() {
    let cluster = crate::support::harness::PrivateCluster::start();
    let env = cluster.env().env("WF_ZOMBIE_TIMEOUT_S", "6");
    synced(&env);
    let log = path(&env, "executions.log");
    let mut rng = fastrand::Rng::with_seed(7);
    let inputs: Vec<Value> = (0..150).map(|n| json!({"n": n, "ms": rng.u32(200..=600), "log": log})).collect();
    let ids = enqueue_batch(&env, "t/sleep", &inputs);
    let mut workers: Vec<Process> = (0..3)
        .map(|n| crate::support::fixtures::worker(&env, &format!("w{n}"), &["--concurrency", "2", "--heartbeat", "1s"]))
        .collect();
    let at_least = |n: i64| {
        wait_for(Duration::from_secs(60), &format!("{n} completions"), || (completed_count(&env) >= n).then_some(()))
    };
    let running = || -> i64 { env.scalar("SELECT count(*) FROM job_queue WHERE running") };

    at_least(20);
    assert!(running() > 0, "jobs must be running when the server restarts");
    cluster.restart();
    assert_eq!(reap(&env, &[]).0, 0, "the first reap after the restart must requeue nothing");

    let before = completed_count(&env);
    at_least(before + 20);
    assert!(running() > 0, "jobs must be running when the server stops");
    cluster.stop_server();
    std::thread::sleep(Duration::from_secs(4));
    cluster.start_server();
    // The pings are older than this window now, but not older than the server's start.
    assert_eq!(reap(&env, &["--zombie-timeout", "3s"]).0, 0, "the first reap after the outage must requeue nothing");
    let restarted: chrono::DateTime<chrono::Utc> = env.scalar("SELECT pg_postmaster_start_time()");

    at_least(ids.len() as i64);
    for (n, child) in workers.iter_mut().enumerate() {
        assert!(child.try_wait().unwrap().is_none(), "worker w{n} must still be running");
    }
    let mut db = env.db();
    let carried_on: i64 = db
        .query_one(
            "SELECT count(DISTINCT split_part(worker, '#', 1)) FROM job_completed WHERE completed_at > $1",
            &[&restarted],
        )
        .unwrap()
        .get(0);
    assert_eq!(carried_on, 3, "every worker must complete jobs after the outage");
    for (n, child) in workers.iter_mut().enumerate() {
        stop_worker(child, &format!("worker w{n}"));
    }
    assert_each_succeeded_once(&env, &ids, &log, "postgres restart");
    assert_no_job_processes(&ids, "after the workers stopped");
}
