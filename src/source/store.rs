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

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use git2::{ObjectType, Oid, Repository, Tree};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The completion marker: present exactly when the commit's tree is complete in the store.
pub const MARKER: &str = ".windforce_clone_complete";
const MARKER_TEMP: &str = ".windforce_clone_complete.tmp";
/// Names at a tree's root that a repository may not have: the store writes them.
pub(crate) const RESERVED: [&str; 2] = [MARKER, MARKER_TEMP];

const MODE_EXECUTABLE: i32 = 0o100755;

/// A tree being built is `<store>/<source>/.tmp-<random>/` until it is renamed into place.
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
    /// Regular files in the tree written (0 when not written).
    pub files: usize,
    /// Why the tree was rewritten, when it was complete but no longer matched its marker.
    pub repaired: Option<String>,
}

/// One regular file of a commit's tree, as git names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TreeFile {
    pub path: PathBuf,
    pub blob: Oid,
    pub executable: bool,
}

/// The regular files of `commit`'s tree, in git's order. Symlinks and submodules are left out (see
/// the module's comment); an entry name that could leave the tree is refused.
pub(crate) fn files_of(repo: &Repository, commit: Oid) -> Result<Vec<TreeFile>> {
    let tree = repo.find_commit(commit)?.tree()?;
    let mut files = Vec::new();
    collect(repo, &tree, Path::new(""), &mut files)?;
    Ok(files)
}

fn collect(repo: &Repository, tree: &Tree, prefix: &Path, files: &mut Vec<TreeFile>) -> Result<()> {
    let mut previous: Option<Vec<u8>> = None;
    for entry in tree.iter() {
        let name = OsStr::from_bytes(entry.name_bytes());
        if name.is_empty() || name == "." || name == ".." || entry.name_bytes().contains(&b'/') {
            bail!("the commit's tree has an unsafe entry name {:?} in {:?}", name, prefix);
        }
        if prefix.as_os_str().is_empty() && RESERVED.iter().any(|reserved| name == *reserved) {
            bail!("the commit's tree has {name:?} at its root, a name reserved for the store's completion marker");
        }
        // A tree git itself would not write (`git fsck`: duplicateEntries); git sorts the entries, so
        // a name given twice comes twice in a row.
        if previous.as_deref() == Some(entry.name_bytes()) {
            bail!("the commit's tree has the entry {:?} twice in {:?}", name, prefix);
        }
        previous = Some(entry.name_bytes().to_vec());
        let path = prefix.join(name);
        // The database keeps paths as text: refused here, before anything of the commit is written.
        if name.to_str().is_none() {
            bail!("the commit's tree has a name that is not UTF-8: {:?}; rename it", path);
        }
        match entry.kind() {
            Some(ObjectType::Tree) => collect(repo, &repo.find_tree(entry.id())?, &path, files)?,
            // Symlinks are blobs with mode 120000; only regular files are written.
            Some(ObjectType::Blob) if entry.filemode() & 0o170000 == 0o100000 => {
                files.push(TreeFile { path, blob: entry.id(), executable: entry.filemode() == MODE_EXECUTABLE });
            }
            _ => {}
        }
    }
    Ok(())
}

/// The digest a marker records for these files (see `digest`).
pub(crate) fn digest_of(files: &[TreeFile]) -> String {
    digest(files.iter().map(|file| (file.path.as_path(), file.blob, file.executable)))
}

/// Where the contents of blobs come from: the git mirror (a sync) or the database (a worker).
pub(crate) trait BlobSource {
    /// Hand every blob of `blobs` to `sink` as consecutive chunks in order (an empty blob as one
    /// empty chunk), one blob after the other.
    fn send(&mut self, blobs: &[Oid], sink: &mut dyn FnMut(Oid, &[u8]) -> Result<()>) -> Result<()>;

    /// Whether what `send` gives is checked against its id already (libgit2 checks every object it
    /// reads), so that the store need not hash it again.
    fn verified(&self) -> bool {
        false
    }
}

