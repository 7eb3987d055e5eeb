//! Sync: source first, catalog after (marker-last). A commit reaches the catalog only once its tree
//! is complete in the store; an invalid manifest changes nothing; syncs of one source are
//! serialized; the catalog never moves back.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::harness::{GitRepo, TestEnv, wait_for};

const MARKER: &str = ".windforce_clone_complete";

/// A repository with two apps: tags from the action, from the app and the default; schemas inline
/// and from a file; a timeout and the default; an executable file and a symlink.
fn fixture_repo() -> GitRepo {
    let repo = GitRepo::new();
    write_fixture(&repo);
    repo.commit("fixture");
    repo
}

fn fixture_manifest() -> Value {
    json!({
        "apps": {
            "billing": {
                "tag": "payments",
                "actions": {
                    "charge": {
                        "entrypoint": "billing/charge.ts",
                        "input_schema": "billing/charge.input.json",
                        "output_schema": {"type": "object", "required": ["receipt"]},
                        "timeout": 30,
                        "tag": "payments-eu"
                    },
                    "refund": {"entrypoint": "billing/refund.js"}
                }
            },
            "tools": {
                "actions": {
                    "ping": {"entrypoint": "./tools//ping.mjs", "timeout": 5}
                }
            }
        }
    })
}

fn write_fixture(repo: &GitRepo) {
    repo.manifest(&fixture_manifest())
        .file("billing/charge.ts", "export function main(input) { return { receipt: input.amount }; }\n")
        .file("billing/charge.input.json", r#"{"type": "object", "required": ["amount"]}"#)
        .file("billing/refund.js", "export function main() { return {}; }\n")
        .file("tools/ping.mjs", "export async function main() { return { pong: true }; }\n")
        .file("tools/run.sh", "#!/bin/sh\necho run\n");
    std::fs::set_permissions(repo.path().join("tools/run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    symlink("billing", &repo.path().join("billing-link"));
}

fn symlink(target: &str, link: &Path) {
    std::os::unix::fs::symlink(target, link).unwrap();
}

/// Empty the work tree (keeping .git), so a test can write a commit from scratch.
fn clear_work_tree(repo: &GitRepo) {
    for entry in std::fs::read_dir(repo.path()).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() == ".git" {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            std::fs::remove_dir_all(entry.path()).unwrap();
        } else {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
}

/// `git ARGS` in `dir`, with `input` on its stdin; its output, trimmed. Fails the test if git fails.
fn git_in(dir: &Path, args: &[&str], input: Option<&str>) -> String {
    let mut command = std::process::Command::new("git");
    command.current_dir(dir).args(args).stdin(std::process::Stdio::piped());
    command.stdout(std::process::Stdio::piped());
    let mut child = command.spawn().unwrap();
    if let Some(input) = input {
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), input.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "git {args:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

fn add_source(env: &TestEnv, name: &str, repo: &GitRepo) -> String {
    let run = env.wf(["source", "add", name, &repo.url(), "--json"]).ok();
    run.json()["id"].as_str().unwrap().to_string()
}

fn sync_json(env: &TestEnv, args: &[&str]) -> Value {
    let mut all = vec!["sync"];
    all.extend_from_slice(args);
    all.push("--json");
    env.wf(all).ok().json()
}

/// Everything the catalog holds: sources (with commit and synced_at), apps, actions.
fn catalog_snapshot(env: &TestEnv) -> Value {
    let text: String = env.scalar(
        "SELECT jsonb_build_object(
            'sources', (SELECT coalesce(jsonb_agg(to_jsonb(s) ORDER BY s.name), '[]') FROM git_source s),
            'apps', (SELECT coalesce(jsonb_agg(to_jsonb(a) ORDER BY a.app_key), '[]') FROM app a),
            'actions', (SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY x.app_key, x.action_key), '[]')
                        FROM action x))::text",
    );
    serde_json::from_str(&text).unwrap()
}

/// Every path below `root` with its kind, mode and size.
fn listing(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries {
            let entry = entry.unwrap();
            let meta = entry.path().symlink_metadata().unwrap();
            let relative = entry.path().strip_prefix(root).unwrap().display().to_string();
            out.push(format!(
                "{relative} {:o} {}",
                meta.permissions().mode(),
                if meta.is_dir() { 0 } else { meta.len() }
            ));
            if meta.is_dir() {
                walk(root, &entry.path(), out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

fn source_commit(env: &TestEnv, name: &str) -> Option<String> {
    env.db().query_one("SELECT commit_sha FROM git_source WHERE name = $1", &[&name]).unwrap().get(0)
}

/// (app, action) -> the action's catalog row.
fn action_row(env: &TestEnv, app: &str, action: &str) -> Option<Value> {
    let text: Option<String> = env
        .db()
        .query_one(
            "SELECT (SELECT to_jsonb(a)::text FROM action a WHERE app_key = $1 AND action_key = $2)",
            &[&app, &action],
        )
        .unwrap()
        .get(0);
    text.map(|t| serde_json::from_str(&t).unwrap())
}

fn action_keys(env: &TestEnv) -> Vec<String> {
    env.column("SELECT app_key || '/' || action_key FROM action ORDER BY 1")
}

fn commit_dir(env: &TestEnv, id: &str, sha: &str) -> PathBuf {
    env.store().join(id).join(sha)
}

#[test]
fn sync_pins_the_commit_and_fills_the_catalog_from_the_manifest() {
    let env = TestEnv::new();
    let repo = fixture_repo();
    let sha = repo.repo.head().unwrap().peel_to_commit().unwrap().id().to_string();
    let id = add_source(&env, "acme", &repo);

    let doc = sync_json(&env, &["acme"]);
    assert_eq!(doc["source"], "acme");
    assert_eq!(doc["commit_sha"], sha.as_str());
    assert_eq!(doc["changed"], true);
    assert_eq!(
        doc["actions"],
        json!([
            {"app": "billing", "action": "charge", "tag": "payments-eu", "timeout": 30},
            {"app": "billing", "action": "refund", "tag": "payments", "timeout": 300},
            {"app": "tools", "action": "ping", "tag": "default", "timeout": 5},
        ])
    );

    let charge = action_row(&env, "billing", "charge").unwrap();
    assert_eq!(charge["commit_sha"], sha.as_str());
    assert_eq!(charge["git_source_id"], id.as_str());
    assert_eq!(charge["entrypoint"], "billing/charge.ts");
    assert_eq!(charge["input_schema"], json!({"type": "object", "required": ["amount"]}), "schema from a file");
    assert_eq!(charge["output_schema"], json!({"type": "object", "required": ["receipt"]}), "inline schema");
    assert_eq!(charge["timeout_s"], 30);
    assert_eq!(charge["tag"], "payments-eu", "the action's tag wins");
    let refund = action_row(&env, "billing", "refund").unwrap();
    assert_eq!(refund["input_schema"], Value::Null, "no schema is stored as NULL");
    assert_eq!(refund["output_schema"], Value::Null);
    assert_eq!(refund["timeout_s"], 300, "default timeout");
    assert_eq!(refund["tag"], "payments", "the app's tag");
    let ping = action_row(&env, "tools", "ping").unwrap();
    assert_eq!(ping["tag"], "default");
    assert_eq!(ping["entrypoint"], "tools/ping.mjs", "entrypoint stored normalized");
    assert_eq!(source_commit(&env, "acme").as_deref(), Some(sha.as_str()));

    let dir = commit_dir(&env, &id, &sha);
    let marker: Value = serde_json::from_str(&std::fs::read_to_string(dir.join(MARKER)).unwrap()).unwrap();
    assert_eq!(marker["commit"], sha.as_str());
    assert_eq!(marker["source"], id.as_str());
    assert_eq!(marker["files"], 6);
    assert_eq!(
        std::fs::read_to_string(dir.join("billing/refund.js")).unwrap(),
        "export function main() { return {}; }\n"
    );
    let mode = |path: &str| std::fs::metadata(dir.join(path)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode("tools/run.sh"), 0o555, "the executable bit is kept, the file read-only");
    assert_eq!(mode("billing/charge.ts"), 0o444);
    assert!(marker["digest"].as_str().unwrap().starts_with("sha256:"), "{marker}");
    assert!(dir.join("billing-link").symlink_metadata().is_err(), "symlinks are not materialized");
    assert!(wf::source::store::is_materialized(&dir));
    assert_eq!(wf::source::store::commit_dir(&env.store(), id.parse().unwrap(), &sha), dir);
}

#[test]
fn resync_changes_adds_and_removes_actions_and_keeps_the_old_tree() {
    let env = TestEnv::new();
    let repo = fixture_repo();
    let id = add_source(&env, "acme", &repo);
    let c1 = sync_json(&env, &["acme"])["commit_sha"].as_str().unwrap().to_string();

    let mut manifest = fixture_manifest();
    let billing = &mut manifest["apps"]["billing"]["actions"];
    billing["charge"]["timeout"] = json!(45);
    billing["charge"]["input_schema"] = json!({"type": "object", "required": ["amount", "currency"]});
    billing["charge"].as_object_mut().unwrap().remove("tag");
    billing.as_object_mut().unwrap().remove("refund");
    billing["invoice"] = json!({"entrypoint": "billing/invoice.ts", "tag": "slow"});
    manifest["apps"].as_object_mut().unwrap().remove("tools");
    repo.manifest(&manifest).file("billing/invoice.ts", "export function main() { return {}; }\n");
    let c2 = repo.commit("change, add, remove");

    let doc = sync_json(&env, &["acme"]);
    assert_eq!(doc["commit_sha"], c2.as_str());
    assert_eq!(doc["changed"], true);
    assert_eq!(doc["removed"], json!(["billing/refund", "tools/ping"]), "the actions gone are named");
    assert_eq!(action_keys(&env), ["billing/charge", "billing/invoice"]);
    let charge = action_row(&env, "billing", "charge").unwrap();
    assert_eq!(charge["commit_sha"], c2.as_str());
    assert_eq!(charge["timeout_s"], 45);
    assert_eq!(charge["tag"], "payments", "without its own tag the action takes the app's");
    assert_eq!(charge["input_schema"], json!({"type": "object", "required": ["amount", "currency"]}));
    assert_eq!(action_row(&env, "billing", "invoice").unwrap()["tag"], "slow");
    let apps: i64 = env.scalar("SELECT count(*) FROM app WHERE app_key = 'tools'");
    assert_eq!(apps, 0, "an app gone from the manifest is gone from the catalog");
    assert_eq!(source_commit(&env, "acme"), Some(c2.clone()));

    assert!(commit_dir(&env, &id, &c1).join(MARKER).is_file(), "the old tree stays for jobs pinned to it");
    assert!(commit_dir(&env, &id, &c1).join("billing/refund.js").is_file());
    assert!(commit_dir(&env, &id, &c2).join(MARKER).is_file());

    let again = sync_json(&env, &["acme"]);
    assert_eq!(again["changed"], false, "the same commit again changes nothing");
    assert_eq!(again["commit_sha"], c2.as_str());
    assert_eq!(again["removed"], json!([]));

    manifest["apps"]["billing"]["actions"].as_object_mut().unwrap().remove("invoice");
    repo.manifest(&manifest);
    repo.commit("remove invoice");
    let run = env.wf(["sync", "acme"]).ok();
    assert!(run.stderr.contains("removed from the catalog: billing/invoice\n"), "{}", run.stderr);
}

/// A sync links the files of the commit it synced last into its draft while git fetches, then
/// changes what differs: whatever changed between the commits (a file changed, removed, made
/// executable or not, a folder emptied, a file turned into a folder and back), each tree holds
/// exactly its commit's files, and the older tree is untouched.
#[test]
fn a_tree_drafted_from_the_last_commit_holds_exactly_its_own_files() {
    let env = TestEnv::new();
    let repo = fixture_repo();
    repo.file("a/x.txt", "x1\n").file("a/y.txt", "y\n").file("b/c/z.txt", "z\n").file("keep.txt", "k\n");
    repo.file("f", "a file\n");
    let c1 = repo.commit("first");
    let id = add_source(&env, "acme", &repo);
    sync_json(&env, &["acme"]);

    repo.file("a/x.txt", "x2\n").remove("a/y.txt").remove("b/c/z.txt").remove("f");
    repo.file("f/g.txt", "now a folder\n").file("new/d/w.txt", "w\n");
    let executable = |path: &str, on: bool| {
        let mode = if on { 0o755 } else { 0o644 };
        std::fs::set_permissions(repo.path().join(path), std::fs::Permissions::from_mode(mode)).unwrap();
    };
    executable("keep.txt", true);
    executable("tools/run.sh", false);
    let c2 = repo.commit("second");
    assert_eq!(sync_json(&env, &["acme"])["commit_sha"], c2.as_str());

    std::fs::remove_dir_all(repo.path().join("f")).unwrap();
    repo.file("f", "a file again\n");
    executable("keep.txt", false);
    let c3 = repo.commit("third");
    assert_eq!(sync_json(&env, &["acme"])["commit_sha"], c3.as_str());

    for sha in [&c1, &c2, &c3] {
        let tree = repo.repo.find_commit(git2::Oid::from_str(sha).unwrap()).unwrap().tree().unwrap();
        assert_tree_is_exactly(&repo.repo, &tree, &commit_dir(&env, &id, sha));
    }
}

#[test]
fn unwritable_store_leaves_the_catalog_on_the_old_commit() {
    let env = TestEnv::new();
    let repo = fixture_repo();
    let id = add_source(&env, "acme", &repo);
    let c1 = sync_json(&env, &["acme"])["commit_sha"].as_str().unwrap().to_string();
    repo.file("billing/new.ts", "export function main() { return {}; }\n");
    let c2 = repo.commit("second");
    let before = catalog_snapshot(&env);

    let blocker = env.dir.path().join("a-file");
    std::fs::write(&blocker, "not a directory").unwrap();
    let run = env.wf(["sync", "acme"]).env("WF_STORE", blocker.join("store")).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("store"), "the error names the store: {run:?}");
    assert_eq!(catalog_snapshot(&env), before, "the catalog is untouched");
    assert_eq!(source_commit(&env, "acme"), Some(c1));
    assert!(!commit_dir(&env, &id, &c2).join(MARKER).exists());

    let doc = sync_json(&env, &["acme"]);
    assert_eq!(doc["commit_sha"], c2.as_str());
    assert_eq!(source_commit(&env, "acme"), Some(c2.clone()));
    assert!(commit_dir(&env, &id, &c2).join(MARKER).is_file());
    assert!(commit_dir(&env, &id, &c2).join("billing/new.ts").is_file());
}

#[test]
fn crash_before_marker_leaves_the_catalog_on_the_old_commit_and_the_next_sync_completes_it() {
    let env = TestEnv::new();
    let repo = fixture_repo();
    let id = add_source(&env, "acme", &repo);
    let c1 = sync_json(&env, &["acme"])["commit_sha"].as_str().unwrap().to_string();
    repo.file("billing/new.ts", "export function main() { return {}; }\n");
    let c2 = repo.commit("second");
    let before = catalog_snapshot(&env);

    let run = env.wf(["sync", "acme"]).env("WF_FAULT", "sync-before-marker").run();
    assert_ne!(run.code, 0, "the process was aborted: {run:?}");
    let dir = commit_dir(&env, &id, &c2);
    assert!(dir.join("billing/new.ts").is_file(), "the tree was renamed into place before the crash");
    assert!(!dir.join(MARKER).exists(), "but its marker was never written");
    assert!(!wf::source::store::is_materialized(&dir));
    assert_eq!(catalog_snapshot(&env), before, "the catalog is untouched");
    assert_eq!(source_commit(&env, "acme"), Some(c1));

    // Something left in the incomplete tree must not survive the next sync.
    std::fs::write(dir.join("leftover.txt"), "from the crashed sync").unwrap();
    let doc = sync_json(&env, &["acme"]);
    assert_eq!(doc["commit_sha"], c2.as_str());
    assert_eq!(source_commit(&env, "acme"), Some(c2.clone()));
    assert!(dir.join(MARKER).is_file());
    assert!(!dir.join("leftover.txt").exists(), "the incomplete tree was rebuilt from scratch");
    let entries: Vec<String> = std::fs::read_dir(env.store().join(&id))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert!(entries.iter().all(|name| !name.starts_with(".tmp-")), "no temporary tree is left: {entries:?}");
}

#[test]
fn temporary_trees_of_killed_syncs_are_removed_by_the_next_sync() {
    let env = TestEnv::new();
    let repo = fixture_repo();
    let id = add_source(&env, "acme", &repo);
    let c1 = sync_json(&env, &["acme"])["commit_sha"].as_str().unwrap().to_string();
    // What syncs killed while building a tree leave: of the synced commit, and of one never synced.
    let source_dir = env.store().join(&id);
    for stale in [format!(".tmp-{c1}-0badf00d"), format!(".tmp-{}-deadbeef", "0".repeat(40))] {
        std::fs::create_dir_all(source_dir.join(&stale).join("billing")).unwrap();
        std::fs::write(source_dir.join(&stale).join("billing/charge.ts"), "half written").unwrap();
    }
    let doc = sync_json(&env, &["acme"]);
    assert_eq!(doc["changed"], false, "the commit was already complete: {doc}");
    let entries: Vec<String> =
        std::fs::read_dir(&source_dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().to_string()).collect();
    assert_eq!(entries, [c1], "only the complete tree is left");
}

#[test]
fn catalog_never_moves_back_to_an_older_commit() {
    let env = TestEnv::new();
    let repo = fixture_repo();
    add_source(&env, "acme", &repo);
    let c1 = sync_json(&env, &["acme"])["commit_sha"].as_str().unwrap().to_string();
    repo.file("billing/new.ts", "export function main() { return {}; }\n");
    let c2 = repo.commit("second");
    sync_json(&env, &["acme"]);
    let before = catalog_snapshot(&env);

    let run = env.wf(["sync", "acme", "--commit", &c1]).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("never moves back"), "{run:?}");
    assert_eq!(source_commit(&env, "acme"), Some(c2));
    assert_eq!(catalog_snapshot(&env), before);
}

#[test]
fn sync_follows_the_ref_the_branch_or_the_remote_head() {
    let env = TestEnv::new();
    let repo = fixture_repo();
    let c1 = repo.repo.head().unwrap().peel_to_commit().unwrap();
    repo.repo.tag_lightweight("v1", c1.as_object(), false).unwrap();
    repo.repo.branch("feature", &c1, false).unwrap();
    repo.file("billing/new.ts", "export function main() { return {}; }\n");
    let c2 = repo.commit("second on main");

    add_source(&env, "by-head", &repo);
    assert_eq!(sync_json(&env, &["by-head", "--ref", "v1"])["commit_sha"], c1.id().to_string().as_str());
    assert_eq!(sync_json(&env, &["by-head"])["commit_sha"], c2.as_str(), "default: the remote's HEAD");

    let run = env.wf(["sync", "by-head", "--ref", "no-such-ref"]).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("no-such-ref"), "{run:?}");

    // The apps belong to by-head until it is removed.
    env.wf(["source", "rm", "by-head", "--yes"]).ok();
    env.wf(["source", "add", "by-branch", &repo.url(), "--branch", "feature"]).ok();
    assert_eq!(sync_json(&env, &["by-branch"])["commit_sha"], c1.id().to_string().as_str());
}

/// `--ref HEAD` is the remote's HEAD (not the mirror's own, a bare repository's `master`);
/// `--commit` an object id only, never a branch named like one; a name that is both a branch and a
/// tag is refused. A remote whose HEAD names no branch still serves `--ref` and `--commit`, an
/// empty one is said to have no such ref, and a lock file a killed fetch left in the mirror
/// blocks no later sync.
#[test]
fn refs_and_commits_name_what_the_remote_means() {
    let env = TestEnv::new();
    let repo = fixture_repo();
    let c1 = repo.repo.head().unwrap().peel_to_commit().unwrap();
    let c1_id = c1.id().to_string();
    repo.repo.branch("master", &c1, false).unwrap();
    repo.file("billing/new.ts", "export function main() { return {}; }\n");
    let c2 = repo.commit("second on main");
    let c2_commit = repo.repo.find_commit(git2::Oid::from_str(&c2).unwrap()).unwrap();
    repo.repo.branch(&c1_id[..10], &c2_commit, false).unwrap();

    add_source(&env, "head", &repo);
    assert_eq!(sync_json(&env, &["head", "--ref", "HEAD"])["commit_sha"], c2.as_str(), "the remote's HEAD");
    env.wf(["source", "rm", "head", "--yes"]).ok();
    let id = add_source(&env, "by-id", &repo);
    let synced = sync_json(&env, &["by-id", "--commit", &c1_id[..10]]);
    assert_eq!(synced["commit_sha"], c1_id.as_str(), "the commit, not the branch named like it");

    repo.repo.tag_lightweight("release", c1.as_object(), false).unwrap();
    repo.repo.branch("release", &c2_commit, false).unwrap();
    let run = env.wf(["sync", "by-id", "--ref", "release"]).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("ref release is both a branch and a tag"), "{run:?}");
    assert_eq!(source_commit(&env, "by-id").as_deref(), Some(c1_id.as_str()), "nothing changed");
    assert_eq!(sync_json(&env, &["by-id", "--ref", "refs/heads/release"])["commit_sha"], c2.as_str());

    let lock = env.home().join("git").join(format!("{id}.git")).join("refs/heads/main.lock");
    std::fs::write(&lock, "").unwrap();
    repo.file("billing/newer.ts", "export function main() { return {}; }\n");
    let c3 = repo.commit("third on main");
    assert_eq!(sync_json(&env, &["by-id", "--ref", "main"])["commit_sha"], c3.as_str(), "the lock is stale");
    // What is not there is said without libgit2's class and code.
    for (args, said) in [
        (["--ref", "nosuchbranch"], "ref nosuchbranch is not in the fetched heads and tags; is it pushed?"),
        (["--commit", "deadbeef"], "commit deadbeef is not in the fetched heads and tags; is it pushed?"),
    ] {
        let run = env.wf(["sync", "by-id"].iter().chain(&args)).run();
        assert_eq!(run.code, 1, "{run:?}");
        assert!(run.stderr.contains(said) && !run.stderr.contains("class="), "{run:?}");
    }
    env.wf(["source", "rm", "by-id", "--yes"]).ok();

    // A bare repository whose HEAD names master, where only main was pushed; and an empty one.
    let bare = tempfile::tempdir().unwrap();
    let (pushed, empty) = (bare.path().join("pushed.git"), bare.path().join("empty.git"));
    let git = |args: &[&str]| git_in(repo.path(), args, None);
    for dir in [&pushed, &empty] {
        git(&["init", "-q", "--bare", "-b", "master", dir.to_str().unwrap()]);
    }
    git(&["push", "-q", pushed.to_str().unwrap(), "main"]);
    env.wf(["source", "add", "pushed", pushed.to_str().unwrap()]).ok();
    let run = env.wf(["sync", "pushed"]).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("the repository has no such ref"), "{run:?}");
    assert_eq!(sync_json(&env, &["pushed", "--commit", &c2])["commit_sha"], c2.as_str());
    assert_eq!(sync_json(&env, &["pushed", "--ref", "main"])["commit_sha"], c3.as_str());
    env.wf(["source", "add", "empty", empty.to_str().unwrap()]).ok();
    let run = env.wf(["sync", "empty"]).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("an empty repository"), "{run:?}");
    // A source's branch that is not there: said so, not that the source needs a branch.
    env.wf(["source", "add", "develop", pushed.to_str().unwrap(), "--branch", "develop"]).ok();
    let run = env.wf(["sync", "develop"]).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("the repository has no branch develop: push it"), "{run:?}");
    assert!(!run.stderr.contains("wf source add --branch"), "{run:?}");
    // Its actions, while the catalog has others': none, since it was never synced.
    let listed = env.wf(["actions", "--source", "develop"]).ok();
    assert!(listed.stderr.contains("source develop has no actions: it was never synced"), "{listed:?}");
    assert!(!env.wf(["actions", "--source", "pushed"]).ok().stdout.is_empty());
}

