//! Tables, JSON, progress and confirmation: the terminal rules, in one place.

use std::borrow::Cow;
use std::fmt::{Display, Write as _};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;
use chrono::{DateTime, Local, SecondsFormat, Utc};
use comfy_table::{Cell, Color, ColumnConstraint, ContentArrangement, Table, presets};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
use serde::{Serialize, Serializer};
use unicode_width::UnicodeWidthStr;

use crate::diag::diag;
use crate::error::CommandError;
use crate::queue::job::JobStatus;

/// Whether a write to stdout found its reader gone (`wf jobs | head`).
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);

/// Whether stdout's reader went away: only then does a broken pipe end a command quietly (a
/// broken pipe of the database's connection, or of a child's, is an error like any other).
pub(crate) fn stdout_gone() -> bool {
    STDOUT_GONE.load(Ordering::SeqCst)
}

/// stdout, locked, noting when its reader is gone (`stdout_gone`). Every write of a command's
/// output goes through it.
pub(crate) struct Stdout(std::io::StdoutLock<'static>);

impl Stdout {
    fn lock() -> Stdout {
        Stdout(std::io::stdout().lock())
    }
}

fn noted<T>(written: std::io::Result<T>) -> std::io::Result<T> {
    if let Err(error) = &written
        && error.kind() == std::io::ErrorKind::BrokenPipe
    {
        STDOUT_GONE.store(true, Ordering::SeqCst);
    }
    written
}

impl Write for Stdout {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        noted(self.0.write(bytes))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        noted(self.0.flush())
    }
}

/// How the invoked command should render: decided once from the global flags and the terminal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Output {
    pub json: bool,
    pub quiet: bool,
    /// NO_COLOR is set: no styling even on a terminal.
    pub no_color: bool,
}

impl Output {
    pub(crate) fn new(json: bool, quiet: bool, no_color: bool) -> Output {
        Output { json, quiet, no_color }
    }

    /// Print the one JSON document of a `--json` command, pretty, its keys in alphabetical order
    /// (through a `Value`, whose maps are sorted) as wf has always printed them.
    pub(crate) fn json(&self, document: &impl Serialize) -> Result<()> {
        self.line(&pretty(document)?)
    }

    /// Print a `--json` document that is an array, exactly as `json` prints it, an item at a time:
    /// the `Value` of a million small items took a gigabyte (`wf cancel` in bulk).
    pub(crate) fn json_array<T: Serialize>(&self, items: &[T]) -> Result<()> {
        self.json_array_writer().write_all(items)
    }

    /// A `--json` array to write an item at a time as the items are read (`JsonArray`).
    pub(crate) fn json_array_writer(&self) -> JsonArray<std::io::BufWriter<Stdout>> {
        JsonArray::new(std::io::BufWriter::new(Stdout::lock()))
    }

    /// Print the `--json` document `{"<key>": [items]}`, exactly as `json` prints it, an item at a
    /// time: a million ids took 151 MB as a `Value`.
    pub(crate) fn json_field_array<T: Serialize>(&self, key: &str, items: &[T]) -> Result<()> {
        JsonArray::in_field(std::io::BufWriter::new(Stdout::lock()), key)?.write_all(items)
    }

    /// Print data lines to stdout.
    pub(crate) fn line(&self, text: &str) -> Result<()> {
        let mut stdout = Stdout::lock();
        writeln!(stdout, "{text}")?;
        Ok(())
    }

    /// Print data lines to stdout through one buffer (`line` makes a write of each).
    pub(crate) fn lines<T: Display>(&self, items: impl IntoIterator<Item = T>) -> Result<()> {
        let mut stdout = std::io::BufWriter::new(Stdout::lock());
        for item in items {
            writeln!(stdout, "{item}")?;
        }
        stdout.flush()?;
        Ok(())
    }

    /// Print text to stdout as it is (no newline): control sequences of a terminal.
    pub(crate) fn line_raw(&self, text: &str) -> Result<()> {
        let mut stdout = Stdout::lock();
        write!(stdout, "{text}")?;
        stdout.flush()?;
        Ok(())
    }

