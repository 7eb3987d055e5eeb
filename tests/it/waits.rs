//! Waiting on other sessions: `--wait --timeout` keeps its deadline, `logs --follow` shows every
//! line.

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::fixtures::{enqueue, path, synced};
use crate::support::harness::{PrivateCluster, Process, TestEnv, wait_for};

/// The lines `follower` prints, as they come.
fn printed_by(follower: &mut Process) -> mpsc::Receiver<String> {
    let (lines, printed) = mpsc::channel();
    let stdout = follower.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let _ = lines.send(line.unwrap());
        }
    });
    printed
}

/// Complete a queued job the way a worker's completion transaction does: final log lines, the
/// completion record, the queue row gone, the notification.
const COMPLETE: &str = "
    WITH logs AS (INSERT INTO job_logs (job_id, attempt, stream, line)
                  SELECT $1, 1, 'stdout', l FROM unnest($2::text[]) AS l),
         gone AS (DELETE FROM job_queue WHERE job_id = $1 RETURNING job_id)
    INSERT INTO job_completed (job_id, status, result) SELECT job_id, 'success', '{}' FROM gone";

fn complete(tx: &mut impl postgres::GenericClient, id: uuid::Uuid, lines: &[&str]) {
    tx.execute(COMPLETE, &[&id, &lines]).unwrap();
    tx.execute("SELECT pg_notify('wf_completed', $1::uuid::text)", &[&id]).unwrap();
}

#[test]
fn result_wait_timeout_holds_under_a_stream_of_other_completions() {
    let env = TestEnv::new();
    synced(&env);
    let batch = path(&env, "others.jsonl");
    std::fs::write(&batch, "{}\n".repeat(300)).unwrap();
    let others = env.wf(["enqueue", "t/echo", "--batch", batch.to_str().unwrap(), "--json"]).ok().json();
    let never = enqueue(&env, "t/echo", json!({}));

    // Other jobs complete every 100 ms (the old wait restarted its timeout at each notification),
    // for at most 30 s.
    let stop = AtomicBool::new(false);
    let run = std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut db = env.db();
            for id in others["ids"].as_array().unwrap() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let mut tx = db.transaction().unwrap();
                complete(&mut tx, id.as_str().unwrap().parse().unwrap(), &[]);
                tx.commit().unwrap();
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        std::thread::sleep(Duration::from_millis(500));
        let started = Instant::now();
        let run = env.wf(["result", &never, "--wait", "--timeout", "2s"]).run();
        let elapsed = started.elapsed();
        stop.store(true, Ordering::SeqCst);
        (run, elapsed)
    });
    let (run, elapsed) = run;
    assert_eq!(run.code, 3, "a wait that timed out exits 3: {run:?}");
    assert!(elapsed >= Duration::from_secs(2), "the wait lasted its timeout: {elapsed:?}");
    assert!(elapsed < Duration::from_secs(15), "the wait ends at its deadline, not when completions stop: {elapsed:?}");
    let completed: i64 = env.scalar("SELECT count(*) FROM job_completed");
    assert!(completed >= 20, "other jobs completed during the wait: {completed}");
}

