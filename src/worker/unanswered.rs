//! Claims whose answer never came. A claim statement given up (its backend stopped answering) or
//! cut off with its connection may still commit, or may have committed before the answer was lost:
//! the jobs it took are held by claim ids no slot runs, and without a heartbeat they would wait for
//! a reaper and count as a restart, never having run. The worker remembers such claim ids for two
//! zombie windows (by then a reaper has put back what they hold) and puts what they hold back in the
//! queue itself, unstarted: a slot before its next claim, the registry thread at every beat.

use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Shared;
use super::connection::Connection;
use crate::diag::diag;
use crate::queue::release;

/// Remember the claim ids of a claim whose answer never came.
pub(super) fn remember(shared: &Shared, claims: &[String]) {
    let until = Instant::now() + shared.options.zombie_timeout * 2;
    let mut unanswered = shared.unanswered.lock().unwrap_or_else(PoisonError::into_inner);
    unanswered.extend(claims.iter().map(|claim| (claim.clone(), until)));
}

/// Put back in the queue what the remembered claims hold, if anything, waiting at most `patience`
/// for the database. A claim found holding nothing is kept (its statement may commit yet), until
/// its time is up; a failure is left for the next call.
pub(super) fn put_back(shared: &Shared, connection: &mut Connection, patience: Duration) {
    let claims: Vec<String> = {
        let mut unanswered = shared.unanswered.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        unanswered.retain(|(_, until)| *until > now);
        unanswered.iter().map(|(claim, _)| claim.clone()).collect()
    };
    if claims.is_empty() {
        return;
    }
    match connection.bounded(patience, move |session| release::release_unanswered(session.client(), &claims)) {
        Ok(released) => {
            let mut unanswered = shared.unanswered.lock().unwrap_or_else(PoisonError::into_inner);
            for (job, claim) in released {
                unanswered.retain(|(held, _)| *held != claim);
                shared.released.fetch_add(1, Ordering::SeqCst);
                diag!(
                    "worker {}: job {job}: {}: put back in the queue, unstarted",
                    shared.options.name,
                    release::Why::Unanswered.said()
                );
            }
        }
        Err(error) => connection.reset_if_lost(&error),
    }
}
