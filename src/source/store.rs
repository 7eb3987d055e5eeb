//! The source store: each synced commit's tree at `$WF_STORE/<git_source_id>/<commit>/`, with the
//! marker `.windforce_clone_complete` written LAST (seed: "marker-last").
//!
//! A worker runs a commit only when its marker exists, and the catalog is updated only after the
//! marker is written, so a job never pins a commit that is not fully materialized. The tree is
//! built in a temporary directory beside its final place, fsynced, renamed into place, and only
//! then is the marker written and fsynced.
//!
//! What is written: every regular file of the commit, with its executable bit. Symlinks are
//! skipped (a link's target is only text and could point anywhere on the worker's machine) and so
//! are submodules (their commits are not in this repository); the manifest already refuses
//! entrypoints and schemas that go through either.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use git2::{ObjectType, Oid, Repository, Tree};
use serde_json::json;
use uuid::Uuid;

/// The completion marker: present exactly when the commit's tree is complete in the store.
pub const MARKER: &str = ".windforce_clone_complete";

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

/// The outcome of `materialize`.
#[derive(Debug, Clone)]
pub struct Materialized {
    pub dir: PathBuf,
    /// False when the commit was already complete in the store and was left as it was.
    pub written: bool,
    /// Regular files written (0 when not written).
    pub files: usize,
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
    if is_materialized(&dir) {
        return Ok(Materialized { dir, written: false, files: 0 });
    }
    fs::create_dir_all(&source_dir).with_context(|| {
        format!("creating {} (is WF_STORE={} a writable directory?)", source_dir.display(), store.display())
    })?;
    if dir.exists() {
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

    write_marker(&dir, &sha, git_source_id, plan.files.len())?;
    Ok(Materialized { dir, written: true, files: plan.files.len() })
}

/// A tree without marker (an interrupted sync) is incomplete by definition: no worker runs it, so
/// it can go. So can every temporary tree of the source: the caller holds the source's lock, so
/// each one was left by a sync that died (of any commit, whether or not it is synced again).
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
fn write_marker(dir: &Path, sha: &str, git_source_id: Uuid, files: usize) -> Result<()> {
    let content = json!({"commit": sha, "source": git_source_id, "files": files});
    let temp = dir.join(format!("{MARKER}.tmp"));
    let marker = dir.join(MARKER);
    let mut file = File::create(&temp).with_context(|| format!("writing the marker {}", marker.display()))?;
    file.write_all(format!("{content}\n").as_bytes())?;
    file.sync_all()?;
    fs::rename(&temp, &marker).with_context(|| format!("writing the marker {}", marker.display()))?;
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
            let mode = if *executable { 0o755 } else { 0o644 };
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