/// The blobs of a git repository: each whole, one at a time, or a large one streamed with
/// `git_cli` (see `git::read_blob`).
pub(crate) struct GitBlobs<'a> {
    pub repo: &'a Repository,
    pub git_cli: Option<&'a Path>,
}

impl BlobSource for GitBlobs<'_> {
    fn verified(&self) -> bool {
        true
    }

    fn send(&mut self, blobs: &[Oid], sink: &mut dyn FnMut(Oid, &[u8]) -> Result<()>) -> Result<()> {
        for &oid in blobs {
            super::git::read_blob(self.repo, self.git_cli, oid, &mut |piece| sink(oid, piece))?;
        }
        Ok(())
    }
}

/// Make the tree of `commit_sha` (its `files`, whose listing has `digest` for digest) complete
/// in the store, marker last: `Draft::finish` on a new, empty draft.
pub(crate) fn materialize(
    store: &Path,
    git_source_id: Uuid,
    commit_sha: &str,
    files: &[TreeFile],
    digest: &str,
    source: &mut dyn BlobSource,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Materialized> {
    Draft::start(store, git_source_id)?.finish(commit_sha, files, digest, source, progress)
}

/// A tree being written into a source's folder of the store under a temporary name. A sync starts
/// one while git fetches and links the files of the commit it synced last (`link_ahead`): a new
/// commit shares most of them, and `finish` then only changes the rest. The draft holds a lock on
/// its own folder for its life (a process that dies lets go of it), and every process that writes
/// in a host's store (a sync or a worker) holds the store's lock while it starts a draft (clearing
/// the debris of dead processes: the temporary trees no one holds) and while it finishes one. A
/// draft does not hold the store's lock while it waits for a fetch, which may be long: workers of
/// the host go on writing other commits meanwhile. Dropped unfinished, the draft removes its tree.
pub(crate) struct Draft {
    /// The lock on the temporary tree: it is in use.
    _hold: File,
    git_source_id: Uuid,
    store: PathBuf,
    source_dir: PathBuf,
    blobs_dir: PathBuf,
    /// The temporary tree, until it is renamed into place.
    temp: Option<PathBuf>,
    /// The files linked ahead, and the folders made for them.
    ahead: Vec<TreeFile>,
    folders: BTreeSet<PathBuf>,
}

impl Draft {
    /// Start an empty tree.
    pub(crate) fn start(store: &Path, git_source_id: Uuid) -> Result<Draft> {
        let source_dir = store.join(git_source_id.to_string());
        let blobs_dir = store.join(BLOBS);
        let made = |folder: &Path| {
            fs::create_dir_all(folder)
                .with_context(|| format!("creating {} (is WF_STORE a writable directory?)", folder.display()))
        };
        made(store)?;
        made(&blobs_dir)?;
        let temp = source_dir.join(format!("{TEMPORARY_PREFIX}{}", Uuid::new_v4().simple()));
        // Made and locked under the store's lock: no cleaning can take it for debris in between,
        // nor remove the source's folder as empty.
        let hold = {
            let _lock = StoreLock::take(store)?;
            made(&source_dir)?;
            remove_temporary_trees(&source_dir)?;
            remove_temporary_trees(&blobs_dir)?;
            fs::create_dir(&temp).with_context(|| format!("creating {}", temp.display()))?;
            let hold = File::open(&temp).with_context(|| format!("opening {}", temp.display()))?;
            hold.lock().with_context(|| format!("locking {}", temp.display()))?;
            hold
        };
        Ok(Draft {
            _hold: hold,
            git_source_id,
            store: store.to_path_buf(),
            source_dir,
            blobs_dir,
            temp: Some(temp),
            ahead: Vec::new(),
            folders: BTreeSet::new(),
        })
    }

    fn temp(&self) -> &Path {
        self.temp.as_deref().expect("a draft's tree exists until it is finished")
    }

    /// Link every file of `files` whose blob the store holds (the others are left out), until
    /// `enough` is set (the draft is not needed after all: what is linked by then stays recorded).
    /// Linking is system calls more than computing: two threads, each on half of the files, take
    /// about half the time while git fetches beside them.
    pub(crate) fn link_ahead(&mut self, files: &[TreeFile], enough: &AtomicBool) -> Result<()> {
        self.make_folders(folders_of(files))?;
        let (blobs_dir, temp) = (self.blobs_dir.as_path(), self.temp());
        let (first, second) = files.split_at(files.len() / 2);
        let halves = std::thread::scope(|scope| {
            [first, second]
                .map(|half| {
                    scope.spawn(move || {
                        let mut linker = Linker::new(blobs_dir, temp)?;
                        let mut linked = Vec::with_capacity(half.len());
                        for (n, file) in half.iter().enumerate() {
                            if n % 256 == 0 && enough.load(Ordering::Relaxed) {
                                break;
                            }
                            if linker.link(file)? {
                                linked.push(file.clone());
                            }
                        }
                        anyhow::Ok(linked)
                    })
                })
                .map(|thread| thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
        });
        for half in halves {
            self.ahead.extend(half?);
        }
        Ok(())
    }

    /// Make the `folders` (see `folders_of`) that the draft does not have yet, parents first.
    fn make_folders(&mut self, folders: BTreeSet<PathBuf>) -> Result<()> {
        for folder in folders {
            if !self.folders.contains(&folder) {
                let path = self.temp().join(&folder);
                fs::create_dir(&path).with_context(|| format!("creating {}", path.display()))?;
                self.folders.insert(folder);
            }
        }
        Ok(())
    }

    /// Complete the tree of `commit_sha` (its `files`, whose listing has `digest` for digest: the
    /// caller computed it or checked it), rename it into place, write its marker. Blob contents come from `source`, only for the blobs
    /// the store's content-addressed folder does not hold yet; every file of the tree is a hard link
    /// to it (a copy where the file system refuses the link), so a commit that changes a few files
    /// costs about those files. `progress` gets (done, total) steps: files linked and blobs written
    /// (the total grows by the blobs found missing).
    pub(crate) fn finish(
        mut self,
        commit_sha: &str,
        files: &[TreeFile],
        digest: &str,
        source: &mut dyn BlobSource,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Materialized> {
        let _lock = StoreLock::take(&self.store)?;
        let dir = commit_dir(&self.store, self.git_source_id, commit_sha);
        let mut repaired = None;
        if is_materialized(&dir) {
            match verify(&dir) {
                Ok(()) => return Ok(Materialized { dir, written: false, files: 0, repaired }),
                // Rewritten below: the same tree again.
                Err(error) => repaired = Some(format!("{error:#}")),
            }
        }
        if dir.exists() {
            // A tree without marker (an interrupted materialization) or one that no longer matches
            // its marker: the marker goes first, so that from that moment no worker takes it for
            // complete.
            let _ = fs::remove_file(dir.join(MARKER));
            if repaired.is_some() {
                // Jobs of another worker process of this host may be running from a complete tree
                // (each process verifies a commit once): it is set aside, as debris the next writer
                // in this source's folder removes, rather than emptied under them.
                let aside = self.source_dir.join(format!("{TEMPORARY_PREFIX}replaced-{}", Uuid::new_v4().simple()));
                fs::rename(&dir, &aside)
                    .with_context(|| format!("setting aside the changed tree {}", dir.display()))?;
            } else {
                fs::remove_dir_all(&dir).with_context(|| format!("removing the incomplete tree {}", dir.display()))?;
            }
        }
        if repaired.is_some() {
            // The damage may be in the store's copy of a blob, which every tree links: every blob
            // is written again, and nothing linked ahead is kept.
            self.clear()?;
        }
        let folders = folders_of(files);
        let kept = self.unlink_stale(files, &folders)?;
        self.make_folders(folders)?;

        // Every file whose blob the store holds is linked at once (the rest fail to link, and that
        // is how the missing blobs are found: no listing of the store's blobs, no look-up per
        // file); then the missing blobs are written and their files linked.
        let temp = self.temp().to_path_buf();
        let mut linker = Linker::new(&self.blobs_dir, &temp)?;
        let mut done = 0;
        let mut total = files.len();
        let mut later: Vec<&TreeFile> = Vec::new();
        for file in files {
            if !kept.contains(file.path.as_os_str().as_bytes()) && (repaired.is_some() || !linker.link(file)?) {
                later.push(file);
                continue;
            }
            done += 1;
            progress(done, total);
        }
        let mut missing: Vec<Oid> = later.iter().map(|file| file.blob).collect();
        missing.sort();
        missing.dedup();
        total += missing.len();
        let mut writer = BlobWriter::new(&self.blobs_dir, files, !source.verified());
        source.send(&missing, &mut |oid, chunk| {
            if writer.take(oid, chunk)? {
                done += 1;
                progress(done, total);
            }
            Ok(())
        })?;
        if writer.finish()? {
            done += 1;
        }
        if let Some(absent) = missing.iter().find(|oid| !writer.written.contains(oid)) {
            bail!("the contents of blob {absent} were not found");
        }
        for file in later {
            if !linker.link(file)? {
                bail!("the store's copy of blob {} vanished while materializing", file.blob);
            }
            done += 1;
            progress(done, total);
        }
        // One flush of the file system for every file and folder written, before the rename.
        let root = File::open(&self.store).with_context(|| format!("opening {}", self.store.display()))?;
        rustix::fs::syncfs(&root).with_context(|| format!("syncing the file system of {}", self.store.display()))?;
        fs::rename(&temp, &dir).with_context(|| format!("renaming {} to {}", temp.display(), dir.display()))?;
        self.temp = None;
        sync_dir(&self.source_dir)?;

        // A crash or a power cut here leaves a tree without marker: the marker-last tests make one.
        if crate::fault::at("sync-before-marker") {
            std::process::abort();
        }

        let marker = Marker {
            commit: commit_sha.to_string(),
            source: self.git_source_id,
            files: files.len(),
            digest: Some(digest.to_string()),
        };
        write_marker(&dir, &marker)?;
        Ok(Materialized { dir, written: true, files: files.len(), repaired })
    }

    /// Unlink every file linked ahead that `files` lists otherwise or not at all, then remove the
    /// folders left that are not `needed` (the folders of `files`; deepest first: each is empty by
    /// then). Returns the paths of the files linked ahead that stay.
    fn unlink_stale<'f>(&mut self, files: &'f [TreeFile], needed: &BTreeSet<PathBuf>) -> Result<HashSet<&'f [u8]>> {
        let wanted: HashMap<&[u8], (Oid, bool)> =
            files.iter().map(|file| (file.path.as_os_str().as_bytes(), (file.blob, file.executable))).collect();
        let temp = self.temp().to_path_buf();
        let mut kept = HashSet::with_capacity(self.ahead.len());
        for file in std::mem::take(&mut self.ahead) {
            match wanted.get_key_value(file.path.as_os_str().as_bytes()) {
                Some((path, listed)) if *listed == (file.blob, file.executable) => {
                    kept.insert(*path);
                }
                _ => {
                    let path = temp.join(&file.path);
                    fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
                }
            }
        }
        let unneeded: Vec<PathBuf> = self.folders.difference(needed).cloned().collect();
        for folder in unneeded.iter().rev() {
            let path = temp.join(folder);
            fs::remove_dir(&path).with_context(|| format!("removing {}", path.display()))?;
            self.folders.remove(folder);
        }
        Ok(kept)
    }

    /// Start the tree over, empty.
    fn clear(&mut self) -> Result<()> {
        let temp = self.temp().to_path_buf();
        fs::remove_dir_all(&temp).with_context(|| format!("removing {}", temp.display()))?;
        fs::create_dir(&temp).with_context(|| format!("creating {}", temp.display()))?;
        self.ahead.clear();
        self.folders.clear();
        Ok(())
    }
}

impl Drop for Draft {
    fn drop(&mut self) {
        if let Some(temp) = &self.temp {
            // Whatever is left here is removed by the next draft of the store anyway.
            let _ = fs::remove_dir_all(temp);
        }
    }
}

/// Every folder that holds a file of `files`, and their parents, the tree's root aside; in path
/// order, so parents come before their children.
fn folders_of(files: &[TreeFile]) -> BTreeSet<PathBuf> {
    let mut folders = BTreeSet::new();
    let mut last: Option<&Path> = None;
    for file in files {
        // Files of one folder come one after the other, in git's order.
        if last.is_some_and(|last| Some(last.as_os_str()) == file.path.parent().map(Path::as_os_str)) {
            continue;
        }
        last = file.path.parent();
        let mut folder = file.path.parent();
        while let Some(path) = folder.filter(|path| !path.as_os_str().is_empty()) {
            if !folders.insert(path.to_path_buf()) {
                break;
            }
            folder = path.parent();
        }
    }
    folders
}

/// The commit trees in a host's store, by source and commit (complete or not).
pub(crate) fn trees(store: &Path) -> Result<Vec<(Uuid, String)>> {
    let mut trees = Vec::new();
    for source in read_dir_or_none(store)? {
        let Some(id) = source.file_name().to_str().and_then(|name| Uuid::parse_str(name).ok()) else { continue };
        for commit in read_dir_or_none(&source.path())? {
            let name = commit.file_name();
            let Some(sha) = name.to_str() else { continue };
            if is_commit_name(sha) && commit.file_type()?.is_dir() {
                trees.push((id, sha.to_string()));
            }
        }
    }
    Ok(trees)
}

/// Whether a folder of a source's is named as a commit's tree is (its id in hex, SHA-1 or SHA-256):
/// anything else there (debris set aside, `wf bench`'s bare loop beside its tree) is no commit for
/// `wf prune --sources` to remove.
fn is_commit_name(name: &str) -> bool {
    matches!(name.len(), 40 | 64) && name.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'))
}

/// The store's lock, for a caller that takes it before other locks (see `remove_trees`); none when
/// there is no store yet (nothing to remove from it).
pub(crate) fn lock(store: &Path) -> Result<Option<StoreLock>> {
    if !store.is_dir() {
        return Ok(None);
    }
    StoreLock::take(store).map(Some)
}

/// Remove these trees from a host's store (marker first, as for an incomplete tree), then every
/// blob content no tree links to any more; returns how many of each (counted only, `dry_run`: a
/// blob is counted when the trees' links are all it has besides the store's own name).
/// Under the store's lock, which the caller holds (`lock`): no materialization is linking to a blob
/// meanwhile, and `prune` takes it before the job table's lock, not while enqueues wait behind it.
pub(crate) fn remove_trees(
    store: &Path,
    _lock: &StoreLock,
    trees: &[(Uuid, String)],
    dry_run: bool,
) -> Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut blobs = 0;
    // The links the trees hold to each blob (by inode): removed, or only counted.
    let mut held: HashMap<u64, u64> = HashMap::new();
    for (id, sha) in trees {
        let dir = commit_dir(store, *id, sha);
        if dry_run {
            count_links(&dir, &mut held)?;
        } else {
            let _ = fs::remove_file(dir.join(MARKER));
            fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
            // The source's folder once it holds no tree (a new draft makes it under the lock).
            if let Some(source_dir) = dir.parent() {
                let _ = fs::remove_dir(source_dir);
            }
        }
    }
    for entry in read_dir_or_none(&store.join(BLOBS))? {
        let metadata = entry.metadata()?;
        // Linked from no tree left: only the store's own name for it is.
        if metadata.nlink() == 1 + held.get(&metadata.ino()).copied().unwrap_or(0) {
            blobs += 1;
            if !dry_run {
                fs::remove_file(entry.path()).with_context(|| format!("removing {}", entry.path().display()))?;
            }
        }
    }
    Ok((trees.len() as u64, blobs))
}

