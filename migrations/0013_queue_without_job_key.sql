-- job_queue's foreign key to job goes. Its check ran once per enqueued job: a query of the job's
-- key and a key-share lock on the job's row, one more write to a page the same statement had just
-- written, for a row the same statement had just inserted (only the enqueue path inserts queue
-- rows, in the statement that inserts their jobs). A batch enqueue of 5,000 jobs took 23-32k jobs/s
-- with it and 47-51k without it on the same build and cluster, runs alternated. What it guarded,
-- that retention never deletes a job still in the queue, the retention statement now says itself
-- (src/queue/prune.rs), and skips such a job where the key made the whole batch fail.
ALTER TABLE job_queue DROP CONSTRAINT job_queue_job_id_fkey;
