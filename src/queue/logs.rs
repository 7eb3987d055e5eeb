//! Job logs: lines of each attempt, written while the job runs and fenced by the claim.

use anyhow::Result;
use postgres::{GenericClient, Transaction};

use crate::db::Session;
use uuid::Uuid;

/// Bytes of output kept per attempt (each line with its newline); past it, one truncation mark and
/// nothing more of the action's.
pub(crate) const MAX_BYTES_PER_ATTEMPT: usize = 1024 * 1024;

/// Lines of output kept per attempt, likewise: each is a row to write and to hold meanwhile,
/// whatever its length. (Empty lines counted nothing: 20 MiB of them held 7.6 GB in the worker, and
/// completions of a million short lines ran past the statement timeout, again at every attempt.)
pub(crate) const MAX_LINES_PER_ATTEMPT: usize = 50_000;

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

/// The lines of one attempt not yet written, with the per-attempt caps.
#[derive(Debug, Default)]
pub(crate) struct LogBuffer {
    pending: Vec<LogLine>,
    bytes: usize,
    lines: usize,
    truncated: bool,
}

impl LogBuffer {
    /// A line of the action's, kept while the attempt is within its caps.
    pub(crate) fn push(&mut self, stream: &'static str, mut line: String) {
        if self.truncated {
            return;
        }
        // PostgreSQL text cannot hold NUL: it is shown as the replacement character, as invalid
        // UTF-8 already is.
        if line.contains('\0') {
            line = line.replace('\0', "\u{FFFD}");
        }
        let bytes = self.bytes + line.len() + 1;
        let over = if bytes > MAX_BYTES_PER_ATTEMPT {
            Some(format!("{MAX_BYTES_PER_ATTEMPT} bytes"))
        } else if self.lines == MAX_LINES_PER_ATTEMPT {
            Some(format!("{MAX_LINES_PER_ATTEMPT} lines"))
        } else {
            None
        };
        if let Some(over) = over {
            self.truncated = true;
            self.note(format!("output truncated: this attempt wrote more than {over}"));
            return;
        }
        self.bytes = bytes;
        self.lines += 1;
        self.pending.push(LogLine { stream, line });
    }

    /// Whether the attempt's output went past the caps (its lines are dropped from then on).
    pub(crate) fn truncated(&self) -> bool {
        self.truncated
    }

    /// A line of windforce's own (why the attempt failed or was not run), kept past the caps.
    pub(crate) fn note(&mut self, line: String) {
        self.pending.push(LogLine { stream: "wf", line });
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

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(buffer: &mut LogBuffer) -> (usize, Vec<String>) {
        let lines = buffer.take();
        let own = lines.iter().filter(|line| line.stream == "wf").map(|line| line.line.clone()).collect();
        (lines.iter().filter(|line| line.stream != "wf").count(), own)
    }

    #[test]
    fn empty_lines_count_against_the_caps() {
        let mut buffer = LogBuffer::default();
        for _ in 0..MAX_LINES_PER_ATTEMPT + 10 {
            buffer.push("stdout", String::new());
        }
        buffer.note("failed: Error: why".to_string());
        let (lines, own) = kept(&mut buffer);
        assert_eq!(lines, MAX_LINES_PER_ATTEMPT);
        assert_eq!(own, ["output truncated: this attempt wrote more than 50000 lines", "failed: Error: why"]);
    }

    #[test]
    fn a_line_counts_its_newline() {
        let mut buffer = LogBuffer::default();
        for _ in 0..1024 {
            buffer.push("stderr", "x".repeat(1023));
        }
        assert_eq!(kept(&mut buffer), (1024, Vec::new()), "1 MiB with the newlines: kept whole");
        buffer.push("stderr", String::new());
        buffer.push("stderr", "more".to_string());
        let (lines, own) = kept(&mut buffer);
        assert_eq!((lines, own), (0, vec!["output truncated: this attempt wrote more than 1048576 bytes".to_string()]));
    }
}
