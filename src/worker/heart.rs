//! The heartbeat of a slot's running attempt, on a thread of its own: "I am alive and still running
//! it", and the answers "it was canceled" and "it is no longer yours". The thread also writes the
//! attempt's logs while it runs.
//!
//! The slot lends its connection to the heart for the attempt and takes it back at the end. Every
//! decision about the attempt (its timeout, a cancel, the self-fence when heartbeats stop
//! succeeding) is made by the slot on its own monotonic clock from what the heart last learned, so
//! no database call, not even one that never returns (a frozen backend, a partition), can hold it
//! up. The heart gives each call up after two periods and makes the next on a new connection; one
//! still in flight when the attempt ends, past the slot's patience, leaves the heart behind, and
//! the slot starts another.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::connection::Connection;
use crate::db::failure::{Failure, classify, is_lock_held};
use crate::diag::diag;
use crate::queue::heartbeat::{self, Beat};
use crate::queue::logs::{self, LogLine};

/// What the heart learned that ends the attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Still ours, and an operator asked to cancel it.
    Canceled,
    /// The job is no longer owned by this claim (reaped, or completed by someone else).
    Lost,
}

/// What the slot reads at every turn of its watch.
#[derive(Debug, Clone)]
pub(super) struct Pulse {
    /// When the last heartbeat succeeded (the claim, before the first).
    pub last_ok: Instant,
    pub verdict: Option<Verdict>,
}

/// The attempt being beaten for.
struct Beating {
    job_id: Uuid,
    claim: String,
    attempt: i32,
    window: Duration,
    period: Duration,
    next_beat: Instant,
    /// Lines to write, oldest first.
    lines: Vec<LogLine>,
    /// Some lines could not be stored and were dropped (said once in the logs).
    dropped: bool,
    /// The slot is ending the attempt: no new round starts.
    ending: bool,
    pulse: Pulse,
}

#[derive(Default)]
struct State {
    beating: Option<Beating>,
    /// Lent by the slot; taken out by the thread while it makes a call.
    connection: Option<Connection>,
    /// The slot gave up on this heart: the thread ends as soon as it can.
    retired: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    /// The worker's name, for its lines.
    name: String,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pub(super) struct Heart {
    shared: Arc<Shared>,
    _thread: JoinHandle<()>,
}

impl Heart {
    /// The heart of the slot whose connection is named `name`, of worker `worker` (its lines say
    /// the worker's name, as the slot's own do).
    pub(super) fn start(name: &str, worker: &str) -> anyhow::Result<Heart> {
        let shared = Arc::new(Shared { state: Mutex::default(), changed: Condvar::new(), name: worker.to_string() });
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("heart {name}"))
            .spawn(move || beat(&thread_shared))
            .map_err(|error| anyhow::anyhow!("starting the heartbeat thread of {name}: {error}"))?;
        Ok(Heart { shared, _thread: thread })
    }