#[test]
fn logs_follow_prints_the_lines_written_by_the_completion() {
    let env = TestEnv::new();
    synced(&env);
    let id = enqueue(&env, "t/echo", json!({}));
    let job: uuid::Uuid = id.parse().unwrap();
    let mut db = env.db();
    db.execute("INSERT INTO job_logs (job_id, attempt, stream, line) VALUES ($1, 1, 'stdout', 'first')", &[&job])
        .unwrap();

    let mut follower = env.wf(["logs", &id, "--follow"]).start();
    let printed = printed_by(&mut follower);
    assert_eq!(printed.recv_timeout(Duration::from_secs(30)).unwrap(), "first");
    // With --json too, a line already written is printed while the job runs, not when the
    // document ends.
    let mut json_follower = env.wf(["logs", &id, "--follow", "--json"]).start();
    let json_printed = printed_by(&mut json_follower);
    let mut document = String::new();
    let mut json_printed_until = |line: &str| {
        while !document.contains(&format!(r#""line": "{line}""#)) {
            document.push_str(&json_printed.recv_timeout(Duration::from_secs(30)).expect("a line while the job runs"));
        }
    };
    json_printed_until("first");
    // And a line written while it follows.
    db.execute("INSERT INTO job_logs (job_id, attempt, stream, line) VALUES ($1, 1, 'stdout', 'second')", &[&job])
        .unwrap();
    assert_eq!(printed.recv_timeout(Duration::from_secs(30)).unwrap(), "second");
    json_printed_until("second");

    // The completion writes the last lines, and commits while the follower is between two of its
    // statements: it is held on the completion table until then. Whichever it runs there, the
    // lines must be printed.
    let mut tx = db.transaction().unwrap();
    tx.batch_execute("LOCK TABLE job_completed IN ACCESS EXCLUSIVE MODE").unwrap();
    complete(&mut tx, job, &["last 1", "last 2"]);
    wait_for(Duration::from_secs(30), "the follower to wait on the completion table", || {
        let waiting: i64 = env.scalar(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND application_name = 'wf' AND wait_event_type = 'Lock'",
        );
        (waiting > 0).then_some(())
    });
    tx.commit().unwrap();

    let status = wait_for(Duration::from_secs(30), "the follower to end", || follower.try_wait().unwrap());
    assert!(status.success(), "{status:?}");
    let rest: Vec<String> = printed.try_iter().collect();
    assert_eq!(rest, ["last 1", "last 2"], "every line, also those of the completion, is printed");
    let status = wait_for(Duration::from_secs(30), "the JSON follower to end", || json_follower.try_wait().unwrap());
    assert!(status.success(), "{status:?}");
    document.extend(json_printed.iter());
    let lines: Vec<Value> = serde_json::from_str(&document).unwrap();
    let lines: Vec<&str> = lines.iter().map(|line| line["line"].as_str().unwrap()).collect();
    assert_eq!(lines, ["first", "second", "last 1", "last 2"], "{document}");
}

/// Two jobs waiting, `wf result --wait` on the first once it has marked its job (and the second is
/// not marked), and a connection listening for completions as any waiter does.
struct OneAwaited {
    waiter: Process,
    waited: String,
    alone: String,
    ids: Vec<uuid::Uuid>,
    listener: postgres::Client,
}

fn one_of_two_awaited(env: &TestEnv) -> OneAwaited {
    synced(env);
    let (waited, alone) = (enqueue(env, "t/echo", json!({"w": 1})), enqueue(env, "t/echo", json!({"w": 2})));
    let waiter = env.wf(["result", &waited, "--wait", "--timeout", "120s", "--json"]).start();
    let ids: Vec<uuid::Uuid> = vec![waited.parse().unwrap(), alone.parse().unwrap()];
    wait_for(Duration::from_secs(30), "the waiter to mark its job", || {
        let awaited: Vec<bool> = env
            .db()
            .query("SELECT awaited FROM job_queue WHERE job_id = ANY($1) ORDER BY job_id = $2 DESC", &[&ids, &ids[0]])
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        (awaited == [true, false]).then_some(())
    });
    let mut listener = env.db();
    listener.batch_execute("LISTEN wf_completed").unwrap();
    OneAwaited { waiter, waited, alone, ids, listener }
}

#[test]
fn a_waiter_has_the_completion_of_its_job_notified_and_no_other() {
    let env = TestEnv::new();
    let OneAwaited { mut waiter, waited, ids, listener: mut db, .. } = one_of_two_awaited(&env);

    // Both run and complete as a worker's statements do; the test listens as any waiter would.
    db.execute(
        "UPDATE job_queue SET running = true, started_at = now(), worker = 'w#' || job_id WHERE job_id = ANY($1)",
        &[&ids],
    )
    .unwrap();
    assert_eq!(crate::statements::complete(&mut db, ids[1], &format!("w#{}", ids[1]), true), 1);
    assert_eq!(crate::statements::notified(&mut db), Vec::<String>::new(), "nobody waits for it: no notification");
    assert_eq!(crate::statements::complete(&mut db, ids[0], &format!("w#{}", ids[0]), true), 1);
    assert_eq!(crate::statements::notified(&mut db), vec![waited.clone()], "its waiter is told");

    let status = wait_for(Duration::from_secs(30), "the waiter to end", || waiter.try_wait().unwrap());
    assert!(status.success(), "{status:?}");
}

/// A cancel completes waiting jobs through the statement the reaper and a schedule's withdrawal
/// use too: it notifies the jobs someone waits for and no other (a bulk cancel of a million jobs
/// queues no million notifications), and the waiter ends with the job canceled (exit 4).
#[test]
fn a_cancel_notifies_the_waited_job_and_no_other() {
    let env = TestEnv::new();
    let OneAwaited { mut waiter, waited, alone, listener: mut db, .. } = one_of_two_awaited(&env);
    let canceled = env.wf(["cancel", &waited, &alone, "--yes", "--json"]).ok().json();
    assert_eq!(canceled, json!([{"id": waited, "outcome": "canceled"}, {"id": alone, "outcome": "canceled"}]));
    // The cancel has committed: the listener has its notifications by the end of its next statement.
    db.batch_execute("SELECT 1").unwrap();
    assert_eq!(crate::statements::notified(&mut db), vec![waited.clone()], "its waiter is told, and only it");

    let status = wait_for(Duration::from_secs(30), "the waiter to end", || waiter.try_wait().unwrap());
    assert_eq!(status.code(), Some(4), "the job ended canceled: {status:?}");
}

/// `result --wait --timeout` keeps its timeout while another transaction holds the job's queue row
/// (a bulk cancel of a million jobs takes half a minute): the mark that makes the completion notify
/// is not waited for (before, the wait blocked on the row until it was let go).
#[test]
fn a_wait_keeps_its_timeout_while_the_jobs_queue_row_is_locked() {
    let env = TestEnv::new();
    synced(&env);
    let id = enqueue(&env, "t/echo", json!({}));
    let mut db = env.db();
    let mut holder = db.transaction().unwrap();
    holder.execute("SELECT 1 FROM job_queue WHERE job_id = $1::text::uuid FOR UPDATE", &[&id]).unwrap();
    let mut waiting = env.wf(["result", &id, "--wait", "--timeout", "1s"]).start();
    let status = crate::support::checks::wait_exit(&mut waiting, Duration::from_secs(30), "the wait");
    holder.rollback().unwrap();
    assert_eq!(status.code(), Some(3), "not finished: exit 3");
}

/// Stop `cluster`'s server for two seconds, start it again and cancel job `id`: `waiter`, a
/// `wf result ID --wait` started before, connected again and says the cancel (exit 4).
pub(crate) fn restart_and_cancel(cluster: &PrivateCluster, env: &TestEnv, id: &str, waiter: Process) {
    cluster.stop_server();
    std::thread::sleep(Duration::from_secs(2));
    cluster.start_server();
    env.wf(["cancel", id, "--reason", "after the restart"]).ok();
    let waited = waiter.finish();
    assert_eq!(waited.code, 4, "{waited:?}");
    assert_eq!(waited.json()["canceled_reason"], "after the restart", "{waited:?}");
    assert!(waited.stderr.contains("connecting again"), "{}", waited.stderr);
}

/// `wf result --wait` and `wf logs --follow` go on through a restart of the database: each
/// connects again (within a minute) and looks again, which covers what it missed meanwhile.
/// Before, both ended at once with exit 1 ("terminating connection due to administrator command").
#[test]
fn a_wait_and_a_follow_go_on_through_a_restart_of_the_database() {
    let cluster = PrivateCluster::start();
    let env = cluster.env();
    synced(&env);
    let id = env.wf(["enqueue", "t/echo", "--in", "1h"]).ok().stdout.trim().to_string();
    let waiter = env.wf(["result", &id, "--wait", "--timeout", "120s"]).start();
    let follower = env.wf(["logs", &id, "--follow"]).start();
    // Both connected, one has looked (it marks the job awaited after its LISTEN), and a moment for
    // the other to be as far.
    wait_for(Duration::from_secs(30), "both to wait", || {
        let waiting: i64 = env.scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'wf'");
        let awaited: bool = env.scalar("SELECT coalesce(bool_or(awaited), false) FROM job_queue");
        (waiting == 2 && awaited).then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    restart_and_cancel(&cluster, &env, &id, waiter);
    let followed = follower.finish();
    assert_eq!(followed.code, 4, "a canceled job: {followed:?}");
    assert!(followed.stderr.contains(&format!("job {id} ended: canceled")), "{}", followed.stderr);
}

/// A wait whose timeout passes while the database is away times out as any other (exit 3, the job
/// as last seen) and says why it could not look again (it ended with the connection's error, exit 1).
#[test]
fn a_wait_whose_timeout_passes_while_the_database_is_away_times_out() {
    let cluster = PrivateCluster::start();
    let env = cluster.env();
    synced(&env);
    let id = env.wf(["enqueue", "t/echo", "--in", "1h"]).ok().stdout.trim().to_string();
    let waiter = env.wf(["result", &id, "--wait", "--timeout", "4s"]).start();
    wait_for(Duration::from_secs(30), "the wait to look", || {
        env.scalar::<bool>("SELECT coalesce(bool_or(awaited), false) FROM job_queue").then_some(())
    });
    cluster.stop_server();
    let waited = waiter.finish();
    cluster.start_server();
    assert_eq!(waited.code, 3, "{waited:?}");
    assert!(waited.stderr.contains("connecting again to the database"), "{}", waited.stderr);
}

/// `wf logs --follow --json` stopped by a signal (Ctrl-C, SIGTERM) ends its array: what it printed
/// is one JSON document (it was cut after the last line), and it ends as the signal would have
/// ended it (130, 143). Also while it still prints the lines written before it started.
#[test]
fn a_json_follower_stopped_by_a_signal_ends_its_document() {
    let env = TestEnv::new();
    synced(&env);
    let id = enqueue(&env, "t/echo", json!({}));
    let job: uuid::Uuid = id.parse().unwrap();
    env.db()
        .execute(
            "INSERT INTO job_logs (job_id, attempt, stream, line)
             SELECT $1, 1, 'stdout', CASE WHEN n = 1 THEN 'first' ELSE 'line ' || n END
               FROM generate_series(1, 200000) AS n",
            &[&job],
        )
        .unwrap();
    for (signal, code) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let mut follower = env.wf(["logs", &id, "--follow", "--json"]).start();
        let printed = printed_by(&mut follower);
        let mut document = String::new();
        while !document.contains(r#""line": "first""#) {
            document.push_str(&printed.recv_timeout(Duration::from_secs(30)).expect("the line already written"));
        }
        crate::support::fixtures::signal(&follower, signal);
        let status = wait_for(Duration::from_secs(30), "the follower to stop", || follower.try_wait().unwrap());
        assert_eq!(status.code(), Some(code), "{status:?}");
        // Until the reader meets the end of the follower's stdout.
        document.extend(printed.iter());
        let lines: Vec<Value> = serde_json::from_str(&document).unwrap_or_else(|error| panic!("{error}: {document}"));
        assert_eq!(lines[0]["line"], "first");
    }
}
