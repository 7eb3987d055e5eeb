//! The supervisor: the small process between a worker and bun that owns the action's whole process
//! tree (ADR-0011), run as `wf __supervise`. The worker starts it with a parent-death signal, so a
//! worker that dies, even by SIGKILL, takes the job with it. It is not dumpable and holds nothing
//! but the action's own environment.
//!
//! - In a sandbox (the default, see `sandbox`): bun runs under the sandbox's init, PID 1 of its own
//!   namespaces; stopping the job is killing init, after which the kernel kills the rest.
//! - Without (`--isolation none`): cgroups may not be writable on the machines wf runs on, and a
//!   process group does not hold a descendant that calls setsid() or setpgid(). So the supervisor
//!   marks itself child subreaper: every descendant whose parent dies is reparented to it instead
//!   of to PID 1, which keeps the whole tree reachable through parent links in /proc. To stop the
//!   job it kills every descendant it finds there, again and again until none is left, and reaps
//!   them all (PID 1 here may not reap zombies). A supervisor killed by SIGKILL cannot do this.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use serde::{Deserialize, Serialize};

use super::memcg::{MemoryCgroup, OomKill};
use super::sandbox;

/// Signals that stop the job: the worker's stop() and the parent-death signal send SIGTERM; INT and
/// HUP come from an operator or a terminal.
const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// How often the supervisor looks at its parent even when no signal comes (the parent-death signal
/// is the fast path; this covers a worker that died before it could be armed).
const PARENT_CHECK: Duration = Duration::from_secs(1);

/// A process that survives SIGKILL this long is stuck in the kernel (uninterruptible I/O); the
/// supervisor then says so and exits rather than hold the worker's slot forever.
const KILL_PATIENCE: Duration = Duration::from_secs(30);

/// What to supervise. Travels as JSON in the supervisor's environment (`PLAN_VARIABLE`), never passed
/// on to bun: not on its command line, which every user of the host can read, and which a sandbox's
/// init (the supervisor forked) would show the action, with the host's paths of `WF_HOME`. The
/// values of bun's variables are not in it: `keep` names them, the values come from the
/// supervisor's own environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Supervision {
    /// The worker's pid: a supervisor whose parent is already another process exits at once.
    pub parent: i32,
    /// bun's working directory (without a sandbox).
    pub cwd: PathBuf,
    /// Where the supervisor writes how bun ended (`{"name","message"}`), for the worker's Outcome.
    pub status: PathBuf,
    /// The environment variables passed to bun; nothing else of the supervisor's environment is.
    pub keep: Vec<String>,
    /// Set for the values of these variables instead of the supervisor's own (inside a sandbox,
    /// PATH and HOME name the sandbox's folders).
    pub set: Vec<(String, String)>,
    /// bun and its arguments.
    pub command: Vec<String>,
    /// The sandbox to run bun in; None for `--isolation none`.
    pub sandbox: Option<sandbox::Plan>,
    /// Our stdin holds a warm runner's requests: bun reads them from REQUESTS_FD.
    pub requests: bool,
    /// The worker's self-fence, in milliseconds (`Spec::fence`): a worker stopped about this long
    /// can no longer stop the job before a reaper requeues it, so the supervisor does.
    pub fence_ms: Option<u64>,
}

/// How a worker and its supervisor work together: the plan and the way bun gets its requests. A
/// worker refuses a supervisor that answers another (`SupervisorExe::check`); changed with either.
pub(crate) const PROTOCOL: u32 = 3;

/// Where a warm runner's bun reads its requests. Its stdin is /dev/null, as a cold attempt's: an
/// action that reads its stdin finds it empty, and takes no request meant for the runner.
pub(crate) const REQUESTS_FD: libc::c_int = 3;

/// The status name of an attempt its supervisor stopped because its worker was stopped too long
/// (`WorkerWatch`): the worker records nothing for it and leaves the job to the reaper, as its own
/// self-fence does.
pub(crate) const WORKER_STOPPED: &str = "WorkerStopped";

/// The variable holding the supervision plan.
pub(crate) const PLAN_VARIABLE: &str = "WF_SUPERVISION";

impl Supervision {
    pub(crate) fn to_json(&self) -> Result<String> {
        serde_json::to_string(self).context("encoding the supervision plan")
    }

