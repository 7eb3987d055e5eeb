//! `wf jobs`: jobs, newest first, a page at a time; `--watch` lists them again every 2 seconds.

use std::io::IsTerminal;
use std::time::Duration;

use super::render::{JobDocument, ShownJob};
use super::{CommandResult, Ctx};
use crate::cli::JobsArgs;
use crate::db;
use crate::error::{CommandError, Exit};
use crate::output::{ago, fit};
use crate::queue::inspect::{self, Filter, JobView};
use crate::queue::job::JobStatus;
use crate::schedule;
use crate::source::catalog;

const WATCH_PERIOD: Duration = Duration::from_secs(2);
/// The action column's width beside ids of 8 digits, and the least it gives up to longer ones.
const ACTION_WIDTH: usize = 22;
const ACTION_WIDTH_MIN: usize = 12;

pub(super) fn run(ctx: &Ctx, args: JobsArgs) -> CommandResult {
    if args.watch && ctx.out.json {
        return Err(CommandError::usage("--watch lists jobs as a table again and again: it does not go with --json"));
    }
    let (app, action) = super::args::app_action(args.app.as_deref(), args.action.as_deref())?;
    let filter = Filter {
        status: args.status,
        app,
        action,
        tag: args.tag.as_deref(),
        schedule: args.schedule.as_deref(),
        since: args.since,
        until: args.until,
    };
    let mut client = ctx.connect()?;
    if let (Some(since), Some(until)) = (args.since, args.until) {
        let now = db::now(&mut client)?;
        if since.at(now) >= until.at(now) {
            return Err(CommandError::usage("--since is not before --until: no job was created between them"));
        }
    }
    let offset = (args.page - 1) * args.limit;
    let terminal = std::io::stdout().is_terminal();
    loop {
        // One more than a page: whether there is a next one.
        let mut jobs = inspect::list(&mut client, &filter, args.limit + 1, offset)?;
        let more = jobs.len() as i64 > args.limit;
        jobs.truncate(args.limit as usize);
        if ctx.out.json {
            let ids: Vec<uuid::Uuid> = jobs.iter().map(|job| job.id).collect();
            let retries = inspect::retries_of(&mut client, &ids)?;
            let shown: Vec<ShownJob> = jobs
                .iter()
                .map(|job| ShownJob { job: JobDocument::from(job), retried_as: retries.get(&job.id).copied() })
                .collect();
            ctx.out.json_array(&shown)?;
            if more {
                ctx.out.note(&more_pages(offset, jobs.len(), args.page));
            }
            return Ok(Exit::Ok);
        }
        let now = db::now(&mut client)?;
        if args.watch && terminal {
            // Home and clear: each listing replaces the last.
            ctx.out.line_raw("\x1b[H\x1b[2J")?;
        }
        let ids: Vec<uuid::Uuid> = jobs.iter().map(|job| job.id).collect();
        let short = inspect::unique_prefixes(&mut client, &ids)?;
        table(ctx, &jobs, &short, now)?;
        if jobs.is_empty() && args.page > 1 {
            ctx.out.info("no jobs on this page");
        } else if jobs.is_empty() {
            let unknown = catalog::hints([
                catalog::not_in_catalog(&mut client, app, action)?,
                catalog::unknown_tag(&mut client, filter.tag)?,
                schedule::not_a_schedule(&mut client, filter.schedule)?,
            ]);
            ctx.out.info(&format!("no jobs{unknown}"));
        } else if more {
            ctx.out.info(&more_pages(offset, jobs.len(), args.page));
        }
        if !args.watch {
            return Ok(Exit::Ok);
        }
        if !terminal {
            ctx.out.line("")?;
        }
        std::thread::sleep(WATCH_PERIOD);
    }
}

fn more_pages(offset: i64, shown: usize, page: i64) -> String {
    format!("jobs {}-{}, newest first; older ones: --page {}", offset + 1, offset + shown as i64, page + 1)
}

/// At most 80 columns: short ids (`short`, each the shortest prefix that names its job alone),
/// relative times, long names cut (the more, the longer the ids).
fn table(ctx: &Ctx, jobs: &[JobView], short: &[String], now: chrono::DateTime<chrono::Utc>) -> anyhow::Result<()> {
    let id_width = short.iter().map(String::len).max().unwrap_or(inspect::SHORT_ID);
    let action_width = ACTION_WIDTH.saturating_sub(id_width - inspect::SHORT_ID).max(ACTION_WIDTH_MIN);
    let rows = jobs
        .iter()
        .zip(short)
        .map(|(job, id)| {
            let ran = match (job.started_at, job.completed_at) {
                (Some(started), Some(completed)) => crate::output::span((completed - started).num_seconds()),
                (Some(started), None) if job.status == JobStatus::Running => {
                    crate::output::span((now - started).num_seconds())
                }
                _ => "-".to_string(),
            };
            vec![
                id.clone(),
                job.status.to_string(),
                fit(&format!("{}/{}", job.app, job.action), action_width),
                fit(&job.tag, 10),
                ago(Some(job.created_at), now),
                ran,
            ]
        })
        .collect();
    ctx.out.status_table(&["id", "status", "action", "tag", "created", "ran"], rows, 1)
}
