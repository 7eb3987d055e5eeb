//! `wf bench`: measure the spine on the configured database, in a corner of its own.
//!
//! Everything the bench creates lives under one name, `wf-bench-<8 hex>`: a synthetic source, app
//! and action in the catalog, the jobs of that tag, and with `--bun` the action's tree in the
//! store. `Namespace` removes all of it when the bench ends, also when a measurement fails or the
//! operator presses Ctrl-C. The jobs go through the single enqueue path and the real claim and
//! completion statements; only the executor is a no-op, except in the `--bun` measurement, which
//! runs a real worker in-process.

use std::fs;
use std::ops::ControlFlow;
use std::panic::resume_unwind;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use postgres::{Client, Statement};
use serde_json::{Value, json};
use signal_hook::consts::{SIGINT, SIGTERM};
use uuid::Uuid;

use crate::db::listen::Listener;
use crate::db::{Database, Session};
use crate::diag::diag;
use crate::queue::CHANNEL_ENQUEUED;
use crate::queue::claim::{self, Claimed};
use crate::queue::complete::{self, Completion, Recorded};
use crate::queue::enqueue::{self, Request};
use crate::queue::job::JobStatus;
use crate::queue::prune;
use crate::runner::supervisor;
use crate::source::{catalog, git_source, manifest, store};
use crate::worker::{self, Isolation, Local, Options, Until};
use git2::{ObjectType, Oid};

/// The bench's action, and the same action warm (`"warm": true`).
const ACTION: &str = "noop";
const WARM_ACTION: &str = "noop_warm";
const ENTRYPOINT: &str = "noop.ts";
const NOOP_SOURCE: &str = "export function main(input) { return input; }\n";
/// Latency samples are paced and `--bun` jobs each start a process: both are capped.
const LATENCY_SAMPLES_MAX: u32 = 200;
const BUN_JOBS_MAX: u32 = 200;
/// Enqueues of a transaction each wait for its commit's flush (about 260 a second here): more
/// would only lengthen the run (30,000 took two minutes).
const SINGLE_ENQUEUES_MAX: u32 = 2_000;
/// With `--floor`, claim and complete and the floor run in this many rounds, one after the other:
/// a change in the host's speed during the run weighs on both alike.
const ROUNDS: u32 = 5;
/// Batch enqueues measured, of which the median counts.
pub(crate) const ENQUEUE_BATCHES: u32 = 5;
/// Warm jobs start no process: more of them, for a run long enough to measure.
const WARM_JOBS_MAX: u32 = 5000;
/// With `--bun`, the bare loop and the three end-to-end runs go in this many rounds, one after
/// the other: a change in the host's speed weighs on all of them alike.
const BUN_ROUNDS: u32 = 4;
/// The pause after each latency sample, so the claimer is back to waiting when the next job comes.
const LATENCY_PACE: Duration = Duration::from_millis(5);
/// A job not picked up within this long means the claimer is not woken: fail rather than hang.
const PICKUP_TIMEOUT: Duration = Duration::from_secs(10);
/// The window the bench's claimers claim with (they complete at once: never reaped).
const CLAIM_WINDOW: Duration = Duration::from_secs(60);
/// How long a bun measurement waits for the processes it started to be waited for (see `BunRun`).
const CHILDREN_WAITED: Duration = Duration::from_secs(5);
/// How many times the database server's processor time is read at most (see `Server::cpu`).
const SERVER_READINGS: usize = 10;
/// How long the idle claimer waits before looking again (a lost notification costs at most this).
const IDLE_POLL: Duration = Duration::from_millis(250);

/// What to measure.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Jobs per measurement.
    pub jobs: u32,
    /// Concurrent claimers for the claim-to-complete rate, and the `--bun` worker's concurrency.
    pub workers: u32,
    /// Also measure end to end with a trivial bun action, run by a worker of this host.
    pub bun: Option<Local>,
    /// This host's store: where the `--bun` action's tree goes, and where a bench that did not
    /// finish may have left one.
    pub store: Option<PathBuf>,
    /// Also measure the floor: the seed's minimal statements, prepared, on a scratch schema.
    pub floor: bool,
    /// Jobs each claimer claims, and completes, per statement (a worker claims as many as it has
    /// idle slots).
    pub batch: u32,
}

/// How long a number of jobs took.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Rate {
    pub jobs: u64,
    pub elapsed: Duration,
}

impl Rate {
    pub(crate) fn per_second(&self) -> f64 {
        self.jobs as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

/// A measurement made in rounds, summed: the jobs and their time, and the database server's
/// processor time while it is known for every round.
struct Summed {
    rate: Rate,
    db_cpu: Option<Duration>,
}

impl Summed {
    fn new() -> Summed {
        Summed { rate: Rate::default(), db_cpu: Some(Duration::ZERO) }
    }

    /// Count one round (`Server::measure`'s rate and server time) in.
    fn add(&mut self, (rate, db_cpu): (Rate, Option<Duration>)) {
        self.rate.jobs += rate.jobs;
        self.rate.elapsed += rate.elapsed;
        self.db_cpu = self.db_cpu.zip(db_cpu).map(|(sum, cpu)| sum + cpu);
    }
}

/// Time from an enqueue's commit to an idle claimer's claim of that job.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Latency {
    pub samples: usize,
    pub p50: Duration,
    pub p99: Duration,
}

/// Every measurement of one bench run.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub tag: String,
    pub jobs: u32,
    pub workers: u32,
    pub batch: u32,
    /// One enqueue call and one transaction per job.
    pub enqueue_single: Rate,
    /// One enqueue call with every input, in one transaction.
    pub enqueue_batch: Rate,
    /// Claim, then complete as success at once, across `workers` connections.
    pub claim_complete: Rate,
    /// The database server's processor time during `claim_complete`, when it runs on this host.
    pub claim_complete_db_cpu: Option<Duration>,
    pub pickup: Latency,
    /// A real worker running a trivial bun action (with `--bun`), in sandboxes, and without.
    pub bun: Option<BunRates>,
    /// The seed's minimal claim and completion, prepared, over `workers` connections (`--floor`).
    pub floor: Option<Rate>,
    /// The database server's processor time during `floor`, when it runs on this host.
    pub floor_db_cpu: Option<Duration>,
    /// The share of this machine's processor time its hypervisor gave to others during the run
    /// (steal), when the kernel counts it.
    pub steal: Option<f64>,
}

/// The end-to-end rate with and without the sandbox, warm, and the bare spawn loop of the same
/// action, measured one after the other in rounds (`BUN_ROUNDS`), each summed over them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BunRates {
    pub sandbox: BunRun,
    pub none: BunRun,
    /// The same action warm, in sandboxes: a bun per slot runs every job.
    pub warm: BunRun,
    /// `bun run` of a minimal runner of the same action, `workers` at a time, nothing of wf around.
    pub bare: BunRun,
}

impl BunRates {
    /// These rounds and `other`'s, summed.
    fn add(&self, other: &BunRates) -> BunRates {
        BunRates {
            sandbox: self.sandbox.add(&other.sandbox),
            none: self.none.add(&other.none),
            warm: self.warm.add(&other.warm),
            bare: self.bare.add(&other.bare),
        }
    }

