//! One worker slot: claim, run, heartbeat, complete; one job at a time on its own connection.

use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use postgres::fallible_iterator::FallibleIterator;
use serde_json::Value;
use uuid::Uuid;

use super::connection::Connection;
use super::{Isolation, Shared, Until};
use crate::queue::claim::{self, Claimed};
use crate::queue::complete::{self, Completion, JobError, Recorded, Status};
use crate::queue::heartbeat::{self, Beat};
use crate::queue::logs::{self, LogBuffer};
use crate::queue::{CHANNEL_ENQUEUED, is_connection_error, reaper};
use crate::runner::{self, Event, Limits, MAX_RESULT_BYTES, Outcome, Running, SandboxOptions, Stream};
use crate::source::store;
use crate::token;

/// How often buffered log lines are written while a job runs.
const LOG_FLUSH_PERIOD: Duration = Duration::from_secs(1);
const LOG_FLUSH_LINES: usize = 500;
/// How long to back off after the database went away.
const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

pub(super) fn run(shared: &Shared, index: u32) -> Result<()> {
    let name = &shared.options.name;
    let mut connection =
        Connection::new(&shared.database, &format!("wf work {name} slot {index}")).listening(&[CHANNEL_ENQUEUED]);
    loop {
        if shared.stopping.load(Ordering::SeqCst) || !shared.reserve() {
            return Ok(());
        }
        let claim_id = format!("{name}#{}", &Uuid::new_v4().simple().to_string()[..12]);
        // LISTEN happens when the connection is made, before this look: a job enqueued between
        // the look and the wait still wakes us.
        let claimed = connection.client().and_then(|client| claim::claim(client, &shared.options.tags, &claim_id));
        match claimed {
            Ok(Some(job)) => run_job(shared, &mut connection, job),
            Ok(None) => {
                shared.unreserve();
                match next_due_in(&mut connection, shared) {
                    Ok(next) => {
                        if shared.options.until == Until::Drained && next.is_none_or(|s| s > 0.0) {
                            return Ok(());
                        }
                        if next.is_some_and(|s| s <= 0.0) {
                            // Due jobs exist but were locked by other claimers this instant.
                            std::thread::sleep(Duration::from_millis(5));
                            continue;
                        }
                        wait_for_work(shared, &mut connection, next);
                    }
                    Err(error) => pause_after(shared, &mut connection, &error, "looking at the queue"),
                }
            }
            Err(error) => {
                shared.unreserve();
                pause_after(shared, &mut connection, &error, "claiming");
            }
        }
        if shared.budget_spent() {
            return Ok(());
        }
    }
}

fn next_due_in(connection: &mut Connection, shared: &Shared) -> Result<Option<f64>> {
    claim::next_due_in(connection.client()?, &shared.options.tags)
}

fn pause_after(shared: &Shared, connection: &mut Connection, error: &anyhow::Error, what: &str) {
    eprintln!("worker {}: {what} failed: {error:#}; retrying", shared.options.name);
    connection.reset_if_broken(error);
    std::thread::sleep(RECONNECT_PAUSE);
}

/// Sleep until a notification, the next scheduled job, the poll interval, or a stop.
fn wait_for_work(shared: &Shared, connection: &mut Connection, next_due_s: Option<f64>) {
    let mut wait = shared.options.poll;
    if let Some(seconds) = next_due_s {
        wait = wait.min(Duration::from_secs_f64(seconds.max(0.0)));
    }
    let until = Instant::now() + wait;
    while Instant::now() < until && !shared.stopping.load(Ordering::SeqCst) {
        let slice = (until - Instant::now()).min(Duration::from_millis(250));
        let woke = connection.client().and_then(|client| {
            let mut notifications = client.notifications();
            let woke = notifications.timeout_iter(slice).next()?.is_some();
            // Take every pending notification: one look at the queue serves them all.
            while notifications.iter().next()?.is_some() {}
            Ok(woke)
        });
        match woke {
            Ok(true) => return,
            Ok(false) => {}
            Err(error) => return pause_after(shared, connection, &error, "waiting for jobs"),
        }
    }
}

