//! Wake-ups for idle slots. One connection per worker LISTENs for claimable jobs and reads every
//! notification as it arrives, so a slot busy with a long job never piles them up; it turns them
//! into a counter that idle slots wait on.
//!
//! The seed's rule "LISTEN first, then look, then wait" holds per slot: a slot reads the counter,
//! looks at the queue, then waits for the counter to move. A notification between the look and the
//! wait has already moved it. A reconnect moves it too, since notifications may have been lost
//! while the connection was down.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use postgres::fallible_iterator::FallibleIterator;

use crate::db::Database;
use crate::diag::diag;
use crate::queue::CHANNEL_ENQUEUED;

/// How long the listener blocks before it looks at `done`.
const LISTEN_SLICE: Duration = Duration::from_millis(250);
/// Pause before connecting again after the database went away.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(super) struct Wake {
    epoch: Mutex<u64>,
    moved: Condvar,
}

impl Wake {
    /// Read before looking at the queue.
    pub(super) fn epoch(&self) -> u64 {
        *self.epoch.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wait until the counter moves past `seen`, at most `timeout`.
    pub(super) fn wait_past(&self, seen: u64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut epoch = self.epoch.lock().unwrap_or_else(PoisonError::into_inner);
        while *epoch == seen {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            epoch = self.moved.wait_timeout(epoch, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// Wake every waiting slot (also at a stop, so that none sleeps through it).
    pub(super) fn bump(&self) {
        *self.epoch.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        self.moved.notify_all();
    }
}

/// LISTEN and bump `wake` at each notification until `done`. Connecting for the first time is
/// the caller's (`first`), so that the worker starts only once it listens.
pub(super) fn listen(database: &Database, name: &str, wake: &Wake, done: &AtomicBool, first: postgres::Client) {
    let mut client = Some(first);
    let mut reported = false;
    while !done.load(Ordering::SeqCst) {
        let Some(connection) = client.as_mut() else {
            match connect(database, name) {
                Ok(connection) => {
                    if reported {
                        diag!("worker {name}: listening for jobs again");
                        reported = false;
                    }
                    client = Some(connection);
                    wake.bump();
                }
                Err(error) => {
                    if !reported {
                        diag!("worker {name}: cannot listen for jobs ({error:#}); looking every few seconds instead");
                        reported = true;
                    }
                    std::thread::sleep(RECONNECT_PAUSE);
                }
            }
            continue;
        };
        let received = {
            let mut notifications = connection.notifications();
            let received = notifications.timeout_iter(LISTEN_SLICE).next().map(|found| found.is_some());
            // Everything pending goes with the first: one look serves them all.
            if let Ok(true) = received {
                while let Ok(Some(_)) = notifications.iter().next() {}
            }
            received
        };
        match received {
            Ok(true) => wake.bump(),
            Ok(false) if !connection.is_closed() => {}
            Ok(false) | Err(_) => client = None,
        }
    }
}

/// A connection that LISTENs for claimable jobs.
pub(super) fn connect(database: &Database, name: &str) -> anyhow::Result<postgres::Client> {
    let mut client = database.connect_as(&format!("wf work {name} listener"))?;
    client.batch_execute(&format!("LISTEN {CHANNEL_ENQUEUED}"))?;
    Ok(client)
}
