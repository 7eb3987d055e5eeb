//! The integration tests of `wf`: real PostgreSQL, real git repositories, real bun.

mod harness;

mod db;
mod docs;
mod embedded;
mod runner;
mod sync;
