//! The single enqueue path: every job creator (CLI, batch, schedule, any future webhook or API)
//! calls `enqueue`, so priority, tag, metadata pinning and the single transaction apply alike.

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use postgres::Transaction;
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

/// One call of the enqueue path: one or more jobs of one action.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    pub app: &'a str,
    pub action: &'a str,
    pub inputs: Vec<Value>,
    pub priority: i32,
    /// Overrides the action's effective tag.
    pub tag: Option<&'a str>,
    pub when: When,
    pub trigger_kind: TriggerKind,
    pub schedule_name: Option<&'a str>,
}

/// What the enqueue path created.
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
}

/// Enqueue inside the caller's transaction: read the catalog row, validate every input against
/// its input schema, pin the execution metadata onto `job`, insert `job` and `job_queue`, and
/// notify waiting workers (delivered when the transaction commits).
pub(crate) fn enqueue(tx: &mut Transaction<'_>, request: &Request<'_>) -> Result<Vec<Enqueued>> {
    if let Some(tag) = request.tag {
        crate::source::check_tag(tag)?;
    }
    // KEY SHARE keeps a concurrent sync from deleting the action until this enqueue commits; the
    // row read is one consistent version, so the job pins the catalog exactly as one sync left it.
    let action = tx.query_opt(
        "SELECT git_source_id, commit_sha, entrypoint, input_schema, output_schema, timeout_s, tag,
                network, memory_mb, max_processes
           FROM action
          WHERE app_key = $1 AND action_key = $2
            FOR KEY SHARE",
        &[&request.app, &request.action],
    )?;
    let Some(action) = action else {
        bail!("{}", crate::source::catalog::unknown_action(tx, request.app, request.action)?);
    };
    let input_schema: Option<Value> = action.get("input_schema");
    if let Some(schema) = &input_schema {
        validate_inputs(schema, &request.inputs)?;
    }
    let tag: String = request.tag.map(str::to_string).unwrap_or_else(|| action.get("tag"));
    let (at, delay_s): (Option<DateTime<Utc>>, f64) = match request.when {
        When::Now => (None, 0.0),
        When::At(at) => (Some(at), 0.0),
        When::In(delay) => (None, delay.as_secs_f64()),
    };
    let ids: Vec<Uuid> = request.inputs.iter().map(|_| Uuid::new_v4()).collect();
    let rows = tx.query(
        "WITH due AS (SELECT coalesce($12::timestamptz, now() + make_interval(secs => $13)) AS at),
         pinned AS (
             INSERT INTO job (id, app_key, action_key, git_source_id, commit_sha, entrypoint,
                              input_schema, output_schema, timeout_s, tag, priority, input,
                              trigger_kind, schedule_name, scheduled_for,
                              network, memory_mb, max_processes)
             SELECT i.id, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, i.input, $11, $14, due.at,
                    $17, $18, $19
               FROM unnest($15::uuid[], $16::jsonb[]) WITH ORDINALITY AS i(id, input, n), due
              ORDER BY i.n
             RETURNING id, scheduled_for
         ),
         queued AS (
             INSERT INTO job_queue (job_id, tag, priority, scheduled_for)
             SELECT id, $9, $10, scheduled_for FROM pinned
         )
         SELECT id, scheduled_for FROM pinned",
        &[
            &request.app,
            &request.action,
            &action.get::<_, Uuid>("git_source_id"),
            &action.get::<_, String>("commit_sha"),
            &action.get::<_, String>("entrypoint"),
            &input_schema,
            &action.get::<_, Option<Value>>("output_schema"),
            &action.get::<_, i32>("timeout_s"),
            &tag,
            &request.priority,
            &request.trigger_kind.as_str(),
            &at,
            &delay_s,
            &request.schedule_name,
            &ids,
            &request.inputs,
            &action.get::<_, Option<bool>>("network"),
            &action.get::<_, Option<i32>>("memory_mb"),
            &action.get::<_, Option<i32>>("max_processes"),
        ],
    )?;
    tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL_ENQUEUED, &tag])?;
    let commit_sha: String = action.get("commit_sha");
    let mut enqueued: Vec<Enqueued> = rows
        .iter()
        .map(|row| Enqueued {
            id: row.get(0),
            app: request.app.to_string(),
            action: request.action.to_string(),
            tag: tag.clone(),
            priority: request.priority,
            commit_sha: commit_sha.clone(),
            scheduled_for: row.get(1),
            trigger_kind: request.trigger_kind,
        })
        .collect();
    // RETURNING order is not guaranteed; report jobs in input order.
    let order: std::collections::HashMap<Uuid, usize> = ids.iter().enumerate().map(|(n, id)| (*id, n)).collect();
    enqueued.sort_by_key(|job| order[&job.id]);
    Ok(enqueued)
}

/// Validate inputs against a schema; the error names each input (for batches) and JSON path.
pub(crate) fn validate_inputs(schema: &Value, inputs: &[Value]) -> Result<()> {
    let validator = jsonschema::validator_for(schema).context("the action's input schema is invalid")?;
    let mut problems = Vec::new();
    for (n, input) in inputs.iter().enumerate() {
        for error in validator.iter_errors(input) {
            let path = error.instance_path().to_string();
            let path = if path.is_empty() { "/".to_string() } else { path };
            let which = if inputs.len() > 1 { format!("line {}: ", n + 1) } else { String::new() };
            problems.push(format!("{which}input at {path}: {error}"));
        }
    }
    if !problems.is_empty() {
        bail!("input does not match the action's input schema: {}", problems.join("; "));
    }
    Ok(())
}
