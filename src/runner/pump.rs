//! The logs pump: turns the bytes of one of the supervisor's pipes into `Event::Line`s.

use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::mpsc::SyncSender;

use super::{Event, Stream};

/// Longer lines are cut into pieces of at most this many bytes, so one runaway line cannot grow the
/// worker's memory without bound.
pub const MAX_LINE: usize = 64 * 1024;

/// A stdout line that starts with this byte is the action's console writing to stderr (the wrapper
/// sends every console line through stdout, so that their order is kept).
pub(super) const STDERR_MARK: char = '\u{1e}';

/// A line that ends with this byte and what follows may be a warm runner's end of a job:
/// `\x1f<nonce> <code>`, the last line of that job on its stream (after what the job wrote without
/// a newline at its end, if anything); or, on stdout, `\x1f<nonce> taken`: the runner read the
/// job's request and runs it.
const END_MARK: char = '\u{1f}';

/// What a warm runner's marked line says of the current job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// It read the job's request.
    Taken,
    /// The job ended, with this code.
    Ended(i32),
}

/// A warm runner's current job, as both readers see it: its nonce, and how many streams have ended
/// it. The second end sends `Event::Settled`, after every line of the job on either stream.
#[derive(Default)]
pub(super) struct Ends {
    nonce: Mutex<String>,
    seen: AtomicU8,
    /// The runner said it took the current job.
    taken: AtomicBool,
}

impl Ends {
    /// A new job: nothing before now ends it.
    pub(super) fn expect(&self, nonce: &str) {
        *self.nonce.lock().unwrap_or_else(|e| e.into_inner()) = nonce.to_string();
        self.seen.store(0, Ordering::SeqCst);
        self.taken.store(false, Ordering::SeqCst);
    }

    /// Whether the runner took the current job (read its request): a runner that ended without
    /// taking it never ran it.
    pub(super) fn taken(&self) -> bool {
        self.taken.load(Ordering::SeqCst)
    }

    /// If `line` marks the current job on one stream: what was written on that line before the
    /// mark, and the mark.
    fn mark<'a>(&self, line: &'a str) -> Option<(&'a str, Mark)> {
        let at = line.rfind(END_MARK)?;
        let (nonce, said) = line[at + END_MARK.len_utf8()..].split_once(' ')?;
        let mark = match said {
            "taken" => Mark::Taken,
            code => Mark::Ended(code.parse().ok()?),
        };
        let current = self.nonce.lock().unwrap_or_else(|e| e.into_inner());
        if current.is_empty() || *current != nonce {
            return None;
        }
        Some((&line[..at], mark))
    }

    /// What starts the current job's marks (`\x1f<nonce> `), when there is a current job.
    fn mark_start(&self) -> Option<Vec<u8>> {
        let nonce = self.nonce.lock().unwrap_or_else(|e| e.into_inner());
        (!nonce.is_empty()).then(|| format!("{END_MARK}{nonce} ").into_bytes())
    }

    /// One stream has sent all of the job's lines: whether it was the second.
    fn ended(&self) -> bool {
        self.seen.fetch_add(1, Ordering::SeqCst) + 1 == 2
    }
}

/// How often a reader blocked on an idle pipe looks at the `abandon` flag.
const POLL: rustix::event::Timespec = rustix::event::Timespec { tv_sec: 0, tv_nsec: 200_000_000 };

/// What the attempt tells its pipe readers while they read.
pub(super) struct Flags<'a> {
    /// Give up on pipes that never close.
    pub abandon: &'a AtomicBool,
    /// The job's output is past its caps: drain it without making lines of it.
    pub quiet: &'a AtomicBool,
}

/// Read `pipe` until EOF (or until `abandon` is set) and send each line as an event. Lines are sent
/// without their newline; invalid UTF-8 is replaced. A gone receiver does not stop the reading: the
/// pipe is still drained, so the action never blocks on a full pipe. While `quiet`, what is read
/// is dropped with no work per line, but for a warm runner's end of the current job (`ends`), which
/// is still looked for: an action flooding its output past the caps costs the worker a read and a
/// search per chunk.
pub(super) fn pump(
    mut pipe: impl Read + AsFd,
    stream: Stream,
    events: SyncSender<Event>,
    flags: Flags,
    ends: Option<&Ends>,
) {
    let mut lines = Lines::default();
    // What a pipe holds (64 KiB by default) at once: a flood costs a read per pipe-full.
    let mut buffer = vec![0u8; 64 * 1024];
    let line = |text: String| match text.strip_prefix(STDERR_MARK) {
        Some(rest) if stream == Stream::Stdout => Event::Line { stream: Stream::Stderr, text: rest.to_string() },
        _ => Event::Line { stream, text },
    };
    let mut send = |text: String| match ends.and_then(|ends| ends.mark(&text).map(|mark| (ends, mark))) {
        Some((ends, (before, mark))) => {
            // The stream's last line is sent before it counts as ended: the other stream's end
            // must not overtake it.
            if !before.is_empty() {
                let _ = events.send(line(before.to_string()));
            }
            match mark {
                Mark::Taken => ends.taken.store(true, Ordering::SeqCst),
                Mark::Ended(code) => {
                    if ends.ended() {
                        let _ = events.send(Event::Settled { code });
                    }
                }
            }
        }
        None => {
            let _ = events.send(line(text));
        }
    };
    while !flags.abandon.load(Ordering::SeqCst) {
        if !readable(pipe.as_fd()) {
            continue;
        }
        match pipe.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) if flags.quiet.load(Ordering::SeqCst) => lines.drain(&buffer[..n], ends, &mut send),
            Ok(n) => lines.push(&buffer[..n], &mut send),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    lines.finish(&mut send);
}

