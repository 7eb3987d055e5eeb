//! `wf sync`: source first, catalog after (seed: "marker-last"). In this order, never another:
//!
//! 0. take the source's lock (concurrent syncs of one source run one after the other);
//! 1. fetch into the mirror and resolve commit C; refuse C when it is older than the catalog's
//!    (meanwhile the files of the commit synced last are linked into a draft tree: C shares most);
//! 2. read and validate windforce.json and every schema from C's tree, all problems at once;
//! 3. in a transaction, store C's tree in the database (the blobs it does not hold yet, the
//!    listing); once its size is found within the limit, materialize it into this host's store
//!    beside, marker last;
//! 4. only then, in that transaction, replace the source's part of the catalog: the catalog never
//!    names a commit whose tree the database does not hold whole, and any host's worker can
//!    materialize it.
//!
//! Any failure stops the sequence where it is: nothing later happens, so the catalog never names a
//! commit that is not complete in the store.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use git2::{Oid, Repository};
use postgres::Client;

use super::git::{self, Target};
use super::git_source::{self, GitSource};
use super::lock::with_source_lock;
use super::manifest::{self, Manifest};
use super::store::{self, Draft, GitBlobs, Materialized, TreeFile};
use super::stored::{self, Stored};
use super::{Progress, catalog, short_sha};

/// What a sync did.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub source: String,
    pub commit_sha: String,
    /// The catalog moved to another commit.
    pub changed: bool,
    pub previous_commit: Option<String>,
    pub materialized: Materialized,
    pub stored: Stored,
    pub manifest: Manifest,
    /// The source's actions the commit no longer has, gone from the catalog, as APP/ACTION.
    pub removed: Vec<String>,
}

/// Where a sync keeps things and what fetches: `home` holds the mirrors, `store` the materialized
/// trees; `git` is the git executable, when there is one (see `git::fetch`).
pub(crate) struct Places<'a> {
    pub home: &'a Path,
    pub store: &'a Path,
    pub git: Option<&'a Path>,
}

/// Sync source `name` to `target`.
pub(crate) fn sync(
    client: &mut Client,
    name: &str,
    target: &Target,
    places: &Places<'_>,
    progress: &dyn Progress,
) -> Result<Report> {
    let source = git_source::find(client, name)?;
    with_source_lock(client, source.id, name, progress, |client| {
        // Read again under the lock: a sync that ran while we waited may have moved the commit.
        let source = git_source::find(client, name)?;
        sync_locked(client, &source, target, places, progress)
    })
    .with_context(|| format!("syncing source {name}"))
}

