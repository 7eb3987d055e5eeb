//! Sources in the database: `wf sync` stores a commit's tree with the catalog, in one transaction;
//! a worker whose store lacks a commit writes it from the database, marker last, before running
//! it. Here every "host" is a store of its own: the database is all they share.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::support::checks::{reap, wait_completed};
use crate::support::fixtures::{actions_repo, enqueue, enqueue_batch, path};
use crate::support::harness::{Process, TestEnv, wait_for};

const MARKER: &str = ".windforce_clone_complete";

/// The test actions, synced by the test's own WF_HOME; returns (source id, commit).
fn synced(env: &TestEnv) -> (crate::support::harness::GitRepo, String, String) {
    let repo = actions_repo();
    env.wf(["source", "add", "tests", &repo.url()]).ok();
    let doc = env.wf(["sync", "tests", "--json"]).ok().json();
    let id: uuid::Uuid = env.scalar("SELECT id FROM git_source WHERE name = 'tests'");
    (repo, id.to_string(), doc["commit_sha"].as_str().unwrap().to_string())
}

/// A worker of another host: its own WF_HOME and store.
fn worker_of(env: &TestEnv, host: &Path, name: &str, args: &[&str]) -> Process {
    let mut all = vec!["work", "--name", name];
    all.extend_from_slice(args);
    env.wf(all)
        .env("WF_HOME", host.join("home"))
        .env("WF_STORE", host.join("store"))
        .spawn(&env.dir.path().join(format!("{name}.log")))
}

/// Wait for a worker to end, and show its log when it ended badly.
fn ends_well(env: &TestEnv, mut worker: Process, name: &str) {
    let status = worker.wait().unwrap();
    let log = std::fs::read_to_string(env.dir.path().join(format!("{name}.log"))).unwrap_or_default();
    assert!(status.success(), "worker {name} ended with {status}: {log}");
}