    /// What a sandbox adds to one attempt: the difference in time per job, times the attempts
    /// that ran at once.
    pub(crate) fn sandbox_cost_per_attempt(&self, workers: u32) -> Duration {
        let per_job = |run: &BunRun| run.rate.elapsed.as_secs_f64() / run.rate.jobs.max(1) as f64;
        Duration::from_secs_f64(((per_job(&self.sandbox) - per_job(&self.none)) * f64::from(workers)).max(0.0))
    }
}

/// One measurement with bun: its rate, and the processor time it took on this host.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BunRun {
    pub rate: Rate,
    /// User and system time of the bench process (the worker runs in it) and of every process it
    /// started (supervisors, sandboxes, bun), from start to end; the database server's is not in it.
    pub cpu: Duration,
    /// The database server's, when it runs on this host (see `Server`).
    pub db_cpu: Option<Duration>,
}

impl BunRun {
    /// This measurement's jobs, time and processor time, and `other`'s, summed.
    fn add(&self, other: &BunRun) -> BunRun {
        BunRun {
            rate: Rate { jobs: self.rate.jobs + other.rate.jobs, elapsed: self.rate.elapsed + other.rate.elapsed },
            cpu: self.cpu + other.cpu,
            db_cpu: self.db_cpu.zip(other.db_cpu).map(|(mine, theirs)| mine + theirs),
        }
    }

    /// Processor time per job. When it, times the jobs run at once, exceeds the time per job, the
    /// host's processors were the limit, not waiting.
    pub(crate) fn cpu_per_job(&self) -> Duration {
        per_job(self.cpu, self.rate.jobs)
    }

    /// The database server's processor time per job, when it runs on this host.
    pub(crate) fn db_cpu_per_job(&self) -> Option<Duration> {
        self.db_cpu.map(|cpu| per_job(cpu, self.rate.jobs))
    }

    /// Measure `run`, and the processor time of this process and its children meanwhile, and of
    /// the database `server`'s processes.
    fn measure(server: Option<Server>, run: impl FnOnce() -> Result<Rate>) -> Result<BunRun> {
        let before = cpu_used();
        let (rate, db_cpu) = Server::measure(server, run)?;
        // A child's time is counted once it is waited for: a supervisor may still be waited for
        // in the background.
        let waited = Instant::now() + CHILDREN_WAITED;
        while supervisor::has_children() && Instant::now() < waited {
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(BunRun { rate, cpu: cpu_used().saturating_sub(before), db_cpu })
    }
}

/// User and system time of this process and of its children that were waited for (with theirs).
fn cpu_used() -> Duration {
    let of = |who| {
        // SAFETY: rusage is plain integers, for which all zeroes is a value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage writes one rusage into the value it is given, nothing else.
        if unsafe { libc::getrusage(who, &mut usage) } != 0 {
            return Duration::ZERO;
        }
        let time = |t: libc::timeval| {
            Duration::new(u64::try_from(t.tv_sec).unwrap_or(0), u32::try_from(t.tv_usec).unwrap_or(0) * 1000)
        };
        time(usage.ru_utime) + time(usage.ru_stime)
    };
    of(libc::RUSAGE_SELF) + of(libc::RUSAGE_CHILDREN)
}

/// The database server, when it runs on this host and its processes can be read: the processor
/// time of all of them (the postmaster, its backends and background processes, and those that
/// ended) can then be measured around a measurement. Other work on the server counts too.
#[derive(Debug, Clone, Copy)]
struct Server {
    postmaster: i32,
}

impl Server {
    /// The server of `client`'s backend, found as the parent of the backend's process.
    fn find(client: &mut Client) -> Option<Server> {
        let backend: i32 = client.query_one("SELECT pg_backend_pid()", &[]).ok()?.get(0);
        let postmaster: i32 = supervisor::stat_fields(backend)?.get(1)?.parse().ok()?;
        let name = fs::read_to_string(format!("/proc/{postmaster}/comm")).ok()?;
        matches!(name.trim(), "postgres" | "postmaster").then_some(Server { postmaster })
    }

    /// User and system time of the postmaster and of every process it started, ended or not.
    fn cpu(&self) -> Option<Duration> {
        let ticks = |fields: &[String], from: usize, to: usize| -> Option<u64> {
            fields.get(from..=to)?.iter().map(|field| field.parse::<u64>().ok()).sum()
        };
        // An ended process's time moves into the postmaster's once the postmaster waits for it: one
        // that ends while the others are read could be counted twice or not at all, so the reading
        // is taken again while a process ended during it. On a server whose connections come and
        // go all the time, the last reading counts such a process twice rather than not at all.
        let mut total = 0;
        for _ in 0..SERVER_READINGS {
            let waited = ticks(&supervisor::stat_fields(self.postmaster)?, 13, 14)?;
            let mut running = 0;
            for entry in fs::read_dir("/proc").ok()?.flatten() {
                let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<i32>().ok()) else { continue };
                match supervisor::stat_fields(pid) {
                    Some(fields) if fields.get(1).and_then(|ppid| ppid.parse().ok()) == Some(self.postmaster) => {
                        running += ticks(&fields, 11, 12).unwrap_or(0);
                    }
                    _ => {}
                }
            }
            let postmaster = supervisor::stat_fields(self.postmaster)?;
            total = ticks(&postmaster, 11, 14)? + running;
            if ticks(&postmaster, 13, 14)? == waited {
                break;
            }
        }
        Some(Duration::from_secs_f64(total as f64 / rustix::param::clock_ticks_per_second() as f64))
    }

    /// Run `run`, and the server's processor time meanwhile (None without a server of this host).
    fn measure<T>(server: Option<Server>, run: impl FnOnce() -> Result<T>) -> Result<(T, Option<Duration>)> {
        let before = server.and_then(|server| server.cpu());
        let value = run()?;
        let after = server.and_then(|server| server.cpu());
        Ok((value, before.zip(after).map(|(before, after)| after.saturating_sub(before))))
    }
}

/// Processor time per job.
pub(crate) fn per_job(cpu: Duration, jobs: u64) -> Duration {
    cpu / u32::try_from(jobs.max(1)).unwrap_or(u32::MAX)
}

/// Where a bench run is, for a progress display. Called from several threads at once.
pub(crate) trait Progress: Sync {
    /// A measurement over `jobs` jobs begins.
    fn begin(&self, measurement: &str, jobs: u64);
    /// This many jobs of the current measurement are done.
    fn done(&self, jobs: u64);
}

/// Run every measurement of `plan` in a new namespace, and remove the namespace.
pub(crate) fn run(database: &Database, plan: &Plan, progress: &dyn Progress) -> Result<Report> {
    let interrupt = Interrupt::install()?;
    let namespace = Namespace::create(database, plan.store.as_deref(), plan.bun.is_some())?;
    let report = measure(&namespace, plan, progress, &interrupt);
    let left_behind = namespace.left_behind();
    match (report, namespace.remove()) {
        (Ok(report), Ok(())) => Ok(report),
        (Ok(_), Err(cleanup)) => Err(cleanup.context(format!("left behind: {left_behind}"))),
        (Err(error), Ok(())) => Err(error),
        (Err(error), Err(cleanup)) => {
            diag!("warning: wf bench could not clean up after itself: {cleanup:#}; left behind: {left_behind}");
            Err(error)
        }
    }
}

