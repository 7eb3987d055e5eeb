//! The source store: each synced commit's tree at `$WF_STORE/<git_source_id>/<commit>/`, with the
//! marker `.windforce_clone_complete` written LAST (seed: "marker-last").
//!
//! A worker runs a commit only when its marker exists, and the catalog is updated only after the
//! marker is written, so a job never pins a commit that is not fully materialized. The tree is
//! built in a temporary directory beside its final place, fsynced, renamed into place, and only
//! then is the marker written and fsynced.
//!
//! What is written: every regular file of the commit, read-only, with its executable bit. Symlinks
//! are skipped (a link's target is only text and could point anywhere on the worker's machine) and
//! so are submodules (their commits are not in this repository); the manifest already refuses
//! entrypoints and schemas that go through either.
//!
//! The marker records a digest of the tree (every file's path, mode and git blob id), so that a
//! tree changed after its sync is found out: `wf sync` verifies an already complete tree and
//! rewrites it when it no longer matches, and a worker verifies a commit before it first runs it.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use git2::{ObjectType, Oid, Repository, Tree};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The completion marker: present exactly when the commit's tree is complete in the store.
pub const MARKER: &str = ".windforce_clone_complete";
const MARKER_TEMP: &str = ".windforce_clone_complete.tmp";

const MODE_EXECUTABLE: i32 = 0o100755;

/// A tree being built is `<store>/<source>/.tmp-<commit>-<random>/` until it is renamed into place.
const TEMPORARY_PREFIX: &str = ".tmp-";

/// Where the tree of `commit_sha` of a source lives in the store.
pub fn commit_dir(store: &Path, git_source_id: Uuid, commit_sha: &str) -> PathBuf {
    store.join(git_source_id.to_string()).join(commit_sha)
}

/// Is the tree in `dir` complete (its marker written)?
pub fn is_materialized(dir: &Path) -> bool {
    dir.join(MARKER).is_file()
}

/// What the marker says about its tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Marker {
    commit: String,
    source: Uuid,
    files: usize,
    /// `sha256:` and the hex digest of the tree's listing (see `digest`).
    digest: Option<String>,
}

/// Check the complete tree in `dir` against the digest its marker recorded; the error says how it
/// differs.
pub(crate) fn verify(dir: &Path) -> Result<()> {
    let marker: Marker = fs::read(dir.join(MARKER))
        .map_err(anyhow::Error::from)
        .and_then(|bytes| serde_json::from_slice(&bytes).map_err(anyhow::Error::from))
        .with_context(|| format!("reading the marker of {}", dir.display()))?;
    let Some(recorded) = marker.digest else {
        bail!("the marker of {} records no digest (written by an older wf)", dir.display());
    };
    let mut entries = Vec::new();
    list(dir, Path::new(""), &mut entries)?;
    let found = digest(entries.iter().map(|(path, oid, executable)| (path.as_path(), *oid, *executable)));
    if found != recorded {
        bail!(
            "the tree in {} no longer matches the digest its marker recorded: it was changed after its sync",
            dir.display()
        );
    }
    Ok(())
}

/// The digest of a tree: sha256 of one line per regular file, `<mode> <blob id> <path>`, in path
/// order. Anything else in the tree (a symlink, a device) makes `list` fail.
fn digest<'a>(entries: impl Iterator<Item = (&'a Path, Oid, bool)>) -> String {
    let mut lines: Vec<String> = entries
        .map(|(path, oid, executable)| {
            format!("{} {oid} {}\n", if executable { "100755" } else { "100644" }, path.display())
        })
        .collect();
    lines.sort();
    let hash = Sha256::digest(lines.concat().as_bytes());
    format!("sha256:{}", hash.iter().map(|byte| format!("{byte:02x}")).collect::<String>())
}

