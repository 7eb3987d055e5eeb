-- The registry of workers (`wf workers`). Each worker process keeps its row fresh every heartbeat
-- period and says when it stops; a row not refreshed for the worker's zombie window is a worker
-- gone, shown as such for an hour and then removed by the next worker's beat.
CREATE TABLE worker (
    -- NAME#INSTANCE: every claim this worker writes into job_queue.worker starts with it and a dot,
    -- so its running jobs are found even when two hosts share a name.
    id          text PRIMARY KEY,
    name        text NOT NULL,
    host        text NOT NULL,
    pid         integer NOT NULL,
    tags        text[] NOT NULL,
    slots       integer NOT NULL,
    window_s    double precision NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    last_seen   timestamptz NOT NULL DEFAULT now(),
    stopped_at  timestamptz
);
CREATE INDEX worker_last_seen_idx ON worker (last_seen);

-- Runs of a job that a clean shutdown ended and put back in the queue. Not restarts (they do not
-- count against the restart limit), but each run is an attempt of its own: attempt = restarts +
-- releases + 1, in the logs and in WF_ATTEMPT.
ALTER TABLE job_queue ADD COLUMN releases integer NOT NULL DEFAULT 0;