    /// An informational message on stderr, hidden by `--quiet` and `--json`.
    pub(crate) fn info(&self, text: &str) {
        if !self.quiet && !self.json {
            diag!("{text}");
        }
    }

    /// A note on stderr that `--json` keeps, for what its document does not say (that a listing
    /// has more pages); hidden by `--quiet`.
    pub(crate) fn note(&self, text: &str) {
        if !self.quiet {
            diag!("{text}");
        }
    }

    /// A warning on stderr: something the user should know even with `--quiet` or `--json`.
    pub(crate) fn warn(&self, text: &str) {
        diag!("warning: {text}");
    }

    /// A table on stdout: boxed on a TTY, plain columns otherwise. A cell is anything printable,
    /// written when the table is (a million rows of strings took 140 MB more).
    pub(crate) fn table<R: AsRef<[C]>, C: Display>(&self, header: &[&str], rows: Vec<R>) -> Result<()> {
        self.styled_table(header, rows, None)
    }

    /// A table whose column `status` holds job statuses, coloured by how the job stands (on a
    /// TTY, without NO_COLOR).
    pub(crate) fn status_table(&self, header: &[&str], rows: Vec<Vec<String>>, status: usize) -> Result<()> {
        self.styled_table(header, rows, Some(status))
    }

    /// The one place that decides how a table looks: NO_COLOR takes the colours away and nothing
    /// else (the layout is the terminal's either way). Off a terminal, and for more than
    /// `BOXED_ROWS_MAX` rows or a cell longer than `BOXED_CELL_MAX` on one, the columns are
    /// written a line at a time
    /// (`write_plain_table`): comfy-table held a gigabyte for the million rows of a bulk
    /// `wf cancel`.
    fn styled_table<R: AsRef<[C]>, C: Display>(
        &self,
        header: &[&str],
        rows: Vec<R>,
        status: Option<usize>,
    ) -> Result<()> {
        let boxed = std::io::stdout().is_terminal()
            && rows.len() <= BOXED_ROWS_MAX
            && rows.iter().all(|row| row.as_ref().iter().all(|cell| cell.to_string().len() <= BOXED_CELL_MAX));
        if !boxed {
            let mut stdout = std::io::BufWriter::new(Stdout::lock());
            write_plain_table(&mut stdout, header, &rows)?;
            stdout.flush()?;
            return Ok(());
        }
        let mut table = Table::new();
        let color = !self.no_color;
        table.load_style(presets::UTF8_FULL_CONDENSED);
        table.set_content_arrangement(ContentArrangement::Dynamic);
        // A terminal that reports no width (0 columns: a serial console, `docker exec -t`) would
        // have every column one character wide: COLUMNS then, else no limit.
        if table.width().is_none_or(|width| width == 0) {
            match std::env::var("COLUMNS").ok().and_then(|columns| columns.parse::<u16>().ok()).filter(|&c| c > 0) {
                Some(columns) => {
                    table.set_width(columns);
                }
                None => {
                    table.set_content_arrangement(ContentArrangement::Disabled);
                }
            }
        }
        table.set_header(header.to_vec());
        // The first column (an id, a name: what an operator copies) is never wrapped; on a narrow
        // terminal the others give way.
        if let Some(first) = table.column_mut(0) {
            first.set_constraint(ColumnConstraint::ContentWidth);
        }
        for row in rows {
            table.add_row(row.as_ref().iter().enumerate().map(|(column, cell)| {
                let text = cell.to_string();
                let paint = if color && Some(column) == status { status_color(&text) } else { None };
                match paint {
                    Some(paint) => Cell::new(text).fg(paint),
                    None => Cell::new(text),
                }
            }));
        }
        let mut stdout = Stdout::lock();
        writeln!(stdout, "{}", table.to_string().trim_end())?;
        Ok(())
    }

