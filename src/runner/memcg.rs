//! The memory cgroup of one sandboxed attempt: the kernel itself holds what the attempt's processes
//! use and what it keeps for them (socket buffers, pipes, `/tmp`'s pages, memory no process maps)
//! under `memory_mb`, and kills a process of the attempt at the limit. Made in the worker's own
//! memory cgroup of cgroup v1, when the worker may make cgroups there (a root worker, most often);
//! elsewhere the sandbox's init only watches its processes' resident memory (`sandbox`).
//!
//! ```text
//! <the worker's memory cgroup>/wf-<supervisor pid>-<random>/   memory.limit_in_bytes = memory_mb
//!                                                               (memsw and kmem.tcp too)
//!                                                               cgroup.procs: init, then all it starts
//! ```

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result};

/// An attempt's cgroup is this followed by its supervisor's pid, a dash and a random part.
const PREFIX: &str = "wf-";

/// The worker's own memory cgroup (v1), where its supervisors make the attempts' cgroups, when this
/// process may make them there. Looked for once per process; the cgroups stale supervisors left
/// there (killed before removing theirs) are removed then.
pub(crate) fn parent() -> Option<&'static Path> {
    static PARENT: OnceLock<Option<PathBuf>> = OnceLock::new();
    PARENT.get_or_init(|| own_memory_cgroup().filter(|dir| usable(dir))).as_deref()
}

/// The folder of this process's cgroup in the v1 memory hierarchy, from /proc/self/cgroup (its path
/// in the hierarchy) and /proc/self/mountinfo (where the hierarchy is mounted, from which root).
fn own_memory_cgroup() -> Option<PathBuf> {
    let cgroups = fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = cgroups.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers.split(',').any(|controller| controller == "memory").then_some(path)
    })?;
    let mounts = fs::read_to_string("/proc/self/mountinfo").ok()?;
    mounts.lines().find_map(|line| {
        let (mount, filesystem) = line.split_once(" - ")?;
        let mount: Vec<&str> = mount.split(' ').collect();
        let filesystem: Vec<&str> = filesystem.split(' ').collect();
        let memory = filesystem.first() == Some(&"cgroup")
            && filesystem.get(2).is_some_and(|options| options.split(',').any(|option| option == "memory"));
        let (root, point) = (mount.get(3)?, mount.get(4)?);
        let inside = Path::new(path).strip_prefix(root).ok()?;
        memory.then(|| Path::new(point).join(inside))
    })
}

/// Whether attempts' cgroups can be made in `dir` (one is made and removed), after removing those
/// of supervisors that are gone.
fn usable(dir: &Path) -> bool {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let pid = name.to_str().and_then(|name| name.strip_prefix(PREFIX)?.split('-').next()?.parse::<i32>().ok());
            let Some(pid) = pid else {
                continue;
            };
            if !alive(pid) {
                let _ = fs::remove_dir(entry.path());
            }
        }
    }
    let probe = dir.join(format!("{PREFIX}probe-{}", std::process::id()));
    let made = fs::create_dir(&probe).is_ok() && probe.join("memory.limit_in_bytes").exists();
    let _ = fs::remove_dir(&probe);
    made
}

fn alive(pid: i32) -> bool {
    rustix::process::Pid::from_raw(pid).is_some_and(|pid| rustix::process::test_kill_process(pid).is_ok())
}

/// One attempt's memory cgroup, removed when dropped (once the attempt's processes are all dead).
pub(crate) struct MemoryCgroup {
    dir: PathBuf,
}

/// Whether the kernel's OOM killer killed a process of the attempt, and for which limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OomKill {
    None,
    /// The attempt reached its own limit (`memory_mb`).
    OwnLimit,
    /// Another limit: the worker's own cgroup's, or the host's memory.
    Elsewhere,
}

impl MemoryCgroup {
    /// Made in `parent` for this supervisor (named after its pid, which the next worker to start
    /// looks at, and a random part: two supervisors of one pid in two PID namespaces may share a
    /// parent), holding at most `memory_mb` MiB, swap included, and as much again in TCP buffers.
    pub(crate) fn create(parent: &Path, memory_mb: u32) -> Result<MemoryCgroup> {
        let dir = parent.join(format!("{PREFIX}{}-{:08x}", std::process::id(), fastrand::u32(..)));
        fs::create_dir(&dir).with_context(|| format!("making the attempt's memory cgroup {}", dir.display()))?;
        let cgroup = MemoryCgroup { dir };
        let limit = (u64::from(memory_mb) << 20).to_string();
        // Memory plus swap may never be set below memory alone: lifted first, set after.
        let swap_accounted = cgroup.dir.join("memory.memsw.limit_in_bytes").exists();
        if swap_accounted {
            cgroup.write("memory.memsw.limit_in_bytes", "-1")?;
        }
        cgroup.write("memory.limit_in_bytes", &limit)?;
        if swap_accounted {
            cgroup.write("memory.memsw.limit_in_bytes", &limit)?;
        }
        // cgroup v1 counts the TCP buffers of the cgroup's sockets apart, and only once a limit is
        // set: without one an action held 737 MiB of them under a memory_mb of 128 (the host's
        // TCP memory, which every connection of the host shares). At the limit a socket takes no
        // more until it is read: nothing is killed.
        if cgroup.dir.join("memory.kmem.tcp.limit_in_bytes").exists() {
            cgroup.write("memory.kmem.tcp.limit_in_bytes", &limit)?;
        }
        Ok(cgroup)
    }

