//! `wf source add | list | rm`.

use serde_json::{Value, json};

use super::{CommandResult, Ctx};
use crate::cli::{SourceAddArgs, SourceCommand, SourceRmArgs};
use crate::config;
use crate::error::Exit;
use crate::output::{self, time_cell, time_json};
use crate::source::git_source::{self, GitSource};
use crate::source::{catalog, short_sha};

pub(super) fn run(ctx: &Ctx, command: SourceCommand) -> CommandResult {
    match command {
        SourceCommand::Add(args) => add(ctx, args),
        SourceCommand::List => list(ctx),
        SourceCommand::Rm(args) => rm(ctx, args),
    }
}

fn add(ctx: &Ctx, args: SourceAddArgs) -> CommandResult {
    let mut client = ctx.connect()?;
    let source = git_source::add(&mut client, &args.name, &args.url, args.branch.as_deref())?;
    if ctx.out.json {
        ctx.out.json(&json!({
            "id": source.id, "name": source.name, "url": source.url, "branch": source.branch,
        }))?;
    } else {
        ctx.out.line(&source.id.to_string())?;
        ctx.out.info(&format!("added source {} ({}); next: `wf sync {}`", source.name, source.url, source.name));
    }
    Ok(Exit::Ok)
}

fn list(ctx: &Ctx) -> CommandResult {
    let mut client = ctx.connect()?;
    let sources = git_source::list(&mut client)?;
    if ctx.out.json {
        ctx.out.json(&Value::Array(sources.iter().map(source_json).collect()))?;
    } else {
        let rows = sources
            .iter()
            .map(|s| {
                vec![
                    s.name.clone(),
                    s.url.clone(),
                    s.branch.clone().unwrap_or_else(|| "(remote HEAD)".to_string()),
                    s.commit_sha.as_deref().map_or("-".to_string(), |sha| short_sha(sha).to_string()),
                    time_cell(s.synced_at),
                ]
            })
            .collect();
        ctx.out.table(&["name", "url", "branch", "commit", "synced at"], rows)?;
    }
    Ok(Exit::Ok)
}

fn source_json(source: &GitSource) -> Value {
    json!({
        "id": source.id,
        "name": source.name,
        "url": source.url,
        "branch": source.branch,
        "commit_sha": source.commit_sha,
        "synced_at": time_json(source.synced_at),
    })
}

fn rm(ctx: &Ctx, args: SourceRmArgs) -> CommandResult {
    let mut client = ctx.connect()?;
    let source = git_source::find(&mut client, &args.name)?;
    let actions = catalog::list(&mut client, Some(&source.name))?.len();
    output::confirm(
        &format!("remove source {} ({}) and its {actions} action(s) from the catalog?", source.name, source.url),
        args.yes,
    )?;
    let removed = git_source::remove(&mut client, &args.name, &config::wf_home()?, &ctx.out)?;
    if ctx.out.json {
        ctx.out.json(&json!({
            "id": removed.source.id, "name": removed.source.name,
            "apps": removed.apps, "actions": removed.actions,
        }))?;
    } else {
        ctx.out.info(&format!(
            "removed source {} ({} app(s), {} action(s)); jobs already enqueued keep their pinned commit",
            removed.source.name, removed.apps, removed.actions
        ));
    }
    Ok(Exit::Ok)
}
