-- `wf jobs --status failure` (or canceled) finds the few unsuccessful jobs by this index instead of
-- walking every job for its computed status: 0.3 s on 200,000 jobs before, whatever their number.
-- Partial, so a success, most completions, writes no entry: the worker's completion pays a check
-- of the condition.
CREATE INDEX job_completed_unsuccessful_idx ON job_completed (status) WHERE status <> 'success';
