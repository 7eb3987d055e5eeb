//! Actions that attack, run by real workers against a real PostgreSQL: in a sandbox (the default)
//! each attack fails and the job still ends right. Where it shows that an attack is real, the
//! same action is also run with `--isolation none`, where it succeeds.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::checks::{assert_no_job_processes, job_processes, wait_completed};
use crate::support::fixtures::{enqueue, worker};
use crate::support::harness::{GitRepo, TestEnv, wait_for};

const SECRET: &str = "a-worker-secret-that-no-action-may-ever-read-0123456789";

/// A source of attacking actions (app `a`), and two honest ones.
fn attack_repo() -> GitRepo {
    let repo = GitRepo::new();
    repo.manifest(&json!({
        "apps": {
            "a": {
                "actions": {
                    "secrets": {"entrypoint": "a/secrets.ts"},
                    "store": {"entrypoint": "a/store.ts"},
                    "victim": {"entrypoint": "a/victim.ts"},
                    "sibling": {"entrypoint": "a/sibling.ts"},
                    "tyrant": {"entrypoint": "a/tyrant.ts", "timeout": 3},
                    "big": {"entrypoint": "a/big.ts"},
                    "deep": {"entrypoint": "a/deep.ts"},
                    "hog": {"entrypoint": "a/hog.ts", "memory_mb": 96},
                    "nested": {"entrypoint": "a/nested.ts", "memory_mb": 64},
                    "offline": {"entrypoint": "a/fetch.ts"},
                    "online": {"entrypoint": "a/fetch.ts", "network": true},
                    "hello": {"entrypoint": "a/hello.ts"},
                    "transpiled": {"entrypoint": "a/transpiled.ts"},
                    "links": {"entrypoint": "a/links.ts"},
                    "terminal": {"entrypoint": "a/terminal.ts"},
                    "burrow": {"entrypoint": "a/burrow.ts"},
                    "locked": {"entrypoint": "a/locked.ts"},
                    "peek": {"entrypoint": "a/peek.ts"},
                    "abstract": {"entrypoint": "a/abstract.ts", "network": true},
                    "keys": {"entrypoint": "a/keys.ts"},
                    "shm": {"entrypoint": "a/shm.ts", "memory_mb": 128},
                    "nap": {"entrypoint": "a/nap.ts"},
                    "stopper": {"entrypoint": "a/stopper.ts", "timeout": 3},
                    "kernel": {"entrypoint": "a/kernel.ts"},
                    "inotify": {"entrypoint": "a/inotify.ts"},
                    "sockets": {"entrypoint": "a/sockets.ts", "memory_mb": 128},
                    "tcp": {"entrypoint": "a/tcp.ts", "memory_mb": 128}
                },
                "network": false
            }
        }
    }));
    // What a thief looks for: the worker's secrets in any process's environment or command line
    // (and there the host's paths of WF_HOME, where to aim), the secret file in WF_HOME, and the
    // folders around its own.
    repo.file(
        "a/secrets.ts",
        r#"
import { readdirSync, readFileSync } from "node:fs";
function attempt(what: () => unknown) { try { what(); return "read"; } catch (e: any) { return e.code; } }
export function main(input: any) {
  const hits: string[] = [];
  for (const pid of readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
    for (const file of ["environ", "cmdline"]) {
      try {
        const text = readFileSync(`/proc/${pid}/${file}`, "latin1");
        const paths = file === "cmdline" && input.home && text.includes(input.home);
        if (text.includes(input.secret) || text.includes("WF_SECRET=") || text.includes("DATABASE_URL=") || paths) {
          hits.push(`${pid}/${file}`);
        }
      } catch {}
    }
  }
  return {
    hits,
    secret_file: attempt(() => readFileSync(input.home + "/secret")),
    home: attempt(() => readdirSync(input.home)),
    store: attempt(() => readdirSync(input.store)),
  };
}
"#,
    );
    // Rewrites its own source, through the sandbox's path and the host's.
    repo.file(
        "a/store.ts",
        r#"
import { writeFileSync } from "node:fs";
function attempt(what: () => unknown) { try { what(); return "written"; } catch (e: any) { return e.code; } }
const evil = "export function main() { return 'owned'; }\n";
export function main(input: any) {
  return {
    inside: attempt(() => writeFileSync("/wf/source/a/hello.ts", evil)),
    host: attempt(() => writeFileSync(input.tree + "/a/hello.ts", evil)),
  };
}
"#,
    );
    repo.file("a/hello.ts", "export function main() { return 'hello'; }\n");
    // Finds where bun read the wrapper's transpiled form (the variable is gone from process.env,
    // not from the environment bun started with) and puts its own code in the place of it.
    repo.file(
        "a/transpiled.ts",
        r#"
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
function attempt(what: () => unknown) { try { what(); return "written"; } catch (e: any) { return e.code; } }
export function main() {
  const name = "BUN_RUNTIME_TRANSPILER_CACHE_PATH";
  const started = readFileSync("/proc/self/environ", "latin1").split("\0");
  const cache = started.find((v) => v.startsWith(name + "="))!.slice(name.length + 1);
  const files = readdirSync(cache);
  const evil = "export function main() { return 'owned'; }\n";
  return {
    cache,
    in_env: name in process.env,
    files: files.length,
    overwritten: files.map((file) => attempt(() => writeFileSync(`${cache}/${file}`, evil))),
    created: attempt(() => writeFileSync(`${cache}/new.pile`, evil)),
  };
}
"#,
    );
    repo.file(
        "a/victim.ts",
        r#"
export async function main(input: any) {
  await Bun.sleep(input.ms);
  return { me: "victim", job: process.env.WF_JOB_ID };
}
"#,
    );
    // Looks for other jobs' processes and their files; kills the victim's when it finds them (only
    // the victim's: without a sandbox, as root, it could kill every job on the machine).
    repo.file(
        "a/sibling.ts",
        r#"
import { readdirSync, readFileSync } from "node:fs";
export function main(input: any) {
  const others: string[] = [];
  for (const pid of readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
    try {
      const environ = readFileSync(`/proc/${pid}/environ`, "latin1");
      const job = environ.split("\0").find((v) => v.startsWith("WF_JOB_ID="));
      if (job && job !== `WF_JOB_ID=${process.env.WF_JOB_ID}`) {
        others.push(job);
        if (job === `WF_JOB_ID=${input.victim}`) {
          try { process.kill(Number(pid), "SIGKILL"); } catch {}
        }
      }
    } catch {}
  }
  let scratch;
  try { readdirSync(input.home + "/scratch"); scratch = "listed"; } catch (e: any) { scratch = e.code; }
  return { others, scratch };
}
"#,
    );
    // Kills and stops everything it can see but itself, then outstays its timeout.
    repo.file(
        "a/tyrant.ts",
        r#"
import { readdirSync } from "node:fs";
export async function main() {
  const targets = [process.ppid, ...readdirSync("/proc").filter((name) => /^\d+$/.test(name)).map(Number)];
  for (const pid of targets.filter((pid) => pid !== process.pid)) {
    for (const signal of ["SIGSTOP", "SIGKILL"]) { try { process.kill(pid, signal); } catch {} }
  }
  await new Promise(() => setInterval(() => {}, 1000));
}
"#,
    );
    // Once the wrapper has written its result and bun is exiting, puts in the result's place a link
    // to a path of the host (which the worker, outside the sandbox, would resolve) or a pipe (which
    // would block a reader that opens it until a writer comes).
    repo.file(
        "a/links.ts",
        r#"
import { symlinkSync, unlinkSync } from "node:fs";
export function main(input: any) {
  process.once("exit", () => {
    unlinkSync("/wf/io/result.json");
    if (input.link) symlinkSync(input.link, "/wf/io/result.json");
    else Bun.spawnSync(["mkfifo", "/wf/io/result.json"]);
  });
  return "honest";
}
"#,
    );
    // Writes what would drive the terminal of an operator reading its logs: clear the screen, set
    // the window's title, write the clipboard (OSC 52), and a C1 control sequence.
    repo.file(
        "a/terminal.ts",
        r#"
export function main() {
  console.log("\x1b[2J\x1b[H\x1b]0;owned\x07title set");
  console.log("[wf] the job succeeded, said the action");
  console.error("\x1b]52;c;b3duZWQ=\x07clipboard written\u009b31mred");
  return { shown: "\u009b31mred\u007f" };
}
"#,
    );
    repo.file("a/big.ts", "export function main() { return 'x'.repeat(60_000_000); }\n");
    repo.file(
        "a/deep.ts",
        "export function main() { let v: any = 0; for (let i = 0; i < 300; i++) v = [v]; return v; }\n",
    );
    // A working directory deeper than a thread's stack lets anything recurse into.
    repo.file(
        "a/burrow.ts",
        r#"
import { mkdirSync, renameSync } from "node:fs";
export function main(input: any) {
  mkdirSync("d");
  for (let i = 1; i < input.depth; i++) { mkdirSync("up"); renameSync("d", "up/d"); renameSync("up", "d"); }
  return "burrowed";
}
"#,
    );
    // A connection to the host's abstract Unix socket named in the input.
    repo.file(
        "a/abstract.ts",
        r#"
import { connect } from "node:net";
export function main(input: any) {
  return new Promise((resolve) => {
    const socket = connect({ path: "\0" + input.name });
    socket.on("connect", () => { socket.destroy(); resolve("connected"); });
    socket.on("error", (e: any) => resolve(e.code ?? String(e)));
  });
}
"#,
    );
    // What is in the folders given, or why not.
    repo.file(
        "a/peek.ts",
        r#"
import { readdirSync } from "node:fs";
export function main(input: any) {
  const seen: Record<string, unknown> = {};
  for (const path of input.paths) {
    try { seen[path] = readdirSync(path).sort(); } catch (e: any) { seen[path] = e.code; }
  }
  return seen;
}
"#,
    );
    // Folders of the working directory that their owner may not even list or change.
    repo.file(
        "a/locked.ts",
        r#"
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
export function main() {
  mkdirSync("locked/inner/deeper", { recursive: true });
  writeFileSync("locked/inner/deeper/file", "x");
  for (const folder of ["locked/inner/deeper", "locked/inner", "locked"]) chmodSync(folder, 0);
  return "locked";
}
"#,
    );
    // A key of the keyrings the action possesses, looked up by name and read (keyctl SEARCH, READ).
    repo.file(
        "a/keys.ts",
        r#"
import { dlopen, FFIType, ptr } from "bun:ffi";
const i64 = FFIType.i64;
export function main(input: any) {
  const libc = dlopen("libc.so.6", { syscall: { args: [i64, i64, i64, i64, i64, i64], returns: i64 } });
  const keyctl = (...args: number[]) => Number(libc.symbols.syscall(250, ...args, ...[0, 0, 0, 0, 0].slice(args.length)));
  const [type, name] = [Buffer.from("user\0"), Buffer.from(input.name + "\0")];
  const id = keyctl(10, -3, ptr(type), ptr(name), 0);
  if (id < 0) return { found: false };
  const payload = Buffer.alloc(256);
  const length = keyctl(11, id, ptr(payload), payload.length);
  return { found: true, payload: payload.subarray(0, Math.max(length, 0)).toString() };
}
"#,
    );
    // The kernel's interfaces with a record of privilege escalations, and the memory of another
    // process (its own here, as the check of the call and not of the target): the errno of each
    // call, or "ok". Then keyctl by the x32 ABI, the same call plus 0x40000000.
    repo.file(
        "a/kernel.ts",
        r#"
import { dlopen, FFIType, read } from "bun:ffi";
const i64 = FFIType.i64;
export function main() {
  const libc = dlopen("libc.so.6", {
    syscall: { args: [i64, i64, i64, i64, i64, i64, i64], returns: i64 },
    __errno_location: { args: [], returns: FFIType.ptr },
  });
  const names: Record<number, string> = { 1: "EPERM", 14: "EFAULT", 22: "EINVAL", 38: "ENOSYS" };
  const call = (nr: number, ...args: number[]) => {
    const all = [...args, 0, 0, 0, 0, 0, 0].slice(0, 6);
    if (Number(libc.symbols.syscall(nr, ...all)) >= 0) return "ok";
    const errno = read.i32(libc.symbols.__errno_location());
    return names[errno] ?? `errno ${errno}`;
  };
  return {
    keyctl: call(250, 0, -3, 0),
    bpf: call(321, 0, 0, 0),
    perf_event_open: call(298, 0, 0, -1, -1, 0),
    io_uring_setup: call(425, 1, 0),
    userfaultfd: call(323, 0),
    process_vm_readv: call(310, Number(libc.symbols.syscall(39, 0, 0, 0, 0, 0, 0)), 0, 0, 0, 0, 0),
    modify_ldt: call(154, 0, 0, 0),
    getpid: call(39),
    x32_keyctl: call(250 + 0x40000000, 0, -3, 0),
  };
}
"#,
    );
    // 64 MiB of System V shared memory, which no process holds: the segment's id, or -1.
    repo.file(
        "a/shm.ts",
        r#"
import { dlopen, FFIType } from "bun:ffi";
export function main() {
  const libc = dlopen("libc.so.6", { shmget: { args: [FFIType.i32, FFIType.u64, FFIType.i32], returns: FFIType.i32 } });
  return libc.symbols.shmget(0, 64 * 1024 * 1024, 0o1000 | 0o600);
}
"#,
    );
    // Makes inotify instances (which the kernel counts per user of the host) until it may make no
    // more or has `most`; then holds them for `hold_ms`.
    repo.file(
        "a/inotify.ts",
        r#"
import { dlopen, FFIType } from "bun:ffi";
export async function main(input: any) {
  const libc = dlopen("libc.so.6", { inotify_init1: { args: [FFIType.i32], returns: FFIType.i32 } });
  let made = 0;
  while (made < input.most && libc.symbols.inotify_init1(0) >= 0) made += 1;
  if (input.hold_ms) {
    console.log(`holding ${made}`);
    await Bun.sleep(input.hold_ms);
  }
  return { made };
}
"#,
    );
    // Queues `mb` MiB in the buffers of Unix socket pairs: memory the kernel holds, no process's.
    repo.file(
        "a/sockets.ts",
        r#"
import { dlopen, FFIType, ptr } from "bun:ffi";
export function main(input: any) {
  const libc = dlopen("libc.so.6", {
    socketpair: { args: [FFIType.i32, FFIType.i32, FFIType.i32, FFIType.ptr], returns: FFIType.i32 },
    send: { args: [FFIType.i32, FFIType.ptr, FFIType.u64, FFIType.i32], returns: FFIType.i64 },
  });
  const chunk = new Uint8Array(65536).fill(120);
  const pair = new Int32Array(2);
  const MSG_DONTWAIT = 0x40;
  let queued = 0;
  while (queued < input.mb * 2 ** 20 && libc.symbols.socketpair(1, 1, 0, ptr(pair)) === 0) {
    for (;;) {
      const sent = Number(libc.symbols.send(pair[0], ptr(chunk), chunk.length, MSG_DONTWAIT));
      if (sent <= 0) break;
      queued += sent;
    }
  }
  return { queued_mb: Math.floor(queued / 2 ** 20) };
}
"#,
    );
    // Connects `conns` clients to a server of its own that reads nothing, and writes to each until
    // the kernel takes no more for a second: what it wrote, which the kernel holds in TCP buffers
    // (a chunk a socket at most waits in bun).
    repo.file(
        "a/tcp.ts",
        r#"
import net from "node:net";
export async function main(input: any) {
  const server = net.createServer((socket) => socket.pause());
  await new Promise<void>((listening) => server.listen(0, "127.0.0.1", () => listening()));
  const port = (server.address() as any).port;
  const chunk = Buffer.alloc(64 * 1024, 120);
  let written = 0;
  async function fill(socket: net.Socket) {
    for (;;) {
      written += chunk.length;
      if (socket.write(chunk)) continue;
      const drained = await Promise.race([
        new Promise((done) => socket.once("drain", () => done(true))),
        Bun.sleep(1000).then(() => false),
      ]);
      if (!drained) return;
    }
  }
  const sockets: net.Socket[] = [];
  for (let i = 0; i < input.conns; i++) {
    const socket = net.connect(port, "127.0.0.1");
    await new Promise((connected) => socket.once("connect", connected));
    sockets.push(socket);
  }
  await Promise.all(sockets.map(fill));
  return { written_mb: Math.floor(written / 2 ** 20) };
}
"#,
    );
    // Stops its parent (its supervisor, without a sandbox) and waits forever.
    repo.file(
        "a/stopper.ts",
        "export async function main() { process.kill(process.ppid, \"SIGSTOP\"); await new Promise(() => setInterval(() => {}, 1000)); }\n",
    );
    repo.file("a/nap.ts", "export async function main(input: any) { await Bun.sleep(input.ms); return \"rested\"; }\n");
    repo.file(
        "a/hog.ts",
        r#"
export async function main() {
  const kept = [];
  for (let i = 0; i < 100; i++) { kept.push(Buffer.alloc(16 << 20, 1)); await Bun.sleep(20); }
  return kept.length;
}
"#,
    );
    // A user namespace of its own, where it may mount a tmpfs without the size limit of its /tmp:
    // memory no process holds, so no limit of the sandbox counts it.
    repo.file(
        "a/nested.ts",
        r#"
export function main() {
  const script = "mount -t tmpfs -o size=0 t /tmp && head -c 200M /dev/zero > /tmp/x && echo held";
  const run = Bun.spawnSync(["unshare", "-Urm", "sh", "-c", script]);
  return { code: run.exitCode, out: run.stdout.toString(), err: run.stderr.toString() };
}
"#,
    );
    repo.file(
        "a/fetch.ts",
        r#"
export async function main(input: any) {
  try { return await (await fetch(input.url)).text(); } catch (e: any) { return "failed: " + e.message; }
}
"#,
    );
    repo.commit("attacks");
    repo
}

