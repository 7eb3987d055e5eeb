//! Scratch space: one root per worker process under `$WF_HOME/scratch/`, one directory per attempt
//! inside it. A root is alive while its lock file is flocked by its worker; a worker that died (even
//! by SIGKILL) released the lock with its last file descriptor, so the next worker to start removes
//! what it left behind, and so does every live worker's sweeper once every `STALE_ROOTS_PERIOD`
//! (a host whose workers never restart kept a crashed worker's attempts, of any size, for good). A
//! finished attempt's directory is removed by the root's sweeper thread, off the path from one job
//! to the next.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rustix::fs::{FileType, Mode, OFlags};
use uuid::Uuid;

const LOCK_SUFFIX: &str = ".lock";

/// How long a root being dropped waits for its sweeper to remove what it was handed.
const SWEEP_PATIENCE: Duration = Duration::from_secs(10);

/// How often a root's sweeper removes the roots of workers that are gone (one listing of the
/// scratch folder and a lock tried per root: nothing next to a job's cost).
pub const STALE_ROOTS_PERIOD: Duration = Duration::from_secs(30);

/// `$WF_HOME/scratch/<pid>-<random>/`, locked through `<pid>-<random>.lock` beside it for as long
/// as this value lives; removed on drop.
#[derive(Debug)]
pub struct ScratchRoot {
    dir: PathBuf,
    lock_path: PathBuf,
    _lock: File,
    wrapper: PathBuf,
    /// bun's transpiler cache holding the wrapper (`transpile_wrapper`), once it is made.
    transpiled: Option<PathBuf>,
    sweeper: Option<Sweeper>,
}

/// Where finished attempts' directories go to be removed (see `ScratchRoot::sweep`).
#[derive(Debug, Clone)]
pub struct Sweep {
    paths: Sender<PathBuf>,
    root: PathBuf,
}

impl Sweep {
    /// Move `dir` aside under a name of its own (at once: a new attempt may take its name) and
    /// have the sweeper remove it. False when it is still where it was.
    pub(crate) fn hand(&self, dir: &Path) -> bool {
        let aside = self.root.join(format!(".swept-{}", Uuid::new_v4().simple()));
        if fs::rename(dir, &aside).is_err() {
            return false;
        }
        // A sweeper that is gone leaves it to the root's removal.
        let _ = self.paths.send(aside);
        true
    }
}

/// The thread that removes finished attempts' directories, one after the other, and the roots of
/// workers that are gone every `STALE_ROOTS_PERIOD`.
#[derive(Debug)]
struct Sweeper {
    paths: Sender<PathBuf>,
    /// Disconnected when the thread is done: every handle to it was dropped and all it was handed
    /// is removed. (In a mutex only for the root to be shared between threads.)
    done: Mutex<Receiver<()>>,
    thread: JoinHandle<()>,
}

