//! What the tests look at once the dust settles: the completion record of every job, an empty
//! queue, executions counted from the actions' own log, the processes that still run a job, and
//! the `--json` documents, pinned.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::fixtures::executions;
use crate::support::harness::{Process, Run, TestEnv, wait_for};

/// A job's row in job_completed.
#[derive(Debug, Clone)]
pub(crate) struct Completed {
    pub status: String,
    pub result: Option<Value>,
    pub worker: Option<String>,
    pub restarts: i32,
    pub canceled_by: Option<String>,
    pub canceled_reason: Option<String>,
}

/// The completion record of one job, if it has one.
pub(crate) fn completed(env: &TestEnv, job: &str) -> Option<Completed> {
    let id: uuid::Uuid = job.parse().unwrap();
    env.db()
        .query_opt(
            "SELECT status, result, worker, restarts, canceled_by, canceled_reason
               FROM job_completed WHERE job_id = $1",
            &[&id],
        )
        .unwrap()
        .map(|row| Completed {
            status: row.get(0),
            result: row.get(1),
            worker: row.get(2),
            restarts: row.get(3),
            canceled_by: row.get(4),
            canceled_reason: row.get(5),
        })
}

/// Wait until the job has its completion record.
pub(crate) fn wait_completed(env: &TestEnv, job: &str, timeout: Duration) -> Completed {
    wait_for(timeout, &format!("job {job} to complete"), || completed(env, job))
}

/// Nothing waits or runs any more: job_queue is empty.
pub(crate) fn assert_queue_empty(env: &TestEnv) {
    let queued: i64 = env.scalar("SELECT count(*) FROM job_queue");
    assert_eq!(queued, 0, "job_queue must be empty at the end");
}

/// Every job ran to success exactly once as far as the records go, and no more often than its
/// restarts allow: one job_completed row per job (and no other), status success, result.input
/// equal to the job's input; per job, each attempt recorded at most once in the action's log,
/// the completing attempt (restarts + 1) among them, and executions <= 1 + restarts.
/// Returns the total number of restarts.
pub(crate) fn assert_each_succeeded_once(env: &TestEnv, ids: &[String], log: &Path, context: &str) -> i64 {
    let mut db = env.db();
    let jobs: i64 = db.query_one("SELECT count(*) FROM job", &[]).unwrap().get(0);
    assert_eq!(jobs, ids.len() as i64, "{context}: the test enqueued {} jobs", ids.len());
    let rows = db
        .query(
            "SELECT j.id::text, c.status, c.result->'input' = j.input, c.restarts
               FROM job j LEFT JOIN job_completed c ON c.job_id = j.id",
            &[],
        )
        .unwrap();
    let completions: i64 = db.query_one("SELECT count(*) FROM job_completed", &[]).unwrap().get(0);
    assert_eq!(completions, ids.len() as i64, "{context}: one completion record per job");
    let mut runs: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (job, attempt) in executions(log) {
        runs.entry(job).or_default().push(attempt);
    }
    let mut restarts_total = 0;
    for row in rows {
        let job: String = row.get(0);
        let status: Option<String> = row.get(1);
        assert_eq!(status.as_deref(), Some("success"), "{context}: job {job} must complete as success");
        assert_eq!(row.get::<_, Option<bool>>(2), Some(true), "{context}: job {job}: result.input must be its input");
        let restarts: i32 = row.get(3);
        restarts_total += i64::from(restarts);
        let attempts = runs.remove(&job).unwrap_or_default();
        let distinct: BTreeSet<i32> = attempts.iter().copied().collect();
        assert_eq!(distinct.len(), attempts.len(), "{context}: job {job}: an attempt ran twice: {attempts:?}");
        assert!(
            distinct.contains(&(restarts + 1)),
            "{context}: job {job}: the completing attempt {} never ran: {attempts:?}",
            restarts + 1
        );
        assert!(
            attempts.len() as i32 <= 1 + restarts,
            "{context}: job {job} ran {} times with {restarts} restarts: {attempts:?}",
            attempts.len()
        );
    }
    assert!(runs.is_empty(), "{context}: executions of unknown jobs: {runs:?}");
    assert_queue_empty(env);
    restarts_total
}

