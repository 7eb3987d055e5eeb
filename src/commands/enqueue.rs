//! `wf enqueue`: the command-line door to the single enqueue path.

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::args::{read_input, split_target};
use super::render::print_result;
use super::{CommandResult, Ctx};
use crate::cli::EnqueueArgs;
use crate::diag::diag;
use crate::error::Exit;
use crate::output::rfc3339;
use crate::queue::enqueue::{self, Enqueued, Request, When};
use crate::queue::inspect;
use crate::queue::job::TriggerKind;

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
        app,
        action,
        inputs,
        priority: args.priority,
        tag: args.tag.as_deref(),
        when,
        trigger_kind: args.trigger_kind,
        schedule_name: None,
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

/// A job the enqueue path created (SPEC: `{"id","app","action","tag","priority","commit_sha",
/// "scheduled_for","trigger_kind"}`).
#[derive(Serialize)]
struct EnqueuedDocument<'a> {
    id: Uuid,
    app: &'a str,
    action: &'a str,
    tag: &'a str,
    priority: i32,
    commit_sha: &'a str,
    #[serde(serialize_with = "rfc3339")]
    scheduled_for: DateTime<Utc>,
    trigger_kind: TriggerKind,
}

impl<'a> From<&'a Enqueued> for EnqueuedDocument<'a> {
    fn from(job: &'a Enqueued) -> EnqueuedDocument<'a> {
        EnqueuedDocument {
            id: job.id,
            app: &job.app,
            action: &job.action,
            tag: &job.tag,
            priority: job.priority,
            commit_sha: &job.commit_sha,
            scheduled_for: job.scheduled_for,
            trigger_kind: job.trigger_kind,
        }
    }
}

/// `wf enqueue --batch --json`: the jobs' ids, in the order of the file's lines.
#[derive(Serialize)]
struct BatchDocument {
    ids: Vec<Uuid>,
}
