//! The database's copy of synced trees (seed: "Source first, catalog after", with the database as
//! the only thing hosts share). `wf sync` stores a commit's tree in the transaction that moves the
//! catalog to it, so a catalog entry never exists without its whole tree; a worker that first meets
//! a commit writes it from here into its own store (`store::materialize`), marker last.
//!
//! Contents are stored once by git blob id, whatever number of commits and sources hold them, in
//! chunks of at most `CHUNK` bytes: a commit that changes a few files stores those files, and
//! neither a sync's upload nor a worker's download holds more than a chunk of a file at a time
//! (a sync streams a large blob from git when git is on PATH; it reads any other whole).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use git2::Oid;
use postgres::binary_copy::BinaryCopyInWriter;
use postgres::error::SqlState;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::{ToSql, Type};
use postgres::{Client, Transaction};
use uuid::Uuid;

use super::git;
use super::store::{self, BlobSource, GitBlobs, Materialized, TreeFile};
use crate::queue::job::JobStatus;

/// The largest chunk of a blob in one row.
const CHUNK: usize = 1 << 20;

/// The most a commit's tree may hold, counting each distinct blob once.
pub(crate) const MAX_TREE_BYTES: u64 = 1 << 30;

/// Blobs asked for in one statement when materializing (each streamed chunk by chunk).
const BLOBS_PER_QUERY: usize = 256;

/// The first key of the two-key advisory lock space, reserved for storing blobs ("wfbl"): two syncs
/// of different sources that bring the same new blob store it one after the other.
const BLOB_LOCK_CLASS: i32 = 0x7766_626c;

/// What storing a commit's tree did.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stored {
    /// The commit was stored already (by an earlier sync): nothing was written.
    pub already: bool,
    /// Blobs the database did not hold yet, and their bytes.
    pub blobs: usize,
    pub bytes: u64,
}

/// A stored commit's total bytes.
const BYTES: &str = "SELECT bytes FROM source_commit WHERE git_source_id = $1 AND commit_sha = $2";

/// Store the tree of `commit_sha` (its `files`, with `digest`) in the database inside the sync's
/// transaction, unless it is there already. `previous` is the commit the source was synced to
/// before, and its files: when the database holds it, its blobs are there and only the others are
/// looked at (a commit that changes 1 % of 20,000 files asks about 200 blobs, not 20,000).
/// `accepted` is called once the tree is known to be within `MAX_TREE_BYTES` (the sync writes it
/// into the host's store only then); `progress` gets (bytes done, bytes total) of new blobs.
#[allow(clippy::too_many_arguments)]
pub(crate) fn store(
    tx: &mut Transaction<'_>,
    blobs: &GitBlobs<'_>,
    git_source_id: Uuid,
    commit_sha: &str,
    files: &[TreeFile],
    digest: &str,
    previous: Option<(&str, &[TreeFile])>,
    accepted: &mut dyn FnMut(),
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Stored> {
    // A commit stored once was within the limit: its tree goes into the store at once, without
    // the sizes of its blobs (a second host's sync of a commit the database holds).
    let stored_before = tx.query_opt(BYTES, &[&git_source_id, &commit_sha])?.is_some();
    let measured =
        if stored_before { None } else { Some(measure(tx, blobs, git_source_id, commit_sha, files, previous)?) };
    accepted();

    // Held until the sync commits: the blobs found missing below stay missing until then, and a
    // commit found stored stays stored (`prune` takes this lock, and then sees the catalog on it).
    tx.execute("SELECT pg_advisory_xact_lock($1, 0)", &[&BLOB_LOCK_CLASS])?;
    if tx.query_opt(BYTES, &[&git_source_id, &commit_sha])?.is_some() {
        return Ok(Stored { already: true, ..Stored::default() });
    }
    let (total, sizes) = match measured {
        Some(measured) => measured,
        None => measure(tx, blobs, git_source_id, commit_sha, files, previous)?,
    };

    let wanted: Vec<String> = sizes.keys().map(Oid::to_string).collect();
    let present: HashSet<String> = tx
        .query("SELECT blob FROM source_blob WHERE blob = ANY($1) AND chunk = 0", &[&wanted])?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let mut missing: Vec<Oid> = sizes.keys().filter(|oid| !present.contains(&oid.to_string())).copied().collect();
    missing.sort();
    let new_bytes: u64 = missing.iter().map(|oid| sizes[oid]).sum();
    progress(0, new_bytes);
    let copy = tx.copy_in("COPY source_blob (blob, chunk, data) FROM STDIN BINARY")?;
    let mut writer = BinaryCopyInWriter::new(copy, &[Type::TEXT, Type::INT4, Type::BYTEA]);
    let mut done = 0u64;
    for oid in &missing {
        let name = oid.to_string();
        let mut n = 0i32;
        git::read_blob(blobs.repo, blobs.git_cli, *oid, &mut |content| {
            // An empty blob is one empty chunk, so that every stored blob has a chunk 0.
            let chunks: Vec<&[u8]> = if content.is_empty() { vec![content] } else { content.chunks(CHUNK).collect() };
            for chunk in chunks {
                writer.write(&[&name, &n, &chunk])?;
                n += 1;
                done += chunk.len() as u64;
                progress(done, new_bytes);
            }
            Ok(())
        })?;
    }
    writer.finish()?;

    let mut paths = Vec::with_capacity(files.len());
    for file in files {
        paths.push(file.path.to_str().with_context(|| {
            format!("commit {commit_sha} has a file whose path is not UTF-8: {}", file.path.display())
        })?);
    }
    let names: Vec<String> = files.iter().map(|file| file.blob.to_string()).collect();
    let executables: Vec<bool> = files.iter().map(|file| file.executable).collect();
    tx.execute(
        "INSERT INTO source_commit (git_source_id, commit_sha, digest, files, bytes, paths, blobs, executables)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            &git_source_id,
            &commit_sha,
            &digest,
            &i32::try_from(files.len())?,
            &i64::try_from(total)?,
            &paths,
            &names,
            &executables,
        ],
    )?;
    Ok(Stored { already: false, blobs: missing.len(), bytes: new_bytes })
}

