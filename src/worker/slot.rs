//! One worker slot: claim, run, complete; one job at a time on its own connection, which it lends to
//! the attempt's heart (heartbeats and logs) while the action runs.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::Value;
use uuid::Uuid;

use super::connection::Connection;
use super::events::{JobEvent, job_event};
use super::heart::{Heart, Verdict};
use super::unanswered;
use super::{Handed, Isolation, Shared, Until};
use crate::db::failure::{Failure, classify, is_connection_lost, is_lock_held, sqlstate};
use crate::diag::diag;
use crate::queue::claim::{self, Claimed};
use crate::queue::complete::{self, Completion, Recorded};
use crate::queue::heartbeat::{self, Beat};
use crate::queue::job::{JobError, JobStatus};
use crate::queue::logs::{self, LogBuffer, LogLine};
use crate::queue::release::{Released, Why};
use crate::queue::{overlap, release, retry};
use crate::runner::{self, Event, Limits, MAX_RESULT_BYTES, Outcome, Running, SandboxOptions, Stream};
use crate::source::{store, stored};
use crate::token;

/// How often buffered log lines are handed to the heart while a job runs.
const LOG_FLUSH_PERIOD: Duration = Duration::from_secs(1);
const LOG_FLUSH_LINES: usize = 500;
/// Backoff after a failed database call: doubling from the first to the last.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_LAST: Duration = Duration::from_secs(5);
/// How many zombie windows a slot keeps retrying a completion the database refuses while its
/// heartbeats still land (see `record_completion`); after that the job is left to the reaper.
const COMPLETION_HOLD_WINDOWS: u32 = 10;

/// A slot's database connection and the heart it lends it to, and the warm runner it keeps.
struct Link {
    connection: Connection,
    heart: Heart,
    name: String,
    warm: Option<Warm>,
    /// The job the completion of the last one claimed for this slot: the slot runs it next.
    next: Option<Handed>,
}

impl Link {
    fn new(shared: &Shared, index: u32) -> Result<Link> {
        let name = format!("wf work {} slot {index}", shared.options.name);
        Ok(Link {
            connection: Connection::new(&shared.database, &name, shared.options.heartbeat),
            heart: Heart::start(&name, &shared.options.name)?,
            name,
            warm: None,
            next: None,
        })
    }

    /// The slot is done: its warm runner, if any, ends (see `Running::close`).
    fn end(self) {
        if let Some(warm) = self.warm {
            warm.running.close();
        }
    }
}

/// A warm runner (`"warm": true`) and what its jobs share: it runs the next job only when that
/// job's action, commit and sandbox settings are the same.
struct Warm {
    key: WarmKey,
    running: Running,
    /// Since its last job ended; it ends once idle for `idle_limit`: what a job left running in it
    /// (a detached process, a timer) outlives its job by that much at most.
    idle_since: Instant,
    idle_limit: Duration,
    /// It ran a job before the current one: what that job left running may end it before it takes
    /// the current one (a fresh runner that ends so could not start, and its job fails).
    reused: bool,
}

/// The least a warm runner is kept idle: its action's timeout, or this when shorter.
const WARM_IDLE_LEAST: Duration = Duration::from_secs(10);

impl Warm {
    /// How long the runner may still wait for its next job.
    fn idle_left(&self) -> Duration {
        self.idle_limit.saturating_sub(self.idle_since.elapsed())
    }
}

#[derive(PartialEq)]
struct WarmKey {
    app: String,
    action: String,
    tree: PathBuf,
    entrypoint: String,
    isolation: runner::Isolation,
}

/// The attempt a job runs as.
enum Attempt {
    /// Its own bun, started for it.
    Cold(Running),
    /// A job handed to a warm runner.
    Warm(Warm),
}

impl Attempt {
    fn running(&mut self) -> &mut Running {
        match self {
            Attempt::Cold(running) => running,
            Attempt::Warm(warm) => &mut warm.running,
        }
    }
}

/// A slot's failures to reach the database, said once for all the worker's slots, their end once:
/// a database outage is two lines from the slots, not one per retry nor one per slot.
struct Trouble<'s> {
    shared: &'s Shared,
    failing: bool,
    backoff: Duration,
}

impl<'s> Trouble<'s> {
    fn new(shared: &'s Shared) -> Trouble<'s> {
        Trouble { shared, failing: false, backoff: Duration::ZERO }
    }

    /// Say the failure (when no other slot is failing), drop a lost connection, and back off.
    fn failed(&mut self, connection: &mut Connection, error: &anyhow::Error, what: &str) {
        self.failed_waiting_at_most(connection, error, what, BACKOFF_LAST);
    }

    /// `failed`, waiting no longer than `most` (a slot that must beat for its job meanwhile).
    fn failed_waiting_at_most(
        &mut self,
        connection: &mut Connection,
        error: &anyhow::Error,
        what: &str,
        most: Duration,
    ) {
        if !self.failing {
            self.failing = true;
            let mut troubled = self.shared.slots_in_trouble.lock().unwrap_or_else(PoisonError::into_inner);
            troubled.0 += 1;
            if troubled.0 == 1 {
                troubled.1 = Some(Instant::now());
                diag!("worker {}: {what} failed: {error:#}; retrying", self.shared.options.name);
            }
        }
        connection.reset_if_lost(error);
        // Kept within `most` itself, so that the next wait without that bound doubles from there
        // (a slot that stops holding a job waits a window at most, not its backoff's full length).
        self.backoff = (self.backoff * 2).clamp(BACKOFF_FIRST, BACKOFF_LAST).min(most.max(BACKOFF_FIRST));
        std::thread::sleep(self.backoff);
    }

    /// Say the end of the failures (when this was the last slot failing).
    fn recovered(&mut self) {
        if std::mem::take(&mut self.failing) {
            let mut troubled = self.shared.slots_in_trouble.lock().unwrap_or_else(PoisonError::into_inner);
            troubled.0 -= 1;
            if let Some(since) = troubled.1.filter(|_| troubled.0 == 0) {
                troubled.1 = None;
                diag!(
                    "worker {}: the database answers again (after {:.1} s)",
                    self.shared.options.name,
                    since.elapsed().as_secs_f64()
                );
            }
        }
        self.backoff = Duration::ZERO;
    }
}

/// Given up while failing (a completion or a release left to the reaper): no longer counted, and
/// nothing said, since nothing answered.
impl Drop for Trouble<'_> {
    fn drop(&mut self) {
        if self.failing {
            let mut troubled = self.shared.slots_in_trouble.lock().unwrap_or_else(PoisonError::into_inner);
            troubled.0 -= 1;
            if troubled.0 == 0 {
                troubled.1 = None;
            }
        }
    }
}

