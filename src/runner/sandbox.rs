//! The sandbox of one attempt (`wf work --isolation sandbox`, the default).
//!
//! ```text
//! worker ──> wf __supervise   (the supervisor: the worker's user, the host's namespaces)
//!              └─ clone(NEWUSER | NEWPID | NEWNS | NEWIPC | NEWUTS [| NEWNET]) ──> init (PID 1)
//!                                                                                  └──> bun ──> ...
//! ```
//!
//! Direct syscalls rather than a container crate or bubblewrap: the supervisor already owns the
//! attempt's process tree and its exit protocol, and the sandbox is a handful of syscalls in the
//! process that must stay PID 1 and watch the limits, which a container library would own instead.
//!
//! - **PID namespace.** The action sees only its own processes. Init is PID 1: when it dies, the
//!   kernel kills every process of the sandbox. The supervisor stops an attempt by killing init,
//!   and init's parent-death signal is SIGKILL, so the tree kill holds even when the supervisor
//!   itself is SIGKILLed. From inside, init cannot be killed or stopped (the kernel drops SIGKILL
//!   and SIGSTOP sent to a namespace's init by its own processes).
//! - **User namespace.** One uid is mapped: the sandbox user, `nobody` (65534) for a root worker,
//!   else the worker's own uid (an unprivileged process can map only its own). bun runs as that
//!   user with no capability, no_new_privs, and no supplementary group of the worker's. A root
//!   worker maps nobody to a host uid of the attempt's own (`HOST_UIDS`), and makes the namespace
//!   as that user: the kernel's limits per user of the host (inotify instances, epoll watches,
//!   pipe buffers) count what the action holds against that uid alone, not against root's or
//!   another attempt's. Its IPC namespace is the supervisor's, made by root without System V
//!   shared memory.
//! - **Mount namespace.** A fresh tmpfs root with only the system's read-only `/usr` (and `/bin`,
//!   `/lib`, ...), a few files of `/etc`, a minimal `/dev`, a fresh `/proc` and `/tmp`, and under
//!   `/wf` the pinned commit, the wrapper, its transpiled form and bun (all read-only), and the
//!   attempt's `io` and `work` directories; plus the operator's `--allow-write` folders. Nothing
//!   of `WF_HOME`, of the store's other commits, or of other attempts. The action has no capability to remount, and
//!   in any namespace it creates for itself the kernel locks these mounts as they are.
//! - **Limits.** RLIMIT_NPROC fences the tasks (threads count) of the sandbox user in its own user
//!   namespace at `max_processes`: a fork past it fails with EAGAIN. Init looks at the sandbox's
//!   processes every LIMITS_PERIOD and ends the attempt with `MemoryLimit` (resident memory over
//!   `memory_mb`) or `ProcessLimit` (at `max_processes`). Where the worker may make memory cgroups,
//!   init is put in one of the attempt's own (`memcg`) and the kernel fences memory. Without,
//!   memory is watched, not fenced: a burst shorter than a period is not caught. An action that
//!   gives up at once on EAGAIN fails with its own error rather than `ProcessLimit`. `/tmp` and
//!   `/dev/shm` are capped at `memory_mb` each, and the sandbox's oom_score_adj is 1000, so the
//!   kernel's OOM killer picks an action before its worker. The action cannot make a user
//!   namespace (where it could mount a tmpfs of no size limit).
//! - **Landlock.** bun and what it starts cannot connect to an abstract Unix socket made outside
//!   the sandbox (with the network on, the host's are in reach otherwise), where the kernel has
//!   Landlock ABI 6 (Linux 6.12 and later).
//! - **Seccomp.** bun and what it starts cannot make the system calls `seccomp::DENIED` lists (BPF,
//!   perf events, io_uring, the keyrings, ptrace, mounts, ...), nor any by a 32-bit or x32 ABI.

use std::ffi::{CString, OsStr};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, symlink};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use nix::sys::signal::{SigSet, Signal};
use rustix::mount::{self, MountFlags, MountPropagationFlags, UnmountFlags};
use serde::{Deserialize, Serialize};

use super::memcg::MemoryCgroup;
use super::supervisor::Signals;

/// Where the attempt's things are inside the sandbox.
pub(crate) const SOURCE: &str = "/wf/source";
pub(crate) const WRAPPER: &str = "/wf/wrapper.mjs";
/// bun's transpiler cache holding the wrapper, when the worker made one.
pub(crate) const TRANSPILED: &str = "/wf/transpiled";
pub(crate) const BUN: &str = "/wf/bin/bun";
pub(crate) const IO: &str = "/wf/io";
pub(crate) const WORK: &str = "/wf/work";
/// The action's PATH and HOME inside: the worker's own would name folders that are not there.
pub(crate) const PATH: &str = "/wf/bin:/usr/local/bin:/usr/bin:/bin";
pub(crate) const HOME: &str = "/tmp";

/// The sandbox user of a root worker, as the action sees it.
const NOBODY: u32 = 65534;

