//! Seeing what runs: the worker's journal, the registry of workers, `wf jobs` (80 columns, filters,
//! pages), job ids by prefix, suggestions for unknown actions, logs (attempts, tail, since,
//! timestamps), times and colours in tables, and a prompt interrupted by Ctrl-C.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::fixtures::{enqueue, signal, synced, worker};
use crate::support::harness::{GitRepo, TestEnv, wait_for};
use crate::support::terminal::plain;

/// A source whose action `talk` prints `run <attempt>` on stdout and on stderr, then sleeps
/// `input.ms_by_attempt[attempt]` ms (none when not given).
fn talking(env: &TestEnv) {
    let repo = GitRepo::new();
    repo.manifest(&json!({"apps": {"op": {"actions": {
        "talk": {"entrypoint": "talk.ts", "timeout": 120},
        "an_action_with_a_rather_long_name": {"entrypoint": "talk.ts", "tag": "a-rather-long-tag-name"},
    }}}}));
    repo.file(
        "talk.ts",
        r#"
export async function main(input: any) {
  const attempt = process.env.WF_ATTEMPT;
  console.log(`run ${attempt}`);
  console.error(`run ${attempt} on stderr`);
  await Bun.sleep(input.ms_by_attempt?.[attempt] ?? 0);
  return { attempt: Number(attempt) };
}
"#,
    );
    repo.commit("talking actions");
    env.wf(["source", "add", "op", &repo.url()]).ok();
    env.wf(["sync", "op"]).ok();
}

fn state_of(env: &TestEnv, id: &str) -> String {
    env.wf(["show", id, "--json"]).ok().json()["status"].as_str().unwrap().to_string()
}

#[test]
fn a_worker_journals_each_job_event_as_text_or_json() {
    let env = TestEnv::new();
    synced(&env);
    let ok = enqueue(&env, "t/echo", json!({}));
    let failed = enqueue(&env, "t/fail", json!({}));
    let run = env.wf(["work", "--drain", "--name", "w1", "--log-format", "json"]).ok();
    let lines: Vec<Value> = run
        .stderr
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not a JSON line: {line:?}")))
        .collect();
    assert!(lines.iter().all(|line| line["time"].as_str().is_some_and(|t| t.ends_with('Z'))), "{lines:?}");
    let events = |id: &str| -> Vec<&Value> { lines.iter().filter(|line| line["job"] == id).collect() };
    for (id, action, status) in [(&ok, "echo", "success"), (&failed, "fail", "failure")] {
        let events = events(id);
        assert_eq!(events.len(), 2, "claimed, then finished: {events:?}");
        assert_eq!(events[0]["event"], "claimed");
        let finished = events[1];
        assert_eq!(
            (&finished["event"], &finished["status"], &finished["app"], &finished["action"]),
            (&json!("finished"), &json!(status), &json!("t"), &json!(action))
        );
        assert_eq!((&finished["worker"], &finished["attempt"]), (&json!("w1"), &json!(1)));
        assert!(finished["duration_ms"].as_u64().is_some(), "{finished}");
    }
    // Text: one readable line per event; a timeout and a cancel are said as kills.
    let timed_out = enqueue(&env, "t/spawn", json!({"pids": crate::support::fixtures::path(&env, "pids.json")}));
    let run = env.wf(["work", "--drain", "--name", "w2"]).ok();
    assert!(run.stderr.contains(&format!("worker w2: job {timed_out} t/spawn attempt 1: claimed")), "{}", run.stderr);
    assert!(run.stderr.contains(&format!("job {timed_out} t/spawn attempt 1: killed (timeout)")), "{}", run.stderr);
    assert!(run.stderr.contains(&format!("job {timed_out} t/spawn attempt 1: finished failure in ")), "{}", run.stderr);

    let canceled = enqueue(&env, "t/sleep", json!({"ms": 60000}));
    let mut third = worker(&env, "w3", &["--grace", "0s"]);
    wait_for(Duration::from_secs(30), "the job to run", || (state_of(&env, &canceled) == "running").then_some(()));
    env.wf(["cancel", &canceled]).ok();
    wait_for(Duration::from_secs(30), "the cancel", || (state_of(&env, &canceled) == "canceled").then_some(()));
    let released = enqueue(&env, "t/sleep", json!({"ms": 60000}));
    wait_for(Duration::from_secs(30), "the next job to run", || (state_of(&env, &released) == "running").then_some(()));
    signal(&third, libc::SIGTERM);
    assert!(third.wait().unwrap().success());
    let journal = std::fs::read_to_string(env.dir.path().join("w3.log")).unwrap();
    for expected in [
        format!("job {canceled} t/sleep attempt 1: killed (cancel)"),
        format!("job {canceled} t/sleep attempt 1: finished canceled in "),
        format!("job {released} t/sleep attempt 1: killed (shutdown)"),
        format!("job {released} t/sleep attempt 1: requeued (worker shutting down)"),
    ] {
        assert!(journal.contains(&expected), "{expected:?} in {journal}");
    }

    // Asked to cancel, then stopped by a shutdown before its worker saw the mark: the release
    // completes it as canceled, and the journal says that, not that it was put back.
    env.wf(["cancel", &released]).ok();
    let marked = enqueue(&env, "t/sleep", json!({"ms": 60000}));
    let mut fourth = worker(&env, "w4", &["--grace", "0s", "--heartbeat", "20s"]);
    wait_for(Duration::from_secs(30), "the job to run", || (state_of(&env, &marked) == "running").then_some(()));
    env.wf(["cancel", &marked]).ok();
    signal(&fourth, libc::SIGTERM);
    assert!(fourth.wait().unwrap().success());
    assert_eq!(state_of(&env, &marked), "canceled");
    let journal = std::fs::read_to_string(env.dir.path().join("w4.log")).unwrap();
    assert!(journal.contains(&format!("job {marked} t/sleep attempt 1: finished canceled in ")), "{journal}");
    assert!(!journal.contains("requeued"), "{journal}");
}