/// Count, by inode, the regular files under `dir` (links to the store's blobs, most of them).
fn count_links(dir: &Path, held: &mut HashMap<u64, u64>) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    for entry in read_dir_or_none(dir)? {
        let metadata = entry.metadata()?;
        if metadata.is_dir() {
            count_links(&entry.path(), held)?;
        } else if metadata.is_file() {
            *held.entry(metadata.ino()).or_default() += 1;
        }
    }
    Ok(())
}

fn read_dir_or_none(dir: &Path) -> Result<Vec<fs::DirEntry>> {
    match fs::read_dir(dir) {
        Ok(entries) => entries.collect::<std::io::Result<_>>().with_context(|| format!("reading {}", dir.display())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(error) => Err(error).with_context(|| format!("reading {}", dir.display())),
    }
}

/// The store's folder of blob contents, by git blob id: `<oid>` read-only, `<oid>.x` executable.
const BLOBS: &str = ".blobs";

fn blob_path(blobs_dir: &Path, oid: Oid, executable: bool) -> PathBuf {
    blobs_dir.join(blob_name(oid, executable))
}

fn blob_name(oid: Oid, executable: bool) -> String {
    if executable { format!("{oid}.x") } else { oid.to_string() }
}

/// Links the files of a tree being written from the store's blobs. Each link names its blob and its
/// place relative to open folders (the blob folder, the file's folder, kept open while files of
/// one folder follow each other, as in git's order): 20,000 links of full paths spent a tenth of
/// their time walking the same path components again.
struct Linker<'a> {
    blobs_dir: &'a Path,
    blobs: OwnedFd,
    tree: &'a Path,
    /// The folder of the last file linked, open.
    folder: Option<(PathBuf, OwnedFd)>,
}

