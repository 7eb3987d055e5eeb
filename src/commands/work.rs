//! `wf work`: run a worker.

use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::{CommandResult, Ctx};
use crate::cli::{self, WorkArgs};
use crate::error::Exit;
use crate::worker::{self, Isolation, Options, Until};

pub(super) fn run(ctx: &Ctx, args: WorkArgs) -> CommandResult {
    crate::diag::set_format(match args.log_format {
        cli::LogFormat::Text => crate::diag::LogFormat::Text,
        cli::LogFormat::Json => crate::diag::LogFormat::Json,
    });
    let until = if args.drain {
        Until::Drained
    } else if args.once {
        Until::Jobs(1)
    } else if let Some(n) = args.max_jobs {
        Until::Jobs(n)
    } else {
        Until::Stopped
    };
    let options = Options {
        tags: args.tags,
        concurrency: args.concurrency,
        until,
        heartbeat: match args.heartbeat {
            Some(period) => period,
            None => ctx.config.heartbeat()?,
        },
        grace: args.grace,
        name: args.name.unwrap_or_else(|| format!("{}:{}", crate::config::hostname(), std::process::id())),
        reap: !args.no_reap,
        zombie_timeout: ctx.config.zombie_timeout()?,
        restart_limit: ctx.config.restart_limit()?,
        poll: std::time::Duration::from_secs(5),
        quiet: ctx.out.quiet,
        isolation: match args.isolation {
            cli::Isolation::Sandbox => Isolation::Sandbox { allow_write: allow_write(args.allow_write)? },
            // Without a sandbox every folder the worker may write is the action's too.
            cli::Isolation::None => Isolation::None,
        },
        local: ctx.local()?,
    };
    options.check()?;
    if matches!(options.isolation, Isolation::Sandbox { .. }) {
        warn_of_supplementary_groups(ctx);
        if rustix::process::geteuid().is_root() && !crate::runner::sandbox::host_uids_mapped() {
            let uids = crate::runner::sandbox::HOST_UIDS;
            ctx.out.warn(&format!(
                "this worker's user namespace does not map the uids {}-{}: every action runs as nobody \
                 (65534) on the host, and shares the kernel's limits per user (inotify instances, epoll \
                 watches, pipe buffers) with every other action and the host's processes of nobody",
                uids.start,
                uids.end - 1
            ));
        }
        if crate::runner::memcg::parent().is_none() {
            ctx.out.warn(
                "this worker may make no memory cgroup (cgroup v1's memory controller, in its own): an \
                 action's memory_mb is watched every 100 ms, not held by the kernel, and memory the kernel \
                 keeps for it (socket buffers, pipes) does not count",
            );
        }
        if !crate::runner::sandbox::landlock_scopes_sockets() {
            ctx.out.warn(
                "this kernel's Landlock cannot scope abstract Unix sockets (Linux 6.12 and later can): \
                 actions with the network on can connect to the host's",
            );
        }
    }
    let summary = worker::run(ctx.database()?, options)?;
    if ctx.out.json {
        ctx.out.json(&SummaryDocument {
            succeeded: summary.succeeded,
            failed: summary.failed,
            canceled: summary.canceled,
            released: summary.released,
            fenced: summary.fenced,
        })?;
    } else {
        ctx.out.info(&format!(
            "worker stopped: {} succeeded, {} failed, {} canceled, {} put back in the queue, {} lost to the reaper",
            summary.succeeded, summary.failed, summary.canceled, summary.released, summary.fenced
        ));
    }
    Ok(Exit::Ok)
}