/// A fresh claim id: the worker's id and 12 random hex digits.
fn new_claim(shared: &Shared) -> String {
    format!("{}.{}", shared.worker_id, &Uuid::new_v4().simple().to_string()[..12])
}

/// Claim ids for a claim: one for this slot, then one for each waiting slot whose ticket it takes
/// (that slot then waits for the job this claim hands it, see `deliver`), each with its job taken
/// from the budget; empty when the budget is spent.
fn reserve_claims(shared: &Shared) -> Vec<String> {
    let mut claims = Vec::new();
    if !shared.reserve() {
        return claims;
    }
    claims.push(new_claim(shared));
    while shared.take_ticket() {
        if !shared.reserve() {
            shared.give_tickets(1);
            break;
        }
        claims.push(new_claim(shared));
    }
    claims
}

/// The jobs claimed with `claims` (`reserve_claims`): the first is this slot's; the others go to the
/// slots whose tickets the claim took, and a ticket no job came for goes back. Every job is run at
/// once by a slot that waits for it: none waits in the worker without a heartbeat.
fn deliver(shared: &Shared, jobs: Vec<Claimed>, claims: usize, claimed_at: Instant) -> Option<Handed> {
    let promised = claims.saturating_sub(1);
    for _ in jobs.len()..claims {
        shared.unreserve();
    }
    let mut jobs = jobs.into_iter();
    let mine = jobs.next().map(|job| Handed { job, claimed_at });
    let handed = shared.hand(jobs, claimed_at);
    shared.give_tickets(promised - handed);
    if promised > 0 {
        shared.wake.bump();
    }
    mine
}

/// A claim that failed: its budget and the tickets it took are given back.
fn undeliver(shared: &Shared, claims: usize) {
    for _ in 0..claims {
        shared.unreserve();
    }
    if claims > 1 {
        shared.give_tickets(claims - 1);
        shared.wake.bump();
    }
}

/// How long a slot whose ticket a claim took waits between two looks for its job (the claim wakes
/// it first when it hands the job or gives the ticket back).
const PROMISE_POLL: Duration = Duration::from_millis(100);

/// The job a claim took this slot's ticket for; none when the ticket came back (the claim got fewer
/// jobs than it asked for, or failed) or the worker is stopping (a job handed then goes back to
/// the queue: `release_handed`, by this slot or the one that claimed it).
fn promised(shared: &Shared) -> Option<Handed> {
    loop {
        let epoch = shared.wake.epoch();
        if shared.stopping.load(Ordering::SeqCst) {
            return None;
        }
        if let Some(handed) = shared.take_handed() {
            return Some(handed);
        }
        if shared.take_ticket() {
            return None;
        }
        shared.wake.wait_past(epoch, PROMISE_POLL);
    }
}

pub(super) fn run(shared: &Shared, index: u32) -> Result<()> {
    let mut link = Link::new(shared, index)?;
    let mut trouble = Trouble::new(shared);
    loop {
        if shared.stopping.load(Ordering::SeqCst) {
            if let Some(next) = link.next.take() {
                release(
                    shared,
                    &mut link.connection,
                    &next.job,
                    next.claimed_at,
                    LogBuffer::default(),
                    Why::ShutdownUnstarted,
                );
            }
            release_handed(shared, &mut link.connection);
            link.end();
            return Ok(());
        }
        // Also between jobs of other actions run back to back: an idle runner (and what its jobs
        // left running) ended only once the slot waited for work.
        if link.warm.as_ref().is_some_and(|warm| warm.idle_left().is_zero())
            && let Some(warm) = link.warm.take()
        {
            warm.running.close();
        }
        if let Some(next) = link.next.take() {
            link = run_job(shared, link, next.job, next.claimed_at)?;
            continue;
        }
        unanswered::put_back(shared, &mut link.connection, look_patience(shared));
        // One claim for this slot, and one for each slot waiting idle: up to k jobs in one statement.
        let claims: Arc<[String]> = reserve_claims(shared).into();
        if claims.is_empty() {
            link.end();
            return Ok(());
        }
        // Read before the look: a job enqueued between the look and the wait moves it.
        let epoch = shared.wake.epoch();
        // The claim stamps the pings no earlier than this: the self-fence counts from here.
        let claimed_at = Instant::now();
        let reserved = claims.len();
        let (tags, window, sent) = (shared.options.tags.clone(), shared.options.zombie_timeout, Arc::clone(&claims));
        let claimed =
            link.connection.bounded(look_patience(shared), move |session| claim::claim(session, &tags, &sent, window));
        match claimed {
            Ok(jobs) if !jobs.is_empty() => {
                trouble.recovered();
                if crate::fault::at("claim-late") {
                    std::thread::sleep(Duration::from_secs(2));
                }
                let mine = deliver(shared, jobs, reserved, claimed_at).expect("not empty");
                if shared.stopping.load(Ordering::SeqCst) {
                    // Claimed as the worker began to stop: back to the queue at once, with the jobs
                    // claimed for other slots, which do not start them either (`promised`).
                    release(
                        shared,
                        &mut link.connection,
                        &mine.job,
                        mine.claimed_at,
                        LogBuffer::default(),
                        Why::ShutdownUnstarted,
                    );
                    release_handed(shared, &mut link.connection);
                    continue;
                }
                link = run_job(shared, link, mine.job, mine.claimed_at)?;
            }
            Ok(_) => {
                deliver(shared, Vec::new(), reserved, claimed_at);
                let tags = shared.options.tags.clone();
                let next =
                    link.connection.bounded(look_patience(shared), move |session| claim::next_due_in(session, &tags));
                match next {
                    Ok(next) => {
                        trouble.recovered();
                        if shared.options.until == Until::Drained && next.is_none_or(|s| s > 0.0) {
                            link.end();
                            return Ok(());
                        }
                        if next.is_some_and(|s| s <= 0.0) {
                            // Due jobs exist but were locked by other claimers this instant.
                            std::thread::sleep(Duration::from_millis(5));
                            continue;
                        }
                        let mut wait = shared.options.poll;
                        if let Some(seconds) = next {
                            wait = wait.min(Duration::from_secs_f64(seconds.max(0.0)));
                        }
                        if let Some(warm) = &link.warm {
                            wait = wait.min(warm.idle_left());
                        }
                        if !shared.stopping.load(Ordering::SeqCst) {
                            // A ticket: a claim of another slot may take it, and claim a job for this one.
                            shared.give_tickets(1);
                            shared.wake.wait_past(epoch, wait);
                            if !shared.take_ticket()
                                && let Some(handed) = promised(shared)
                            {
                                link = run_job(shared, link, handed.job, handed.claimed_at)?;
                            }
                        }
                    }
                    Err(error) => {
                        if bounded_run_cannot_claim(shared, &error) {
                            shared.stop_for(error.context("looking at the queue"));
                            continue;
                        }
                        trouble.failed(&mut link.connection, &error, "looking at the queue")
                    }
                }
            }
            Err(error) => {
                undeliver(shared, reserved);
                if is_connection_lost(&error) {
                    unanswered::remember(shared, &claims);
                }
                if bounded_run_cannot_claim(shared, &error) {
                    shared.stop_for(error.context("claiming"));
                    continue;
                }
                trouble.failed(&mut link.connection, &error, "claiming");
            }
        }
        if shared.budget_spent() && link.next.is_none() && shared.nothing_handed() {
            link.end();
            return Ok(());
        }
    }
}

