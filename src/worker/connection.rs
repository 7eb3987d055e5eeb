//! A worker's database connection that comes back after the database goes away.

use anyhow::Result;
use postgres::Client;

use crate::db::Database;
use crate::queue::is_connection_error;

pub(super) struct Connection {
    database: Database,
    application_name: String,
    client: Option<Client>,
    /// Channels to LISTEN on after every (re)connect.
    listen: Vec<&'static str>,
}

impl Connection {
    pub(super) fn new(database: &Database, application_name: &str) -> Connection {
        Connection {
            database: database.clone(),
            application_name: application_name.to_string(),
            client: None,
            listen: Vec::new(),
        }
    }

    /// LISTEN on these channels now and after every reconnect.
    pub(super) fn listening(mut self, channels: &[&'static str]) -> Connection {
        self.listen = channels.to_vec();
        self
    }

    /// The connection, reconnecting when it is gone. A reconnect means notifications may have
    /// been missed: callers look at the queue after it anyway.
    pub(super) fn client(&mut self) -> Result<&mut Client> {
        if self.client.as_ref().is_some_and(Client::is_closed) {
            self.client = None;
        }
        if self.client.is_none() {
            let mut client = self.database.connect_as(&self.application_name)?;
            for channel in &self.listen {
                client.batch_execute(&format!("LISTEN {channel}"))?;
            }
            self.client = Some(client);
        }
        Ok(self.client.as_mut().expect("just connected"))
    }

    /// Drop the connection after an error that means it is gone.
    pub(super) fn reset_if_broken(&mut self, error: &anyhow::Error) {
        if is_connection_error(error) {
            self.reset();
        }
    }

    /// Drop the connection; the next use makes a new one.
    pub(super) fn reset(&mut self) {
        self.client = None;
    }
}
