//! Warm actions (`"warm": true`): one bun per action, commit and slot runs the action's jobs one
//! after another; whatever ends a job abnormally ends the runner, and the next job gets a new one.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::fixtures::{alive, enqueue, path, signal, worker};
use crate::support::harness::{GitRepo, TestEnv, wait_for};

/// `w/step` does what its input's `mode` says and returns what it knows: which runner it is (an id
/// drawn when the module loads), how many jobs that runner ran, its job's WF_ variables, HOME and
/// PATH, its folder, and whether the working directory was empty when the job began; with `chdir`
/// it leaves a folder changed. Returns the synced commit, of this test alone (its message names the
/// repository's own folder): runners are found from outside by their action and commit.
fn synced_warm(env: &TestEnv) -> String {
    let repo = GitRepo::new();
    repo.manifest(&json!({
        "apps": {
            "w": {
                "actions": {
                    "first": {"entrypoint": "w/step.ts", "warm": true},
                    "step": {"entrypoint": "w/step.ts", "warm": true, "timeout": 3},
                    "linger": {"entrypoint": "w/step.ts", "warm": true, "timeout": 3},
                    "step_long": {"entrypoint": "w/step.ts", "warm": true, "timeout": 600},
                    "hog": {"entrypoint": "w/step.ts", "warm": true, "memory_mb": 100},
                    "cold": {"entrypoint": "w/step.ts"},
                    "linker": {"entrypoint": "w/link.ts", "warm": true}
                }
            }
        }
    }));
    repo.file(
        "w/step.ts",
        r#"
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
const runner = crypto.randomUUID();
let runs = 0;
export async function main(input: any) {
  runs += 1;
  const empty = readdirSync(".").length === 0;
  const cwd = process.cwd();
  if (input.chdir) { mkdirSync("sub"); process.chdir("sub"); }
  writeFileSync(`left-by-${input.n}`, "x");
  console.log(`log ${input.n}`);
  console.error(`error ${input.n}`);
  process.stderr.write(`raw ${input.n}\n`);
  process.stdout.write(`unfinished ${input.n}`);
  if (input.tails) {
    process.stdout.write("x".repeat(input.tails[0]));
    process.stderr.write("y".repeat(input.tails[1]));
  }
  if (input.started) writeFileSync(input.started, runner);
  if (input.on_exit) process.once("exit", (code) => writeFileSync(input.on_exit, `exit ${code}`));
  const stdin = input.stdin ? await Bun.stdin.text() : undefined;
  switch (input.mode) {
    case "hang": await new Promise(() => setInterval(() => {}, 1000)); break;
    case "exit": {
      for (let i = 0; i < (input.lines ?? 0); i++) console.log(String(i).padEnd(1000, "x"));
      for (let i = 0; i < (input.lines ?? 0); i++) process.stdout.write(String(i).padEnd(1000, "y") + "\n");
      process.exit(3);
    }
    case "throw": throw new Error(`thrown by ${input.n}`);
    case "late": {
      setTimeout(() => { throw new Error(`uncaught in ${input.n}`); }, 10);
      await Bun.sleep(300);
      return { late: input.n };
    }
    case "wait": await Bun.sleep(1000); break;
    case "exit_later": setTimeout(() => process.exit(3), 0); break;
    case "linger": Bun.spawn(["sh", "-c", "while :; do sleep 1; done"], { env: { ...process.env } }).unref(); break;
    case "flood": { const chunk = ("x".repeat(65000) + "\n").repeat(16); setInterval(() => process.stdout.write(chunk), 1); break; }
    case "spin": setTimeout(() => { writeFileSync(input.spinning, "x"); for (;;) {} }, 1000); break;
    case "hog": { const kept = []; for (;;) { kept.push(Buffer.alloc(16 << 20, 1)); await Bun.sleep(20); } }
  }
  return {
    runner, runs, empty, n: input.n, padded: input.pad?.length ?? 0,
    job: process.env.WF_JOB_ID, attempt: process.env.WF_ATTEMPT, token: Boolean(process.env.WF_TOKEN),
    action: process.env.WF_ACTION, home: process.env.HOME, path: process.env.PATH, cwd, stdin,
  };
}
"#,
    );
    // Leaves, where a cold attempt's input goes, a link to a path of the host, for the worker to
    // write the next job's input through; and says whether it found an input file.
    repo.file(
        "w/link.ts",
        r#"
import { existsSync, lstatSync, symlinkSync } from "node:fs";
export function main(input: any) {
  const file = existsSync("/wf/io/input.json") && !lstatSync("/wf/io/input.json").isSymbolicLink();
  if (input.victim) symlinkSync(input.victim, "/wf/io/input.json");
  return { n: input.n, file };
}
"#,
    );
    let commit = repo.commit(&format!("warm actions of {}", repo.url()));
    env.wf(["source", "add", "warm", &repo.url()]).ok();
    env.wf(["sync", "warm"]).ok();
    commit
}

