//! windforce `wf`: the library behind the command-line tool. `main` is a thin shell around `run`.

pub(crate) mod bench;
pub(crate) mod cli;
pub(crate) mod commands;
pub(crate) mod config;
pub mod db;
pub(crate) mod error;
pub(crate) mod fault;
pub mod output;
pub mod queue;
pub mod runner;
pub mod schedule;
pub mod source;
pub mod token;
pub(crate) mod worker;

use std::panic::AssertUnwindSafe;

use clap::Parser;

use crate::output::diag;

/// Parse the command line, run the command, print the error chain, return the exit code.
pub fn run() -> i32 {
    std::panic::set_hook(Box::new(report_panic));
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let code = if error.use_stderr() { error::EXIT_USAGE } else { error::EXIT_OK };
            let _ = error.print();
            return code;
        }
    };
    // The hook has reported a panic already; it ends the command with exit 1, never 101.
    let Ok(dispatched) = std::panic::catch_unwind(AssertUnwindSafe(|| commands::dispatch(cli))) else {
        return error::EXIT_ERROR;
    };
    match dispatched {
        Ok(outcome) => outcome.code(),
        Err(error) => {
            if is_broken_pipe(&error) {
                return error::EXIT_OK;
            }
            diag!("error: {error:#}");
            error::exit_code_of(&error)
        }
    }
}

/// A bug is still reported as one `error:` line, never as a panic message with a backtrace. It
/// must not panic itself (that would abort): it writes with `diag!`. A panic passed on to another
/// thread with `resume_unwind` does not come here again.
fn report_panic(info: &std::panic::PanicHookInfo<'_>) {
    let message = info.payload_as_str().unwrap_or("(no message)").replace('\n', " ");
    match info.location() {
        Some(at) => diag!("error: internal error (a bug in wf): {message} (at {at})"),
        None => diag!("error: internal error (a bug in wf): {message}"),
    }
}

/// A reader that went away (`wf jobs | head`) is not an error. serde_json keeps the io error of a
/// failed write to itself (its `source` skips it), so it is asked for the kind.
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        let kind = match (cause.downcast_ref::<std::io::Error>(), cause.downcast_ref::<serde_json::Error>()) {
            (Some(io), _) => Some(io.kind()),
            (None, Some(json)) => json.io_error_kind(),
            (None, None) => None,
        };
        kind == Some(std::io::ErrorKind::BrokenPipe)
    })
}