#[test]
fn workers_are_listed_live_with_their_jobs_and_as_gone_once_stopped() {
    let env = TestEnv::new();
    synced(&env);
    let id = enqueue(&env, "t/sleep", json!({"ms": 60000}));
    let mut w1 = worker(&env, "w1", &["--concurrency", "2", "--tag", "default", "--tag", "other", "--grace", "0s"]);
    wait_for(Duration::from_secs(30), "the job to run", || (state_of(&env, &id) == "running").then_some(()));
    // A worker gone ten minutes ago is shown as gone; one gone two hours ago is not shown at all.
    env.db()
        .batch_execute(
            "INSERT INTO worker (id, name, host, pid, tags, slots, window_s, started_at, last_seen)
             VALUES ('old#1', 'old', 'h', 1, '{default}', 1, 60, now() - interval '3 hours', now() - interval '10 minutes'),
                    ('ghost#1', 'ghost', 'h', 2, '{default}', 1, 60, now() - interval '3 hours', now() - interval '2 hours')",
        )
        .unwrap();
    let listed = wait_for(Duration::from_secs(30), "w1 in the registry with its job", || {
        let listed = env.wf(["workers", "--json"]).ok().json();
        (listed[0]["busy"] == 1).then_some(listed)
    });
    let workers = listed.as_array().unwrap();
    assert_eq!(workers.len(), 2, "{listed}");
    let live = &workers[0];
    assert_eq!((&live["name"], &live["state"], &live["slots"]), (&json!("w1"), &json!("live"), &json!(2)));
    assert_eq!(live["pid"], json!(w1.id()));
    assert_eq!(live["tags"], json!(["default", "other"]));
    assert_eq!(live["jobs"], json!([id]));
    assert_eq!(
        (&workers[1]["name"], &workers[1]["state"], &workers[1]["busy"]),
        (&json!("old"), &json!("gone"), &json!(0))
    );
    let table = env.wf(["workers"]).ok().stdout;
    let row = table.lines().find(|line| line.trim_start().starts_with("w1")).unwrap();
    for cell in ["default,other", "1/2", &id[..8], "live"] {
        assert!(row.contains(cell), "{cell} in {row}");
    }
    wait_for(Duration::from_secs(30), "a beat of the worker to remove the ghost", || {
        (env.scalar::<i64>("SELECT count(*) FROM worker WHERE name = 'ghost'") == 0).then_some(())
    });

    signal(&w1, libc::SIGTERM);
    assert!(w1.wait().unwrap().success());
    let listed = env.wf(["workers", "--json"]).ok().json();
    let w1 = listed.as_array().unwrap().iter().find(|w| w["name"] == "w1").unwrap();
    assert_eq!((&w1["state"], &w1["busy"]), (&json!("gone"), &json!(0)), "{listed}");
}