/// The host uids of a root worker's attempts: each is the first plus its supervisor's pid (below
/// 2^22, Linux's highest), unique among the attempts running while it lives (the sandbox lives no
/// longer). In the range systemd leaves unallocated (0x70000000 to 0x7ffeffff): a uid that no
/// other process of the host has, not even another attempt's.
pub(crate) const HOST_UIDS: std::ops::Range<u32> = 0x7000_0000..0x7000_0000 + (1 << 22);

/// Read-only from the host, when they exist: the system (a symlink such as `/bin -> usr/bin` is
/// copied as a symlink).
const SYSTEM: [&str; 7] = ["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"];
/// Of `/etc`, only what programs need to run, resolve names and check certificates: not the rest
/// (an operator's secrets often live there).
const ETC: [&str; 17] = [
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "gai.conf",
    "group",
    "host.conf",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "protocols",
    "resolv.conf",
    "services",
];
const DEVICES: [&str; 5] = ["null", "zero", "full", "random", "urandom"];
/// Of `/etc/ssl`, the certificates and OpenSSL's settings: never `private/`, the host's keys,
/// which a worker in their group could read.
const SSL: [&str; 2] = ["ssl/certs", "ssl/openssl.cnf"];

/// Init's process name (`/proc/PID/comm`).
pub(crate) const INIT_NAME: &std::ffi::CStr = c"wf-sandbox";

/// How often init looks at the sandbox's memory and processes.
const LIMITS_PERIOD: Duration = Duration::from_millis(100);

// mount_setattr(2), which rustix does not wrap: restrict a mount (and those below it) in place.
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Resource limits of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Resident memory of all the attempt's processes together, in MiB.
    pub memory_mb: u32,
    /// Tasks (processes and their threads) of the attempt at once.
    pub max_processes: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { memory_mb: 2048, max_processes: 512 }
    }
}

/// The user the action runs as: nobody for a root worker, else the worker's own user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct User {
    /// The action's uid and gid, in the sandbox.
    pub uid: u32,
    pub gid: u32,
    /// Who that uid is on the host.
    pub host: Host,
}

/// The host user a sandbox's user is: the owner of its user namespace, and the one the kernel
/// counts what it holds against (inotify instances, epoll watches, pipe buffers, descriptors in
/// flight, signals queued, processes: limits per user of the host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Host {
    /// The same uid: a worker that is not root maps only its own.
    Same,
    /// A root worker's: a uid of HOST_UIDS for each attempt.
    PerAttempt,
    /// A root worker's whose user namespace does not map HOST_UIDS (a container's): nobody,
    /// shared by its attempts.
    Nobody,
}

impl User {
    pub(crate) fn for_this_worker() -> User {
        if rustix::process::geteuid().is_root() {
            let host = if host_uids_mapped() { Host::PerAttempt } else { Host::Nobody };
            User { uid: NOBODY, gid: NOBODY, host }
        } else {
            let (uid, gid) = (rustix::process::getuid().as_raw(), rustix::process::getgid().as_raw());
            User { uid, gid, host: Host::Same }
        }
    }

    /// The host uid of this attempt's user. Called in its supervisor, whose pid it is made of.
    fn host_uid(&self) -> u32 {
        match self.host {
            Host::Same => self.uid,
            Host::PerAttempt => HOST_UIDS.start + std::process::id(),
            Host::Nobody => NOBODY,
        }
    }
}

/// Whether this process's user namespace maps every uid of HOST_UIDS (the host's own maps all).
pub(crate) fn host_uids_mapped() -> bool {
    static MAPPED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *MAPPED.get_or_init(|| {
        let map = fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
        map.lines().any(|line| {
            let numbers: Vec<u64> = line.split_whitespace().filter_map(|n| n.parse().ok()).collect();
            matches!(numbers[..], [inside, _, count]
                if inside <= u64::from(HOST_UIDS.start) && inside + count >= u64::from(HOST_UIDS.end))
        })
    })
}

/// What the sandbox is made of: host paths, bound at the fixed places above.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Plan {
    /// The pinned commit's tree, bound read-only at SOURCE.
    pub source: PathBuf,
    pub wrapper: PathBuf,
    /// bun's transpiler cache holding the wrapper, bound read-only at TRANSPILED.
    pub transpiled: Option<PathBuf>,
    pub bun: PathBuf,
    /// The attempt's input and result, bound at IO.
    pub io: PathBuf,
    /// The action's working directory, bound at WORK.
    pub work: PathBuf,
    /// An empty directory the sandbox's root is mounted on (seen only inside).
    pub root: PathBuf,
    /// Host folders bound read-write at the same path.
    pub allow_write: Vec<PathBuf>,
    pub network: bool,
    pub limits: Limits,
    pub user: User,
    /// Where to make the attempt's memory cgroup (`memcg`), when the worker may.
    pub memory_cgroup: Option<PathBuf>,
}

/// How the attempt ended, as init tells the supervisor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Report {
    /// bun ended with this wait status.
    Ended(i32),
    /// Init ended the attempt: `MemoryLimit` or `ProcessLimit`.
    Limit { name: String, message: String },
    /// The sandbox could not be built or bun not started.
    Setup(String),
}

