//! The integration tests of `wf`: real PostgreSQL, real git repositories, real bun.

mod harness;

mod bench;
mod cancel;
mod checks;
mod claim;
mod crash;
mod db;
mod docs;
mod documents;
mod embedded;
mod fixtures;
mod jobs;
mod pipes;
mod prune;
mod reaper;
mod runner;
mod sandbox;
mod schedule;
mod sick;
mod sync;
mod waits;
mod work;