/// Every regular file below `dir` (the marker aside), with its git blob id, read from disk.
fn list(dir: &Path, prefix: &Path, entries: &mut Vec<(PathBuf, Oid, bool)>) -> Result<()> {
    let here = dir.join(prefix);
    for entry in fs::read_dir(&here).with_context(|| format!("reading {}", here.display()))? {
        let entry = entry?;
        let path = prefix.join(entry.file_name());
        if prefix.as_os_str().is_empty() && (entry.file_name() == MARKER || entry.file_name() == MARKER_TEMP) {
            continue;
        }
        let kind = entry.file_type()?;
        if kind.is_dir() {
            list(dir, &path, entries)?;
        } else if kind.is_file() {
            let full = dir.join(&path);
            let oid = Oid::hash_file(ObjectType::Blob, &full).with_context(|| format!("reading {}", full.display()))?;
            let executable = entry.metadata()?.permissions().mode() & 0o111 != 0;
            entries.push((path, oid, executable));
        } else {
            bail!("{} is neither a file nor a folder, which a synced tree never holds", dir.join(&path).display());
        }
    }
    Ok(())
}

/// The outcome of `materialize`.
#[derive(Debug, Clone)]
pub struct Materialized {
    pub dir: PathBuf,
    /// False when the commit was already complete in the store and was left as it was.
    pub written: bool,
    /// Regular files written (0 when not written).
    pub files: usize,
    /// Why the tree was rewritten, when it was complete but no longer matched its marker.
    pub repaired: Option<String>,
}

/// Make the tree of `commit` complete in the store, marker last. `progress` gets (done, total)
/// files. The caller holds the source's sync lock, so no other sync builds this commit meanwhile.
pub fn materialize(
    repo: &Repository,
    store: &Path,
    git_source_id: Uuid,
    commit: Oid,
    mut progress: impl FnMut(usize, usize),
) -> Result<Materialized> {
    let sha = commit.to_string();
    let dir = commit_dir(store, git_source_id, &sha);
    let source_dir = store.join(git_source_id.to_string());
    remove_temporary_trees(&source_dir)?;
    let mut repaired = None;
    if is_materialized(&dir) {
        match verify(&dir) {
            Ok(()) => return Ok(Materialized { dir, written: false, files: 0, repaired }),
            // Rewritten below, from the commit: the same tree again.
            Err(error) => repaired = Some(format!("{error:#}")),
        }
    }
    fs::create_dir_all(&source_dir).with_context(|| {
        format!("creating {} (is WF_STORE={} a writable directory?)", source_dir.display(), store.display())
    })?;
    if dir.exists() {
        // A tree without marker (an interrupted sync) or one that no longer matches its marker:
        // the marker goes first, so that from that moment no worker takes the tree for complete.
        let _ = fs::remove_file(dir.join(MARKER));
        fs::remove_dir_all(&dir).with_context(|| format!("removing the incomplete tree {}", dir.display()))?;
    }

    let tree = repo.find_commit(commit)?.tree()?;
    let mut plan = Plan::default();
    plan.collect(repo, &tree, Path::new(""))?;

    let temp = source_dir.join(format!("{TEMPORARY_PREFIX}{sha}-{}", &Uuid::new_v4().simple().to_string()[..8]));
    fs::create_dir(&temp).with_context(|| format!("creating {}", temp.display()))?;
    plan.write(repo, &temp, &mut progress).with_context(|| format!("writing the tree into {}", temp.display()))?;

    fs::rename(&temp, &dir).with_context(|| format!("renaming {} to {}", temp.display(), dir.display()))?;
    sync_dir(&source_dir)?;

    // A crash or a power cut here leaves a tree without marker: the marker-last tests make one.
    if crate::fault::at("sync-before-marker") {
        std::process::abort();
    }

    let digest = digest(plan.files.iter().map(|(path, oid, executable)| (path.as_path(), *oid, *executable)));
    write_marker(&dir, &Marker { commit: sha, source: git_source_id, files: plan.files.len(), digest: Some(digest) })?;
    Ok(Materialized { dir, written: true, files: plan.files.len(), repaired })
}

