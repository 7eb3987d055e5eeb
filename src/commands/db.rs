//! `wf db up | down | status | migrate`.

use std::path::Path;

use anyhow::Context;
use serde::Serialize;

use super::{CommandResult, Ctx};
use crate::cli::DbCommand;
use crate::db::{Database, embedded::Cluster, migrate};
use crate::error::Exit;

pub(super) fn run(ctx: &Ctx, command: DbCommand) -> CommandResult {
    match command {
        DbCommand::Up => up(ctx),
        DbCommand::Down => down(ctx),
        DbCommand::Status => status(ctx),
        DbCommand::Migrate => migrate(ctx),
    }
}

fn up(ctx: &Ctx) -> CommandResult {
    let cluster = Cluster::locate()?;
    let database = Database::open(None, &ctx.out)?;
    let mut client = database.connect()?;
    let version = migrate::current_version(&mut client)?;
    if ctx.out.json {
        ctx.out.json(&UpDocument { running: true, path: cluster.home_pg(), schema_version: version })?;
    } else {
        ctx.out.info(&format!("embedded cluster running in {}", cluster.home_pg().display()));
    }
    if ctx.database_url().is_some() {
        ctx.out.info("note: DATABASE_URL is set, so the other commands use that database, not this cluster");
    }
    Ok(Exit::Ok)
}

fn down(ctx: &Ctx) -> CommandResult {
    let cluster = Cluster::locate()?;
    let stopped = cluster.stop()?;
    if ctx.out.json {
        ctx.out.json(&DownDocument { stopped })?;
    } else if stopped {
        ctx.out.info("embedded cluster stopped");
    } else {
        ctx.out.info("embedded cluster was not running");
    }
    Ok(Exit::Ok)
}

fn status(ctx: &Ctx) -> CommandResult {
    let latest = migrate::latest_version();
    let (embedded, running, path, version) = match &ctx.database_url() {
        Some(url) => {
            let database = Database::locate(Some(url), &ctx.out)?;
            let mut client = database.connect()?;
            (false, true, database.describe.clone(), migrate::current_version(&mut client)?)
        }
        None => {
            let cluster = Cluster::locate()?;
            let state = cluster.state()?;
            let version = if state.running {
                let mut client = cluster.client_config().connect(postgres::NoTls).with_context(|| {
                    format!("connecting to the embedded cluster in {}", cluster.home_pg().display())
                })?;
                migrate::current_version(&mut client)?
            } else {
                None
            };
            (true, state.running, cluster.home_pg().display().to_string(), version)
        }
    };
    if ctx.out.json {
        ctx.out.json(&StatusDocument {
            embedded,
            running,
            location: &path,
            schema_version: version,
            latest_version: latest,
        })?;
    } else {
        ctx.out.table(
            &["database", "running", "schema", "wf needs"],
            vec![vec![
                path,
                running.to_string(),
                version.map_or("none".to_string(), |v| v.to_string()),
                latest.to_string(),
            ]],
        )?;
    }
    Ok(Exit::Ok)
}

fn migrate(ctx: &Ctx) -> CommandResult {
    let database = Database::locate(ctx.database_url().as_deref(), &ctx.out)?;
    let mut client = database.connect()?;
    let applied = migrate::apply(&mut client, &ctx.out)?;
    let version = migrate::current_version(&mut client)?;
    if ctx.out.json {
        ctx.out.json(&MigrateDocument { applied: &applied, schema_version: version })?;
    } else if applied.is_empty() {
        ctx.out.info(&format!("schema is up to date (version {})", version.unwrap_or(0)));
    }
    Ok(Exit::Ok)
}

/// `wf db up --json`: the embedded cluster runs, in `path`, at this schema version.
#[derive(Serialize)]
struct UpDocument<'a> {
    running: bool,
    path: &'a Path,
    schema_version: Option<i32>,
}

/// `wf db down --json`: whether it was running and was stopped.
#[derive(Serialize)]
struct DownDocument {
    stopped: bool,
}

#[derive(Serialize)]
struct StatusDocument<'a> {
    embedded: bool,
    running: bool,
    /// The embedded cluster's folder, or the external database's description.
    location: &'a str,
    /// None: no windforce schema.
    schema_version: Option<i32>,
    /// The version this wf needs.
    latest_version: i32,
}

#[derive(Serialize)]
struct MigrateDocument<'a> {
    /// The versions this call applied.
    applied: &'a [i32],
    schema_version: Option<i32>,
}
