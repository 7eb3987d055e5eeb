//! A source of test actions, synced into a test's catalog, and helpers to drive workers.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::harness::{GitRepo, Process, TestEnv, wait_for};

/// The test actions. Those that record executions append `<job id> <attempt>` to the file named
/// by `input.log`, so a test can count how often each job really ran.
pub(crate) fn actions_repo() -> GitRepo {
    let repo = GitRepo::new();
    repo.manifest(&json!({
        "apps": {
            "t": {
                "actions": {
                    "echo": {"entrypoint": "t/echo.ts", "timeout": 30},
                    "sleep": {"entrypoint": "t/sleep.ts", "timeout": 120},
                    "fail": {"entrypoint": "t/fail.ts"},
                    "exit": {"entrypoint": "t/exit.js"},
                    "env": {"entrypoint": "t/env.ts"},
                    "chatty": {"entrypoint": "t/chatty.ts"},
                    "nul": {"entrypoint": "t/nul.ts"},
                    "big": {"entrypoint": "t/big.ts"},
                    "spawn": {"entrypoint": "t/spawn.ts", "timeout": 3},
                    "spawn_long": {"entrypoint": "t/spawn.ts", "timeout": 600},
                    "killer": {"entrypoint": "t/killer.ts"},
                    "ledger": {"entrypoint": "t/ledger.ts", "timeout": 4},
                    "chatty_poison": {"entrypoint": "t/poison.ts"},
                    "ledger_long": {"entrypoint": "t/ledger.ts", "timeout": 600},
                    "typed": {
                        "entrypoint": "t/echo.ts",
                        "input_schema": {"type": "object", "required": ["n"],
                                         "properties": {"n": {"type": "integer", "minimum": 0}}},
                        "output_schema": {"type": "object", "required": ["input"]}
                    },
                    "badout": {
                        "entrypoint": "t/echo.ts",
                        "output_schema": {"type": "object", "required": ["missing"]}
                    }
                }
            },
            "other": {"tag": "other", "actions": {"echo": {"entrypoint": "t/echo.ts"}}}
        }
    }));
    repo.file(
        "t/record.ts",
        r#"
import { appendFileSync } from "node:fs";
export function record(input: any) {
  if (input && input.log) appendFileSync(input.log, `${process.env.WF_JOB_ID} ${process.env.WF_ATTEMPT}\n`);
}
"#,
    );
    repo.file(
        "t/echo.ts",
        r#"
import { record } from "./record.ts";
export async function main(input: any) {
  record(input);
  return { input, attempt: Number(process.env.WF_ATTEMPT), version: 1 };
}
"#,
    );
    repo.file(
        "t/sleep.ts",
        r#"
import { record } from "./record.ts";
export async function main(input: any) {
  record(input);
  const ms = (input.ms_by_attempt && input.ms_by_attempt[process.env.WF_ATTEMPT]) ?? input.ms ?? 1000;
  await new Promise((resolve) => setTimeout(resolve, ms));
  if (input.say) console.log(input.say);
  return { input, slept: ms };
}
"#,
    );
    repo.file("t/fail.ts", "export function main() { throw new TypeError('this action fails'); }\n");
    repo.file("t/exit.js", "export function main(input) { process.exit(input.code ?? 3); }\n");
    repo.file("t/env.ts", "export function main() { return process.env; }\n");
    repo.file(
        "t/chatty.ts",
        r#"
export function main(input: any) {
  const width = input.width ?? 0;
  for (let i = 0; i < (input.lines ?? 10); i++) {
    console.log(`out ${i}`.padEnd(width, "."));
    console.error(`err ${i}`.padEnd(width, "."));
  }
  if (input.fail) throw new Error(input.fail);
  return { lines: input.lines ?? 10 };
}
"#,
    );
    // NUL, which PostgreSQL's text and jsonb cannot hold: in a log line, and in the result when asked.
    repo.file(
        "t/nul.ts",
        r#"
export function main(input: any) {
  console.log("before\0after");
  return input.in_result ? { s: "a\u0000b" } : { ok: true };
}
"#,
    );
    repo.file("t/big.ts", "export function main(input: any) { return { blob: 'x'.repeat(input.bytes) }; }\n");
    // Starts a child, and a grandchild that detaches into its own session, writes their pids (as
    // the action sees them) and whether the detached one has a session of its own to input.pids,
    // then never returns.
    repo.file(
        "t/spawn.ts",
        r#"
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
// A pid is known before its process has called setsid() and exec'd: wait until it runs `sleep`.
async function execed(pid: number) {
  while (readFileSync(`/proc/${pid}/comm`, "utf8").trim() !== "sleep") await Bun.sleep(5);
}
function session(pid: number) {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[3];
}
export async function main(input: any) {
  const child = spawn("sleep", ["1000"], { stdio: "ignore" });
  // detached: the child calls setsid() and so lives in its own session and process group.
  const detached = spawn("sleep", ["1001"], { stdio: "ignore", detached: true });
  detached.unref();
  await execed(child.pid!);
  await execed(detached.pid!);
  const pids = [process.pid, child.pid, detached.pid];
  writeFileSync(input.pids, JSON.stringify({ pids, own_session: session(detached.pid!) !== session(process.pid) }));
  await new Promise(() => {});
}
"#,
    );
    // Prints lines a test's database refuses ("poison"), waits for them to be written while it
    // runs, then prints more. With input.last, prints them last instead, and returns at once: they
    // go with the completion. With input.forever, prints one every 5 ms until stopped.
    repo.file(
        "t/poison.ts",
        r#"
import { record } from "./record.ts";
export async function main(input: any) {
  record(input);
  if (input.last) {
    for (let i = 0; i < 3; i++) console.log(`poison ${i}`);
    return { done: true };
  }
  for (let i = 0; input.forever; i++) {
    console.log(`poison ${i}`);
    await Bun.sleep(5);
  }
  for (let i = 0; i < 3; i++) console.log(`poison ${i}`);
  await Bun.sleep(2500);
  console.log("a clean line after");
  return {};
}
"#,
    );
    // Writes `<attempt> <unix ms>` to input.ledger every 50 ms while it runs, for
    // input.ms_by_attempt[attempt] ms (forever when not given), then returns: a ledger of when each
    // attempt really ran. With input.print = n, each entry is also n lines of the job's logs.
    repo.file(
        "t/ledger.ts",
        r#"
import { appendFileSync } from "node:fs";
export async function main(input: any) {
  const attempt = process.env.WF_ATTEMPT;
  const ms = input.ms_by_attempt?.[attempt] ?? Infinity;
  const start = Date.now();
  while (Date.now() - start < ms) {
    const entry = `${attempt} ${Date.now()}`;
    appendFileSync(input.ledger, `${entry}\n`);
    for (let i = 0; i < (input.print ?? 0); i++) console.log(`ledger ${entry}`);
    await Bun.sleep(50);
  }
  return { attempt: Number(attempt) };
}
"#,
    );
    // Kills the worker running it: bun's parent is the supervisor, whose parent is the worker.
    repo.file(
        "t/killer.ts",
        r#"
import { readFileSync } from "node:fs";
import { record } from "./record.ts";
export function main(input: any) {
  record(input);
  const stat = readFileSync(`/proc/${process.ppid}/stat`, "utf8");
  const worker = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  process.kill(worker, "SIGKILL");
  return new Promise(() => {});
}
"#,
    );
    repo.commit("test actions");
    repo
}