/// Processes whose environment names one of these jobs (WF_JOB_ID), with the job and attempt:
/// the supervisor, bun, and anything the action started.
pub(crate) fn job_processes(jobs: &HashSet<String>) -> Vec<(i32, String, i32)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return found };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<i32>().ok()) else { continue };
        // A zombie has no environment left: only live processes are found.
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        let mut job = None;
        let mut attempt = 0;
        for var in environ.split(|&byte| byte == 0) {
            let var = String::from_utf8_lossy(var);
            if let Some(id) = var.strip_prefix("WF_JOB_ID=") {
                job = Some(id.to_string());
            } else if let Some(n) = var.strip_prefix("WF_ATTEMPT=") {
                attempt = n.parse().unwrap_or(0);
            }
        }
        if let Some(job) = job.filter(|job| jobs.contains(job)) {
            found.push((pid, job, attempt));
        }
    }
    found
}

/// Wait until no process runs any of these jobs any more.
pub(crate) fn assert_no_job_processes(ids: &[String], what: &str) {
    let jobs: HashSet<String> = ids.iter().cloned().collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = job_processes(&jobs);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: processes of jobs still alive: {left:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// SIGKILL a child and reap it.
pub(crate) fn kill(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Wait for a child to exit by itself; panics after `timeout`.
pub(crate) fn wait_exit(child: &mut Child, timeout: Duration, what: &str) -> std::process::ExitStatus {
    wait_for(timeout, &format!("{what} to exit"), || child.try_wait().unwrap())
}

/// SIGTERM a worker and expect a clean exit.
pub(crate) fn stop_worker(child: &mut Child, what: &str) {
    crate::support::fixtures::signal(child, libc::SIGTERM);
    let status = wait_exit(child, Duration::from_secs(30), what);
    assert!(status.success(), "{what} exited with {status}");
}

/// Start `wf ARGS` in the background with its stdout (a JSON summary) and stderr in files
/// `<name>.out` and `<name>.log`.
pub(crate) fn spawn_capturing(env: &TestEnv, name: &str, args: &[&str]) -> Process {
    let out = std::fs::File::create(env.dir.path().join(format!("{name}.out"))).unwrap();
    let err = std::fs::File::create(env.dir.path().join(format!("{name}.log"))).unwrap();
    env.wf(args).spawn_into(out.into(), err.into())
}

/// What `spawn_capturing` wrote to stdout, as JSON.
pub(crate) fn captured_json(env: &TestEnv, name: &str) -> Value {
    let text = std::fs::read_to_string(env.dir.path().join(format!("{name}.out"))).unwrap();
    let log = std::fs::read_to_string(env.dir.path().join(format!("{name}.log"))).unwrap_or_default();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name} printed no JSON ({e}): {text:?}; stderr: {log}"))
}

/// Run `wf reap --json` with these extra arguments; returns (requeued, failed, canceled).
pub(crate) fn reap(env: &TestEnv, args: &[&str]) -> (u64, u64, u64) {
    let mut all = vec!["reap", "--json"];
    all.extend_from_slice(args);
    counts(&env.wf(all).ok().json())
}

/// (requeued, failed, canceled) of a `wf reap --json` document.
pub(crate) fn counts(reaped: &Value) -> (u64, u64, u64) {
    let n = |key: &str| reaped[key].as_u64().unwrap_or_else(|| panic!("no {key} in {reaped}"));
    (n("requeued"), n("failed"), n("canceled"))
}

/// Seconds since the job's last ping, by the database's clock.
pub(crate) fn ping_age(env: &TestEnv, job: &str) -> Option<f64> {
    let id: uuid::Uuid = job.parse().unwrap();
    env.db()
        .query_opt(
            "SELECT extract(epoch FROM now() - ping)::float8 FROM job_queue WHERE job_id = $1 AND ping IS NOT NULL",
            &[&id],
        )
        .unwrap()
        .map(|row| row.get(0))
}

/// Wait until the database server has been up longer than `window` seconds: before that, the
/// reaper counts every older ping from the server's start (a restart does not make zombies), so
/// zombies made by hand with old pings are not zombies yet.
pub(crate) fn wait_server_up_longer_than(env: &TestEnv, window: f64) {
    wait_for(Duration::from_secs(30), "the database server to be up longer than the reaper window", || {
        let up: f64 = env.scalar("SELECT extract(epoch FROM now() - pg_postmaster_start_time())::float8");
        (up > window).then_some(())
    });
}

/// A job id as given on the command line, as a UUID for SQL parameters.
pub(crate) fn uuid(job: &str) -> uuid::Uuid {
    job.parse().unwrap()
}

/// Make these queue rows zombies: running for a worker that stopped pinging an hour ago.
pub(crate) fn make_zombies(db: &mut postgres::Client, ids: &[uuid::Uuid]) {
    db.execute(
        "UPDATE job_queue SET running = true, worker = 'ghost#' || job_id, started_at = now() - interval '1 hour',
                              ping = now() - interval '1 hour'
          WHERE job_id = ANY($1)",
        &[&ids],
    )
    .unwrap();
}

/// Check that `run` printed exactly one pretty JSON document with its keys in order, and that it
/// reads as `expected` (JSON, in any layout) once the values that differ between runs are shown by
/// kind: `<uuid>`, `<time>` (RFC 3339 to the millisecond, UTC), `<sha>`, `<dir>` (for paths under
/// `dir`), and `<number>` or `<text>` for the fields named in `varying`.
pub(crate) fn pin(run: &Run, dir: &std::path::Path, varying: &[&str], expected: &str) {
    let document: Value = run.json();
    let printed = format!("{}\n", serde_json::to_string_pretty(&document).unwrap());
    assert_eq!(run.stdout, printed, "not one pretty JSON document with its keys in order");
    let shown = serde_json::to_string_pretty(&by_kind(document, &dir.display().to_string(), varying, None)).unwrap();
    let expected: Value = serde_json::from_str(expected).expect("the expected document is JSON");
    assert_eq!(shown, serde_json::to_string_pretty(&expected).unwrap(), "the document changed; it was:\n{shown}");
}

fn by_kind(value: Value, dir: &str, varying: &[&str], key: Option<&str>) -> Value {
    if key.is_some_and(|key| varying.contains(&key)) {
        return match value {
            Value::Number(_) => json!("<number>"),
            Value::String(_) => json!("<text>"),
            other => panic!("{key:?} varies but is {other}"),
        };
    }
    match value {
        Value::String(text) => Value::String(kind_of(&text, dir)),
        Value::Array(items) => Value::Array(items.into_iter().map(|item| by_kind(item, dir, varying, None)).collect()),
        Value::Object(fields) => Value::Object(
            fields.into_iter().map(|(key, value)| (key.clone(), by_kind(value, dir, varying, Some(&key)))).collect(),
        ),
        other => other,
    }
}

pub(crate) fn kind_of(text: &str, dir: &str) -> String {
    let hex = |s: &str| s.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase());
    if uuid::Uuid::parse_str(text).is_ok_and(|id| id.hyphenated().to_string() == text) {
        "<uuid>".to_string()
    } else if text.len() == 40 && hex(text) {
        "<sha>".to_string()
    } else if chrono::DateTime::parse_from_rfc3339(text).is_ok() && text.len() == 24 && text.ends_with('Z') {
        "<time>".to_string()
    } else if let Some(rest) = text.strip_prefix(dir) {
        format!("<dir>{rest}")
    } else {
        text.to_string()
    }
}