/// Whether a claim's `error` ends a worker that stops on its own (`--drain`, `--once`,
/// `--max-jobs`): one refused for good (a permission the role lacks, a table missing) fails the
/// same way at every try, and such a run would never end. Anything else may be an outage, waited
/// out. A worker that runs until stopped says it once and tries again meanwhile, as in an outage
/// (the operator may grant what is missing).
fn bounded_run_cannot_claim(shared: &Shared, error: &anyhow::Error) -> bool {
    shared.options.until != Until::Stopped && crate::db::failure::is_refused_for_good(error)
}

/// Jobs claimed for slots that will not run them (the worker is stopping) go back to the queue at
/// once, as a clean shutdown puts back a running job.
fn release_handed(shared: &Shared, connection: &mut Connection) {
    while let Some(handed) = shared.take_handed() {
        release(shared, connection, &handed.job, handed.claimed_at, LogBuffer::default(), Why::ShutdownUnstarted);
    }
}

/// How an attempt ended, as its completion records it: status, result, error.
type Ending = (JobStatus, Option<Value>, Option<Value>);

/// Why the worker stopped a job's process tree before it finished.
#[derive(Debug, Clone, PartialEq)]
enum StopReason {
    Canceled,
    TimedOut,
    /// Ownership lost (reaped, or no heartbeat succeeded for too long): record nothing.
    Lost,
    /// The worker is shutting down and the grace is over: put the job back in the queue.
    Shutdown,
}

impl StopReason {
    /// As the worker's journal says it.
    fn word(&self) -> &'static str {
        match self {
            StopReason::Canceled => "cancel",
            StopReason::TimedOut => "timeout",
            StopReason::Lost => "lost",
            StopReason::Shutdown => "shutdown",
        }
    }
}

