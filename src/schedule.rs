//! Cron schedules: a job creator like any other, enqueueing each fire time through the single
//! enqueue path with trigger kind `schedule`.
//!
//! Policy for missed fire times: `wf schedule tick` enqueues every fire time after the schedule's
//! "enqueued up to" (its `last_fire_time`) up to now + horizon. A fire time already due when the
//! tick comes (the previous tick was longer ago than its horizon) is enqueued at once if it was
//! missed by at most the horizon, and counted as late; of those missed by longer (ticks not
//! running, a paused schedule), only the latest runs (late), when no later one does, and the others
//! are counted as skipped.
//!
//! An update or a resume enqueues too, in its own transaction, so that no fire time between it and
//! the next tick is left to that tick (to run late): an update enqueues again, as the schedule now
//! says, the fire times it withdrew; a resume enqueues as a tick would.

use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::CronParser;
use postgres::{Client, GenericClient, Row, Transaction};
use serde_json::Value;

use crate::queue::complete;
use crate::queue::enqueue::{self, Enqueued, Pin, Request, ScheduleFire, When};
use crate::queue::job::{JobStatus, TriggerKind};

/// At most this many fire times per schedule and tick (a horizon much longer than the period).
pub(crate) const MAX_FIRES_PER_TICK: usize = 1000;

#[derive(Debug, Clone)]
pub(crate) struct Schedule {
    pub name: String,
    pub app: String,
    pub action: String,
    pub cron: String,
    pub tz: String,
    pub input: Value,
    pub priority: i32,
    pub tag: Option<String>,
    pub enabled: bool,
    /// Enqueued up to: the last fire time enqueued, or the moment of a pause or of a resume that
    /// enqueued nothing. An update keeps it (it enqueues again up to it), or moves it to the
    /// moment of the update when it was past.
    pub last_fire_time: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub no_overlap: bool,
}

impl Schedule {
    fn from_row(row: &Row) -> Schedule {
        Schedule {
            name: row.get("name"),
            app: row.get("app_key"),
            action: row.get("action_key"),
            cron: row.get("cron"),
            tz: row.get("tz"),
            input: row.get("input"),
            priority: row.get("priority"),
            tag: row.get("tag"),
            enabled: row.get("enabled"),
            last_fire_time: row.get("last_fire_time"),
            created_at: row.get("created_at"),
            no_overlap: row.get("no_overlap"),
        }
    }

    /// The next fire time after `now` that runs; None when its cron no longer reads (a broken
    /// schedule) or never fires again.
    pub(crate) fn next_fire(
        &self,
        client: &mut impl GenericClient,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>> {
        let Ok(timing) = parse(&self.cron, &self.tz) else { return Ok(None) };
        // A fire time an operator canceled ahead stays canceled (its job holds it): not the next.
        let canceled: Vec<DateTime<Utc>> = client
            .query(
                "SELECT j.schedule_fire FROM job j JOIN job_completed c ON c.job_id = j.id
                  WHERE j.schedule_name = $1 AND j.schedule_fire > $2 AND c.status = 'canceled'",
                &[&self.name, &now],
            )?
            .iter()
            .map(|row| row.get(0))
            .collect();
        Ok(timing.fires_after(now).take(canceled.len() + 1).find(|fire| !canceled.contains(fire)))
    }

    /// The schedule's time zone (UTC if it no longer reads).
    pub(crate) fn zone(&self) -> Tz {
        time_zone(&self.tz).unwrap_or(Tz::UTC)
    }
}

const COLUMNS: &str =
    "name, app_key, action_key, cron, tz, input, priority, tag, enabled, last_fire_time, created_at, no_overlap";

/// The fields of a cron, by how many it has.
const FIELDS_5: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];
const FIELDS_6: [&str; 6] = ["second", "minute", "hour", "day-of-month", "month", "day-of-week"];
const FIELDS_7: [&str; 7] = ["second", "minute", "hour", "day-of-month", "month", "day-of-week", "year"];

fn parse(cron: &str, tz: &str) -> Result<Timing> {
    Ok(Timing { cron: parse_cron(cron)?, tz: time_zone(tz)?, fixed: fixed_time(cron) })
}

/// A cron in its zone, with cronie's rule for daylight saving time.
struct Timing {
    cron: Cron,
    tz: Tz,
    /// Its second, minute and hour fields are not `*` nor `*/n` (cronie's "fixed-time" job): it
    /// names local times, each fired once a day it exists, and right after the change on the day it
    /// does not. Any other runs by the clock, as croner computes it in the zone: in both halves of a
    /// repeated hour, and not in a skipped one.
    fixed: bool,
}

