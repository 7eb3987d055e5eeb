//! `wf schedule add | list | update | rm | pause | resume | tick`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::args::{read_input, split_target};
use super::{CommandResult, Ctx};
use crate::cli::{
    ScheduleAddArgs, ScheduleCommand, ScheduleNameArgs, SchedulePauseArgs, ScheduleResumeArgs, ScheduleTickArgs,
    ScheduleUpdateArgs,
};
use crate::db;
use crate::diag::diag;
use crate::error::Exit;
use crate::output::confirm;
use crate::output::rfc3339_or_null;
use crate::schedule::{self, Changes, NewSchedule, Schedule};

pub(super) fn run(ctx: &Ctx, command: ScheduleCommand) -> CommandResult {
    match command {
        ScheduleCommand::Add(args) => add(ctx, args),
        ScheduleCommand::List => list(ctx),
        ScheduleCommand::Update(args) => update(ctx, args),
        ScheduleCommand::Rm(args) => rm(ctx, args),
        ScheduleCommand::Pause(args) => pause(ctx, args),
        ScheduleCommand::Resume(args) => resume(ctx, args),
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
        no_overlap: args.no_overlap,
    };
    let mut client = ctx.connect()?;
    let (added, next) = schedule::add(&mut client, &new)?;
    if ctx.out.json {
        ctx.out.json(&ScheduleDocument::new(&added, Some(next), None, None, None))?;
    } else {
        ctx.out.info(&format!(
            "added schedule {} ({} in {}), next fire {}; run `wf schedule tick` from cron every minute",
            added.name,
            added.cron,
            added.tz,
            in_zone(&added, Some(next))
        ));
    }
    Ok(Exit::Ok)
}

fn list(ctx: &Ctx) -> CommandResult {
    let mut client = ctx.connect()?;
    let now = db::now(&mut client)?;
    let schedules = schedule::list(&mut client)?;
    let problems = schedule::problems(&mut client, &schedules)?;
    // A paused or broken schedule fires next at no time, in the table as in JSON.
    let mut next_fires = Vec::new();
    for (s, problem) in schedules.iter().zip(&problems) {
        next_fires.push(if s.enabled && problem.is_none() { s.next_fire(&mut client, now)? } else { None });
    }
    if ctx.out.json {
        let document: Vec<ScheduleDocument> = schedules
            .iter()
            .zip(&problems)
            .zip(&next_fires)
            .map(|((s, problem), next)| ScheduleDocument::new(s, *next, problem.as_deref(), None, None))
            .collect();
        ctx.out.json(&document)?;
        return Ok(Exit::Ok);
    }
    let rows = schedules
        .iter()
        .zip(&problems)
        .zip(&next_fires)
        .map(|((s, problem), next)| {
            vec![
                s.name.clone(),
                format!("{}/{}", s.app, s.action),
                s.cron.clone(),
                state(s, problem.as_deref()).to_string(),
                in_zone(s, s.last_fire_time),
                in_zone(s, *next),
            ]
        })
        .collect();
    ctx.out.table(&["name", "action", "cron", "state", "enqueued up to", "next fire"], rows)?;
    for (s, problem) in schedules.iter().zip(&problems) {
        if let Some(problem) = problem {
            ctx.out.warn(&format!("schedule {} is broken: {problem}", s.name));
        }
    }
    Ok(Exit::Ok)
}

/// Warn of every schedule that could not enqueue now, and how to mend it: after a sync or a
/// source's removal took its action away, or made its input no longer fit.
pub(super) fn warn_broken(ctx: &Ctx, client: &mut postgres::Client) -> anyhow::Result<()> {
    for (name, problem) in schedule::broken(client)? {
        ctx.out.warn(&format!(
            "schedule {name} is broken: {problem} (`wf schedule update {name}` with --action or --input, or `wf schedule \
             rm {name}`)"
        ));
    }
    Ok(())
}

/// `active`, `paused`, or `broken` (it could not enqueue now).
fn state(schedule: &Schedule, problem: Option<&str>) -> &'static str {
    match (problem, schedule.enabled) {
        (Some(_), _) => "broken",
        (None, true) => "active",
        (None, false) => "paused",
    }
}

/// A time in the schedule's own zone, labelled with it (`2026-03-29 03:00 CEST`).
fn in_zone(schedule: &Schedule, time: Option<DateTime<Utc>>) -> String {
    match time {
        Some(time) => time.with_timezone(&schedule.zone()).format("%Y-%m-%d %H:%M:%S %Z").to_string(),
        None => "-".to_string(),
    }
}

