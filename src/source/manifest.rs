//! `windforce.json` and its schemas, read from a commit's tree (never from a work tree) and
//! validated as a whole: every problem is collected, each naming the file and the JSON key, so one
//! sync shows everything there is to fix.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use git2::{Oid, Repository, Tree};
use serde_json::{Map, Value};

use super::store::MARKER;
use super::{KEY_PATTERN, is_valid_key};

/// The manifest's name, at the repository root.
pub(crate) const MANIFEST: &str = "windforce.json";
/// Timeout of an action that does not set one, in seconds.
pub(crate) const DEFAULT_TIMEOUT_S: i32 = 300;
/// The tag of an action when neither it nor its app sets one.
pub(crate) const DEFAULT_TAG: &str = "default";
/// Entrypoints bun runs as modules.
const ENTRYPOINT_EXTENSIONS: [&str; 3] = [".ts", ".js", ".mjs"];

const TOP_FIELDS: [&str; 1] = ["apps"];
const APP_FIELDS: [&str; 5] = ["tag", "actions", "network", "memory_mb", "max_processes"];
const ACTION_FIELDS: [&str; 8] =
    ["entrypoint", "input_schema", "output_schema", "timeout", "tag", "network", "memory_mb", "max_processes"];
/// Upper bounds of the sandbox limits: far above any real need, low enough to catch a typo.
const MAX_MEMORY_MB: u64 = 1 << 20;
const MAX_PROCESSES: u64 = 1 << 16;

// Git tree entry modes.
const MODE_TREE: i32 = 0o040000;
const MODE_LINK: i32 = 0o120000;
const MODE_SUBMODULE: i32 = 0o160000;

/// A validated manifest: apps and actions in key order, schemas loaded, tags resolved.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Manifest {
    pub apps: Vec<App>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct App {
    pub key: String,
    pub tag: Option<String>,
    pub actions: Vec<Action>,
}

/// How an action's sandbox is set up (an app's settings are its actions' defaults). None: the
/// worker's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Sandbox {
    pub network: Option<bool>,
    pub memory_mb: Option<i32>,
    pub max_processes: Option<i32>,
}

impl Sandbox {
    fn or(self, app: Sandbox) -> Sandbox {
        Sandbox {
            network: self.network.or(app.network),
            memory_mb: self.memory_mb.or(app.memory_mb),
            max_processes: self.max_processes.or(app.max_processes),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Action {
    pub key: String,
    /// Relative to the repository root, normalized (no `.` or empty components).
    pub entrypoint: String,
    /// None: anything goes.
    pub input_schema: Option<Value>,
    pub output_schema: Option<Value>,
    pub timeout_s: i32,
    /// The effective tag: the action's, else the app's, else `default`.
    pub tag: String,
    /// The action's own settings, else its app's.
    pub sandbox: Sandbox,
}

/// Every problem found in a manifest, one line each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invalid {
    pub problems: Vec<String>,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.problems.len();
        write!(f, "{count} problem{}: {}", if count == 1 { "" } else { "s" }, self.problems.join("; "))
    }
}

impl std::error::Error for Invalid {}

/// Read and validate the manifest of the commit whose tree is `root`. `taken`: apps that belong to
/// other sources (app key -> source name), which this manifest may not declare.
pub(crate) fn read(repo: &Repository, root: &Tree, taken: &BTreeMap<String, String>) -> Result<Manifest, Invalid> {
    let mut reader = Reader { repo, root, taken, problems: Vec::new() };
    let manifest = reader.manifest();
    match manifest {
        Some(manifest) if reader.problems.is_empty() => Ok(manifest),
        _ => Err(Invalid { problems: reader.problems }),
    }
}

struct Reader<'r> {
    repo: &'r Repository,
    root: &'r Tree<'r>,
    taken: &'r BTreeMap<String, String>,
    problems: Vec<String>,
}