/// cronie's test for a job whose times daylight saving time moves rather than skips or repeats.
fn fixed_time(cron: &str) -> bool {
    let cron = cron.trim();
    if let Some(nickname) = cron.strip_prefix('@') {
        return !nickname.eq_ignore_ascii_case("hourly");
    }
    let fields: Vec<&str> = cron.split_whitespace().collect();
    let times = if fields.len() == 5 { &fields[..2] } else { &fields[..fields.len().min(3)] };
    times.iter().all(|field| !field.starts_with('*'))
}

impl Timing {
    /// The fire times after `after`, in order.
    fn fires_after(&self, after: DateTime<Utc>) -> Box<dyn Iterator<Item = DateTime<Utc>> + '_> {
        if !self.fixed {
            return Box::new(self.cron.iter_after(after.with_timezone(&self.tz)).map(|fire| fire.with_timezone(&Utc)));
        }
        // The cron read on the zone's wall clock (a day of local times, none skipped nor repeated),
        // each local time then placed in the zone.
        let local = after.with_timezone(&self.tz).naive_local().and_utc();
        let mut last = after;
        Box::new(self.cron.iter_after(local).filter_map(move |wall| {
            let fire = self.placed(wall.naive_utc());
            (fire > last).then(|| {
                last = fire;
                fire
            })
        }))
    }

    /// The first fire time after `now`.
    fn next_after(&self, now: DateTime<Utc>) -> Result<DateTime<Utc>> {
        self.fires_after(now).next().context("computing the next fire time: the cron never fires")
    }

    /// The latest fire time at or before `at`.
    fn latest_at_or_before(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if !self.fixed {
            return self
                .cron
                .find_previous_occurrence(&at.with_timezone(&self.tz), true)
                .ok()
                .map(|f| f.with_timezone(&Utc));
        }
        let mut wall = at.with_timezone(&self.tz).naive_local().and_utc();
        // A local time moved past `at` by a skipped hour is not at or before it: the one before.
        let mut latest = None;
        for _ in 0..4 {
            let found = self.cron.find_previous_occurrence(&wall, true).ok()?;
            let fire = self.placed(found.naive_utc());
            if fire <= at {
                latest = Some(fire);
                break;
            }
            wall = found - chrono::Duration::seconds(1);
        }
        // After the clocks went back, the wall clock reads times it read an hour ago: a local time
        // of the first pass, passed already, reads later than `at` and was not found. The fire
        // times of the last hours, in order, have it.
        let before = at - chrono::Duration::hours(3);
        if self.offset_s(before) > self.offset_s(at)
            && let Some(recent) = self.fires_after(before).take_while(|fire| *fire <= at).last()
        {
            return Some(latest.map_or(recent, |latest| latest.max(recent)));
        }
        latest
    }

    /// The zone's offset from UTC at `at`, in seconds.
    fn offset_s(&self, at: DateTime<Utc>) -> i32 {
        use chrono::{Offset, TimeZone};
        self.tz.offset_from_utc_datetime(&at.naive_utc()).fix().local_minus_utc()
    }

    /// A local time in the zone: the first of two when clocks go back, the change itself (the first
    /// minute that exists after it) when clocks go forward past it.
    fn placed(&self, wall: chrono::NaiveDateTime) -> DateTime<Utc> {
        use chrono::{TimeZone, Timelike};
        let mut local = wall;
        for _ in 0..=24 * 60 {
            match self.tz.from_local_datetime(&local) {
                chrono::LocalResult::Single(at) | chrono::LocalResult::Ambiguous(at, _) => {
                    return at.with_timezone(&Utc);
                }
                chrono::LocalResult::None => {
                    local = (local + chrono::Duration::minutes(1)).with_second(0).unwrap_or(local);
                }
            }
        }
        wall.and_utc()
    }
}

/// A cron as croner reads it (5 fields, 6 with seconds first, 7 with a year last, or a nickname),
/// with cronie's `@midnight` too; an error names the field that does not read.
fn parse_cron(text: &str) -> Result<Cron> {
    let text = text.trim();
    let nickname = if text.eq_ignore_ascii_case("@midnight") { "@daily" } else { text };
    let error = match CronParser::builder().dom_and_dow(either_day_starts_with_star(text)).build().parse(nickname) {
        Ok(cron) => return Ok(cron),
        Err(error) => error,
    };
    if text.starts_with('@') {
        bail!(
            "{text:?} is not a cron nickname (known: @yearly, @annually, @monthly, @weekly, @daily, @midnight, \
             @hourly)"
        );
    }
    let fields: Vec<&str> = text.split_whitespace().collect();
    let names: &[&str] = match fields.len() {
        5 => &FIELDS_5,
        6 => &FIELDS_6,
        7 => &FIELDS_7,
        n => bail!(
            "{text:?} has {n} fields; a cron has 5 (minute hour day-of-month month day-of-week), 6 (a second \
             first) or 7 (a second first, a year last)"
        ),
    };
    // The field that does not read on its own, every other one `*`.
    for (index, field) in fields.iter().enumerate() {
        let alone: Vec<&str> = (0..fields.len()).map(|n| if n == index { *field } else { "*" }).collect();
        if Cron::from_str(&alone.join(" ")).is_err() {
            bail!("{text:?} is not a cron expression: its {} field {field:?} is not valid ({error})", names[index]);
        }
    }
    bail!("{text:?} is not a cron expression: {error}")
}

