//! One attempt of one job: start the supervisor, pump its output, stop it on demand, read the
//! result, clean up.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::sandbox::{self, Limits};
use super::scratch::{self, ScratchRoot, Sweep, remove_tree};
use super::supervisor::{self, Status, Supervision};
use super::{pump, resolve_bun, wrapper};

/// Lines buffered between the pipes and the worker (at most 16 MiB, each line at most `MAX_LINE`).
/// When the worker falls behind, or reads nothing (a warm runner's slot between jobs, the runner
/// writing on), the action blocks on its next write instead of the worker's memory growing.
const EVENT_BUFFER: usize = 256;

/// After the supervisor exited, how long its pipes may stay open. They close at once unless a
/// process outside the supervisor's reach (the supervisor itself was SIGKILLed, without a sandbox)
/// still holds them; the attempt must still end.
const PIPE_GRACE: Duration = Duration::from_secs(5);

/// How long a warm runner whose requests ended may take to exit by itself (`Running::close`).
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// A warm job's end code when its module threw as it loaded (the wrapper's `UNLOADABLE`).
const UNLOADABLE: i32 = 2;

/// The largest result recorded; a larger one completes the job as failure (`ResultTooLarge`).
pub const MAX_RESULT_BYTES: usize = 1024 * 1024;
/// What the result file may hold beyond the result: the wrapper's `{"ok":true,"result":...}`.
const RESULT_ENVELOPE: usize = 64;

/// One line to a warm runner: its next job (see `Running::submit` and wrapper.mjs).
#[derive(Serialize)]
struct Request<'a> {
    nonce: &'a str,
    env: BTreeMap<&'a str, &'a str>,
    input: &'a Value,
}

/// How an attempt is isolated from the worker and from other attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Isolation {
    /// Its own namespaces, user and root (see `sandbox`).
    Sandbox(SandboxOptions),
    /// The worker's own user and file system; only the environment is cleaned.
    None,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxOptions {
    /// Host folders bound read-write at the same path (`--allow-write`).
    pub allow_write: Vec<PathBuf>,
    /// False: the sandbox has its own network namespace, loopback only.
    pub network: bool,
    pub limits: Limits,
}

impl Default for SandboxOptions {
    fn default() -> SandboxOptions {
        SandboxOptions { allow_write: Vec::new(), network: true, limits: Limits::default() }
    }
}

/// Everything needed to run one attempt.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The bun executable (WF_BUN, else `bun` on PATH).
    pub bun: String,
    /// The binary that runs the supervisor as `<it> __supervise` (the plan in its environment):
    /// `wf-supervise`, or `wf`.
    pub wf_exe: PathBuf,
    /// The action wrapper (`ScratchRoot::wrapper`).
    pub wrapper: PathBuf,
    /// bun's transpiler cache holding the wrapper (`ScratchRoot::transpiled`), read-only in a
    /// sandbox.
    pub transpiled: Option<PathBuf>,
    /// The pinned commit's tree in the source store (read-only to the action).
    pub source: PathBuf,
    /// The action's module, relative to `source`.
    pub entrypoint: String,
    pub input: Value,
    /// WF_JOB_ID, WF_TOKEN, WF_APP, ... and the worker's PATH, HOME and TZ, as the worker gives
    /// them: the action's whole environment (inside a sandbox, PATH and HOME are the sandbox's).
    pub env: Vec<(String, String)>,
    /// A directory for this attempt that does not exist yet, inside a ScratchRoot.
    pub scratch: PathBuf,
    /// Its root's sweeper, which removes the directory once the attempt is over; without one it is
    /// removed before `finish` returns.
    pub sweep: Option<Sweep>,
    pub isolation: Isolation,
    /// A warm runner: bun stays and runs one job per `Running::submit`, until stopped or dropped.
    /// `input` is unused then, and `env` holds only what every job of the runner shares.
    pub warm: bool,
    /// How long the worker may go without a heartbeat before it stops its own jobs (its
    /// self-fence): a worker stopped (SIGSTOP, a debugger) cannot, and its supervisor stops the
    /// attempt itself once the worker has been stopped about that long. None: no such watch.
    pub fence: Option<Duration>,
}