/// The sandbox's init, seen from the supervisor.
pub(super) struct Init {
    pub pid: i32,
    report: File,
    text: Vec<u8>,
    /// The attempt's memory cgroup, holding init and all it starts, when there is one.
    pub memory: Option<MemoryCgroup>,
    /// Held open for init's life: init takes its end closing as the supervisor's death.
    _alive: OwnedFd,
}

impl Init {
    /// Readable when init wrote its report, and at its end (init's end of the pipe closes as it
    /// exits, before the kernel dismantles its namespaces).
    pub(super) fn report_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.report)
    }

    /// Read what init wrote so far; true once its end is closed (the report is complete, or
    /// there is none).
    pub(super) fn read_report(&mut self) -> io::Result<bool> {
        let mut buffer = [0u8; 4096];
        let read = self.report.read(&mut buffer)?;
        self.text.extend_from_slice(&buffer[..read]);
        Ok(read == 0)
    }

    /// The report, once `read_report` said it is complete.
    pub(super) fn report(&self) -> Option<Report> {
        serde_json::from_slice(&self.text).ok()
    }
}

/// Clone init into new namespaces, map the sandbox user, and let it build the sandbox and run
/// `command` (bun and its arguments, inside paths) with `env`. Runs in the supervisor, which is
/// single-threaded: the clone is an ordinary fork as far as this process is concerned.
pub(super) fn start(plan: &Plan, command: &[String], env: &[(String, String)], requests: bool) -> Result<Init> {
    let command = c_strings(command.iter().map(String::as_str))?;
    let env = c_strings(env.iter().map(|(key, value)| format!("{key}={value}")))?;
    let root = rustix::process::geteuid().is_root();
    let host_uid = plan.user.host_uid();
    let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::CLONE_NEWUTS | libc::SIGCHLD;
    if !plan.network {
        flags |= libc::CLONE_NEWNET;
    }
    if root {
        // Root's supplementary groups would follow bun into the sandbox, where setgroups() is
        // refused: drop them here, before the clone.
        rustix::thread::set_thread_groups(&[]).context("dropping the supervisor's supplementary groups")?;
        give_the_attempts_folders(plan, host_uid)?;
        refuse_shared_memory()?;
    } else {
        flags |= libc::CLONE_NEWIPC;
    }
    let (go_read, go_write) = pipe()?;
    let (report_read, report_write) = pipe()?;
    use rustix::process::{DumpableBehavior, set_dumpable_behavior};
    if root {
        // The user namespace is its creator's: made as the sandbox's host user, the kernel counts
        // what the action holds against that user's limits, not root's (an action that took all of
        // root's inotify instances left none to the host's daemons). The file system is still
        // reached as root until init becomes the sandbox user: the worker's folders are root's.
        nix::unistd::seteuid(nix::unistd::Uid::from_raw(host_uid))
            .with_context(|| format!("becoming the sandbox's host user {host_uid}"))?;
        // SAFETY: setfsuid takes a number and changes only this (single-threaded) process's
        // credentials; to root, which its real uid allows.
        unsafe { libc::setfsuid(0) };
    } else {
        // Init starts dumpable, for the clone's length only: a process that is not has its /proc
        // files owned by root, and a supervisor that is not root could not write init's id maps.
        set_dumpable_behavior(DumpableBehavior::Dumpable).context("letting the sandbox's init be mapped")?;
    }
    // SAFETY: clone without CLONE_VM and without a new stack is fork() with namespaces: the child
    // runs on a copy of this (single-threaded) process. It never returns from `init`.
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags as libc::c_ulong, 0usize, 0usize, 0usize, 0usize) };
    if pid != 0 {
        if root {
            nix::unistd::seteuid(nix::unistd::Uid::from_raw(0)).context("becoming root again after the clone")?;
        }
        set_dumpable_behavior(DumpableBehavior::NotDumpable).context("making the supervisor not dumpable")?;
    }
    match pid {
        -1 => {
            return Err(io::Error::last_os_error())
                .context("creating the sandbox's namespaces (the kernel refused; see `wf work --isolation`)");
        }
        0 => {
            drop(go_write);
            drop(report_read);
            init(plan, &command, &env, requests, go_read, report_write)
        }
        _ => {}
    }
    let pid = pid as i32;
    drop(go_read);
    drop(report_write);
    // Before init goes on: so the kernel's OOM killer picks an action before its worker.
    let mapped = fs::write(format!("/proc/{pid}/oom_score_adj"), "1000")
        .context("setting the sandbox's oom_score_adj")
        .and_then(|()| write_id_maps(pid, plan.user, host_uid));
    // Init waits for this byte before anything else; on an error it reads EOF and exits.
    let mut go = File::from(go_write);
    let joined = mapped.and_then(|()| go.write_all(b"g").context("starting the sandbox's init")).and_then(|()| {
        // Meanwhile init builds the sandbox: moving a process into a cgroup waits for the kernel
        // (a grace period), about 2 ms an attempt when init waited for it. Init waits for this
        // second byte before it starts bun, so all bun starts is the cgroup's.
        let Some(parent) = &plan.memory_cgroup else { return Ok(None) };
        let cgroup = MemoryCgroup::create(parent, plan.limits.memory_mb)?;
        cgroup.add(pid)?;
        go.write_all(b"c").context("starting bun in the sandbox")?;
        Ok(Some(cgroup))
    });
    let memory = match joined {
        Ok(memory) => memory,
        Err(error) => {
            drop(go);
            if let Some(child) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::waitpid(Some(child), rustix::process::WaitOptions::empty());
            }
            // Init may have failed first, and the write failed for its end closed: then its report
            // says why.
            let mut text = Vec::new();
            let said =
                File::from(report_read).read_to_end(&mut text).ok().and_then(|_| serde_json::from_slice(&text).ok());
            return Err(match said {
                Some(Report::Setup(message)) => anyhow::anyhow!(message),
                _ => error,
            });
        }
    };
    Ok(Init { pid, report: File::from(report_read), text: Vec::new(), memory, _alive: go.into() })
}

