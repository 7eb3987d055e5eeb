//! The migrations runner: numbered SQL files from `migrations/`, applied in order, checksummed,
//! under an advisory lock so that any number of `wf` processes may migrate at once.

use anyhow::{Context, Result, bail};
use postgres::Client;
use sha2::{Digest, Sha256};

/// Every migration this wf knows, in order. Adding a file means adding a line here.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "0001_init.sql", include_str!("../../migrations/0001_init.sql")),
    (2, "0002_job_lookup_indexes.sql", include_str!("../../migrations/0002_job_lookup_indexes.sql")),
    (3, "0003_sandbox.sql", include_str!("../../migrations/0003_sandbox.sql")),
    (4, "0004_runtime_window.sql", include_str!("../../migrations/0004_runtime_window.sql")),
    (5, "0005_queue_vacuum.sql", include_str!("../../migrations/0005_queue_vacuum.sql")),
    (6, "0006_operators.sql", include_str!("../../migrations/0006_operators.sql")),
    (7, "0007_operations.sql", include_str!("../../migrations/0007_operations.sql")),
    (8, "0008_stored_sources.sql", include_str!("../../migrations/0008_stored_sources.sql")),
    (9, "0009_listing_per_commit.sql", include_str!("../../migrations/0009_listing_per_commit.sql")),
    (10, "0010_warm.sql", include_str!("../../migrations/0010_warm.sql")),
    (11, "0011_awaited.sql", include_str!("../../migrations/0011_awaited.sql")),
    (12, "0012_claim_index_only.sql", include_str!("../../migrations/0012_claim_index_only.sql")),
    (13, "0013_queue_without_job_key.sql", include_str!("../../migrations/0013_queue_without_job_key.sql")),
    (14, "0014_ping_in_queue_row.sql", include_str!("../../migrations/0014_ping_in_queue_row.sql")),
    (15, "0015_unsuccessful_index.sql", include_str!("../../migrations/0015_unsuccessful_index.sql")),
    (16, "0016_queue_created_at.sql", include_str!("../../migrations/0016_queue_created_at.sql")),
    (17, "0017_retry_of_index.sql", include_str!("../../migrations/0017_retry_of_index.sql")),
    (18, "0018_worker_key.sql", include_str!("../../migrations/0018_worker_key.sql")),
    (19, "0019_completed_releases.sql", include_str!("../../migrations/0019_completed_releases.sql")),
];

/// Key of the session advisory lock held while migrating.
const MIGRATE_LOCK: i64 = 0x7766_6d69_6772_6174; // "wfmigrat"

/// The schema version this wf needs.
pub fn latest_version() -> i32 {
    MIGRATIONS.last().map(|m| m.0).unwrap_or(0)
}

fn checksum(sql: &str) -> String {
    let digest = Sha256::digest(sql.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A migration that `apply` applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    pub version: i32,
    /// Its file in `migrations/`.
    pub name: &'static str,
}

/// Apply every pending migration; returns those applied by this call, in order.
pub fn apply(client: &mut Client) -> Result<Vec<Applied>> {
    client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATE_LOCK]).context("taking the migration lock")?;
    let result = apply_locked(client);
    let unlock = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATE_LOCK]);
    let applied = result?;
    unlock.context("releasing the migration lock")?;
    Ok(applied)
}

fn apply_locked(client: &mut Client) -> Result<Vec<Applied>> {
    // Made only when missing: on a database at this wf's version, a role without the right to
    // create tables (an application's) may run `wf db migrate` and is told there is nothing to do.
    let exists: bool = client.query_one("SELECT to_regclass('wf_migration') IS NOT NULL", &[])?.get(0);
    if !exists {
        client.batch_execute(
            "CREATE TABLE wf_migration (
             version     integer PRIMARY KEY,
             name        text NOT NULL,
             checksum    text NOT NULL,
             applied_at  timestamptz NOT NULL DEFAULT now()
         )",
        )?;
    }
    let applied = applied_migrations(client)?;
    verify_applied(&applied)?;
    let mut done = Vec::new();
    for &(version, name, sql) in MIGRATIONS {
        if applied.iter().any(|(v, _, _)| *v == version) {
            continue;
        }
        let mut tx = client.transaction()?;
        // A wait for its tables' locks is said by the lock watch of the connection.
        tx.batch_execute(sql).with_context(|| format!("applying migration {name}"))?;
        tx.execute(
            "INSERT INTO wf_migration (version, name, checksum) VALUES ($1, $2, $3)",
            &[&version, &name, &checksum(sql)],
        )?;
        tx.commit().with_context(|| format!("committing migration {name}"))?;
        done.push(Applied { version, name });
    }
    Ok(done)
}

fn applied_migrations(client: &mut Client) -> Result<Vec<(i32, String, String)>> {
    let rows = client.query("SELECT version, name, checksum FROM wf_migration ORDER BY version", &[])?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect())
}

fn verify_applied(applied: &[(i32, String, String)]) -> Result<()> {
    for (version, name, sum) in applied {
        match MIGRATIONS.iter().find(|m| m.0 == *version) {
            None => bail!(
                "the database schema is newer than this wf (it has migration {name}, this wf knows up to \
                 version {}): upgrade wf",
                latest_version()
            ),
            Some(&(_, _, sql)) if checksum(sql) != *sum => {
                bail!("migration {name} was changed after it was applied to this database (checksum mismatch)")
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The applied schema version, or None when the database has no windforce schema.
pub fn current_version(client: &mut Client) -> Result<Option<i32>> {
    let exists: bool = client.query_one("SELECT to_regclass('wf_migration') IS NOT NULL", &[])?.get(0);
    if !exists {
        return Ok(None);
    }
    let version: Option<i32> = client.query_one("SELECT max(version) FROM wf_migration", &[])?.get(0);
    Ok(version)
}

/// Refuse clearly when an external database is behind or ahead of this wf.
pub fn check_current(client: &mut Client) -> Result<()> {
    match mismatch(current_version(client)?) {
        Some(mismatch) => Err(mismatch),
        None => Ok(()),
    }
}

/// What is wrong with a schema at `version` (`current_version`) for this wf, if anything.
pub(crate) fn mismatch(version: Option<i32>) -> Option<anyhow::Error> {
    let latest = latest_version();
    match version {
        None => Some(anyhow::anyhow!("the database has no windforce schema: run `wf db migrate`")),
        Some(v) if v < latest => Some(anyhow::anyhow!(
            "the database schema is at version {v} and this wf needs version {latest}: run `wf db migrate`"
        )),
        Some(v) if v > latest => {
            Some(anyhow::anyhow!("the database schema is at version {v}, newer than this wf ({latest}): upgrade wf"))
        }
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::MIGRATIONS;

    /// A file added to `migrations/` without its line in MIGRATIONS would never be applied.
    #[test]
    fn the_list_is_every_file_of_migrations_in_order() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with(".sql"))
            .collect();
        files.sort();
        let listed: Vec<&str> = MIGRATIONS.iter().map(|&(_, name, _)| name).collect();
        assert_eq!(listed, files, "src/db/migrate.rs lists the files of migrations/");
        for (index, &(version, name, sql)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(usize::try_from(version).unwrap(), index + 1, "{name}: versions count up from 1");
            assert!(name.starts_with(&format!("{version:04}_")), "{name}: named after its version");
            assert_eq!(std::fs::read_to_string(dir.join(name)).unwrap(), sql, "{name}: included as it is");
        }
    }
}
