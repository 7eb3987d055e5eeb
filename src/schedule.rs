//! Cron schedules: a job creator like any other, enqueueing each fire time through the single
//! enqueue path with trigger kind `schedule`.
//!
//! Policy for missed fire times: `wf schedule tick` enqueues every fire time from now up to now +
//! horizon that is not enqueued yet, and of the fire times it missed (ticks not running, a paused
//! schedule) only the latest one, at once; older missed ones are not replayed.

use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
use postgres::{Client, Row};
use serde_json::Value;

use crate::queue::enqueue::{self, Enqueued, Request, When};
use crate::queue::job::TriggerKind;

/// At most this many fire times per schedule and tick (a horizon much longer than the period).
const MAX_FIRES_PER_TICK: usize = 1000;

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
    pub last_fire_time: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
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
        }
    }

    /// The next fire time after `now`, in UTC.
    pub(crate) fn next_fire(&self, now: DateTime<Utc>) -> Result<DateTime<Utc>> {
        let (cron, tz) = parse(&self.cron, &self.tz)?;
        next_fire(&cron, tz, now)
    }
}

const COLUMNS: &str = "name, app_key, action_key, cron, tz, input, priority, tag, enabled, last_fire_time, created_at";

fn parse(cron: &str, tz: &str) -> Result<(Cron, Tz)> {
    let parsed = Cron::from_str(cron).with_context(|| format!("{cron:?} is not a cron expression"))?;
    let zone =
        Tz::from_str(tz).map_err(|_| anyhow::anyhow!("{tz:?} is not a time zone (an IANA name, e.g. Europe/Paris)"))?;
    Ok((parsed, zone))
}

fn next_fire(cron: &Cron, tz: Tz, now: DateTime<Utc>) -> Result<DateTime<Utc>> {
    let next = cron.find_next_occurrence(&now.with_timezone(&tz), false).context("computing the next fire time")?;
    Ok(next.with_timezone(&Utc))
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
}

/// Add a schedule after checking its name, cron (it must fire), zone, action and input (against
/// the action's current input schema; every fire is checked again by the enqueue path). Returns it
/// with its next fire time.
pub(crate) fn add(client: &mut Client, new: &NewSchedule<'_>) -> Result<(Schedule, DateTime<Utc>)> {
    if !crate::source::is_valid_key(new.name) {
        bail!("schedule name {:?} must match {}", new.name, crate::source::KEY_PATTERN);
    }
    if let Some(tag) = new.tag {
        crate::source::check_tag(tag)?;
    }
    let (cron, tz) = parse(new.cron, new.tz)?;
    let mut tx = client.transaction()?;
    let now = crate::db::now(&mut tx)?;
    let next = next_fire(&cron, tz, now)
        .with_context(|| format!("the cron {:?} never fires in {} (nothing was saved)", new.cron, new.tz))?;
    let action = tx.query_opt(
        "SELECT input_schema FROM action WHERE app_key = $1 AND action_key = $2",
        &[&new.app, &new.action],
    )?;
    let Some(action) = action else {
        bail!("{}", crate::source::catalog::unknown_action(&mut tx, new.app, new.action)?);
    };
    if let Some(schema) = action.get::<_, Option<Value>>(0) {
        enqueue::validate_inputs(&schema, std::slice::from_ref(&new.input))?;
    }
    let row = tx
        .query_opt(
            &format!(
                "INSERT INTO schedule (name, app_key, action_key, cron, tz, input, priority, tag)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (name) DO NOTHING
                 RETURNING {COLUMNS}"
            ),
            &[&new.name, &new.app, &new.action, &new.cron, &new.tz, &new.input, &new.priority, &new.tag],
        )?
        .with_context(|| format!("a schedule named {} exists already", new.name))?;
    tx.commit()?;
    Ok((Schedule::from_row(&row), next))
}

pub(crate) fn list(client: &mut Client) -> Result<Vec<Schedule>> {
    let rows = client.query(&format!("SELECT {COLUMNS} FROM schedule ORDER BY name"), &[])?;
    Ok(rows.iter().map(Schedule::from_row).collect())
}

pub(crate) fn remove(client: &mut Client, name: &str) -> Result<()> {
    if client.execute("DELETE FROM schedule WHERE name = $1", &[&name])? == 0 {
        bail!("no such schedule: {name}");
    }
    Ok(())
}

