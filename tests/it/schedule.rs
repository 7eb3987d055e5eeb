//! Cron schedules through the single enqueue path.

use std::process::Stdio;

use chrono::{DateTime, Timelike, Utc};
use serde_json::Value;

use crate::fixtures::synced;
use crate::harness::TestEnv;

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

#[test]
fn a_tick_enqueues_every_fire_time_in_the_horizon_once() {
    let env = TestEnv::new();
    synced(&env);
    let added = env
        .wf(["schedule", "add", "minutely", "t/echo", "--cron", "* * * * *", "--input", r#"{"k": 1}"#, "--json"])
        .ok()
        .json();
    assert!(added["next_fire_time"].is_string());
    env.wf(["schedule", "tick", "--horizon", "3m"]).ok();
    let fires = scheduled_jobs(&env, "minutely");
    assert_eq!(fires.len(), 3, "{fires:?}");
    assert!(
        fires.iter().all(|f| f.second() == 0 && f.nanosecond() == 0),
        "fire times are minute boundaries: {fires:?}"
    );
    // Ticking again, and four ticks at once, never enqueue a fire time twice.
    env.wf(["schedule", "tick", "--horizon", "3m"]).ok();
    let ticks: Vec<_> = (0..4)
        .map(|_| {
            let mut wf = env.wf(["schedule", "tick", "--horizon", "5m"]);
            wf.command.stdout(Stdio::null()).stderr(Stdio::null());
            wf.command.spawn().unwrap()
        })
        .collect();
    for mut tick in ticks {
        assert!(tick.wait().unwrap().success());
    }
    let fires = scheduled_jobs(&env, "minutely");
    let mut distinct = fires.clone();
    distinct.dedup();
    assert_eq!(fires, distinct, "a fire time was enqueued twice");
    assert_eq!(fires.len(), 5, "{fires:?}");
    let inputs: Vec<Value> = env.db().query("SELECT input FROM job", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert!(inputs.iter().all(|i| i["k"] == 1));
}

#[test]
fn only_the_latest_missed_fire_time_runs() {
    let env = TestEnv::new();
    synced(&env);
    env.wf(["schedule", "add", "missed", "t/echo", "--cron", "* * * * *"]).ok();
    env.db().execute("UPDATE schedule SET last_fire_time = now() - interval '1 hour'", &[]).unwrap();
    env.wf(["schedule", "tick", "--horizon", "0s"]).ok();
    let fires = scheduled_jobs(&env, "missed");
    assert_eq!(fires.len(), 1, "one missed fire time, not sixty: {fires:?}");
    let now: DateTime<Utc> = env.scalar("SELECT now()");
    assert!(fires[0] <= now && now - fires[0] < chrono::Duration::seconds(61), "{fires:?} at {now}");
}

#[test]
fn a_paused_schedule_enqueues_nothing_and_resuming_does_not_replay() {
    let env = TestEnv::new();
    synced(&env);
    env.wf(["schedule", "add", "p", "t/echo", "--cron", "* * * * *"]).ok();
    env.wf(["schedule", "pause", "p"]).ok();
    env.wf(["schedule", "tick", "--horizon", "3m"]).ok();
    assert!(scheduled_jobs(&env, "p").is_empty());
    env.db().execute("UPDATE schedule SET last_fire_time = now() - interval '1 hour'", &[]).unwrap();
    env.wf(["schedule", "resume", "p"]).ok();
    env.wf(["schedule", "tick", "--horizon", "0s"]).ok();
    assert!(scheduled_jobs(&env, "p").is_empty(), "nothing missed while paused is replayed");
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
        .wf(["schedule", "add", "paris", "t/echo", "--cron", "0 9 * * *", "--tz", "Europe/Paris", "--json"])
        .ok()
        .json();
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
