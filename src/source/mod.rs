//! Git sources of actions, from repository to catalog (seed: "Source first, catalog after").
//!
//! The data flows one way through these rooms:
//! `git_source` (the registered repositories) -> `git` (a bare mirror, a resolved commit) ->
//! `manifest` (windforce.json and its schemas, read from the commit's tree) -> `store` (the tree
//! materialized, the marker written last) -> `catalog` (one transaction). `sync` runs them in that
//! order, and only in that order, under a per-source `lock`.

pub(crate) mod catalog;
pub(crate) mod git;
pub(crate) mod git_source;
pub(crate) mod lock;
pub(crate) mod manifest;
pub mod store;
pub(crate) mod stored;
pub(crate) mod sync;

pub use stored::unpinned_sql;

/// What a sync, or a source's removal, tells its caller while it works: the command draws it
/// (spinners, a progress bar, notes); the library draws nothing.
pub(crate) trait Progress {
    /// Another sync or removal of `source` holds its lock: this one waits for it.
    fn waiting_for_lock(&self, source: &str);
    /// The wait for the lock is over.
    fn lock_taken(&self);
    /// Fetching `url` into the mirror: `received` of `total` objects (0 of 0 at the start).
    fn fetching(&self, url: &str, received: usize, total: usize);
    fn fetched(&self);
    /// A ref of `source`'s mirror that names no commit was dropped from it.
    fn dropped_ref(&self, source: &str, reference: &str);
    /// Whether `commit` is older than the catalog's `current` could not be told: neither this
    /// host's mirror nor the remote has `current` any more.
    fn unchecked_ancestry(&self, source: &str, current: &str, commit: &str);
    /// Writing `commit`'s tree into the store: `done` of `total` files.
    fn materializing(&self, commit: &str, done: usize, total: usize);
    fn materialized(&self);
    /// Storing `commit`'s tree in the database: `done` of `total` bytes of blobs it lacked.
    fn storing(&self, commit: &str, done: u64, total: u64);
    fn stored(&self);
}

/// The rule for app keys, action keys, tags and source names.
pub const KEY_PATTERN: &str = "^[a-z0-9][a-z0-9_-]{0,62}$";

/// Does `key` match [`KEY_PATTERN`]?
pub fn is_valid_key(key: &str) -> bool {
    let bytes = key.as_bytes();
    match bytes.first() {
        Some(first) if first.is_ascii_lowercase() || first.is_ascii_digit() => {}
        _ => return false,
    }
    bytes.len() <= 63
        && bytes[1..].iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-')
}

/// A tag given outside the manifest (`--tag` of enqueue and schedules) follows the manifest's rule
/// for tags. It is also the payload of the enqueue notification, which must stay short.
pub(crate) fn check_tag(tag: &str) -> anyhow::Result<()> {
    if !is_valid_key(tag) {
        let shown: String = tag.chars().take(64).collect();
        let cut = if shown.len() < tag.len() { "..." } else { "" };
        anyhow::bail!("tag {shown:?}{cut} must match {KEY_PATTERN}, the manifest's rule for tags");
    }
    Ok(())
}

/// The first 12 characters of a commit id, for humans.
pub fn short_sha(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::is_valid_key;

    #[test]
    fn keys_follow_the_manifest_rule() {
        for good in ["a", "0", "billing", "a-b_c", "x".repeat(63).as_str()] {
            assert!(is_valid_key(good), "{good}");
        }
        for bad in ["", "-a", "_a", "Billing", "a.b", "a b", "x".repeat(64).as_str(), "é"] {
            assert!(!is_valid_key(bad), "{bad}");
        }
    }
}
