//! The embedded default: a private PostgreSQL cluster under `$WF_HOME/pg`, created with the
//! server binaries installed on the machine and reached on a Unix socket in that folder.
//!
//! PostgreSQL refuses to run as root, so as root the cluster runs as the `postgres` user. Root's
//! home is usually not traversable by that user, so as root the cluster lives in
//! `/var/lib/windforce/<hash of WF_HOME>` and `$WF_HOME/pg` is a symlink to it.
//!
//! Authentication is `trust`: the folder holding the socket (mode 0700) is what keeps other users
//! out. When the socket path would be too long for the kernel, that folder is
//! `/tmp/windforce-<hash>` instead, made again at every start since a reboot empties /tmp.

use std::fs;
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

/// The name of a cluster being created, beside `data` (followed by the creating process's id).
const NEW_DATA_PREFIX: &str = "data.new-";

/// The superuser and database of the embedded cluster.
const DB_USER: &str = "windforce";
const DB_NAME: &str = "windforce";
const PORT: u16 = 5432;
/// What a double-quoted word of /bin/sh does not take literally.
const SHELL_SPECIAL: [char; 4] = ['"', '$', '`', '\\'];

/// A Unix socket path holds at most 107 bytes; keep a margin.
const MAX_SOCKET_PATH: usize = 100;
/// As root, the folder of every cluster: owned by root, traversable by `postgres`.
const ROOT_CLUSTERS: &str = "/var/lib/windforce";
/// How long a start waits for the processes of a killed server to let go of its shared memory.
const START_RETRY: Duration = Duration::from_secs(20);

/// The server's log grows for as long as the cluster lives (a few lines at each start and
/// checkpoint, every error): past this size it is set aside as `postgres.log.1`, replacing the one
/// set aside before, when the server is started.
const LOG_KEPT_BYTES: u64 = 10 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct Cluster {
    /// `$WF_HOME`.
    home: PathBuf,
    /// `$WF_HOME/pg`, as the operator sees it.
    home_pg: PathBuf,
    /// Where the files really are (differs from home_pg as root).
    dir: PathBuf,
    /// The socket directory.
    socket_dir: PathBuf,
    /// Serializes creating, starting and stopping between `wf` processes.
    lock_file: PathBuf,
    /// Left by `wf db down`, taken away by `wf db up`: while it is there no other command starts
    /// the cluster (after a reboot neither).
    down_mark: PathBuf,
    /// Where the PostgreSQL server binaries are looked for first (PATH).
    search_path: Vec<PathBuf>,
}

/// What `ensure_up` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    /// It was running already.
    Running,
    /// It was stopped (cleanly, or by a crash or a reboot) and was started.
    Restarted,
    /// It did not exist: it was created and started.
    Created,
}

/// The state of the embedded cluster, for `wf db status`.
#[derive(Debug)]
pub struct ClusterState {
    pub initialized: bool,
    pub running: bool,
    /// Stopped by `wf db down`, to stay stopped until `wf db up`.
    pub held_down: bool,
}

/// What `postmaster.pid` says about the server.
#[derive(Debug, PartialEq, Eq)]
enum Postmaster {
    /// No pid file: shut down cleanly, or never started.
    Stopped,
    /// A pid file left by a server that is gone: a crash, a kill or a reboot.
    Stale,
    Running,
}

impl Cluster {
    /// The cluster of `home` (WF_HOME), whose server binaries are looked for in `search_path`
    /// first (see `pg_bin`).
    /// Nothing is created: `wf db status` and `down` change nothing.
    pub fn locate(home: &Path, search_path: &[PathBuf]) -> Result<Cluster> {
        let home = match home.canonicalize() {
            Ok(home) => home,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => std::path::absolute(home)?,
            Err(error) => return Err(error).with_context(|| format!("resolving WF_HOME {}", home.display())),
        };
        if home.exists() && !home.is_dir() {
            bail!("WF_HOME {} is not a folder (set WF_HOME to a folder, or DATABASE_URL)", home.display());
        }
        let home_pg = home.join("pg");
        let dir = if is_root() {
            linked_cluster(&home_pg).unwrap_or_else(|| Path::new(ROOT_CLUSTERS).join(short_hash(&home)))
        } else {
            home_pg.clone()
        };
        // pg_ctl starts the server through /bin/sh with the data folder and the log file in
        // double quotes, where these characters would be the shell's (`$(...)` run as a command).
        if let Some(bad) = dir.to_string_lossy().chars().find(|c| SHELL_SPECIAL.contains(c)) {
            bail!(
                "the embedded cluster cannot live under {}: it holds {bad:?}, which pg_ctl would hand to a shell; \
                 choose a WF_HOME without any of {SHELL_SPECIAL:?} (or set DATABASE_URL)",
                home.display()
            );
        }
        let socket_dir = if usable_socket_dir(&dir) {
            dir.clone()
        } else {
            PathBuf::from("/tmp").join(format!("windforce-{}", short_hash(&dir)))
        };
        let lock_file = home.join("pg.lock");
        let down_mark = home.join("pg.down");
        Ok(Cluster { home, home_pg, dir, socket_dir, lock_file, down_mark, search_path: search_path.to_vec() })
    }