/// Workers that sign their jobs' WF_TOKENs with different keys (a host without WF_SECRET makes a
/// key of its own) each warn of the other, once, naming it; a worker with the same key as another
/// says nothing of it. Without the warning, only a `wf token verify` refusing tokens told.
#[test]
fn workers_signing_with_different_keys_warn_of_each_other() {
    let env = TestEnv::new();
    synced(&env);
    let start = |name: &str, secret: &str| {
        env.wf(["work", "--name", name, "--heartbeat", "1s", "--grace", "0s"])
            .env("WF_SECRET", secret)
            .spawn(&env.dir.path().join(format!("{name}.log")))
    };
    let journal = |name: &str| std::fs::read_to_string(env.dir.path().join(format!("{name}.log"))).unwrap_or_default();
    let (one, other) = ("0123456789abcdef0123456789abcdef-one", "0123456789abcdef0123456789abcdef-other");
    let first = start("first", one);
    wait_for(Duration::from_secs(30), "the first worker in the registry", || {
        (env.scalar::<i64>("SELECT count(*) FROM worker WHERE name = 'first' AND key_id IS NOT NULL") == 1)
            .then_some(())
    });
    let same = start("same", one);
    let stranger = start("stranger", other);
    let host: String = env.scalar("SELECT host FROM worker WHERE name = 'first'");
    let warning =
        |about: &str| format!("worker {about} on host {host} signs its jobs' WF_TOKENs with another WF_SECRET");
    for (name, about) in [("stranger", "first"), ("stranger", "same"), ("first", "stranger"), ("same", "stranger")] {
        wait_for(Duration::from_secs(30), &format!("{name} to warn of {about}"), || {
            journal(name).contains(&warning(about)).then_some(())
        });
    }
    // More beats pass: each warning was said once, and no worker warned of one that shares its key.
    std::thread::sleep(Duration::from_secs(3));
    for process in [&first, &same, &stranger] {
        signal(process, libc::SIGTERM);
    }
    for mut process in [first, same, stranger] {
        assert!(process.wait().unwrap().success());
    }
    for (name, about, times) in
        [("first", "stranger", 1), ("first", "same", 0), ("same", "first", 0), ("stranger", "first", 1)]
    {
        assert_eq!(journal(name).matches(&warning(about)).count(), times, "{name} of {about}: {}", journal(name));
    }
}

/// A `wf bench --bun` round's worker serves only the bench's jobs, whose tokens no one verifies: a
/// real worker signing with another key does not warn of it (each round warned anew), nor the bench
/// of the real worker.
#[test]
fn a_bench_and_a_worker_with_another_key_do_not_warn_of_each_other() {
    let env = TestEnv::new();
    let (one, other) = ("0123456789abcdef0123456789abcdef-one", "0123456789abcdef0123456789abcdef-other");
    let log = env.dir.path().join("first.log");
    let first =
        env.wf(["work", "--name", "first", "--heartbeat", "1s", "--grace", "0s"]).env("WF_SECRET", one).spawn(&log);
    wait_for(Duration::from_secs(30), "the worker in the registry", || {
        (env.scalar::<i64>("SELECT count(*) FROM worker WHERE name = 'first'") == 1).then_some(())
    });
    let bench = env.wf(["bench", "--bun", "--jobs", "4", "--workers", "1"]).env("WF_SECRET", other).ok();
    assert!(!bench.stderr.contains("WF_SECRET"), "the bench warned of the worker: {}", bench.stderr);
    // A bench's worker row (its rounds' are too short-lived to be seen for sure), and a stranger's.
    env.db()
        .batch_execute(
            "INSERT INTO worker (id, name, host, pid, tags, slots, window_s, key_id)
             VALUES ('wf-bench-0123abcd#1', 'wf-bench-0123abcd', 'elsewhere', 1, '{wf-bench-0123abcd}', 1, 3600, 'bench'),
                    ('stranger#1', 'stranger', 'elsewhere', 1, '{default}', 1, 3600, 'stranger')",
        )
        .unwrap();
    let journal = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for(Duration::from_secs(30), "the worker to warn of the stranger", || {
        journal().contains("worker stranger on host elsewhere signs").then_some(())
    });
    signal(&first, libc::SIGTERM);
    let mut first = first;
    assert!(first.wait().unwrap().success());
    assert!(!journal().contains("wf-bench-"), "{}", journal());
}

/// Job ids begin with their creation time, and a batch's follow each other: a table shows of each
/// the shortest beginning no other id has, which names that job alone.
#[test]
fn a_short_id_names_its_job_alone_even_within_a_batch() {
    let env = TestEnv::new();
    synced(&env);
    let mut ids = crate::support::fixtures::enqueue_batch(&env, "t/echo", &[json!({"n": 1}), json!({"n": 2})]);
    ids.push(enqueue(&env, "t/echo", json!({})));
    ids.push(enqueue(&env, "t/echo", json!({})));
    let listed = env.wf(["jobs"]).ok().stdout;
    assert!(listed.lines().all(|line| line.chars().count() <= 80), "{listed}");
    let mut shown: Vec<String> = Vec::new();
    for short in listed.lines().skip(1).map(|line| line.split_whitespace().next().unwrap()) {
        assert!(short.len() >= 8, "{listed}");
        let id = env.wf(["show", short, "--json"]).ok().json()["id"].as_str().unwrap().to_string();
        assert!(id.replace('-', "").starts_with(short), "{short} names {id}");
        shown.push(id);
    }
    shown.sort();
    ids.sort();
    assert_eq!(shown, ids, "{listed}");
}

