//! The registered git sources (`git_source` rows): add, list, find, remove.

use std::path::Path;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use postgres::{Client, GenericClient, Row};
use uuid::Uuid;

use super::git::{is_scp_like, mirror_path};
use super::lock::with_source_lock;
use super::{KEY_PATTERN, Progress, is_valid_key};

/// One registered repository. `commit_sha` is the commit the catalog currently shows.
#[derive(Debug, Clone)]
pub(crate) struct GitSource {
    pub id: Uuid,
    pub name: String,
    pub url: String,
    pub branch: Option<String>,
    pub commit_sha: Option<String>,
    pub synced_at: Option<DateTime<Utc>>,
}

const COLUMNS: &str = "id, name, url, branch, commit_sha, synced_at";

impl GitSource {
    fn from_row(row: &Row) -> GitSource {
        GitSource {
            id: row.get("id"),
            name: row.get("name"),
            url: row.get("url"),
            branch: row.get("branch"),
            commit_sha: row.get("commit_sha"),
            synced_at: row.get("synced_at"),
        }
    }
}

/// What `remove` took out of the catalog.
#[derive(Debug, Clone)]
pub(crate) struct Removed {
    pub source: GitSource,
    pub apps: i64,
    pub actions: i64,
}

/// Register a source under a new id, at `url` as given (an operator's goes through
/// `normalize_url` first). A name already taken is refused.
pub(crate) fn add(client: &mut impl GenericClient, name: &str, url: &str, branch: Option<&str>) -> Result<GitSource> {
    if !is_valid_key(name) {
        bail!("source name {name:?} must match {KEY_PATTERN}");
    }
    if let Some(branch) = branch
        && !git2::Reference::is_valid_name(&format!("refs/heads/{branch}"))
    {
        bail!("--branch {branch:?} is not a valid branch name");
    }
    let id = Uuid::new_v4();
    let row = client
        .query_opt(
            &format!(
                "INSERT INTO git_source (id, name, url, branch) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (name) DO NOTHING RETURNING {COLUMNS}"
            ),
            &[&id, &name, &url, &branch],
        )
        .with_context(|| format!("registering source {name}"))?;
    match row {
        Some(row) => Ok(GitSource::from_row(&row)),
        None => {
            let existing = find(client, name)?;
            bail!(
                "a source named {name} already exists (url {}); pick another name, or remove it first \
                 with `wf source rm {name}`",
                shown_url(&existing.url)
            )
        }
    }
}

/// Every source, by name.
pub(crate) fn list(client: &mut impl GenericClient) -> Result<Vec<GitSource>> {
    let rows =
        client.query(&format!("SELECT {COLUMNS} FROM git_source ORDER BY name"), &[]).context("listing sources")?;
    Ok(rows.iter().map(GitSource::from_row).collect())
}

/// The source named `name`, or an error that says how to find the right name.
pub(crate) fn find(client: &mut impl GenericClient, name: &str) -> Result<GitSource> {
    let row = client
        .query_opt(&format!("SELECT {COLUMNS} FROM git_source WHERE name = $1"), &[&name])
        .with_context(|| format!("looking up source {name}"))?;
    match row {
        Some(row) => Ok(GitSource::from_row(&row)),
        None => bail!("no source named {name}; `wf source list` shows the registered ones"),
    }
}

/// Delete a source's row; its apps and actions go with it (ON DELETE CASCADE). How many rows went.
pub(crate) fn delete(client: &mut impl GenericClient, id: Uuid) -> Result<u64> {
    Ok(client.execute("DELETE FROM git_source WHERE id = $1", &[&id])?)
}

/// Remove a source and its catalog rows (apps and actions cascade), under the source's sync lock so
/// that no sync of it is half-way, then its mirror. Jobs are not touched: they carry everything they
/// need pinned on their own rows, and the store keeps the trees that queued jobs may still run.
pub(crate) fn remove(client: &mut Client, name: &str, home: &Path, progress: &dyn Progress) -> Result<Removed> {
    let source = find(client, name)?;
    let removed = with_source_lock(client, source.id, name, progress, |client| {
        let mut tx = client.transaction()?;
        let counts = tx.query_one(
            "SELECT (SELECT count(*) FROM app WHERE git_source_id = $1),
                    (SELECT count(*) FROM action WHERE git_source_id = $1)",
            &[&source.id],
        )?;
        let deleted = delete(&mut tx, source.id)?;
        if deleted == 0 {
            bail!("source {name} was removed by another process meanwhile");
        }
        tx.commit()?;
        Ok(Removed { source: source.clone(), apps: counts.get(0), actions: counts.get(1) })
    })
    .with_context(|| format!("removing source {name}"))?;
    let mirror = mirror_path(home, source.id);
    if mirror.exists() {
        std::fs::remove_dir_all(&mirror).with_context(|| {
            format!("source {name} is removed, but its mirror {} could not be deleted", mirror.display())
        })?;
    }
    Ok(removed)
}