/// Run one claimed job to its completion; returns the link for the next (a new one when the
/// heart got stuck in a database call).
fn run_job(shared: &Shared, mut link: Link, job: Claimed, claimed: Instant) -> Result<Link> {
    let name = &shared.options.name;
    job_event(shared, &job, JobEvent::Claimed);
    if job.no_overlap {
        let (id, claim) = (job.id, job.claim.clone());
        let skipped = link
            .connection
            .bounded(look_patience(shared), move |session| overlap::skip_if_overlapping(session, id, &claim));
        match skipped {
            Ok(Some(reason)) => {
                let mut logs = LogBuffer::default();
                logs.note(reason);
                record(shared, &mut link.connection, &job, claimed, (JobStatus::Canceled, None, None), logs);
                return Ok(link);
            }
            Ok(None) => {}
            // The job runs: an overlap it could not rule out is less harm than a fire time lost.
            Err(error) => {
                diag!("worker {name}: checking whether job {} overlaps an earlier run failed: {error:#}", job.id)
            }
        }
    }
    let tree = store::commit_dir(&shared.store, job.git_source_id, &job.commit_sha);
    if let Err(error) = prepare(shared, &job, &tree) {
        if database_trouble(&error) {
            // The database could not give the tree now: another attempt, maybe on another host,
            // will, rather than a failure of a job that never ran.
            let mut logs = LogBuffer::default();
            logs.note(format!("materializing commit {} failed: {error:#}", job.commit_sha));
            release(shared, &mut link.connection, &job, claimed, logs, Why::CannotStart(BACKOFF_LAST));
            return Ok(link);
        }
        let error = JobError::new("SourceNotMaterialized", format!("commit {}: {error:#}", job.commit_sha));
        record(
            shared,
            &mut link.connection,
            &job,
            claimed,
            (JobStatus::Failure, None, Some(error.to_value())),
            LogBuffer::default(),
        );
        return Ok(link);
    }
    // The claim stamped the job's ping; a start long after it (a commit written from the database
    // first, a completion that waited for a row) beats once before: a job the reaper took back
    // meanwhile must not start beside its next attempt, nor a job asked to cancel start at all.
    let claim_answered = claimed;
    let mut claimed = claimed;
    if crate::fault::at("start-late") {
        std::thread::sleep(shared.options.zombie_timeout * 2);
    }
    if claimed.elapsed() >= shared.options.heartbeat {
        let beaten = Instant::now();
        let window = shared.options.zombie_timeout;
        let beat = |connection: &mut Connection| {
            let (id, claim) = (job.id, job.claim.clone());
            connection.bounded(look_patience(shared), move |session| heartbeat::heartbeat(session, id, &claim, window))
        };
        // A connection the server closed while the slot waited is found closed only now: once more
        // on a new one.
        let beat = match beat(&mut link.connection) {
            Err(error) if is_connection_lost(&error) => {
                link.connection.reset();
                beat(&mut link.connection)
            }
            beat => beat,
        };
        match beat {
            Ok(Beat::Owned) => claimed = beaten,
            Ok(Beat::CancelRequested { .. }) => {
                let ending = (JobStatus::Canceled, None, None);
                record(shared, &mut link.connection, &job, claimed, ending, LogBuffer::default());
                return Ok(link);
            }
            Ok(Beat::Lost) => {
                diag!("worker {name}: job {} is no longer ours (reaped?) before it started: not started", job.id);
                shared.fenced.fetch_add(1, Ordering::SeqCst);
                return Ok(link);
            }
            // Whether it is still ours is unknown: a start could run it beside its next attempt.
            Err(error) => {
                link.connection.reset_if_lost(&error);
                diag!(
                    "worker {name}: job {} could not be confirmed ours before its late start ({error:#}): not \
                     started, left to the reaper",
                    job.id
                );
                return Ok(link);
            }
        }
    }
    // Counted from the start, by the database's clock as of the claim: a start that came late (a
    // large commit copied from the database first) runs its whole timeout, and so does its token.
    let start = job.started_at + chrono::Duration::from_std(claim_answered.elapsed()).unwrap_or_default();
    let claims = token::Claims::for_claim(job.id, &job.claim, start, job.timeout_s);
    let mut env = vec![
        ("WF_JOB_ID".to_string(), job.id.to_string()),
        ("WF_TOKEN".to_string(), token::issue(&shared.secret, &claims)),
        ("WF_APP".to_string(), job.app.clone()),
        ("WF_ACTION".to_string(), job.action.clone()),
        ("WF_COMMIT_SHA".to_string(), job.commit_sha.clone()),
        ("WF_TRIGGER_KIND".to_string(), job.trigger_kind.clone()),
        ("WF_SCHEDULED_FOR".to_string(), job.scheduled_for.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        ("WF_ATTEMPT".to_string(), job.attempt().to_string()),
    ];
    let started = if job.warm {
        // The worker's inherited variables are the runner's from its start, under the sandbox's
        // PATH and HOME: a job's request brings only its own.
        hand_to_warm(shared, link.warm.take(), &job, tree, env).map(Attempt::Warm)
    } else {
        env.extend(shared.options.local.inherited_env.iter().cloned());
        let mut spec =
            runner::Spec::new(&shared.scratch, &job.id, job.attempt(), tree, &job.entrypoint, job.input.clone(), env);
        spec.bun = shared.bun.clone();
        spec.wf_exe = shared.supervisor.path();
        spec.isolation = isolation_of(&shared.options.isolation, &job);
        spec.fence = Some(self_fence(shared));
        Running::start(spec).map(Attempt::Cold)
    };
    let mut attempt = match started {
        Ok(attempt) => attempt,
        Err(error) => {
            let error = JobError::new("StartError", format!("{error:#}"));
            let ending = (JobStatus::Failure, None, Some(error.to_value()));
            record(shared, &mut link.connection, &job, claimed, ending, LogBuffer::default());
            return Ok(link);
        }
    };

    // A warm job took the slot's runner; a cold one leaves it waiting for its action's next job.
    // The slot's next job, if any, was taken before this one started.
    let Link { connection, heart, name: link_name, warm: idle, next: _ } = link;
    let period = shared.options.heartbeat;
    heart.begin(connection, job.id, &job.claim, job.attempt(), shared.options.zombie_timeout, period, claimed);
    let mut logs = LogBuffer::default();
    let stop = watch(shared, &job, attempt.running(), &heart, &mut logs);
    // A warm runner kept from an earlier job that ended unstopped before it took this one (what
    // that job left running ended it: a timer's process.exit) never ran it: the job goes back to
    // the queue, unstarted, for a fresh runner. Not so a fresh runner: one that cannot start would
    // have its job put back again and again.
    let mut untaken = false;
    let (outcome, warm) = match attempt {
        Attempt::Cold(running) => (running.finish(), idle),
        // A warm runner that settled its job unstopped is kept for the next; any other end (a
        // stop, a crash, a limit) is its end too.
        Attempt::Warm(warm) => match stop.is_none().then(|| warm.running.settled_outcome()).flatten() {
            Some(outcome) => (outcome, Some(Warm { idle_since: Instant::now(), ..warm })),
            None => {
                untaken = stop.is_none() && warm.reused && !warm.running.taken();
                (warm.running.finish(), None)
            }
        },
    };
    // The heart's call in flight is bounded by the connection's statement timeout (one period);
    // one that takes longer is stuck (a frozen backend): heart and connection are left behind.
    let mut link = match heart.end(period * 2) {
        Ok((connection, unwritten)) => {
            logs.restore(unwritten);
            Link { connection, heart, name: link_name, warm, next: None }
        }
        Err(unwritten) => {
            logs.restore(unwritten);
            diag!("worker {name}: the database did not answer a heartbeat of job {}: using a new connection", job.id);
            Link {
                connection: Connection::new(&shared.database, &link_name, period),
                heart: Heart::start(&link_name, &shared.options.name)?,
                name: link_name,
                warm,
                next: None,
            }
        }
    };

    if untaken {
        release(shared, &mut link.connection, &job, claimed, logs, Why::RunnerEnded);
        return Ok(link);
    }
    let failure = |error: JobError| (JobStatus::Failure, None, Some(error.to_value()));
    let (status, result, error) = match (stop, outcome) {
        (Some(StopReason::Lost), _) => {
            diag!(
                "worker {name}: job {}: killed it, recorded nothing (no longer ours, or no heartbeat could say it \
                 still is: a reaper puts it back)",
                job.id
            );
            shared.fenced.fetch_add(1, Ordering::SeqCst);
            return Ok(link);
        }
        (None, Outcome::Failed { name: stopped, .. }) if stopped == runner::WORKER_STOPPED => {
            job_event(shared, &job, JobEvent::Killed { reason: StopReason::Lost.word() });
            diag!(
                "worker {name}: job {} was stopped by its supervisor while this worker was stopped for longer than \
                 it may go without a heartbeat: recorded nothing, the job is the reaper's",
                job.id
            );
            shared.fenced.fetch_add(1, Ordering::SeqCst);
            return Ok(link);
        }
        (Some(StopReason::Shutdown), Outcome::Stopped) => {
            release(shared, &mut link.connection, &job, claimed, logs, Why::Shutdown);
            return Ok(link);
        }
        (Some(StopReason::Canceled), Outcome::Stopped) => (JobStatus::Canceled, None, None),
        (Some(StopReason::TimedOut), Outcome::Stopped) => failure(JobError::new(
            "Timeout",
            format!("the job ran longer than its timeout of {} s and was killed", job.timeout_s),
        )),
        // Finished before the stop landed: the real outcome counts (a cancel request stays on record).
        (_, Outcome::Returned(value)) => match check_result(&value, job.output_schema.as_ref()) {
            Ok(()) => (JobStatus::Success, Some(value), None),
            Err(error) => failure(error),
        },
        (_, Outcome::Threw(error)) => (JobStatus::Failure, None, Some(error)),
        (_, Outcome::Failed { name, message }) => failure(JobError::new(&name, message)),
        (None, Outcome::Stopped) => failure(JobError::new("ProcessError", "the action's process was stopped")),
    };
    link.next = record_and_claim(shared, &mut link.connection, &job, claimed, (status, result, error), logs);
    Ok(link)
}

/// Hand a job to the slot's warm runner of its action, started first when the slot has none, one of
/// another action or commit (which is closed), or one that ended since its last job.
fn hand_to_warm(
    shared: &Shared,
    kept: Option<Warm>,
    job: &Claimed,
    tree: PathBuf,
    env: Vec<(String, String)>,
) -> Result<Warm> {
    let key = WarmKey {
        app: job.app.clone(),
        action: job.action.clone(),
        tree,
        entrypoint: job.entrypoint.clone(),
        isolation: isolation_of(&shared.options.isolation, job),
    };
    let idle_limit = Duration::from_secs(u64::try_from(job.timeout_s).unwrap_or(0)).max(WARM_IDLE_LEAST);
    match kept {
        Some(mut warm) if warm.key == key && warm.running.reusable() && !warm.running.is_over() => {
            match warm.running.submit(&job.input, &env) {
                Ok(()) => return Ok(Warm { idle_limit, reused: true, ..warm }),
                Err(_) => warm.running.close(),
            }
        }
        Some(other) => other.running.close(),
        None => {}
    }
    let running = start_warm(shared, &key, &job.commit_sha)?;
    let mut warm = Warm { running, key, idle_since: Instant::now(), idle_limit, reused: false };
    match warm.running.submit(&job.input, &env) {
        Ok(()) => Ok(warm),
        Err(error) => {
            warm.running.close();
            Err(error)
        }
    }
}

/// A new warm runner for `key`: what every job of it shares is its environment (the worker's
/// inherited variables, WF_APP, WF_ACTION, WF_COMMIT_SHA); each job brings its own on top.
fn start_warm(shared: &Shared, key: &WarmKey, commit_sha: &str) -> Result<Running> {
    let mut env = vec![
        ("WF_APP".to_string(), key.app.clone()),
        ("WF_ACTION".to_string(), key.action.clone()),
        ("WF_COMMIT_SHA".to_string(), commit_sha.to_string()),
    ];
    env.extend(shared.options.local.inherited_env.iter().cloned());
    let mut spec =
        runner::Spec::new(&shared.scratch, &Uuid::new_v4(), 0, key.tree.clone(), &key.entrypoint, Value::Null, env);
    spec.bun = shared.bun.clone();
    spec.wf_exe = shared.supervisor.path();
    spec.isolation = key.isolation.clone();
    spec.warm = true;
    spec.fence = Some(self_fence(shared));
    Running::start(spec)
}

/// How long a slot may go without a heartbeat before it stops its job: a reaper may requeue the
/// job one heartbeat later.
fn self_fence(shared: &Shared) -> Duration {
    shared.options.zombie_timeout.saturating_sub(shared.options.heartbeat)
}

/// The attempt's isolation: the worker's mode, with the sandbox settings the job pinned.
fn isolation_of(mode: &Isolation, job: &Claimed) -> runner::Isolation {
    match mode {
        Isolation::None => runner::Isolation::None,
        Isolation::Sandbox { allow_write } => {
            let default = Limits::default();
            let positive =
                |value: Option<i32>, default: u32| value.and_then(|v| u32::try_from(v).ok()).unwrap_or(default);
            runner::Isolation::Sandbox(SandboxOptions {
                allow_write: allow_write.clone(),
                network: job.network.unwrap_or(true),
                limits: Limits {
                    memory_mb: positive(job.memory_mb, default.memory_mb),
                    max_processes: positive(job.max_processes, default.max_processes),
                },
            })
        }
    }
}

/// While the action runs: pump its output, enforce the timeout and the self-fence, act on what the
/// heart learned, honour a shutdown. No database call here: the heart makes them. Returns why the
/// worker stopped the action, if it did; returns once the supervisor is gone.
fn watch(
    shared: &Shared,
    job: &Claimed,
    running: &mut Running,
    heart: &Heart,
    logs: &mut LogBuffer,
) -> Option<StopReason> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(u64::try_from(job.timeout_s).unwrap_or(0));
    // The reaper may take the job once its ping is older than the window. The attempt is stopped a
    // heartbeat period before that, counted from the last heartbeat known to have landed: never
    // two attempts of one job at once.
    let fence = self_fence(shared);
    let mut last_flush = started;
    let mut stop: Option<StopReason> = None;
    // A supervisor asked to stop ends at once; one that has not within half a heartbeat period
    // (stopped by its action, or waiting on a process stuck in the kernel) is killed, so that the
    // attempt is over before a reaper may take its job.
    let mut stopped_at: Option<Instant> = None;
    loop {
        match running.events.recv_timeout(Duration::from_millis(50)) {
            Ok(Event::Line { stream, text }) => {
                logs.push(stream_name(stream), text);
                if logs.truncated() {
                    running.quiet();
                }
            }
            Ok(Event::Settled { code }) => {
                running.settle(code);
                return stop;
            }
            Ok(Event::Done) | Err(RecvTimeoutError::Disconnected) => return stop,
            Err(RecvTimeoutError::Timeout) => {}
        }
        let now = Instant::now();
        if stop.is_none() {
            let pulse = heart.pulse();
            stop = match pulse.as_ref().and_then(|pulse| pulse.verdict.clone()) {
                Some(Verdict::Canceled) => Some(StopReason::Canceled),
                Some(Verdict::Lost) => Some(StopReason::Lost),
                None if pulse.is_some_and(|pulse| now.duration_since(pulse.last_ok) >= fence) => {
                    diag!(
                        "worker {}: no heartbeat of job {} succeeded for {} s: stopping it before the reaper may \
                         take it",
                        shared.options.name,
                        job.id,
                        fence.as_secs()
                    );
                    Some(StopReason::Lost)
                }
                None if now >= deadline => Some(StopReason::TimedOut),
                None if shared.kill.load(Ordering::SeqCst) => Some(StopReason::Shutdown),
                None => None,
            };
            if let Some(reason) = &stop {
                job_event(shared, job, JobEvent::Killed { reason: reason.word() });
                running.stop();
                stopped_at = Some(now);
            }
        } else if stopped_at.is_some_and(|at| now.duration_since(at) >= shared.options.heartbeat / 2) {
            stopped_at = None;
            diag!(
                "worker {}: job {}: its supervisor did not end within {:?} of being asked to stop: killed",
                shared.options.name,
                job.id,
                shared.options.heartbeat / 2
            );
            running.kill();
        }
        if logs.len() >= LOG_FLUSH_LINES || (!logs.is_empty() && now.duration_since(last_flush) >= LOG_FLUSH_PERIOD) {
            last_flush = now;
            heart.write(logs.take());
        }
    }
}