#[test]
fn jobs_fit_80_columns_and_filter_by_app_action_tag_status_and_time_a_page_at_a_time() {
    let env = TestEnv::new();
    synced(&env);
    talking(&env);
    let echo = enqueue(&env, "t/echo", json!({}));
    let other = enqueue(&env, "other/echo", json!({}));
    let long = enqueue(&env, "op/an_action_with_a_rather_long_name", json!({}));
    let talk = enqueue(&env, "op/talk", json!({}));
    env.wf(["cancel", &talk]).ok();

    let listed = env.wf(["jobs"]).ok().stdout;
    assert!(listed.lines().all(|line| line.chars().count() <= 80), "{listed}");
    assert!(listed.lines().next().unwrap().trim_start().starts_with("id"), "{listed}");
    let cut = listed.lines().find(|line| line.contains("op/an_action_with")).unwrap();
    assert!(cut.contains('…') && !cut.contains("long_name"), "long names are cut: {listed}");
    assert!(listed.contains("s ago"), "relative times: {listed}");

    let ids = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["jobs", "--json"];
        all.extend_from_slice(args);
        env.wf(all).ok().json().as_array().unwrap().iter().map(|job| job["id"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(ids(&[]), [talk.as_str(), long.as_str(), other.as_str(), echo.as_str()], "newest first");
    assert_eq!(ids(&["--app", "other"]), [other.as_str()]);
    assert_eq!(ids(&["--action", "echo"]), [other.as_str(), echo.as_str()]);
    assert_eq!(ids(&["--tag", "a-rather-long-tag-name"]), [long.as_str()]);
    assert_eq!(ids(&["--status", "canceled"]), [talk.as_str()]);
    assert_eq!(ids(&["--since", "1h"]).len(), 4);
    assert!(ids(&["--until", "1h"]).is_empty());
    assert!(ids(&["--since", "2100-01-01T00:00:00Z"]).is_empty());
    assert_eq!(ids(&["--until", "2100-01-01T00:00:00Z", "--app", "t"]), [echo.as_str()]);
    assert_eq!(ids(&["--limit", "3", "--page", "2"]), [echo.as_str()]);

    let page = env.wf(["jobs", "--limit", "2"]).ok();
    assert_eq!(page.stdout.lines().count(), 3, "a header and 2 jobs: {}", page.stdout);
    assert!(page.stderr.contains("jobs 1-2, newest first; older ones: --page 2"), "{}", page.stderr);
    // With --json too, where the document does not say it; not after the last page.
    let page = env.wf(["jobs", "--limit", "2", "--json"]).ok();
    assert_eq!(page.json().as_array().unwrap().len(), 2);
    assert!(page.stderr.contains("jobs 1-2, newest first; older ones: --page 2"), "{}", page.stderr);
    let last = env.wf(["jobs", "--limit", "2", "--page", "2", "--json"]).ok();
    assert!(!last.stderr.contains("older ones"), "{}", last.stderr);
    // A negative number is refused for what it is, not taken for an option.
    let negative = env.wf(["jobs", "--limit", "-1"]).run().expect_code(2);
    assert!(negative.stderr.contains("-1 is not in 1.."), "{}", negative.stderr);
    let negative = env.wf(["work", "--max-jobs", "-5"]).run().expect_code(2);
    assert!(negative.stderr.contains("-5 is not in 1.."), "{}", negative.stderr);
    env.wf(["actions", "--source", ""]).run().expect_code(2);
    env.wf(["jobs", "--watch", "--json"]).run().expect_code(2);
}

#[test]
fn job_ids_are_taken_by_unique_prefix_and_an_ambiguous_one_is_refused() {
    let env = TestEnv::new();
    synced(&env);
    let id = enqueue(&env, "t/echo", json!({}));
    // Two more jobs whose ids share their first 8 digits.
    for twin in ["3f2a3f2a-0000-4000-8000-000000000001", "3f2a3f2a-0000-4000-8000-000000000002"] {
        env.db()
            .execute(
                "INSERT INTO job SELECT (jsonb_populate_record(NULL::job, to_jsonb(j) || jsonb_build_object('id', $2::text))).*
                   FROM job j WHERE j.id = $1::text::uuid",
                &[&id, &twin],
            )
            .unwrap();
    }
    assert_eq!(env.wf(["show", &id[..8], "--json"]).ok().json()["id"], id.as_str());
    assert_eq!(env.wf(["result", &id[..6]]).run().expect_code(3).code, 3);
    env.wf(["logs", &id[..5]]).ok();
    let ambiguous = env.wf(["show", "3f2a3f2a"]).run().expect_code(1);
    assert!(
        ambiguous.stderr.contains("3f2a3f2a is ambiguous")
            && ambiguous.stderr.contains("3f2a3f2a-0000-4000-8000-000000000001")
            && ambiguous.stderr.contains("3f2a3f2a-0000-4000-8000-000000000002"),
        "{}",
        ambiguous.stderr
    );
    let dashed = env.wf(["show", "3f2a3f2a-0000-4000-8000-00000000000", "--json"]).run().expect_code(1);
    assert!(dashed.stderr.contains("ambiguous"), "{}", dashed.stderr);
    let short = env.wf(["show", "3f2"]).run().expect_code(1);
    assert!(short.stderr.contains("at least its first 4 hex digits"), "{}", short.stderr);
    let none = env.wf(["cancel", "ffffffff"]).run().expect_code(1);
    assert!(none.stderr.contains("no job id starts with ffffffff"), "{}", none.stderr);
    let canceled = env.wf(["cancel", &id[..8], "--json"]).ok().json();
    assert_eq!(canceled, json!([{"id": id, "outcome": "canceled"}]));
}

#[test]
fn an_unknown_action_suggests_the_closest_ones() {
    let env = TestEnv::new();
    synced(&env);
    let typo = env.wf(["enqueue", "t/ecoh"]).run().expect_code(1);
    assert!(typo.stderr.contains("unknown action t/ecoh (did you mean t/echo?)"), "{}", typo.stderr);
    let two = env.wf(["enqueue", "t/ech"]).run().expect_code(1);
    assert!(two.stderr.contains("did you mean one of t/echo, t/env?"), "{}", two.stderr);
    let far = env.wf(["schedule", "add", "s", "nothing/near", "--cron", "* * * * *"]).run().expect_code(1);
    assert!(far.stderr.contains("unknown action nothing/near: `wf actions`"), "{}", far.stderr);
}

#[test]
fn logs_number_attempts_and_show_a_tail_since_a_time_with_timestamps() {
    let env = TestEnv::new();
    talking(&env);
    let id = enqueue(&env, "op/talk", json!({"ms_by_attempt": {"1": 60000}}));
    let mut first = worker(&env, "first", &["--grace", "0s"]);
    wait_for(Duration::from_secs(30), "attempt 1 to print", || {
        env.wf(["logs", &id]).ok().stdout.contains("run 1").then_some(())
    });
    signal(&first, libc::SIGTERM);
    assert!(first.wait().unwrap().success());
    env.wf(["work", "--drain"]).ok();
    assert_eq!(env.wf(["result", &id]).ok().json(), json!({"attempt": 2}), "WF_ATTEMPT counts the release");

    let logs = env.wf(["logs", &id]).ok();
    assert!(logs.stderr.contains("--- attempt 1 ---") && logs.stderr.contains("--- attempt 2 ---"), "{logs:?}");
    let lines: Vec<(i64, String, String)> = env
        .wf(["logs", &id, "--json"])
        .ok()
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (l["attempt"].as_i64().unwrap(), l["stream"].as_str().unwrap().into(), l["line"].as_str().unwrap().into())
        })
        .collect();
    assert!(lines.contains(&(1, "stdout".into(), "run 1".into())), "{lines:?}");
    assert!(lines.iter().any(|(attempt, stream, line)| *attempt == 1 && stream == "wf" && line.contains("put back")));
    assert!(lines.contains(&(2, "stdout".into(), "run 2".into())), "{lines:?}");
    assert!(lines.contains(&(2, "stderr".into(), "run 2 on stderr".into())), "{lines:?}");

    let tail = env.wf(["logs", &id, "--tail", "2"]).ok().stdout;
    assert_eq!(tail, "run 2\n[stderr] run 2 on stderr\n");
    // Lines of attempt 1 made an hour old: --since 10m leaves them out.
    env.db()
        .execute(
            "UPDATE job_logs SET created_at = now() - interval '1 hour' WHERE job_id = $1::text::uuid AND attempt = 1",
            &[&id],
        )
        .unwrap();
    let since = env.wf(["logs", &id, "--since", "10m"]).ok().stdout;
    assert_eq!(since, "run 2\n[stderr] run 2 on stderr\n");
    let stamped = env.wf(["logs", &id, "--tail", "1", "--timestamps"]).env("TZ", "Asia/Tokyo").ok().stdout;
    let (time, line) = stamped.trim_end().split_once(' ').unwrap();
    assert_eq!(line, "[stderr] run 2 on stderr");
    assert!(time.ends_with("+09:00") && chrono::DateTime::parse_from_rfc3339(time).is_ok(), "{stamped}");
}

