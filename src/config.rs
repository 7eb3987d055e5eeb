//! Configuration from the environment (SPEC: Configuration): the one place wf reads its
//! environment. `commands::dispatch` reads it once into a `Config` and each command hands the
//! library the values it needs; the library never reads a variable. A value that can be wrong is
//! checked when a command asks for it, so a command that does not need it never fails over it.

use std::env::VarError;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// Variables of the worker's own environment that an action gets besides the WF_* variables the
/// worker gives it (SPEC: Action contract). Inside a sandbox, PATH and HOME are the sandbox's.
const INHERITED: [&str; 3] = ["PATH", "HOME", "TZ"];

/// Where `scripts/tools` installs bun, in wf's checkout.
const DEMO_BUN: &str = ".tools/node_modules/.bin/bun";

/// The environment, as wf reads it.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    home: Option<PathBuf>,
    store: Option<PathBuf>,
    bun: String,
    secret: Option<String>,
    zombie_timeout: Option<String>,
    restart_limit: Option<String>,
    heartbeat: Option<String>,
    /// The folders of PATH, where bun and the PostgreSQL server binaries are looked for.
    pub search_path: Vec<PathBuf>,
    /// PATH, HOME and TZ as an action inherits them.
    pub inherited_env: Vec<(String, String)>,
    /// Who is acting, for records such as `canceled_by`: `user@host`.
    pub operator: String,
    /// NO_COLOR is set.
    pub no_color: bool,
    /// WF_FAULT: the fault point switched on for the tests (see `fault`).
    pub fault: Option<String>,
    /// The binary attempts' supervisors run as: `wf-supervise` beside this executable (it starts
    /// in a fraction of the time), else this executable itself (`wf __supervise`).
    pub supervisor: PathBuf,
}

/// The environment variables wf reads, with what each means and its default: wf(1)'s ENVIRONMENT
/// section.
pub(crate) const ENVIRONMENT: [(&str, &str); 13] = [
    (
        "DATABASE_URL",
        "PostgreSQL connection, URL or key=value (--database-url), with libpq's TLS options sslmode (default prefer), sslrootcert (a PEM file, or system), sslcert and sslkey. Unset: the embedded cluster under WF_HOME.",
    ),
    (
        "PGSSLMODE, PGSSLROOTCERT, PGSSLCERT, PGSSLKEY",
        "sslmode, sslrootcert, sslcert and sslkey for a DATABASE_URL that does not give them (as libpq).",
    ),
    (
        "PGPASSFILE",
        "libpq's password file, for a DATABASE_URL without a password (lines host:port:database:user:password; read only with permissions 0600 or less). Default: ~/.pgpass.",
    ),
    (
        "WF_HOME",
        "Local state: the embedded cluster, git mirrors, the store, worker scratch, the secret. Default: $XDG_DATA_HOME/windforce, else ~/.local/share/windforce.",
    ),
    ("WF_STORE", "The source store. Default: $WF_HOME/store."),
    (
        "WF_SECRET",
        "The HMAC key of WF_TOKEN (32 bytes or more); the same on every host. Default: generated once into $WF_HOME/secret.",
    ),
    ("WF_BUN", "The bun executable. Default: bun on PATH, else the one scripts/tools installed beside wf's checkout."),
    ("WF_ZOMBIE_TIMEOUT_S", "The reaper's window in seconds, from 1 to 604800 (7 days). Default: 60."),
    ("WF_RESTART_LIMIT", "Restarts before a dying job completes as failure. Default: 3."),
    (
        "WF_HEARTBEAT_S",
        "A worker's heartbeat period in seconds (at least 1, at most a third of the window). Default: 5.",
    ),
    ("WF_ISOLATION", "How a worker isolates actions (wf work --isolation): sandbox or none. Default: sandbox."),
    ("WF_ALLOW_WRITE", "Host folders bound read-write into every sandbox, colon-separated (wf work --allow-write)."),
    ("NO_COLOR", "When set, no colours in tables (nothing else changes)."),
];