impl Spec {
    /// A spec for attempt `attempt` of job `job_id`, running under this worker's scratch root, in
    /// a sandbox with the default settings.
    pub fn new(
        root: &ScratchRoot,
        job_id: &Uuid,
        attempt: i32,
        source: PathBuf,
        entrypoint: &str,
        input: Value,
        env: Vec<(String, String)>,
    ) -> Spec {
        Spec {
            bun: "bun".to_string(),
            // This very binary (`wf __supervise`); a worker gives its `SupervisorExe`.
            wf_exe: PathBuf::from("/proc/self/exe"),
            wrapper: root.wrapper().to_path_buf(),
            transpiled: root.transpiled().map(Path::to_path_buf),
            source,
            entrypoint: entrypoint.to_string(),
            input,
            env,
            scratch: root.attempt_dir(job_id, attempt),
            sweep: root.sweep(),
            isolation: Isolation::Sandbox(SandboxOptions::default()),
            warm: false,
            fence: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// One line of the action's output, without its newline, cut at MAX_LINE bytes.
    Line { stream: Stream, text: String },
    /// A warm runner's job ended, with this code (0: main() returned, 1: it threw, `UNLOADABLE`:
    /// its module threw as it loaded), after all of its lines; the runner waits for the next
    /// `submit`.
    Settled { code: i32 },
    /// The supervisor exited and both pipes reached their end: no event follows.
    Done,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// main() returned this (undefined is null).
    Returned(Value),
    /// main() threw, or the module could not be loaded: `{"name","message","stack"}`.
    Threw(Value),
    /// No usable result, and why, as a job error's name and message: `ProcessError` (bun ended or
    /// was killed before main() settled), `MemoryLimit`, `ProcessLimit`, `ResultTooLarge`,
    /// `ResultUnreadable`.
    Failed { name: String, message: String },
    /// stop() was called before the action finished.
    Stopped,
}

impl Outcome {
    fn failed(name: &str, message: impl Into<String>) -> Outcome {
        Outcome::Failed { name: name.to_string(), message: message.into() }
    }
}

/// The supervisor process as shared between the Running handle and its waiter thread.
struct Supervisor {
    /// Signals go through the pidfd: it names this process even after it was reaped and its pid
    /// reused, so stop() can never hit another process.
    pidfd: OwnedFd,
    stop_requested: AtomicBool,
    /// Tells the pipe readers to give up on pipes that never close.
    abandon_pipes: AtomicBool,
    /// A warm runner's current job, as the pipe readers see its end.
    ends: Option<pump::Ends>,
    /// The job's output is past what is kept: the pipe readers drain without making lines.
    quiet: AtomicBool,
}

/// An attempt in progress.
pub struct Running {
    /// The action's output, then `Event::Done`. Read it until Done, then call `finish`.
    pub events: Receiver<Event>,
    supervisor: Arc<Supervisor>,
    waiter: Option<JoinHandle<io::Result<ExitStatus>>>,
    scratch: PathBuf,
    sweep: Option<Sweep>,
    /// A warm runner's requests: one line per job.
    requests: Option<ChildStdin>,
    /// What the requests' pipe holds (`F_GETPIPE_SZ`): a request line up to this long is written at
    /// once, since the runner has read every line before it.
    request_room: usize,
    /// The exit code of the last job a warm runner settled.
    settled: Option<i32>,
    /// The commit's tree the attempt runs from, locked shared until it ends: a tree that a writer
    /// of the store sets aside (found changed on the host) is removed only once no attempt of any
    /// worker process runs from it (`store::remove_temporary_trees` skips a locked folder).
    _source: fs::File,
}

impl Running {
    /// Prepare the scratch directory and start the supervisor, which starts bun.
    ///
    /// Call this from a thread that outlives the attempt (the worker's slot thread): the
    /// supervisor's parent-death signal fires when the thread that spawned it exits, not the
    /// process, so a short-lived spawning thread would stop the job at once.
    pub fn start(spec: Spec) -> Result<Running> {
        let bun = resolve_bun(&spec.bun)?;
        let paths = Paths::new(&spec.scratch);
        // A warm runner's jobs get their inputs with their requests (`submit`).
        let input = (!spec.warm).then_some(&spec.input);
        prepare_scratch(&paths, input)
            .with_context(|| format!("preparing the scratch directory {}", spec.scratch.display()))?;
        match spawn(&spec, &bun, &paths) {
            Ok(running) => Ok(running),
            Err(error) => {
                let _ = remove_tree(&spec.scratch);
                Err(error)
            }
        }
    }

    /// Give a warm runner its next job: an empty working directory, and a request with the job's
    /// own environment (WF_JOB_ID, WF_TOKEN, ...) and its input. The input goes with the request,
    /// not through `io`, where the action can write between its jobs (and a file made there per job
    /// cost the worker an unlink and a create). Its lines follow as events, then `Event::Settled`
    /// (read the outcome with `settled_outcome`), or `Event::Done` when bun ended instead.
    pub fn submit(&mut self, input: &Value, env: &[(String, String)]) -> Result<()> {
        let paths = Paths::new(&self.scratch);
        empty_dir(&paths.work).with_context(|| format!("emptying {}", paths.work.display()))?;
        remove_file(&paths.result).with_context(|| format!("removing {}", paths.result.display()))?;
        let nonce = Uuid::new_v4().simple().to_string();
        let ends = self.supervisor.ends.as_ref().context("submit is for a warm runner")?;
        ends.expect(&nonce);
        self.supervisor.quiet.store(false, Ordering::SeqCst);
        self.settled = None;
        let env = env.iter().map(|(key, value)| (key.as_str(), value.as_str())).collect();
        // JavaScript's line reader ends a line at U+2028 and U+2029 too, which JSON leaves as they
        // are in a string: escaped, the request stays one line (a job whose input held one waited
        // for its timeout, the runner's request loop broken).
        let text = serde_json::to_string(&Request { nonce: &nonce, env, input })?;
        let mut line = text.replace('\u{2028}', "\\u2028").replace('\u{2029}', "\\u2029").into_bytes();
        line.push(b'\n');
        let requests = self.requests.as_mut().context("submit is for a warm runner")?;
        if line.len() <= self.request_room {
            requests.write_all(&line).context("handing the job to the warm runner")?;
            return Ok(());
        }
        // A line the pipe cannot hold is written as the runner reads it, by a thread of its own: a
        // runner that reads no more (a stray timer of its last job spinning) must not hold up the
        // slot, which times the job out and stops the runner, on which the write fails and the
        // thread ends.
        let mut pipe = fs::File::from(requests.as_fd().try_clone_to_owned()?);
        std::thread::Builder::new()
            .name("wf-warm-request".to_string())
            .spawn(move || drop(pipe.write_all(&line)))
            .context("starting a thread to hand a large input to the warm runner")?;
        Ok(())
    }

    /// Note a warm runner's `Event::Settled`; its job's outcome is then `settled_outcome`.
    pub fn settle(&mut self, code: i32) {
        self.settled = Some(code);
    }

    /// Whether a warm runner took its current job (read its request): one that ended without
    /// taking it never ran it.
    pub fn taken(&self) -> bool {
        self.supervisor.ends.as_ref().is_some_and(|ends| ends.taken())
    }

    /// Whether a warm runner can run another job: not when its module failed to load (JavaScript
    /// keeps a failed import's error, so every later job would fail the same way in this bun).
    pub fn reusable(&self) -> bool {
        self.settled != Some(UNLOADABLE)
    }

    /// The outcome of the job a warm runner settled (see `settle`), read from its result file.
    pub fn settled_outcome(&self) -> Option<Outcome> {
        let code = match self.settled? {
            UNLOADABLE => 1,
            code => code,
        };
        let outcome = read_result(&Paths::new(&self.scratch).result, code);
        Some(outcome.unwrap_or_else(|| Outcome::failed("ResultUnreadable", "the warm runner wrote no result")))
    }

    /// The current job's output is past what is kept: from now on its lines are not made, only
    /// drained (a warm runner's ends of a job are still read; its next job's lines are made again).
    pub fn quiet(&self) {
        self.supervisor.quiet.store(true, Ordering::SeqCst);
    }

    /// Ask the supervisor to kill the whole tree now. Idempotent; harmless after the end. A
    /// supervisor stopped (by SIGSTOP from an action without a sandbox, which runs as its user) is
    /// continued to do so.
    pub fn stop(&self) {
        self.supervisor.stop_requested.store(true, Ordering::SeqCst);
        let _ = rustix::process::pidfd_send_signal(&self.supervisor.pidfd, rustix::process::Signal::TERM);
        let _ = rustix::process::pidfd_send_signal(&self.supervisor.pidfd, rustix::process::Signal::CONT);
    }

    /// Kill the supervisor, after a `stop` it did not act on: in a sandbox its init and every
    /// process of the attempt die with it (their parent-death signal); without one, what it had not
    /// killed yet may outlive it.
    pub fn kill(&self) {
        self.supervisor.stop_requested.store(true, Ordering::SeqCst);
        let _ = rustix::process::pidfd_send_signal(&self.supervisor.pidfd, rustix::process::Signal::KILL);
    }

    /// Whether the supervisor has exited (a warm runner that ended between jobs).
    pub fn is_over(&self) -> bool {
        use rustix::event::{PollFd, PollFlags, Timespec};
        let mut poll = [PollFd::new(&self.supervisor.pidfd, PollFlags::IN)];
        rustix::event::poll(&mut poll, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })).is_ok_and(|ready| ready > 0)
    }