fn stream_name(stream: Stream) -> &'static str {
    match stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    }
}

/// Make the job's commit complete in this host's store, and check it once per worker: a commit
/// this host meets for the first time is written from the database (marker last); a tree that does
/// not match its digest (changed on the host since it was written, or written with a content the
/// store held already and that changed since) is written again from the database, every content
/// read from it and checked against its id.
fn prepare(shared: &Shared, job: &Claimed, tree: &std::path::Path) -> anyhow::Result<()> {
    // Still there: `wf prune --sources` on this host may have removed it since (a job can pin it
    // again, when its branch comes back to it).
    if shared.prepared.lock().unwrap_or_else(|e| e.into_inner()).contains(tree) && store::is_materialized(tree) {
        return Ok(());
    }
    // Not under the lock of the prepared set: the other slots' jobs of prepared commits go on while
    // this one is written (the store's own lock keeps two writers apart).
    let checked = if store::is_materialized(tree) {
        store::verify(tree)
    } else {
        // Found complete, `materialize` verified it. Written, only the contents it wrote were
        // checked against their ids: those the store held already were linked, unread.
        let written = write_from_database(shared, job, "")?;
        if written { store::verify(tree) } else { Ok(()) }
    };
    if let Err(damage) = checked {
        // `materialize` finds the tree complete and not matching: it writes every content again.
        write_from_database(shared, job, &format!(" again, its tree in this store not matching ({damage:#})"))
            .with_context(|| format!("{damage:#}; writing it again from the database"))?;
        store::verify(tree).context("written again from the database")?;
    }
    shared.prepared.lock().unwrap_or_else(|e| e.into_inner()).insert(tree.to_path_buf());
    Ok(())
}