fn measure(namespace: &Namespace, plan: &Plan, progress: &dyn Progress, interrupt: &Interrupt) -> Result<Report> {
    let processors = Processors::read();
    let database = &namespace.database;
    let mut client = database.connect_as(&format!("{} enqueue", namespace.tag))?;
    let jobs = plan.jobs;

    let enqueue_single =
        enqueue_one_by_one(&mut client, namespace, jobs.min(SINGLE_ENQUEUES_MAX), progress, interrupt)?;
    prune::delete_tag(&mut client, &namespace.tag)?;

    let enqueue_batch = enqueue_batches(&mut client, namespace, jobs, progress, interrupt)?;

    let server = Server::find(&mut client);
    let mut claimers = Claimers::connect(namespace, plan.workers, plan.batch)?;
    let mut floor = plan.floor.then(|| Floor::create(namespace, jobs, plan.workers)).transpose()?;
    let rounds = if floor.is_some() { ROUNDS.min(jobs) } else { 1 };
    let (mut claim_complete, mut floor_rounds) = (Summed::new(), Summed::new());
    for round in 1..=rounds {
        // The last round takes whatever is left: a round may end a few jobs past its share.
        let share = u64::from(jobs / rounds);
        let quota = |done: u64| if round == rounds { u64::from(jobs).saturating_sub(done) } else { share };
        let name = |what: &str| match rounds {
            1 => what.to_string(),
            _ => format!("{what}, round {round} of {rounds}"),
        };
        let quota_left = quota(claim_complete.rate.jobs);
        claim_complete.add(Server::measure(server, || {
            claimers.round(quota_left, &name("claim + complete (no-op)"), progress, interrupt)
        })?);
        if let Some(floor) = floor.as_mut() {
            let quota_left = quota(floor_rounds.rate.jobs);
            floor_rounds.add(Server::measure(server, || {
                floor.round(quota_left, &name("floor: the seed's statements, prepared"), progress, interrupt)
            })?);
        }
    }
    drop(claimers);
    expect_succeeded(&mut client, &namespace.tag, jobs, "claim-to-complete")?;
    prune::delete_tag(&mut client, &namespace.tag)?;
    let (floor, floor_db_cpu) = match floor {
        Some(floor) => {
            floor.remove(&mut client, jobs)?;
            (Some(floor_rounds.rate), floor_rounds.db_cpu)
        }
        None => (None, None),
    };

    let pickup = pickup_latency(&mut client, namespace, jobs.min(LATENCY_SAMPLES_MAX), progress, interrupt)?;
    prune::delete_tag(&mut client, &namespace.tag)?;

    let bun = if let Some(local) = &plan.bun {
        let (cold_jobs, warm_jobs) = (jobs.min(BUN_JOBS_MAX), jobs.min(WARM_JOBS_MAX));
        let mut end_to_end = |isolation: Isolation, action: &str, jobs: u32, name: &str| -> Result<BunRun> {
            let worker = Worker { workers: plan.workers, isolation, local: local.clone() };
            let run = BunRun::measure(server, || {
                bun_end_to_end(&mut client, namespace, action, jobs, worker, name, progress, interrupt)
            })?;
            expect_succeeded(&mut client, &namespace.tag, jobs, name)?;
            prune::delete_tag(&mut client, &namespace.tag)?;
            Ok(run)
        };
        let sandboxed = || Isolation::Sandbox { allow_write: Vec::new() };
        let rounds = BUN_ROUNDS.min(cold_jobs);
        let mut summed: Option<BunRates> = None;
        for round in 0..rounds {
            // Each round its share of the jobs, the first ones one more while some are left over.
            let share = |total: u32| total / rounds + u32::from(round < total % rounds);
            let name = |what: &str| match rounds {
                1 => what.to_string(),
                _ => format!("{what}, round {} of {rounds}", round + 1),
            };
            let bare = BunRun::measure(None, || {
                bare_bun(
                    namespace,
                    &local.bun,
                    share(cold_jobs),
                    plan.workers,
                    &name("bare bun loop"),
                    progress,
                    interrupt,
                )
            })?;
            let sandbox = end_to_end(sandboxed(), ACTION, share(cold_jobs), &name("bun end to end"))?;
            let none = end_to_end(Isolation::None, ACTION, share(cold_jobs), &name("bun end to end, no sandbox"))?;
            let warm = end_to_end(sandboxed(), WARM_ACTION, share(warm_jobs), &name("bun end to end, warm"))?;
            let round = BunRates { sandbox, none, warm, bare };
            summed = Some(summed.map_or(round, |summed| summed.add(&round)));
        }
        summed
    } else {
        None
    };
    Ok(Report {
        tag: namespace.tag.clone(),
        jobs,
        workers: plan.workers,
        batch: plan.batch,
        enqueue_single,
        enqueue_batch,
        claim_complete: claim_complete.rate,
        claim_complete_db_cpu: claim_complete.db_cpu,
        pickup,
        bun,
        floor,
        floor_db_cpu,
        steal: processors.zip(Processors::read()).and_then(|(before, after)| before.steal_until(after)),
    })
}

/// This machine's processor time as its kernel counts it (the first line of `/proc/stat`), in
/// clock ticks: all of it, and the part the hypervisor gave to other guests (steal). On a virtual
/// machine whose host is busy, the steal is time the measurements waited for a processor.
#[derive(Debug, Clone, Copy)]
struct Processors {
    total: u64,
    steal: u64,
}

impl Processors {
    fn read() -> Option<Processors> {
        Processors::parse(&fs::read_to_string("/proc/stat").ok()?)
    }

    fn parse(stat: &str) -> Option<Processors> {
        let ticks = stat.lines().next()?.strip_prefix("cpu ")?.split_whitespace();
        let ticks: Vec<u64> = ticks.map(|field| field.parse().ok()).collect::<Option<_>>()?;
        // user, nice, system, idle, iowait, irq, softirq, steal: the guest times after them are
        // already counted in user and nice.
        let counted = ticks.get(..8)?;
        Some(Processors { total: counted.iter().sum(), steal: counted[7] })
    }

    /// The share of the processor time from this reading to `later` that was stolen.
    fn steal_until(self, later: Processors) -> Option<f64> {
        let total = later.total.checked_sub(self.total).filter(|&total| total > 0)?;
        Some(later.steal.saturating_sub(self.steal) as f64 / total as f64)
    }
}

/// The URL of a bench's source: it marks the source as a bench's, with the name's pattern.
const SYNTHETIC_URL: &str = "wf-bench://synthetic-removed-when-the-bench-ends";

/// The class of a running bench's advisory lock, `(BENCH_LOCK, hashtext(tag))`, which its guard
/// connection holds for as long as the bench runs: a bench whose lock is free is gone.
const BENCH_LOCK: i32 = 0x7766_6265; // "wfbe"

/// The bench's catalog rows, jobs and store tree. Removed by `remove`, or when dropped (a
/// measurement failed, or the run was interrupted); what a bench killed, or stopped by a second
/// signal, left behind is removed by the next bench on the database (`sweep_leftovers`).
struct Namespace {
    database: Database,
    /// Holds the bench's advisory lock until the namespace is removed (in a mutex: the namespace is
    /// shared by the measurements' threads, a connection cannot be).
    _guard: std::sync::Mutex<Client>,
    /// The tag of every bench job; also the name of the bench's source and app.
    tag: String,
    git_source_id: Uuid,
    /// The source's folder in the store, with `--bun`.
    store_dir: Option<PathBuf>,
    removed: bool,
}

