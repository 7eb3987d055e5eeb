//! The worker's entry in the registry of workers (`wf workers`): written when it starts, refreshed
//! every heartbeat period, marked stopped when it ends. A worker that dies stops refreshing it;
//! once its zombie window has passed it is shown as gone, and an hour later the beat of any worker
//! removes it. A worker whose signing key (WF_SECRET) is not that of another live worker warns,
//! once per such worker: the WF_TOKENs each gives are refused where the other's key verifies them.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use chrono::{DateTime, Utc};
use postgres::Client;
use uuid::Uuid;

use super::Shared;
use super::connection::Connection;
use super::unanswered;
use crate::diag::diag;

/// Refresh the entry until `done`, then mark it stopped. Failures are not reported: the slots
/// already say when the database is away, and the next beat tries again.
pub(super) fn keep_fresh(shared: &Shared, done: &AtomicBool) {
    let options = &shared.options;
    let mut connection =
        Connection::new(&shared.database, &format!("wf work {} registry", options.name), options.heartbeat);
    let key_id = crate::token::key_id(&shared.secret);
    let mut warned = HashSet::new();
    let mut next = Instant::now();
    while !done.load(Ordering::SeqCst) {
        if Instant::now() >= next {
            next = Instant::now() + options.heartbeat;
            if let Err(error) = beat(shared, &mut connection, &key_id, &mut warned) {
                connection.reset_if_lost(&error);
            }
            unanswered::put_back(shared, &mut connection, options.heartbeat * 2);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // What a claim given up took after the slots' last looks, if it has committed by now.
    unanswered::put_back(shared, &mut connection, options.heartbeat * 2);
    let id = shared.worker_id.clone();
    let stopped = connection.bounded(options.heartbeat * 2, move |session| {
        session.execute("UPDATE worker SET stopped_at = now(), last_seen = now() WHERE id = $1", &[&id])
    });
    if let Err(error) = stopped {
        connection.reset_if_lost(&error);
    }
}

/// Refresh this worker's entry; warn of live workers (not warned of yet, kept in `warned`) that
/// sign with another key than `key_id`, but for benches' workers. The calls are given up after
/// two heartbeat periods, as a slot's are: a backend that stops answering (stopped, stuck) runs no
/// timeout of the server's, and the entry, then the schema check, would wait for it (the worker
/// shown as gone while it runs).
fn beat(shared: &Shared, connection: &mut Connection, key_id: &str, warned: &mut HashSet<String>) -> Result<()> {
    let options = &shared.options;
    let (id, name, host, tags) =
        (shared.worker_id.clone(), options.name.clone(), crate::config::hostname(), options.tags.clone());
    let slots = i32::try_from(options.concurrency).unwrap_or(i32::MAX);
    let pid = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let window_s = options.zombie_timeout.as_secs_f64();
    let key_id = key_id.to_string();
    // A `wf bench --bun` round's worker (named after its tag, and serving that tag alone) serves
    // only the bench's jobs, whose tokens no one verifies: neither warns of the other.
    let bench = crate::bench::is_bench_name(&options.name) && options.tags == [options.name.as_str()];
    let (others, version) = connection.bounded(options.heartbeat * 2, move |session| {
        session.execute(
            "INSERT INTO worker (id, name, host, pid, tags, slots, window_s, key_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (id) DO UPDATE SET last_seen = now()",
            &[&id, &name, &host, &pid, &tags, &slots, &window_s, &key_id],
        )?;
        session.execute("DELETE FROM worker WHERE last_seen < now() - interval '1 hour'", &[])?;
        let others: Vec<(String, String, String)> = if bench {
            Vec::new()
        } else {
            session
                .query(
                    "SELECT id, name, host FROM worker
                      WHERE key_id <> $1 AND NOT (name ~ $2 AND tags = ARRAY[name])
                        AND stopped_at IS NULL AND last_seen >= now() - make_interval(secs => window_s)",
                    &[&key_id, &crate::bench::NAME_PATTERN],
                )?
                .iter()
                .map(|other| (other.get("id"), other.get("name"), other.get("host")))
                .collect()
        };
        Ok((others, crate::db::migrate::current_version(session.client())?))
    })?;
    for (id, name, host) in others {
        if warned.insert(id) {
            diag!(
                "warning: worker {}: worker {name} on host {host} signs its jobs' WF_TOKENs with another WF_SECRET: \
                 `wf token verify` on either host refuses the other's tokens; give every host the same WF_SECRET",
                options.name
            );
        }
    }
    // A `wf db migrate` of a newer wf while this one runs: its statements are no longer the
    // schema's. Checked here, at every beat, as every command checks at its start; only a version
    // read stops the worker (a failed read is tried again at the next beat).
    if let Some(moved) = crate::db::migrate::mismatch(version) {
        shared.stop_for(moved.context("the database's schema changed under this worker"));
    }
    Ok(())
}

/// A worker as `wf workers` shows it.
#[derive(Debug, Clone)]
pub(crate) struct WorkerView {
    pub name: String,
    pub host: String,
    pub pid: i32,
    pub tags: Vec<String>,
    pub slots: i32,
    /// The jobs it runs now, oldest claim first.
    pub jobs: Vec<Uuid>,
    pub started_at: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
    /// Its entry is fresh and it has not stopped.
    pub live: bool,
}

/// Live workers first, then those gone within the hour, by name. A worker whose last beat is older
/// than its zombie window is gone: the reaper treats its jobs as it would a dead worker's. Its
/// jobs are those whose claim starts with its id (few: the running rows, by their index).
pub(crate) fn list(client: &mut Client) -> Result<Vec<WorkerView>> {
    let rows = client.query(
        "SELECT w.name, w.host, w.pid, w.tags, w.slots, w.started_at, w.last_seen,
                w.stopped_at IS NULL AND w.last_seen >= now() - make_interval(secs => w.window_s) AS live,
                coalesce(r.jobs, '{}') AS jobs
           FROM worker w
           LEFT JOIN LATERAL (
                SELECT array_agg(q.job_id ORDER BY q.started_at) AS jobs
                  FROM job_queue q
                 WHERE q.running AND starts_with(q.worker, w.id || '.')) r ON true
          WHERE w.last_seen >= now() - interval '1 hour'
          ORDER BY live DESC, w.name, w.started_at",
        &[],
    )?;
    Ok(rows
        .iter()
        .map(|row| WorkerView {
            name: row.get("name"),
            host: row.get("host"),
            pid: row.get("pid"),
            tags: row.get("tags"),
            slots: row.get("slots"),
            jobs: row.get("jobs"),
            started_at: row.get("started_at"),
            last_seen: row.get("last_seen"),
            live: row.get("live"),
        })
        .collect())
}
