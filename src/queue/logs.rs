//! Job logs: lines of each attempt, written while the job runs and fenced by the claim.

use anyhow::Result;
use postgres::{GenericClient, Transaction};

use crate::db::Session;
use uuid::Uuid;

/// Bytes of output kept per attempt; past it, one truncation mark and nothing more.
pub(crate) const MAX_BYTES_PER_ATTEMPT: usize = 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LogLine {
    /// `stdout`, `stderr`, or `wf` (lines written by windforce itself).
    pub stream: &'static str,
    pub line: String,
}

/// What stands in for lines the database refused for a reason a retry cannot change (a rule of the
/// operator's, text it cannot store): the error's first line, as its detail may quote the refused
/// line itself.
pub(crate) fn refused_note(error: &anyhow::Error) -> LogLine {
    let reason = format!("{error:#}");
    let reason = reason.lines().next().unwrap_or_default();
    LogLine { stream: "wf", line: format!("{REFUSED} {reason}") }
}

const REFUSED: &str = "output could not be stored and was dropped:";

/// Lines a completion or a release carried when the database refused it for good: the next try
/// goes with one note in their place (`refused_note`), the one after (the note refused too) with
/// none, so that the job's outcome is recorded whatever its output. Whether there were lines.
pub(crate) fn drop_refused(lines: &mut Vec<LogLine>, error: &anyhow::Error) -> bool {
    match lines.as_slice() {
        [] => false,
        [only] if only.stream == "wf" && only.line.starts_with(REFUSED) => {
            lines.clear();
            true
        }
        _ => {
            *lines = vec![refused_note(error)];
            true
        }
    }
}

/// The lines of one attempt not yet written, with the per-attempt size cap.
#[derive(Debug, Default)]
pub(crate) struct LogBuffer {
    pending: Vec<LogLine>,
    bytes: usize,
    truncated: bool,
}

impl LogBuffer {
    pub(crate) fn push(&mut self, stream: &'static str, mut line: String) {
        if self.truncated {
            return;
        }
        // PostgreSQL text cannot hold NUL: it is shown as the replacement character, as invalid
        // UTF-8 already is.
        if line.contains('\0') {
            line = line.replace('\0', "\u{FFFD}");
        }
        if self.bytes + line.len() > MAX_BYTES_PER_ATTEMPT {
            self.truncated = true;
            self.pending.push(LogLine {
                stream: "wf",
                line: format!("output truncated: this attempt wrote more than {MAX_BYTES_PER_ATTEMPT} bytes"),
            });
            return;
        }
        self.bytes += line.len();
        self.pending.push(LogLine { stream, line });
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }

    /// The pending lines, taken out to be written elsewhere.
    pub(crate) fn take(&mut self) -> Vec<LogLine> {
        std::mem::take(&mut self.pending)
    }

    /// Lines taken out but not written, back in front of those pending since.
    pub(crate) fn restore(&mut self, mut lines: Vec<LogLine>) {
        lines.append(&mut self.pending);
        self.pending = lines;
    }
}

/// Append lines to an attempt's logs, only while `claim` still owns the job: a fenced worker
/// cannot write into the logs of a later attempt.
pub(crate) fn append(session: &mut Session, job_id: Uuid, claim: &str, attempt: i32, lines: &[LogLine]) -> Result<u64> {
    if lines.is_empty() {
        return Ok(0);
    }
    let (streams, texts) = columns(lines);
    session.execute(APPEND_SQL, &[&job_id, &claim, &attempt, &streams, &texts])
}

/// The same, inside a transaction of the caller's (a clean shutdown's release).
pub(crate) fn append_in(
    tx: &mut Transaction<'_>,
    job_id: Uuid,
    claim: &str,
    attempt: i32,
    lines: &[LogLine],
) -> Result<u64> {
    if lines.is_empty() {
        return Ok(0);
    }
    let (streams, texts) = columns(lines);
    Ok(tx.execute(APPEND_SQL, &[&job_id, &claim, &attempt, &streams, &texts])?)
}

/// Lines as the two arrays the statements unnest.
pub(crate) fn columns(lines: &[LogLine]) -> (Vec<&str>, Vec<&str>) {
    lines.iter().map(|line| (line.stream, line.line.as_str())).unzip()
}

/// The append of lines to a running attempt's logs, fenced by its claim. Parameters: job id, claim
/// id, attempt, streams, lines.
pub const APPEND_SQL: &str = "
INSERT INTO job_logs (job_id, attempt, stream, line)
SELECT $1, $3, l.stream, l.line
  FROM unnest($4::text[], $5::text[]) WITH ORDINALITY AS l(stream, line, n)
 WHERE EXISTS (SELECT 1 FROM job_queue WHERE job_id = $1 AND worker = $2)
 ORDER BY l.n";

/// A line written by windforce itself (reaper, shutdown), outside any claim.
pub(crate) fn note(client: &mut impl GenericClient, job_id: Uuid, attempt: i32, line: &str) -> Result<()> {
    client.execute(
        "INSERT INTO job_logs (job_id, attempt, stream, line) VALUES ($1, $2, 'wf', $3)",
        &[&job_id, &attempt, &line],
    )?;
    Ok(())
}