/// The sandbox user is the only id mapped, to its host uid. `deny` is required of an unprivileged
/// writer before the gid map; for root it changes nothing (nobody in the sandbox may call setgroups).
fn write_id_maps(pid: i32, user: User, host_uid: u32) -> Result<()> {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    fs::write(proc.join("uid_map"), format!("{} {host_uid} 1\n", user.uid))
        .with_context(|| format!("mapping the sandbox user {} to {host_uid} (uid_map)", user.uid))?;
    fs::write(proc.join("setgroups"), "deny").context("writing the sandbox's setgroups")?;
    fs::write(proc.join("gid_map"), format!("{0} {0} 1\n", user.gid))
        .with_context(|| format!("mapping the sandbox group {} (gid_map)", user.gid))?;
    Ok(())
}

/// Init: PID 1 of the sandbox. Kills and reaps every other process of the sandbox, then reports
/// how the attempt ended and exits: once the supervisor has the report, nothing of the attempt runs
/// any more (what is left is the kernel dismantling the namespaces, which nobody needs to wait for).
fn init(plan: &Plan, command: &[CString], env: &[CString], requests: bool, go: OwnedFd, report: OwnedFd) -> ! {
    // Named apart from the supervisor it was forked from, for `ps` on the host.
    let _ = rustix::thread::set_name(INIT_NAME);
    let outcome = match prepare(plan, &go).and_then(|()| in_memory_cgroup(plan, &go)) {
        Ok(()) => match spawn_bun(plan, command, env, requests) {
            Ok(bun) => watch(bun, plan.limits),
            Err(error) => Report::Setup(format!("{error:#}")),
        },
        Err(error) => Report::Setup(format!("{error:#}")),
    };
    kill_all();
    let text = serde_json::to_string(&outcome).unwrap_or_default();
    let _ = File::from(report).write_all(text.as_bytes());
    exit_now(0)
}

/// End a process forked from the supervisor (init, or bun's child before its exec) at once: what
/// the supervisor had buffered or registered to run at exit is the supervisor's, not the copy's.
fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes no pointer and never returns; it runs no handler of this process.
    unsafe { libc::_exit(code) }
}

/// With a memory cgroup, wait until the supervisor has put init in it (its second byte).
fn in_memory_cgroup(plan: &Plan, go: &OwnedFd) -> Result<()> {
    if plan.memory_cgroup.is_some() && File::from(go.try_clone()?).read(&mut [0u8; 1])? != 1 {
        bail!("the supervisor could not put the sandbox in its memory cgroup");
    }
    Ok(())
}

fn prepare(plan: &Plan, go: &OwnedFd) -> Result<()> {
    let mut byte = [0u8; 1];
    let mut go_file = File::from(go.try_clone()?);
    if go_file.read(&mut byte)? != 1 {
        bail!("the supervisor is gone");
    }
    // What lies in the worker's own folders is reached before becoming the sandbox user: for a
    // root worker those are root's folders, which nobody may traverse. The private sources are
    // held open (bound from /proc/self/fd, closed before bun starts) and the new root is entered.
    let private = Private::open(plan)?;
    enter_root(plan).context("mounting the sandbox's root")?;
    become_sandbox_user(plan.user)?;
    // A change of user clears the parent-death signal: armed now, then the supervisor checked,
    // since it may have died in between (its end of `go` is then closed).
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    if supervisor_gone(go) {
        bail!("the supervisor is gone");
    }
    build_root(plan, &private).context("building the sandbox's file system")?;
    drop(private);
    if !plan.network {
        loopback_up().context("bringing up the sandbox's loopback interface")?;
    }
    rustix::system::sethostname(b"wf").context("naming the sandbox's host")?;
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)?;
    Ok(())
}

/// A root worker's attempt's `work` and `io` folders, and its input, are its host user's.
fn give_the_attempts_folders(plan: &Plan, host_uid: u32) -> Result<()> {
    let input = plan.io.join("input.json");
    let owner = (Some(host_uid), Some(plan.user.gid));
    for path in [&plan.work, &plan.io] {
        std::os::unix::fs::chown(path, owner.0, owner.1).with_context(|| format!("giving {}", path.display()))?;
    }
    match std::os::unix::fs::lchown(&input, owner.0, owner.1) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => {
            Err(error).with_context(|| format!("giving {}", input.display()))
        }
        _ => Ok(()),
    }
}