#[test]
fn tables_show_local_times_marked_and_json_stays_utc() {
    let env = TestEnv::new();
    synced(&env);
    let id = enqueue(&env, "t/echo", json!({}));
    let shown = env.wf(["show", &id]).env("TZ", "Asia/Tokyo").ok().stdout;
    let created = shown.lines().find(|line| line.trim_start().starts_with("created")).unwrap();
    assert!(created.trim_end().ends_with("+09:00"), "{created}");
    let json = env.wf(["show", &id, "--json"]).env("TZ", "Asia/Tokyo").ok().json();
    assert!(json["created_at"].as_str().unwrap().ends_with('Z'), "{json}");
}

#[test]
fn colours_only_on_a_terminal_and_never_with_no_color_and_the_layout_is_the_same() {
    let env = TestEnv::new();
    synced(&env);
    let id = enqueue(&env, "t/echo", json!({}));
    env.wf(["work", "--drain"]).ok();
    // The tables are drawn a moment apart: an age in seconds could tick between them, one in days
    // does not.
    env.db().execute("UPDATE job SET created_at = created_at - interval '3 days'", &[]).unwrap();
    let (code, coloured) = env.wf(["jobs"]).env_remove("NO_COLOR").in_terminal().finish();
    assert_eq!(code, 0, "{coloured}");
    assert!(coloured.contains("\x1b[38;5;10m success"), "success in green: {coloured:?}");
    let (code, uncoloured) = env.wf(["jobs"]).env("NO_COLOR", "1").in_terminal().finish();
    assert_eq!(code, 0, "{uncoloured}");
    assert!(!uncoloured.contains('\x1b'), "{uncoloured:?}");
    // no-color.org: an empty NO_COLOR is as if unset.
    let (code, empty) = env.wf(["jobs"]).env("NO_COLOR", "").in_terminal().finish();
    assert_eq!(code, 0, "{empty}");
    assert!(empty.contains("\x1b[38;5;10m success"), "an empty NO_COLOR keeps the colours: {empty:?}");
    assert_eq!(plain(&coloured), plain(&uncoloured), "NO_COLOR changes the colours, nothing else");
    let table = plain(&uncoloured);
    assert!(table.contains('│') && table.contains(&id[..8]), "a boxed table on a terminal: {table}");
    assert!(table.contains("3d ago"), "{table}");
    assert!(table.lines().all(|line| line.chars().count() <= 80), "{table}");
    let piped = env.wf(["jobs"]).env_remove("NO_COLOR").ok().stdout;
    assert!(!piped.contains('\x1b') && !piped.contains('│'), "plain columns without a terminal: {piped:?}");
}

