//! `wf bench`: measures the spine in a tag of its own and leaves nothing behind, also when it
//! fails or is interrupted. Speeds are not asserted, only that each measurement happened.

use std::time::Duration;

use serde_json::Value;

use crate::support::fixtures::{path, signal};
use crate::support::harness::{Process, TestEnv, wait_for};

/// The bench's jobs, catalog rows, workers and store tree are gone (the test database starts empty).
fn assert_nothing_left(env: &TestEnv) {
    for table in ["job", "job_queue", "job_completed", "job_logs", "git_source", "app", "action", "worker"] {
        let rows: i64 = env.scalar(&format!("SELECT count(*) FROM {table}"));
        assert_eq!(rows, 0, "wf bench left {rows} rows in {table}");
    }
    // The store's own lock file and contents folder may stay; nothing in the folder may.
    let listing = |dir: std::path::PathBuf| -> Vec<_> {
        match std::fs::read_dir(dir) {
            Ok(entries) => entries.map(|entry| entry.unwrap().path()).collect(),
            Err(_) => Vec::new(),
        }
    };
    let left: Vec<_> = listing(env.store())
        .into_iter()
        .filter(|path| !path.ends_with(".lock") && !path.ends_with(".blobs"))
        .chain(listing(env.store().join(".blobs")))
        .collect();
    assert!(left.is_empty(), "wf bench left {left:?} in the store");
}

/// Wait until the server has no connection left of the bench of `tag`: a bench that died may leave
/// a statement running a moment, and the next bench keeps what a connection is still named after.
fn disconnected(env: &TestEnv, tag: &str) {
    wait_for(Duration::from_secs(30), "the dead bench's connections to end", || {
        let left: i64 =
            env.scalar_of("SELECT count(*) FROM pg_stat_activity WHERE strpos(application_name, $1) > 0", &[&tag]);
        (left == 0).then_some(())
    });
}

/// A bench of a million jobs, its output in `log`, once it has enqueued some (the test database
/// holds no other job).
fn enqueuing_bench(env: &TestEnv, log: &std::path::Path) -> Process {
    let bench = env.wf(["bench", "--jobs", "1000000"]).spawn(log);
    wait_for(Duration::from_secs(60), "the bench to enqueue", || {
        (env.scalar::<i64>("SELECT count(*) FROM job") > 0).then_some(())
    });
    bench
}

/// Whether a bench's output says it removed what the bench of `tag` left.
fn says_removed(said: &str, tag: &str) -> bool {
    said.contains(&format!("the bench {tag}, which did not finish"))
}

fn rate(report: &Value, key: &str) -> f64 {
    let rate = report[key].as_f64().unwrap_or_else(|| panic!("{key} is not a number: {report}"));
    assert!(rate > 0.0, "{key} is {rate}: {report}");
    rate
}

fn assert_measured(report: &Value, jobs: u64, workers: u64) {
    assert!(report["tag"].as_str().unwrap().starts_with("wf-bench-"), "{report}");
    assert_eq!(report["jobs"], jobs, "{report}");
    assert_eq!(report["workers"], workers, "{report}");
    rate(report, "enqueue_single_per_s");
    rate(report, "enqueue_batch_per_s");
    rate(report, "claim_complete_per_s");
    let latency = &report["pickup_latency_ms"];
    let (p50, p99) = (latency["p50"].as_f64().unwrap(), latency["p99"].as_f64().unwrap());
    assert!(0.0 <= p50 && p50 <= p99, "pickup latency p50 {p50} ms, p99 {p99} ms: {report}");
    assert_eq!(latency["samples"], jobs.min(200), "{report}");
    // Linux counts the processor time a hypervisor gives to others (0 on a machine of its own).
    let steal = report["steal_share"].as_f64().unwrap_or_else(|| panic!("steal_share is not a number: {report}"));
    assert!((0.0..=1.0).contains(&steal), "steal_share {steal}: {report}");
}