/// The schemes git fetches over.
const SCHEMES: [&str; 7] = ["https", "http", "ssh", "git", "git+ssh", "ssh+git", "file"];

/// A source's URL as wf prints it: a password in it as `***`, and over http(s) a user without one
/// too (a token given as the user name). git is given the URL as stored; what wf says, and its
/// `--json`, never holds the secret.
pub(crate) fn shown_url(url: &str) -> std::borrow::Cow<'_, str> {
    let Some((scheme, rest)) = url.split_once("://") else { return url.into() };
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let Some(at) = authority.rfind('@') else { return url.into() };
    let user = match authority[..at].split_once(':') {
        Some((name, _)) => format!("{name}:***"),
        None if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") => "***".to_string(),
        None => return url.into(),
    };
    format!("{scheme}://{user}{}", &rest[at..]).into()
}

/// A URL is kept as is once it names a host (or, with file://, a local repository); an scp-like
/// `host:path` as is; anything else is a local path, stored absolute so that a sync from another
/// directory finds the same repository. What is refused here would only fail at the first sync.
pub(crate) fn normalize_url(url: &str) -> Result<String> {
    if url.is_empty() {
        bail!("the source URL is empty");
    }
    if let Some((scheme, rest)) = url.split_once("://") {
        let scheme = scheme.to_ascii_lowercase();
        if !SCHEMES.contains(&scheme.as_str()) {
            bail!(
                "{url}: git does not fetch over {scheme}://; give an https://, ssh://, git:// or file:// URL, or a path"
            );
        }
        if scheme == "file" {
            let path = rest.strip_prefix("localhost").unwrap_or(rest);
            if !path.starts_with('/') {
                bail!("{url}: a file:// URL names an absolute path on this machine (file:///srv/repo.git)");
            }
            // Escaped characters are git's to read.
            if !path.contains('%') {
                open_repository(Path::new(path))?;
            }
        } else if host(rest).is_empty() {
            bail!("{url} names no host; give a URL such as https://git.example.com/team/repo.git");
        }
        return Ok(url.to_string());
    }
    if is_scp_like(url) {
        return Ok(url.to_string());
    }
    let path = Path::new(url);
    let absolute = path.canonicalize().with_context(|| {
        format!("{url} is not a URL and not an existing local path; give a URL (https://, ssh://, file://) or the path of a git repository")
    })?;
    open_repository(&absolute)?;
    absolute.to_str().map(str::to_string).with_context(|| format!("the path {} is not valid UTF-8", absolute.display()))
}

/// The host of a URL's part after `scheme://`: without its user and port.
fn host(rest: &str) -> &str {
    let authority = rest.split('/').next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => host.split(':').next().unwrap_or_default(),
    }
}

/// Refuse a folder that is not a git repository as a fetch finds one: that folder itself (or its
/// `.git`), never a repository above it.
fn open_repository(path: &Path) -> Result<()> {
    let flags = git2::RepositoryOpenFlags::NO_SEARCH;
    match git2::Repository::open_ext(path, flags, std::iter::empty::<&std::ffi::OsStr>()) {
        Ok(_) => Ok(()),
        Err(error) if error.code() == git2::ErrorCode::NotFound => bail!(
            "{} is not a git repository (nor its .git); give the path of a git repository, or a URL",
            path.display()
        ),
        // One there that cannot be opened (its owner, its permissions, damage): git's own words.
        Err(error) => bail!("{} cannot be opened as a git repository: {}", path.display(), error.message()),
    }
}

#[cfg(test)]
mod tests {
    use super::shown_url;

    #[test]
    fn a_secret_in_a_url_is_never_shown() {
        for (url, shown) in [
            ("https://user:s3cr3t@git.example.com/x.git", "https://user:***@git.example.com/x.git"),
            ("https://ghp_token@github.com/o/r.git", "https://***@github.com/o/r.git"),
            ("HTTP://a:b:c@host:8080/p@q", "HTTP://a:***@host:8080/p@q"),
            ("ssh://git@host/repo.git", "ssh://git@host/repo.git"),
            ("ssh://git:pw@host/repo.git", "ssh://git:***@host/repo.git"),
            ("git@host:repo.git", "git@host:repo.git"),
            ("https://git.example.com/a@b.git", "https://git.example.com/a@b.git"),
            ("/srv/repo", "/srv/repo"),
        ] {
            assert_eq!(shown_url(url), shown, "{url}");
        }
    }
}
