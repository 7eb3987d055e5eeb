// One run of graphile-worker on its default settings, for scripts/bench-graphile. First its batch
// enqueue, as `wf bench` times wf's: JOBS jobs added by one `addJobs` call (the client builds the
// specs, the server inserts them in one statement), 5 times, each batch deleted before the next, the
// median batch. Then JOBS no-op jobs added in one statement, and a worker of concurrency 4 started
// and timed until the jobs table is empty (its start included: a few milliseconds of a run of
// seconds). Prints {"jobs","seconds","rate","add_jobs_per_s"}. Environment: GW_URL (the database), JOBS.
const { run, makeWorkerUtils, Logger } = require("graphile-worker");

const connectionString = process.env.GW_URL;
const jobs = Number(process.env.JOBS);
const logger = new Logger(() => (level, message) => {
  if (level === "error") console.error(message);
});

async function count(utils) {
  const { rows } = await utils.withPgClient((c) => c.query("SELECT count(*)::int AS n FROM graphile_worker._private_jobs"));
  return rows[0].n;
}

async function main() {
  const utils = await makeWorkerUtils({ connectionString, logger });
  await utils.migrate();
  const clear = () => utils.withPgClient((c) => c.query("DELETE FROM graphile_worker._private_jobs"));
  await clear();
  const batches = [];
  for (let batch = 0; batch < 5; batch++) {
    const specs = Array.from({ length: jobs }, (_, n) => ({ identifier: "noop", payload: { n } }));
    const added = process.hrtime.bigint();
    await utils.addJobs(specs);
    batches.push(Number(process.hrtime.bigint() - added) / 1e9);
    await clear();
  }
  const addJobsSeconds = batches.sort((a, b) => a - b)[2];
  await utils.withPgClient((c) =>
    c.query(
      `SELECT graphile_worker.add_jobs(array(
           SELECT json_populate_record(null::graphile_worker.job_spec,
                                       json_build_object('identifier', 'noop', 'payload', json_build_object('n', n)))
             FROM generate_series(1, $1::int) AS n))`,
      [jobs],
    ),
  );
  const started = process.hrtime.bigint();
  const runner = await run({ connectionString, concurrency: 4, noHandleSignals: true, logger, taskList: { noop: async () => {} } });
  while ((await count(utils)) > 0) {
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  await runner.stop();
  await utils.release();
  console.log(JSON.stringify({ jobs, seconds, rate: jobs / seconds, add_jobs_per_s: jobs / addJobsSeconds }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