/// Why the worker stopped a job's process tree before it finished.
#[derive(Debug, Clone, PartialEq)]
enum StopReason {
    Canceled,
    TimedOut,
    /// Ownership lost (reaped, or heartbeats failing past the zombie window): record nothing.
    Lost,
    /// The worker is shutting down and the grace is over: put the job back in the queue.
    Shutdown,
}

fn run_job(shared: &Shared, connection: &mut Connection, job: Claimed) {
    let name = &shared.options.name;
    let tree = store::commit_dir(&shared.store, job.git_source_id, &job.commit_sha);
    if let Err(error) = prepare(shared, &tree) {
        let error = JobError::new("SourceNotMaterialized", format!("commit {}: {error:#}", job.commit_sha));
        return record(shared, connection, &job, Status::Failure, None, Some(error.to_value()), LogBuffer::default());
    }
    let claims = token::Claims::for_claim(job.id, &job.claim, job.started_at, job.timeout_s);
    let env = vec![
        ("WF_JOB_ID".to_string(), job.id.to_string()),
        ("WF_TOKEN".to_string(), token::issue(&shared.secret, &claims)),
        ("WF_APP".to_string(), job.app.clone()),
        ("WF_ACTION".to_string(), job.action.clone()),
        ("WF_COMMIT_SHA".to_string(), job.commit_sha.clone()),
        ("WF_TRIGGER_KIND".to_string(), job.trigger_kind.clone()),
        ("WF_SCHEDULED_FOR".to_string(), job.scheduled_for.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        ("WF_ATTEMPT".to_string(), job.attempt().to_string()),
    ];
    let mut spec =
        runner::Spec::new(&shared.scratch, &job.id, job.attempt(), tree, &job.entrypoint, job.input.clone(), env);
    spec.bun = shared.bun.clone();
    spec.isolation = isolation_of(&shared.options.isolation, &job);
    let running = match Running::start(spec) {
        Ok(running) => running,
        Err(error) => {
            let error = JobError::new("StartError", format!("{error:#}"));
            return record(
                shared,
                connection,
                &job,
                Status::Failure,
                None,
                Some(error.to_value()),
                LogBuffer::default(),
            );
        }
    };
    let mut logs = LogBuffer::default();
    let stop = watch(shared, connection, &job, &running, &mut logs);
    let outcome = running.finish();
    let failure = |error: JobError| (Status::Failure, None, Some(error.to_value()));
    let (status, result, error) = match (stop, outcome) {
        (Some(StopReason::Lost), _) => {
            eprintln!("worker {name}: job {} is no longer ours (reaped?): killed it, recorded nothing", job.id);
            shared.fenced.fetch_add(1, Ordering::SeqCst);
            return;
        }
        (Some(StopReason::Shutdown), Outcome::Stopped) => return release(shared, connection, &job, logs),
        (Some(StopReason::Canceled), Outcome::Stopped) => (Status::Canceled, None, None),
        (Some(StopReason::TimedOut), Outcome::Stopped) => failure(JobError::new(
            "Timeout",
            format!("the job ran longer than its timeout of {} s and was killed", job.timeout_s),
        )),
        // Finished before the stop landed: the real outcome counts (a cancel request stays on record).
        (_, Outcome::Returned(value)) => match check_result(&value, job.output_schema.as_ref()) {
            Ok(()) => (Status::Success, Some(value), None),
            Err(error) => failure(error),
        },
        (_, Outcome::Threw(error)) => (Status::Failure, None, Some(error)),
        (_, Outcome::Failed { name, message }) => failure(JobError::new(&name, message)),
        (None, Outcome::Stopped) => failure(JobError::new("ProcessError", "the action's process was stopped")),
    };
    record(shared, connection, &job, status, result, error, logs);
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

/// While the action runs: pump its output, heartbeat, enforce the timeout, honour a shutdown.
/// Returns why the worker stopped it, if it did; returns once the supervisor is gone.
fn watch(
    shared: &Shared,
    connection: &mut Connection,
    job: &Claimed,
    running: &Running,
    logs: &mut LogBuffer,
) -> Option<StopReason> {
    let period = shared.options.heartbeat;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(u64::try_from(job.timeout_s).unwrap_or(0));
    let mut last_beat = started;
    let mut next_beat = started + period;
    let mut last_flush = started;
    let mut stop: Option<StopReason> = None;
    loop {
        match running.events.recv_timeout(Duration::from_millis(50)) {
            Ok(Event::Line { stream, text }) => logs.push(stream_name(stream), text),
            Ok(Event::Done) | Err(RecvTimeoutError::Disconnected) => return stop,
            Err(RecvTimeoutError::Timeout) => {}
        }
        let now = Instant::now();
        if stop.is_none() {
            if now >= next_beat {
                next_beat = now + period;
                let beat = connection.client().and_then(|client| heartbeat::heartbeat(client, job.id, &job.claim));
                match beat {
                    Ok(Beat::Owned) => last_beat = now,
                    Ok(Beat::CancelRequested { .. }) => stop = Some(StopReason::Canceled),
                    Ok(Beat::Lost) => stop = Some(StopReason::Lost),
                    // Not a lost ownership: keep the job and retry, unless the last good
                    // heartbeat is older than the zombie window (then it must be presumed reaped).
                    Err(error) => {
                        eprintln!("worker {}: heartbeat of job {} failed: {error:#}", shared.options.name, job.id);
                        connection.reset_if_broken(&error);
                        if now.duration_since(last_beat) >= shared.options.zombie_timeout {
                            stop = Some(StopReason::Lost);
                        }
                    }
                }
            }
            if stop.is_none() && now >= deadline {
                stop = Some(StopReason::TimedOut);
            }
            if stop.is_none() && shared.kill.load(Ordering::SeqCst) {
                stop = Some(StopReason::Shutdown);
            }
            if stop.is_some() {
                running.stop();
            }
        }
        if logs.len() >= LOG_FLUSH_LINES || (!logs.is_empty() && now.duration_since(last_flush) >= LOG_FLUSH_PERIOD) {
            last_flush = now;
            let written = connection
                .client()
                .and_then(|client| logs::append(client, job.id, &job.claim, job.attempt(), logs.pending()));
            match written {
                Ok(_) => logs.written(),
                Err(error) => connection.reset_if_broken(&error),
            }
        }
    }
}

fn stream_name(stream: Stream) -> &'static str {
    match stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    }
}

