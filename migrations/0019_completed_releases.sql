-- How many times a clean shutdown put the job back before it completed (job_queue.releases, kept
-- at completion), so that `wf show` counts a finished job's attempts as it counts a waiting one's:
-- restarts + releases, and one more for the run that completed it. 0 for a job completed by a wf
-- before this column.
ALTER TABLE job_completed ADD COLUMN releases integer NOT NULL DEFAULT 0;
