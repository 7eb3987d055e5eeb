//! `wf status`: the queue per tag.

use serde::Serialize;

use super::{CommandResult, Ctx};
use crate::error::Exit;
use crate::output::span;
use crate::queue::inspect;

pub(super) fn run(ctx: &Ctx) -> CommandResult {
    let mut client = ctx.connect()?;
    let tags = inspect::status(&mut client, ctx.config.zombie_timeout()?)?;
    if ctx.out.json {
        let document: Vec<TagDocument> = tags
            .iter()
            .map(|t| TagDocument {
                tag: &t.tag,
                queued: t.queued,
                scheduled: t.scheduled,
                running: t.running,
                zombies: t.zombies,
                oldest_wait_s: t.oldest_wait_s,
            })
            .collect();
        ctx.out.json(&document)?;
        return Ok(Exit::Ok);
    }
    let rows = tags
        .iter()
        .map(|t| {
            vec![
                t.tag.clone(),
                t.queued.to_string(),
                t.scheduled.to_string(),
                t.running.to_string(),
                t.zombies.to_string(),
                // In its largest unit, as every age wf shows (`wf jobs`, `wf workers`).
                t.oldest_wait_s.map_or("-".to_string(), |s| span(s as i64)),
            ]
        })
        .collect();
    ctx.out.table(&["tag", "queued", "scheduled", "running", "zombies", "oldest wait"], rows)?;
    Ok(Exit::Ok)
}

/// The queue of one tag (`wf status --json` lists them by tag).
#[derive(Serialize)]
struct TagDocument<'a> {
    tag: &'a str,
    queued: i64,
    scheduled: i64,
    running: i64,
    zombies: i64,
    oldest_wait_s: Option<f64>,
}