/// A cron as it is stored and shown: its fields one space apart.
fn as_written(cron: &str) -> String {
    cron.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether the day-of-month or the day-of-week field starts with `*`: then, as in cronie, a day
/// must match both (`0 0 */2 * 2`: the Tuesdays of odd dates), where two restricted fields match
/// on either day. croner takes a stepped `*/2` for a restricted field, and matched either day.
fn either_day_starts_with_star(text: &str) -> bool {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let days = match fields.len() {
        5 => [fields[2], fields[4]],
        6 | 7 => [fields[3], fields[5]],
        _ => return false,
    };
    days.iter().any(|field| field.starts_with('*'))
}

/// An IANA time zone, its name in any case (`europe/paris` is Europe/Paris).
fn time_zone(name: &str) -> Result<Tz> {
    if let Ok(zone) = Tz::from_str(name) {
        return Ok(zone);
    }
    chrono_tz::TZ_VARIANTS
        .iter()
        .find(|zone| zone.name().eq_ignore_ascii_case(name))
        .copied()
        .ok_or_else(|| anyhow!("{name:?} is not a time zone (an IANA name, e.g. Europe/Paris)"))
}

/// What `wf schedule add` asks for.
#[derive(Debug)]
pub(crate) struct NewSchedule<'a> {
    pub name: &'a str,
    pub app: &'a str,
    pub action: &'a str,
    pub cron: &'a str,
    pub tz: &'a str,
    pub input: Value,
    pub priority: i32,
    pub tag: Option<&'a str>,
    pub no_overlap: bool,
}

/// Add a schedule after checking its name, cron (it must fire), zone, action and input (against
/// the action's current input schema; every fire is checked again by the enqueue path). Returns it
/// with its next fire time.
pub(crate) fn add(client: &mut Client, new: &NewSchedule<'_>) -> Result<(Schedule, DateTime<Utc>)> {
    if !crate::source::is_valid_key(new.name) {
        bail!("schedule name {:?} must match {}", new.name, crate::source::KEY_PATTERN);
    }
    let cron = as_written(new.cron);
    let mut tx = client.transaction()?;
    let (tz, next) = check(&mut tx, new.app, new.action, &cron, new.tz, &new.input, new.tag)?;
    let row = tx
        .query_opt(
            &format!(
                "INSERT INTO schedule (name, app_key, action_key, cron, tz, input, priority, tag, no_overlap)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                 ON CONFLICT (name) DO NOTHING
                 RETURNING {COLUMNS}"
            ),
            &[
                &new.name,
                &new.app,
                &new.action,
                &cron,
                &tz.name(),
                &new.input,
                &new.priority,
                &new.tag,
                &new.no_overlap,
            ],
        )?
        .with_context(|| format!("a schedule named {} exists already", new.name))?;
    tx.commit()?;
    Ok((Schedule::from_row(&row), next))
}

/// What a schedule would enqueue must make sense now: the cron fires in the zone, the action is in
/// the catalog, the input fits its schema, the tag is one. Returns the zone and the next fire time.
fn check(
    tx: &mut Transaction<'_>,
    app: &str,
    action: &str,
    cron: &str,
    tz: &str,
    input: &Value,
    tag: Option<&str>,
) -> Result<(Tz, DateTime<Utc>)> {
    if let Some(tag) = tag {
        crate::source::check_tag(tag)?;
    }
    let timing = parse(cron, tz)?;
    let zone = timing.tz;
    let now = crate::db::now(tx)?;
    let next = timing
        .next_after(now)
        .with_context(|| format!("the cron {cron:?} never fires in {} (nothing was saved)", zone.name()))?;
    let found =
        tx.query_opt("SELECT input_schema FROM action WHERE app_key = $1 AND action_key = $2", &[&app, &action])?;
    let Some(found) = found else {
        bail!("{}", crate::source::catalog::unknown_action(tx, app, action)?);
    };
    enqueue::check_storable(std::slice::from_ref(input), &[])?;
    if let Some(schema) = found.get::<_, Option<Value>>(0) {
        enqueue::validate_inputs(&schema, std::slice::from_ref(input))?;
    }
    Ok((zone, next))
}

pub(crate) fn exists(client: &mut Client, name: &str) -> Result<bool> {
    Ok(client.query_one("SELECT EXISTS (SELECT 1 FROM schedule WHERE name = $1)", &[&name])?.get(0))
}