impl Reader<'_> {
    fn problem(&mut self, path: &str, message: impl fmt::Display) {
        if path.is_empty() {
            self.problems.push(format!("{MANIFEST}: {message}"));
        } else {
            self.problems.push(format!("{MANIFEST}: {path}: {message}"));
        }
    }

    fn manifest(&mut self) -> Option<Manifest> {
        if self.root.get_name(MARKER).is_some() {
            self.problems.push(format!(
                "{MARKER}: this name is reserved for the store's completion marker; remove it from the repository"
            ));
        }
        let (_, oid) = match lookup_blob(self.repo, self.root, MANIFEST) {
            Ok(found) => found,
            Err(reason) => {
                self.problems.push(format!(
                    "{MANIFEST}: {reason}; add one at the repository root (see examples/windforce.json)"
                ));
                return None;
            }
        };
        let value: Value = match self.blob_json(oid) {
            Ok(value) => value,
            Err(reason) => {
                self.problem("", reason);
                return None;
            }
        };
        let Value::Object(top) = value else {
            self.problem("", "must be a JSON object with an `apps` object");
            return None;
        };
        self.unknown_fields("", &top, &TOP_FIELDS);
        let Some(apps) = top.get("apps") else {
            self.problem("apps", "missing; the manifest lists its apps under `apps`");
            return None;
        };
        let Value::Object(apps) = apps else {
            self.problem("apps", "must be an object of apps by key");
            return None;
        };
        let apps = apps.iter().filter_map(|(key, value)| self.app(key, value)).collect();
        Some(Manifest { apps })
    }

    fn app(&mut self, key: &str, value: &Value) -> Option<App> {
        let path = join("apps", key);
        let key_ok = is_valid_key(key);
        if !key_ok {
            self.problem(&path, format_args!("app key must match {KEY_PATTERN}"));
        }
        if let Some(owner) = self.taken.get(key) {
            let message = format!(
                "the app {key} belongs to source {owner}; an app belongs to one source: rename it here, \
                 or remove it from {owner} (or `wf source rm {owner}`)"
            );
            self.problem(&path, message);
        }
        let Value::Object(fields) = value else {
            self.problem(&path, "must be an object with `actions`");
            return None;
        };
        self.unknown_fields(&path, fields, &APP_FIELDS);
        let tag = self.tag(&path, fields);
        let sandbox = self.sandbox(&path, fields);
        let actions_path = format!("{path}.actions");
        let actions = match fields.get("actions") {
            Some(Value::Object(actions)) => actions,
            Some(_) => {
                self.problem(&actions_path, "must be an object of actions by key");
                return None;
            }
            None => {
                self.problem(&actions_path, "missing; an app lists its actions under `actions`");
                return None;
            }
        };
        let actions: Vec<Action> = actions
            .iter()
            .filter_map(|(action_key, value)| self.action(&actions_path, action_key, value, tag.as_deref(), sandbox))
            .collect();
        key_ok.then(|| App { key: key.to_string(), tag, actions })
    }

    fn action(
        &mut self,
        parent: &str,
        key: &str,
        value: &Value,
        app_tag: Option<&str>,
        app_sandbox: Sandbox,
    ) -> Option<Action> {
        let path = join(parent, key);
        let key_ok = is_valid_key(key);
        if !key_ok {
            self.problem(&path, format_args!("action key must match {KEY_PATTERN}"));
        }
        let Value::Object(fields) = value else {
            self.problem(&path, "must be an object with an `entrypoint`");
            return None;
        };
        self.unknown_fields(&path, fields, &ACTION_FIELDS);
        let entrypoint = self.entrypoint(&path, fields);
        let input_schema = self.schema(&path, fields, "input_schema");
        let output_schema = self.schema(&path, fields, "output_schema");
        let timeout_s = self.timeout(&path, fields);
        let tag = self.tag(&path, fields);
        let tag = tag.or(app_tag.map(str::to_string)).unwrap_or_else(|| DEFAULT_TAG.to_string());
        let sandbox = self.sandbox(&path, fields).or(app_sandbox);
        if !key_ok {
            return None;
        }
        Some(Action {
            key: key.to_string(),
            entrypoint: entrypoint?,
            input_schema: input_schema?,
            output_schema: output_schema?,
            timeout_s: timeout_s?,
            tag,
            sandbox,
        })
    }

    /// `network`, `memory_mb` and `max_processes`, where given (problems recorded, values dropped).
    fn sandbox(&mut self, path: &str, fields: &Map<String, Value>) -> Sandbox {
        let network = match fields.get("network") {
            None => None,
            Some(Value::Bool(network)) => Some(*network),
            Some(other) => {
                self.problem(&format!("{path}.network"), format_args!("must be true or false, not {other}"));
                None
            }
        };
        Sandbox {
            network,
            memory_mb: self.bounded(path, fields, "memory_mb", MAX_MEMORY_MB, "MiB"),
            max_processes: self.bounded(path, fields, "max_processes", MAX_PROCESSES, "processes"),
        }
    }

    fn bounded(&mut self, path: &str, fields: &Map<String, Value>, name: &str, max: u64, unit: &str) -> Option<i32> {
        let value = fields.get(name)?;
        match value.as_u64().filter(|&n| (1..=max).contains(&n)) {
            Some(n) => i32::try_from(n).ok(),
            None => {
                self.problem(
                    &format!("{path}.{name}"),
                    format_args!("must be a whole number of {unit} from 1 to {max}, not {value}"),
                );
                None
            }
        }
    }

    fn unknown_fields(&mut self, path: &str, fields: &Map<String, Value>, known: &[&str]) {
        let unknown: BTreeSet<&str> = fields.keys().map(String::as_str).filter(|name| !known.contains(name)).collect();
        if !unknown.is_empty() {
            let names: Vec<String> = unknown.iter().map(|name| format!("`{name}`")).collect();
            let plural = if unknown.len() == 1 { "" } else { "s" };
            self.problem(
                path,
                format_args!("unknown field{plural} {} (known: {})", names.join(", "), known.join(", ")),
            );
        }
    }

    fn entrypoint(&mut self, path: &str, fields: &Map<String, Value>) -> Option<String> {
        let path = format!("{path}.entrypoint");
        let file = match fields.get("entrypoint") {
            Some(Value::String(file)) => file,
            Some(_) => {
                self.problem(&path, "must be the path of a .ts, .js or .mjs file in the repository");
                return None;
            }
            None => {
                self.problem(&path, "missing; give the path of the action's .ts, .js or .mjs file");
                return None;
            }
        };
        if !ENTRYPOINT_EXTENSIONS.iter().any(|ext| file.ends_with(ext)) {
            self.problem(&path, format_args!("{file:?} must end in .ts, .js or .mjs"));
            return None;
        }
        match lookup_blob(self.repo, self.root, file) {
            Ok((normalized, _)) => Some(normalized),
            Err(reason) => {
                self.problem(&path, reason);
                None
            }
        }
    }

    /// Some(None): no schema (anything goes). None: a problem was recorded.
    fn schema(&mut self, path: &str, fields: &Map<String, Value>, name: &str) -> Option<Option<Value>> {
        let path = format!("{path}.{name}");
        let (schema, place) = match fields.get(name) {
            None => return Some(None),
            Some(Value::Object(_)) => (fields[name].clone(), path.clone()),
            Some(Value::String(file)) => {
                let place = format!("{path}: {file}");
                let oid = match lookup_blob(self.repo, self.root, file) {
                    Ok((_, oid)) => oid,
                    Err(reason) => {
                        self.problem(&path, format_args!("schema file {reason}"));
                        return None;
                    }
                };
                match self.blob_json(oid) {
                    Ok(schema) => (schema, place),
                    Err(reason) => {
                        self.problem(&place, reason);
                        return None;
                    }
                }
            }
            Some(_) => {
                self.problem(&path, "must be a JSON Schema object or the path of a JSON file in the repository");
                return None;
            }
        };
        if !schema.is_object() {
            self.problem(&place, "must be a JSON Schema object");
            return None;
        }
        if let Err(error) = jsonschema::meta::validate(&schema) {
            let at = error.instance_path().to_string();
            let at = if at.is_empty() { String::new() } else { format!(" at {at}") };
            self.problem(&place, format_args!("not a valid JSON Schema: {error}{at}"));
            return None;
        }
        if let Err(error) = jsonschema::validator_for(&schema) {
            self.problem(&place, format_args!("cannot be used as a JSON Schema: {error}"));
            return None;
        }
        Some(Some(schema))
    }

    fn timeout(&mut self, path: &str, fields: &Map<String, Value>) -> Option<i32> {
        let path = format!("{path}.timeout");
        match fields.get("timeout") {
            None => Some(DEFAULT_TIMEOUT_S),
            Some(value) => match value.as_u64().filter(|&s| s > 0).map(i32::try_from) {
                Some(Ok(seconds)) => Some(seconds),
                Some(Err(_)) => {
                    self.problem(&path, format_args!("must be at most {} seconds", i32::MAX));
                    None
                }
                None => {
                    self.problem(&path, format_args!("must be a positive integer (seconds), not {value}"));
                    None
                }
            },
        }
    }

    /// An optional `tag`: a valid tag, or None (absent, or a problem recorded).
    fn tag(&mut self, path: &str, fields: &Map<String, Value>) -> Option<String> {
        let path = format!("{path}.tag");
        match fields.get("tag") {
            None => None,
            Some(Value::String(tag)) if is_valid_key(tag) => Some(tag.clone()),
            Some(_) => {
                self.problem(&path, format_args!("must be a string matching {KEY_PATTERN}"));
                None
            }
        }
    }

    fn blob_json(&self, oid: Oid) -> Result<Value, String> {
        let blob = self.repo.find_blob(oid).map_err(|e| format!("cannot be read: {e}"))?;
        serde_json::from_slice(blob.content()).map_err(|e| format!("not valid JSON: {e}"))
    }
}

