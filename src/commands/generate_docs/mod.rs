//! `wf generate-docs` (hidden): shell completions and man pages, generated from the clap
//! definition (and windforce.json(5) from the manifest's schema) and committed in `completions/`
//! and `man/`. A test regenerates them and fails when the committed files are stale.

mod manifest_page;

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Command, CommandFactory};
use clap_complete::{Generator, Shell};
use clap_mangen::Man;
use serde::Serialize;

use super::{CommandResult, Ctx};
use crate::cli::{Cli, GenerateDocsArgs};
use crate::error::{EXIT_STATUS, Exit};

const BIN: &str = "wf";

pub(super) fn run(ctx: &Ctx, args: GenerateDocsArgs) -> CommandResult {
    let completions = args.out.join("completions");
    let man_dir = args.out.join("man");
    for dir in [&completions, &man_dir] {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut written = Vec::new();
    let visible = without_hidden_subcommands(&Cli::command());
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let mut text = Vec::new();
        clap_complete::generate(shell, &mut visible.clone(), BIN, &mut text);
        written.push(write(&completions.join(shell.file_name(BIN)), &text)?);
    }
    // Pages of subcommands that no longer exist would otherwise linger in the repository.
    for entry in fs::read_dir(&man_dir).with_context(|| format!("reading {}", man_dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "1") {
            fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        }
    }
    let mut root = Cli::command().disable_help_subcommand(true);
    root.build();
    let source = format!("{BIN} {}", root.get_version().unwrap_or_default());
    for command in pages(&root) {
        let name = command.get_display_name().unwrap_or(command.get_name()).to_string();
        let mut page = Vec::new();
        let man = Man::new(command).title(&name).source(&source);
        if name == BIN {
            render_with_exit_status(&man, &mut page)?;
        } else {
            man.render(&mut page)?;
        }
        written.push(write(&man_dir.join(format!("{name}.1")), &page)?);
    }
    written.push(write(&man_dir.join("windforce.json.5"), manifest_page::render(&source).as_bytes())?);
    if ctx.out.json {
        ctx.out.json(&WrittenDocument { files: &written })?;
    } else {
        ctx.out.info(&format!(
            "wrote {} files into {} and {}",
            written.len(),
            completions.display(),
            man_dir.display()
        ));
    }
    Ok(Exit::Ok)
}

/// wf(1): the page clap_mangen renders, with the exit statuses and the environment before its
/// VERSION section.
fn render_with_exit_status(man: &Man, page: &mut Vec<u8>) -> Result<()> {
    let mut rendered = Vec::new();
    man.render(&mut rendered)?;
    let at = rendered.windows(13).position(|line| line == b"\n.SH VERSION").map_or(rendered.len(), |at| at + 1);
    let mut section = String::from(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in EXIT_STATUS {
        section.push_str(&format!(".TP\n{code}\n{}\n", meaning.replace('-', "\\-")));
    }
    section.push_str(".SH ENVIRONMENT\n");
    for (variable, meaning) in crate::config::ENVIRONMENT {
        section.push_str(&format!(".TP\n\\fB{variable}\\fR\n{}\n", meaning.replace('-', "\\-")));
    }
    page.extend_from_slice(&rendered[..at]);
    page.extend_from_slice(section.as_bytes());
    page.extend_from_slice(&rendered[at..]);
    Ok(())
}

/// The command and every visible subcommand below it, each with its full name (`wf-db-up`).
fn pages(command: &Command) -> Vec<Command> {
    let mut all = vec![command.clone()];
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        all.extend(pages(sub));
    }
    all
}

/// The definition as operators see it: internal subcommands (all at the top level) are neither
/// documented nor completed. clap cannot remove a subcommand, so the top level is rebuilt.
fn without_hidden_subcommands(command: &Command) -> Command {
    let mut visible = Command::new(BIN)
        .version(env!("CARGO_PKG_VERSION"))
        .args(command.get_arguments().cloned())
        .subcommand_required(command.is_subcommand_required_set())
        .subcommands(command.get_subcommands().filter(|sub| !sub.is_hide_set()).cloned());
    if let Some(about) = command.get_about() {
        visible = visible.about(about.clone());
    }
    if let Some(long_about) = command.get_long_about() {
        visible = visible.long_about(long_about.clone());
    }
    visible
}

fn write(path: &Path, content: &[u8]) -> Result<PathBuf> {
    fs::write(path, content).with_context(|| format!("writing {}", path.display()))?;
    Ok(path.to_path_buf())
}

/// The files written.
#[derive(Serialize)]
struct WrittenDocument<'a> {
    files: &'a [PathBuf],
}
