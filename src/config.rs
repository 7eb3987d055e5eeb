//! Configuration from the environment (SPEC: Configuration), read in one place.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// Local state: embedded cluster, git mirrors, source store, worker scratch, secret.
pub(crate) fn wf_home() -> Result<PathBuf> {
    if let Some(home) = env_nonempty("WF_HOME") {
        return Ok(PathBuf::from(home));
    }
    if let Some(data) = env_nonempty("XDG_DATA_HOME") {
        return Ok(PathBuf::from(data).join("windforce"));
    }
    let home = env_nonempty("HOME").context("neither WF_HOME, XDG_DATA_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".local/share/windforce"))
}

/// The source store: `<store>/<git_source_id>/<commit>/` trees, each with its marker.
pub(crate) fn wf_store() -> Result<PathBuf> {
    match env_nonempty("WF_STORE") {
        Some(store) => Ok(PathBuf::from(store)),
        None => Ok(wf_home()?.join("store")),
    }
}

/// The bun executable: WF_BUN, else `bun` on PATH.
pub(crate) fn bun_path() -> String {
    env_nonempty("WF_BUN").unwrap_or_else(|| "bun".to_string())
}

/// The reaper window: a running job without a ping for this long is a zombie.
pub(crate) fn zombie_timeout() -> Result<Duration> {
    Ok(Duration::from_secs(env_u64("WF_ZOMBIE_TIMEOUT_S", 60, "a whole number of seconds")?))
}

/// Restarts before a dying job completes as failure.
pub(crate) fn restart_limit() -> Result<i32> {
    let limit = env_u64("WF_RESTART_LIMIT", 3, "a whole number of restarts")?;
    i32::try_from(limit).context("WF_RESTART_LIMIT is too large")
}

/// The heartbeat period.
pub(crate) fn heartbeat_period() -> Result<Duration> {
    Ok(Duration::from_secs(env_u64("WF_HEARTBEAT_S", 5, "a whole number of seconds")?))
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// A whole number from the environment; `what` says what it counts, for the error.
fn env_u64(name: &str, default: u64, what: &str) -> Result<u64> {
    match env_nonempty(name) {
        None => Ok(default),
        Some(text) => match text.trim().parse::<u64>() {
            Ok(value) => Ok(value),
            Err(_) => bail!("{name}={text:?} is not {what}"),
        },
    }
}

/// This machine's host name.
pub(crate) fn hostname() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: gethostname writes at most buffer.len() bytes into the buffer.
    let ok = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) } == 0;
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    if ok && end > 0 { String::from_utf8_lossy(&buffer[..end]).to_string() } else { "localhost".to_string() }
}

/// Who is acting, for records such as `canceled_by`: `user@host`.
pub(crate) fn operator() -> String {
    let user = env_nonempty("USER").or_else(|| env_nonempty("LOGNAME")).unwrap_or_else(|| "unknown".to_string());
    format!("{user}@{}", hostname())
}