/// A commit the branch was pushed over is no longer the remote's: `--commit` refuses it, although
/// the mirror still holds its objects (it was synced: a host with a newer mirror refused it).
#[test]
fn a_commit_pushed_over_is_no_longer_synced_by_its_id_or_as_a_ref() {
    let env = TestEnv::new();
    let repo = fixture_repo();
    add_source(&env, "s", &repo);
    env.wf(["sync", "s"]).ok();
    repo.file("billing/new.ts", "export function main() { return {}; }\n");
    let second = repo.commit("second");
    assert_eq!(sync_json(&env, &["s"])["commit_sha"], second.as_str());
    let head = repo.repo.head().unwrap().peel_to_commit().unwrap();
    let signature = git2::Signature::now("wf tests", "tests@windforce.invalid").unwrap();
    let over = repo.repo.commit(None, &signature, &signature, "pushed over", &head.tree().unwrap(), &[]).unwrap();
    repo.repo.reference("refs/heads/main", over, true, "force-push").unwrap();
    assert_eq!(sync_json(&env, &["s"])["commit_sha"], over.to_string().as_str());
    // By --commit, or by --ref, which takes any revision (it brought the commit back).
    for flag in ["--commit", "--ref"] {
        let run = env.wf(["sync", "s", flag, &second]).run();
        assert_eq!(run.code, 1, "{run:?}");
        assert!(run.stderr.contains("no branch or tag holds it any more"), "{run:?}");
        assert_eq!(source_commit(&env, "s"), Some(over.to_string()), "nothing changed");
    }
}