impl<'a> Linker<'a> {
    fn new(blobs_dir: &'a Path, tree: &'a Path) -> Result<Linker<'a>> {
        let blobs = open_folder(blobs_dir)?;
        Ok(Linker { blobs_dir, blobs, tree, folder: None })
    }

    /// Link `file` to its blob; false when the store holds no copy of the blob. Where the file
    /// system refuses the link (too many links to one file, another file system), a copy.
    fn link(&mut self, file: &TreeFile) -> Result<bool> {
        let parent = file.path.parent().unwrap_or(Path::new(""));
        if self.folder.as_ref().is_none_or(|(open, _)| open != parent) {
            self.folder = Some((parent.to_path_buf(), open_folder(&self.tree.join(parent))?));
        }
        let (_, folder) = self.folder.as_ref().expect("opened above");
        let blob = blob_name(file.blob, file.executable);
        let name = file.path.file_name().context("a tree file without a name")?;
        match rustix::fs::linkat(&self.blobs, blob.as_str(), folder, name, rustix::fs::AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            // Never written over: the file there is a link to a blob other trees share.
            Err(rustix::io::Errno::EXIST) => bail!("{} is in the tree twice", file.path.display()),
            Err(_) => {
                let (from, to) = (self.blobs_dir.join(&blob), self.tree.join(&file.path));
                fs::copy(&from, &to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
                Ok(true)
            }
        }
    }
}

