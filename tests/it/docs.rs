//! Completions and man pages are generated from the clap definition and committed; stale ones fail.

use std::collections::BTreeMap;
use std::path::Path;

use crate::support::harness::Wf;

const REGENERATE: &str = "run `cargo run -- generate-docs --out .` and commit completions/ and man/";

/// Every file of `completions/` and `man/` under `root`, by relative path.
fn docs_under(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for dir in ["completions", "man"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
        for entry in entries {
            let entry = entry.unwrap();
            let name = format!("{dir}/{}", entry.file_name().to_string_lossy());
            files.insert(name, std::fs::read(entry.path()).unwrap());
        }
    }
    files
}

/// Run `wf generate-docs` into a fresh folder and read what it wrote.
fn generate() -> BTreeMap<String, Vec<u8>> {
    let out = tempfile::tempdir().unwrap();
    let run = Wf::new(["generate-docs".as_ref(), "--out".as_ref(), out.path().as_os_str()]).run();
    assert_eq!(run.code, 0, "wf generate-docs failed: {run:?}");
    docs_under(out.path())
}

#[test]
fn committed_completions_and_man_pages_match_the_cli_definition() {
    let fresh = generate();
    let committed = docs_under(Path::new(env!("CARGO_MANIFEST_DIR")));
    let missing: Vec<&String> = fresh.keys().filter(|name| !committed.contains_key(*name)).collect();
    let extra: Vec<&String> = committed.keys().filter(|name| !fresh.contains_key(*name)).collect();
    let stale: Vec<&String> = fresh
        .iter()
        .filter(|(name, text)| committed.get(*name).is_some_and(|old| old != *text))
        .map(|(name, _)| name)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty() && stale.is_empty(),
        "completions/ and man/ are out of date (missing: {missing:?}, not generated any more: {extra:?}, \
         different: {stale:?}): {REGENERATE}"
    );
}

#[test]
fn docs_cover_every_visible_subcommand_and_hide_internal_ones() {
    let fresh = generate();
    for name in [
        "completions/wf.bash",
        "completions/_wf",
        "completions/wf.fish",
        "man/wf.1",
        "man/wf-db.1",
        "man/windforce.json.5",
    ] {
        assert!(fresh.contains_key(name), "{name} is generated: {:?}", fresh.keys());
    }
    for name in ["man/wf-db-up.1", "man/wf-sync.1", "man/wf-token-verify.1", "man/wf-source-add.1"] {
        assert!(fresh.contains_key(name), "{name} is generated: {:?}", fresh.keys());
    }
    for (name, text) in &fresh {
        let text = String::from_utf8_lossy(text);
        assert!(
            !text.contains("generate-docs") && !text.contains("__supervise"),
            "{name} mentions a hidden subcommand"
        );
    }
}

/// Every variable of the README's configuration table (and NO_COLOR) is in wf(1)'s ENVIRONMENT.
#[test]
fn the_man_page_names_every_variable_the_readme_configures() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = &readme[readme.find("## Configuration").unwrap()..];
    let table = &section[section.find("\n|").unwrap()..];
    let table = &table[..table.find("\n\n").unwrap()];
    let variables: Vec<&str> = table
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|line| line.split('`').next())
        .chain(["NO_COLOR"])
        .collect();
    assert!(variables.len() > 5, "{table}");
    let page = std::fs::read_to_string(root.join("man/wf.1")).unwrap();
    let environment = &page[page.find(".SH ENVIRONMENT").expect("an ENVIRONMENT section")..];
    for variable in variables {
        assert!(environment.contains(&format!("\\fB{variable}\\fR")), "{variable} in wf(1)'s ENVIRONMENT");
    }
}