fn synced_attacks(env: &TestEnv) -> GitRepo {
    let repo = attack_repo();
    env.wf(["source", "add", "attacks", &repo.url()]).ok();
    env.wf(["sync", "attacks"]).ok();
    repo
}

/// The job's result, once the worker drained the queue.
fn result(env: &TestEnv, id: &str) -> Value {
    serde_json::from_str(&env.wf(["result", id]).ok().stdout).unwrap()
}

/// The job's error object, once it failed.
fn error(env: &TestEnv, id: &str) -> Value {
    serde_json::from_str(&env.wf(["result", id]).run().expect_code(4).stdout).unwrap()
}

/// The folder of the synced commit in the test's store.
fn tree(env: &TestEnv) -> std::path::PathBuf {
    let row = env.db().query_one("SELECT id::text, commit_sha FROM git_source WHERE name = 'attacks'", &[]).unwrap();
    env.store().join(row.get::<_, String>(0)).join(row.get::<_, String>(1))
}

#[test]
fn an_action_cannot_read_the_workers_secrets_or_its_home() {
    let env = TestEnv::new().env("WF_SECRET", SECRET);
    synced_attacks(&env);
    // The secret both in the worker's environment and in WF_HOME's secret file.
    std::fs::write(env.home().join("secret"), SECRET).unwrap();
    let input = json!({"secret": SECRET, "home": env.home(), "store": env.store()});
    let id = enqueue(&env, "a/secrets", input.clone());
    env.wf(["work", "--drain"]).ok();
    let found = result(&env, &id);
    assert_eq!(found, json!({"hits": [], "secret_file": "ENOENT", "home": "ENOENT", "store": "ENOENT"}));

    // The same action without a sandbox finds what it looks for: the check above can fail.
    let id = enqueue(&env, "a/secrets", input);
    env.wf(["work", "--drain", "--isolation", "none"]).ok();
    let found = result(&env, &id);
    assert_ne!(found["hits"], json!([]), "{found}");
    assert_eq!(found["secret_file"], "read", "{found}");
}