/// Write the job's commit from the database into this host's store, said with `why`; false when
/// it was found complete and matching.
fn write_from_database(shared: &Shared, job: &Claimed, why: &str) -> anyhow::Result<bool> {
    let began = std::time::Instant::now();
    let mut client = shared.database.connect_as(&format!("wf work {} materialize", shared.options.name))?;
    let written = stored::materialize(&mut client, &shared.store, job.git_source_id, &job.commit_sha)
        .context("writing it from the database into this host's store")?;
    if written.written {
        diag!(
            "worker {}: commit {} written from the database into {}{why} ({} files, {:.1} s)",
            shared.options.name,
            crate::source::short_sha(&job.commit_sha),
            written.dir.display(),
            written.files,
            began.elapsed().as_secs_f64()
        );
    }
    Ok(written.written)
}

/// Whether `error` is the database's, and one that passes.
fn database_trouble(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| cause.downcast_ref::<postgres::Error>().is_some())
        && classify(error) == Failure::Transient
}

/// The result must match the pinned output schema and fit the size cap.
fn check_result(value: &Value, output_schema: Option<&Value>) -> Result<(), JobError> {
    let size = serde_json::to_vec(value).map(|bytes| bytes.len()).unwrap_or(usize::MAX);
    if size > MAX_RESULT_BYTES {
        return Err(JobError::new(
            "ResultTooLarge",
            format!("the result is {size} bytes, more than the {MAX_RESULT_BYTES} allowed"),
        ));
    }
    // Found here, not by the completion's statement: that one failing would first take the job's
    // last lines for what the database refuses (see record_completion).
    if crate::queue::enqueue::holds_nul(value) {
        return Err(JobError::new(
            "CompletionError",
            "the result holds the character U+0000 (\\u0000), which PostgreSQL cannot store in JSON",
        ));
    }
    let Some(schema) = output_schema else { return Ok(()) };
    let validator = jsonschema::validator_for(schema)
        .map_err(|error| JobError::new("OutputSchemaError", format!("the output schema is invalid: {error}")))?;
    let problems = crate::queue::enqueue::schema_problems(&validator, std::slice::from_ref(value), |_| String::new());
    if problems.is_empty() {
        Ok(())
    } else {
        Err(JobError::new(
            "OutputSchemaError",
            format!("the result does not match the output schema: {}", problems.join("; ")),
        ))
    }
}

/// Complete the job, retrying with the result kept in memory while the failure is one a retry can
/// change (the connection, a lock, a timeout, too many clients), until the window has passed. A
/// statement that proves the data cannot be stored (a result PostgreSQL cannot hold) completes the
/// job as failure saying so, rather than leaving it to the reaper.
fn record(
    shared: &Shared,
    connection: &mut Connection,
    job: &Claimed,
    claimed: Instant,
    ending: Ending,
    logs: LogBuffer,
) {
    record_completion(shared, connection, job, claimed, Arc::new(completion(job, ending, logs)), false);
}

/// The completion of an attempt that ended so; a failure's error also at the end of its logs.
fn completion(job: &Claimed, (status, result, error): Ending, mut logs: LogBuffer) -> Completion {
    if let Some(error) = &error {
        log_error(&mut logs, error);
    }
    Completion {
        job_id: job.id,
        claim: job.claim.clone(),
        attempt: job.attempt(),
        status,
        result,
        error,
        logs: logs.take(),
    }
}

