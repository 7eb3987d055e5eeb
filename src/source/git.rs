//! The bare mirror of each source (`$WF_HOME/git/<git_source_id>.git`): fetch, then resolve the
//! commit to sync. Nothing here looks at a work tree: everything later reads the commit's tree.

use std::cell::Cell;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use git2::{AutotagOption, Cred, CredentialType, FetchOptions, FetchPrune, Oid, RemoteCallbacks, Repository};
use uuid::Uuid;

use super::git_source::shown_url;

/// What `--ref` and `--commit` may name: heads and tags under their own names. `+`: a force-pushed
/// branch is followed (the catalog's no-going-back rule is checked on commits, not on refs). Not
/// the remote's HEAD: asking for a HEAD the remote does not have (an empty repository, or a bare
/// one whose HEAD names a branch never pushed) fails the whole fetch; `--ref HEAD` fetches it alone.
const ALL_REFSPECS: [&str; 2] = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"];

/// Where the remote's HEAD is kept in the mirror.
const REMOTE_HEAD: &str = "refs/remotes/origin/HEAD";

/// Which commit of a source to sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// The source's branch, else the remote's HEAD.
    Default,
    /// Any revision git understands, resolved in the mirror after the fetch.
    Ref(String),
    /// An exact commit id (full or abbreviated).
    Commit(String),
}

impl Target {
    /// `--ref HEAD` (or `HEAD~2`, `HEAD^`, ...): the remote's HEAD, which the mirror keeps at
    /// REMOTE_HEAD, not the mirror's own HEAD (a bare repository's `refs/heads/master`). The rest of
    /// the revision after `HEAD`, if any.
    fn remote_head(&self) -> Option<&str> {
        match self {
            Target::Ref(name) => {
                let rest = name.strip_prefix("HEAD")?;
                (rest.is_empty() || rest.starts_with(['~', '^', '@'])).then_some(rest)
            }
            _ => None,
        }
    }
}

/// The mirror of one source.
pub(crate) fn mirror_path(home: &Path, git_source_id: Uuid) -> PathBuf {
    home.join("git").join(format!("{git_source_id}.git"))
}

/// Open the mirror, creating it (or recreating a broken one) as a bare repository.
pub(crate) fn open_mirror(path: &Path) -> Result<Repository> {
    if path.exists() {
        match Repository::open_bare(path) {
            Ok(repo) => return Ok(repo),
            Err(_) => std::fs::remove_dir_all(path)
                .with_context(|| format!("removing the broken mirror {}", path.display()))?,
        }
    }
    std::fs::create_dir_all(path.parent().unwrap_or(path)).with_context(|| format!("creating {}", path.display()))?;
    Repository::init_bare(path).with_context(|| format!("creating the mirror {}", path.display()))
}