#[test]
fn an_action_cannot_change_the_store_and_a_changed_tree_is_found_and_repaired() {
    let env = TestEnv::new();
    let _repo = synced_attacks(&env);
    let tree = tree(&env);
    let id = enqueue(&env, "a/store", json!({"tree": tree}));
    env.wf(["work", "--drain"]).ok();
    let tried = result(&env, &id);
    // Refused by the file's mode (read-only, not the sandbox user's) before the read-only mount.
    assert!(["EACCES", "EROFS"].contains(&tried["inside"].as_str().unwrap()), "{tried}");
    assert_eq!(tried["host"], "ENOENT", "{tried}");
    let hello = enqueue(&env, "a/hello", json!({}));
    env.wf(["work", "--drain"]).ok();
    assert_eq!(result(&env, &hello), "hello");

    // Without a sandbox the action (as root here) rewrites the commit's tree. The next worker to
    // prepare the commit finds it changed, runs none of it and writes it again from the database
    // before it runs the job; `wf sync` also finds a changed tree and rewrites it.
    let id = enqueue(&env, "a/store", json!({"tree": tree}));
    env.wf(["work", "--drain", "--isolation", "none"]).ok();
    assert_eq!(result(&env, &id)["host"], "written");
    let repaired = enqueue(&env, "a/hello", json!({}));
    let run = env.wf(["work", "--drain"]).ok();
    assert!(
        run.stderr.contains("changed after its sync")
            && run.stderr.contains("again, its tree in this store not matching"),
        "{run:?}"
    );
    assert_eq!(result(&env, &repaired), "hello");
    let id = enqueue(&env, "a/store", json!({"tree": tree}));
    env.wf(["work", "--drain", "--isolation", "none"]).ok();
    assert_eq!(result(&env, &id)["host"], "written");
    let run = env.wf(["sync", "attacks"]).ok();
    assert!(run.stderr.contains("no longer matches") && run.stderr.contains("rewritten"), "{run:?}");
    let again = enqueue(&env, "a/hello", json!({}));
    env.wf(["work", "--drain"]).ok();
    assert_eq!(result(&env, &again), "hello");
}

