//! `wf work`: slots that claim jobs, run them under a supervisor, heartbeat and complete them;
//! a reaper pass on the side; a clean shutdown on SIGINT/SIGTERM/SIGHUP that loses no job, and on
//! SIGQUIT one that puts the running jobs back at once.

mod connection;
mod events;
mod heart;
pub(crate) mod registry;
mod slot;
mod unanswered;
mod wake;

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};

use crate::db::Database;
use crate::diag::diag;
use crate::queue::claim::Claimed;
use crate::runner::{ScratchRoot, SupervisorExe};

/// When a worker stops on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
    /// Until SIGINT/SIGTERM/SIGHUP/SIGQUIT.
    Stopped,
    /// When no due, unclaimed job is left for its tags and its slots are idle.
    Drained,
    /// After this many claims.
    Jobs(u64),
}

/// How a worker isolates the actions it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Isolation {
    /// Every attempt in a sandbox of its own (`runner::sandbox`), with these host folders bound
    /// read-write.
    Sandbox { allow_write: Vec<PathBuf> },
    /// As the worker's own user, on the worker's file system.
    None,
}

/// What a worker takes from its host's configuration.
#[derive(Debug, Clone)]
pub(crate) struct Local {
    /// WF_HOME: the worker's scratch root is made under it.
    pub home: PathBuf,
    /// The source store it runs commits from.
    pub store: PathBuf,
    /// The bun executable.
    pub bun: PathBuf,
    /// The key WF_TOKENs are signed with.
    pub secret: Vec<u8>,
    /// PATH, HOME and TZ, as actions inherit them.
    pub inherited_env: Vec<(String, String)>,
    /// The binary the attempts' supervisors run as.
    pub supervisor: PathBuf,
}

#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub tags: Vec<String>,
    pub concurrency: u32,
    pub until: Until,
    pub heartbeat: Duration,
    pub grace: Duration,
    pub name: String,
    pub reap: bool,
    pub zombie_timeout: Duration,
    pub restart_limit: i32,
    /// Longest idle wait between two looks at the queue (notifications usually come first).
    pub poll: Duration,
    /// Say nothing when all is well (problems are still reported on stderr).
    pub quiet: bool,
    pub isolation: Isolation,
    pub local: Local,
}

impl Options {
    /// Refuse settings that would make a healthy worker look dead to the reaper.
    pub(crate) fn check(&self) -> Result<()> {
        for tag in &self.tags {
            crate::source::check_tag(tag).with_context(|| format!("--tag {tag:?}: no job can have it"))?;
        }
        // Each heartbeat is a statement given a period to answer in: a period shorter than the
        // database answers in had every one fail, and the worker wedged.
        if self.heartbeat < Duration::from_secs(1) {
            bail!("the heartbeat period ({:?}) must be at least 1 s", self.heartbeat);
        }
        if self.heartbeat * 3 > self.zombie_timeout {
            bail!(
                "the heartbeat period ({:?}) must be at most a third of the zombie window ({:?}, \
                 WF_ZOMBIE_TIMEOUT_S), or the reaper may take a live worker for dead",
                self.heartbeat,
                self.zombie_timeout
            );
        }
        Ok(())
    }
}

/// What a worker did, for its final message.
#[derive(Debug, Default)]
pub(crate) struct Summary {
    pub succeeded: u64,
    pub failed: u64,
    pub canceled: u64,
    pub released: u64,
    pub fenced: u64,
}

/// A job claimed for a slot, with when its claim was sent.
struct Handed {
    job: Claimed,
    claimed_at: Instant,
}

