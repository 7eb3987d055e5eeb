//! `wf enqueue`: the command-line door to the single enqueue path.

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::args::{read_input, split_target};
use super::render::{EnqueuedDocument, print_result};
use super::{CommandResult, Ctx};
use crate::cli::EnqueueArgs;
use crate::diag::diag;
use crate::error::Exit;
use crate::queue::enqueue::{self, Request, When};
use crate::queue::inspect;

pub(super) fn run(ctx: &Ctx, args: EnqueueArgs) -> CommandResult {
    let (app, action) = split_target(&args.target)?;
    let inputs = match &args.batch {
        Some(path) => read_batch(path)?,
        None => vec![read_input(args.input.as_deref())?],
    };
    let when = match (&args.at, args.in_) {
        (Some(at), _) => When::At(
            chrono::DateTime::parse_from_rfc3339(at)
                .with_context(|| format!("--at {at:?} is not an RFC 3339 time (e.g. 2026-12-01T09:00:00Z)"))?
                .with_timezone(&chrono::Utc),
        ),
        (None, Some(delay)) => When::In(delay),
        (None, None) => When::Now,
    };
    let request = Request {
        priority: args.priority,
        tag: args.tag.as_deref(),
        when,
        trigger_kind: args.trigger_kind,
        key: args.key.as_deref(),
        ..Request::new(app, action, inputs)
    };
    let mut client = ctx.connect()?;
    let mut tx = client.transaction()?;
    let jobs = enqueue::enqueue(&mut tx, &request).with_context(|| format!("enqueueing {}", args.target))?;
    tx.commit()?;

    if args.batch.is_some() {
        if ctx.out.json {
            ctx.out.json(&BatchDocument { ids: jobs.iter().map(|job| job.id).collect() })?;
        } else {
            for job in &jobs {
                ctx.out.line(&job.id.to_string())?;
            }
            ctx.out.info(&format!("enqueued {} jobs of {}", jobs.len(), args.target));
        }
        return Ok(Exit::Ok);
    }
    let job = &jobs[0];
    if job.existing {
        ctx.out.info(&format!(
            "job {} has the key {:?} already: nothing was enqueued",
            job.id,
            args.key.as_deref().unwrap_or_default()
        ));
    }
    if args.wait {
        diag!("{}", job.id);
        let view = inspect::wait_until_finished(&mut client, job.id, args.timeout)?;
        return print_result(&ctx.out, &view);
    }
    if ctx.out.json {
        ctx.out.json(&EnqueuedDocument::from(job))?;
    } else {
        ctx.out.line(&job.id.to_string())?;
    }
    Ok(Exit::Ok)
}

/// One input per line of a JSON Lines file; blank lines are skipped; any bad line refuses all.
fn read_batch(path: &std::path::Path) -> Result<Vec<Value>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading the batch file {}", path.display()))?;
    let mut inputs = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(line)
            .with_context(|| format!("{} line {}: not valid JSON (nothing was enqueued)", path.display(), n + 1))?;
        if !value.is_object() {
            bail!("{} line {}: each line must be a JSON object (nothing was enqueued)", path.display(), n + 1);
        }
        inputs.push(value);
    }
    if inputs.is_empty() {
        bail!("{} has no inputs", path.display());
    }
    Ok(inputs)
}

/// `wf enqueue --batch --json`: the jobs' ids, in the order of the file's lines.
#[derive(Serialize)]
struct BatchDocument {
    ids: Vec<Uuid>,
}
