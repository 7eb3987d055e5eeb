//! One module per subcommand (a group, like `wf schedule`, is one module): parse its arguments,
//! call the library, render the output. No command imports another: what several share is in
//! `args` (reading arguments) and `render` (printing a job and its result).

mod actions;
mod args;
mod bench;
mod cancel;
mod db;
mod enqueue;
mod generate_docs;
mod jobs;
mod logs;
mod progress;
mod prune;
mod reap;
mod render;
mod rerun;
mod result;
mod schedule;
mod show;
mod source;
mod status;
mod supervise;
mod sync;
mod token;
mod work;
mod workers;

use anyhow::Result;

use crate::cli::{Cli, Command, OutputFormat};
use crate::config::Config;
use crate::db::Database;
use crate::db::embedded::{Cluster, Started};
use crate::db::migrate::Applied;
use crate::error::{CommandError, Exit};
use crate::output::Output;
use crate::token::load_secret;
use crate::worker::Local;

/// What every command gets: how to render, the configuration, and how to reach the database.
pub(crate) struct Ctx {
    pub out: Output,
    pub config: Config,
    database_url: Option<String>,
}

impl Ctx {
    /// The database, started and migrated (embedded) or checked (external).
    pub(crate) fn database(&self) -> Result<Database> {
        self.prepare(self.locate()?)
    }

    /// The database without touching its schema: the external one, or the embedded cluster.
    pub(crate) fn locate(&self) -> Result<Database> {
        match &self.database_url {
            Some(url) => Database::external(url),
            None => Ok(Database::embedded(&self.embedded_up()?)),
        }
    }

    /// Migrate the embedded cluster's schema (saying what was applied), or check an external one.
    pub(crate) fn prepare(&self, database: Database) -> Result<Database> {
        self.say_applied(&database.prepare()?);
        Ok(database)
    }

    pub(crate) fn say_applied(&self, applied: &[Applied]) {
        for migration in applied {
            self.out.info(&format!("applied migration {}", migration.name));
        }
    }

    /// The embedded cluster of WF_HOME, created and started when it is not running; says so once.
    pub(crate) fn embedded_up(&self) -> Result<Cluster> {
        let cluster = self.cluster()?;
        let at = cluster.home_pg().display();
        match cluster.ensure_up()? {
            Started::Running => {}
            Started::Restarted => self.out.info(&format!("starting the embedded PostgreSQL cluster in {at}")),
            Started::Created => self.out.info(&format!(
                "creating and starting the embedded PostgreSQL cluster in {at} (set DATABASE_URL to use another database)"
            )),
        }
        Ok(cluster)
    }

    /// The embedded cluster of WF_HOME, as it is.
    pub(crate) fn cluster(&self) -> Result<Cluster> {
        Cluster::locate(self.config.home()?, &self.config.search_path)
    }

    /// What a worker of this host runs with: WF_HOME, the store, bun, the secret (generated into
    /// WF_HOME the first time) and the environment actions inherit.
    pub(crate) fn local(&self) -> Result<Local> {
        let home = self.config.home()?.to_path_buf();
        Ok(Local {
            store: self.config.store()?,
            bun: self.config.bun()?,
            secret: load_secret(self.config.secret(), &home)?,
            inherited_env: self.config.inherited_env.clone(),
            supervisor: self.config.supervisor.clone(),
            home,
        })
    }

    pub(crate) fn database_url(&self) -> Option<&str> {
        self.database_url.as_deref()
    }

    /// A connection to the database, ready to use.
    pub(crate) fn connect(&self) -> Result<postgres::Client> {
        self.database()?.connect()
    }
}

/// What a command ends with: how it ended, or why it did not do what was asked.
pub(crate) type CommandResult = std::result::Result<Exit, CommandError>;

pub(crate) fn dispatch(cli: Cli) -> CommandResult {
    if cli.json && cli.output == Some(OutputFormat::Table) {
        return Err(CommandError::usage("--json asks for JSON and --output table for a table: give one of them"));
    }
    let json = cli.json || cli.output == Some(OutputFormat::Json);
    let config = Config::from_env()?;
    crate::fault::arm(config.fault.clone());
    let ctx = Ctx {
        out: Output::new(json, cli.quiet, config.no_color),
        config,
        database_url: cli.database_url.filter(|url| !url.is_empty()),
    };
    if crate::fault::at("panic") {
        panic!("WF_FAULT=panic");
    }
    match cli.command {
        Command::Db(command) => db::run(&ctx, command),
        Command::GenerateDocs(args) => generate_docs::run(&ctx, args),
        Command::Source(command) => source::run(&ctx, command),
        Command::Sync(args) => sync::run(&ctx, args),
        Command::Actions(args) => actions::run(&ctx, args),
        Command::Supervise(args) => supervise::run(&args),
        Command::Enqueue(args) => enqueue::run(&ctx, args),
        Command::Work(args) => work::run(&ctx, args),
        Command::Cancel(args) => cancel::run(&ctx, args),
        Command::Rerun(args) => rerun::run(&ctx, args),
        Command::Reap(args) => reap::run(&ctx, args),
        Command::Jobs(args) => jobs::run(&ctx, args),
        Command::Show(args) => show::run(&ctx, args),
        Command::Result(args) => result::run(&ctx, args),
        Command::Logs(args) => logs::run(&ctx, args),
        Command::Status => status::run(&ctx),
        Command::Workers => workers::run(&ctx),
        Command::Token(command) => token::run(&ctx, command),
        Command::Schedule(command) => schedule::run(&ctx, command),
        Command::Prune(args) => prune::run(&ctx, args),
        Command::Bench(args) => bench::run(&ctx, args),
    }
}
