//! The database: migrations and the embedded default cluster.

use crate::support::harness::TestEnv;

#[test]
fn concurrent_migrations_apply_each_migration_once() {
    let env = TestEnv::new();
    let fresh = format!("{}_fresh", env.dbname);
    env.db().batch_execute(&format!("CREATE DATABASE {fresh}")).unwrap();
    let url = TestEnv::cluster_url(&fresh);
    let children: Vec<_> =
        (0..4).map(|_| env.wf(["db", "migrate", "--json"]).env("DATABASE_URL", &url).start()).collect();
    let mut applied_total = 0;
    for child in children {
        let run = child.finish();
        assert_eq!(run.code, 0, "wf db migrate failed: {run:?}");
        let doc = run.json();
        applied_total += doc["applied"].as_array().unwrap().len();
    }
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let rows: i64 = client.query_one("SELECT count(*) FROM wf_migration", &[]).unwrap().get(0);
    let latest = wf::db::migrate::latest_version() as i64;
    assert_eq!(rows, latest, "each migration recorded once");
    assert_eq!(applied_total as i64, latest, "each migration applied by exactly one process");
}

/// `wf db migrate` on a database at this wf's version asks for nothing it does not need: a role
/// that may not create tables (an application's) is told the schema is up to date. It was refused
/// (permission denied for schema public), by a `CREATE TABLE IF NOT EXISTS` of the migrations' table.
#[test]
fn an_up_to_date_migrate_needs_no_right_to_create() {
    let env = TestEnv::new();
    let (role, url) = env.role("app", &["USAGE ON SCHEMA public", "SELECT ON ALL TABLES IN SCHEMA public"]);
    let run = env.wf(["db", "migrate", "--json"]).env("DATABASE_URL", &url).ok().json();
    assert_eq!(run["applied"], serde_json::json!([]), "{run}");
    let may_create: bool =
        env.db().query_one("SELECT has_schema_privilege($1, 'public', 'CREATE')", &[&role]).unwrap().get(0);
    assert!(!may_create, "the role may not create tables");
    // What it may not do is refused with a word on what to look at.
    let refused = env.wf(["reap"]).env("DATABASE_URL", &url).run();
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("permission denied") && refused.stderr.contains("lacks a privilege"),
        "{refused:?}"
    );
}

/// A migration waiting for its tables (held by a long transaction) says so, naming who holds
/// them, and goes on when they are free: it waited without a word, and looked hung.
#[test]
fn a_migration_waiting_for_its_tables_says_so_and_goes_on() {
    let env = TestEnv::new();
    let last = wf::db::migrate::latest_version();
    // As if migration 17 (an index on `job`) and those after it were still to apply.
    env.db()
        .batch_execute(
            "DROP INDEX job_retry_of_idx; ALTER TABLE worker DROP COLUMN key_id;
             ALTER TABLE job_completed DROP COLUMN releases;
             DELETE FROM wf_migration WHERE version >= 17",
        )
        .unwrap();
    let mut holder_connection = env.db();
    let mut holder = holder_connection.transaction().unwrap();
    holder.batch_execute("SET application_name = 'the holder'; LOCK TABLE job IN ROW EXCLUSIVE MODE").unwrap();
    let log = env.dir.path().join("migrate.log");
    let mut migrate = env.wf(["db", "migrate"]).spawn(&log);
    crate::support::harness::wait_for(std::time::Duration::from_secs(60), "the migration to say it waits", || {
        std::fs::read_to_string(&log).unwrap().contains("waiting for a lock held by other sessions").then_some(())
    });
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("the holder"), "{said}");
    assert!(migrate.try_wait().unwrap().is_none(), "it waits: {said}");
    holder.commit().unwrap();
    assert!(migrate.wait().unwrap().success(), "{}", std::fs::read_to_string(&log).unwrap());
    let version: i32 = env.scalar("SELECT max(version) FROM wf_migration");
    assert_eq!(version, last);
}

#[test]
fn external_database_without_schema_is_refused_with_a_hint() {
    let env = TestEnv::new();
    let empty = format!("{}_empty", env.dbname);
    env.db().batch_execute(&format!("CREATE DATABASE {empty}")).unwrap();
    let run = env.wf(["actions"]).env("DATABASE_URL", TestEnv::cluster_url(&empty)).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("wf db migrate"), "{run:?}");
}