/// Wait up to POLL_MS for the pipe to have data or to be closed.
fn readable(fd: BorrowedFd<'_>) -> bool {
    use rustix::event::{PollFd, PollFlags};
    let mut poll = [PollFd::new(&fd, PollFlags::IN)];
    rustix::event::poll(&mut poll, Some(&POLL)).is_ok_and(|ready| ready > 0)
}

/// Splits a byte stream into lines of at most MAX_LINE bytes.
#[derive(Default)]
pub(super) struct Lines {
    pending: Vec<u8>,
}

impl Lines {
    pub(super) fn push(&mut self, bytes: &[u8], emit: &mut impl FnMut(String)) {
        self.pending.extend_from_slice(bytes);
        let mut start = 0;
        loop {
            let rest = &self.pending[start..];
            let window = &rest[..rest.len().min(MAX_LINE + 1)];
            if let Some(end) = window.iter().position(|byte| *byte == b'\n') {
                emit(String::from_utf8_lossy(&rest[..end]).into_owned());
                start += end + 1;
            } else if rest.len() > MAX_LINE {
                let cut = cut_at(rest);
                emit(String::from_utf8_lossy(&rest[..cut]).into_owned());
                start += cut;
            } else {
                break;
            }
        }
        self.pending.drain(..start);
    }

    /// Drop `bytes` unsplit, but for a warm runner's mark of its current job: from the mark on,
    /// they are lines again. Until a mark, only what could be the start of one is kept (it may be
    /// cut by the chunk's end).
    fn drain(&mut self, bytes: &[u8], ends: Option<&Ends>, emit: &mut impl FnMut(String)) {
        let Some(mark) = ends.and_then(Ends::mark_start) else {
            self.pending.clear();
            return;
        };
        self.pending.extend_from_slice(bytes);
        match memchr::memmem::find(&self.pending, &mark) {
            Some(at) => {
                self.pending.drain(..at);
                self.push(&[], emit);
            }
            None => {
                let kept = self.pending.len().min(mark.len() - 1);
                self.pending.drain(..self.pending.len() - kept);
            }
        }
    }

    /// The last line, when the stream did not end with a newline.
    pub(super) fn finish(&mut self, emit: &mut impl FnMut(String)) {
        if !self.pending.is_empty() {
            emit(String::from_utf8_lossy(&self.pending).into_owned());
            self.pending.clear();
        }
    }
}

/// The longest end of a warm job: END_MARK, a nonce of 32 hex digits, a space and an exit code.
const END_ROOM: usize = 64;

/// Where a line longer than MAX_LINE is cut: at MAX_LINE, moved back to the start of a character,
/// or to a warm runner's end of a job that would be cut in two there (it follows what the job left
/// unfinished on the line, whatever its length), so that the end is a piece of its own.
fn cut_at(rest: &[u8]) -> usize {
    let cut = char_boundary(rest, MAX_LINE);
    let room = cut.saturating_sub(END_ROOM);
    match rest[room..cut].iter().rposition(|byte| *byte == END_MARK as u8) {
        Some(at) if room + at > 0 => room + at,
        _ => cut,
    }
}

