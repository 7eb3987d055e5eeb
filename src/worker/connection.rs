//! A worker's database connection that comes back after the database goes away. Its statements
//! give up after a bounded time, on the server's side.

use std::time::Duration;

use anyhow::Result;
use postgres::Client;

use crate::db::Database;
use crate::db::failure::is_connection_lost;

pub(super) struct Connection {
    database: Database,
    application_name: String,
    statement_timeout: Duration,
    client: Option<Client>,
}

impl Connection {
    pub(super) fn new(database: &Database, application_name: &str, statement_timeout: Duration) -> Connection {
        Connection {
            database: database.clone(),
            application_name: application_name.to_string(),
            statement_timeout,
            client: None,
        }
    }

    /// The connection, reconnecting when it is gone.
    pub(super) fn client(&mut self) -> Result<&mut Client> {
        if self.client.as_ref().is_some_and(Client::is_closed) {
            self.client = None;
        }
        if self.client.is_none() {
            self.client = Some(self.database.connect_bounded(&self.application_name, self.statement_timeout)?);
        }
        Ok(self.client.as_mut().expect("just connected"))
    }

    /// Drop the connection after an error that means it is gone.
    pub(super) fn reset_if_lost(&mut self, error: &anyhow::Error) {
        if is_connection_lost(error) {
            self.reset();
        }
    }

    /// Drop the connection; the next use makes a new one.
    pub(super) fn reset(&mut self) {
        self.client = None;
    }
}