#[test]
fn a_tag_naming_a_tree_never_blocks_a_source() {
    let env = TestEnv::new();
    let repo = fixture_repo();
    let tree = repo.repo.head().unwrap().peel_to_tree().unwrap();
    repo.repo.tag_lightweight("tree-tag", tree.as_object(), false).unwrap();
    // file://: libgit2's smart transport, which tells the remote what the mirror has from its refs.
    let url = format!("file://{}", repo.url());
    env.wf(["source", "add", "s", &url]).ok();
    env.wf(["sync", "s"]).ok();

    // Asked for, the tag is refused by name; fetched into the mirror, it blocks no later sync.
    let run = env.wf(["sync", "s", "--ref", "tree-tag"]).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("ref tree-tag names a tree, not a commit"), "{run:?}");
    repo.file("billing/new.ts", "export function main() { return {}; }\n");
    let c2 = repo.commit("second");
    assert_eq!(sync_json(&env, &["s"])["commit_sha"], c2.as_str());
    let c2_id = repo.repo.head().unwrap().peel_to_commit().unwrap();
    repo.repo.tag_lightweight("v2", c2_id.as_object(), false).unwrap();
    assert_eq!(sync_json(&env, &["s", "--ref", "v2"])["commit_sha"], c2.as_str());

    // Deleted upstream, the tag is gone from every later sync's way too.
    repo.repo.tag_delete("tree-tag").unwrap();
    repo.file("billing/newer.ts", "export function main() { return {}; }\n");
    let c3 = repo.commit("third");
    assert_eq!(sync_json(&env, &["s"])["commit_sha"], c3.as_str());
    repo.file("billing/newest.ts", "export function main() { return {}; }\n");
    let c4 = repo.commit("fourth");
    assert_eq!(sync_json(&env, &["s", "--commit", &c4])["commit_sha"], c4.as_str());
}