/// One job's status, result (or error) and log lines.
fn ended(env: &TestEnv, id: &str) -> (String, Value, Vec<String>) {
    let row = env
        .db()
        .query_one(
            "SELECT c.status, coalesce(c.result, c.error, 'null'::jsonb) FROM job_completed c WHERE c.job_id = $1::text::uuid",
            &[&id],
        )
        .unwrap();
    let logs = env
        .db()
        .query("SELECT line FROM job_logs WHERE job_id = $1::text::uuid AND stream <> 'wf' ORDER BY id", &[&id])
        .unwrap()
        .iter()
        .map(|row| row.get::<_, String>(0))
        .collect();
    (row.get(0), row.get(1), logs)
}

#[test]
fn a_warm_action_runs_its_jobs_in_one_process_each_with_its_own_input_variables_and_logs() {
    let env = TestEnv::new();
    let commit = synced_warm(&env);
    for isolation in ["sandbox", "none"] {
        one_runner_runs_every_job(&env, &commit, isolation);
    }
}

/// An input holding U+2028 or U+2029 (which JavaScript's line reader takes for line ends) reaches a
/// warm job whole, and the runner goes on with the next job (the request was cut in two: the job
/// waited for its timeout and the runner read no more requests).
#[test]
fn a_warm_job_gets_an_input_with_the_line_separators_of_javascript() {
    let env = TestEnv::new();
    synced_warm(&env);
    let texts = ["a\u{2028}b", "c\u{2029}d", "plain"];
    let ids: Vec<String> = texts.iter().map(|text| enqueue(&env, "w/step", json!({"n": text}))).collect();
    env.wf(["work", "--drain", "--concurrency", "1"]).ok();
    let mut runners = Vec::new();
    for (id, text) in ids.iter().zip(texts) {
        let (status, result, _) = ended(&env, id);
        assert_eq!(status, "success", "{result}");
        assert_eq!(result["n"], text, "{result}");
        runners.push(result["runner"].clone());
    }
    assert!(runners.windows(2).all(|pair| pair[0] == pair[1]), "one runner ran them all: {runners:?}");
}