/// An IPC namespace of the supervisor's own, which init inherits, with no System V shared memory:
/// memory no process holds, which no limit of the sandbox counts (the host's namespace is
/// untouched). Made by root, in the host's user namespace: the kernel lets only root set that
/// limit, and nothing in the sandbox may change it. A worker that is not root cannot (see the
/// README's isolation): its sandboxes get a namespace of their own that allows it.
fn refuse_shared_memory() -> Result<()> {
    // SAFETY: an IPC namespace, not the descriptor table this function's caveat is about.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWIPC) }
        .context("making the sandbox's IPC namespace")?;
    fs::write("/proc/sys/kernel/shmall", "0").context("refusing System V shared memory in the sandbox")
}

/// A private copy of the host's mounts, and a tmpfs owned by the sandbox user on `plan.root`,
/// entered: from here on the sandbox is built with paths relative to it.
fn enter_root(plan: &Plan) -> Result<()> {
    mount::mount_change("/", MountPropagationFlags::PRIVATE | MountPropagationFlags::REC)
        .context("making the mounts private")?;
    let options = format!("mode=0755,size=1m,uid={},gid={}", plan.user.uid, plan.user.gid);
    tmpfs(&plan.root, MountFlags::NOSUID | MountFlags::NODEV, &options)?;
    rustix::process::chdir(&plan.root)?;
    Ok(())
}

/// The sandbox user, keeping init's capabilities in its namespace (init came in as an unmapped
/// id, so the kernel does not drop them on this change): it still has mounts to make.
fn become_sandbox_user(user: User) -> Result<()> {
    use rustix::process::{Gid, Uid};
    // Per thread in the kernel: init is single-threaded, so it is the process.
    let (uid, gid) = (Uid::from_raw(user.uid), Gid::from_raw(user.gid));
    rustix::thread::set_thread_res_gid(gid, gid, gid).context("becoming the sandbox user's group")?;
    rustix::thread::set_thread_res_uid(uid, uid, uid).context("becoming the sandbox user")?;
    Ok(())
}

fn supervisor_gone(go: &OwnedFd) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut poll = [PollFd::new(go, PollFlags::IN)];
    let now = Timespec { tv_sec: 0, tv_nsec: 0 };
    rustix::event::poll(&mut poll, Some(&now)).is_ok() && poll[0].revents().intersects(PollFlags::HUP | PollFlags::ERR)
}

/// O_PATH handles on the host paths only init's first identity can reach.
struct Private {
    source: OwnedFd,
    wrapper: OwnedFd,
    transpiled: Option<OwnedFd>,
    bun: OwnedFd,
    io: OwnedFd,
    work: OwnedFd,
    allow_write: Vec<(PathBuf, OwnedFd)>,
}

impl Private {
    fn open(plan: &Plan) -> Result<Private> {
        let open = |path: &Path| -> Result<OwnedFd> {
            rustix::fs::open(path, rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty())
                .with_context(|| format!("opening {}", path.display()))
        };
        Ok(Private {
            source: open(&plan.source)?,
            wrapper: open(&plan.wrapper)?,
            transpiled: plan.transpiled.as_deref().map(open).transpose()?,
            bun: open(&plan.bun)?,
            io: open(&plan.io)?,
            work: open(&plan.work)?,
            allow_write: plan
                .allow_write
                .iter()
                .map(|dir| Ok((dir.clone(), open_allowed(dir)?)))
                .collect::<Result<_>>()?,
        })
    }
}

/// An `--allow-write` folder, by the real path the worker checked at its start, never through a
/// link: whoever may write a folder of that path (another worker's actions, allowed to write a
/// folder above it) could have put one there since, to have this sandbox bind what it points to
/// (any folder init may reach, root's own under a root worker).
fn open_allowed(dir: &Path) -> Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    rustix::fs::openat2(rustix::fs::CWD, dir, flags, Mode::empty(), ResolveFlags::NO_SYMLINKS).map_err(|error| {
        let why = match error {
            rustix::io::Errno::LOOP => "a folder of its path is now a symbolic link".to_string(),
            rustix::io::Errno::NOTDIR => "a folder of its path is no longer a folder".to_string(),
            error => io::Error::from(error).to_string(),
        };
        anyhow::anyhow!("--allow-write {}: {why}", dir.display())
    })
}

