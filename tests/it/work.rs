//! `wf work` with real processes: many workers, process trees, signals, database outages.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

use crate::support::checks::{stop_worker, uuid, wait_completed};
use crate::support::fixtures::{
    all_gone, enqueue, enqueue_batch, executions, path, signal, spawned_pids, synced, worker,
};
use crate::support::harness::{TestEnv, wait_for};

#[test]
fn four_workers_drain_a_thousand_jobs_each_exactly_once() {
    let env = TestEnv::new();
    synced(&env);
    let log = path(&env, "runs.log");
    let inputs: Vec<Value> = (0..1000).map(|n| json!({"n": n, "log": log})).collect();
    enqueue_batch(&env, "t/echo", &inputs);
    let workers: Vec<_> = (0..4).map(|i| worker(&env, &format!("w{i}"), &["--drain", "--concurrency", "2"])).collect();
    for (i, mut worker) in workers.into_iter().enumerate() {
        let status = worker.wait().unwrap();
        let log = std::fs::read_to_string(env.dir.path().join(format!("w{i}.log"))).unwrap_or_default();
        assert!(status.success(), "worker w{i} ended with {status}: {log}");
    }
    let rows = env
        .db()
        .query("SELECT j.id::text, j.input, c.status, c.result FROM job j JOIN job_completed c ON c.job_id = j.id", &[])
        .unwrap();
    assert_eq!(rows.len(), 1000, "every job completed");
    for row in &rows {
        let input: Value = row.get(1);
        let result: Value = row.get(3);
        assert_eq!(row.get::<_, String>(2), "success");
        assert_eq!(result["input"], input, "each result matches its input");
    }
    let mut runs: HashMap<String, usize> = HashMap::new();
    for (id, _) in executions(&log) {
        *runs.entry(id).or_default() += 1;
    }
    assert_eq!(runs.len(), 1000, "every job's action ran");
    assert!(runs.values().all(|&n| n == 1), "an action ran more than once: {:?}", runs.iter().find(|(_, n)| **n > 1));
    let left: i64 = env.scalar("SELECT count(*) FROM job_queue");
    assert_eq!(left, 0);
    let workers: i64 = env.scalar("SELECT count(DISTINCT split_part(worker, '#', 1)) FROM job_completed");
    assert!(workers > 1, "the work was shared between workers");
}

/// Slots woken together by one enqueue each claim, and a claim takes jobs for the slots still
/// waiting: only for slots that then wait for those jobs, never for one that claims its own
/// meanwhile. A job claimed for a slot that was busy waited, with no heartbeat, until a slot was
/// free: past the zombie window the reaper took it back, and it ran again beside its first start.
#[test]
fn jobs_claimed_for_waiting_slots_start_at_once_and_each_runs_once() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "3");
    synced(&env);
    let log = path(&env, "runs.log");
    let mut w = worker(&env, "w", &["--concurrency", "4", "--heartbeat", "1s", "--isolation", "none"]);
    let started = env.dir.path().join("w.log");
    wait_for(Duration::from_secs(30), "the worker to start", || {
        std::fs::read_to_string(&started).unwrap_or_default().contains("started").then_some(())
    });
    let mut ids = Vec::new();
    for round in 0..2 {
        // Twice as many jobs as slots, each longer than the window: a job left waiting in the worker
        // for a busy slot would be reaped.
        let inputs: Vec<Value> = (0..8).map(|n| json!({"n": n, "round": round, "log": log, "ms": 4000})).collect();
        let batch = enqueue_batch(&env, "t/sleep", &inputs);
        for id in &batch {
            wait_completed(&env, id, Duration::from_secs(60));
        }
        ids.extend(batch);
    }
    stop_worker(&mut w, "the worker");
    let restarted: i64 = env.scalar("SELECT count(*) FROM job_completed WHERE restarts > 0 OR status <> 'success'");
    assert_eq!(restarted, 0, "every job ran to success in its first attempt");
    let runs = executions(&log);
    assert_eq!(runs.len(), ids.len(), "each job's action started once: {runs:?}");
}