/// Fetch what a sync of `target` needs into the mirror: the source's branch (or the remote's HEAD)
/// alone by default, every head and tag for `--ref` and `--commit`. Refs that lead to no commit
/// are dropped from the mirror first; their names are returned. `progress` gets (received, total)
/// objects.
///
/// With `git_cli` (the `git` executable, when there is one), git itself fetches: it sends a local
/// repository's objects several times faster than libgit2, which recompresses them (10.9 s against
/// 3.7 s for a 130 MB repository of 20,000 files), and it uses the operator's own git settings and
/// credential helpers. Without it, libgit2 fetches (ssh keys from the agent).
pub(crate) fn fetch(
    repo: &Repository,
    git_cli: Option<&Path>,
    url: &str,
    target: &Target,
    branch: Option<&str>,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<String>> {
    let shown = shown_url(url);
    check_transport(url, &shown)?;
    remove_stale_locks(repo.path())?;
    let dropped = drop_refs_without_commit(repo)?;
    let (refspecs, what) = match (target, branch) {
        (Target::Default, Some(branch)) => {
            (vec![format!("+refs/heads/{branch}:refs/heads/{branch}")], format!("branch {branch} of {shown}"))
        }
        _ if matches!(target, Target::Default) || target.remote_head().is_some() => {
            (vec![format!("+HEAD:{REMOTE_HEAD}")], format!("the HEAD of {shown}"))
        }
        _ => (ALL_REFSPECS.map(str::to_string).to_vec(), format!("the heads and tags of {shown}")),
    };
    let failed = |error: anyhow::Error| {
        let hint = match branch {
            _ if !format!("{error:#}").contains("find remote ref") => {
                "check that the URL is reachable and is a git repository".to_string()
            }
            Some(branch) if matches!(target, Target::Default) => {
                format!("the repository has no branch {branch}: push it, or sync another ref with --ref")
            }
            _ => "the repository has no such ref: an empty repository, or a HEAD naming a branch never pushed \
                  (sync with --ref BRANCH, or remove the source and add it again with --branch)"
                .to_string(),
        };
        error.context(format!("fetching {what}; {hint}"))
    };
    if let Some(git) = git_cli {
        fetch_with_git(git, repo.path(), url, &refspecs, &mut progress).map_err(failed)?;
        return Ok(dropped);
    }
    let attempts = Cell::new(0u32);
    let mut callbacks = RemoteCallbacks::new();
    callbacks.transfer_progress(|stats| {
        progress(stats.received_objects(), stats.total_objects());
        true
    });
    callbacks.credentials(|_url, username, allowed| {
        // libgit2 asks again after every rejected credential; stop instead of looping forever.
        attempts.set(attempts.get() + 1);
        if attempts.get() > 3 {
            return Err(git2::Error::from_str("authentication failed (tried the ssh agent)"));
        }
        if allowed.contains(CredentialType::USERNAME) {
            return Cred::username(username.unwrap_or("git"));
        }
        if allowed.contains(CredentialType::SSH_KEY) {
            return Cred::ssh_key_from_agent(username.unwrap_or("git"));
        }
        Cred::default()
    });
    let mut options = FetchOptions::new();
    options.remote_callbacks(callbacks).prune(FetchPrune::On).download_tags(AutotagOption::None);
    let mut remote = repo.remote_anonymous(url).with_context(|| format!("preparing to fetch {shown}"))?;
    remote.fetch(&refspecs, Some(&mut options), Some("wf sync")).map_err(|error| failed(said(error)))?;
    Ok(dropped)
}

/// Remove the lock files a fetch killed halfway left in the mirror (`refs/heads/main.lock`,
/// `packed-refs.lock`, ...): git refuses to update a ref whose lock file exists, so one would block
/// every later sync of the source. No other process uses the mirror meanwhile: the sync holds the
/// source's lock, and the git of a sync killed before died with it (`git_in`).
fn remove_stale_locks(mirror: &Path) -> Result<()> {
    let mut folders = vec![mirror.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let entries = match std::fs::read_dir(&folder) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(error).with_context(|| format!("reading {}", folder.display())),
        };
        for entry in entries {
            let entry = entry.with_context(|| format!("reading {}", folder.display()))?;
            let path = entry.path();
            let kind = entry.file_type().with_context(|| format!("reading {}", path.display()))?;
            if kind.is_dir() && (folder != mirror || entry.file_name() == "refs") {
                folders.push(path);
            } else if kind.is_file() && path.extension().is_some_and(|extension| extension == "lock") {
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing {}, left by a fetch that did not finish", path.display()))?;
            }
        }
    }
    Ok(())
}

/// Seconds without a byte from a remote over http(s) after which a fetch fails.
const STALLED_FETCH_S: &str = "60";

/// A remote that stops answering fails libgit2's fetch too: a read or write of its connection that
/// waits longer than the operator's GIT_HTTP_LOW_SPEED_TIME (which git itself reads), else
/// STALLED_FETCH_S, fails. Call it before any thread is started.
pub(crate) fn bound_stalls() -> Result<()> {
    let seconds: i32 = std::env::var("GIT_HTTP_LOW_SPEED_TIME")
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .filter(|seconds| *seconds > 0)
        .unwrap_or_else(|| STALLED_FETCH_S.parse().expect("a number"));
    // SAFETY: sets a global of libgit2's, with no other thread started to read it meanwhile.
    unsafe { git2::opts::set_server_timeout_in_milliseconds(seconds.saturating_mul(1000)) }
        .context("setting libgit2's timeout")
}

