//! One attempt of one job: start the supervisor, pump its output, stop it on demand, read the
//! result, clean up.

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::Value;
use uuid::Uuid;

use super::scratch::{ScratchRoot, remove_tree};
use super::supervisor::Supervision;
use super::{pump, resolve_bun};

/// Variables of the worker's own environment that an action gets (SPEC: Action contract), besides
/// the WF_* variables the worker gives it.
const INHERITED: [&str; 3] = ["PATH", "HOME", "TZ"];

/// Lines buffered between the pipes and the worker. When the worker falls behind, the action
/// blocks on its next write instead of the worker's memory growing.
const EVENT_BUFFER: usize = 4096;

/// After the supervisor exited, how long its pipes may stay open. They close at once unless a
/// process outside the supervisor's reach (the supervisor itself was SIGKILLed) still holds them;
/// the attempt must still end.
const PIPE_GRACE: Duration = Duration::from_secs(5);

/// Everything needed to run one attempt.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The bun executable (WF_BUN, else `bun` on PATH).
    pub bun: String,
    /// The `wf` binary that runs the supervisor (`wf __supervise`).
    pub wf_exe: PathBuf,
    /// The action wrapper (`ScratchRoot::wrapper`).
    pub wrapper: PathBuf,
    /// Absolute path of the action's module inside the source store (a read-only tree).
    pub entrypoint: PathBuf,
    pub input: Value,
    /// WF_JOB_ID, WF_TOKEN, WF_APP, ... as the worker gives them.
    pub env: Vec<(String, String)>,
    /// A directory for this attempt that does not exist yet, inside a ScratchRoot.
    pub scratch: PathBuf,
}

