//! The command-line definition of `wf`, and nothing else.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::queue::enqueue::KEY_MAX_BYTES;
use crate::queue::inspect::Moment;
use crate::queue::job::{JobStatus, TriggerKind};

#[derive(Debug, Parser)]
#[command(
    name = "wf",
    version,
    about = "Administer windforce: a job platform whose only broker is PostgreSQL",
    long_about = "Administer windforce: sync TypeScript actions from git, enqueue jobs, run workers \
                  that execute them with bun, cancel, reap zombies, schedule, inspect and prune.\n\n\
                  Exit codes: 0 ok; 1 error; 2 usage; 3 refused or not finished; \
                  4 the job itself ended failure or canceled.\n\n\
                  A command that waits more than 3 s for a lock another session holds (a psql \
                  transaction holding a job's row) says on stderr which sessions it waits for, \
                  and goes on waiting; Ctrl-C gives up and changes nothing."
)]
pub(crate) struct Cli {
    /// PostgreSQL connection (URL or key=value; TLS as libpq: sslmode, sslrootcert, sslcert, sslkey;
    /// connect_timeout bounds the whole connect, 10 s by default); unset: the embedded local cluster
    /// under WF_HOME.
    #[arg(long, global = true, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// Print exactly one JSON document on stdout.
    #[arg(long, global = true)]
    pub json: bool,

    /// Output format (`--json` is the short form of `--output json`) [default: table].
    #[arg(long, global = true, value_enum)]
    pub output: Option<OutputFormat>,