/// `git fetch` into the mirror, its progress ("Receiving objects:  45% (9000/20000)") read from its
/// stderr, the rest of which is the error when it fails.
fn fetch_with_git(
    git: &Path,
    mirror: &Path,
    url: &str,
    refspecs: &[String],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<()> {
    use std::io::Read;
    let mut command = git_in(git, mirror);
    // A remote that stops answering fails the fetch (less than a byte a second for a minute), as a
    // server that accepted and never replied held the sync, and the source's lock, for ever. The
    // operator's own GIT_HTTP_LOW_SPEED_LIMIT and _TIME, when set, are used instead.
    if std::env::var_os("GIT_HTTP_LOW_SPEED_TIME").is_none() && std::env::var_os("GIT_HTTP_LOW_SPEED_LIMIT").is_none() {
        command.env("GIT_HTTP_LOW_SPEED_LIMIT", "1").env("GIT_HTTP_LOW_SPEED_TIME", STALLED_FETCH_S);
    }
    command.args(["fetch", "--prune", "--no-tags", "--progress", "--no-write-fetch-head"]);
    if is_local(url) {
        // The sending side runs on this machine: searching for deltas only shrinks bytes that never
        // cross a network (half of a small fetch's time: 240 against 120 ms for 200 changed files
        // of 20,000). Run through a shell by git, hence the quoting.
        let quoted = format!("'{}'", git.to_string_lossy().replace('\'', r"'\''"));
        command.arg(format!("--upload-pack={quoted} -c pack.window=0 upload-pack"));
    }
    let mut child = command
        .args(["--", url])
        .args(refspecs)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", git.display()))?;
    let mut stderr = child.stderr.take().context("git's stderr")?;
    let mut said = Vec::new();
    let mut buffer = [0u8; 4096];
    let mut line = Vec::new();
    loop {
        let n = stderr.read(&mut buffer).context("reading git's stderr")?;
        if n == 0 {
            break;
        }
        for &byte in &buffer[..n] {
            if byte == b'\r' || byte == b'\n' {
                let text = String::from_utf8_lossy(&line);
                match text.strip_prefix("Receiving objects:").and_then(counts) {
                    Some((received, total)) => progress(received, total),
                    None if !text.trim().is_empty() && !is_progress(&text) => said.push(text.trim().to_string()),
                    None => {}
                }
                line.clear();
            } else {
                line.push(byte);
            }
        }
    }
    let status = child.wait().context("waiting for git")?;
    if !status.success() {
        bail!("git fetch {}: {}", status, said.join("; "));
    }
    Ok(())
}

/// The git executable, working on the mirror at `mirror`, asking nothing on a terminal, and
/// killed when the thread that starts it ends (each waits for its git): a git left fetching after
/// its sync was killed went on writing into the mirror beside the next sync, which holds the
/// source's lock and counts on being alone there.
fn git_in(git: &Path, mirror: &Path) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new(git);
    // Never a question on a terminal: a sync runs from cron and scripts too.
    command.arg("--git-dir").arg(mirror).env("GIT_TERMINAL_PROMPT", "0").stdin(std::process::Stdio::null());
    let parent = rustix::process::getpid();
    // SAFETY: between fork and exec, two system calls (prctl, getppid) that allocate nothing.
    unsafe {
        command.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            // Gone before the signal was armed: this git is already an orphan.
            if rustix::process::getppid() != Some(parent) {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    command
}

/// `(9000/20000)` in a progress line of git.
fn counts(text: &str) -> Option<(usize, usize)> {
    let inside = &text[text.find('(')? + 1..text.find(')')?];
    let (received, total) = inside.split_once('/')?;
    Some((received.trim().parse().ok()?, total.trim().parse().ok()?))
}

/// git's other progress lines, said on a terminal and nothing to keep.
fn is_progress(text: &str) -> bool {
    ["remote:", "Receiving objects", "Resolving deltas", "Unpacking objects", "From ", " * ", " + ", " - ", "   "]
        .iter()
        .any(|prefix| text.starts_with(prefix))
}

/// Delete the mirror's refs that do not lead to a commit (a tag naming a tree or a blob). libgit2's
/// fetch walks every local ref to tell the remote what it has, and fails on such a ref with
/// "object is not a committish": kept, one bad tag fetched once would block every later sync of
/// the source, even after it is deleted upstream.
fn drop_refs_without_commit(repo: &Repository) -> Result<Vec<String>> {
    let mut dropped = Vec::new();
    for reference in repo.references().context("listing the mirror's refs")? {
        let mut reference = reference.context("reading the mirror's refs")?;
        if reference.peel_to_commit().is_ok() {
            continue;
        }
        let name = String::from_utf8_lossy(reference.name_bytes()).to_string();
        reference.delete().with_context(|| format!("deleting {name}, which names no commit, from the mirror"))?;
        dropped.push(name);
    }
    Ok(dropped)
}

/// libgit2 can be built without its HTTPS or SSH transport; say so plainly instead of its bare
/// "unsupported URL protocol".
fn check_transport(url: &str, shown: &str) -> Result<()> {
    let version = git2::Version::get();
    let (needed, available) = if url.starts_with("https://") || url.starts_with("http://") {
        ("HTTPS", version.https())
    } else if url.starts_with("ssh://") || url.starts_with("git+ssh://") || is_scp_like(url) {
        ("SSH", version.ssh())
    } else {
        return Ok(());
    };
    if !available {
        bail!(
            "this wf was built without git's {needed} transport, so it cannot fetch {shown}; use a local path or \
             a file:// URL (for example a clone kept up to date by cron), or a wf built with git2's `{}` feature",
            needed.to_lowercase()
        );
    }
    Ok(())
}

/// A repository on this machine: a path or a file:// URL.
fn is_local(url: &str) -> bool {
    url.starts_with("file://") || !(url.contains("://") || is_scp_like(url))
}

/// `git@host:owner/repo.git`: a colon before any slash.
pub(crate) fn is_scp_like(url: &str) -> bool {
    match (url.find(':'), url.find('/')) {
        (Some(colon), Some(slash)) => colon < slash && colon > 0,
        (Some(colon), None) => colon > 0,
        _ => false,
    }
}

/// The commit to sync, resolved in the mirror: `--commit`, else `--ref`, else the source's branch,
/// else the remote's HEAD.
pub(crate) fn resolve(repo: &Repository, target: &Target, branch: Option<&str>) -> Result<Oid> {
    let (spec, what) = match target {
        Target::Commit(sha) => {
            if sha.len() < 4 || sha.len() > 40 || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
                bail!("--commit {sha:?} is not a commit id (4 to 40 hexadecimal digits)");
            }
            // An object id only: a branch or tag named like the id is not what --commit means.
            let object = repo
                .find_object_by_prefix(sha, None)
                .map_err(said)
                .with_context(|| format!("commit {sha} is not in the fetched heads and tags; is it pushed?"))?;
            let commit = object
                .peel_to_commit()
                .map_err(said)
                .with_context(|| format!("{sha} names a {}, not a commit", kind_of(&object)))?;
            if !held_by_a_ref(repo, commit.id())? {
                bail!(
                    "commit {sha} is not in the fetched heads and tags: no branch or tag holds it any more (pushed \
                     over?)"
                );
            }
            return Ok(commit.id());
        }
        Target::Ref(name) => match target.remote_head() {
            Some(rest) => (format!("{REMOTE_HEAD}{rest}"), format!("ref {name} (the remote's HEAD)")),
            None => {
                let branch = repo.find_reference(&format!("refs/heads/{name}")).is_ok();
                if branch && repo.find_reference(&format!("refs/tags/{name}")).is_ok() {
                    bail!("ref {name} is both a branch and a tag: say refs/heads/{name} or refs/tags/{name}");
                }
                (name.clone(), format!("ref {name}"))
            }
        },
        Target::Default => match branch {
            Some(branch) => (format!("refs/heads/{branch}"), format!("branch {branch}")),
            None => (REMOTE_HEAD.to_string(), "the remote's HEAD".to_string()),
        },
    };
    let object = repo
        .revparse_single(&spec)
        .map_err(said)
        .with_context(|| format!("{what} is not in the fetched heads and tags; is it pushed?"))?;
    let commit = object
        .peel_to_commit()
        .map_err(said)
        .with_context(|| format!("{what} names a {}, not a commit", kind_of(&object)))?;
    // A revision of the heads and tags just fetched (a commit id among them) is held by one of
    // them, as `--commit` must be: the mirror keeps the objects of earlier fetches, and a commit
    // pushed over since was synced again by its id. The remote's HEAD is fetched alone: the
    // revisions of it are its own.
    if matches!(target, Target::Ref(_)) && target.remote_head().is_none() && !held_by_a_ref(repo, commit.id())? {
        bail!("{what} is not in the fetched heads and tags: no branch or tag holds it any more (pushed over?)");
    }
    Ok(commit.id())
}

/// Whether a head or tag of the mirror is `commit` or a descendant of it. The mirror keeps the
/// objects of earlier fetches: a commit pushed over since is still found by its id, but it is no
/// longer the remote's, and a host with a newer mirror would not find it.
fn held_by_a_ref(repo: &Repository, commit: Oid) -> Result<bool> {
    for reference in repo.references().map_err(said)? {
        let reference = reference.map_err(said)?;
        let fetched =
            reference.name().is_ok_and(|name| name.starts_with("refs/heads/") || name.starts_with("refs/tags/"));
        let Some(tip) = fetched.then(|| reference.peel_to_commit().ok()).flatten() else { continue };
        if tip.id() == commit || repo.graph_descendant_of(tip.id(), commit).map_err(said)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// What libgit2 says of an error, without its class and code ("; class=Reference (4); code=NotFound
/// (-3)"), which tell an operator nothing.
fn said(error: git2::Error) -> anyhow::Error {
    anyhow::anyhow!("{}", error.message())
}

/// What an object that is not a commit is, a tag seen through: "tree", "blob", ...
fn kind_of(object: &git2::Object<'_>) -> &'static str {
    let kind = object.as_tag().map_or(object.kind(), |tag| tag.target_type());
    kind.map_or("git object", |kind| kind.str())
}

/// Is `commit` a strict ancestor of `newer`? Only when the mirror has both: see `fetch_commit`.
pub(crate) fn is_strict_ancestor(repo: &Repository, commit: Oid, newer: Oid) -> bool {
    newer != commit && repo.graph_descendant_of(newer, commit).unwrap_or(false)
}

/// Bring `commit` into the mirror by its id when it is not there (the catalog's commit, synced by
/// another host, or before this mirror was made) and the remote still has it; whether the mirror
/// has it now. Without it, whether a commit is older than the catalog's cannot be told: a host
/// whose mirror lacked it moved the catalog back where the host that synced it refused.
pub(crate) fn fetch_commit(repo: &Repository, git_cli: Option<&Path>, url: &str, commit: Oid) -> bool {
    if repo.find_commit(commit).is_ok() {
        return true;
    }
    let wanted = [commit.to_string()];
    let fetched = match git_cli {
        Some(git) => fetch_with_git(git, repo.path(), url, &wanted, &mut |_, _| {}).is_ok(),
        None => repo.remote_anonymous(url).and_then(|mut remote| remote.fetch(&wanted, None, None)).is_ok(),
    };
    fetched && repo.find_commit(commit).is_ok()
}

/// Blobs larger than this are read from git a piece at a time (when git is on PATH), not whole.
const STREAM_ABOVE: usize = 8 << 20;

/// The pieces `read_blob` hands over from a streamed blob.
const PIECE: usize = 1 << 20;

/// Hand the contents of blob `oid` of `repo` to `sink` in order: a large blob (with `git_cli`)
/// streamed from `git cat-file` in pieces of at most 1 MiB, so that memory does not grow with the
/// largest file; any other whole, as libgit2 reads it. An empty blob is one empty piece.
pub(crate) fn read_blob(
    repo: &Repository,
    git_cli: Option<&Path>,
    oid: Oid,
    sink: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let (size, _) = repo.odb()?.read_header(oid)?;
    let Some(git) = git_cli.filter(|_| size > STREAM_ABOVE) else {
        return sink(repo.find_blob(oid)?.content());
    };
    use std::io::Read;
    let mut child = git_in(git, repo.path())
        .args(["cat-file", "blob", &oid.to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", git.display()))?;
    let mut stdout = child.stdout.take().context("git's stdout")?;
    let mut piece = vec![0u8; PIECE];
    let mut read = 0;
    let streamed = loop {
        // A whole piece before handing it over (a pipe gives 64 KiB at a time).
        let mut filled = 0;
        while filled < PIECE {
            match stdout.read(&mut piece[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error).context("reading git cat-file's output"),
            }
        }
        if filled == 0 {
            break Ok(());
        }
        read += filled;
        if let Err(error) = sink(&piece[..filled]) {
            break Err(error);
        }
    };
    drop(stdout);
    let output = child.wait_with_output().context("waiting for git cat-file")?;
    streamed?;
    if !output.status.success() || read != size {
        bail!(
            "git cat-file blob {oid} {}: {} of {size} bytes; {}",
            output.status,
            read,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{is_local, is_scp_like};

    #[test]
    fn scp_like_urls_are_told_from_paths() {
        assert!(is_scp_like("git@github.com:owner/repo.git"));
        assert!(is_scp_like("host:repo"));
        assert!(!is_scp_like("/srv/repos/a:b"));
        assert!(!is_scp_like("./repo"));
        assert!(!is_scp_like("repo"));
        assert!(is_local("/srv/repos/a:b") && is_local("file:///srv/repo") && is_local("./repo"));
        assert!(!is_local("https://example.com/repo.git") && !is_local("git@github.com:owner/repo.git"));
    }
}