/// A job started long after its claim gets a token that lasts its whole timeout from its start, as
/// its run does (before: counted from the claim, it could expire while the job still ran).
#[test]
fn a_job_started_long_after_its_claim_gets_a_token_counted_from_its_start() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "3");
    synced(&env);
    let job = enqueue(&env, "t/env", json!({}));
    let args = ["work", "--once", "--heartbeat", "1s", "--no-reap", "--isolation", "none"];
    env.wf(args).env("WF_FAULT", "start-late").ok();
    let result = env.wf(["result", &job]).ok().json();
    let token = result["WF_TOKEN"].as_str().unwrap();
    let payload = token.split('.').nth(1).unwrap();
    let claims: Value =
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
    let (claimed, timeout): (f64, i64) = env
        .db()
        .query_one(
            "SELECT extract(epoch FROM c.started_at)::float8, j.timeout_s::int8
               FROM job_completed c JOIN job j ON j.id = c.job_id WHERE c.job_id = $1::text::uuid",
            &[&job],
        )
        .map(|row| (row.get(0), row.get(1)))
        .unwrap();
    let beyond = claims["exp"].as_i64().unwrap() - claimed as i64 - timeout;
    // The start came two windows (6 s) after the claim: the token's grace counts from then.
    assert!(beyond >= wf::token::EXPIRY_GRACE_S + 5, "{beyond} s past the claim's timeout: {claims}");
}

/// A job started long after its claim (its commit written from the database first) is beaten once
/// before it starts: one the reaper took back meanwhile, and another worker ran, is not started
/// again, also when the server closed the worker's connection meanwhile, nor is one whose beat
/// cannot be made at all; one asked to cancel meanwhile is canceled without running.
#[test]
fn a_job_started_long_after_its_claim_starts_only_if_still_its_own_and_not_canceled() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "3");
    synced(&env);
    let log = path(&env, "runs.log");
    let late = |name: &str| {
        let args = ["work", "--name", name, "--once", "--heartbeat", "1s", "--no-reap", "--isolation", "none"];
        env.wf(args).env("WF_FAULT", "start-late").spawn(&env.dir.path().join(format!("{name}.log")))
    };
    let state = |id: &str| env.wf(["show", id, "--json"]).ok().json()["status"].as_str().unwrap().to_string();
    let claimed = |id: &str| {
        wait_for(Duration::from_secs(30), "the job to be claimed", || (state(id) == "running").then_some(()))
    };
    // Taken back by a reaper pass once its ping is older than the window, and run by another worker.
    let run_elsewhere = |id: &str| {
        wait_for(Duration::from_secs(30), "the reaper to take the job back", || {
            env.wf(["reap"]).ok();
            (state(id) == "queued").then_some(())
        });
        env.wf(["work", "--once", "--heartbeat", "1s", "--no-reap", "--isolation", "none"]).ok();
        assert_eq!(state(id), "success");
    };
    let said = |name: &str| std::fs::read_to_string(env.dir.path().join(format!("{name}.log"))).unwrap_or_default();

    let reaped = enqueue(&env, "t/sleep", json!({"log": log, "ms": 100}));
    let mut first = late("late-1");
    claimed(&reaped);
    run_elsewhere(&reaped);
    assert!(first.wait().unwrap().success());
    assert!(said("late-1").contains("before it started: not started"), "{}", said("late-1"));

    let canceled = enqueue(&env, "t/sleep", json!({"log": log, "ms": 100}));
    let mut second = late("late-2");
    claimed(&canceled);
    env.wf(["cancel", &canceled]).ok();
    assert!(second.wait().unwrap().success());
    assert_eq!(state(&canceled), "canceled");

    // The server closed the late worker's connections while it waited: its beat finds out on a new
    // one, and the job, reaped and run by another worker meanwhile, is not started again.
    let cut = enqueue(&env, "t/sleep", json!({"log": log, "ms": 100}));
    let mut third = late("late-3");
    claimed(&cut);
    let terminated: i64 = env.scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND application_name LIKE 'wf work late-3%') AS cut",
    );
    assert!(terminated > 0, "the late worker's connections were cut");
    run_elsewhere(&cut);
    assert!(third.wait().unwrap().success());
    assert!(said("late-3").contains("before it started: not started"), "{}", said("late-3"));

    // Nor is it started when the beat cannot be made at all (the database takes no connection):
    // whether it is still the worker's is unknown.
    let unknown = enqueue(&env, "t/sleep", json!({"log": log, "ms": 100}));
    let mut fourth = late("late-4");
    claimed(&unknown);
    // A connection of the test's own to another database of the cluster: none to this one is taken
    // meanwhile.
    let admin_url = env.url.replace(&format!("dbname={}", env.dbname), "dbname=postgres");
    let mut admin = postgres::Client::connect(&admin_url, postgres::NoTls).unwrap();
    let allow = |admin: &mut postgres::Client, allowed: bool| {
        let statement = format!("ALTER DATABASE \"{}\" ALLOW_CONNECTIONS {allowed}", env.dbname);
        admin.batch_execute(&statement).unwrap();
    };
    allow(&mut admin, false);
    let terminated: i64 = admin
        .query_one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE datname = $1 AND application_name LIKE 'wf work late-4%') AS cut",
            &[&env.dbname],
        )
        .unwrap()
        .get(0);
    assert!(terminated > 0, "the late worker's connections were cut");
    let gave_up = wait_for(Duration::from_secs(30), "the late worker to give the job up", || {
        Some(said("late-4")).filter(|said| said.contains("could not be confirmed ours"))
    });
    allow(&mut admin, true);
    assert!(gave_up.contains("not started, left to the reaper"), "{gave_up}");
    let _ = fourth.kill();
    fourth.wait().unwrap();
    run_elsewhere(&unknown);

    let runs: Vec<String> = executions(&log).into_iter().map(|(id, _)| id).collect();
    assert_eq!(runs, [reaped, cut, unknown], "each reaped job ran once, by the other worker; the canceled one never");
}