/// A worker that is not root runs its actions as its own user, in a user namespace, which cannot
/// drop the supplementary groups of that user: the kernel still grants them, so an action reads
/// what those groups may read of the files its sandbox shows (the system folders, the store,
/// `--allow-write` folders). Said at start: it is the operator's to give workers a user of their own.
fn warn_of_supplementary_groups(ctx: &Ctx) {
    if rustix::process::geteuid().is_root() {
        return;
    }
    let own = nix::unistd::getegid();
    let others: Vec<String> = nix::unistd::getgroups()
        .unwrap_or_default()
        .into_iter()
        .filter(|&group| group != own)
        .map(|group| match nix::unistd::Group::from_gid(group) {
            Ok(Some(named)) => named.name,
            _ => group.to_string(),
        })
        .collect();
    if !others.is_empty() {
        ctx.out.warn(&format!(
            "this worker's user is in the groups {}: its actions keep them (a user namespace cannot \
             drop them) and read what those groups may read in their sandbox; run workers as a user \
             of their own, in no other group",
            others.join(", ")
        ));
    }
}

/// `--allow-write` folders: existing directories, by their real path (`real_path`), none inside
/// another: it is writable through that one already, and its own place in the sandbox would be
/// reached through a folder actions write. Each sandbox opens the path again, refusing a link put
/// in it since.
fn allow_write(dirs: Vec<PathBuf>) -> Result<Vec<PathBuf>> {
    let mut real: Vec<PathBuf> = Vec::new();
    for dir in dirs.into_iter().filter(|dir| !dir.as_os_str().is_empty()) {
        let path = real_path(&dir).with_context(|| format!("--allow-write {}", dir.display()))?;
        if !path.is_dir() {
            bail!("--allow-write {}: not a directory", dir.display());
        }
        if path == Path::new("/") {
            bail!("--allow-write /: the whole file system cannot be bound into the sandbox");
        }
        if !real.contains(&path) {
            real.push(path);
        }
    }
    for inner in &real {
        if let Some(outer) = real.iter().find(|outer| *outer != inner && inner.starts_with(outer)) {
            bail!(
                "--allow-write {}: inside --allow-write {}, through which the sandbox may write it already; \
                 give only {}",
                inner.display(),
                outer.display(),
                outer.display()
            );
        }
    }
    Ok(real)
}

/// The real path of `dir`, following only the symbolic links no action could have put there: those
/// in folders that only root or this worker's user may write. A link in a folder others may write
/// (an action allowed to write a folder above, any user in `/tmp`) is refused: the sandboxes would
/// bind what it points to, any folder of the host.
fn real_path(dir: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    // The names of a path still to walk, its next last (`..` as such; the root and `.` left out).
    fn names(path: &Path) -> impl Iterator<Item = std::ffi::OsString> + '_ {
        path.components().rev().filter_map(|component| match component {
            Component::Normal(name) => Some(name.to_os_string()),
            Component::ParentDir => Some("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
    }
    let me = nix::unistd::geteuid().as_raw();
    let absolute = std::env::current_dir()?.join(dir);
    let mut left: Vec<std::ffi::OsString> = names(&absolute).collect();
    let mut real = PathBuf::from("/");
    let mut links = 0;
    while let Some(name) = left.pop() {
        if name == ".." {
            real.pop();
            continue;
        }
        let next = real.join(&name);
        if !std::fs::symlink_metadata(&next).with_context(|| format!("reading {}", next.display()))?.is_symlink() {
            real = next;
            continue;
        }
        let folder = std::fs::metadata(&real)?;
        if folder.mode() & 0o022 != 0 || (folder.uid() != 0 && folder.uid() != me) {
            bail!(
                "{} is a symbolic link in a folder others may write (one of them may have put it there): \
                 give the folder's real path",
                next.display()
            );
        }
        links += 1;
        if links > 40 {
            bail!("too many symbolic links");
        }
        let target = std::fs::read_link(&next)?;
        if target.is_absolute() {
            real = PathBuf::from("/");
        }
        left.extend(names(&target));
    }
    Ok(real)
}

/// What a worker did before it stopped: jobs it completed, put back in the queue (a clean
/// shutdown) and lost to the reaper (fenced).
#[derive(Serialize)]
struct SummaryDocument {
    succeeded: u64,
    failed: u64,
    canceled: u64,
    released: u64,
    fenced: u64,
}