    pub(crate) fn from_env() -> Result<Supervision> {
        let plan = std::env::var(PLAN_VARIABLE)
            .with_context(|| format!("{PLAN_VARIABLE} is not set (wf __supervise is internal to wf work)"))?;
        serde_json::from_str(&plan).context("reading the supervision plan (wf __supervise is internal to wf work)")
    }

    /// bun's environment: the kept variables with the supervisor's values, then the set ones. The
    /// one read of the environment outside `config`, and on purpose: the worker started this
    /// process with exactly the action's environment, which is what bun must get.
    fn environment(&self) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = self
            .keep
            .iter()
            .filter(|name| !self.set.iter().any(|(key, _)| key == *name))
            .filter_map(|name| std::env::var(name).ok().map(|value| (name.clone(), value)))
            .collect();
        env.extend(self.set.iter().cloned());
        env
    }
}

/// How the attempt ended, as written to the status file: bun's exit code when it exited by
/// itself, and a JobError's name and message for when there is no result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Status {
    pub code: Option<i32>,
    pub name: String,
    pub message: String,
}

/// How the supervised command came to an end.
enum Ending {
    /// bun ended by itself, with this wait status.
    Finished(libc::c_int),
    /// A stop signal arrived before bun ended.
    Stopped(libc::c_int),
    /// The worker that started us is gone.
    Orphaned,
    /// The worker has been stopped this long: past its self-fence (`WorkerWatch`).
    WorkerStopped(Duration),
    /// The attempt was killed for memory or processes: by the sandbox's init at a limit, or by
    /// the kernel's OOM killer.
    Limit(Status),
    /// bun could not be started (or its sandbox not built).
    NotStarted(String),
    /// The sandbox's init died without a report (killed from outside, e.g. by the OOM killer); its
    /// wait status, unless it could not be reaped within KILL_PATIENCE.
    InitDied(Option<libc::c_int>),
}

/// Exec made this process dumpable again: its plan (the host's paths of the attempt) and the job's
/// token in its environment would be open to every process of its user. Called first thing by the
/// supervisor's entry points: until then (its exec and loading, about a millisecond) they are. Also
/// gives the process its name.
pub(crate) fn not_dumpable() -> Result<()> {
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .context("making the supervisor not dumpable")?;
    // The name `ps` and `top` show: the worker starts this binary through /proc/self/fd/N, which
    // would name every supervisor after the descriptor ("3").
    rustix::thread::set_name(NAME).context("naming the supervisor")
}

/// The supervisor's process name (`/proc/PID/comm`).
pub(crate) const NAME: &std::ffi::CStr = c"wf-supervise";

