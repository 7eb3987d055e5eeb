//! The catalog (`app` and `action` rows): what can be enqueued now. A sync replaces a source's
//! part of it in one transaction, after the commit is complete in the store.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use postgres::{GenericClient, Transaction};
use uuid::Uuid;

use super::git_source::GitSource;
use super::manifest::Manifest;

/// One action as the catalog shows it.
#[derive(Debug, Clone)]
pub(crate) struct CatalogAction {
    pub app: String,
    pub action: String,
    pub tag: String,
    pub timeout_s: i32,
    pub commit_sha: String,
    pub source: String,
    pub entrypoint: String,
}

/// Apps owned by sources other than `git_source_id`: app key -> owning source's name. A sync must
/// not take them over.
pub(crate) fn apps_of_other_sources(
    client: &mut impl GenericClient,
    git_source_id: Uuid,
) -> Result<BTreeMap<String, String>> {
    let rows = client
        .query(
            "SELECT app.app_key, git_source.name FROM app JOIN git_source ON git_source.id = app.git_source_id
             WHERE app.git_source_id <> $1",
            &[&git_source_id],
        )
        .context("reading the apps of other sources")?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// Replace `source`'s part of the catalog with `manifest` at `commit_sha`, in one transaction:
/// upsert its apps and actions, delete the ones the manifest no longer has, and move the source's
/// commit. `expected` is the commit the caller checked the no-going-back rule against; the
/// transaction refuses to proceed if the source moved meanwhile. Returns the actions deleted, as
/// APP/ACTION, in order.
pub(crate) fn replace(
    tx: &mut Transaction<'_>,
    source: &GitSource,
    expected: Option<&str>,
    commit_sha: &str,
    manifest: &Manifest,
) -> Result<Vec<String>> {
    let current = tx
        .query_opt("SELECT commit_sha FROM git_source WHERE id = $1 FOR UPDATE", &[&source.id])?
        .with_context(|| format!("source {} was removed while it was syncing", source.name))?;
    let current: Option<String> = current.get(0);
    if current.as_deref() != expected {
        bail!(
            "source {} moved to commit {} while this sync ran; run `wf sync {}` again",
            source.name,
            current.as_deref().unwrap_or("(none)"),
            source.name
        );
    }

    let mut app_keys = Vec::new();
    let mut action_apps = Vec::new();
    let mut action_keys = Vec::new();
    for app in &manifest.apps {
        // The ownership check again, where it cannot race: a row of another source is not updated
        // and so not returned.
        let owned = tx.query_opt(
            "INSERT INTO app (app_key, git_source_id, tag) VALUES ($1, $2, $3)
             ON CONFLICT (app_key) DO UPDATE SET tag = EXCLUDED.tag
             WHERE app.git_source_id = EXCLUDED.git_source_id
             RETURNING app_key",
            &[&app.key, &source.id, &app.tag],
        )?;
        if owned.is_none() {
            bail!("the app {} now belongs to another source; an app belongs to one source (see `wf actions`)", app.key);
        }
        app_keys.push(app.key.clone());
        for action in &app.actions {
            tx.execute(
                "INSERT INTO action (app_key, action_key, git_source_id, commit_sha, entrypoint,
                                     input_schema, output_schema, timeout_s, tag,
                                     network, memory_mb, max_processes,
                                     retry_max, retry_backoff_s, retry_max_backoff_s, warm)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
                 ON CONFLICT (app_key, action_key) DO UPDATE SET
                     git_source_id = EXCLUDED.git_source_id, commit_sha = EXCLUDED.commit_sha,
                     entrypoint = EXCLUDED.entrypoint, input_schema = EXCLUDED.input_schema,
                     output_schema = EXCLUDED.output_schema, timeout_s = EXCLUDED.timeout_s,
                     tag = EXCLUDED.tag, network = EXCLUDED.network, memory_mb = EXCLUDED.memory_mb,
                     max_processes = EXCLUDED.max_processes, retry_max = EXCLUDED.retry_max,
                     retry_backoff_s = EXCLUDED.retry_backoff_s,
                     retry_max_backoff_s = EXCLUDED.retry_max_backoff_s, warm = EXCLUDED.warm,
                     updated_at = now()",
                &[
                    &app.key,
                    &action.key,
                    &source.id,
                    &commit_sha,
                    &action.entrypoint,
                    &action.input_schema,
                    &action.output_schema,
                    &action.timeout_s,
                    &action.tag,
                    &action.sandbox.network,
                    &action.sandbox.memory_mb,
                    &action.sandbox.max_processes,
                    &action.retries.map(|retries| retries.max),
                    &action.retries.map(|retries| retries.backoff_s),
                    &action.retries.map(|retries| retries.max_backoff_s),
                    &action.warm,
                ],
            )?;
            action_apps.push(app.key.clone());
            action_keys.push(action.key.clone());
        }
    }
    let deleted = tx.query(
        "DELETE FROM action WHERE git_source_id = $1
           AND (app_key, action_key) NOT IN (SELECT * FROM unnest($2::text[], $3::text[]))
         RETURNING app_key || '/' || action_key",
        &[&source.id, &action_apps, &action_keys],
    )?;
    tx.execute("DELETE FROM app WHERE git_source_id = $1 AND app_key <> ALL($2)", &[&source.id, &app_keys])?;
    tx.execute("UPDATE git_source SET commit_sha = $2, synced_at = now() WHERE id = $1", &[&source.id, &commit_sha])?;
    let mut deleted: Vec<String> = deleted.iter().map(|row| row.get(0)).collect();
    deleted.sort();
    Ok(deleted)
}

