//! The spine's per-job statements, one at a time, against a copy of the migrated template database:
//! rows put in place by hand, the statement run as the library runs it, the rows checked. No wf
//! process and no bun: each test takes milliseconds.

use postgres::Client;
use postgres::fallible_iterator::FallibleIterator;
use uuid::Uuid;

use crate::support::harness::TestEnv;
use wf::queue::CHANNEL_COMPLETED;
use wf::queue::claim::CLAIM_SQL;
use wf::queue::complete::{self, COMPLETE_ONE_SQL, COMPLETE_SQL};
use wf::queue::heartbeat::HEARTBEAT_SQL;
use wf::queue::reaper::{REQUEUE_SQL, ZOMBIES_SQL};

/// A queued job of tag `default`, with the fewest columns the schema asks for.
fn queued(db: &mut Client) -> Uuid {
    let id = Uuid::new_v4();
    db.execute(
        "INSERT INTO job (id, app_key, action_key, git_source_id, commit_sha, entrypoint, timeout_s, tag, priority,
                          input, trigger_kind, scheduled_for)
         VALUES ($1, 'a', 'b', gen_random_uuid(), 'c', 'e.ts', 60, 'default', 0, '{}', 'manual', now())",
        &[&id],
    )
    .unwrap();
    db.execute("INSERT INTO job_queue (job_id, tag, priority, scheduled_for) VALUES ($1, 'default', 0, now())", &[&id])
        .unwrap();
    id
}

/// A job running under `claim`, with `restarts` restarts behind it and no ping yet.
fn running(db: &mut Client, claim: &str, restarts: i32) -> Uuid {
    let id = queued(db);
    db.execute(
        "UPDATE job_queue SET running = true, worker = $2, started_at = now(), restarts = $3 WHERE job_id = $1",
        &[&id, &claim, &restarts],
    )
    .unwrap();
    id
}

fn zombies(db: &mut Client, window_s: f64) -> Vec<Uuid> {
    let mut tx = db.transaction().unwrap();
    let ids = tx.query(ZOMBIES_SQL, &[&window_s]).unwrap().iter().map(|row| row.get(0)).collect();
    tx.rollback().unwrap();
    ids
}

/// Complete `job` as `claim` with the worker's statement for one job, or the one for a batch,
/// with a last line to flush.
pub(crate) fn complete(db: &mut Client, job: Uuid, claim: &str, one: bool) -> u64 {
    complete_as(db, job, claim, one, true)
}

/// `complete`, with a last line to flush or without.
fn complete_as(db: &mut Client, job: Uuid, claim: &str, one: bool, lines: bool) -> u64 {
    let result = serde_json::json!({"ok": true});
    let (job_ids, streams, texts) = (vec![job], vec!["stdout"], vec!["the last line"]);
    let with_lines: [&(dyn postgres::types::ToSql + Sync); 4] = [&CHANNEL_COMPLETED, &job_ids, &streams, &texts];
    let statement = if one { COMPLETE_ONE_SQL.pick(lines) } else { COMPLETE_SQL.pick(lines) };
    let lines = if lines { &with_lines[..] } else { &with_lines[..1] };
    let rows = if one {
        let error = None::<&serde_json::Value>;
        let params: [&(dyn postgres::types::ToSql + Sync); 6] = [&job, &claim, &"success", &result, &error, &1i32];
        db.query(statement, &[&params[..], lines].concat())
    } else {
        let params: [&(dyn postgres::types::ToSql + Sync); 6] = [
            &vec![job],
            &vec![claim],
            &vec!["success"],
            &vec![Some(&result)],
            &vec![None::<&serde_json::Value>],
            &vec![1i32],
        ];
        db.query(statement, &[&params[..], lines].concat())
    };
    rows.unwrap().len() as u64
}

