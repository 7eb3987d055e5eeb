//! The exit-code map: one place that turns an outcome into the process's exit code.

use std::fmt;

/// Exit codes of `wf` (SPEC: Global conventions).
pub(crate) const EXIT_OK: i32 = 0;
pub(crate) const EXIT_ERROR: i32 = 1;
pub(crate) const EXIT_USAGE: i32 = 2;
pub(crate) const EXIT_REFUSED: i32 = 3;
pub(crate) const EXIT_JOB_FAILED: i32 = 4;

/// What a command ends with when it did not fail: ok, refused/not finished, or the job failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    /// Declined confirmation, a job not finished yet, a wait that timed out.
    NotFinished,
    /// The job itself ended failure or canceled.
    JobFailed,
}

impl Outcome {
    pub(crate) fn code(self) -> i32 {
        match self {
            Outcome::Ok => EXIT_OK,
            Outcome::NotFinished => EXIT_REFUSED,
            Outcome::JobFailed => EXIT_JOB_FAILED,
        }
    }
}

/// An error that means "refused" (exit 3) rather than "could not do it" (exit 1).
#[derive(Debug)]
pub(crate) struct Refused(pub String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// The exit code for an error: 3 when anything in its chain is a refusal, else 1.
pub(crate) fn exit_code_of(error: &anyhow::Error) -> i32 {
    if error.chain().any(|cause| cause.is::<Refused>()) { EXIT_REFUSED } else { EXIT_ERROR }
}