    /// Move `pid` (the sandbox's init, before it starts anything) into the cgroup.
    pub(crate) fn add(&self, pid: i32) -> Result<()> {
        self.write("cgroup.procs", &pid.to_string())
    }

    /// Whether the kernel killed a process of the attempt: the cgroup counts the processes killed
    /// in it whichever limit was reached, and keeps the most it ever used, which its own limit
    /// caps (its `failcnt`, which should count the times that limit was reached, stayed 0 here).
    pub(crate) fn oom_kill(&self) -> OomKill {
        let read = |file: &str| fs::read_to_string(self.dir.join(file)).unwrap_or_default();
        let number = |file: &str| read(file).trim().parse::<u64>().ok();
        let kills: u64 = read("memory.oom_control")
            .lines()
            .find_map(|line| line.strip_prefix("oom_kill ")?.trim().parse().ok())
            .unwrap_or(0);
        let reached = [
            ("memory.max_usage_in_bytes", "memory.limit_in_bytes"),
            ("memory.memsw.max_usage_in_bytes", "memory.memsw.limit_in_bytes"),
        ]
        .iter()
        .any(|(most, limit)| number(most).zip(number(limit)).is_some_and(|(most, limit)| most >= limit));
        match (kills, reached) {
            (0, _) => OomKill::None,
            (_, true) => OomKill::OwnLimit,
            (_, false) => OomKill::Elsewhere,
        }
    }

    fn write(&self, file: &str, value: &str) -> Result<()> {
        let path = self.dir.join(file);
        fs::write(&path, value).with_context(|| format!("writing {value} to {}", path.display()))
    }
}

impl Drop for MemoryCgroup {
    /// A cgroup is removed once its last process has exited: the sandbox's are dying when this
    /// runs, so a few tries a little apart. One still busy after them (a process stuck in the
    /// kernel) is left, and removed by the next worker to start.
    fn drop(&mut self) {
        for _ in 0..20 {
            match fs::remove_dir(&self.dir) {
                Err(error) if error.raw_os_error() == Some(libc::EBUSY) => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    /// A shell in `cgroup` that then makes `tail` hold 100 MiB; whether it succeeded.
    fn hold_100_mib_in(cgroup: &MemoryCgroup) -> bool {
        let mut shell = Command::new("sh")
            .args(["-c", "read go && head -c 100M /dev/zero | tail -n 1 > /dev/null"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        cgroup.add(shell.id() as i32).unwrap();
        shell.stdin.take().unwrap().write_all(b"go\n").unwrap();
        shell.wait().unwrap().success()
    }

    /// A process killed at the attempt's own limit is told from one killed for another's (here its
    /// parent's, as the worker's own cgroup or the host may run out): the first is the action's
    /// `MemoryLimit`, the second not (it was, whatever the action's memory_mb).
    #[test]
    fn a_kill_at_the_attempts_own_limit_is_told_from_a_kill_for_another() {
        let parent = parent().expect("the tests need a cgroup v1 memory controller the test process may write");
        let own = MemoryCgroup::create(parent, 16).unwrap();
        assert_eq!(own.oom_kill(), OomKill::None);
        assert!(!hold_100_mib_in(&own), "100 MiB held under a limit of 16");
        assert_eq!(own.oom_kill(), OomKill::OwnLimit);
        let dir = own.dir.clone();
        drop(own);
        assert!(!dir.exists(), "{} is left behind", dir.display());

        let worker = MemoryCgroup::create(parent, 32).unwrap();
        let attempt = MemoryCgroup::create(&worker.dir, 256).unwrap();
        assert!(!hold_100_mib_in(&attempt), "100 MiB held under a parent's limit of 32");
        assert_eq!(attempt.oom_kill(), OomKill::Elsewhere);
        let roomy = MemoryCgroup::create(parent, 256).unwrap();
        assert!(hold_100_mib_in(&roomy), "100 MiB held under a limit of 256");
        assert_eq!(roomy.oom_kill(), OomKill::None);
    }
}