impl Sweeper {
    /// Start the sweeper of root `own` in the scratch folder `parent`.
    fn start(parent: PathBuf, own: String) -> Result<Sweeper> {
        let (sender, paths) = mpsc::channel::<PathBuf>();
        let (finished, done) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("wf-scratch-sweeper".to_string())
            .spawn(move || {
                let _finished = finished;
                let mut next_stale = Instant::now() + STALE_ROOTS_PERIOD;
                loop {
                    match paths.recv_timeout(next_stale.saturating_duration_since(Instant::now())) {
                        Ok(path) => {
                            let _ = remove_tree(&path);
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                    if Instant::now() >= next_stale {
                        remove_stale_roots(&parent, &own);
                        next_stale = Instant::now() + STALE_ROOTS_PERIOD;
                    }
                }
            })
            .context("starting the scratch sweeper thread")?;
        Ok(Sweeper { paths: sender, done: Mutex::new(done), thread })
    }
}

impl ScratchRoot {
    /// The root of this worker process under `wf_home`; also writes the action wrapper and removes
    /// the roots of workers that are gone.
    pub fn create_in(wf_home: &Path) -> Result<ScratchRoot> {
        let wrapper = super::wrapper::install(wf_home)?;
        let parent = wf_home.join("scratch");
        fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
        let (name, lock_path, lock) = loop {
            let name = format!("{}-{:08x}", std::process::id(), fastrand::u32(..));
            let lock_path = parent.join(format!("{name}{LOCK_SUFFIX}"));
            if let Some(lock) = lock_new(&lock_path)? {
                break (name, lock_path, lock);
            }
        };
        let dir = parent.join(&name);
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("creating the scratch directory {}", dir.display()))?;
        remove_stale_roots(&parent, &name);
        let sweeper = Sweeper::start(parent, name)?;
        Ok(ScratchRoot { dir, lock_path, _lock: lock, wrapper, transpiled: None, sweeper: Some(sweeper) })
    }

    /// A handle to this root's sweeper: a directory sent to it is removed in the background.
    pub fn sweep(&self) -> Option<Sweep> {
        self.sweeper.as_ref().map(|sweeper| Sweep { paths: sweeper.paths.clone(), root: self.dir.clone() })
    }

    /// Where one attempt of a job runs: its cwd and its input/result files live below this.
    pub fn attempt_dir(&self, job_id: &Uuid, attempt: i32) -> PathBuf {
        self.dir.join(format!("{job_id}-{attempt}"))
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// A source tree holding only the probe's action (see `runner::probe`).
    pub(crate) fn probe_source(&self) -> Result<PathBuf> {
        let dir = self.dir.join("probe");
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        fs::write(dir.join(super::PROBE), super::PROBE_SOURCE)
            .with_context(|| format!("writing into {}", dir.display()))?;
        Ok(dir)
    }

    /// The action wrapper written for this worker (see `wrapper.mjs`).
    pub fn wrapper(&self) -> &Path {
        &self.wrapper
    }

    /// Have `bun` transpile the wrapper into a cache of this root (`wrapper::transpile`), which
    /// every attempt started from here then reads: read-only in a sandbox.
    pub fn transpile_wrapper(&mut self, bun: &str) -> Result<()> {
        let cache = self.dir.join("transpiled");
        fs::DirBuilder::new().mode(0o755).create(&cache).with_context(|| format!("creating {}", cache.display()))?;
        super::wrapper::transpile(&super::resolve_bun(bun)?, &self.wrapper, &cache)?;
        // Readable by the sandbox user whatever the worker's umask.
        for entry in fs::read_dir(&cache).with_context(|| format!("reading {}", cache.display()))? {
            let path = entry?.path();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o644))
                .with_context(|| format!("making {} readable", path.display()))?;
        }
        self.transpiled = Some(cache);
        Ok(())
    }

    /// The transpiler cache holding the wrapper, when `transpile_wrapper` made it.
    pub fn transpiled(&self) -> Option<&Path> {
        self.transpiled.as_deref()
    }
}

impl Drop for ScratchRoot {
    fn drop(&mut self) {
        // What the sweeper was handed is removed first, as long as no attempt still holds a
        // handle to it (that one's directory goes with the root).
        if let Some(Sweeper { paths, done, thread }) = self.sweeper.take() {
            drop(paths);
            let done = done.into_inner().unwrap_or_else(|e| e.into_inner());
            if let Err(mpsc::RecvTimeoutError::Disconnected) = done.recv_timeout(SWEEP_PATIENCE) {
                let _ = thread.join();
            }
        }
        // The lock is still held here, so no other worker is removing the same files.
        let _ = remove_tree(&self.dir);
        let _ = fs::remove_file(&self.lock_path);
    }
}

/// Create and lock a fresh lock file. None when the name is taken, or when a sweeping worker took
/// and unlinked the file between our open and our flock (we would hold a lock on nothing).
fn lock_new(path: &Path) -> Result<Option<File>> {
    let file = match OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => return Ok(None),
        Err(error) => return Err(error).with_context(|| format!("creating lock file {}", path.display())),
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
        // Not "someone else holds it" but "locks do not work here" (ENOLCK on some NFS mounts):
        // trying another name would fail the same way, forever.
        Err(std::fs::TryLockError::Error(error)) => {
            let _ = fs::remove_file(path);
            return Err(error).with_context(|| {
                format!("locking {} (WF_HOME must be on a file system with working flock)", path.display())
            });
        }
    }
    let held = file.metadata().with_context(|| format!("reading lock file {}", path.display()))?;
    match fs::metadata(path) {
        Ok(on_disk) if on_disk.dev() == held.dev() && on_disk.ino() == held.ino() => Ok(Some(file)),
        _ => Ok(None),
    }
}

