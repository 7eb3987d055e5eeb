-- `wf show` of a failed job names the retry that followed it (`retried_as`), found by this index.
-- Partial: only a retry has `retry_of`, so every other enqueue writes no entry.
CREATE INDEX job_retry_of_idx ON job (retry_of) WHERE retry_of IS NOT NULL;