/// State shared by the slots of one worker process.
struct Shared {
    options: Options,
    /// This worker process in the registry: NAME#INSTANCE, the prefix of each of its claims.
    worker_id: String,
    database: Database,
    secret: Vec<u8>,
    store: PathBuf,
    bun: String,
    scratch: ScratchRoot,
    /// The binary attempts' supervisors run as, opened at the start.
    supervisor: SupervisorExe,
    /// A stop signal seen: claim nothing more.
    stopping: AtomicBool,
    /// The grace is over: stop running jobs and put them back in the queue.
    kill: AtomicBool,
    /// Claims left under --max-jobs / --once.
    budget: AtomicI64,
    /// Commits whose marker this process has seen: each commit is prepared once per process.
    prepared: Mutex<HashSet<PathBuf>>,
    /// Moved by the listener when jobs may have become claimable.
    wake: wake::Wake,
    /// Tickets of the slots waiting for work: a slot that claims takes them and claims a job for
    /// each. A waiting slot that finds its ticket taken when it wakes waits for the job claimed for
    /// it (`handed`) or for the ticket to come back; one that takes a ticket back claims for itself.
    /// So a job is claimed for a slot only while that slot waits for it.
    idle: AtomicUsize,
    /// Jobs a slot claimed for the slots whose tickets it took.
    handed: Mutex<VecDeque<Handed>>,
    /// The slots that meet the database failing now, and since when the first of them did: an
    /// outage is said once for all slots, and its end once.
    slots_in_trouble: Mutex<(usize, Option<std::time::Instant>)>,
    /// Claim ids of claims whose answer never came, with when to forget them (`unanswered`).
    unanswered: Mutex<Vec<(String, Instant)>>,
    /// Why the worker stops on its own with an error (the database's schema moved under it, or a
    /// bounded run met a claim that cannot succeed): no more claims, running jobs finish, exit 1.
    fatal: Mutex<Option<anyhow::Error>>,
    succeeded: AtomicU64,
    failed: AtomicU64,
    canceled: AtomicU64,
    released: AtomicU64,
    fenced: AtomicU64,
}

impl Shared {
    /// Take one claim from the --max-jobs budget (never below zero: a slot that finds the budget
    /// spent must not take from a claim another slot may give back).
    fn reserve(&self) -> bool {
        match self.options.until {
            Until::Jobs(_) => self
                .budget
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| (left > 0).then(|| left - 1))
                .is_ok(),
            _ => true,
        }
    }

    fn unreserve(&self) {
        if let Until::Jobs(_) = self.options.until {
            self.budget.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Hand these jobs to the slots whose tickets their claim took; how many there were.
    fn hand(&self, jobs: impl Iterator<Item = Claimed>, claimed_at: Instant) -> usize {
        let mut handed = self.handed.lock().unwrap_or_else(PoisonError::into_inner);
        let before = handed.len();
        handed.extend(jobs.map(|job| Handed { job, claimed_at }));
        handed.len() - before
    }

    /// Take one waiting slot's ticket, if any is left.
    fn take_ticket(&self) -> bool {
        self.idle.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |tickets| tickets.checked_sub(1)).is_ok()
    }

    fn give_tickets(&self, tickets: usize) {
        self.idle.fetch_add(tickets, Ordering::SeqCst);
    }

    fn take_handed(&self) -> Option<Handed> {
        self.handed.lock().unwrap_or_else(PoisonError::into_inner).pop_front()
    }

    fn nothing_handed(&self) -> bool {
        self.handed.lock().unwrap_or_else(PoisonError::into_inner).is_empty()
    }

    /// Stop claiming for `error`, said once, and end with it once the running jobs have ended.
    fn stop_for(&self, error: anyhow::Error) {
        let mut fatal = self.fatal.lock().unwrap_or_else(PoisonError::into_inner);
        if fatal.is_none() {
            diag!("worker {}: {error:#}: no more claims; running jobs finish", self.options.name);
            *fatal = Some(error);
        }
        self.stopping.store(true, Ordering::SeqCst);
        self.wake.bump();
    }

    fn budget_spent(&self) -> bool {
        matches!(self.options.until, Until::Jobs(_)) && self.budget.load(Ordering::SeqCst) <= 0
    }
}