    /// End a warm runner that is not needed any more, and clean up after it. Its requests end
    /// first, on which the wrapper lets bun exit by itself; one that has not ended within
    /// `CLOSE_GRACE` (or whose job is still running) is stopped.
    pub fn close(mut self) {
        self.requests = None;
        let deadline = Instant::now() + CLOSE_GRACE;
        loop {
            match self.events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Event::Done) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    self.stop();
                    break;
                }
            }
        }
        let _ = self.finish();
    }

    /// The outcome, once the attempt is over: call after `Event::Done` (events still unread are
    /// discarded; called earlier, this waits for the end). Reaps the supervisor, reads the result,
    /// and removes the scratch directory.
    ///
    /// A result the action produced wins over stop(): an action that finished just before it was
    /// stopped reports its real outcome (SPEC: a finished job completes with its real outcome).
    /// A result counts only when the wrapper itself ended bun: code 0 with `ok`, 1 without.
    pub fn finish(mut self) -> Outcome {
        while let Ok(event) = self.events.recv() {
            if event == Event::Done {
                break;
            }
        }
        let paths = Paths::new(&self.scratch);
        // The supervisor writes its account before it lets go of the pipes, so with Done it is
        // there, unless the supervisor itself was killed: then its own end tells.
        let status = read_status(&paths.status);
        let supervisor = match status {
            // It may still be reaping the sandbox's init: its thread reaps it, in the background.
            Some(_) => None,
            None => match self.waiter.take().map(JoinHandle::join) {
                Some(Ok(Ok(status))) => Some(status),
                _ => None,
            },
        };
        self.waiter = None;
        let code = status.as_ref().and_then(|status| status.code);
        let outcome = match self.settled_outcome().or_else(|| code.and_then(|code| read_result(&paths.result, code))) {
            Some(outcome) => outcome,
            None if self.supervisor.stop_requested.load(Ordering::SeqCst) => Outcome::Stopped,
            None => match status {
                Some(status) => Outcome::Failed { name: status.name, message: status.message },
                None => supervisor_ended(supervisor),
            },
        };
        // Removed in the background when the root has a sweeper. A directory that cannot be
        // removed goes with the scratch root (dropped at the worker's exit, or swept by the next
        // worker).
        let handed = self.sweep.take().is_some_and(|sweep| sweep.hand(&self.scratch));
        if !handed {
            let _ = remove_tree(&self.scratch);
        }
        outcome
    }
}