/// The fields of `wf bench --json` that differ from run to run, with or without `--bun`.
pub(crate) const MEASURED: [&str; 9] = [
    "enqueue_single_per_s",
    "enqueue_batch_per_s",
    "claim_complete_per_s",
    "claim_complete_db_cpu_ms_per_job",
    "p50",
    "p99",
    "tag",
    "cpus",
    "steal_share",
];

#[test]
fn bench_measures_in_its_own_tag_and_leaves_nothing_behind() {
    let env = TestEnv::new();
    let report = env.wf(["bench", "--jobs", "200", "--workers", "2", "--json"]).ok().json();
    assert_measured(&report, 200, 2);
    // The test's PostgreSQL runs on this host: its processes' time is read, and 200 jobs took some.
    rate(&report, "claim_complete_db_cpu_ms_per_job");
    assert_eq!(report["bun_end_to_end_per_s"], Value::Null, "{report}");
    assert_eq!(report["bun_jobs"], Value::Null, "{report}");
    assert_nothing_left(&env);
}

#[test]
fn bench_with_bun_runs_a_real_worker_and_removes_its_action_from_the_store() {
    let env = TestEnv::new();
    let run = env.wf(["bench", "--bun", "--jobs", "20", "--workers", "2", "--json"]).ok();
    let bun = [
        "bun_end_to_end_per_s",
        "bun_no_sandbox_per_s",
        "bun_warm_per_s",
        "warm_vs_bare",
        "sandbox_ms_per_attempt",
        "bare_bun_per_s",
        "bun_vs_bare",
        "bun_cpu_ms_per_job",
        "bun_no_sandbox_cpu_ms_per_job",
        "bun_warm_cpu_ms_per_job",
        "bare_bun_cpu_ms_per_job",
        "bun_db_cpu_ms_per_job",
        "bun_no_sandbox_db_cpu_ms_per_job",
        "bun_warm_db_cpu_ms_per_job",
    ];
    let expected = r#"{
        "bare_bun_cpu_ms_per_job": "<number>", "bare_bun_per_s": "<number>", "batch": 1,
        "bun_cpu_ms_per_job": "<number>", "bun_db_cpu_ms_per_job": "<number>", "bun_end_to_end_per_s": "<number>",
        "bun_jobs": 20, "bun_no_sandbox_cpu_ms_per_job": "<number>", "bun_no_sandbox_db_cpu_ms_per_job": "<number>",
        "bun_no_sandbox_per_s": "<number>", "bun_vs_bare": "<number>",
        "bun_warm_cpu_ms_per_job": "<number>", "bun_warm_db_cpu_ms_per_job": "<number>", "bun_warm_jobs": 20,
        "bun_warm_per_s": "<number>", "claim_complete_db_cpu_ms_per_job": "<number>", "floor_db_cpu_ms_per_job": null,
        "warm_vs_bare": "<number>", "cpus": "<number>",
        "claim_complete_per_s": "<number>", "enqueue_batch_per_s": "<number>", "enqueue_single_per_s": "<number>",
        "floor_per_s": null, "jobs": 20, "pickup_latency_ms": {"p50": "<number>", "p99": "<number>", "samples": 20},
        "sandbox_ms_per_attempt": "<number>", "spine_vs_floor": null, "steal_share": "<number>", "tag": "<text>",
        "workers": 2}"#;
    crate::support::checks::pin(&run, env.dir.path(), &[&MEASURED[..], &bun[..]].concat(), expected);
    let report = run.json();
    assert_measured(&report, 20, 2);
    rate(&report, "bun_end_to_end_per_s");
    rate(&report, "bun_no_sandbox_per_s");
    rate(&report, "bare_bun_per_s");
    rate(&report, "bun_vs_bare");
    let warm = rate(&report, "bun_warm_per_s");
    assert!((rate(&report, "warm_vs_bare") - warm / rate(&report, "bare_bun_per_s")).abs() < 1e-9, "{report}");
    assert!(report["sandbox_ms_per_attempt"].as_f64().is_some_and(|ms| ms >= 0.0), "{report}");
    // Every measurement started bun: each took processor time, the bench's own and its children's
    // (a warm runner's is counted once it ended with its worker).
    for cpu in
        ["bun_cpu_ms_per_job", "bun_no_sandbox_cpu_ms_per_job", "bun_warm_cpu_ms_per_job", "bare_bun_cpu_ms_per_job"]
    {
        rate(&report, cpu);
    }
    assert!(report["cpus"].as_u64().is_some_and(|cpus| cpus >= 1), "{report}");
    // The server's time is read in clock ticks: 20 jobs may take less than one.
    for db in ["bun_db_cpu_ms_per_job", "bun_no_sandbox_db_cpu_ms_per_job", "bun_warm_db_cpu_ms_per_job"] {
        assert!(report[db].as_f64().is_some_and(|ms| ms >= 0.0), "{db}: {report}");
    }
    assert_eq!(report["bun_jobs"], 20, "{report}");
    assert_nothing_left(&env);
}

