//! windforce.json(5): the manifest's manual page. Its fields come from the manifest's JSON Schema
//! (`src/source/windforce.schema.json`, the one description of every field), its example is
//! `examples/windforce.json`; the action contract around them is written here.

use serde_json::Value;

use crate::source::manifest::MANIFEST_SCHEMA;

const EXAMPLE: &str = include_str!("../../../examples/windforce.json");

/// The page, in roff.
pub(super) fn render(source: &str) -> String {
    let schema: Value = serde_json::from_str(MANIFEST_SCHEMA).expect("windforce.schema.json is JSON");
    let defs = &schema["$defs"];
    let mut page = Roff::default();
    page.raw(&format!(".TH windforce.json 5 \"\" \"{}\"", escape(source)));
    page.section("NAME");
    page.raw("windforce.json \\- the manifest of a windforce source: its apps, actions and their settings");
    page.section("SYNOPSIS");
    page.para("`windforce.json` at the root of a git repository registered with `wf source add`.");
    page.section("DESCRIPTION");
    page.para(
        "The manifest lists a source's apps and their actions: for each action, the module bun runs for its \
         jobs, what its input and result must be, how long it may run, which workers take its jobs (its tag), \
         what its sandbox allows and whether a failure is retried.",
    );
    page.para(
        "`wf sync` reads the manifest from the commit it syncs (never from a work tree), checks it and every \
         file it names, and changes nothing when any problem is found: all of them are reported at once, each \
         with the key it is about. Keys of apps and actions match ^[a-z0-9][a-z0-9_-]{0,62}$. Paths are \
         relative to the repository root and may not leave it (no absolute path, no `..`, no symlink, no \
         submodule).",
    );
    page.section("FIELDS");
    page.subsection("The manifest");
    fields(&mut page, &schema, defs);
    page.subsection("An app: apps.APP");
    fields(&mut page, &defs["app"], defs);
    page.subsection("An action: apps.APP.actions.ACTION");
    fields(&mut page, &defs["action"], defs);
    page.para(
        "An app's `tag`, `network`, `memory_mb`, `max_processes` and `retries` are the defaults of its \
         actions; an action's own value wins. Every job pins its action's settings when it is enqueued: a \
         later sync does not change a job already queued or running.",
    );
    contract(&mut page);
    page.section("EXAMPLE");
    page.example(EXAMPLE);
    page.para("with `demo/greet.ts`:");
    page.example(
        "export function main(input: { name: string }) {\n  console.log(`greeting ${input.name}`);\n  \
         return { greeting: `hello, ${input.name}` };\n}\n",
    );
    page.section("SEE ALSO");
    page.raw(
        "\\fBwf\\fR(1), \\fBwf\\-sync\\fR(1), \\fBwf\\-enqueue\\fR(1), \\fBwf\\-work\\fR(1), \\fBwf\\-logs\\fR(1)",
    );
    page.text
}

