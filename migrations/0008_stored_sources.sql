-- Sources in the database: the database is the only thing hosts share. `wf sync` stores each
-- commit's tree here in the transaction that moves the catalog to it, so a catalog entry never
-- exists without its whole tree; a worker that first meets a commit writes it from here into its
-- own store, marker last.
--
-- A commit's tree: its listing (one row per regular file) and a digest of that listing, the same
-- digest its marker records in a host's store. No foreign key to git_source, like job: a removed
-- source's commits stay while jobs pin them, and `wf prune --sources` takes them when none does.
CREATE TABLE source_commit (
    git_source_id  uuid NOT NULL,
    commit_sha     text NOT NULL,
    digest         text NOT NULL,
    files          integer NOT NULL,
    bytes          bigint NOT NULL,
    stored_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (git_source_id, commit_sha)
);

CREATE TABLE source_file (
    git_source_id  uuid NOT NULL,
    commit_sha     text NOT NULL,
    path           text NOT NULL,
    blob           text NOT NULL,
    executable     boolean NOT NULL,
    PRIMARY KEY (git_source_id, commit_sha, path),
    FOREIGN KEY (git_source_id, commit_sha) REFERENCES source_commit ON DELETE CASCADE
);
-- Prune finds the blobs no listing names any more.
CREATE INDEX source_file_blob_idx ON source_file (blob);

-- File contents by git blob id, stored once whatever number of commits and sources hold them, in
-- chunks of at most 1 MiB so that neither side ever holds a whole large file in memory. A blob is
-- complete once the transaction that inserted it commits (every chunk is inserted by it).
CREATE TABLE source_blob (
    blob   text NOT NULL,
    chunk  integer NOT NULL,
    data   bytea NOT NULL,
    PRIMARY KEY (blob, chunk)
);
-- The chunks are compressed by git already as often as not; pglz would spend time for little.
ALTER TABLE source_blob ALTER COLUMN data SET STORAGE EXTERNAL;
