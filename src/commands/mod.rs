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
mod prune;
mod reap;
mod render;
mod result;
mod schedule;
mod show;
mod source;
mod status;
mod supervise;
mod sync;
mod token;
mod work;

use anyhow::Result;

use crate::cli::{Cli, Command, OutputFormat};
use crate::db::Database;
use crate::error::{CommandError, Exit};
use crate::output::Output;

/// What every command gets: how to render, and how to reach the database.
pub(crate) struct Ctx {
    pub out: Output,
    database_url: Option<String>,
}

impl Ctx {
    /// The database, started and migrated (embedded) or checked (external).
    pub(crate) fn database(&self) -> Result<Database> {
        Database::open(self.database_url.as_deref(), &self.out)
    }

    pub(crate) fn database_url(&self) -> Option<String> {
        self.database_url.clone()
    }

    /// A connection to the database, ready to use.
    pub(crate) fn connect(&self) -> Result<postgres::Client> {
        self.database()?.connect()
    }
}

/// What a command ends with: how it ended, or why it did not do what was asked.
pub(crate) type CommandResult = std::result::Result<Exit, CommandError>;

pub(crate) fn dispatch(cli: Cli) -> CommandResult {
    let json = cli.json || cli.output == OutputFormat::Json;
    let ctx = Ctx { out: Output::new(json, cli.quiet), database_url: cli.database_url };
    if crate::fault::at("panic") {
        panic!("WF_FAULT=panic");
    }
    match cli.command {
        Command::Db(command) => db::run(&ctx, command),
        Command::GenerateDocs(args) => generate_docs::run(&ctx, args),
        Command::Source(command) => source::run(&ctx, command),
        Command::Sync(args) => sync::run(&ctx, args),
        Command::Actions(args) => actions::run(&ctx, args),
        Command::Supervise(args) => supervise::run(args),
        Command::Enqueue(args) => enqueue::run(&ctx, args),
        Command::Work(args) => work::run(&ctx, args),
        Command::Cancel(args) => cancel::run(&ctx, args),
        Command::Reap(args) => reap::run(&ctx, args),
        Command::Jobs(args) => jobs::run(&ctx, args),
        Command::Show(args) => show::run(&ctx, args),
        Command::Result(args) => result::run(&ctx, args),
        Command::Logs(args) => logs::run(&ctx, args),
        Command::Status => status::run(&ctx),
        Command::Token(command) => token::run(&ctx, command),
        Command::Schedule(command) => schedule::run(&ctx, command),
        Command::Prune(args) => prune::run(&ctx, args),
        Command::Bench(args) => bench::run(&ctx, args),
    }
}