/// A terminal that reports no width (0 columns: a serial console, `docker exec -t`) had every
/// column of a table one character wide, each word down a column of its own: it now takes
/// COLUMNS, or no limit.
#[test]
fn a_table_on_a_terminal_of_no_width_keeps_its_words_whole() {
    let env = TestEnv::new();
    synced(&env);
    let id = enqueue(&env, "t/echo", json!({}));
    let (code, screen) = env.wf(["jobs"]).env_remove("COLUMNS").in_terminal_of(0).finish();
    assert_eq!(code, 0, "{screen}");
    let table = plain(&screen);
    let header = table.lines().find(|line| line.contains("status")).unwrap_or_else(|| panic!("{table}"));
    assert!(header.contains("action") && table.contains(&id[..8]), "{table}");
    let (code, screen) = env.wf(["jobs"]).env("COLUMNS", "50").in_terminal_of(0).finish();
    assert_eq!(code, 0, "{screen}");
    let table = plain(&screen);
    assert!(table.contains('│') && table.contains(&id[..8]), "{table}");
    assert!(table.lines().all(|line| line.chars().count() <= 50), "{table}");
}

/// An id is what an operator copies from a table: on an 80-column terminal it is never wrapped,
/// whatever else the page holds (a batch's long short ids, a long action, a long tag, `scheduled`);
/// the other columns give way.
#[test]
fn a_jobs_table_on_a_terminal_never_wraps_an_id() {
    let env = TestEnv::new();
    synced(&env);
    let batch = env.dir.path().join("batch.jsonl");
    std::fs::write(&batch, "{}\n".repeat(500)).unwrap();
    let file = batch.to_str().unwrap();
    env.wf(["enqueue", "t/chatty_poison", "--batch", file, "--tag", "nightly-reports", "--in", "1h"]).ok();
    let listed = env.wf(["jobs", "--limit", "30"]).ok().stdout;
    let ids: Vec<&str> = listed.lines().skip(1).filter_map(|line| line.split_whitespace().next()).collect();
    assert_eq!(ids.len(), 30, "{listed}");
    let longest = ids.iter().map(|id| id.len()).max().unwrap();
    assert!(longest >= 16, "the ids of one batch share long prefixes: {listed}");
    let (code, screen) = env.wf(["jobs", "--limit", "30"]).env("NO_COLOR", "1").in_terminal().finish();
    assert_eq!(code, 0, "{screen}");
    let table = plain(&screen);
    assert!(table.contains('│'), "{table}");
    assert!(table.lines().all(|line| line.chars().count() <= 80), "{table}");
    for id in ids {
        assert!(table.lines().any(|line| line.contains(&format!("│ {id} "))), "{id} is whole on one line: {table}");
    }
}