fn host(env: &TestEnv, name: &str) -> PathBuf {
    let dir = env.dir.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn status_of(env: &TestEnv, job: &str) -> String {
    env.scalar_of("SELECT status FROM job_completed WHERE job_id = $1::text::uuid", &[&job])
}

/// The blob that the latest stored commit listing `path` lists there.
fn blob_at(env: &TestEnv, path: &str) -> String {
    env.scalar_of(
        "SELECT blobs[array_position(paths, $1)] FROM source_commit WHERE $1 = ANY(paths)
          ORDER BY stored_at DESC LIMIT 1",
        &[&path],
    )
}

#[test]
fn a_worker_with_an_empty_store_writes_the_commit_from_the_database_and_runs_it() {
    let env = TestEnv::new();
    let (_repo, id, commit) = synced(&env);
    let stored: i32 = env.scalar_of(
        "SELECT files FROM source_commit WHERE git_source_id = $1::text::uuid AND commit_sha = $2",
        &[&id, &commit],
    );
    let listed: Vec<i32> =
        env.scalar("SELECT ARRAY[cardinality(paths), cardinality(blobs), cardinality(executables)] FROM source_commit");
    assert_eq!(listed, vec![stored; 3], "the commit's listing is stored with it");

    let job = enqueue(&env, "t/echo", json!({"n": 1}));
    let other = host(&env, "host2");
    ends_well(&env, worker_of(&env, &other, "h2", &["--drain"]), "h2");
    assert_eq!(status_of(&env, &job), "success");
    let tree = other.join("store").join(&id).join(&commit);
    assert!(tree.join(MARKER).is_file(), "the other host's store holds the commit, marker written");
    assert!(tree.join("t/echo.ts").is_file());
    let written = std::fs::metadata(tree.join("t/echo.ts")).unwrap();
    assert_eq!(written.mode() & 0o777, 0o444, "read-only like a synced tree");
}

/// A worker that cannot write a job's commit from the database now (here: no connection left for
/// its role) puts the job back for a few seconds, rather than claiming it again at once, attempt
/// after attempt; it runs once the database lets it.
#[test]
fn a_job_whose_commit_cannot_be_written_now_goes_back_for_a_while_then_runs() {
    let env = TestEnv::new();
    synced(&env);
    let (role, url) = env.role(
        "worker",
        &["ALL ON SCHEMA public", "ALL ON ALL TABLES IN SCHEMA public", "ALL ON ALL SEQUENCES IN SCHEMA public"],
    );
    let other = host(&env, "host2");
    let worker = env
        .wf(["work", "--name", "h2", "--isolation", "none", "--concurrency", "1"])
        .env("DATABASE_URL", &url)
        .env("WF_HOME", other.join("home"))
        .env("WF_STORE", other.join("store"))
        .spawn(&env.dir.path().join("h2.log"));
    let journal = env.dir.path().join("h2.log");
    // Every connection the worker keeps (its listener, registry, reaper and slot: made one after
    // the other once it started), and not one more: the one that writes a commit is refused.
    let kept = ["wf work h2 listener", "wf work h2 registry", "wf reap h2", "wf work h2 slot 0"];
    let held = wait_for(Duration::from_secs(30), "the worker's connections", || {
        let names: Vec<String> =
            env.column(&format!("SELECT application_name FROM pg_stat_activity WHERE usename = '{role}'"));
        kept.iter().all(|name| names.iter().any(|held| held == name)).then_some(names.len())
    });
    env.db().batch_execute(&format!("ALTER ROLE {role} CONNECTION LIMIT {held}")).unwrap();
    let job = enqueue(&env, "t/echo", json!({"n": 1}));
    wait_for(Duration::from_secs(30), "the job to go back to the queue", || {
        let back: i64 = env.scalar_of(
            "SELECT count(*) FROM job_queue WHERE job_id = $1::text::uuid AND releases > 0 AND NOT running",
            &[&job],
        );
        (back == 1).then_some(())
    });
    let due_in: f64 = env.scalar_of(
        "SELECT extract(epoch FROM scheduled_for - now())::float8 FROM job_queue WHERE job_id = $1::text::uuid",
        &[&job],
    );
    assert!(due_in > 1.0, "due again in a few seconds, not at once: {due_in}");
    env.db().batch_execute(&format!("ALTER ROLE {role} CONNECTION LIMIT -1")).unwrap();
    wait_completed(&env, &job, Duration::from_secs(60));
    assert_eq!(status_of(&env, &job), "success");
    let refused: i64 = env.scalar_of(
        "SELECT count(*) FROM job_logs WHERE job_id = $1::text::uuid AND line LIKE 'materializing commit%'",
        &[&job],
    );
    assert!((1..=3).contains(&refused), "put back a few times, not claimed again and again: {refused}");
    drop(worker);
    let said = std::fs::read_to_string(&journal).unwrap();
    assert!(said.contains("requeued (the job could not start here now)"), "{said}");
    let logs = env.wf(["logs", &job]).ok().stdout;
    assert!(logs.contains("the job is put back in the queue, due in 5 s"), "{logs}");
}

#[test]
fn a_changed_file_is_stored_once_and_the_rest_is_linked() {
    let env = TestEnv::new();
    let (repo, id, c1) = synced(&env);
    let blobs_before: i64 = env.scalar("SELECT count(DISTINCT blob) FROM source_blob");
    repo.file("t/echo.ts", "export function main(input) { return { input, changed: true }; }\n");
    let c2 = repo.commit("change one file");
    let run = env.wf(["sync", "tests"]).ok();
    assert!(run.stderr.contains("1 new blob(s)"), "the sync says what it stored: {}", run.stderr);
    let blobs_after: i64 = env.scalar("SELECT count(DISTINCT blob) FROM source_blob");
    assert_eq!(blobs_after, blobs_before + 1, "only the changed file is a new blob");

    // Both commits on another host: the unchanged files are one inode, the changed one is not.
    let other = host(&env, "host2");
    let echo1 = enqueue(&env, "t/echo", json!({"n": 1}));
    env.db().execute("UPDATE job SET commit_sha = $1 WHERE id = $2::text::uuid", &[&c1, &echo1]).unwrap();
    let echo2 = enqueue(&env, "t/echo", json!({"n": 2}));
    ends_well(&env, worker_of(&env, &other, "h2", &["--drain"]), "h2");
    assert_eq!(status_of(&env, &echo1), "success");
    assert_eq!(status_of(&env, &echo2), "success");
    let result: serde_json::Value =
        env.scalar_of("SELECT result FROM job_completed WHERE job_id = $1::text::uuid", &[&echo2]);
    assert_eq!(result["changed"], true, "the second commit's file ran: {result}");
    let tree1 = other.join("store").join(&id).join(&c1);
    let tree2 = other.join("store").join(&id).join(&c2);
    let inode = |path: PathBuf| std::fs::metadata(path).unwrap().ino();
    assert_eq!(inode(tree1.join("t/sleep.ts")), inode(tree2.join("t/sleep.ts")), "an unchanged file is linked");
    assert_ne!(inode(tree1.join("t/echo.ts")), inode(tree2.join("t/echo.ts")), "a changed file is its own");
}

#[test]
fn a_failure_storing_the_tree_leaves_the_catalog_and_the_database_as_they_were() {
    let env = TestEnv::new();
    let (repo, _id, c1) = synced(&env);
    repo.file("t/new.ts", "export function main() { return {}; }\n");
    repo.commit("second");
    // The database refuses the listing of the new commit, after its blobs went in.
    env.db()
        .batch_execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS
               $$BEGIN RAISE EXCEPTION 'refused by the test'; END$$;
             CREATE TRIGGER refuse BEFORE INSERT ON source_commit FOR EACH STATEMENT EXECUTE FUNCTION refuse();",
        )
        .unwrap();
    let blobs: i64 = env.scalar("SELECT count(*) FROM source_blob");
    let run = env.wf(["sync", "tests"]).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("storing commit"), "{}", run.stderr);
    let catalog: String = env.scalar("SELECT commit_sha FROM git_source WHERE name = 'tests'");
    assert_eq!(catalog, c1, "the catalog did not move");
    let commits: i64 = env.scalar("SELECT count(*) FROM source_commit");
    assert_eq!(commits, 1, "no commit without its listing");
    assert_eq!(env.scalar::<i64>("SELECT count(*) FROM source_blob"), blobs, "no blob of the failed sync stays");

    env.db().batch_execute("DROP TRIGGER refuse ON source_commit").unwrap();
    env.wf(["sync", "tests"]).ok();
    assert_eq!(env.scalar::<i64>("SELECT count(*) FROM source_commit"), 2);
}

