//! `wf prune`: delete completed jobs older than a cutoff, in batches; with `--sources`, the synced
//! commits no job pins any more.

use std::path::Path;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::{CommandResult, Ctx};
use crate::cli::PruneArgs;
use crate::error::{CommandError, Exit};
use crate::output::{confirm, time_cell};
use crate::queue::prune;
use crate::source::git::mirror_path;
use crate::source::stored::{self, PruneRun};

pub(super) fn run(ctx: &Ctx, args: PruneArgs) -> CommandResult {
    let mut client = ctx.connect()?;
    let cutoff = args.older_than.map(|older_than| prune::cutoff(&mut client, older_than)).transpose()?;
    let jobs = match cutoff {
        Some(cutoff) => Some(prune_jobs(ctx, &mut client, &args, cutoff)?),
        None => None,
    };
    let sources = if args.sources { Some(prune_sources(ctx, &mut client, &args, cutoff)?) } else { None };
    if ctx.out.json {
        let (deleted, would_delete) = jobs.unwrap_or_default();
        ctx.out.json(&PruneDocument { deleted, would_delete, sources })?;
    }
    Ok(Exit::Ok)
}

/// Completed jobs: (deleted, would delete with `--dry-run`).
fn prune_jobs(
    ctx: &Ctx,
    client: &mut postgres::Client,
    args: &PruneArgs,
    cutoff: DateTime<Utc>,
) -> Result<(u64, Option<i64>), CommandError> {
    let status = args.status;
    // Seconds for millions of completed jobs: said on a terminal meanwhile.
    let counting = format!("counting the jobs completed before {}", time_cell(Some(cutoff)));
    let candidates = ctx.out.spinning(&counting, || prune::count(client, cutoff, status))?;
    if args.dry_run {
        if !ctx.out.json {
            ctx.out.info(&format!(
                "would delete {candidates} completed job(s) finished before {}",
                time_cell(Some(cutoff))
            ));
        }
        return Ok((0, Some(candidates)));
    }
    if candidates > 0 {
        confirm(
            &format!("delete {candidates} completed job(s) finished before {}", time_cell(Some(cutoff))),
            args.yes,
        )?;
    }
    let bar = ctx.out.progress(u64::try_from(candidates).unwrap_or(0), "pruning");
    let mut deleted = 0u64;
    loop {
        let batch = prune::prune_batch(client, cutoff, status)?;
        deleted += batch;
        bar.inc(batch);
        if batch == 0 {
            break;
        }
    }
    bar.finish_and_clear();
    if !ctx.out.json {
        ctx.out.info(&format!("deleted {deleted} completed job(s) finished before {}", time_cell(Some(cutoff))));
    }
    Ok((deleted, None))
}

/// Synced commits no job pins, in the database and in this host's store. A dry run after the jobs'
/// (`cutoff`) counts the pins of the jobs they would delete for nothing.
fn prune_sources(
    ctx: &Ctx,
    client: &mut postgres::Client,
    args: &PruneArgs,
    cutoff: Option<DateTime<Utc>>,
) -> Result<SourcesDocument, CommandError> {
    let store = ctx.config.store()?;
    let home = ctx.config.home()?;
    let retention = if args.dry_run { cutoff.map(|cutoff| (cutoff, args.status)) } else { None };
    let mut said = false;
    let mut waiting = || {
        if !std::mem::replace(&mut said, true) {
            ctx.out.info("waiting for the enqueues in progress to end before pruning synced commits");
        }
    };
    let counted = stored::prune(client, &store, PruneRun::Count(retention), &mut waiting)?;
    let mirrors = remove_mirrors(home, &counted.removed_sources, true)?;
    let nothing = counted.commits == 0 && counted.local_trees == 0 && counted.blobs == 0 && mirrors == 0;
    let pruned = if args.dry_run || nothing {
        counted
    } else {
        confirm(
            &format!(
                "delete {} synced commit(s) no job pins ({} in this host's store) and {mirrors} git mirror(s) of \
                 removed sources",
                counted.commits, counted.local_trees
            ),
            args.yes,
        )?;
        stored::prune(client, &store, PruneRun::Remove, &mut waiting)?
    };
    let local_mirrors = remove_mirrors(home, &pruned.removed_sources, args.dry_run)?;
    let verb = if args.dry_run { "would delete" } else { "deleted" };
    if !ctx.out.json {
        ctx.out.info(&format!(
            "{verb} {} synced commit(s) and {} file content(s) ({} KiB) from the database; {} tree(s) and {} file \
             content(s) from {}; {local_mirrors} git mirror(s) of removed sources",
            pruned.commits,
            pruned.blobs,
            pruned.bytes.div_ceil(1024),
            pruned.local_trees,
            pruned.local_blobs,
            store.display()
        ));
    }
    if pruned.foreign_trees > 0 {
        ctx.out.warn(&format!(
            "kept {} tree(s) in {} of sources this database does not know: another database's whose workers \
             share this store, or of a source removed and pruned from another host (remove those by hand)",
            pruned.foreign_trees,
            store.display()
        ));
    }
    Ok(SourcesDocument {
        dry_run: args.dry_run,
        commits: pruned.commits,
        blobs: pruned.blobs,
        bytes: pruned.bytes,
        local_trees: pruned.local_trees,
        local_blobs: pruned.local_blobs,
        foreign_trees: pruned.foreign_trees,
        local_mirrors,
    })
}

/// This host's git mirrors of `removed` sources (`wf source rm` ran here, where it deletes the
/// mirror, or on another host): how many there were, removed unless `dry_run`.
fn remove_mirrors(home: &Path, removed: &[Uuid], dry_run: bool) -> Result<u64, CommandError> {
    let mut count = 0;
    for id in removed {
        let mirror = mirror_path(home, *id);
        if !mirror.exists() {
            continue;
        }
        if !dry_run {
            std::fs::remove_dir_all(&mirror)
                .with_context(|| format!("removing {}, the mirror of a removed source", mirror.display()))?;
        }
        count += 1;
    }
    Ok(count)
}

/// How many completed jobs went; with `--dry-run`, none, and how many would have; with
/// `--sources`, what went of the synced commits.
#[derive(Serialize)]
struct PruneDocument {
    deleted: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    would_delete: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sources: Option<SourcesDocument>,
}

/// Synced commits and file contents removed (with `--dry-run`: that would be), in the database and
/// in this host's store.
#[derive(Serialize)]
struct SourcesDocument {
    dry_run: bool,
    commits: u64,
    blobs: u64,
    bytes: u64,
    local_trees: u64,
    local_blobs: u64,
    /// Trees of this host's store kept: their source is not this database's.
    foreign_trees: u64,
    /// This host's git mirrors of removed sources, removed.
    local_mirrors: u64,
}