    /// A progress bar on stderr when it is a TTY and output is not JSON or quiet.
    pub(crate) fn progress(&self, len: u64, message: &str) -> ProgressBar {
        let bar = ProgressBar::with_draw_target(Some(len), self.draw_target());
        bar.set_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed})")
                .expect("static template")
                .progress_chars("=> "),
        );
        bar.set_message(message.to_string());
        bar
    }

    /// Run `work` with a spinner saying `message` meanwhile, cleared when it ends (also on error).
    pub(crate) fn spinning<T>(&self, message: &str, work: impl FnOnce() -> T) -> T {
        let spinner = self.spinner(message);
        let done = work();
        spinner.finish_and_clear();
        done
    }

    /// A spinner on stderr for work of unknown length.
    pub(crate) fn spinner(&self, message: &str) -> ProgressBar {
        let bar = ProgressBar::with_draw_target(None, self.draw_target());
        // Without a style of its own a bar of unknown length draws an empty bar and "0/0", not
        // the message.
        bar.set_style(ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("static template"));
        bar.set_message(message.to_string());
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        bar
    }

    fn draw_target(&self) -> ProgressDrawTarget {
        if self.json || self.quiet || !std::io::stderr().is_terminal() {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        }
    }
}

/// The most rows a table on a terminal is drawn with boxes and colours: a longer one scrolls past
/// anyway, and comfy-table holds all of it, several times over, before the first line is out.
const BOXED_ROWS_MAX: usize = 10_000;

/// The longest cell a boxed table takes: comfy-table lays a long cell out in a time that grows
/// with the square of its length (`wf show` of a job with a result of 1 MiB: minutes).
const BOXED_CELL_MAX: usize = 4_096;

fn status_color(text: &str) -> Option<Color> {
    match text.parse::<JobStatus>().ok()? {
        JobStatus::Success => Some(Color::Green),
        JobStatus::Failure => Some(Color::Red),
        JobStatus::Canceled => Some(Color::DarkYellow),
        JobStatus::Running => Some(Color::Cyan),
        JobStatus::Queued | JobStatus::Scheduled => None,
    }
}

/// Ask before a destructive step. `--yes` skips; without a TTY and without `--yes`, refuse (exit 3).
/// Ctrl-C at the prompt declines (exit 3) with the terminal as it was: the prompt hides the cursor,
/// and the default SIGINT would end wf before it is shown again.
pub(crate) fn confirm(prompt: &str, yes: bool) -> Result<(), CommandError> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return Err(
            CommandError::refused(format!("{prompt}: refused without a terminal")).hint("pass --yes to confirm")
        );
    }
    let asked = {
        let _interrupt = InterruptDeclines::install()?;
        dialoguer::Confirm::new().with_prompt(prompt).default(false).interact()
    };
    match asked {
        Ok(true) => Ok(()),
        Ok(false) => Err(CommandError::refused("declined")),
        Err(dialoguer::Error::IO(error)) if error.kind() == std::io::ErrorKind::Interrupted => {
            let term = dialoguer::console::Term::stderr();
            let _ = term.show_cursor();
            let _ = term.write_line("");
            Err(CommandError::refused("interrupted: nothing was done"))
        }
        Err(error) => Err(error.into()),
    }
}

/// While a prompt waits, SIGINT (the prompt turns Ctrl-C into one) interrupts its read instead of
/// ending wf; the previous disposition comes back when this is dropped.
struct InterruptDeclines {
    previous: SigAction,
}

extern "C" fn ignore_interrupt(_: libc::c_int) {}

impl InterruptDeclines {
    fn install() -> std::io::Result<InterruptDeclines> {
        // Without SA_RESTART, so that the prompt's read returns EINTR.
        let decline = SigAction::new(SigHandler::Handler(ignore_interrupt), SaFlags::empty(), SigSet::empty());
        Ok(InterruptDeclines { previous: set_interrupt(&decline)? })
    }
}

impl Drop for InterruptDeclines {
    fn drop(&mut self) {
        let _ = set_interrupt(&self.previous);
    }
}

/// Set SIGINT's disposition; the one it replaced.
fn set_interrupt(action: &SigAction) -> std::io::Result<SigAction> {
    // SAFETY: the dispositions set here are `ignore_interrupt`, which does nothing (so it is
    // async-signal-safe), and the one `install` found, put back as it was.
    Ok(unsafe { sigaction(Signal::SIGINT, action) }?)
}

/// A document as `--json` prints it (see `Output::json`).
pub(crate) fn pretty(document: &impl Serialize) -> Result<String> {
    Ok(escape_c1(serde_json::to_string_pretty(&serde_json::to_value(document)?)?))
}