/// The floor runs the seed's statements on a scratch schema of its own, over the same connections,
/// and drops the schema.
/// With `--bun` the bare loop and the three end-to-end runs take turns, round after round (a change
/// in the host's speed weighs on all alike): the terminal shows each round's measurements in turn.
#[test]
fn bench_with_bun_alternates_its_measurements_in_rounds() {
    let env = TestEnv::new();
    let (code, screen) = env.wf(["bench", "--bun", "--jobs", "8", "--workers", "2"]).in_terminal().finish();
    assert_eq!(code, 0, "{screen:?}");
    let screen = crate::support::terminal::plain(&screen);
    let mut from = 0;
    for round in 1..=4 {
        for measurement in ["bare bun loop", "bun end to end", "bun end to end, no sandbox", "bun end to end, warm"] {
            let shown = format!("{measurement}, round {round} of 4");
            let at = screen[from..].find(&shown).unwrap_or_else(|| panic!("{shown:?} after {from}: {screen}"));
            from += at + shown.len();
        }
    }
    assert_nothing_left(&env);
}

#[test]
fn bench_floor_measures_the_seeds_statements_and_leaves_nothing_behind() {
    let env = TestEnv::new();
    let report = env.wf(["bench", "--floor", "--jobs", "200", "--workers", "2", "--json"]).ok().json();
    assert_measured(&report, 200, 2);
    let floor = rate(&report, "floor_per_s");
    let ratio = rate(&report, "spine_vs_floor");
    rate(&report, "floor_db_cpu_ms_per_job");
    assert!((ratio - rate(&report, "claim_complete_per_s") / floor).abs() < 1e-9, "{report}");
    let schemas: i64 = env.scalar("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'wf_bench_floor_%'");
    assert_eq!(schemas, 0, "the floor's schema is dropped");
    assert_nothing_left(&env);
}

#[test]
fn bench_table_has_a_row_per_measurement() {
    let env = TestEnv::new();
    let run = env.wf(["bench", "--jobs", "20", "--workers", "2"]).ok();
    for row in ["enqueue, a transaction each", "enqueue, one batch transaction", "claim + complete", "pickup latency"] {
        assert!(run.stdout.contains(row), "no {row:?} row: {run:?}");
    }
    assert!(!run.stdout.contains("bun"), "{run:?}");
    assert_nothing_left(&env);
}

#[test]
fn bench_that_fails_midway_still_cleans_up() {
    let env = TestEnv::new();
    // Everything is set up and enqueued before the worker finds that bun cannot be run.
    let run = env.wf(["bench", "--bun", "--jobs", "20", "--json"]).env("WF_BUN", path(&env, "no-such-bun")).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("no-such-bun"), "the error names the missing bun: {run:?}");
    assert_eq!(run.stdout, "", "{run:?}");
    assert_nothing_left(&env);
}

