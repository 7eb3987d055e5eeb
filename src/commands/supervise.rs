//! `wf __supervise` (hidden): the process between a worker and bun, when the `wf-supervise` binary
//! is not beside `wf`; see `runner::supervisor`.

use crate::cli::SuperviseArgs;

pub(super) fn run(args: SuperviseArgs) -> ! {
    let code = crate::runner::supervise_main(["__supervise".to_string(), args.plan].into_iter());
    // The exit code is bun's (or 128 + a signal), which wf's own exit-code map cannot carry; every
    // process of the action is already dead and reaped, so there is nothing left to unwind.
    std::process::exit(code)
}
