//! windforce `wf`: the library behind the command-line tool. `main` is a thin shell around `run`.

pub(crate) mod bench;
pub(crate) mod cli;
pub(crate) mod commands;
pub(crate) mod config;
pub mod db;
pub(crate) mod diag;
pub(crate) mod error;
pub(crate) mod fault;
pub(crate) mod output;
pub mod queue;
pub mod runner;
pub mod schedule;
pub mod source;
pub mod token;
pub(crate) mod worker;

use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::process::ExitCode;

use clap::Parser;

use crate::diag::diag;
use crate::error::{ErrorKind, Exit};

/// Parse the command line, run the command, print the error chain, return the exit code.
pub fn run() -> ExitCode {
    std::panic::set_hook(Box::new(report_panic));
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        // `wf --json --version`: a document, as every --json asks.
        Err(error)
            if error.kind() == clap::error::ErrorKind::DisplayVersion && asks_for_json(std::env::args_os().skip(1)) =>
        {
            let document = serde_json::json!({ "version": env!("CARGO_PKG_VERSION") });
            let _ = writeln!(std::io::stdout(), "{document}");
            return Exit::Ok.into();
        }
        Err(error) => {
            let _ = error.print();
            return if error.use_stderr() { ErrorKind::Usage.into() } else { Exit::Ok.into() };
        }
    };
    // The hook has reported a panic already; it ends the command with exit 1, never 101.
    let Ok(ended) = std::panic::catch_unwind(AssertUnwindSafe(|| commands::dispatch(cli))) else {
        return ErrorKind::Failed.into();
    };
    match ended {
        Ok(exit) => exit.into(),
        Err(error) => {
            if error.kind() != ErrorKind::BrokenPipe {
                diag!("error: {error}");
            }
            error.kind().into()
        }
    }
}

/// Whether the command line asks for JSON (`--json`, `--output json`, `--output=json`), read as
/// clap reads it up to the first `--`.
fn asks_for_json(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    let args: Vec<_> = args.take_while(|arg| arg != "--").collect();
    args.iter().any(|arg| arg == "--json" || arg == "--output=json")
        || args.windows(2).any(|pair| pair[0] == "--output" && pair[1] == "json")
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
