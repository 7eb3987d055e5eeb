//! `wf jobs`: jobs, newest first.

use super::render::JobDocument;
use super::{CommandResult, Ctx};
use crate::cli::JobsArgs;
use crate::error::Exit;
use crate::output::time_cell;
use crate::queue::inspect;

pub(super) fn run(ctx: &Ctx, args: JobsArgs) -> CommandResult {
    let mut client = ctx.connect()?;
    let jobs = inspect::list(&mut client, args.status, args.app.as_deref(), args.tag.as_deref(), args.limit)?;
    if ctx.out.json {
        ctx.out.json(&jobs.iter().map(JobDocument::from).collect::<Vec<_>>())?;
        return Ok(Exit::Ok);
    }
    let rows = jobs
        .iter()
        .map(|job| {
            vec![
                job.id.to_string(),
                job.status.to_string(),
                format!("{}/{}", job.app, job.action),
                job.tag.clone(),
                job.priority.to_string(),
                job.restarts.to_string(),
                time_cell(Some(job.created_at)),
                time_cell(job.completed_at),
            ]
        })
        .collect();
    ctx.out.table(&["id", "status", "action", "tag", "priority", "restarts", "created", "completed"], rows)?;
    Ok(Exit::Ok)
}
