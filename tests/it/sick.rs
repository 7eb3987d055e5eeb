//! The guarantees under a sick database: a worker whose database connections hang, a completion
//! that meets a lock and a statement timeout, a flood of notifications, a reaper given a window
//! shorter than the workers'.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::checks::{completed, wait_completed};
use crate::support::fixtures::{enqueue, executions, ledger, path, synced, worker};
use crate::support::harness::{Proxy, TestEnv, wait_for};

/// The PostgreSQL backends of worker `name`, stopped with SIGSTOP while idle (a stuck backend,
/// a partition that drops packets) and continued when dropped.
struct Frozen(Vec<i32>);

impl Frozen {
    fn worker(env: &TestEnv, name: &str) -> Frozen {
        Frozen::backends(env, &format!("wf work {name} %"))
    }

    /// The backends whose application name is LIKE `pattern`.
    fn backends(env: &TestEnv, pattern: &str) -> Frozen {
        let mut db = env.db();
        loop {
            let pids: Vec<i32> = db
                .query(
                    "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name LIKE $2",
                    &[&env.dbname, &pattern],
                )
                .unwrap()
                .iter()
                .map(|row| row.get(0))
                .collect();
            assert!(!pids.is_empty(), "no connection named like {pattern}");
            for pid in &pids {
                // SAFETY: a signal to a PostgreSQL backend of this test's database.
                unsafe { libc::kill(*pid, libc::SIGSTOP) };
            }
            let frozen = Frozen(pids);
            // Stopped between statements, a backend holds no lock: otherwise try again.
            let busy: i64 = db
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1) AND state <> 'idle'",
                    &[&frozen.0],
                )
                .unwrap()
                .get(0);
            if busy == 0 {
                return frozen;
            }
            drop(frozen);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for pid in &self.0 {
            // SAFETY: as above.
            unsafe { libc::kill(*pid, libc::SIGCONT) };
        }
    }
}

/// Once a slot of worker `name` has connected (to look at the queue).
fn slot_connected(env: &TestEnv, name: &str) {
    let pattern = format!("wf work {name} slot%");
    wait_for(Duration::from_secs(30), "the worker's slot to look at the queue", || {
        let slots: i64 = env.scalar_of(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE $1",
            &[&pattern],
        );
        (slots > 0).then_some(())
    });
}

fn span(entries: &[(i32, i64)], attempt: i32) -> Option<(i64, i64)> {
    let times: Vec<i64> = entries.iter().filter(|(a, _)| *a == attempt).map(|(_, at)| *at).collect();
    Some((*times.iter().min()?, *times.iter().max()?))
}

/// A worker whose registry connection hangs (its backend stopped) stays shown alive: the entry's
/// refresh gives up on it after two heartbeat periods and reconnects (it waited for it: `wf workers`
/// showed the worker gone, and its schema checks stopped, until the backend came back).
#[test]
fn a_worker_whose_registry_connection_hangs_stays_alive_in_the_registry() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "6");
    let _w = worker(&env, "w1", &["--heartbeat", "1s", "--no-reap"]);
    wait_for(Duration::from_secs(30), "the worker's entry", || {
        (env.scalar::<i64>("SELECT count(*) FROM worker WHERE name = 'w1'") == 1).then_some(())
    });
    let _frozen = Frozen::backends(&env, "wf work w1 registry");
    std::thread::sleep(Duration::from_secs(9));
    let age: f64 = env.scalar("SELECT extract(epoch FROM now() - last_seen)::float8 FROM worker WHERE name = 'w1'");
    assert!(age < 6.0, "the entry was last refreshed {age} s ago, past the worker's window");
    let workers = env.wf(["workers", "--json"]).ok().json();
    assert_eq!(workers[0]["state"], "live", "{workers}");
}

/// A worker whose every database connection hangs still kills its job at the job's timeout: the
/// timeout does not wait for a heartbeat to return.
#[test]
fn a_hung_database_does_not_hold_up_a_timeout() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "30");
    synced(&env);
    let file = path(&env, "ledger");
    let job = enqueue(&env, "t/ledger", json!({"ledger": file}));
    let _w = worker(&env, "w1", &["--once", "--heartbeat", "1s", "--no-reap"]);
    wait_for(Duration::from_secs(30), "the job to run", || (!ledger(&file).is_empty()).then_some(()));
    let frozen = Frozen::worker(&env, "w1");
    let entries = wait_for(Duration::from_secs(20), "the ledger to stop", || {
        let before = ledger(&file);
        std::thread::sleep(Duration::from_millis(500));
        (ledger(&file).len() == before.len()).then_some(before)
    });
    let (first, last) = span(&entries, 1).unwrap();
    assert!(last - first < 4_000 + 1_500, "the 4 s job ran {} ms with its worker's database hung", last - first);
    drop(frozen);
    let done = wait_completed(&env, &job, Duration::from_secs(30));
    assert_eq!(done.status, "failure");
    let error: serde_json::Value = serde_json::from_str(&env.wf(["result", &job]).run().expect_code(4).stdout).unwrap();
    assert_eq!(error["name"], "Timeout", "{error}");
}