#[test]
fn concurrent_syncs_of_one_source_end_complete_on_the_newest_commit() {
    for round in 0..4 {
        let env = TestEnv::new();
        let repo = fixture_repo();
        let id = add_source(&env, "acme", &repo);
        sync_json(&env, &["acme"]);

        let start = |env: &TestEnv| env.wf(["sync", "acme", "--json"]).start();
        repo.file(&format!("billing/r{round}a.ts"), "export function main() { return {}; }\n");
        repo.commit("c2");
        let a = start(&env);
        repo.file(&format!("billing/r{round}b.ts"), "export function main() { return {}; }\n");
        let c3 = repo.commit("c3");
        let b = start(&env);
        for child in [a, b] {
            let run = child.finish();
            assert_eq!(run.code, 0, "round {round}: a sync failed: {run:?}");
        }
        assert_eq!(source_commit(&env, "acme"), Some(c3.clone()), "round {round}: the catalog shows the newest");
        let commits: Vec<String> = std::fs::read_dir(env.store().join(&id))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        assert!(commits.contains(&c3), "round {round}: {commits:?}");
        for name in &commits {
            assert!(!name.starts_with(".tmp-"), "round {round}: a temporary tree is left: {commits:?}");
            let dir = env.store().join(&id).join(name);
            assert!(dir.join(MARKER).is_file(), "round {round}: {name} has no marker");
            let oid = git2::Oid::from_str(name).unwrap();
            let tree = repo.repo.find_commit(oid).unwrap().tree().unwrap();
            assert_tree_is_complete(&repo.repo, &tree, &dir);
        }
    }
}

/// A sync that waits for another sync of its source says so off a terminal too (a spinner on one):
/// it waited without a word.
#[test]
fn a_sync_waiting_for_another_says_so() {
    let env = TestEnv::new();
    let repo = fixture_repo();
    let id: uuid::Uuid = add_source(&env, "acme", &repo).parse().unwrap();
    // The other sync: the source's lock (class "wfsy", the id folded to 32 bits) held here.
    let bits = id.as_u128();
    let key = (bits ^ (bits >> 32) ^ (bits >> 64) ^ (bits >> 96)) as u32 as i32;
    let mut other = env.db();
    other.execute("SELECT pg_advisory_lock($1, $2)", &[&0x7766_7379_i32, &key]).unwrap();
    let log = env.dir.path().join("sync.log");
    let mut sync = env.wf(["sync", "acme"]).spawn(&log);
    wait_for(Duration::from_secs(30), "the sync to say it waits", || {
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        said.contains("waiting for another sync of acme to finish").then_some(())
    });
    other.execute("SELECT pg_advisory_unlock($1, $2)", &[&0x7766_7379_i32, &key]).unwrap();
    assert!(sync.wait().unwrap().success(), "{}", std::fs::read_to_string(&log).unwrap());
    assert!(source_commit(&env, "acme").is_some());
}

/// Every regular file of `tree` is in `dir` with the same content.
fn assert_tree_is_complete(repo: &git2::Repository, tree: &git2::Tree, dir: &Path) {
    tree.walk(git2::TreeWalkMode::PreOrder, |parent, entry| {
        if entry.kind() == Some(git2::ObjectType::Blob) && entry.filemode() != 0o120000 {
            let path = dir.join(parent).join(entry.name().unwrap());
            let blob = repo.find_blob(entry.id()).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), blob.content(), "{} differs", path.display());
        }
        git2::TreeWalkResult::Ok
    })
    .unwrap();
}

/// `dir` holds exactly the regular files of `tree` (content and executable bit) and the folders
/// they are in, nothing else but the marker.
fn assert_tree_is_exactly(repo: &git2::Repository, tree: &git2::Tree, dir: &Path) {
    let mut wanted = Vec::new();
    tree.walk(git2::TreeWalkMode::PreOrder, |parent, entry| {
        let path = format!("{parent}{}", entry.name().unwrap());
        match (entry.kind(), entry.filemode()) {
            (Some(git2::ObjectType::Tree), _) => wanted.push(format!("{path}/")),
            (Some(git2::ObjectType::Blob), mode) if mode != 0o120000 => {
                let content = String::from_utf8_lossy(repo.find_blob(entry.id()).unwrap().content()).to_string();
                wanted.push(format!("{path} executable={} {content:?}", mode == 0o100755));
            }
            _ => {}
        }
        git2::TreeWalkResult::Ok
    })
    .unwrap();
    fn walk(root: &Path, dir: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let relative = path.strip_prefix(root).unwrap().display().to_string();
            let meta = path.symlink_metadata().unwrap();
            if meta.is_dir() {
                found.push(format!("{relative}/"));
                walk(root, &path, found);
            } else if relative != MARKER {
                let content = std::fs::read_to_string(&path).unwrap();
                found.push(format!("{relative} executable={} {content:?}", meta.permissions().mode() & 0o111 != 0));
            }
        }
    }
    let mut found = Vec::new();
    walk(dir, dir, &mut found);
    wanted.sort();
    found.sort();
    assert_eq!(found, wanted, "the tree in {}", dir.display());
}

