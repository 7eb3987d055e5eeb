//! `wf rerun ID [--latest]`: the job again, with its input, through the single enqueue path.

use anyhow::Context;
use serde::Serialize;
use uuid::Uuid;

use super::render::EnqueuedDocument;
use super::{CommandResult, Ctx};
use crate::cli::RerunArgs;
use crate::error::Exit;
use crate::queue::enqueue::{self, Origin, Pin, Request};
use crate::queue::inspect;

pub(super) fn run(ctx: &Ctx, args: RerunArgs) -> CommandResult {
    let mut client = ctx.connect()?;
    let id = inspect::resolve_id(&mut client, &args.id)?;
    let job = inspect::show_existing(&mut client, id)?;
    // By default exactly what the job ran (its commit, schemas, timeout, tag, sandbox, retries);
    // --latest: the action as the catalog shows it now.
    let (pin, tag) = if args.latest { (Pin::Catalog, None) } else { (Pin::Job(id), Some(job.tag.as_str())) };
    let request = Request {
        priority: job.priority,
        tag,
        pin,
        origin: Origin::RerunOf(id),
        ..Request::new(&job.app, &job.action, vec![job.input.clone()])
    };
    let mut tx = client.transaction()?;
    let rerun = enqueue::enqueue(&mut tx, &request).with_context(|| format!("rerunning job {id}"))?;
    tx.commit()?;
    let rerun = &rerun[0];
    if !job.status.is_finished() {
        ctx.out.warn(&format!(
            "job {id} is {} still: its rerun {} is a second job beside it, not instead of it (`wf cancel {id}` cancels the first)",
            job.status.as_str(),
            rerun.id
        ));
    }
    if ctx.out.json {
        ctx.out.json(&RerunDocument { job: EnqueuedDocument::from(rerun), rerun_of: id })?;
    } else {
        ctx.out.line(&rerun.id.to_string())?;
        ctx.out.info(&format!("rerun of {id} at commit {}", rerun.commit_sha));
    }
    Ok(Exit::Ok)
}

/// The job enqueued, and the job it reruns (SPEC: `{"id", "rerun_of"}`).
#[derive(Serialize)]
struct RerunDocument<'a> {
    #[serde(flatten)]
    job: EnqueuedDocument<'a>,
    rerun_of: Uuid,
}