/// A worker cut off from its database (behind a proxy that stops moving bytes: its connections and
/// any new one hang) stops its attempt by itself before the reaper may take the job; another
/// worker's reaper then requeues it and runs it again: the two attempts never overlap, and the
/// cut-off worker, back, records nothing.
#[test]
fn a_worker_cut_off_stops_its_attempt_before_another_may_run_it() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "6");
    synced(&env);
    let proxy = Proxy::start();
    let file = path(&env, "ledger");
    let job = enqueue(&env, "t/ledger_long", json!({"ledger": file, "ms_by_attempt": {"2": 1500}}));
    let log = env.dir.path().join("w1.log");
    let mut first = env
        .wf(["work", "--name", "w1", "--heartbeat", "1s", "--no-reap", "--json"])
        .env("DATABASE_URL", proxy.url(&env.dbname))
        .spawn(&log);
    wait_for(Duration::from_secs(30), "attempt 1 to run", || (!ledger(&file).is_empty()).then_some(()));
    proxy.set_cut(true);
    let cut_at = Instant::now();
    let _second = worker(&env, "w2", &["--heartbeat", "1s"]);
    let done = wait_completed(&env, &job, Duration::from_secs(60));
    let entries = ledger(&file);
    let (_, last_1) = span(&entries, 1).unwrap();
    let (first_2, _) = span(&entries, 2).expect("attempt 2 ran");
    assert!(last_1 < first_2, "attempt 1 ran until {last_1}, attempt 2 from {first_2}: they overlapped");
    assert_eq!((done.status.as_str(), done.restarts), ("success", 1), "{done:?}");
    assert!(done.worker.as_deref().unwrap().starts_with("w2#"), "{done:?}");

    // Back: the cut-off worker finds the job is no longer its own and records nothing.
    assert!(cut_at.elapsed() > Duration::from_secs(6));
    proxy.set_cut(false);
    std::thread::sleep(Duration::from_secs(3));
    crate::support::fixtures::signal(&first, libc::SIGTERM);
    let status = crate::support::checks::wait_exit(&mut first, Duration::from_secs(30), "the worker that was cut off");
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("stopping it before the reaper may take it"), "{stderr}");
    assert_eq!(completed(&env, &job).unwrap().worker, done.worker, "the record stays the second worker's");
}

/// A completion that meets a lock held by another session, with a statement timeout shorter than
/// the lock (set on the database, as an operator might), is retried with the result kept: the job
/// is recorded once, as the success it was.
#[test]
fn a_completion_that_times_out_on_a_lock_is_retried_and_recorded_once() {
    let env = TestEnv::new();
    synced(&env);
    env.db().batch_execute(&format!("ALTER DATABASE {} SET statement_timeout = '300ms'", env.dbname)).unwrap();
    let log = path(&env, "runs.log");
    let job = enqueue(&env, "t/sleep", json!({"ms": 1500, "log": log}));
    let mut w = worker(&env, "w", &["--once", "--heartbeat", "1s"]);
    wait_for(Duration::from_secs(30), "the job to run", || (!executions(&log).is_empty()).then_some(()));
    // Lock the job's queue row until well after the action finished: the completion's gate (and
    // the heartbeats) wait on it and time out.
    let mut locker = env.db();
    let mut tx = locker.transaction().unwrap();
    tx.batch_execute("SET LOCAL statement_timeout = 0").unwrap();
    let id = crate::support::checks::uuid(&job);
    tx.query("SELECT 1 FROM job_queue WHERE job_id = $1 FOR UPDATE", &[&id]).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    tx.commit().unwrap();
    assert!(crate::support::checks::wait_exit(&mut w, Duration::from_secs(30), "the worker").success());
    let done = completed(&env, &job).unwrap();
    assert_eq!(done.status, "success", "{done:?}");
    assert_eq!(executions(&log).len(), 1, "the action ran once");
}

/// Enqueue notifications arriving while every slot is busy are read as they come, not piled up
/// in the busy slots' connections: the worker's memory stays flat under a flood.
#[test]
fn a_notification_flood_does_not_grow_a_busy_worker() {
    let env = TestEnv::new();
    synced(&env);
    let log = path(&env, "runs.log");
    let job = enqueue(&env, "t/sleep", json!({"ms": 60000, "log": log}));
    let w = worker(&env, "w", &["--heartbeat", "1s"]);
    wait_for(Duration::from_secs(30), "the job to run", || (!executions(&log).is_empty()).then_some(()));
    let rss = || -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", w.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .unwrap()
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap()
    };
    let before = rss();
    let mut db = env.db();
    for round in 0..4 {
        db.execute(
            "SELECT pg_notify('wf_enqueued', $1 || ':' || n) FROM generate_series(1, 100000) AS n",
            &[&round.to_string()],
        )
        .unwrap();
    }
    std::thread::sleep(Duration::from_secs(3));
    let after = rss();
    assert!(after < before + 20 * 1024, "the worker grew from {before} KiB to {after} KiB under 400,000 notifications");
    env.wf(["cancel", &job, "--yes"]).ok();
}

/// `wf reap` given a window shorter than the one the job's worker claimed it with does not take a
/// live job: the worker's own window, stored at claim, is the least any reaper waits.
#[test]
fn a_reaper_never_takes_a_job_before_its_workers_window() {
    let env = TestEnv::new();
    synced(&env);
    let log = path(&env, "runs.log");
    let job = enqueue(&env, "t/sleep", json!({"ms": 8000, "log": log}));
    let mut w = worker(&env, "w", &["--once", "--heartbeat", "3s", "--no-reap"]);
    wait_for(Duration::from_secs(30), "the job to run", || (!executions(&log).is_empty()).then_some(()));
    std::thread::sleep(Duration::from_secs(2));
    let reaped = env.wf(["reap", "--zombie-timeout", "1s", "--json"]).ok().json();
    assert_eq!(reaped["requeued"], 0, "{reaped}");
    assert!(crate::support::checks::wait_exit(&mut w, Duration::from_secs(30), "the worker").success());
    let done = completed(&env, &job).unwrap();
    assert_eq!((done.status.as_str(), done.restarts), ("success", 0), "{done:?}");
    assert_eq!(executions(&log).len(), 1);
}