fn open_folder(path: &Path) -> Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::open(path, OFlags::DIRECTORY | OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
        .with_context(|| format!("opening {}", path.display()))
}

/// Writes streamed blobs into the store's blob folder: each one aside first, checked against its
/// id, then renamed into place read-only (and once more executable when the tree wants that too).
struct BlobWriter<'a> {
    dir: &'a Path,
    modes: std::collections::HashMap<Oid, (bool, bool)>,
    current: Option<(Oid, PathBuf, File)>,
    written: std::collections::HashSet<Oid>,
    /// Hash what was written and compare it with its id.
    check: bool,
}

impl<'a> BlobWriter<'a> {
    fn new(dir: &'a Path, files: &[TreeFile], check: bool) -> BlobWriter<'a> {
        let mut modes = std::collections::HashMap::new();
        for file in files {
            let entry: &mut (bool, bool) = modes.entry(file.blob).or_default();
            if file.executable {
                entry.1 = true;
            } else {
                entry.0 = true;
            }
        }
        BlobWriter { dir, modes, current: None, written: Default::default(), check }
    }

    /// Take a chunk; true when it began a new blob and so finished the one before.
    fn take(&mut self, oid: Oid, chunk: &[u8]) -> Result<bool> {
        let finished = match &self.current {
            Some((current, _, _)) if *current == oid => false,
            _ => {
                let finished = self.finish()?;
                let temp =
                    self.dir.join(format!("{TEMPORARY_PREFIX}{oid}-{}", &Uuid::new_v4().simple().to_string()[..8]));
                let file = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o444)
                    .open(&temp)
                    .with_context(|| format!("creating {}", temp.display()))?;
                self.current = Some((oid, temp, file));
                finished
            }
        };
        let (_, temp, file) = self.current.as_mut().expect("a blob is open");
        file.write_all(chunk).with_context(|| format!("writing {}", temp.display()))?;
        Ok(finished)
    }