#[test]
fn the_claim_takes_the_due_jobs_each_under_its_own_claim_id_and_stamps_their_pings() {
    let env = TestEnv::new();
    let mut db = env.db();
    let (first, second) = (queued(&mut db), queued(&mut db));
    let rows = db.query(CLAIM_SQL, &[&vec!["default"], &vec!["w#1", "w#2", "w#3"], &60.0f64]).unwrap();
    let claimed: Vec<(Uuid, String)> = rows.iter().map(|row| (row.get(0), row.get("worker"))).collect();
    let mut ids: Vec<Uuid> = claimed.iter().map(|(id, _)| *id).collect();
    ids.sort();
    let mut due = vec![first, second];
    due.sort();
    assert_eq!(ids, due, "both due jobs, and nothing for the third claim id: {claimed:?}");
    let owners: std::collections::HashSet<_> = claimed.iter().map(|(_, claim)| claim.as_str()).collect();
    assert_eq!(owners.len(), 2, "one claim id per job: {claimed:?}");
    let pinged: i64 = db
        .query_one("SELECT count(*) FROM job_queue WHERE running AND ping IS NOT NULL AND window_s = 60", &[])
        .unwrap()
        .get(0);
    assert_eq!(pinged, 2, "a ping and the worker's window stamped at the claim");
    let again = db.query(CLAIM_SQL, &[&vec!["default"], &vec!["w#4"], &60.0f64]).unwrap();
    assert!(again.is_empty(), "a running job is never claimed twice");
}

#[test]
fn a_heartbeat_after_a_reap_is_lost() {
    let env = TestEnv::new();
    let mut db = env.db();
    let job = running(&mut db, "w#1", 0);
    let owned = db.query_opt(HEARTBEAT_SQL, &[&job, &"w#1", &60.0f64]).unwrap();
    assert!(owned.is_some(), "the owner's heartbeat lands");
    assert!(db.query_opt(HEARTBEAT_SQL, &[&job, &"w#2", &60.0f64]).unwrap().is_none(), "another claim's does not");

    db.query(REQUEUE_SQL, &[&vec![job]]).unwrap();
    let late = db.query_opt(HEARTBEAT_SQL, &[&job, &"w#1", &60.0f64]).unwrap();
    assert!(late.is_none(), "after the reap the job is no longer w#1's");
    let pings: i64 =
        db.query_one("SELECT count(*) FROM job_queue WHERE job_id = $1 AND ping IS NOT NULL", &[&job]).unwrap().get(0);
    assert_eq!(pings, 0, "a lost heartbeat writes no ping");
}

#[test]
fn the_completion_gate_skips_a_foreign_claim() {
    let env = TestEnv::new();
    let mut db = env.db();
    for one in [true, false] {
        for lines in [true, false] {
            completion_gate(&mut db, one, lines);
        }
    }
}

