//! `wf cancel ID...`: waiting jobs at once, running ones by a mark their worker acts on.

use anyhow::{Result, anyhow};
use serde::Serialize;
use uuid::Uuid;

use super::{CommandResult, Ctx};
use crate::cli::CancelArgs;
use crate::error::Exit;
use crate::output::confirm;
use crate::queue::cancel::{self, CancelOutcome};
use crate::queue::inspect;

pub(super) fn run(ctx: &Ctx, args: CancelArgs) -> CommandResult {
    let mut client = ctx.connect()?;
    let ids = args.ids.iter().map(|id| inspect::resolve_id(&mut client, id)).collect::<Result<Vec<_>>>()?;
    if ids.len() > 1 {
        confirm(&format!("cancel {} jobs", ids.len()), args.yes)?;
    }
    let outcomes = cancel::cancel(&mut client, &ids, &ctx.config.operator, args.reason.as_deref())?;
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

/// What `wf cancel --json` says of each job: `canceled`, `cancel_requested` or `already_completed`.
#[derive(Serialize)]
struct CancelDocument {
    id: Uuid,
    outcome: &'static str,
}
