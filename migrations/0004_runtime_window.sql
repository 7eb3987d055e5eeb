-- The zombie window of the worker that claimed the job. A worker stops its attempt by itself before
-- its own window has passed without a heartbeat; a reaper must not take the job earlier, whatever
-- window the reaper itself was given (`wf reap --zombie-timeout`).
ALTER TABLE job_runtime ADD COLUMN window_s double precision;