/// Output that the database refuses for a reason a retry cannot change is dropped once, with a
/// note in the logs, instead of being retried at every turn and then sinking the completion.
#[test]
fn output_the_database_refuses_is_dropped_with_one_note_and_the_job_still_succeeds() {
    let env = TestEnv::new();
    synced(&env);
    refuse_poison_lines(&env);
    let job = enqueue(&env, "t/chatty_poison", json!({}));
    env.wf(["work", "--drain"]).ok();
    let done = completed(&env, &job).unwrap();
    assert_eq!(done.status, "success", "{done:?}");
    let logs = env.wf(["logs", &job]).ok().stdout;
    assert_eq!(logs.matches("could not be stored").count(), 1, "{logs}");
    assert!(logs.contains("a clean line after"), "the lines written after are kept: {logs}");
    assert!(!logs.contains("[wf] [wf]"), "{logs}");
}

/// Output the database refuses among a job's last lines, which go with its completion: the outcome
/// is recorded without them, one note in their place, and the job runs once. (Retried as if the
/// database were away, the completion gave up after the window, and the job ran again.)
#[test]
fn output_the_database_refuses_at_completion_is_dropped_and_the_job_succeeds_once() {
    let env = TestEnv::new();
    synced(&env);
    refuse_poison_lines(&env);
    let log = path(&env, "runs.log");
    let job = enqueue(&env, "t/chatty_poison", json!({"last": true, "log": log}));
    let worked = env.wf(["work", "--drain", "--heartbeat", "1s"]).ok();
    let done = completed(&env, &job).unwrap();
    assert_eq!((done.status.as_str(), done.restarts), ("success", 0), "{done:?}: {}", worked.stderr);
    assert_eq!(env.wf(["result", &job]).ok().json(), json!({"done": true}));
    assert_eq!(executions(&log).len(), 1, "{}", worked.stderr);
    let logs = env.wf(["logs", &job]).ok().stdout;
    assert_eq!(logs.matches("could not be stored").count(), 1, "{logs}");
    assert!(!logs.contains("poison 0"), "{logs}");
    assert!(worked.stderr.contains("could not be stored"), "the worker says so: {}", worked.stderr);
}

/// The same at a release: a worker stopped past its grace puts its job back at once, without the
/// lines the database refuses, where it retried until the window and left the job to the reaper.
#[test]
fn output_the_database_refuses_at_a_release_is_dropped_and_the_job_goes_back_at_once() {
    let env = TestEnv::new();
    synced(&env);
    refuse_poison_lines(&env);
    let log = path(&env, "runs.log");
    let job = enqueue(&env, "t/chatty_poison", json!({"forever": true, "log": log}));
    let mut w = worker(&env, "w", &["--grace", "0s", "--heartbeat", "1s", "--no-reap"]);
    wait_for(Duration::from_secs(30), "the job to run", || (!executions(&log).is_empty()).then_some(()));
    std::thread::sleep(Duration::from_millis(1500));
    crate::support::fixtures::signal(&w, libc::SIGTERM);
    let status = crate::support::checks::wait_exit(&mut w, Duration::from_secs(30), "the worker");
    let journal = std::fs::read_to_string(env.dir.path().join("w.log")).unwrap();
    assert!(status.success(), "{journal}");
    let running: Vec<bool> = env.column_of("SELECT running FROM job_queue WHERE job_id = $1::text::uuid", &[&job]);
    assert_eq!(running, [false], "the job is back in the queue: {journal}");
    assert!(journal.contains("could not be stored"), "{journal}");
}

/// As a rule of the operator's might: lines holding "poison" are refused (SQLSTATE 23514, which no
/// retry changes).
fn refuse_poison_lines(env: &TestEnv) {
    env.db()
        .batch_execute("ALTER TABLE job_logs ADD CONSTRAINT refused_lines CHECK (line NOT LIKE '%poison%')")
        .unwrap();
}

/// The test's database altered (`ALTER DATABASE db <change>`) and the connections of worker `name`
/// ended, so that the ones it makes again meet the change; `undo` is applied when dropped.
struct Altered {
    admin: postgres::Client,
    undo: String,
}

impl Altered {
    fn for_worker(env: &TestEnv, name: &str, change: &str, undo: &str) -> Altered {
        let mut admin = postgres::Client::connect(&TestEnv::cluster_url("postgres"), postgres::NoTls).unwrap();
        let database = format!("\"{}\"", env.dbname);
        admin.batch_execute(&format!("ALTER DATABASE {database} {change}")).unwrap();
        admin
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name LIKE $2",
                &[&env.dbname, &format!("wf work {name}%")],
            )
            .unwrap();
        Altered { admin, undo: format!("ALTER DATABASE {database} {undo}") }
    }
}

impl Drop for Altered {
    fn drop(&mut self) {
        self.admin.batch_execute(&self.undo).unwrap();
    }
}

/// A database closed to a worker: new connections refused, and those it had ended. Open again
/// when dropped.
fn closed_to_worker(env: &TestEnv, name: &str) -> Altered {
    Altered::for_worker(env, name, "WITH ALLOW_CONNECTIONS false", "WITH ALLOW_CONNECTIONS true")
}

/// A database whose new sessions may not write (as a standby's, or a primary's demoted under its
/// clients), and the sessions the worker had ended: its writes meet SQLSTATE 25006 until it makes
/// its connections again after the drop, which lets sessions write.
fn read_only_to_worker(env: &TestEnv, name: &str) -> Altered {
    Altered::for_worker(env, name, "SET default_transaction_read_only = on", "RESET default_transaction_read_only")
}

/// How many connections of the worker `name` the database has.
fn connections_of(env: &TestEnv, name: &str) -> i64 {
    env.scalar_of(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE $1",
        &[&format!("wf work {name}%")],
    )
}

