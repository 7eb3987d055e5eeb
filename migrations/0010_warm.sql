-- A warm action (windforce.json `"warm": true`): a worker keeps one bun process per action,
-- commit and slot, and runs that action's jobs in it one after another. Pinned on every job at
-- enqueue with the rest of its execution metadata.
ALTER TABLE action ADD COLUMN warm boolean NOT NULL DEFAULT false;

ALTER TABLE job ADD COLUMN warm boolean NOT NULL DEFAULT false;
