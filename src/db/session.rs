//! A connection that prepares each of the spine's statements once and plans it once. Sent as text,
//! a statement is parsed and planned on every call: that was most of the database's work per job.
//! Prepared, PostgreSQL still plans it again on every call while a plan made for the call's own
//! parameters looks cheaper than one made without them, which for the claim it always does (the
//! planner takes an array parameter for 10 elements, a given one for its length): 0.55 ms of
//! planning for 0.15 ms of work. So a session's statements use generic plans
//! (`plan_cache_mode = force_generic_plan`), each written so that its generic plan is the right one
//! (the claim's limits are literals, `claim::claim_sql`; `tests/it/claim.rs` checks those plans on a
//! deep queue). A generic plan is made anew when its tables are analyzed; a statement is also
//! prepared again after PLAN_LIFETIME, and a claim that was slow several times in a row has the next
//! one prepared again (its plan was made for a queue much smaller than the one it meets).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use postgres::types::ToSql;
use postgres::{Client, Row, Statement};

/// How a session's statements are planned: one generic plan each, and one that walks indexes. A
/// generic plan cannot know which tag a claim is for nor how many jobs it holds, and on a queue of a
/// few thousand jobs in one tag it took bitmap scans and sorts of the whole tag (2.8 ms a claim)
/// over the index walk (0.2 ms); every statement of a session has an index to walk. And no JIT: with
/// sequential scans off, a plan that could not avoid one would be costed as enormous, and PostgreSQL
/// would compile it with LLVM at every call; a statement of a few index probes never gains from it.
pub const PLANNER: [&str; 4] =
    ["plan_cache_mode = force_generic_plan", "enable_seqscan = off", "enable_bitmapscan = off", "jit = off"];

/// How long a prepared statement's plan is kept.
const PLAN_LIFETIME: Duration = Duration::from_secs(60);

/// Slow calls in a row after which a statement is prepared anew (see `slow_call`).
const SLOW_CALLS_TO_REPLAN: u32 = 3;

pub struct Session {
    client: Client,
    prepared: HashMap<&'static str, Prepared>,
    /// Whether the connection was set to generic plans.
    generic: bool,
}

struct Prepared {
    statement: Statement,
    at: Instant,
    /// Calls in a row that were slow (`slow_call`).
    slow: u32,
}

impl Session {
    pub fn new(client: Client) -> Session {
        Session { client, prepared: HashMap::new(), generic: false }
    }

    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// The connection itself, for what is not a spine statement (a transaction, a LISTEN).
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    fn statement(&mut self, sql: &'static str) -> Result<Statement> {
        Ok(self.prepared_statement(sql)?.0)
    }

    /// The statement of `sql`, prepared if need be, and how many of its calls in a row were slow.
    fn prepared_statement(&mut self, sql: &'static str) -> Result<(Statement, u32)> {
        if let Some(prepared) = self.prepared.get(sql)
            && prepared.at.elapsed() < PLAN_LIFETIME
        {
            return Ok((prepared.statement.clone(), prepared.slow));
        }
        self.configure()?;
        let statement = self.client.prepare(sql)?;
        self.prepared.insert(sql, Prepared { statement: statement.clone(), at: Instant::now(), slow: 0 });
        Ok((statement, 0))
    }

    /// Set the connection's planner settings, once, outside any transaction (a setting made in a
    /// transaction that rolls back is undone).
    fn configure(&mut self) -> Result<()> {
        if !self.generic {
            self.client.batch_execute(&format!("SET {}", PLANNER.join("; SET ")))?;
            self.generic = true;
        }
        Ok(())
    }

    /// Run `work` in a transaction: committed when it returns Ok, rolled back otherwise.
    pub fn in_transaction<T>(&mut self, work: impl FnOnce(&mut Session) -> Result<T>) -> Result<T> {
        self.configure()?;
        self.client.batch_execute("BEGIN")?;
        match work(self) {
            Ok(value) => {
                self.client.batch_execute("COMMIT")?;
                Ok(value)
            }
            Err(error) => {
                let _ = self.client.batch_execute("ROLLBACK");
                Err(error)
            }
        }
    }

    /// Note whether the last call of `sql` was slow: after SLOW_CALLS_TO_REPLAN slow calls in a row
    /// it is prepared anew at its next call, planned for the tables as they are then. A plan gone
    /// wrong is slow at every call; one slow call is more often the machine's moment (a commit
    /// waiting for the disk, a process waiting for a core), and planning a claim again costs the
    /// server about 3 ms: on a loaded machine, one replan in eight calls took a third of the
    /// server's time for the statement.
    fn slow_call(&mut self, sql: &'static str, slow: bool) {
        let Some(prepared) = self.prepared.get_mut(sql) else { return };
        prepared.slow = if slow { prepared.slow + 1 } else { 0 };
        if prepared.slow >= SLOW_CALLS_TO_REPLAN {
            self.prepared.remove(sql);
        }
    }

    /// `query`, noting whether the call took longer than `slow_after` (`slow_call`). The streak is
    /// looked up again only when there is one to count or to end: a statement's text is hashed
    /// for each lookup, and this runs for every claim.
    pub fn query_watched(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
        slow_after: Duration,
    ) -> Result<Vec<Row>> {
        let began = Instant::now();
        let (statement, streak) = self.prepared_statement(sql)?;
        let rows = self.client.query(&statement, params)?;
        let slow = began.elapsed() > slow_after;
        if slow || streak > 0 {
            self.slow_call(sql, slow);
        }
        Ok(rows)
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
