//! The single enqueue path: every job creator (CLI, batch, schedule, rerun, retry, any future
//! webhook or API) calls `enqueue`, so priority, tag, metadata pinning and the single transaction
//! apply alike.

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use postgres::{Row, Statement, Transaction};
use serde_json::Value;
use uuid::Uuid;

use super::CHANNEL_ENQUEUED;
use super::job::TriggerKind;

/// When the jobs become due.
#[derive(Debug, Clone, Copy)]
pub(crate) enum When {
    Now,
    At(DateTime<Utc>),
    /// A delay measured from the database's clock.
    In(std::time::Duration),
}

/// Where a job's execution metadata (commit, entrypoint, schemas, timeout, tag, sandbox, retries)
/// is pinned from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pin {
    /// The catalog as it is now: what the action is at the commit its source shows.
    Catalog,
    /// Another job's pins: a rerun or a retry runs exactly what that job ran.
    Job(Uuid),
}

/// Where a job comes from besides its trigger kind.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) enum Origin {
    #[default]
    New,
    /// `wf rerun` of this job.
    RerunOf(Uuid),
    /// The `number`th retry, after the failure of this job.
    RetryOf { job: Uuid, number: i32 },
}

/// One call of the enqueue path: one or more jobs of one action.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    pub app: &'a str,
    pub action: &'a str,
    /// What `enqueue` enqueues, a job each; a `Batch` is given its inputs chunk by chunk instead.
    pub inputs: Vec<Value>,
    pub priority: i32,
    /// Overrides the pinned tag.
    pub tag: Option<&'a str>,
    pub when: When,
    pub trigger_kind: TriggerKind,
    pub pin: Pin,
    pub origin: Origin,
    /// The schedule whose fire time (`When::At`) this is; a fire time already enqueued is skipped.
    /// Of a retry (`Origin::RetryOf`), the schedule whose run it retries: it holds no fire time.
    pub schedule: Option<ScheduleFire<'a>>,
    /// Idempotency: while a job with this key exists, it is returned instead of a new one.
    pub key: Option<&'a str>,
}

/// The schedule a job is enqueued for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScheduleFire<'a> {
    pub name: &'a str,
    pub no_overlap: bool,
}

impl<'a> Request<'a> {
    /// A plain request: new jobs pinned from the catalog, due now, manual.
    pub(crate) fn new(app: &'a str, action: &'a str, inputs: Vec<Value>) -> Request<'a> {
        Request {
            app,
            action,
            inputs,
            priority: 0,
            tag: None,
            when: When::Now,
            trigger_kind: TriggerKind::Manual,
            pin: Pin::Catalog,
            origin: Origin::New,
            schedule: None,
            key: None,
        }
    }
}

/// What the enqueue path created (or, with a key, found).
#[derive(Debug, Clone)]
pub(crate) struct Enqueued {
    pub id: Uuid,
    pub app: String,
    pub action: String,
    pub tag: String,
    pub priority: i32,
    pub commit_sha: String,
    pub scheduled_for: DateTime<Utc>,
    pub trigger_kind: TriggerKind,
    /// The job existed already with the request's key: nothing was enqueued.
    pub existing: bool,
}

/// The pinned columns, as the catalog and a job both hold them.
const PINNED: &str = "git_source_id, commit_sha, entrypoint, input_schema, output_schema, timeout_s, tag,
                      network, memory_mb, max_processes, retry_max, retry_backoff_s, retry_max_backoff_s, warm";

/// Enqueue inside the caller's transaction: read the pins (the catalog row, or the job rerun or
/// retried), validate every input against the input schema, pin the execution metadata onto
/// `job`, insert `job` and `job_queue`, and notify waiting workers (delivered when the transaction
/// commits). A fire time of a schedule already enqueued is skipped (not returned); with a key, an
/// existing job of the key is returned as `existing`.
pub(crate) fn enqueue(tx: &mut Transaction<'_>, request: &Request<'_>) -> Result<Vec<Enqueued>> {
    if let Some(tag) = request.tag {
        crate::source::check_tag(tag)?;
    }
    if let Some(key) = request.key
        && let Some(existing) = existing(tx, key, request)?
    {
        return Ok(vec![existing]);
    }
    let mut batch = Batch::open(tx, request)?;
    let lines: Vec<usize> = if request.inputs.len() > 1 { (1..=request.inputs.len()).collect() } else { Vec::new() };
    let enqueued = batch.push(tx, &request.inputs, &lines)?;
    if let Some(key) = request.key
        && enqueued.is_empty()
    {
        return match existing(tx, key, request)? {
            Some(existing) => Ok(vec![existing]),
            None => bail!("the key {key:?} was taken and released while this enqueue waited; enqueue again"),
        };
    }
    batch.finish(tx)?;
    Ok(enqueued)
}

