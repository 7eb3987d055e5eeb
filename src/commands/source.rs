//! `wf source add | list | rm`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::progress::SourceBars;
use super::{CommandResult, Ctx};
use crate::cli::{SourceAddArgs, SourceCommand, SourceRmArgs};
use crate::error::Exit;
use crate::output::{self, rfc3339_or_null, time_cell};
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
    let url = git_source::normalize_url(&args.url)?;
    let mut client = ctx.connect()?;
    let source = git_source::add(&mut client, &args.name, &url, args.branch.as_deref())?;
    if ctx.out.json {
        ctx.out.json(&AddedDocument {
            id: source.id,
            name: &source.name,
            url: &git_source::shown_url(&source.url),
            branch: source.branch.as_deref(),
        })?;
    } else {
        ctx.out.line(&source.id.to_string())?;
        let url = git_source::shown_url(&source.url);
        ctx.out.info(&format!("added source {} ({url}); next: `wf sync {}`", source.name, source.name));
    }
    Ok(Exit::Ok)
}

fn list(ctx: &Ctx) -> CommandResult {
    let mut client = ctx.connect()?;
    let sources = git_source::list(&mut client)?;
    if ctx.out.json {
        ctx.out.json(&sources.iter().map(SourceDocument::from).collect::<Vec<_>>())?;
    } else {
        let rows = sources
            .iter()
            .map(|s| {
                vec![
                    s.name.clone(),
                    git_source::shown_url(&s.url).into_owned(),
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

fn rm(ctx: &Ctx, args: SourceRmArgs) -> CommandResult {
    let mut client = ctx.connect()?;
    let source = git_source::find(&mut client, &args.name)?;
    let actions = catalog::list(&mut client, Some(&source.name))?.len();
    output::confirm(
        &format!(
            "remove source {} ({}) and its {actions} action(s) from the catalog?",
            source.name,
            git_source::shown_url(&source.url)
        ),
        args.yes,
    )?;
    let bars = SourceBars::new(ctx.out);
    let removed = git_source::remove(&mut client, &args.name, ctx.config.home()?, &bars)?;
    // Its actions are gone: the schedules of them are said, as a sync says them.
    super::schedule::warn_broken(ctx, &mut client)?;
    if ctx.out.json {
        ctx.out.json(&RemovedDocument {
            id: removed.source.id,
            name: &removed.source.name,
            apps: removed.apps,
            actions: removed.actions,
        })?;
    } else {
        ctx.out.info(&format!(
            "removed source {} ({} app(s), {} action(s)); jobs already enqueued keep their pinned commit",
            removed.source.name, removed.apps, removed.actions
        ));
    }
    Ok(Exit::Ok)
}

/// A source as `add` registered it.
#[derive(Serialize)]
struct AddedDocument<'a> {
    id: Uuid,
    name: &'a str,
    url: &'a str,
    branch: Option<&'a str>,
}

/// A source as `list` shows it: with the commit the catalog shows, and when it was synced.
#[derive(Serialize)]
struct SourceDocument<'a> {
    id: Uuid,
    name: &'a str,
    url: std::borrow::Cow<'a, str>,
    branch: Option<&'a str>,
    commit_sha: Option<&'a str>,
    #[serde(serialize_with = "rfc3339_or_null")]
    synced_at: Option<DateTime<Utc>>,
}

impl<'a> From<&'a GitSource> for SourceDocument<'a> {
    fn from(source: &'a GitSource) -> SourceDocument<'a> {
        SourceDocument {
            id: source.id,
            name: &source.name,
            url: git_source::shown_url(&source.url),
            branch: source.branch.as_deref(),
            commit_sha: source.commit_sha.as_deref(),
            synced_at: source.synced_at,
        }
    }
}

/// What `rm` took out of the catalog.
#[derive(Serialize)]
struct RemovedDocument<'a> {
    id: Uuid,
    name: &'a str,
    apps: i64,
    actions: i64,
}
