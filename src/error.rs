//! The exit path: how a command ends, and the one map from that to the process's exit code
//! (SPEC: Global conventions). wf(1)'s EXIT STATUS section is generated from `EXIT_STATUS`.

use std::fmt;
use std::process::ExitCode;

const OK: u8 = 0;
const ERROR: u8 = 1;
const USAGE: u8 = 2;
const REFUSED: u8 = 3;
const JOB_FAILED: u8 = 4;
/// 128 + SIGINT, as a shell reads a process Ctrl-C ended.
const INTERRUPTED: u8 = 130;

/// Every exit status of `wf` and what it means, for the manual.
pub(crate) const EXIT_STATUS: [(u8, &str); 6] = [
    (OK, "ok"),
    (ERROR, "error: wf could not do what was asked (bad input, not found, database error)"),
    (USAGE, "usage: the command line is wrong"),
    (
        REFUSED,
        "refused or not finished: a declined confirmation, --yes missing without a terminal, \
         wf result of a job still queued or running, a --wait that timed out",
    ),
    (JOB_FAILED, "the job itself ended failure or canceled (wf result, wf enqueue --wait)"),
    (
        INTERRUPTED,
        "Ctrl-C (143: SIGTERM): most commands end as the signal ends any process, which a shell reads \
         as 128 + its number; wf logs --follow --json ends its array first and exits so itself; a \
         confirmation prompt declined by Ctrl-C exits 3; wf work stops cleanly and exits 0, wf bench \
         cleans up and exits 1",
    ),
];

/// How a command that did what was asked ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    Ok,
    /// A job not finished yet, or a wait that timed out.
    NotFinished,
    /// The job itself ended failure or canceled.
    JobFailed,
    /// The exit code of the process wf stands in for: `wf __supervise` passes on bun's.
    PassedOn(u8),
    /// Stopped by this signal, after ending its output cleanly: 128 + the signal's number, as a
    /// process the signal ended.
    Interrupted(i32),
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(match exit {
            Exit::Ok => OK,
            Exit::NotFinished => REFUSED,
            Exit::JobFailed => JOB_FAILED,
            Exit::PassedOn(code) => code,
            Exit::Interrupted(signal) => u8::try_from(128 + signal).unwrap_or(u8::MAX),
        })
    }
}

/// Why a command did not do what was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// wf could not do it: bad input, not found, a database error, a bug.
    Failed,
    /// The command line is wrong (clap says how).
    Usage,
    /// A declined confirmation, or one that cannot be asked without a terminal.
    Refused,
    /// The reader of stdout went away (`wf jobs | head`): not an error.
    BrokenPipe,
}

impl From<ErrorKind> for ExitCode {
    fn from(kind: ErrorKind) -> ExitCode {
        ExitCode::from(match kind {
            ErrorKind::Failed => ERROR,
            ErrorKind::Usage => USAGE,
            ErrorKind::Refused => REFUSED,
            ErrorKind::BrokenPipe => OK,
        })
    }
}

/// What a command that did not do what was asked ends with: its kind (the exit code), the error
/// with its causes, and what to do about it when wf knows.
#[derive(Debug)]
pub(crate) struct CommandError {
    kind: ErrorKind,
    error: anyhow::Error,
    hint: Option<String>,
}

impl CommandError {
    pub(crate) fn refused(message: impl Into<String>) -> CommandError {
        CommandError { kind: ErrorKind::Refused, error: anyhow::Error::msg(message.into()), hint: None }
    }

    /// The command line asks for what cannot be done (flags that do not go together).
    pub(crate) fn usage(message: impl Into<String>) -> CommandError {
        CommandError { kind: ErrorKind::Usage, error: anyhow::Error::msg(message.into()), hint: None }
    }

    /// What the operator can do about it.
    pub(crate) fn hint(mut self, hint: impl Into<String>) -> CommandError {
        self.hint = Some(hint.into());
        self
    }

    pub(crate) fn kind(&self) -> ErrorKind {
        self.kind
    }
}

/// Any error a command meets: a broken pipe in its chain once stdout's reader is gone is one, every
/// other is a failure (a broken pipe of the database's connection too: it ended a command with exit
/// 0 and nothing said).
impl<E: Into<anyhow::Error>> From<E> for CommandError {
    fn from(error: E) -> CommandError {
        let error = error.into();
        let kind = if is_broken_pipe(&error) && crate::output::stdout_gone() {
            ErrorKind::BrokenPipe
        } else {
            ErrorKind::Failed
        };
        let privilege_refused =
            crate::db::failure::sqlstate(&error) == Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE);
        let hint = privilege_refused.then(|| {
            "the database role wf connects as lacks a privilege wf needs (the README's Configuration says which)"
                .to_string()
        });
        CommandError { kind, error, hint }
    }
}

/// The most characters of an error's causes said: a cause may quote a value given to wf, which
/// may be megabytes (a database error quotes the text it could not take).
const ERROR_CHARS: usize = 10_000;

/// The whole cause chain on one line, then the hint: one line whatever the causes say (a database
/// error, for one, puts its DETAIL and HINT on lines of their own).
impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = format!("{:#}", self.error);
        let text = text.split('\n').map(str::trim_end).collect::<Vec<_>>().join(" ");
        f.write_str(&shortened(&text, ERROR_CHARS))?;
        match &self.hint {
            Some(hint) => write!(f, "; {hint}"),
            None => Ok(()),
        }
    }
}

/// `text`, or its first `most` characters and how many more there were.
pub(crate) fn shortened(text: &str, most: usize) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(most) {
        None => text.into(),
        Some((end, _)) => {
            let more = text[end..].chars().count();
            format!("{}... ({more} more character{})", &text[..end], if more == 1 { "" } else { "s" }).into()
        }
    }
}

/// serde_json keeps the io error of a failed write to itself (its `source` skips it), so it is
/// asked for the kind.
pub(crate) fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        let kind = match (cause.downcast_ref::<std::io::Error>(), cause.downcast_ref::<serde_json::Error>()) {
            (Some(io), _) => Some(io.kind()),
            (None, Some(json)) => json.io_error_kind(),
            (None, None) => None,
        };
        kind == Some(std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::{CommandError, ErrorKind, shortened};

    /// A broken pipe that is not stdout's (the database's connection, as the server closed it) is
    /// an error: the command exits 1 and says it.
    #[test]
    fn a_broken_pipe_that_is_not_stdouts_is_an_error() {
        assert!(!crate::output::stdout_gone());
        let lost = anyhow::Error::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe)).context("enqueueing");
        assert_eq!(CommandError::from(lost).kind(), ErrorKind::Failed);
    }

    #[test]
    fn a_long_text_is_shortened_to_its_beginning_and_how_much_more_there_was() {
        assert_eq!(shortened("abc", 3), "abc");
        assert_eq!(shortened("abcdé", 3), "abc... (2 more characters)");
        assert_eq!(shortened("ééééé", 4), "éééé... (1 more character)");
    }
}