#[test]
fn a_worker_killed_while_writing_a_commit_leaves_no_marker_and_the_next_one_writes_it() {
    let env = TestEnv::new();
    let (_repo, id, commit) = synced(&env);
    let job = enqueue(&env, "t/echo", json!({"n": 1}));
    let other = host(&env, "host2");
    let mut crashed = env
        .wf(["work", "--name", "h2", "--drain", "--heartbeat", "1s"])
        .env("WF_ZOMBIE_TIMEOUT_S", "3")
        .env("WF_HOME", other.join("home"))
        .env("WF_STORE", other.join("store"))
        .env("WF_FAULT", "sync-before-marker")
        .spawn(&env.dir.path().join("crashed.log"));
    let status = crashed.wait().unwrap();
    let log = std::fs::read_to_string(env.dir.path().join("crashed.log")).unwrap();
    assert_eq!(status.signal(), Some(6), "the worker aborted before the marker: {log}");
    let tree = other.join("store").join(&id).join(&commit);
    assert!(tree.join("t/echo.ts").is_file(), "the tree was in place");
    assert!(!tree.join(MARKER).exists(), "without its marker");
    std::fs::write(tree.join("leftover"), "of the crash").unwrap();

    // The worker died holding the job: once its window has passed, the reaper puts it back.
    wait_for(Duration::from_secs(30), "the reaper to requeue the job", || {
        (reap(&env, &["--zombie-timeout", "3s"]).0 == 1).then_some(())
    });
    // Requeued with a backoff: `--once` waits for it.
    ends_well(&env, worker_of(&env, &other, "h2b", &["--once"]), "h2b");
    assert_eq!(status_of(&env, &job), "success");
    assert!(tree.join(MARKER).is_file(), "the commit was written again, marker last");
    assert!(!tree.join("leftover").exists(), "from scratch");
}

#[test]
fn workers_of_one_host_write_a_commit_once_and_all_run_it() {
    let env = TestEnv::new();
    let (_repo, id, commit) = synced(&env);
    let log = path(&env, "runs.log");
    let log = log.to_str().unwrap();
    let inputs: Vec<_> = (0..30).map(|n| json!({"n": n, "log": log})).collect();
    let jobs = enqueue_batch(&env, "t/echo", &inputs);
    let other = host(&env, "host2");
    let workers: Vec<_> =
        (0..3).map(|i| worker_of(&env, &other, &format!("h2w{i}"), &["--drain", "--concurrency", "2"])).collect();
    for (i, worker) in workers.into_iter().enumerate() {
        ends_well(&env, worker, &format!("h2w{i}"));
    }
    for job in &jobs {
        let ended: Option<String> = env
            .db()
            .query_opt("SELECT status FROM job_completed WHERE job_id = $1::text::uuid", &[job])
            .unwrap()
            .map(|row| row.get(0));
        let logs = env.wf(["logs", job]).run();
        assert_eq!(ended.as_deref(), Some("success"), "job {job}: {logs:?}");
    }
    let tree = other.join("store").join(&id).join(&commit);
    assert!(tree.join(MARKER).is_file());
    let temporaries: Vec<_> = std::fs::read_dir(other.join("store").join(&id))
        .unwrap()
        .chain(std::fs::read_dir(other.join("store").join(".blobs")).unwrap())
        .map(|entry| entry.unwrap().file_name().to_string_lossy().to_string())
        .filter(|name| name.starts_with(".tmp-"))
        .collect();
    assert!(temporaries.is_empty(), "nothing half-written is left: {temporaries:?}");
}

#[test]
fn a_blob_changed_in_the_database_is_refused_and_the_job_fails_without_running() {
    let env = TestEnv::new();
    let (_repo, id, commit) = synced(&env);
    env.db()
        .execute(
            "UPDATE source_blob SET data = convert_to('export function main() { return {forged: true}; }', 'UTF8')
              WHERE blob = $1",
            &[&blob_at(&env, "t/echo.ts")],
        )
        .unwrap();
    let job = enqueue(&env, "t/echo", json!({"n": 1}));
    let other = host(&env, "host2");
    ends_well(&env, worker_of(&env, &other, "h2", &["--drain"]), "h2");
    assert_eq!(status_of(&env, &job), "failure");
    let error: serde_json::Value =
        env.scalar_of("SELECT error FROM job_completed WHERE job_id = $1::text::uuid", &[&job]);
    assert_eq!(error["name"], "SourceNotMaterialized", "{error}");
    assert!(error["message"].as_str().unwrap().contains("are those of blob"), "{error}");
    assert!(!other.join("store").join(&id).join(&commit).join(MARKER).exists());
}