/// Boxes need the whole table before its first line: up to 10,000 rows a terminal gets them, beyond
/// that plain columns written a line at a time, as a pipe does.
#[test]
fn a_table_too_long_to_box_is_plain_columns_on_a_terminal_too() {
    let env = TestEnv::new();
    synced(&env);
    let batch = env.dir.path().join("batch.jsonl");
    std::fs::write(&batch, "{}\n".repeat(10_001)).unwrap();
    env.wf(["enqueue", "t/echo", "--batch", batch.to_str().unwrap()]).ok();
    for (limit, boxed) in [("10000", true), ("10001", false)] {
        let (code, screen) = env.wf(["jobs", "--limit", limit]).env("NO_COLOR", "1").in_terminal().finish();
        assert_eq!(code, 0, "{}", &screen[..screen.len().min(2000)]);
        let table = plain(&screen);
        let rows = table.lines().filter(|line| line.contains("queued")).count();
        assert_eq!((rows.to_string().as_str(), table.contains('│')), (limit, boxed), "--limit {limit}");
    }
}

#[test]
fn ctrl_c_at_a_prompt_declines_and_gives_the_cursor_back() {
    let env = TestEnv::new();
    synced(&env);
    let a = enqueue(&env, "t/echo", json!({}));
    let b = enqueue(&env, "t/echo", json!({}));
    let mut terminal = env.wf(["cancel", &a, &b]).in_terminal();
    terminal.wait_for("cancel 2 jobs");
    terminal.wait_for("\x1b[?25l");
    terminal.type_in(b"\x03");
    let (code, screen) = terminal.finish();
    assert_eq!(code, 3, "{screen:?}");
    let hidden = screen.find("\x1b[?25l").unwrap();
    assert!(screen[hidden..].contains("\x1b[?25h"), "the cursor is shown again: {screen:?}");
    assert!(screen.contains("interrupted: nothing was done"), "{screen:?}");
    assert_eq!((state_of(&env, &a), state_of(&env, &b)), ("queued".to_string(), "queued".to_string()));
}

#[test]
fn jobs_watch_lists_again_every_two_seconds_until_interrupted() {
    let env = TestEnv::new();
    synced(&env);
    let first = enqueue(&env, "t/echo", json!({}));
    let mut terminal = env.wf(["jobs", "--watch"]).in_terminal();
    terminal.wait_for(&first[..8]);
    let second = enqueue(&env, "t/echo", json!({}));
    terminal.wait_for(&second[..8]);
    let screen = terminal.screen();
    let last = screen.rfind("\x1b[H\x1b[2J").expect("each listing clears the screen first");
    assert!(screen[last..].contains(&first[..8]) && screen[last..].contains(&second[..8]), "{screen:?}");
    terminal.type_in(b"\x03");
    let (_, screen) = terminal.finish();
    assert!(!screen.contains("\x1b[?25l"), "the cursor is never hidden: {screen:?}");
}

#[test]
fn console_output_keeps_its_order_across_stdout_and_stderr() {
    let env = TestEnv::new();
    synced(&env);
    let id = enqueue(&env, "t/chatty", json!({"lines": 50}));
    env.wf(["work", "--drain"]).ok();
    let lines: Vec<(String, String)> = env
        .db()
        .query("SELECT stream, line FROM job_logs WHERE job_id = $1::text::uuid ORDER BY id", &[&id])
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let expected: Vec<(String, String)> = (0..50)
        .flat_map(|i| [("stdout".to_string(), format!("out {i}")), ("stderr".to_string(), format!("err {i}"))])
        .collect();
    assert_eq!(lines, expected, "as the action wrote them (bun buffers stdout, not stderr)");
}

/// A worker's name is printable text (it is shown in tables and journals): an empty one, or one
/// holding a terminal's escape, is a usage error and no worker starts (both started, and
/// `wf workers` wrote the escape to the operator's terminal).
#[test]
fn a_worker_name_that_is_empty_or_drives_a_terminal_is_refused() {
    let env = TestEnv::new();
    for name in ["", "  ", "evil\u{1b}[31m"] {
        let run = env.wf(["work", "--once", "--name", name]).run().expect_code(2);
        assert!(run.stderr.contains("a worker's name"), "{name:?}: {}", run.stderr);
    }
    let workers: i64 = env.scalar("SELECT count(*) FROM worker");
    assert_eq!(workers, 0);
}

/// A variable wf reads that is not valid UTF-8 is an error naming it, not taken for unset: WF_HOME
/// so taken had wf use (and start) the default cluster, WF_STORE the default store.
#[test]
fn a_variable_that_is_not_text_is_an_error_naming_it() {
    use std::os::unix::ffi::OsStrExt;
    let env = TestEnv::new();
    for name in ["WF_HOME", "WF_STORE", "WF_SECRET"] {
        let value = std::ffi::OsStr::from_bytes(b"/tmp/wf-not-text-\xff");
        let run = env.wf(["status"]).env(name, value).run().expect_code(1);
        assert!(run.stderr.contains(&format!("{name} is not valid UTF-8")), "{name}: {}", run.stderr);
    }
}