#[test]
fn interrupted_bench_cleans_up() {
    let env = TestEnv::new();
    let log = path(&env, "bench.log");
    let mut bench = enqueuing_bench(&env, &log);
    signal(&bench, libc::SIGINT);
    let status = bench.wait().unwrap();
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert_nothing_left(&env);
}

/// A second Ctrl-C ends the bench at once (130), without cleaning up: it used to say nothing of
/// what it left; it says so, and the next bench removes it.
#[test]
fn a_second_signal_says_what_the_bench_leaves() {
    let env = TestEnv::new();
    let log = path(&env, "bench.log");
    let mut bench = enqueuing_bench(&env, &log);
    // The second signal comes while the first one's cleanup waits for a lock the test holds (two
    // signals sent back to back may reach the process as one).
    let mut holder_connection = env.db();
    let mut holder = holder_connection.transaction().unwrap();
    holder.batch_execute("LOCK TABLE worker IN SHARE MODE").unwrap();
    signal(&bench, libc::SIGINT);
    wait_for(Duration::from_secs(60), "the cleanup to wait for the lock", || {
        let waiting: i64 = env.scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'wf-bench-% cleanup'
                AND wait_event_type = 'Lock'",
        );
        (waiting > 0).then_some(())
    });
    signal(&bench, libc::SIGINT);
    let status = bench.wait().unwrap();
    holder.rollback().unwrap();
    let said = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(130), "{said}");
    assert!(said.contains("a second signal: stopped at once, leaving its jobs and catalog rows"), "{said}");
    let tag: String = env.scalar("SELECT name FROM git_source");
    disconnected(&env, &tag);
    let next = env.wf(["bench", "--jobs", "3", "--workers", "1"]).ok();
    assert!(says_removed(&next.stderr, &tag), "{}", next.stderr);
    assert_nothing_left(&env);
}

