//! A worker's database connection that comes back after the database goes away. Its statements
//! give up after a bounded time, on the server's side; `bounded` calls on the worker's too.

use std::sync::mpsc;
use std::time::Duration;

use anyhow::Result;

use crate::db::failure::is_connection_lost;
use crate::db::{Database, Session};

pub(super) struct Connection {
    database: Database,
    application_name: String,
    statement_timeout: Duration,
    session: Option<Session>,
    /// The thread that makes `bounded` calls, kept from one call to the next rather than started
    /// for each (every job's completion is one); one left waiting is replaced.
    caller: Option<mpsc::SyncSender<Call>>,
}

/// A call for the caller thread.
type Call = Box<dyn FnOnce() + Send>;

impl Connection {
    pub(super) fn new(database: &Database, application_name: &str, statement_timeout: Duration) -> Connection {
        Connection {
            database: database.clone(),
            application_name: application_name.to_string(),
            statement_timeout,
            session: None,
            caller: None,
        }
    }

    /// The connection, reconnecting when it is gone (its statements are prepared again).
    pub(super) fn client(&mut self) -> Result<&mut Session> {
        if self.session.as_ref().is_some_and(Session::is_closed) {
            self.session = None;
        }
        if self.session.is_none() {
            let client = self.database.connect_bounded(&self.application_name, self.statement_timeout)?;
            self.session = Some(Session::new(client));
        }
        Ok(self.session.as_mut().expect("just connected"))
    }

    /// Run `call` on this connection in a thread of its own, and give the connection up when no
    /// answer came within `patience`: a backend that stops answering while the server and the
    /// kernel stay up (stopped, or stuck in the kernel) runs no timeout of the server's, and TCP
    /// sees nothing wrong. The call left waiting keeps the old connection; the next use makes a new
    /// one. That error is an I/O timeout: transient, and whether the call committed is unknown.
    pub(super) fn bounded<T: Send + 'static>(
        &mut self,
        patience: Duration,
        call: impl FnOnce(&mut Session) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.client()?;
        let mut session = self.session.take().expect("just connected");
        let (answer, answered) = mpsc::sync_channel(1);
        // A panic of the call (a bug) goes on in the calling thread, as if it had made the call.
        let work: Call = Box::new(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| call(&mut session)));
            let _ = answer.send((session, result));
        });
        if self.caller()?.send(work).is_err() {
            self.caller = None;
            return Err(std::io::Error::other("the database call thread was gone").into());
        }
        match answered.recv_timeout(patience) {
            Ok((session, Ok(result))) => {
                self.session = Some(session);
                result
            }
            Ok((_, Err(panic))) => std::panic::resume_unwind(panic),
            Err(_) => {
                // Left waiting with the old connection: the next call gets a new thread.
                self.caller = None;
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("the database did not answer within {patience:?}: its connection is given up"),
                )
                .into())
            }
        }
    }

    /// The caller thread, started when there is none (it ends when its sender is dropped).
    fn caller(&mut self) -> std::io::Result<&mpsc::SyncSender<Call>> {
        if self.caller.is_none() {
            let (calls, work) = mpsc::sync_channel::<Call>(1);
            std::thread::Builder::new().name("wf-db-call".to_string()).spawn(move || {
                for call in work {
                    call();
                }
            })?;
            self.caller = Some(calls);
        }
        Ok(self.caller.as_ref().expect("just started"))
    }

    /// Drop the connection after an error that means it is gone.
    pub(super) fn reset_if_lost(&mut self, error: &anyhow::Error) {
        if is_connection_lost(error) {
            self.reset();
        }
    }

    /// Drop the connection; the next use makes a new one.
    pub(super) fn reset(&mut self) {
        self.session = None;
    }
}