/// `wf show` on a terminal: what operators and actions wrote (the input's DEL and C1 characters, a
/// cancel's reason) is shown, not acted on (the reason's escape sequences retitled the window and
/// cleared the screen); a control character in a key is refused at enqueue; and an input of a
/// megabyte is written at once as a plain table (a boxed one took minutes: comfy-table lays a long
/// cell out in a time that grows with the square of its length).
#[test]
fn show_on_a_terminal_escapes_what_others_wrote_and_writes_the_beginning_of_a_long_input_at_once() {
    let env = TestEnv::new();
    synced(&env);
    let id = env.wf(["enqueue", "t/echo", "--in", "1h", "--input", r#"{"x":"\u009b2J\u007f"}"#]).ok().stdout;
    let id = id.trim();
    env.wf(["cancel", id, "--reason", "evil \x1b]0;pwned\x07 \x1b[2J reason"]).ok();
    let (code, screen) = env.wf(["show", id]).env("NO_COLOR", "1").in_terminal().finish();
    assert_eq!(code, 0, "{screen}");
    assert!(!screen.contains(['\u{9b}', '\u{7f}', '\x07']) && !screen.contains("\x1b]0"), "{screen:?}");
    assert!(screen.contains(r"\u009b2J\u007f"), "the input's C1 and DEL escaped: {screen:?}");
    assert!(screen.contains(r"evil \x1b]0;pwned\x07 \x1b[2J reason"), "the reason escaped: {screen:?}");
    let refused = env.wf(["enqueue", "t/echo", "--key", "k\x1b]0;T\x07"]).run().expect_code(2);
    assert!(refused.stderr.contains("must not hold control characters"), "{}", refused.stderr);

    let long = env.dir.path().join("long.json");
    std::fs::write(&long, json!({"blob": "x".repeat(1 << 20)}).to_string()).unwrap();
    let id = env.wf(["enqueue", "t/echo", "--in", "1h", "--input", &format!("@{}", long.display())]).ok().stdout;
    let (code, screen) = env.wf(["show", id.trim()]).env("NO_COLOR", "1").in_terminal().finish();
    assert_eq!(code, 0, "{}", &screen[..200.min(screen.len())]);
    // Its beginning, however the terminal's table wraps it, and its length.
    let words: String = screen.chars().filter(char::is_ascii_alphanumeric).collect();
    let shown = screen.matches('x').count();
    assert!(
        (1900..3000).contains(&shown) && words.contains(&format!("{}bytesinall", (1 << 20) + r#"{"blob":""}"#.len())),
        "{shown}: {screen}"
    );
}

/// `wf show` as a table shows the beginning of a long value and its length, `--json` the whole:
/// the table of a 50 MB input took a minute to lay out, and filled the terminal.
#[test]
fn show_cuts_a_long_value_in_its_table_and_json_keeps_it_whole() {
    let env = TestEnv::new();
    synced(&env);
    let long = "é".repeat(50_000);
    let id = enqueue(&env, "t/echo", json!({"text": long}));
    let table = env.wf(["show", &id]).ok().stdout;
    assert!(table.len() < 10_000, "{} bytes", table.len());
    assert!(table.contains(r#"{"text":"éé"#) && table.contains("bytes in all: --json shows it whole"), "{table}");
    let whole = env.wf(["show", &id, "--json"]).ok().json();
    assert_eq!(whole["input"]["text"], long.as_str());
}

/// `--action APP/ACTION` filters as `--app APP --action ACTION` does (an action's name holds no
/// `/`: it matched nothing, silently, and a bulk cancel canceled nothing); with another `--app`, it
/// is a usage error.
#[test]
fn an_action_filter_takes_app_slash_action() {
    let env = TestEnv::new();
    synced(&env);
    for n in 0..2 {
        env.wf(["enqueue", "t/echo", "--in", "1h", "--input", &json!({"n": n}).to_string()]).ok();
    }
    env.wf(["enqueue", "other/echo", "--in", "1h"]).ok();
    let listed = env.wf(["jobs", "--action", "t/echo", "--json"]).ok().json();
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    let refused = env.wf(["jobs", "--app", "other", "--action", "t/echo"]).run();
    assert!(refused.code == 2 && refused.stderr.contains("names an action of app"), "{refused:?}");
    let canceled = env.wf(["cancel", "--action", "t/echo", "--yes", "--json"]).ok().json();
    assert_eq!(canceled.as_array().unwrap().len(), 2, "{canceled}");
    let left = env.wf(["jobs", "--status", "scheduled", "--json"]).ok().json();
    assert_eq!(left.as_array().unwrap().len(), 1, "other/echo waits still: {left}");
}
