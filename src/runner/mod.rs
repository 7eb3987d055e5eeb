//! Running one action attempt under the worker's control.
//!
//! ```text
//! worker thread ──spawns──> wf __supervise  (own process group, parent-death signal, subreaper)
//!      ^                        └──> bun run wrapper.mjs <entrypoint> <input.json> <result.json>
//!      └── pipes: Event::Line ...,  Event::Done             └──> whatever the action starts
//! ```
//!
//! - `attempt`: `Running::start(Spec)` → events → `stop()` when needed → `finish()` → `Outcome`.
//! - `supervisor`: the process that owns the action's whole tree and kills it (ADR-0011).
//! - `pump`: the supervisor's stdout/stderr turned into lines.
//! - `memcg`: a sandboxed attempt's memory cgroup, where the worker may make one.
//! - `scratch`: per-worker scratch roots and per-attempt directories, stale ones removed.
//! - `wrapper`: the script that calls `main(input)` and writes the result file.

mod attempt;
pub(crate) mod memcg;
mod pump;
pub(crate) mod sandbox;
mod scratch;
mod seccomp;
pub(crate) mod supervisor;
mod wrapper;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

pub use attempt::{Event, Isolation, MAX_RESULT_BYTES, Outcome, Running, SandboxOptions, Spec, Stream};
pub use pump::MAX_LINE;
pub use sandbox::Limits;
pub use scratch::{STALE_ROOTS_PERIOD, ScratchRoot, Sweep};
pub(crate) use supervisor::WORKER_STOPPED;

/// The supervisor's entry point (`wf-supervise __supervise`, or `wf __supervise`, the plan in
/// `WF_SUPERVISION`): run the plan, return the supervisor's exit code (bun's, or 128 + a signal; 1
/// when the plan is bad). `__supervise --protocol` prints `supervisor::PROTOCOL`.
pub fn supervise_main(args: impl Iterator<Item = String>) -> i32 {
    if let Err(error) = supervisor::not_dumpable() {
        crate::diag::diag!("error: {error:#}");
        return 1;
    }
    let args: Vec<String> = args.collect();
    let plan = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["__supervise"] => supervisor::Supervision::from_env(),
        ["__supervise", "--protocol"] => {
            println!("{}", supervisor::PROTOCOL);
            return 0;
        }
        _ => Err(anyhow::anyhow!("usage: wf-supervise __supervise (started by wf work, not by hand)")),
    };
    match plan.and_then(|plan| supervisor::supervise(&plan)) {
        Ok(code) => code,
        Err(error) => {
            crate::diag::diag!("error: {error:#}");
            1
        }
    }
}

/// The binary a worker runs its attempts' supervisors with (`<it> __supervise`, the plan in its
/// environment), opened once: an upgrade that replaces the file later does not mix versions, the
/// worker keeps running the one it started with.
pub struct SupervisorExe(std::fs::File);

impl SupervisorExe {
    pub fn open(path: &Path) -> Result<SupervisorExe> {
        std::fs::File::open(path)
            .map(SupervisorExe)
            .with_context(|| format!("opening the action supervisor {}", path.display()))
    }

    /// Refuse a supervisor of another build (a `wf-supervise` left beside a newer `wf`): it would
    /// start bun otherwise than this worker expects, and fail jobs. An older one does not know
    /// `--protocol` and fails.
    pub fn check(&self, path: &Path) -> Result<()> {
        let output = Command::new(self.path())
            .args(["__supervise", "--protocol"])
            .output()
            .with_context(|| format!("running the action supervisor {}", path.display()))?;
        let answer = String::from_utf8_lossy(&output.stdout).trim().to_string();
        if !output.status.success() || answer != supervisor::PROTOCOL.to_string() {
            bail!(
                "the action supervisor {} is not of this build of wf (asked its protocol, it answered {:?} \
                 with {}; this wf speaks {}): install wf and wf-supervise together (cargo install --locked --path .)",
                path.display(),
                answer,
                output.status,
                supervisor::PROTOCOL
            );
        }
        Ok(())
    }

    /// A path to the binary as it was opened.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&self.0)))
    }
}

/// Run `bun --version`: the check a worker makes before it claims anything, so a missing bun is one
/// clear error at start rather than a failure per job.
pub fn check_bun(bun: &str) -> Result<String> {
    let path = resolve_bun(bun)?;
    let output = Command::new(&path)
        .arg("--version")
        .output()
        .with_context(|| format!("running {} --version (set WF_BUN to a working bun)", path.display()))?;
    if !output.status.success() {
        bail!(
            "{} --version failed ({}): {} (set WF_BUN to a working bun)",
            path.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// The bun executable as an absolute path. `bun` is a path (the configuration looked a bare name up
/// on PATH), so that the action's PATH does not decide which bun runs it.
pub fn resolve_bun(bun: &str) -> Result<PathBuf> {
    let hint = "set WF_BUN to the path of the bun executable, or put bun on PATH";
    let path = Path::new(bun);
    if !is_executable(path) {
        bail!("bun not found: {bun} is not an executable file ({hint})");
    }
    std::path::absolute(path).with_context(|| format!("resolving {bun}"))
}

/// Run a trivial action exactly as jobs run, before the worker claims anything: a sandbox the
/// kernel refuses, or a bun that cannot run in it, is one clear error at start instead of a
/// failure per job. Returns bun's version as the action saw it.
pub fn probe(root: &ScratchRoot, bun: &str, supervisor: &SupervisorExe, isolation: Isolation) -> Result<String> {
    let source = root.probe_source()?;
    let mut spec = Spec::new(root, &uuid::Uuid::nil(), 0, source, PROBE, serde_json::Value::Null, Vec::new());
    spec.bun = bun.to_string();
    spec.wf_exe = supervisor.path();
    spec.isolation = isolation;
    let running = Running::start(spec)?;
    let deadline = std::time::Instant::now() + PROBE_PATIENCE;
    let mut output = Vec::new();
    loop {
        match running.events.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
            Ok(Event::Line { text, .. }) => output.push(text),
            Ok(Event::Done | Event::Settled { .. }) => break,
            Err(_) => {
                running.stop();
                bail!("a trivial action did not finish within {PROBE_PATIENCE:?}");
            }
        }
    }
    match running.finish() {
        Outcome::Returned(serde_json::Value::String(version)) => Ok(version),
        outcome => bail!("a trivial action failed: {outcome:?}; its output: {}", output.join(" / ")),
    }
}

/// The probe's action, and how long it may take (bun's first start on a cold machine is slow).
pub(crate) const PROBE: &str = "probe.mjs";
pub(crate) const PROBE_SOURCE: &str = "export function main() { return Bun.version; }\n";
const PROBE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}
