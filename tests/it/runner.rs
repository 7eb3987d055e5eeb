//! Running one action attempt (`wf::runner`): results, errors, output, environment, scratch space,
//! and the guarantee that stopping a job, or killing its worker, leaves none of its processes, in
//! a sandbox (the default) and without one (`--isolation none`).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use uuid::Uuid;
use wf::runner::{
    Event, Isolation, Limits, MAX_LINE, Outcome, Running, SandboxOptions, ScratchRoot, Spec, Stream, check_bun,
};

use crate::support::checks::job_processes;
use crate::support::harness::{bun, inherited_env, supervisor_binary, wait_for, wf_binary};

/// A worker's local world: WF_HOME with its scratch root, and a "store" holding action files.
struct World {
    dir: tempfile::TempDir,
    root: ScratchRoot,
    isolation: Isolation,
}

/// What a finished attempt produced.
struct Finished {
    outcome: Outcome,
    lines: Vec<(Stream, String)>,
}

impl World {
    /// Attempts in a sandbox, as workers run them by default.
    fn new() -> World {
        World::with(Isolation::Sandbox(SandboxOptions::default()))
    }

    /// Attempts without a sandbox (`--isolation none`).
    fn plain() -> World {
        World::with(Isolation::None)
    }

    /// One world of each kind, for what must hold in both.
    fn both() -> [World; 2] {
        [World::new(), World::plain()]
    }

    fn with(isolation: Isolation) -> World {
        let dir = tempfile::Builder::new().prefix("wf-runner-").tempdir().unwrap();
        let root = ScratchRoot::create_in(&dir.path().join("home")).unwrap();
        World { dir, root, isolation }
    }

    fn sandboxed(&self) -> bool {
        matches!(self.isolation, Isolation::Sandbox(_))
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// Write an action module into the store; returns its path relative to the store.
    fn action(&self, name: &str, source: &str) -> String {
        let path = self.store().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, source).unwrap();
        name.to_string()
    }

    /// A spec as a worker makes it: the given variables, and PATH, HOME and TZ.
    fn spec(&self, entrypoint: String, input: Value, mut env: Vec<(String, String)>) -> Spec {
        env.extend(inherited_env());
        let mut spec = Spec::new(&self.root, &Uuid::new_v4(), 1, self.store(), &entrypoint, input, env);
        spec.bun = bun().display().to_string();
        // In a test, the running binary is the test harness, not wf: the supervisor binary is
        // named, as a worker finds it beside itself.
        spec.wf_exe = supervisor_binary();
        spec.isolation = self.isolation.clone();
        spec
    }

    fn run(&self, source: &str, input: Value) -> Finished {
        let entrypoint = self.action("action.ts", source);
        let running = Running::start(self.spec(entrypoint, input, Vec::new())).unwrap();
        collect(running)
    }

    /// Start an action with WF_JOB_ID set to a fresh id, by which its processes can be found.
    fn start_job(&self, name: &str, source: &str, input: Value) -> (Running, String) {
        let job = Uuid::new_v4().to_string();
        let entrypoint = self.action(name, source);
        let env = vec![("WF_JOB_ID".to_string(), job.clone())];
        (Running::start(self.spec(entrypoint, input, env)).unwrap(), job)
    }
}

/// Read events until Done (60 s at most), then finish.
fn collect(running: Running) -> Finished {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut lines = Vec::new();
    loop {
        match running.events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Event::Line { stream, text }) => lines.push((stream, text)),
            Ok(Event::Done) => break,
            Ok(Event::Settled { code }) => panic!("a cold attempt settled as a warm one ({code})"),
            Err(RecvTimeoutError::Timeout) => panic!("the action did not end within 60 s: {lines:?}"),
            Err(RecvTimeoutError::Disconnected) => panic!("events ended without Done"),
        }
    }
    Finished { outcome: running.finish(), lines }
}

/// Read events until a stdout line starts with `prefix`; returns the rest of that line.
fn line_starting(running: &Running, prefix: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match running.events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Event::Line { stream: Stream::Stdout, text }) if text.starts_with(prefix) => {
                return text[prefix.len()..].to_string();
            }
            Ok(Event::Done) => panic!("the action ended before printing {prefix:?}"),
            Ok(_) => {}
            Err(error) => panic!("waiting for {prefix:?}: {error:?}"),
        }
    }
}

fn returned(finished: Finished) -> Value {
    match finished.outcome {
        Outcome::Returned(value) => value,
        other => panic!("expected Returned, got {other:?}; output: {:?}", finished.lines),
    }
}

fn failed(name: &str, message: &str) -> Outcome {
    Outcome::Failed { name: name.to_string(), message: message.to_string() }
}

fn threw(finished: Finished) -> Value {
    match finished.outcome {
        Outcome::Threw(error) => error,
        other => panic!("expected Threw, got {other:?}; output: {:?}", finished.lines),
    }
}

/// A process as identified at one moment: its pid and its start time, so that a pid reused by an
/// unrelated process after the original died does not count as the original.
#[derive(Debug, Clone, Copy)]
struct Process {
    pid: i32,
    started: u64,
}

/// Fields of /proc/PID/stat after `(comm)`: [0] is the state, [1] the ppid, [3] the session, [19]
/// the start time.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat[stat.rfind(')')? + 1..].split_whitespace().map(str::to_string).collect())
}

impl Process {
    fn of(pid: i32) -> Process {
        let fields = stat_fields(pid).unwrap_or_else(|| panic!("process {pid} does not exist"));
        Process { pid, started: fields[19].parse().unwrap() }
    }

