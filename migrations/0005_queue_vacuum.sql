-- A claim walks the head of a (tag, priority) range of job_queue_claim_idx, where every claim
-- since the last vacuum left a dead entry (the claimed row's version before `running = true`).
-- Vacuum the queue tables after a bounded number of changes, not after a fraction of the table:
-- a deep queue would otherwise be walked through tens of thousands of dead entries per claim.
-- (The autovacuum launcher visits a database every autovacuum_naptime: 5 s on the embedded
-- cluster; on another server, the README recommends the same.)
ALTER TABLE job_queue SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 20000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE job_runtime SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0
);