/// JSON text with DEL and the C1 controls (U+007F to U+009F) in its strings written as `\u00XX`.
/// serde_json escapes only the C0 controls, and some terminals act on a C1 control (U+009B opens a
/// control sequence as ESC [ does): an action's result or error shown by `wf result` or `wf show`
/// must not drive the terminal. The same value for a JSON reader: outside its strings JSON text is
/// ASCII.
pub(crate) fn escape_c1(json: String) -> String {
    let c1 = |c: char| ('\u{7f}'..='\u{9f}').contains(&c);
    if let Cow::Owned(escaped) = escape(&json, c1, |out, c| write!(out, "\\u{:04x}", u32::from(c))) {
        return escaped;
    }
    json
}

/// `pretty` of an array, written an item at a time as they come: each item's lines indented by
/// the array's two spaces (a JSON string holds no raw line break, so a line is never split), and
/// by two more when the array is the one field of an object (`in_field`). Nothing ends the
/// document but `finish`.
pub(crate) struct JsonArray<W: Write> {
    out: W,
    items: usize,
    /// The indentation of the array's brackets: "" for a document that is the array, "  " in a field.
    indent: &'static str,
}

impl<W: Write> JsonArray<W> {
    pub(crate) fn new(out: W) -> JsonArray<W> {
        JsonArray { out, items: 0, indent: "" }
    }

    /// The array as the value of `key`, the one field of the document's object.
    pub(crate) fn in_field(mut out: W, key: &str) -> Result<JsonArray<W>> {
        write!(out, "{{\n  {}: ", serde_json::to_string(key)?)?;
        Ok(JsonArray { out, items: 0, indent: "  " })
    }

    pub(crate) fn push(&mut self, item: &impl Serialize) -> Result<()> {
        let text = pretty(item)?;
        write!(self.out, "{}", if self.items == 0 { "[\n" } else { ",\n" })?;
        for (at, line) in text.lines().enumerate() {
            if at > 0 {
                writeln!(self.out)?;
            }
            write!(self.out, "{}  {line}", self.indent)?;
        }
        self.items += 1;
        Ok(())
    }

    /// Every item, then the end of the document.
    pub(crate) fn write_all<T: Serialize>(mut self, items: &[T]) -> Result<()> {
        for item in items {
            self.push(item)?;
        }
        self.finish()
    }

    /// Write what the buffer holds: a document being followed is read as it grows.
    pub(crate) fn flush(&mut self) -> Result<()> {
        self.out.flush()?;
        Ok(())
    }

    pub(crate) fn finish(mut self) -> Result<()> {
        match self.items {
            0 => write!(self.out, "[]")?,
            _ => write!(self.out, "\n{}]", self.indent)?,
        }
        if !self.indent.is_empty() {
            write!(self.out, "\n}}")?;
        }
        writeln!(self.out)?;
        self.out.flush()?;
        Ok(())
    }
}

/// A time in a document: RFC 3339 in UTC, to the millisecond (`serialize_with`).
pub(crate) fn rfc3339<S: Serializer>(time: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&time.to_rfc3339_opts(SecondsFormat::Millis, true))
}

/// An optional time in a document: null, or as `rfc3339`.
pub(crate) fn rfc3339_or_null<S: Serializer>(time: &Option<DateTime<Utc>>, serializer: S) -> Result<S::Ok, S::Error> {
    match time {
        Some(time) => rfc3339(time, serializer),
        None => serializer.serialize_none(),
    }
}