/// Run a worker until `options.until` says so or a signal stops it.
pub(crate) fn run(database: Database, options: Options) -> Result<Summary> {
    options.check()?;
    // Nothing of this process (its environment with DATABASE_URL and WF_SECRET, its memory) may be
    // read through /proc or ptrace by another process of its user: the sandbox keeps actions away
    // from the worker, this keeps the rest of the machine's processes of that user away too.
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .context("making the worker not dumpable")?;
    let bun = options.local.bun.display().to_string();
    let mut version = crate::runner::check_bun(&bun)?;
    let supervisor = SupervisorExe::open(&options.local.supervisor)?;
    supervisor.check(&options.local.supervisor)?;
    let mut scratch = ScratchRoot::create_in(&options.local.home)?;
    // Only speed depends on it: without it each attempt's bun transpiles the wrapper itself.
    if let Err(error) = scratch.transpile_wrapper(&bun) {
        diag!("warning: worker {}: {error:#}; each attempt transpiles the action wrapper", options.name);
    }
    if let Isolation::Sandbox { allow_write } = &options.isolation {
        let probe = crate::runner::Isolation::Sandbox(crate::runner::SandboxOptions {
            allow_write: allow_write.clone(),
            ..Default::default()
        });
        version = crate::runner::probe(&scratch, &bun, &supervisor, probe).context(
            "the action sandbox cannot be set up here (it needs user, PID and mount namespaces, which \
             the kernel or a container runtime may refuse); run `wf work --isolation none` to run actions \
             without it",
        )?;
    } else if !options.quiet {
        diag!(
            "worker {}: --isolation none: actions run as this worker's user, can read what it can read, \
             and have no memory or process limits",
            options.name
        );
    }
    let shared = Arc::new(Shared {
        worker_id: format!("{}#{}", options.name, &uuid::Uuid::new_v4().simple().to_string()[..8]),
        budget: AtomicI64::new(match options.until {
            Until::Jobs(n) => i64::try_from(n).unwrap_or(i64::MAX),
            _ => 0,
        }),
        secret: options.local.secret.clone(),
        store: options.local.store.clone(),
        scratch,
        supervisor,
        bun,
        database,
        options,
        stopping: AtomicBool::new(false),
        kill: AtomicBool::new(false),
        prepared: Mutex::new(HashSet::new()),
        wake: wake::Wake::default(),
        idle: AtomicUsize::new(0),
        handed: Mutex::new(VecDeque::new()),
        slots_in_trouble: Mutex::new((0, None)),
        unanswered: Mutex::new(Vec::new()),
        fatal: Mutex::new(None),
        succeeded: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        canceled: AtomicU64::new(0),
        released: AtomicU64::new(0),
        fenced: AtomicU64::new(0),
    });
    // SIGHUP (the terminal is gone) stops as SIGTERM does, and SIGQUIT (Ctrl-\) as a second signal
    // does, instead of killing the worker and leaving its running jobs to the reaper; either stays
    // ignored when the worker was started with it ignored (`nohup`).
    let stop_signals = [SIGINT, SIGTERM].into_iter().chain([SIGHUP, SIGQUIT].into_iter().filter(|&s| !ignored(s)));
    let signals = signal_hook::iterator::Signals::new(stop_signals).context("installing signal handlers")?;
    // Listening before any slot looks at the queue (see `wake`).
    let first = wake::connect(&shared.database, &shared.options.name)?;
    if !shared.options.quiet {
        diag!(
            "worker {} started: tags {}, concurrency {}, bun {}",
            shared.options.name,
            shared.options.tags.join(","),
            shared.options.concurrency,
            version.trim()
        );
    }

    let done = Arc::new(AtomicBool::new(false));
    let listener = {
        let (shared, done) = (Arc::clone(&shared), Arc::clone(&done));
        std::thread::Builder::new()
            .name("listener".to_string())
            .spawn(move || wake::listen(&shared.database, &shared.options.name, &shared.wake, &done, first))
            .context("starting the worker's listener thread")?
    };
    // The helper threads first: when one cannot start, no slot has a job yet.
    let registry = {
        let (shared, done) = (Arc::clone(&shared), Arc::clone(&done));
        std::thread::Builder::new()
            .name("registry".to_string())
            .spawn(move || registry::keep_fresh(&shared, &done))
            .context("starting the worker's registry thread")?
    };
    let reaper = match shared.options.reap {
        true => {
            let (shared, done) = (Arc::clone(&shared), Arc::clone(&done));
            Some(
                std::thread::Builder::new()
                    .name("reaper".to_string())
                    .spawn(move || reaper_loop(&shared, &done))
                    .context("starting the worker's reaper thread")?,
            )
        }
        false => None,
    };

    let mut slots = Vec::new();
    let mut first_error = None;
    for index in 0..shared.options.concurrency {
        let slot_shared = Arc::clone(&shared);
        let slot =
            std::thread::Builder::new().name(format!("slot-{index}")).spawn(move || slot::run(&slot_shared, index));
        match slot {
            Ok(slot) => slots.push(slot),
            Err(error) => {
                // The slots already started stop claiming and end their jobs; then the error.
                shared.stopping.store(true, Ordering::SeqCst);
                first_error = Some(anyhow::anyhow!("starting worker slot {index}: {error}"));
                break;
            }
        }
    }
    if let Some(stuck) = supervise_shutdown(&shared, signals, &slots) {
        // Their threads are left behind with the process: its end closes their connections, and the
        // supervisors of any attempt still running kill it (their parent-death signal).
        bail!(
            "{stuck} still waiting for the database after the running jobs were stopped: the worker exits \
             without them (their jobs go back through the reaper)"
        );
    }
    let mut first_panic = None;
    for slot in slots {
        match slot.join() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                first_error.get_or_insert(error);
            }
            Err(panic) => {
                first_panic.get_or_insert(panic);
            }
        }
    }
    done.store(true, Ordering::SeqCst);
    // The helpers see `done` within a heartbeat period, unless their last call waits on such a
    // backend too: one that has not ended after two is left behind, said, with the process.
    let helpers: Vec<_> = reaper.into_iter().chain([listener, registry]).collect();
    let waited = Instant::now();
    while !helpers.iter().all(|thread| thread.is_finished()) && waited.elapsed() < shared.options.heartbeat * 2 {
        std::thread::sleep(Duration::from_millis(50));
    }
    for thread in helpers {
        if !thread.is_finished() {
            let name = thread.thread().name().unwrap_or("a helper thread");
            diag!("worker {}: {name} still waiting for the database: left behind", shared.options.name);
        } else if let Err(panic) = thread.join() {
            first_panic.get_or_insert(panic);
        }
    }
    // A panic was reported by the panic hook as it happened: passed on as it is, not reported again.
    if let Some(panic) = first_panic {
        std::panic::resume_unwind(panic);
    }
    let fatal = shared.fatal.lock().unwrap_or_else(PoisonError::into_inner).take();
    if let Some(error) = first_error.or(fatal) {
        return Err(error);
    }
    Ok(Summary {
        succeeded: shared.succeeded.load(Ordering::SeqCst),
        failed: shared.failed.load(Ordering::SeqCst),
        canceled: shared.canceled.load(Ordering::SeqCst),
        released: shared.released.load(Ordering::SeqCst),
        fenced: shared.fenced.load(Ordering::SeqCst),
    })
}