/// Remove every sibling root whose lock is not held: its worker is gone. A directory without a lock
/// file is debris too: a live root's lock file is created before its directory and removed after it.
/// Best effort: a root that cannot be removed now is tried again later.
fn remove_stale_roots(parent: &Path, own: &str) {
    let Ok(entries) = fs::read_dir(parent) else { return };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .map(|name| name.strip_suffix(LOCK_SUFFIX).map(str::to_string).unwrap_or(name))
        .filter(|name| name != own)
        .collect();
    names.sort();
    names.dedup();
    for name in names {
        let dir = parent.join(&name);
        let lock_path = parent.join(format!("{name}{LOCK_SUFFIX}"));
        match File::options().write(true).open(&lock_path) {
            Ok(lock) => {
                if lock.try_lock().is_ok() {
                    let _ = remove_tree(&dir);
                    let _ = fs::remove_file(&lock_path);
                }
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                let _ = remove_tree(&dir);
            }
            Err(_) => {}
        }
    }
}

/// Remove a directory tree the action wrote into, however deep, with a few descriptors at a time
/// and no recursion (std's `remove_dir_all` recurses once per level: a tree 30,000 folders deep,
/// which an action makes in a second, overflows a thread's stack). Nothing there is no error.
pub(super) fn remove_tree(path: &Path) -> io::Result<()> {
    let top = match rustix::fs::open(path, FOLDER, Mode::empty()) {
        Ok(top) => top,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        // A file or a link where a folder was: removed as such, never followed.
        Err(rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP) => return absent_is_removed(fs::remove_file(path)),
        Err(error) => return Err(error.into()),
    };
    empty_folder(&top)?;
    absent_is_removed(fs::remove_dir(path))
}