/// Run the command under supervision until it ends or is stopped; every process of the attempt is
/// dead and reaped when this returns (but one stuck in the kernel past KILL_PATIENCE, left to it).
/// Returns the exit code for the supervisor: bun's code, or 128 + the signal that ended bun or
/// stopped the job, or 127 when bun could not be started.
pub(crate) fn supervise(plan: &Supervision) -> Result<i32> {
    join_own_session_keyring().context("giving the attempt a session keyring of its own")?;
    if plan.requests {
        move_requests().context("moving the warm runner's requests off stdin")?;
    }
    let signals = take_signals()?;
    // The worker dying, even by SIGKILL, stops the job. The parent-death signal is only sent if the
    // worker dies after it was armed; had it died earlier, we were already adopted by someone else.
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM))
        .context("arming the supervisor's parent-death signal")?;
    if worker_gone(plan) {
        write_status(plan, None, "ProcessError", "stopped: the worker was gone before the action started");
        return Ok(128 + libc::SIGTERM);
    }
    let (ending, init, memory) = match &plan.sandbox {
        Some(sandbox) => run_sandboxed(plan, sandbox, &signals),
        None => (run_plain(plan, &signals)?, None, None),
    };
    let ending = match (&memory, &plan.sandbox) {
        (Some(memory), Some(sandbox)) => killed_for_memory(ending, memory, sandbox.limits.memory_mb),
        _ => ending,
    };
    let (code, name, message, exit) = match ending {
        Ending::Finished(status) if libc::WIFEXITED(status) => {
            let code = libc::WEXITSTATUS(status);
            (Some(code), "ProcessError".to_string(), format!("bun exited with code {code}"), code)
        }
        Ending::Finished(status) => {
            let signal = libc::WTERMSIG(status);
            (None, "ProcessError".to_string(), format!("bun was killed by signal {signal}"), 128 + signal)
        }
        Ending::Stopped(signal) => {
            (None, "ProcessError".to_string(), format!("stopped by signal {signal} before bun finished"), 128 + signal)
        }
        Ending::Orphaned => {
            (None, "ProcessError".to_string(), "stopped: the worker is gone".to_string(), 128 + libc::SIGTERM)
        }
        Ending::WorkerStopped(stopped) => {
            let message = format!(
                "stopped: the worker was stopped (SIGSTOP or a debugger) for {} s, too long to keep its job from \
                 a reaper",
                stopped.as_secs()
            );
            say(&message);
            (None, WORKER_STOPPED.to_string(), message, 128 + libc::SIGTERM)
        }
        Ending::Limit(status) => (None, status.name, status.message, 128 + libc::SIGKILL),
        Ending::NotStarted(message) => {
            say(&message);
            (None, "ProcessError".to_string(), message, 127)
        }
        Ending::InitDied(status) => {
            let how = match status {
                Some(status) if libc::WIFSIGNALED(status) => format!("was killed by signal {}", libc::WTERMSIG(status)),
                Some(status) => format!("exited with code {}", libc::WEXITSTATUS(status)),
                None => format!("died and its processes did not all die within {KILL_PATIENCE:?}"),
            };
            let message = format!("the sandbox's init {how}: every process of the action was killed");
            (None, "ProcessError".to_string(), message, 128 + libc::SIGKILL)
        }
    };
    write_status(plan, code, &name, &message);
    if let Some(init) = init {
        // The worker ends the attempt when the pipes close, after the status: let go of them now,
        // then reap init, which exits as slowly as the kernel dismantles its namespaces.
        release_output();
        reap_within(init, &signals);
    }
    drop(memory);
    Ok(exit)
}

/// How an attempt ended that the kernel's OOM killer had a hand in: bun, init or a process bun
/// started was killed, and bun (or init) then ended by a signal.
fn killed_for_memory(ending: Ending, memory: &MemoryCgroup, memory_mb: u32) -> Ending {
    let (Ending::Finished(status) | Ending::InitDied(Some(status))) = ending else { return ending };
    if !libc::WIFSIGNALED(status) {
        return ending;
    }
    let message = match memory.oom_kill() {
        OomKill::None => return ending,
        OomKill::OwnLimit => {
            let message =
                format!("the action used more than its limit of {memory_mb} MiB of memory (memory_mb) and was killed");
            return Ending::Limit(Status { code: None, name: "MemoryLimit".to_string(), message });
        }
        OomKill::Elsewhere => format!(
            "the kernel killed a process of the action when its worker's memory cgroup or the host ran out of \
             memory (not at the action's memory_mb of {memory_mb} MiB)"
        ),
    };
    Ending::Limit(Status { code: None, name: "ProcessError".to_string(), message })
}

/// Reap `pid`, a child of ours that is dying: its wait status, or none when it is still not reaped
/// after KILL_PATIENCE. The kernel reaps a namespace's init only once every process of the namespace
/// is dead, and one stuck in uninterruptible I/O (a hung network mount) dies only when its I/O ends:
/// such a process is left to the kernel, and the attempt still ends.
fn reap_within(pid: i32, signals: &Signals) -> Option<libc::c_int> {
    let deadline = Instant::now() + KILL_PATIENCE;
    loop {
        if let Some(status) = reap_exited(pid) {
            return Some(status);
        }
        if Instant::now() >= deadline {
            say(&format!("the sandbox's processes did not all die within {KILL_PATIENCE:?} of SIGKILL"));
            return None;
        }
        signals.wait(PARENT_CHECK);
    }
}