    pub fn home_pg(&self) -> &Path {
        &self.home_pg
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log_file(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    /// Set the server's log aside once it is longer than `LOG_KEPT_BYTES`.
    fn set_long_log_aside(&self) -> Result<()> {
        let log = self.log_file();
        if fs::metadata(&log).is_ok_and(|meta| meta.len() > LOG_KEPT_BYTES) {
            let aside = self.dir.join("postgres.log.1");
            fs::rename(&log, &aside)
                .with_context(|| format!("setting {} aside as {}", log.display(), aside.display()))?;
        }
        Ok(())
    }

    fn initialized(&self) -> bool {
        self.data_dir().join("PG_VERSION").exists()
    }

    pub fn client_config(&self) -> postgres::Config {
        let mut config = postgres::Config::new();
        config.host_path(&self.socket_dir).port(PORT).user(DB_USER).dbname(DB_NAME);
        config
    }

    /// A connection to the cluster's database, made within a bounded wait as every connection is.
    pub fn connect(&self) -> Result<postgres::Client> {
        super::Database::embedded(self).connect()
    }

    pub fn state(&self) -> Result<ClusterState> {
        self.not_in_the_way()?;
        self.check_data()?;
        let initialized = self.initialized();
        let running = initialized && self.postmaster()? == Postmaster::Running;
        Ok(ClusterState { initialized, running, held_down: self.down_mark.exists() })
    }

    /// Create the cluster if needed and start it if it is not running. Safe to call from many
    /// processes at once (a file lock serializes them) and after a crash or a reboot. Refused for
    /// a cluster `wf db down` stopped, until `wf db up` (`lift_down`).
    pub fn ensure_up(&self) -> Result<Started> {
        self.not_in_the_way()?;
        fs::create_dir_all(&self.home).with_context(|| format!("creating WF_HOME {}", self.home.display()))?;
        let _lock = FileLock::acquire(&self.lock_file)?;
        self.make_dirs()?;
        self.check_data()?;
        let postmaster = if self.initialized() { self.postmaster()? } else { Postmaster::Stopped };
        if postmaster != Postmaster::Running && self.down_mark.exists() {
            bail!(
                "the embedded cluster in {} was stopped by `wf db down`: `wf db up` starts it again (or set \
                 DATABASE_URL to use another database)",
                self.home_pg.display()
            );
        }
        let mut started = Started::Running;
        if !self.initialized() {
            self.init()?;
            started = Started::Created;
        }
        match postmaster {
            Postmaster::Running => {}
            state => {
                if state == Postmaster::Stale {
                    self.remove_stale_lock_files()?;
                }
                self.start()?;
                if started == Started::Running {
                    started = Started::Restarted;
                }
            }
        }
        self.create_database()?;
        Ok(started)
    }

    /// Stop the server, and keep it stopped: no command but `wf db up` starts it again (the mark
    /// is left under the lock, so that a command waiting for it meanwhile does not start it; a
    /// stop that fails leaves none).
    pub fn stop(&self) -> Result<bool> {
        self.not_in_the_way()?;
        self.check_data()?;
        if !self.initialized() {
            return Ok(false);
        }
        let _lock = FileLock::acquire(&self.lock_file)?;
        if !self.initialized() {
            return Ok(false);
        }
        if self.postmaster()? != Postmaster::Running {
            self.hold_down()?;
            return Ok(false);
        }
        let output = self
            .pg_command("pg_ctl")?
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "fast", "-w", "-t", "60", "stop"])
            .output()
            .context("running pg_ctl stop")?;
        if !output.status.success() {
            bail!("pg_ctl stop failed: {}", String::from_utf8_lossy(&output.stderr).trim());
        }
        self.hold_down()?;
        Ok(true)
    }