/// What a bench killed (SIGKILL, or a second Ctrl-C) left behind: its source, jobs, floor schema,
/// workers' rows and store folder stayed for good, and real workers' reapers kept its jobs queued in
/// a tag no one serves. The next bench removes them and says so; a bench still running keeps its
/// own, and a source of the user's named like a bench's is not touched.
#[test]
fn a_bench_removes_what_a_killed_bench_left_behind_and_leaves_a_running_one_alone() {
    let env = TestEnv::new();
    env.wf(["source", "add", "wf-bench-0123abcd", "https://example.com/not-a-bench.git"]).ok();
    let benches = |condition: &str| -> Vec<String> {
        let query = format!("SELECT name FROM git_source WHERE url LIKE 'wf-bench:%' AND {condition} ORDER BY name");
        env.db().query(&query, &[]).unwrap().iter().map(|row| row.get(0)).collect()
    };
    let floors = || env.scalar::<i64>("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'wf_bench_floor_%'");
    let folders = || {
        let entries = std::fs::read_dir(env.store()).map(|entries| entries.map(|entry| entry.unwrap().file_name()));
        entries.map_or(0, |entries| entries.filter(|name| !name.to_string_lossy().starts_with('.')).count())
    };
    // A bench that runs all along.
    let log = path(&env, "running.log");
    let mut running = env.wf(["bench", "--jobs", "1000000"]).spawn(&log);
    let running_tag = wait_for(Duration::from_secs(60), "the running bench", || benches("true").pop());
    let others = format!("name <> '{running_tag}'");

    // Killed in its floor phase; then one killed running a worker for its bun phase, which removed
    // what the first left.
    let floor = "EXISTS (SELECT FROM pg_namespace WHERE nspname = 'wf_bench_floor_' || substr(name, 10))";
    let bun = "EXISTS (SELECT FROM worker w WHERE w.name = git_source.name)";
    let mut killed: Vec<String> = Vec::new();
    for (args, phase) in [(&["--floor", "--jobs", "20000"][..], floor), (&["--bun", "--jobs", "200"], bun)] {
        let mut all = vec!["bench", "--workers", "1"];
        all.extend_from_slice(args);
        let said = path(&env, &format!("killed-{}.log", killed.len()));
        let mut bench = env.wf(all).spawn(&said);
        let tag = wait_for(Duration::from_secs(120), "the bench to reach its phase", || benches(phase).pop());
        signal(&bench, libc::SIGKILL);
        bench.wait().unwrap();
        disconnected(&env, &tag);
        if let Some(earlier) = killed.last() {
            let said = std::fs::read_to_string(&said).unwrap();
            assert!(says_removed(&said, earlier), "{said}");
        }
        assert_eq!(benches(&others), std::slice::from_ref(&tag));
        killed.push(tag);
    }
    assert_eq!(floors(), 0, "the first bench's floor schema was removed by the second");
    let left = format!("SELECT count(*) FROM job WHERE tag = '{}'", killed[1]);
    assert!(env.scalar::<i64>(&left) > 0, "the killed bench left jobs");
    assert_eq!(env.scalar::<i64>("SELECT count(*) FROM worker"), 1, "the killed bench left its worker's row");
    assert_eq!(folders(), 1, "the killed bench's store folder");

    // Its guard connection lost (as in a restart of the server): its lock is free, its other
    // connections still say it runs.
    let guard = format!("{running_tag} guard");
    let ended: bool = env.scalar_of(
        "SELECT bool_and(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
        &[&guard],
    );
    assert!(ended, "the running bench's guard connection");
    // A bench without `--bun` removes the killed one's store folder too.
    let sweep = env.wf(["bench", "--jobs", "3", "--workers", "1", "--json"]).ok();
    assert!(says_removed(&sweep.stderr, &killed[1]), "{}", sweep.stderr);
    assert!(!sweep.stderr.contains(&running_tag), "{}", sweep.stderr);
    assert_eq!(benches("true"), [running_tag], "only the running bench's source is left");
    assert_eq!((env.scalar::<i64>(&left), folders()), (0, 0));
    assert_eq!(env.scalar::<i64>("SELECT count(*) FROM git_source WHERE name = 'wf-bench-0123abcd'"), 1);
    signal(&running, libc::SIGINT);
    assert_eq!(running.wait().unwrap().code(), Some(1), "{}", std::fs::read_to_string(&log).unwrap());
    env.wf(["source", "rm", "wf-bench-0123abcd", "--yes"]).ok();
    assert_nothing_left(&env);
}

/// A bench whose database goes away mid-run cannot clean up: it said only the measurement's error,
/// and what it left stayed unsaid. It now says what it left; the next bench removes it.
#[test]
fn a_bench_cut_off_from_its_database_says_what_it_left_and_the_next_removes_it() {
    let env = TestEnv::new();
    let log = path(&env, "bench.log");
    let mut bench = enqueuing_bench(&env, &log);
    let tag: String = env.scalar("SELECT name FROM git_source");
    let mut admin = postgres::Client::connect(&TestEnv::cluster_url("postgres"), postgres::NoTls).unwrap();
    admin.batch_execute(&format!("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false", env.dbname)).unwrap();
    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", &[&env.dbname]).unwrap();
    let status = bench.wait().unwrap();
    admin.batch_execute(&format!("ALTER DATABASE {} WITH ALLOW_CONNECTIONS true", env.dbname)).unwrap();
    let said = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(1), "{said}");
    assert!(said.lines().last().unwrap().starts_with("error: "), "the measurement's error last: {said}");
    let warning = "warning: wf bench could not clean up after itself";
    assert!(said.contains(warning) && said.contains(&format!("jobs tagged {tag}")), "{said}");
    assert!(said.contains("the next `wf bench` on this database removes them"), "{said}");
    assert!(env.scalar::<i64>("SELECT count(*) FROM job") > 0, "left behind");

    let next = env.wf(["bench", "--jobs", "3", "--workers", "1"]).ok();
    assert!(says_removed(&next.stderr, &tag), "{}", next.stderr);
    assert_nothing_left(&env);
}
