// wf's wrapper around one action attempt (SPEC: Action contract), run by the supervisor as
//
//   bun run wrapper.mjs <entrypoint> <input.json> <result.json> [warm]
//
// It imports the entrypoint (an absolute path), awaits main(input) and writes {"ok":true,"result":...} or
// {"ok":false,"error":{"name","message","stack"}} to the result file, then exits 0 or 1. The result
// file lives outside the action's cwd and is not stdout, so whatever the action prints stays its log
// and can never be mistaken for its result.
//
// Warm (`"warm": true` in the manifest): bun stays, and runs one job per request line read from
// descriptor 3 (stdin is /dev/null, as for a cold attempt), `{"nonce":"...","env":{...},"input":...}`,
// with the result written to <result.json> as above (<input.json> is not read: the input comes with
// its request). A line `\x1f<nonce> taken` on stdout says the request was read (a runner that ends
// before it, as what an earlier job left running may end it, never ran the job: the worker puts it
// back in the queue). A job's end is a line `\x1f<nonce> <0|1|2>` (returned, threw, threw as its
// module loaded) written last to stdout and to stderr: the worker files everything before it under
// that job. The requests closed: bun exits.
//
// A cold attempt does not load `node:fs` (about 6 ms of processor time, a third of a trivial
// attempt): its input and result go through Bun's own file calls. A warm runner loads it once.

const [entrypoint, inputPath, resultPath, mode] = process.argv.slice(2);
const warm = mode === "warm";

// Where bun found this file transpiled (set by the worker, read by bun as it started): not part of
// the action's environment.
delete process.env.BUN_RUNTIME_TRANSPILER_CACHE_PATH;

// Taken before the action is loaded: an action that replaces process.exit must not keep us alive,
// nor one that replaces Bun.file write its result elsewhere.
const exit = process.exit.bind(process);
const file = Bun.file.bind(Bun);

// Whether the job running now has its outcome (cold: the only job; warm: the current request's,
// and true between requests).
let settled = warm;

// The action's console in the order it wrote: bun buffers what goes to a stdout pipe and writes
// stderr at once, so over two pipes an error would come before the lines logged ahead of it. Every
// console line goes through stdout; a line meant for stderr starts with the byte 0x1e (record
// separator), which the worker takes off and files under stderr (see pump.rs, STDERR_MARK).
const STDERR_MARK = "\x1e";
for (const [method, mark] of [
  ["log", ""],
  ["info", ""],
  ["debug", ""],
  ["warn", STDERR_MARK],
  ["error", STDERR_MARK],
]) {
  console[method] = (...args) => {
    const lines = format(args).split("\n");
    process.stdout.write(lines.map((line) => mark + line).join("\n") + "\n");
  };
}

// console.trace as Node prints it ("Trace: ..." and the stack, to stderr), with the action's
// frames only.
console.trace = (...args) => {
  const frames = withoutOwnFrames(new Error().stack ?? "").split("\n").slice(1);
  console.error([`Trace${args.length > 0 ? `: ${format(args)}` : ""}`, ...frames].join("\n"));
};

// Warm: the streams' writes go out at once (see serve). A pipe bun made non-blocking may be full
// for a moment: the write waits for the worker to read it. A closed one (the worker is gone) takes
// nothing more. Made at the first full pipe: a SharedArrayBuffer costs a cold attempt time for
// nothing.
let pause;
let writeSync;

// Writes all of `bytes` to `fd`; returns the error that stopped it, if any.
function writeAll(fd, bytes) {
  let written = 0;
  while (written < bytes.length) {
    try {
      written += writeSync(fd, bytes, written);
    } catch (error) {
      if (field(error, "code") !== "EAGAIN") return error;
      pause ??= new Int32Array(new SharedArrayBuffer(4));
      Atomics.wait(pause, 0, 0, 1);
    }
  }
  return undefined;
}