/// The longest idempotency key, in bytes. Keys are unique by a btree index, whose entries hold at
/// most 2,704 bytes (a third of a page): a longer key failed the insert with PostgreSQL's "index row
/// size exceeds btree maximum". 1,000 is far from that, and far above any order number or digest.
pub(crate) const KEY_MAX_BYTES: usize = 1000;

/// The most jobs one insert statement takes. A larger batch is inserted in chunks of this many in
/// the caller's transaction (all or nothing still): the statement's arrays and result, and a
/// batch file read chunk by chunk, stay the size of a chunk whatever the batch's. 200,000 jobs in
/// one statement took 10 % longer than in chunks of 2,000 to 20,000 (alike), and the command held
/// 1.2 GB for a million.
pub(crate) const ENQUEUE_CHUNK: usize = 5_000;

/// The most problems an error lists of inputs that do not match the input schema, or of a result
/// that does not match the output schema.
const PROBLEMS_SHOWN: usize = 20;

/// The jobs of one request, enqueued chunk by chunk in one transaction: the pins are read once,
/// so every chunk pins the same commit and settings. `enqueue` pushes the request's inputs;
/// `wf enqueue --batch` pushes the lines of its file as it reads them. Nothing is visible before
/// the caller commits, and nothing is enqueued if it does not.
pub(crate) struct Batch<'r, 'a> {
    request: &'r Request<'a>,
    pins: Row,
    tag: String,
    input_schema: Option<jsonschema::Validator>,
    insert: Statement,
}

impl<'r, 'a> Batch<'r, 'a> {
    /// Read the pins and prepare the insert; the request's inputs are not looked at.
    pub(crate) fn open(tx: &mut Transaction<'_>, request: &'r Request<'a>) -> Result<Batch<'r, 'a>> {
        if let Some(tag) = request.tag {
            crate::source::check_tag(tag)?;
        }
        let pins = pins(tx, request)?;
        let input_schema = pins.get::<_, Option<Value>>("input_schema").as_ref().map(compile).transpose()?;
        let tag: String = request.tag.map(str::to_string).unwrap_or_else(|| pins.get("tag"));
        // ON CONFLICT DO NOTHING: a schedule's fire time enqueued already, or a key taken by a
        // concurrent enqueue (which this waits for), inserts nothing and returns nothing. Only where
        // one of those unique indexes can conflict: otherwise each row would be inserted
        // speculatively for nothing (a batch of 20,000 enqueues 10 to 15 % faster without it).
        let on_conflict =
            if request.key.is_some() || request.schedule.is_some() { "ON CONFLICT DO NOTHING" } else { "" };
        let insert = tx.prepare(&format!(
            "WITH due AS (SELECT coalesce($12::timestamptz, now() + make_interval(secs => $13)) AS at),
         pinned AS (
             INSERT INTO job (id, app_key, action_key, git_source_id, commit_sha, entrypoint,
                              input_schema, output_schema, timeout_s, tag, priority, input,
                              trigger_kind, schedule_name, scheduled_for,
                              network, memory_mb, max_processes,
                              retry_max, retry_backoff_s, retry_max_backoff_s,
                              rerun_of, retry_of, retry_number, idempotency_key,
                              schedule_fire, no_overlap, warm)
             SELECT i.id, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, i.input, $11, $14, due.at,
                    $17, $18, $19, $20, $21, $22, $23, $24, $25, $26,
                    CASE WHEN $14::text IS NOT NULL AND $24::uuid IS NULL THEN due.at END, $27, $28
               FROM unnest($15::uuid[], $16::jsonb[]) WITH ORDINALITY AS i(id, input, n), due
              ORDER BY i.n
             {on_conflict}
             RETURNING id, scheduled_for, created_at
         ),
         queued AS (
             INSERT INTO job_queue (job_id, tag, priority, scheduled_for, created_at)
             SELECT id, $9, $10, scheduled_for, created_at FROM pinned
         )
         SELECT id, scheduled_for FROM pinned"
        ))?;
        Ok(Batch { request, pins, tag, input_schema, insert })
    }