#[test]
fn prune_sources_removes_the_commits_no_job_pins_in_the_database_and_in_the_store() {
    let env = TestEnv::new();
    let (repo, id, c1) = synced(&env);
    let job = enqueue(&env, "t/echo", json!({"n": 1}));
    ends_well(&env, crate::support::fixtures::worker(&env, "w1", &["--drain"]), "w1");
    let old_echo: String = blob_at(&env, "t/echo.ts");
    repo.file("t/echo.ts", "export function main(input) { return { input, changed: true }; }\n");
    let c2 = repo.commit("change one file");
    env.wf(["sync", "tests"]).ok();
    let tree1 = env.store().join(&id).join(&c1);
    let tree2 = env.store().join(&id).join(&c2);

    let kept = env.wf(["prune", "--sources", "--yes", "--json"]).ok().json();
    assert_eq!(kept["sources"]["commits"], 0, "the first commit is pinned by its job: {kept}");
    assert!(tree1.join(MARKER).is_file());

    // A dry run of both counts the commit the job's pruning would free; one of another status does not.
    let dry = |args: &[&str]| {
        let dry = env.wf(["prune", "--sources", "--dry-run", "--json"].iter().chain(args)).ok().json();
        assert_eq!(env.scalar::<i64>("SELECT count(*) FROM source_commit"), 2, "a dry run removes nothing");
        assert!(tree1.join(MARKER).is_file(), "a dry run removes nothing");
        dry
    };
    let unpinned = |dry: &serde_json::Value| {
        let sources = &dry["sources"];
        let local = (sources["local_trees"].as_u64(), sources["local_blobs"].as_u64());
        (sources["commits"].as_u64(), sources["blobs"].as_u64(), local)
    };
    // Only the changed file's old contents go (a dry run counts the store's copy the removed tree
    // alone links to: before, only contents no tree linked already).
    let freed = (Some(1), Some(1), (Some(1), Some(1)));
    let both = dry(&["--older-than", "0s"]);
    assert_eq!((&both["would_delete"], unpinned(&both)), (&json!(1), freed), "{both}");
    let failed_only = dry(&["--older-than", "0s", "--status", "failure"]);
    assert_eq!(unpinned(&failed_only), (Some(0), Some(0), (Some(0), Some(0))), "{failed_only}");
    assert_eq!(env.scalar_of::<i64>("SELECT count(*) FROM job WHERE id = $1::text::uuid", &[&job]), 1);

    env.wf(["prune", "--older-than", "0s", "--yes"]).ok();
    assert_eq!(env.scalar_of::<i64>("SELECT count(*) FROM job WHERE id = $1::text::uuid", &[&job]), 0);
    assert_eq!(unpinned(&dry(&[])), freed);

    let pruned = env.wf(["prune", "--sources", "--yes", "--json"]).ok().json();
    assert_eq!(pruned["sources"]["commits"], 1, "{pruned}");
    assert_eq!(pruned["sources"]["local_blobs"], 1, "the old contents of the changed file: {pruned}");
    let left: String = env.scalar("SELECT commit_sha FROM source_commit");
    assert_eq!(left, c2, "the catalog's commit stays");
    let old: i64 = env.scalar_of("SELECT count(*) FROM source_blob WHERE blob = $1", &[&old_echo]);
    assert_eq!(old, 0, "contents no commit holds are gone");
    assert!(!tree1.exists(), "the unpinned tree left this host's store");
    assert!(!env.store().join(".blobs").join(&old_echo).exists());
    assert!(tree2.join(MARKER).is_file());

    // The catalog's commit still runs (its tree checked against its digest), here and on a host
    // that never had it.
    let here = enqueue(&env, "t/echo", json!({"n": 2}));
    ends_well(&env, crate::support::fixtures::worker(&env, "w2", &["--drain"]), "w2");
    assert_eq!(status_of(&env, &here), "success");
    let there = enqueue(&env, "t/echo", json!({"n": 3}));
    let other = host(&env, "host2");
    ends_well(&env, worker_of(&env, &other, "h2", &["--drain"]), "h2");
    assert_eq!(status_of(&env, &there), "success");

    // A source removed, its jobs pruned: its commits leave the store, and so does its folder (an
    // empty folder per removed source was left for good).
    env.wf(["source", "rm", "tests", "--yes"]).ok();
    env.wf(["prune", "--older-than", "0s", "--yes"]).ok();
    env.wf(["prune", "--sources", "--yes"]).ok();
    assert!(!env.store().join(&id).exists(), "the removed source's folder is left");
}

#[test]
fn a_large_file_is_stored_in_chunks_and_written_whole_on_another_host() {
    let env = TestEnv::new();
    let (repo, id, _) = synced(&env);
    // Over the size from which a sync streams a blob from git (8 MiB), and not a whole number of
    // 1 MiB chunks.
    let large: String = (0..1_500_000).map(|n| format!("{n:013}\n")).collect();
    assert!(large.len() > 20 << 20);
    repo.file("t/large.txt", &large);
    let commit = repo.commit("a large file");
    env.wf(["sync", "tests"]).ok();
    let chunks: i64 =
        env.scalar_of("SELECT count(*) FROM source_blob WHERE blob = $1", &[&blob_at(&env, "t/large.txt")]);
    assert_eq!(chunks, (large.len() as i64 + (1 << 20) - 1) >> 20, "1 MiB chunks");
    assert_eq!(std::fs::read_to_string(env.store().join(&id).join(&commit).join("t/large.txt")).unwrap(), large);

    let job = enqueue(&env, "t/echo", json!({"n": 1}));
    let other = host(&env, "host2");
    ends_well(&env, worker_of(&env, &other, "h2", &["--drain"]), "h2");
    assert_eq!(status_of(&env, &job), "success");
    let written = std::fs::read_to_string(other.join("store").join(&id).join(&commit).join("t/large.txt")).unwrap();
    assert!(written == large, "the other host's copy is the file, byte for byte");
}

/// The branch moved to a commit with no parent and the same files, then synced: the catalog leaves
/// the commit it was on (the catalog never moves back to an ancestor; it may move to this one).
fn sync_unrelated_commit(env: &TestEnv, repo: &crate::support::harness::GitRepo) {
    commit_unrelated(repo);
    env.wf(["sync", "tests"]).ok();
}