/// A database outage is told once by each part of the worker that met it (the slots together, the
/// listener, the reaper), then once more when the database answers again: a journal shows the
/// outage, not one line per retry nor per slot.
#[test]
fn an_outage_is_one_line_and_its_end_one_more() {
    let env = TestEnv::new();
    synced(&env);
    let log = env.dir.path().join("w1.log");
    let mut worker = env.wf(["work", "--name", "w1", "--tag", "quiet", "--concurrency", "2"]).spawn(&log);
    wait_for(Duration::from_secs(30), "the worker to connect", || (connections_of(&env, "w1") >= 3).then_some(()));
    let closed = closed_to_worker(&env, "w1");
    std::thread::sleep(Duration::from_secs(5));
    drop(closed);
    wait_for(Duration::from_secs(30), "the worker to say the database answers again", || {
        std::fs::read_to_string(&log).unwrap().contains("answers again").then_some(())
    });
    crate::support::fixtures::signal(&worker, libc::SIGTERM);
    let status = crate::support::checks::wait_exit(&mut worker, Duration::from_secs(30), "the worker");
    let journal = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{journal}");
    let failures = journal.lines().filter(|line| line.contains("failed")).count();
    assert!((1..=3).contains(&failures), "the slots, the listener, the reaper at most once: {journal}");
    let of_slots = |line: &&str| line.contains("claiming failed") || line.contains("looking at the queue failed");
    assert_eq!(journal.lines().filter(of_slots).count(), 1, "the two slots' failures, said once: {journal}");
    assert_eq!(journal.matches("answers again").count(), 1, "the end, said once: {journal}");
    let lines = journal.lines().count();
    assert!(lines <= 10, "five seconds of retries are not a line each: {journal}");
}

/// A slot that gives a completion up during an outage (left to the reaper after a zombie window)
/// no longer counts as failing: its next failures are said, and so is the outage's end. (Counted
/// still, it kept every later failure and end of the worker's slots silent.) The worker's summary
/// counts the job as lost to the reaper (it said none).
#[test]
fn a_completion_given_up_in_an_outage_leaves_its_end_said() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "4");
    synced(&env);
    let runs = path(&env, "runs.log");
    let log = env.dir.path().join("w1.log");
    let mut worker = crate::support::checks::spawn_capturing(
        &env,
        "w1",
        &["work", "--name", "w1", "--concurrency", "1", "--heartbeat", "1s", "--no-reap", "--json"],
    );
    enqueue(&env, "t/sleep", json!({"ms": 2000, "log": runs}));
    wait_for(Duration::from_secs(30), "the job to start", || executions(&runs).first().cloned());
    let closed = closed_to_worker(&env, "w1");
    let journal = || std::fs::read_to_string(&log).unwrap();
    let given_up =
        |journal: &str| journal.find("giving up completing job").or_else(|| journal.find("could not release job"));
    let at = wait_for(Duration::from_secs(30), "the slot to give its job up", || given_up(&journal()));
    // A claim or two fail after that.
    std::thread::sleep(Duration::from_secs(3));
    drop(closed);
    wait_for(Duration::from_secs(60), "the worker to say the database answers again", || {
        journal()[at..].contains("answers again").then_some(())
    });
    crate::support::fixtures::signal(&worker, libc::SIGTERM);
    let status = crate::support::checks::wait_exit(&mut worker, Duration::from_secs(60), "the worker");
    assert!(status.success(), "{}", journal());
    let summary = crate::support::checks::captured_json(&env, "w1");
    assert_eq!(summary["fenced"], 1, "{summary}");
}

/// A worker that cannot start all its threads (here: a user allowed few processes, as
/// `RLIMIT_NPROC` counts threads) says which one it could not start and exits 1 once the threads
/// it started have stopped: no panic, no abort, no job left running.
#[test]
fn a_thread_that_cannot_start_ends_the_worker_with_an_error_not_a_panic() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    synced(&env);
    // A user of its own (no other process counts against its limit), with a copy of wf it can run
    // and a WF_HOME it owns.
    let uid = 60_000 + std::process::id() % 5_000;
    let shared = tempfile::Builder::new().prefix("wf-nproc-").tempdir().unwrap();
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = crate::support::harness::copy_of_wf(shared.path());
    let home = shared.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(uid), Some(uid)).unwrap();
    let user = [format!("--reuid={uid}"), format!("--regid={uid}"), "--clear-groups".to_string()];
    let run = env
        .wf(["work", "--drain", "--concurrency", "64", "--isolation", "none", "--tag", "quiet"])
        .env("WF_HOME", &home)
        .env("HOME", &home)
        .current_dir(&home)
        .under("setpriv", user.iter().map(String::as_str).chain(["prlimit", "--nproc=12"]), bin.as_os_str())
        .run();
    let stderr = &run.stderr;
    assert_eq!(run.code, 1, "{stderr}");
    assert!(stderr.contains("error: starting"), "{stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("internal error"), "a panic, not an error: {stderr}");
    let running: i64 = env.scalar("SELECT count(*) FROM job_queue WHERE running");
    assert_eq!(running, 0);
}

