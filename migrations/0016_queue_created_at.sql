-- The queue row keeps its job's creation time (the enqueue writes it), so that `wf jobs --status
-- queued` (or scheduled, or running) sorts the queue's rows in that state by themselves and joins
-- only a page of them to their jobs: joined first, 3,600,000 queued jobs took 17 s a page.
-- Not filled in for the rows already there: that would rewrite every queue row with the queue
-- locked (73 s for those 3,600,000; long enough for workers to fence themselves). Those rows keep
-- NULL and are listed by their job's time, found by the partial index, which no later row enters
-- and which is empty once they have left the queue.
ALTER TABLE job_queue ADD COLUMN created_at timestamptz;
CREATE INDEX job_queue_created_unknown_idx ON job_queue (job_id) WHERE created_at IS NULL;
