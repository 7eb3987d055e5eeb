//! `wf schedule add | list | rm | pause | resume | tick`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::args::{read_input, split_target};
use super::{CommandResult, Ctx};
use crate::cli::{ScheduleAddArgs, ScheduleCommand, ScheduleNameArgs, ScheduleTickArgs};
use crate::db;
use crate::diag::diag;
use crate::error::Exit;
use crate::output::rfc3339_or_null;
use crate::output::{confirm, time_cell};
use crate::schedule::{self, NewSchedule, Schedule};

pub(super) fn run(ctx: &Ctx, command: ScheduleCommand) -> CommandResult {
    match command {
        ScheduleCommand::Add(args) => add(ctx, args),
        ScheduleCommand::List => list(ctx),
        ScheduleCommand::Rm(args) => rm(ctx, args),
        ScheduleCommand::Pause(args) => set_enabled(ctx, args, false),
        ScheduleCommand::Resume(args) => set_enabled(ctx, args, true),
        ScheduleCommand::Tick(args) => tick(ctx, args),
    }
}

fn add(ctx: &Ctx, args: ScheduleAddArgs) -> CommandResult {
    let (app, action) = split_target(&args.target)?;
    let new = NewSchedule {
        name: &args.name,
        app,
        action,
        cron: &args.cron,
        tz: &args.tz,
        input: read_input(args.input.as_deref())?,
        priority: args.priority,
        tag: args.tag.as_deref(),
    };
    let mut client = ctx.connect()?;
    let (added, next) = schedule::add(&mut client, &new)?;
    if ctx.out.json {
        ctx.out.json(&ScheduleDocument::new(&added, Some(next)))?;
    } else {
        ctx.out.info(&format!(
            "added schedule {} ({} in {}), next fire {}; run `wf schedule tick` from cron every minute",
            added.name,
            added.cron,
            added.tz,
            time_cell(Some(next))
        ));
    }
    Ok(Exit::Ok)
}

fn list(ctx: &Ctx) -> CommandResult {
    let mut client = ctx.connect()?;
    let now = db::now(&mut client)?;
    let schedules = schedule::list(&mut client)?;
    if ctx.out.json {
        let document: Vec<ScheduleDocument> =
            schedules.iter().map(|s| ScheduleDocument::new(s, s.next_fire(now).ok())).collect();
        ctx.out.json(&document)?;
        return Ok(Exit::Ok);
    }
    let rows = schedules
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                format!("{}/{}", s.app, s.action),
                s.cron.clone(),
                s.tz.clone(),
                if s.enabled { "yes" } else { "paused" }.to_string(),
                time_cell(s.last_fire_time),
                if s.enabled { time_cell(s.next_fire(now).ok()) } else { "-".to_string() },
            ]
        })
        .collect();
    ctx.out.table(&["name", "action", "cron", "tz", "enabled", "last fire", "next fire"], rows)?;
    Ok(Exit::Ok)
}

fn rm(ctx: &Ctx, args: ScheduleNameArgs) -> CommandResult {
    confirm(&format!("remove schedule {}", args.name), args.yes)?;
    let mut client = ctx.connect()?;
    schedule::remove(&mut client, &args.name)?;
    if ctx.out.json {
        ctx.out.json(&RemovedDocument { removed: &args.name })?;
    } else {
        ctx.out.info(&format!("removed schedule {} (jobs it enqueued stay)", args.name));
    }
    Ok(Exit::Ok)
}

fn set_enabled(ctx: &Ctx, args: ScheduleNameArgs, enabled: bool) -> CommandResult {
    let mut client = ctx.connect()?;
    schedule::set_enabled(&mut client, &args.name, enabled)?;
    if ctx.out.json {
        ctx.out.json(&EnabledDocument { name: &args.name, enabled })?;
    } else {
        ctx.out.info(&format!("schedule {} {}", args.name, if enabled { "resumed" } else { "paused" }));
    }
    Ok(Exit::Ok)
}

fn tick(ctx: &Ctx, args: ScheduleTickArgs) -> CommandResult {
    let mut client = ctx.connect()?;
    let fired = schedule::tick(&mut client, args.horizon, None)?;
    if ctx.out.json {
        let document: Vec<FiredDocument> = fired
            .iter()
            .map(|f| FiredDocument {
                schedule: &f.schedule,
                ids: f.jobs.iter().map(|job| job.id).collect(),
                error: f.error.as_deref(),
            })
            .collect();
        ctx.out.json(&TickDocument { fired: document })?;
    } else {
        for f in &fired {
            match &f.error {
                None => ctx.out.info(&format!("{}: enqueued {} job(s)", f.schedule, f.jobs.len())),
                Some(error) => diag!("{}: nothing enqueued: {error}", f.schedule),
            }
        }
    }
    if fired.iter().any(|f| f.error.is_some()) {
        return Err(anyhow::anyhow!("some schedules could not enqueue (see above)").into());
    }
    Ok(Exit::Ok)
}

/// A schedule with its next fire time (`add` prints it, `list` lists them).
#[derive(Serialize)]
struct ScheduleDocument<'a> {
    name: &'a str,
    app: &'a str,
    action: &'a str,
    cron: &'a str,
    tz: &'a str,
    input: &'a Value,
    priority: i32,
    tag: Option<&'a str>,
    enabled: bool,
    #[serde(serialize_with = "rfc3339_or_null")]
    last_fire_time: Option<DateTime<Utc>>,
    #[serde(serialize_with = "rfc3339_or_null")]
    next_fire_time: Option<DateTime<Utc>>,
}

impl<'a> ScheduleDocument<'a> {
    fn new(schedule: &'a Schedule, next_fire_time: Option<DateTime<Utc>>) -> ScheduleDocument<'a> {
        ScheduleDocument {
            name: &schedule.name,
            app: &schedule.app,
            action: &schedule.action,
            cron: &schedule.cron,
            tz: &schedule.tz,
            input: &schedule.input,
            priority: schedule.priority,
            tag: schedule.tag.as_deref(),
            enabled: schedule.enabled,
            last_fire_time: schedule.last_fire_time,
            next_fire_time,
        }
    }
}

#[derive(Serialize)]
struct RemovedDocument<'a> {
    removed: &'a str,
}

/// After `pause` or `resume`.
#[derive(Serialize)]
struct EnabledDocument<'a> {
    name: &'a str,
    enabled: bool,
}

/// What one tick enqueued, per schedule.
#[derive(Serialize)]
struct TickDocument<'a> {
    fired: Vec<FiredDocument<'a>>,
}

#[derive(Serialize)]
struct FiredDocument<'a> {
    schedule: &'a str,
    ids: Vec<Uuid>,
    /// Why this schedule enqueued nothing.
    error: Option<&'a str>,
}
