//! `wf __supervise` (hidden): the process between a worker and bun; see `runner::supervisor`.

use anyhow::Result;

use crate::cli::SuperviseArgs;
use crate::error::Outcome;
use crate::runner::supervisor::{self, Supervision};

pub(super) fn run(args: SuperviseArgs) -> Result<Outcome> {
    let plan = Supervision::from_arg(&args.plan)?;
    let code = supervisor::supervise(&plan)?;
    // The exit code is bun's (or 128 + a signal), which wf's own exit-code map cannot carry; every
    // process of the action is already dead and reaped, so there is nothing left to unwind.
    std::process::exit(code)
}
