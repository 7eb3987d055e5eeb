//! The per-source sync lock: a session-level advisory lock, so that concurrent syncs (and removal)
//! of one source run one after the other. It is tied to the connection: a sync that dies releases
//! it with its session.

use anyhow::{Context, Result};
use postgres::Client;
use uuid::Uuid;

use super::Progress;

/// The first key of the two-key advisory lock space, reserved for source locks ("wfsy").
const SOURCE_LOCK_CLASS: i32 = 0x7766_7379;

/// The second key: the source id folded to 32 bits. Two sources that share it only wait for each
/// other; they are never wrong.
fn lock_key(git_source_id: Uuid) -> i32 {
    let bits = git_source_id.as_u128();
    let folded = (bits ^ (bits >> 32) ^ (bits >> 64) ^ (bits >> 96)) as u32;
    folded as i32
}

/// Run `body` holding the lock of source `name`, waiting for it if another process holds it.
pub(crate) fn with_source_lock<T>(
    client: &mut Client,
    git_source_id: Uuid,
    name: &str,
    progress: &dyn Progress,
    body: impl FnOnce(&mut Client) -> Result<T>,
) -> Result<T> {
    let key = lock_key(git_source_id);
    let taken: bool = client
        .query_one("SELECT pg_try_advisory_lock($1, $2)", &[&SOURCE_LOCK_CLASS, &key])
        .with_context(|| format!("taking the lock of source {name}"))?
        .get(0);
    if !taken {
        progress.waiting_for_lock(name);
        let waited = client
            .execute("SELECT pg_advisory_lock($1, $2)", &[&SOURCE_LOCK_CLASS, &key])
            .with_context(|| format!("waiting for the lock of source {name}"));
        progress.lock_taken();
        waited?;
    }
    let result = body(client);
    let unlocked = client.execute("SELECT pg_advisory_unlock($1, $2)", &[&SOURCE_LOCK_CLASS, &key]);
    let value = result?;
    unlocked.with_context(|| format!("releasing the lock of source {name}"))?;
    Ok(value)
}
