//! A command waiting for a lock says who holds it.
//!
//! A command's statement can wait as long as another transaction holds what it needs: a psql
//! session that ran `SELECT ... FOR UPDATE` on a job and went to lunch, an `ALTER TABLE` of an
//! administrator, a migration. Commands have no lock timeout (a cancel that gave up would leave the
//! job running; the wait is the right thing), but a command that waited without a word looked hung.
//! So every connection a command makes (`Database::connect`) is watched: once one of its
//! statements has waited `SAID_AFTER` for a lock, a line on stderr names the sessions it waits for,
//! and the command goes on waiting. A wait shorter than that says nothing. The watcher makes a
//! connection of its own only while a command's connection has been open `SAID_AFTER` (a follow, a
//! wait, a long cancel: one more connection for as long), and none in a worker, whose own
//! connections are bounded otherwise (`Database::connect_bounded`).

use std::collections::HashSet;
use std::io::IsTerminal;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use postgres::Client;

use super::Database;
use crate::diag::diag;

/// How long a statement waits for a lock before the wait is said.
const SAID_AFTER: Duration = Duration::from_secs(3);

/// How often the watcher looks, once the first `SAID_AFTER` has passed.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The sessions of this process's commands, by backend pid and backend start (a pid alone may be
/// another session's once this one ended), and where they are.
struct Watched {
    database: Database,
    sessions: Vec<Session>,
}

static WATCHED: Mutex<Option<Watched>> = Mutex::new(None);
static WATCHER: OnceLock<()> = OnceLock::new();

/// A watched session: its backend's pid and start.
pub(super) type Session = (i32, DateTime<Utc>);

/// Watch `client`, a new connection of `database`: the watcher thread starts with the first.
/// None when the session cannot be found (its statement failed, a server that hides it): the
/// command goes on unwatched, and a broken connection fails its next statement.
pub(super) fn watch(database: &Database, client: &mut Client) -> Option<Session> {
    let row = client
        .query_opt(
            "SELECT pg_backend_pid(), backend_start FROM pg_stat_activity
              WHERE pid = pg_backend_pid() AND backend_start IS NOT NULL",
            &[],
        )
        .ok()??;
    let session = (row.get(0), row.get(1));
    let mut watched = WATCHED.lock().unwrap_or_else(PoisonError::into_inner);
    let watched = watched.get_or_insert_with(|| Watched { database: database.clone(), sessions: Vec::new() });
    watched.sessions.push(session);
    WATCHER.get_or_init(|| {
        // Without the thread no wait is said; the command itself goes on all the same.
        drop(std::thread::Builder::new().name("wf lock watch".to_string()).spawn(look_on));
    });
    Some(session)
}

/// Watch `session` no more: its connection is dropped, and a process whose watched sessions are all
/// gone (a worker, once its schema is checked) keeps no connection for the watch.
pub(super) fn unwatch(session: Session) {
    let mut watched = WATCHED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(watched) = watched.as_mut() {
        watched.sessions.retain(|watched| *watched != session);
    }
}

fn look_on() {
    std::thread::sleep(SAID_AFTER);
    let mut connection: Option<Client> = None;
    let mut said = HashSet::new();
    loop {
        let (database, pids, starts) = {
            let watched = WATCHED.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(watched) = watched.as_ref() else { return };
            let (pids, starts): (Vec<i32>, Vec<DateTime<Utc>>) = watched.sessions.iter().copied().unzip();
            (watched.database.clone(), pids, starts)
        };
        if pids.is_empty() {
            connection = None;
        } else if connection.is_none() {
            connection = database.connect_once("wf lock watch").ok();
        }
        if let Some(client) = connection.as_mut() {
            match waits(client, &pids, &starts) {
                Ok(waits) => {
                    // Each wait said once (the same waiter for the same holders, however long), the new ones as
                    // they come.
                    for (waiter, holder_pids, holders) in waits {
                        if said.insert((waiter, holder_pids)) {
                            // On a terminal, over the line a spinner may be drawing.
                            let clear = if std::io::stderr().is_terminal() { "\r\x1b[2K" } else { "" };
                            diag!(
                                "{clear}waiting for a lock held by other sessions: {holders}; this goes on \
                                 when they end (ctrl-c to give up)"
                            );
                        }
                    }
                }
                // The database is away: the command says so itself; look again later.
                Err(_) => connection = None,
            }
        }
        std::thread::sleep(LOOK_EVERY);
    }
}

/// The sessions among `pids` (started at `starts`) whose statement has waited `SAID_AFTER` or more
/// for a lock, each with the sessions it waits for: their pids, and a description of them.
fn waits(
    client: &mut Client,
    pids: &[i32],
    starts: &[DateTime<Utc>],
) -> Result<Vec<(i32, Vec<i32>, String)>, postgres::Error> {
    let rows = client.query(
        concat!(
            "SELECT waiter.pid,
                array_agg(holder.pid ORDER BY holder.pid),
                string_agg(",
            crate::db::session_described!("holder"),
            ", ', ' ORDER BY holder.pid)
           FROM unnest($1::int[], $2::timestamptz[]) AS mine (pid, started)
           JOIN pg_stat_activity AS waiter ON waiter.pid = mine.pid AND waiter.backend_start = mine.started
           CROSS JOIN LATERAL unnest(pg_blocking_pids(waiter.pid)) AS blocking (pid)
           JOIN pg_stat_activity AS holder ON holder.pid = blocking.pid
          WHERE waiter.wait_event_type = 'Lock' AND waiter.query_start <= now() - $3::float8 * interval '1 second'
          GROUP BY waiter.pid"
        ),
        &[&pids, &starts, &SAID_AFTER.as_secs_f64()],
    )?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1), row.get(2))).collect())
}
