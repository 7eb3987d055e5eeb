//! `wf actions [--source NAME]`: the catalog.

use serde::Serialize;

use super::{CommandResult, Ctx};
use crate::cli::ActionsArgs;
use crate::error::Exit;
use crate::source::catalog::{self, CatalogAction};
use crate::source::{git_source, short_sha};

pub(super) fn run(ctx: &Ctx, args: ActionsArgs) -> CommandResult {
    let mut client = ctx.connect()?;
    let source = args.source.as_deref().map(|name| git_source::find(&mut client, name)).transpose()?;
    let actions = catalog::list(&mut client, args.source.as_deref())?;
    if ctx.out.json {
        ctx.out.json(&actions.iter().map(ActionDocument::from).collect::<Vec<_>>())?;
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
        match source {
            _ if !actions.is_empty() => {}
            None => ctx.out.info("the catalog is empty; add a source with `wf source add` and run `wf sync`"),
            Some(source) if source.commit_sha.is_none() => {
                ctx.out.info(&format!("source {} has no actions: it was never synced (`wf sync {0}`)", source.name))
            }
            Some(source) => ctx.out.info(&format!("source {} has no actions: its manifest names none", source.name)),
        }
    }
    Ok(Exit::Ok)
}

/// One action of the catalog, as `--json` lists it.
#[derive(Serialize)]
struct ActionDocument<'a> {
    app: &'a str,
    action: &'a str,
    tag: &'a str,
    timeout: i32,
    commit_sha: &'a str,
    source: &'a str,
    entrypoint: &'a str,
}

impl<'a> From<&'a CatalogAction> for ActionDocument<'a> {
    fn from(action: &'a CatalogAction) -> ActionDocument<'a> {
        ActionDocument {
            app: &action.app,
            action: &action.action,
            tag: &action.tag,
            timeout: action.timeout_s,
            commit_sha: &action.commit_sha,
            source: &action.source,
            entrypoint: &action.entrypoint,
        }
    }
}