/// Complete a success or a cancel and claim the slot's next jobs in one statement, so that one
/// round trip and one commit do both; the first job claimed is this slot's next (returned), the
/// others go to the slots waiting for them (`deliver`). When there is nothing to claim for (the
/// budget is spent, the worker is stopping) or the job failed (its completion commits with its
/// retry), the job is completed alone; so it is
/// too, after the claim, when the statement did not record it (another transaction held its queue
/// row, or the claim lost the job: `complete::then_claim`). Anything
/// but a clean commit leaves the completion to `record_completion`, which tells whether a commit
/// whose answer was lost landed; the jobs such a commit may have claimed are put back in the queue
/// by this worker, unstarted (`unanswered`).
fn record_and_claim(
    shared: &Shared,
    connection: &mut Connection,
    job: &Claimed,
    claimed: Instant,
    ending: Ending,
    logs: LogBuffer,
) -> Option<Handed> {
    // Shared with the connection's caller thread, not copied: a result may be a megabyte.
    let completion = Arc::new(completion(job, ending, logs));
    let alone = matches!(completion.status, JobStatus::Failure) || shared.stopping.load(Ordering::SeqCst);
    let claims: Arc<[String]> = if alone { Arc::new([]) } else { reserve_claims(shared).into() };
    if claims.is_empty() {
        record_completion(shared, connection, job, claimed, completion, false);
        return None;
    }
    let claimed_at = Instant::now();
    let (tags, window) = (shared.options.tags.clone(), shared.options.zombie_timeout);
    let (sent, reserved, claiming) = (Arc::clone(&completion), claims.len(), Arc::clone(&claims));
    let both = connection.bounded(answer_patience(shared), move |session| {
        complete::then_claim(session, &sent, &tags, &claiming, window)
    });
    match both {
        Ok((recorded, jobs)) if !crate::fault::at("complete-lost-ack") => {
            if recorded {
                finished(shared, job, completion.status, claimed);
            }
            let next = deliver(shared, jobs, reserved, claimed_at);
            // Another transaction held the job's row, or the claim lost the job: the completion
            // alone waits for the holder, and finds which.
            if !recorded {
                record_completion(shared, connection, job, claimed, completion, false);
            }
            next
        }
        answer => {
            undeliver(shared, reserved);
            // The commit landed but its answer is lost (a fault injected as such), or the call
            // failed where it may have committed: the completion is retried alone, and finds out.
            let lost = match answer {
                Ok(_) => true,
                Err(error) => is_connection_lost(&error),
            };
            if lost {
                connection.reset();
                unanswered::remember(shared, &claims);
            }
            record_completion(shared, connection, job, claimed, completion, true);
            None
        }
    }
}

/// How long a slot waits for the answer to a completion: its statements time out on the server
/// after a heartbeat period, so a backend that says nothing for two is taken for stuck (see
/// `Connection::bounded`), as the heartbeat's own calls are.
fn answer_patience(shared: &Shared) -> Duration {
    shared.options.heartbeat * 2
}

/// How long a slot waits for the answer to a call made before its job starts (a claim, a look at
/// the queue, the overlap check, the beat before a late start): a zombie window. Nothing of its own
/// is at stake meanwhile, and a job claimed late still starts (after a beat that confirms it ours);
/// given up sooner, a claim slowed by a busy machine would leave the jobs it took to the reaper.
fn look_patience(shared: &Shared) -> Duration {
    shared.options.zombie_timeout
}

/// Record `completion`, retrying as `record` says. `unsure`: an earlier call may have committed it.
fn record_completion(
    shared: &Shared,
    connection: &mut Connection,
    job: &Claimed,
    claimed: Instant,
    mut completion: Arc<Completion>,
    unsure: bool,
) {
    let name = &shared.options.name;
    let mut give_up = Instant::now() + shared.options.zombie_timeout;
    let hold_until = Instant::now() + shared.options.zombie_timeout * COMPLETION_HOLD_WINDOWS;
    let mut trouble = Trouble::new(shared);
    let mut retried = unsure;
    let mut held = false;
    let mut rewritten = false;
    loop {
        let sent = Arc::clone(&completion);
        let attempt = connection.bounded(answer_patience(shared), move |client| match sent.status {
            JobStatus::Failure => retry::complete_failure(client, &sent),
            _ => complete::complete(client, &sent).map(|recorded| (recorded, None)),
        });
        match attempt {
            Ok((Recorded::Completed, _)) if !retried && crate::fault::at("complete-lost-ack") => {
                // The commit landed but its answer is lost, as when the connection drops during
                // COMMIT: retry exactly as then.
                retried = true;
                connection.reset();
            }
            Ok((Recorded::Completed, follow)) => {
                trouble.recovered();
                finished(shared, job, completion.status, claimed);
                if let Some(retry) = follow {
                    job_event(shared, job, JobEvent::Retried(retry));
                }
                break;
            }
            Ok((Recorded::Fenced, _)) => {
                trouble.recovered();
                // After a lost acknowledgement the gate finds nothing: did our own commit land? The
                // journal says the status on record.
                let recorded = if retried {
                    let (id, claim) = (job.id, job.claim.clone());
                    connection
                        .bounded(answer_patience(shared), move |session| complete::recorded_for(session, id, &claim))
                } else {
                    Ok(None)
                };
                match recorded {
                    Ok(Some(status)) => break finished(shared, job, status, claimed),
                    _ => break completion_skipped(shared, job),
                }
            }
            // The last lines may be what the database refuses for good, as the heart finds while
            // the job runs: the outcome goes without them, whatever its output.
            Err(error)
                if classify(&error) != Failure::Transient
                    && logs::drop_refused(&mut Arc::make_mut(&mut completion).logs, &error) =>
            {
                diag!("worker {name}: job {}: {}", job.id, logs::refused_note(&error).line);
            }
            Err(error) if classify(&error) == Failure::Data && !rewritten => {
                rewritten = true;
                let completion = Arc::make_mut(&mut completion);
                completion.status = JobStatus::Failure;
                completion.result = None;
                completion.error = Some(
                    JobError::new("CompletionError", format!("recording the job's outcome failed: {error:#}"))
                        .to_value(),
                );
            }
            // Another session holds the job's row: no reaper can take it meanwhile, so the slot
            // keeps trying (at once: first in line when the holder lets go) past the zombie window.
            // That call committed nothing.
            Err(error) if is_lock_held(&error) => {
                give_up = Instant::now() + shared.options.zombie_timeout;
                if !held {
                    held = true;
                    let job_id = job.id;
                    let holder = connection
                        .bounded(answer_patience(shared), move |session| heartbeat::held_by(session, job_id))
                        .ok()
                        .flatten();
                    diag!(
                        "worker {name}: completing job {} waits for a lock another session{} holds on its row; \
                         trying again until it is let go",
                        job.id,
                        holder.map(|holder| format!(", {holder},")).unwrap_or_default()
                    );
                }
            }
            Err(error) if Instant::now() < give_up => {
                // An error the database answered on a connection still usable: its statement, the
                // commit last, committed nothing. After any other, whether the failed call
                // committed is unknown: the gate and completed_by tell.
                let answered = sqlstate(&error).is_some() && !is_connection_lost(&error);
                retried |= !answered;
                // Held only while the database answers with what a retry can change (a
                // serialization failure, a deadlock, a timeout), and the worker is not stopping
                // (its stop waits at most a window for a completion): after a call it never
                // answered, a connection lost or a refusal for good, the job is given up after one
                // window, as it always was.
                let retryable = answered && classify(&error) == Failure::Transient;
                let stopping = shared.stopping.load(Ordering::SeqCst);
                let holding = retryable && !stopping && Instant::now() < hold_until;
                let most = if holding { shared.options.heartbeat } else { BACKOFF_LAST };
                trouble.failed_waiting_at_most(connection, &error, &format!("completing job {}", job.id), most);
                // A beat that lands keeps the job ours (the reaper leaves a fresh ping; the tries
                // are a heartbeat period apart at most meanwhile): the window starts again, so an
                // outcome in hand that the database refuses for a while (a completion's statement
                // failing where a heartbeat's does not) is not lost to a run elsewhere. A beat that
                // finds the job gone lets the next call find out how.
                if holding && still_ours(shared, connection, job) {
                    give_up = Instant::now() + shared.options.zombie_timeout;
                }
            }
            Err(error) => {
                diag!("worker {name}: giving up completing job {}: {error:#} (the reaper will recover it)", job.id);
                shared.fenced.fetch_add(1, Ordering::SeqCst);
                break;
            }
        }
    }
}