/// A worker has bun transpile the wrapper once into a folder its attempts read (not at every
/// start): in a sandbox that folder is read-only, so no action can put its code in the place of the
/// wrapper that runs the next job; without one the action writes there.
#[test]
fn an_action_cannot_replace_the_transpiled_wrapper() {
    let env = TestEnv::new();
    synced_attacks(&env);
    let id = enqueue(&env, "a/transpiled", json!({}));
    env.wf(["work", "--drain"]).ok();
    let tried = result(&env, &id);
    assert_eq!((&tried["cache"], &tried["in_env"]), (&json!("/wf/transpiled"), &json!(false)), "{tried}");
    assert!(tried["files"].as_u64().unwrap() >= 1, "the wrapper is there transpiled: {tried}");
    // A file is the worker's, so its mode refuses the sandbox user first; a new one meets the
    // read-only mount (the folder's mode would say EACCES).
    let refused = |code: &Value| ["EACCES", "EROFS"].contains(&code.as_str().unwrap());
    assert!(tried["overwritten"].as_array().unwrap().iter().all(refused), "{tried}");
    assert_eq!(tried["created"], "EROFS", "{tried}");
    let hello = enqueue(&env, "a/hello", json!({}));
    env.wf(["work", "--drain"]).ok();
    assert_eq!(result(&env, &hello), "hello");

    let id = enqueue(&env, "a/transpiled", json!({}));
    env.wf(["work", "--drain", "--isolation", "none"]).ok();
    let tried = result(&env, &id);
    assert!(tried["cache"].as_str().unwrap().starts_with(env.home().to_str().unwrap()), "{tried}");
    assert_eq!((&tried["in_env"], &tried["created"]), (&json!(false), &json!("written")), "{tried}");
}

#[test]
fn an_action_cannot_reach_a_sibling_job() {
    let env = TestEnv::new();
    synced_attacks(&env);
    for isolation in ["sandbox", "none"] {
        let victim = enqueue(&env, "a/victim", json!({"ms": 4000}));
        let mut w = worker(&env, &format!("w-{isolation}"), &["--concurrency", "2", "--isolation", isolation]);
        let jobs: HashSet<String> = [victim.clone()].into_iter().collect();
        wait_for(Duration::from_secs(30), "the victim to run", || (!job_processes(&jobs).is_empty()).then_some(()));
        let attacker = enqueue(&env, "a/sibling", json!({"home": env.home(), "victim": victim}));
        let seen = wait_completed(&env, &attacker, Duration::from_secs(30));
        let done = wait_completed(&env, &victim, Duration::from_secs(30));
        crate::support::checks::kill(&mut w);
        let seen = seen.result.unwrap();
        if isolation == "sandbox" {
            assert_eq!(seen, json!({"others": [], "scratch": "ENOENT"}));
            assert_eq!(done.status, "success", "the victim ran on");
            assert_eq!(done.result.unwrap(), json!({"me": "victim", "job": victim}));
        } else {
            let found =
                seen["others"].as_array().unwrap().iter().any(|job| job == &json!(format!("WF_JOB_ID={victim}")));
            assert!(found, "without a sandbox the sibling is found: {seen}");
            assert_eq!(done.status, "failure", "and killed");
        }
    }
}