/// The variables `Config::from_env` reads a value of (PATH and those the command line reads aside).
const READ: [&str; 10] = [
    "WF_HOME",
    "XDG_DATA_HOME",
    "HOME",
    "WF_STORE",
    "WF_BUN",
    "WF_SECRET",
    "WF_ZOMBIE_TIMEOUT_S",
    "WF_RESTART_LIMIT",
    "WF_HEARTBEAT_S",
    "WF_FAULT",
];

impl Config {
    /// The configuration from the environment; a variable wf reads that is not valid UTF-8 is an
    /// error (taken for unset, a WF_HOME or WF_STORE would have wf use the default's cluster or
    /// store, and a WF_SECRET a key of its own).
    pub(crate) fn from_env() -> Result<Config> {
        if let Some(name) = READ.into_iter().find(|name| matches!(std::env::var(name), Err(VarError::NotUnicode(_)))) {
            bail!("{name} is not valid UTF-8: wf reads it as text");
        }
        Ok(Config::from_valid_env())
    }

    fn from_valid_env() -> Config {
        let home = env_nonempty("WF_HOME").map(PathBuf::from).or_else(|| {
            env_nonempty("XDG_DATA_HOME")
                .map(|data| PathBuf::from(data).join("windforce"))
                .or_else(|| env_nonempty("HOME").map(|home| PathBuf::from(home).join(".local/share/windforce")))
        });
        // Cron, systemd units and containers often set neither variable: then the account's name.
        let user = env_nonempty("USER").or_else(|| env_nonempty("LOGNAME")).unwrap_or_else(|| {
            let account = nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten();
            account.map_or_else(|| "unknown".to_string(), |account| account.name)
        });
        Config {
            home,
            store: env_nonempty("WF_STORE").map(PathBuf::from),
            bun: env_nonempty("WF_BUN").unwrap_or_else(|| "bun".to_string()),
            secret: std::env::var("WF_SECRET").ok(),
            zombie_timeout: env_nonempty("WF_ZOMBIE_TIMEOUT_S"),
            restart_limit: env_nonempty("WF_RESTART_LIMIT"),
            heartbeat: env_nonempty("WF_HEARTBEAT_S"),
            search_path: std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).collect(),
            inherited_env: INHERITED
                .iter()
                .filter_map(|name| std::env::var(name).ok().map(|value| (name.to_string(), value)))
                .collect(),
            operator: format!("{user}@{}", hostname()),
            // no-color.org: set and not empty.
            no_color: std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty()),
            fault: std::env::var("WF_FAULT").ok(),
            supervisor: supervisor_binary(),
        }
    }

    /// Local state: embedded cluster, git mirrors, source store, worker scratch, secret. WF_HOME,
    /// else `$XDG_DATA_HOME/windforce`, else `~/.local/share/windforce`.
    pub(crate) fn home(&self) -> Result<&Path> {
        self.home.as_deref().context("neither WF_HOME, XDG_DATA_HOME nor HOME is set")
    }

    /// The source store: `<store>/<git_source_id>/<commit>/` trees, each with its marker.
    pub(crate) fn store(&self) -> Result<PathBuf> {
        match &self.store {
            Some(store) => Ok(store.clone()),
            None => Ok(self.home()?.join("store")),
        }
    }

    /// The bun executable: WF_BUN (a path, or a name looked up on PATH), else `bun` on PATH, else
    /// the bun `scripts/tools` (the demo, the tests) installed into `.tools/` of the checkout this
    /// wf was built from, so that a `wf` installed with `cargo install --path .` after the demo
    /// runs actions without more setup. Resolved once, so that the action's PATH never decides
    /// which bun runs it.
    /// The git executable on PATH, which fetches faster than libgit2 (`source::git::fetch`).
    pub(crate) fn git(&self) -> Option<PathBuf> {
        self.search_path.iter().map(|dir| dir.join("git")).find(|path| path.is_file())
    }

    pub(crate) fn bun(&self) -> Result<PathBuf> {
        let hint = "set WF_BUN to the path of the bun executable, put bun on PATH, or run scripts/tools                     in wf's checkout to install one into its .tools/";
        if self.bun.contains('/') {
            return Ok(PathBuf::from(&self.bun));
        }
        let demo = (self.bun == "bun").then(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(DEMO_BUN));
        self.search_path
            .iter()
            .map(|dir| dir.join(&self.bun))
            .chain(demo)
            .find(|candidate| is_executable(candidate))
            .and_then(|found| std::path::absolute(found).ok())
            .with_context(|| format!("bun not found: no {:?} on PATH ({hint})", self.bun))
    }

    /// WF_SECRET as given (its length is checked where it is used, see `token::load_secret`).
    pub(crate) fn secret(&self) -> Option<&str> {
        self.secret.as_deref()
    }

    /// The reaper window: a running job without a ping for this long is a zombie.
    pub(crate) fn zombie_timeout(&self) -> Result<Duration> {
        let seconds = whole("WF_ZOMBIE_TIMEOUT_S", self.zombie_timeout.as_deref(), 60, "a whole number of seconds")?;
        // The window bounds statements' timeouts, which PostgreSQL takes in milliseconds of an
        // integer (about 24.8 days): a longer one failed at the first statement, or every reaper pass.
        if !(1..=MAX_ZOMBIE_TIMEOUT_S).contains(&seconds) {
            bail!(
                "WF_ZOMBIE_TIMEOUT_S={seconds}: the reaper's window is from 1 to {MAX_ZOMBIE_TIMEOUT_S} seconds (7 days)"
            );
        }
        Ok(Duration::from_secs(seconds))
    }

    /// Restarts before a dying job completes as failure.
    pub(crate) fn restart_limit(&self) -> Result<i32> {
        let limit = whole("WF_RESTART_LIMIT", self.restart_limit.as_deref(), 3, "a whole number of restarts")?;
        i32::try_from(limit).context("WF_RESTART_LIMIT is too large")
    }

    /// The heartbeat period.
    pub(crate) fn heartbeat(&self) -> Result<Duration> {
        Ok(Duration::from_secs(whole("WF_HEARTBEAT_S", self.heartbeat.as_deref(), 5, "a whole number of seconds")?))
    }
}

