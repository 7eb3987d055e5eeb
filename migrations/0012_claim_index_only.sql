-- The queue's waiting jobs are indexed once, by job_queue_claim_idx (tag, priority DESC,
-- scheduled_for). job_queue_due_idx (tag, scheduled_for) served only an idle worker's look for the
-- next due time, which walks the claim index one priority at a time instead (src/queue/claim.rs).
-- With both, every enqueue and every requeue wrote one more index entry, every vacuum cleaned one
-- more index, and a claim's generic plan could take the due index for its locking fetch, whose
-- priority it then checks row by row instead of in the index condition.
DROP INDEX job_queue_due_idx;