impl Drop for Running {
    /// A Running dropped without finish() (an error path in the worker) must not leave the job's
    /// processes behind.
    fn drop(&mut self) {
        if self.waiter.is_some() {
            self.stop();
        }
    }
}

/// The layout of an attempt's scratch directory: `work` is the action's working directory, `io`
/// holds its input and result (apart, so the action's own files never collide with them), `root`
/// is where a sandbox mounts its root, and `status` (the supervisor's account) is outside all
/// that the action can reach.
struct Paths {
    work: PathBuf,
    io: PathBuf,
    root: PathBuf,
    input: PathBuf,
    result: PathBuf,
    status: PathBuf,
}

impl Paths {
    fn new(scratch: &Path) -> Paths {
        let io = scratch.join("io");
        Paths {
            work: scratch.join("work"),
            root: scratch.join("root"),
            input: io.join("input.json"),
            result: io.join("result.json"),
            status: scratch.join("status"),
            io,
        }
    }
}

/// Make the attempt's folders, and its input file when it has one (a root worker's supervisor
/// gives `work`, `io` and the input to the sandbox's user: `sandbox::start`).
fn prepare_scratch(paths: &Paths, input: Option<&Value>) -> io::Result<()> {
    let scratch = paths.work.parent().expect("work is inside the scratch directory");
    let mut builder = fs::DirBuilder::new();
    builder.mode(0o700);
    if let Err(error) = builder.create(scratch) {
        if error.kind() != io::ErrorKind::AlreadyExists {
            return Err(error);
        }
        // Debris of an attempt that was never finished: the action must start in an empty cwd.
        remove_tree(scratch)?;
        builder.create(scratch)?;
    }
    builder.create(&paths.work)?;
    builder.create(&paths.io)?;
    builder.create(&paths.root)?;
    match input {
        Some(input) => write_input(paths, input),
        None => Ok(()),
    }
}