#[test]
fn a_timeout_kills_the_whole_process_tree() {
    let env = TestEnv::new();
    synced(&env);
    let pids_file = path(&env, "pids");
    let id = enqueue(&env, "t/spawn", json!({"pids": pids_file}));
    let mut worker = worker(&env, "w", &["--once"]);
    let pids = spawned_pids(&id, &pids_file);
    assert!(worker.wait().unwrap().success());
    all_gone(&pids, "the timed-out action's tree to die (child and detached grandchild)");
    let error: Value = serde_json::from_str(&env.wf(["result", &id]).run().expect_code(4).stdout).unwrap();
    assert_eq!(error["name"], "Timeout");
    assert!(error["message"].as_str().unwrap().contains("3 s"), "{error}");
}

/// `ps` and `top` on the host name an attempt's processes: its supervisor `wf-supervise` (started
/// through /proc/self/fd/N, it was named after the descriptor, "3"), the sandbox's init
/// `wf-sandbox`, and bun.
#[test]
fn an_attempts_processes_have_names_an_operator_can_read() {
    let env = TestEnv::new();
    synced(&env);
    for (isolation, supervisors) in [("sandbox", vec!["wf-sandbox", "wf-supervise"]), ("none", vec!["wf-supervise"])] {
        let pids_file = path(&env, &format!("pids-{isolation}"));
        let id = enqueue(&env, "t/spawn", json!({"pids": pids_file}));
        let mut worker = worker(&env, isolation, &["--once", "--isolation", isolation]);
        let names: Vec<String> = spawned_pids(&id, &pids_file)
            .iter()
            .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).ok())
            .map(|name| name.trim_end().to_string())
            .collect();
        let mut ours: Vec<&str> =
            names.iter().map(String::as_str).filter(|name| !["bun", "sleep"].contains(name)).collect();
        ours.sort_unstable();
        assert_eq!(ours, supervisors, "{isolation}: {names:?}");
        assert!(names.iter().any(|name| name == "bun"), "{isolation}: {names:?}");
        assert!(worker.wait().unwrap().success());
    }
}

#[test]
fn a_sigkilled_worker_leaves_no_action_process_behind() {
    let env = TestEnv::new();
    synced(&env);
    let pids_file = path(&env, "pids");
    let id = enqueue(&env, "t/spawn_long", json!({"pids": pids_file}));
    let mut worker = worker(&env, "w", &[]);
    let pids = spawned_pids(&id, &pids_file);
    signal(&worker, libc::SIGKILL);
    worker.wait().unwrap();
    all_gone(&pids, "every process of the killed worker's job to die");
}