    /// Hide progress and informational messages.
    #[arg(long, short, global = true)]
    pub quiet: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputFormat {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Manage the database: the embedded cluster and migrations.
    #[command(subcommand)]
    Db(DbCommand),
    /// Manage git sources of actions.
    #[command(subcommand)]
    Source(SourceCommand),
    /// Fetch a source, materialize a commit into the store (marker last), then update the catalog.
    Sync(SyncArgs),
    /// List the catalog of actions.
    Actions(ActionsArgs),
    /// Enqueue a job (or a batch of jobs) through the single enqueue path.
    Enqueue(EnqueueArgs),
    /// Run a worker: claim jobs, run them with bun, heartbeat, complete.
    Work(WorkArgs),
    /// Cancel jobs: waiting ones at once, running ones by a mark their worker acts on.
    Cancel(CancelArgs),
    /// Enqueue a job again, with the same input, through the single enqueue path.
    ///
    /// A job still queued, scheduled or running may be rerun too: the rerun is a second job beside
    /// it (a warning says so), not instead of it.
    Rerun(RerunArgs),
    /// Run one reaper pass: recover jobs whose worker stopped sending heartbeats.
    Reap(ReapArgs),
    /// List jobs, newest first.
    Jobs(JobsArgs),
    /// Show everything about one job.
    ///
    /// Its pinned metadata, input, status, worker, times, result or error, cancel, and its runs:
    /// `attempts` (the runs so far, the one under way included) and `restarts` (the runs its worker
    /// died in; a clean shutdown that put the job back is an attempt, not a restart).
    Show(ShowArgs),
    /// Print a job's result (exit 4 when it failed or was canceled, 3 when not finished).
    Result(ResultArgs),
    /// Print a job's logs.
    ///
    /// Lines of stdout as they are, stderr's marked `[stderr]`, wf's own `[wf]`, and a line of stdout
    /// that starts with `[` marked `[stdout]`: a line starting with `[wf]` is always wf's. On a terminal, control characters the action wrote (escape sequences among them) are shown
    /// as `\xNN` instead of sent to the terminal; into a pipe or a file, and with --json, each line is
    /// as the action wrote it.
    Logs(LogsArgs),
    /// Queue depth per tag: queued, scheduled, running, zombies, oldest wait (since the oldest
    /// waiting job was due: one enqueued with a past --at counts from that time).
    Status,
    /// Workers, live and recently gone: their tags, slots, current jobs and last beat.
    Workers,
    /// Verify WF_TOKEN tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Cron schedules that enqueue jobs through the single enqueue path.
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Delete completed jobs (records, logs) older than a cutoff, in batches.
    ///
    /// Never a queued or running job, a job canceled ahead of its schedule's fire time before that
    /// time, nor a failed job whose retry (or its retry's retry) is queued or running.
    Prune(PruneArgs),
    /// Measure the spine on the configured database (in a tag of its own, cleaned up after).
    ///
    /// What a bench could not clean up (killed, stopped by a second Ctrl-C, cut off from its
    /// database) is removed by the next `wf bench` on the database.
    ///
    /// Each rate is printed with the processor time it took; and the share of this machine's
    /// processor time that its hypervisor gave to other guests during the run (steal, from
    /// /proc/stat), with which the rates of a virtual machine move.
    Bench(BenchArgs),
    /// Generate completions and man pages from this definition.
    #[command(hide = true)]
    GenerateDocs(GenerateDocsArgs),
    /// Internal: the process between a worker and bun that owns the action's process tree.
    #[command(hide = true, name = "__supervise")]
    Supervise(SuperviseArgs),
}

#[derive(Debug, Subcommand)]
pub(crate) enum DbCommand {
    /// Create (if needed) and start the embedded cluster, then migrate it.
    ///
    /// The cluster lives in $WF_HOME/pg, on a Unix socket in that folder (no TCP; under
    /// /tmp/windforce-HASH when the path is too long for a socket). As root it runs as the
    /// `postgres` user with its files in /var/lib/windforce/HASH, which $WF_HOME/pg links to. Safe
    /// to run from many processes at once, and after a crash or a reboot. Every command without
    /// DATABASE_URL does this itself, but for a cluster `wf db down` stopped: only `wf db up`
    /// starts that one again. --json: {"running", "path", "schema_version"}.
    Up,
    /// Stop the embedded cluster (fast shutdown), and keep it stopped until `wf db up`.
    ///
    /// No other command starts it meanwhile, nor after a reboot (they refuse, saying so; `wf db
    /// status` says "stopped (wf db down)"): its files can be copied or moved. Workers using it
    /// lose their connections and reconnect when it is up again (they start a server that died
    /// without a shutdown, never one stopped here); a job whose worker could not beat for a zombie
    /// window meanwhile is stopped (its worker fences itself) and left to the reaper. A warning names the workers live on it, and the jobs they run,
    /// before it stops. Creates nothing. --json: {"stopped"}.
    Down,
    /// Show the database's state, the schema version, and whether the connection is encrypted.
    ///
    /// The embedded cluster's (creating nothing), or with DATABASE_URL that database's, with the
    /// TLS of its connection (its protocol, and how far the server's certificate was checked:
    /// none, verify-ca or verify-full; null over a Unix socket or without TLS). An embedded cluster
    /// is running, stopped, or not created yet (`created` false: nothing in $WF_HOME/pg).
    /// --json: {"embedded", "created", "running", "held_down" (stopped by `wf db down`),
    /// "location", "schema_version", "latest_version", "tls": {"version", "checked"} or null}.
    Status,
    /// Apply pending migrations to the configured database.
    ///
    /// Each in one transaction; safe from many hosts at once. Needed on an external database after
    /// an upgrade of wf (the other commands refuse a schema behind or ahead of theirs); the
    /// embedded cluster is migrated on demand. --json: {"applied", "schema_version"}.
    Migrate,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SourceCommand {
    /// Register a git source.
    ///
    /// A password or token in the URL (https://user:TOKEN@host/...) is stored as given and given
    /// to git, which shows it to anyone on the host who lists processes while it fetches; wf prints
    /// it as `***`. A git credential helper, or ssh with a deploy key, keeps it out of both.
    Add(SourceAddArgs),
    /// List git sources.
    List,
    /// Remove a git source and its actions from the catalog (jobs keep their pinned metadata).
    Rm(SourceRmArgs),
}

#[derive(Debug, Args)]
pub(crate) struct SourceAddArgs {
    /// Source name.
    pub name: String,
    /// Anything git can fetch: a local path, file://, https, ssh.
    pub url: String,
    /// Branch to follow (default: the remote's HEAD).
    #[arg(long)]
    pub branch: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct SourceRmArgs {
    /// Source name.
    pub name: String,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SyncArgs {
    /// Source name.
    pub name: String,
    /// A ref to sync (branch, tag, or any revision git understands; HEAD is the remote's; a name
    /// that is both a branch and a tag is refused: say refs/heads/NAME or refs/tags/NAME). The
    /// commit must be held by a branch or tag of the remote, as for --commit.
    #[arg(long, conflicts_with = "commit")]
    pub r#ref: Option<String>,
    /// An exact commit to sync, by its id (full, or 4 digits and more), held by a branch or tag of
    /// the remote.
    #[arg(long)]
    pub commit: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ActionsArgs {
    /// Only the actions of this source.
    #[arg(long, value_parser = filter)]
    pub source: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct EnqueueArgs {
    /// APP/ACTION
    pub target: String,
    /// Input: JSON text, @FILE, or - (or @-) for stdin.
    #[arg(long, conflicts_with = "batch")]
    pub input: Option<String>,
    /// One job per line of this JSON Lines file (@FILE as for --input; - or @- for stdin; blank
    /// lines skipped), all in one transaction: read and inserted 5,000 lines at a time, so its size
    /// is not bounded by memory; a line that is not a JSON object or longer than 64 MiB, or an input
    /// the input schema refuses, enqueues none. A file whose name starts with @ is named ./@NAME.
    #[arg(long)]
    pub batch: Option<PathBuf>,
    /// Higher runs first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,
    /// Override the action's effective tag.
    #[arg(long)]
    pub tag: Option<String>,
    /// Run at this time: RFC 3339 (2026-12-01T09:00:00Z), or as tables print times (2026-12-01
    /// 10:00:00 +01:00). A time past is due at once, in its place: ahead of jobs due after it.
    #[arg(long, conflicts_with = "in_", value_parser = parse_time)]
    pub at: Option<chrono::DateTime<chrono::Utc>>,
    /// Run after this delay (30s, 5m, 2h, 30d).
    #[arg(long = "in", value_parser = parse_duration)]
    pub in_: Option<Duration>,
    /// What triggered the job, recorded with it (`WF_TRIGGER_KIND` of its attempts, `wf show`).
    #[arg(long, value_enum, default_value_t = TriggerKind::Manual)]
    pub trigger_kind: TriggerKind,
    /// Wait for the job to finish and print its result (exit code as `wf result`).
    #[arg(long, conflicts_with = "batch")]
    pub wait: bool,
    /// Give up waiting after this long (exit 3).
    #[arg(long, requires = "wait", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Idempotency key: while a job enqueued with this key exists, enqueueing again returns it
    /// (`"existing": true`) instead of a new one. At most 1,000 bytes.
    #[arg(long, conflicts_with = "batch", value_parser = parse_key)]
    pub key: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct RerunArgs {
    /// A job id, or its first hex digits.
    pub id: String,
    /// Pin the action as the catalog shows it now (its current commit, schemas, timeout, tag),
    /// instead of exactly what the job ran.
    #[arg(long)]
    pub latest: bool,
}

#[derive(Debug, Args)]
pub(crate) struct WorkArgs {
    /// Tags to take jobs from (repeatable).
    #[arg(long = "tag", default_values_t = vec!["default".to_string()])]
    pub tags: Vec<String>,
    /// Jobs run at once.
    #[arg(long, allow_negative_numbers = true, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub concurrency: u32,
    /// Exit when no due, unclaimed job is left for these tags and all slots are idle. (With
    /// --drain, --once and --max-jobs, a claim refused for good, such as a permission the role
    /// lacks, ends the worker with exit 1; without them it is said once and tried again.)
    #[arg(long, conflicts_with_all = ["once", "max_jobs"])]
    pub drain: bool,
    /// Wait for one job, run it, exit.
    #[arg(long, conflicts_with = "max_jobs")]
    pub once: bool,
    /// Exit after this many jobs.
    // Read as a signed number, so that a negative one is refused with the range, not as no digit.
    #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(1..).map(|n| n as u64))]
    pub max_jobs: Option<u64>,
    /// Heartbeat period (default WF_HEARTBEAT_S, 5s): at least 1s, at most a third of the zombie window.
    #[arg(long, value_parser = parse_heartbeat)]
    pub heartbeat: Option<Duration>,
    /// On SIGINT/SIGTERM/SIGHUP, let running jobs finish for this long before putting them back (a
    /// second signal, or SIGQUIT: at once).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub grace: Duration,
    /// Worker name (default: host name and pid): printable, at most 200 characters.
    #[arg(long, value_parser = parse_worker_name)]
    pub name: Option<String>,
    /// Do not run periodic reaper passes.
    #[arg(long)]
    pub no_reap: bool,
    /// How actions are isolated. `sandbox`: every attempt in its own user, PID and mount
    /// namespaces, as an unprivileged user (for a root worker, nobody inside and a host uid of its
    /// own per attempt, from 1879048192 up), seeing only the system's
    /// read-only /usr, its pinned commit (read-only), a private work folder and /tmp, with the
    /// manifest's memory and process limits; the worker refuses to start where the kernel does not
    /// allow it. `none`: as the worker's own user on its file system, without limits.
    #[arg(long, value_enum, env = "WF_ISOLATION", default_value_t = Isolation::Sandbox)]
    pub isolation: Isolation,
    /// A host folder bound read-write into every sandbox at the same path (repeatable; WF_ALLOW_WRITE
    /// takes a colon-separated list). The sandbox user must be allowed to write it: under a root
    /// worker, whose attempts each have a uid of their own, by the group nogroup (65534) or by all
    /// (its actions run with umask 002: what one makes there, the next may write). Bound at its
    /// real path; not one inside another; a symbolic link is followed only in a folder no one but
    /// root or the worker's user may write, and one in the path when an attempt starts fails it.
    // Empty entries (`WF_ALLOW_WRITE=`, `/a:`) are left out, as an empty variable is unset.
    #[arg(
        long = "allow-write",
        value_name = "DIR",
        env = "WF_ALLOW_WRITE",
        value_delimiter = ':',
        value_parser = clap::builder::OsStringValueParser::new().map(PathBuf::from)
    )]
    pub allow_write: Vec<PathBuf>,
    /// How the worker writes its lines on stderr (one per job event: claimed, finished, killed,
    /// requeued): text, or one JSON object per line.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Isolation {
    Sandbox,
    None,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).multiple(true)
    .args(["ids", "app", "action", "tag", "status"])))]
pub(crate) struct CancelArgs {
    /// Job ids, or their first hex digits. A failed job whose retry waits or runs has that retry
    /// canceled (`retry_id` in `--json`).
    #[arg(conflicts_with_all = ["app", "action", "tag", "status"])]
    pub ids: Vec<String>,
    /// Every waiting or running job of this app.
    #[arg(long, value_parser = filter)]
    pub app: Option<String>,
    /// Every waiting or running job of this action (NAME, or APP/ACTION).
    #[arg(long, value_parser = filter)]
    pub action: Option<String>,
    /// Every waiting or running job of this tag.
    #[arg(long, value_parser = filter)]
    pub tag: Option<String>,
    /// Only the jobs that stand so: queued (due), scheduled (not due yet) or running. Checked again
    /// as each is canceled: one that changed meanwhile (a worker started it) is left as it is, and
    /// one that failed meanwhile has its retry canceled only if the retry stands so.
    #[arg(long, value_parser = waiting_status())]
    pub status: Option<JobStatus>,
    /// Why, recorded with the cancel (`canceled_reason` in `wf show`).
    #[arg(long)]
    pub reason: Option<String>,
    /// Do not ask for confirmation. Asked when more than one job is canceled (several ids still
    /// waiting or running, or the jobs that match); one is canceled at once, as `kill` does, and as
    /// scripts cancel a job.
    #[arg(long)]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ReapArgs {
    /// A running job whose last ping is older than this is a zombie (default WF_ZOMBIE_TIMEOUT_S);
    /// never sooner than the window its worker claimed it with (a worker that pings more slowly
    /// than this pass expects is not robbed of its job). From 1s to 7d.
    #[arg(long, value_parser = parse_window)]
    pub zombie_timeout: Option<Duration>,
    /// Restarts before a dying job completes as failure (default WF_RESTART_LIMIT).
    #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(i32).range(0..))]
    pub restart_limit: Option<i32>,
}

#[derive(Debug, Args)]
pub(crate) struct JobsArgs {
    /// Only jobs in this state.
    #[arg(long, value_enum)]
    pub status: Option<JobStatus>,
    /// Only jobs of this app.
    #[arg(long, value_parser = filter)]
    pub app: Option<String>,
    /// Only jobs of this action (NAME, or APP/ACTION).
    #[arg(long, value_parser = filter)]
    pub action: Option<String>,
    /// Only jobs of this tag.
    #[arg(long, value_parser = filter)]
    pub tag: Option<String>,
    /// Only jobs enqueued by this schedule.
    #[arg(long, value_parser = filter)]
    pub schedule: Option<String>,
    /// Only jobs created since this time (RFC 3339, or as `wf show` prints it: 2026-12-04 19:12:00
    /// +00:00) or this long ago (30s, 5m, 2h, 30d).
    #[arg(long, value_parser = parse_moment)]
    pub since: Option<Moment>,
    /// Only jobs created before this time (RFC 3339, or as `wf show` prints it) or this long ago.
    #[arg(long, value_parser = parse_moment)]
    pub until: Option<Moment>,
    /// List at most this many jobs (newest first): one page.
    #[arg(long, allow_negative_numbers = true, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=i64::from(i32::MAX)))]
    pub limit: i64,
    /// Which page of --limit jobs to list (1: the newest).
    #[arg(long, allow_negative_numbers = true, default_value_t = 1, value_parser = clap::value_parser!(i64).range(1..=i64::from(i32::MAX)))]
    pub page: i64,
    /// List again every 2 seconds until interrupted.
    #[arg(long)]
    pub watch: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// A job id, or its first hex digits.
    pub id: String,
}

#[derive(Debug, Args)]
pub(crate) struct ResultArgs {
    /// A job id, or its first hex digits.
    pub id: String,
    /// Wait until the job finishes.
    #[arg(long)]
    pub wait: bool,
    /// Give up waiting after this long (exit 3).
    #[arg(long, requires = "wait", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
}

#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    /// A job id, or its first hex digits.
    pub id: String,
    /// Keep printing new lines until the job completes, then exit as `wf result` does: 0 success,
    /// 4 failure or canceled.
    #[arg(long, short)]
    pub follow: bool,
    /// Only the last N lines (then new ones, with --follow).
    #[arg(long, allow_negative_numbers = true, value_name = "N", value_parser = clap::value_parser!(i64).range(0..))]
    pub tail: Option<i64>,
    /// Only lines written since this time (RFC 3339, or as `wf show` prints it: 2026-12-04 19:12:00
    /// +00:00) or this long ago (30s, 5m, 2h).
    #[arg(long, value_parser = parse_moment)]
    pub since: Option<Moment>,
    /// Start each line with the time it was stored (local time zone, RFC 3339): a running job's
    /// lines are stored together at most a second apart.
    #[arg(long)]
    pub timestamps: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum TokenCommand {
    /// Print a token's claims; exit 1 when forged, malformed, expired, or no longer current (its
    /// attempt has ended, or the job is no longer that claim's).
    Verify(TokenVerifyArgs),
}

#[derive(Debug, Args)]
pub(crate) struct TokenVerifyArgs {
    /// A token as an attempt gets it in WF_TOKEN, or - to read it from stdin (which keeps it out
    /// of the process list, where other users of the host can read a command's arguments).
    pub token: String,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ScheduleCommand {
    /// Add a schedule.
    Add(ScheduleAddArgs),
    /// List schedules: state, how far they are enqueued, their next fire time.
    List,
    /// Change a schedule's action, cron, time zone, input, priority, tag or overlap; the jobs it
    /// enqueued ahead are withdrawn and enqueued again at once as it now says (its runs' retries
    /// stay). No fire time from before the update is enqueued as it now says.
    Update(ScheduleUpdateArgs),
    /// Remove a schedule; the jobs it enqueued ahead and its runs' retries waiting are withdrawn
    /// (canceled), the others stay; a run failing after it is not retried.
    Rm(ScheduleNameArgs),
    /// Stop enqueueing for a schedule; the jobs it enqueued ahead and its runs' retries waiting are
    /// withdrawn (canceled); a run failing while it is paused is not retried. --json: {"name",
    /// "enabled", "withdrawn", "paused" (false: it was paused already)}.
    Pause(SchedulePauseArgs),
    /// Enqueue again for a paused schedule: at once, as a tick would, its fire times up to now +
    /// horizon (those missed while paused are not replayed).
    Resume(ScheduleResumeArgs),
    /// Enqueue every fire time up to now + horizon not yet enqueued; run it from cron every minute.
    ///
    /// Safe on many hosts at once: no fire time is enqueued twice. A fire time already due (the
    /// last tick was longer ago than the horizon) is enqueued at once and counted `late`; of those
    /// missed by more than the horizon only the latest is enqueued, the others counted `skipped`
    /// (up to 10,000), and both are warned about. A broken schedule (its action gone, its input no
    /// longer fitting) with a fire time to enqueue is named and skipped, and the tick exits 1.
    /// --json: {"fired": [{"schedule", "ids", "late", "skipped", "error"}]}.
    Tick(ScheduleTickArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleAddArgs {
    /// Schedule name.
    pub name: String,
    /// APP/ACTION
    pub target: String,
    /// Cron expression: 5 fields (minute hour day-of-month month day-of-week), 6 with seconds
    /// first, or 7 with a year last; or @yearly, @monthly, @weekly, @daily, @midnight, @hourly.
    #[arg(long)]
    pub cron: String,
    /// Time zone the cron expression is read in (IANA name, any case).
    #[arg(long, default_value = "UTC")]
    pub tz: String,
    /// Input of every job: JSON text, @FILE, or - (or @-) for stdin.
    #[arg(long)]
    pub input: Option<String>,
    /// Priority of every job (higher is claimed first).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i32,
    /// Override the action's effective tag.
    #[arg(long)]
    pub tag: Option<String>,
    /// Skip a fire time while an earlier run of this schedule is still running.
    #[arg(long)]
    pub no_overlap: bool,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("changes").required(true).multiple(true)
    .args(["action", "cron", "tz", "input", "priority", "tag", "no_tag", "no_overlap"])))]
pub(crate) struct ScheduleUpdateArgs {
    /// Schedule name.
    pub name: String,
    /// Another action, APP/ACTION: one renamed, or removed by a sync (the schedule is broken).
    #[arg(long, value_name = "APP/ACTION")]
    pub action: Option<String>,
    /// A new cron expression (as for `schedule add`).
    #[arg(long)]
    pub cron: Option<String>,
    /// A new time zone.
    #[arg(long)]
    pub tz: Option<String>,
    /// A new input: JSON text, @FILE, or - (or @-) for stdin.
    #[arg(long)]
    pub input: Option<String>,
    /// A new priority of its jobs (higher is claimed first).
    #[arg(long, allow_negative_numbers = true)]
    pub priority: Option<i32>,
    /// A new tag override.
    #[arg(long, conflicts_with = "no_tag")]
    pub tag: Option<String>,
    /// No tag override any more: the jobs go to the action's own tag.
    #[arg(long)]
    pub no_tag: bool,
    /// Skip fire times while an earlier run is still running (`--no-overlap true`), or not.
    #[arg(long, value_name = "BOOL")]
    pub no_overlap: Option<bool>,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleNameArgs {
    /// Schedule name.
    pub name: String,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SchedulePauseArgs {
    /// Schedule name.
    pub name: String,
    /// Accepted as before, when pause took the arguments of rm; it asks nothing.
    #[arg(long = "yes", hide = true)]
    pub _yes: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleResumeArgs {
    /// Schedule name.
    pub name: String,
    /// Enqueue fire times up to this far ahead at once: the horizon your ticks use.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub horizon: Duration,
    /// Accepted as before, when resume took the arguments of rm; it asks nothing.
    #[arg(long = "yes", hide = true)]
    pub _yes: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ScheduleTickArgs {
    /// Enqueue fire times up to this far ahead (workers start them on time).
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub horizon: Duration,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("what").required(true).multiple(true).args(["older_than", "sources"])))]
pub(crate) struct PruneArgs {
    /// Delete jobs that completed before now minus this (e.g. 30d).
    #[arg(long, value_parser = parse_duration)]
    pub older_than: Option<Duration>,
    /// Delete the synced commits no job pins any more (queued, running, or completed and not
    /// pruned) and the catalog is not on, from the database and from this host's store, and the
    /// file contents no commit holds any more; and this host's git mirrors of removed sources.
    /// After the jobs when both are given.
    #[arg(long)]
    pub sources: bool,
    /// Only jobs that ended with this status (with --older-than: it does not choose commits).
    #[arg(long, value_parser = finished_status(), requires = "older_than")]
    pub status: Option<JobStatus>,
    /// Count what would be deleted, delete nothing (with --older-than and --sources: the commits
    /// the jobs' pruning would free too).
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Jobs per measurement (at most 2,000 for the enqueues of a transaction each).
    #[arg(long, allow_negative_numbers = true, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: u32,
    /// Concurrent claimers for the claim-to-complete rate (each a connection: at most 64).
    #[arg(long, allow_negative_numbers = true, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub workers: u32,
    /// Jobs each claimer claims, and completes, per statement (as a worker claims for its idle
    /// slots); 1 is the seed's one job per claim.
    #[arg(long, allow_negative_numbers = true, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub batch: u32,
    /// Also measure end to end with a trivial bun action (at most 200 jobs), with and without the
    /// sandbox, the same action warm (at most 5,000 jobs), and a bare loop starting bun for each job,
    /// taking turns in 4 rounds (a worker's run timed from its first claim to its last completion);
    /// for each, the processor time per job of wf and every process it started (`cpu ms/job`), and
    /// of the database server when it runs on this host (`db cpu ms/job`, also for claim + complete).
    #[arg(long)]
    pub bun: bool,
    /// Also measure the floor: the seed's minimal claim and completion statements, prepared, on a
    /// scratch schema, over the same connections, in 5 rounds alternating with claim + complete (a
    /// change in the host's speed weighs on both alike); prints the spine's rate against it.
    #[arg(long)]
    pub floor: bool,
}

#[derive(Debug, Args)]
pub(crate) struct SuperviseArgs {
    /// Print the protocol this supervisor speaks (a worker asks it at start) and exit.
    #[arg(long)]
    pub protocol: bool,
}

#[derive(Debug, Args)]
pub(crate) struct GenerateDocsArgs {
    /// Directory to write completions/ and man/ into.
    #[arg(long, default_value = ".")]
    pub out: PathBuf,
}

/// A moment: an RFC 3339 time or one as `wf show` and the tables' time cells print it, or a duration
/// before now (`30s`, `5m`, `2h`, `30d`).
pub(crate) fn parse_moment(text: &str) -> Result<Moment, String> {
    if let Some(at) = time_of(text) {
        return Ok(Moment::At(at));
    }
    no_calendar_units(text)?;
    match humantime::parse_duration(text.trim()) {
        Ok(duration) => within_bounds(text, duration).map(Moment::Ago),
        Err(_) => Err(format!(
            "{text:?} is neither a time nor a duration (examples: 2h, 30m, 2026-01-31T09:00:00Z, \
             2026-01-31 09:00:00 +00:00)"
        )),
    }
}

/// A filter's value (`--app`, `--tag`, ...): an empty one matches nothing, and is more often a
/// variable left unset than meant.
fn filter(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("an empty value matches nothing (leave the option out to match every one)".to_string());
    }
    Ok(text.to_string())
}

/// An RFC 3339 time, or one as `wf show` and the tables' time cells print it.
fn time_of(text: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(text.trim())
        .or_else(|_| chrono::DateTime::parse_from_str(text.trim(), crate::output::TABLE_TIME))
        .ok()
        .map(|at| at.with_timezone(&chrono::Utc))
}

/// A time (`--at`), as `--since` takes one.
pub(crate) fn parse_time(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    time_of(text).ok_or_else(|| {
        format!(
            "{text:?} is not a time: RFC 3339 (2026-12-01T09:00:00Z), or as tables print times (2026-12-01 \
             10:00:00 +01:00), with the offset"
        )
    })
}

/// The longest duration taken: times further from now than this are past what the database and the
/// clock computations hold.
const DURATION_MAX: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Durations as operators write them: `30s`, `5m`, `2h`, `30d`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    no_calendar_units(text)?;
    let duration = humantime::parse_duration(text.trim()).map_err(|e| {
        // The parser's own message lists units refused above (months, years).
        let why = match e {
            humantime::DurationError::UnknownUnit { unit, .. } => format!("unknown unit {unit:?}"),
            other => other.to_string(),
        };
        format!("{text:?} is not a duration: {why} (units ms, s, m, h, d, w; examples: 30s, 5m, 2h, 1h30m, 30d)")
    })?;
    within_bounds(text, duration)
}

/// Months and years are refused: their length varies, and `5M` (five months to the duration
/// parser) is a typo of `5m` more often than not.
fn no_calendar_units(text: &str) -> Result<(), String> {
    let units = text.split(|c: char| !c.is_alphabetic()).filter(|unit| !unit.is_empty());
    for unit in units {
        if unit == "M" || unit.starts_with("month") || ["y", "year", "years"].contains(&unit) {
            return Err(format!(
                "{text:?}: months and years are not taken (their length varies): say days (30d), or minutes with a \
                 small m (5m)"
            ));
        }
    }
    Ok(())
}

/// The reaper's window (`wf reap --zombie-timeout`): from a second to 7 days, as WF_ZOMBIE_TIMEOUT_S.
fn parse_window(text: &str) -> Result<Duration, String> {
    let window = parse_duration(text)?;
    let seconds = crate::config::MAX_ZOMBIE_TIMEOUT_S;
    if window < Duration::from_secs(1) || window > Duration::from_secs(seconds) {
        return Err(format!("{text:?}: the reaper's window is from 1 s to {seconds} s (7 days)"));
    }
    Ok(window)
}

/// A heartbeat period (`wf work --heartbeat`): each heartbeat is a statement given the period to
/// answer in, and one shorter than a second had every one fail.
fn parse_heartbeat(text: &str) -> Result<Duration, String> {
    let period = parse_duration(text)?;
    if period < Duration::from_secs(1) {
        return Err(format!("{text:?} is shorter than 1 s, the shortest heartbeat period"));
    }
    Ok(period)
}

fn within_bounds(text: &str, duration: Duration) -> Result<Duration, String> {
    if duration > DURATION_MAX {
        return Err(format!("{text:?} is longer than 100 years"));
    }
    Ok(duration)
}

/// A worker's name: shown in tables and journals, so nothing that would drive a terminal.
fn parse_worker_name(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("a worker's name must not be empty".to_string());
    }
    if text.chars().any(char::is_control) {
        return Err("a worker's name must not hold control characters".to_string());
    }
    if text.chars().count() > 200 {
        return Err("a worker's name may be at most 200 characters".to_string());
    }
    Ok(text.to_string())
}

/// An idempotency key: not empty (an unset shell variable would otherwise make every enqueue after
/// the first return that first job), and at most `KEY_MAX_BYTES` long.
fn parse_key(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("an idempotency key must not be empty".to_string());
    }
    if text.len() > KEY_MAX_BYTES {
        return Err(format!(
            "an idempotency key may be at most {KEY_MAX_BYTES} bytes; this one is {} (use a digest of a longer one)",
            text.len()
        ));
    }
    if text.chars().any(char::is_control) {
        return Err("an idempotency key must not hold control characters (shown by `wf show`)".to_string());
    }
    Ok(text.to_string())
}

/// `--status` of jobs: any status.
impl ValueEnum for JobStatus {
    fn value_variants<'a>() -> &'a [JobStatus] {
        &JobStatus::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.as_str()))
    }
}