/// One heartbeat of the slot's finished attempt, while its completion is retried: whether the claim
/// still owns the job.
fn still_ours(shared: &Shared, connection: &mut Connection, job: &Claimed) -> bool {
    let (id, claim, window) = (job.id, job.claim.clone(), shared.options.zombie_timeout);
    let beat =
        connection.bounded(answer_patience(shared), move |session| heartbeat::heartbeat(session, id, &claim, window));
    matches!(beat, Ok(Beat::Owned | Beat::CancelRequested { .. }))
}

/// A failed job's error, also at the end of its logs: whoever reads the logs sees why it ended
/// (bun's build messages of an action that does not compile, with their places), without the
/// first line of the stack when it only repeats the name and message.
fn log_error(logs: &mut LogBuffer, error: &Value) {
    let text = |key: &str| error.get(key).and_then(Value::as_str).unwrap_or_default();
    let headline = format!("{}: {}", text("name"), text("message"));
    let mut stack = text("stack").lines().peekable();
    if stack.peek() == Some(&headline.as_str()) {
        stack.next();
    }
    logs.note(format!("failed: {headline}"));
    for line in stack {
        logs.note(line.to_string());
    }
}

/// A completion the gate refused: the job is no longer this claim's.
fn completion_skipped(shared: &Shared, job: &Claimed) {
    diag!("worker {}: job {} is no longer ours (reaped?): completion skipped", shared.options.name, job.id);
    shared.fenced.fetch_add(1, Ordering::SeqCst);
}

/// A completion recorded: counted and journaled.
fn finished(shared: &Shared, job: &Claimed, status: JobStatus, claimed: Instant) {
    count(shared, status);
    job_event(shared, job, JobEvent::Finished { status, took: claimed.elapsed() });
}

fn count(shared: &Shared, status: JobStatus) {
    let counter = match status {
        JobStatus::Success => &shared.succeeded,
        JobStatus::Canceled => &shared.canceled,
        // A completion is never recorded as waiting or running.
        JobStatus::Failure | JobStatus::Queued | JobStatus::Scheduled | JobStatus::Running => &shared.failed,
    };
    counter.fetch_add(1, Ordering::SeqCst);
}

/// Put the job back in the queue (`why`: at once at a shutdown past the grace, later when it cannot
/// start here now), ownership-gated, retried as a completion is.
fn release(
    shared: &Shared,
    connection: &mut Connection,
    job: &Claimed,
    claimed: Instant,
    mut logs: LogBuffer,
    why: Why,
) {
    let give_up = Instant::now() + shared.options.zombie_timeout;
    let mut trouble = Trouble::new(shared);
    // Shared with the connection's caller thread, as a completion's are.
    let mut lines: Arc<Vec<LogLine>> = Arc::new(logs.take());
    loop {
        let (sent, id, claim, attempt) = (Arc::clone(&lines), job.id, job.claim.clone(), job.attempt());
        let released = connection.bounded(answer_patience(shared), move |session| {
            release::release(session.client(), id, &claim, attempt, &sent, why)
        });
        match released {
            Ok(Released::Requeued) => {
                trouble.recovered();
                shared.released.fetch_add(1, Ordering::SeqCst);
                job_event(shared, job, JobEvent::Requeued(why));
                return;
            }
            // Asked to cancel meanwhile: completed as canceled instead, and said so.
            Ok(Released::Canceled) => {
                trouble.recovered();
                return finished(shared, job, JobStatus::Canceled, claimed);
            }
            Ok(Released::NotOurs) => {
                trouble.recovered();
                shared.fenced.fetch_add(1, Ordering::SeqCst);
                return;
            }
            // As for a completion: the job goes back without lines the database refuses for good.
            Err(error)
                if classify(&error) != Failure::Transient && logs::drop_refused(Arc::make_mut(&mut lines), &error) =>
            {
                diag!("worker {}: job {}: {}", shared.options.name, job.id, logs::refused_note(&error).line);
            }
            Err(error) if classify(&error) != Failure::Data && Instant::now() < give_up => {
                trouble.failed(connection, &error, &format!("releasing job {}", job.id));
            }
            Err(error) => {
                diag!("worker {}: could not release job {}: {error:#} (the reaper will)", shared.options.name, job.id);
                shared.fenced.fetch_add(1, Ordering::SeqCst);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::check_result;

    #[test]
    fn a_result_against_its_output_schema_is_told_in_few_words() {
        let schema = json!({"type": "array", "items": {"type": "integer"}});
        let result = json!(vec!["x".repeat(20_000); 30]);
        let error = check_result(&result, Some(&schema)).unwrap_err();
        assert_eq!(error.name, "OutputSchemaError");
        assert!(
            error.message.starts_with("the result does not match the output schema: at /0: \"xxx"),
            "{}",
            error.message
        );
        assert!(error.message.ends_with("; and 10 more"), "{}", error.message);
        assert!(error.message.len() < 20 * 400, "{}", error.message.len());
        assert!(check_result(&json!([1, 2]), Some(&schema)).is_ok());
    }
}