#[test]
fn the_example_source_is_valid() {
    let env = TestEnv::new();
    let repo = GitRepo::new();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    copy_dir(&examples, repo.path());
    repo.commit("examples");
    add_source(&env, "examples", &repo);
    let doc = sync_json(&env, &["examples"]);
    let actions: Vec<&str> = doc["actions"].as_array().unwrap().iter().map(|a| a["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["add", "chatty", "fail", "greet", "sleep"]);
    let greet = action_row(&env, "demo", "greet").unwrap();
    assert_eq!(greet["input_schema"]["required"], json!(["name"]));
    assert_eq!(greet["output_schema"]["required"], json!(["greeting"]));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// One way to break a manifest, and the words its error must contain.
struct Broken {
    name: &'static str,
    change: fn(&GitRepo),
    expect: &'static [&'static str],
}

fn set_manifest(repo: &GitRepo, edit: impl FnOnce(&mut Value)) {
    let mut manifest = fixture_manifest();
    edit(&mut manifest);
    repo.manifest(&manifest);
}

fn charge(manifest: &mut Value) -> &mut Value {
    &mut manifest["apps"]["billing"]["actions"]["charge"]
}

const BROKEN: &[Broken] = &[
    Broken {
        name: "an action defined twice",
        change: |repo| {
            let twice = r#"{"apps": {"tools": {"actions": {
                "ping": {"entrypoint": "tools/ping.mjs", "timeout": 5},
                "ping": {"entrypoint": "tools/ping.mjs"}}}}}"#;
            repo.file("windforce.json", twice);
        },
        expect: &["windforce.json", "key \"ping\" appears twice"],
    },
    Broken {
        name: "a byte order mark",
        change: |repo| {
            repo.file("windforce.json", &format!("\u{feff}{}", fixture_manifest()));
        },
        expect: &["windforce.json", "byte order mark"],
    },
    Broken {
        name: "a file name that is not UTF-8",
        change: |repo| {
            let name = std::ffi::OsStr::from_bytes(b"caf\xe9.txt");
            std::fs::write(repo.path().join("billing").join(name), "x").unwrap();
        },
        expect: &["not UTF-8", "caf"],
    },
    Broken {
        name: "bad app key",
        change: |repo| {
            set_manifest(repo, |m| {
                let app = m["apps"].as_object_mut().unwrap().remove("tools").unwrap();
                m["apps"]["Tools"] = app;
            })
        },
        expect: &["windforce.json", "apps.Tools", "app key must match"],
    },
    Broken {
        name: "bad action key",
        change: |repo| {
            set_manifest(repo, |m| {
                m["apps"]["tools"]["actions"]["-ping"] = json!({"entrypoint": "tools/ping.mjs"});
            })
        },
        expect: &["windforce.json", "apps.tools.actions.-ping", "action key must match"],
    },
    Broken {
        name: "entrypoint missing from the repository",
        change: |repo| set_manifest(repo, |m| charge(m)["entrypoint"] = json!("billing/nope.ts")),
        expect: &["windforce.json", "apps.billing.actions.charge.entrypoint", "does not exist"],
    },
    Broken {
        name: "entrypoint field missing",
        change: |repo| set_manifest(repo, |m| charge(m).as_object_mut().unwrap().clear()),
        expect: &["windforce.json", "apps.billing.actions.charge.entrypoint", "missing"],
    },
    Broken {
        name: "entrypoint with a NUL byte",
        change: |repo| set_manifest(repo, |m| charge(m)["entrypoint"] = json!("billing/charge\0.ts")),
        expect: &["windforce.json", "apps.billing.actions.charge.entrypoint", "NUL byte"],
    },
    Broken {
        name: "schema file with a NUL byte",
        change: |repo| set_manifest(repo, |m| charge(m)["input_schema"] = json!("billing/\0.json")),
        expect: &["windforce.json", "apps.billing.actions.charge.input_schema", "NUL byte"],
    },
    Broken {
        name: "entrypoint with a wrong extension",
        change: |repo| set_manifest(repo, |m| charge(m)["entrypoint"] = json!("billing/charge.input.json")),
        expect: &["windforce.json", "apps.billing.actions.charge.entrypoint", ".ts, .js or .mjs"],
    },
    Broken {
        name: "entrypoint through ..",
        change: |repo| set_manifest(repo, |m| charge(m)["entrypoint"] = json!("billing/../billing/charge.ts")),
        expect: &["windforce.json", "apps.billing.actions.charge.entrypoint", "`..`"],
    },
    Broken {
        name: "absolute entrypoint",
        change: |repo| set_manifest(repo, |m| charge(m)["entrypoint"] = json!("/etc/charge.ts")),
        expect: &["windforce.json", "apps.billing.actions.charge.entrypoint", "absolute"],
    },
    Broken {
        name: "entrypoint through a symlinked directory",
        change: |repo| set_manifest(repo, |m| charge(m)["entrypoint"] = json!("billing-link/charge.ts")),
        expect: &["windforce.json", "apps.billing.actions.charge.entrypoint", "symlink"],
    },
    Broken {
        name: "entrypoint is a symlink",
        change: |repo| {
            symlink("../billing/refund.js", &repo.path().join("tools/alias.js"));
            set_manifest(repo, |m| charge(m)["entrypoint"] = json!("tools/alias.js"))
        },
        expect: &["windforce.json", "apps.billing.actions.charge.entrypoint", "symlink"],
    },
    Broken {
        name: "schema file missing",
        change: |repo| set_manifest(repo, |m| charge(m)["input_schema"] = json!("billing/none.json")),
        expect: &["windforce.json", "apps.billing.actions.charge.input_schema", "billing/none.json", "does not exist"],
    },
    Broken {
        name: "schema file not JSON",
        change: |repo| {
            repo.file("billing/charge.input.json", "{ not json");
        },
        expect: &[
            "windforce.json",
            "apps.billing.actions.charge.input_schema",
            "billing/charge.input.json",
            "not valid JSON",
        ],
    },
    Broken {
        name: "schema not a valid JSON Schema",
        change: |repo| set_manifest(repo, |m| charge(m)["output_schema"] = json!({"type": 12})),
        expect: &["windforce.json", "apps.billing.actions.charge.output_schema", "not a valid JSON Schema"],
    },
    Broken {
        name: "schema neither an object nor a path",
        change: |repo| set_manifest(repo, |m| charge(m)["output_schema"] = json!(12)),
        expect: &["windforce.json", "apps.billing.actions.charge.output_schema", "JSON Schema object"],
    },
    Broken {
        name: "timeout 0",
        change: |repo| set_manifest(repo, |m| charge(m)["timeout"] = json!(0)),
        expect: &["windforce.json", "apps.billing.actions.charge.timeout", "positive integer"],
    },
    Broken {
        name: "negative timeout",
        change: |repo| set_manifest(repo, |m| charge(m)["timeout"] = json!(-5)),
        expect: &["windforce.json", "apps.billing.actions.charge.timeout", "positive integer"],
    },
    Broken {
        name: "non-integer timeout",
        change: |repo| set_manifest(repo, |m| charge(m)["timeout"] = json!(1.5)),
        expect: &["windforce.json", "apps.billing.actions.charge.timeout", "positive integer"],
    },
    Broken {
        name: "bad tag",
        change: |repo| set_manifest(repo, |m| m["apps"]["billing"]["tag"] = json!("Pay Ments")),
        expect: &["windforce.json", "apps.billing.tag", "must be a string matching"],
    },
    Broken {
        name: "unknown field",
        change: |repo| set_manifest(repo, |m| charge(m)["retry"] = json!(3)),
        expect: &["windforce.json", "apps.billing.actions.charge", "unknown field `retry`"],
    },
    Broken {
        name: "unknown top-level field",
        change: |repo| set_manifest(repo, |m| m["version"] = json!(2)),
        expect: &["windforce.json", "unknown field `version`"],
    },
    Broken {
        name: "windforce.json missing",
        change: |repo| {
            repo.remove("windforce.json");
        },
        expect: &["windforce.json", "does not exist"],
    },
    Broken {
        name: "windforce.json not JSON",
        change: |repo| {
            repo.file("windforce.json", "{\"apps\": ");
        },
        expect: &["windforce.json", "not valid JSON"],
    },
    Broken {
        name: "apps not an object",
        change: |repo| {
            repo.manifest(&json!({"apps": []}));
        },
        expect: &["windforce.json", "apps", "must be an object"],
    },
    Broken {
        name: "the marker's name in the repository",
        change: |repo| {
            repo.file(MARKER, "{}");
        },
        expect: &[MARKER, "reserved"],
    },
    Broken {
        name: "a schema file of gigabytes (here past the 16 MiB a file may be)",
        change: |repo| {
            let padding = " ".repeat(17 << 20);
            repo.file("billing/charge.input.json", &format!("{{\"type\": \"object\"}}{padding}"));
        },
        expect: &["billing/charge.input.json", "more than the 16 MiB"],
    },
    Broken {
        name: "app owned by another source",
        change: |repo| set_manifest(repo, |m| m["apps"]["shared"] = json!({"actions": {}})),
        expect: &["the windforce.json of commit", "cannot be synced", "apps.shared", "belongs to source other"],
    },
];