/// Whether `signal` is ignored: as this process was started, before any handler of ours.
fn ignored(signal: libc::c_int) -> bool {
    let mut current = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: a query (no new action) into a zeroed sigaction the call fills.
    let queried = unsafe { libc::sigaction(signal, std::ptr::null(), current.as_mut_ptr()) } == 0;
    // SAFETY: zeroed, then filled by the kernel when the query succeeded.
    queried && unsafe { current.assume_init() }.sa_sigaction == libc::SIG_IGN
}

/// Wait for the slots to end; on the first SIGINT/SIGTERM/SIGHUP stop claiming and give running
/// jobs the grace; when it is over (or on a second signal, or SIGQUIT), have the slots stop and
/// release them. A slot whose database call does not return (a backend that stopped answering,
/// where no timeout of the server's runs and TCP sees nothing wrong) would hold up the stop
/// forever: the slots not ended a while after that are named and given up on.
fn supervise_shutdown(
    shared: &Shared,
    mut signals: signal_hook::iterator::Signals,
    slots: &[std::thread::JoinHandle<Result<()>>],
) -> Option<String> {
    // The longest a completion is retried (a zombie window), and two heartbeat periods.
    let patience = shared.options.zombie_timeout + shared.options.heartbeat * 2;
    let mut deadline: Option<Instant> = None;
    let mut killed: Option<Instant> = None;
    while !slots.iter().all(|slot| slot.is_finished()) {
        for signal in signals.pending() {
            if signal == SIGQUIT {
                diag!("worker {}: SIGQUIT: stopping running jobs now; they go back to the queue", shared.options.name);
                shared.stopping.store(true, Ordering::SeqCst);
                shared.wake.bump();
                deadline = Some(Instant::now());
            } else if deadline.is_none() {
                diag!(
                    "worker {}: signal {signal}: no more claims; running jobs get {:?} to finish, then go back to the queue",
                    shared.options.name,
                    shared.options.grace
                );
                shared.stopping.store(true, Ordering::SeqCst);
                // Idle slots wake up to see it.
                shared.wake.bump();
                deadline = Some(Instant::now() + shared.options.grace);
            } else {
                diag!("worker {}: second signal: stopping running jobs now", shared.options.name);
                deadline = Some(Instant::now());
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            shared.kill.store(true, Ordering::SeqCst);
            let killed = *killed.get_or_insert_with(Instant::now);
            if killed.elapsed() >= patience {
                let stuck: Vec<&str> =
                    slots.iter().filter(|slot| !slot.is_finished()).filter_map(|slot| slot.thread().name()).collect();
                return Some(stuck.join(", "));
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// A reaper pass now and then (SKIP LOCKED makes it safe on every worker at once).
fn reaper_loop(shared: &Shared, done: &AtomicBool) {
    let period = (shared.options.zombie_timeout / 4).max(Duration::from_secs(1));
    let mut connection = connection::Connection::new(
        &shared.database,
        &format!("wf reap {}", shared.options.name),
        shared.options.zombie_timeout / 4,
    );
    let mut next = Instant::now();
    // A failing pass is said once, and the first that succeeds again once.
    let mut failing = false;
    while !done.load(Ordering::SeqCst) {
        if Instant::now() >= next {
            next = Instant::now() + period;
            // Given up after two periods, as the registry's beat is: a backend that stops
            // answering runs no timeout of the server's.
            let (window, limit) = (shared.options.zombie_timeout, shared.options.restart_limit);
            let pass = connection
                .bounded(period * 2, move |session| crate::queue::reaper::reap_once(session.client(), window, limit));
            if pass.is_ok() && std::mem::replace(&mut failing, false) {
                diag!("worker {}: reaper passes succeed again", shared.options.name);
            }
            match pass {
                Ok(reaped) if reaped != Default::default() && !shared.options.quiet => {
                    let dropped = match reaped.dropped {
                        0 => String::new(),
                        n => format!(", dropped {n} (jobs deleted outside wf)"),
                    };
                    diag!(
                        "worker {}: reaper: requeued {}, failed {}, canceled {}{dropped}",
                        shared.options.name,
                        reaped.requeued,
                        reaped.failed,
                        reaped.canceled
                    )
                }
                Ok(_) => {}
                Err(error) => {
                    if !std::mem::replace(&mut failing, true) {
                        diag!("worker {}: reaper pass failed: {error:#}; retrying", shared.options.name);
                    }
                    connection.reset_if_lost(&error);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