#[test]
fn a_database_behind_is_told_to_migrate_and_one_ahead_to_upgrade_wf() {
    let env = TestEnv::new();
    // Make the database look as if only the first migration had been applied.
    env.db()
        .batch_execute(
            "INSERT INTO job (id, app_key, action_key, git_source_id, commit_sha, entrypoint, timeout_s, tag,
                              priority, input, trigger_kind, scheduled_for)
             VALUES ('00000000-0000-0000-0000-00000000000a', 'a', 'b', gen_random_uuid(), 'c', 'main.ts', 60,
                     'default', 0, '{}', 'manual', now());
             INSERT INTO job_queue (job_id, tag, priority, scheduled_for, running, started_at, worker)
             VALUES ('00000000-0000-0000-0000-00000000000a', 'default', 0, now(), true, now(), 'w#1');
             DROP INDEX job_app_created_idx; DROP INDEX job_tag_created_idx;
             ALTER TABLE action DROP COLUMN network, DROP COLUMN memory_mb, DROP COLUMN max_processes;
             ALTER TABLE job DROP COLUMN network, DROP COLUMN memory_mb, DROP COLUMN max_processes;
             ALTER TABLE job_queue DROP COLUMN ping, DROP COLUMN window_s;
             CREATE TABLE job_runtime (job_id uuid PRIMARY KEY, ping timestamptz NOT NULL);
             INSERT INTO job_runtime VALUES ('00000000-0000-0000-0000-00000000000a', '2026-01-01T00:00:00Z');
             ALTER TABLE job_queue RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
                 autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold,
                 autovacuum_analyze_scale_factor, autovacuum_vacuum_cost_delay);
             DROP TABLE worker; ALTER TABLE job_queue DROP COLUMN releases;
             ALTER TABLE job_completed DROP COLUMN releases;
             ALTER TABLE action DROP COLUMN retry_max, DROP COLUMN retry_backoff_s, DROP COLUMN retry_max_backoff_s;
             ALTER TABLE job DROP COLUMN retry_max, DROP COLUMN retry_backoff_s, DROP COLUMN retry_max_backoff_s,
                 DROP COLUMN retry_of, DROP COLUMN retry_number, DROP COLUMN rerun_of, DROP COLUMN idempotency_key,
                 DROP COLUMN schedule_fire, DROP COLUMN no_overlap;
             DROP INDEX job_schedule_created_idx; DROP INDEX job_completed_unsuccessful_idx;
             CREATE UNIQUE INDEX job_schedule_fire_idx ON job (schedule_name, scheduled_for) WHERE schedule_name IS NOT NULL;
             ALTER TABLE schedule DROP COLUMN no_overlap;
             DROP TABLE source_commit, source_blob;
             ALTER TABLE action DROP COLUMN warm;
             ALTER TABLE job DROP COLUMN warm;
             ALTER TABLE job_queue DROP COLUMN awaited, DROP COLUMN created_at;
             CREATE INDEX job_queue_due_idx ON job_queue (tag, scheduled_for) WHERE NOT running AND canceled_by IS NULL;
             ALTER TABLE job_queue ADD FOREIGN KEY (job_id) REFERENCES job (id);
             DELETE FROM wf_migration WHERE version > 1;",
        )
        .unwrap();
    let behind = env.wf(["actions"]).run();
    assert_eq!(behind.code, 1, "{behind:?}");
    assert!(behind.stderr.contains("version 1") && behind.stderr.contains("wf db migrate"), "{behind:?}");
    let migrated = env.wf(["db", "migrate", "--json"]).ok().json();
    assert_eq!(
        migrated["applied"],
        serde_json::json!([2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19])
    );
    env.wf(["actions"]).ok();
    let indexes: i64 =
        env.scalar("SELECT count(*) FROM pg_indexes WHERE indexname IN ('job_app_created_idx', 'job_tag_created_idx')");
    assert_eq!(indexes, 2);
    let due_index: i64 = env.scalar("SELECT count(*) FROM pg_indexes WHERE indexname = 'job_queue_due_idx'");
    assert_eq!(due_index, 0, "migration 12 drops it");
    let queue_keys: i64 =
        env.scalar("SELECT count(*) FROM pg_constraint WHERE conrelid = 'job_queue'::regclass AND contype = 'f'");
    assert_eq!(queue_keys, 0, "migration 13 drops the queue's foreign key to job");
    let moved: bool = env.scalar(
        "SELECT ping = '2026-01-01T00:00:00Z' AND window_s IS NULL AND to_regclass('job_runtime') IS NULL
           FROM job_queue WHERE job_id = '00000000-0000-0000-0000-00000000000a'",
    );
    assert!(moved, "migration 14 moves a running job's ping into its queue row and drops job_runtime");
    let unsuccessful: i64 =
        env.scalar("SELECT count(*) FROM pg_indexes WHERE indexname = 'job_completed_unsuccessful_idx'");
    assert_eq!(unsuccessful, 1, "migration 15 indexes the unsuccessful completions");
    // Migration 16 leaves the queue rows there as they are (no creation time of their own) and
    // indexes them; `wf jobs --status` lists them by their job's.
    let unknown: bool = env.scalar(
        "SELECT q.created_at IS NULL AND to_regclass('job_queue_created_unknown_idx') IS NOT NULL
           FROM job_queue q WHERE q.job_id = '00000000-0000-0000-0000-00000000000a'",
    );
    assert!(unknown, "migration 16 does not rewrite the queue");
    let running = env.wf(["jobs", "--status", "running", "--json"]).ok().json();
    assert_eq!(running[0]["id"], "00000000-0000-0000-0000-00000000000a", "{running:#}");

    env.db()
        .execute("INSERT INTO wf_migration (version, name, checksum) VALUES (99, '0099_future.sql', 'x')", &[])
        .unwrap();
    let ahead = env.wf(["actions"]).run();
    assert_eq!(ahead.code, 1, "{ahead:?}");
    assert!(ahead.stderr.contains("newer than this wf"), "{ahead:?}");
    let refused = env.wf(["db", "migrate"]).run();
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(refused.stderr.contains("upgrade wf"), "{refused:?}");
}