    /// Put the open blob in place; true when there was one.
    fn finish(&mut self) -> Result<bool> {
        let Some((oid, temp, file)) = self.current.take() else { return Ok(false) };
        drop(file);
        if self.check {
            let found =
                Oid::hash_file(ObjectType::Blob, &temp).with_context(|| format!("reading {}", temp.display()))?;
            if found != oid {
                let _ = fs::remove_file(&temp);
                bail!("the contents given for blob {oid} are those of blob {found}");
            }
        }
        let (plain, executable) = self.modes.get(&oid).copied().unwrap_or((true, false));
        if executable {
            let path = blob_path(self.dir, oid, true);
            if plain {
                let copy = self.dir.join(format!("{TEMPORARY_PREFIX}{oid}.x"));
                fs::copy(&temp, &copy).with_context(|| format!("copying {}", temp.display()))?;
                place(&copy, &path, 0o555)?;
            } else {
                place(&temp, &path, 0o555)?;
            }
        }
        if plain {
            fs::rename(&temp, blob_path(self.dir, oid, false))
                .with_context(|| format!("renaming {}", temp.display()))?;
        }
        self.written.insert(oid);
        Ok(true)
    }
}

/// Read-only (a synced tree is never written again), then renamed into place.
fn place(temp: &Path, path: &Path, mode: u32) -> Result<()> {
    fs::set_permissions(temp, fs::Permissions::from_mode(mode)).with_context(|| format!("{}", temp.display()))?;
    fs::rename(temp, path).with_context(|| format!("renaming {} to {}", temp.display(), path.display()))
}

