//! `wf cancel` and `wf reap`.

use anyhow::{Result, anyhow};
use serde::Serialize;
use uuid::Uuid;

use super::{CommandResult, Ctx};
use crate::cli::{CancelArgs, ReapArgs};
use crate::error::Exit;
use crate::output::confirm;
use crate::queue::cancel::{self, CancelOutcome};
use crate::queue::{inspect, reaper};

pub(super) fn cancel(ctx: &Ctx, args: CancelArgs) -> CommandResult {
    let ids = args.ids.iter().map(|id| inspect::parse_id(id)).collect::<Result<Vec<_>>>()?;
    if ids.len() > 1 {
        confirm(&format!("cancel {} jobs", ids.len()), args.yes)?;
    }
    let mut client = ctx.connect()?;
    let outcomes = cancel::cancel(&mut client, &ids, &crate::config::operator(), args.reason.as_deref())?;
    if ctx.out.json {
        let document: Vec<CancelDocument> =
            outcomes.iter().map(|&(id, outcome)| CancelDocument { id, outcome: outcome.as_str() }).collect();
        ctx.out.json(&document)?;
    } else {
        let rows = outcomes.iter().map(|(id, outcome)| vec![id.to_string(), outcome.as_str().to_string()]).collect();
        ctx.out.table(&["id", "outcome"], rows)?;
    }
    let finished: Vec<String> = outcomes
        .iter()
        .filter(|(_, outcome)| *outcome == CancelOutcome::AlreadyCompleted)
        .map(|(id, _)| id.to_string())
        .collect();
    if !finished.is_empty() {
        return Err(anyhow!("already completed, not canceled: {}", finished.join(", ")).into());
    }
    Ok(Exit::Ok)
}

pub(super) fn reap(ctx: &Ctx, args: ReapArgs) -> CommandResult {
    let zombie_timeout = match args.zombie_timeout {
        Some(timeout) => timeout,
        None => crate::config::zombie_timeout()?,
    };
    let restart_limit = match args.restart_limit {
        Some(limit) => limit,
        None => crate::config::restart_limit()?,
    };
    let mut client = ctx.connect()?;
    let reaped = reaper::reap_once(&mut client, zombie_timeout, restart_limit)?;
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

/// What `wf cancel --json` says of each job: `canceled`, `cancel_requested` or `already_completed`.
#[derive(Serialize)]
struct CancelDocument {
    id: Uuid,
    outcome: &'static str,
}

/// What one reaper pass did.
#[derive(Serialize)]
struct ReapDocument {
    requeued: u64,
    failed: u64,
    canceled: u64,
}