/// A warm action that reads its stdin finds it empty, as a cold one does: the runner's requests
/// come on another descriptor, and the runner goes on with its next job. The same with the
/// supervisor run as `wf __supervise` (no `wf-supervise` beside `wf`).
#[test]
fn a_warm_action_that_reads_its_stdin_finds_it_empty_and_takes_no_request() {
    let env = TestEnv::new();
    synced_warm(&env);
    let alone = tempfile::tempdir().unwrap();
    let wf_alone = crate::support::harness::copy_of_wf(alone.path());
    for (isolation, fallback) in [("sandbox", false), ("none", false), ("sandbox", true)] {
        let ids: Vec<String> = (0..3).map(|n| enqueue(&env, "w/step", json!({"n": n, "stdin": true}))).collect();
        let work = env.wf(["work", "--drain", "--concurrency", "1", "--isolation", isolation]);
        let work = if fallback { work.under("env", [""; 0], wf_alone.as_os_str()) } else { work };
        let isolation = if fallback { "sandbox, wf __supervise" } else { isolation };
        work.ok();
        let mut runners = Vec::new();
        for id in &ids {
            let (status, result, logs) = ended(&env, id);
            assert_eq!(status, "success", "{isolation}: {result} {logs:?}");
            assert_eq!(result["stdin"], "", "{isolation}: {result}");
            runners.push(result["runner"].clone());
        }
        runners.dedup();
        assert_eq!(runners.len(), 1, "{isolation}: one runner ran every job: {runners:?}");
    }
}

fn one_runner_runs_every_job(env: &TestEnv, commit: &str, isolation: &str) {
    // A cold job in between: the runner waits for its action's next job meanwhile.
    // The second changes its folder: the next starts in the working directory all the same.
    let mut ids: Vec<String> = (0..3).map(|n| enqueue(env, "w/first", json!({"n": n, "chdir": n == 1}))).collect();
    let cold = enqueue(env, "w/cold", json!({"n": 6}));
    ids.extend((3..5).map(|n| enqueue(env, "w/first", json!({"n": n}))));
    // Without a sandbox the action can leave a note outside: how its runner ended.
    let on_exit = path(env, "runner-exit");
    let _ = std::fs::remove_file(&on_exit);
    let note = (isolation == "none").then(|| on_exit.to_str().unwrap());
    ids.push(enqueue(env, "w/first", json!({"n": 5, "on_exit": note})));
    env.wf(["work", "--drain", "--concurrency", "1", "--isolation", isolation]).ok();
    let mut runners = Vec::new();
    for (n, id) in ids.iter().enumerate() {
        let (status, result, logs) = ended(env, id);
        assert_eq!(status, "success", "{isolation}: {result} {logs:?}");
        assert_eq!(result["n"], n, "{result}");
        assert_eq!(result["runs"], n + 1, "the jobs ran one after another in one module: {result}");
        assert_eq!(result["job"], id.as_str(), "each job sees its own WF_JOB_ID: {result}");
        assert_eq!(
            (&result["attempt"], &result["token"], &result["action"]),
            (&json!("1"), &json!(true), &json!("first"))
        );
        assert_eq!(result["empty"], true, "each job starts in an empty working directory: {result}");
        assert_eq!(result["cwd"], ended(env, &ids[0]).1["cwd"], "each job starts in the working directory");
        let mut expected =
            vec![format!("log {n}"), format!("error {n}"), format!("raw {n}"), format!("unfinished {n}")];
        let mut got = logs.clone();
        expected.sort();
        got.sort();
        assert_eq!(got, expected, "a job's log holds its own lines, all of them, and no other job's");
        runners.push(result["runner"].clone());
    }
    runners.dedup();
    assert_eq!(runners.len(), 1, "one runner ran every job: {runners:?}");
    wait_for(Duration::from_secs(15), "the idle runner to end with its worker", || {
        runner_processes(commit, "first").is_empty().then_some(())
    });
    if isolation == "none" {
        // Its requests ended and bun exited by itself, its exit handlers run: not killed.
        assert_eq!(std::fs::read_to_string(&on_exit).ok().as_deref(), Some("exit 0"), "how the runner ended");
    }
    let (status, cold, _) = ended(env, &cold);
    assert_eq!((status.as_str(), &cold["runs"]), ("success", &json!(1)), "a cold action starts its own bun: {cold}");
    for id in &ids {
        let (_, warm, _) = ended(env, id);
        // In a sandbox, its HOME and PATH (where bun is), not the worker's.
        assert_eq!((&warm["home"], &warm["path"]), (&cold["home"], &cold["path"]), "{isolation}");
    }
    let left: i64 = env.scalar("SELECT count(*) FROM job_queue");
    assert_eq!(left, 0);
}