impl Namespace {
    /// The catalog rows the enqueue path needs (a source, an app and an action, written by the
    /// library's own catalog), and with `bun` the action's tree in `store`, marker last and before
    /// the catalog, as `wf sync` does. First removes what benches that did not finish left, their
    /// folders in `store` too.
    fn create(database: &Database, store: Option<&Path>, bun: bool) -> Result<Namespace> {
        let tag = format!("wf-bench-{}", &Uuid::new_v4().simple().to_string()[..8]);
        let commit_sha = format!("{}{}", Uuid::new_v4().simple(), &Uuid::new_v4().simple().to_string()[..8]);
        let mut guard = database.connect_as(&format!("{tag} guard"))?;
        // Idle for the whole run: a server that ends idle sessions would free the lock under it.
        guard.batch_execute("SET idle_session_timeout = 0")?;
        guard.execute("SELECT pg_advisory_lock($1, hashtext($2))", &[&BENCH_LOCK, &tag])?;
        sweep_leftovers(database, &mut guard, store)?;
        let mut namespace = Namespace {
            database: database.clone(),
            _guard: std::sync::Mutex::new(guard),
            tag,
            git_source_id: Uuid::nil(),
            store_dir: None,
            removed: false,
        };
        let mut client = database.connect_as(&format!("{} setup", namespace.tag))?;
        let mut tx = client.transaction()?;
        let source = git_source::add(&mut tx, &namespace.tag, SYNTHETIC_URL, None)?;
        namespace.git_source_id = source.id;
        if bun {
            let store = store.context("the store of this host, for the bench's action")?;
            namespace.store_dir = Some(store.join(source.id.to_string()));
            let files = [store::TreeFile {
                path: ENTRYPOINT.into(),
                blob: Oid::hash_object(ObjectType::Blob, NOOP_SOURCE.as_bytes())?,
                executable: false,
            }];
            let digest = store::digest_of(&files);
            store::materialize(store, source.id, &commit_sha, &files, &digest, &mut NoopBlob, &mut |_, _| {})?;
        }
        let action = |key: &str, warm: bool| manifest::Action {
            key: key.to_string(),
            entrypoint: ENTRYPOINT.to_string(),
            input_schema: None,
            output_schema: None,
            timeout_s: 60,
            tag: namespace.tag.clone(),
            sandbox: manifest::Sandbox::default(),
            retries: None,
            warm,
        };
        let app = manifest::App {
            key: namespace.tag.clone(),
            tag: Some(namespace.tag.clone()),
            actions: vec![action(ACTION, false), action(WARM_ACTION, true)],
        };
        catalog::replace(&mut tx, &source, None, &commit_sha, &manifest::Manifest { apps: vec![app] })?;
        tx.commit().with_context(|| format!("creating the bench's source, app and action {}", namespace.tag))?;
        Ok(namespace)
    }

    fn request(&self, inputs: Vec<Value>) -> Request<'_> {
        self.request_of(ACTION, inputs)
    }

    fn request_of<'a>(&'a self, action: &'a str, inputs: Vec<Value>) -> Request<'a> {
        Request::new(&self.tag, action, inputs)
    }

    /// Remove everything the bench made; the first failure is returned after trying the rest.
    fn remove(mut self) -> Result<()> {
        self.removed = true;
        self.remove_all()
    }

    fn remove_all(&self) -> Result<()> {
        remove_namespace(&self.database, &self.tag, Some(self.git_source_id), self.store_dir.as_deref())
    }

    /// What is left behind when the namespace cannot be removed.
    fn left_behind(&self) -> String {
        format!(
            "jobs tagged {tag}, source {tag}{}; the next `wf bench` on this database removes them",
            self.store_dir.as_ref().map_or(String::new(), |dir| format!(", {}", dir.display())),
            tag = self.tag,
        )
    }
}

/// Remove a bench's jobs, floor schema, source (when it has one) and workers' registry rows, and
/// its store folder `store_dir`; the first failure is returned after trying the rest.
fn remove_namespace(database: &Database, tag: &str, source: Option<Uuid>, store_dir: Option<&Path>) -> Result<()> {
    let rows = database.connect_as(&format!("{tag} cleanup")).and_then(|mut client| {
        let mut tx = client.transaction()?;
        prune::delete_tag(&mut tx, tag)?;
        tx.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", floor_schema(tag)))?;
        if let Some(source) = source {
            git_source::delete(&mut tx, source)?;
        }
        // The registry rows of the `--bun` rounds' workers, named after the tag.
        tx.execute("DELETE FROM worker WHERE name = $1", &[&tag])?;
        tx.commit()?;
        Ok(())
    });
    let tree = match store_dir {
        Some(dir) if dir.exists() => fs::remove_dir_all(dir)
            .with_context(|| format!("removing {}", dir.display()))
            // The action's contents, linked from no tree now.
            .and_then(|()| {
                let Some(store) = dir.parent() else { return Ok((0, 0)) };
                match store::lock(store)? {
                    Some(lock) => store::remove_trees(store, &lock, &[], false),
                    None => Ok((0, 0)),
                }
            })
            .map(|_| ()),
        _ => Ok(()),
    };
    rows.with_context(|| format!("removing the bench's jobs and catalog rows (tag and source {tag})"))?;
    tree
}

/// Remove what benches that are gone left behind (killed, stopped by a second signal, or cut off
/// from the database before they could clean up): the source, jobs and floor schema of every bench
/// whose advisory lock no one holds, and with a `store` their folders in it. Each is locked by
/// `guard` while it is removed, so two benches never remove one together.
fn sweep_leftovers(database: &Database, guard: &mut Client, store: Option<&Path>) -> Result<()> {
    let leftovers = guard.query(
        "SELECT t.tag, s.id
           FROM (SELECT name AS tag FROM git_source WHERE name ~ $2 AND url = $1
                 UNION
                 SELECT 'wf-bench-' || substr(nspname, 16) FROM pg_namespace
                  WHERE nspname ~ '^wf_bench_floor_[0-9a-f]{8}$') t
           LEFT JOIN git_source s ON s.name = t.tag AND s.url = $1",
        &[&SYNTHETIC_URL, &NAME_PATTERN],
    )?;
    for leftover in leftovers {
        let (tag, source): (String, Option<Uuid>) = (leftover.get(0), leftover.get(1));
        // Free, and no connection named after the bench (each of a bench's is, its worker's too):
        // a running bench whose guard connection was lost (a restart of the server) keeps its own.
        let gone: bool = guard
            .query_one(
                "SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE strpos(application_name, $2) > 0)
                        AND pg_try_advisory_lock($1, hashtext($2))",
                &[&BENCH_LOCK, &tag],
            )?
            .get(0);
        if !gone {
            continue;
        }
        let store_dir = store.zip(source).map(|(store, source)| store.join(source.to_string()));
        let removed = remove_namespace(database, &tag, source, store_dir.as_deref());
        guard.execute("SELECT pg_advisory_unlock($1, hashtext($2))", &[&BENCH_LOCK, &tag])?;
        // What cannot be removed (a schema of another role, say) is said, and the bench goes on.
        match removed {
            Ok(()) => diag!(
                "wf bench: removed the jobs and catalog rows that the bench {tag}, which did not finish, left behind"
            ),
            Err(error) => diag!(
                "warning: wf bench could not remove what the bench {tag}, which did not finish, left behind: {error:#}"
            ),
        }
    }
    Ok(())
}

