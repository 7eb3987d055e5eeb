//! `wf prune`: delete completed jobs older than a cutoff, in batches.

use serde::Serialize;

use super::{CommandResult, Ctx};
use crate::cli::PruneArgs;
use crate::error::Exit;
use crate::output::{confirm, time_cell};
use crate::queue::prune;

pub(super) fn run(ctx: &Ctx, args: PruneArgs) -> CommandResult {
    let status = args.status;
    let mut client = ctx.connect()?;
    let cutoff = prune::cutoff(&mut client, args.older_than)?;
    let candidates = prune::count(&mut client, cutoff, status)?;
    if args.dry_run {
        if ctx.out.json {
            ctx.out.json(&PruneDocument { deleted: 0, would_delete: Some(candidates) })?;
        } else {
            ctx.out.info(&format!(
                "would delete {candidates} completed job(s) finished before {}",
                time_cell(Some(cutoff))
            ));
        }
        return Ok(Exit::Ok);
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
        let batch = prune::prune_batch(&mut client, cutoff, status)?;
        deleted += batch;
        bar.inc(batch);
        if batch == 0 {
            break;
        }
    }
    bar.finish_and_clear();
    if ctx.out.json {
        ctx.out.json(&PruneDocument { deleted, would_delete: None })?;
    } else {
        ctx.out.info(&format!("deleted {deleted} completed job(s) finished before {}", time_cell(Some(cutoff))));
    }
    Ok(Exit::Ok)
}

/// How many completed jobs went; with `--dry-run`, none, and how many would have.
#[derive(Serialize)]
struct PruneDocument {
    deleted: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    would_delete: Option<i64>,
}