/// `max`, moved back to the start of a multi-byte UTF-8 character that would otherwise be cut in
/// two (and so turn into two replacement characters).
fn char_boundary(bytes: &[u8], max: usize) -> usize {
    for back in 1..=3.min(max - 1) {
        let byte = bytes[max - back];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue;
        }
        let length = match byte {
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => 1,
        };
        return if length > back { max - back } else { max };
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]]) -> Vec<String> {
        let mut lines = Lines::default();
        let mut out = Vec::new();
        for chunk in chunks {
            lines.push(chunk, &mut |line| out.push(line));
        }
        lines.finish(&mut |line| out.push(line));
        out
    }

    #[test]
    fn lines_are_split_on_newlines_across_chunks() {
        assert_eq!(split(&[b"a\nb", b"c\n\nd"]), ["a", "bc", "", "d"]);
    }

    #[test]
    fn a_line_of_exactly_max_bytes_is_not_cut() {
        let line = vec![b'x'; MAX_LINE];
        let mut input = line.clone();
        input.push(b'\n');
        assert_eq!(split(&[&input[..10], &input[10..]]), [String::from_utf8(line).unwrap()]);
    }

    #[test]
    fn long_lines_are_cut_between_characters() {
        let text = "é".repeat(MAX_LINE);
        let out = split(&[text.as_bytes()]);
        assert!(out.len() > 1 && out.iter().all(|piece| piece.len() <= MAX_LINE && !piece.contains('\u{fffd}')));
        assert_eq!(out.concat(), text);
    }

    #[test]
    fn a_job_ends_on_its_own_nonce_once_per_stream_after_what_it_left_unfinished() {
        let ends = Ends::default();
        assert_eq!(ends.mark("\u{1f}n1 0"), None, "before any job");
        ends.expect("n1");
        assert_eq!(ends.mark("\u{1f}n0 0"), None, "another job's end is a line like any other");
        assert_eq!(ends.mark("\u{1f}n1 x"), None);
        assert_eq!(ends.mark("\u{1f}n0 taken"), None, "another job's");
        assert_eq!(ends.mark("stray\u{1f}n1 taken"), Some(("stray", Mark::Taken)));
        assert_eq!(ends.mark("\u{1f}n1 1"), Some(("", Mark::Ended(1))));
        assert!(!ends.ended(), "the first stream");
        assert_eq!(ends.mark("partial\u{1f}n1 1"), Some(("partial", Mark::Ended(1))));
        assert!(ends.ended(), "the second");
        ends.taken.store(true, Ordering::SeqCst);
        ends.expect("n2");
        assert!(!ends.taken(), "a new job is not taken yet");
        assert_eq!(ends.mark("\u{1f}n2 0"), Some(("", Mark::Ended(0))));
        assert!(!ends.ended(), "a new job counts anew");
    }

    #[test]
    fn a_warm_end_after_a_long_unfinished_line_is_never_cut_in_two() {
        let nonce = "0123456789abcdef0123456789abcdef";
        for unfinished in (MAX_LINE - 2 * END_ROOM..MAX_LINE + 8).chain([2 * MAX_LINE - 20, 3 * MAX_LINE - 1]) {
            let ends = Ends::default();
            ends.expect(nonce);
            let text = format!("{}\u{1f}{nonce} 0", "x".repeat(unfinished));
            let input = format!("{text}\n");
            let chunks: Vec<&[u8]> = input.as_bytes().chunks(16 * 1024).collect();
            let out = split(&chunks);
            assert!(out.iter().all(|piece| piece.len() <= MAX_LINE), "{unfinished}: a piece is too long");
            assert_eq!(out.concat(), text, "{unfinished}: nothing lost");
            assert_eq!(out.iter().filter_map(|piece| ends.mark(piece)).count(), 1, "{unfinished}: the job ends once");
        }
    }

    #[test]
    fn a_quiet_drain_makes_no_line_but_the_current_jobs_end_cut_across_chunks() {
        let ends = Ends::default();
        let nonce = "0123456789abcdef0123456789abcdef";
        ends.expect(nonce);
        let mark = format!("\u{1f}{nonce} 0\n");
        let noise = "\u{1f}\u{1f}0123 0\n\n\u{1f}ffff taken\n".repeat(1000);
        let input = format!("{noise}partial{mark}");
        for cut in [1, 7, 16 * 1024] {
            let mut lines = Lines::default();
            let mut out = Vec::new();
            for chunk in input.as_bytes().chunks(cut) {
                lines.drain(chunk, Some(&ends), &mut |line| out.push(line));
            }
            assert_eq!(out, [mark.trim_end()], "chunks of {cut}");
            let marks: Vec<_> = out.iter().filter_map(|line| ends.mark(line)).collect();
            assert_eq!(marks, [("", Mark::Ended(0))], "chunks of {cut}");
        }
        let mut lines = Lines::default();
        let mut out = Vec::new();
        lines.drain(input.as_bytes(), None, &mut |line| out.push(line));
        lines.finish(&mut |line| out.push(line));
        assert!(out.is_empty(), "a cold attempt's drain makes no line: {out:?}");
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        assert_eq!(split(&[b"\xffA\n"]), ["\u{fffd}A"]);
    }
}
