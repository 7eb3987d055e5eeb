//! Cron schedules through the single enqueue path.

use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};
use serde_json::{Value, json};

use crate::support::fixtures::synced;
use crate::support::harness::TestEnv;

fn scheduled_jobs(env: &TestEnv, name: &str) -> Vec<DateTime<Utc>> {
    env.db()
        .query(
            "SELECT scheduled_for FROM job WHERE schedule_name = $1 AND trigger_kind = 'schedule' ORDER BY 1",
            &[&name],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A schedule `yearly` of `t/echo`, ticked 800 days ahead: the fire times it enqueued (two at least).
fn yearly_enqueued_ahead(env: &TestEnv) -> Vec<DateTime<Utc>> {
    synced(env);
    env.wf(["schedule", "add", "yearly", "t/echo", "--cron", "0 0 1 1 *"]).ok();
    env.wf(["schedule", "tick", "--horizon", "800d"]).ok();
    let ahead = scheduled_jobs(env, "yearly");
    assert!(ahead.len() >= 2, "{ahead:?}");
    ahead
}

#[test]
fn bad_schedules_are_refused_and_change_nothing() {
    let env = TestEnv::new();
    synced(&env);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["s1", "t/echo", "--cron", "not a cron"], "cron"),
        (vec!["s1", "t/echo", "--cron", "* * * * *", "--tz", "Mars/Olympus"], "time zone"),
        (vec!["s1", "t/nope", "--cron", "* * * * *"], "unknown action"),
        (vec!["s1", "t/typed", "--cron", "* * * * *", "--input", r#"{"n": "x"}"#], "/n"),
        (vec!["Bad Name", "t/echo", "--cron", "* * * * *"], "must match"),
        (vec!["s1", "t/echo", "--cron", "0 0 31 2 *"], "never fires"),
        (vec!["s1", "t/echo", "--cron", "* * * * *", "--tag", "Bad Tag"], "the manifest's rule for tags"),
    ];
    for (args, needle) in cases {
        let mut all = vec!["schedule", "add"];
        all.extend_from_slice(&args);
        let run = env.wf(&all).run();
        assert_eq!(run.code, 1, "{args:?}: {run:?}");
        assert!(run.stderr.contains(needle), "{args:?}: {}", run.stderr);
        let count: i64 = env.scalar("SELECT count(*) FROM schedule");
        assert_eq!(count, 0);
    }
    env.wf(["schedule", "add", "s1", "t/echo", "--cron", "* * * * *"]).ok();
    env.wf(["schedule", "add", "s1", "t/echo", "--cron", "* * * * *"]).run().expect_code(1);
}

/// `schedule update` with nothing to change is a usage error and withdraws nothing (it withdrew and
/// enqueued again every fire time ahead); `schedule rm` of an unknown name says so before it asks
/// (it asked, and without a terminal exited 3, refused, rather than 1).
#[test]
fn an_update_that_changes_nothing_and_a_removal_of_no_schedule_change_nothing() {
    let env = TestEnv::new();
    let ahead = yearly_enqueued_ahead(&env);
    let run = env.wf(["schedule", "update", "yearly"]).run().expect_code(2);
    assert!(run.stderr.contains("--cron"), "{}", run.stderr);
    let canceled: i64 = env.scalar("SELECT count(*) FROM job_completed WHERE status = 'canceled'");
    assert_eq!((scheduled_jobs(&env, "yearly"), canceled), (ahead, 0));
    let run = env.wf(["schedule", "rm", "nosuch"]).run().expect_code(1);
    assert!(run.stderr.contains("no such schedule: nosuch"), "{}", run.stderr);
}

/// A source of one action that fails, after `ms` milliseconds when its input says so, with retries
/// an hour apart.
fn flaky(env: &TestEnv) {
    let repo = crate::support::harness::GitRepo::new();
    repo.manifest(&serde_json::json!({"apps": {"r": {"actions": {
        "flaky": {"entrypoint": "flaky.ts", "retries": {"max": 2, "backoff": "1h"}},
    }}}}));
    repo.file(
        "flaky.ts",
        "export async function main(input) {
           await Bun.sleep(input?.ms ?? 0);
           throw new Error(\"failed\");
         }\n",
    );
    repo.commit("flaky");
    env.wf(["source", "add", "r", &repo.url()]).ok();
    env.wf(["sync", "r"]).ok();
}

fn queued(env: &TestEnv, id: &str) -> bool {
    env.scalar_of("SELECT EXISTS (SELECT FROM job_queue WHERE job_id = $1::text::uuid)", &[&id])
}

/// A retry of a schedule's run is a run of that schedule: listed with it, kept by a change of the
/// schedule (which withdrew it, and enqueued again only fire times: the failed run was never
/// retried) and withdrawn by a pause while it waits for its backoff (before, it had no schedule: a
/// pause, a removal and the overlap check all missed it, and it ran for a schedule paused or
/// removed).
#[test]
fn a_retry_of_a_schedules_run_belongs_to_the_schedule_and_is_withdrawn_by_a_pause() {
    let env = TestEnv::new();
    flaky(&env);
    env.wf(["schedule", "add", "often", "r/flaky", "--cron", "* * * * * *"]).ok();
    env.wf(["schedule", "tick", "--horizon", "5s"]).ok();
    env.wf(["work", "--max-jobs", "1", "--isolation", "none"]).ok();
    let retry: Vec<(Option<String>, String)> = env
        .db()
        .query("SELECT schedule_name, id::text FROM job WHERE retry_of IS NOT NULL", &[])
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(retry.len(), 1, "one run failed and was retried: {retry:?}");
    assert_eq!(retry[0].0.as_deref(), Some("often"));
    env.wf(["schedule", "update", "often", "--priority", "5"]).ok();
    assert!(queued(&env, &retry[0].1), "a change of the schedule leaves its runs' retries waiting");
    env.wf(["schedule", "pause", "often"]).ok();
    let status: String =
        env.scalar_of("SELECT status::text FROM job_completed WHERE job_id = $1::text::uuid", &[&retry[0].1]);
    assert_eq!(status, "canceled", "the retry waiting for its backoff is withdrawn");
}

/// A run of a schedule that fails after its schedule was paused, or removed, is not retried: the
/// pause withdrew the retries waiting, and this one would have run for a paused schedule.
#[test]
fn a_run_that_fails_after_its_schedule_was_paused_or_removed_is_not_retried() {
    let env = TestEnv::new();
    flaky(&env);
    for (name, stop) in
        [("paused", ["schedule", "pause", "paused", "--yes"]), ("removed", ["schedule", "rm", "removed", "--yes"])]
    {
        env.wf(["schedule", "add", name, "r/flaky", "--cron", "* * * * * *", "--input", r#"{"ms": 3000}"#]).ok();
        env.wf(["schedule", "tick", "--horizon", "2s"]).ok();
        let run: String =
            env.scalar_of("SELECT id::text FROM job WHERE schedule_name = $1 ORDER BY scheduled_for LIMIT 1", &[&name]);
        let log = env.dir.path().join(format!("{name}.log"));
        let worker = env.wf(["work", "--max-jobs", "1", "--isolation", "none"]).spawn(&log);
        crate::support::harness::wait_for(Duration::from_secs(30), "the run to start", || {
            env.scalar_of::<bool>("SELECT running FROM job_queue WHERE job_id = $1::text::uuid", &[&run]).then_some(())
        });
        env.wf(stop).ok();
        worker.finish();
        let status: String =
            env.scalar_of("SELECT status::text FROM job_completed WHERE job_id = $1::text::uuid", &[&run]);
        assert_eq!(status, "failure", "{name}: {}", std::fs::read_to_string(&log).unwrap());
        let retries: i64 = env.scalar_of("SELECT count(*) FROM job WHERE retry_of = $1::text::uuid", &[&run]);
        assert_eq!(retries, 0, "{name}: the failed run of a schedule {name} while it ran is not retried");
    }
}

/// A schedule added under the name of one removed enqueues all its fire times: those the removed
/// one's jobs held, canceled ahead by an operator, are no longer held (the tick skipped them, saying
/// nothing).
#[test]
fn a_schedule_added_again_after_a_removal_enqueues_every_fire_time() {
    let env = TestEnv::new();
    let ahead = yearly_enqueued_ahead(&env);
    let first: String = env.scalar("SELECT id::text FROM job ORDER BY scheduled_for LIMIT 1");
    env.wf(["cancel", &first]).ok();
    env.wf(["schedule", "rm", "yearly", "--yes"]).ok();
    env.wf(["schedule", "add", "yearly", "t/echo", "--cron", "0 0 1 1 *"]).ok();
    env.wf(["schedule", "tick", "--horizon", "800d"]).ok();
    let queued: Vec<DateTime<Utc>> = env.column(
        "SELECT j.scheduled_for FROM job j JOIN job_queue q ON q.job_id = j.id
          WHERE j.schedule_name = 'yearly' ORDER BY 1",
    );
    assert_eq!(queued, ahead, "every fire time of the new schedule is enqueued");
}

/// A time given to the tick as its `now`, so that no test races a minute boundary.
fn at(time: &str) -> DateTime<Utc> {
    time.parse().unwrap()
}

fn tick(env: &TestEnv, horizon_s: u64, now: DateTime<Utc>) {
    wf::schedule::tick(&mut env.db(), Duration::from_secs(horizon_s), Some(now)).unwrap();
}

#[test]
fn a_tick_enqueues_every_fire_time_in_the_horizon_once() {
    let env = TestEnv::new();
    synced(&env);
    let added = env
        .wf(["schedule", "add", "minutely", "t/echo", "--cron", "* * * * *", "--input", r#"{"k": 1}"#, "--json"])
        .ok()
        .json();
    assert!(added["next_fire_time"].is_string());
    let now = at("2030-01-01T00:00:30Z");
    env.db().execute("UPDATE schedule SET created_at = $1", &[&now]).unwrap();
    tick(&env, 180, now);
    let minutes =
        |n: i64| (1..=n).map(|m| at("2030-01-01T00:00:00Z") + chrono::Duration::minutes(m)).collect::<Vec<_>>();
    assert_eq!(scheduled_jobs(&env, "minutely"), minutes(3));
    // Ticking again, and four ticks at once, never enqueue a fire time twice.
    tick(&env, 180, now);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| tick(&env, 300, now));
        }
    });
    assert_eq!(scheduled_jobs(&env, "minutely"), minutes(5), "each fire time once");
    let inputs: Vec<Value> = env.column("SELECT input FROM job");
    assert!(inputs.iter().all(|i| i["k"] == 1));
}

#[test]
fn only_the_latest_missed_fire_time_runs() {
    let env = TestEnv::new();
    synced(&env);
    env.wf(["schedule", "add", "missed", "t/echo", "--cron", "* * * * *"]).ok();
    env.db().execute("UPDATE schedule SET last_fire_time = '2030-01-01T00:00:00Z'", &[]).unwrap();
    let fired = wf::schedule::tick(&mut env.db(), Duration::ZERO, Some(at("2030-01-01T01:00:30Z"))).unwrap();
    assert_eq!(scheduled_jobs(&env, "missed"), [at("2030-01-01T01:00:00Z")], "one missed fire time, not sixty");
    // The one that runs, runs late; the fifty-nine before it are counted, not dropped in silence.
    assert_eq!((fired[0].late, fired[0].skipped), (1, 59));
}

/// A tick after an outage says how many fire times it skipped and that the one it catches up runs
/// late, in its warnings and in `--json`.
#[test]
fn a_tick_after_an_outage_counts_the_fire_times_it_skipped_and_the_one_it_runs_late() {
    let env = TestEnv::new();
    synced(&env);
    env.wf(["schedule", "add", "outage", "t/echo", "--cron", "* * * * *"]).ok();
    env.wf(["schedule", "add", "seconds", "t/echo", "--cron", "* * * * * *"]).ok();
    env.db().execute("UPDATE schedule SET last_fire_time = now() - interval '10 hours'", &[]).unwrap();
    let run = env.wf(["schedule", "tick", "--horizon", "1m", "--json"]).ok();
    let document = run.json();
    let fired =
        |name: &str| document["fired"].as_array().unwrap().iter().find(|f| f["schedule"] == name).unwrap().clone();
    let outage = fired("outage");
    let skipped = outage["skipped"].as_u64().unwrap();
    // Ten hours of minutes, less the one minute of the horizon and the latest, which runs.
    assert!((598..=600).contains(&skipped), "{outage}");
    assert_eq!(outage["late"], 1, "{outage}");
    // A cron with seconds misses 36,000 in ten hours: counted up to 10,000.
    assert_eq!(fired("seconds")["skipped"], 10_000);
    assert!(
        run.stderr.contains(&format!("outage: {skipped} fire time(s) missed by more than --horizon 1m were skipped")),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("seconds: 10000 or more fire time(s) missed"), "{}", run.stderr);
    assert!(run.stderr.contains("outage: 1 fire time(s) were due before this tick enqueued them"), "{}", run.stderr);
}

#[test]
fn a_paused_schedule_enqueues_nothing_and_resuming_does_not_replay() {
    let env = TestEnv::new();
    synced(&env);
    env.wf(["schedule", "add", "p", "t/echo", "--cron", "* * * * *"]).ok();
    env.wf(["schedule", "pause", "p"]).ok();
    // Paused again: it says so, and keeps the moment it was paused at.
    let paused_at: Option<DateTime<Utc>> = env.scalar("SELECT last_fire_time FROM schedule WHERE name = 'p'");
    let again = env.wf(["schedule", "pause", "p", "--json"]).ok().json();
    assert_eq!((&again["enabled"], &again["paused"]), (&json!(false), &json!(false)), "{again}");
    let said = env.wf(["schedule", "pause", "p"]).ok();
    assert!(said.stderr.contains("schedule p is paused already"), "{said:?}");
    let kept: Option<DateTime<Utc>> = env.scalar("SELECT last_fire_time FROM schedule WHERE name = 'p'");
    assert_eq!(kept, paused_at);
    env.wf(["schedule", "tick", "--horizon", "3m"]).ok();
    assert!(scheduled_jobs(&env, "p").is_empty());
    env.db().execute("UPDATE schedule SET last_fire_time = now() - interval '1 hour'", &[]).unwrap();
    // The resume enqueues, as a tick would, the fire times after it up to now + its horizon (2 min):
    // two minutes, none of the hour it was paused.
    env.wf(["schedule", "resume", "p"]).ok();
    let resumed: DateTime<Utc> = env.scalar("SELECT max(created_at) FROM job WHERE schedule_name = 'p'");
    let fires = scheduled_jobs(&env, "p");
    assert_eq!(fires.len(), 2, "{fires:?}");
    assert!(fires.iter().all(|fire| *fire > resumed), "nothing missed while paused is replayed: {fires:?}");
    tick(&env, 0, resumed);
    assert_eq!(scheduled_jobs(&env, "p"), fires);
    let listed = env.wf(["schedule", "list", "--json"]).ok().json();
    assert_eq!(listed[0]["enabled"], true);
    env.wf(["schedule", "rm", "p"]).run().expect_code(3);
    env.wf(["schedule", "rm", "p", "--yes"]).ok();
    env.wf(["schedule", "rm", "p", "--yes"]).run().expect_code(1);
}

#[test]
fn a_schedule_reads_its_cron_in_its_time_zone() {
    let env = TestEnv::new();
    synced(&env);
    let added = env
        .wf(["schedule", "add", "paris", "t/echo", "--cron", " 0  9 * * *\t", "--tz", "Europe/Paris", "--json"])
        .ok()
        .json();
    // Stored and shown with its fields one space apart.
    assert_eq!(added["cron"], "0 9 * * *", "{added}");
    let next: DateTime<Utc> = added["next_fire_time"].as_str().unwrap().parse().unwrap();
    let local = next.with_timezone(&chrono_tz::Europe::Paris);
    assert_eq!((local.hour(), local.minute()), (9, 0), "{next}");
}

#[test]
fn scheduled_jobs_run_on_time_with_their_trigger_kind() {
    let env = TestEnv::new();
    synced(&env);
    env.wf(["schedule", "add", "fast", "t/env", "--cron", "*/2 * * * * *"]).ok();
    env.wf(["schedule", "tick", "--horizon", "5s"]).ok();
    let fires = scheduled_jobs(&env, "fast");
    assert!(fires.len() >= 2, "{fires:?}");
    env.wf(["work", "--max-jobs", "2"]).ok();
    let rows = env
        .db()
        .query(
            "SELECT c.started_at >= j.scheduled_for, c.result->>'WF_TRIGGER_KIND', c.result->>'WF_SCHEDULED_FOR'
               FROM job_completed c JOIN job j ON j.id = c.job_id",
            &[],
        )
        .unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        assert!(row.get::<_, bool>(0), "a scheduled job started before its fire time");
        assert_eq!(row.get::<_, String>(1), "schedule");
        let fired: DateTime<Utc> = row.get::<_, String>(2).parse().unwrap();
        assert!(fires.contains(&fired), "WF_SCHEDULED_FOR {fired} is one of the fire times");
    }
}

/// A fire time an operator canceled ahead of time stays canceled: its canceled job is what keeps
/// the fire time from being enqueued again, so retention keeps that job until the fire time has
/// passed; a prune, then a change of the schedule (which enqueues its fire times anew), do not
/// bring it back.
#[test]
fn a_fire_time_canceled_ahead_stays_canceled_through_a_prune_and_a_change_of_its_schedule() {
    let env = TestEnv::new();
    synced(&env);
    env.wf(["schedule", "add", "hourly", "t/echo", "--cron", "0 * * * *"]).ok();
    env.wf(["schedule", "tick", "--horizon", "3h"]).ok();
    let (first, fire): (String, DateTime<Utc>) = {
        let row =
            env.db().query_one("SELECT id::text, schedule_fire FROM job ORDER BY schedule_fire LIMIT 1", &[]).unwrap();
        (row.get(0), row.get(1))
    };
    env.wf(["cancel", &first]).ok();
    let pruned = env.wf(["prune", "--older-than", "0s", "--yes", "--json"]).ok().json();
    env.wf(["schedule", "update", "hourly", "--priority", "5"]).ok();
    env.wf(["schedule", "tick", "--horizon", "3h"]).ok();
    let at_fire: Vec<String> = env
        .db()
        .query(
            "SELECT coalesce(c.status, 'queued') FROM job j LEFT JOIN job_completed c ON c.job_id = j.id
              WHERE j.schedule_name = 'hourly' AND j.scheduled_for = $1",
            &[&fire],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(at_fire, ["canceled"], "the canceled fire time is not enqueued again (prune: {pruned})");
    // Nor is it shown as the next fire: the one after it is.
    let next = fire + chrono::Duration::hours(1);
    let listed = env.wf(["schedule", "list", "--json"]).ok().json();
    assert_eq!(listed[0]["next_fire_time"], next.to_rfc3339_opts(chrono::SecondsFormat::Millis, true), "{listed}");
    let updated = env.wf(["schedule", "update", "hourly", "--priority", "6", "--json"]).ok().json();
    assert_eq!(updated["next_fire_time"], listed[0]["next_fire_time"], "{updated}");
}

/// Removing a source takes its actions away: the schedules of them are said to be broken at once,
/// as a sync that removes an action says it (it was left to the next tick).
#[test]
fn removing_a_source_says_which_schedules_it_broke() {
    let env = TestEnv::new();
    synced(&env);
    env.wf(["schedule", "add", "nightly", "t/echo", "--cron", "0 3 * * *"]).ok();
    let removed = env.wf(["source", "rm", "tests", "--yes"]).ok();
    assert!(
        removed
            .stderr
            .contains("warning: schedule nightly is broken: its action t/echo is not in the catalog any more"),
        "{removed:?}"
    );
}