/// The longest reaper's window, in seconds: 7 days.
pub(crate) const MAX_ZOMBIE_TIMEOUT_S: u64 = 7 * 24 * 3600;

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// A whole number from variable `name`, `default` when unset; `what` says what it counts.
fn whole(name: &str, text: Option<&str>, default: u64, what: &str) -> Result<u64> {
    match text {
        None => Ok(default),
        Some(text) => match text.trim().parse::<u64>() {
            Ok(value) => Ok(value),
            Err(_) => bail!("{name}={text:?} is not {what}"),
        },
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

/// This machine's host name.
pub(crate) fn hostname() -> String {
    let name = rustix::system::uname().nodename().to_string_lossy().into_owned();
    if name.is_empty() { "localhost".to_string() } else { name }
}

/// `wf-supervise` beside the running executable when it is there, else the running executable.
fn supervisor_binary() -> PathBuf {
    let beside = std::env::current_exe().ok().map(|exe| exe.with_file_name("wf-supervise"));
    match beside {
        Some(path) if path.is_file() => path,
        _ => PathBuf::from("/proc/self/exe"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With no bun on PATH, a `wf` built from a checkout finds the bun the demo installed there, or
    /// says how to get one.
    #[test]
    fn without_bun_on_path_the_checkouts_tools_bun_is_used() {
        let mut config = Config::from_env().unwrap();
        config.bun = "bun".to_string();
        config.search_path = Vec::new();
        let installed = Path::new(env!("CARGO_MANIFEST_DIR")).join(DEMO_BUN);
        match config.bun() {
            Ok(found) => assert_eq!(found, installed),
            Err(error) => {
                assert!(!installed.exists(), "{error:#}");
                assert!(format!("{error:#}").contains("scripts/tools"), "{error:#}");
            }
        }
    }
}