/// Seal a tree written by other means than a sync (the bench's own): its digest is taken from
/// disk and its marker written last.
pub(crate) fn seal(dir: &Path, sha: &str, git_source_id: Uuid) -> Result<()> {
    let mut entries = Vec::new();
    list(dir, Path::new(""), &mut entries)?;
    let digest = digest(entries.iter().map(|(path, oid, executable)| (path.as_path(), *oid, *executable)));
    let marker = Marker { commit: sha.to_string(), source: git_source_id, files: entries.len(), digest: Some(digest) };
    write_marker(dir, &marker)
}

/// Every temporary tree of the source can go: the caller holds the source's lock, so each one was
/// left by a sync that died (of any commit, whether or not it is synced again).
fn remove_temporary_trees(source_dir: &Path) -> Result<()> {
    let entries = match fs::read_dir(source_dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error).with_context(|| format!("reading {}", source_dir.display())),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", source_dir.display()))?;
        if entry.file_name().as_bytes().starts_with(TEMPORARY_PREFIX.as_bytes()) {
            fs::remove_dir_all(entry.path())
                .with_context(|| format!("removing the stale temporary tree {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// The marker itself appears atomically (written aside, fsynced, renamed), then the directory
/// entry is made durable.
fn write_marker(dir: &Path, marker: &Marker) -> Result<()> {
    let temp = dir.join(MARKER_TEMP);
    let path = dir.join(MARKER);
    let mut file = File::create(&temp).with_context(|| format!("writing the marker {}", path.display()))?;
    file.write_all(format!("{}\n", serde_json::to_string(marker)?).as_bytes())?;
    file.sync_all()?;
    fs::rename(&temp, &path).with_context(|| format!("writing the marker {}", path.display()))?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).with_context(|| format!("syncing {}", dir.display()))
}

/// Everything to write, collected before writing so progress has a total.
#[derive(Default)]
struct Plan {
    /// Parents before children.
    dirs: Vec<PathBuf>,
    files: Vec<(PathBuf, Oid, bool)>,
}

impl Plan {
    fn collect(&mut self, repo: &Repository, tree: &Tree, prefix: &Path) -> Result<()> {
        for entry in tree.iter() {
            let name = OsStr::from_bytes(entry.name_bytes());
            if name.is_empty() || name == "." || name == ".." || entry.name_bytes().contains(&b'/') {
                bail!("the commit's tree has an unsafe entry name {:?} in {:?}", name, prefix);
            }
            let path = prefix.join(name);
            match entry.kind() {
                Some(ObjectType::Tree) => {
                    self.dirs.push(path.clone());
                    self.collect(repo, &repo.find_tree(entry.id())?, &path)?;
                }
                // Symlinks are blobs with mode 120000; only regular files are written.
                Some(ObjectType::Blob) if entry.filemode() & 0o170000 == 0o100000 => {
                    self.files.push((path, entry.id(), entry.filemode() == MODE_EXECUTABLE));
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn write(&self, repo: &Repository, root: &Path, progress: &mut impl FnMut(usize, usize)) -> Result<()> {
        for dir in &self.dirs {
            fs::create_dir(root.join(dir)).with_context(|| format!("creating {}", dir.display()))?;
        }
        let total = self.files.len();
        progress(0, total);
        for (done, (path, oid, executable)) in self.files.iter().enumerate() {
            let blob = repo.find_blob(*oid)?;
            let full = root.join(path);
            let mut file = File::create(&full).with_context(|| format!("creating {}", path.display()))?;
            file.write_all(blob.content()).with_context(|| format!("writing {}", path.display()))?;
            // Read-only: a tree is never written again once synced (a changed one is rewritten whole).
            let mode = if *executable { 0o555 } else { 0o444 };
            file.set_permissions(fs::Permissions::from_mode(mode))?;
            file.sync_all().with_context(|| format!("syncing {}", path.display()))?;
            progress(done + 1, total);
        }
        for dir in self.dirs.iter().rev() {
            sync_dir(&root.join(dir))?;
        }
        sync_dir(root)
    }
}