/// A worker cut off before the COMMIT of a completion leaves its transaction open, holding the
/// job's row: the server ends that transaction after one heartbeat period, so that the reaper,
/// which skips a locked row, takes the job back once its window has passed and it runs again. The
/// worker gives the stalled call up after two periods, and its retries, stalled the same way, after
/// its window.
#[test]
fn a_completion_cut_off_before_its_commit_does_not_hide_its_job_from_the_reaper() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "3");
    synced(&env);
    let id = enqueue(&env, "t/fail", json!({}));
    let args = ["work", "--name", "cut", "--once", "--heartbeat", "1s", "--no-reap", "--isolation", "none"];
    let mut cut = env.wf(args).env("WF_FAULT", "failure-stalls-before-commit").spawn(&env.dir.path().join("cut.log"));
    let mut db = env.db();
    wait_for(Duration::from_secs(30), "the completion's transaction to be left open", || {
        let open: i64 = db
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = $1 AND application_name LIKE 'wf work cut %' AND state = 'idle in transaction'",
                &[&env.dbname],
            )
            .unwrap()
            .get(0);
        (open > 0).then_some(())
    });
    wait_for(Duration::from_secs(30), "the reaper to take the job back", || {
        env.wf(["reap"]).ok();
        let running: bool = env.scalar_of("SELECT running FROM job_queue WHERE job_id = $1::text::uuid", &[&id]);
        (!running).then_some(())
    });
    env.wf(["work", "--once", "--heartbeat", "1s", "--no-reap", "--isolation", "none"]).ok();
    let show = env.wf(["show", &id, "--json"]).ok().json();
    assert_eq!(show["status"], "failure", "{show}");
    assert_eq!(show["restarts"], 1, "{show}");
    crate::support::checks::wait_exit(&mut cut, Duration::from_secs(30), "the cut-off worker");
    let said = std::fs::read_to_string(env.dir.path().join("cut.log")).unwrap();
    assert!(said.contains("did not answer within 2s"), "{said}");
    assert!(said.contains("giving up completing job"), "{said}");
}

/// A slot whose own backend stops answering while a job shorter than a heartbeat period runs (so
/// no beat found it stuck) still records the job's completion: the call is given up after two
/// heartbeat periods and made again on a new connection (before: the slot waited for the backend as
/// long as it was stopped, and a reaper ran the job again).
#[test]
fn a_completion_on_a_backend_that_stops_answering_is_made_on_a_new_connection() {
    let env = TestEnv::new();
    synced(&env);
    let log = path(&env, "runs.log");
    let job = enqueue(&env, "t/sleep", json!({"ms": 2000, "log": log}));
    let mut w = worker(&env, "w1", &["--once", "--heartbeat", "5s", "--no-reap"]);
    wait_for(Duration::from_secs(30), "the job to run", || (!executions(&log).is_empty()).then_some(()));
    let frozen = Frozen::backends(&env, "wf work w1 slot%");
    let done = wait_for(Duration::from_secs(40), "the completion, while the slot's backend is stopped", || {
        completed(&env, &job)
    });
    assert_eq!((done.status.as_str(), done.restarts), ("success", 0), "{done:?}");
    drop(frozen);
    assert!(crate::support::checks::wait_exit(&mut w, Duration::from_secs(30), "the worker").success());
    let journal = std::fs::read_to_string(env.dir.path().join("w1.log")).unwrap();
    assert!(journal.contains("did not answer within 10s"), "{journal}");
    assert_eq!(executions(&log).len(), 1);
}

/// An idle slot whose own backend stops answering claims the next job on a new connection: its
/// claim is given up after a zombie window (before: the slot waited for the backend as long as it
/// was stopped, and the job sat in the queue).
#[test]
fn a_claim_on_a_backend_that_stops_answering_is_made_on_a_new_connection() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "5");
    synced(&env);
    let mut w = worker(&env, "w1", &["--once", "--heartbeat", "1s", "--no-reap"]);
    slot_connected(&env, "w1");
    let frozen = Frozen::backends(&env, "wf work w1 slot%");
    let log = path(&env, "runs.log");
    let job = enqueue(&env, "t/sleep", json!({"ms": 100, "log": log}));
    let done = wait_for(Duration::from_secs(40), "the job to run, while the slot's backend is stopped", || {
        completed(&env, &job)
    });
    assert_eq!((done.status.as_str(), done.restarts), ("success", 0), "{done:?}");
    assert!(crate::support::checks::wait_exit(&mut w, Duration::from_secs(30), "the worker").success());
    drop(frozen);
    let journal = std::fs::read_to_string(env.dir.path().join("w1.log")).unwrap();
    // The first call to meet the stopped backend is the claim, or the look at the queue that an
    // idle slot makes now and then: either is given up after the window.
    let given_up = ["claiming failed", "looking at the queue failed"]
        .iter()
        .any(|call| journal.contains(&format!("{call}: the database did not answer within 5s")));
    assert!(given_up, "{journal}");
    assert_eq!(executions(&log).len(), 1);
}

/// A worker whose backends stop answering (frozen: no timeout of the server's runs, and TCP sees
/// nothing wrong) while its slot claims on one still ends on SIGTERM: the slot gives its claim up
/// after a zombie window and sees the signal, and the helper threads give their calls up too (or are
/// left behind after two heartbeat periods more, said) (before the claim was bounded: the slot
/// waited until a zombie window and two periods had passed after the signal, and the worker exited
/// with an error).
#[test]
fn a_worker_whose_database_stops_answering_still_ends_on_sigterm() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "3");
    synced(&env);
    let log = env.dir.path().join("w1.log");
    let mut worker = env.wf(["work", "--name", "w1", "--heartbeat", "1s", "--grace", "1s", "--no-reap"]).spawn(&log);
    slot_connected(&env, "w1");
    let frozen = Frozen::worker(&env, "w1");
    // Its idle slot looks at the queue every 5 s, and waits on its frozen backend for 3 s then.
    enqueue(&env, "t/sleep", json!({"ms": 100}));
    std::thread::sleep(Duration::from_secs(6));
    crate::support::fixtures::signal(&worker, libc::SIGTERM);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = worker.try_wait().unwrap() {
            break status;
        }
        let stderr = std::fs::read_to_string(&log).unwrap();
        assert!(Instant::now() < deadline, "the worker did not end within 30 s of SIGTERM: {stderr}");
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(frozen);
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("claiming failed: the database did not answer within 3s"), "{stderr}");
}