fn absent_is_removed(removed: io::Result<()>) -> io::Result<()> {
    match removed {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// The most entries `empty_folder` moves or removes before it gives up: a process of the action
/// still running (a warm runner's, between its jobs) could otherwise keep it busy forever.
const EMPTYING_BUDGET: u64 = 1 << 26;

/// Remove everything in `folder`: its files at once; each folder in it is emptied by moving its
/// entries up into `folder` under fresh names, then removed; until nothing is left. Each folder is
/// opened without following a link, and changed and read through that descriptor: a process of
/// the action still running may swap a folder for a link to one of the host's, and what a path
/// named a moment ago is not what it names now. A folder the action left without permissions (which
/// would stop a non-root worker) gets them back first.
pub(super) fn empty_folder(folder: &OwnedFd) -> io::Result<()> {
    use rustix::fs::{AtFlags, RenameFlags};
    use rustix::io::Errno;
    open_up(folder);
    let (mut fresh, mut budget) = (0u64, EMPTYING_BUDGET);
    let mut spend = || {
        budget = budget.checked_sub(1).ok_or_else(|| io::Error::other("its entries kept coming: given up"))?;
        io::Result::Ok(())
    };
    loop {
        let mut folders = Vec::new();
        for (name, is_folder) in entries(folder)? {
            spend()?;
            if is_folder {
                folders.push(name);
            } else {
                match rustix::fs::unlinkat(folder, &name, AtFlags::empty()) {
                    Ok(()) | Err(Errno::NOENT) => {}
                    Err(error) => return Err(error.into()),
                }
            }
        }
        if folders.is_empty() {
            return Ok(());
        }
        for name in folders {
            let child = match rustix::fs::openat(folder, &name, FOLDER, Mode::empty()) {
                Ok(child) => child,
                Err(Errno::NOENT) => continue,
                // Swapped for a file or a link meanwhile: its entry goes at the next look.
                Err(Errno::NOTDIR | Errno::LOOP) => continue,
                Err(error) => return Err(error.into()),
            };
            open_up(&child);
            for (entry, is_folder) in entries(&child)? {
                // A folder moves to another parent only with write permission on itself (its `..`
                // changes): one the action left without it gets it back first.
                if is_folder && let Ok(moving) = rustix::fs::openat(&child, &entry, FOLDER, Mode::empty()) {
                    open_up(&moving);
                }
                loop {
                    spend()?;
                    let to = format!(".wf-removing-{fresh}");
                    fresh += 1;
                    match rustix::fs::renameat_with(&child, &entry, folder, &to, RenameFlags::NOREPLACE) {
                        Ok(()) | Err(Errno::NOENT) => break,
                        Err(Errno::EXIST) => {}
                        Err(error) => return Err(error.into()),
                    }
                }
            }
            match rustix::fs::unlinkat(folder, &name, AtFlags::REMOVEDIR) {
                // Not empty: something came in meanwhile; it goes at the next look.
                Ok(()) | Err(Errno::NOENT | Errno::NOTEMPTY | Errno::NOTDIR) => {}
                Err(error) => return Err(error.into()),
            }
        }
    }
}

/// The names in `folder` but `.` and `..`, each with whether it is a folder (a link never is).
fn entries(folder: &OwnedFd) -> io::Result<Vec<(std::ffi::CString, bool)>> {
    let listing = rustix::fs::openat(folder, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::new(listing)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let is_folder = match entry.file_type() {
            FileType::Directory => true,
            FileType::Unknown => rustix::fs::statat(folder, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::Directory),
            _ => false,
        };
        names.push((name.to_owned(), is_folder));
    }
    Ok(names)
}

/// A folder as `empty_folder` holds it: a descriptor of the folder itself (no permission needed),
/// never of a link's target.
pub(super) const FOLDER: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// Give the owner every permission on the folder `folder` holds; chmod through /proc reaches the
/// very folder the descriptor holds (fchmod takes no O_PATH one).
fn open_up(folder: &OwnedFd) {
    let _ = rustix::fs::chmod(format!("/proc/self/fd/{}", folder.as_raw_fd()), Mode::RWXU);
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use super::*;

    /// A process of the action swaps a folder of its working directory with a link to a folder of
    /// the host's, again and again, while the worker empties the working directory: nothing of the
    /// host's folder is changed or removed.
    #[test]
    fn emptying_a_folder_never_follows_a_link_swapped_in_for_one_of_its_folders() {
        let root = tempfile::tempdir().unwrap();
        let (work, host) = (root.path().join("work"), root.path().join("host"));
        fs::create_dir(&work).unwrap();
        fs::create_dir(&host).unwrap();
        fs::write(host.join("keep"), "the host's").unwrap();
        fs::set_permissions(&host, fs::Permissions::from_mode(0o755)).unwrap();

        // Until the two were swapped many times while it did, however the threads are scheduled.
        let (stop, swaps) = (AtomicBool::new(false), AtomicU64::new(0));
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let (folder, link) = (work.join("folder"), work.join("link"));
                while !stop.load(Ordering::Relaxed) {
                    // What the emptying removed comes back: a folder with a locked folder in it.
                    if fs::create_dir(&folder).is_ok() {
                        let _ = fs::create_dir(folder.join("locked"));
                        let _ = fs::write(folder.join("locked").join("file"), "");
                        let _ = fs::set_permissions(folder.join("locked"), fs::Permissions::from_mode(0o0));
                    }
                    let _ = std::os::unix::fs::symlink(&host, &link);
                    let exchange = rustix::fs::RenameFlags::EXCHANGE;
                    if rustix::fs::renameat_with(rustix::fs::CWD, &folder, rustix::fs::CWD, &link, exchange).is_ok() {
                        swaps.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
            let mut rounds = 0;
            while rounds < 1_000 || swaps.load(Ordering::Relaxed) < 10_000 {
                let folder = rustix::fs::open(&work, FOLDER, Mode::empty()).unwrap();
                let _ = empty_folder(&folder);
                rounds += 1;
                let mode = fs::metadata(&host).unwrap().permissions().mode() & 0o7777;
                let kept = fs::read_to_string(host.join("keep")).ok();
                let entries = fs::read_dir(&host).unwrap().count();
                if mode != 0o755 || kept.as_deref() != Some("the host's") || entries != 1 {
                    stop.store(true, Ordering::Relaxed);
                    panic!("the host's folder was changed: mode {mode:o}, {entries} entries (round {rounds})");
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
    }

    /// A tree deeper than a thread's stack allows recursing into (std's `remove_dir_all` overflowed
    /// it at this depth, and the worker aborted) is removed, with a small stack.
    #[test]
    fn a_tree_thirty_thousand_folders_deep_is_removed() {
        let root = tempfile::tempdir().unwrap();
        let top = root.path().join("deep");
        fs::create_dir(&top).unwrap();
        let mut folder = rustix::fs::open(&top, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        for _ in 0..30_000 {
            rustix::fs::mkdirat(&folder, "d", Mode::RWXU).unwrap();
            folder = rustix::fs::openat(&folder, "d", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        }
        rustix::fs::openat(&folder, "file", OFlags::CREATE | OFlags::WRONLY, Mode::RUSR).unwrap();
        drop(folder);
        let removal = std::thread::Builder::new().stack_size(256 * 1024);
        let removed = removal.spawn(move || remove_tree(&top).map(|()| top.exists())).unwrap().join().unwrap();
        assert!(matches!(removed, Ok(false)), "{removed:?}");
    }
}