/// `/proc/self/fd/N`: a path that reaches what the descriptor holds, without traversing anything.
fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Everything below the new root (the current directory), then the swap of roots.
fn build_root(plan: &Plan, private: &Private) -> Result<()> {
    let at = |inside: &str| PathBuf::from(inside.trim_start_matches('/'));
    let ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;

    for name in SYSTEM {
        let host = Path::new("/").join(name);
        match fs::symlink_metadata(&host) {
            Ok(meta) if meta.file_type().is_symlink() => symlink(fs::read_link(&host)?, at(name))?,
            Ok(meta) if meta.is_dir() => bind(&host, &at(name), ro, true)?,
            _ => {}
        }
    }
    mkdir(&at("etc"))?;
    for name in ETC.into_iter().chain(SSL) {
        let host = Path::new("/etc").join(name);
        if fs::metadata(&host).is_ok() {
            bind(&host, &at(&format!("etc/{name}")), ro, true)?;
        }
    }

    let dev = at("dev");
    mkdir(&dev)?;
    tmpfs(&dev, MountFlags::NOSUID | MountFlags::NOEXEC, "mode=0755,size=64k")?;
    for name in DEVICES {
        bind(&Path::new("/dev").join(name), &dev.join(name), MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false)?;
    }
    let links = [("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1")];
    for (name, target) in links.into_iter().chain([("stderr", "/proc/self/fd/2")]) {
        symlink(target, dev.join(name))?;
    }
    let memory = format!("mode=1777,size={}m", plan.limits.memory_mb);
    mkdir(&dev.join("shm"))?;
    tmpfs(&dev.join("shm"), MountFlags::NOSUID | MountFlags::NODEV, &memory)?;
    restrict(&dev, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false)?;
    mkdir(&at("tmp"))?;
    tmpfs(&at("tmp"), MountFlags::NOSUID | MountFlags::NODEV, &memory)?;
    mkdir(&at("proc"))?;
    let proc_flags = MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
    mount::mount("proc", at("proc"), "proc", proc_flags, None).context("mounting the sandbox's /proc")?;
    // No user namespace inside: in one, the action would have what it takes to mount a tmpfs of
    // its own, without the size of /tmp, whose memory no process holds and no limit counts.
    fs::write(at("proc/sys/user/max_user_namespaces"), "0").context("forbidding user namespaces in the sandbox")?;

    mkdir(&at("wf"))?;
    mkdir(&at("wf/bin"))?;
    bind(&fd_path(&private.source), &at(SOURCE), ro, true).context("binding the commit's tree")?;
    bind(&fd_path(&private.wrapper), &at(WRAPPER), ro, false).context("binding the wrapper")?;
    if let Some(transpiled) = &private.transpiled {
        bind(&fd_path(transpiled), &at(TRANSPILED), ro, false).context("binding the transpiled wrapper")?;
    }
    bind(&fd_path(&private.bun), &at(BUN), ro & !MOUNT_ATTR_NODEV, false).context("binding bun")?;
    let rw = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    bind(&fd_path(&private.io), &at(IO), rw, false).context("binding the attempt's io folder")?;
    bind(&fd_path(&private.work), &at(WORK), rw, false).context("binding the attempt's work folder")?;
    for (dir, fd) in &private.allow_write {
        bind_allowed(fd, dir, rw).with_context(|| format!("binding --allow-write {}", dir.display()))?;
    }
    restrict(Path::new("."), MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false)
        .context("making the sandbox's root read-only")?;

    // Swap roots, then drop the old one: nothing of the host's file system is reachable after.
    rustix::process::pivot_root(".", ".").context("pivot_root into the sandbox")?;
    mount::unmount(".", UnmountFlags::DETACH).context("detaching the host's file system")?;
    rustix::process::chdir(WORK)?;
    Ok(())
}

fn tmpfs(target: &Path, flags: MountFlags, options: &str) -> Result<()> {
    let options = CString::new(options)?;
    mount::mount("tmpfs", target, "tmpfs", flags, Some(options.as_c_str()))
        .with_context(|| format!("mounting a tmpfs on {}", target.display()))
}

fn mkdir(path: &Path) -> Result<()> {
    fs::DirBuilder::new().mode(0o755).create(path).with_context(|| format!("creating {}", path.display()))
}

/// Bind `source` at `target` (created as an empty file or folder like the source), restricted
/// with the given mount attributes.
fn bind(source: &Path, target: &Path, attrs: u64, recursive: bool) -> Result<()> {
    let folder = |path: &Path| fs::DirBuilder::new().recursive(true).mode(0o755).create(path);
    if fs::metadata(source).with_context(|| format!("reading {}", source.display()))?.is_dir() {
        folder(target)
    } else {
        target.parent().map_or(Ok(()), folder).and_then(|()| File::create(target).map(drop))
    }
    .with_context(|| format!("creating the mount point {}", target.display()))?;
    if recursive { mount::mount_bind_recursive(source, target) } else { mount::mount_bind(source, target) }
        .with_context(|| format!("binding {} at {}", source.display(), target.display()))?;
    restrict(target, attrs, recursive).with_context(|| format!("restricting {}", target.display()))
}