/// What an action may rely on, and what it must do.
fn contract(page: &mut Roff) {
    page.section("THE ACTION CONTRACT");
    page.para(
        "An action's entrypoint is a module that exports a function `main(input)`, sync or async. For each \
         job, a worker runs it with bun: it imports the module, calls `main` with the job's input (the JSON \
         value given to `wf enqueue --input`, `{}` when none was given) and awaits it.",
    );
    page.subsection("Result");
    page.para(
        "What `main` returns (or its promise resolves to) is the job's result, as JSON: `undefined` is \
         `null`, a value JSON cannot encode (a BigInt, a cycle) fails the job. The result must match the \
         action's `output_schema` (else the job fails with `OutputSchemaError`) and be at most 1 MiB \
         (`ResultTooLarge`). `wf result ID` prints it. Printing to stdout never makes a result.",
    );
    page.subsection("Errors");
    page.para(
        "A throw, a rejected promise, an uncaught exception or an unhandled rejection fails the job with the \
         error `{\"name\",\"message\",\"stack\"}` of what was thrown (a thrown string or object is its \
         message); the stack leaves out wf's own frames. A module that does not build (a TypeScript or \
         JavaScript syntax error) or imports what cannot be found fails with bun's messages: each one's \
         file, line, column and text in the message, the source line and a caret in the stack. The error is \
         also appended to the job's logs. `wf result ID` prints it and exits 4.",
    );
    page.para(
        "wf's own diagnoses: `Timeout` (ran longer than `timeout`; its processes were killed), `ProcessError` \
         (bun ended without a result: `process.exit`, a crash, a signal), `MemoryLimit`, `ProcessLimit`, \
         `ResultTooLarge`, `ResultUnreadable`, `OutputSchemaError`, `SourceNotMaterialized` (the commit is \
         not complete in the worker's store), `StartError`, `CompletionError` (the database refused the \
         outcome) and `RestartLimitExceeded` (its workers kept dying).",
    );
    page.subsection("Logs");
    page.para(
        "Whatever the action's processes write to stdout and stderr is stored with the job, line by line, per \
         attempt (`wf logs ID`, `--follow` while it runs): 1 MiB (each line counted with its newline) or \
         50,000 lines per attempt, whichever comes first, then one truncation line (why the attempt failed \
         still follows it); a line longer than 64 KiB is cut into pieces; NUL and invalid UTF-8 show as U+FFFD. Each stream keeps \
         its order; lines of stdout and stderr are stored in the order the worker reads them, so two written \
         within the same instant to the two streams may swap.",
    );
    page.subsection("Environment");
    page.para(
        "Exactly: `WF_JOB_ID`, `WF_TOKEN` (a signed token naming the job and this attempt, valid while the \
         attempt runs: `wf token verify`), `WF_APP`, `WF_ACTION`, `WF_COMMIT_SHA`, `WF_TRIGGER_KIND` \
         (manual, api, webhook or schedule), `WF_SCHEDULED_FOR` (RFC 3339), `WF_ATTEMPT` (1 for the first \
         run, one more for each run after a worker died or shut down), and `PATH`, `HOME` and `TZ`. Nothing \
         else of the worker's environment: an action that needs a secret reads it from a file the operator \
         provides.",
    );
    page.subsection("What an action can do");
    page.para(
        "By default every attempt runs in a sandbox of its own: its own processes only (it may start \
         children, up to `max_processes`; all are killed when the attempt ends), an unprivileged user, the \
         system's /usr read-only, the pinned commit read-only at /wf/source (relative imports work as in the \
         repository), a fresh empty working directory and a private /tmp (`HOME`), both removed afterwards, \
         the network unless `\"network\": false`, memory up to `memory_mb`. Folders the worker was given with \
         `wf work --allow-write` are writable at their own path. wf installs no package: what the action \
         imports must be in the repository. With `wf work --isolation none` the action runs as the worker's \
         user on its file system, with a clean environment and no limits.",
    );
    page.subsection("Warm actions");
    page.para(
        "With `\"warm\": true`, each slot of a worker keeps one bun process (in its sandbox) for the action \
         and its pinned commit, and runs the action's jobs in it one after another: the module is imported \
         once, and a job costs no process start. What a job leaves in the module (variables, caches, open \
         connections, timers) and in /tmp is there for the next job of that runner; only jobs of the same \
         action, commit and sandbox settings share a runner. Each job still gets its own input, its own \
         `WF_` variables in `process.env`, an emptied working directory, its own logs and result. The \
         memory and process limits hold for the runner as a whole. A timeout, a cancel, `process.exit`, a \
         crash or a limit ends the runner with its job; the next job starts a fresh one. A throw only fails \
         its job. Output written after a job settled (a stray timer) goes to the log of the runner's next \
         job; an uncaught error (a timer's that throws) fails the job running at that moment, and a \
         `main` that settles after its job was ended so is ignored. A runner's processes carry `WF_APP`, `WF_ACTION` and `WF_COMMIT_SHA` in their environment, \
         not the variables of the job they run. The sandbox keeps a runner from everything else, not the \
         jobs of one warm action from each other: make an action warm only when its jobs may trust each \
         other.",
    );
    page.subsection("Runs more than once");
    page.para(
        "A job runs once on the normal path. It runs again when its worker died (at least once: the reaper \
         puts it back), when its worker shut down before it finished, or as a retry of a failure when the \
         action sets `retries`. Make effects idempotent, keyed by `WF_JOB_ID`.",
    );
}

