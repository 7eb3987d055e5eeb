//! What the tests share: the harness (a throwaway PostgreSQL cluster, a database and a WF_HOME per
//! test, git repositories, the one way to start `wf`), the fixtures (the test actions, workers,
//! enqueueing), the checks (completion records, processes, pinned documents), plans (deep queues and
//! EXPLAIN) and hosts (network namespaces sharing one database).

pub(crate) mod checks;
pub(crate) mod fixtures;
pub(crate) mod harness;
pub(crate) mod hosts;
pub(crate) mod plans;
pub(crate) mod terminal;