/// A server that accepts a connection and never answers (stopped, hung, a proxy in front of a dead
/// one) fails a command after the URL's `connect_timeout` (the client library bounded only the
/// socket's connect: before, `wf status` waited forever); once it answers, the same command works.
#[test]
fn a_command_gives_up_on_a_server_that_accepts_and_never_answers() {
    let env = TestEnv::new();
    let proxy = Proxy::start();
    proxy.set_cut(true);
    let url = format!("{} connect_timeout=2", proxy.url(&env.dbname));
    let mut status = env.wf(["status", "--database-url", &url]).start();
    crate::support::checks::wait_exit(&mut status, Duration::from_secs(60), "wf status");
    let run = status.finish();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("accepted the connection but did not answer within 2 s"), "{}", run.stderr);
    proxy.set_cut(false);
    env.wf(["status", "--database-url", &url]).ok();
}

/// A worker that stops on its own (`--drain`) meeting a claim that cannot succeed, whatever the
/// wait (a role that may read the queue but not write it), ends with that error: it tried again
/// forever, as in an outage, and a drain run from cron never ended.
#[test]
fn a_drain_whose_claims_are_refused_ends_with_the_error() {
    let env = TestEnv::new();
    synced(&env);
    let (_, url) = env.role("reader", &["USAGE ON SCHEMA public", "SELECT ON ALL TABLES IN SCHEMA public"]);
    let job = enqueue(&env, "t/echo", json!({"n": 1}));
    let mut drain = env.wf(["work", "--drain", "--no-reap"]).env("DATABASE_URL", &url).start();
    crate::support::checks::wait_exit(&mut drain, Duration::from_secs(60), "the drain");
    let run = drain.finish();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("permission denied") && run.stderr.contains("no more claims"), "{run:?}");
    let queued: i64 =
        env.scalar_of("SELECT count(*) FROM job_queue WHERE job_id = $1::text::uuid AND NOT running", &[&job]);
    assert_eq!(queued, 1, "the job waits for a worker that may run it");
}

/// A `wf db migrate` of a newer wf while a worker runs: the worker sees the schema ahead of it (as
/// every command does at its start), claims nothing more and ends with the error; it went on
/// running its statements against a schema that was no longer theirs.
#[test]
fn a_worker_stops_when_the_schema_moves_ahead_of_it() {
    let env = TestEnv::new();
    synced(&env);
    let log = env.dir.path().join("w1.log");
    let mut worker = env.wf(["work", "--name", "w1", "--heartbeat", "1s"]).spawn(&log);
    wait_for(Duration::from_secs(30), "the worker to connect", || (connections_of(&env, "w1") >= 3).then_some(()));
    let next = wf::db::migrate::latest_version() + 1;
    env.db()
        .execute("INSERT INTO wf_migration (version, name, checksum) VALUES ($1, 'future.sql', 'x')", &[&next])
        .unwrap();
    let status = crate::support::checks::wait_exit(&mut worker, Duration::from_secs(30), "the worker");
    let journal = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(1), "{journal}");
    assert!(journal.contains(&format!("at version {next}, newer than this wf")), "{journal}");
    assert!(journal.contains("no more claims"), "{journal}");
}

/// A bounded run (`--max-jobs`) whose idle slot meets an outage (the database closed to its
/// connections for a while: refused, not an error of the statements) waits it out and runs its job
/// after: only a claim refused for good ends a bounded run (it ended at the first look that failed).
#[test]
fn a_bounded_run_waits_out_an_outage() {
    let env = TestEnv::new();
    synced(&env);
    let journal = env.dir.path().join("w1.log");
    let mut worker = env.wf(["work", "--name", "w1", "--max-jobs", "1", "--no-reap"]).spawn(&journal);
    wait_for(Duration::from_secs(30), "the worker to connect", || (connections_of(&env, "w1") >= 3).then_some(()));
    let closed = closed_to_worker(&env, "w1");
    // Its idle slot looks at the queue every 5 s.
    std::thread::sleep(Duration::from_secs(7));
    drop(closed);
    let job = enqueue(&env, "t/echo", json!({"n": 1}));
    let status = crate::support::checks::wait_exit(&mut worker, Duration::from_secs(90), "the worker");
    let said = std::fs::read_to_string(&journal).unwrap();
    assert!(status.success(), "{said}");
    assert!(said.contains("failed") && said.contains("retrying"), "the outage was met: {said}");
    assert_eq!(completed(&env, &job).map(|done| done.status).as_deref(), Some("success"), "{said}");
}