    /// Leave the mark that keeps the cluster stopped until `wf db up`.
    fn hold_down(&self) -> Result<()> {
        fs::write(&self.down_mark, "stopped by wf db down; wf db up starts it again\n")
            .with_context(|| format!("writing {}", self.down_mark.display()))
    }

    /// The folders, with owners and modes that keep other users out. Checked at every start, not
    /// only at creation: /tmp does not survive a reboot, and a link may have gone missing.
    fn make_dirs(&self) -> Result<()> {
        if is_root() {
            // The link first: when something is in its way, nothing is left behind in /var/lib.
            self.link_home_pg()?;
            let parent = Path::new(ROOT_CLUSTERS);
            fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
            // Whatever root's umask, the postgres user must be able to reach its folder inside.
            fs::set_permissions(parent, fs::Permissions::from_mode(0o755))
                .with_context(|| format!("making {} traversable", parent.display()))?;
        }
        make_private_dir(&self.dir)?;
        if self.socket_dir != self.dir {
            make_private_dir(&self.socket_dir)?;
        }
        Ok(())
    }

    /// As root, `$WF_HOME/pg` is a link to the cluster folder: made, or fixed when it points
    /// elsewhere. Anything else in its place is refused rather than deleted.
    /// As root, `$WF_HOME/pg` holding something other than the link to root's cluster (another
    /// user's cluster): said, rather than a cluster found not running where one may run.
    fn not_in_the_way(&self) -> Result<()> {
        // A link into root's clusters: the cluster is root's, which this user can neither read
        // (it would look stopped) nor start. (Any other link is refused further on: a user's
        // cluster is a folder of its own.)
        if !is_root()
            && let Some(target) = root_cluster_link(&self.home_pg)
        {
            bail!(
                "{} links to root's embedded cluster ({}): run wf as root with this WF_HOME, or give \
                 yourself a WF_HOME of your own",
                self.home_pg.display(),
                target.display()
            );
        }
        match fs::symlink_metadata(&self.home_pg) {
            Ok(meta) if is_root() && !meta.file_type().is_symlink() => {
                let empty = meta.is_dir() && fs::read_dir(&self.home_pg)?.next().is_none();
                if !empty {
                    return Err(self.in_the_way());
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn in_the_way(&self) -> anyhow::Error {
        anyhow::anyhow!(
            "{} is in the way: as root, wf keeps the embedded cluster in {} (PostgreSQL refuses to run as root) \
             and links {} to it; move {} away, or run wf as the user who created it",
            self.home_pg.display(),
            self.dir.display(),
            self.home_pg.display(),
            self.home_pg.display()
        )
    }

    fn link_home_pg(&self) -> Result<()> {
        match fs::symlink_metadata(&self.home_pg) {
            Ok(meta) if meta.file_type().is_symlink() => {
                if fs::read_link(&self.home_pg)? == self.dir {
                    return Ok(());
                }
                fs::remove_file(&self.home_pg)
                    .with_context(|| format!("replacing the link {}", self.home_pg.display()))?;
            }
            // An empty folder goes; remove_dir refuses anything else.
            Ok(meta) if meta.is_dir() && fs::remove_dir(&self.home_pg).is_ok() => {}
            Ok(_) => return Err(self.in_the_way()),
            Err(error) if error.kind() == ErrorKind::NotFound => {}
            Err(error) => return Err(error).with_context(|| format!("inspecting {}", self.home_pg.display())),
        }
        std::os::unix::fs::symlink(&self.dir, &self.home_pg)
            .with_context(|| format!("linking {} to {}", self.home_pg.display(), self.dir.display()))
    }

    /// A data folder that is not a cluster (no PG_VERSION) is never removed: it may be a cluster
    /// that lost that file, whose server may even be running. wf's own clusters are made aside and
    /// renamed into place complete (`init`), so an interrupted creation never leaves one.
    fn check_data(&self) -> Result<()> {
        if self.data_dir().exists() && !self.initialized() {
            bail!(
                "{} is not a complete PostgreSQL cluster (it has no PG_VERSION) and wf will not remove it: \
                 if it holds your jobs, put PG_VERSION back (it holds the server's major version, such as 15); \
                 otherwise move it away and wf creates a new cluster",
                self.data_dir().display()
            );
        }
        Ok(())
    }

    /// Create the cluster in a folder aside, with its settings, then rename it into place: a
    /// creation killed midway (initdb goes on writing after its parent is killed) leaves only that
    /// folder, which the next creation removes, never a cluster without wf's settings.
    fn init(&self) -> Result<()> {
        // Best effort: the initdb of a creation whose wf was killed may still be writing there
        // (then its folder goes at the next creation; each has a name of its own).
        for entry in fs::read_dir(&self.dir).with_context(|| format!("reading {}", self.dir.display()))? {
            let entry = entry?;
            if entry.file_name().to_string_lossy().starts_with(NEW_DATA_PREFIX) {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
        let aside = self.dir.join(format!("{NEW_DATA_PREFIX}{}", std::process::id()));
        // Connections over TCP are refused by the authentication rules too, should the server
        // ever listen there; over the socket, its folder's mode keeps others out.
        let output = self
            .pg_command("initdb")?
            .arg("-D")
            .arg(&aside)
            .args(["-U", DB_USER, "--auth-local=trust", "--auth-host=reject", "-E", "UTF8", "--no-locale"])
            .output()
            .context("running initdb")?;
        if !output.status.success() {
            bail!("initdb failed: {}", String::from_utf8_lossy(&output.stderr).trim());
        }
        // The socket folder is not set here but at each start (`-k`): the fallback under /tmp
        // depends on where the cluster is now.
        // The autovacuum launcher looks at the queue every few seconds instead of every minute:
        // dead index entries left by claims are what every claim walks (see migration 0005).
        let settings = format!(
            "\n# windforce embedded cluster: a Unix socket only, for its owner only\n\
             listen_addresses = ''\nport = {PORT}\nunix_socket_permissions = 0700\n\
             autovacuum_naptime = 5s\n"
        );
        let conf = aside.join("postgresql.conf");
        let mut file = fs::OpenOptions::new().append(true).open(&conf).context("opening postgresql.conf")?;
        std::io::Write::write_all(&mut file, settings.as_bytes()).context("writing postgresql.conf")?;
        file.sync_all().context("writing postgresql.conf")?;
        fs::rename(&aside, self.data_dir())
            .with_context(|| format!("renaming {} to {}", aside.display(), self.data_dir().display()))?;
        fs::File::open(&self.dir)
            .and_then(|dir| dir.sync_all())
            .with_context(|| format!("syncing {}", self.dir.display()))
    }

    fn start(&self) -> Result<()> {
        self.set_long_log_aside()?;
        let deadline = Instant::now() + START_RETRY;
        loop {
            let log_before = fs::metadata(self.log_file()).map_or(0, |meta| meta.len() as usize);
            let output = self
                .pg_command("pg_ctl")?
                .arg("-D")
                .arg(self.data_dir())
                .arg("-l")
                .arg(self.log_file())
                // usable_socket_dir keeps quotes out of the path, so single quotes suffice for the
                // shell that pg_ctl runs the server with.
                .arg("-o")
                .arg(format!("-k '{}'", self.socket_dir.display()))
                .args(["-w", "-t", "60", "start"])
                .output()
                .context("running pg_ctl start")?;
            if output.status.success() {
                return Ok(());
            }
            let log = fs::read(self.log_file()).unwrap_or_default();
            let log = String::from_utf8_lossy(log.get(log_before..).unwrap_or_default());
            // The processes of a killed server let go of its shared memory within moments.
            if log.contains("pre-existing shared memory block") && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            bail!(
                "starting the embedded cluster failed: {} {} (log: {})",
                String::from_utf8_lossy(&output.stderr).trim(),
                tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
                self.log_file().display()
            );
        }
    }

    fn create_database(&self) -> Result<()> {
        let mut config = self.client_config();
        config.dbname("postgres");
        let mut client = config
            .connect(postgres::NoTls)
            .with_context(|| format!("connecting to the embedded cluster in {}", self.socket_dir.display()))?;
        let exists = client.query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&DB_NAME])?.is_some();
        if !exists {
            client.batch_execute(&format!("CREATE DATABASE {DB_NAME}")).context("creating the windforce database")?;
        }
        Ok(())
    }

    /// Let the cluster be started again (`wf db up`): takes away the mark `stop` left.
    pub fn lift_down(&self) -> Result<()> {
        if !self.down_mark.exists() {
            return Ok(());
        }
        let _lock = FileLock::acquire(&self.lock_file)?;
        match fs::remove_file(&self.down_mark) {
            Err(error) if error.kind() != ErrorKind::NotFound => {
                Err(error).with_context(|| format!("removing {}", self.down_mark.display()))
            }
            _ => Ok(()),
        }
    }

    /// Whether the server is gone without a shutdown (a crash, a kill): its pid file is left.
    pub fn crashed(&self) -> bool {
        matches!(self.postmaster(), Ok(Postmaster::Stale))
    }

    /// Whether the server of `postmaster.pid` is alive. `pg_ctl status` is not enough: it takes a
    /// zombie (a killed server whose parent is an init that never reaps, as in many containers)
    /// or a pid that a reboot gave to another program for a running server.
    fn postmaster(&self) -> Result<Postmaster> {
        let pid_file = self.data_dir().join("postmaster.pid");
        let text = match fs::read_to_string(&pid_file) {
            Ok(text) => text,
            Err(error) if error.kind() == ErrorKind::NotFound => return Ok(Postmaster::Stopped),
            Err(error) => return Err(error).with_context(|| format!("reading {}", pid_file.display())),
        };
        let pid = text.lines().next().and_then(|line| line.trim().parse::<i32>().ok());
        match pid {
            Some(pid) if is_server_of(pid, &self.data_dir()) => Ok(Postmaster::Running),
            _ => Ok(Postmaster::Stale),
        }
    }

    /// The lock files of a server that is gone name its pid, which may now be a zombie or another
    /// process: PostgreSQL would then refuse to start. Its shared-memory check still protects the
    /// data from leftover processes of the old server.
    fn remove_stale_lock_files(&self) -> Result<()> {
        for path in [self.data_dir().join("postmaster.pid"), self.socket_dir.join(format!(".s.PGSQL.{PORT}.lock"))] {
            match fs::remove_file(&path) {
                Err(error) if error.kind() != ErrorKind::NotFound => {
                    return Err(error).with_context(|| format!("removing the stale {}", path.display()));
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn pg_command(&self, program: &str) -> Result<Command> {
        let mut command = Command::new(pg_bin(program, &self.search_path)?);
        command.current_dir(&self.dir);
        run_as_cluster_owner(&mut command)?;
        Ok(command)
    }
}

/// The cluster that root's `$WF_HOME/pg` links to, when it is one: a WF_HOME moved or renamed
/// keeps its cluster (named after the path it had), where one of its new path's name would be made,
/// empty, beside the old one still running.
fn linked_cluster(home_pg: &Path) -> Option<PathBuf> {
    root_cluster_link(home_pg).filter(|target| target.join("data").join("PG_VERSION").exists())
}

/// Where `$WF_HOME/pg` links to, when that is a folder of root's clusters.
fn root_cluster_link(home_pg: &Path) -> Option<PathBuf> {
    fs::read_link(home_pg).ok().filter(|target| target.parent() == Some(Path::new(ROOT_CLUSTERS)))
}

/// A short, stable name for a path.
fn short_hash(path: &Path) -> String {
    let digest = Sha256::digest(path.as_os_str().as_bytes());
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// Whether the socket can live in `dir`: the path fits a Unix socket, and holds nothing that the
/// shell pg_ctl runs the server with, or PostgreSQL's comma-separated list, would split.
fn usable_socket_dir(dir: &Path) -> bool {
    let socket = dir.join(format!(".s.PGSQL.{PORT}"));
    socket.as_os_str().len() <= MAX_SOCKET_PATH
        && dir.to_str().is_some_and(|text| !text.contains([',', '\'', '"', '\\']))
}

/// Whether `pid` is a live server started on `data_dir` (`postgres -D <data_dir>`, from pg_ctl).
fn is_server_of(pid: i32, data_dir: &Path) -> bool {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    if !Path::new("/proc/self").exists() {
        // Signal 0 only asks whether the process exists.
        return rustix::process::Pid::from_raw(pid).is_some_and(|pid| rustix::process::test_kill_process(pid).is_ok());
    }
    let Ok(stat) = fs::read_to_string(proc.join("stat")) else { return false };
    // The state follows the command name, which is in parentheses and may hold anything.
    let zombie = stat.rsplit_once(')').is_none_or(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']));
    if zombie {
        return false;
    }
    let Ok(cmdline) = fs::read(proc.join("cmdline")) else { return false };
    cmdline.split(|byte| *byte == 0).any(|arg| arg == data_dir.as_os_str().as_bytes())
}

/// Make a folder only the cluster's owner can enter, or check that an existing one is such.
fn make_private_dir(path: &Path) -> Result<()> {
    match fs::create_dir(path) {
        Err(error) if error.kind() != ErrorKind::AlreadyExists => {
            return Err(error).with_context(|| format!("creating {}", path.display()));
        }
        _ => {}
    }
    let meta = fs::symlink_metadata(path).with_context(|| format!("inspecting {}", path.display()))?;
    if !meta.is_dir() {
        bail!("{} should be a folder for the embedded cluster, and is not: move it away", path.display());
    }
    if is_root() {
        chown_to_postgres(path)?;
    } else {
        let uid = rustix::process::geteuid().as_raw();
        if meta.uid() != uid {
            bail!(
                "{} belongs to another user (uid {}): remove it, or set WF_HOME to a folder of yours",
                path.display(),
                meta.uid()
            );
        }
    }
    fs::set_permissions(path, fs::Permissions::from_mode(0o700))
        .with_context(|| format!("making {} private", path.display()))
}

/// A PostgreSQL server binary: in the first folder of `search_path` (PATH) that has it, else the
/// newest under /usr/lib/postgresql/*/bin.
pub fn pg_bin(program: &str, search_path: &[PathBuf]) -> Result<PathBuf> {
    if let Some(found) = search_path.iter().map(|dir| dir.join(program)).find(|candidate| candidate.is_file()) {
        return Ok(found);
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let candidate = entry.path().join("bin").join(program);
            candidate.is_file().then_some((version, candidate))
        })
        .collect();
    versions.sort();
    match versions.pop() {
        Some((_, path)) => Ok(path),
        None => bail!(
            "PostgreSQL server binary `{program}` not found on PATH or under /usr/lib/postgresql/*/bin: \
             install the PostgreSQL server, or set DATABASE_URL to use an existing database"
        ),
    }
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// PostgreSQL refuses to run as root: as root, run its binaries as the `postgres` user.
pub fn run_as_cluster_owner(command: &mut Command) -> Result<()> {
    if is_root() {
        let user = postgres_user()?;
        command.uid(user.uid).gid(user.gid).env("HOME", user.home).env("USER", "postgres");
    }
    Ok(())
}

struct PostgresUser {
    uid: u32,
    gid: u32,
    home: PathBuf,
}

fn postgres_user() -> Result<PostgresUser> {
    let user = nix::unistd::User::from_name("postgres").context("looking up the `postgres` user")?;
    let Some(user) = user else {
        bail!(
            "running as root needs a `postgres` user to own the embedded cluster (PostgreSQL refuses \
             root): install the PostgreSQL server package, or run wf as another user"
        );
    };
    Ok(PostgresUser { uid: user.uid.as_raw(), gid: user.gid.as_raw(), home: user.dir })
}

/// Give a folder to the `postgres` user (as root).
pub fn chown_to_postgres(path: &Path) -> Result<()> {
    if is_root() {
        let user = postgres_user()?;
        std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid))
            .with_context(|| format!("giving {} to the postgres user", path.display()))?;
    }
    Ok(())
}

/// An exclusive `flock` on a file, released when dropped (or when the process dies).
pub struct FileLock {
    _file: fs::File,
}

impl FileLock {
    pub fn acquire(path: &Path) -> Result<FileLock> {
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .with_context(|| format!("opening lock file {}", path.display()))?;
        file.lock().with_context(|| format!("locking {}", path.display()))?;
        Ok(FileLock { _file: file })
    }
}