/// Move the branch to a new commit of the same tree without a parent (its message tells it from
/// one made in the same second).
fn commit_unrelated(repo: &crate::support::harness::GitRepo) {
    let head = repo.repo.head().unwrap().peel_to_commit().unwrap();
    let signature = git2::Signature::now("wf tests", "tests@windforce.invalid").unwrap();
    let message = format!("unrelated to {}", head.id());
    let unrelated = repo.repo.commit(None, &signature, &signature, &message, &head.tree().unwrap(), &[]).unwrap();
    move_branch(repo, &unrelated.to_string());
}

/// Force the branch to `commit`, as a force-push does.
fn move_branch(repo: &crate::support::harness::GitRepo, commit: &str) {
    repo.repo.reference("refs/heads/main", git2::Oid::from_str(commit).unwrap(), true, "force-push").unwrap();
}

/// A sync of a commit the database holds already (the branch moved back to it) counts on it being
/// there until the catalog moves to it: `prune --sources`, which found it pinned by nothing, waits
/// for that sync instead of removing it under it.
#[test]
fn prune_waits_for_a_sync_that_counts_on_a_stored_commit() {
    let env = TestEnv::new();
    let (repo, id, first) = synced(&env);
    // An unrelated commit (no parent) synced: the catalog leaves the first, which nothing pins now.
    sync_unrelated_commit(&env, &repo);
    move_branch(&repo, &first);

    // Another host syncs it, held in the middle: its store's lock is taken here.
    let other = host(&env, "host2");
    std::fs::create_dir_all(other.join("store")).unwrap();
    let held = std::fs::File::create(other.join("store/.lock")).unwrap();
    held.lock().unwrap();
    let mut sync = env
        .wf(["sync", "tests"])
        .env("WF_HOME", other.join("home"))
        .env("WF_STORE", other.join("store"))
        .spawn(&env.dir.path().join("sync.log"));
    // The lock of stored blobs (its first key "wfbl") in this test's database, taken before the
    // sync looks for the commit (a sync that took none found the commit stored and went on, and
    // this wait fails).
    wait_for(Duration::from_secs(60), "the sync to take the lock of stored blobs", || {
        let locked: i64 = env.scalar(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
              WHERE l.locktype = 'advisory' AND l.classid = x'7766626c'::int::oid AND d.datname = current_database()",
        );
        (locked > 0).then_some(())
    });
    let mut prune = env.wf(["prune", "--sources", "--yes"]).spawn(&env.dir.path().join("prune.log"));
    std::thread::sleep(Duration::from_secs(1));
    assert!(prune.try_wait().unwrap().is_none(), "prune waits for the sync");
    drop(held);
    assert!(sync.wait().unwrap().success(), "{}", std::fs::read_to_string(env.dir.path().join("sync.log")).unwrap());
    assert!(prune.wait().unwrap().success(), "{}", std::fs::read_to_string(env.dir.path().join("prune.log")).unwrap());
    let catalog: String = env.scalar_of("SELECT commit_sha FROM git_source WHERE id = $1::text::uuid", &[&id]);
    assert_eq!(catalog, first);
    let stored: i64 = env.scalar_of(
        "SELECT count(*) FROM source_commit WHERE git_source_id = $1::text::uuid AND commit_sha = $2",
        &[&id, &first],
    );
    assert_eq!(stored, 1, "the catalog's commit is in the database");
}

/// Two databases whose workers share one store (the same WF_HOME): `prune --sources` on one keeps
/// the trees of the other's sources, which no job of its own pins and which the other's jobs may be
/// running (it removed them all, the commit of the other's catalog too), and says so.
#[test]
fn prune_sources_keeps_the_trees_of_another_databases_sources() {
    let one = TestEnv::new();
    let two = TestEnv::new();
    let (_repo, own, own_commit) = synced(&one);
    let repo = actions_repo();
    let in_ones_home = |args: &[&str]| two.wf(args).env("WF_HOME", one.home());
    in_ones_home(&["source", "add", "tests", &repo.url()]).ok();
    in_ones_home(&["sync", "tests"]).ok();
    let (other, other_commit): (uuid::Uuid, String) = {
        let row = two.db().query_one("SELECT git_source_id, commit_sha FROM source_commit", &[]).unwrap();
        (row.get(0), row.get(1))
    };
    let others_tree = one.store().join(other.to_string()).join(&other_commit);
    assert!(others_tree.join(MARKER).is_file(), "the other database's sync wrote into the shared store");

    let run = one.wf(["prune", "--sources", "--yes", "--json"]).run();
    let pruned = run.json();
    assert_eq!(pruned["sources"]["local_trees"], 0, "{pruned}");
    assert_eq!(pruned["sources"]["foreign_trees"], 1, "{pruned}");
    assert!(run.stderr.contains("kept 1 tree(s)") && run.stderr.contains("does not know"), "{}", run.stderr);
    assert!(others_tree.join(MARKER).is_file(), "the other database's tree is kept");
    assert!(one.store().join(&own).join(&own_commit).join(MARKER).is_file(), "its own catalog's tree is kept");
    // And the other database's catalog still runs from it.
    let job = in_ones_home(&["enqueue", "t/echo", "--input", "{}"]).ok().stdout.trim().to_string();
    in_ones_home(&["work", "--drain", "--isolation", "none"]).ok();
    assert_eq!(status_of(&two, &job), "success");
    assert!(one.home().join("git").join(format!("{other}.git")).is_dir(), "the other database's mirror is kept");
}