/// Find the regular file at `path` in `root`, refusing every way out of the repository: absolute
/// paths, `..`, and symlinks anywhere along the way (a symlink's target is only text, which could
/// point anywhere once materialized). Returns the normalized path and the blob id.
pub(crate) fn lookup_blob(repo: &Repository, root: &Tree, path: &str) -> Result<(String, Oid), String> {
    if path.starts_with('/') {
        return Err(format!("{path:?} is absolute; use a path relative to the repository root"));
    }
    // No file name holds one, and git2 cannot even look it up (it would panic).
    if path.contains('\0') {
        return Err(format!("{path:?} contains a NUL byte; no file in a repository has one"));
    }
    let parts: Vec<&str> = path.split('/').filter(|part| !part.is_empty() && *part != ".").collect();
    if parts.contains(&"..") {
        return Err(format!("{path:?} contains `..`; paths must stay inside the repository"));
    }
    let Some((file, dirs)) = parts.split_last() else {
        return Err(format!("{path:?} does not name a file"));
    };
    let mut tree = root.clone();
    for (index, part) in dirs.iter().enumerate() {
        let so_far = parts[..=index].join("/");
        let (mode, id) = entry_of(&tree, part, path)?;
        tree = match mode {
            MODE_TREE => repo.find_tree(id).map_err(|e| format!("{so_far:?} cannot be read: {e}"))?,
            MODE_LINK => {
                return Err(format!(
                    "{path:?} passes through the symlink {so_far:?}; paths must not go through symlinks"
                ));
            }
            MODE_SUBMODULE => {
                return Err(format!(
                    "{path:?} is inside the submodule {so_far:?}, which is not part of this repository"
                ));
            }
            _ => return Err(format!("{path:?}: {so_far:?} is a file, not a directory")),
        };
    }
    let (mode, id) = entry_of(&tree, file, path)?;
    match mode {
        MODE_LINK => Err(format!("{path:?} is a symlink; name the file itself")),
        MODE_SUBMODULE => Err(format!("{path:?} is a submodule, not a file")),
        MODE_TREE => Err(format!("{path:?} is a directory, not a file")),
        _ => Ok((parts.join("/"), id)),
    }
}

fn entry_of(tree: &Tree, name: &str, path: &str) -> Result<(i32, Oid), String> {
    match tree.get_name(name) {
        Some(entry) => Ok((entry.filemode(), entry.id())),
        None => Err(format!("{path:?} does not exist in the repository")),
    }
}

/// `parent.key`, or `parent["key"]` when the key is not a plain word (so odd keys stay readable).
fn join(parent: &str, key: &str) -> String {
    let plain = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain { format!("{parent}.{key}") } else { format!("{parent}[{}]", Value::String(key.to_string())) }
}