/// The attempt's input file, the action's to read, made in its fresh `io` folder before the action
/// starts (never opened if something is there already).
fn write_input(paths: &Paths, input: &Value) -> io::Result<()> {
    let mut file = fs::OpenOptions::new().write(true).create_new(true).open(&paths.input)?;
    file.write_all(&serde_json::to_vec(input)?)
}

/// Remove a file, or a link (never its target); nothing there is no error.
fn remove_file(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Remove everything in `dir`, not `dir` itself (a warm runner's working directory stays its cwd).
fn empty_dir(dir: &Path) -> io::Result<()> {
    let folder = rustix::fs::open(dir, scratch::FOLDER, rustix::fs::Mode::empty())?;
    scratch::empty_folder(&folder)
}

fn spawn(spec: &Spec, bun: &Path, paths: &Paths) -> Result<Running> {
    let source = fs::File::open(&spec.source).with_context(|| format!("opening {}", spec.source.display()))?;
    source.lock_shared().with_context(|| format!("locking {}", spec.source.display()))?;
    let utf8 = |path: &Path| {
        path.to_str().map(str::to_string).with_context(|| format!("{} is not valid UTF-8", path.display()))
    };
    let env = spec.env.clone();
    let mut plan = Supervision {
        parent: std::process::id() as i32,
        cwd: paths.work.clone(),
        status: paths.status.clone(),
        keep: env.iter().map(|(key, _)| key.clone()).collect(),
        set: Vec::new(),
        command: Vec::new(),
        sandbox: None,
        requests: spec.warm,
        fence_ms: spec.fence.map(|fence| fence.as_millis() as u64),
    };
    match &spec.isolation {
        Isolation::Sandbox(options) => {
            plan.set =
                vec![("PATH".to_string(), sandbox::PATH.to_string()), ("HOME".to_string(), sandbox::HOME.to_string())];
            if spec.transpiled.is_some() {
                plan.set.push((wrapper::CACHE_VARIABLE.to_string(), sandbox::TRANSPILED.to_string()));
            }
            plan.command = vec![
                sandbox::BUN.to_string(),
                "run".to_string(),
                sandbox::WRAPPER.to_string(),
                format!("{}/{}", sandbox::SOURCE, spec.entrypoint),
                format!("{}/input.json", sandbox::IO),
                format!("{}/result.json", sandbox::IO),
            ];
            if spec.warm {
                plan.command.push("warm".to_string());
            }
            plan.sandbox = Some(sandbox::Plan {
                source: spec.source.clone(),
                wrapper: spec.wrapper.clone(),
                transpiled: spec.transpiled.clone(),
                bun: bun.to_path_buf(),
                io: paths.io.clone(),
                work: paths.work.clone(),
                root: paths.root.clone(),
                allow_write: options.allow_write.clone(),
                network: options.network,
                limits: options.limits,
                user: sandbox::User::for_this_worker(),
                memory_cgroup: super::memcg::parent().map(Path::to_path_buf),
            });
        }
        Isolation::None => {
            if let Some(transpiled) = &spec.transpiled {
                plan.set.push((wrapper::CACHE_VARIABLE.to_string(), utf8(transpiled)?));
            }
            plan.command = vec![
                utf8(bun)?,
                "run".to_string(),
                utf8(&spec.wrapper)?,
                // The wrapper imports it by path: absolute, or bun would take it for a package.
                utf8(&std::path::absolute(spec.source.join(&spec.entrypoint))?)?,
                utf8(&paths.input)?,
                utf8(&paths.result)?,
            ];
            if spec.warm {
                plan.command.push("warm".to_string());
            }
        }
    }

    let mut command = Command::new(&spec.wf_exe);
    command
        .arg0("wf")
        .arg("__supervise")
        // The supervisor gets exactly the action's environment, and its plan: the worker's own
        // (WF_SECRET, DATABASE_URL, ...) stays with the worker.
        .env_clear()
        .envs(env)
        .env(supervisor::PLAN_VARIABLE, plan.to_json()?)
        .current_dir(paths.work.parent().expect("work is inside the scratch directory"))
        .stdin(if spec.warm { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Its own process group: a terminal's Ctrl-C reaches the worker, which decides (grace, requeue);
    // it must not kill the job behind the worker's back. The supervisor arms its parent-death
    // signal itself, first thing.
    command.process_group(0);
    let mut child = command
        .spawn()
        .with_context(|| format!("starting the action supervisor {} __supervise", spec.wf_exe.display()))?;
    // Not reaped yet, so the pid is still the supervisor's.
    let pidfd = match rustix::process::Pid::from_raw(child.id() as i32)
        .ok_or(rustix::io::Errno::SRCH)
        .and_then(|pid| rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()))
    {
        Ok(pidfd) => pidfd,
        Err(error) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::from(error)).context("opening a pidfd for the action supervisor");
        }
    };
    let supervisor = Arc::new(Supervisor {
        pidfd,
        stop_requested: AtomicBool::new(false),
        abandon_pipes: AtomicBool::new(false),
        ends: spec.warm.then(pump::Ends::default),
        quiet: AtomicBool::new(false),
    });
    let requests = child.stdin.take();
    let request_room = requests.as_ref().and_then(|pipe| rustix::pipe::fcntl_getpipe_size(pipe).ok()).unwrap_or(0);
    let (events_tx, events) = mpsc::sync_channel(EVENT_BUFFER);
    let (closed_tx, closed_rx) = mpsc::channel::<()>();
    let readers = [
        spawn_reader(
            child.stdout.take().expect("stdout is piped"),
            Stream::Stdout,
            &events_tx,
            &closed_tx,
            &supervisor,
        ),
        spawn_reader(
            child.stderr.take().expect("stderr is piped"),
            Stream::Stderr,
            &events_tx,
            &closed_tx,
            &supervisor,
        ),
    ];
    let readers = match readers {
        [Ok(stdout), Ok(stderr)] => [stdout, stderr],
        [Err(error), _] | [_, Err(error)] => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(error);
        }
    };
    let waiter_supervisor = supervisor.clone();
    let waiter = std::thread::Builder::new()
        .name("wf-action-waiter".to_string())
        .spawn(move || {
            // The attempt is over when both pipes closed: the supervisor lets go of them once it
            // wrote its account, and every process of the action is dead. It may still be
            // running then (reaping the sandbox's init): it is reaped after Done.
            let mut closed = 0;
            let mut exited: Option<io::Result<ExitStatus>> = None;
            let mut deadline = None;
            while closed < readers.len() {
                match closed_rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(()) => closed += 1,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                }
                if exited.is_none()
                    && let Ok(Some(status)) = child.try_wait()
                {
                    exited = Some(Ok(status));
                    deadline = Some(Instant::now() + PIPE_GRACE);
                }
                if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                    break;
                }
            }
            waiter_supervisor.abandon_pipes.store(true, Ordering::SeqCst);
            for reader in readers {
                let _ = reader.join();
            }
            let _ = events_tx.send(Event::Done);
            exited.unwrap_or_else(|| child.wait())
        })
        .context("starting the supervisor's waiter thread")?;
    Ok(Running {
        events,
        supervisor,
        waiter: Some(waiter),
        scratch: spec.scratch.clone(),
        sweep: spec.sweep.clone(),
        requests,
        request_room,
        settled: None,
        _source: source,
    })
}