/// The store's lock: one process at a time writes in a host's store.
pub(crate) struct StoreLock {
    _file: File,
}

impl StoreLock {
    fn take(store: &Path) -> Result<StoreLock> {
        let path = store.join(".lock");
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        file.lock().with_context(|| {
            format!("locking {} (the store must be on a file system with working flock)", path.display())
        })?;
        Ok(StoreLock { _file: file })
    }
}

/// Every temporary tree or file in `dir` that no live process holds can go: the caller holds the
/// store's lock, so each one was left by a process that died (of any commit, whether or not it is
/// synced again). A draft holds a lock on its tree (see `Draft`) and is left alone.
fn remove_temporary_trees(dir: &Path) -> Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error).with_context(|| format!("reading {}", dir.display())),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        if !entry.file_name().as_bytes().starts_with(TEMPORARY_PREFIX.as_bytes()) {
            continue;
        }
        let removed = if entry.file_type()?.is_dir() {
            if File::open(entry.path()).is_ok_and(|tree| tree.try_lock().is_err()) {
                continue;
            }
            fs::remove_dir_all(entry.path())
        } else {
            fs::remove_file(entry.path())
        };
        removed.with_context(|| format!("removing the stale temporary {}", entry.path().display()))?;
    }
    Ok(())
}

/// The marker itself appears atomically (written aside, fsynced, renamed), then the directory
/// entry is made durable.
fn write_marker(dir: &Path, marker: &Marker) -> Result<()> {
    let temp = dir.join(MARKER_TEMP);
    let path = dir.join(MARKER);
    // Made anew, never opened where it is: whatever is there may be a link to a shared blob.
    match fs::remove_file(&temp) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            return Err(error).with_context(|| format!("removing {}", temp.display()));
        }
        _ => {}
    }
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
        .with_context(|| format!("writing the marker {}", path.display()))?;
    file.write_all(format!("{}\n", serde_json::to_string(marker)?).as_bytes())?;
    file.sync_all()?;
    fs::rename(&temp, &path).with_context(|| format!("writing the marker {}", path.display()))?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).with_context(|| format!("syncing {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use std::fs::{self, File};

    use super::{TEMPORARY_PREFIX, remove_temporary_trees, trees};

    /// Only commits' trees are trees: `wf bench`'s bare loop beside its tree was taken for an
    /// unpinned commit, and removed by a `wf prune --sources` in the middle of the bench.
    #[test]
    fn the_trees_of_a_store_are_the_folders_named_as_commits() {
        let store = tempfile::tempdir().unwrap();
        let source = uuid::Uuid::new_v4();
        let (sha1, sha256) = ("0123456789abcdef0123456789abcdef01234567", "ab".repeat(32));
        for name in [sha1, &sha256, "bare-loop", ".tmp-replaced-1", "0123456789ABCDEF0123456789ABCDEF01234567"] {
            fs::create_dir_all(store.path().join(source.to_string()).join(name)).unwrap();
        }
        fs::create_dir_all(store.path().join(".blobs")).unwrap();
        let mut found = trees(store.path()).unwrap();
        found.sort();
        let mut expected = vec![(source, sha1.to_string()), (source, sha256)];
        expected.sort();
        assert_eq!(found, expected);
    }

    /// The debris of dead processes goes, a draft in use (its tree locked) stays.
    #[test]
    fn cleaning_removes_unlocked_temporary_trees_and_leaves_a_draft_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let in_use = dir.path().join(format!("{TEMPORARY_PREFIX}in-use"));
        let dead = dir.path().join(format!("{TEMPORARY_PREFIX}dead"));
        let dead_file = dir.path().join(format!("{TEMPORARY_PREFIX}blob"));
        let kept = dir.path().join("0123abcd");
        for tree in [&in_use, &dead, &kept] {
            fs::create_dir_all(tree.join("a")).unwrap();
            fs::write(tree.join("a/file"), "x").unwrap();
        }
        fs::write(&dead_file, "half a blob").unwrap();
        let hold = File::open(&in_use).unwrap();
        hold.lock().unwrap();

        remove_temporary_trees(dir.path()).unwrap();
        assert!(in_use.join("a/file").is_file(), "a tree still locked is in use");
        assert!(!dead.exists() && !dead_file.exists(), "unlocked temporary trees and files are debris");
        assert!(kept.join("a/file").is_file(), "a complete tree is not temporary");

        drop(hold);
        remove_temporary_trees(dir.path()).unwrap();
        assert!(!in_use.exists(), "its process gone, the draft is debris too");
    }
}