/// The worker reads the result the wrapper left in the attempt's `io` folder, which the action can
/// write: a link there is not followed to a file of the host (here one shaped like a result), and a
/// pipe there does not hold the worker up. Each job fails as unreadable; the next job runs.
#[test]
fn the_worker_follows_no_link_and_opens_no_pipe_the_action_leaves_for_its_result() {
    let env = TestEnv::new();
    synced_attacks(&env);
    let stolen = env.home().join("stolen.json");
    std::fs::write(&stolen, r#"{"ok": true, "result": "read from the host through a link"}"#).unwrap();
    let linked = enqueue(&env, "a/links", json!({"link": stolen}));
    let piped = enqueue(&env, "a/links", json!({}));
    let after = enqueue(&env, "a/hello", json!({}));
    let mut w = worker(&env, "w", &["--concurrency", "1"]);
    for id in [&linked, &piped, &after] {
        wait_completed(&env, id, Duration::from_secs(60));
    }
    crate::support::checks::kill(&mut w);
    for (id, what) in [(&linked, "a link"), (&piped, "a pipe")] {
        let error = error(&env, id);
        assert_eq!(error["name"], "ResultUnreadable", "{what} in the result's place: {error}");
        assert!(error["message"].as_str().unwrap().contains("not a regular file"), "{what}: {error}");
    }
    assert_eq!(result(&env, &after), "hello");
}

/// `wf logs` on a terminal shows an action's control characters instead of sending them to the
/// terminal; into a pipe, the lines are as the action wrote them. `wf result` and `wf show` write
/// its result as JSON with every control character escaped.
#[test]
fn an_actions_output_cannot_drive_the_terminal_of_an_operator_reading_its_logs() {
    let env = TestEnv::new();
    synced_attacks(&env);
    let id = enqueue(&env, "a/terminal", json!({}));
    env.wf(["work", "--drain"]).ok();
    let (code, screen) = env.wf(["logs", &id]).in_terminal().finish();
    assert_eq!(code, 0, "{screen:?}");
    for sent in ["\x1b[2J", "\x1b]0;", "\x1b]52;", "\u{9b}", "\x07"] {
        assert!(!screen.contains(sent), "{sent:?} reached the terminal: {screen:?}");
    }
    assert!(screen.contains(r"\x1b[2J\x1b[H\x1b]0;owned\x07title set"), "{screen:?}");
    assert!(screen.contains(r"[stderr] \x1b]52;c;b3duZWQ=\x07clipboard written\x9b31mred"), "{screen:?}");
    let piped = env.wf(["logs", &id]).ok().stdout;
    assert!(piped.contains("\x1b[2J\x1b[H\x1b]0;owned\x07title set\n"), "{piped:?}");
    assert!(piped.contains("\u{9b}31mred"), "{piped:?}");
    // A line of its stdout that starts as wf's own lines do is marked as the action's.
    assert!(piped.contains("\n[stdout] [wf] the job succeeded, said the action\n"), "{piped:?}");
    assert!(!piped.lines().any(|line| line.starts_with("[wf]")), "{piped:?}");
    // Its result, through JSON: the C1 control and DEL escaped too, the value the same.
    for args in [vec!["result", &id], vec!["show", &id]] {
        let shown = env.wf(args.clone()).ok().stdout;
        assert!(shown.contains(r"\u009b31mred\u007f") && !shown.contains(['\u{9b}', '\u{7f}']), "{args:?}: {shown:?}");
    }
    assert_eq!(result(&env, &id), json!({"shown": "\u{9b}31mred\u{7f}"}));
}

/// An action that signals everything it can see cannot stop or kill its supervisor: its timeout
/// still ends it on time, no process of it is left, and the worker goes on with the next job.
#[test]
fn an_action_cannot_kill_or_stop_its_supervisor() {
    let env = TestEnv::new();
    synced_attacks(&env);
    let tyrant = enqueue(&env, "a/tyrant", json!({}));
    let after = enqueue(&env, "a/hello", json!({}));
    env.wf(["work", "--drain"]).ok();
    let error = error(&env, &tyrant);
    assert_eq!(error["name"], "Timeout", "{error}");
    assert_eq!(result(&env, &after), "hello");
    assert_no_job_processes(&[tyrant], "the tyrant's processes");
}

/// Without a sandbox an action runs as its supervisor's user and can stop it (SIGSTOP): its job still
/// ends at its timeout, the supervisor continued or, when it does not end, killed; and the worker
/// goes on (before, the job stayed running, beating, for as long as the supervisor was stopped, and
/// the worker never ended).
#[test]
fn without_a_sandbox_an_action_that_stops_its_supervisor_still_times_out() {
    let env = TestEnv::new();
    synced_attacks(&env);
    let stopper = enqueue(&env, "a/stopper", json!({}));
    let after = enqueue(&env, "a/hello", json!({}));
    let mut w = worker(&env, "w", &["--drain", "--isolation", "none", "--heartbeat", "2s", "--concurrency", "1"]);
    let status = crate::support::checks::wait_exit(&mut w, Duration::from_secs(60), "the worker");
    let journal = std::fs::read_to_string(env.dir.path().join("w.log")).unwrap();
    assert!(status.success(), "{journal}");
    let error = error(&env, &stopper);
    assert_eq!(error["name"], "Timeout", "{error}");
    assert_eq!(result(&env, &after), "hello");
}

/// A 60 MB result fails as ResultTooLarge without the worker reading more than the cap.
#[test]
fn a_huge_result_is_refused_without_the_worker_reading_it() {
    let env = TestEnv::new();
    synced_attacks(&env);
    let big = enqueue(&env, "a/big", json!({}));
    let deep = enqueue(&env, "a/deep", json!({}));
    let mut w = worker(&env, "w", &[]);
    wait_completed(&env, &big, Duration::from_secs(60));
    wait_completed(&env, &deep, Duration::from_secs(60));
    let status = std::fs::read_to_string(format!("/proc/{}/status", w.id())).unwrap();
    let peak_kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    crate::support::checks::kill(&mut w);
    let error = error(&env, &big);
    assert_eq!(error["name"], "ResultTooLarge", "{error}");
    // Reading the whole result would take 60 MB at least (parsing it, several times that).
    assert!(peak_kib < 40 * 1024, "the worker's peak resident memory was {peak_kib} KiB");
    let error = self::error(&env, &deep);
    assert_eq!(error["name"], "ResultUnreadable", "{error}");
    assert!(error["message"].as_str().unwrap().contains("recursion limit"), "{error}");
}

/// `memory_mb` and `network` from the manifest are pinned on the job and hold in its sandbox (no
/// user namespace of the action's own, where it could mount a tmpfs no limit counts); the worker
/// and its next job live on.
#[test]
fn the_manifests_limits_hold_and_the_worker_lives_on() {
    let env = TestEnv::new();
    synced_attacks(&env);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        if let Ok((mut stream, _)) = listener.accept() {
            let _ = stream.read(&mut [0u8; 1024]);
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    let hog = enqueue(&env, "a/hog", json!({}));
    let nested = enqueue(&env, "a/nested", json!({}));
    let offline = enqueue(&env, "a/offline", json!({"url": url}));
    let online = enqueue(&env, "a/online", json!({"url": url}));
    env.wf(["work", "--drain"]).ok();
    let error = error(&env, &hog);
    assert_eq!(error["name"], "MemoryLimit", "{error}");
    let nested = result(&env, &nested);
    assert_ne!(nested["code"], 0, "no user namespace in the sandbox: {nested}");
    assert!(!nested["out"].as_str().unwrap().contains("held"), "{nested}");
    assert!(nested["err"].as_str().unwrap().contains("No space left on device"), "the namespace limit: {nested}");
    assert!(result(&env, &offline).as_str().unwrap().starts_with("failed"), "the app's network: false holds");
    assert_eq!(result(&env, &online), "ok", "the action's own network: true wins over its app's");
    server.join().unwrap();
}

/// Where the worker may make memory cgroups (cgroup v1's, in its own), `memory_mb` is a fence the
/// kernel holds, also on memory no process has: an action that queued a GiB in socket buffers
/// under `memory_mb: 128` (which its resident memory never showed) ran to success; it is killed
/// now, as `MemoryLimit`. The attempt's cgroup holds its processes while it runs, with the limit,
/// and is gone after.
#[test]
fn memory_the_kernel_holds_for_an_action_counts_against_its_limit() {
    let parent = memory_cgroup("self").expect("a cgroup v1 memory controller");
    assert!(parent.join("memory.limit_in_bytes").exists(), "{} is not a memory cgroup", parent.display());
    let env = TestEnv::new();
    synced_attacks(&env);
    let flood = enqueue(&env, "a/sockets", json!({"mb": 1024}));
    env.wf(["work", "--drain"]).ok();
    let error = error(&env, &flood);
    assert_eq!(error["name"], "MemoryLimit", "{error}");
    assert!(error["message"].as_str().unwrap().contains("limit of 128 MiB"), "{error}");

    let nap = enqueue(&env, "a/nap", json!({"ms": 60_000}));
    let mut w = worker(&env, "w", &["--once"]);
    let jobs = [nap.clone()].into_iter().collect();
    let cgroup = wait_for(Duration::from_secs(60), "the action to run in its cgroup", || {
        job_processes(&jobs).iter().filter(|(pid, _, _)| host_uid(*pid) != Some(0)).find_map(|(pid, _, _)| {
            // Init is moved in while it builds the sandbox.
            memory_cgroup(&pid.to_string())
                .filter(|cgroup| cgroup.file_name().is_some_and(|name| name.to_string_lossy().starts_with("wf-")))
        })
    });
    let limit = std::fs::read_to_string(cgroup.join("memory.limit_in_bytes")).unwrap();
    env.wf(["cancel", &nap]).ok();
    assert!(w.wait().unwrap().success());
    assert_eq!(cgroup.parent(), Some(parent.as_path()), "made in the worker's own");
    assert_eq!(limit.trim(), (2048u64 << 20).to_string(), "the action's memory_mb (the default)");
    assert!(!cgroup.exists(), "{} is left behind", cgroup.display());
}

/// The folder of a process's cgroup in the v1 memory hierarchy (`self`, or a pid).
fn memory_cgroup(process: &str) -> Option<std::path::PathBuf> {
    let cgroups = std::fs::read_to_string(format!("/proc/{process}/cgroup")).ok()?;
    let path = cgroups.lines().find_map(|line| line.split_once(":memory:").map(|(_, path)| path.to_string()))?;
    Some(std::path::Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/')))
}

/// TCP buffers count too: cgroup v1 keeps them apart, and only once a limit is set. An action that
/// wrote to 200 connections of its own that read nothing had the kernel hold 600 to 750 MiB of TCP
/// buffers under `memory_mb: 128` (the host's TCP memory, shared by every connection of the host);
/// at the limit its sockets take no more.
#[test]
fn tcp_buffers_an_action_fills_count_against_its_memory_limit() {
    let env = TestEnv::new();
    synced_attacks(&env);
    let id = enqueue(&env, "a/tcp", json!({"conns": 200}));
    env.wf(["work", "--drain"]).ok();
    let written = result(&env, &id)["written_mb"].as_u64().unwrap();
    // 128 MiB of buffers, and a chunk of 64 KiB a socket that bun holds.
    assert!(written < 160, "{written} MiB written to sockets nobody read");
}

/// Where the kernel refuses what the sandbox needs, `wf work` refuses to start and names the way
/// out; it never runs an action unsandboxed behind the operator's back.
#[test]
fn a_worker_refuses_to_start_where_the_sandbox_is_refused() {
    let env = TestEnv::new();
    synced_attacks(&env);
    let id = enqueue(&env, "a/hello", json!({}));
    // A user namespace whose limit on further user namespaces is 0, as some hosts and container
    // runtimes set it.
    let wf = env.wf(["work", "--drain"]);
    let mut command = std::process::Command::new("unshare");
    command.args([
        "--user",
        "--map-root-user",
        "sh",
        "-c",
        "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"",
        "sh",
    ]);
    command.arg(wf.command().get_program()).args(wf.command().get_args());
    command.env_clear().envs(wf.command().get_envs().filter_map(|(key, value)| value.map(|value| (key, value))));
    let output = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--isolation none"), "{stderr}");
    let running: i64 = env.scalar("SELECT count(*) FROM job_completed");
    assert_eq!(running, 0, "nothing was run");
    env.wf(["work", "--drain"]).ok();
    assert_eq!(result(&env, &id), "hello");
}

/// `wf work UNTIL` run as nobody (a worker that is not root), with a home of its own and this
/// test's store, which it can read, as it can reach the database's socket.
fn worker_as_nobody(env: &TestEnv, until: &str) -> std::process::Command {
    worker_as_nobody_in(env, until, None)
}

/// `worker_as_nobody`, in the supplementary group `group` too when given.
fn worker_as_nobody_in(env: &TestEnv, until: &str, group: Option<u32>) -> std::process::Command {
    let home = env.dir.path().join("nobody-home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
    for dir in [env.dir.path().to_path_buf(), env.home(), crate::support::harness::socket_dir()] {
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let wf = env.wf(["work", until]).env("WF_HOME", &home).env("WF_STORE", env.store());
    let mut command = match group {
        Some(group) => {
            let mut setpriv = std::process::Command::new("setpriv");
            setpriv.args(["--reuid=65534", "--regid=65534", &format!("--groups={group}"), "--"]);
            setpriv
        }
        None => {
            let mut runuser = std::process::Command::new("runuser");
            runuser.args(["-u", "nobody", "--"]);
            runuser
        }
    };
    command.arg(wf.command().get_program()).args(wf.command().get_args());
    command.env_clear().envs(wf.command().get_envs().filter_map(|(key, value)| value.map(|value| (key, value))));
    command
}

/// A worker that is not root runs its actions in a sandbox too: as its own user, which the kernel
/// lets it map, with the same isolation; but for memory, which it may not fence with a cgroup, and
/// says so.
#[test]
fn a_worker_that_is_not_root_runs_sandboxed_actions() {
    let env = TestEnv::new().env("WF_SECRET", SECRET);
    synced_attacks(&env);
    let id = enqueue(&env, "a/secrets", json!({"secret": SECRET, "home": "/nowhere", "store": env.store()}));
    let hello = enqueue(&env, "a/hello", json!({}));
    let output = worker_as_nobody(&env, "--drain").output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains("groups"), "in no other group, nothing to warn of: {stderr}");
    assert!(stderr.contains("warning: this worker may make no memory cgroup"), "{stderr}");
    let found = result(&env, &id);
    assert_eq!(found["hits"], json!([]), "{found}");
    assert_eq!(found["store"], "ENOENT", "{found}");
    assert_eq!(result(&env, &hello), "hello");
}

/// An `--allow-write` folder inside another is refused at start, naming both, and nothing runs:
/// it is writable through the outer one already, and its place in the sandbox would be made
/// through a folder the actions write (where a link would lead the bind elsewhere).
#[test]
fn a_worker_refuses_an_allow_write_folder_inside_another() {
    let env = TestEnv::new();
    synced_attacks(&env);
    let id = enqueue(&env, "a/hello", json!({}));
    let outer = tempfile::Builder::new().prefix("wf-allow-").tempdir().unwrap();
    let inner = outer.path().join("x/sub");
    std::fs::create_dir_all(&inner).unwrap();
    let refused = env
        .wf([
            "work",
            "--drain",
            "--allow-write",
            outer.path().to_str().unwrap(),
            "--allow-write",
            inner.to_str().unwrap(),
        ])
        .run()
        .expect_code(1);
    let said = format!("--allow-write {}: inside --allow-write {}", inner.display(), outer.path().display());
    assert!(refused.stderr.contains(&said), "{}", refused.stderr);
    assert_eq!(env.wf(["show", &id, "--json"]).ok().json()["status"], "queued", "nothing ran");
    // The same folder twice is that folder once; an empty entry is none.
    let twice = outer.path().to_str().unwrap();
    env.wf(["work", "--drain", "--allow-write", twice, "--allow-write", twice]).ok();
    assert_eq!(result(&env, &id), "hello");
    for listed in [format!("{twice}:"), String::new()] {
        let again = enqueue(&env, "a/hello", json!({}));
        env.wf(["work", "--drain"]).env("WF_ALLOW_WRITE", listed).ok();
        assert_eq!(result(&env, &again), "hello");
    }
}

/// An `--allow-write` path is followed through a symbolic link at start only where no action could
/// have put the link: in a folder others may write (here one all may write, as a folder an action
/// is allowed to write is), the worker refuses to start, naming the link; in a folder only root
/// writes, the link is followed. Before, a link an action put there before the worker started had
/// every sandbox of that worker bind what it pointed to (the host's /tmp, its WF_HOME).
#[test]
fn a_worker_follows_an_allow_write_link_only_where_no_action_could_have_put_it() {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let env = TestEnv::new();
    synced_attacks(&env);
    let id = enqueue(&env, "a/hello", json!({}));
    let target = tempfile::Builder::new().prefix("wf-allow-").tempdir().unwrap();
    let open = tempfile::Builder::new().prefix("wf-open-").tempdir().unwrap();
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let planted = open.path().join("l");
    symlink(target.path(), &planted).unwrap();
    let refused = env.wf(["work", "--drain", "--allow-write", planted.to_str().unwrap()]).run().expect_code(1);
    let said = format!("{} is a symbolic link in a folder others may write", planted.display());
    assert!(refused.stderr.contains(&said), "{}", refused.stderr);
    assert_eq!(env.wf(["show", &id, "--json"]).ok().json()["status"], "queued", "nothing ran");

    let closed = tempfile::Builder::new().prefix("wf-closed-").tempdir().unwrap();
    std::fs::set_permissions(closed.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let trusted = closed.path().join("l");
    symlink(target.path(), &trusted).unwrap();
    env.wf(["work", "--drain", "--allow-write", trusted.to_str().unwrap()]).ok();
    assert_eq!(result(&env, &id), "hello");
}

/// Each attempt of a root worker runs as a host user of its own, which owns the sandbox's user
/// namespace: what the kernel counts per user of the host (inotify instances here, 128 by default;
/// epoll watches, pipe buffers alike) an action exhausts for itself only. Before, every sandbox's
/// user namespace was root's and every action was nobody: an action that took its 128 inotify
/// instances took root's, and left none to the host's daemons nor to any other attempt.
#[test]
fn an_action_exhausts_the_kernels_limits_per_user_for_itself_only() {
    assert!(rustix::process::geteuid().is_root(), "this test runs a root worker: run the tests as root");
    let env = TestEnv::new();
    synced_attacks(&env);
    let hog = enqueue(&env, "a/inotify", json!({"most": 100_000, "hold_ms": 120_000}));
    let mut w = worker(&env, "w", &["--concurrency", "2"]);
    let held = wait_for(Duration::from_secs(60), "the action to hold what it could make", || {
        let logs = env.wf(["logs", &hog]).ok().stdout;
        logs.lines().find_map(|line| line.strip_prefix("holding ")?.parse::<u32>().ok())
    });
    assert!(held < 100_000, "the action met no limit ({held} inotify instances): the test shows nothing");
    let outside = rustix::fs::inotify::init(rustix::fs::inotify::CreateFlags::CLOEXEC);
    let other = enqueue(&env, "a/inotify", json!({"most": 1}));
    wait_completed(&env, &other, Duration::from_secs(60));
    let uids: HashSet<u32> =
        job_processes(&[hog.clone()].into_iter().collect()).iter().filter_map(|(pid, _, _)| host_uid(*pid)).collect();
    env.wf(["cancel", &hog]).ok();
    wait_completed(&env, &hog, Duration::from_secs(60));
    crate::support::checks::kill(&mut w);
    assert!(outside.is_ok(), "root outside the sandbox could make no inotify instance: {outside:?}");
    assert_eq!(result(&env, &other), json!({"made": 1}), "another attempt could make none");
    // Its supervisor is root; its init and bun are its host user, neither root nor nobody.
    let sandboxed: Vec<u32> = uids.iter().copied().filter(|uid| *uid != 0).collect();
    assert!(
        matches!(sandboxed[..], [uid] if (0x7000_0000..0x7040_0000).contains(&uid)),
        "the action's host uids: {uids:?}"
    );
}

/// A root worker in a user namespace that does not map the host uids of attempts (a container's:
/// here one mapping the host's uids 0 to 65535) says so at start, and runs its actions as the
/// host's nobody, in sandboxes that still hold.
#[test]
fn a_root_worker_in_a_namespace_without_the_uids_of_attempts_runs_them_as_nobody_and_says_so() {
    assert!(rustix::process::geteuid().is_root(), "this test runs a root worker: run the tests as root");
    let env = TestEnv::new();
    synced_attacks(&env);
    let id = enqueue(&env, "a/nap", json!({"ms": 60_000}));
    let log = env.dir.path().join("contained.log");
    // Waits for its namespace's map, which the test writes, then runs the worker in it.
    let mapped = r#"until [ -n "$(cat /proc/self/uid_map)" ]; do sleep 0.05; done; exec "$0" "$@""#;
    let wrapper = ["--user", "--fork", "--", "sh", "-c", mapped];
    let mut w = env
        .wf(["work", "--once"])
        .under("unshare", wrapper, crate::support::harness::wf_binary().as_os_str())
        .spawn(&log);
    let own = std::fs::read_link("/proc/self/ns/user").unwrap();
    let contained = w.id();
    wait_for(Duration::from_secs(10), "unshare to make its user namespace", || {
        std::fs::read_link(format!("/proc/{contained}/ns/user")).ok().filter(|ns| *ns != own)
    });
    std::fs::write(format!("/proc/{contained}/gid_map"), "0 0 65536\n").unwrap();
    std::fs::write(format!("/proc/{contained}/uid_map"), "0 0 65536\n").unwrap();
    let jobs = [id.clone()].into_iter().collect();
    let uids: HashSet<u32> = wait_for(Duration::from_secs(60), "the action to run", || {
        let processes = job_processes(&jobs);
        let uids: HashSet<u32> = processes.iter().filter_map(|(pid, _, _)| host_uid(*pid)).collect();
        (processes.len() >= 3).then_some(uids)
    });
    env.wf(["cancel", &id]).ok();
    wait_completed(&env, &id, Duration::from_secs(60));
    assert!(w.wait().unwrap().success());
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("does not map the uids 1879048192-1883242495: every action runs as nobody"), "{said}");
    assert_eq!(uids, [0, 65534].into_iter().collect(), "the supervisor root, its sandbox nobody");
    let canceled =
        env.db().query_one("SELECT status FROM job_completed WHERE job_id = $1::text::uuid", &[&id]).unwrap();
    assert_eq!(canceled.get::<_, String>(0), "canceled");
}

/// A process's uid, as the host sees it.
fn host_uid(pid: i32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A worker started with keys in its session keyring (a database password, a Kerberos ticket)
/// hands none of them to its actions: each attempt has a session keyring of its own (before, the
/// action possessed the worker's, and read its keys through it).
#[test]
fn an_action_cannot_reach_the_keys_of_its_workers_keyring() {
    let env = TestEnv::new();
    synced_attacks(&env);
    let id = enqueue(&env, "a/keys", json!({"name": "wf-test-dbpass"}));
    env.wf(["work", "--drain"])
        .before_exec(|| {
            const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
            const KEY_SPEC_SESSION_KEYRING: libc::c_long = -3;
            let payload = b"s3cret-db-password";
            // SAFETY: raw system calls on constant strings, between fork and exec.
            let made = unsafe {
                libc::syscall(libc::SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, c"wf-test-worker".as_ptr()) >= 0
                    && libc::syscall(
                        libc::SYS_add_key,
                        c"user".as_ptr(),
                        c"wf-test-dbpass".as_ptr(),
                        payload.as_ptr(),
                        payload.len(),
                        KEY_SPEC_SESSION_KEYRING,
                    ) >= 0
            };
            if made { Ok(()) } else { Err(std::io::Error::last_os_error()) }
        })
        .ok();
    assert_eq!(result(&env, &id), json!({"found": false}));
}

/// An action cannot make the system calls with a record of privilege escalations (BPF, perf events,
/// io_uring, userfaultfd, the keyrings) nor read another process's memory, also by the x32 ABI: each
/// fails with EPERM (x32: ENOSYS), and its job ends as it would. Without a sandbox the same action
/// reaches the keyrings and io_uring (before, so did a sandboxed one). Unprivileged BPF and
/// userfaultfd, and x32, may be refused by the host's kernel as well: the filter's part in those is
/// shown by the unit tests of `runner::seccomp`, which run its program over every path.
#[test]
fn an_action_cannot_make_the_kernels_riskiest_system_calls() {
    let env = TestEnv::new();
    synced_attacks(&env);
    let id = enqueue(&env, "a/kernel", json!({}));
    env.wf(["work", "--drain"]).ok();
    let calls = result(&env, &id);
    let refused =
        ["keyctl", "bpf", "perf_event_open", "io_uring_setup", "userfaultfd", "process_vm_readv", "modify_ldt"];
    for call in refused {
        assert_eq!(calls[call], "EPERM", "{call}: {calls}");
    }
    assert_eq!(calls["x32_keyctl"], "ENOSYS", "{calls}");
    assert_eq!(calls["getpid"], "ok", "{calls}");

    let id = enqueue(&env, "a/kernel", json!({}));
    env.wf(["work", "--drain", "--isolation", "none"]).ok();
    let calls = result(&env, &id);
    for call in ["keyctl", "io_uring_setup", "process_vm_readv", "modify_ldt"] {
        assert_ne!(calls[call], "EPERM", "{call} without a sandbox: {calls}");
    }
}

/// An action gets no System V shared memory: memory no process holds, which no limit of the sandbox
/// would count (before, a job limited to 128 MiB made segments of 1 GiB and succeeded).
#[test]
fn an_action_cannot_make_system_v_shared_memory() {
    let env = TestEnv::new();
    synced_attacks(&env);
    let id = enqueue(&env, "a/shm", json!({}));
    env.wf(["work", "--drain"]).ok();
    assert_eq!(result(&env, &id), json!(-1));
}

/// A working directory 30,000 folders deep (made in a second) is removed after its job, and its
/// worker goes on (before, removing it overflowed the sweeper's stack and the worker aborted).
#[test]
fn a_working_directory_deeper_than_a_stack_does_not_end_its_worker() {
    let env = TestEnv::new();
    synced_attacks(&env);
    let burrow = enqueue(&env, "a/burrow", json!({"depth": 30_000}));
    let hello = enqueue(&env, "a/hello", json!({}));
    env.wf(["work", "--drain", "--concurrency", "1"]).ok();
    assert_eq!(result(&env, &burrow), "burrowed");
    assert_eq!(result(&env, &hello), "hello");
    assert_emptied(&env.home().join("scratch"));
}

/// Nothing is left in the worker's scratch folder `scratch`.
fn assert_emptied(scratch: &std::path::Path) {
    let left: Vec<_> = std::fs::read_dir(scratch).unwrap().flatten().map(|entry| entry.path()).collect();
    assert!(left.is_empty(), "left in the scratch folder: {left:?}");
}

/// Of `/etc/ssl` the sandbox shows the certificates, never the host's private keys (a worker in
/// their group read them). A worker that is not root and is in other groups than its own is told
/// that its actions keep them (a user namespace cannot drop them).
#[test]
fn an_action_sees_no_private_keys_and_a_worker_in_other_groups_is_warned() {
    let env = TestEnv::new();
    synced_attacks(&env);
    let paths = json!({"paths": ["/etc/ssl", "/etc/ssl/private"]});
    let as_root = enqueue(&env, "a/peek", paths.clone());
    env.wf(["work", "--drain"]).ok();
    let seen = result(&env, &as_root);
    assert_eq!(seen["/etc/ssl/private"], "ENOENT", "{seen}");
    let ssl: Vec<&str> = seen["/etc/ssl"].as_array().unwrap().iter().map(|name| name.as_str().unwrap()).collect();
    assert!(ssl.contains(&"certs") && ssl.iter().all(|name| ["certs", "openssl.cnf"].contains(name)), "{seen}");

    let in_group = enqueue(&env, "a/peek", paths);
    let output = worker_as_nobody_in(&env, "--drain", Some(4242)).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("warning: this worker's user is in the groups 4242: its actions keep them"), "{stderr}");
    assert_eq!(result(&env, &in_group), seen);
}

/// With the network on, the sandbox shares the host's network namespace, and with it the host's
/// abstract Unix sockets, whose servers took the action for the worker's user (before, it
/// connected): a Landlock scope refuses them. Without the sandbox the same action connects, so the
/// socket is there to be reached.
#[test]
fn an_action_cannot_connect_to_the_hosts_abstract_sockets() {
    use std::os::linux::net::SocketAddrExt;
    let env = TestEnv::new();
    synced_attacks(&env);
    let name = format!("wf-test-{}", uuid::Uuid::new_v4().simple());
    let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind_addr(&address).unwrap();
    let sandboxed = enqueue(&env, "a/abstract", json!({"name": name}));
    let worker = env.wf(["work", "--drain"]).ok();
    // Landlock ABI 6 (Linux 6.12) scopes abstract sockets; an older kernel's worker says it cannot.
    // SAFETY: the version query of landlock_create_ruleset takes no structure.
    let abi = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32) };
    let refused = result(&env, &sandboxed);
    if abi >= 6 {
        assert_eq!(refused, "ECONNREFUSED", "{refused}");
    } else {
        assert_eq!(refused, "connected", "{refused}");
        assert!(worker.stderr.contains("cannot scope abstract Unix sockets"), "{}", worker.stderr);
    }
    let bare = enqueue(&env, "a/abstract", json!({"name": name}));
    env.wf(["work", "--drain", "--isolation", "none"]).ok();
    assert_eq!(result(&env, &bare), "connected");
}

/// A worker that is not root removes folders its action left without permissions, its own user's:
/// a folder moves to another parent only with write permission on itself (before, such a working
/// directory stayed in the scratch folder for good, and each later sweep gave up on it).
#[test]
fn a_worker_that_is_not_root_removes_folders_its_action_locked() {
    let env = TestEnv::new();
    synced_attacks(&env);
    let locked = enqueue(&env, "a/locked", json!({}));
    let output = worker_as_nobody(&env, "--drain").output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(result(&env, &locked), "locked");
    assert_emptied(&env.dir.path().join("nobody-home").join("scratch"));
}

/// The supervisor is not dumpable: another process of the worker's user cannot read its
/// environment (the job's token, the host's paths of the attempt) or trace it (before, a non-root
/// worker's supervisor was dumpable again after its exec).
#[test]
fn another_process_of_the_workers_user_cannot_read_the_supervisor() {
    let env = TestEnv::new();
    synced_attacks(&env);
    let id = enqueue(&env, "a/nap", json!({"ms": 60_000}));
    let mut worker = worker_as_nobody(&env, "--once").spawn().unwrap();
    let jobs = [id.clone()].into_iter().collect();
    // Looked at once the action runs (its processes are found beside the supervisor's): the
    // supervisor makes itself not dumpable first thing, but a look within the moment of its exec
    // could still read it (found so once on a loaded machine).
    let supervisor = wait_for(Duration::from_secs(30), "the job's supervisor and its action", || {
        let processes = job_processes(&jobs);
        let supervisor = processes.iter().map(|(pid, _, _)| *pid).find(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|environ| String::from_utf8_lossy(&environ).contains("WF_SUPERVISION="))
        });
        supervisor.filter(|_| processes.len() >= 2)
    });
    let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(format!("/proc/{supervisor}/environ")).unwrap());
    let read = std::process::Command::new("runuser")
        .args(["-u", "nobody", "--", "cat"])
        .arg(format!("/proc/{supervisor}/environ"))
        .output()
        .unwrap();
    let _ = worker.kill();
    let _ = worker.wait();
    assert!(!read.status.success(), "read as nobody: {}", String::from_utf8_lossy(&read.stdout));
    assert!(!String::from_utf8_lossy(&read.stdout).contains("WF_TOKEN"));
    // Its files are root's once it is not dumpable; its user is nobody.
    assert_eq!(owner, 0, "the supervisor's /proc files belong to its user: it is dumpable");
}