/// Without a sandbox: bun is our child, and we are the child subreaper of everything it starts.
/// The attempt's own session keyring, empty, in place of the worker's: whoever inherits a session
/// keyring possesses its keys (a database password, a Kerberos ticket the worker was started with),
/// across a user namespace too.
fn join_own_session_keyring() -> io::Result<()> {
    const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
    // SAFETY: keyctl with a null name reads no memory of this process.
    let joined =
        unsafe { libc::syscall(libc::SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, std::ptr::null::<libc::c_char>()) };
    if joined >= 0 {
        return Ok(());
    }
    match io::Error::last_os_error() {
        // No keyrings here (a kernel without them, a seccomp filter that refuses keyctl): the
        // action can reach none either.
        error if matches!(error.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => Ok(()),
        error => Err(error),
    }
}

fn run_plain(plan: &Supervision, signals: &Signals) -> Result<Ending> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .context("marking the supervisor child subreaper")?;
    let bun = match spawn(plan) {
        Ok(pid) => pid,
        Err(error) => return Ok(Ending::NotStarted(format!("could not start {}: {error}", plan.command[0]))),
    };
    let mut worker = WorkerWatch::default();
    let ending = loop {
        let stop = signals.wait(PARENT_CHECK);
        if let Some(status) = reap_exited(bun) {
            break Ending::Finished(status);
        }
        if let Some(signal) = stop {
            break Ending::Stopped(signal);
        }
        if let Some(ending) = worker.check(plan) {
            break ending;
        }
    };
    // The job is over either way: whatever it left running goes with it.
    let survivors = kill_tree();
    if survivors > 0 {
        say(&format!("{survivors} process(es) of the action did not die within {KILL_PATIENCE:?} of SIGKILL"));
    }
    Ok(ending)
}

/// In a sandbox: init is our only child; killing it kills every process of the attempt. Returns
/// init's pid when it is still to be reaped: it reported, and every process of the attempt is
/// dead, but it is still exiting; and the attempt's memory cgroup, to be removed after.
fn run_sandboxed(
    plan: &Supervision,
    sandbox: &sandbox::Plan,
    signals: &Signals,
) -> (Ending, Option<i32>, Option<MemoryCgroup>) {
    let mut init = match sandbox::start(sandbox, &plan.command, &plan.environment(), plan.requests) {
        Ok(init) => init,
        Err(error) => {
            return (Ending::NotStarted(format!("the sandbox could not be set up: {error:#}")), None, None);
        }
    };
    let memory = init.memory.take();
    let mut worker = WorkerWatch::default();
    let stopped = loop {
        match wait_readable([signals.fd.as_fd(), init.report_fd()], PARENT_CHECK) {
            Ok(ready) if ready[1] => match init.read_report() {
                Ok(false) => continue,
                Ok(true) | Err(_) => {
                    let ending = match init.report() {
                        Some(sandbox::Report::Ended(status)) => Ending::Finished(status),
                        Some(sandbox::Report::Limit { name, message }) => {
                            Ending::Limit(Status { code: None, name, message })
                        }
                        Some(sandbox::Report::Setup(message)) => {
                            Ending::NotStarted(format!("the sandbox could not be set up: {message}"))
                        }
                        // Init died without a report: its end must be known first.
                        None => return (Ending::InitDied(reap_within(init.pid, signals)), None, memory),
                    };
                    return (ending, Some(init.pid), memory);
                }
            },
            Ok(_) | Err(_) => {}
        }
        if let Some(signal) = signals.pending_stop() {
            break Ending::Stopped(signal);
        }
        if let Some(ending) = worker.check(plan) {
            break ending;
        }
    };
    // SIGKILL to a namespace's init from outside kills it, and the kernel then kills every process
    // in its namespace before init is reaped.
    kill(init.pid);
    reap_within(init.pid, signals);
    (stopped, None, memory)
}

