//! The embedded default: a private PostgreSQL cluster under `$WF_HOME/pg`, created with the
//! server binaries installed on the machine and reached on a Unix socket in that folder.
//!
//! PostgreSQL refuses to run as root, so as root the cluster runs as the `postgres` user. Root's
//! home is usually not traversable by that user, so as root the cluster lives in
//! `/var/lib/windforce/<hash of WF_HOME>` and `$WF_HOME/pg` is a symlink to it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use crate::output::Output;

/// The superuser and database of the embedded cluster.
const DB_USER: &str = "windforce";
const DB_NAME: &str = "windforce";
const PORT: u16 = 5432;
/// The longest Unix socket path the kernel accepts, less a margin.
const MAX_SOCKET_PATH: usize = 100;

#[derive(Debug, Clone)]
pub struct Cluster {
    /// `$WF_HOME/pg`, as the operator sees it.
    home_pg: PathBuf,
    /// Where the files really are (differs from home_pg as root).
    dir: PathBuf,
    /// The socket directory.
    socket_dir: PathBuf,
}

/// The state of the embedded cluster, for `wf db status`.
#[derive(Debug)]
pub struct ClusterState {
    pub initialized: bool,
    pub running: bool,
}

impl Cluster {
    pub fn locate() -> Result<Cluster> {
        let home = crate::config::wf_home()?;
        fs::create_dir_all(&home).with_context(|| format!("creating WF_HOME {}", home.display()))?;
        let home = home.canonicalize()?;
        let home_pg = home.join("pg");
        let dir = if is_root() {
            let digest = Sha256::digest(home.as_os_str().as_encoded_bytes());
            let hash: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
            PathBuf::from("/var/lib/windforce").join(hash)
        } else {
            home_pg.clone()
        };
        let socket_dir = if dir.join(".s.PGSQL.5432").as_os_str().len() > MAX_SOCKET_PATH {
            let digest = Sha256::digest(dir.as_os_str().as_encoded_bytes());
            let hash: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
            std::env::temp_dir().join(format!("windforce-{hash}"))
        } else {
            dir.clone()
        };
        Ok(Cluster { home_pg, dir, socket_dir })
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

    pub fn client_config(&self) -> postgres::Config {
        let mut config = postgres::Config::new();
        config.host_path(&self.socket_dir).port(PORT).user(DB_USER).dbname(DB_NAME);
        config
    }

    pub fn state(&self) -> Result<ClusterState> {
        let initialized = self.data_dir().join("PG_VERSION").exists();
        let running = initialized && self.pg_ctl_status()?;
        Ok(ClusterState { initialized, running })
    }

    /// Create the cluster if needed and start it if it is not running. Safe to call from many
    /// processes at once (a file lock serializes them) and after a reboot (pg_ctl handles a
    /// stale pid file).
    pub fn ensure_up(&self, out: &Output) -> Result<()> {
        let home = self.home_pg.parent().expect("pg has a parent");
        let _lock = FileLock::acquire(&home.join("pg.lock"))?;
        if !self.data_dir().join("PG_VERSION").exists() {
            self.init(out)?;
        }
        if !self.pg_ctl_status()? {
            out.info(&format!("starting the embedded PostgreSQL cluster in {}", self.home_pg.display()));
            self.start()?;
        }
        self.create_database()
    }

    pub fn stop(&self) -> Result<bool> {
        if !self.data_dir().join("PG_VERSION").exists() || !self.pg_ctl_status()? {
            return Ok(false);
        }
        let status = self
            .pg_command("pg_ctl")?
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "fast", "-w", "stop"])
            .output()
            .context("running pg_ctl stop")?;
        if !status.status.success() {
            bail!("pg_ctl stop failed: {}", String::from_utf8_lossy(&status.stderr).trim());
        }
        Ok(true)
    }

    fn init(&self, out: &Output) -> Result<()> {
        out.info(&format!(
            "creating the embedded PostgreSQL cluster in {} (set DATABASE_URL to use another database)",
            self.home_pg.display()
        ));
        if self.dir != self.home_pg {
            fs::create_dir_all(&self.dir).with_context(|| format!("creating {}", self.dir.display()))?;
            chown_to_postgres(&self.dir)?;
            if self.home_pg.symlink_metadata().is_ok() {
                fs::remove_file(&self.home_pg).ok();
            }
            std::os::unix::fs::symlink(&self.dir, &self.home_pg)
                .with_context(|| format!("linking {} to {}", self.home_pg.display(), self.dir.display()))?;
        } else {
            fs::create_dir_all(&self.dir).with_context(|| format!("creating {}", self.dir.display()))?;
            fs::set_permissions(&self.dir, fs::Permissions::from_mode(0o700))?;
        }
        if self.socket_dir != self.dir {
            fs::create_dir_all(&self.socket_dir)?;
            chown_to_postgres(&self.socket_dir)?;
        }
        // A data folder without PG_VERSION is the leftover of an interrupted initdb.
        if self.data_dir().exists() {
            fs::remove_dir_all(self.data_dir()).context("removing an incomplete cluster")?;
        }
        let output = self
            .pg_command("initdb")?
            .arg("-D")
            .arg(self.data_dir())
            .args(["-U", DB_USER, "--auth=trust", "-E", "UTF8", "--no-locale"])
            .output()
            .context("running initdb")?;
        if !output.status.success() {
            bail!("initdb failed: {}", String::from_utf8_lossy(&output.stderr).trim());
        }
        let settings = format!(
            "\n# windforce embedded cluster\nlisten_addresses = ''\nport = {PORT}\nunix_socket_directories = '{}'\n",
            self.socket_dir.display().to_string().replace('\'', "''")
        );
        let conf = self.data_dir().join("postgresql.conf");
        let mut text = fs::read_to_string(&conf).context("reading postgresql.conf")?;
        text.push_str(&settings);
        fs::write(&conf, text).context("writing postgresql.conf")?;
        Ok(())
    }

    fn start(&self) -> Result<()> {
        let output = self
            .pg_command("pg_ctl")?
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.log_file())
            .args(["-w", "-t", "60", "start"])
            .output()
            .context("running pg_ctl start")?;
        if !output.status.success() {
            let log = fs::read_to_string(self.log_file()).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            bail!(
                "starting the embedded cluster failed: {} {}",
                String::from_utf8_lossy(&output.stderr).trim(),
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            );
        }
        Ok(())
    }

    fn create_database(&self) -> Result<()> {
        let mut config = self.client_config();
        config.dbname("postgres");
        let mut client = config.connect(postgres::NoTls).context("connecting to the embedded cluster")?;
        let exists = client.query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&DB_NAME])?.is_some();
        if !exists {
            client.batch_execute(&format!("CREATE DATABASE {DB_NAME}"))?;
        }
        Ok(())
    }

    fn pg_ctl_status(&self) -> Result<bool> {
        let status = self
            .pg_command("pg_ctl")?
            .arg("-D")
            .arg(self.data_dir())
            .arg("status")
            .output()
            .context("running pg_ctl status")?;
        Ok(status.status.success())
    }

    fn pg_command(&self, program: &str) -> Result<Command> {
        let mut command = Command::new(pg_bin(program)?);
        command.current_dir(&self.dir);
        run_as_cluster_owner(&mut command)?;
        Ok(command)
    }
}

