-- The sandbox settings of an action (windforce.json `network`, `memory_mb`, `max_processes`),
-- pinned on every job at enqueue with the rest of its execution metadata. NULL: the worker's
-- default.
ALTER TABLE action
    ADD COLUMN network        boolean,
    ADD COLUMN memory_mb      integer CHECK (memory_mb > 0),
    ADD COLUMN max_processes  integer CHECK (max_processes > 0);

ALTER TABLE job
    ADD COLUMN network        boolean,
    ADD COLUMN memory_mb      integer,
    ADD COLUMN max_processes  integer;