/// Pause or resume. Resuming restarts the count from now: fire times missed while paused are not
/// replayed.
pub(crate) fn set_enabled(client: &mut Client, name: &str, enabled: bool) -> Result<()> {
    let changed = client.execute(
        "UPDATE schedule
            SET enabled = $2,
                last_fire_time = CASE WHEN $2 AND NOT enabled THEN now() ELSE last_fire_time END
          WHERE name = $1",
        &[&name, &enabled],
    )?;
    if changed == 0 {
        bail!("no such schedule: {name}");
    }
    Ok(())
}

/// What one tick did for one schedule.
#[derive(Debug)]
pub struct Fired {
    pub schedule: String,
    pub(crate) jobs: Vec<Enqueued>,
    /// Why this schedule enqueued nothing this time (its action is gone, its input no longer fits).
    pub error: Option<String>,
}

/// One tick, one transaction. Each enabled schedule is locked with SKIP LOCKED, so any number of
/// ticks may run at once (from cron on several hosts) and never enqueue one fire time twice; the
/// unique index on (schedule_name, scheduled_for) backs that up. A schedule whose enqueue fails
/// is reported and skipped (a savepoint), the others go on.
///
/// `now` is the database's `now()` unless given: tests give it, so that they never race the clock.
pub fn tick(client: &mut Client, horizon: Duration, now: Option<DateTime<Utc>>) -> Result<Vec<Fired>> {
    let mut tx = client.transaction()?;
    let now: DateTime<Utc> = tx.query_one("SELECT coalesce($1, now())", &[&now])?.get(0);
    let until = now + chrono::Duration::from_std(horizon).context("horizon too long")?;
    let schedules: Vec<Schedule> = tx
        .query(&format!("SELECT {COLUMNS} FROM schedule WHERE enabled ORDER BY name FOR UPDATE SKIP LOCKED"), &[])?
        .iter()
        .map(Schedule::from_row)
        .collect();
    let mut fired = Vec::new();
    for schedule in schedules {
        let fires = match fire_times(&schedule, now, until) {
            Ok(fires) => fires,
            Err(error) => {
                fired.push(Fired {
                    schedule: schedule.name.clone(),
                    jobs: Vec::new(),
                    error: Some(format!("{error:#}")),
                });
                continue;
            }
        };
        let Some(&last) = fires.last() else { continue };
        let mut savepoint = tx.savepoint("schedule")?;
        let mut jobs = Vec::new();
        let mut failure = None;
        for fire in &fires {
            let request = Request {
                app: &schedule.app,
                action: &schedule.action,
                inputs: vec![schedule.input.clone()],
                priority: schedule.priority,
                tag: schedule.tag.as_deref(),
                when: When::At(*fire),
                trigger_kind: TriggerKind::Schedule,
                schedule_name: Some(&schedule.name),
            };
            match enqueue::enqueue(&mut savepoint, &request) {
                Ok(mut enqueued) => jobs.append(&mut enqueued),
                Err(error) => {
                    failure = Some(format!("{error:#}"));
                    break;
                }
            }
        }
        if let Some(error) = failure {
            savepoint.rollback()?;
            fired.push(Fired { schedule: schedule.name, jobs: Vec::new(), error: Some(error) });
            continue;
        }
        savepoint.execute("UPDATE schedule SET last_fire_time = $2 WHERE name = $1", &[&schedule.name, &last])?;
        savepoint.commit()?;
        fired.push(Fired { schedule: schedule.name, jobs, error: None });
    }
    tx.commit()?;
    Ok(fired)
}

/// The fire times to enqueue now: the latest missed one (after the last enqueued one, not later
/// than now), then every one up to `until`.
fn fire_times(schedule: &Schedule, now: DateTime<Utc>, until: DateTime<Utc>) -> Result<Vec<DateTime<Utc>>> {
    let (cron, tz) = parse(&schedule.cron, &schedule.tz)?;
    let after = schedule.last_fire_time.unwrap_or(schedule.created_at);
    let mut fires = Vec::new();
    if let Ok(missed) = cron.find_previous_occurrence(&now.with_timezone(&tz), true) {
        let missed = missed.with_timezone(&Utc);
        if missed > after {
            fires.push(missed);
        }
    }
    let start = if after > now { after } else { now };
    for fire in cron.iter_after(start.with_timezone(&tz)).take(MAX_FIRES_PER_TICK) {
        let fire = fire.with_timezone(&Utc);
        if fire > until {
            break;
        }
        fires.push(fire);
    }
    Ok(fires)
}