/// The bytes of `commit_sha`'s tree, each distinct blob counted once, and the size of each blob the
/// `previous` commit (when the database holds it) does not have; refused over `MAX_TREE_BYTES`.
fn measure(
    tx: &mut Transaction<'_>,
    blobs: &GitBlobs<'_>,
    git_source_id: Uuid,
    commit_sha: &str,
    files: &[TreeFile],
    previous: Option<(&str, &[TreeFile])>,
) -> Result<(u64, HashMap<Oid, u64>)> {
    let odb = blobs.repo.odb()?;
    let size = |oid: &Oid| -> Result<u64> { Ok(odb.read_header(*oid)?.0 as u64) };
    let distinct: HashSet<Oid> = files.iter().map(|file| file.blob).collect();
    // The previous commit's total, less the blobs it has and this one does not.
    let (mut total, known) = match previous {
        Some((sha, files)) => match tx.query_opt(BYTES, &[&git_source_id, &sha])? {
            Some(row) => {
                let known: HashSet<Oid> = files.iter().map(|file| file.blob).collect();
                let gone = known.difference(&distinct).map(size).sum::<Result<u64>>()?;
                (u64::try_from(row.get::<_, i64>(0))?.saturating_sub(gone), known)
            }
            None => (0, HashSet::new()),
        },
        None => (0, HashSet::new()),
    };
    let mut sizes = HashMap::new();
    for oid in distinct.difference(&known) {
        let bytes = size(oid)?;
        sizes.insert(*oid, bytes);
        total += bytes;
    }
    if total > MAX_TREE_BYTES {
        bail!(
            "commit {commit_sha} holds {} MiB of files, more than the {} MiB a source's commit may hold",
            total >> 20,
            MAX_TREE_BYTES >> 20
        );
    }
    Ok((total, sizes))
}