#[test]
fn a_timeout_a_crash_or_a_memory_limit_ends_the_runner_and_the_next_job_gets_a_fresh_one() {
    let env = TestEnv::new();
    let commit = synced_warm(&env);
    let started = path(&env, "started");
    let steps = [
        ("w/step", json!({"n": 0})),
        ("w/step", json!({"n": 1, "mode": "hang", "started": started})),
        ("w/step", json!({"n": 2})),
        ("w/step", json!({"n": 3, "mode": "exit", "lines": 400})),
        ("w/step", json!({"n": 4})),
        ("w/step", json!({"n": 5, "mode": "throw"})),
        ("w/step", json!({"n": 6})),
        ("w/hog", json!({"n": 7})),
        ("w/hog", json!({"n": 8, "mode": "hog"})),
        ("w/hog", json!({"n": 9})),
        ("w/step", json!({"n": 10, "mode": "late"})),
        ("w/step", json!({"n": 11, "mode": "wait"})),
    ];
    let ids: Vec<String> = steps.iter().map(|(target, input)| enqueue(&env, target, input.clone())).collect();
    let mut w = worker(&env, "w", &["--drain", "--concurrency", "1"]);
    // While the hanging job runs: its runner's processes, found from outside by the action's name.
    let hanging_runner = wait_for(Duration::from_secs(30), "the hanging job to start", || {
        std::fs::read_to_string(&started).ok().filter(|text| !text.is_empty())
    });
    let processes = runner_processes(&commit, "step");
    assert!(!processes.is_empty(), "the warm runner's processes are found by WF_ACTION");
    assert!(w.wait().unwrap().success());
    assert!(processes.iter().all(|&pid| !alive(pid)), "the timed-out runner's processes are gone: {processes:?}");

    let results: Vec<(String, Value, Vec<String>)> = ids.iter().map(|id| ended(&env, id)).collect();
    let runner = |n: usize| results[n].1["runner"].as_str().unwrap_or_default().to_string();
    let runs = |n: usize| results[n].1["runs"].as_i64().unwrap_or(-1);
    assert_eq!((results[0].0.as_str(), runs(0)), ("success", 1));
    assert_eq!(runner(0), hanging_runner, "the hanging job ran in the first job's runner");
    assert_eq!(results[1].0, "failure");
    assert_eq!(results[1].1["name"], "Timeout", "{:?}", results[1]);
    assert_eq!((results[2].0.as_str(), runs(2)), ("success", 1), "after a timeout, a fresh runner: {:?}", results[2]);
    assert_ne!(runner(2), runner(0));
    assert_eq!(results[3].1["name"], "ProcessError", "{:?}", results[3]);
    // (The first continues the line the job left unfinished.)
    for (written, by) in [("x", "console.log"), ("y", "process.stdout.write")] {
        let logged = results[3].2.iter().filter(|line| line.ends_with(&written.repeat(990))).count();
        assert_eq!(logged, 400, "every line written by {by} before process.exit() is kept");
    }
    assert_eq!((results[4].0.as_str(), runs(4)), ("success", 1), "after a crash, a fresh runner: {:?}", results[4]);
    assert_ne!(runner(4), runner(2));
    assert_eq!(results[5].0, "failure");
    assert_eq!(results[5].1["message"], "thrown by 5", "{:?}", results[5]);
    assert_eq!((results[6].0.as_str(), runs(6)), ("success", 3), "a throw is the job's end, not the runner's");
    assert_eq!(runner(6), runner(4));
    let (late, waited) = (&results[10], &results[11]);
    assert_eq!((late.0.as_str(), &late.1["message"]), ("failure", &json!("uncaught in 10")), "{late:?}");
    assert_eq!(
        (waited.0.as_str(), &waited.1["n"]),
        ("success", &json!(11)),
        "a late main() of the job before is not this job's result: {waited:?}"
    );
    assert_eq!(runs(11), 2, "an uncaught error fails its job, not the runner (a fresh one after the hog's)");
    assert_eq!((results[7].0.as_str(), runs(7)), ("success", 1), "another action, another runner");
    assert_eq!(results[8].1["name"], "MemoryLimit", "{:?}", results[8]);
    assert_eq!((results[9].0.as_str(), runs(9)), ("success", 1), "after a limit, a fresh runner: {:?}", results[9]);
    assert_ne!(runner(9), runner(7));
}