/// A table as plain columns, for a pipe or a file: each cell padded to its column's width (in
/// terminal columns) between a space on either side, a cell of several lines over as many lines,
/// no space at the end of a line.
fn write_plain_table<R: AsRef<[C]>, C: Display>(out: &mut impl Write, header: &[&str], rows: &[R]) -> Result<()> {
    // The cells of the row at hand as text, each written twice: once for the widths, once for
    // the line.
    let mut texts: Vec<String> = Vec::new();
    let mut widths: Vec<usize> = header.iter().map(|title| title.width()).collect();
    for row in rows {
        cell_texts(row.as_ref(), &mut texts)?;
        for (column, text) in texts.iter().enumerate() {
            let widest = text.split('\n').map(UnicodeWidthStr::width).max().unwrap_or(0);
            match widths.get_mut(column) {
                Some(width) => *width = (*width).max(widest),
                None => widths.push(widest),
            }
        }
    }
    let mut line = String::new();
    let mut write_row = |cells: &mut dyn Iterator<Item = &str>| -> Result<()> {
        let cells: Vec<Vec<&str>> = cells.map(|text| text.split('\n').collect()).collect();
        let height = cells.iter().map(Vec::len).max().unwrap_or(1);
        for at in 0..height {
            line.clear();
            for (column, width) in widths.iter().enumerate() {
                let text = cells.get(column).and_then(|lines| lines.get(at)).copied().unwrap_or("");
                line.push(' ');
                line.push_str(text);
                line.extend(std::iter::repeat_n(' ', width - text.width() + 1));
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        Ok(())
    };
    write_row(&mut header.iter().copied())?;
    for row in rows {
        cell_texts(row.as_ref(), &mut texts)?;
        write_row(&mut texts.iter().map(String::as_str))?;
    }
    Ok(())
}

/// `row`'s cells written into `texts`, one string each, their buffers reused from row to row.
fn cell_texts<C: Display>(row: &[C], texts: &mut Vec<String>) -> Result<()> {
    texts.resize_with(row.len(), String::new);
    for (text, cell) in texts.iter_mut().zip(row) {
        text.clear();
        write!(text, "{cell}")?;
    }
    Ok(())
}

/// How a table cell prints a time (`2026-12-04 19:12:00 +00:00`); `--since` and `--until` read it
/// back.
pub(crate) const TABLE_TIME: &str = "%Y-%m-%d %H:%M:%S %:z";

/// A timestamp for a table cell: in the local time zone (TZ), which the offset marks.
pub(crate) fn time_cell(time: Option<DateTime<Utc>>) -> String {
    match time {
        Some(t) => t.with_timezone(&Local).format(TABLE_TIME).to_string(),
        None => "-".to_string(),
    }
}

/// A time as a narrow cell: how long before (or after) `now`, e.g. `5s ago`, `3h ago`, `in 2m`.
pub(crate) fn ago(time: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    let Some(time) = time else { return "-".to_string() };
    let seconds = (now - time).num_seconds();
    if seconds < 0 { format!("in {}", span(-seconds)) } else { format!("{} ago", span(seconds)) }
}

/// A length of time in its largest unit: `42s`, `5m`, `3h`, `12d`.
pub(crate) fn span(seconds: i64) -> String {
    match seconds {
        ..60 => format!("{seconds}s"),
        60..3600 => format!("{}m", seconds / 60),
        3600..86_400 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

/// A duration as `--horizon` and the other duration flags read it back, in days at most (never
/// months, which they refuse), to the millisecond: `40d`, `1d 2h`, `1m 30s`, `1s 500ms`, `0s`.
pub(crate) fn duration(duration: std::time::Duration) -> String {
    let seconds = duration.as_secs();
    let millis = u64::from(duration.subsec_millis());
    let parts: Vec<String> = [
        (seconds / 86_400, "d"),
        (seconds / 3600 % 24, "h"),
        (seconds / 60 % 60, "m"),
        (seconds % 60, "s"),
        (millis, "ms"),
    ]
    .into_iter()
    .filter(|(count, _)| *count > 0)
    .map(|(count, unit)| format!("{count}{unit}"))
    .collect();
    if parts.is_empty() { "0s".to_string() } else { parts.join(" ") }
}

/// Text cut to `width` characters, its end replaced by `…` when it was longer.
pub(crate) fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// An action's text for a terminal: its control characters (C0 but the tab, DEL, C1) shown as
/// `\xNN` instead of acted on, so that no action's output can move the operator's cursor, clear
/// the screen, retitle the window or write the clipboard.
pub(crate) fn escape_controls(text: &str) -> Cow<'_, str> {
    escape(text, |c| c.is_control() && c != '\t', |out, c| write!(out, "\\x{:02x}", u32::from(c)))
}

/// `text` with each character `chosen` picks written by `written` instead (borrowed when none is).
fn escape(
    text: &str,
    chosen: impl Fn(char) -> bool,
    written: impl Fn(&mut String, char) -> std::fmt::Result,
) -> Cow<'_, str> {
    if !text.contains(&chosen) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if chosen(c) {
            let _ = written(&mut escaped, c);
        } else {
            escaped.push(c);
        }
    }
    Cow::Owned(escaped)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn c1_controls_in_json_are_escaped_and_the_value_is_the_same() {
        let value = json!({"result": "a\u{9b}31m\u{7f}b é\u{a0}", "n": 1});
        let text = pretty(&value).unwrap();
        assert!(text.contains(r"a\u009b31m\u007fb é"), "{text}");
        assert!(!text.contains(['\u{9b}', '\u{7f}']), "{text}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap(), value);
        assert_eq!(
            escape_c1(value.to_string()),
            value.to_string().replace('\u{9b}', r"\u009b").replace('\u{7f}', r"\u007f")
        );
    }

    #[test]
    fn an_actions_control_characters_are_shown_not_acted_on() {
        assert_eq!(escape_controls("plain\ttext, é ✓"), "plain\ttext, é ✓");
        assert!(matches!(escape_controls("plain"), Cow::Borrowed(_)));
        assert_eq!(
            escape_controls("\x1b]0;owned\x07\x1b[2J\r\u{7f}\u{9b}1m"),
            "\\x1b]0;owned\\x07\\x1b[2J\\x0d\\x7f\\x9b1m"
        );
    }

    #[derive(Serialize)]
    struct Unsorted {
        zeta: Vec<Option<i32>>,
        alpha: &'static str,
    }

    /// The plain columns are comfy-table's without its spaces at the ends of lines (which wf
    /// printed before, for a pipe), also with wide characters, several lines in a cell and ragged
    /// rows.
    #[test]
    fn a_plain_table_has_comfy_tables_columns() {
        let check = |header: &[&str], rows: &[&[&str]]| {
            let rows: Vec<Vec<String>> = rows.iter().map(|row| row.iter().map(|s| s.to_string()).collect()).collect();
            let mut table = Table::new();
            table.load_style(presets::NOTHING);
            table.force_no_tty();
            table.set_header(header.to_vec());
            for row in &rows {
                table.add_row(row.clone());
            }
            let expected: String = table.to_string().lines().map(|line| format!("{}\n", line.trim_end())).collect();
            let mut out = Vec::new();
            write_plain_table(&mut out, header, &rows).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), expected);
        };
        check(&["id", "outcome"], &[]);
        check(&["id", "outcome"], &[&["0193f1c2-aaaa", "canceled"], &["b", "already_completed"]]);
        check(&["a", "b", "c"], &[&["é漢", "", "x"], &["two\nlines", "one", ""], &["", "", "three\nlines\nhere"]]);
        check(&["field", "value"], &[&["only"], &["k", "v", "extra"]]);
    }

    #[test]
    fn a_json_array_written_an_item_at_a_time_reads_as_the_whole_document() {
        fn written<T: Serialize>(items: &[T], field: Option<&str>) -> String {
            let mut out = Vec::new();
            let mut array = match field {
                Some(key) => JsonArray::in_field(&mut out, key).unwrap(),
                None => JsonArray::new(&mut out),
            };
            for item in items {
                array.push(item).unwrap();
            }
            array.finish().unwrap();
            String::from_utf8(out).unwrap()
        }
        let check = |items: &[serde_json::Value]| {
            assert_eq!(written(items, None), format!("{}\n", pretty(&items).unwrap()));
            let document = json!({"ids \"quoted\"": items});
            assert_eq!(written(items, Some("ids \"quoted\"")), format!("{}\n", pretty(&document).unwrap()));
        };
        check(&[]);
        check(&[json!({"b": 1, "a": "two\nlines"})]);
        check(&[json!({"id": "1", "outcome": "canceled"}), json!({"z": [1, {"q": null}], "a": {}, "e": []}), json!(3)]);
        let unsorted = [Unsorted { zeta: vec![Some(1), None], alpha: "a" }, Unsorted { zeta: vec![], alpha: "b" }];
        assert_eq!(written(&unsorted, None), format!("{}\n", pretty(&unsorted).unwrap()));
    }
}
