//! The integration tests of `wf`: real PostgreSQL, real git repositories, real bun.

mod harness;

mod db;
mod fixtures;
mod claim;
mod jobs;
mod prune;
mod schedule;
mod work;
mod docs;
mod embedded;
mod runner;
mod sync;
mod checks;
mod crash;
mod cancel;
mod reaper;
mod bench;