/// Write the tree of `commit_sha` from the database into this host's `store`, marker last (a
/// worker's first meeting with a commit). Blobs the store holds already are not fetched again.
pub(crate) fn materialize(
    client: &mut Client,
    store: &Path,
    git_source_id: Uuid,
    commit_sha: &str,
) -> Result<Materialized> {
    let row = client
        .query_opt(
            "SELECT digest, paths, blobs, executables FROM source_commit WHERE git_source_id = $1 AND commit_sha = $2",
            &[&git_source_id, &commit_sha],
        )?
        .with_context(|| {
            format!(
                "commit {commit_sha} is not stored in the database (synced by an older wf, or pruned): \
                 `wf sync` its source again"
            )
        })?;
    let digest: String = row.get(0);
    let (paths, blobs, executables): (Vec<String>, Vec<String>, Vec<bool>) = (row.get(1), row.get(2), row.get(3));
    if blobs.len() != paths.len() || executables.len() != paths.len() {
        bail!("the listing of commit {commit_sha} in the database is damaged (its arrays differ in length)");
    }
    let files: Vec<TreeFile> = paths
        .into_iter()
        .zip(blobs)
        .zip(executables)
        .map(|((path, blob), executable)| Ok(TreeFile { path: path.into(), blob: Oid::from_str(&blob)?, executable }))
        .collect::<Result<_>>()?;
    let found = store::digest_of(&files);
    if found != digest {
        bail!("the listing of commit {commit_sha} does not match its digest ({found}, recorded {digest})");
    }
    store::materialize(store, git_source_id, commit_sha, &files, &digest, &mut DatabaseBlobs(client), &mut |_, _| {})
}

/// The blobs of the database, streamed chunk by chunk.
struct DatabaseBlobs<'a>(&'a mut Client);

impl BlobSource for DatabaseBlobs<'_> {
    fn send(&mut self, blobs: &[Oid], sink: &mut dyn FnMut(Oid, &[u8]) -> Result<()>) -> Result<()> {
        for batch in blobs.chunks(BLOBS_PER_QUERY) {
            let names: Vec<String> = batch.iter().map(Oid::to_string).collect();
            let params: [&(dyn ToSql + Sync); 1] = [&names];
            let mut rows = self.0.query_raw(
                "SELECT blob, data FROM source_blob WHERE blob = ANY($1) ORDER BY blob, chunk",
                params.iter().copied(),
            )?;
            while let Some(row) = rows.next()? {
                sink(Oid::from_str(row.get(0))?, row.get(1))?;
            }
        }
        Ok(())
    }
}

/// What `prune` removed (or, in a dry run, would remove).
#[derive(Debug, Clone, Default)]
pub(crate) struct Pruned {
    /// Commits removed from the database, and the blobs no commit held any more.
    pub commits: u64,
    pub blobs: u64,
    pub bytes: u64,
    /// Trees and blob contents removed from this host's store.
    pub local_trees: u64,
    pub local_blobs: u64,
    /// Trees of this host's store kept because their source is not this database's.
    pub foreign_trees: u64,
    /// Sources removed (`wf source rm`) whose commits the database still held: no sync of them
    /// comes again, and their mirrors on every host may go.
    pub removed_sources: Vec<Uuid>,
}

/// Of the commits given (two arrays: source ids, commit ids), those no job pins and the catalog is
/// not on. A job pins its commit while it exists: queued, running, or completed and not pruned.
/// The pins are read in one pass over `job` (a hash of its distinct commits): there is no index on
/// job (git_source_id, commit_sha), which every enqueue would pay for, and an anti join per commit
/// read the whole table once per commit given (2 s for 9 commits among 1,000,000 jobs), while
/// enqueues wait for `prune`.
macro_rules! unpinned_sql {
    ($pinning_job:expr) => {
        concat!(
            "WITH pinned AS MATERIALIZED (
                SELECT DISTINCT j.git_source_id, j.commit_sha FROM job j WHERE true",
            $pinning_job,
            ")
             SELECT c.id, c.sha
               FROM unnest($1::uuid[], $2::text[]) AS c(id, sha)
              WHERE NOT EXISTS (SELECT 1 FROM pinned p WHERE p.git_source_id = c.id AND p.commit_sha = c.sha)
                AND NOT EXISTS (SELECT 1 FROM git_source s WHERE s.id = c.id AND s.commit_sha = c.sha)"
        )
    };
}
/// See `unpinned_sql`.
const UNPINNED_SQL: &str = unpinned_sql!("");
/// The same, the jobs of `pruned_job` pinning nothing (a dry run's, which retention would delete).
const UNPINNED_AFTER_RETENTION_SQL: &str =
    unpinned_sql!(" AND NOT EXISTS (SELECT 1 FROM pruned_job p WHERE p.job_id = j.id)");

