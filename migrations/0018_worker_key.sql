-- Which signing key (WF_SECRET) each worker gives its jobs' WF_TOKENs with: a short digest of the
-- key, never the key. Workers that sign with different keys warn: a token one gives is refused by
-- `wf token verify` on the other's host. Null for a worker of a wf before this column.
ALTER TABLE worker ADD COLUMN key_id text;