/// A source removed on one host: `prune --sources` on another removes that host's git mirror of
/// it, which nothing else would ever remove (a mirror holds the repository's whole history).
#[test]
fn prune_sources_removes_the_mirror_of_a_source_removed_on_another_host() {
    let env = TestEnv::new();
    let (_repo, id, _) = synced(&env);
    let other = host(&env, "host2");
    env.wf(["sync", "tests"]).env("WF_HOME", &other).ok();
    let mirror = other.join("git").join(format!("{id}.git"));
    assert!(mirror.is_dir(), "host2 synced into its own mirror");
    let kept = env.wf(["prune", "--sources", "--yes", "--json"]).env("WF_HOME", &other).ok().json();
    assert_eq!(kept["sources"]["local_mirrors"], 0, "{kept}");
    assert!(mirror.is_dir(), "the mirror of a source still registered stays");

    env.wf(["source", "rm", "tests", "--yes"]).ok();
    let counted = env.wf(["prune", "--sources", "--dry-run", "--json"]).env("WF_HOME", &other).ok().json();
    assert_eq!(counted["sources"]["local_mirrors"], 1, "{counted}");
    assert!(mirror.is_dir(), "a dry run removes nothing");
    let pruned = env.wf(["prune", "--sources", "--yes", "--json"]).env("WF_HOME", &other).ok().json();
    assert_eq!(pruned["sources"]["local_mirrors"], 1, "{pruned}");
    assert!(!mirror.exists(), "the removed source's mirror is gone");
}

/// A tree found changed on the host is set aside and written again; another worker process's job
/// still running from the old one keeps it until it ends: the next writer in the source's folder
/// removed it with the other debris, and the job lost its files mid-run.
#[test]
fn a_tree_set_aside_is_kept_while_a_job_runs_from_it() {
    let env = TestEnv::new();
    let repo = crate::support::harness::GitRepo::new();
    repo.manifest(&json!({"apps": {"s": {"actions": {"slow": {"entrypoint": "slow.ts"}}}}}));
    repo.file(
        "slow.ts",
        "export async function main(input) {
           await Bun.sleep(input.ms);
           const { late } = await import(\"./late.ts\");
           return late();
         }\n",
    );
    repo.file("late.ts", "export function late() { return \"late\"; }\n");
    repo.file("other.ts", "export const other = 1;\n");
    repo.commit("slow");
    env.wf(["source", "add", "st", &repo.url()]).ok();
    env.wf(["sync", "st"]).ok();
    let (id, commit): (uuid::Uuid, String) = {
        let row = env.db().query_one("SELECT git_source_id, commit_sha FROM source_commit", &[]).unwrap();
        (row.get(0), row.get(1))
    };
    let source_dir = env.store().join(id.to_string());
    let set_aside = || -> Vec<PathBuf> {
        std::fs::read_dir(&source_dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.file_name().unwrap().to_string_lossy().starts_with(".tmp-replaced-"))
            .collect()
    };

    let first = enqueue(&env, "s/slow", json!({"ms": 20000}));
    let _a = crate::support::fixtures::worker(&env, "a", &["--concurrency", "1"]);
    wait_for(Duration::from_secs(30), "the first job's action to run", || {
        let jobs = [first.clone()].into_iter().collect();
        (!crate::support::checks::job_processes(&jobs).is_empty()).then_some(())
    });
    // Changed on the host: the next worker process to meet the commit writes it again.
    let mut other = std::fs::OpenOptions::new().append(true).open(source_dir.join(&commit).join("other.ts")).unwrap();
    std::io::Write::write_all(&mut other, b"// changed\n").unwrap();
    let second = enqueue(&env, "s/slow", json!({"ms": 0}));
    env.wf(["work", "--name", "b", "--once"]).ok();
    assert_eq!(status_of(&env, &second), "success");
    assert_eq!(set_aside().len(), 1, "the changed tree is set aside");
    // The next writer in the source's folder: a sync of a new commit.
    repo.file("new.ts", "export const n = 1;\n");
    repo.commit("new");
    env.wf(["sync", "st"]).ok();
    assert_eq!(set_aside().len(), 1, "kept while the first job runs from it");

    wait_completed(&env, &first, Duration::from_secs(60));
    assert_eq!(status_of(&env, &first), "success", "{}", env.wf(["result", &first]).run().stdout);
    repo.file("newer.ts", "export const n = 2;\n");
    repo.commit("newer");
    env.wf(["sync", "st"]).ok();
    assert!(set_aside().is_empty(), "removed once no job runs from it");
}