fn update(ctx: &Ctx, args: ScheduleUpdateArgs) -> CommandResult {
    let changes = Changes {
        action: args.action.as_deref().map(split_target).transpose()?,
        cron: args.cron.as_deref(),
        tz: args.tz.as_deref(),
        input: args.input.as_deref().map(|input| read_input(Some(input))).transpose()?,
        priority: args.priority,
        tag: if args.no_tag { Some(None) } else { args.tag.as_deref().map(Some) },
        no_overlap: args.no_overlap,
    };
    let mut client = ctx.connect()?;
    let updated = schedule::update(&mut client, &args.name, changes, &ctx.config.operator)?;
    let s = &updated.schedule;
    // A paused schedule fires next at no time, as `list` shows it.
    let next = s.enabled.then_some(updated.next);
    if ctx.out.json {
        ctx.out.json(&ScheduleDocument::new(s, next, None, Some(updated.withdrawn), Some(updated.enqueued)))?;
    } else {
        let next = if s.enabled { format!("next fire {}", in_zone(s, next)) } else { "paused".to_string() };
        ctx.out.info(&format!(
            "updated schedule {} ({}/{}, {} in {}), {next}; {} job(s) enqueued ahead withdrawn, {} enqueued again \
             as it now says",
            s.name, s.app, s.action, s.cron, s.tz, updated.withdrawn, updated.enqueued
        ));
    }
    Ok(Exit::Ok)
}

fn rm(ctx: &Ctx, args: ScheduleNameArgs) -> CommandResult {
    let mut client = ctx.connect()?;
    // Not found before asked: nothing to confirm.
    if !schedule::exists(&mut client, &args.name)? {
        return Err(anyhow::anyhow!("no such schedule: {}", args.name).into());
    }
    confirm(&format!("remove schedule {}", args.name), args.yes)?;
    let withdrawn = schedule::remove(&mut client, &args.name, &ctx.config.operator)?;
    if ctx.out.json {
        ctx.out.json(&RemovedDocument { removed: &args.name, withdrawn })?;
    } else {
        ctx.out.info(&format!(
            "removed schedule {}; {withdrawn} job(s) it enqueued ahead withdrawn (jobs due or run already stay)",
            args.name
        ));
    }
    Ok(Exit::Ok)
}

fn pause(ctx: &Ctx, args: SchedulePauseArgs) -> CommandResult {
    let mut client = ctx.connect()?;
    let (was_active, withdrawn) = schedule::pause(&mut client, &args.name, &ctx.config.operator)?;
    if ctx.out.json {
        ctx.out.json(&EnabledDocument {
            name: &args.name,
            enabled: false,
            withdrawn,
            enqueued: None,
            paused: Some(was_active),
            resumed: None,
        })?;
    } else if was_active {
        ctx.out.info(&format!("schedule {} paused; {withdrawn} job(s) it enqueued ahead withdrawn", args.name));
    } else {
        ctx.out.info(&format!("schedule {} is paused already; {withdrawn} job(s) enqueued ahead withdrawn", args.name));
    }
    Ok(Exit::Ok)
}

fn resume(ctx: &Ctx, args: ScheduleResumeArgs) -> CommandResult {
    let mut client = ctx.connect()?;
    let fired = schedule::resume(&mut client, &args.name, args.horizon)?;
    let enqueued = fired.as_ref().map_or(0, |f| f.jobs.len());
    if ctx.out.json {
        ctx.out.json(&EnabledDocument {
            name: &args.name,
            enabled: true,
            withdrawn: 0,
            enqueued: Some(enqueued),
            paused: None,
            resumed: Some(fired.is_some()),
        })?;
    } else if fired.is_none() {
        ctx.out.info(&format!("schedule {} is active already", args.name));
    } else {
        // A tick enqueues at most so many fire times of a schedule: the last one says how far.
        let last = fired.as_ref().and_then(|f| f.jobs.iter().map(|job| job.scheduled_for).max());
        let up_to = match last {
            Some(last) if enqueued >= schedule::MAX_FIRES_PER_TICK => format!(
                "up to {} (at most {} at a time: the next ticks go on)",
                crate::output::time_cell(Some(last)),
                schedule::MAX_FIRES_PER_TICK
            ),
            _ => format!("up to now + {}", crate::output::duration(args.horizon)),
        };
        ctx.out.info(&format!(
            "schedule {} resumed; {enqueued} job(s) enqueued {up_to} (fire times missed while paused are not replayed)",
            args.name
        ));
    }
    // Resumed all the same, as `list` shows it; each tick reports it until it is fixed.
    if let Some(error) = fired.and_then(|f| f.error) {
        ctx.out.warn(&format!("schedule {} is broken: {error}", args.name));
    }
    Ok(Exit::Ok)
}