/// The names of benches (their source, app, tag and workers), as a regular expression of SQL.
pub(crate) const NAME_PATTERN: &str = "^wf-bench-[0-9a-f]{8}$";

/// A bench's name: `wf-bench-` and 8 hexadecimal digits, as `NAME_PATTERN` matches.
pub(crate) fn is_bench_name(name: &str) -> bool {
    name.strip_prefix("wf-bench-")
        .is_some_and(|id| id.len() == 8 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

/// The floor's scratch schema of the bench of `tag`.
fn floor_schema(tag: &str) -> String {
    format!("wf_bench_floor_{}", tag.trim_start_matches("wf-bench-"))
}

impl Drop for Namespace {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        if let Err(error) = self.remove_all() {
            diag!("warning: wf bench could not clean up after itself: {error:#}; left behind: {}", self.left_behind());
        }
    }
}

/// The bench action's one file, from memory.
struct NoopBlob;

impl store::BlobSource for NoopBlob {
    fn send(&mut self, blobs: &[Oid], sink: &mut dyn FnMut(Oid, &[u8]) -> Result<()>) -> Result<()> {
        for &oid in blobs {
            sink(oid, NOOP_SOURCE.as_bytes())?;
        }
        Ok(())
    }
}

/// The floor: the seed's claim for one tag (`tag = $1`: with `tag = ANY($1)` PostgreSQL 15 cannot
/// walk the index in order and sorts the queue at every claim) and a one-statement completion,
/// prepared once per connection, on tables with just the columns they touch, in a schema of their
/// own, over `workers` connections. What the spine's claim-to-complete is measured against: the same
/// database, the same connections, the least work the design allows.
struct Floor {
    schema: String,
    /// One connection per worker, with its claim and completion prepared.
    claimers: Vec<(Client, Statement, Statement)>,
    /// Claims made so far: each claim's owner is unique.
    claims: u64,
}

impl Floor {
    /// The scratch schema with `jobs` due jobs, and the connections.
    fn create(namespace: &Namespace, jobs: u32, workers: u32) -> Result<Floor> {
        let schema = floor_schema(&namespace.tag);
        let mut client = namespace.database.connect_as(&format!("{} floor setup", namespace.tag))?;
        client.batch_execute(&format!(
            "CREATE SCHEMA {schema};
             CREATE TABLE {schema}.job_queue (
                 job_id uuid PRIMARY KEY, tag text NOT NULL, priority integer NOT NULL,
                 scheduled_for timestamptz NOT NULL, running boolean NOT NULL DEFAULT false,
                 started_at timestamptz, worker text, canceled_by text);
             CREATE INDEX ON {schema}.job_queue (tag, priority DESC NULLS LAST, scheduled_for)
                 WHERE NOT running AND canceled_by IS NULL;
             CREATE TABLE {schema}.job_runtime (job_id uuid PRIMARY KEY, ping timestamptz NOT NULL);
             CREATE TABLE {schema}.job_completed (
                 job_id uuid PRIMARY KEY, status text NOT NULL, result jsonb,
                 completed_at timestamptz NOT NULL DEFAULT now());"
        ))?;
        client.execute(
            &format!(
                "INSERT INTO {schema}.job_queue (job_id, tag, priority, scheduled_for)
                 SELECT gen_random_uuid(), 'floor', 0, now() - interval '1 minute' + n * interval '1 microsecond'
                   FROM generate_series(1, $1::bigint) AS n"
            ),
            &[&i64::from(jobs)],
        )?;
        client.batch_execute(&format!("ANALYZE {schema}.job_queue"))?;
        let claim_sql = format!(
            "WITH peek AS (
                 SELECT job_id FROM {schema}.job_queue
                  WHERE running = false AND canceled_by IS NULL AND scheduled_for <= now() AND tag = $1
                  ORDER BY priority DESC NULLS LAST, scheduled_for
                    FOR UPDATE SKIP LOCKED LIMIT 1),
             q AS (
                 UPDATE {schema}.job_queue SET running = true, started_at = now(), worker = $2
                  WHERE job_id = (SELECT job_id FROM peek) RETURNING job_id),
             r AS (
                 INSERT INTO {schema}.job_runtime (job_id, ping) SELECT job_id, now() FROM q
                 ON CONFLICT (job_id) DO UPDATE SET ping = now())
             SELECT job_id FROM q"
        );
        let complete_sql = format!(
            "WITH gate AS (DELETE FROM {schema}.job_queue WHERE job_id = $1 AND worker = $2 RETURNING job_id),
             runtime AS (DELETE FROM {schema}.job_runtime WHERE job_id IN (SELECT job_id FROM gate))
             INSERT INTO {schema}.job_completed (job_id, status, result) SELECT job_id, 'success', '{{}}' FROM gate"
        );
        let claimers = (0..workers)
            .map(|worker| -> Result<(Client, Statement, Statement)> {
                let mut client = namespace.database.connect_as(&format!("{} floor {worker}", namespace.tag))?;
                let claim = client.prepare(&claim_sql)?;
                let complete = client.prepare(&complete_sql)?;
                Ok((client, claim, complete))
            })
            .collect::<Result<_>>()?;
        Ok(Floor { schema, claimers, claims: 0 })
    }

    /// Claim and complete `quota` jobs (the last claims of a round may take a few more), or until
    /// none is left.
    fn round(&mut self, quota: u64, name: &str, progress: &dyn Progress, interrupt: &Interrupt) -> Result<Rate> {
        progress.begin(name, quota);
        let (done, claims) = (AtomicU64::new(0), AtomicU64::new(self.claims));
        let started = Instant::now();
        let results: Vec<Result<()>> = std::thread::scope(|scope| {
            let threads: Vec<_> = self
                .claimers
                .iter_mut()
                .map(|(client, claim, complete)| {
                    let (done, claims) = (&done, &claims);
                    scope.spawn(move || -> Result<()> {
                        while done.load(Ordering::SeqCst) < quota {
                            interrupt.check()?;
                            let owner = format!("floor#{}", claims.fetch_add(1, Ordering::SeqCst));
                            let Some(row) = client.query_opt(&*claim, &[&"floor", &owner])? else { return Ok(()) };
                            let job: Uuid = row.get(0);
                            client.execute(&*complete, &[&job, &owner])?;
                            progress.done(done.fetch_add(1, Ordering::SeqCst) + 1);
                        }
                        Ok(())
                    })
                })
                .collect();
            threads.into_iter().map(|thread| thread.join().unwrap_or_else(|panic| resume_unwind(panic))).collect()
        });
        let elapsed = started.elapsed();
        self.claims = claims.into_inner();
        results.into_iter().collect::<Result<()>>()?;
        Ok(Rate { jobs: done.into_inner(), elapsed })
    }

    /// Check that every one of the `jobs` jobs was completed once, and drop the schema.
    fn remove(self, client: &mut Client, jobs: u32) -> Result<()> {
        let completed: i64 =
            client.query_one(&format!("SELECT count(*) FROM {}.job_completed", self.schema), &[])?.get(0);
        if completed != i64::from(jobs) {
            bail!("the floor measurement completed {completed} of {jobs} jobs");
        }
        client.batch_execute(&format!("DROP SCHEMA {} CASCADE", self.schema))?;
        Ok(())
    }
}