#[test]
fn a_canceled_warm_job_ends_its_runner_and_is_never_undone() {
    let env = TestEnv::new();
    let commit = synced_warm(&env);
    let started = path(&env, "started");
    let first = enqueue(&env, "w/step_long", json!({"n": 0}));
    let hanging = enqueue(&env, "w/step_long", json!({"n": 1, "mode": "hang", "started": started}));
    let after = enqueue(&env, "w/step_long", json!({"n": 2}));
    let mut w = worker(&env, "w", &["--drain", "--concurrency", "1"]);
    wait_for(Duration::from_secs(30), "the hanging job to start", || std::fs::read(&started).ok());
    let processes = runner_processes(&commit, "step_long");
    assert!(!processes.is_empty(), "the warm runner's processes are found by WF_ACTION and WF_COMMIT_SHA");
    env.wf(["cancel", &hanging, "--yes"]).ok();
    assert!(w.wait().unwrap().success());
    assert!(processes.iter().all(|&pid| !alive(pid)), "the canceled runner's processes are gone: {processes:?}");
    let (status, _, _) = ended(&env, &hanging);
    assert_eq!(status, "canceled");
    let (_, first, _) = ended(&env, &first);
    let (status, after, _) = ended(&env, &after);
    assert_eq!((status.as_str(), &after["runs"]), ("success", &json!(1)), "a fresh runner after the cancel: {after}");
    assert_ne!(after["runner"], first["runner"]);
}

/// A warm runner's jobs get their inputs with their requests, never through `io`, where the action
/// can write between its jobs: a link it left there in the place of a cold attempt's input is not
/// written through, so no file of the host is written or given to the sandbox user, and the next
/// job gets its own input.
#[test]
fn a_warm_runner_writes_no_input_through_a_link_its_action_left() {
    use std::os::unix::fs::MetadataExt;
    let env = TestEnv::new();
    synced_warm(&env);
    let victim = env.home().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let before = std::fs::metadata(&victim).unwrap();
    let first = enqueue(&env, "w/linker", json!({"n": 1, "victim": victim}));
    let second = enqueue(&env, "w/linker", json!({"n": 2}));
    env.wf(["work", "--drain", "--concurrency", "1"]).ok();
    let after = std::fs::metadata(&victim).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious", "the host's file is not written");
    assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()), "nor given away");
    let (status, result, _) = ended(&env, &first);
    assert_eq!((status.as_str(), &result), ("success", &json!({"n": 1, "file": false})), "no input file: {result}");
    let (status, result, _) = ended(&env, &second);
    assert_eq!((status.as_str(), &result), ("success", &json!({"n": 2, "file": false})), "its own input: {result}");
}