// A stream's write() that writes at once.
function writingAtOnce(fd) {
  return (chunk, encoding, callback) => {
    if (typeof encoding === "function") [encoding, callback] = [undefined, encoding];
    const bytes = typeof chunk === "string" ? Buffer.from(chunk, encoding ?? "utf8") : chunk;
    const error = writeAll(fd, bytes);
    if (typeof callback === "function") queueMicrotask(() => callback(error ?? null));
    return true;
  };
}

// console's formatting: node:util's, loaded only when a call needs it (anything but plain strings,
// or a format string), since loading it costs 4 to 6 ms, a quarter of a trivial attempt.
let util;
function format(args) {
  if (args.every((arg) => typeof arg === "string") && !(args.length > 0 && args[0].includes("%"))) {
    return args.join(" ");
  }
  util ??= process.getBuiltinModule("node:util");
  return util.format(...args);
}

// Reads a property without letting a throwing getter on a thrown value break error reporting.
function field(value, key) {
  try {
    return value[key];
  } catch {
    return undefined;
  }
}

function describe(value) {
  if (typeof value === "string") return value;
  try {
    const json = JSON.stringify(value);
    if (json !== undefined) return json;
  } catch {
    // Not encodable (BigInt, circular): fall back to String() below.
  }
  try {
    return String(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}

function asText(value, fallback) {
  if (value === undefined || value === null) return fallback;
  return describe(value);
}

// This file, as stack frames name it: its frames are wf's, not the action's, and are left out.
// Found when an error is reported, not by every attempt.
let self;

function withoutOwnFrames(stack) {
  self ??= new URL(import.meta.url).pathname;
  return stack
    .split("\n")
    .filter((line) => !line.includes(self))
    .join("\n");
}

// bun's own load errors (BuildMessage, ResolveMessage: a syntax error, a missing import) carry
// their location in `position` instead of a stack: "file:line:column: text", then the source line
// and a caret under the column, as a compiler prints them.
function located(message) {
  const text = asText(field(message, "message"), "");
  const position = field(message, "position");
  if (!position || typeof position !== "object" || !position.file) return { text, where: "" };
  const where = `${position.file}:${position.line}:${position.column}`;
  let source = "";
  if (typeof position.lineText === "string" && position.lineText !== "") {
    const caret = " ".repeat(Math.max(0, Number(position.column) - 1)) + "^";
    source = `\n    ${position.lineText}\n    ${caret}`;
  }
  return { text, where, source };
}

// A module that does not build fails its import with one BuildMessage, or with an AggregateError
// ("2 errors building ...") holding one per problem: every message is kept, with its place.
function buildMessages(thrown) {
  const errors = field(thrown, "errors");
  const messages = Array.isArray(errors) ? errors : [thrown];
  const built = messages.map(located).filter((message) => message.where !== "");
  return built.length === messages.length && built.length > 0 ? built : null;
}

// Every failure becomes {"name","message","stack"}, also when the action throws a string, a plain
// object or something that is not an Error from this realm.
function errorObject(thrown) {
  const errorLike =
    thrown !== null && (typeof thrown === "object" || typeof thrown === "function") && "message" in thrown;
  if (!errorLike) {
    return { name: "Error", message: legible(describe(thrown)), stack: "" };
  }
  const name = asText(field(thrown, "name"), "Error");
  let message = asText(field(thrown, "message"), "");
  let stack = withoutOwnFrames(asText(field(thrown, "stack"), ""));
  const built = buildMessages(thrown);
  if (built) {
    const each = built.map((m) => `${m.where}: ${m.text}`);
    message = built.length === 1 ? each[0] : `${message}: ${each.join("; ")}`;
    stack = built.map((m) => `${m.where}: error: ${m.text}${m.source}`).join("\n");
  }
  return { name: legible(name), message: legible(message), stack: legible(stack) };
}

// How much of an error's name, message or stack is kept: the result's 1 MiB is for results, and a
// message holding a whole HTTP body must not turn the error into ResultTooLarge (three fields of
// characters JSON escapes in 6 bytes each, such as control characters, still fit).
const ERROR_FIELD_CHARS = 32 * 1024;

// An error's text as PostgreSQL stores it: U+0000 and a lone surrogate (text cut inside an emoji)
// become U+FFFD, and a text too long is cut, saying how much.
function legible(text) {
  const clean = text.toWellFormed().replaceAll("\0", "\ufffd");
  if (clean.length <= ERROR_FIELD_CHARS) return clean;
  const cut = clean.length - ERROR_FIELD_CHARS;
  return `${clean.slice(0, ERROR_FIELD_CHARS).toWellFormed()}... (${cut} more characters)`;
}

// JSON.stringify writes a lone surrogate as an escape (paired ones as they are), which neither
// PostgreSQL nor the worker takes: each such escape (not an escaped backslash before a `u`) becomes
// U+FFFD, as invalid text in the logs does. The pattern runs only on a text holding `\ud` (about
// 0.4 ms of processor time an attempt, for a result with no such escape).
const LONE_SURROGATE = /(?<!\\)((?:\\\\)*)\\ud[89a-f][0-9a-f]{2}/gi;

function encode(outcome) {
  try {
    const body = JSON.stringify(outcome);
    const escaped = body.includes("\\ud") || body.includes("\\uD");
    return { ok: outcome.ok, body: escaped ? body.replace(LONE_SURROGATE, "$1\\ufffd") : body };
  } catch (error) {
    const failure = {
      ok: false,
      error: {
        name: "TypeError",
        message: legible(
          `the result of main() cannot be encoded as JSON: ${asText(field(error, "message"), describe(error))}`,
        ),
        stack: legible(withoutOwnFrames(asText(field(error, "stack"), ""))),
      },
    };
    return { ok: false, body: JSON.stringify(failure) };
  }
}

// bun writes to pipes asynchronously and process.exit() drops what is still queued: the end of the
// action's output would be lost. So both streams are ended, and the exit waits for them to flush
// (for a bounded time, should a stream never finish).
function flushThenExit(code) {
  let pending = 2;
  const flushed = () => {
    pending -= 1;
    if (pending === 0) exit(code);
  };
  setTimeout(() => exit(code), 10_000);
  for (const stream of [process.stdout, process.stderr]) {
    try {
      stream.end(flushed);
    } catch {
      flushed();
    }
  }
}

// How long a cold attempt's module evaluation waits for its job (see the end of this file).
const TOP_LEVEL_WAIT_MS = 50;

// How long bun may take to end by itself once the result is written (see settle).
const LINGER_MS = 20;

// The first outcome wins: a stray exception after main() settled does not rewrite the result.
function settle(outcome) {
  if (settled) {
    if (warm && outcome.ok === false) {
      // Between jobs, or after this one settled: said in the log of the job that reads it next.
      process.stderr.write(`wf: an error outside a running job: ${outcome.error.name}: ${outcome.error.message}\n`);
    }
    return;
  }
  settled = true;
  const { ok, body } = encode(outcome);
  // At once, before anything else of the action's can run (a timer that calls process.exit()): a
  // file sink writes a regular file as it is called, and its end() closes it. The file is new (the
  // worker gives each cold attempt a new folder, and removes a warm job's result once read); one
  // the action put in its place itself, a link or a pipe, makes its own job's result unreadable,
  // never another's.
  try {
    const result = file(resultPath).writer();
    result.write(body);
    result.end();
  } catch (error) {
    process.stderr.write(`wf: could not write the result file ${resultPath}: ${describe(field(error, "message"))}\n`);
    flushThenExit(70);
    return;
  }
  if (warm) {
    endOfJob(ok ? 0 : unloadable ? UNLOADABLE : 1);
    return;
  }
  // bun usually ends by itself now, with all the output written, and without building the Node
  // streams a flush needs (that costs milliseconds per attempt). An action that left a timer or a
  // socket open would keep it alive: then the exit is forced, once the streams are flushed.
  process.exitCode = ok ? 0 : 1;
  setTimeout(() => flushThenExit(ok ? 0 : 1), LINGER_MS).unref();
}

process.on("uncaughtException", (error) => settle({ ok: false, error: errorObject(error) }));
process.on("unhandledRejection", (reason) => settle({ ok: false, error: errorObject(reason) }));

// The input of the job running now: a cold attempt's is in its input file, a warm job's comes with
// its request.
let readInput = async () => JSON.parse(await file(inputPath).text());

// Warm: whether the module threw as it loaded. JavaScript keeps a failed import's error, so every
// later job of this bun would fail the same way: the job's end says so (code UNLOADABLE), and the
// worker gives the next job a new runner.
const UNLOADABLE = 2;
let unloadable = false;

async function run() {
  const input = await readInput();
  let module;
  try {
    module = await import(entrypoint);
  } catch (error) {
    unloadable = true;
    throw error;
  }
  if (typeof module.main !== "function") {
    throw new TypeError(`${entrypoint} does not export a function main(input)`);
  }
  return await module.main(input);
}

// A job's main() may settle after its job was ended by an uncaught error: it must not settle the
// job running then (warm), so it counts only while its own request is the current one.
function runJob() {
  const own = nonce;
  return run().then(
    (result) => own === nonce && settle({ ok: true, result: result === undefined ? null : result }),
    (error) => own === nonce && settle({ ok: false, error: errorObject(error) }),
  );
}

// Warm: the end-of-job line of the current request, on both streams, after everything the job
// wrote to them. A stream that cannot take it ends bun: the worker then sees the process end. The
// streams' writes and the requests are taken before the action is loaded, which could replace them.
let nonce = "";
let ended = () => {};
let writes = [];
function endOfJob(code) {
  let pending = writes.length;
  for (const write of writes) {
    write(`\x1f${nonce} ${code}\n`, (error) => {
      if (error) flushThenExit(70);
      pending -= 1;
      if (pending === 0) ended();
    });
  }
}

async function serve() {
  // Every write to the streams (the console's, the action's own) goes out at once: what a stream
  // queued, the action's process.exit() would drop. An action may still replace them (to capture
  // its console, say).
  const fs = process.getBuiltinModule("node:fs");
  writeSync = fs.writeSync;
  process.stdout.write = writingAtOnce(1);
  process.stderr.write = writingAtOnce(2);
  writes = [process.stdout.write, process.stderr.write];
  // Each job starts in the working directory, whatever folder the last one changed to.
  const workdir = process.cwd();
  const { createInterface } = await import("node:readline");
  const requests = createInterface({ input: fs.createReadStream("", { fd: 3 }), crlfDelay: Infinity });
  let previous = [];
  for await (const line of requests) {
    if (line === "") continue;
    const request = JSON.parse(line);
    // The job's own WF_JOB_ID, WF_TOKEN, ...: the last job's are gone.
    for (const key of previous) delete process.env[key];
    previous = Object.keys(request.env);
    Object.assign(process.env, request.env);
    readInput = () => request.input;
    process.chdir(workdir);
    nonce = request.nonce;
    settled = false;
    writes[0](`\x1f${nonce} taken\n`);
    await new Promise((resolve) => {
      ended = resolve;
      runJob();
    });
  }
  flushThenExit(0);
}

if (warm) {
  serve();
} else {
  // This module's evaluation waits for the job, up to a moment: bun then ends without the work it
  // does for a main module that finished before the event loop ran (0.7 to 1 ms of processor time
  // a cold attempt). Not longer: while a top-level await waits for a promise that nothing can
  // settle (main() awaiting one such), bun spins a core, where without one it ends.
  let wake;
  const moment = new Promise((resolve) => {
    wake = setTimeout(resolve, TOP_LEVEL_WAIT_MS);
  });
  await Promise.race([runJob(), moment]);
  clearTimeout(wake);
}
