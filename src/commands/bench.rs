//! `wf bench`: measure the spine on the configured database; a table, or one JSON document.

use std::sync::Mutex;
use std::time::Duration;

use indicatif::ProgressBar;
use serde::Serialize;

use super::{CommandResult, Ctx};
use crate::bench::{self, BunRun, Plan, Progress, Rate, Report};
use crate::cli::BenchArgs;
use crate::error::Exit;
use crate::output::Output;

pub(super) fn run(ctx: &Ctx, args: BenchArgs) -> CommandResult {
    let database = ctx.database()?;
    ctx.out.info(&format!(
        "wf bench on {}: {} jobs per measurement, {} workers{}",
        database.describe,
        args.jobs,
        args.workers,
        if args.bun { ", with bun" } else { "" }
    ));
    let bars = Bars { out: ctx.out, bar: Mutex::new(ProgressBar::hidden()) };
    let plan = Plan {
        jobs: args.jobs,
        workers: args.workers,
        bun: if args.bun { Some(ctx.local()?) } else { None },
        // Without a home of its own (no WF_HOME, no HOME) a bench leaves the folders alone.
        store: ctx.config.store().ok(),
        floor: args.floor,
        batch: args.batch,
    };
    let report = bench::run(&database, &plan, &bars);
    bars.finish();
    let report = report?;
    if ctx.out.json {
        ctx.out.json(&BenchDocument::from(&report))?;
    } else {
        ctx.out.table(
            &["measurement", "jobs", "seconds", "jobs/s", "p50 ms", "p99 ms", "cpu ms/job", "db cpu ms/job"],
            rows(&report),
        )?;
    }
    Ok(Exit::Ok)
}

/// What `wf bench --json` prints: rates in jobs per second, latencies in milliseconds; the `bun`
/// fields are null without `--bun`, the floor's without `--floor`.
#[derive(Serialize)]
struct BenchDocument<'a> {
    tag: &'a str,
    jobs: u32,
    workers: u32,
    batch: u32,
    enqueue_single_per_s: f64,
    enqueue_batch_per_s: f64,
    claim_complete_per_s: f64,
    pickup_latency_ms: LatencyDocument,
    bun_end_to_end_per_s: Option<f64>,
    bun_no_sandbox_per_s: Option<f64>,
    bun_warm_per_s: Option<f64>,
    bun_warm_jobs: Option<u64>,
    warm_vs_bare: Option<f64>,
    sandbox_ms_per_attempt: Option<f64>,
    bun_jobs: Option<u64>,
    bare_bun_per_s: Option<f64>,
    bun_vs_bare: Option<f64>,
    /// Processor time per job on this host (wf, the supervisors, sandboxes and bun; not the
    /// database server), in milliseconds, for each bun measurement.
    bun_cpu_ms_per_job: Option<f64>,
    bun_no_sandbox_cpu_ms_per_job: Option<f64>,
    bun_warm_cpu_ms_per_job: Option<f64>,
    bare_bun_cpu_ms_per_job: Option<f64>,
    /// The database server's processor time per job, in milliseconds, when it runs on this host
    /// (null otherwise): for claim and complete, the floor and each bun measurement through wf.
    claim_complete_db_cpu_ms_per_job: Option<f64>,
    floor_db_cpu_ms_per_job: Option<f64>,
    bun_db_cpu_ms_per_job: Option<f64>,
    bun_no_sandbox_db_cpu_ms_per_job: Option<f64>,
    bun_warm_db_cpu_ms_per_job: Option<f64>,
    /// The host's processors, against which the CPU per job tells whether they were the limit.
    cpus: usize,
    /// The share (0 to 1) of the host's processor time its hypervisor gave to other guests during
    /// the run (steal): rates measured while it is high move with it. Null where the kernel does
    /// not count it.
    steal_share: Option<f64>,
    floor_per_s: Option<f64>,
    spine_vs_floor: Option<f64>,
}

#[derive(Serialize)]
struct LatencyDocument {
    p50: f64,
    p99: f64,
    samples: usize,
}

