//! The queue spine of the seed page, one file per concept. Every statement here is a named,
//! readable unit next to the Rust that runs it.

pub(crate) mod cancel;
pub mod claim;
pub(crate) mod complete;
pub(crate) mod enqueue;
pub(crate) mod heartbeat;
pub(crate) mod inspect;
pub(crate) mod logs;
pub(crate) mod prune;
pub(crate) mod reaper;

/// Channel notified when jobs become claimable (enqueue, requeue); the payload is the tag.
pub const CHANNEL_ENQUEUED: &str = "wf_enqueued";
/// Channel notified when a job completes; the payload is the job id.
pub const CHANNEL_COMPLETED: &str = "wf_completed";

/// Whether an error means the connection is gone (as opposed to a statement that failed).
pub fn is_connection_error(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| match cause.downcast_ref::<postgres::Error>() {
        Some(pg) => pg.is_closed() || pg.as_db_error().is_none_or(|db| is_admin_shutdown(db.code())),
        None => cause.downcast_ref::<std::io::Error>().is_some(),
    })
}

fn is_admin_shutdown(code: &postgres::error::SqlState) -> bool {
    use postgres::error::SqlState;
    [SqlState::ADMIN_SHUTDOWN, SqlState::CRASH_SHUTDOWN, SqlState::CANNOT_CONNECT_NOW].contains(code)
}
