//! A worker's database connection that comes back after the database goes away. Its statements
//! give up after a bounded time, on the server's side.

use std::time::Duration;

use anyhow::Result;

use crate::db::failure::is_connection_lost;
use crate::db::{Database, Session};

pub(super) struct Connection {
    database: Database,
    application_name: String,
    statement_timeout: Duration,
    session: Option<Session>,
}

impl Connection {
    pub(super) fn new(database: &Database, application_name: &str, statement_timeout: Duration) -> Connection {
        Connection {
            database: database.clone(),
            application_name: application_name.to_string(),
            statement_timeout,
            session: None,
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