/// Wait until one of `fds` is readable (or closed), at most `timeout`; which ones are.
fn wait_readable<const N: usize>(fds: [BorrowedFd<'_>; N], timeout: Duration) -> io::Result<[bool; N]> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut polls = fds.map(|fd| PollFd::from_borrowed_fd(fd, PollFlags::IN));
    let timeout = Timespec::try_from(timeout).unwrap_or(Timespec { tv_sec: 1, tv_nsec: 0 });
    rustix::event::poll(&mut polls, Some(&timeout))?;
    Ok(polls.map(|poll| !poll.revents().is_empty()))
}

/// Point stdout and stderr at /dev/null: the worker's pipes close once nobody else holds them.
fn release_output() {
    if let Ok(null) = fs::File::options().write(true).open("/dev/null") {
        let _ = rustix::stdio::dup2_stdout(&null);
        let _ = rustix::stdio::dup2_stderr(&null);
    }
}

/// SIGKILL a process of ours (an unreaped child or descendant: its pid cannot have been reused).
fn kill(pid: i32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

fn worker_gone(plan: &Supervision) -> bool {
    rustix::process::getppid().map(|pid| pid.as_raw_nonzero().get()) != Some(plan.parent)
}

/// The worker, looked at every PARENT_CHECK while the action runs: gone, or stopped for too long.
#[derive(Default)]
struct WorkerWatch {
    /// When it was first seen stopped, this time.
    stopped_since: Option<Instant>,
}

impl WorkerWatch {
    /// How the attempt ends because of its worker, if it does. A stopped worker (SIGSTOP, a
    /// debugger) neither beats nor fences its job: once it has been stopped for its self-fence,
    /// less two looks of ours (its last beat may be one heartbeat older; we see the stop up to one
    /// look late), a reaper may soon requeue the job, and another attempt must not find this one
    /// still running.
    fn check(&mut self, plan: &Supervision) -> Option<Ending> {
        if worker_gone(plan) {
            return Some(Ending::Orphaned);
        }
        let fence = Duration::from_millis(plan.fence_ms?);
        let state = stat_fields(plan.parent).and_then(|fields| fields.into_iter().next());
        if !matches!(state.as_deref(), Some("T" | "t")) {
            self.stopped_since = None;
            return None;
        }
        let stopped = self.stopped_since.get_or_insert_with(Instant::now).elapsed();
        (stopped + 2 * PARENT_CHECK >= fence).then_some(Ending::WorkerStopped(stopped))
    }
}

/// The supervisor's signals (the stop signals and SIGCHLD): blocked, so that they queue up instead
/// of running handlers, and read from a signalfd.
pub(super) struct Signals {
    fd: SignalFd,
}

/// Take the signals. Their dispositions are reset first: an ignored signal is discarded instead of
/// queued, and the worker's parent may have left some ignored across exec (`nohup` ignores SIGHUP;
/// an ignored SIGCHLD would even make the kernel reap bun behind our back).
fn take_signals() -> Result<Signals> {
    let mut set = SigSet::empty();
    for number in STOP_SIGNALS.into_iter().chain([libc::SIGCHLD]) {
        let signal = Signal::try_from(number).context("a signal of the supervisor")?;
        // SAFETY: SIG_DFL installs no handler, so no code of ours can run in a signal context.
        unsafe { nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigDfl) }
            .context("resetting the supervisor's signals")?;
        set.add(signal);
    }
    set.thread_block().context("blocking signals in the supervisor")?;
    Signals::read(&set).context("reading the supervisor's signals")
}

impl Signals {
    /// Read `set`, whose signals are blocked already (or inherited blocked).
    pub(super) fn read(set: &SigSet) -> nix::Result<Signals> {
        Ok(Signals { fd: SignalFd::with_flags(set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)? })
    }

    /// Wait until a signal of ours is pending, at most `timeout`; the stop signal among those
    /// consumed, if any.
    pub(super) fn wait(&self, timeout: Duration) -> Option<libc::c_int> {
        let _ = wait_readable([self.fd.as_fd()], timeout);
        self.pending_stop()
    }

    /// Consume the pending signals; the last stop signal among them, if any.
    fn pending_stop(&self) -> Option<libc::c_int> {
        let mut stop = None;
        while let Ok(Some(info)) = self.fd.read_signal() {
            let signal = info.ssi_signo as libc::c_int;
            if STOP_SIGNALS.contains(&signal) {
                stop = Some(signal);
            }
        }
        stop
    }
}

/// Our stdin (the requests' pipe) to REQUESTS_FD, inherited by bun, and /dev/null as stdin. Done
/// first, before this process opens anything that could take that number.
fn move_requests() -> io::Result<()> {
    // SAFETY: dup2 of our own stdin onto a number no descriptor of ours holds yet; the copy has no
    // close-on-exec, so bun (and a sandbox's init before it) inherits it.
    if unsafe { libc::dup2(0, REQUESTS_FD) } != REQUESTS_FD {
        return Err(io::Error::last_os_error());
    }
    rustix::stdio::dup2_stdin(fs::File::open("/dev/null")?)?;
    Ok(())
}

/// Start bun in `cwd`, with only the kept environment variables, stdin from /dev/null and our
/// stdout/stderr (the worker's pipes). Returns its pid; it is reaped by `reap_exited`.
fn spawn(plan: &Supervision) -> io::Result<i32> {
    let mut command = Command::new(&plan.command[0]);
    command.args(&plan.command[1..]).current_dir(&plan.cwd).env_clear().envs(plan.environment()).stdin(Stdio::null());
    // SAFETY: between fork and exec, one async-signal-safe call (pthread_sigmask) that allocates
    // nothing: bun must not inherit the signals we blocked for ourselves.
    unsafe {
        command.pre_exec(|| Ok(SigSet::empty().thread_set_mask()?));
    }
    let child = command.spawn()?;
    // The Child handle is dropped without waiting: we reap with waitpid(-1), which also collects
    // the orphans we adopt.
    Ok(child.id() as i32)
}

/// Reap every child that has exited: bun, and any adopted descendant. Returns bun's wait status
/// when bun was among them.
fn reap_exited(bun: i32) -> Option<libc::c_int> {
    let mut bun_status = None;
    while let Ok(Some((pid, status))) = rustix::process::wait(rustix::process::WaitOptions::NOHANG) {
        if pid.as_raw_nonzero().get() == bun {
            bun_status = Some(status.as_raw());
        }
    }
    bun_status
}

/// SIGKILL every descendant and reap it, round after round, until none is left: a process can fork
/// between our look at /proc and our kill, and its child is then reparented to us and caught by
/// the next round. Returns how many were still there when patience ran out (0 normally).
fn kill_tree() -> usize {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let deadline = Instant::now() + KILL_PATIENCE;
    loop {
        // bun, if still to be reaped, is no longer of interest: its status is not wanted here.
        reap_exited(0);
        // The common end: bun exited and left nothing running. A living descendant would have a
        // chain of living parents up to a child of ours (an orphan is reparented to us, the
        // subreaper), so without a child there is none, and /proc need not be read.
        if !has_children() {
            return 0;
        }
        let descendants = match descendants_of(me) {
            Ok(descendants) => descendants,
            Err(error) => {
                say(&format!("cannot list the action's processes in /proc: {error}"));
                return 0;
            }
        };
        if descendants.is_empty() {
            return 0;
        }
        if Instant::now() > deadline {
            return descendants.len();
        }
        for pid in &descendants {
            // Our descendant (zombies included, where it is a no-op).
            kill(*pid);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Whether this process has a child, running or exited and not yet reaped.
pub(crate) fn has_children() -> bool {
    use rustix::process::{WaitId, WaitIdOptions};
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    !matches!(rustix::process::waitid(WaitId::All, options), Err(rustix::io::Errno::CHILD))
}

/// Every process whose chain of parents leads to `root`, zombies included.
fn descendants_of(root: i32) -> io::Result<Vec<i32>> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for entry in fs::read_dir("/proc")?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<i32>().ok()) else { continue };
        if let Some(parent) = parent_of(pid) {
            children.entry(parent).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut next = vec![root];
    while let Some(pid) = next.pop() {
        if let Some(kids) = children.get(&pid) {
            found.extend_from_slice(kids);
            next.extend_from_slice(kids);
        }
    }
    Ok(found)
}

/// The parent pid from /proc/PID/stat. None when the process is gone.
fn parent_of(pid: i32) -> Option<i32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

/// The fields of /proc/PID/stat after the command name, from the state on (`pid (comm) state ppid
/// ...`; comm may hold spaces and parentheses, so they are read after the last `)`): index 1 is the
/// parent pid, 11 and 12 user and system time, 13 and 14 those of the children waited for, in
/// clock ticks. None when the process is gone.
pub(crate) fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat[stat.rfind(')')? + 1..].split_whitespace().map(str::to_string).collect())
}

fn write_status(plan: &Supervision, code: Option<i32>, name: &str, message: &str) {
    let status = Status { code, name: name.to_string(), message: message.to_string() };
    if let Err(error) =
        serde_json::to_vec(&status).map_err(io::Error::from).and_then(|bytes| fs::write(&plan.status, bytes))
    {
        say(&format!("cannot write {}: {error}", plan.status.display()));
    }
}

/// A message for the job's log (our stderr is the worker's pipe). Unlike eprintln!, it does not
/// panic when the worker is gone and the pipe with it: the supervisor still has a tree to kill.
fn say(message: &str) {
    use std::io::Write;
    let _ = writeln!(io::stderr(), "wf: {message}");
}