/// For a filter of jobs by schedule that matched none: what to say when there is no such schedule
/// (the jobs of a removed one are found all the same), with the closest names.
pub(crate) fn not_a_schedule(client: &mut Client, name: Option<&str>) -> Result<Option<String>> {
    let Some(name) = name else { return Ok(None) };
    let names: Vec<String> = client.query("SELECT name FROM schedule", &[])?.iter().map(|row| row.get(0)).collect();
    if names.iter().any(|known| known == name) {
        return Ok(None);
    }
    Ok(Some(format!("there is no schedule {name}{}", crate::source::catalog::closest(name, names))))
}

pub(crate) fn list(client: &mut Client) -> Result<Vec<Schedule>> {
    let rows = client.query(&format!("SELECT {COLUMNS} FROM schedule ORDER BY name"), &[])?;
    Ok(rows.iter().map(Schedule::from_row).collect())
}

/// Why each schedule could not enqueue now, if it could not: its cron or zone no longer reads, its
/// action left the catalog, or its input no longer fits the action's input schema.
pub(crate) fn problems(client: &mut impl GenericClient, schedules: &[Schedule]) -> Result<Vec<Option<String>>> {
    let mut problems = Vec::new();
    for schedule in schedules {
        let found = client.query_opt(
            "SELECT input_schema FROM action WHERE app_key = $1 AND action_key = $2",
            &[&schedule.app, &schedule.action],
        )?;
        let problem = match (parse(&schedule.cron, &schedule.tz), found) {
            (Err(error), _) => Some(format!("{error:#}")),
            (Ok(_), None) => {
                Some(format!("its action {}/{} is not in the catalog any more", schedule.app, schedule.action))
            }
            (Ok(_), Some(found)) => found.get::<_, Option<Value>>(0).and_then(|schema| {
                enqueue::validate_inputs(&schema, std::slice::from_ref(&schedule.input))
                    .err()
                    .map(|error| format!("its input no longer fits {}/{}: {error:#}", schedule.app, schedule.action))
            }),
        };
        problems.push(problem);
    }
    Ok(problems)
}

/// Every schedule that could not enqueue now, with why.
pub(crate) fn broken(client: &mut Client) -> Result<Vec<(String, String)>> {
    let schedules = list(client)?;
    let problems = problems(client, &schedules)?;
    Ok(schedules.into_iter().zip(problems).filter_map(|(s, problem)| problem.map(|p| (s.name, p))).collect())
}

/// What a withdrawal cancels of a schedule's jobs waiting in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Withdrawn {
    /// Its fire times enqueued ahead: a change enqueues them again as the schedule now says, and
    /// leaves its runs' retries to retry them.
    FireTimes,
    /// Those and its runs' retries that wait for their backoff: a pause or a removal leaves nothing
    /// of the schedule to run.
    FireTimesAndRetries,
}

/// Cancel the jobs a schedule enqueued ahead (not due yet, not running), and its runs' retries that
/// wait for their backoff when `what` says so: a pause, a change or a removal must not leave them
/// to run as the schedule was. Each lets go of its fire time, which may be enqueued again. Returns
/// how many were withdrawn.
fn withdraw(tx: &mut Transaction<'_>, name: &str, what: Withdrawn, by: &str, why: &str) -> Result<u64> {
    let ahead: Vec<uuid::Uuid> = tx
        .query(
            "SELECT q.job_id
               FROM job j JOIN job_queue q ON q.job_id = j.id
              WHERE j.schedule_name = $1 AND NOT q.running
                AND (j.schedule_fire > now() OR ($2 AND j.retry_of IS NOT NULL AND q.scheduled_for > now()))
              ORDER BY q.job_id
                FOR UPDATE OF q",
            &[&name, &(what == Withdrawn::FireTimesAndRetries)],
        )?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let reason = format!("withdrawn: schedule {name} {why}");
    complete::finish_locked(tx, &ahead, JobStatus::Canceled, None, Some(by), Some(&reason))?;
    tx.execute("UPDATE job SET schedule_fire = NULL WHERE id = ANY($1)", &[&ahead])?;
    Ok(ahead.len() as u64)
}

/// Remove a schedule and withdraw the jobs it enqueued ahead; returns how many.
pub(crate) fn remove(client: &mut Client, name: &str, by: &str) -> Result<u64> {
    let mut tx = client.transaction()?;
    if tx.execute("DELETE FROM schedule WHERE name = $1", &[&name])? == 0 {
        bail!("no such schedule: {name}");
    }
    let withdrawn = withdraw(&mut tx, name, Withdrawn::FireTimesAndRetries, by, "was removed")?;
    // Fire times ahead that its jobs still hold (canceled by an operator ahead of time) are the
    // removed schedule's: a schedule added again under its name enqueues them.
    tx.execute("UPDATE job SET schedule_fire = NULL WHERE schedule_name = $1 AND schedule_fire > now()", &[&name])?;
    tx.commit()?;
    Ok(withdrawn)
}