/// `--status` of a bulk cancel: only how a job waits or runs.
fn waiting_status() -> impl TypedValueParser<Value = JobStatus> {
    let waiting = JobStatus::ALL.into_iter().filter(|status| !status.is_finished()).map(JobStatus::as_str);
    PossibleValuesParser::new(waiting).map(|text| text.parse::<JobStatus>().expect("one of the possible values"))
}

/// `--status` of prune: only how a job ended.
fn finished_status() -> impl TypedValueParser<Value = JobStatus> {
    let finished = JobStatus::ALL.into_iter().filter(|status| status.is_finished()).map(JobStatus::as_str);
    PossibleValuesParser::new(finished).map(|text| text.parse::<JobStatus>().expect("one of the possible values"))
}

/// `--trigger-kind` of enqueue.
impl ValueEnum for TriggerKind {
    fn value_variants<'a>() -> &'a [TriggerKind] {
        &TriggerKind::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&chrono::Utc)
    }

    #[test]
    fn a_moment_is_a_time_as_tables_print_it_too() {
        for (text, expected) in [
            ("2026-12-04T19:12:00Z", "2026-12-04T19:12:00Z"),
            ("2026-12-04T21:12:00+02:00", "2026-12-04T19:12:00Z"),
            ("2026-12-04 19:12:00 +00:00", "2026-12-04T19:12:00Z"),
            ("2026-12-04 21:12:00 +02:00", "2026-12-04T19:12:00Z"),
            (" 2026-12-04 14:12:00 -05:00 ", "2026-12-04T19:12:00Z"),
        ] {
            match parse_moment(text) {
                Ok(Moment::At(time)) => assert_eq!(time, at(expected), "{text:?}"),
                other => panic!("{text:?}: {other:?}"),
            }
        }
        // The time a table prints is the time (output::time_cell), read back.
        let printed = crate::output::time_cell(Some(at("2026-12-04T19:12:00Z")));
        assert!(
            matches!(parse_moment(&printed), Ok(Moment::At(time)) if time == at("2026-12-04T19:12:00Z")),
            "{printed}"
        );
        assert!(matches!(parse_moment("2h"), Ok(Moment::Ago(ago)) if ago == Duration::from_secs(7200)));
        // `--at` takes the same times as `--since`, and no duration.
        assert_eq!(parse_time(&printed), Ok(at("2026-12-04T19:12:00Z")));
        assert_eq!(parse_time("2026-12-04T21:12:00+02:00"), Ok(at("2026-12-04T19:12:00Z")));
        for text in ["2h", "2026-12-04 19:12:00", "tomorrow"] {
            assert!(parse_time(text).is_err_and(|error| error.contains("is not a time: RFC 3339")), "{text:?}");
        }
        assert!(parse_moment("5M").is_err_and(|error| error.contains("months")));
        for text in ["2026-12-04 19:12:00", "2026-12-04 19:12 +00:00", "yesterday"] {
            assert!(parse_moment(text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn a_duration_is_never_in_months_or_years() {
        for (text, seconds) in
            [("30s", 30), ("5m", 300), ("2h", 7200), ("30d", 2_592_000), ("1h30m", 5400), ("2 min", 120)]
        {
            assert_eq!(parse_duration(text), Ok(Duration::from_secs(seconds)), "{text:?}");
        }
        for text in ["5M", "1y", "2years", "1month", "3months", "1h5M"] {
            let error = parse_duration(text).unwrap_err();
            assert!(error.contains("months and years are not taken"), "{text:?}: {error}");
        }
        // A unit it does not know: the message names the units it does, not the parser's list
        // (which has months and years).
        let error = parse_duration("3x").unwrap_err();
        assert!(error.starts_with("\"3x\" is not a duration: unknown unit \"x\" (units ms, s, m, h, d, w;"), "{error}");
        assert!(!error.contains("month"), "{error}");
        assert!(parse_window("0s").is_err_and(|error| error.contains("from 1 s")));
        assert!(parse_window("8d").is_err());
        assert_eq!(parse_window("7d"), Ok(Duration::from_secs(604_800)));
    }

    /// A duration wf prints (a horizon, a retry's wait) reads back as the same duration, and never
    /// in months, which the flags refuse (humantime printed 40 days as `1month 9days 13h 30m 36s`).
    #[test]
    fn a_duration_printed_reads_back_the_same() {
        for (millis, printed) in [
            (0, "0s"),
            (90_000, "1m 30s"),
            (7_200_000, "2h"),
            (3_456_000_000, "40d"),
            (93_784_000, "1d 2h 3m 4s"),
            (1500, "1s 500ms"),
            (250, "250ms"),
        ] {
            let duration = Duration::from_millis(millis);
            assert_eq!(crate::output::duration(duration), printed);
            assert_eq!(parse_duration(printed), Ok(duration), "{printed:?}");
        }
    }
}
