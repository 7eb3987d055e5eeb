//! `wf db up | down | status | migrate`.

use std::path::Path;

use serde::Serialize;

use super::{CommandResult, Ctx};
use crate::cli::DbCommand;
use crate::db::embedded::Cluster;
use crate::db::{Database, migrate};
use crate::error::Exit;
use crate::worker::registry::{self, WorkerView};

pub(super) fn run(ctx: &Ctx, command: DbCommand) -> CommandResult {
    match command {
        DbCommand::Up => up(ctx),
        DbCommand::Down => down(ctx),
        DbCommand::Status => status(ctx),
        DbCommand::Migrate => migrate(ctx),
    }
}

fn up(ctx: &Ctx) -> CommandResult {
    ctx.cluster()?.lift_down()?;
    let cluster = ctx.embedded_up()?;
    let database = ctx.prepare(Database::embedded(&cluster))?;
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
    let cluster = ctx.cluster()?;
    if cluster.state()?.running
        && let Some(busy) = live_workers(&cluster)
    {
        ctx.out.warn(&busy);
    }
    let stopped = cluster.stop()?;
    if ctx.out.json {
        ctx.out.json(&DownDocument { stopped })?;
    } else if stopped {
        ctx.out.info("embedded cluster stopped");
    } else {
        ctx.out.info("embedded cluster was not running");
    }
    if ctx.database_url().is_some() {
        ctx.out.info("note: DATABASE_URL is set: this was the embedded cluster, not that database");
    }
    Ok(Exit::Ok)
}

/// What stopping the cluster does to the workers live on it, if any: said before it stops. Only
/// advice, so a cluster that cannot say (not migrated yet, say) says nothing.
fn live_workers(cluster: &Cluster) -> Option<String> {
    let mut client = cluster.connect().ok()?;
    let live: Vec<WorkerView> = registry::list(&mut client).ok()?.into_iter().filter(|worker| worker.live).collect();
    if live.is_empty() {
        return None;
    }
    let names: Vec<&str> = live.iter().map(|worker| worker.name.as_str()).collect();
    let running: usize = live.iter().map(|worker| worker.jobs.len()).sum();
    Some(format!(
        "stopping the cluster under {} live worker(s) ({}) running {running} job(s): they wait for it \
         to be up again (`wf db up`), and a job whose worker cannot heartbeat for its zombie window is \
         stopped and left to the reaper",
        live.len(),
        names.join(", ")
    ))
}

fn status(ctx: &Ctx) -> CommandResult {
    let latest = migrate::latest_version();
    let (embedded, created, running, held_down, path, version, tls) = match ctx.database_url() {
        Some(url) => {
            let database = Database::external(url)?;
            let mut client = database.connect()?;
            let tls = database.tls_of(&mut client)?;
            (false, true, true, false, database.describe.clone(), migrate::current_version(&mut client)?, tls)
        }
        None => {
            let cluster = ctx.cluster()?;
            let state = cluster.state()?;
            let version = if state.running { migrate::current_version(&mut cluster.connect()?)? } else { None };
            let path = cluster.home_pg().display().to_string();
            (true, state.initialized, state.running, state.held_down, path, version, None)
        }
    };
    if ctx.out.json {
        ctx.out.json(&StatusDocument {
            embedded,
            created,
            running,
            held_down,
            location: &path,
            schema_version: version,
            latest_version: latest,
            tls: tls.as_ref().map(|(version, checked)| TlsDocument { version, checked }),
        })?;
    } else {
        ctx.out.table(
            &["database", "state", "schema", "wf needs", "tls"],
            vec![vec![
                path,
                match (created, running, held_down) {
                    (_, true, _) => "running",
                    (true, false, true) => "stopped (wf db down)",
                    (true, false, false) => "stopped",
                    (false, false, _) => "not created",
                }
                .to_string(),
                version.map_or("none".to_string(), |v| v.to_string()),
                latest.to_string(),
                tls.map_or("none".to_string(), |(version, checked)| format!("{version}, checked: {checked}")),
            ]],
        )?;
    }
    Ok(Exit::Ok)
}

fn migrate(ctx: &Ctx) -> CommandResult {
    let mut client = ctx.locate()?.connect()?;
    let applied = migrate::apply(&mut client)?;
    ctx.say_applied(&applied);
    let version = migrate::current_version(&mut client)?;
    if ctx.out.json {
        let applied: Vec<i32> = applied.iter().map(|migration| migration.version).collect();
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
    /// The embedded cluster exists (an external database always does).
    created: bool,
    running: bool,
    /// Stopped by `wf db down`: no command but `wf db up` starts it.
    held_down: bool,
    /// The embedded cluster's folder, or the external database's description.
    location: &'a str,
    /// None: no windforce schema.
    schema_version: Option<i32>,
    /// The version this wf needs.
    latest_version: i32,
    /// None: the connection is not encrypted (a Unix socket, sslmode=disable, or a server that
    /// offers no TLS to sslmode=prefer).
    tls: Option<TlsDocument<'a>>,
}

/// The TLS of `wf db status`'s connection: its protocol and how far the server's certificate was
/// checked (`none`, `verify-ca`, `verify-full`).
#[derive(Serialize)]
struct TlsDocument<'a> {
    version: &'a str,
    checked: &'a str,
}

#[derive(Serialize)]
struct MigrateDocument<'a> {
    /// The versions this call applied.
    applied: &'a [i32],
    schema_version: Option<i32>,
}