/// A PostgreSQL server binary: on PATH, else the newest under /usr/lib/postgresql/*/bin.
pub fn pg_bin(program: &str) -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(program);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
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
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// PostgreSQL refuses to run as root: as root, run its binaries as the `postgres` user.
pub fn run_as_cluster_owner(command: &mut Command) -> Result<()> {
    if is_root() {
        let (uid, gid) = postgres_user()?;
        command.uid(uid).gid(gid).env("HOME", "/var/lib/postgresql").env("USER", "postgres");
    }
    Ok(())
}

fn postgres_user() -> Result<(u32, u32)> {
    let name = std::ffi::CString::new("postgres").expect("no NUL");
    // SAFETY: getpwnam returns a pointer into static storage or NULL; read it at once.
    let entry = unsafe { libc::getpwnam(name.as_ptr()) };
    if entry.is_null() {
        bail!("running as root needs a `postgres` user to own the embedded cluster (PostgreSQL refuses root)");
    }
    // SAFETY: entry is non-null and points to a valid passwd record.
    Ok(unsafe { ((*entry).pw_uid, (*entry).pw_gid) })
}

/// Give a folder to the `postgres` user (as root).
pub fn chown_to_postgres(path: &Path) -> Result<()> {
    if is_root() {
        let (uid, gid) = postgres_user()?;
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
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
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a valid, owned file descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error()).with_context(|| format!("locking {}", path.display()));
        }
        Ok(FileLock { _file: file })
    }

    /// Take the lock only if nobody holds it.
    pub fn try_acquire(path: &Path) -> Result<Option<FileLock>> {
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .with_context(|| format!("opening lock file {}", path.display()))?;
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a valid, owned file descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Ok(None);
        }
        Ok(Some(FileLock { _file: file }))
    }
}