/// The fields of a schema node, one paragraph each: name, kind, description.
fn fields(page: &mut Roff, node: &Value, defs: &Value) {
    let required: Vec<&str> = node["required"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    for (name, field) in node["properties"].as_object().into_iter().flatten() {
        let target = resolve(field, defs);
        let description = field["description"].as_str().or_else(|| target["description"].as_str()).unwrap_or_default();
        let mut kind = kind_of(target);
        if required.contains(&name.as_str()) {
            kind.push_str(", required");
        }
        page.item(&format!("`{name}` ({kind})"), description);
    }
}

/// The node a `$ref` to `#/$defs/...` names, or the node itself.
fn resolve<'a>(node: &'a Value, defs: &'a Value) -> &'a Value {
    match node["$ref"].as_str().and_then(|reference| reference.strip_prefix("#/$defs/")) {
        Some(name) => &defs[name],
        None => node,
    }
}

/// A field's kind as the schema says it: its types, range, pattern or properties.
fn kind_of(node: &Value) -> String {
    let types: Vec<&str> = match &node["type"] {
        Value::String(one) => vec![one.as_str()],
        Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let mut kind = types.join(" or ");
    match (node["minimum"].as_i64(), node["maximum"].as_i64()) {
        (Some(min), Some(max)) => kind.push_str(&format!(" from {min} to {max}")),
        (Some(min), None) => kind.push_str(&format!(" from {min}")),
        _ => {}
    }
    if let Some(pattern) = node["pattern"].as_str() {
        kind.push_str(&format!(" matching {pattern}"));
    }
    if types == ["object"]
        && let Some(properties) = node["properties"].as_object()
    {
        let names: Vec<&str> = properties.keys().map(String::as_str).collect();
        kind.push_str(&format!(" with {}", names.join(", ")));
    }
    kind
}

/// A roff page being written.
#[derive(Default)]
struct Roff {
    text: String,
}

impl Roff {
    fn raw(&mut self, line: &str) {
        self.text.push_str(line);
        self.text.push('\n');
    }

    fn section(&mut self, title: &str) {
        self.raw(&format!(".SH \"{title}\""));
    }

    fn subsection(&mut self, title: &str) {
        self.raw(&format!(".SS \"{}\"", escape(title)));
    }

    fn para(&mut self, text: &str) {
        self.raw(".PP");
        self.raw(&inline(text));
    }

    fn item(&mut self, term: &str, text: &str) {
        self.raw(".TP");
        self.raw(&inline(term));
        self.raw(&inline(text));
    }

    /// Lines as they are, in a fixed-width block.
    fn example(&mut self, text: &str) {
        self.raw(".PP");
        self.raw(".nf");
        self.raw(".RS 4");
        for line in text.lines() {
            self.raw(&format!("\\&{}", escape(line)));
        }
        self.raw(".RE");
        self.raw(".fi");
    }
}

/// Text with `code` in bold, escaped for roff; never starting with a control character.
fn inline(text: &str) -> String {
    let mut line = String::from("\\&");
    for (n, piece) in text.split('`').enumerate() {
        if n % 2 == 1 {
            line.push_str(&format!("\\fB{}\\fR", escape(piece)));
        } else {
            line.push_str(&escape(piece));
        }
    }
    line
}

fn escape(text: &str) -> String {
    text.replace('\\', "\\e").replace('-', "\\-")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field the schema knows is on the page, and no line starts a roff request by accident.
    #[test]
    fn the_page_lists_every_field_of_the_schema() {
        let page = render("wf 0");
        let schema: Value = serde_json::from_str(MANIFEST_SCHEMA).unwrap();
        for node in [&schema, &schema["$defs"]["app"], &schema["$defs"]["action"]] {
            for name in node["properties"].as_object().unwrap().keys() {
                assert!(page.contains(&format!("\\fB{}\\fR (", escape(name))), "{name} is on the page");
            }
        }
        for line in page.lines() {
            assert!(!line.starts_with('\'') && !line.starts_with(". "), "{line}");
        }
    }
}
