//! A reader that went away and a bug: exit codes stay those of the contract (never 101 or 134).

use std::process::Stdio;

use crate::support::fixtures::synced;
use crate::support::harness::{Run, TestEnv, Wf};

/// Run `wf` with stdout, and stderr too when `stderr_closed`, into a pipe whose reader is closed
/// (`wf ... | head -c 10` once head is gone).
fn run_into_closed_pipe(wf: Wf, stderr_closed: bool) -> Run {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let stderr = if stderr_closed { Stdio::from(writer.try_clone().unwrap()) } else { Stdio::piped() };
    wf.run_into(Stdio::from(writer), stderr)
}

#[test]
fn a_reader_that_went_away_is_not_an_error() {
    let env = TestEnv::new();
    synced(&env);
    for args in [&["actions", "--json"][..], &["actions"], &["source", "list", "--json"]] {
        let run = run_into_closed_pipe(env.wf(args), false);
        assert_eq!((run.code, run.stderr.as_str()), (0, ""), "wf {args:?} into a closed pipe: {run:?}");
    }
}

#[test]
fn a_closed_stderr_never_aborts() {
    let env = TestEnv::new();
    synced(&env);
    let cases: [(&[&str], i32); 3] = [
        (&["actions", "--json"], 0),
        (&["result", "not-a-uuid"], 1),
        (&["enqueue", "t/echo", "--wait", "--timeout", "1s"], 3),
    ];
    for (args, code) in cases {
        let run = run_into_closed_pipe(env.wf(args), true);
        assert_eq!(run.code, code, "wf {args:?} with stdout and stderr into a closed pipe: {run:?}");
    }
}

#[test]
fn a_panic_is_one_error_line_and_exit_1() {
    let env = TestEnv::new();
    let run = env.wf(["status"]).env("WF_FAULT", "panic").run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.starts_with("error: internal error (a bug in wf): "), "{run:?}");
    assert_eq!(run.stderr.lines().count(), 1, "one line: {run:?}");
    let closed = run_into_closed_pipe(env.wf(["status"]).env("WF_FAULT", "panic"), true);
    assert_eq!(closed.code, 1, "a panic with stderr into a closed pipe: {closed:?}");
}