/// Bind an `--allow-write` folder (held open) at its own path below the new root (the current
/// directory), with all it holds: a copy of its mounts, restricted, then attached to the mount
/// point's folder as opened, each folder of the path reached without a link (it may lie below a
/// system folder bound from the host, where another worker's actions might write).
fn bind_allowed(source: &OwnedFd, dir: &Path, attrs: u64) -> Result<()> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    use rustix::mount::{MoveMountFlags, OpenTreeFlags};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let beneath = |at: &OwnedFd, name: &OsStr| {
        rustix::fs::openat2(at, name, flags, Mode::empty(), ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH)
    };
    let mut at = rustix::fs::open(".", flags, Mode::empty())?;
    for name in dir.iter().filter(|name| *name != OsStr::new("/")) {
        at = match beneath(&at, name) {
            Err(rustix::io::Errno::NOENT) => {
                rustix::fs::mkdirat(&at, name, Mode::from_raw_mode(0o755))?;
                beneath(&at, name)
            }
            opened => opened,
        }
        .with_context(|| format!("making its place in the sandbox, at {}", name.to_string_lossy()))?;
    }
    let tree = OpenTreeFlags::OPEN_TREE_CLONE
        | OpenTreeFlags::OPEN_TREE_CLOEXEC
        | OpenTreeFlags::AT_RECURSIVE
        | OpenTreeFlags::AT_EMPTY_PATH;
    let copy = mount::open_tree(source, "", tree)?;
    set_mount_attributes(copy.as_raw_fd(), c"", libc::AT_EMPTY_PATH as libc::c_uint, attrs, true)?;
    let empty = MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH;
    mount::move_mount(&copy, "", &at, "", empty)?;
    Ok(())
}

fn restrict(path: &Path, attrs: u64, recursive: bool) -> io::Result<()> {
    let path = CString::new(path.as_os_str().as_bytes())?;
    set_mount_attributes(libc::AT_FDCWD, &path, 0, attrs, recursive)
}

fn set_mount_attributes(
    at: libc::c_int,
    path: &std::ffi::CStr,
    flags: libc::c_uint,
    attrs: u64,
    recursive: bool,
) -> io::Result<()> {
    let attr = MountAttr { attr_set: attrs, attr_clr: 0, propagation: 0, userns_fd: 0 };
    let flags = if recursive { flags | libc::AT_RECURSIVE as libc::c_uint } else { flags };
    // SAFETY: a NUL-terminated path and a mount_attr that outlive the call, with its true size.
    let result = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            at,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            size_of::<MountAttr>(),
        )
    };
    if result == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// A sandbox without network still has a working loopback interface.
fn loopback_up() -> io::Result<()> {
    let socket = rustix::net::socket(rustix::net::AddressFamily::INET, rustix::net::SocketType::DGRAM, None)?;
    // SAFETY: a zeroed ifreq is valid; the name fits with its NUL; the ioctl reads and writes only
    // the ifreq we own.
    unsafe {
        let mut request: libc::ifreq = std::mem::zeroed();
        for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
            *slot = *byte as libc::c_char;
        }
        request.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(socket.as_raw_fd(), libc::SIOCSIFFLAGS, &mut request) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Fork bun: its own session, the limits, no capability, no_new_privs, nothing but stdio (and a
/// warm runner's requests) open.
fn spawn_bun(plan: &Plan, command: &[CString], env: &[CString], requests: bool) -> Result<i32> {
    // The sandbox user's tasks include init's own: the action may have max_processes besides it.
    let nproc = u64::from(plan.limits.max_processes) + 1;
    // SAFETY: fork in a single-threaded process; the child only makes syscalls, execs or exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error()).context("starting bun in the sandbox");
    }
    if pid == 0 {
        if plan.user.host == Host::PerAttempt {
            // Each attempt is a user of its own, all of them in the group nogroup: what one makes
            // in an --allow-write folder, its group may write, so the next attempt may too.
            rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o002));
        }
        let error = exec_bun(command, env, nproc, requests);
        let _ = writeln!(io::stderr(), "wf: could not start bun in the sandbox: {error}");
        exit_now(127)
    }
    Ok(pid)
}

/// In the forked child: returns only when something failed.
fn exec_bun(command: &[CString], env: &[CString], nproc: u64, requests: bool) -> io::Error {
    use rustix::process::{Resource, Rlimit};
    let limit =
        |resource, value| rustix::process::setrlimit(resource, Rlimit { current: Some(value), maximum: Some(value) });
    let prepared = rustix::process::setsid()
        .map(drop)
        .and_then(|()| limit(Resource::Nproc, nproc))
        .and_then(|()| limit(Resource::Core, 0))
        // The user is already the sandbox user: what it still holds are init's capabilities, which
        // exec drops for a non-root user without file capabilities; no_new_privs keeps setuid
        // binaries and file capabilities from handing any back.
        .and_then(|()| rustix::thread::clear_ambient_capability_set())
        .and_then(|()| rustix::thread::set_no_new_privs(true));
    if let Err(error) = prepared {
        return error.into();
    }
    if let Err(error) = scope_abstract_sockets() {
        return error;
    }
    // bun gets no blocked signal, and no descriptor beyond stdio and the requests: one the worker
    // inherited without close-on-exec would otherwise reach the action.
    if let Err(error) = SigSet::empty().thread_set_mask() {
        return error.into();
    }
    let first_closed = if requests { super::supervisor::REQUESTS_FD as u32 + 1 } else { 3 };
    // SAFETY: closes descriptors this process owns and never uses again: it execs or exits next.
    if unsafe { libc::syscall(libc::SYS_close_range, first_closed, u32::MAX, 0u32) } != 0 {
        return io::Error::last_os_error();
    }
    if let Err(error) = super::seccomp::install() {
        return error;
    }
    match nix::unistd::execve(&command[0], command, env) {
        Err(error) => error.into(),
        Ok(never) => match never {},
    }
}

