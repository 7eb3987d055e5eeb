//! The integration tests of `wf`: real PostgreSQL, real git repositories, real bun.

mod support;

mod actions;
mod bench;
mod cancel;
mod claim;
mod crash;
mod db;
mod depth;
mod docs;
mod documents;
mod embedded;
mod hosts;
mod jobs;
mod operations;
mod operators;
mod pipes;
mod prune;
mod reaper;
mod runner;
mod sandbox;
mod schedule;
mod sick;
mod statements;
mod stored;
mod sync;
mod tls;
mod waits;
mod warm;
mod work;

/// A test file that no `mod` names is never compiled, so its tests never run: every `.rs` file
/// here and in `support/` must be declared.
#[test]
fn every_test_file_is_declared() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    for (dir, declaring) in [(root.clone(), "main.rs"), (root.join("support"), "mod.rs")] {
        let declared = std::fs::read_to_string(dir.join(declaring)).unwrap();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let Some(module) = name.strip_suffix(".rs").filter(|_| name != declaring) else { continue };
            let declaration = declared.lines().any(|line| {
                let line = line.trim();
                line == format!("mod {module};") || line == format!("pub(crate) mod {module};")
            });
            assert!(declaration, "{} is not declared in {declaring}: its tests never run", dir.join(&name).display());
        }
    }
}