/// A database read-only for a while (a failover's standby, a demoted primary): a session that began
/// so stays so, and the worker makes its connections again until one may write. The job that ended
/// meanwhile is recorded once, with its output (before: the worker kept its read-only sessions
/// after the database could write again, dropped the job's output as refused for good, gave the
/// completion up after a zombie window, and the job ran again once reaped).
#[test]
fn a_database_read_only_for_a_while_records_the_job_that_ended_meanwhile_once() {
    let env = TestEnv::new();
    synced(&env);
    let log = path(&env, "runs.log");
    let job = enqueue(&env, "t/sleep", json!({"ms": 2000, "log": log, "say": "still here"}));
    let mut w = worker(&env, "w1", &["--once", "--heartbeat", "1s", "--no-reap"]);
    wait_for(Duration::from_secs(30), "the job to run", || executions(&log).first().cloned());
    let read_only = read_only_to_worker(&env, "w1");
    // The job ends and its completion meets the read-only database.
    std::thread::sleep(Duration::from_secs(5));
    assert!(completed(&env, &job).is_none(), "a read-only database records nothing");
    drop(read_only);
    let done =
        wait_for(Duration::from_secs(20), "the completion, once the database may write", || completed(&env, &job));
    assert_eq!((done.status.as_str(), done.restarts), ("success", 0), "{done:?}");
    assert!(crate::support::checks::wait_exit(&mut w, Duration::from_secs(30), "the worker").success());
    assert_eq!(executions(&log).len(), 1, "the job ran once");
    let lines: Vec<String> = env
        .db()
        .query("SELECT line FROM job_logs WHERE job_id = $1", &[&job.parse::<uuid::Uuid>().unwrap()])
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(lines.iter().any(|line| line.contains("still here")), "its output is kept: {lines:?}");
}

/// A completion and claim given up on a backend that stopped answering runs when the backend
/// moves again, long after the slot went on (its completion made on a new connection, then its
/// next job): the job that stale claim takes is put back in the queue by the worker, unstarted, and
/// runs once (before, it waited for a reaper, counted a restart, and its log said the live worker
/// had stopped sending heartbeats).
#[test]
fn a_claim_given_up_that_commits_later_has_its_job_put_back_by_the_worker() {
    let env = TestEnv::new();
    synced(&env);
    let log = path(&env, "runs.log");
    let first = enqueue(&env, "t/sleep", json!({"ms": 2000, "log": log}));
    let mut w = worker(&env, "w1", &["--concurrency", "1", "--heartbeat", "5s", "--no-reap"]);
    wait_for(Duration::from_secs(30), "the first job to run", || executions(&log).first().cloned());
    // Queued behind the first: its completion claims it in the same statement.
    let second = enqueue(&env, "t/sleep", json!({"ms": 4000, "log": log}));
    let frozen = Frozen::backends(&env, "wf work w1 slot%");
    // The completion and claim are given up after two heartbeat periods; the completion is made
    // on a new connection, and the slot claims the second job there.
    wait_for(Duration::from_secs(40), "the second job to run", || {
        executions(&log).iter().any(|(id, _)| *id == second).then_some(())
    });
    let third = enqueue(&env, "t/sleep", json!({"ms": 0, "log": log}));
    // The stopped statement runs now: the first job is completed already, and it claims the third.
    drop(frozen);
    let done = wait_for(Duration::from_secs(30), "the third job to be run by the worker", || completed(&env, &third));
    assert_eq!((done.status.as_str(), done.restarts), ("success", 0), "{done:?}");
    crate::support::fixtures::signal(&w, libc::SIGTERM);
    assert!(crate::support::checks::wait_exit(&mut w, Duration::from_secs(30), "the worker").success());
    let mut runs: Vec<String> = executions(&log).into_iter().map(|(id, _)| id).collect();
    runs.sort();
    let mut expected = vec![first.clone(), second.clone(), third.clone()];
    expected.sort();
    assert_eq!(runs, expected, "each job ran once");
    for job in [&first, &second] {
        assert_eq!(completed(&env, job).map(|done| (done.status, done.restarts)), Some(("success".to_string(), 0)));
    }
    let journal = std::fs::read_to_string(env.dir.path().join("w1.log")).unwrap();
    assert!(journal.contains(&format!("job {third}: the worker's claim of the job went unanswered")), "{journal}");
}

/// A slot's backend that stops answering while its job runs (the server and the other connections
/// well): the heartbeat gives its call up after two periods and beats on a new connection, so the
/// job runs to its end and is recorded once (before, the heart waited for the stopped backend, and
/// the slot stopped the job for want of a heartbeat a period before its window, recording nothing).
#[test]
fn a_heartbeat_on_a_backend_that_stops_answering_goes_on_on_a_new_connection() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "6");
    synced(&env);
    let log = path(&env, "runs.log");
    let job = enqueue(&env, "t/sleep", json!({"ms": 12000, "log": log}));
    let mut w = worker(&env, "w1", &["--once", "--heartbeat", "1s", "--no-reap"]);
    wait_for(Duration::from_secs(30), "the job to run", || executions(&log).first().cloned());
    let frozen = Frozen::backends(&env, "wf work w1 slot%");
    let done = wait_for(Duration::from_secs(40), "the job to end, while its slot's first backend is stopped", || {
        completed(&env, &job)
    });
    drop(frozen);
    assert_eq!((done.status.as_str(), done.restarts), ("success", 0), "{done:?}");
    assert!(crate::support::checks::wait_exit(&mut w, Duration::from_secs(30), "the worker").success());
    let journal = std::fs::read_to_string(env.dir.path().join("w1.log")).unwrap();
    assert!(journal.contains("did not answer within 2s"), "{journal}");
    assert!(!journal.contains("no heartbeat of job"), "{journal}");
    assert_eq!(executions(&log).len(), 1);
}