/// Pause, withdrawing the jobs enqueued ahead; returns whether it was active (false: paused
/// already, "enqueued up to" kept) and how many were withdrawn. "Enqueued up to" moves to now:
/// nothing after it is enqueued any more.
pub(crate) fn pause(client: &mut Client, name: &str, by: &str) -> Result<(bool, u64)> {
    let mut tx = client.transaction()?;
    let Some(row) = tx.query_opt("SELECT enabled FROM schedule WHERE name = $1 FOR UPDATE", &[&name])? else {
        bail!("no such schedule: {name}");
    };
    let was_active: bool = row.get(0);
    if was_active {
        tx.execute("UPDATE schedule SET enabled = false, last_fire_time = now() WHERE name = $1", &[&name])?;
    }
    let withdrawn = withdraw(&mut tx, name, Withdrawn::FireTimesAndRetries, by, "was paused")?;
    tx.commit()?;
    Ok((was_active, withdrawn))
}

/// Resume a paused schedule and enqueue, as a tick with this horizon would, its fire times after
/// now up to now + horizon: the first ones after the resume run on time whenever the next tick
/// comes, and none of the paused period is replayed. The schedule stays locked until this commits,
/// so a tick at the same moment skips it (and the unique index on its fire times backs that up).
/// A schedule that cannot enqueue (broken) is resumed all the same, the error reported, as a tick
/// reports it. Resuming an active schedule changes nothing (None).
pub(crate) fn resume(client: &mut Client, name: &str, horizon: Duration) -> Result<Option<Fired>> {
    let mut tx = client.transaction()?;
    let row = tx.query_opt(
        &format!(
            "UPDATE schedule SET enabled = true, last_fire_time = now()
              WHERE name = $1 AND NOT enabled
             RETURNING {COLUMNS}"
        ),
        &[&name],
    )?;
    let Some(row) = row else {
        if tx.query_opt("SELECT 1 FROM schedule WHERE name = $1", &[&name])?.is_none() {
            bail!("no such schedule: {name}");
        }
        return Ok(None);
    };
    let schedule = Schedule::from_row(&row);
    let none = Fired { schedule: schedule.name.clone(), jobs: Vec::new(), late: 0, skipped: 0, error: None };
    let now = crate::db::now(&mut tx)?;
    let horizon = chrono::Duration::from_std(horizon).context("horizon too long")?;
    let fired = fire(&mut tx, schedule, now, horizon)?.unwrap_or(none);
    tx.commit()?;
    Ok(Some(fired))
}

/// What `wf schedule update` changes; None keeps.
#[derive(Debug, Default)]
pub(crate) struct Changes<'a> {
    /// Another action (app, action): one renamed, or removed by a sync.
    pub action: Option<(&'a str, &'a str)>,
    pub cron: Option<&'a str>,
    pub tz: Option<&'a str>,
    pub input: Option<Value>,
    pub priority: Option<i32>,
    /// `Some(None)` takes the tag override away: the action's own tag again.
    pub tag: Option<Option<&'a str>>,
    pub no_overlap: Option<bool>,
}

/// What `update` did besides the change.
#[derive(Debug)]
pub(crate) struct Updated {
    pub schedule: Schedule,
    pub next: DateTime<Utc>,
    /// Jobs enqueued ahead, withdrawn.
    pub withdrawn: u64,
    /// Fire times enqueued again, as the schedule now says.
    pub enqueued: usize,
}

