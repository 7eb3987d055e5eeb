-- Retries on failure, opt-in per action in windforce.json: at most retry_max retries, the first
-- after retry_backoff_s, doubling up to retry_max_backoff_s. Pinned on every job at enqueue.
ALTER TABLE action
    ADD COLUMN retry_max            integer CHECK (retry_max > 0),
    ADD COLUMN retry_backoff_s      double precision,
    ADD COLUMN retry_max_backoff_s  double precision;

ALTER TABLE job
    ADD COLUMN retry_max            integer,
    ADD COLUMN retry_backoff_s      double precision,
    ADD COLUMN retry_max_backoff_s  double precision,
    -- A retry: the failed job it follows, and how many retries of the first job it makes.
    ADD COLUMN retry_of             uuid,
    ADD COLUMN retry_number         integer NOT NULL DEFAULT 0,
    -- `wf rerun`: the job it runs again. Neither has a foreign key: prune may remove the first job.
    ADD COLUMN rerun_of             uuid,
    -- `wf enqueue --key`: while a job with the key exists, enqueueing with it returns that job.
    ADD COLUMN idempotency_key      text,
    -- The fire time a schedule enqueued this job for. A job withdrawn (the schedule was paused,
    -- changed or removed before it ran) lets go of it, so that the fire time can be enqueued again.
    ADD COLUMN schedule_fire        timestamptz,
    -- Its schedule skips it while an earlier run of the schedule is still running.
    ADD COLUMN no_overlap           boolean NOT NULL DEFAULT false;

CREATE UNIQUE INDEX job_idempotency_key_idx ON job (idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Concurrent ticks never create one fire time twice; a withdrawn job does not hold its fire time.
UPDATE job SET schedule_fire = scheduled_for WHERE schedule_name IS NOT NULL;
DROP INDEX job_schedule_fire_idx;
CREATE UNIQUE INDEX job_schedule_fire_idx ON job (schedule_name, schedule_fire) WHERE schedule_fire IS NOT NULL;
-- `wf jobs --schedule NAME`, newest first.
CREATE INDEX job_schedule_created_idx ON job (schedule_name, created_at DESC) WHERE schedule_name IS NOT NULL;

ALTER TABLE schedule ADD COLUMN no_overlap boolean NOT NULL DEFAULT false;