/// A worker checks a commit once, then trusts it: a commit `prune --sources` removed from its host
/// since (and the branch brought back) is written again, not run from a folder that is gone.
#[test]
fn a_worker_writes_again_a_commit_pruned_from_its_host_since_it_ran_it() {
    let env = TestEnv::new();
    let (repo, id, first) = synced(&env);
    let other = host(&env, "host2");
    let mut worker = worker_of(&env, &other, "h2", &["--isolation", "none"]);
    let one = enqueue(&env, "t/echo", json!({"n": 1}));
    wait_completed(&env, &one, Duration::from_secs(60));
    assert_eq!(status_of(&env, &one), "success");

    // The catalog leaves the commit, its job is pruned, then the commit, from the worker's host too.
    sync_unrelated_commit(&env, &repo);
    std::thread::sleep(Duration::from_millis(1100));
    env.wf(["prune", "--older-than", "1s", "--yes"]).ok();
    env.wf(["prune", "--sources", "--yes"]).env("WF_STORE", other.join("store")).ok();
    assert!(!other.join("store").join(&id).join(&first).exists(), "the worker's host no longer has it");

    move_branch(&repo, &first);
    env.wf(["sync", "tests"]).ok();
    let two = enqueue(&env, "t/echo", json!({"n": 2}));
    wait_completed(&env, &two, Duration::from_secs(60));
    assert_eq!(status_of(&env, &two), "success");
    assert!(other.join("store").join(&id).join(&first).join(MARKER).is_file(), "written again");
    crate::support::checks::stop_worker(&mut worker, "the worker");
}

/// Wait until an enqueue of this test's database holds the job table's lock, as it does from before
/// it reads the commit it pins (`WF_FAULT=enqueue-late` then holds it 2 s before its insert).
fn pinning(env: &TestEnv) {
    wait_for(Duration::from_secs(30), "the enqueue to take the job table's lock", || {
        let held: i64 = env.scalar(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
              WHERE d.datname = current_database() AND l.relation = 'job'::regclass
                AND l.mode = 'RowExclusiveLock' AND l.granted AND l.pid <> pg_backend_pid()",
        );
        (held > 0).then_some(())
    });
}

/// An enqueue reads the commit it pins, then inserts its jobs: `prune --sources` meanwhile (the
/// catalog moved on, nothing pinned the commit yet) removed the commit the job then pinned, and
/// the job could never run. Prune now waits for the enqueue, and keeps the commit its job pins.
#[test]
fn prune_never_removes_the_commit_an_enqueue_is_pinning() {
    let env = TestEnv::new();
    let (repo, id, _first) = synced(&env);
    let enqueue = env.wf(["enqueue", "t/echo", "--input", "{}"]).env("WF_FAULT", "enqueue-late").start();
    pinning(&env);
    sync_unrelated_commit(&env, &repo);
    env.wf(["prune", "--sources", "--yes"]).ok();
    let job = enqueue.finish();
    assert_eq!(job.code, 0, "{job:?}");
    assert_pinned_commit_stored(&env, &id, job.stdout.trim());
}

/// The commit job `job` pins is in the database, under source `source`.
fn assert_pinned_commit_stored(env: &TestEnv, source: &str, job: &str) {
    let pinned: String = env.scalar_of("SELECT commit_sha FROM job WHERE id = $1::text::uuid", &[&job]);
    let stored: i64 = env.scalar_of(
        "SELECT count(*) FROM source_commit WHERE git_source_id = $1::text::uuid AND commit_sha = $2",
        &[&source, &pinned],
    );
    assert_eq!(stored, 1, "the commit job {job} pins ({pinned}) is in the database");
}

/// The same for a rerun, which pins what the job it reruns pinned: that job pruned meanwhile, and
/// the catalog moved on, nothing else pinned its commit, and `prune --sources` removed it under the
/// rerun.
#[test]
fn prune_never_removes_the_commit_a_rerun_is_pinning() {
    let env = TestEnv::new();
    let (repo, id, _first) = synced(&env);
    let first = enqueue(&env, "t/echo", json!({"n": 1}));
    env.wf(["work", "--drain", "--isolation", "none"]).ok();
    sync_unrelated_commit(&env, &repo);
    let rerun = env.wf(["rerun", &first, "--json"]).env("WF_FAULT", "enqueue-late").start();
    pinning(&env);
    env.wf(["prune", "--older-than", "0s", "--sources", "--yes"]).ok();
    let job = rerun.finish();
    assert_eq!(job.code, 0, "{job:?}");
    assert_pinned_commit_stored(&env, &id, job.json()["id"].as_str().unwrap());
}

/// Wait until a `prune --sources` of this test's database holds the lock of stored blobs (its first
/// key "wfbl") or waits for the job table's.
fn pruning(env: &TestEnv) {
    wait_for(Duration::from_secs(60), "the prune to take the lock of stored blobs", || {
        let seen: i64 = env.scalar(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
              WHERE d.datname = current_database()
                AND ((l.locktype = 'advisory' AND l.classid = x'7766626c'::int::oid)
                  OR (l.relation = 'job'::regclass AND l.mode = 'ShareLock'))",
        );
        (seen > 0).then_some(())
    });
}

/// Wait (generously) for a `wf enqueue` to end, and expect it to have enqueued.
fn enqueued_meanwhile(enqueue: crate::support::harness::Process) -> String {
    let mut enqueue = enqueue;
    wait_for(Duration::from_secs(60), "the enqueue to end while the prune waits", || enqueue.try_wait().unwrap());
    let run = enqueue.finish();
    assert_eq!(run.code, 0, "{run:?}");
    run.stdout.trim().to_string()
}