/// The statement that finds the commits no job pins (`unpinned_sql`), for tests of its plan.
pub fn unpinned_sql() -> &'static str {
    UNPINNED_SQL
}

/// The chunks of blobs no stored commit lists (one hash anti join against every listing).
const ORPHANS: &str = "FROM source_blob b
 WHERE NOT EXISTS (SELECT 1 FROM (SELECT DISTINCT unnest(blobs) AS blob FROM source_commit) held
                    WHERE held.blob = b.blob)";

fn unpinned(tx: &mut Transaction<'_>, commits: Vec<(Uuid, String)>, sql: &str) -> Result<Vec<(Uuid, String)>> {
    let (ids, shas): (Vec<Uuid>, Vec<String>) = commits.into_iter().unzip();
    Ok(tx.query(sql, &[&ids, &shas])?.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// How a prune of the synced commits runs.
#[derive(Clone, Copy)]
pub(crate) enum PruneRun {
    /// Remove what is unpinned.
    Remove,
    /// Count it and remove nothing; with a retention (cutoff, status), as if `wf prune` had first
    /// deleted the jobs it would (`--older-than` with `--sources`): their pins count for nothing.
    Count(Option<(DateTime<Utc>, Option<JobStatus>)>),
}

/// How long one attempt at the job table's lock waits: the enqueues that come meanwhile queue
/// behind `prune`'s request, so it gives up this soon, lets them through, and asks again.
const JOB_LOCK_ATTEMPT: &str = "200ms";

/// The longest pause between two attempts at the job table's lock.
const JOB_LOCK_PAUSE: Duration = Duration::from_secs(1);

/// Remove the commits no job pins any more, from the database and from this host's `store`, and
/// the blob contents nothing holds any more; or count them (`PruneRun::Count`). `waiting` is called
/// once, when the job table's lock is not had at the first attempt (enqueues are in progress).
pub(crate) fn prune(client: &mut Client, store: &Path, run: PruneRun, waiting: &mut dyn FnMut()) -> Result<Pruned> {
    let dry_run = matches!(run, PruneRun::Count(_));
    let mut pruned = Pruned::default();
    let mut tx = client.transaction()?;
    // Before the lock: it reads every completion record (seconds for millions), and enqueues wait.
    let unpinned_sql = match run {
        PruneRun::Count(Some((cutoff, status))) => {
            let candidates = crate::queue::prune::CANDIDATES_SQL;
            tx.execute(
                &format!("CREATE TEMP TABLE pruned_job ON COMMIT DROP AS {candidates}"),
                &[&cutoff, &status.map(JobStatus::as_str)],
            )?;
            tx.batch_execute("ANALYZE pruned_job")?;
            UNPINNED_AFTER_RETENTION_SQL
        }
        _ => UNPINNED_SQL,
    };
    let store_lock = lock_all(&mut tx, store, waiting)?;
    // The commits of the database and the trees of this host's store whose source the database
    // knows (whether it held the commit or not: synced by an older wf), looked up in one pass over
    // `job`. A tree of a source it does not know is another database's, whose workers share this
    // store (the same WF_HOME) and may be running it: no job here pins it, and it is kept. (A
    // source removed, and its commits pruned from another host first, leaves its trees here too:
    // said, for the operator to remove.)
    let stored: HashSet<(Uuid, String)> = tx
        .query("SELECT git_source_id, commit_sha FROM source_commit", &[])?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let known: HashSet<Uuid> = tx
        .query("SELECT id FROM git_source UNION SELECT git_source_id FROM source_commit", &[])?
        .iter()
        .map(|row| row.get(0))
        .collect();
    pruned.removed_sources = tx
        .query(
            "SELECT DISTINCT git_source_id FROM source_commit c
              WHERE NOT EXISTS (SELECT 1 FROM git_source s WHERE s.id = c.git_source_id)",
            &[],
        )?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let trees = match &store_lock {
        Some(_) => store::trees(store)?,
        None => Vec::new(),
    };
    let (here, foreign): (HashSet<_>, HashSet<_>) = trees.into_iter().partition(|(source, _)| known.contains(source));
    pruned.foreign_trees = foreign.len() as u64;
    let unpinned = unpinned(&mut tx, stored.union(&here).cloned().collect(), unpinned_sql)?;
    let (ids, shas): (Vec<Uuid>, Vec<String>) =
        unpinned.iter().filter(|commit| stored.contains(*commit)).cloned().unzip();
    pruned.commits = ids.len() as u64;
    tx.execute(
        "DELETE FROM source_commit WHERE (git_source_id, commit_sha) IN (SELECT * FROM unnest($1::uuid[], $2::text[]))",
        &[&ids, &shas],
    )?;
    let orphans =
        tx.query_one(&format!("SELECT count(DISTINCT blob), coalesce(sum(length(data)), 0)::bigint {ORPHANS}"), &[])?;
    pruned.blobs = orphans.get::<_, i64>(0) as u64;
    pruned.bytes = orphans.get::<_, i64>(1) as u64;
    if !dry_run {
        tx.execute(&format!("DELETE {ORPHANS}"), &[])?;
    }

    // This host's store: the trees of commits the database no longer pins, whether it just removed
    // them or they were never stored there.
    if let Some(lock) = &store_lock {
        let unpinned_here: Vec<(Uuid, String)> = unpinned.into_iter().filter(|commit| here.contains(commit)).collect();
        let removed = store::remove_trees(store, lock, &unpinned_here, dry_run)?;
        pruned.local_trees = removed.0;
        pruned.local_blobs = removed.1;
    }
    if dry_run {
        tx.rollback()?;
    } else {
        tx.commit()?;
    }
    Ok(pruned)
}

/// Take in `tx` the three locks a prune of synced commits runs under, in this order:
/// - the blob lock: no sync counts on a blob this transaction removes;
/// - this host's store's: no sync or worker writes in the store meanwhile;
/// - the job table's SHARE lock: no job is enqueued meanwhile (one pinned to a commit found unpinned
///   here would lose its tree).
///
/// The first two before the job table's, which enqueues queue behind: a running sync holds them
/// until it commits, a worker holds the store's while it writes a commit, and none of them holds
/// or waits for a lock on the job table meanwhile. In a sync's order (the blob lock in its
/// transaction, then the store's while it writes the tree), so neither waits for the other's second
/// lock while holding its first. The job table's is asked for `JOB_LOCK_ATTEMPT` at a time, in a
/// savepoint: a waiting `LOCK TABLE` is in the lock queue, and every enqueue that comes after it
/// waits behind it, so a long enqueue in progress (a streamed batch) would otherwise stop every
/// other until it ended. When an attempt gives up, all three are given back (the savepoint's undo
/// releases the blob lock) until the next, after a pause growing to `JOB_LOCK_PAUSE`: syncs and
/// workers writing commits go on while prune waits for enqueues. `waiting` is called at the first
/// attempt given up.
fn lock_all(tx: &mut Transaction<'_>, store: &Path, waiting: &mut dyn FnMut()) -> Result<Option<store::StoreLock>> {
    let mut pause = Duration::from_millis(50);
    let mut said = false;
    loop {
        let mut attempt = tx.transaction()?;
        attempt.execute("SELECT pg_advisory_xact_lock($1, 0)", &[&BLOB_LOCK_CLASS])?;
        let store_lock = store::lock(store)?;
        // Set in the savepoint: undone with it, and put back once the lock is had.
        let setting: String = attempt.query_one("SELECT current_setting('lock_timeout')", &[])?.get(0);
        attempt.execute("SELECT set_config('lock_timeout', $1, true)", &[&JOB_LOCK_ATTEMPT])?;
        match attempt.batch_execute("LOCK TABLE job IN SHARE MODE") {
            Ok(()) => {
                attempt.execute("SELECT set_config('lock_timeout', $1, true)", &[&setting])?;
                attempt.commit()?;
                return Ok(store_lock);
            }
            Err(error) if error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                attempt.rollback()?;
                drop(store_lock);
                if !std::mem::replace(&mut said, true) {
                    waiting();
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(JOB_LOCK_PAUSE);
            }
            Err(error) => return Err(error).context("locking the job table"),
        }
    }
}