impl<'a> From<&'a Report> for BenchDocument<'a> {
    fn from(report: &'a Report) -> BenchDocument<'a> {
        BenchDocument {
            tag: &report.tag,
            jobs: report.jobs,
            workers: report.workers,
            batch: report.batch,
            enqueue_single_per_s: report.enqueue_single.per_second(),
            enqueue_batch_per_s: report.enqueue_batch.per_second(),
            claim_complete_per_s: report.claim_complete.per_second(),
            pickup_latency_ms: LatencyDocument {
                p50: millis(report.pickup.p50),
                p99: millis(report.pickup.p99),
                samples: report.pickup.samples,
            },
            bun_end_to_end_per_s: report.bun.map(|bun| bun.sandbox.rate.per_second()),
            bun_no_sandbox_per_s: report.bun.map(|bun| bun.none.rate.per_second()),
            bun_warm_per_s: report.bun.map(|bun| bun.warm.rate.per_second()),
            bun_warm_jobs: report.bun.map(|bun| bun.warm.rate.jobs),
            warm_vs_bare: report.bun.map(|bun| bun.warm.rate.per_second() / bun.bare.rate.per_second()),
            sandbox_ms_per_attempt: report.bun.map(|bun| millis(bun.sandbox_cost_per_attempt(report.workers))),
            bun_jobs: report.bun.map(|bun| bun.sandbox.rate.jobs),
            bare_bun_per_s: report.bun.map(|bun| bun.bare.rate.per_second()),
            bun_vs_bare: report.bun.map(|bun| bun.sandbox.rate.per_second() / bun.bare.rate.per_second()),
            bun_cpu_ms_per_job: report.bun.map(|bun| millis(bun.sandbox.cpu_per_job())),
            bun_no_sandbox_cpu_ms_per_job: report.bun.map(|bun| millis(bun.none.cpu_per_job())),
            bun_warm_cpu_ms_per_job: report.bun.map(|bun| millis(bun.warm.cpu_per_job())),
            bare_bun_cpu_ms_per_job: report.bun.map(|bun| millis(bun.bare.cpu_per_job())),
            claim_complete_db_cpu_ms_per_job: report
                .claim_complete_db_cpu
                .map(|cpu| millis(bench::per_job(cpu, report.claim_complete.jobs))),
            floor_db_cpu_ms_per_job: report
                .floor
                .zip(report.floor_db_cpu)
                .map(|(floor, cpu)| millis(bench::per_job(cpu, floor.jobs))),
            bun_db_cpu_ms_per_job: report.bun.and_then(|bun| bun.sandbox.db_cpu_per_job()).map(millis),
            bun_no_sandbox_db_cpu_ms_per_job: report.bun.and_then(|bun| bun.none.db_cpu_per_job()).map(millis),
            bun_warm_db_cpu_ms_per_job: report.bun.and_then(|bun| bun.warm.db_cpu_per_job()).map(millis),
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
            steal_share: report.steal,
            floor_per_s: report.floor.map(|floor| floor.per_second()),
            spine_vs_floor: report.floor.map(|floor| report.claim_complete.per_second() / floor.per_second()),
        }
    }
}

fn rows(report: &Report) -> Vec<Vec<String>> {
    let dash = || "-".to_string();
    let ms = |duration: Duration| format!("{:.2}", millis(duration));
    let per_job = |cpu: Option<Duration>, jobs: u64| cpu.map_or_else(dash, |cpu| ms(bench::per_job(cpu, jobs)));
    let rate = |name: &str, rate: &Rate, db_cpu: Option<Duration>| {
        vec![
            name.to_string(),
            rate.jobs.to_string(),
            format!("{:.3}", rate.elapsed.as_secs_f64()),
            format!("{:.0}", rate.per_second()),
            dash(),
            dash(),
            dash(),
            per_job(db_cpu, rate.jobs),
        ]
    };
    let figure = |name: &str, column: usize, value: String| {
        let mut row = vec![dash(); 8];
        row[0] = name.to_string();
        row[column] = value;
        row
    };
    let mut rows = vec![
        rate("enqueue, a transaction each", &report.enqueue_single, None),
        rate(
            &format!("enqueue, one batch transaction (median of {})", bench::ENQUEUE_BATCHES),
            &report.enqueue_batch,
            None,
        ),
        rate(
            &format!("claim + complete (no-op, {} workers, {} per statement)", report.workers, report.batch),
            &report.claim_complete,
            report.claim_complete_db_cpu,
        ),
        vec![
            "pickup latency (idle claimer)".to_string(),
            report.pickup.samples.to_string(),
            dash(),
            dash(),
            ms(report.pickup.p50),
            ms(report.pickup.p99),
            dash(),
            dash(),
        ],
    ];
    if let Some(floor) = &report.floor {
        let name = format!("floor: the seed's statements ({} workers)", report.workers);
        rows.push(rate(&name, floor, report.floor_db_cpu));
        let ratio = report.claim_complete.per_second() / floor.per_second();
        rows.push(figure("claim + complete / floor", 3, format!("{ratio:.2}")));
    }
    if let Some(bun) = &report.bun {
        let run = |name: String, run: &BunRun| {
            let mut row = rate(&name, &run.rate, run.db_cpu);
            row[6] = ms(run.cpu_per_job());
            row
        };
        rows.push(run(format!("bun end to end ({} workers)", report.workers), &bun.sandbox));
        rows.push(run(format!("bun end to end, no sandbox ({} workers)", report.workers), &bun.none));
        rows.push(run(format!("bun end to end, warm ({} workers)", report.workers), &bun.warm));
        rows.push(run(format!("bare bun loop ({} at a time)", report.workers), &bun.bare));
        for (name, run) in [("bun end to end / bare loop", &bun.sandbox), ("warm / bare loop", &bun.warm)] {
            let ratio = run.rate.per_second() / bun.bare.rate.per_second();
            rows.push(figure(name, 3, format!("{ratio:.2}")));
        }
        rows.push(figure("sandbox cost per attempt", 4, ms(bun.sandbox_cost_per_attempt(report.workers))));
    }
    if let Some(steal) = report.steal {
        rows.push(figure("steal: the hypervisor's share of the processors", 3, format!("{steal:.2}")));
    }
    rows
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// One progress bar per measurement, on stderr (hidden when not a TTY, or with --json/--quiet).
struct Bars {
    out: Output,
    bar: Mutex<ProgressBar>,
}

impl Bars {
    fn finish(&self) {
        self.bar.lock().unwrap_or_else(|e| e.into_inner()).finish_and_clear();
    }
}

impl Progress for Bars {
    fn begin(&self, measurement: &str, jobs: u64) {
        let mut bar = self.bar.lock().unwrap_or_else(|e| e.into_inner());
        bar.finish_and_clear();
        *bar = self.out.progress(jobs, measurement);
    }

    fn done(&self, jobs: u64) {
        let bar = self.bar.lock().unwrap_or_else(|e| e.into_inner());
        // Claimer threads report out of order; the bar only moves forward.
        if jobs > bar.position() {
            bar.set_position(jobs);
        }
    }
}