/// A runner whose event loop a job left spinning (a stray timer that never returns) reads no more
/// requests: the next job's is handed over without the slot waiting for it, however large its input
/// (here past a pipe's 64 KiB), so the job still times out, the runner ends and the one after gets
/// a fresh runner.
#[test]
fn a_runner_left_spinning_still_times_out_the_next_job_whatever_the_size_of_its_input() {
    let env = TestEnv::new();
    synced_warm(&env);
    // Its timer spins from a second after its end (its end lines long written), and says so first.
    let spinning = path(&env, "spinning");
    let first = enqueue(&env, "w/step", json!({"n": 0, "mode": "spin", "spinning": spinning}));
    let mut w = worker(&env, "w", &["--concurrency", "1"]);
    wait_for(Duration::from_secs(60), "the runner to spin", || spinning.exists().then_some(()));
    let input = path(&env, "large.json");
    std::fs::write(&input, json!({"n": 1, "pad": "x".repeat(300_000)}).to_string()).unwrap();
    let input = format!("@{}", input.display());
    // Past what a command line takes: from the file.
    let enqueue_large = || env.wf(["enqueue", "w/step", "--input", &input]).ok().stdout.trim().to_string();
    let large = enqueue_large();
    let after = enqueue(&env, "w/step", json!({"n": 2}));
    // And a large input to a runner that reads it.
    let read = enqueue_large();
    wait_for(Duration::from_secs(60), "the last job to end", || {
        let ended: i64 = env.scalar(&format!("SELECT count(*) FROM job_completed WHERE job_id = '{read}'"));
        (ended == 1).then_some(())
    });
    signal(&w, libc::SIGTERM);
    assert!(w.wait().unwrap().success());
    let (status, result, _) = ended(&env, &first);
    assert_eq!((status.as_str(), &result["n"]), ("success", &json!(0)), "{result}");
    let (status, error, _) = ended(&env, &large);
    assert_eq!((status.as_str(), &error["name"]), ("failure", &json!("Timeout")), "{error}");
    let (status, result, _) = ended(&env, &after);
    assert_eq!((status.as_str(), &result["runs"]), ("success", &json!(1)), "a fresh runner: {result}");
    assert_ne!(result["runner"], ended(&env, &first).1["runner"]);
    let (status, read, _) = ended(&env, &read);
    assert_eq!((status.as_str(), &read["padded"], &read["runs"]), ("success", &json!(300_000), &json!(2)), "{read}");
    assert_eq!(read["runner"], result["runner"]);
}

/// A job that leaves a line unfinished ends it with its end of job; the worker cuts lines longer
/// than 64 KiB into pieces, and a cut there never splits the end in two (which left the job
/// running until its timeout, and a success recorded as a `Timeout`).
#[test]
fn a_warm_job_that_leaves_a_long_line_unfinished_still_ends_at_once() {
    let env = TestEnv::new();
    synced_warm(&env);
    // "unfinished 1" and "raw 1\n" come first: lines of 65,510 and 65,520 bytes, the end of each
    // stream right after them.
    let (out, err) = (65_510, 65_520);
    let id = enqueue(&env, "w/step", json!({"n": 1, "tails": [out - "unfinished 1".len(), err]}));
    env.wf(["work", "--drain"]).ok();
    let (status, result, logs) = ended(&env, &id);
    assert_eq!((status.as_str(), &result["n"]), ("success", &json!(1)), "{result}");
    let mut lengths: Vec<usize> = logs.iter().map(String::len).filter(|length| *length > 1000).collect();
    lengths.sort();
    assert_eq!(lengths, [out, err], "each long line whole, before the end");
}

/// A warm job whose output goes past the caps still ends at once (its end is looked for while the
/// rest of its output is drained unread), and the runner's next job has its lines again.
#[test]
fn a_warm_job_past_the_output_caps_ends_and_the_next_job_has_its_lines() {
    let env = TestEnv::new();
    synced_warm(&env);
    let flood = enqueue(&env, "w/first", json!({"n": 1, "tails": [8 << 20, 10]}));
    let next = enqueue(&env, "w/first", json!({"n": 2}));
    env.wf(["work", "--drain", "--concurrency", "1"]).ok();
    let (status, first, logs) = ended(&env, &flood);
    assert_eq!(status, "success", "{first}");
    assert!(logs.iter().map(String::len).sum::<usize>() <= 1 << 20, "past the cap: nothing more kept");
    let own: Vec<String> = env
        .column_of("SELECT line FROM job_logs WHERE job_id = $1::text::uuid AND stream = 'wf' ORDER BY id", &[&flood]);
    assert_eq!(own, ["output truncated: this attempt wrote more than 1048576 bytes"]);
    let (status, second, logs) = ended(&env, &next);
    assert_eq!(status, "success", "{second}");
    assert_eq!(second["runner"], first["runner"], "one runner ran both");
    for line in ["log 2", "error 2", "raw 2", "unfinished 2"] {
        assert!(logs.iter().any(|logged| logged == line), "{line:?} in {logs:?}");
    }
}