/// `jobs` calls of the enqueue path, one transaction each.
fn enqueue_one_by_one(
    client: &mut Client,
    namespace: &Namespace,
    jobs: u32,
    progress: &dyn Progress,
    interrupt: &Interrupt,
) -> Result<Rate> {
    progress.begin("enqueue, a transaction each", u64::from(jobs));
    let started = Instant::now();
    for n in 0..jobs {
        interrupt.check()?;
        let mut tx = client.transaction()?;
        enqueue::enqueue(&mut tx, &namespace.request(vec![json!({"n": n})]))?;
        tx.commit()?;
        progress.done(u64::from(n) + 1);
    }
    Ok(Rate { jobs: u64::from(jobs), elapsed: started.elapsed() })
}

/// `ENQUEUE_BATCHES` batches of `jobs` (`enqueue_batch`), the jobs of each but the last deleted
/// before the next: the median one. A single batch takes a tenth of a second, where a short stall of
/// the host weighs on it as much as the work.
fn enqueue_batches(
    client: &mut Client,
    namespace: &Namespace,
    jobs: u32,
    progress: &dyn Progress,
    interrupt: &Interrupt,
) -> Result<Rate> {
    progress.begin(&format!("enqueue, {ENQUEUE_BATCHES} batches of one transaction"), u64::from(ENQUEUE_BATCHES));
    let mut rates = Vec::new();
    for batch in 1..=ENQUEUE_BATCHES {
        if batch > 1 {
            prune::delete_tag(client, &namespace.tag)?;
        }
        rates.push(enqueue_batch(client, namespace, jobs)?);
        progress.done(u64::from(batch));
        interrupt.check()?;
    }
    rates.sort_by_key(|rate| rate.elapsed);
    Ok(rates[rates.len() / 2])
}

/// One call of the enqueue path with `jobs` inputs, in one transaction.
fn enqueue_batch(client: &mut Client, namespace: &Namespace, jobs: u32) -> Result<Rate> {
    let request = namespace.request((0..jobs).map(|n| json!({"n": n})).collect());
    let started = Instant::now();
    let mut tx = client.transaction()?;
    let enqueued = enqueue::enqueue(&mut tx, &request)?;
    tx.commit()?;
    let elapsed = started.elapsed();
    if enqueued.len() != jobs as usize {
        bail!("the batch enqueue created {} jobs instead of {jobs}", enqueued.len());
    }
    Ok(Rate { jobs: u64::from(jobs), elapsed })
}

/// The spine's claimers: a session per worker, kept from one round to the next (each statement
/// prepared once), claiming the bench's jobs as a worker's slots do.
struct Claimers<'a> {
    namespace: &'a Namespace,
    sessions: Vec<Session>,
    batch: u32,
    /// Rounds run so far: each claim id is unique.
    rounds: u64,
}