#[test]
fn sigterm_puts_a_running_job_back_at_once_and_the_next_worker_finishes_it() {
    let env = TestEnv::new();
    synced(&env);
    let log = path(&env, "runs.log");
    let id = enqueue(&env, "t/sleep", json!({"ms": 4000, "log": log}));
    let due_at = |id: &str| -> String {
        env.scalar_of("SELECT scheduled_for::text FROM job_queue WHERE job_id = $1::text::uuid", &[&id])
    };
    let enqueued_due_at = due_at(&id);
    let mut first = worker(&env, "first", &["--grace", "1s"]);
    wait_for(Duration::from_secs(30), "the first worker to start the job", || executions(&log).first().cloned());
    let later = enqueue(&env, "t/echo", json!({}));
    signal(&first, libc::SIGTERM);
    let stopped_at = Instant::now();
    assert!(first.wait().unwrap().success(), "a clean shutdown exits 0");
    assert!(stopped_at.elapsed() < Duration::from_secs(20));
    let (running, restarts, worker_left): (bool, i32, Option<String>) = {
        let row = env
            .db()
            .query_one("SELECT running, restarts, worker FROM job_queue WHERE job_id = $1::text::uuid", &[&id])
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    assert!(!running, "the job is back in the queue");
    assert_eq!(restarts, 0, "a clean shutdown is not a restart");
    assert_eq!(worker_left, None);
    let due_now: bool =
        env.scalar_of("SELECT scheduled_for <= now() FROM job_queue WHERE job_id = $1::text::uuid", &[&id]);
    assert!(due_now, "it is due again at once");
    assert_eq!(due_at(&id), enqueued_due_at, "in the place it had, before the job enqueued after it");
    let logs = env.wf(["logs", &id]).ok().stdout;
    assert!(logs.contains("put back in the queue"), "{logs}");

    env.wf(["work", "--drain", "--name", "second", "--concurrency", "1"]).ok();
    let started_first: bool = env.scalar_of(
        "SELECT a.started_at < b.started_at FROM job_completed a, job_completed b
          WHERE a.job_id = $1::text::uuid AND b.job_id = $2::text::uuid",
        &[&id, &later],
    );
    assert!(started_first, "the job put back runs before the one enqueued after it");
    let shown = env.wf(["show", &id, "--json"]).ok().json();
    assert_eq!(shown["status"], "success");
    assert_eq!((&shown["restarts"], &shown["attempts"]), (&json!(0), &json!(2)), "{shown}");
    assert!(shown["worker"].as_str().unwrap().starts_with("second#"), "{shown}");
    assert_eq!(executions(&log).len(), 2);
}

/// Jobs whose claim was on its way when the worker was told to stop go back to the queue at once,
/// unstarted, those claimed for other slots too (they started, to be stopped at the grace's end, or
/// waited without a heartbeat for the claiming slot's job to end).
#[test]
fn jobs_claimed_as_the_worker_stops_go_back_unstarted() {
    // The worker's idle slots wait 2 s between their claim's answer and handing out its jobs.
    let env = TestEnv::new().env("WF_FAULT", "claim-late");
    synced(&env);
    let log = path(&env, "runs.log");
    let ids = enqueue_batch(&env, "t/sleep", &[json!({"ms": 5000, "log": log}), json!({"ms": 5000, "log": log})]);
    let mut worker = crate::support::checks::spawn_capturing(
        &env,
        "w1",
        &["work", "--name", "w1", "--concurrency", "2", "--grace", "30s", "--json"],
    );
    wait_for(Duration::from_secs(30), "the claims to take both jobs", || {
        (env.scalar::<i64>("SELECT count(*) FROM job_queue WHERE running") == 2).then_some(())
    });
    signal(&worker, libc::SIGTERM);
    let status = crate::support::checks::wait_exit(&mut worker, Duration::from_secs(30), "the worker");
    assert!(status.success());
    let summary = crate::support::checks::captured_json(&env, "w1");
    assert_eq!(summary["released"], 2, "{summary}");
    assert!(executions(&log).is_empty(), "no job started: {:?}", executions(&log));
    let queued: i64 = env.scalar("SELECT count(*) FROM job_queue WHERE NOT running AND worker IS NULL");
    assert_eq!(queued, 2, "both back in the queue ({ids:?})");
    // Unstarted, they keep their attempt number: their next run is attempt 1 (it was 2).
    let released: i64 = env.scalar("SELECT sum(restarts + releases) FROM job_queue");
    assert_eq!(released, 0, "no attempt counted ({ids:?})");
    for id in &ids {
        let logs = env.wf(["logs", id]).ok().stdout;
        assert!(logs.contains("worker shutting down: the job is put back in the queue, unstarted"), "{logs}");
        assert_eq!(env.wf(["show", id, "--json"]).ok().json()["attempts"], 0, "{id}: never run");
    }
}

/// `fixtures::worker`, with SIGHUP and SIGQUIT set to `disposition` between fork and exec: ignored
/// as `nohup` leaves them, or default as a terminal's shell does, whatever this test process was
/// given (a background job of a script has SIGQUIT ignored, `nohup cargo test` SIGHUP).
fn worker_with_hup_and_quit(
    env: &TestEnv,
    name: &str,
    args: &[&str],
    disposition: libc::sighandler_t,
) -> crate::support::harness::Process {
    let mut all = vec!["work", "--name", name];
    all.extend_from_slice(args);
    env.wf(all)
        .before_exec(move || {
            for signal in [libc::SIGHUP, libc::SIGQUIT] {
                // SAFETY: sets a disposition, between fork and exec.
                if unsafe { libc::signal(signal, disposition) } == libc::SIG_ERR {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        })
        .spawn(&env.dir.path().join(format!("{name}.log")))
}

/// A hangup (the terminal the worker ran in is gone) stops the worker as SIGTERM does: its running
/// job finishes within the grace (before, the signal killed the worker, and the job waited for the
/// reaper and ran again). Started with SIGHUP ignored (`nohup`), the worker keeps ignoring it.
#[test]
fn sighup_stops_a_worker_cleanly_unless_it_was_started_under_nohup() {
    let env = TestEnv::new();
    synced(&env);
    let log = path(&env, "runs.log");
    let id = enqueue(&env, "t/sleep", json!({"ms": 1500, "log": log}));
    let mut hung_up = worker_with_hup_and_quit(&env, "hung-up", &["--grace", "30s"], libc::SIG_DFL);
    wait_for(Duration::from_secs(30), "the job to start", || executions(&log).first().cloned());
    signal(&hung_up, libc::SIGHUP);
    assert!(hung_up.wait().unwrap().success(), "a clean shutdown exits 0");
    assert_eq!(env.wf(["show", &id, "--json"]).ok().json()["status"], "success");

    // Under nohup the hangup changes nothing: the worker goes on to its second job.
    let ids = enqueue_batch(&env, "t/sleep", &[json!({"ms": 1500, "log": log}), json!({"ms": 1500, "log": log})]);
    let mut nohup = worker_with_hup_and_quit(&env, "nohup", &["--drain", "--concurrency", "1"], libc::SIG_IGN);
    wait_for(Duration::from_secs(30), "the job to start", || executions(&log).get(1).cloned());
    signal(&nohup, libc::SIGHUP);
    assert!(nohup.wait().unwrap().success(), "the worker drained the queue");
    for id in &ids {
        assert_eq!(env.wf(["show", id, "--json"]).ok().json()["status"], "success", "{id}");
    }
    assert_eq!(executions(&log).len(), 3, "each job ran once: {:?}", executions(&log));
}

/// SIGQUIT (Ctrl-\) stops running jobs at once and puts them back, as a second signal does, without
/// waiting for the grace (before, it killed the worker, and the job waited for the reaper).
#[test]
fn sigquit_puts_the_running_jobs_back_at_once() {
    let env = TestEnv::new();
    synced(&env);
    let log = path(&env, "runs.log");
    let id = enqueue(&env, "t/sleep", json!({"ms": 60000, "log": log}));
    let mut quit = worker_with_hup_and_quit(&env, "quit", &["--grace", "120s"], libc::SIG_DFL);
    wait_for(Duration::from_secs(30), "the job to start", || executions(&log).first().cloned());
    signal(&quit, libc::SIGQUIT);
    let status = crate::support::checks::wait_exit(&mut quit, Duration::from_secs(30), "the worker");
    assert!(status.success(), "{status:?}");
    let (running, restarts): (bool, i32) = {
        let row = env
            .db()
            .query_one("SELECT running, restarts FROM job_queue WHERE job_id = $1::text::uuid", &[&id])
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((running, restarts), (false, 0), "back in the queue, not a restart");
    assert!(env.wf(["logs", &id]).ok().stdout.contains("put back in the queue"));
}

#[test]
fn a_job_that_finishes_within_the_grace_completes_normally() {
    let env = TestEnv::new();
    synced(&env);
    let log = path(&env, "runs.log");
    let id = enqueue(&env, "t/sleep", json!({"ms": 1500, "log": log}));
    let mut first = worker(&env, "first", &["--grace", "30s"]);
    wait_for(Duration::from_secs(30), "the job to start", || executions(&log).first().cloned());
    signal(&first, libc::SIGTERM);
    assert!(first.wait().unwrap().success());
    assert_eq!(env.wf(["show", &id, "--json"]).ok().json()["status"], "success");
}

#[test]
fn a_worker_keeps_its_job_through_a_short_database_outage() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "10");
    synced(&env);
    let log = path(&env, "runs.log");
    let id = enqueue(&env, "t/sleep", json!({"ms": 6000, "log": log}));
    let mut worker = worker(&env, "cut", &["--once", "--heartbeat", "1s"]);
    wait_for(Duration::from_secs(30), "the job to start", || executions(&log).first().cloned());
    // Cut every connection of the worker, again and again, for three seconds.
    let cut_until = Instant::now() + Duration::from_secs(3);
    let mut cuts = 0;
    while Instant::now() < cut_until {
        let killed: i64 = env.scalar_of(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE datname = $1 AND application_name LIKE 'wf work cut%') t",
            &[&env.dbname],
        );
        cuts += killed;
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(cuts > 0, "the worker's connections were cut");
    assert!(worker.wait().unwrap().success());
    let shown = env.wf(["show", &id, "--json"]).ok().json();
    assert_eq!(shown["status"], "success", "{shown}");
    assert_eq!(shown["restarts"], 0);
    assert_eq!(executions(&log).len(), 1, "the action ran once");
    let completions: i64 = env.scalar_of("SELECT count(*) FROM job_completed WHERE job_id = $1::text::uuid", &[&id]);
    assert_eq!(completions, 1);
}

#[test]
fn once_with_several_slots_runs_exactly_one_job() {
    let env = TestEnv::new();
    synced(&env);
    let log = path(&env, "runs.log");
    let mut worker = worker(&env, "once", &["--once", "--concurrency", "3"]);
    // Let the idle slots look at the empty queue before the job arrives.
    std::thread::sleep(Duration::from_millis(500));
    enqueue(&env, "t/echo", json!({"log": log}));
    enqueue(&env, "t/echo", json!({"log": log}));
    assert!(worker.wait().unwrap().success());
    assert_eq!(executions(&log).len(), 1, "--once runs one job, whatever the concurrency");
    let completed: i64 = env.scalar("SELECT count(*) FROM job_completed");
    assert_eq!(completed, 1);
}

#[test]
fn a_completion_whose_acknowledgement_was_lost_is_recorded_once() {
    let env = TestEnv::new();
    synced(&env);
    let log = path(&env, "runs.log");
    let id = enqueue(&env, "t/echo", json!({"log": log}));
    let run = env.wf(["work", "--once", "--json"]).env("WF_FAULT", "complete-lost-ack").ok();
    let summary = run.json();
    // The retry finds no queue row, looks at job_completed, and sees its own claim there.
    assert_eq!(summary["succeeded"], 1, "{run:?}");
    assert_eq!(summary["fenced"], 0, "{run:?}");
    assert_eq!(env.wf(["show", &id, "--json"]).ok().json()["status"], "success");
    let completions: i64 = env.scalar_of("SELECT count(*) FROM job_completed WHERE job_id = $1::text::uuid", &[&id]);
    assert_eq!(completions, 1);
    assert_eq!(executions(&log).len(), 1);
}

/// With a job queued behind it, a success commits together with the slot's next claim. When that
/// commit's answer is lost, the completion is still recorded once, and the job the commit claimed
/// (which the worker never started: it does not know it has it) is put back in the queue by the
/// worker itself, unstarted, and run once as its first attempt (before, it waited for a reaper and
/// counted a restart).
#[test]
fn a_completion_and_claim_whose_acknowledgement_was_lost_lose_no_job_and_run_none_twice() {
    let env = TestEnv::new();
    synced(&env);
    let log = path(&env, "runs.log");
    let ids = enqueue_batch(&env, "t/echo", &[json!({"log": log}), json!({"log": log})]);
    let run = env
        .wf(["work", "--drain", "--concurrency", "1", "--heartbeat", "1s", "--no-reap", "--json"])
        .env("WF_FAULT", "complete-lost-ack")
        .ok();
    let summary = run.json();
    assert_eq!(
        (&summary["succeeded"], &summary["released"], &summary["fenced"]),
        (&json!(2), &json!(1), &json!(0)),
        "{run:?}"
    );
    let mut runs = executions(&log);
    runs.sort();
    let mut expected: Vec<(String, i32)> = vec![(ids[0].clone(), 1), (ids[1].clone(), 1)];
    expected.sort();
    assert_eq!(runs, expected, "each job ran once, as its first attempt");
    let restarts: i64 = env.scalar("SELECT count(*) FROM job_completed WHERE status = 'success' AND restarts = 0");
    assert_eq!(restarts, 2, "no restart counted");
    let said: String = env.scalar_of(
        "SELECT string_agg(line, ' ') FROM job_logs WHERE job_id = $1::text::uuid AND stream = 'wf'",
        &[&ids[1]],
    );
    assert!(said.contains("claim of the job went unanswered"), "{said}");
    assert!(run.stderr.contains("went unanswered: put back in the queue, unstarted"), "{run:?}");
}

/// Another transaction holds the finished job's queue row when its completion commits with the
/// slot's next claim (as a claim that met the row after its snapshot does, for a moment): the next
/// job is claimed, and the completion waits for the row alone; nothing of it is written before.
#[test]
fn a_completion_whose_queue_row_is_held_waits_for_it_after_the_next_claim() {
    let env = TestEnv::new();
    synced(&env);
    let log = path(&env, "runs.log");
    // Long enough for the holder below to take the row before the job ends, on a loaded machine.
    let first = enqueue(&env, "t/sleep", json!({"ms": 4000, "log": log}));
    let mut w = worker(&env, "w", &["--concurrency", "1", "--no-reap"]);
    wait_for(Duration::from_secs(30), "the first job to start", || {
        executions(&log).contains(&(first.clone(), 1)).then_some(())
    });
    let second = enqueue(&env, "t/sleep", json!({"ms": 0, "log": log}));
    let mut db = env.db();
    let mut holder = db.transaction().unwrap();
    holder.execute("SELECT 1 FROM job_queue WHERE job_id = $1 FOR SHARE", &[&uuid(&first)]).unwrap();
    wait_for(Duration::from_secs(30), "the next job to be claimed", || {
        let claimed: i64 = env.scalar_of(
            "SELECT count(*) FROM job_queue WHERE job_id = $1::text::uuid AND running AND worker LIKE 'w#%'",
            &[&second],
        );
        (claimed == 1).then_some(())
    });
    let traces: (i64, i64) = (
        env.scalar_of("SELECT count(*) FROM job_queue WHERE job_id = $1::text::uuid", &[&first]),
        env.scalar_of("SELECT count(*) FROM job_completed WHERE job_id = $1::text::uuid", &[&first]),
    );
    assert_eq!(traces, (1, 0), "the held job's completion waits, with nothing written");
    holder.rollback().unwrap();
    for job in [&first, &second] {
        assert_eq!(wait_completed(&env, job, Duration::from_secs(30)).status, "success", "{job}");
    }
    assert_eq!(executions(&log).len(), 2, "each job ran once");
    stop_worker(&mut w, "the worker");
}

#[test]
fn a_job_that_finishes_before_its_worker_sees_the_cancel_keeps_its_outcome_and_the_request() {
    let env = TestEnv::new();
    synced(&env);
    let log = path(&env, "runs.log");
    let id = enqueue(&env, "t/sleep", json!({"ms": 4000, "log": log}));
    // The next heartbeat comes after 12 s; the action is done after 4 s, which leaves the cancel
    // below time to come while it runs, on a loaded machine.
    let mut worker = worker(&env, "w", &["--once", "--heartbeat", "12s"]);
    wait_for(Duration::from_secs(30), "the job to start", || executions(&log).first().cloned());
    let canceled = env.wf(["cancel", &id, "--reason", "too late", "--json"]).ok().json();
    assert_eq!(canceled[0]["outcome"], "cancel_requested");
    assert!(worker.wait().unwrap().success());
    let shown = env.wf(["show", &id, "--json"]).ok().json();
    assert_eq!(shown["status"], "success", "the real outcome counts: {shown}");
    assert_eq!(shown["result"]["slept"], 4000);
    assert_eq!(shown["canceled_reason"], "too late", "the cancel request stays on record: {shown}");
    assert!(shown["canceled_by"].is_string());
    // Cancel is terminal for what is not finished; a finished job is reported as such.
    let again = env.wf(["cancel", &id, "--json"]).run().expect_code(1).json();
    assert_eq!(again[0]["outcome"], "already_completed");
    assert_eq!(executions(&log).len(), 1);
}

/// A worker whose WF_HOME cannot be locked (flock failing with ENOLCK, as on some NFS mounts) says
/// so and exits, instead of trying lock file after lock file forever. The failure is made with a
/// shared object, built here, that stands in for the C library's flock.
#[test]
fn a_worker_on_a_file_system_without_locks_says_so_and_exits() {
    let env = TestEnv::new();
    let source = env.dir.path().join("nolock.c");
    std::fs::write(&source, "#include <errno.h>\nint flock(int fd, int op) { errno = ENOLCK; return -1; }\n").unwrap();
    let library = env.dir.path().join("libnolock.so");
    let built = std::process::Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .status()
        .expect("gcc is needed to build the test's flock stand-in");
    assert!(built.success());
    let log = env.dir.path().join("w.log");
    let mut worker = env.wf(["work", "--once"]).env("LD_PRELOAD", &library).spawn(&log);
    let status = crate::support::checks::wait_exit(&mut worker, Duration::from_secs(30), "the worker");
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("working flock"), "{stderr}");
    let locks = std::fs::read_dir(env.home().join("scratch")).map_or(0, |entries| entries.count());
    assert!(locks <= 1, "{locks} files left in the scratch folder");
}

/// Timings a worker could never keep are refused before it starts, nothing claimed: a heartbeat
/// shorter than the database answers in (1 ns wedged the worker, its job left running), a window
/// longer than PostgreSQL's statement timeouts can say (30 days failed at the first statement,
/// and every reaper pass).
#[test]
fn timings_a_worker_cannot_keep_are_refused_before_it_starts() {
    let env = TestEnv::new();
    synced(&env);
    let job = enqueue(&env, "t/echo", json!({"n": 1}));
    let run = env.wf(["work", "--drain"]).env("WF_HEARTBEAT_S", "0").run();
    assert!(run.code == 1 && run.stderr.contains("must be at least 1 s"), "{run:?}");
    for period in ["1ns", "0s", "999ms"] {
        let run = env.wf(["work", "--drain", "--heartbeat", period]).run();
        assert!(run.code == 2 && run.stderr.contains("shorter than 1 s"), "{period}: {run:?}");
    }
    let run = env.wf(["work", "--drain"]).env("WF_ZOMBIE_TIMEOUT_S", "8640000").run();
    assert!(run.code == 1 && run.stderr.contains("the reaper's window is from 1 to 604800 seconds"), "{run:?}");
    for args in [&["work", "--max-jobs", "0"][..], &["bench", "--jobs", "0"], &["bench", "--workers", "65"]] {
        let run = env.wf(args).run();
        assert!(run.code == 2 && run.stderr.contains("is not in"), "{args:?}: {run:?}");
    }
    let run = env.wf(["reap"]).env("WF_ZOMBIE_TIMEOUT_S", "0").run();
    assert!(run.code == 1 && run.stderr.contains("WF_ZOMBIE_TIMEOUT_S=0"), "{run:?}");
    let waiting: i64 =
        env.scalar_of("SELECT count(*) FROM job_queue WHERE job_id = $1::text::uuid AND NOT running", &[&job]);
    assert_eq!(waiting, 1, "nothing claimed");
}

/// A worker killed mid-job leaves its scratch root (the attempt's folder, of any size): it was
/// removed only when a worker next started on the host, so a host whose workers run for weeks kept
/// every crashed worker's attempts. A live worker's sweeper now removes it within its period.
#[test]
fn a_live_worker_removes_the_scratch_of_a_worker_killed_beside_it() {
    let env = TestEnv::new();
    synced(&env);
    // The scratch root of the worker process `pid`, once it is there.
    let root_of = |pid: u32| {
        let entries = std::fs::read_dir(env.home().join("scratch")).ok()?;
        let prefix = format!("{pid}-");
        entries
            .flatten()
            .map(|entry| entry.path())
            .find(|path| path.is_dir() && path.file_name().unwrap().to_string_lossy().starts_with(&prefix))
    };
    let mut live = worker(&env, "live", &["--tag", "elsewhere", "--grace", "0s"]);
    wait_for(Duration::from_secs(30), "the live worker's root", || root_of(live.id()));
    let job = enqueue(&env, "t/sleep", json!({"ms": 60000}));
    let mut killed = worker(&env, "killed", &[]);
    let root = wait_for(Duration::from_secs(30), "the killed worker's attempt", || {
        let root = root_of(killed.id())?;
        let attempt =
            std::fs::read_dir(&root).ok()?.flatten().any(|entry| entry.file_name().to_string_lossy().starts_with(&job));
        attempt.then_some(root)
    });
    signal(&killed, libc::SIGKILL);
    killed.wait().unwrap();
    let patience = wf::runner::STALE_ROOTS_PERIOD + Duration::from_secs(30);
    wait_for(patience, "the live worker to remove the killed worker's root", || (!root.exists()).then_some(()));
    assert!(live.try_wait().unwrap().is_none(), "the live worker runs on");
    signal(&live, libc::SIGTERM);
    assert!(live.wait().unwrap().success());
}