    /// The same process still exists, as a running process or as a zombie.
    fn exists(&self) -> bool {
        stat_fields(self.pid).is_some_and(|fields| fields[19].parse::<u64>().ok() == Some(self.started))
    }

    /// The same process exists and is not a zombie.
    fn running(&self) -> bool {
        stat_fields(self.pid)
            .is_some_and(|fields| fields[19].parse::<u64>().ok() == Some(self.started) && fields[0] != "Z")
    }
}

/// An action that starts three kinds of descendant, all `sleep`s: a plain child, a child in its own
/// session (`detached`), and a daemon that double-forked away from bun (its parent `sh` exits).
/// Once they all run it reports, as it sees them, whether the detached ones left bun's session,
/// whether the daemon was adopted by bun's parent (the supervisor, or the sandbox's init), and its
/// environment's names; then it waits forever.
const SPAWNING_ACTION: &str = r#"
import { spawn, spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";

function stat(pid) {
  const text = readFileSync(`/proc/${pid}/stat`, "utf8");
  return text.slice(text.lastIndexOf(")") + 2).split(" ");
}

// A pid is known before its process has called setsid() and exec'd: wait until it runs `sleep`.
async function execed(pid) {
  while (readFileSync(`/proc/${pid}/comm`, "utf8").trim() !== "sleep") await Bun.sleep(5);
  return pid;
}

export async function main(input) {
  await execed(Bun.spawn(["sleep", "1000"]).pid);
  const detached = await execed(spawn("sleep", ["1001"], { detached: true, stdio: "ignore" }).pid);
  const daemon = await execed(Number(
    spawnSync("sh", ["-c", "setsid sleep 1002 >/dev/null 2>&1 & echo $!"]).stdout.toString().trim(),
  ));
  const own = stat(process.pid)[3];
  const report = {
    detached_own_session: stat(detached)[3] !== own,
    daemon_own_session: stat(daemon)[3] !== own,
    daemon_adopted: Number(stat(daemon)[1]) === process.ppid,
    env: Object.keys(process.env),
  };
  if (input.report) writeFileSync(input.report, JSON.stringify(report));
  console.log("report " + JSON.stringify(report));
  await new Promise(() => setInterval(() => {}, 1000));
}
"#;

/// The host's pids of a job's processes: supervisor, bun and its descendants (and the sandbox's
/// init), by their WF_JOB_ID.
fn processes_of(job: &str) -> Vec<Process> {
    let jobs = [job.to_string()].into_iter().collect();
    job_processes(&jobs).into_iter().filter_map(|(pid, _, _)| stat_fields(pid).map(|_| Process::of(pid))).collect()
}

/// The report of SPAWNING_ACTION, checked: every kind of descendant was made.
fn check_spawn_report(report: &Value) {
    assert_eq!(report["detached_own_session"], true, "{report}");
    assert_eq!(report["daemon_own_session"], true, "{report}");
    assert_eq!(report["daemon_adopted"], true, "the daemon was adopted by bun's parent: {report}");
}

#[test]
fn main_return_value_is_the_result() {
    for world in World::both() {
        let sync =
            world.run("export function main(input) { return { sum: input.a + input.b }; }", json!({"a": 2, "b": 3}));
        assert_eq!(returned(sync), json!({"sum": 5}));

        let asynchronous = world.run(
            "export async function main(input) { await new Promise((r) => setTimeout(r, 50)); return [input, 'done']; }",
            json!({"n": 1}),
        );
        assert_eq!(returned(asynchronous), json!([{"n": 1}, "done"]));

        let nothing = world.run("export async function main() {}", json!({}));
        assert_eq!(returned(nothing), Value::Null);
    }
}

/// Without `wf-supervise` beside it, a worker runs its supervisors as `wf __supervise`: the same.
#[test]
fn the_supervisor_runs_as_wf_itself_too() {
    for world in World::both() {
        let entrypoint = world.action("sum.ts", "export function main(input) { return input.a + input.b; }");
        let mut spec = world.spec(entrypoint, json!({"a": 1, "b": 2}), Vec::new());
        spec.wf_exe = wf_binary();
        assert_eq!(returned(collect(Running::start(spec).unwrap())), json!(3));
    }
}

#[test]
fn thrown_error_is_reported_with_name_message_and_stack() {
    for world in World::both() {
        let error = threw(world.run(
            r#"
            class ValidationError extends Error { constructor(m) { super(m); this.name = "ValidationError"; } }
            export async function main(input) { await null; throw new ValidationError("bad input: " + input.x); }
            "#,
            json!({"x": 7}),
        ));
        assert_eq!(error["name"], "ValidationError");
        assert_eq!(error["message"], "bad input: 7");
        let stack = error["stack"].as_str().unwrap();
        assert!(stack.contains("bad input: 7") && stack.contains("action.ts"), "stack: {stack}");
    }
}

#[test]
fn failures_that_are_not_errors_still_give_an_error_object() {
    let world = World::new();
    let cases = [
        ("export function main() { throw 'just a string'; }", "Error", "just a string"),
        ("export function main() { return { big: 10n }; }", "TypeError", "cannot be encoded as JSON"),
        ("export function main() { const a = {}; a.self = a; return a; }", "TypeError", "cannot be encoded as JSON"),
        ("export const main = 42;", "TypeError", "does not export a function main"),
        ("export function main( {", "BuildMessage", "Expected identifier"),
    ];
    for (source, name, message) in cases {
        let error = threw(world.run(source, json!({})));
        assert_eq!(error["name"], name, "{source}: {error}");
        assert!(error["message"].as_str().unwrap().contains(message), "{source}: {error}");
        assert!(error["stack"].is_string(), "{source}: {error}");
        if name == "BuildMessage" {
            assert!(error["stack"].as_str().unwrap().contains("action.ts:1:"), "{source}: {error}");
        }
    }
}

/// What PostgreSQL and the worker cannot take is made legible, not a lost error: U+0000 and a lone
/// surrogate (text cut inside an emoji) become U+FFFD; an error's message holding a whole page is
/// cut (it made the error `ResultTooLarge`); a result that cannot be encoded says so with the
/// action's frames, not the wrapper's.
#[test]
fn text_the_database_cannot_store_becomes_legible_and_no_error_is_lost() {
    let world = World::new();
    let error = threw(world.run(r#"export function main() { throw new Error("bad \u0000 byte"); }"#, json!({})));
    assert_eq!(error["message"], "bad \u{fffd} byte", "{error}");
    let error =
        threw(world.run(r#"export function main() { throw new Error("cut " + "ab😀".slice(0, 3)); }"#, json!({})));
    assert_eq!(error["message"], "cut ab\u{fffd}", "{error}");
    let result = returned(world.run(
        r#"export function main() { const cut = "ab😀".slice(0, 3); return { [cut]: cut, kept: "\\ud800 😀" }; }"#,
        json!({}),
    ));
    assert_eq!(result, json!({"ab\u{fffd}": "ab\u{fffd}", "kept": "\\ud800 😀"}));
    let error =
        threw(world.run(r#"export function main() { throw new Error("<html>" + "x".repeat(600000)); }"#, json!({})));
    let (message, stack) = (error["message"].as_str().unwrap(), error["stack"].as_str().unwrap());
    assert!(
        message.starts_with("<html>xxx") && message.ends_with("... (567238 more characters)"),
        "{}",
        &message[..40]
    );
    assert!(stack.len() < 40_000, "the stack is cut too: {} bytes", stack.len());
    let error = threw(world.run("export function main() { return { big: 10n }; }", json!({})));
    assert!(!error["stack"].as_str().unwrap().contains("wrapper"), "{error}");
    // Characters JSON writes in 6 bytes each, in all three fields: still the error, not ResultTooLarge.
    let error = threw(world.run(
        r#"export function main() { const s = "\x01".repeat(100000); const e = new Error(s); e.name = s; throw e; }"#,
        json!({}),
    ));
    assert!(error["name"].as_str().unwrap().ends_with("(67232 more characters)"), "{}", &error["message"]);
}

/// The result is written before anything else of the action's can run: a timer that calls
/// process.exit() right after main() returned does not lose it.
#[test]
fn a_result_is_kept_when_the_action_exits_right_after_returning() {
    let world = World::new();
    for _ in 0..3 {
        let result = returned(world.run(
            r#"export async function main() { setTimeout(() => process.exit(0), 0); return "x".repeat(1000000); }"#,
            json!({}),
        ));
        assert_eq!(result.as_str().map(str::len), Some(1_000_000));
    }
}

#[test]
fn exit_without_a_result_is_died_with_the_code_or_signal() {
    for world in World::both() {
        let exited = world.run("export function main() { process.exit(3); }", json!({}));
        assert_eq!(exited.outcome, failed("ProcessError", "bun exited with code 3"));

        let killed = world.run("export function main() { process.kill(process.pid, 'SIGKILL'); }", json!({}));
        assert_eq!(killed.outcome, failed("ProcessError", "bun was killed by signal 9"));
    }
}

/// A main() awaiting a promise that nothing can settle ends its attempt at once, as bun ends with
/// nothing left to do; the wrapper's wait for the job at its top level must not keep bun (which
/// then spins a core) until the job's timeout. Also when it is still waiting after a while.
#[test]
fn a_main_that_can_never_settle_ends_the_attempt_without_a_result() {
    for world in World::both() {
        for delay in [0, 200] {
            let stuck = world.run(
                &format!("export async function main() {{ await Bun.sleep({delay}); await new Promise(() => {{}}); }}"),
                json!({}),
            );
            assert_eq!(stuck.outcome, failed("ProcessError", "bun exited with code 0"), "after {delay} ms");
        }
    }
}

/// An action that leaves a timer (or a socket) open would keep bun alive after main() returned:
/// the attempt still ends, with its result and every line it wrote.
#[test]
fn an_action_that_leaves_a_timer_open_still_ends_with_all_its_output() {
    let world = World::new();
    let started = Instant::now();
    let finished = world.run(
        r#"
        export function main() {
          setInterval(() => {}, 1000);
          for (let i = 0; i < 2000; i++) process.stdout.write(`line ${i}\n`);
          return "done";
        }
        "#,
        json!({}),
    );
    assert_eq!(finished.outcome, Outcome::Returned(json!("done")));
    let lines = finished.lines.iter().filter(|(stream, _)| *stream == Stream::Stdout).count();
    assert_eq!(lines, 2000);
    assert!(started.elapsed() < Duration::from_secs(30), "the open timer kept the attempt alive");
}

/// A result counts only when the wrapper itself ended bun: a well-formed result file next to a
/// bun that was killed (what a sibling forging this job's result would leave) is not a result.
#[test]
fn a_result_file_without_the_wrappers_exit_does_not_count() {
    for world in World::both() {
        let forged = world.run(
            r#"
            import { writeFileSync } from "node:fs";
            export function main() {
              writeFileSync(process.argv[4], JSON.stringify({ ok: true, result: "forged" }));
              process.kill(process.pid, "SIGKILL");
            }
            "#,
            json!({}),
        );
        assert_eq!(forged.outcome, failed("ProcessError", "bun was killed by signal 9"));
    }
}

#[test]
fn output_lines_arrive_as_events_and_stay_out_of_the_result() {
    let world = World::new();
    let finished = world.run(
        r#"
        export function main() {
          console.log("hello");
          console.error("oops");
          console.log("{\"ok\":true,\"result\":\"forged\"}");
          process.stdout.write(Buffer.from([0xff, 0x41, 0x0a]));
          process.stdout.write("é".repeat(100000) + "\n");
          process.stdout.write("no newline at the end");
          return 1;
        }
        "#,
        json!({}),
    );
    let stdout: Vec<&str> =
        finished.lines.iter().filter(|(stream, _)| *stream == Stream::Stdout).map(|(_, text)| text.as_str()).collect();
    let stderr: Vec<&str> =
        finished.lines.iter().filter(|(stream, _)| *stream == Stream::Stderr).map(|(_, text)| text.as_str()).collect();
    assert_eq!(stderr, ["oops"]);
    assert_eq!(&stdout[..3], ["hello", "{\"ok\":true,\"result\":\"forged\"}", "\u{fffd}A"]);
    let long = &stdout[3..stdout.len() - 1];
    assert!(long.len() > 1 && long.iter().all(|piece| piece.len() <= MAX_LINE), "long line not cut");
    assert_eq!(long.concat(), "é".repeat(100000));
    assert_eq!(stdout.last().unwrap(), &"no newline at the end");
    assert_eq!(finished.outcome, Outcome::Returned(json!(1)));
}

/// Once told its output is past what is kept (`quiet`), an attempt's output is drained without
/// being made into lines: a flood costs the worker a read per chunk, not a line per newline (before,
/// each of millions of newlines the worker would drop was a string sent to it), and the attempt
/// still ends as it would have.
#[test]
fn a_quiet_attempt_drains_its_output_without_making_lines_of_it() {
    for world in World::both() {
        let entrypoint = world.action(
            "flood.ts",
            r#"
            export async function main() {
              console.log("begin");
              const chunk = "\n".repeat(1 << 20);
              for (let i = 0; i < 8; i++) process.stdout.write(chunk);
              await new Promise((done) => process.stdout.write("end\n", done));
              return "flooded";
            }
            "#,
        );
        let running = Running::start(world.spec(entrypoint, json!({}), Vec::new())).unwrap();
        line_starting(&running, "begin");
        running.quiet();
        let after = collect(running);
        assert_eq!(after.outcome, Outcome::Returned(json!("flooded")), "sandboxed: {}", world.sandboxed());
        // What was read before `quiet` came (a chunk being split, the events queued) is bounded;
        // the 8 Mi newlines after it are not lines.
        assert!(
            after.lines.len() < 100_000,
            "{} lines made after quiet (sandboxed: {})",
            after.lines.len(),
            world.sandboxed()
        );
    }
}

/// console formats as Node does: plain strings joined (the wrapper's fast path, without loading
/// node:util), and format strings, objects and numbers through util.format.
#[test]
fn console_formats_strings_format_strings_and_values_as_node_does() {
    let world = World::new();
    let finished = world.run(
        r#"
        export function main() {
          console.log("plain", "words");
          console.log();
          console.log("%s has %d items", "cart", 3, "extra");
          console.log("100%");
          console.log({ a: 1, b: [1, 2] });
          console.log("value:", 42, null);
          console.warn("warned", { w: true });
          (function traced() { console.trace("here", 1); })();
          return 1;
        }
        "#,
        json!({}),
    );
    let lines: Vec<(Stream, &str)> = finished.lines.iter().map(|(stream, text)| (*stream, text.as_str())).collect();
    // The trace's stack: the action's frames, not the wrapper's.
    let (lines, trace) = lines.split_at(lines.iter().position(|(_, text)| text.starts_with("Trace")).unwrap());
    assert_eq!(trace.first(), Some(&(Stream::Stderr, "Trace: here 1")), "{trace:?}");
    assert!(trace[1].1.contains("at traced (") && trace[1].1.contains("action.ts"), "{trace:?}");
    assert!(trace.iter().all(|(stream, text)| *stream == Stream::Stderr && !text.contains("wrapper")), "{trace:?}");
    assert_eq!(
        lines,
        [
            (Stream::Stdout, "plain words"),
            (Stream::Stdout, ""),
            (Stream::Stdout, "cart has 3 items extra"),
            (Stream::Stdout, "100%"),
            (Stream::Stdout, "{ a: 1, b: [ 1, 2 ] }"),
            (Stream::Stdout, "value: 42 null"),
            (Stream::Stderr, "warned { w: true }"),
        ]
    );
}

#[test]
fn action_environment_is_the_given_wf_variables_and_path_home_tz_only() {
    for world in World::both() {
        let entrypoint = world.action("env.ts", "export function main() { return process.env; }");
        let given = vec![
            ("WF_JOB_ID".to_string(), "job-1".to_string()),
            ("WF_TOKEN".to_string(), "token-1".to_string()),
            ("WF_ATTEMPT".to_string(), "1".to_string()),
        ];
        let finished = collect(Running::start(world.spec(entrypoint, json!({}), given)).unwrap());
        let env = returned(finished);
        assert_eq!(env["WF_JOB_ID"], "job-1");
        assert_eq!(env["WF_TOKEN"], "token-1");
        assert_eq!(env["WF_ATTEMPT"], "1");
        let expected = |name: &str| match (world.sandboxed(), name) {
            (true, "PATH") => Some("/wf/bin:/usr/local/bin:/usr/bin:/bin".to_string()),
            (true, "HOME") => Some("/tmp".to_string()),
            _ => std::env::var(name).ok(),
        };
        for name in ["PATH", "HOME", "TZ"] {
            match expected(name) {
                Some(value) => assert_eq!(env[name], value.as_str(), "{name}"),
                None => assert!(env.get(name).is_none(), "{name}"),
            }
        }
        // The test process has plenty more (CARGO_*, RUST_*, WF_BUN, ...): none of it may reach the action.
        let names: BTreeSet<&str> = env.as_object().unwrap().keys().map(String::as_str).collect();
        let allowed: BTreeSet<&str> = ["WF_JOB_ID", "WF_TOKEN", "WF_ATTEMPT", "PATH", "HOME", "TZ"].into();
        assert!(names.is_subset(&allowed), "unexpected variables: {:?}", names.difference(&allowed));
    }
}

#[test]
fn cwd_is_a_fresh_scratch_directory_removed_afterwards_and_the_store_is_untouched() {
    for world in World::both() {
        let entrypoint = world.action(
            "cwd.ts",
            r#"
            import { mkdirSync, readdirSync, writeFileSync, chmodSync } from "node:fs";
            export function main(input) {
              const before = readdirSync(".");
              mkdirSync("locked/inner", { recursive: true });
              writeFileSync("locked/inner/file", "x");
              chmodSync("locked", 0o500);
              let store;
              try { writeFileSync(input.source + "/new.ts", "x"); store = "written"; } catch (e) { store = e.code; }
              return { cwd: process.cwd(), before, store };
            }
            "#,
        );
        let source = if world.sandboxed() { "/wf/source".to_string() } else { world.store().display().to_string() };
        let spec = world.spec(entrypoint, json!({"source": source}), Vec::new());
        let scratch = spec.scratch.clone();
        assert!(!scratch.exists());
        let result = returned(collect(Running::start(spec).unwrap()));
        let cwd = if world.sandboxed() { "/wf/work".to_string() } else { scratch.join("work").display().to_string() };
        assert_eq!(result["cwd"], cwd);
        assert_eq!(result["before"], json!([]));
        // Removed by the root's sweeper, after the attempt.
        wait_for(Duration::from_secs(10), "the scratch directory to be removed", || (!scratch.exists()).then_some(()));
        let mut store: Vec<_> =
            std::fs::read_dir(world.store()).unwrap().map(|entry| entry.unwrap().file_name()).collect();
        store.sort();
        if world.sandboxed() {
            assert_eq!(result["store"], "EROFS", "the pinned commit is read-only in a sandbox");
            assert_eq!(store, ["cwd.ts"]);
        } else {
            // Without a sandbox the action can write wherever its worker can: the test shows it.
            assert_eq!(result["store"], "written");
        }
    }
}

#[test]
fn stop_kills_the_whole_tree_including_detached_descendants() {
    for world in World::both() {
        let (running, job) = world.start_job("spawner.ts", SPAWNING_ACTION, json!({}));
        let report: Value = serde_json::from_str(&line_starting(&running, "report ")).unwrap();
        check_spawn_report(&report);
        let processes = processes_of(&job);
        // The supervisor, bun, and its three sleeps (and the sandbox's init).
        let expected = if world.sandboxed() { 6 } else { 5 };
        assert_eq!(processes.len(), expected, "{processes:?}");
        assert!(processes.iter().all(|process| process.running()), "{processes:?}");

        running.stop();
        running.stop();
        let finished = collect(running);
        assert_eq!(finished.outcome, Outcome::Stopped);
        // Done means the supervisor is gone, and it only exits once every descendant is dead and
        // reaped: not one of them may exist any more, not even as a zombie.
        for process in processes {
            assert!(!process.exists(), "{process:?} survived stop()");
        }
        assert!(processes_of(&job).is_empty());
    }
}

#[test]
fn processes_left_by_a_finished_action_are_killed_with_it() {
    for world in World::both() {
        let (running, job) = world.start_job(
            "leaves.ts",
            r#"
            import { spawn } from "node:child_process";
            export function main() {
              const detached = spawn("sleep", ["1003"], { detached: true, stdio: "ignore" });
              detached.unref();
              return { pid: detached.pid };
            }
            "#,
            json!({}),
        );
        assert!(matches!(collect(running).outcome, Outcome::Returned(_)));
        assert!(processes_of(&job).is_empty(), "the action's detached child outlived the action");
    }
}

/// The environment variable that turns `worker_process_for_the_sigkill_test` into a worker.
const WORKER_HELPER: &str = "WF_RUNNER_TEST_WORKER_DIR";

#[test]
fn a_worker_killed_by_sigkill_leaves_no_process_of_its_job() {
    for sandbox in [true, false] {
        let dir = tempfile::Builder::new().prefix("wf-runner-kill-").tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("store")).unwrap();
        std::fs::write(dir.path().join("store/spawner.ts"), SPAWNING_ACTION).unwrap();
        // Where the action writes its report: the sandbox user may write it.
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let job = Uuid::new_v4().to_string();
        // The worker is this test binary running the helper test below, with a secret of its own in
        // its environment: the action must see neither that nor anything else of the worker's.
        let mut worker = Command::new(std::env::current_exe().unwrap())
            .args(["runner::worker_process_for_the_sigkill_test", "--exact", "--ignored", "--test-threads=1"])
            .env(WORKER_HELPER, dir.path())
            .env("WF_RUNNER_TEST_JOB", &job)
            .env("WF_RUNNER_TEST_SANDBOX", sandbox.to_string())
            .env("WF_SECRET", "the worker's secret")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let report_path = shared.join("report.json");
        let report: Value = wait_for(Duration::from_secs(60), "the action's report", || {
            std::fs::read_to_string(&report_path).ok().and_then(|text| serde_json::from_str(&text).ok())
        });
        check_spawn_report(&report);
        let processes = processes_of(&job);
        assert!(processes.len() >= 5, "{processes:?}");
        let env: Vec<String> = serde_json::from_value(report["env"].clone()).unwrap();
        assert!(!env.contains(&"WF_SECRET".to_string()), "the worker's secret reached the action: {env:?}");

        worker.kill().unwrap();
        worker.wait().unwrap();
        // The supervisor itself ends up a child of PID 1, which may never reap it: it may stay a
        // zombie, whose environment is gone. Nothing of the job may be running.
        wait_for(Duration::from_secs(10), "the job's processes to be gone", || {
            processes.iter().all(|process| !process.running()).then_some(())
        });
        assert!(processes_of(&job).is_empty());
    }
}

/// Not a test by itself: the worker process of `a_worker_killed_by_sigkill_leaves_no_process_of_its_job`,
/// which starts an attempt from this thread and holds it until it is SIGKILLed.
#[test]
#[ignore = "run as a child process by a_worker_killed_by_sigkill_leaves_no_process_of_its_job"]
fn worker_process_for_the_sigkill_test() {
    let Some(dir) = std::env::var_os(WORKER_HELPER).map(PathBuf::from) else { return };
    let job = std::env::var("WF_RUNNER_TEST_JOB").unwrap();
    let shared = dir.join("shared");
    let root = ScratchRoot::create_in(&dir.join("home")).unwrap();
    let mut spec = Spec::new(
        &root,
        &Uuid::new_v4(),
        1,
        dir.join("store"),
        "spawner.ts",
        json!({"report": shared.join("report.json")}),
        [("WF_JOB_ID".to_string(), job)].into_iter().chain(inherited_env()).collect(),
    );
    spec.bun = bun().display().to_string();
    spec.wf_exe = supervisor_binary();
    spec.isolation = if std::env::var("WF_RUNNER_TEST_SANDBOX").as_deref() == Ok("true") {
        Isolation::Sandbox(SandboxOptions { allow_write: vec![shared], ..Default::default() })
    } else {
        Isolation::None
    };
    let running = Running::start(spec).unwrap();
    for event in running.events.iter() {
        if event == Event::Done {
            break;
        }
    }
    panic!("the action ended before the worker was killed: {:?}", running.finish());
}

#[test]
fn stale_scratch_roots_are_removed_and_live_ones_kept() {
    let dir = tempfile::Builder::new().prefix("wf-runner-scratch-").tempdir().unwrap();
    let home = dir.path().join("home");
    let live = ScratchRoot::create_in(&home).unwrap();
    std::fs::write(live.path().join("keep"), "x").unwrap();

    // A worker that died: its root and lock file are there, nobody holds the lock.
    let scratch = home.join("scratch");
    let dead = scratch.join("4194999-deadbeef");
    std::fs::create_dir_all(dead.join("job-1/cwd")).unwrap();
    std::fs::write(dead.join("job-1/cwd/file"), "x").unwrap();
    std::fs::write(scratch.join("4194999-deadbeef.lock"), "").unwrap();
    // Debris without a lock file at all.
    std::fs::create_dir_all(scratch.join("4194998-0badf00d")).unwrap();

    let next = ScratchRoot::create_in(&home).unwrap();
    assert!(!dead.exists(), "the stale root was kept");
    assert!(!scratch.join("4194999-deadbeef.lock").exists(), "the stale lock file was kept");
    assert!(!scratch.join("4194998-0badf00d").exists(), "the debris was kept");
    assert!(live.path().join("keep").exists(), "the live root was removed");
    assert_ne!(live.path(), next.path());

    let next_path = next.path().to_path_buf();
    drop(next);
    assert!(!next_path.exists(), "a dropped root is removed");
    let mut left: Vec<String> =
        std::fs::read_dir(&scratch).unwrap().map(|entry| entry.unwrap().file_name().to_string_lossy().into()).collect();
    left.sort();
    let live_name = live.path().file_name().unwrap().to_string_lossy().to_string();
    assert_eq!(left, [live_name.clone(), format!("{live_name}.lock")]);
}

#[test]
fn missing_bun_is_a_clear_error_naming_wf_bun() {
    let version = check_bun(&bun().display().to_string()).unwrap();
    assert!(version.chars().next().is_some_and(|c| c.is_ascii_digit()), "version: {version}");

    let error = format!("{:#}", check_bun("/nonexistent/bun").unwrap_err());
    assert!(error.contains("WF_BUN") && error.contains("/nonexistent/bun"), "{error}");
    let error = format!("{:#}", check_bun("no-such-bun-anywhere").unwrap_err());
    assert!(error.contains("WF_BUN"), "{error}");

    let world = World::new();
    let mut spec = world.spec(world.action("a.ts", "export function main() {}"), json!({}), Vec::new());
    spec.bun = "/nonexistent/bun".to_string();
    let scratch = spec.scratch.clone();
    let error = format!("{:#}", Running::start(spec).err().expect("start must fail without bun"));
    assert!(error.contains("WF_BUN"), "{error}");
    assert!(!scratch.exists());
}

#[test]
fn attempt_directory_is_removed_after_finish_even_when_stopped() {
    let world = World::new();
    let entrypoint = world.action(
        "forever.ts",
        "export async function main() { console.log('up'); await new Promise(() => setInterval(() => {}, 1000)); }",
    );
    let spec = world.spec(entrypoint, json!({}), Vec::new());
    let scratch = spec.scratch.clone();
    let running = Running::start(spec).unwrap();
    line_starting(&running, "up");
    assert!(scratch.join("work").is_dir());
    running.stop();
    assert_eq!(collect(running).outcome, Outcome::Stopped);
    wait_for(Duration::from_secs(10), "the scratch directory to be removed", || (!scratch.exists()).then_some(()));
}

/// A world whose sandboxes have these options.
fn sandbox_world(options: SandboxOptions) -> World {
    World::with(Isolation::Sandbox(options))
}

#[test]
fn an_attempt_over_its_memory_limit_is_killed_with_memory_limit() {
    let world =
        sandbox_world(SandboxOptions { limits: Limits { memory_mb: 96, max_processes: 512 }, ..Default::default() });
    let finished = world.run(
        r#"
        export async function main() {
          const kept = [];
          for (let i = 0; i < 100; i++) { kept.push(Buffer.alloc(16 << 20, 1)); await Bun.sleep(20); }
          return kept.length;
        }
        "#,
        json!({}),
    );
    match finished.outcome {
        Outcome::Failed { name, message } => {
            assert_eq!(name, "MemoryLimit", "{message}");
            assert!(message.contains("96 MiB") && message.contains("memory_mb"), "{message}");
        }
        other => panic!("expected MemoryLimit, got {other:?}"),
    }
}

#[test]
fn an_attempt_over_its_process_limit_is_killed_with_process_limit() {
    let world =
        sandbox_world(SandboxOptions { limits: Limits { memory_mb: 2048, max_processes: 64 }, ..Default::default() });
    let (running, job) = world.start_job(
        "forks.ts",
        r#"
        import { spawn } from "node:child_process";
        export async function main() {
          // Forks past the limit fail with EAGAIN: ignored, as a fork bomb would.
          for (let i = 0; i < 200; i++) {
            try { spawn("sleep", ["1000"], { stdio: "ignore" }).on("error", () => {}); } catch {}
            await Bun.sleep(5);
          }
          await new Promise(() => {});
        }
        "#,
        json!({}),
    );
    match collect(running).outcome {
        Outcome::Failed { name, message } => {
            assert_eq!(name, "ProcessLimit", "{message}");
            assert!(message.contains("max_processes"), "{message}");
        }
        other => panic!("expected ProcessLimit, got {other:?}"),
    }
    assert!(processes_of(&job).is_empty());
}

/// The supervisor killed by SIGKILL (the OOM killer, an operator) takes the sandbox with it: the
/// sandbox's init dies by its parent-death signal, and the kernel kills the rest.
#[test]
fn a_sigkilled_supervisor_leaves_no_process_of_its_sandbox() {
    let world = World::new();
    let (running, job) = world.start_job("spawner.ts", SPAWNING_ACTION, json!({}));
    check_spawn_report(&serde_json::from_str(&line_starting(&running, "report ")).unwrap());
    let processes = processes_of(&job);
    let supervisor = processes
        .iter()
        .find(|process| stat_fields(process.pid).unwrap()[1] == std::process::id().to_string())
        .expect("the supervisor is the test's child");
    // SAFETY: a plain kill of the supervisor, our own child.
    unsafe { libc::kill(supervisor.pid, libc::SIGKILL) };
    let finished = collect(running);
    assert!(matches!(finished.outcome, Outcome::Failed { .. }), "{:?}", finished.outcome);
    // Nobody is left to wait for the kernel's kill of the sandbox to finish: it must happen.
    wait_for(Duration::from_secs(10), "the sandbox's processes to die with their supervisor", || {
        processes.iter().all(|process| !process.running()).then_some(())
    });
    assert!(processes_of(&job).is_empty());
}

/// Inside, the action sees only its own processes; it cannot kill or stop the sandbox's init, nor
/// read its memory or environment; the attempt ends normally.
#[test]
fn the_action_sees_only_its_own_processes_and_cannot_touch_its_init() {
    let world = World::new();
    let finished = world.run(
        r#"
        import { readdirSync, readFileSync } from "node:fs";
        export function main() {
          const pids = readdirSync("/proc").filter((name) => /^\d+$/.test(name)).map(Number);
          const tried = {};
          for (const signal of ["SIGSTOP", "SIGKILL", "SIGTERM"]) {
            try { process.kill(1, signal); tried[signal] = "sent"; } catch (e) { tried[signal] = e.code; }
          }
          let environ;
          try { readFileSync("/proc/1/environ"); environ = "read"; } catch (e) { environ = e.code; }
          let mem;
          try { readFileSync("/proc/1/mem"); mem = "read"; } catch (e) { mem = e.code; }
          return { pids, me: process.pid, parent: process.ppid, uid: process.getuid(), environ, mem };
        }
        "#,
        json!({}),
    );
    let seen = returned(finished);
    assert_eq!(seen["parent"], 1, "bun's parent is the sandbox's init: {seen}");
    assert_eq!(seen["pids"], json!([1, seen["me"]]), "only init and bun exist: {seen}");
    assert_ne!(seen["uid"], 0, "{seen}");
    assert_eq!(seen["environ"], "EACCES", "{seen}");
    assert_eq!(seen["mem"], "EACCES", "{seen}");
}

/// A test server on the host's loopback: each connection gets one HTTP answer.
fn http_server() -> (std::net::SocketAddr, std::thread::JoinHandle<()>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let server = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    stream.set_nonblocking(false).unwrap();
                    let mut request = [0u8; 1024];
                    let _ = stream.read(&mut request);
                    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello");
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    (address, server)
}

#[test]
fn network_is_on_by_default_and_off_when_the_manifest_says_so() {
    let (address, _server) = http_server();
    let fetch = r#"
        export async function main(input) {
          try { return await (await fetch(input.url)).text(); } catch (e) { return "failed: " + e.message; }
        }
    "#;
    let url = json!({"url": format!("http://{address}/")});
    assert_eq!(returned(World::new().run(fetch, url.clone())), "hello");
    let offline = sandbox_world(SandboxOptions { network: false, ..Default::default() });
    let answer = returned(offline.run(fetch, url));
    assert!(answer.as_str().unwrap().starts_with("failed"), "{answer}");
    let loopback = returned(offline.run(
        r#"
        export async function main() {
          const server = Bun.serve({ port: 0, fetch: () => new Response("local") });
          try { return await (await fetch(`http://127.0.0.1:${server.port}/`)).text(); } finally { server.stop(true); }
        }
        "#,
        json!({}),
    ));
    assert_eq!(loopback, "local", "the sandbox's own loopback works without network");
}

#[test]
fn an_allow_write_folder_is_writable_at_its_own_path_and_nothing_else_of_the_host() {
    let shared = tempfile::Builder::new().prefix("wf-allow-").tempdir().unwrap();
    std::fs::set_permissions(shared.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let world = sandbox_world(SandboxOptions { allow_write: vec![shared.path().to_path_buf()], ..Default::default() });
    let outside = world.dir.path().join("outside.txt");
    std::fs::write(&outside, "host").unwrap();
    let result = returned(world.run(
        r#"
        import { writeFileSync, readFileSync } from "node:fs";
        export function main(input) {
          writeFileSync(input.shared + "/from-the-action.txt", "hi");
          let outside;
          try { outside = readFileSync(input.outside, "utf8"); } catch (e) { outside = e.code; }
          let system;
          try { writeFileSync("/usr/wf-was-here", "x"); system = "written"; } catch (e) { system = e.code; }
          return { outside, system };
        }
        "#,
        json!({"shared": shared.path(), "outside": outside}),
    ));
    assert_eq!(std::fs::read_to_string(shared.path().join("from-the-action.txt")).unwrap(), "hi");
    assert_eq!(result, json!({"outside": "ENOENT", "system": "EROFS"}));
}

/// An `--allow-write` folder below another worker's: that worker's action swaps a folder of its
/// path for a link to a folder of root's. The next sandbox of this one must not bind what the link
/// points to (before, it did, reached as root: its action read root's file), and fails saying why.
#[test]
fn an_allow_write_folder_is_never_reached_through_a_link_an_action_put_in_its_path() {
    use std::os::unix::fs::PermissionsExt;
    let shared = tempfile::Builder::new().prefix("wf-allow-").tempdir().unwrap();
    let open = std::fs::Permissions::from_mode(0o777);
    std::fs::set_permissions(shared.path(), open.clone()).unwrap();
    let inner = shared.path().join("a/b");
    std::fs::create_dir_all(&inner).unwrap();
    for dir in [shared.path().join("a"), inner.clone()] {
        std::fs::set_permissions(dir, open.clone()).unwrap();
    }
    let private = tempfile::Builder::new().prefix("wf-private-").tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir_all(private.path().join("b")).unwrap();
    std::fs::write(private.path().join("b/secret.txt"), "root's").unwrap();

    let reader = sandbox_world(SandboxOptions { allow_write: vec![inner.clone()], ..Default::default() });
    let read = r#"
        import { readdirSync } from "node:fs";
        export function main(input) { return readdirSync(input.inner); }
        "#;
    assert_eq!(returned(reader.run(read, json!({"inner": inner}))), json!([]), "the folder is bound");

    let writer = sandbox_world(SandboxOptions { allow_write: vec![shared.path().to_path_buf()], ..Default::default() });
    let swapped = returned(writer.run(
        r#"
        import { renameSync, symlinkSync, readlinkSync } from "node:fs";
        export function main(input) {
          renameSync(input.shared + "/a", input.shared + "/a.old");
          symlinkSync(input.private, input.shared + "/a");
          return readlinkSync(input.shared + "/a");
        }
        "#,
        json!({"shared": shared.path(), "private": private.path()}),
    ));
    assert_eq!(swapped, json!(private.path()), "the other worker's action put its link");

    let finished = reader.run(read, json!({"inner": inner}));
    match &finished.outcome {
        Outcome::Failed { name, message } => {
            assert_eq!(name, "ProcessError", "{message}");
            assert!(message.contains("a folder of its path is now a symbolic link"), "{message}");
        }
        other => panic!("the sandbox bound what the link points to: {other:?}"),
    }
}
