//! `wf enqueue`: the command-line door to the single enqueue path.

use std::io::Read;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::jobs::print_result;
use super::{CommandResult, Ctx};
use crate::cli::EnqueueArgs;
use crate::error::Exit;
use crate::output::diag;
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
        app,
        action,
        inputs,
        priority: args.priority,
        tag: args.tag.as_deref(),
        when,
        trigger_kind: args.trigger_kind.as_str(),
        schedule_name: None,
    };
    let mut client = ctx.connect()?;
    let mut tx = client.transaction()?;
    let jobs = enqueue::enqueue(&mut tx, &request).with_context(|| format!("enqueueing {}", args.target))?;
    tx.commit()?;

    if args.batch.is_some() {
        if ctx.out.json {
            ctx.out.json(&json!({"ids": jobs.iter().map(|j| j.id).collect::<Vec<_>>()}))?;
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
        ctx.out.json(&job.to_json())?;
    } else {
        ctx.out.line(&job.id.to_string())?;
    }
    Ok(Exit::Ok)
}

pub(super) fn split_target(target: &str) -> Result<(&str, &str)> {
    match target.split_once('/') {
        Some((app, action)) if !app.is_empty() && !action.is_empty() && !action.contains('/') => Ok((app, action)),
        _ => bail!("{target:?} is not APP/ACTION (e.g. billing/charge)"),
    }
}

/// `--input JSON`, `--input @FILE`, `--input -` (stdin); none is `{}`.
pub(super) fn read_input(input: Option<&str>) -> Result<Value> {
    let (text, origin) = match input {
        None => return Ok(json!({})),
        Some("-") => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).context("reading the input from stdin")?;
            (text, "stdin".to_string())
        }
        Some(arg) if arg.starts_with('@') => {
            let path = &arg[1..];
            (std::fs::read_to_string(path).with_context(|| format!("reading the input file {path}"))?, path.to_string())
        }
        Some(arg) => (arg.to_string(), "--input".to_string()),
    };
    serde_json::from_str(&text).with_context(|| format!("the input ({origin}) is not valid JSON"))
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
