-- Whether a client waits for the job's completion (`wf enqueue --wait`, `wf result --wait`,
-- `wf logs --follow`): a worker's completion notifies only then. A NOTIFY takes a lock that every
-- notifying commit of the cluster holds until its commit is on disk, so one for every job put the
-- completions of all workers in a single file (a cancel or a reaper pass, rare and one commit for
-- many jobs, still notifies each). Set by the waiter on the queue row, which the
-- completion deletes: whichever comes second sees the other (the waiter no row, the completion the
-- mark), and the row goes with the completion.
ALTER TABLE job_queue ADD COLUMN awaited boolean NOT NULL DEFAULT false;