/// Migration 9 turns the listing rows of each stored commit (schema version 8) into the commit's
/// three arrays, in bytewise path order, and a worker materializes a commit converted so.
#[test]
fn migration_9_moves_each_commits_listing_into_its_row() {
    let env = TestEnv::new();
    let repo = crate::support::fixtures::actions_repo();
    env.wf(["source", "add", "tests", &repo.url()]).ok();
    env.wf(["sync", "tests"]).ok();
    let listing = |env: &TestEnv| -> (Vec<String>, Vec<String>, Vec<bool>) {
        let row = env.db().query_one("SELECT paths, blobs, executables FROM source_commit", &[]).unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    let synced = listing(&env);

    // Back to version 8: the listing as rows, the arrays gone.
    use sha2::Digest;
    let sql_8 = include_str!("../../migrations/0008_stored_sources.sql");
    let mut db = env.db();
    let mut tx = db.transaction().unwrap();
    tx.batch_execute(
        "CREATE TEMP TABLE kept AS SELECT * FROM source_commit;
         CREATE TEMP TABLE kept_blobs AS SELECT * FROM source_blob;
         DROP TABLE source_commit, source_blob;
         DELETE FROM wf_migration WHERE version IN (8, 9);",
    )
    .unwrap();
    tx.batch_execute(sql_8).unwrap();
    let checksum: String = sha2::Sha256::digest(sql_8.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    tx.execute(
        "INSERT INTO wf_migration (version, name, checksum) VALUES (8, '0008_stored_sources.sql', $1)",
        &[&checksum],
    )
    .unwrap();
    tx.batch_execute(
        "INSERT INTO source_blob SELECT * FROM kept_blobs;
         INSERT INTO source_commit (git_source_id, commit_sha, digest, files, bytes, stored_at)
              SELECT git_source_id, commit_sha, digest, files, bytes, stored_at FROM kept;
         -- In reverse order, so that the migration's ordering is what puts them right.
         INSERT INTO source_file (git_source_id, commit_sha, path, blob, executable)
              SELECT k.git_source_id, k.commit_sha, l.path, l.blob, l.executable
                FROM kept k, unnest(k.paths, k.blobs, k.executables) AS l(path, blob, executable)
               ORDER BY l.path DESC;",
    )
    .unwrap();
    tx.commit().unwrap();

    let migrated = env.wf(["db", "migrate", "--json"]).ok().json();
    assert_eq!(migrated["applied"], serde_json::json!([9]));
    let mut sorted: Vec<(String, String, bool)> = synced
        .0
        .iter()
        .cloned()
        .zip(synced.1.iter().cloned())
        .zip(synced.2.iter().copied())
        .map(|((p, b), x)| (p, b, x))
        .collect();
    sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let converted = listing(&env);
    let converted: Vec<(String, String, bool)> =
        converted.0.into_iter().zip(converted.1).zip(converted.2).map(|((p, b), x)| (p, b, x)).collect();
    assert_eq!(converted, sorted, "the same listing, in bytewise path order");
    assert!(!sorted.is_empty());
    let tables: i64 = env.scalar("SELECT count(*) FROM pg_tables WHERE tablename = 'source_file'");
    assert_eq!(tables, 0);

    // A host with an empty store materializes the converted commit and runs a job of it.
    let job = crate::support::fixtures::enqueue(&env, "t/echo", serde_json::json!({"n": 1}));
    let other = env.dir.path().join("host2");
    let status = env
        .wf(["work", "--drain", "--name", "h2"])
        .env("WF_HOME", other.join("home"))
        .env("WF_STORE", other.join("store"))
        .spawn(&env.dir.path().join("h2.log"))
        .wait()
        .unwrap();
    assert!(status.success(), "{}", std::fs::read_to_string(env.dir.path().join("h2.log")).unwrap_or_default());
    let done: String = env.scalar_of("SELECT status FROM job_completed WHERE job_id = $1::text::uuid", &[&job]);
    assert_eq!(done, "success");
}