#[test]
fn invalid_manifests_are_refused_and_change_nothing() {
    let env = TestEnv::new();
    let other = GitRepo::new();
    other.manifest(&json!({"apps": {"shared": {"actions": {"x": {"entrypoint": "x.ts"}}}}})).file("x.ts", "");
    other.commit("other");
    add_source(&env, "other", &other);
    sync_json(&env, &["other"]);

    let repo = fixture_repo();
    add_source(&env, "acme", &repo);
    sync_json(&env, &["acme"]);

    for broken in BROKEN {
        clear_work_tree(&repo);
        write_fixture(&repo);
        (broken.change)(&repo);
        repo.commit(broken.name);
        let catalog = catalog_snapshot(&env);
        let store = listing(&env.store());

        let run = env.wf(["sync", "acme"]).run();
        assert_eq!(run.code, 1, "{}: {run:?}", broken.name);
        for word in broken.expect {
            assert!(run.stderr.contains(word), "{}: the error lacks {word:?}: {}", broken.name, run.stderr);
        }
        assert_eq!(catalog_snapshot(&env), catalog, "{}: the catalog changed", broken.name);
        assert_eq!(listing(&env.store()), store, "{}: the store changed", broken.name);
    }
}

/// An app's `warm`, as its other settings, is its actions' unless one says otherwise.
#[test]
fn an_apps_warm_is_inherited_by_its_actions() {
    let env = TestEnv::new();
    let repo = GitRepo::new();
    let actions = json!({"inherits": {"entrypoint": "a.ts"}, "own": {"entrypoint": "a.ts", "warm": false}});
    repo.manifest(&json!({"apps": {"w": {"warm": true, "actions": actions}}}));
    repo.file("a.ts", "export function main() {}\n").commit("a warm app");
    add_source(&env, "s", &repo);
    sync_json(&env, &["s"]);
    let warm: Vec<(String, bool)> = env
        .db()
        .query("SELECT action_key, warm FROM action ORDER BY action_key", &[])
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(warm, [("inherits".to_string(), true), ("own".to_string(), false)]);
}

/// The manifest's schema counts `30.0` as an integer (JSON Schema's integers are the numbers without
/// a fraction), and so does the sync: it failed on the first such value with "1 problem:
/// windforce.json: invalid type: floating point 30.0, expected i32", naming no key and not the others.
#[test]
fn whole_numbers_written_with_a_fraction_are_read_as_the_integers_they_are() {
    let env = TestEnv::new();
    let repo = GitRepo::new();
    let action = json!({"entrypoint": "a.ts", "timeout": 30.0, "memory_mb": 512.0, "retries": {"max": 3.0}});
    repo.manifest(&json!({"apps": {"w": {"max_processes": 64.0, "actions": {"a": action}}}}));
    repo.file("a.ts", "export function main() {}\n").commit("whole numbers as floats");
    assert!(std::fs::read_to_string(repo.path().join("windforce.json")).unwrap().contains("30.0"));
    add_source(&env, "s", &repo);
    sync_json(&env, &["s"]);
    let row = action_row(&env, "w", "a").expect("the action is in the catalog");
    let settings = ["timeout_s", "memory_mb", "max_processes", "retry_max"].map(|column| &row[column]);
    assert_eq!(settings, [&json!(30), &json!(512), &json!(64), &json!(3)], "{row}");

    // One with a fraction is still refused by the schema, with its key, and so is every other.
    let action = json!({"entrypoint": "a.ts", "timeout": 30.5, "memory_mb": 512.25});
    repo.manifest(&json!({"apps": {"w": {"actions": {"a": action}}}})).commit("fractions");
    let run = env.wf(["sync", "s"]).run();
    assert_eq!(run.code, 1, "{run:?}");
    for expected in ["apps.w.actions.a.timeout: must be a positive integer", "apps.w.actions.a.memory_mb", "2 problems"]
    {
        assert!(run.stderr.contains(expected), "missing {expected:?} in {}", run.stderr);
    }
}

#[test]
fn a_manifest_with_several_problems_reports_all_of_them() {
    let env = TestEnv::new();
    let repo = GitRepo::new();
    repo.manifest(&json!({
        "apps": {
            "Bad": {"actions": {}},
            "ok": {
                "colour": "blue",
                "actions": {
                    "a": {"entrypoint": "../a.ts", "timeout": 0},
                    "b": {"entrypoint": "b.py", "input_schema": "missing.json", "output_schema": {"type": 12}}
                }
            }
        }
    }));
    repo.commit("many problems");
    add_source(&env, "acme", &repo);
    let run = env.wf(["sync", "acme"]).run();
    assert_eq!(run.code, 1, "{run:?}");
    for expected in [
        "apps.Bad: app key must match",
        "apps.ok: unknown field `colour`",
        "apps.ok.actions.a.entrypoint: \"../a.ts\" contains `..`",
        "apps.ok.actions.a.timeout: must be a positive integer",
        "apps.ok.actions.b.entrypoint: \"b.py\" must end in .ts, .js or .mjs",
        "apps.ok.actions.b.input_schema: schema file \"missing.json\" does not exist",
        "apps.ok.actions.b.output_schema: not a valid JSON Schema",
        "7 problems",
    ] {
        assert!(run.stderr.contains(expected), "missing {expected:?} in {}", run.stderr);
    }
    assert_eq!(source_commit(&env, "acme"), None);
    assert!(!env.store().exists(), "nothing was written to the store");
}