/// A warm job that leaves a process running (or a timer) ends at once, but what it left does not
/// live on as long as its worker: a runner idle for its action's timeout (at least 10 s) ends, with
/// every process in it (before, it lived until the worker stopped or the slot ran another action).
#[test]
fn what_a_warm_job_leaves_running_ends_with_its_idle_runner() {
    let env = TestEnv::new();
    let commit = synced_warm(&env);
    let id = enqueue(&env, "w/linger", json!({"n": 0, "mode": "linger"}));
    let w = worker(&env, "w", &["--concurrency", "1"]);
    let jobs = [id.clone()].into_iter().collect();
    wait_for(Duration::from_secs(30), "the job's lingering process", || {
        let done: i64 = env.scalar_of("SELECT count(*) FROM job_completed WHERE job_id = $1::text::uuid", &[&id]);
        (done == 1 && !crate::support::checks::job_processes(&jobs).is_empty()).then_some(())
    });
    wait_for(Duration::from_secs(60), "the idle runner to end with what its job left", || {
        crate::support::checks::job_processes(&jobs).is_empty().then_some(())
    });
    // Its supervisor ends a moment after the job's processes, once it has reaped and cleaned up.
    wait_for(Duration::from_secs(30), "the runner to end", || {
        runner_processes(&commit, "linger").is_empty().then_some(())
    });
    signal(&w, libc::SIGTERM);
    assert_eq!(ended(&env, &id).0, "success");
}

/// The same while the slot runs other actions' jobs back to back (each claimed with the completion
/// of the one before): the idle runner ends between two of them (it lived as long as the chain).
#[test]
fn an_idle_runner_ends_between_jobs_of_other_actions_too() {
    let env = TestEnv::new();
    let commit = synced_warm(&env);
    let id = enqueue(&env, "w/linger", json!({"n": 0, "mode": "linger"}));
    let chain: Vec<String> = (1..=30).map(|n| enqueue(&env, "w/cold", json!({"n": n, "mode": "wait"}))).collect();
    let _w = worker(&env, "w", &["--concurrency", "1"]);
    wait_for(Duration::from_secs(30), "the linger job to end", || {
        (env.scalar_of::<i64>("SELECT count(*) FROM job_completed WHERE job_id = $1::text::uuid", &[&id]) == 1)
            .then_some(())
    });
    wait_for(Duration::from_secs(60), "the idle runner to end", || {
        runner_processes(&commit, "linger").is_empty().then_some(())
    });
    let left: i64 = env.scalar_of("SELECT count(*) FROM job_queue WHERE job_id::text = ANY($1)", &[&chain]);
    assert!(left > 0, "the runner ended while the chain still ran, not after it");
}

/// A runner that a job's leftover ends (a timer calling process.exit once the job returned) as the
/// next job is handed to it never ran that job: it goes back to the queue and a fresh runner runs it
/// (it failed, `bun exited with code 3`, without having run).
#[test]
fn a_job_handed_to_a_runner_that_ends_before_taking_it_runs_on_a_fresh_one() {
    let env = TestEnv::new();
    synced_warm(&env);
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push((enqueue(&env, "w/step", json!({"n": n, "mode": "exit_later"})), true));
        ids.push((enqueue(&env, "w/step", json!({"n": n})), false));
    }
    env.wf(["work", "--drain", "--concurrency", "1"]).ok();
    for (id, exits) in &ids {
        let (status, result, _) = ended(&env, id);
        assert_eq!(status, "success", "{id} (exits later: {exits}): {result}");
    }
}