/// `prune --sources` waits for the store's lock (a sync or a worker writing a commit holds it): it
/// waited holding the job table's lock, and every enqueue waited behind it. It now takes the
/// store's lock first, and enqueues go on meanwhile.
#[test]
fn prune_waiting_for_the_stores_lock_lets_enqueues_through() {
    let env = TestEnv::new();
    let (repo, id, first) = synced(&env);
    sync_unrelated_commit(&env, &repo);
    let held = std::fs::File::create(env.store().join(".lock")).unwrap();
    held.lock().unwrap();
    let mut prune = env.wf(["prune", "--sources", "--yes"]).spawn(&env.dir.path().join("prune.log"));
    pruning(&env);

    let job = enqueued_meanwhile(env.wf(["enqueue", "t/echo", "--input", "{}"]).start());
    assert!(prune.try_wait().unwrap().is_none(), "the prune still waits for the store's lock");
    drop(held);
    assert!(prune.wait().unwrap().success(), "{}", std::fs::read_to_string(env.dir.path().join("prune.log")).unwrap());
    let left: i64 = env.scalar_of(
        "SELECT count(*) FROM source_commit WHERE git_source_id = $1::text::uuid AND commit_sha = $2",
        &[&id, &first],
    );
    assert_eq!(left, 0, "the commit nothing pins left the database");
    assert!(!env.store().join(&id).join(&first).exists(), "and the store");
    assert_pinned_commit_stored(&env, &id, &job);
}

/// A streamed batch enqueue holds the job table (in the mode every enqueue does) until its input
/// ends: `prune --sources` waits for it, as it must (its jobs pin their commit), but no longer in
/// front of every other enqueue, nor holding the blob and store locks meanwhile, which a sync of a
/// new commit waited for until the batch ended.
#[test]
fn prune_waiting_for_a_streamed_batch_lets_other_enqueues_and_syncs_through() {
    use std::io::Write;
    let env = TestEnv::new();
    let (repo, id, _first) = synced(&env);
    let mut batch = env.wf(["enqueue", "t/echo", "--batch", "-", "--json"]).start_fed();
    let mut lines = batch.stdin.take().unwrap();
    lines.write_all(b"{\"n\": 1}\n").unwrap();
    lines.flush().unwrap();
    pinning(&env);
    // The catalog leaves the commit the batch pins: only the batch's uncommitted job pins it.
    sync_unrelated_commit(&env, &repo);
    let mut prune = env.wf(["prune", "--sources", "--yes"]).start();
    pruning(&env);

    enqueued_meanwhile(env.wf(["enqueue", "t/echo", "--input", "{}"]).start());
    commit_unrelated(&repo);
    let mut sync = env.wf(["sync", "tests"]).start();
    wait_for(Duration::from_secs(60), "a sync to end while the prune waits", || sync.try_wait().unwrap());
    let sync = sync.finish();
    assert_eq!(sync.code, 0, "{sync:?}");
    assert!(format!("{}{}", sync.stdout, sync.stderr).contains("files written to"), "a new commit stored: {sync:?}");
    assert!(batch.try_wait().unwrap().is_none(), "the batch is still open");
    assert!(prune.try_wait().unwrap().is_none(), "the prune waits for it");
    drop(lines);
    let batch = batch.finish();
    assert_eq!(batch.code, 0, "{batch:?}");
    let pruned = prune.finish();
    assert_eq!(pruned.code, 0, "{pruned:?}");
    assert_eq!(pruned.stderr.matches("waiting for the enqueues in progress").count(), 1, "said once: {pruned:?}");
    let job = batch.json()["ids"][0].as_str().unwrap().to_string();
    assert_pinned_commit_stored(&env, &id, &job);
}

/// A worker writing a commit from the database links the contents its store holds already: one of
/// them changed on the host since (here by hand) is found by the tree's digest before the job runs,
/// and the tree is written again from the database, every content read from it (the changed copy
/// replaced): the job runs what was synced. It failed `SourceNotMaterialized` before, and so did
/// every later job of every commit holding that content on that host, until someone repaired the
/// store by hand.
#[test]
fn a_content_changed_on_a_host_is_written_again_before_a_commit_holding_it_runs() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    let (repo, _id, _first) = synced(&env);
    let other = host(&env, "host2");
    let one = enqueue(&env, "t/echo", json!({"n": 1}));
    ends_well(&env, worker_of(&env, &other, "h2", &["--drain"]), "h2");
    assert_eq!(status_of(&env, &one), "success");

    let copy = other.join("store/.blobs").join(blob_at(&env, "t/echo.ts"));
    let synced_content = std::fs::read(&copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&copy, "export function main() { return { changed: true }; }\n").unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o444)).unwrap();
    // A new commit that shares t/echo.ts, written on that host from the database.
    repo.file("t/another.txt", "another file\n");
    repo.commit("another file");
    env.wf(["sync", "tests"]).ok();
    let two = enqueue(&env, "t/echo", json!({"n": 2}));
    ends_well(&env, worker_of(&env, &other, "h2b", &["--drain"]), "h2b");
    let result: serde_json::Value =
        env.scalar_of("SELECT coalesce(error, result) FROM job_completed WHERE job_id = $1::text::uuid", &[&two]);
    assert_eq!(status_of(&env, &two), "success", "{result}");
    assert_eq!(result["input"]["n"], 2, "what was synced ran: {result}");
    let journal = std::fs::read_to_string(env.dir.path().join("h2b.log")).unwrap();
    assert!(journal.contains("again, its tree in this store not matching"), "said: {journal}");
    assert_eq!(std::fs::read(&copy).unwrap(), synced_content, "the store's copy is the synced content again");
}
