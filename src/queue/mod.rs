//! The queue spine of the seed page, one file per concept. Every statement here is a named,
//! readable unit next to the Rust that runs it.

pub(crate) mod cancel;
pub mod claim;
pub mod complete;
pub(crate) mod enqueue;
pub mod heartbeat;
pub mod inspect;
pub mod job;
pub mod logs;
pub mod overlap;
pub mod prune;
pub mod reaper;
pub(crate) mod release;
pub(crate) mod retry;

/// Channel notified when jobs become claimable (enqueue, requeue); the payload is the tag.
pub const CHANNEL_ENQUEUED: &str = "wf_enqueued";
/// Channel notified when a job completes; the payload is the job id.
pub const CHANNEL_COMPLETED: &str = "wf_completed";