    /// Validate `inputs` (`lines[n]` names the line of `inputs[n]` in an error, when given) and
    /// enqueue a job for each, in their order; a schedule's fire time already enqueued, or a key
    /// taken, returns none.
    pub(crate) fn push(
        &mut self,
        tx: &mut Transaction<'_>,
        inputs: &[Value],
        lines: &[usize],
    ) -> Result<Vec<Enqueued>> {
        check_storable(inputs, lines)?;
        if let Some(validator) = &self.input_schema {
            check(validator, inputs, lines)?;
        }
        let (request, pins) = (self.request, &self.pins);
        let (at, delay_s): (Option<DateTime<Utc>>, f64) = match request.when {
            When::Now => (None, 0.0),
            When::At(at) => (Some(at), 0.0),
            When::In(delay) => (None, delay.as_secs_f64()),
        };
        let (rerun_of, retry_of, retry_number) = match request.origin {
            Origin::New => (None, None, 0),
            Origin::RerunOf(job) => (Some(job), None, 0),
            Origin::RetryOf { job, number } => (None, Some(job), number),
        };
        let commit_sha: String = pins.get("commit_sha");
        let mut enqueued = Vec::with_capacity(inputs.len());
        for inputs in inputs.chunks(ENQUEUE_CHUNK) {
            // Time-ordered ids (UUID version 7: the time in milliseconds first, random bits after):
            // a batch's jobs land side by side at the right edge of the job and job_queue primary
            // keys instead of on a random page each, which makes enqueueing into a large table
            // cheaper and keeps the index compact.
            let ids: Vec<Uuid> = inputs.iter().map(|_| Uuid::now_v7()).collect();
            let rows = tx.query(
                &self.insert,
                &[
                    &request.app,
                    &request.action,
                    &pins.get::<_, Uuid>("git_source_id"),
                    &commit_sha,
                    &pins.get::<_, String>("entrypoint"),
                    &pins.get::<_, Option<Value>>("input_schema"),
                    &pins.get::<_, Option<Value>>("output_schema"),
                    &pins.get::<_, i32>("timeout_s"),
                    &self.tag,
                    &request.priority,
                    &request.trigger_kind.as_str(),
                    &at,
                    &delay_s,
                    &request.schedule.map(|schedule| schedule.name),
                    &ids,
                    &inputs,
                    &pins.get::<_, Option<bool>>("network"),
                    &pins.get::<_, Option<i32>>("memory_mb"),
                    &pins.get::<_, Option<i32>>("max_processes"),
                    &pins.get::<_, Option<i32>>("retry_max"),
                    &pins.get::<_, Option<f64>>("retry_backoff_s"),
                    &pins.get::<_, Option<f64>>("retry_max_backoff_s"),
                    &rerun_of,
                    &retry_of,
                    &retry_number,
                    &request.key,
                    &request.schedule.is_some_and(|schedule| schedule.no_overlap),
                    &pins.get::<_, bool>("warm"),
                ],
            )?;
            let mut chunk: Vec<Enqueued> = rows
                .iter()
                .map(|row| Enqueued {
                    id: row.get(0),
                    app: request.app.to_string(),
                    action: request.action.to_string(),
                    tag: self.tag.clone(),
                    priority: request.priority,
                    commit_sha: commit_sha.clone(),
                    scheduled_for: row.get(1),
                    trigger_kind: request.trigger_kind,
                    existing: false,
                })
                .collect();
            // RETURNING order is not guaranteed; report jobs in input order.
            let order: std::collections::HashMap<Uuid, usize> =
                ids.iter().enumerate().map(|(n, id)| (*id, n)).collect();
            chunk.sort_by_key(|job| order[&job.id]);
            enqueued.append(&mut chunk);
        }
        Ok(enqueued)
    }

    /// Notify waiting workers of the batch's tag (delivered when the transaction commits).
    pub(crate) fn finish(self, tx: &mut Transaction<'_>) -> Result<()> {
        tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL_ENQUEUED, &self.tag])?;
        Ok(())
    }
}