/// Register and sync the test actions into this test's catalog; returns the repository.
pub(crate) fn synced(env: &TestEnv) -> GitRepo {
    let repo = actions_repo();
    env.wf(["source", "add", "tests", &repo.url()]).ok();
    env.wf(["sync", "tests"]).ok();
    repo
}

/// Enqueue one job; returns its id.
pub(crate) fn enqueue(env: &TestEnv, target: &str, input: serde_json::Value) -> String {
    let run = env.wf(["enqueue", target, "--input", &input.to_string()]).ok();
    run.stdout.trim().to_string()
}

/// Enqueue one job per input, in one batch (one transaction); returns the ids in input order.
pub(crate) fn enqueue_batch(env: &TestEnv, target: &str, inputs: &[Value]) -> Vec<String> {
    let file = path(env, "batch.jsonl");
    let lines: Vec<String> = inputs.iter().map(Value::to_string).collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let run = env.wf(["enqueue", target, "--batch", file.to_str().unwrap(), "--json"]).ok();
    run.json()["ids"].as_array().unwrap().iter().map(|id| id.as_str().unwrap().to_string()).collect()
}

/// The ledger of a `t/ledger` job: (attempt, unix ms) per line.
pub(crate) fn ledger(file: &Path) -> Vec<(i32, i64)> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (attempt, at) = line.split_once(' ')?;
            Some((attempt.parse().ok()?, at.parse().ok()?))
        })
        .collect()
}

/// Start `wf work --name NAME ARGS`; its stderr goes to `NAME.log` in the test's folder; killed
/// when dropped, so a failing test leaves no worker behind.
pub(crate) fn worker(env: &TestEnv, name: &str, args: &[&str]) -> Process {
    let mut all = vec!["work", "--name", name];
    all.extend_from_slice(args);
    env.wf(all).spawn(&env.dir.path().join(format!("{name}.log")))
}

/// The processes of a `t/spawn` job (as the host sees them: supervisor, bun, its child, its
/// detached child, and in a sandbox its init), once the action wrote its report: found by their
/// WF_JOB_ID, which works whatever namespaces they run in.
pub(crate) fn spawned_pids(job: &str, path: &Path) -> Vec<i32> {
    let report: serde_json::Value = wait_for(Duration::from_secs(30), "the action to write its pids", || {
        std::fs::read_to_string(path).ok().and_then(|text| serde_json::from_str(&text).ok())
    });
    assert_eq!(report["own_session"], true, "the detached child left the action's session: {report}");
    let jobs = [job.to_string()].into_iter().collect();
    let pids: Vec<i32> = crate::support::checks::job_processes(&jobs).iter().map(|(pid, _, _)| *pid).collect();
    assert!(pids.len() >= 4, "the supervisor, bun and two sleeps run: {pids:?}");
    assert!(pids.iter().all(|&pid| alive(pid)), "the action's processes run: {pids:?}");
    pids
}

/// Whether a process exists (and is not a zombie).
pub(crate) fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat[stat.rfind(')').unwrap() + 2..].starts_with('Z'),
        Err(_) => false,
    }
}

/// Wait until none of these processes is alive.
pub(crate) fn all_gone(pids: &[i32], what: &str) {
    wait_for(Duration::from_secs(15), what, || pids.iter().all(|&pid| !alive(pid)).then_some(()));
}

/// Executions recorded by actions in the file `log`: (job id, attempt) per line.
pub(crate) fn executions(log: &Path) -> Vec<(String, i32)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let (id, attempt) = line.split_once(' ').unwrap();
            (id.to_string(), attempt.parse().unwrap())
        })
        .collect()
}

/// A path inside the test's folder that actions may write too.
pub(crate) fn path(env: &TestEnv, name: &str) -> PathBuf {
    env.shared().join(name)
}

/// Send a signal to a child process.
pub(crate) fn signal(child: &Child, signal: i32) {
    // SAFETY: kill on a pid we spawned and have not reaped.
    unsafe { libc::kill(child.id() as i32, signal) };
}
