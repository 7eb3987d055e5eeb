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
pub(crate) mod schedule;
pub mod source;
pub mod token;
pub(crate) mod worker;

use clap::Parser;

/// Parse the command line, run the command, print the error chain, return the exit code.
pub fn run() -> i32 {
    // A bug is still reported as one `error:` line, never as a panic message with a backtrace.
    std::panic::set_hook(Box::new(|info| eprintln!("error: internal error (a bug in wf): {info}")));
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let code = if error.use_stderr() { error::EXIT_USAGE } else { error::EXIT_OK };
            let _ = error.print();
            return code;
        }
    };
    match commands::dispatch(cli) {
        Ok(outcome) => outcome.code(),
        Err(error) => {
            if is_broken_pipe(&error) {
                return error::EXIT_OK;
            }
            eprintln!("error: {error:#}");
            error::exit_code_of(&error)
        }
    }
}

/// A reader that went away (`wf jobs | head`) is not an error.
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