impl<'a> Claimers<'a> {
    fn connect(namespace: &'a Namespace, workers: u32, batch: u32) -> Result<Claimers<'a>> {
        let sessions = (0..workers)
            .map(|worker| {
                namespace.database.connect_as(&format!("{} claimer {worker}", namespace.tag)).map(Session::new)
            })
            .collect::<Result<Vec<Session>>>()?;
        Ok(Claimers { namespace, sessions, batch, rounds: 0 })
    }

    /// Claim and complete `quota` jobs (the last completions of a round may take a few more), or
    /// until none is left.
    fn round(&mut self, quota: u64, name: &str, progress: &dyn Progress, interrupt: &Interrupt) -> Result<Rate> {
        progress.begin(name, quota);
        self.rounds += 1;
        let (namespace, batch, round) = (self.namespace, self.batch, self.rounds);
        let done = AtomicU64::new(0);
        let started = Instant::now();
        let results: Vec<Result<()>> = std::thread::scope(|scope| {
            let threads: Vec<_> = self
                .sessions
                .iter_mut()
                .enumerate()
                .map(|(worker, client)| {
                    let done = &done;
                    scope.spawn(move || -> Result<()> {
                        let tags = [namespace.tag.clone()];
                        let claims = |n: u64| -> Vec<String> {
                            (0..batch).map(|k| format!("{}:{worker}#{round}.{n}.{k}", namespace.tag)).collect()
                        };
                        // As a worker's slot: each completion commits with the next claim, in one
                        // statement; several, in one transaction. The round's last ones alone.
                        let mut jobs = claim::claim(client, &tags, &claims(0), CLAIM_WINDOW)?;
                        for n in 1u64.. {
                            if jobs.is_empty() {
                                return Ok(());
                            }
                            interrupt.check()?;
                            let finished = jobs.len() as u64;
                            let last = done.load(Ordering::SeqCst) + finished >= quota;
                            jobs = match jobs.as_slice() {
                                _ if last => {
                                    complete_noop(client, &jobs)?;
                                    Vec::new()
                                }
                                [one] => {
                                    let completion = noop(one);
                                    let (recorded, next) =
                                        complete::then_claim(client, &completion, &tags, &claims(n), CLAIM_WINDOW)?;
                                    if !recorded && complete::complete(client, &completion)? == Recorded::Fenced {
                                        bail!("the bench lost its claimed job to another claimer");
                                    }
                                    next
                                }
                                many => client.in_transaction(|client| {
                                    complete_noop(client, many)?;
                                    claim::claim(client, &tags, &claims(n), CLAIM_WINDOW)
                                })?,
                            };
                            progress.done(done.fetch_add(finished, Ordering::SeqCst) + finished);
                        }
                        Ok(())
                    })
                })
                .collect();
            // A thread's panic was reported by the hook: pass it on without a second report.
            threads.into_iter().map(|thread| thread.join().unwrap_or_else(|panic| resume_unwind(panic))).collect()
        });
        let elapsed = started.elapsed();
        results.into_iter().collect::<Result<()>>()?;
        Ok(Rate { jobs: done.into_inner(), elapsed })
    }
}

/// A success with the result `{}`.
fn noop(job: &Claimed) -> Completion {
    Completion {
        job_id: job.id,
        claim: job.claim.clone(),
        attempt: job.attempt(),
        status: JobStatus::Success,
        result: Some(json!({})),
        error: None,
        logs: Vec::new(),
    }
}

/// Complete claimed jobs at once as success with the result `{}`, in one statement.
fn complete_noop(client: &mut Session, jobs: &[Claimed]) -> Result<()> {
    let completions: Vec<Completion> = jobs.iter().map(noop).collect();
    // One job: the worker's own completion statement; several: one statement for all.
    let recorded = match completions.as_slice() {
        [one] => match complete::complete(client, one)? {
            Recorded::Completed => vec![one.job_id],
            Recorded::Fenced => Vec::new(),
        },
        many => complete::complete_many(client, many)?,
    };
    if recorded.len() != jobs.len() {
        bail!("the bench lost {} of its {} claimed jobs to another claimer", jobs.len() - recorded.len(), jobs.len());
    }
    Ok(())
}

/// What the idle claimer tells the enqueuing thread.
enum Pickup {
    /// LISTEN is in place: jobs enqueued from now on wake the claimer.
    Listening,
    Claimed(Uuid, Instant),
}

/// An idle claimer (LISTEN first, then look, then wait) and jobs enqueued one at a time, each
/// after the previous one was picked up: the time from each enqueue's commit to its claim.
fn pickup_latency(
    client: &mut Client,
    namespace: &Namespace,
    samples: u32,
    progress: &dyn Progress,
    interrupt: &Interrupt,
) -> Result<Latency> {
    progress.begin("pickup latency", u64::from(samples));
    let stop = AtomicBool::new(false);
    let (picked, pickups) = mpsc::channel();
    let (latencies, claimer) = std::thread::scope(|scope| {
        let claimer = scope.spawn(|| idle_claimer(namespace, &stop, picked));
        let latencies = enqueue_paced(client, namespace, samples, &pickups, progress, interrupt);
        stop.store(true, Ordering::SeqCst);
        (latencies, claimer.join().unwrap_or_else(|panic| resume_unwind(panic)))
    });
    // The claimer's own error explains a pickup that never came.
    claimer?;
    let mut latencies = latencies?;
    latencies.sort();
    Ok(Latency { samples: latencies.len(), p50: percentile(&latencies, 0.50), p99: percentile(&latencies, 0.99) })
}

fn enqueue_paced(
    client: &mut Client,
    namespace: &Namespace,
    samples: u32,
    pickups: &mpsc::Receiver<Pickup>,
    progress: &dyn Progress,
    interrupt: &Interrupt,
) -> Result<Vec<Duration>> {
    let mut latencies = Vec::with_capacity(samples as usize);
    next_pickup(pickups, |pickup| matches!(pickup, Pickup::Listening).then_some(()))?;
    for n in 0..samples {
        interrupt.check()?;
        let mut tx = client.transaction()?;
        let id = enqueue::enqueue(&mut tx, &namespace.request(vec![json!({"n": n})]))?[0].id;
        tx.commit()?;
        let committed = Instant::now();
        let claimed = next_pickup(pickups, |pickup| match pickup {
            Pickup::Claimed(job, at) if job == id => Some(at),
            _ => None,
        })?;
        // The claim may land before the commit's acknowledgement reaches us: no wait after it.
        latencies.push(claimed.saturating_duration_since(committed));
        progress.done(u64::from(n) + 1);
        std::thread::sleep(LATENCY_PACE);
    }
    Ok(latencies)
}

/// Wait for the pickup `wanted` picks out, or fail after `PICKUP_TIMEOUT`.
fn next_pickup<T>(pickups: &mpsc::Receiver<Pickup>, wanted: impl Fn(Pickup) -> Option<T>) -> Result<T> {
    let deadline = Instant::now() + PICKUP_TIMEOUT;
    loop {
        match pickups.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(pickup) => {
                if let Some(found) = wanted(pickup) {
                    return Ok(found);
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                bail!("the bench's idle claimer picked up nothing within {PICKUP_TIMEOUT:?}")
            }
            Err(RecvTimeoutError::Disconnected) => bail!("the bench's idle claimer stopped"),
        }
    }
}

/// Claim like an idle worker slot: LISTEN, then look, then wait for a notification; complete each
/// job at once. Until `stop`.
fn idle_claimer(namespace: &Namespace, stop: &AtomicBool, picked: mpsc::Sender<Pickup>) -> Result<()> {
    // LISTEN on one connection, claim on another: listening started before the first look.
    let mut client = namespace.database.connect_as(&format!("{} idle listener", namespace.tag))?;
    let mut session = Session::new(namespace.database.connect_as(&format!("{} idle claimer", namespace.tag))?);
    let mut listener = Listener::listen(&mut client, CHANNEL_ENQUEUED)?;
    if picked.send(Pickup::Listening).is_err() {
        return Ok(());
    }
    let tags = [namespace.tag.clone()];
    let mut claims = 0u64;
    while !stop.load(Ordering::SeqCst) {
        // A short deadline, so that `stop` is seen soon after the last sample.
        let looked = listener.look_until(
            Some(Instant::now() + IDLE_POLL),
            IDLE_POLL,
            |notification| notification.payload() == namespace.tag,
            |_| {
                claims += 1;
                let claim_id = format!("{}:idle#{claims}", namespace.tag);
                let Some(job) = claim::claim(&mut session, &tags, &[claim_id], CLAIM_WINDOW)?.pop() else {
                    return Ok(ControlFlow::Continue(()));
                };
                let told = picked.send(Pickup::Claimed(job.id, Instant::now())).is_ok();
                complete_noop(&mut session, std::slice::from_ref(&job))?;
                Ok(ControlFlow::Break(told))
            },
        )?;
        if looked == ControlFlow::Break(false) {
            break;
        }
    }
    Ok(())
}

/// The value below which a share `p` of the sorted samples lie (nearest rank).
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The worker of a `--bun` measurement.
struct Worker {
    workers: u32,
    isolation: Isolation,
    local: Local,
}

/// A minimal runner of an action, as a bare loop would have one: read the input file, call main,
/// write the result file. With Bun's own file calls, as wf's wrapper: `node:fs` would cost it
/// about 6 ms of processor time a run, and the ratio would measure that rather than wf.
const BARE_RUNNER: &str = r#"const [action, input, result] = process.argv.slice(2);
const { main } = await import(action);
const output = await main(JSON.parse(await Bun.file(input).text()));
await Bun.write(result, JSON.stringify({ ok: true, result: output }));
"#;

/// The ceiling of the end-to-end rate: the bench's action run `jobs` times by `bun run` of a
/// minimal runner, with its input and result files, `workers` at a time: what wf's worker is
/// measured against (`bun_vs_bare`).
fn bare_bun(
    namespace: &Namespace,
    bun: &Path,
    jobs: u32,
    workers: u32,
    name: &str,
    progress: &dyn Progress,
    interrupt: &Interrupt,
) -> Result<Rate> {
    let store_dir = namespace.store_dir.as_ref().context("the bench's store folder")?;
    let dir = store_dir.join("bare-loop");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let (runner, action) = (dir.join("runner.mjs"), dir.join(ENTRYPOINT));
    fs::write(&runner, BARE_RUNNER).with_context(|| format!("writing {}", runner.display()))?;
    fs::write(&action, NOOP_SOURCE).with_context(|| format!("writing {}", action.display()))?;
    progress.begin(name, u64::from(jobs));
    let next = AtomicU64::new(0);
    let started = Instant::now();
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..workers)
            .map(|worker| {
                let (next, dir, runner, action) = (&next, &dir, &runner, &action);
                scope.spawn(move || -> Result<()> {
                    let input = dir.join(format!("input-{worker}.json"));
                    let result = dir.join(format!("result-{worker}.json"));
                    loop {
                        interrupt.check()?;
                        let n = next.fetch_add(1, Ordering::SeqCst);
                        if n >= u64::from(jobs) {
                            return Ok(());
                        }
                        fs::write(&input, json!({"n": n}).to_string())?;
                        let status = std::process::Command::new(bun)
                            .arg("run")
                            .args([runner, action, &input, &result])
                            .stdin(std::process::Stdio::null())
                            .status()
                            .with_context(|| format!("running {}", bun.display()))?;
                        if !status.success() {
                            bail!("the bare bun loop: bun ended with {status}");
                        }
                        progress.done(n + 1);
                    }
                })
            })
            .collect();
        threads.into_iter().map(|thread| thread.join().unwrap_or_else(|panic| resume_unwind(panic))).collect()
    });
    let elapsed = started.elapsed();
    results.into_iter().collect::<Result<()>>()?;
    Ok(Rate { jobs: u64::from(jobs), elapsed })
}