/// The pinned metadata the request's jobs take.
fn pins(tx: &mut Transaction<'_>, request: &Request<'_>) -> Result<Row> {
    // The lock this enqueue's insert takes anyway, taken before the commit is read: `prune
    // --sources` (which takes the table in SHARE mode) then waits for the job that pins it, rather
    // than remove the commit between this read and that insert (the job a rerun or a retry copies
    // may be pruned meanwhile: its commit is then pinned by nothing else).
    tx.batch_execute("LOCK TABLE job IN ROW EXCLUSIVE MODE")?;
    let pinned = match request.pin {
        // KEY SHARE keeps a concurrent sync from deleting the action until this enqueue commits;
        // the row read is one consistent version, so the job pins the catalog exactly as one sync
        // left it.
        Pin::Catalog => tx.query_opt(
            &format!("SELECT {PINNED} FROM action WHERE app_key = $1 AND action_key = $2 FOR KEY SHARE"),
            &[&request.app, &request.action],
        )?,
        Pin::Job(id) => tx.query_opt(&format!("SELECT {PINNED} FROM job WHERE id = $1"), &[&id])?,
    };
    if crate::fault::at("enqueue-late") {
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
    match (pinned, request.pin) {
        (Some(pinned), _) => Ok(pinned),
        (None, Pin::Catalog) => bail!("{}", crate::source::catalog::unknown_action(tx, request.app, request.action)?),
        (None, Pin::Job(id)) => bail!("no such job: {id}"),
    }
}

/// The job that holds `key`, if any; a job of another action holding it is an error.
fn existing(tx: &mut Transaction<'_>, key: &str, request: &Request<'_>) -> Result<Option<Enqueued>> {
    let row = tx.query_opt(
        "SELECT j.id, j.app_key, j.action_key, j.tag, j.priority, j.commit_sha,
                coalesce(q.scheduled_for, j.scheduled_for), j.trigger_kind
           FROM job j LEFT JOIN job_queue q ON q.job_id = j.id
          WHERE j.idempotency_key = $1",
        &[&key],
    )?;
    let Some(row) = row else { return Ok(None) };
    let job = Enqueued {
        id: row.get(0),
        app: row.get(1),
        action: row.get(2),
        tag: row.get(3),
        priority: row.get(4),
        commit_sha: row.get(5),
        scheduled_for: row.get(6),
        trigger_kind: row.get(7),
        existing: true,
    };
    if (job.app.as_str(), job.action.as_str()) != (request.app, request.action) {
        bail!(
            "the key {key:?} belongs to job {} of {}/{}, not to {}/{}",
            job.id,
            job.app,
            job.action,
            request.app,
            request.action
        );
    }
    Ok(Some(job))
}

/// Validate inputs against a schema; the error names each input's JSON path.
pub(crate) fn validate_inputs(schema: &Value, inputs: &[Value]) -> Result<()> {
    check(&compile(schema)?, inputs, &[])
}

/// Refuse an input PostgreSQL cannot store: `jsonb` holds no U+0000 in a string or a key (its
/// refusal says only "unsupported Unicode escape sequence").
pub(crate) fn check_storable(inputs: &[Value], lines: &[usize]) -> Result<()> {
    if let Some(n) = inputs.iter().position(holds_nul) {
        let which = lines.get(n).map(|line| format!(" on line {line}")).unwrap_or_default();
        bail!("the input{which} holds the character U+0000 (\\u0000), which PostgreSQL cannot store in JSON");
    }
    Ok(())
}

/// Whether `value` holds U+0000 in a string or a key, which `jsonb` cannot store.
pub(crate) fn holds_nul(value: &Value) -> bool {
    match value {
        Value::String(text) => text.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(fields) => fields.iter().any(|(key, value)| key.contains('\0') || holds_nul(value)),
        _ => false,
    }
}

fn compile(schema: &Value) -> Result<jsonschema::Validator> {
    jsonschema::validator_for(schema).context("the action's input schema is invalid")
}

/// The most characters of one problem a schema finds: its words quote the value refused, which
/// may be megabytes.
const PROBLEM_CHARS: usize = 300;

/// What `validator` finds wrong with `values`: the first `PROBLEMS_SHOWN` problems, each after
/// `label(n)` for `values[n]` (asked only for the problems listed), with its JSON path, cut to
/// `PROBLEM_CHARS`; then how many more. Empty when every value matches.
pub(crate) fn schema_problems(
    validator: &jsonschema::Validator,
    values: &[Value],
    label: impl Fn(usize) -> String,
) -> Vec<String> {
    let (mut problems, mut count) = (Vec::new(), 0);
    for (n, value) in values.iter().enumerate() {
        for error in validator.iter_errors(value) {
            count += 1;
            if problems.len() < PROBLEMS_SHOWN {
                let path = error.instance_path().to_string();
                let path = if path.is_empty() { "/" } else { &path };
                let problem = format!("{}at {path}: {error}", label(n));
                problems.push(crate::error::shortened(&problem, PROBLEM_CHARS).into_owned());
            }
        }
    }
    if count > PROBLEMS_SHOWN {
        problems.push(format!("and {} more", count - PROBLEMS_SHOWN));
    }
    problems
}

/// Refuse `inputs` unless each matches `validator`; the error lists the first `PROBLEMS_SHOWN`
/// problems, each with its input's line (`lines[n]` for `inputs[n]`, when given) and JSON path.
fn check(validator: &jsonschema::Validator, inputs: &[Value], lines: &[usize]) -> Result<()> {
    let problems = schema_problems(validator, inputs, |n| {
        lines.get(n).map_or_else(|| "input ".to_string(), |line| format!("line {line}: input "))
    });
    if !problems.is_empty() {
        bail!("input does not match the action's input schema: {}", problems.join("; "));
    }
    Ok(())
}