    /// Beat for this attempt, every `period`, on `connection`. The claim stamped the first ping, no
    /// earlier than `claimed_at`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn begin(
        &self,
        connection: Connection,
        job_id: Uuid,
        claim: &str,
        attempt: i32,
        window: Duration,
        period: Duration,
        claimed_at: Instant,
    ) {
        let now = Instant::now();
        let mut state = self.shared.lock();
        state.connection = Some(connection);
        state.beating = Some(Beating {
            job_id,
            claim: claim.to_string(),
            attempt,
            window,
            period,
            next_beat: now + period,
            lines: Vec::new(),
            dropped: false,
            ending: false,
            pulse: Pulse { last_ok: claimed_at, verdict: None },
        });
        self.shared.changed.notify_all();
    }

    pub(super) fn pulse(&self) -> Option<Pulse> {
        self.shared.lock().beating.as_ref().map(|beating| beating.pulse.clone())
    }

    /// Write these lines (after those given before) while the attempt runs.
    pub(super) fn write(&self, lines: Vec<LogLine>) {
        let mut state = self.shared.lock();
        if let Some(beating) = state.beating.as_mut() {
            beating.lines.extend(lines);
            self.shared.changed.notify_all();
        }
    }

    /// Stop beating. Gives back the connection and the lines not written, once the call in flight
    /// (if any) returned; a call that does not return within `patience` leaves the heart stuck:
    /// `Err` then carries the lines not written, and this heart must not be used again.
    pub(super) fn end(&self, patience: Duration) -> Result<(Connection, Vec<LogLine>), Vec<LogLine>> {
        let deadline = Instant::now() + patience;
        let mut state = self.shared.lock();
        if let Some(beating) = state.beating.as_mut() {
            beating.ending = true;
        }
        loop {
            // Lines of a round that failed for now are back in `beating` once its call returned.
            if let Some(connection) = state.connection.take() {
                let lines = state.beating.take().map(|beating| beating.lines).unwrap_or_default();
                return Ok((connection, lines));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                state.retired = true;
                return Err(state.beating.take().map(|beating| beating.lines).unwrap_or_default());
            }
            state = self.shared.changed.wait_timeout(state, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }
}

impl Drop for Heart {
    fn drop(&mut self) {
        self.shared.lock().retired = true;
        self.shared.changed.notify_all();
    }
}

/// One round of work for the thread.
struct Round {
    job_id: Uuid,
    claim: String,
    attempt: i32,
    window: Duration,
    period: Duration,
    beat: bool,
    lines: Vec<LogLine>,
}

fn beat(shared: &Shared) {
    // A failing heartbeat is said once, and its recovery once: the job whose heartbeat failure was
    // said (the next to succeed may be another job's).
    let mut reported: Option<Uuid> = None;
    // The job whose heartbeat was said to wait for another session's lock on its row.
    let mut held: Option<Uuid> = None;
    loop {
        let (round, mut connection) = {
            let mut state = shared.lock();
            loop {
                if state.retired {
                    return;
                }
                let now = Instant::now();
                let due = state
                    .beating
                    .as_ref()
                    .filter(|b| !b.ending)
                    .map(|b| (b.next_beat <= now, !b.lines.is_empty(), b.next_beat));
                match due {
                    Some((beat, lines, _)) if (beat || lines) && state.connection.is_some() => break,
                    Some((_, _, next)) => {
                        let left = next.saturating_duration_since(now).max(Duration::from_millis(1));
                        state = shared.changed.wait_timeout(state, left).unwrap_or_else(PoisonError::into_inner).0;
                    }
                    None => state = shared.changed.wait(state).unwrap_or_else(PoisonError::into_inner),
                }
            }
            let now = Instant::now();
            let beating = state.beating.as_mut().expect("checked above");
            let beat = beating.next_beat <= now;
            if beat {
                beating.next_beat = now + beating.period;
            }
            let round = Round {
                job_id: beating.job_id,
                claim: beating.claim.clone(),
                attempt: beating.attempt,
                window: beating.window,
                period: beating.period,
                beat,
                lines: std::mem::take(&mut beating.lines),
            };
            (round, state.connection.take().expect("checked above"))
        };

        // Each call is given up after two periods: a backend that stops answering (stopped, stuck
        // in the kernel) runs no timeout of the server's, and the heart would wait for it until the
        // slot stopped the job for want of a heartbeat. The next round makes a new connection.
        let patience = round.period * 2;
        let beaten = round.beat.then(|| {
            let started = Instant::now();
            let (job_id, claim, window) = (round.job_id, round.claim.clone(), round.window);
            let beat =
                connection.bounded(patience, move |session| heartbeat::heartbeat(session, job_id, &claim, window));
            (started, beat)
        });
        // The first time a held row stops the heartbeat, who holds it, for the journal (the
        // connection is free again: its wait ended).
        let holder = match &beaten {
            Some((_, Err(error))) if is_lock_held(error) && held != Some(round.job_id) => {
                let job_id = round.job_id;
                connection.bounded(patience, move |session| heartbeat::held_by(session, job_id)).ok().flatten()
            }
            _ => None,
        };
        // Shared with the call's thread, and taken back when the call failed for now.
        let lines = Arc::new(round.lines);
        let written = (!lines.is_empty()).then(|| {
            let (job_id, claim, attempt, sent) = (round.job_id, round.claim.clone(), round.attempt, Arc::clone(&lines));
            connection.bounded(patience, move |session| logs::append(session, job_id, &claim, attempt, &sent))
        });

        let mut state = shared.lock();
        if let Some(beating) = state.beating.as_mut().filter(|beating| beating.claim == round.claim) {
            match beaten {
                Some((_, Ok(Beat::Owned))) | None => {}
                Some((_, Ok(Beat::CancelRequested { .. }))) => beating.pulse.verdict = Some(Verdict::Canceled),
                Some((_, Ok(Beat::Lost))) => beating.pulse.verdict = Some(Verdict::Lost),
                // Another session holds the job's row (an operator's `SELECT ... FOR UPDATE` left
                // open): the database answers, and no reaper takes a row it cannot lock (SKIP
                // LOCKED). The attempt goes on, and the heartbeat waits again at once, so that it is
                // the first to have the row when the holder lets go, before any reaper.
                Some((started, Err(ref error))) if is_lock_held(error) => {
                    beating.pulse.last_ok = beating.pulse.last_ok.max(started);
                    beating.next_beat = Instant::now();
                    if held != Some(round.job_id) {
                        held = Some(round.job_id);
                        diag!(
                            "worker {}: the heartbeat of job {} waits for a lock another session{} holds on its \
                             row; the job goes on (no reaper can take it while it is held)",
                            shared.name,
                            round.job_id,
                            holder.as_ref().map(|holder| format!(", {holder},")).unwrap_or_default()
                        );
                    }
                }
                Some((_, Err(ref error))) => {
                    if reported.is_none() {
                        reported = Some(round.job_id);
                        diag!("worker {}: heartbeat of job {} failed: {error:#}; retrying", shared.name, round.job_id);
                    }
                    connection.reset_if_lost(error);
                }
            }
            // Counted from when the statement started: its ping is no older than that.
            if let Some((started, Ok(_))) = beaten {
                beating.pulse.last_ok = beating.pulse.last_ok.max(started);
                if held.take() == Some(round.job_id) {
                    diag!("worker {}: the heartbeat of job {} has its row again", shared.name, round.job_id);
                }
                match reported.take() {
                    Some(failed) if failed == round.job_id => {
                        diag!("worker {}: heartbeat of job {} succeeds again", shared.name, round.job_id)
                    }
                    Some(failed) => diag!(
                        "worker {}: heartbeats succeed again (job {failed}, whose heartbeat failed, ended meanwhile)",
                        shared.name
                    ),
                    None => {}
                }
            }
            match written {
                None | Some(Ok(_)) => {}
                Some(Err(error)) => {
                    connection.reset_if_lost(&error);
                    match classify(&error) {
                        // Tried again with the next round, before the newer lines.
                        Failure::Transient => {
                            let unwritten = Arc::try_unwrap(lines).unwrap_or_else(|shared| shared.as_ref().clone());
                            let newer = std::mem::replace(&mut beating.lines, unwritten);
                            beating.lines.extend(newer);
                        }
                        // The same lines would fail the same way every time: dropped, said once.
                        Failure::Data | Failure::Other if !beating.dropped => {
                            beating.dropped = true;
                            beating.lines.insert(0, logs::refused_note(&error));
                        }
                        Failure::Data | Failure::Other => {}
                    }
                }
            }
        } else if let Some((_, Err(error))) = &beaten {
            connection.reset_if_lost(error);
        }
        state.connection = Some(connection);
        shared.changed.notify_all();
    }
}