/// The catalog, by app and action; only `source`'s actions when given.
pub(crate) fn list(client: &mut impl GenericClient, source: Option<&str>) -> Result<Vec<CatalogAction>> {
    let rows = client
        .query(
            "SELECT action.app_key, action.action_key, action.tag, action.timeout_s, action.commit_sha,
                    git_source.name, action.entrypoint
             FROM action JOIN git_source ON git_source.id = action.git_source_id
             WHERE $1::text IS NULL OR git_source.name = $1
             ORDER BY action.app_key, action.action_key",
            &[&source],
        )
        .context("reading the catalog")?;
    Ok(rows
        .iter()
        .map(|row| CatalogAction {
            app: row.get(0),
            action: row.get(1),
            tag: row.get(2),
            timeout_s: row.get(3),
            commit_sha: row.get(4),
            source: row.get(5),
            entrypoint: row.get(6),
        })
        .collect())
}

/// What to say of an action the catalog does not have: the names closest to it, if any is close
/// (a typo, a wrong app), and where the catalog is listed.
pub(crate) fn unknown_action(client: &mut impl GenericClient, app: &str, action: &str) -> Result<String> {
    let wanted = format!("{app}/{action}");
    let names: Vec<String> =
        client.query("SELECT app_key || '/' || action_key FROM action", &[])?.iter().map(|row| row.get(0)).collect();
    Ok(format!("unknown action {wanted}{}: `wf actions` lists the catalog", closest(&wanted, names)))
}

/// For a filter of jobs by app and action that matched none: what to say when the catalog has no
/// such app or action either (a typo, most likely: jobs of an app no longer in the catalog are
/// found all the same), with the closest names.
pub(crate) fn not_in_catalog(
    client: &mut impl GenericClient,
    app: Option<&str>,
    action: Option<&str>,
) -> Result<Option<String>> {
    let (what, wanted, names) = match (app, action) {
        (Some(app), Some(action)) => ("action", format!("{app}/{action}"), "app_key || '/' || action_key"),
        (Some(app), None) => ("app", app.to_string(), "app_key"),
        (None, Some(action)) => ("action", action.to_string(), "action_key"),
        (None, None) => return Ok(None),
    };
    let names: Vec<String> =
        client.query(&format!("SELECT DISTINCT {names} FROM action"), &[])?.iter().map(|row| row.get(0)).collect();
    if names.contains(&wanted) {
        return Ok(None);
    }
    Ok(Some(format!("the catalog has no {what} {wanted}{}", closest(&wanted, names))))
}

/// For a filter of jobs by tag that matched none: what to say when no action of the catalog has
/// the tag and no job has had it, with the closest tags of the catalog. One query: the catalog is
/// small, and the jobs are indexed by tag.
pub(crate) fn unknown_tag(client: &mut impl GenericClient, tag: Option<&str>) -> Result<Option<String>> {
    let Some(tag) = tag else { return Ok(None) };
    let row = client.query_one(
        "SELECT EXISTS (SELECT 1 FROM job WHERE tag = $1), ARRAY(SELECT DISTINCT tag FROM action)",
        &[&tag],
    )?;
    let (used, tags): (bool, Vec<String>) = (row.get(0), row.get(1));
    if used || tags.iter().any(|known| known == tag) {
        return Ok(None);
    }
    Ok(Some(format!("no action in the catalog has the tag {tag}, nor any job{}", closest(tag, tags))))
}

/// What a listing or cancel that matched nothing adds to its "no jobs": each hint found, after "; ".
pub(crate) fn hints(found: impl IntoIterator<Item = Option<String>>) -> String {
    found.into_iter().flatten().map(|hint| format!("; {hint}")).collect()
}

/// " (did you mean NAME?)" for the names close to `wanted` (at most 3), or nothing.
pub(crate) fn closest(wanted: &str, names: Vec<String>) -> String {
    let mut close: Vec<(usize, String)> = names
        .into_iter()
        .map(|name| (distance(wanted, &name), name))
        // Not a name the edits would make up anew (`t` for `zz`).
        .filter(|(d, name)| {
            *d <= (name.chars().count() / 3).max(2) && *d < name.chars().count().min(wanted.chars().count())
        })
        .collect();
    close.sort();
    match close.as_slice() {
        [] => String::new(),
        [(_, one)] => format!(" (did you mean {one}?)"),
        more => {
            let names: Vec<&str> = more.iter().take(3).map(|(_, name)| name.as_str()).collect();
            format!(" (did you mean one of {}?)", names.join(", "))
        }
    }
}

/// Edits (insertions, deletions, substitutions) from `a` to `b`.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::distance;

    #[test]
    fn distance_counts_edits() {
        assert_eq!(distance("t/echo", "t/echo"), 0);
        assert_eq!(distance("t/ecoh", "t/echo"), 2);
        assert_eq!(distance("t/ech", "t/echo"), 1);
        assert_eq!(distance("", "abc"), 3);
    }
}
