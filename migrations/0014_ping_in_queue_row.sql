-- A running job's heartbeat (ping, and the window of the worker that claimed it) moves from
-- job_runtime into the job's queue row. The claim's UPDATE stamps it together with running = true,
-- the heartbeat is an UPDATE of the row it checks ownership of, and the completion's gate, a
-- release and the reaper clear it by writing the queue row they write anyway. job_runtime cost
-- every job an insert and a delete of a row and an index entry, two of the six writing parts of
-- the worker's statement (src/queue/complete.rs). A waiting job's ping is NULL; the reaper's guard
-- reads a running job's NULL ping as it read a missing job_runtime row.
ALTER TABLE job_queue ADD COLUMN ping timestamptz, ADD COLUMN window_s double precision;
UPDATE job_queue q SET ping = r.ping, window_s = r.window_s
  FROM job_runtime r
 WHERE r.job_id = q.job_id AND q.running;
DROP TABLE job_runtime;