/// A session outside the worker that holds running jobs' rows locked longer than the zombie window
/// (an operator's `SELECT ... FOR UPDATE` left open in psql) neither stops them nor gets them
/// reaped: no reaper can lock the rows meanwhile, the heartbeat and the completion wait for them
/// and have them first when the holder lets go. One job runs on past the release, one ends while
/// its row is still held. Each runs once and ends a success. (Before, the worker stopped both for
/// want of a heartbeat after the window, and the reaper ran them again.)
#[test]
fn rows_held_by_another_session_longer_than_the_window_neither_stop_their_jobs_nor_get_them_reaped() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "4");
    synced(&env);
    let runs = path(&env, "runs.log");
    let mut worker = crate::support::checks::spawn_capturing(
        &env,
        "w1",
        &["work", "--name", "w1", "--concurrency", "2", "--heartbeat", "1s", "--max-jobs", "2", "--json"],
    );
    let longer = enqueue(&env, "t/sleep", json!({"ms": 12_000, "log": runs}));
    let shorter = enqueue(&env, "t/sleep", json!({"ms": 3000, "log": runs}));
    wait_for(Duration::from_secs(30), "both jobs to start", || (executions(&runs).len() == 2).then_some(()));
    let mut holder = env.db();
    let mut held = holder.transaction().unwrap();
    let ids: Vec<uuid::Uuid> = [&longer, &shorter].iter().map(|id| id.parse().unwrap()).collect();
    let locked = held.query("SELECT job_id FROM job_queue WHERE job_id = ANY($1) FOR UPDATE", &[&ids]).unwrap();
    assert_eq!(locked.len(), 2);
    let holder: i32 = held.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    // Twice the window, a reaper pass after another meanwhile and right after the release.
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        assert_eq!(crate::support::checks::reap(&env, &[]), (0, 0, 0), "a held row is not reaped");
    }
    held.commit().unwrap();
    for _ in 0..20 {
        assert_eq!(crate::support::checks::reap(&env, &[]), (0, 0, 0), "a job whose heartbeat had its row first");
    }
    let status = crate::support::checks::wait_exit(&mut worker, Duration::from_secs(60), "the worker");
    let journal = std::fs::read_to_string(env.dir.path().join("w1.log")).unwrap();
    assert!(status.success(), "{journal}");
    let summary = crate::support::checks::captured_json(&env, "w1");
    assert_eq!((&summary["succeeded"], &summary["fenced"]), (&json!(2), &json!(0)), "{summary} {journal}");
    for id in [&longer, &shorter] {
        let done = completed(&env, id).unwrap();
        assert_eq!((done.status.as_str(), done.restarts), ("success", 0), "{journal}");
        assert_eq!(executions(&runs).iter().filter(|(job, _)| job == id).count(), 1, "{id} ran once: {journal}");
    }
    // Each says so once, naming the session that holds the row.
    let named = format!("waits for a lock another session, pid {holder} (");
    for said in [format!("the heartbeat of job {longer} {named}"), format!("completing job {shorter} {named}")] {
        assert_eq!(journal.matches(&said).count(), 1, "{said:?} once: {journal}");
    }
    assert!(journal.contains(&format!("the heartbeat of job {longer} has its row again")), "{journal}");
}

/// A completion the database refuses for longer than the window while the job's heartbeats land
/// (here a trigger on the completion table fails it as a serialization failure for 10 s; the window
/// is 3 s): the slot keeps the job ours by beating for it between its tries, and records it once
/// when the database takes it. Before, the slot gave it up after one window, the worker's reaper
/// took it back, and the job ran again.
#[test]
fn a_completion_refused_longer_than_the_window_while_heartbeats_land_is_recorded_once() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "3");
    synced(&env);
    refuse_completions(&env, "40001");
    let log = path(&env, "runs.log");
    let job = enqueue(&env, "t/sleep", json!({"ms": 100, "log": log}));
    let mut w = worker(&env, "w1", &["--heartbeat", "1s"]);
    wait_for(Duration::from_secs(30), "the job to run", || executions(&log).first().cloned());
    env.db().execute("UPDATE refuse_until SET t = clock_timestamp() + interval '10 s'", &[]).unwrap();
    let done =
        wait_for(Duration::from_secs(60), "the completion, once the database takes it", || completed(&env, &job));
    let journal = std::fs::read_to_string(env.dir.path().join("w1.log")).unwrap();
    assert_eq!((done.status.as_str(), done.restarts), ("success", 0), "{done:?} {journal}");
    assert_eq!(executions(&log).len(), 1, "the job ran once");
    crate::support::fixtures::signal(&w, libc::SIGTERM);
    assert!(crate::support::checks::wait_exit(&mut w, Duration::from_secs(30), "the worker").success());
}

/// Completions refused with `sqlstate` (a trigger on the completion table) until the test sets
/// `refuse_until`.
fn refuse_completions(env: &TestEnv, sqlstate: &str) {
    env.db()
        .batch_execute(&format!(
            "CREATE TABLE refuse_until (t timestamptz NOT NULL);
             INSERT INTO refuse_until VALUES ('infinity');
             CREATE FUNCTION refuse_completions() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
               IF clock_timestamp() < (SELECT t FROM refuse_until) THEN
                 RAISE EXCEPTION 'refused for the test' USING ERRCODE = '{sqlstate}';
               END IF;
               RETURN NEW;
             END $$;
             CREATE TRIGGER refuse_completions BEFORE INSERT ON job_completed
                FOR EACH ROW EXECUTE FUNCTION refuse_completions();"
        ))
        .unwrap();
}

/// A completion refused with an error no retry can change (a trigger's own, P0001) is not held
/// past the window by beats: the slot gives it up after one window, for the reaper, as before the
/// hold; held, it kept its slot from every other job for ten windows.
#[test]
fn a_completion_refused_for_good_is_given_up_after_one_window() {
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "3");
    synced(&env);
    refuse_completions(&env, "P0001");
    enqueue(&env, "t/sleep", json!({"ms": 100}));
    let _w = worker(&env, "w1", &["--heartbeat", "1s", "--no-reap"]);
    let journal = || std::fs::read_to_string(env.dir.path().join("w1.log")).unwrap();
    // Ten windows are 30 s.
    wait_for(Duration::from_secs(20), "the slot to give the completion up", || {
        journal().contains("giving up completing job").then_some(())
    });
}