/// Change a schedule, checked as `add` checks it. The jobs it enqueued ahead are withdrawn and, in
/// the same transaction, its fire times after now up to its "enqueued up to" (which stays, or
/// moves to now if past) are enqueued again as the schedule now says: a fire time before the next
/// tick still runs on time.
/// The schedule is locked meanwhile, so a tick skips it; a fire time canceled by an operator stays
/// canceled (its job still holds it).
pub(crate) fn update(client: &mut Client, name: &str, changes: Changes<'_>, by: &str) -> Result<Updated> {
    let mut tx = client.transaction()?;
    let row = tx
        .query_opt(&format!("SELECT {COLUMNS} FROM schedule WHERE name = $1 FOR UPDATE"), &[&name])?
        .with_context(|| format!("no such schedule: {name}"))?;
    let mut schedule = Schedule::from_row(&row);
    if let Some((app, action)) = changes.action {
        (schedule.app, schedule.action) = (app.to_string(), action.to_string());
    }
    if let Some(cron) = changes.cron {
        schedule.cron = as_written(cron);
    }
    if let Some(input) = changes.input {
        schedule.input = input;
    }
    if let Some(priority) = changes.priority {
        schedule.priority = priority;
    }
    if let Some(tag) = changes.tag {
        schedule.tag = tag.map(str::to_string);
    }
    if let Some(no_overlap) = changes.no_overlap {
        schedule.no_overlap = no_overlap;
    }
    let (zone, next) = check(
        &mut tx,
        &schedule.app,
        &schedule.action,
        &schedule.cron,
        changes.tz.unwrap_or(&schedule.tz),
        &schedule.input,
        schedule.tag.as_deref(),
    )?;
    schedule.tz = zone.name().to_string();
    let withdrawn = withdraw(&mut tx, name, Withdrawn::FireTimes, by, "was changed")?;
    let now = crate::db::now(&mut tx)?;
    let mut fires = Vec::new();
    if schedule.enabled
        && let Some(up_to) = schedule.last_fire_time
    {
        let timing = parse(&schedule.cron, &schedule.tz)?;
        fires.extend(timing.fires_after(now).take_while(|fire| *fire <= up_to).take(MAX_FIRES_PER_TICK));
        // As many as a tick enqueues at most: the next tick goes on from the last of them.
        if fires.len() == MAX_FIRES_PER_TICK {
            schedule.last_fire_time = fires.last().copied();
        }
    }
    // Ticks behind (enqueued up to a moment past), or none run yet: no fire time from before the
    // change is enqueued later as the schedule now says, the next tick starts from the change.
    schedule.last_fire_time = Some(schedule.last_fire_time.map_or(now, |up_to| up_to.max(now)));
    let enqueued = enqueue_fires(&mut tx, &schedule, &fires)?.len();
    let row = tx.query_one(
        &format!(
            "UPDATE schedule SET cron = $2, tz = $3, input = $4, priority = $5, tag = $6, no_overlap = $7,
                                 last_fire_time = $8, app_key = $9, action_key = $10
              WHERE name = $1
             RETURNING {COLUMNS}"
        ),
        &[
            &name,
            &schedule.cron,
            &schedule.tz,
            &schedule.input,
            &schedule.priority,
            &schedule.tag,
            &schedule.no_overlap,
            &schedule.last_fire_time,
            &schedule.app,
            &schedule.action,
        ],
    )?;
    let schedule = Schedule::from_row(&row);
    let next = schedule.next_fire(&mut tx, now)?.unwrap_or(next);
    tx.commit()?;
    Ok(Updated { schedule, next, withdrawn, enqueued })
}

/// What one tick did for one schedule.
#[derive(Debug)]
pub struct Fired {
    pub schedule: String,
    pub(crate) jobs: Vec<Enqueued>,
    /// Fire times enqueued after they were due: the tick before came later than its horizon.
    pub late: usize,
    /// Fire times missed by more than the horizon, not enqueued (counted up to `MAX_SKIPPED_COUNTED`).
    pub skipped: usize,
    /// Why this schedule enqueued nothing this time (its action is gone, its input no longer fits).
    pub error: Option<String>,
}

/// One tick, one transaction. Each enabled schedule is locked with SKIP LOCKED, so any number of
/// ticks may run at once (from cron on several hosts) and never enqueue one fire time twice; the
/// unique index on (schedule_name, schedule_fire) backs that up, and a fire time found enqueued
/// already is skipped, never an error. A schedule whose enqueue fails is reported and skipped (a
/// savepoint), the others go on.
///
/// `now` is the database's `now()` unless given: tests give it, so that they never race the clock.
pub fn tick(client: &mut Client, horizon: Duration, now: Option<DateTime<Utc>>) -> Result<Vec<Fired>> {
    let mut tx = client.transaction()?;
    let now: DateTime<Utc> = tx.query_one("SELECT coalesce($1, now())", &[&now])?.get(0);
    let horizon = chrono::Duration::from_std(horizon).context("horizon too long")?;
    let schedules: Vec<Schedule> = tx
        .query(&format!("SELECT {COLUMNS} FROM schedule WHERE enabled ORDER BY name FOR UPDATE SKIP LOCKED"), &[])?
        .iter()
        .map(Schedule::from_row)
        .collect();
    let mut fired = Vec::new();
    for schedule in schedules {
        fired.extend(fire(&mut tx, schedule, now, horizon)?);
    }
    tx.commit()?;
    Ok(fired)
}

/// Enqueue one schedule's fire times as `plan` says and move its "enqueued up to" to the last of
/// them; None when it has none to enqueue. A failure is rolled back (a savepoint) and reported,
/// not returned: the caller goes on.
fn fire(
    tx: &mut Transaction<'_>,
    schedule: Schedule,
    now: DateTime<Utc>,
    horizon: chrono::Duration,
) -> Result<Option<Fired>> {
    let failed = |schedule: Schedule, error: anyhow::Error| Fired {
        schedule: schedule.name,
        jobs: Vec::new(),
        late: 0,
        skipped: 0,
        error: Some(format!("{error:#}")),
    };
    let plan = match plan(&schedule, now, horizon) {
        Ok(plan) => plan,
        Err(error) => return Ok(Some(failed(schedule, error))),
    };
    let Some(&last) = plan.fires.last() else { return Ok(None) };
    let mut savepoint = tx.savepoint("schedule")?;
    let jobs = match enqueue_fires(&mut savepoint, &schedule, &plan.fires) {
        Ok(jobs) => jobs,
        Err(error) => {
            savepoint.rollback()?;
            return Ok(Some(failed(schedule, error)));
        }
    };
    savepoint.execute("UPDATE schedule SET last_fire_time = $2 WHERE name = $1", &[&schedule.name, &last])?;
    savepoint.commit()?;
    Ok(Some(Fired { schedule: schedule.name, jobs, late: plan.late, skipped: plan.skipped, error: None }))
}