/// PostgreSQL stores no U+0000 in a JSON value: a schema holding one was stored with its tree, then
/// failed the sync on the catalog with "unsupported Unicode escape sequence", naming no file or key.
/// The manifest's check refuses it, as its other problems, before anything is stored.
#[test]
fn a_schema_holding_u0000_is_a_manifest_problem_and_changes_nothing() {
    let env = TestEnv::new();
    let repo = fixture_repo();
    add_source(&env, "acme", &repo);
    let synced = sync_json(&env, &["acme"])["commit_sha"].as_str().unwrap().to_string();
    let catalog = catalog_snapshot(&env);
    let store = listing(&env.store());

    set_manifest(&repo, |m| {
        charge(m)["output_schema"]["properties"] = json!({"receipt": {"description": "a\u{0}b"}});
        m["apps"]["tools"]["actions"]["ping"]["input_schema"] = json!("tools/ping.input.json");
    });
    repo.file("tools/ping.input.json", r#"{"type": "object", "title": "ping\u0000"}"#);
    let commit = repo.commit("U+0000 in two schemas");
    let run = env.wf(["sync", "acme"]).run();
    assert_eq!(run.code, 1, "{run:?}");
    for expected in [
        "windforce.json: apps.billing.actions.charge.output_schema.properties.receipt.description: holds the \
         character U+0000",
        "windforce.json: apps.tools.actions.ping.input_schema: tools/ping.input.json: holds the character U+0000",
        "2 problems",
    ] {
        assert!(run.stderr.contains(expected), "missing {expected:?} in {}", run.stderr);
    }
    assert_eq!(source_commit(&env, "acme").as_deref(), Some(synced.as_str()), "the action stays at its commit");
    assert_eq!(catalog_snapshot(&env), catalog, "the catalog changed");
    assert_eq!(listing(&env.store()), store, "the store changed");
    let stored: i64 = env.scalar_of("SELECT count(*) FROM source_commit WHERE commit_sha = $1", &[&commit]);
    assert_eq!(stored, 0, "the commit is not stored in the database");
}

#[test]
fn source_add_list_rm_and_actions_print_their_documents() {
    let env = TestEnv::new();
    let repo = fixture_repo();

    let added = env.wf(["source", "add", "acme", &repo.url(), "--branch", "main", "--json"]).ok().json();
    let id = added["id"].as_str().unwrap();
    assert!(uuid::Uuid::parse_str(id).is_ok(), "{added}");
    assert_eq!(added, json!({"id": id, "name": "acme", "url": repo.url(), "branch": "main"}));

    let duplicate = env.wf(["source", "add", "acme", &repo.url()]).run();
    assert_eq!(duplicate.code, 1, "{duplicate:?}");
    assert!(duplicate.stderr.contains("already exists"), "{duplicate:?}");

    // A relative local path is stored absolute.
    let parent = repo.path().parent().unwrap();
    let relative = repo.path().file_name().unwrap().to_str().unwrap();
    let wf = env.wf(["source", "add", "rel", relative, "--json"]).current_dir(parent);
    assert_eq!(wf.ok().json()["url"], repo.path().canonicalize().unwrap().to_str().unwrap());
    // A folder that is no repository, or a folder inside one, is refused when added, not at sync.
    let plain = tempfile::tempdir().unwrap();
    let inside = repo.path().join("billing");
    for folder in [plain.path(), inside.as_path()] {
        let refused = env.wf(["source", "add", "notgit", folder.to_str().unwrap()]).run();
        assert_eq!(refused.code, 1, "{refused:?}");
        assert!(refused.stderr.contains("is not a git repository"), "{refused:?}");
    }
    // So is a URL that names no repository of this machine, no host, or a scheme git does not
    // fetch over; a file:// URL of a repository is taken as given.
    let nowhere = format!("file://{}/nowhere", plain.path().display());
    for (url, said) in [
        (nowhere.as_str(), "is not a git repository"),
        ("file://srv/repo", "names an absolute path"),
        ("https://", "names no host"),
        ("ssh://git@:22/repo.git", "names no host"),
        ("ftp://example.com/repo.git", "does not fetch over ftp://"),
    ] {
        let refused = env.wf(["source", "add", "bad", url]).run();
        assert_eq!(refused.code, 1, "{url}: {refused:?}");
        assert!(refused.stderr.contains(said), "{url}: {refused:?}");
    }
    let file_url = format!("file://{}", repo.path().display());
    assert_eq!(env.wf(["source", "add", "byfile", &file_url, "--json"]).ok().json()["url"], file_url);
    env.wf(["source", "rm", "byfile", "--yes"]).ok();

    let sha = sync_json(&env, &["acme"])["commit_sha"].as_str().unwrap().to_string();
    // A remote that cannot be fetched fails the sync, naming the URL, and changes nothing.
    let url = "https://unreachable.invalid/acme.git";
    assert_eq!(env.wf(["source", "add", "web", url, "--json"]).ok().json()["url"], url);
    let before = catalog_snapshot(&env);
    let run = env.wf(["sync", "web"]).run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains(url), "{run:?}");
    assert_eq!(catalog_snapshot(&env), before);
    env.wf(["source", "rm", "web", "--yes"]).ok();

    let list = env.wf(["source", "list", "--json"]).ok().json();
    let acme = &list.as_array().unwrap()[0];
    assert_eq!(acme["name"], "acme");
    assert_eq!(acme["url"], repo.url());
    assert_eq!(acme["branch"], "main");
    assert_eq!(acme["commit_sha"], sha.as_str());
    assert!(acme["synced_at"].as_str().unwrap().ends_with('Z'), "{acme}");
    assert_eq!(list[1]["name"], "rel");
    assert_eq!(list[1]["commit_sha"], Value::Null);
    assert_eq!(list[1]["synced_at"], Value::Null);

    let actions = env.wf(["actions", "--json"]).ok().json();
    assert_eq!(
        actions[0],
        json!({
            "app": "billing", "action": "charge", "tag": "payments-eu", "timeout": 30,
            "commit_sha": sha, "source": "acme", "entrypoint": "billing/charge.ts",
        })
    );
    assert_eq!(actions.as_array().unwrap().len(), 3);
    assert_eq!(env.wf(["actions", "--source", "rel", "--json"]).ok().json(), json!([]));
    assert_eq!(env.wf(["actions", "--source", "nope"]).run().code, 1);
    let table = env.wf(["actions"]).ok();
    assert!(table.stdout.contains("charge") && table.stdout.contains(&sha[..12]), "{table:?}");

    let refused = env.wf(["source", "rm", "acme"]).run();
    assert_eq!(refused.code, 3, "no terminal and no --yes: refused; {refused:?}");
    assert_eq!(source_commit(&env, "acme"), Some(sha.clone()));

    let removed = env.wf(["source", "rm", "acme", "--yes", "--json"]).ok().json();
    assert_eq!(removed["name"], "acme");
    assert_eq!(removed["actions"], 3);
    let left: i64 = env.scalar("SELECT (SELECT count(*) FROM action) + (SELECT count(*) FROM app)");
    assert_eq!(left, 0, "the source's catalog rows are gone");
    assert_eq!(env.wf(["source", "list", "--json"]).ok().json().as_array().unwrap().len(), 1);
    assert!(!env.home().join("git").join(format!("{id}.git")).exists(), "the mirror is removed");
    assert!(env.store().join(id).join(&sha).join(MARKER).is_file(), "the store keeps trees queued jobs may run");
    assert_eq!(env.wf(["sync", "acme"]).run().code, 1);
}

/// A repository with one action and `shared.txt`, added and synced as source `name`.
fn source_with_shared_file(env: &TestEnv, name: &str, extra: &[(&str, &str)]) -> GitRepo {
    let repo = GitRepo::new();
    repo.manifest(&json!({"apps": {name: {"actions": {"a": {"entrypoint": "a.ts"}}}}}));
    repo.file("a.ts", "export function main() { return 1; }\n").file("shared.txt", "hello\n");
    for (path, content) in extra {
        repo.file(path, content);
    }
    repo.commit("a source");
    env.wf(["source", "add", name, &repo.url()]).ok();
    repo
}

/// Every file named `shared.txt` in the store, and the store's copy of its contents: all "hello".
fn assert_shared_files_intact(env: &TestEnv) {
    let mut seen = 0;
    let mut stack = vec![env.store()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|name| name == "shared.txt") {
                assert_eq!(std::fs::read_to_string(&path).unwrap(), "hello\n", "{} was written over", path.display());
                seen += 1;
            }
        }
    }
    assert!(seen > 0, "a synced shared.txt");
}

/// The store links equal contents of every tree to one copy: a sync that wrote through a link (a
/// file at the marker's temporary name, a name given twice in a tree) changed another source's
/// files. Such trees are refused, and what is in the store stays as it was.
#[test]
fn a_tree_that_would_write_through_a_shared_file_is_refused_and_other_trees_stay_intact() {
    let env = TestEnv::new();
    let _one = source_with_shared_file(&env, "one", &[]);
    env.wf(["sync", "one"]).ok();

    let _two = source_with_shared_file(&env, "two", &[(".windforce_clone_complete.tmp", "hello\n")]);
    let refused = env.wf(["sync", "two"]).run();
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(refused.stderr.contains("reserved for the store's completion marker"), "{}", refused.stderr);
    assert_shared_files_intact(&env);

    // A name twice in one tree (`git mktree` writes it; `git fsck` calls it duplicateEntries).
    let three = source_with_shared_file(&env, "three", &[]);
    let git = |args: &[&str], input: Option<&str>| git_in(three.path(), args, input);
    let listing = git(&["ls-tree", "HEAD"], None);
    let other = git(&["hash-object", "-w", "--stdin"], Some("AAAA\n"));
    let hello = git(&["rev-parse", "HEAD:shared.txt"], None);
    let mut entries: Vec<String> =
        listing.lines().filter(|line| !line.ends_with("\tshared.txt")).map(String::from).collect();
    entries.push(format!("100644 blob {other}\tdup.txt"));
    entries.push(format!("100644 blob {hello}\tdup.txt"));
    let tree = git(&["mktree"], Some(&(entries.join("\n") + "\n")));
    let commit = git(&["commit-tree", &tree, "-p", "HEAD", "-m", "a name twice"], None);
    git(&["update-ref", "refs/heads/main", &commit], None);
    let refused = env.wf(["sync", "three"]).run();
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(refused.stderr.contains("twice"), "{}", refused.stderr);
    assert_shared_files_intact(&env);
    let catalog: i64 = env.scalar("SELECT count(*) FROM action WHERE app_key IN ('two', 'three')");
    assert_eq!(catalog, 0, "nothing of the refused trees is in the catalog");
}