fn sync_locked(
    client: &mut Client,
    source: &GitSource,
    target: &Target,
    places: &Places<'_>,
    progress: &dyn Progress,
) -> Result<Report> {
    let repo = git::open_mirror(&git::mirror_path(places.home, source.id))?;
    let mirror = repo.path().to_path_buf();
    // Set when the fetch brings nothing new to materialize (the usual sync from cron).
    let enough = AtomicBool::new(false);
    std::thread::scope(|scope| {
        // While git fetches, the tree of the commit synced last (if any) is linked into a draft of
        // the next one: a new commit shares most of its files, so only the rest is left to do
        // after. Its listing goes to the storing thread too (the blobs the database holds already).
        let (listed, previous_listing) = mpsc::sync_channel::<Arc<Vec<TreeFile>>>(1);
        let drafting = scope.spawn(|| {
            let listed = listed;
            let previous = source.commit_sha.as_deref().and_then(|sha| Oid::from_str(sha).ok());
            let repo = Repository::open_bare(&mirror)?;
            let files = previous.and_then(|commit| store::files_of(&repo, commit).ok()).map(Arc::new);
            if let Some(files) = &files {
                let _ = listed.send(Arc::clone(files));
            }
            drop(listed);
            let Some(files) = files else { return Ok(None) };
            let mut draft = Draft::start(places.store, source.id)?;
            draft.link_ahead(&files, &enough)?;
            anyhow::Ok(Some(draft))
        });

        // 1. fetch, resolve, no going back.
        let shown = super::git_source::shown_url(&source.url);
        progress.fetching(&shown, 0, 0);
        let fetched =
            git::fetch(&repo, places.git, &source.url, target, source.branch.as_deref(), |received, total| {
                progress.fetching(&shown, received, total);
            });
        progress.fetched();
        for reference in fetched? {
            progress.dropped_ref(&source.name, &reference);
        }
        let commit = git::resolve(&repo, target, source.branch.as_deref())?;
        let sha = commit.to_string();
        if store::is_materialized(&store::commit_dir(places.store, source.id, &sha)) {
            enough.store(true, Ordering::Relaxed);
        }
        let current = source.commit_sha.as_deref().and_then(|sha| Oid::from_str(sha).ok());
        if let Some(current) = current.filter(|current| *current != commit) {
            if !git::fetch_commit(&repo, places.git, &source.url, current) {
                progress.unchecked_ancestry(&source.name, &current.to_string(), &sha);
            } else if git::is_strict_ancestor(&repo, commit, current) {
                bail!(
                    "commit {} is older than the catalog's commit {} (an ancestor of it) and the catalog never \
                     moves back; to roll back, commit a revert on top and sync that",
                    short_sha(&sha),
                    short_sha(&current.to_string())
                );
            }
        }

        // 2. the manifest and its schemas, from the commit's tree.
        let manifest = read_manifest(client, &repo, source, commit)?;

        // 3. the tree into the store, marker last, while the tree goes into the database
        // (uncommitted) beside it: both read the mirror, one writes files and the other sends rows.
        let files = store::files_of(&repo, commit)?;
        let digest = store::digest_of(&files);
        let mut tx = client.transaction()?;
        let sent = (AtomicU64::new(0), AtomicU64::new(0));
        // The storing thread drops `finished` when it ends (returning or panicking): the wait below
        // wakes up at once then.
        let (finished, storing_ended) = mpsc::channel::<()>();
        // The storing thread says when the tree is within the size a commit may hold: nothing is
        // written into the store before.
        let (accepted, acceptance) = mpsc::sync_channel::<()>(1);
        let (materialized, stored) = std::thread::scope(|inner| {
            let storing = inner.spawn(|| {
                let _finished = finished;
                let accepted = accepted;
                let repo = Repository::open_bare(&mirror)?;
                let previous_listing = previous_listing;
                let previous_files = previous_listing.recv().ok();
                let previous = source.commit_sha.as_deref().zip(previous_files.as_deref().map(Vec::as_slice));
                stored::store(
                    &mut tx,
                    &GitBlobs { repo: &repo, git_cli: places.git },
                    source.id,
                    &sha,
                    &files,
                    &digest,
                    previous,
                    &mut || {
                        let _ = accepted.send(());
                    },
                    &mut |done, total| {
                        sent.0.store(done, Ordering::Relaxed);
                        sent.1.store(total, Ordering::Relaxed);
                    },
                )
            });
            let draft = drafting.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            let materialized = draft.and_then(|draft| {
                acceptance.recv().map_err(|_| anyhow!("the tree was not written: the database did not take it"))?;
                let draft = match draft {
                    Some(draft) => draft,
                    None => Draft::start(places.store, source.id)?,
                };
                let blobs = &mut GitBlobs { repo: &repo, git_cli: places.git };
                draft.finish(&sha, &files, &digest, blobs, &mut |done, total| {
                    progress.materializing(&sha, done, total);
                })
            });
            progress.materialized();
            while let Err(RecvTimeoutError::Timeout) = storing_ended.recv_timeout(Duration::from_millis(100)) {
                progress.storing(&sha, sent.0.load(Ordering::Relaxed), sent.1.load(Ordering::Relaxed));
            }
            progress.stored();
            (materialized, storing.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
        });
        // The database's refusal first: the store waits for its acceptance.
        let stored =
            stored.with_context(|| format!("storing commit {sha} in the database; the catalog was not changed"))?;
        let materialized = materialized
            .with_context(|| format!("materializing commit {sha} into the store; the catalog was not changed"))?;

        // 4. only then the catalog, in the transaction that stored the tree.
        let removed = catalog::replace(&mut tx, source, source.commit_sha.as_deref(), &sha, &manifest)?;
        tx.commit().context("committing the catalog")?;
        Ok(Report {
            source: source.name.clone(),
            changed: source.commit_sha.as_deref() != Some(sha.as_str()),
            previous_commit: source.commit_sha.clone(),
            commit_sha: sha,
            materialized,
            stored,
            manifest,
            removed,
        })
    })
}

fn read_manifest(client: &mut Client, repo: &Repository, source: &GitSource, commit: Oid) -> Result<Manifest> {
    let taken = catalog::apps_of_other_sources(client, source.id)?;
    let tree = repo.find_commit(commit)?.tree()?;
    manifest::read(repo, &tree, &taken).with_context(|| {
        // Not only the file's own mistakes: an app another source owns is refused here too.
        format!(
            "the {} of commit {} cannot be synced; nothing was changed",
            manifest::MANIFEST,
            short_sha(&commit.to_string())
        )
    })
}