/// Enqueue these fire times of a schedule as it says, through the single enqueue path; one found
/// enqueued already is skipped (the unique index on a schedule's fire times).
fn enqueue_fires(tx: &mut Transaction<'_>, schedule: &Schedule, fires: &[DateTime<Utc>]) -> Result<Vec<Enqueued>> {
    let mut jobs = Vec::new();
    for fire in fires {
        let request = Request {
            priority: schedule.priority,
            tag: schedule.tag.as_deref(),
            when: When::At(*fire),
            trigger_kind: TriggerKind::Schedule,
            pin: Pin::Catalog,
            schedule: Some(ScheduleFire { name: &schedule.name, no_overlap: schedule.no_overlap }),
            ..Request::new(&schedule.app, &schedule.action, vec![schedule.input.clone()])
        };
        jobs.append(&mut enqueue::enqueue(tx, &request)?);
    }
    Ok(jobs)
}

/// The fire times a tick enqueues for one schedule.
struct Plan {
    fires: Vec<DateTime<Utc>>,
    /// Of them, those already due although the schedule had been enqueued before.
    late: usize,
    /// Fire times missed by more than the horizon and not enqueued (counted up to
    /// `MAX_SKIPPED_COUNTED`); the latest of them is enqueued instead when no later one is missed.
    skipped: usize,
}

/// Skipped fire times are counted up to this many (a cron with seconds misses 86,400 a day).
pub(crate) const MAX_SKIPPED_COUNTED: usize = 10_000;