/// A commit is run only when its marker is in the store and its tree still matches the digest the
/// marker recorded; once checked, it is not checked again by this process.
fn prepare(shared: &Shared, tree: &std::path::Path) -> anyhow::Result<()> {
    let mut prepared = shared.prepared.lock().unwrap_or_else(|e| e.into_inner());
    if prepared.contains(tree) {
        return Ok(());
    }
    if !store::is_materialized(tree) {
        anyhow::bail!(
            "not materialized in the store: {} has no marker {} (the store must be shared by every host that \
             runs workers; `wf sync` materializes it)",
            tree.display(),
            store::MARKER
        );
    }
    store::verify(tree).context("run `wf sync` for its source to repair the store")?;
    prepared.insert(tree.to_path_buf());
    Ok(())
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
    let Some(schema) = output_schema else { return Ok(()) };
    let validator = jsonschema::validator_for(schema)
        .map_err(|error| JobError::new("OutputSchemaError", format!("the output schema is invalid: {error}")))?;
    let problems: Vec<String> = validator
        .iter_errors(value)
        .map(|error| {
            let path = error.instance_path().to_string();
            format!("at {}: {error}", if path.is_empty() { "/" } else { &path })
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(JobError::new(
            "OutputSchemaError",
            format!("the result does not match the output schema: {}", problems.join("; ")),
        ))
    }
}

/// Complete the job, retrying with the result kept in memory when the connection fails. A
/// statement that fails for another reason (a result PostgreSQL cannot store) completes the job
/// as failure saying so, rather than leaving it to the reaper.
fn record(
    shared: &Shared,
    connection: &mut Connection,
    job: &Claimed,
    status: Status,
    result: Option<Value>,
    error: Option<Value>,
    mut logs: LogBuffer,
) {
    let name = &shared.options.name;
    let mut completion = Completion {
        job_id: job.id,
        claim: job.claim.clone(),
        attempt: job.attempt(),
        status,
        result,
        error,
        logs: logs.pending().to_vec(),
    };
    logs.written();
    let give_up = Instant::now() + shared.options.zombie_timeout;
    let mut retried = false;
    let mut rewritten = false;
    loop {
        let attempt = connection.client().and_then(|client| complete::complete(client, &completion));
        match attempt {
            Ok(Recorded::Completed) if !retried && crate::fault::at("complete-lost-ack") => {
                // The commit landed but its answer is lost, as when the connection drops during
                // COMMIT: retry exactly as then.
                retried = true;
                connection.reset();
            }
            Ok(Recorded::Completed) => break count(shared, completion.status),
            Ok(Recorded::Fenced) => {
                // After a lost acknowledgement the gate finds nothing: did our own commit land?
                let ours = retried
                    && connection
                        .client()
                        .and_then(|client| complete::completed_by(client, job.id, &job.claim))
                        .unwrap_or(false);
                if ours {
                    break count(shared, completion.status);
                }
                eprintln!("worker {name}: job {} is no longer ours (reaped?): completion skipped", job.id);
                shared.fenced.fetch_add(1, Ordering::SeqCst);
                break;
            }
            Err(error) if is_connection_error(&error) && Instant::now() < give_up => {
                retried = true;
                pause_after(shared, connection, &error, &format!("completing job {}", job.id));
            }
            Err(error) if !is_connection_error(&error) && !rewritten => {
                rewritten = true;
                completion.status = Status::Failure;
                completion.result = None;
                completion.error = Some(
                    JobError::new("CompletionError", format!("recording the job's outcome failed: {error:#}"))
                        .to_value(),
                );
            }
            Err(error) => {
                eprintln!("worker {name}: giving up completing job {}: {error:#} (the reaper will recover it)", job.id);
                break;
            }
        }
    }
}

fn count(shared: &Shared, status: Status) {
    let counter = match status {
        Status::Success => &shared.succeeded,
        Status::Failure => &shared.failed,
        Status::Canceled => &shared.canceled,
    };
    counter.fetch_add(1, Ordering::SeqCst);
}

/// Shutdown past the grace: the job goes back in the queue at once, ownership-gated.
fn release(shared: &Shared, connection: &mut Connection, job: &Claimed, logs: LogBuffer) {
    let give_up = Instant::now() + shared.options.zombie_timeout;
    loop {
        let released = connection
            .client()
            .and_then(|client| reaper::release(client, job.id, &job.claim, job.attempt(), logs.pending()));
        match released {
            Ok(true) => {
                shared.released.fetch_add(1, Ordering::SeqCst);
                return;
            }
            Ok(false) => {
                shared.fenced.fetch_add(1, Ordering::SeqCst);
                return;
            }
            Err(error) if is_connection_error(&error) && Instant::now() < give_up => {
                pause_after(shared, connection, &error, &format!("releasing job {}", job.id));
            }
            Err(error) => {
                eprintln!(
                    "worker {}: could not release job {}: {error:#} (the reaper will)",
                    shared.options.name, job.id
                );
                return;
            }
        }
    }
}
