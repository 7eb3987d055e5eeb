//! `wf actions [--source NAME]`: the catalog.

use serde_json::{Value, json};

use super::{CommandResult, Ctx};
use crate::cli::ActionsArgs;
use crate::error::Exit;
use crate::source::{catalog, git_source, short_sha};

pub(super) fn run(ctx: &Ctx, args: ActionsArgs) -> CommandResult {
    let mut client = ctx.connect()?;
    if let Some(name) = &args.source {
        git_source::find(&mut client, name)?;
    }
    let actions = catalog::list(&mut client, args.source.as_deref())?;
    if ctx.out.json {
        let document = actions
            .iter()
            .map(|a| {
                json!({
                    "app": a.app, "action": a.action, "tag": a.tag, "timeout": a.timeout_s,
                    "commit_sha": a.commit_sha, "source": a.source, "entrypoint": a.entrypoint,
                })
            })
            .collect();
        ctx.out.json(&Value::Array(document))?;
    } else {
        let rows = actions
            .iter()
            .map(|a| {
                vec![
                    a.app.clone(),
                    a.action.clone(),
                    a.tag.clone(),
                    format!("{}s", a.timeout_s),
                    short_sha(&a.commit_sha).to_string(),
                    a.source.clone(),
                ]
            })
            .collect();
        ctx.out.table(&["app", "action", "tag", "timeout", "commit", "source"], rows)?;
        if actions.is_empty() {
            ctx.out.info("the catalog is empty; add a source with `wf source add` and run `wf sync`");
        }
    }
    Ok(Exit::Ok)
}