/// `struct landlock_ruleset_attr`.
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// Whether this kernel's Landlock can scope abstract Unix sockets (ABI 6, Linux 6.12).
pub(crate) fn landlock_scopes_sockets() -> bool {
    const CREATE_RULESET_VERSION: libc::c_uint = 1;
    const FIRST_ABI_WITH_SCOPES: libc::c_long = 6;
    // SAFETY: the version query takes no structure.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    abi >= FIRST_ABI_WITH_SCOPES
}

/// A Landlock domain for bun and everything it starts, scoped so that none of them connects to an
/// abstract Unix socket made outside it: with the network on, the sandbox shares the host's network
/// namespace, whose abstract sockets (a desktop's bus, X11, another attempt's) would otherwise
/// take the action's connection as one of the worker's user. Landlock ABI 6 (Linux 6.12) and
/// later; on an older kernel, or one without Landlock, nothing is scoped. Raw system calls, as
/// `mount_setattr`: one structure and two calls, no crate's compatibility layer needed.
fn scope_abstract_sockets() -> io::Result<()> {
    const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1;
    if !landlock_scopes_sockets() {
        return Ok(());
    }
    let attr = RulesetAttr { handled_access_fs: 0, handled_access_net: 0, scoped: SCOPE_ABSTRACT_UNIX_SOCKET };
    // SAFETY: a ruleset attribute that outlives the call, with its true size.
    let ruleset = unsafe {
        libc::syscall(libc::SYS_landlock_create_ruleset, &attr as *const RulesetAttr, size_of::<RulesetAttr>(), 0u32)
    };
    if ruleset < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor, owned by nothing else.
    let ruleset = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(ruleset as i32) };
    // SAFETY: a ruleset descriptor and no flags; no_new_privs is set.
    if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reap until bun ends or a limit is exceeded. Init wakes up for each SIGCHLD (blocked, inherited
/// from the supervisor, so it queues for the signalfd) and at least every LIMITS_PERIOD.
fn watch(bun: i32, limits: Limits) -> Report {
    let exits = match Signals::read(&SigSet::from(Signal::SIGCHLD)) {
        Ok(exits) => exits,
        Err(error) => return Report::Setup(format!("watching bun: {error}")),
    };
    loop {
        exits.wait(LIMITS_PERIOD);
        if let Some(status) = reap(bun) {
            return Report::Ended(status);
        }
        if let Some(report) = over_limit(limits) {
            return report;
        }
    }
}

/// Reap every exited child (bun, and the orphans init adopts); bun's wait status if it was one.
fn reap(bun: i32) -> Option<i32> {
    let mut found = None;
    while let Ok(Some((pid, status))) = rustix::process::wait(rustix::process::WaitOptions::NOHANG) {
        if pid.as_raw_nonzero().get() == bun {
            found = Some(status.as_raw());
        }
    }
    found
}

/// SIGKILL everything in the sandbox but init, and reap it all.
fn kill_all() {
    loop {
        // kill(-1) from a namespace's init reaches every other process of the namespace.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(-1), Signal::SIGKILL);
        if let Err(rustix::io::Errno::CHILD) = rustix::process::wait(rustix::process::WaitOptions::empty()) {
            return;
        }
    }
}

/// The sandbox's resident memory and tasks, from its own /proc (init itself excluded).
fn over_limit(limits: Limits) -> Option<Report> {
    let page = rustix::param::page_size() as u64;
    let (mut resident, mut tasks) = (0u64, 0u64);
    for entry in fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        if pid == 1 {
            continue;
        }
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let Some(close) = stat.rfind(')') else { continue };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        tasks += fields.get(17).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
        resident += fields.get(21).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0) * page;
    }
    let memory = u64::from(limits.memory_mb) << 20;
    if resident > memory {
        return Some(Report::Limit {
            name: "MemoryLimit".to_string(),
            message: format!(
                "the action used {} MiB of memory, more than its limit of {} MiB (memory_mb), and was killed",
                resident >> 20,
                limits.memory_mb
            ),
        });
    }
    // RLIMIT_NPROC makes the limit a fence the action runs into (a fork past it fails with
    // EAGAIN): an attempt found at it is ended.
    if tasks >= u64::from(limits.max_processes) {
        return Some(Report::Limit {
            name: "ProcessLimit".to_string(),
            message: format!(
                "the action reached its limit of {} processes and threads (max_processes) and was killed",
                limits.max_processes
            ),
        });
    }
    None
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).context("creating a pipe")
}

fn c_strings<S: AsRef<OsStr>>(items: impl IntoIterator<Item = S>) -> Result<Vec<CString>> {
    items
        .into_iter()
        .map(|item| CString::new(item.as_ref().as_bytes()).context("a NUL byte in a command or variable"))
        .collect()
}