/// The bytes of the files below `root` (none when it does not exist).
fn bytes_below(root: &Path) -> u64 {
    let mut total = 0;
    let mut stack: Vec<PathBuf> = root.exists().then(|| root.to_path_buf()).into_iter().collect();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let meta = entry.path().symlink_metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    total
}

/// A commit's tree may hold 1 GiB: a larger one is refused before any of it is written into the
/// host's store (the database's check of its size comes first), and nothing else changes.
#[test]
fn a_tree_over_the_size_limit_is_refused_before_any_of_it_is_written() {
    let env = TestEnv::new();
    let repo = GitRepo::new();
    repo.manifest(&json!({"apps": {"big": {"actions": {"a": {"entrypoint": "a.ts"}}}}}))
        .file("a.ts", "export function main() { return 1; }\n");
    // A GiB and a MiB of zeros: git compresses it to a MiB.
    let big = repo.path().join("big.bin");
    std::fs::File::create(&big).unwrap().set_len((1 << 30) + (1 << 20)).unwrap();
    repo.commit("too large");
    env.wf(["source", "add", "big", &repo.url()]).ok();

    let refused = env.wf(["sync", "big"]).run();
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(refused.stderr.contains("1025 MiB of files, more than the 1024 MiB"), "{}", refused.stderr);
    let written = bytes_below(&env.store());
    assert!(written < 1 << 20, "{written} bytes written into the store for a refused tree");
    assert_eq!(source_commit(&env, "big"), None);
    let stored: i64 = env.scalar("SELECT (SELECT count(*) FROM source_commit) + (SELECT count(*) FROM source_blob)");
    assert_eq!(stored, 0, "nothing of the refused tree is in the database");
}

/// The pids whose command line holds `needle` and whose parent is `parent`.
fn children_running(parent: u32, needle: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // The parent is the second field after the command's name in parentheses.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(parent) && String::from_utf8_lossy(&cmdline).contains(needle) {
            found.push(pid);
        }
    }
    found
}

/// Source `silent`: an http remote that accepts connections and never answers them.
fn add_silent_source(env: &TestEnv) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for connection in listener.incoming() {
            held.push(connection);
        }
    });
    env.wf(["source", "add", "silent", &format!("http://127.0.0.1:{port}/never.git")]).ok();
}

/// A remote that accepts and never answers: the fetch fails once a minute passed without a byte
/// (it held the sync, and the source's lock, for ever), and a sync killed meanwhile takes its
/// `git fetch` with it (one left behind went on writing into the mirror beside the next sync).
#[test]
fn a_remote_that_never_answers_fails_the_sync_and_a_killed_sync_leaves_no_git_behind() {
    let env = TestEnv::new();
    add_silent_source(&env);

    let mut killed = env.wf(["sync", "silent"]).spawn(&env.dir.path().join("killed.log"));
    let fetch = wait_for(Duration::from_secs(30), "the sync's git fetch", || {
        let found = children_running(killed.id(), "fetch");
        (!found.is_empty()).then_some(found)
    });
    killed.kill().unwrap();
    killed.wait().unwrap();
    wait_for(Duration::from_secs(10), "the killed sync's git fetch to end", || {
        fetch.iter().all(|pid| !Path::new(&format!("/proc/{pid}")).exists()).then_some(())
    });

    let stalled = env.wf(["sync", "silent"]).run().expect_code(1);
    assert!(stalled.stderr.contains("too slow"), "{stalled:?}");
    assert_eq!(source_commit(&env, "silent"), None);
}

/// Without git on PATH, libgit2 fetches: a remote that never answers fails its fetch too, after the
/// operator's GIT_HTTP_LOW_SPEED_TIME here (60 s by default), where it held the sync for ever.
#[test]
fn a_remote_that_never_answers_fails_a_sync_without_git_too() {
    let env = TestEnv::new();
    add_silent_source(&env);
    let mut sync = env.wf(["sync", "silent"]).env("PATH", "/nowhere").env("GIT_HTTP_LOW_SPEED_TIME", "2").start();
    let ended = wait_for(Duration::from_secs(60), "the sync to give up", || sync.try_wait().unwrap());
    let stalled = sync.finish();
    assert_eq!(ended.code(), Some(1), "{stalled:?}");
    assert!(stalled.stderr.contains("timed out"), "{stalled:?}");
    assert_eq!(source_commit(&env, "silent"), None);
}

/// A password or token in a source's URL is given to git, and never printed by wf: not by add,
/// list (its table and JSON), a sync's error, nor rm's question.
#[test]
fn a_secret_in_a_source_url_is_never_printed() {
    let env = TestEnv::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("https://deploy:s3cr3tTOKEN@127.0.0.1:{port}/x.git");
    let runs = [
        env.wf(["source", "add", "private", &url]).ok(),
        env.wf(["source", "add", "again", &url, "--json"]).ok(),
        env.wf(["source", "list"]).ok(),
        env.wf(["source", "list", "--json"]).ok(),
        env.wf(["sync", "private"]).run().expect_code(1),
        env.wf(["source", "add", "private", &url]).run().expect_code(1),
        env.wf(["source", "rm", "private"]).run().expect_code(3),
    ];
    for run in &runs {
        assert!(!format!("{}{}", run.stdout, run.stderr).contains("s3cr3t"), "{run:?}");
    }
    let listed = runs[3].json();
    assert_eq!(listed[0]["url"], format!("https://deploy:***@127.0.0.1:{port}/x.git"), "{listed}");
    for said in [&runs[0], &runs[4], &runs[5], &runs[6]] {
        assert!(said.stderr.contains(&format!("deploy:***@127.0.0.1:{port}")), "{said:?}");
    }
    // git is given the URL as stored.
    let stored: String = env.scalar("SELECT url FROM git_source WHERE name = 'private'");
    assert_eq!(stored, url);
}

/// A host whose mirror lacks the catalog's commit (synced by another host, or a mirror made
/// again) fetches it by its id to tell whether a commit is older: it refuses the commit as the
/// host that synced the catalog's does (it moved the catalog back). With the catalog's commit
/// gone from the remote too, it cannot tell: it says so, and follows the remote.
#[test]
fn a_host_without_the_catalogs_commit_fetches_it_to_refuse_an_older_one() {
    let env = TestEnv::new();
    let repo = fixture_repo();
    let older = git_in(repo.path(), &["rev-parse", "HEAD"], None);
    git_in(repo.path(), &["branch", "release"], None);
    repo.file("billing/new.ts", "export function main() { return {}; }\n");
    let newer = repo.commit("newer");
    let id = env.wf(["source", "add", "s", &repo.url(), "--branch", "release", "--json"]).ok().json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(sync_json(&env, &["s", "--ref", "main"])["commit_sha"], newer.as_str());
    let mirror = env.home().join("git").join(format!("{id}.git"));

    // A mirror without the catalog's commit: the source's branch alone is fetched.
    std::fs::remove_dir_all(&mirror).unwrap();
    let refused = env.wf(["sync", "s"]).run().expect_code(1);
    assert!(refused.stderr.contains("the catalog never moves back"), "{refused:?}");
    assert_eq!(source_commit(&env, "s"), Some(newer.clone()));

    // Gone from the remote as well: it cannot be told, and is said.
    git_in(repo.path(), &["checkout", "-q", "release"], None);
    git_in(repo.path(), &["branch", "-q", "-D", "main"], None);
    git_in(repo.path(), &["reflog", "expire", "--expire=now", "--all"], None);
    git_in(repo.path(), &["gc", "-q", "--prune=now"], None);
    std::fs::remove_dir_all(&mirror).unwrap();
    let followed = env.wf(["sync", "s"]).ok();
    assert!(followed.stderr.contains("whether") && followed.stderr.contains("cannot be told"), "{followed:?}");
    assert_eq!(source_commit(&env, "s"), Some(older));
}