/// Every fire time after the schedule's "enqueued up to" and no older than `now - horizon`, up to
/// `now + horizon`; when none of them was missed, the latest fire time missed by longer.
fn plan(schedule: &Schedule, now: DateTime<Utc>, horizon: chrono::Duration) -> Result<Plan> {
    let timing = parse(&schedule.cron, &schedule.tz)?;
    let after = schedule.last_fire_time.unwrap_or(schedule.created_at);
    let (catch_up, until) = (now - horizon, now + horizon);
    let mut fires = Vec::new();
    for fire in timing.fires_after(after.max(catch_up)).take(MAX_FIRES_PER_TICK) {
        if fire > until {
            break;
        }
        fires.push(fire);
    }
    let mut skipped = 0;
    if after < catch_up {
        skipped = timing.fires_after(after).take_while(|fire| *fire <= catch_up).take(MAX_SKIPPED_COUNTED + 1).count();
        let missed_within_horizon = fires.first().is_some_and(|fire| *fire <= now);
        if !missed_within_horizon
            && let Some(latest) = timing.latest_at_or_before(catch_up)
            && latest > after
        {
            fires.insert(0, latest);
            skipped -= 1;
        }
    }
    let late =
        if schedule.last_fire_time.is_some() { fires.iter().take_while(|fire| **fire <= now).count() } else { 0 };
    Ok(Plan { fires, late, skipped: skipped.min(MAX_SKIPPED_COUNTED) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fires(cron: &str, tz: &str, from: &str, count: usize) -> Vec<String> {
        let timing = parse(cron, tz).unwrap();
        let from: DateTime<Utc> = from.parse().unwrap();
        timing.fires_after(from).take(count).map(|fire| fire.with_timezone(&timing.tz).to_rfc3339()).collect()
    }

    /// As the README says: a local time skipped by the change to summer time fires right after the
    /// change, once; a local time repeated by the change back fires once.
    #[test]
    fn daylight_saving_time_is_handled_like_cronie() {
        let spring = fires("30 2 * * *", "Europe/Paris", "2026-03-28T12:00:00Z", 2);
        assert_eq!(spring, ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]);
        let autumn = fires("30 2 * * *", "Europe/Paris", "2026-10-24T12:00:00Z", 2);
        assert_eq!(autumn, ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]);
    }

    /// A list or a range of hours or minutes names local times too (croner took them for intervals:
    /// the skipped one was lost, the repeated one fired twice).
    #[test]
    fn lists_and_ranges_of_local_times_meet_daylight_saving_time_as_one_time_does() {
        let spring = fires("30 2,14 * * *", "Europe/Paris", "2026-03-28T12:00:00Z", 3);
        assert_eq!(spring, ["2026-03-28T14:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T14:30:00+02:00"]);
        let autumn = fires("30 1-3 * * *", "Europe/Paris", "2026-10-24T23:00:00Z", 4);
        assert_eq!(
            autumn,
            [
                "2026-10-25T01:30:00+02:00",
                "2026-10-25T02:30:00+02:00",
                "2026-10-25T03:30:00+01:00",
                "2026-10-26T01:30:00+01:00"
            ]
        );
        // Two skipped times fire once, at the change.
        let both = fires("0,30 2 * * *", "Europe/Paris", "2026-03-28T12:00:00Z", 3);
        assert_eq!(both, ["2026-03-29T03:00:00+02:00", "2026-03-30T02:00:00+02:00", "2026-03-30T02:30:00+02:00"]);
        // By the clock: in both halves of the repeated hour, as cronie runs `*/30`.
        let clock = fires("*/30 * * * *", "Europe/Paris", "2026-10-25T00:10:00Z", 4);
        assert_eq!(
            clock,
            [
                "2026-10-25T02:30:00+02:00",
                "2026-10-25T02:00:00+01:00",
                "2026-10-25T02:30:00+01:00",
                "2026-10-25T03:00:00+01:00"
            ]
        );
    }

    /// A day field that starts with `*` makes a day match both fields, as cronie reads them; two
    /// restricted fields match on either day.
    #[test]
    fn the_day_fields_combine_as_cronie_combines_them() {
        let odd_tuesdays = fires("0 0 */2 * 2", "UTC", "2026-12-05T00:00:00Z", 3);
        assert_eq!(
            odd_tuesdays,
            ["2026-12-15T00:00:00+00:00", "2026-12-29T00:00:00+00:00", "2027-01-05T00:00:00+00:00"]
        );
        let fifteenths_on_weekends_and_wednesdays = fires("0 0 15 * */3", "UTC", "2026-12-05T00:00:00Z", 2);
        assert_eq!(fifteenths_on_weekends_and_wednesdays, ["2027-05-15T00:00:00+00:00", "2027-08-15T00:00:00+00:00"]);
        let either = fires("0 0 15 * 2", "UTC", "2026-12-05T00:00:00Z", 3);
        assert_eq!(either, ["2026-12-08T00:00:00+00:00", "2026-12-15T00:00:00+00:00", "2026-12-22T00:00:00+00:00"]);
        let with_seconds = fires("0 0 0 */2 * 2", "UTC", "2026-12-05T00:00:00Z", 1);
        assert_eq!(with_seconds, ["2026-12-15T00:00:00+00:00"]);
    }

    #[test]
    fn the_latest_fire_time_is_never_after_the_time_asked() {
        let timing = parse("30 2 * * *", "Europe/Paris").unwrap();
        // 02:45 local, on the day 02:30 does not exist: the latest fire is the day before's.
        let at: DateTime<Utc> = "2026-03-29T00:45:00Z".parse().unwrap();
        let latest = timing.latest_at_or_before(at).unwrap();
        assert_eq!(latest.with_timezone(&timing.tz).to_rfc3339(), "2026-03-28T02:30:00+01:00");
        let after_change: DateTime<Utc> = "2026-03-29T01:05:00Z".parse().unwrap();
        let latest = timing.latest_at_or_before(after_change).unwrap();
        assert_eq!(latest.with_timezone(&timing.tz).to_rfc3339(), "2026-03-29T03:00:00+02:00");
        // 02:20 local in the repeated hour's second pass: 02:30 of the first pass has passed (the
        // wall clock alone gave the day before's, and a tick catching up lost that day's run).
        let repeated: DateTime<Utc> = "2026-10-25T01:20:00Z".parse().unwrap();
        let latest = timing.latest_at_or_before(repeated).unwrap();
        assert_eq!(latest.with_timezone(&timing.tz).to_rfc3339(), "2026-10-25T02:30:00+02:00");
        // Before the first pass reached it, and after the change: the day before's, and that day's.
        for (at, expected) in [
            ("2026-10-25T00:20:00Z", "2026-10-24T02:30:00+02:00"),
            ("2026-10-25T02:10:00Z", "2026-10-25T02:30:00+02:00"),
        ] {
            let latest = timing.latest_at_or_before(at.parse().unwrap()).unwrap();
            assert_eq!(latest.with_timezone(&timing.tz).to_rfc3339(), expected, "at {at}");
        }
    }

    #[test]
    fn midnight_is_daily_and_zones_are_matched_in_any_case() {
        assert_eq!(fires("@midnight", "utc", "2026-01-01T12:00:00Z", 1), ["2026-01-02T00:00:00+00:00"]);
        assert_eq!(time_zone("america/NEW_york").unwrap().name(), "America/New_York");
        assert!(time_zone("Mars/Olympus").is_err());
    }
}