/// `jobs` jobs of the trivial bun action (`action`: cold or warm), run by a real worker (claim,
/// supervisor, sandbox, bun, heartbeat, completion) that stops when they are drained: the time
/// from its first claim to its last completion, by the database's clock. The worker's start and
/// stop (a bun that transpiles the wrapper, another that says its version, the connections) are
/// not in it: a worker does them once, not per job, and each round of the bench starts a worker.
#[allow(clippy::too_many_arguments)]
fn bun_end_to_end(
    client: &mut Client,
    namespace: &Namespace,
    action: &str,
    jobs: u32,
    worker: Worker,
    name: &str,
    progress: &dyn Progress,
    interrupt: &Interrupt,
) -> Result<Rate> {
    let mut tx = client.transaction()?;
    enqueue::enqueue(&mut tx, &namespace.request_of(action, (0..jobs).map(|n| json!({"n": n})).collect()))?;
    tx.commit()?;
    progress.begin(name, u64::from(jobs));
    let options = Options {
        tags: vec![namespace.tag.clone()],
        concurrency: worker.workers,
        until: Until::Drained,
        heartbeat: Duration::from_secs(5),
        grace: Duration::from_secs(5),
        name: namespace.tag.clone(),
        reap: false,
        zombie_timeout: Duration::from_secs(60),
        restart_limit: 3,
        poll: Duration::from_secs(1),
        quiet: true,
        isolation: worker.isolation,
        local: worker.local,
    };
    let (ran, watched) = std::thread::scope(|scope| {
        let worker = scope.spawn(|| worker::run(namespace.database.clone(), options));
        let mut watched = Ok(());
        while !worker.is_finished() && watched.is_ok() {
            watched = finished_jobs(client, &namespace.tag).map(|finished| progress.done(finished));
            std::thread::sleep(Duration::from_millis(200));
        }
        (worker.join().unwrap_or_else(|panic| resume_unwind(panic)), watched)
    });
    ran.context("running a worker on the bench's bun jobs")?;
    watched?;
    interrupt.check()?;
    let seconds: Option<f64> = client
        .query_one(
            "SELECT extract(epoch FROM max(c.completed_at) - min(c.started_at))::float8
               FROM job_completed c JOIN job j ON j.id = c.job_id
              WHERE j.tag = $1",
            &[&namespace.tag],
        )?
        .get(0);
    let seconds = seconds.context("the bench's bun jobs have no completion")?;
    Ok(Rate { jobs: u64::from(jobs), elapsed: Duration::from_secs_f64(seconds.max(0.0)) })
}

fn finished_jobs(client: &mut Client, tag: &str) -> Result<u64> {
    let row = client
        .query_one("SELECT count(*) FROM job_completed c JOIN job j ON j.id = c.job_id WHERE j.tag = $1", &[&tag])?;
    Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
}

/// Every job of `tag` completed as success, `jobs` of them; else say what went wrong.
fn expect_succeeded(client: &mut Client, tag: &str, jobs: u32, measurement: &str) -> Result<()> {
    let row = client.query_one(
        "SELECT count(*) FILTER (WHERE c.status = 'success'),
                (array_agg(c.status || ': ' || coalesce(c.error::text, 'no error recorded'))
                    FILTER (WHERE c.status <> 'success'))[1]
           FROM job j LEFT JOIN job_completed c ON c.job_id = j.id
          WHERE j.tag = $1",
        &[&tag],
    )?;
    let succeeded: i64 = row.get(0);
    if let Some(failure) = row.get::<_, Option<String>>(1) {
        bail!("the {measurement} measurement: a bench job did not succeed ({failure})");
    }
    if succeeded != i64::from(jobs) {
        bail!("the {measurement} measurement: {succeeded} of {jobs} bench jobs completed");
    }
    Ok(())
}

/// SIGINT/SIGTERM during a bench: stop measuring and clean up. A second signal ends the process
/// at once, saying what it leaves. The handlers stay for the rest of the process, which ends with
/// the bench.
struct Interrupt {
    flag: Arc<AtomicBool>,
}

/// Said by a second signal, which ends the bench without cleaning up.
const SECOND_SIGNAL: &str = "wf bench: a second signal: stopped at once, leaving its jobs and catalog rows; \
                             the next `wf bench` on this database removes them\n";

impl Interrupt {
    fn install() -> Result<Interrupt> {
        let flag = Arc::new(AtomicBool::new(false));
        for (signal, code) in [(SIGINT, 130), (SIGTERM, 143)] {
            let seen = Arc::clone(&flag);
            // The second signal's action goes first: it sees the flag as the previous signal left it.
            // SAFETY: the action reads an atomic, writes to stderr and exits: all async-signal-safe.
            unsafe {
                signal_hook::low_level::register(signal, move || {
                    if seen.load(Ordering::SeqCst) {
                        libc::write(libc::STDERR_FILENO, SECOND_SIGNAL.as_ptr().cast(), SECOND_SIGNAL.len());
                        signal_hook::low_level::exit(code);
                    }
                })
            }
            .context("installing signal handlers")?;
            signal_hook::flag::register(signal, Arc::clone(&flag)).context("installing signal handlers")?;
        }
        Ok(Interrupt { flag })
    }

    fn check(&self) -> Result<()> {
        if self.flag.load(Ordering::SeqCst) {
            bail!("wf bench was interrupted (its jobs and catalog rows are removed)");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Processors, is_bench_name};

    #[test]
    fn a_bench_name_is_wf_bench_and_eight_lowercase_hex_digits() {
        assert!(is_bench_name("wf-bench-0123abcd"));
        for other in
            ["wf-bench-0123ABCD", "wf-bench-0123abc", "wf-bench-0123abcde", "wf-bench-0123abcg", "wf-bench-", "first"]
        {
            assert!(!is_bench_name(other), "{other}");
        }
    }

    #[test]
    fn steal_is_the_share_of_all_processor_time_between_two_readings() {
        // user nice system idle iowait irq softirq steal guest guest_nice: the guest times are
        // already in user and nice, and count once.
        let before = Processors::parse("cpu  100 0 50 800 10 0 5 35 40 0\ncpu0 50 0 25 400 5 0 2 18 20 0\n").unwrap();
        let after = Processors::parse("cpu  160 0 70 1000 10 0 5 55 90 0\n").unwrap();
        assert_eq!((before.total, before.steal), (1000, 35));
        assert_eq!(before.steal_until(after), Some(20.0 / 300.0));
        assert_eq!(before.steal_until(before), None, "no time passed: no share");
        assert!(Processors::parse("intr 1 2 3\n").is_none(), "not the processors' line");
        assert!(Processors::parse("cpu  1 2 3\n").is_none(), "a kernel that counts no steal");
    }
}
