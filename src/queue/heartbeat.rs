//! Heartbeat: "I am alive and still running it", and the answer "it was canceled" or "it is no
//! longer yours".

use std::time::Duration;

use crate::db::Session;
use anyhow::Result;
use uuid::Uuid;

/// What one heartbeat learned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Beat {
    /// Still ours; keep running.
    Owned,
    /// Still ours, and an operator asked to cancel it.
    CancelRequested { by: String, reason: Option<String> },
    /// The job is no longer owned by this claim (reaped, or completed by someone else).
    Lost,
}

/// The heartbeat, one statement: the ping in the job's queue row is refreshed only while this claim
/// still owns the running job, and the cancel mark comes back; no row back means the job is no
/// longer this claim's. The row is locked while it is written, so a concurrent reaper pass skips it
/// rather than reaping a job whose worker is heartbeating right now. Parameters: job id, claim id,
/// the worker's window in seconds.
pub const HEARTBEAT_SQL: &str = "
UPDATE job_queue SET ping = now(), window_s = $3
 WHERE job_id = $1 AND worker = $2 AND running
RETURNING canceled_by, canceled_reason";

/// One heartbeat of `claim` for `job_id`.
pub(crate) fn heartbeat(session: &mut Session, job_id: Uuid, claim: &str, window: Duration) -> Result<Beat> {
    let row = session.query_opt(HEARTBEAT_SQL, &[&job_id, &claim, &window.as_secs_f64()])?;
    Ok(match row {
        None => Beat::Lost,
        Some(row) => match row.get::<_, Option<String>>(0) {
            None => Beat::Owned,
            Some(by) => Beat::CancelRequested { by, reason: row.get(1) },
        },
    })
}

/// The session that holds a lock on `job_id`'s queue row, described for a journal line; None when
/// no single session is found. The row's `xmax` is the id of the transaction that locked it, when
/// one did (several that share it leave a multixact, which names no session; so does a lock taken
/// in a subtransaction). Row locks are not in `pg_locks`.
pub(crate) fn held_by(session: &mut Session, job_id: Uuid) -> Result<Option<String>> {
    const HELD_BY: &str = concat!(
        "SELECT ",
        crate::db::session_described!("a"),
        " FROM job_queue q JOIN pg_stat_activity a ON a.backend_xid = q.xmax WHERE q.job_id = $1"
    );
    Ok(session.query_opt(HELD_BY, &[&job_id])?.map(|row| row.get(0)))
}
