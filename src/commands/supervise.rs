//! `wf __supervise` (hidden): the process between a worker and bun, when the `wf-supervise` binary
//! is not beside `wf`; see `runner::supervisor`.

use anyhow::Context;

use super::CommandResult;
use crate::cli::SuperviseArgs;
use crate::error::Exit;
use crate::runner::supervisor::{self, Supervision};

pub(super) fn run(args: &SuperviseArgs) -> CommandResult {
    supervisor::not_dumpable()?;
    if args.protocol {
        println!("{}", supervisor::PROTOCOL);
        return Ok(Exit::Ok);
    }
    let plan = Supervision::from_env()?;
    let code = supervisor::supervise(&plan)?;
    // bun's code, or 128 + a signal, passed on as the supervisor's own.
    Ok(Exit::PassedOn(u8::try_from(code).context("the supervisor's exit code")?))
}