/// A thread that pumps one of the supervisor's pipes into events and says when it is done.
fn spawn_reader(
    pipe: impl io::Read + AsFd + Send + 'static,
    stream: Stream,
    events: &SyncSender<Event>,
    closed: &Sender<()>,
    supervisor: &Arc<Supervisor>,
) -> Result<JoinHandle<()>> {
    let (events, closed, supervisor) = (events.clone(), closed.clone(), supervisor.clone());
    std::thread::Builder::new()
        .name("wf-action-output".to_string())
        .spawn(move || {
            let flags = pump::Flags { abandon: &supervisor.abandon_pipes, quiet: &supervisor.quiet };
            pump::pump(pipe, stream, events, flags, supervisor.ends.as_ref());
            let _ = closed.send(());
        })
        .context("starting an output reader thread")
}

/// The outcome the wrapper wrote, if the wrapper ended bun (`code` 0 for a returned value, 1 for
/// a thrown error) and wrote one. The file is read up to the cap, never parsed beyond it.
fn read_result(path: &Path, code: i32) -> Option<Outcome> {
    if code != 0 && code != 1 {
        return None;
    }
    let limit = MAX_RESULT_BYTES + RESULT_ENVELOPE;
    // The action can write `io`: a link there is not followed out of the sandbox, and a pipe is
    // opened without waiting for a writer, then refused.
    let file = match fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return None,
        Err(error) if error.raw_os_error() == Some(libc::ELOOP) => return Some(not_a_result()),
        Err(error) => {
            return Some(Outcome::failed("ResultUnreadable", format!("the result cannot be opened: {error}")));
        }
    };
    if !file.metadata().ok()?.is_file() {
        return Some(not_a_result());
    }
    let mut bytes = Vec::new();
    file.take(limit as u64 + 1).read_to_end(&mut bytes).ok()?;
    if bytes.len() > limit {
        return Some(Outcome::failed(
            "ResultTooLarge",
            format!("the result is more than the {MAX_RESULT_BYTES} bytes allowed"),
        ));
    }
    let document: Value = match serde_json::from_slice(&bytes) {
        Ok(document) => document,
        Err(error) => return Some(Outcome::failed("ResultUnreadable", format!("the result cannot be read: {error}"))),
    };
    match (document.get("ok")?.as_bool()?, code) {
        (true, 0) => Some(Outcome::Returned(document.get("result").cloned().unwrap_or(Value::Null))),
        (false, 1) => {
            let error = document.get("error")?;
            error.is_object().then(|| Outcome::Threw(error.clone()))
        }
        _ => None,
    }
}

fn not_a_result() -> Outcome {
    Outcome::failed("ResultUnreadable", "the result is not a regular file")
}

/// The supervisor's account of how the attempt ended, if it wrote one.
fn read_status(path: &Path) -> Option<Status> {
    serde_json::from_slice(&fs::read(path).ok()?).ok()
}

/// Why there is no result when the supervisor left no account: how the supervisor itself ended.
fn supervisor_ended(supervisor: Option<ExitStatus>) -> Outcome {
    let message = match supervisor {
        Some(status) => match (status.code(), status.signal()) {
            (Some(code), _) => format!("the action supervisor exited with code {code} before bun finished"),
            (None, Some(signal)) => format!("the action supervisor was killed by signal {signal}"),
            (None, None) => format!("the action supervisor ended: {status}"),
        },
        None => "the action supervisor could not be waited for".to_string(),
    };
    Outcome::failed("ProcessError", message)
}
