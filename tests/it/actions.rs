//! Writing actions: what an author sees when an action does not build or throws (bun's messages
//! with their places, the action's frames only, the error in the logs too).

use serde_json::{Value, json};

use crate::support::harness::{GitRepo, TestEnv};

/// A source with an action that does not build (two errors) and one that throws, synced.
fn broken_actions(env: &TestEnv) {
    let repo = GitRepo::new();
    repo.manifest(&json!({"apps": {"a": {"actions": {
        "broken": {"entrypoint": "a/broken.ts"},
        "throws": {"entrypoint": "a/throws.ts"},
    }}}}));
    repo.file(
        "a/broken.ts",
        "export function main() {\n  const a = 1;\n  const a = 2;\n  let b = 1;\n  let b = 2;\n}\n",
    );
    repo.file(
        "a/throws.ts",
        "function inner() {\n  throw new RangeError(\"too far\");\n}\nexport async function main() {\n  await null;\n  inner();\n}\n",
    );
    repo.commit("actions");
    env.wf(["source", "add", "s", &repo.url()]).ok();
    env.wf(["sync", "s"]).ok();
}

fn run_job(env: &TestEnv, target: &str) -> (String, Value) {
    let id = env.wf(["enqueue", target]).ok().stdout.trim().to_string();
    env.wf(["work", "--drain"]).ok();
    let error = env.wf(["result", &id, "--json"]).run().expect_code(4).json()["error"].clone();
    (id, error)
}

#[test]
fn an_action_that_does_not_build_fails_with_buns_messages_in_its_error_and_logs() {
    let env = TestEnv::new();
    broken_actions(&env);
    let (id, error) = run_job(&env, "a/broken");
    let message = error["message"].as_str().unwrap();
    let stack = error["stack"].as_str().unwrap();
    assert!(message.starts_with("2 errors building"), "{error}");
    for (place, text, source) in [
        ("a/broken.ts:3:9", "\"a\" has already been declared", "const a = 2;"),
        ("a/broken.ts:5:7", "\"b\" has already been declared", "let b = 2;"),
    ] {
        assert!(message.contains(&format!("{place}: {text}")), "{place} in the message: {error}");
        assert!(stack.contains(&format!("{place}: error: {text}")), "{place} in the stack: {error}");
        assert!(stack.contains(source), "the source line {source:?} in the stack: {error}");
    }
    let caret = stack.lines().find(|line| line.trim() == "^").expect("a caret line");
    let line = stack.lines().find(|line| line.contains("const a = 2;")).unwrap();
    assert_eq!(line.find("a = 2").unwrap(), caret.find('^').unwrap(), "the caret is under the column: {stack}");

    let logs = env.wf(["logs", &id]).ok().stdout;
    assert!(logs.contains("[wf] failed: AggregateError: 2 errors building"), "{logs}");
    assert!(logs.contains("a/broken.ts:5:7: error: \"b\" has already been declared"), "{logs}");
    assert!(!logs.contains("[wf] [wf]"), "{logs}");
    let json = env.wf(["logs", &id, "--json"]).ok().json();
    assert!(json.as_array().unwrap().iter().all(|line| line["stream"] == "wf" && line["attempt"] == 1), "{json}");
}

#[test]
fn a_thrown_error_keeps_the_actions_frames_and_not_the_wrappers() {
    let env = TestEnv::new();
    broken_actions(&env);
    let (id, error) = run_job(&env, "a/throws");
    assert_eq!((error["name"].as_str(), error["message"].as_str()), (Some("RangeError"), Some("too far")), "{error}");
    let stack = error["stack"].as_str().unwrap();
    assert!(stack.contains("at inner (") && stack.contains("a/throws.ts:2:"), "{stack}");
    assert!(stack.contains("a/throws.ts:6:"), "main's frame: {stack}");
    assert!(!stack.contains("wrapper"), "no frame of wf's wrapper: {stack}");
    let logs = env.wf(["logs", &id]).ok().stdout;
    let expected = format!("[wf] failed: RangeError: too far\n[wf] {}\n", stack.lines().nth(1).unwrap());
    assert!(logs.contains(&expected), "the error once, then the stack without its first line: {logs}");
}
