//! `wf workers`: the registry of workers, live ones first.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::{CommandResult, Ctx};
use crate::db;
use crate::error::Exit;
use crate::output::{ago, fit, rfc3339};
use crate::worker::registry::{self, WorkerView};

pub(super) fn run(ctx: &Ctx) -> CommandResult {
    let mut client = ctx.connect()?;
    let now = db::now(&mut client)?;
    let workers = registry::list(&mut client)?;
    if ctx.out.json {
        ctx.out.json(&workers.iter().map(WorkerDocument::from).collect::<Vec<_>>())?;
        return Ok(Exit::Ok);
    }
    let ids: Vec<Uuid> = workers.iter().flat_map(|w| w.jobs.iter().copied()).collect();
    let mut short = crate::queue::inspect::unique_prefixes(&mut client, &ids)?.into_iter();
    let rows = workers
        .iter()
        .map(|w| {
            let jobs: Vec<String> = short.by_ref().take(w.jobs.len()).collect();
            vec![
                fit(&w.name, 24),
                fit(&w.host, 16),
                w.pid.to_string(),
                fit(&w.tags.join(","), 16),
                format!("{}/{}", w.jobs.len(), w.slots),
                if jobs.is_empty() { "-".to_string() } else { jobs.join(" ") },
                ago(Some(w.started_at), now),
                ago(Some(w.last_seen), now),
                state(w).to_string(),
            ]
        })
        .collect();
    ctx.out.table(&["name", "host", "pid", "tags", "busy", "jobs", "started", "seen", "state"], rows)?;
    if workers.is_empty() {
        ctx.out.info("no worker has been seen in the last hour");
    }
    Ok(Exit::Ok)
}

fn state(worker: &WorkerView) -> &'static str {
    if worker.live { "live" } else { "gone" }
}

/// One worker (`wf workers --json` lists them): `slots` in all, `busy` of them running `jobs`.
#[derive(Serialize)]
struct WorkerDocument<'a> {
    name: &'a str,
    host: &'a str,
    pid: i32,
    tags: &'a [String],
    slots: i32,
    busy: usize,
    jobs: &'a [Uuid],
    #[serde(serialize_with = "rfc3339")]
    started_at: DateTime<Utc>,
    #[serde(serialize_with = "rfc3339")]
    last_seen: DateTime<Utc>,
    state: &'static str,
}

impl<'a> From<&'a WorkerView> for WorkerDocument<'a> {
    fn from(worker: &'a WorkerView) -> WorkerDocument<'a> {
        WorkerDocument {
            name: &worker.name,
            host: &worker.host,
            pid: worker.pid,
            tags: &worker.tags,
            slots: worker.slots,
            busy: worker.jobs.len(),
            jobs: &worker.jobs,
            started_at: worker.started_at,
            last_seen: worker.last_seen,
            state: state(worker),
        }
    }
}