/// The processes of the warm runners of `action` at `commit` (of this test alone: see
/// `synced_warm`), found by the WF_ACTION and WF_COMMIT_SHA their supervisor, init and bun were
/// started with: a warm runner's job variables are not in its environment.
fn runner_processes(commit: &str, action: &str) -> Vec<i32> {
    let wanted = [format!("WF_ACTION={action}"), format!("WF_COMMIT_SHA={commit}")];
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        let items: Vec<&[u8]> = environ.split(|byte| *byte == 0).collect();
        if wanted.iter().all(|variable| items.contains(&variable.as_bytes())) {
            found.push(pid);
        }
    }
    found
}

/// A module that throws as it loads (a connection its top level opens, failing once) fails its
/// job; JavaScript keeps that error for every later import in the same bun, so the next job gets a
/// new runner, where the module loads.
#[test]
fn a_module_that_failed_to_load_once_does_not_fail_the_next_jobs() {
    let env = TestEnv::new();
    let tried = path(&env, "tried");
    let repo = GitRepo::new();
    repo.manifest(&json!({"apps": {"w": {"actions": {"init": {"entrypoint": "w/init.ts", "warm": true}}}}}));
    repo.file(
        "w/init.ts",
        &format!(
            r#"
import {{ existsSync, writeFileSync }} from "node:fs";
if (!existsSync({tried:?})) {{
  writeFileSync({tried:?}, "x");
  throw new Error("the first load fails");
}}
export function main(input: any) {{ return input.n; }}
"#
        ),
    );
    repo.commit("an action whose first load fails");
    env.wf(["source", "add", "warm", &repo.url()]).ok();
    env.wf(["sync", "warm"]).ok();
    let ids: Vec<String> = (0..3).map(|n| enqueue(&env, "w/init", json!({"n": n}))).collect();
    env.wf(["work", "--drain", "--concurrency", "1", "--isolation", "none"]).ok();
    let ended: Vec<(String, Value)> = ids.iter().map(|id| ended(&env, id)).map(|(s, r, _)| (s, r)).collect();
    assert_eq!(ended[0].0, "failure", "{ended:?}");
    assert_eq!(ended[0].1["message"], "the first load fails", "{ended:?}");
    assert_eq!(ended[1..], [("success".to_string(), json!(1)), ("success".to_string(), json!(2))], "{ended:?}");
}

/// A warm runner that goes on writing after its job settled (a stray timer) while its slot waits
/// for the next job: what it writes waits in a bounded buffer, then in its pipe (the runner blocks),
/// never in the worker's memory beyond that.
#[test]
fn output_of_an_idle_warm_runner_does_not_grow_its_worker() {
    let env = TestEnv::new();
    synced_warm(&env);
    let id = enqueue(&env, "w/step", json!({"n": 0, "mode": "flood"}));
    let worker = worker(&env, "w", &["--concurrency", "1"]);
    wait_for(Duration::from_secs(30), "the job to succeed", || {
        let done: i64 = env.scalar_of("SELECT count(*) FROM job_completed WHERE job_id = $1::text::uuid", &[&id]);
        (done == 1).then_some(())
    });
    let rss_kib = || -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", worker.id())).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    };
    // Until it grows no more (the buffer full, the runner blocked), or for 20 s.
    let mut rss = rss_kib();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_secs(1));
        let now = rss_kib();
        if now < rss + 1024 {
            break;
        }
        rss = now;
    }
    let rss_kib = rss_kib();
    signal(&worker, libc::SIGTERM);
    assert!(rss_kib < 64 * 1024, "the worker holds {rss_kib} KiB while its idle runner floods");
}
