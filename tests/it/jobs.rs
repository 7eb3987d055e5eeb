//! The single enqueue path, inspection, results and exit codes, pinning, order, tokens.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::fixtures::{enqueue, path, synced};
use crate::support::harness::{TestEnv, wait_for};

fn drain(env: &TestEnv) {
    env.wf(["work", "--drain", "--concurrency", "2"]).ok();
}

fn job_count(env: &TestEnv) -> i64 {
    env.scalar("SELECT count(*) FROM job")
}

#[test]
fn enqueue_pins_the_catalog_and_reports_the_job() {
    let env = TestEnv::new();
    synced(&env);
    let run = env.wf(["enqueue", "t/echo", "--input", r#"{"a":1}"#, "--priority", "7", "--json"]).ok();
    let job = run.json();
    assert_eq!(job["app"], "t");
    assert_eq!(job["action"], "echo");
    assert_eq!(job["tag"], "default");
    assert_eq!(job["priority"], 7);
    assert_eq!(job["trigger_kind"], "manual");
    let catalog_commit: String =
        env.scalar("SELECT commit_sha FROM action WHERE app_key = 't' AND action_key = 'echo'");
    assert_eq!(job["commit_sha"], catalog_commit.as_str());
    let pinned = env
        .db()
        .query_one("SELECT entrypoint, timeout_s, tag, input FROM job WHERE id = $1", &[&uuid(&job["id"])])
        .unwrap();
    assert_eq!(pinned.get::<_, String>(0), "t/echo.ts");
    assert_eq!(pinned.get::<_, i32>(1), 30);
    assert_eq!(pinned.get::<_, String>(2), "default");
    assert_eq!(pinned.get::<_, Value>(3), json!({"a": 1}));
    // Its queue row keeps the job's creation time (`wf jobs --status queued` sorts by it).
    let kept: bool = env
        .db()
        .query_one(
            "SELECT q.created_at = j.created_at FROM job_queue q JOIN job j ON j.id = q.job_id WHERE j.id = $1",
            &[&uuid(&job["id"])],
        )
        .unwrap()
        .get(0);
    assert!(kept);
    // The app tag is the effective tag when the action has none; --tag overrides both.
    let other = env.wf(["enqueue", "other/echo", "--json"]).ok().json();
    assert_eq!(other["tag"], "other");
    let overridden = env.wf(["enqueue", "t/echo", "--tag", "gpu", "--trigger-kind", "api", "--json"]).ok().json();
    assert_eq!(overridden["tag"], "gpu");
    assert_eq!(overridden["trigger_kind"], "api");
}

fn uuid(value: &Value) -> uuid::Uuid {
    uuid::Uuid::parse_str(value.as_str().unwrap()).unwrap()
}

#[test]
fn input_comes_from_json_a_file_or_stdin() {
    let env = TestEnv::new();
    synced(&env);
    let file = path(&env, "input.json");
    std::fs::write(&file, r#"{"from":"file"}"#).unwrap();
    let from_file = enqueue_raw(&env, &["--input", &format!("@{}", file.display())]);
    let from_stdin = env.wf(["enqueue", "t/echo", "--input", "-"]).stdin_bytes(br#"{"from":"stdin"}"#);
    assert_eq!(from_stdin.code, 0, "{from_stdin:?}");
    let inputs: Vec<Value> = env.column("SELECT input FROM job ORDER BY created_at, input->>'from'");
    assert!(inputs.contains(&json!({"from": "file"})), "{inputs:?} ({from_file})");
    assert!(inputs.contains(&json!({"from": "stdin"})), "{inputs:?}");
}

/// `--input @-` read a file named `-`: it reads stdin, as `--input -` does. With `--batch -`, which
/// wants stdin too, it is a usage error (the two options do not go together).
#[test]
fn input_at_dash_reads_stdin() {
    let env = TestEnv::new();
    synced(&env);
    let piped = env.wf(["enqueue", "t/echo", "--input", "@-"]).stdin_bytes(br#"{"from":"stdin"}"#);
    assert_eq!(piped.code, 0, "{piped:?}");
    let inputs: Vec<Value> = env.column("SELECT input FROM job");
    assert_eq!(inputs, [json!({"from": "stdin"})]);
    let both = env.wf(["enqueue", "t/echo", "--input", "@-", "--batch", "-"]).stdin_bytes(b"{}\n");
    assert_eq!(both.code, 2, "{both:?}");
    assert!(both.stderr.contains("cannot be used with"), "{}", both.stderr);
    assert_eq!(job_count(&env), 1);
}

/// A file or stream starting with a UTF-8 byte-order mark (as some Windows editors save text) was
/// refused as not valid JSON: the mark is skipped, at the very start only.
#[test]
fn a_byte_order_mark_at_the_start_of_an_input_or_batch_is_skipped() {
    let env = TestEnv::new();
    synced(&env);
    let input = path(&env, "bom.json");
    std::fs::write(&input, b"\xef\xbb\xbf{\"from\": \"file\"}").unwrap();
    enqueue_raw(&env, &["--input", &format!("@{}", input.display())]);
    let stdin = env.wf(["enqueue", "t/echo", "--input", "-"]).stdin_bytes(b"\xef\xbb\xbf{\"from\": \"stdin\"}");
    assert_eq!(stdin.code, 0, "{stdin:?}");
    let batch = path(&env, "bom.jsonl");
    std::fs::write(&batch, b"\xef\xbb\xbf{\"from\": \"batch\"}\n{\"from\": \"batch\"}\n").unwrap();
    env.wf(["enqueue", "t/echo", "--batch", batch.to_str().unwrap()]).ok();
    let piped = env.wf(["enqueue", "t/echo", "--batch", "-"]).stdin_bytes(b"\xef\xbb\xbf{\"from\": \"piped\"}\n");
    assert_eq!(piped.code, 0, "{piped:?}");
    let inputs: Vec<String> = env.column("SELECT input->>'from' FROM job ORDER BY 1");
    assert_eq!(inputs, ["batch", "batch", "file", "piped", "stdin"]);
    // Anywhere else it is not JSON: on a later line of a batch, or in the text of --input.
    std::fs::write(&batch, b"{\"n\": 1}\n\xef\xbb\xbf{\"n\": 2}\n").unwrap();
    let later = env.wf(["enqueue", "t/echo", "--batch", batch.to_str().unwrap()]).run();
    assert!(later.code == 1 && later.stderr.contains("line 2: not valid JSON"), "{later:?}");
    let argument = env.wf(["enqueue", "t/echo", "--input", "\u{feff}{}"]).run();
    assert!(argument.code == 1 && argument.stderr.contains("not valid JSON"), "{argument:?}");
    assert_eq!(job_count(&env), 5);
}

fn enqueue_raw(env: &TestEnv, args: &[&str]) -> String {
    let mut all = vec!["enqueue", "t/echo"];
    all.extend_from_slice(args);
    env.wf(all).ok().stdout.trim().to_string()
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let env = TestEnv::new();
    synced(&env);
    let batch = path(&env, "batch.jsonl");
    std::fs::write(&batch, "{\"n\": 1}\n{\"n\": 2}\n{\"n\": -5}\n").unwrap();
    let not_json = path(&env, "notjson.jsonl");
    std::fs::write(&not_json, "{\"n\": 1}\n{oops\n").unwrap();
    let not_utf8 = path(&env, "notutf8.jsonl");
    std::fs::write(&not_utf8, b"{\"n\": 1}\n{\"n\": \"\xff\"}\n").unwrap();
    let huge_tag = "x".repeat(8192);
    let huge_n = format!(r#"{{"n": "{}"}}"#, "x".repeat(100_000));
    let too_deep = format!("{}{}", "[".repeat(128), "]".repeat(128));
    let deep_batch = path(&env, "deep.jsonl");
    std::fs::write(&deep_batch, format!("{{\"n\": {too_deep}}}\n")).unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["enqueue", "t/nope"], "unknown action t/nope"),
        (vec!["enqueue", "nope"], "not APP/ACTION"),
        (vec!["enqueue", "t/typed", "--input", "{not json"], "not valid JSON"),
        (vec!["enqueue", "t/echo", "--input", &too_deep], "nested more than 127 levels deep"),
        (vec!["enqueue", "t/echo", "--batch", deep_batch.to_str().unwrap()], "line 1: nested more than 127 levels"),
        (vec!["enqueue", "t/typed", "--input", r#"{"n": "three"}"#], "/n"),
        (vec!["enqueue", "t/typed", "--input", r#"{}"#], "input does not match"),
        // The schema's words quote the value refused: they are cut.
        (vec!["enqueue", "t/typed", "--input", &huge_n], "input at /n: \"xxx"),
        (vec!["enqueue", "t/typed", "--batch", batch.to_str().unwrap()], "line 3"),
        (vec!["enqueue", "t/typed", "--batch", not_json.to_str().unwrap()], "line 2"),
        (vec!["enqueue", "t/typed", "--batch", not_utf8.to_str().unwrap()], "line 2"),
        // Read whole, a file without newlines aborted wf when the allocation failed.
        (vec!["enqueue", "t/echo", "--batch", "/dev/zero"], "line 1: longer than 64 MiB"),
        (vec!["enqueue", "t/echo", "--tag", "GPU"], "the manifest's rule for tags"),
        (vec!["enqueue", "t/echo", "--tag", &huge_tag], "the manifest's rule for tags"),
        // PostgreSQL's own refusal of it took two lines and named no input.
        (vec!["enqueue", "t/echo", "--input", r#"{"name": "a\u0000b"}"#], "U+0000"),
        (vec!["schedule", "add", "nul", "t/echo", "--cron", "0 2 * * *", "--input", r#"{"\u0000": 1}"#], "U+0000"),
        (vec!["work", "--tag", "Bad Tag", "--drain"], "no job can have it"),
    ];
    for (args, needle) in cases {
        let run = env.wf(&args).run();
        assert_eq!(run.code, 1, "{args:?} should fail: {run:?}");
        assert!(run.stderr.contains(needle), "{args:?}: error should mention {needle:?}: {}", run.stderr);
        assert!(run.stderr.starts_with("error: ") && run.stderr.lines().count() == 1, "one line: {}", run.stderr);
        assert!(run.stderr.len() < 1_000, "{args:?}: a short error: {}", run.stderr);
        assert_eq!(job_count(&env), 0, "{args:?} must not create a job");
        let queued: i64 = env.scalar("SELECT count(*) FROM job_queue");
        assert_eq!(queued, 0);
    }
    let usage_cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["enqueue"], "TARGET"),
        (vec!["enqueue", "t/echo", "--at", "tomorrow"], "RFC 3339"),
        // An unset shell variable would have made every later enqueue return the first job.
        (vec!["enqueue", "t/echo", "--key", ""], "must not be empty"),
        (vec!["enqueue", "t/echo", "--in", "1000000d"], "longer than 100 years"),
        (vec!["jobs", "--json", "--output", "table"], "give one of them"),
        (vec!["reap", "--restart-limit=-1"], "-1"),
        (vec!["jobs", "--since", "2h", "--until", "3h"], "--since is not before --until"),
    ];
    for (args, needle) in usage_cases {
        let run = env.wf(&args).run();
        assert_eq!(run.code, 2, "{args:?} is a usage error: {run:?}");
        assert!(run.stderr.contains(needle), "{args:?}: error should mention {needle:?}: {}", run.stderr);
        assert_eq!(job_count(&env), 0, "{args:?} must not create a job");
    }
    let schedules: i64 = env.scalar("SELECT count(*) FROM schedule");
    assert_eq!(schedules, 0);
    for limit in ["-1", "0", "9223372036854775807"] {
        let run = env.wf(["jobs", "--limit", limit]).run();
        assert_eq!(run.code, 2, "--limit {limit} is a usage error, refused before any query: {run:?}");
    }
    // The largest page of the largest pages: past every job, not an overflow.
    let far = env.wf(["jobs", "--limit", "2147483647", "--page", "2147483647", "--json"]).ok().json();
    assert_eq!(far, json!([]));
}

#[test]
fn batch_enqueues_every_line_in_one_transaction() {
    let env = TestEnv::new();
    synced(&env);
    let batch = path(&env, "batch.jsonl");
    let lines: String = (0..500).map(|n| format!("{{\"n\": {n}}}\n")).collect();
    std::fs::write(&batch, lines).unwrap();
    let ids = env.wf(["enqueue", "t/typed", "--batch", batch.to_str().unwrap(), "--json"]).ok().json();
    let ids = ids["ids"].as_array().unwrap();
    assert_eq!(ids.len(), 500);

    // Ids come back in line order.
    let first = env.db().query_one("SELECT input FROM job WHERE id = $1", &[&uuid(&ids[0])]).unwrap();
    assert_eq!(first.get::<_, Value>(0), json!({"n": 0}));
    let last = env.db().query_one("SELECT input FROM job WHERE id = $1", &[&uuid(&ids[499])]).unwrap();
    assert_eq!(last.get::<_, Value>(0), json!({"n": 499}));
    assert_eq!(job_count(&env), 500);
    // `-`: the lines from stdin, as for --input.
    let piped = env.wf(["enqueue", "t/typed", "--batch", "-", "--json"]).stdin_bytes(b"{\"n\": 7}\n\n{\"n\": 8}\n");
    assert_eq!(piped.code, 0, "{piped:?}");
    assert_eq!(piped.json()["ids"].as_array().map(Vec::len), Some(2), "{piped:?}");
    assert_eq!(job_count(&env), 502);
    // `@FILE` and `@-`, as --input takes them (they read a file named `@...` before).
    let at_file = format!("@{}", batch.display());
    let from_file = env.wf(["enqueue", "t/typed", "--batch", &at_file, "--json"]).ok().json();
    assert_eq!(from_file["ids"].as_array().map(Vec::len), Some(500), "{from_file}");
    let at_stdin = env.wf(["enqueue", "t/typed", "--batch", "@-", "--json"]).stdin_bytes(b"{\"n\": 9}\n");
    assert_eq!(at_stdin.code, 0, "{at_stdin:?}");
    assert_eq!(at_stdin.json()["ids"].as_array().map(Vec::len), Some(1), "{at_stdin:?}");
    assert_eq!(job_count(&env), 1003);
}

/// A batch file longer than the chunks it is enqueued in (5,000 lines each) is still one
/// transaction: every line a job, in line order, all pinned alike; a bad line in its last chunk
/// refuses all of it, named by its line in the file (blank lines count), the problems listed up
/// to 20.
#[test]
fn a_batch_of_many_chunks_is_one_transaction_in_line_order() {
    let env = TestEnv::new();
    synced(&env);
    let lines = |bad: &[(usize, &str)]| -> String {
        let mut text = String::from("{\"n\": 0}\n\n");
        for n in 1..12_000 {
            let line = n + 2;
            match bad.iter().find(|(at, _)| *at == line) {
                Some((_, input)) => text.push_str(input),
                None => text.push_str(&format!("{{\"n\": {n}}}")),
            }
            text.push('\n');
        }
        text
    };
    let batch = path(&env, "many.jsonl");
    std::fs::write(&batch, lines(&[])).unwrap();
    let ids = env.wf(["enqueue", "t/typed", "--batch", batch.to_str().unwrap(), "--json"]).ok().json();
    let ids: Vec<uuid::Uuid> = ids["ids"].as_array().unwrap().iter().map(uuid).collect();
    assert_eq!(ids.len(), 12_000);
    let listed: Vec<(i64, i64, i64)> = env
        .db()
        .query(
            "SELECT (j.input->>'n')::bigint, count(*) OVER (PARTITION BY j.created_at, j.commit_sha),
                    (SELECT count(*) FROM job_queue q WHERE q.job_id = j.id)
               FROM unnest($1::uuid[]) WITH ORDINALITY AS i(id, n) JOIN job j ON j.id = i.id ORDER BY i.n",
            &[&ids],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    assert_eq!(listed, (0..12_000).map(|n| (n, 12_000, 1)).collect::<Vec<_>>());

    let refused = |bad: &[(usize, &str)], needles: &[&str]| {
        std::fs::write(&batch, lines(bad)).unwrap();
        let run = env.wf(["enqueue", "t/typed", "--batch", batch.to_str().unwrap()]).run();
        assert_eq!(run.code, 1, "{run:?}");
        for needle in needles {
            assert!(run.stderr.contains(needle), "the error should say {needle:?}: {}", run.stderr);
        }
        assert_eq!(job_count(&env), 12_000, "a refused batch enqueues nothing");
    };
    refused(
        &[(11_500, r#"{"n": -1}"#), (11_900, r#"{"n": "x"}"#)],
        &["line 11500: input at /n", "line 11900: input at /n"],
    );
    refused(&[(11_990, "[1]")], &["many.jsonl line 11990: each line must be a JSON object"]);
    let many: Vec<(usize, &str)> = (11_001..11_026).map(|line| (line, r#"{"n": -1}"#)).collect();
    refused(&many, &["line 11020: input at /n", "; and 5 more"]);
}

#[test]
fn results_and_exit_codes_follow_the_outcome() {
    let env = TestEnv::new();
    synced(&env);
    let ok = enqueue(&env, "t/echo", json!({"x": 1}));
    let failed = enqueue(&env, "t/fail", json!({}));
    let died = enqueue(&env, "t/exit", json!({"code": 3}));
    let bad_output = enqueue(&env, "t/badout", json!({}));
    let too_big = enqueue(&env, "t/big", json!({"bytes": 2 * 1024 * 1024}));
    let queued_later = env.wf(["enqueue", "t/echo", "--in", "1h"]).ok().stdout.trim().to_string();
    // Not finished: exit 3.
    env.wf(["result", &ok]).run().expect_code(3);
    drain(&env);

    let run = env.wf(["result", &ok]).ok();
    let result: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(result["input"], json!({"x": 1}));
    assert_eq!(result["attempt"], 1);

    let run = env.wf(["result", &failed]).run().expect_code(4);
    let error: Value = serde_json::from_str(&run.stdout).unwrap();
    // A reader that leaves early (`wf result ID | head -1`) does not hide the job's outcome from
    // a script with pipefail: before, the broken pipe made the exit 0.
    for json in [false, true] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let args = if json { vec!["result", &failed, "--json"] } else { vec!["result", &failed] };
        env.wf(args).run_into(writer.into(), std::process::Stdio::piped()).expect_code(4);
    }
    assert_eq!(error["name"], "TypeError");
    assert_eq!(error["message"], "this action fails");
    assert!(error["stack"].as_str().unwrap().contains("fail.ts"), "{error}");

    let error: Value = serde_json::from_str(&env.wf(["result", &died]).run().expect_code(4).stdout).unwrap();
    assert!(error["message"].as_str().unwrap().contains("code 3"), "{error}");

    let error: Value = serde_json::from_str(&env.wf(["result", &bad_output]).run().expect_code(4).stdout).unwrap();
    assert_eq!(error["name"], "OutputSchemaError");
    assert!(error["message"].as_str().unwrap().contains("missing"), "{error}");

    let error: Value = serde_json::from_str(&env.wf(["result", &too_big]).run().expect_code(4).stdout).unwrap();
    assert_eq!(error["name"], "ResultTooLarge");

    // The scheduled job is untouched by --drain and still not finished.
    let shown = env.wf(["show", &queued_later, "--json"]).ok().json();
    assert_eq!(shown["status"], "scheduled");
    env.wf(["result", &queued_later]).run().expect_code(3);

    let shown = env.wf(["show", &ok, "--json"]).ok().json();
    for field in [
        "id",
        "status",
        "app",
        "action",
        "commit_sha",
        "tag",
        "priority",
        "trigger_kind",
        "input",
        "result",
        "error",
        "worker",
        "restarts",
        "created_at",
        "scheduled_for",
        "started_at",
        "completed_at",
        "canceled_by",
        "canceled_reason",
    ] {
        assert!(shown.get(field).is_some(), "wf show --json lacks {field}: {shown}");
    }
    assert_eq!(shown["status"], "success");
    assert_eq!(shown["result"], result);

    let json = env.wf(["result", &failed, "--json"]).run().expect_code(4).json();
    assert_eq!(json["status"], "failure");
    assert_eq!(json["error"]["name"], "TypeError");

    let listed = env.wf(["jobs", "--status", "failure", "--json"]).ok().json();
    assert_eq!(listed.as_array().unwrap().len(), 4, "{listed}");
    env.wf(["result", "00000000-0000-0000-0000-000000000000"]).run().expect_code(1);
    env.wf(["result", "not-a-uuid"]).run().expect_code(1);
}

#[test]
fn enqueue_wait_prints_the_result_with_its_exit_code() {
    let env = TestEnv::new();
    synced(&env);
    let mut worker = crate::support::fixtures::worker(&env, "w", &[]);
    let run = env.wf(["enqueue", "t/echo", "--input", r#"{"w":1}"#, "--wait", "--timeout", "60s"]).ok();
    let result: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(result["input"], json!({"w": 1}));
    let id = run.stderr.lines().find(|l| uuid::Uuid::parse_str(l.trim()).is_ok());
    assert!(id.is_some(), "the job id goes to stderr: {run:?}");

    let failed = env.wf(["enqueue", "t/fail", "--wait", "--json"]).run().expect_code(4).json();
    assert_eq!(failed["status"], "failure");
    assert_eq!(failed["error"]["name"], "TypeError");
    assert!(failed["id"].is_string());
    worker.kill().unwrap();
    worker.wait().unwrap();

    // Nobody works the queue any more: the wait times out with exit 3.
    env.wf(["enqueue", "t/echo", "--wait", "--timeout", "1s"]).run().expect_code(3);
}

#[test]
fn logs_keep_each_line_of_each_stream() {
    let env = TestEnv::new();
    synced(&env);
    let id = enqueue(&env, "t/chatty", json!({"lines": 300}));
    drain(&env);
    let logs = env.wf(["logs", &id, "--json"]).ok().json();
    let lines = logs.as_array().unwrap();
    let stdout: Vec<&str> =
        lines.iter().filter(|l| l["stream"] == "stdout").map(|l| l["line"].as_str().unwrap()).collect();
    let stderr: Vec<&str> =
        lines.iter().filter(|l| l["stream"] == "stderr").map(|l| l["line"].as_str().unwrap()).collect();
    assert_eq!(stdout, (0..300).map(|i| format!("out {i}")).collect::<Vec<_>>());
    assert_eq!(stderr, (0..300).map(|i| format!("err {i}")).collect::<Vec<_>>());
    assert!(lines.iter().all(|l| l["attempt"] == 1));
    let text = env.wf(["logs", &id]).ok();
    assert!(text.stdout.contains("out 299\n"), "{}", text.stdout);
    assert!(!text.stderr.contains("printed nothing"), "{}", text.stderr);
    // A job that printed nothing (yet) is said to, with its state: an empty output said nothing.
    let waiting = enqueue(&env, "t/chatty", json!({"lines": 1}));
    let silent = env.wf(["logs", &waiting]).ok();
    assert_eq!(silent.stdout, "");
    assert!(silent.stderr.contains(&format!("job {waiting} has printed nothing (queued)")), "{}", silent.stderr);
    assert_eq!(env.wf(["logs", &waiting, "--json"]).ok().json(), json!([]));
}

#[test]
fn output_postgresql_cannot_store_still_completes_the_job_once() {
    let env = TestEnv::new();
    synced(&env);
    let in_log = enqueue(&env, "t/nul", json!({}));
    let in_result = enqueue(&env, "t/nul", json!({"in_result": true}));
    drain(&env);

    // A NUL in a line of output is shown as the replacement character.
    assert_eq!(env.wf(["result", &in_log]).ok().json(), json!({"ok": true}));
    let logs = env.wf(["logs", &in_log, "--json"]).ok().json();
    assert_eq!(logs[0]["line"], "before\u{FFFD}after", "{logs}");

    // A NUL in the result cannot be stored: the job completes as failure saying why, with its logs.
    let error = env.wf(["result", &in_result]).run().expect_code(4).json();
    assert_eq!(error["name"], "CompletionError", "{error}");
    assert!(error["message"].as_str().unwrap().contains("\\u0000"), "{error}");
    let logs = env.wf(["logs", &in_result, "--json"]).ok().json();
    assert_eq!(logs[0]["line"], "before\u{FFFD}after", "{logs}");
    let rows: i64 = env.scalar("SELECT count(*) FROM job_completed");
    let left: i64 = env.scalar("SELECT count(*) FROM job_queue");
    assert_eq!((rows, left), (2, 0));
}

/// An attempt's (stored bytes, stored lines) of the action's, and its lines of windforce's own.
fn logs_of(env: &TestEnv, id: &str) -> (i64, i64, Vec<String>) {
    let kept: (i64, i64) = (
        env.scalar_of(
            "SELECT coalesce(sum(octet_length(line) + 1), 0)::bigint FROM job_logs
              WHERE job_id = $1::text::uuid AND stream <> 'wf'",
            &[&id],
        ),
        env.scalar_of("SELECT count(*) FROM job_logs WHERE job_id = $1::text::uuid AND stream <> 'wf'", &[&id]),
    );
    let own =
        env.column_of("SELECT line FROM job_logs WHERE job_id = $1::text::uuid AND stream = 'wf' ORDER BY id", &[&id]);
    (kept.0, kept.1, own)
}

#[test]
fn logs_are_capped_per_attempt_with_a_visible_mark() {
    let env = TestEnv::new();
    synced(&env);
    // 2 x 10,000 lines of 100 bytes: more than the 1 MiB cap.
    let id = enqueue(&env, "t/chatty", json!({"lines": 10000, "width": 100}));
    drain(&env);
    let (bytes, _, own) = logs_of(&env, &id);
    assert!(bytes > 1000 * 1024, "output up to the cap is kept: {bytes} bytes");
    assert!(bytes <= 1024 * 1024, "{bytes} bytes stored");
    assert_eq!(own, ["output truncated: this attempt wrote more than 1048576 bytes"]);
    env.wf(["result", &id]).ok();
}

/// Lines are capped too, whatever their length: empty or short ones counted nothing (20 MiB of
/// newlines held 7.6 GB in the worker, and a completion carrying a million short lines ran past the
/// statement timeout at every attempt, until the job failed for its worker's "deaths"). Why the job
/// failed comes after the mark, kept past the caps.
#[test]
fn short_lines_are_capped_by_their_number_and_the_failure_is_said_after_the_mark() {
    let env = TestEnv::new();
    synced(&env);
    // 2 x 60,000 lines of about 10 bytes: under 1 MiB, over 50,000 lines.
    let id = enqueue(&env, "t/chatty", json!({"lines": 60000, "fail": "the real reason"}));
    drain(&env);
    let (bytes, lines, own) = logs_of(&env, &id);
    assert!(bytes < 1024 * 1024, "{bytes}");
    assert_eq!(lines, 50_000);
    assert_eq!(own[0], "output truncated: this attempt wrote more than 50000 lines", "{own:?}");
    assert_eq!(own[1], "failed: Error: the real reason", "{own:?}");
    let error: Value = serde_json::from_str(&env.wf(["result", &id]).run().expect_code(4).stdout).unwrap();
    assert_eq!(error["message"], "the real reason", "{error}");
}

#[test]
fn a_job_runs_the_commit_it_pinned_not_the_catalogs_newest() {
    let env = TestEnv::new();
    let repo = synced(&env);
    let log = path(&env, "runs.log");
    let before = enqueue(&env, "t/echo", json!({"log": log}));
    // A new commit changes the code, the timeout and the input schema of t/echo.
    repo.file("t/echo.ts", "export function main(input: any) { return { input, version: 2 }; }\n");
    let mut manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(repo.path().join("windforce.json")).unwrap()).unwrap();
    manifest["apps"]["t"]["actions"]["echo"]["timeout"] = json!(5);
    manifest["apps"]["t"]["actions"]["echo"]["input_schema"] = json!({"type": "object", "required": ["must"]});
    repo.manifest(&manifest);
    let second = repo.commit("version 2");
    env.wf(["sync", "tests"]).ok();
    // The new schema applies to new jobs only.
    env.wf(["enqueue", "t/echo"]).run().expect_code(1);
    let after = enqueue(&env, "t/echo", json!({"must": true}));
    drain(&env);
    let old: Value = serde_json::from_str(&env.wf(["result", &before]).ok().stdout).unwrap();
    let new: Value = serde_json::from_str(&env.wf(["result", &after]).ok().stdout).unwrap();
    assert_eq!(old["version"], 1, "the job enqueued before the sync runs the old code");
    assert_eq!(new["version"], 2, "the job enqueued after the sync runs the new code");
    let shown = env.wf(["show", &after, "--json"]).ok().json();
    assert_eq!(shown["commit_sha"], second.as_str());
    let timeouts: Vec<i32> = env.column("SELECT timeout_s FROM job ORDER BY created_at");
    assert_eq!(timeouts, vec![30, 5]);
}

#[test]
fn priority_then_scheduled_time_decide_the_order() {
    let env = TestEnv::new();
    synced(&env);
    let low = enqueue_raw(&env, &["--priority", "1"]);
    let high_first = enqueue_raw(&env, &["--priority", "9"]);
    let mid = enqueue_raw(&env, &["--priority", "5"]);
    let high_second = enqueue_raw(&env, &["--priority", "9"]);
    let earlier =
        env.wf(["enqueue", "t/echo", "--priority", "5", "--at", "2000-01-01T00:00:00Z"]).ok().stdout.trim().to_string();
    env.wf(["work", "--drain", "--concurrency", "1"]).ok();
    let order: Vec<String> = env.column("SELECT job_id::text FROM job_completed ORDER BY started_at");
    assert_eq!(order, vec![high_first, high_second, earlier, mid, low]);
}

#[test]
fn a_delayed_job_does_not_start_early() {
    let env = TestEnv::new();
    synced(&env);
    let mut worker = crate::support::fixtures::worker(&env, "w", &["--once"]);
    let job = env.wf(["enqueue", "t/echo", "--in", "2s", "--json"]).ok().json();
    let id = job["id"].as_str().unwrap().to_string();
    assert_eq!(env.wf(["show", &id, "--json"]).ok().json()["status"], "scheduled");
    let status = worker.wait().unwrap();
    assert!(status.success());
    let early: bool = env.scalar_of(
        "SELECT c.started_at < j.scheduled_for FROM job_completed c JOIN job j ON j.id = c.job_id WHERE c.job_id = $1::text::uuid"
    , &[&id]);
    assert!(!early, "the job started before it was due");
    let delay: f64 = env.scalar_of(
        "SELECT extract(epoch FROM c.started_at - j.created_at)::float8 FROM job_completed c JOIN job j ON j.id = c.job_id WHERE c.job_id = $1::text::uuid"
    , &[&id]);
    assert!(delay >= 2.0, "started {delay} s after enqueue");
}

#[test]
fn the_action_sees_its_environment_and_a_token_that_verifies() {
    let env = TestEnv::new().env("WF_SECRET", "0123456789abcdef0123456789abcdef-test-secret");
    synced(&env);
    let id = enqueue(&env, "t/env", json!({}));
    env.wf(["work", "--drain"]).env("WF_CANARY", "leak").ok();
    let vars: Value = serde_json::from_str(&env.wf(["result", &id]).ok().stdout).unwrap();
    assert_eq!(vars["WF_JOB_ID"], id.as_str());
    assert_eq!(vars["WF_APP"], "t");
    assert_eq!(vars["WF_ACTION"], "env");
    assert_eq!(vars["WF_TRIGGER_KIND"], "manual");
    assert_eq!(vars["WF_ATTEMPT"], "1");
    for name in ["WF_COMMIT_SHA", "WF_SCHEDULED_FOR", "WF_TOKEN", "PATH", "HOME"] {
        assert!(vars[name].is_string(), "{name} missing: {vars}");
    }
    assert!(vars.get("WF_CANARY").is_none(), "the worker's environment leaked: {vars}");
    assert!(vars.get("DATABASE_URL").is_none(), "the database URL leaked to the action");

    // The token outlived its attempt: well signed, unexpired, but no longer current.
    let token = vars["WF_TOKEN"].as_str().unwrap().to_string();
    let run = env.wf(["token", "verify", &token, "--json"]).run().expect_code(1);
    let claims = run.json();
    assert_eq!((claims["current"].as_bool(), claims["valid"].as_bool()), (Some(false), Some(false)), "{claims}");
    assert_eq!(claims["job"], id.as_str());
    let worker: String = env.scalar_of("SELECT worker FROM job_completed WHERE job_id = $1::text::uuid", &[&id]);
    assert_eq!(claims["claim"], worker.as_str());
    assert!(run.stderr.contains("no longer current"), "{run:?}");

    // A modified token, one signed with another secret, and an expired one are refused.
    let mut forged = token.clone();
    let flip = forged.len() - 3;
    let replacement = if &forged[flip..flip + 1] == "A" { "B" } else { "A" };
    forged.replace_range(flip..flip + 1, replacement);
    env.wf(["token", "verify", &forged]).run().expect_code(1);
    // Refused by its signature before any connection: a database that does not answer is not
    // asked (DATABASE_URL naming a socket folder with no server).
    let unreachable = format!("host={} dbname=none connect_timeout=2", env.dir.path().display());
    let refused = env.wf(["token", "verify", &forged]).env("DATABASE_URL", &unreachable).run().expect_code(1);
    assert!(refused.stderr.contains("the signature does not match"), "{refused:?}");
    env.wf(["token", "verify", &token]).env("WF_SECRET", "another-secret-of-at-least-32-bytes!!").run().expect_code(1);
    env.wf(["token", "verify", "garbage"]).run().expect_code(1);
    let secret = b"0123456789abcdef0123456789abcdef-test-secret";
    let old = chrono::Utc::now() - chrono::Duration::hours(2);
    let expired = wf::token::issue(secret, &wf::token::Claims::for_claim(uuid::Uuid::new_v4(), "w#1", old, 60));
    let run = env.wf(["token", "verify", &expired]).run().expect_code(1);
    assert!(run.stderr.contains("expired"), "{run:?}");
    let fresh =
        wf::token::issue(secret, &wf::token::Claims::for_claim(uuid::Uuid::new_v4(), "w#1", chrono::Utc::now(), 60));
    let run = env.wf(["token", "verify", &fresh]).run().expect_code(1);
    assert!(run.stderr.contains("this database has no job"), "a job this database does not have: {run:?}");

    // Without WF_SECRET and without a key file, nothing to verify with: said, and none is made
    // (a key made then would be the one this host's workers sign with from then on).
    let home = env.dir.path().join("keyless");
    let run = env.wf(["token", "verify", &token]).env_remove("WF_SECRET").env("WF_HOME", &home).run().expect_code(1);
    assert!(run.stderr.contains("no signing key"), "{run:?}");
    assert!(!home.join("secret").exists(), "a read made a signing key");
}

/// While its attempt runs, the action's token verifies as current.
#[test]
fn a_running_attempts_token_is_current() {
    let env = TestEnv::new().env("WF_SECRET", "0123456789abcdef0123456789abcdef-test-secret");
    synced(&env);
    let id = enqueue(&env, "t/sleep", json!({"ms": 20000}));
    let _worker = crate::support::fixtures::worker(&env, "w", &["--once"]);
    let jobs = [id.clone()].into_iter().collect();
    // Read from the environment of the job's own processes, as only root can.
    let token = wait_for(Duration::from_secs(30), "the job's processes", || {
        crate::support::checks::job_processes(&jobs).iter().find_map(|(pid, _, _)| {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            environ
                .split(|&b| b == 0)
                .find_map(|var| String::from_utf8_lossy(var).strip_prefix("WF_TOKEN=").map(str::to_string))
        })
    });
    let claims = env.wf(["token", "verify", &token, "--json"]).ok().json();
    assert_eq!((claims["current"].as_bool(), claims["valid"].as_bool()), (Some(true), Some(true)), "{claims}");
    assert_eq!(claims["job"], id.as_str());
    // Read from stdin (`-`), as a script keeps a token out of the process list.
    let from_stdin =
        env.wf(["token", "verify", "-", "--json"]).stdin_bytes(format!("{token}\n").as_bytes()).expect_code(0);
    assert_eq!(from_stdin.json(), claims);
    env.wf(["cancel", &id, "--yes"]).ok();
}

#[test]
fn a_commit_neither_in_the_store_nor_in_the_database_is_never_run() {
    let env = TestEnv::new();
    let _repo = synced(&env);
    let log = path(&env, "runs.log");
    let id = enqueue(&env, "t/echo", json!({"log": log}));
    // As if synced by a wf older than sources in the database, on another host.
    env.db().batch_execute("DELETE FROM source_commit").unwrap();
    let empty_store = path(&env, "other-store");
    env.wf(["work", "--drain"]).env("WF_STORE", &empty_store).ok();
    let error: Value = serde_json::from_str(&env.wf(["result", &id]).run().expect_code(4).stdout).unwrap();
    assert_eq!(error["name"], "SourceNotMaterialized", "{error}");
    let message = error["message"].as_str().unwrap();
    let commit: String = env.scalar_of("SELECT commit_sha FROM job WHERE id = $1::text::uuid", &[&id]);
    assert!(message.contains(&commit), "{message}");
    assert!(message.contains("not stored in the database") && message.contains("wf sync"), "{message}");
    assert!(!log.exists(), "the action must not have run");
    let trees = std::fs::read_dir(&empty_store).map(|entries| entries.count()).unwrap_or(0);
    assert_eq!(trees, 0, "nothing was written into the store");

    // A sync of the same commit stores it (the upgrade path): then any host runs its jobs.
    let sync = env.wf(["sync", "tests", "--json"]).ok().json();
    assert_eq!(sync["changed"], false, "{sync}");
    assert_eq!(env.scalar::<i64>("SELECT count(*) FROM source_commit"), 1);
    let again = enqueue(&env, "t/echo", json!({"log": log}));
    env.wf(["work", "--drain"]).env("WF_STORE", &empty_store).ok();
    env.wf(["result", &again]).ok();
    assert!(log.exists(), "the action ran on the host that lacked the commit");
}

#[test]
fn a_heartbeat_longer_than_a_third_of_the_window_is_refused() {
    let env = TestEnv::new();
    let run = env.wf(["work", "--drain", "--heartbeat", "30s"]).env("WF_ZOMBIE_TIMEOUT_S", "60").run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("third"), "{run:?}");
}

#[test]
fn a_configuration_error_names_the_variable_and_what_it_counts() {
    let env = TestEnv::new();
    let run = env.wf(["reap"]).env("WF_RESTART_LIMIT", "abc").run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains(r#"WF_RESTART_LIMIT="abc" is not a whole number of restarts"#), "{run:?}");
    let run = env.wf(["reap"]).env("WF_ZOMBIE_TIMEOUT_S", "1m").run();
    assert!(run.stderr.contains(r#"WF_ZOMBIE_TIMEOUT_S="1m" is not a whole number of seconds"#), "{run:?}");
}

#[test]
fn a_missing_bun_is_one_clear_error_at_start() {
    let env = TestEnv::new();
    let run = env.wf(["work", "--drain"]).env("WF_BUN", "/nonexistent/bun").run();
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("WF_BUN"), "{run:?}");
}

/// A `wf-supervise` of another build beside `wf` (an older one left in place when only `wf` was
/// copied) would start bun otherwise than the worker expects: the worker refuses to start, and
/// claims nothing. An older one fails `--protocol`; another one answers something else.
#[test]
fn a_supervisor_of_another_build_is_one_clear_error_at_start() {
    let env = TestEnv::new();
    synced(&env);
    let id = enqueue(&env, "t/echo", json!({}));
    for other in ["/bin/false", "/bin/echo"] {
        let dir = tempfile::tempdir().unwrap();
        let bin = crate::support::harness::copy_of_wf(dir.path());
        std::fs::copy(other, dir.path().join("wf-supervise")).unwrap();
        let run = env.wf(["work", "--drain"]).under("env", [""; 0], bin.as_os_str()).run();
        assert_eq!(run.code, 1, "{other}: {run:?}");
        assert!(run.stderr.contains("wf-supervise is not of this build of wf"), "{other}: {run:?}");
        let waiting: i64 = env.scalar(&format!("SELECT count(*) FROM job_queue WHERE job_id = '{id}' AND NOT running"));
        assert_eq!(waiting, 1, "{other}: nothing claimed");
    }
    env.wf(["work", "--drain"]).ok();
    assert_eq!(env.wf(["result", &id]).ok().code, 0);
}

#[test]
fn status_counts_each_tag_and_jobs_filters() {
    // Pings older than the server's start count from that start: use a window shorter than the
    // test server's age.
    let env = TestEnv::new().env("WF_ZOMBIE_TIMEOUT_S", "1");
    crate::support::harness::wait_for(
        std::time::Duration::from_secs(5),
        "the test server to be older than the window",
        || env.scalar::<bool>("SELECT now() - pg_postmaster_start_time() > interval '1 second'").then_some(()),
    );
    synced(&env);
    enqueue(&env, "t/echo", json!({}));
    enqueue(&env, "t/echo", json!({}));
    env.wf(["enqueue", "t/echo", "--in", "1h"]).ok();
    enqueue(&env, "other/echo", json!({}));
    let zombie = enqueue(&env, "other/echo", json!({}));
    crate::support::checks::make_zombies(&mut env.db(), &[crate::support::checks::uuid(&zombie)]);
    let status = env.wf(["status", "--json"]).ok().json();
    assert_eq!(
        status,
        json!([
            {"tag": "default", "queued": 2, "scheduled": 1, "running": 0, "zombies": 0,
             "oldest_wait_s": status[0]["oldest_wait_s"]},
            {"tag": "other", "queued": 1, "scheduled": 0, "running": 1, "zombies": 1,
             "oldest_wait_s": status[1]["oldest_wait_s"]},
        ])
    );
    assert!(status[0]["oldest_wait_s"].as_f64().unwrap() >= 0.0);
    let table = env.wf(["status"]).ok().stdout;
    assert!(table.contains("other"), "{table}");
    // A wait in its largest unit, as every age wf shows ("6years 11months 3days 5h 58m 44s" before).
    env.wf(["enqueue", "t/echo", "--at", "2020-01-01T00:00:00Z", "--tag", "past"]).ok();
    let table = env.wf(["status"]).ok().stdout;
    let past = table.lines().find(|line| line.trim_start().starts_with("past")).unwrap_or_else(|| panic!("{table}"));
    let wait = past.split_whitespace().last().unwrap();
    assert!(wait.ends_with('d') && wait[..wait.len() - 1].parse::<u32>().unwrap() > 2000, "{table}");

    let other = env.wf(["jobs", "--tag", "other", "--json"]).ok().json();
    assert_eq!(other.as_array().unwrap().len(), 2);
    let scheduled = env.wf(["jobs", "--status", "scheduled", "--json"]).ok().json();
    assert_eq!(scheduled.as_array().unwrap().len(), 1);
    let by_app = env.wf(["jobs", "--app", "t", "--limit", "2", "--json"]).ok().json();
    assert_eq!(by_app.as_array().unwrap().len(), 2);
    let running = env.wf(["jobs", "--status", "running", "--json"]).ok().json();
    assert_eq!(running[0]["id"], zombie.as_str());
}

/// `wf status` counts the waiting jobs from the claim index alone (the tag and due time of each),
/// not from the queue's rows: after a VACUUM (as autovacuum leaves a backlog), the count reads the
/// index, not the rows; the running ones are read from their rows. Counts as the rows say.
#[test]
fn status_counts_the_waiting_jobs_from_the_claim_index() {
    use crate::support::plans::{buffers, explain, fill, nodes};

    let env = TestEnv::new();
    fill(&env, 20_000, &["default", "other"], "n % 3", "now() - interval '1 minute'");
    fill(&env, 1_000, &["other"], "0", "now() + interval '1 hour'");
    fill(&env, 2, &["busy"], "0", "now()");
    // Committed with the WAL flushed (the test server commits asynchronously, and VACUUM marks no
    // page all-visible while its rows' commits may still be lost), which the fill's commits are
    // before it.
    env.db()
        .batch_execute(
            "SET synchronous_commit = on;
             UPDATE job_queue SET running = true, worker = 'w', started_at = now(), ping = now()
              WHERE job_id IN (SELECT job_id FROM job_queue WHERE tag = 'default' LIMIT 3) OR tag = 'busy'",
        )
        .unwrap();
    // VACUUM marks a page all-visible only once no snapshot of this database predates its rows
    // (an autovacuum's ANALYZE of the tables just filled holds one) and each row's commit is known
    // flushed: the clog keeps one flush position per 32 transactions, and other tests' asynchronous
    // commits in the same group keep it ahead of the flushed WAL for a while. Either left the VACUUM
    // of CI runs marking no page at all; VACUUM again until every page is marked.
    wait_for(Duration::from_secs(60), "a VACUUM that marks every page of the queue all-visible", || {
        env.db().batch_execute("VACUUM (ANALYZE, INDEX_CLEANUP ON) job_queue").unwrap();
        let unmarked: i32 =
            env.scalar("SELECT relpages - relallvisible FROM pg_class WHERE oid = 'job_queue'::regclass");
        (unmarked == 0).then_some(())
    });

    let status = env.wf(["status", "--json"]).ok().json();
    let counts: Vec<(String, i64, i64, i64)> = status
        .as_array()
        .unwrap()
        .iter()
        .map(|tag| {
            let count = |key: &str| tag[key].as_i64().unwrap();
            (tag["tag"].as_str().unwrap().to_string(), count("queued"), count("scheduled"), count("running"))
        })
        .collect();
    let expected = [("busy", 0, 0, 2), ("default", 9_997, 0, 3), ("other", 10_000, 1_000, 0)];
    let expected: Vec<(String, i64, i64, i64)> = expected
        .iter()
        .map(|&(tag, queued, scheduled, running)| (tag.to_string(), queued, scheduled, running))
        .collect();
    assert_eq!(counts, expected, "a tag with running jobs only is listed too");
    assert_eq!(status[0]["oldest_wait_s"], Value::Null, "{status}");
    assert!(status[1]["oldest_wait_s"].as_f64().unwrap() >= 60.0, "{status}");

    let plan = explain(&env, wf::queue::inspect::STATUS_SQL, "float8", "60");
    let plan = &plan[0]["Plan"];
    let queue_pages: i64 = env.scalar("SELECT (pg_relation_size('job_queue') / 8192)::bigint");
    let waiting = nodes(plan)
        .into_iter()
        .find(|node| node["Index Name"] == "job_queue_claim_idx")
        .unwrap_or_else(|| panic!("the waiting jobs counted from the claim index\n{plan:#}"));
    assert_eq!(waiting["Node Type"], "Index Only Scan", "{plan:#}");
    // 37 buffers in a run on a busy machine, against 260 pages of rows (reading the rows: all of
    // them, 1,157 buffers in the CI runs whose VACUUM marked no page).
    let touched = buffers(plan);
    assert!(touched * 4 < queue_pages, "wf status: {touched} buffers, the queue has {queue_pages} pages\n{plan:#}");
}

#[test]
fn logs_follow_prints_lines_until_the_job_completes() {
    let env = TestEnv::new();
    synced(&env);
    let id = enqueue(&env, "t/chatty", json!({"lines": 5}));
    assert_eq!(env.wf(["logs", &id, "--json"]).ok().json(), json!([]), "no line yet");
    let follower = env.wf(["logs", &id, "--follow"]).start();
    // The array is written a line at a time as the lines come: still one document at the end.
    let json_follower = env.wf(["logs", &id, "--follow", "--json"]).start();
    env.wf(["work", "--drain"]).ok();
    let run = follower.finish();
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stderr.contains(&format!("job {id} ended: success")), "{run:?}");
    let text = run.stdout;
    assert!(text.contains("out 4") && text.contains("[stderr] err 4"), "{text}");
    let run = json_follower.finish();
    assert_eq!(run.code, 0, "{run:?}");
    let lines = |document: &Value| -> Vec<(String, String)> {
        let line = |l: &Value| (l["stream"].as_str().unwrap().to_string(), l["line"].as_str().unwrap().to_string());
        document.as_array().unwrap().iter().map(line).collect()
    };
    let followed = lines(&serde_json::from_str(&run.stdout).unwrap());
    assert_eq!(followed, lines(&env.wf(["logs", &id, "--json"]).ok().json()));
    assert!(followed.contains(&("stdout".into(), "out 4".into())), "{followed:?}");
    assert!(followed.contains(&("stderr".into(), "err 4".into())), "{followed:?}");

    // A follower exits as `wf result` does: a failure (or a cancel) is 4, with --json too, where
    // stderr says nothing of how the job ended.
    let failed = enqueue(&env, "t/fail", json!({}));
    let follower = env.wf(["logs", &failed, "--follow"]).start();
    let json_follower = env.wf(["logs", &failed, "--follow", "--json"]).start();
    env.wf(["work", "--drain"]).ok();
    let run = follower.finish();
    assert_eq!(run.code, 4, "{run:?}");
    assert!(run.stderr.contains(&format!("job {failed} ended: failure")), "{run:?}");
    let run = json_follower.finish();
    assert_eq!(run.code, 4, "{run:?}");
    assert!(serde_json::from_str::<Value>(&run.stdout).unwrap().is_array(), "{run:?}");
}

/// A page of one tag's jobs walks that tag's listing index, also where the planner expects the
/// tag's jobs among the newest: here its 5,000 jobs (a fifth of all, one batch) are older than the
/// 20,000 of another tag. Walking the index of creation times, the page read every newer job first.
/// (A filter on the app or the schedule takes its page the same way.)
#[test]
fn a_page_of_a_tags_jobs_walks_the_tags_index() {
    use crate::support::plans::{buffers, explain_listing, fill};
    use wf::queue::inspect::Filter;

    let env = TestEnv::new();
    fill(&env, 5_000, &["rare"], "0", "now()");
    fill(&env, 20_000, &["default"], "0", "now()");
    env.db().batch_execute("ANALYZE job").unwrap();
    let listed = env.wf(["jobs", "--tag", "rare", "--limit", "5", "--page", "2", "--json"]).ok().json();
    let listed: Vec<&str> = listed.as_array().unwrap().iter().map(|job| job["id"].as_str().unwrap()).collect();
    let expected: Vec<String> =
        env.column("SELECT id::text FROM job WHERE tag = 'rare' ORDER BY created_at DESC, id LIMIT 5 OFFSET 5");
    assert_eq!(listed, expected);

    let plan = explain_listing(&env, &Filter { tag: Some("rare"), ..Filter::default() });
    // The tag's 5,000 entries and their jobs' pages (its batch is sorted by id), then the page's
    // joins: 162 buffers; through the newer jobs first, 504.
    let touched = buffers(&plan[0]["Plan"]);
    assert!(touched < 300, "wf jobs --tag rare: {touched} buffers\n{plan:#}");
}

/// `wf jobs` on a batch of 20,000 jobs (one creation time, so newest first is by id among them):
/// a status held by a few jobs (running, scheduled, failure, canceled) is found by an index or
/// among the queue's rows, not by a walk over every job for its computed status; the waiting jobs
/// are paged in order; a page without a status joins the queue and completion rows to its own jobs
/// only, each with its status.
#[test]
fn jobs_finds_a_rare_status_by_index_and_pages_a_batch_in_order() {
    use crate::support::plans::{buffers, explain_listing, fill, nodes};
    use postgres::types::ToSql;
    use wf::queue::inspect::Filter;
    use wf::queue::job::JobStatus;

    let env = TestEnv::new();
    fill(&env, 20_000, &["default"], "0", "now()");
    // In id order: 3 running, 4 failures, 2 canceled, 15,000 successes, 5 scheduled, the rest
    // queued.
    env.db()
        .batch_execute(
            "CREATE TABLE planned AS
                 SELECT id, CASE WHEN n <= 3 THEN 'running' WHEN n <= 7 THEN 'failure' WHEN n <= 9 THEN 'canceled'
                                 WHEN n <= 15009 THEN 'success' WHEN n <= 15014 THEN 'scheduled'
                                 ELSE 'queued' END AS status
                   FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM job) ordered;
             UPDATE job_queue q SET running = true, worker = 'w#1.1', started_at = now(), ping = now()
               FROM planned p WHERE p.id = q.job_id AND p.status = 'running';
             UPDATE job_queue q SET scheduled_for = now() + interval '1 hour'
               FROM planned p WHERE p.id = q.job_id AND p.status = 'scheduled';
             INSERT INTO job_completed (job_id, status, worker, started_at)
                 SELECT id, status, 'w#1.1', now() FROM planned WHERE status IN ('failure', 'canceled', 'success');
             DELETE FROM job_queue q USING planned p
              WHERE p.id = q.job_id AND p.status IN ('failure', 'canceled', 'success');
             ANALYZE job; ANALYZE job_queue; ANALYZE job_completed;",
        )
        .unwrap();
    let ids = |listed: &Value| -> Vec<String> {
        listed.as_array().unwrap().iter().map(|job| job["id"].as_str().unwrap().to_string()).collect()
    };
    let planned = |sql: &str, params: &[&(dyn ToSql + Sync)]| -> Vec<String> {
        env.db().query(sql, params).unwrap().iter().map(|row| row.get(0)).collect()
    };

    let queue_pages: i64 = env.db().query_one("SELECT pg_relation_size('job_queue') / 8192", &[]).unwrap().get(0);
    // The statement as `wf jobs` runs it: its buffers in all, and those of `job` (its scans'
    // and its index's).
    let explained = |status: JobStatus| -> (i64, i64, Value) {
        let plan = explain_listing(&env, &Filter { status: Some(status), ..Filter::default() });
        let root = &plan[0]["Plan"];
        let of_jobs = nodes(root)
            .into_iter()
            .filter(|node| node["Relation Name"] == "job" && node.get("Plans").is_none())
            .map(buffers)
            .sum();
        (buffers(root), of_jobs, plan)
    };
    for status in [JobStatus::Running, JobStatus::Scheduled, JobStatus::Failure, JobStatus::Canceled] {
        let listed = ids(&env.wf(["jobs", "--status", status.as_str(), "--json"]).ok().json());
        let expected = planned(
            "SELECT j.id::text FROM job j JOIN planned p ON p.id = j.id WHERE p.status = $1
              ORDER BY j.created_at DESC, j.id",
            &[&status.as_str()],
        );
        assert!(!expected.is_empty());
        assert_eq!(listed, expected, "wf jobs --status {}", status.as_str());

        // 18 to 41 buffers by the indexes here, and a status of the queue may read the queue's
        // pages besides (228 here: a queue not vacuumed since 15,000 of its rows went); a walk
        // over the batch, or over its 15,000 completions, touched 187 to 733.
        let (touched, _, plan) = explained(status);
        let bound = if status.is_finished() { 100 } else { 100 + queue_pages };
        assert!(touched < bound, "wf jobs --status {}: {touched} buffers\n{plan:#}", status.as_str());
    }
    // The 4,986 queued jobs: the page is sorted out of the queue's rows by the creation time each
    // keeps (migration 16), and only its jobs are read; joined to their jobs first, the queued
    // rows took 391 buffers of `job` (the whole table), the page alone 63. In all: the queue's
    // pages, and the page's 21 jobs looked up in job, job_queue and job_completed (3 buffers each).
    let (touched, of_jobs, plan) = explained(JobStatus::Queued);
    assert!(of_jobs < 100, "wf jobs --status queued: {of_jobs} buffers of job\n{plan:#}");
    assert!(touched < 250 + queue_pages, "wf jobs --status queued: {touched} buffers\n{plan:#}");

    // Pages of the batch's queued jobs, then of the batch without a status: in order, each job
    // with its own status.
    let queued_pages = || {
        for page in ["1", "2"] {
            let listed =
                ids(&env.wf(["jobs", "--status", "queued", "--limit", "6", "--page", page, "--json"]).ok().json());
            let offset: i64 = if page == "1" { 0 } else { 6 };
            let expected = planned(
                "SELECT j.id::text FROM job j JOIN planned p ON p.id = j.id WHERE p.status = 'queued'
                  ORDER BY j.created_at DESC, j.id LIMIT 6 OFFSET $1",
                &[&offset],
            );
            assert_eq!(listed, expected, "wf jobs --status queued --page {page}");
            // A filter on the job's own columns looks the queue rows' jobs up: the same page when
            // all match, none when none does.
            let filtered = |flag: &str, value: &str| -> Vec<String> {
                let args = ["jobs", "--status", "queued", flag, value, "--limit", "6", "--page", page, "--json"];
                ids(&env.wf(args).ok().json())
            };
            assert_eq!(filtered("--app", "a"), expected);
            assert_eq!(filtered("--action", "b"), expected);
            assert_eq!(filtered("--app", "other"), Vec::<String>::new());
        }
    };
    queued_pages();
    // Queue rows enqueued before migration 16 have no creation time of their own: with every
    // other queued job made so, the pages are the same, the jobs of both kinds in one order.
    env.db()
        .batch_execute(
            "UPDATE job_queue SET created_at = NULL
              WHERE job_id IN (SELECT id FROM (SELECT id, row_number() OVER (ORDER BY id) AS n
                                                 FROM planned WHERE status = 'queued') queued
                                WHERE n % 2 = 0)",
        )
        .unwrap();
    queued_pages();
    for page in ["1", "2"] {
        let listed = env.wf(["jobs", "--limit", "6", "--page", page, "--json"]).ok().json();
        let offset: i64 = if page == "1" { 0 } else { 6 };
        let expected = planned(
            "SELECT p.id::text || ' ' || p.status FROM job j JOIN planned p ON p.id = j.id
              ORDER BY j.created_at DESC, j.id LIMIT 6 OFFSET $1",
            &[&offset],
        );
        let got: Vec<String> = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|job| format!("{} {}", job["id"].as_str().unwrap(), job["status"].as_str().unwrap()))
            .collect();
        assert_eq!(got, expected, "wf jobs --page {page}");
    }
}

/// A filter naming an app or action the catalog does not have (a typo, most likely) matched nothing
/// silently, where `wf enqueue` suggests the closest names: listing and bulk cancel now say so.
#[test]
fn a_filter_of_no_such_app_or_action_says_so_with_the_closest_names() {
    let env = TestEnv::new();
    synced(&env);
    for (args, said) in [
        (&["jobs", "--app", "otherr"][..], "no jobs; the catalog has no app otherr (did you mean other?)"),
        (&["jobs", "--action", "t/ecoh"], "no jobs; the catalog has no action t/ecoh (did you mean t/echo?)"),
        (&["jobs", "--action", "ecoh"], "no jobs; the catalog has no action ecoh (did you mean echo?)"),
        (&["jobs", "--app", "zzzzzzzz"], "no jobs; the catalog has no app zzzzzzzz\n"),
        (
            &["cancel", "--action", "t/ecoh", "--yes"],
            "no waiting or running job of app t, action ecoh; the catalog has no action t/ecoh (did you mean t/echo?)",
        ),
        (&["jobs", "--app", "t"], "no jobs\n"),
    ] {
        let run = env.wf(args).ok();
        assert!(run.stderr.contains(said), "{args:?}: {}", run.stderr);
    }
}

/// A listing by a schedule there is not, or a listing or bulk cancel by a tag no action in the
/// catalog has and no job has had, said only that no job matched: they say so too, with the closest
/// names (of the schedules; of the catalog's tags).
#[test]
fn a_filter_of_no_such_schedule_or_tag_says_so() {
    let env = TestEnv::new();
    synced(&env);
    env.wf(["schedule", "add", "nightly", "t/echo", "--cron", "0 2 1 1 *"]).ok();
    env.wf(["enqueue", "t/echo", "--tag", "gpu"]).ok();
    for (args, said) in [
        (&["jobs", "--schedule", "nightlly"][..], "no jobs; there is no schedule nightlly (did you mean nightly?)"),
        (&["jobs", "--schedule", "zzzzzzzz"], "no jobs; there is no schedule zzzzzzzz\n"),
        (&["jobs", "--schedule", "nightly"], "no jobs\n"),
        (
            &["jobs", "--tag", "defualt"],
            "no jobs; no action in the catalog has the tag defualt, nor any job (did you mean default?)",
        ),
        (
            &["cancel", "--tag", "defualt", "--yes"],
            "no waiting or running job of tag defualt; no action in the catalog has the tag defualt, nor any job \
             (did you mean default?)",
        ),
        (
            &["cancel", "--tag", "gpuu", "--yes"],
            "no waiting or running job of tag gpuu; no action in the catalog has the tag gpuu, nor any job\n",
        ),
        // A tag a job has, or an action of the catalog: no hint.
        (
            &["cancel", "--tag", "gpu", "--status", "running", "--yes"],
            "no waiting or running job of tag gpu, status running\n",
        ),
        (&["cancel", "--tag", "default", "--yes"], "no waiting or running job of tag default\n"),
    ] {
        let run = env.wf(args).ok();
        assert!(run.stderr.contains(said), "{args:?}: {}", run.stderr);
    }
    // An empty value (a variable left unset, most often) is a usage error, not a filter matching
    // nothing: before, it said "no jobs; there is no schedule " and the like.
    for option in ["--app", "--action", "--tag", "--schedule"] {
        let run = env.wf(["jobs", option, ""]).run().expect_code(2);
        assert!(run.stderr.contains("an empty value matches nothing"), "{option}: {}", run.stderr);
    }
    for option in ["--app", "--action", "--tag"] {
        let run = env.wf(["cancel", option, " ", "--yes"]).run().expect_code(2);
        assert!(run.stderr.contains("an empty value matches nothing"), "{option}: {}", run.stderr);
    }
}
