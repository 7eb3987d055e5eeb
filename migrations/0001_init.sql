-- The whole schema of the queue spine (seed: queue-spine.en.md).

-- A git repository that actions are synced from. commit_sha is the commit the catalog shows.
CREATE TABLE git_source (
    id          uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    url         text NOT NULL,
    branch      text,
    commit_sha  text,
    synced_at   timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- The catalog: what can be enqueued now. An app belongs to exactly one source.
CREATE TABLE app (
    app_key        text PRIMARY KEY,
    git_source_id  uuid NOT NULL REFERENCES git_source (id) ON DELETE CASCADE,
    tag            text
);

CREATE TABLE action (
    app_key        text NOT NULL REFERENCES app (app_key) ON DELETE CASCADE,
    action_key     text NOT NULL,
    git_source_id  uuid NOT NULL REFERENCES git_source (id) ON DELETE CASCADE,
    commit_sha     text NOT NULL,
    entrypoint     text NOT NULL,
    input_schema   jsonb,
    output_schema  jsonb,
    timeout_s      integer NOT NULL CHECK (timeout_s > 0),
    tag            text NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (app_key, action_key)
);
CREATE INDEX action_git_source_idx ON action (git_source_id);

-- A job with everything it needs pinned at enqueue, so a later sync cannot change what it runs.
-- No foreign key to git_source: removing a source must not take its jobs' history with it.
CREATE TABLE job (
    id             uuid PRIMARY KEY,
    app_key        text NOT NULL,
    action_key     text NOT NULL,
    git_source_id  uuid NOT NULL,
    commit_sha     text NOT NULL,
    entrypoint     text NOT NULL,
    input_schema   jsonb,
    output_schema  jsonb,
    timeout_s      integer NOT NULL,
    tag            text NOT NULL,
    priority       integer NOT NULL,
    input          jsonb NOT NULL,
    trigger_kind   text NOT NULL CHECK (trigger_kind IN ('manual', 'api', 'webhook', 'schedule')),
    -- When the job was first due; the queue row's copy moves with retry backoff.
    scheduled_for  timestamptz NOT NULL,
    schedule_name  text,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_created_at_idx ON job (created_at DESC);

-- A job waiting or running. The row exists exactly until the job completes.
CREATE TABLE job_queue (
    job_id           uuid PRIMARY KEY REFERENCES job (id),
    tag              text NOT NULL,
    priority         integer NOT NULL,
    scheduled_for    timestamptz NOT NULL,
    running          boolean NOT NULL DEFAULT false,
    started_at       timestamptz,
    worker           text,
    restarts         integer NOT NULL DEFAULT 0,
    canceled_by      text,
    canceled_reason  text,
    -- A cancel mark is a request to a running worker; a waiting job is canceled at once instead.
    CONSTRAINT job_queue_cancel_mark_only_while_running CHECK (canceled_by IS NULL OR running),
    CONSTRAINT job_queue_running_has_worker CHECK (NOT running OR worker IS NOT NULL)
);
-- The claim walks this index one (tag, priority) range at a time: see src/queue/claim.rs.
CREATE INDEX job_queue_claim_idx ON job_queue (tag, priority DESC, scheduled_for)
    WHERE NOT running AND canceled_by IS NULL;
-- The next due time per tag, for idle workers and --drain.
CREATE INDEX job_queue_due_idx ON job_queue (tag, scheduled_for)
    WHERE NOT running AND canceled_by IS NULL;
-- Running jobs are few; the reaper and the status view scan only them.
CREATE INDEX job_queue_running_idx ON job_queue (job_id) WHERE running;

-- The heartbeat of a running job. Stamped at claim, refreshed by the worker.
CREATE TABLE job_runtime (
    job_id  uuid PRIMARY KEY,
    ping    timestamptz NOT NULL
);

-- The completion record. Deliberately no foreign key to job_queue: the completion transaction
-- inserts this row and deletes the queue row together (seed: "Why job_completed has no FK").
CREATE TABLE job_completed (
    job_id           uuid PRIMARY KEY REFERENCES job (id) ON DELETE CASCADE,
    status           text NOT NULL CHECK (status IN ('success', 'failure', 'canceled')),
    result           jsonb,
    error            jsonb,
    worker           text,
    started_at       timestamptz,
    completed_at     timestamptz NOT NULL DEFAULT now(),
    restarts         integer NOT NULL DEFAULT 0,
    canceled_by      text,
    canceled_reason  text
);
CREATE INDEX job_completed_completed_at_idx ON job_completed (completed_at);

-- Output of each attempt. attempt = restarts + 1 of the claim that wrote the line.
CREATE TABLE job_logs (
    id          bigserial PRIMARY KEY,
    job_id      uuid NOT NULL REFERENCES job (id) ON DELETE CASCADE,
    attempt     integer NOT NULL,
    stream      text NOT NULL CHECK (stream IN ('stdout', 'stderr', 'wf')),
    line        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_logs_job_idx ON job_logs (job_id, id);

-- Cron schedules; each fire time is enqueued through the single enqueue path.
CREATE TABLE schedule (
    name            text PRIMARY KEY,
    app_key         text NOT NULL,
    action_key      text NOT NULL,
    cron            text NOT NULL,
    tz              text NOT NULL DEFAULT 'UTC',
    input           jsonb NOT NULL DEFAULT '{}',
    priority        integer NOT NULL DEFAULT 0,
    tag             text,
    enabled         boolean NOT NULL DEFAULT true,
    last_fire_time  timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
);
-- Concurrent ticks never create one fire time twice.
CREATE UNIQUE INDEX job_schedule_fire_idx ON job (schedule_name, scheduled_for)
    WHERE schedule_name IS NOT NULL;