/// A cgroup v1 freezer of the test's own: a task frozen there stays in the kernel (state D), and a
/// SIGKILL takes it only once it is thawed, as with a process stuck in I/O on a hung mount. Thawed
/// and removed when dropped, so that a failing test leaves nothing frozen.
struct Freezer(std::path::PathBuf);

impl Freezer {
    fn new(name: &str) -> Freezer {
        let dir = std::path::Path::new("/sys/fs/cgroup/freezer").join(name);
        std::fs::create_dir(&dir).unwrap_or_else(|error| panic!("a cgroup v1 freezer at {}: {error}", dir.display()));
        Freezer(dir)
    }

    fn freeze(&self, pid: i32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).unwrap();
        std::fs::write(self.0.join("freezer.state"), "FROZEN").unwrap();
        wait_for(Duration::from_secs(10), "the freezer to freeze", || {
            (std::fs::read_to_string(self.0.join("freezer.state")).unwrap().trim() == "FROZEN").then_some(())
        });
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("freezer.state"), "THAWED");
        for _ in 0..100 {
            if std::fs::read_to_string(self.0.join("cgroup.procs")).is_ok_and(|procs| procs.trim().is_empty()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// A process of the action that SIGKILL cannot take yet keeps the sandbox's init from being reaped
/// (the kernel reaps it once every process of its namespace is dead). The supervisor waits for it
/// a bounded time (30 s), then lets the attempt end: the job is canceled as asked, rather than
/// left running, beating, forever.
#[test]
fn an_action_stuck_in_the_kernel_does_not_keep_its_job_running_forever() {
    let env = TestEnv::new();
    crate::support::fixtures::synced(&env);
    let id = enqueue(&env, "t/sleep", json!({"ms": 600_000}));
    let mut w = worker(&env, "w", &["--heartbeat", "1s"]);
    let jobs: HashSet<String> = [id.clone()].into_iter().collect();
    let bun = wait_for(Duration::from_secs(30), "bun to run the job", || {
        job_processes(&jobs)
            .into_iter()
            .map(|(pid, _, _)| pid)
            .find(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim() == "bun"))
    });
    let freezer = Freezer::new(&format!("wf-{}", env.dbname));
    freezer.freeze(bun);
    env.wf(["cancel", &id]).ok();
    wait_completed(&env, &id, Duration::from_secs(120));
    let status: String = env.scalar_of("SELECT status FROM job_completed WHERE job_id = $1::text::uuid", &[&id]);
    assert_eq!(status, "canceled");
    drop(freezer);
    assert_no_job_processes(&[id], "the thawed action");
    crate::support::checks::stop_worker(&mut w, "the worker");
}
