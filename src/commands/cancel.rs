//! `wf cancel ID...` or `wf cancel --app A --action X --tag T --status S`: waiting jobs at once,
//! running ones by a mark their worker acts on.

use std::fmt::Display;

use anyhow::{Result, anyhow};
use serde::Serialize;
use uuid::Uuid;

use super::{CommandResult, Ctx};
use crate::cli::CancelArgs;
use crate::error::Exit;
use crate::output::confirm;
use crate::queue::cancel::{self, CancelOutcome, Canceled, Ids, Matching};
use crate::queue::inspect;
use crate::source::catalog;

pub(super) fn run(ctx: &Ctx, args: CancelArgs) -> CommandResult {
    let mut client = ctx.connect()?;
    let bulk = args.ids.is_empty();
    let ids = if bulk {
        let (app, action) = super::args::app_action(args.app.as_deref(), args.action.as_deref())?;
        let matching = Matching { app, action, tag: args.tag.as_deref(), status: args.status };
        // Seconds for millions of queued jobs: said on a terminal meanwhile.
        let finding = format!("finding the waiting and running jobs of {}", matching.describe());
        let found = ctx.out.spinning(&finding, || cancel::matching(&mut client, &matching))?;
        if found.is_empty() {
            let unknown = catalog::hints([
                catalog::not_in_catalog(&mut client, app, action)?,
                catalog::unknown_tag(&mut client, matching.tag)?,
            ]);
            ctx.out.info(&format!("no waiting or running job of {}{unknown}", matching.describe()));
        } else {
            confirm(&format!("cancel {} job(s) of {}", found.len(), matching.describe()), args.yes)?;
        }
        // Jobs that finished while the operator read the prompt are reported as such.
        found
    } else {
        let mut ids = args.ids.iter().map(|id| inspect::resolve_id(&mut client, id)).collect::<Result<Vec<_>>>()?;
        // One job named twice (its id and a prefix of it) is one job to cancel, in its first place.
        let mut seen = std::collections::HashSet::new();
        ids.retain(|id| seen.insert(*id));
        // Asked when more than one job would change: jobs finished already (and without a retry
        // to cancel) are only reported.
        if ids.len() > 1 && !args.yes {
            let changing = cancel::changing(&mut client, &ids)?;
            if changing > 1 {
                let finished = match ids.len() - changing {
                    0 => String::new(),
                    finished => format!(" ({finished} more named finished already)"),
                };
                confirm(&format!("cancel {changing} jobs{finished}"), args.yes)?;
            }
        }
        ids
    };
    // One transaction, which takes a while for many jobs (a million: half a minute).
    let from = if bulk { Ids::Matched(args.status) } else { Ids::Named };
    let outcomes = ctx.out.spinning(&format!("canceling {} job(s)", ids.len()), || {
        cancel::cancel(&mut client, &ids, from, &ctx.config.operator, args.reason.as_deref())
    })?;
    if let (Some(status), left @ 1..) = (args.status, ids.len() - outcomes.len()) {
        // Said with --json too: the array lists only the jobs it canceled.
        ctx.out.note(&format!("{left} job(s) no longer {status} when canceled: left as they are"));
    }
    if ctx.out.json {
        let document: Vec<CancelDocument> = outcomes
            .iter()
            .map(|canceled| CancelDocument {
                id: canceled.id,
                outcome: canceled.outcome.as_str(),
                retry_id: canceled.retry,
            })
            .collect();
        ctx.out.json_array(&document)?;
    } else {
        let outcome = |canceled: &Canceled| match canceled.retry {
            Some(retry) => format!("{} (its retry {retry})", canceled.outcome),
            None => canceled.outcome.to_string(),
        };
        let outcome_texts: Vec<String> = outcomes.iter().map(outcome).collect();
        let rows: Vec<[&dyn Display; 2]> = outcomes
            .iter()
            .zip(&outcome_texts)
            .map(|(canceled, outcome)| [&canceled.id as &dyn Display, outcome])
            .collect();
        ctx.out.table(&["id", "outcome"], rows)?;
    }
    // Named ids that had finished otherwise fail the command; in bulk they are in the table.
    if !bulk {
        let finished: Vec<String> = outcomes
            .iter()
            .filter(|canceled| canceled.outcome == CancelOutcome::AlreadyCompleted)
            .map(|canceled| canceled.id.to_string())
            .collect();
        if !finished.is_empty() {
            return Err(anyhow!("already completed, not canceled: {}", finished.join(", ")).into());
        }
    }
    Ok(Exit::Ok)
}

/// What `wf cancel --json` says of each job: `canceled`, `cancel_requested` or `already_completed`;
/// for a failed job whose retry was waiting or running, that retry's outcome and id.
#[derive(Serialize)]
struct CancelDocument {
    id: Uuid,
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_id: Option<Uuid>,
}
