//! `wf sync NAME [--ref REF | --commit SHA]`.

use serde_json::{Value, json};

use super::{CommandResult, Ctx};
use crate::cli::SyncArgs;
use crate::config;
use crate::error::Exit;
use crate::source::git::Target;
use crate::source::{short_sha, sync};

pub(super) fn run(ctx: &Ctx, args: SyncArgs) -> CommandResult {
    let target = match (args.r#ref, args.commit) {
        (_, Some(commit)) => Target::Commit(commit),
        (Some(name), None) => Target::Ref(name),
        (None, None) => Target::Default,
    };
    let mut client = ctx.connect()?;
    let report = sync::sync(&mut client, &args.name, &target, &config::wf_home()?, &config::wf_store()?, &ctx.out)?;
    let actions: Vec<(&str, &str, &str, i32)> = report
        .manifest
        .apps
        .iter()
        .flat_map(|app| {
            app.actions.iter().map(move |a| (app.key.as_str(), a.key.as_str(), a.tag.as_str(), a.timeout_s))
        })
        .collect();
    if ctx.out.json {
        let actions: Vec<Value> = actions
            .iter()
            .map(|(app, action, tag, timeout)| json!({"app": app, "action": action, "tag": tag, "timeout": timeout}))
            .collect();
        ctx.out.json(&json!({
            "source": report.source, "commit_sha": report.commit_sha,
            "changed": report.changed, "actions": actions,
        }))?;
        return Ok(Exit::Ok);
    }
    let rows = actions
        .iter()
        .map(|(app, action, tag, timeout)| {
            vec![app.to_string(), action.to_string(), tag.to_string(), format!("{timeout}s")]
        })
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
    let moved = match (&report.previous_commit, report.changed) {
        (_, false) => "catalog unchanged".to_string(),
        (Some(previous), true) => format!("catalog moved from {}", short_sha(previous)),
        (None, true) => "catalog created".to_string(),
    };
    ctx.out.info(&format!(
        "synced {} at {}: {} action(s), {moved}; {stored}",
        report.source,
        short_sha(&report.commit_sha),
        actions.len()
    ));
    Ok(Exit::Ok)
}
