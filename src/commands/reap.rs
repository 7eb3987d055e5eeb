//! `wf reap`: one reaper pass.

use serde::Serialize;

use super::{CommandResult, Ctx};
use crate::cli::ReapArgs;
use crate::error::Exit;
use crate::queue::reaper;

pub(super) fn run(ctx: &Ctx, args: ReapArgs) -> CommandResult {
    let zombie_timeout = match args.zombie_timeout {
        Some(timeout) => timeout,
        None => ctx.config.zombie_timeout()?,
    };
    let restart_limit = match args.restart_limit {
        Some(limit) => limit,
        None => ctx.config.restart_limit()?,
    };
    let mut client = ctx.connect()?;
    let reaped = reaper::reap_once(&mut client, zombie_timeout, restart_limit)?;
    if reaped.dropped > 0 {
        ctx.out.warn(&format!("dropped {} running queue row(s) whose job was deleted outside wf", reaped.dropped));
    }
    if ctx.out.json {
        ctx.out.json(&ReapDocument { requeued: reaped.requeued, failed: reaped.failed, canceled: reaped.canceled })?;
    } else {
        ctx.out.table(
            &["requeued", "failed", "canceled"],
            vec![vec![reaped.requeued.to_string(), reaped.failed.to_string(), reaped.canceled.to_string()]],
        )?;
    }
    Ok(Exit::Ok)
}

/// What one reaper pass did.
#[derive(Serialize)]
struct ReapDocument {
    requeued: u64,
    failed: u64,
    canceled: u64,
}
