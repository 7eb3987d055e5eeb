//! A connection that prepares each of the spine's statements once. Sent as text, a statement is
//! parsed and planned on every call: that was most of the database's work per job.

use std::collections::HashMap;

use anyhow::Result;
use postgres::types::ToSql;
use postgres::{Client, Row, Statement};

pub struct Session {
    client: Client,
    prepared: HashMap<&'static str, Statement>,
}

impl Session {
    pub fn new(client: Client) -> Session {
        Session { client, prepared: HashMap::new() }
    }

    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// The connection itself, for what is not a spine statement (a transaction, a LISTEN).
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    fn statement(&mut self, sql: &'static str) -> Result<Statement> {
        if let Some(statement) = self.prepared.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql)?;
        self.prepared.insert(sql, statement.clone());
        Ok(statement)
    }

    pub fn query(&mut self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        let statement = self.statement(sql)?;
        Ok(self.client.query(&statement, params)?)
    }

    pub fn query_opt(&mut self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<Option<Row>> {
        let statement = self.statement(sql)?;
        Ok(self.client.query_opt(&statement, params)?)
    }

    pub fn query_one(&mut self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<Row> {
        let statement = self.statement(sql)?;
        Ok(self.client.query_one(&statement, params)?)
    }

    pub fn execute(&mut self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        let statement = self.statement(sql)?;
        Ok(self.client.execute(&statement, params)?)
    }
}