/// The job's rows in the queue, among the completion records and among the log lines.
fn traces(db: &mut Client, job: Uuid) -> (i64, i64, i64) {
    let row = db
        .query_one(
            "SELECT (SELECT count(*) FROM job_queue WHERE job_id = $1),
                    (SELECT count(*) FROM job_completed WHERE job_id = $1),
                    (SELECT count(*) FROM job_logs WHERE job_id = $1)",
            &[&job],
        )
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

fn completion_gate(db: &mut Client, one: bool, lines: bool) {
    let job = running(db, "w#2", 0);
    assert_eq!(complete_as(db, job, "w#1", one, lines), 0, "w#1 does not own the job");
    assert_eq!(traces(db, job), (1, 0, 0), "nothing of a foreign completion is written");
    assert_eq!(complete_as(db, job, "w#2", one, lines), 1);
    assert_eq!(
        traces(db, job),
        (0, 1, i64::from(lines)),
        "the owner's completion is whole: queue row gone, record and the last lines in"
    );
    let row = db.query_one("SELECT worker, status, result FROM job_completed WHERE job_id = $1", &[&job]).unwrap();
    let recorded: (String, String, serde_json::Value) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(recorded, ("w#2".to_string(), "success".to_string(), serde_json::json!({"ok": true})));
    assert_eq!(complete_as(db, job, "w#2", one, lines), 0, "and only once");
}

/// The completion that claims (`then_claim_sql`) as a worker's slot runs it: `job` completed as
/// `claim`, the next job claimed as `next`. Returns whether the job was recorded, and the ids
/// claimed.
fn complete_then_claim(db: &mut Client, job: Uuid, claim: &str, next: &str) -> (bool, Vec<Option<Uuid>>) {
    complete_then_claim_as(db, job, claim, next, true)
}

/// `complete_then_claim`, with a last line to flush or without.
fn complete_then_claim_as(
    db: &mut Client,
    job: Uuid,
    claim: &str,
    next: &str,
    lines: bool,
) -> (bool, Vec<Option<Uuid>>) {
    let (result, error) = (serde_json::json!({"ok": true}), None::<&serde_json::Value>);
    let params: [&(dyn postgres::types::ToSql + Sync); 13] = [
        &vec!["default"],
        &vec![next],
        &60.0f64,
        &job,
        &claim,
        &"success",
        &result,
        &error,
        &1i32,
        &CHANNEL_COMPLETED,
        &vec![job],
        &vec!["stdout"],
        &vec!["the last line"],
    ];
    let used = if lines { &params[..] } else { &params[..10] };
    let rows = db.query(complete::then_claim_sql(1, lines), used).unwrap();
    (rows[0].get(0), rows.iter().map(|row| row.get(2)).collect())
}

/// The payloads of the notifications the connection has received.
pub(crate) fn notified(db: &mut Client) -> Vec<String> {
    db.notifications().iter().map(|note| Ok(note.payload().to_string())).collect().unwrap()
}

#[test]
fn a_completion_with_the_next_claim_keeps_its_gate_and_claims_either_way() {
    let env = TestEnv::new();
    let mut db = env.db();
    db.batch_execute(&format!("LISTEN {CHANNEL_COMPLETED}")).unwrap();
    let job = running(&mut db, "w#2", 0);
    let waiting = [queued(&mut db), queued(&mut db)];
    let owner = |db: &mut Client, id: Uuid| -> (Option<String>, i64) {
        let row = db
            .query_one(
                "SELECT (SELECT worker FROM job_queue WHERE job_id = $1 AND running),
                        (SELECT count(*) FROM job_queue WHERE job_id = $1 AND running AND window_s = 60)",
                &[&id],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };

    let (recorded, claimed) = complete_then_claim(&mut db, job, "w#1", "w#3");
    assert!(!recorded, "w#1 does not own the job");
    assert_eq!(traces(&mut db, job), (1, 0, 0), "nothing of a foreign completion is written");
    assert_eq!(claimed.len(), 1, "the claim goes on: {claimed:?}");
    let first = claimed[0].expect("a job claimed");
    assert!(waiting.contains(&first), "a waiting job, never the running one: {first}");
    assert_eq!(owner(&mut db, first), (Some("w#3".to_string()), 1), "claimed as w#3, its ping stamped");
    assert_eq!(notified(&mut db), Vec::<String>::new(), "no notification for a completion refused");

    // A client waits for the job (`wf result --wait` marks it so).
    db.execute("UPDATE job_queue SET awaited = true WHERE job_id = $1", &[&job]).unwrap();
    let (recorded, claimed) = complete_then_claim(&mut db, job, "w#2", "w#4");
    assert!(recorded);
    assert_eq!(traces(&mut db, job), (0, 1, 1), "the owner's completion is whole: queue row gone, record and logs in");
    let second = claimed[0].expect("a job claimed");
    assert!(waiting.contains(&second) && second != first, "the other waiting job: {second}");
    assert_eq!(owner(&mut db, second), (Some("w#4".to_string()), 1));
    assert_eq!(notified(&mut db), vec![job.to_string()], "waiters told of the completion");
    assert_eq!(complete(&mut db, first, "w#3", true), 1);
    assert_eq!(notified(&mut db), Vec::<String>::new(), "no notification for a job nobody waits for");

    let (recorded, claimed) = complete_then_claim(&mut db, job, "w#2", "w#5");
    assert_eq!((recorded, claimed), (false, vec![None]), "only once, and one row of nothing when nothing is left");
}

/// A completion without last lines runs the statement without the part that writes them: the
/// record is whole all the same, and the claim goes on.
#[test]
fn a_completion_without_lines_with_the_next_claim_records_and_claims() {
    let env = TestEnv::new();
    let mut db = env.db();
    let job = running(&mut db, "w#1", 0);
    let next = queued(&mut db);
    assert_eq!(complete_then_claim_as(&mut db, job, "w#9", "w#2", false), (false, vec![Some(next)]), "not the owner");
    assert_eq!(traces(&mut db, job), (1, 0, 0), "nothing of a foreign completion is written");
    let after = queued(&mut db);
    assert_eq!(complete_then_claim_as(&mut db, job, "w#1", "w#3", false), (true, vec![Some(after)]));
    assert_eq!(traces(&mut db, job), (0, 1, 0), "queue row gone, the record in, no lines");
    let owner: String = db.query_one("SELECT worker FROM job_queue WHERE job_id = $1", &[&after]).unwrap().get(0);
    assert_eq!(owner, "w#3");
}

#[test]
fn a_completion_with_the_next_claim_waits_for_no_lock_and_leaves_a_held_row_to_complete() {
    // Another worker's claim may hold this job's row (a locking read that met the row after this
    // job's claim locks it until its own commit). The statement does not wait for it: it writes
    // nothing of the completion, says it was not recorded, and claims; `complete` then waits.
    let env = TestEnv::new();
    let mut db = env.db();
    // Were the statement to wait, the test would fail here instead of hanging.
    db.batch_execute("SET lock_timeout = '20s'").unwrap();
    let job = running(&mut db, "w#1", 0);
    let next = queued(&mut db);
    let mut other = env.db();
    let mut holder = other.transaction().unwrap();
    holder.execute("SELECT 1 FROM job_queue WHERE job_id = $1 FOR UPDATE", &[&job]).unwrap();

    assert_eq!(complete_then_claim(&mut db, job, "w#9", "w#2"), (false, vec![Some(next)]), "not the owner");
    assert_eq!(traces(&mut db, job), (1, 0, 0), "nothing of a foreign completion is written");
    assert_eq!(complete(&mut db, next, "w#2", true), 1);
    let next = queued(&mut db);
    assert_eq!(
        complete_then_claim(&mut db, job, "w#1", "w#3"),
        (false, vec![Some(next)]),
        "the owner's row held: nothing recorded, the next job claimed"
    );
    assert_eq!(traces(&mut db, job), (1, 0, 0), "nothing of the completion is written");
    std::thread::scope(|scope| {
        let completing = scope.spawn(|| complete(&mut env.db(), job, "w#1", true));
        crate::support::harness::wait_for(std::time::Duration::from_secs(30), "the completion to wait", || {
            let waiting: i64 = env.scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
            );
            (waiting > 0).then_some(())
        });
        holder.rollback().unwrap();
        assert_eq!(completing.join().unwrap(), 1, "completed once the row is free");
    });
    assert_eq!(traces(&mut db, job), (0, 1, 1));
}

#[test]
fn a_missing_ping_is_a_zombie_and_a_fresh_one_is_not() {
    let env = TestEnv::new();
    let mut db = env.db();
    let never = running(&mut db, "w#1", 0);
    let fresh = running(&mut db, "w#2", 0);
    db.query_opt(HEARTBEAT_SQL, &[&fresh, &"w#2", &3600.0f64]).unwrap();
    let old = running(&mut db, "w#3", 0);
    db.query_opt(HEARTBEAT_SQL, &[&old, &"w#3", &0.0f64]).unwrap();
    db.execute("UPDATE job_queue SET ping = now() - interval '1 second' WHERE job_id = $1", &[&old]).unwrap();
    let waiting = queued(&mut db);

    let found = zombies(&mut db, 0.001);
    assert!(found.contains(&never), "no ping at all: a zombie");
    assert!(found.contains(&old), "a ping older than the window: a zombie");
    assert!(!found.contains(&fresh), "never before the claiming worker's own window (an hour)");
    assert!(!found.contains(&waiting), "a waiting job is no zombie");
    let within = zombies(&mut db, 3600.0);
    assert_eq!(within, vec![never], "inside a long window only the job without a ping");
}

#[test]
fn backoff_doubles_with_each_restart_up_to_five_minutes() {
    let env = TestEnv::new();
    let mut db = env.db();
    let restarts = (0..10).chain([1024, 5000]);
    let jobs: Vec<(i32, Uuid)> = restarts.map(|restarts| (restarts, running(&mut db, "w#1", restarts))).collect();
    let mut tx = db.transaction().unwrap();
    let ids: Vec<Uuid> = jobs.iter().map(|(_, id)| *id).collect();
    tx.query(REQUEUE_SQL, &[&ids]).unwrap();
    for (restarts, id) in &jobs {
        // now() is the transaction's: the delays are exact.
        let row = tx
            .query_one(
                "SELECT extract(epoch FROM scheduled_for - now())::float8, restarts, running FROM job_queue
                  WHERE job_id = $1",
                &[id],
            )
            .unwrap();
        let delay: f64 = row.get(0);
        assert_eq!(delay, 2f64.powi((*restarts).min(9)).min(300.0), "after restart {restarts}");
        assert_eq!(row.get::<_, i32>(1), restarts + 1);
        assert!(!row.get::<_, bool>(2), "waiting again");
    }
    tx.commit().unwrap();
}
