//! The library's progress, drawn on stderr (hidden when it is not a terminal, or with `--json` or
//! `--quiet`): what a sync or a source's removal tells while it works.

use std::cell::RefCell;
use std::io::IsTerminal;

use indicatif::ProgressBar;

use crate::output::Output;
use crate::source::{self, short_sha};

/// One spinner or bar at a time: waiting for the source's lock, fetching, materializing.
pub(super) struct SourceBars {
    out: Output,
    bar: RefCell<Option<ProgressBar>>,
}

impl SourceBars {
    pub(super) fn new(out: Output) -> SourceBars {
        SourceBars { out, bar: RefCell::new(None) }
    }

    fn show(&self, start: impl FnOnce() -> ProgressBar, update: impl FnOnce(&ProgressBar)) {
        let mut bar = self.bar.borrow_mut();
        update(bar.get_or_insert_with(start));
    }

    fn clear(&self) {
        if let Some(bar) = self.bar.borrow_mut().take() {
            bar.finish_and_clear();
        }
    }
}

impl source::Progress for SourceBars {
    fn waiting_for_lock(&self, source: &str) {
        let waiting = format!("waiting for another sync of {source} to finish");
        // Off a terminal no spinner is drawn: a line says why nothing happens meanwhile.
        if !std::io::stderr().is_terminal() {
            self.out.info(&waiting);
        }
        self.show(|| self.out.spinner(&waiting), |_| {});
    }

    fn lock_taken(&self) {
        self.clear();
    }

    fn fetching(&self, url: &str, received: usize, total: usize) {
        self.show(
            || self.out.spinner(&format!("fetching {url}")),
            |bar| {
                if total > 0 {
                    bar.set_message(format!("fetching {url}: {received}/{total} objects"));
                }
            },
        );
    }

    fn fetched(&self) {
        self.clear();
    }

    fn dropped_ref(&self, source: &str, reference: &str) {
        self.out.info(&format!("left {reference} out of the mirror of {source}: it names no commit"));
    }

    fn unchecked_ancestry(&self, source: &str, current: &str, commit: &str) {
        self.out.warn(&format!(
            "{source}: the catalog's commit {} is neither in this host's mirror nor on the remote any more \
             (pushed over): whether {} is older cannot be told, and the catalog follows the remote",
            short_sha(current),
            short_sha(commit)
        ));
    }

    fn materializing(&self, commit: &str, done: usize, total: usize) {
        self.show(
            || self.out.progress(0, &format!("materializing {}", short_sha(commit))),
            |bar| {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            },
        );
    }

    fn materialized(&self) {
        self.clear();
    }

    fn storing(&self, commit: &str, done: u64, total: u64) {
        self.show(
            || self.out.progress(0, &format!("storing {} in the database", short_sha(commit))),
            |bar| {
                bar.set_length(total);
                bar.set_position(done);
            },
        );
    }

    fn stored(&self) {
        self.clear();
    }
}