impl Spec {
    /// A spec for attempt `attempt` of job `job_id`, running under this worker's scratch root.
    pub fn new(
        root: &ScratchRoot,
        job_id: &Uuid,
        attempt: i32,
        entrypoint: PathBuf,
        input: Value,
        env: Vec<(String, String)>,
    ) -> Spec {
        Spec {
            bun: crate::config::bun_path(),
            // The worker's own binary, even after an upgrade replaced or deleted the file on disk:
            // its supervisor then speaks the same protocol.
            wf_exe: PathBuf::from("/proc/self/exe"),
            wrapper: root.wrapper().to_path_buf(),
            entrypoint,
            input,
            env,
            scratch: root.attempt_dir(job_id, attempt),
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
    /// No result: bun exited or was killed before main() settled; says how.
    Died(String),
    /// stop() was called before the action finished.
    Stopped,
}

/// The supervisor process as shared between the Running handle and its waiter thread.
struct Supervisor {
    pid: i32,
    /// Set once the waiter reaped the supervisor: from then on its pid may belong to another
    /// process, so stop() must not signal it.
    reaped: Mutex<bool>,
    stop_requested: AtomicBool,
    /// Tells the pipe readers to give up on pipes that never close.
    abandon_pipes: AtomicBool,
}

/// An attempt in progress.
pub struct Running {
    /// The action's output, then `Event::Done`. Read it until Done, then call `finish`.
    pub events: Receiver<Event>,
    supervisor: Arc<Supervisor>,
    waiter: Option<JoinHandle<io::Result<ExitStatus>>>,
    scratch: PathBuf,
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
        prepare_scratch(&paths, &spec.input)
            .with_context(|| format!("preparing the scratch directory {}", spec.scratch.display()))?;
        match spawn(&spec, &bun, &paths) {
            Ok(running) => Ok(running),
            Err(error) => {
                let _ = remove_tree(&spec.scratch);
                Err(error)
            }
        }
    }

    /// Ask the supervisor to kill the whole tree now. Idempotent; harmless after the end.
    pub fn stop(&self) {
        self.supervisor.stop_requested.store(true, Ordering::SeqCst);
        let reaped = self.supervisor.reaped.lock().unwrap_or_else(PoisonError::into_inner);
        if !*reaped {
            // SAFETY: the pid is our unreaped child (checked under the lock the waiter reaps with).
            unsafe { libc::kill(self.supervisor.pid, libc::SIGTERM) };
        }
    }

    /// The outcome, once the attempt is over: call after `Event::Done` (events still unread are
    /// discarded; called earlier, this waits for the end). Reaps the supervisor, reads the result,
    /// and removes the scratch directory.
    ///
    /// A result the action produced wins over stop(): an action that finished just before it was
    /// stopped reports its real outcome (SPEC: a finished job completes with its real outcome).
    pub fn finish(mut self) -> Outcome {
        while let Ok(event) = self.events.recv() {
            if event == Event::Done {
                break;
            }
        }
        let status = match self.waiter.take().map(JoinHandle::join) {
            Some(Ok(Ok(status))) => Some(status),
            _ => None,
        };
        let paths = Paths::new(&self.scratch);
        let outcome = match read_result(&paths.result) {
            Some(outcome) => outcome,
            None if self.supervisor.stop_requested.load(Ordering::SeqCst) => Outcome::Stopped,
            None => Outcome::Died(how_it_died(&paths.status, status)),
        };
        // A directory that cannot be removed now goes with the scratch root (dropped at the
        // worker's exit, or swept by the next worker).
        let _ = remove_tree(&self.scratch);
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

/// The layout of an attempt's scratch directory. `cwd` is the action's; `io` is outside it so the
/// action's own files never collide with the runner's.
struct Paths {
    cwd: PathBuf,
    io: PathBuf,
    input: PathBuf,
    result: PathBuf,
    status: PathBuf,
}

impl Paths {
    fn new(scratch: &Path) -> Paths {
        let io = scratch.join("io");
        Paths {
            cwd: scratch.join("cwd"),
            input: io.join("input.json"),
            result: io.join("result.json"),
            status: io.join("status"),
            io,
        }
    }
}

fn prepare_scratch(paths: &Paths, input: &Value) -> io::Result<()> {
    let scratch = paths.cwd.parent().expect("cwd is inside the scratch directory");
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
    builder.create(&paths.cwd)?;
    builder.create(&paths.io)?;
    fs::write(&paths.input, serde_json::to_vec(input)?)
}

fn spawn(spec: &Spec, bun: &Path, paths: &Paths) -> Result<Running> {
    let utf8 = |path: &Path| {
        path.to_str().map(str::to_string).with_context(|| format!("{} is not valid UTF-8", path.display()))
    };
    let mut env: Vec<(String, String)> = spec.env.clone();
    for name in INHERITED {
        if !env.iter().any(|(key, _)| key == name)
            && let Ok(value) = std::env::var(name)
        {
            env.push((name.to_string(), value));
        }
    }
    let plan = Supervision {
        parent: std::process::id() as i32,
        cwd: paths.cwd.clone(),
        status: paths.status.clone(),
        keep: env.iter().map(|(key, _)| key.clone()).collect(),
        command: vec![
            utf8(bun)?,
            "run".to_string(),
            utf8(&spec.wrapper)?,
            utf8(&spec.entrypoint)?,
            utf8(&paths.input)?,
            utf8(&paths.result)?,
        ],
    };

    let mut command = Command::new(&spec.wf_exe);
    command
        .arg0("wf")
        .arg("__supervise")
        .args(plan.to_args()?)
        // The supervisor gets exactly the action's environment: the worker's own (WF_SECRET,
        // DATABASE_URL, ...) stays with the worker.
        .env_clear()
        .envs(env)
        .current_dir(paths.cwd.parent().expect("cwd is inside the scratch directory"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls (setpgid, prctl) between fork and exec.
    unsafe {
        command.pre_exec(|| {
            // Its own process group: a terminal's Ctrl-C reaches the worker, which decides (grace,
            // requeue); it must not kill the job behind the worker's back.
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The worker dying, even by SIGKILL, stops the job.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .with_context(|| format!("starting the action supervisor {} __supervise", spec.wf_exe.display()))?;

    let supervisor = Arc::new(Supervisor {
        pid: child.id() as i32,
        reaped: Mutex::new(false),
        stop_requested: AtomicBool::new(false),
        abandon_pipes: AtomicBool::new(false),
    });
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
            // SAFETY: our unreaped child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
            return Err(error);
        }
    };
    let waiter_supervisor = supervisor.clone();
    let waiter = std::thread::Builder::new()
        .name("wf-action-waiter".to_string())
        .spawn(move || {
            let status = wait_reaping_under_lock(&mut child, &waiter_supervisor);
            let deadline = Instant::now() + PIPE_GRACE;
            for _ in 0..readers.len() {
                let left = deadline.saturating_duration_since(Instant::now());
                if closed_rx.recv_timeout(left).is_err() {
                    break;
                }
            }
            waiter_supervisor.abandon_pipes.store(true, Ordering::SeqCst);
            for reader in readers {
                let _ = reader.join();
            }
            let _ = events_tx.send(Event::Done);
            status
        })
        .context("starting the supervisor's waiter thread")?;
    Ok(Running { events, supervisor, waiter: Some(waiter), scratch: spec.scratch.clone() })
}

/// A thread that pumps one of the supervisor's pipes into events and says when it is done.
fn spawn_reader(
    pipe: impl io::Read + AsRawFd + Send + 'static,
    stream: Stream,
    events: &SyncSender<Event>,
    closed: &Sender<()>,
    supervisor: &Arc<Supervisor>,
) -> Result<JoinHandle<()>> {
    let (events, closed, supervisor) = (events.clone(), closed.clone(), supervisor.clone());
    std::thread::Builder::new()
        .name("wf-action-output".to_string())
        .spawn(move || {
            pump::pump(pipe, stream, events, &supervisor.abandon_pipes);
            let _ = closed.send(());
        })
        .context("starting an output reader thread")
}

/// Wait for the supervisor to exit without reaping it, then reap it under the lock that stop()
/// takes, so stop() never signals a pid that was reaped and may have been reused.
fn wait_reaping_under_lock(child: &mut Child, supervisor: &Supervisor) -> io::Result<ExitStatus> {
    loop {
        // SAFETY: waitid with a zeroed siginfo_t we own; WNOWAIT leaves the child unreaped.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `info` outlives the call.
        let result = unsafe {
            libc::waitid(libc::P_PID, supervisor.pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT)
        };
        if result == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break;
        }
    }
    let mut reaped = supervisor.reaped.lock().unwrap_or_else(PoisonError::into_inner);
    let status = child.wait();
    *reaped = true;
    status
}

/// The outcome the wrapper wrote, if it wrote a well-formed one.
fn read_result(path: &Path) -> Option<Outcome> {
    let document: Value = serde_json::from_slice(&fs::read(path).ok()?).ok()?;
    match document.get("ok")?.as_bool()? {
        true => Some(Outcome::Returned(document.get("result").cloned().unwrap_or(Value::Null))),
        false => {
            let error = document.get("error")?;
            error.is_object().then(|| Outcome::Threw(error.clone()))
        }
    }
}

/// Why there is no result: the supervisor's account of how bun ended, or else how the supervisor
/// itself ended.
fn how_it_died(status_file: &Path, supervisor: Option<ExitStatus>) -> String {
    if let Ok(text) = fs::read_to_string(status_file)
        && !text.trim().is_empty()
    {
        return text.trim().to_string();
    }
    match supervisor {
        Some(status) => match (status.code(), status.signal()) {
            (Some(code), _) => format!("the action supervisor exited with code {code} before bun finished"),
            (None, Some(signal)) => format!("the action supervisor was killed by signal {signal}"),
            (None, None) => format!("the action supervisor ended: {status}"),
        },
        None => "the action supervisor could not be waited for".to_string(),
    }
}