fn tick(ctx: &Ctx, args: ScheduleTickArgs) -> CommandResult {
    let mut client = ctx.connect()?;
    let fired = schedule::tick(&mut client, args.horizon, None)?;
    let horizon = crate::output::duration(args.horizon);
    if ctx.out.json {
        let document: Vec<FiredDocument> = fired
            .iter()
            .map(|f| FiredDocument {
                schedule: &f.schedule,
                ids: f.jobs.iter().map(|job| job.id).collect(),
                late: f.late,
                skipped: f.skipped,
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
    for f in fired.iter().filter(|f| f.skipped > 0) {
        let count = if f.skipped >= schedule::MAX_SKIPPED_COUNTED {
            format!("{} or more", schedule::MAX_SKIPPED_COUNTED)
        } else {
            f.skipped.to_string()
        };
        ctx.out.warn(&format!(
            "{}: {count} fire time(s) missed by more than --horizon {horizon} were skipped (missed fire times are not \
             replayed; only the latest runs, when no later one was missed): no tick ran for that long",
            f.schedule
        ));
    }
    for f in fired.iter().filter(|f| f.late > 0) {
        ctx.out.warn(&format!(
            "{}: {} fire time(s) were due before this tick enqueued them (they run late): the previous tick was \
             longer ago than --horizon {horizon} (or the schedule was resumed with a shorter --horizon); tick more \
             often or with a longer horizon",
            f.schedule, f.late
        ));
    }
    let broken: Vec<&str> = fired.iter().filter(|f| f.error.is_some()).map(|f| f.schedule.as_str()).collect();
    if !broken.is_empty() {
        let said = if ctx.out.json { "the `error` of each in the document" } else { "above" };
        return Err(anyhow::anyhow!(
            "{} schedule(s) could not enqueue: {} (see {said})",
            broken.len(),
            broken.join(", ")
        )
        .into());
    }
    Ok(Exit::Ok)
}

/// A schedule with its next fire time (`add` and `update` print it, `list` lists them).
/// `last_fire_time` and `enqueued_up_to` are the same: the fire time it is enqueued up to.
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
    no_overlap: bool,
    /// `active`, `paused` or `broken`.
    state: &'static str,
    /// Why it is broken.
    problem: Option<&'a str>,
    #[serde(serialize_with = "rfc3339_or_null")]
    last_fire_time: Option<DateTime<Utc>>,
    #[serde(serialize_with = "rfc3339_or_null")]
    enqueued_up_to: Option<DateTime<Utc>>,
    #[serde(serialize_with = "rfc3339_or_null")]
    next_fire_time: Option<DateTime<Utc>>,
    /// After an update: the jobs enqueued ahead that were withdrawn.
    #[serde(skip_serializing_if = "Option::is_none")]
    withdrawn: Option<u64>,
    /// After an update: the fire times enqueued again, as the schedule now says.
    #[serde(skip_serializing_if = "Option::is_none")]
    enqueued: Option<usize>,
}

impl<'a> ScheduleDocument<'a> {
    fn new(
        schedule: &'a Schedule,
        next_fire_time: Option<DateTime<Utc>>,
        problem: Option<&'a str>,
        withdrawn: Option<u64>,
        enqueued: Option<usize>,
    ) -> ScheduleDocument<'a> {
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
            no_overlap: schedule.no_overlap,
            state: state(schedule, problem),
            problem,
            last_fire_time: schedule.last_fire_time,
            enqueued_up_to: schedule.last_fire_time,
            next_fire_time,
            withdrawn,
            enqueued,
        }
    }
}

#[derive(Serialize)]
struct RemovedDocument<'a> {
    removed: &'a str,
    /// Jobs it had enqueued ahead, canceled.
    withdrawn: u64,
}

/// After `pause` or `resume`.
#[derive(Serialize)]
struct EnabledDocument<'a> {
    name: &'a str,
    enabled: bool,
    /// Jobs enqueued ahead, canceled by a pause.
    withdrawn: u64,
    /// Jobs a resume enqueued.
    #[serde(skip_serializing_if = "Option::is_none")]
    enqueued: Option<usize>,
    /// Whether a pause found the schedule active (false: it was paused already, nothing changed
    /// but what it withdrew).
    #[serde(skip_serializing_if = "Option::is_none")]
    paused: Option<bool>,
    /// Whether a resume found the schedule paused (false: it was active already, nothing changed).
    #[serde(skip_serializing_if = "Option::is_none")]
    resumed: Option<bool>,
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
    /// Fire times enqueued after they were due.
    late: usize,
    /// Fire times missed by more than the horizon and not enqueued (counted up to 10,000).
    skipped: usize,
    /// Why this schedule enqueued nothing.
    error: Option<&'a str>,
}
