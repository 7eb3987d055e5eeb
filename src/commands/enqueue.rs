//! `wf enqueue`: the command-line door to the single enqueue path.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{Context, Result, bail};
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
    let when = match (args.at, args.in_) {
        (Some(at), _) => When::At(at),
        (None, Some(delay)) => When::In(delay),
        (None, None) => When::Now,
    };
    // A batch's inputs are pushed by `enqueue_file` as it reads them.
    let inputs = match &args.batch {
        Some(_) => Vec::new(),
        None => vec![read_input(args.input.as_deref())?],
    };
    let request = Request {
        priority: args.priority,
        tag: args.tag.as_deref(),
        when,
        trigger_kind: args.trigger_kind,
        key: args.key.as_deref(),
        ..Request::new(app, action, inputs)
    };
    if let Some(path) = &args.batch {
        let ids = enqueue_file(ctx, &args.target, &request, batch_path(path))?;
        if ctx.out.json {
            ctx.out.json_field_array("ids", &ids)?;
        } else {
            ctx.out.lines(ids.iter())?;
            ctx.out.info(&format!("enqueued {} jobs of {}", ids.len(), args.target));
        }
        return Ok(Exit::Ok);
    }
    let database = ctx.database()?;
    let mut client = database.connect()?;
    let mut tx = client.transaction()?;
    let jobs = enqueue::enqueue(&mut tx, &request).with_context(|| format!("enqueueing {}", args.target))?;
    tx.commit()?;

    let job = &jobs[0];
    if job.existing {
        let note = format!(
            "job {} has the key {:?} already: nothing was enqueued",
            job.id,
            args.key.as_deref().unwrap_or_default()
        );
        // `--json --wait` prints the job's result, without `existing`: the note goes beside the id.
        if args.wait {
            diag!("{note}");
        } else {
            ctx.out.info(&note);
        }
    }
    if args.wait {
        diag!("{}", job.id);
        let view = inspect::wait_until_finished(&mut client, &|| database.connect(), job.id, args.timeout)?;
        return print_result(&ctx.out, &view, true);
    }
    if ctx.out.json {
        ctx.out.json(&EnqueuedDocument::from(job))?;
    } else {
        ctx.out.line(&job.id.to_string())?;
    }
    Ok(Exit::Ok)
}

/// `--batch`'s file: `@FILE` and `@-` are FILE and `-`, as `--input` reads them.
fn batch_path(arg: &Path) -> &Path {
    use std::os::unix::ffi::OsStrExt;
    match arg.as_os_str().as_bytes().strip_prefix(b"@") {
        Some(rest) => Path::new(std::ffi::OsStr::from_bytes(rest)),
        None => arg,
    }
}

/// The longest line of a batch file, its newline aside.
const MAX_LINE_BYTES: u64 = 64 << 20;

/// `wf enqueue --batch FILE`: one job per input line of a JSON Lines file (blank lines skipped), in
/// one transaction. The file is read and enqueued a chunk of lines at a time, so the command's
/// memory is a chunk's whatever the file's size (and the ids); the first line that is not a JSON
/// object, or a chunk with inputs that do not match the input schema, refuses the whole file.
/// Returns the ids, in the order of the lines, once the transaction has committed.
fn enqueue_file(ctx: &Ctx, target: &str, request: &Request<'_>, path: &Path) -> Result<Vec<Uuid>> {
    let reading = || format!("reading the batch file {}", path.display());
    // `-`: stdin, as for --input; its size is not known ahead (the bar counts bytes read).
    let (mut lines, size): (Box<dyn BufRead>, u64) = if path == Path::new("-") {
        (Box::new(std::io::stdin().lock()), 0)
    } else {
        let file = File::open(path).with_context(reading)?;
        let size = file.metadata().with_context(reading)?.len();
        (Box::new(BufReader::new(file)), size)
    };
    let mut client = ctx.connect()?;
    let mut tx = client.transaction()?;
    let enqueueing = || format!("enqueueing {target}");
    let mut batch = enqueue::Batch::open(&mut tx, request).with_context(enqueueing)?;
    let bar = ctx.out.progress(size, &format!("enqueueing {} (bytes read)", path.display()));
    let (mut ids, mut line, mut read) = (Vec::new(), 0, 0);
    let mut text = String::new();
    loop {
        let (mut inputs, mut numbers) = (Vec::with_capacity(enqueue::ENQUEUE_CHUNK), Vec::new());
        while inputs.len() < enqueue::ENQUEUE_CHUNK {
            text.clear();
            // A line is read up to the longest one taken: a file without newlines (a wrong file,
            // /dev/zero) was read whole into memory, until the allocation failed and wf aborted.
            let bytes = std::io::Read::take(&mut lines, MAX_LINE_BYTES + 1)
                .read_line(&mut text)
                .with_context(|| format!("{} line {}", reading(), line + 1))?;
            if bytes == 0 {
                break;
            }
            // Cut short with no newline: more than the longest line's bytes before it.
            if bytes as u64 > MAX_LINE_BYTES && !text.ends_with('\n') {
                bail!(
                    "{} line {}: longer than {} MiB, the most a line of a batch may hold (nothing was enqueued)",
                    path.display(),
                    line + 1,
                    MAX_LINE_BYTES >> 20
                );
            }
            // A byte-order mark opens the file, not its first line.
            if line == 0 {
                super::args::skip_bom(&mut text);
            }
            (line, read) = (line + 1, read + bytes as u64);
            if text.trim().is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(&text).map_err(|error| {
                let why = super::args::why_not_json(&error);
                anyhow::Error::new(error)
                    .context(format!("{} line {line}: {why} (nothing was enqueued)", path.display()))
            })?;
            if !value.is_object() {
                bail!("{} line {line}: each line must be a JSON object (nothing was enqueued)", path.display());
            }
            inputs.push(value);
            numbers.push(line);
        }
        if inputs.is_empty() {
            break;
        }
        let enqueued = batch.push(&mut tx, &inputs, &numbers).with_context(enqueueing)?;
        ids.extend(enqueued.iter().map(|job| job.id));
        bar.set_position(read);
    }
    if ids.is_empty() {
        bail!("{} has no inputs", path.display());
    }
    batch.finish(&mut tx)?;
    tx.commit()?;
    bar.finish_and_clear();
    Ok(ids)
}
