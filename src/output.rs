//! Tables, JSON, progress and confirmation: the terminal rules, in one place.

use std::io::{IsTerminal, Write};

use anyhow::Result;
use chrono::{DateTime, SecondsFormat, Utc};
use comfy_table::{ContentArrangement, Table, presets};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Serialize, Serializer};

use crate::diag::diag;
use crate::error::CommandError;

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

    /// Print data lines to stdout.
    pub(crate) fn line(&self, text: &str) -> Result<()> {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{text}")?;
        Ok(())
    }

    /// An informational message on stderr, hidden by `--quiet` and `--json`.
    pub(crate) fn info(&self, text: &str) {
        if !self.quiet && !self.json {
            diag!("{text}");
        }
    }

    /// A warning on stderr: something the user should know even with `--quiet` or `--json`.
    pub(crate) fn warn(&self, text: &str) {
        diag!("warning: {text}");
    }

    /// A table on stdout: boxed on a TTY, plain columns otherwise.
    pub(crate) fn table(&self, header: &[&str], rows: Vec<Vec<String>>) -> Result<()> {
        let mut table = Table::new();
        if std::io::stdout().is_terminal() {
            table.load_style(presets::UTF8_FULL_CONDENSED);
            table.set_content_arrangement(ContentArrangement::Dynamic);
            if self.no_color {
                table.force_no_tty();
            }
        } else {
            table.load_style(presets::NOTHING);
            table.force_no_tty();
        }
        table.set_header(header.to_vec());
        for row in rows {
            table.add_row(row);
        }
        let mut stdout = std::io::stdout().lock();
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

    /// A spinner on stderr for work of unknown length.
    pub(crate) fn spinner(&self, message: &str) -> ProgressBar {
        let bar = ProgressBar::with_draw_target(None, self.draw_target());
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

/// Ask before a destructive step. `--yes` skips; without a TTY and without `--yes`, refuse (exit 3).
pub(crate) fn confirm(prompt: &str, yes: bool) -> Result<(), CommandError> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return Err(
            CommandError::refused(format!("{prompt}: refused without a terminal")).hint("pass --yes to confirm")
        );
    }
    let confirmed = dialoguer::Confirm::new().with_prompt(prompt).default(false).interact()?;
    if confirmed { Ok(()) } else { Err(CommandError::refused("declined")) }
}

/// A document as `--json` prints it (see `Output::json`).
pub(crate) fn pretty(document: &impl Serialize) -> Result<String> {
    Ok(serde_json::to_string_pretty(&serde_json::to_value(document)?)?)
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

/// A timestamp for a table cell.
pub(crate) fn time_cell(time: Option<DateTime<Utc>>) -> String {
    match time {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S").to_string(),
        None => "-".to_string(),
    }
}
