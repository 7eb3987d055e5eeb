//! `wf sync NAME [--ref REF | --commit SHA]`.

use serde::Serialize;

use super::progress::SourceBars;
use super::{CommandResult, Ctx};
use crate::cli::SyncArgs;
use crate::error::Exit;
use crate::source::git::Target;
use crate::source::{short_sha, sync};

pub(super) fn run(ctx: &Ctx, args: SyncArgs) -> CommandResult {
    let target = match (args.r#ref, args.commit) {
        (_, Some(commit)) => Target::Commit(commit),
        (Some(name), None) => Target::Ref(name),
        (None, None) => Target::Default,
    };
    // Before any thread is started: libgit2's settings are the process's.
    crate::source::git::bound_stalls()?;
    let mut client = ctx.connect()?;
    let bars = SourceBars::new(ctx.out);
    let store = ctx.config.store()?;
    let git = ctx.config.git();
    let places = sync::Places { home: ctx.config.home()?, store: &store, git: git.as_deref() };
    let report = sync::sync(&mut client, &args.name, &target, &places, &bars)?;
    let actions: Vec<SyncedAction> = report
        .manifest
        .apps
        .iter()
        .flat_map(|app| {
            app.actions.iter().map(move |a| SyncedAction {
                app: &app.key,
                action: &a.key,
                tag: &a.tag,
                timeout: a.timeout_s,
            })
        })
        .collect();
    // A sync may leave schedules without their action or with an input that no longer fits: said
    // now, rather than by the next tick.
    super::schedule::warn_broken(ctx, &mut client)?;
    if ctx.out.json {
        ctx.out.json(&SyncDocument {
            source: &report.source,
            commit_sha: &report.commit_sha,
            changed: report.changed,
            actions: &actions,
            removed: &report.removed,
        })?;
        return Ok(Exit::Ok);
    }
    let rows = actions
        .iter()
        .map(|a| vec![a.app.to_string(), a.action.to_string(), a.tag.to_string(), format!("{}s", a.timeout)])
        .collect();
    ctx.out.table(&["app", "action", "tag", "timeout"], rows)?;
    if let Some(reason) = &report.materialized.repaired {
        ctx.out.warn(&format!("{reason}; rewritten from commit {}", short_sha(&report.commit_sha)));
    }
    let stored = if report.materialized.written {
        format!("{} files written to {}", report.materialized.files, report.materialized.dir.display())
    } else {
        format!("already complete in {}", report.materialized.dir.display())
    };
    let in_database = if report.stored.already {
        "already in the database".to_string()
    } else {
        format!(
            "{} new blob(s), {} KiB, stored in the database",
            report.stored.blobs,
            report.stored.bytes.div_ceil(1024)
        )
    };
    let moved = match (&report.previous_commit, report.changed) {
        (_, false) => "catalog unchanged".to_string(),
        (Some(previous), true) => format!("catalog moved from {}", short_sha(previous)),
        (None, true) => "catalog created".to_string(),
    };
    if !report.removed.is_empty() {
        ctx.out.info(&format!("removed from the catalog: {}", report.removed.join(", ")));
    }
    ctx.out.info(&format!(
        "synced {} at {}: {} action(s), {moved}; {stored}; {in_database}",
        report.source,
        short_sha(&report.commit_sha),
        actions.len()
    ));
    Ok(Exit::Ok)
}

/// What a sync did (SPEC: `{"source","commit_sha","changed","actions"}`, and `removed`).
#[derive(Serialize)]
struct SyncDocument<'a> {
    source: &'a str,
    commit_sha: &'a str,
    /// The catalog moved to another commit.
    changed: bool,
    actions: &'a [SyncedAction<'a>],
    /// The source's actions the commit no longer has, gone from the catalog (APP/ACTION).
    removed: &'a [String],
}

/// An action of the synced commit.
#[derive(Serialize)]
struct SyncedAction<'a> {
    app: &'a str,
    action: &'a str,
    tag: &'a str,
    timeout: i32,
}
