//! `windforce.json` and its schemas, read from a commit's tree (never from a work tree) and
//! validated as a whole: every problem is collected, each naming the file and the JSON key, so one
//! sync shows everything there is to fix.
//!
//! The manifest's shape is `windforce.schema.json` beside this file (it doubles as the manifest's
//! documentation for action authors, and says what wf answers to each mistake). Rust checks only
//! what a schema cannot see: the files the manifest names in the commit's tree (paths, symlinks,
//! submodules, schema files, NUL bytes), the store's reserved name, and apps of other sources.
//! Then the manifest is read into types that refuse unknown fields too.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::OnceLock;

use git2::{Oid, Repository, Tree};
use jsonschema::Validator;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::store::RESERVED;
use crate::queue::enqueue::holds_nul;

/// The manifest's name, at the repository root.
pub(crate) const MANIFEST: &str = "windforce.json";
/// Timeout of an action that does not set one, in seconds.
pub(crate) const DEFAULT_TIMEOUT_S: i32 = 300;
/// The tag of an action when neither it nor its app sets one.
pub(crate) const DEFAULT_TAG: &str = "default";
/// The JSON Schema of `windforce.json`.
pub(crate) const MANIFEST_SCHEMA: &str = include_str!("windforce.schema.json");

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

/// Retries of a failed job (`"retries"`): at most `max`, the first after `backoff_s` seconds,
/// doubling up to `max_backoff_s`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Retries {
    pub max: i32,
    pub backoff_s: f64,
    pub max_backoff_s: f64,
}

/// Waits of retries when the manifest does not say.
const DEFAULT_BACKOFF: &str = "10s";
const DEFAULT_MAX_BACKOFF: &str = "10m";
/// The longest wait before a retry: a longer one is this long (a due time of many centuries ahead
/// is past what the database holds, and the failure's completion would fail with it).
const RETRY_WAIT_MAX_S: f64 = 365.0 * 24.0 * 3600.0;

impl RetriesFile {
    fn retries(&self) -> Retries {
        // The schema let through only durations humantime reads.
        let seconds = |given: &Option<String>, default: &str| {
            humantime::parse_duration(given.as_deref().unwrap_or(default).trim())
                .map_or(0.0, |d| d.as_secs_f64().min(RETRY_WAIT_MAX_S))
        };
        let backoff_s = seconds(&self.backoff, DEFAULT_BACKOFF);
        // Unsaid, the longest wait is the default's or the first's, whichever is longer: a first
        // wait of an hour is not cut to ten minutes by a default nobody wrote.
        let max_backoff_s = match &self.max_backoff {
            Some(_) => seconds(&self.max_backoff, DEFAULT_MAX_BACKOFF),
            None => seconds(&None, DEFAULT_MAX_BACKOFF).max(backoff_s),
        };
        Retries { max: self.max, backoff_s, max_backoff_s }
    }
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
    /// The action's retries, else its app's; None: a failure is final.
    pub retries: Option<Retries>,
    /// Its jobs run one after another in a bun process kept by the worker's slot.
    pub warm: bool,
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

/// `windforce.json` as written, once its schema accepted it (field names as in the schema).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestFile {
    apps: BTreeMap<String, AppFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AppFile {
    tag: Option<String>,
    actions: BTreeMap<String, ActionFile>,
    network: Option<bool>,
    #[serde(default, deserialize_with = "whole_or_none")]
    memory_mb: Option<i32>,
    #[serde(default, deserialize_with = "whole_or_none")]
    max_processes: Option<i32>,
    retries: Option<RetriesFile>,
    warm: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RetriesFile {
    #[serde(deserialize_with = "whole")]
    max: i32,
    backoff: Option<String>,
    max_backoff: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionFile {
    entrypoint: String,
    input_schema: Option<SchemaSource>,
    output_schema: Option<SchemaSource>,
    #[serde(default, deserialize_with = "whole_or_none")]
    timeout: Option<i32>,
    tag: Option<String>,
    network: Option<bool>,
    #[serde(default, deserialize_with = "whole_or_none")]
    memory_mb: Option<i32>,
    #[serde(default, deserialize_with = "whole_or_none")]
    max_processes: Option<i32>,
    retries: Option<RetriesFile>,
    warm: Option<bool>,
}

/// An integer field, as the schema accepted it: JSON Schema's integers are the numbers without a
/// fraction, written `30` or `30.0` alike (and the schema checked the range), so `30.0` is read as
/// the 30 it is rather than refused here, late, without its key and alone.
fn whole<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i32, D::Error> {
    let number = serde_json::Number::deserialize(deserializer)?;
    let exact = number.as_i64().and_then(|n| i32::try_from(n).ok());
    let written_as_float = || {
        let n = number.as_f64()?;
        (n.fract() == 0.0 && n >= f64::from(i32::MIN) && n <= f64::from(i32::MAX)).then_some(n as i32)
    };
    exact
        .or_else(written_as_float)
        .ok_or_else(|| serde::de::Error::custom(format!("{number} is not a whole number of 32 bits")))
}

/// `whole`, for an optional field (absent: `None`, by `#[serde(default)]`).
fn whole_or_none<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<i32>, D::Error> {
    whole(deserializer).map(Some)
}

/// A schema given inline, or the path of its file in the repository.
#[derive(Deserialize)]
#[serde(untagged)]
enum SchemaSource {
    Inline(Map<String, Value>),
    File(String),
}

/// What the repository checks found: each entrypoint as given and normalized, and each schema
/// file by its path.
#[derive(Default)]
struct Found {
    entrypoints: BTreeMap<String, String>,
    schema_files: BTreeMap<String, Value>,
}

/// Read and validate the manifest of the commit whose tree is `root`. `taken`: apps that belong to
/// other sources (app key -> source name), which this manifest may not declare.
pub(crate) fn read(repo: &Repository, root: &Tree, taken: &BTreeMap<String, String>) -> Result<Manifest, Invalid> {
    let mut problems = Problems::default();
    for reserved in RESERVED {
        if root.get_name(reserved).is_some() {
            problems.push(
                &[],
                format!(
                    "{reserved}: this name is reserved for the store's completion marker; remove it from the repository"
                ),
            );
        }
    }
    let value = match lookup_blob(repo, root, MANIFEST) {
        Ok((_, oid)) => match blob_json(repo, oid) {
            Ok(value) => Some(value),
            Err(reason) => {
                problems.at(&[], reason);
                None
            }
        },
        Err(reason) => {
            problems.at(&[], format_args!("{reason}; add one at the repository root (windforce.json(5) describes it)"));
            None
        }
    };
    let Some(value) = value else { return Err(problems.into_invalid()) };

    let refused = problems.schema(&value);
    problems.nul(&mut Vec::new(), &value);
    let mut found = Found::default();
    for (app_key, app) in value.get("apps").and_then(Value::as_object).into_iter().flatten() {
        if let Some(owner) = taken.get(app_key) {
            let message = format!(
                "the app {app_key} belongs to source {owner}; an app belongs to one source: rename it here, \
                 or remove it from {owner} (or `wf source rm {owner}`)"
            );
            problems.at(&["apps", app_key], message);
        }
        let actions = app.get("actions").and_then(Value::as_object).into_iter().flatten();
        for (action_key, action) in actions {
            let at = ["apps", app_key.as_str(), "actions", action_key.as_str()];
            problems.files(repo, root, &at, action, &refused, &mut found);
        }
    }
    if !problems.lines.is_empty() {
        return Err(problems.into_invalid());
    }
    let file: ManifestFile =
        serde_json::from_value(value).map_err(|error| Invalid { problems: vec![format!("{MANIFEST}: {error}")] })?;
    Ok(manifest(file, &found))
}

/// The manifest's apps and actions, with the effective tags, defaults and inherited settings.
fn manifest(file: ManifestFile, found: &Found) -> Manifest {
    let apps = file
        .apps
        .into_iter()
        .map(|(app_key, app)| {
            let app_sandbox =
                Sandbox { network: app.network, memory_mb: app.memory_mb, max_processes: app.max_processes };
            let app_retries = app.retries.as_ref().map(RetriesFile::retries);
            let actions = app
                .actions
                .into_iter()
                .map(|(key, action)| {
                    let schema = |source: Option<SchemaSource>| match source {
                        Some(SchemaSource::Inline(schema)) => Some(Value::Object(schema)),
                        Some(SchemaSource::File(path)) => found.schema_files.get(&path).cloned(),
                        None => None,
                    };
                    Action {
                        entrypoint: found.entrypoints.get(&action.entrypoint).cloned().unwrap_or(action.entrypoint),
                        input_schema: schema(action.input_schema),
                        output_schema: schema(action.output_schema),
                        timeout_s: action.timeout.unwrap_or(DEFAULT_TIMEOUT_S),
                        tag: action.tag.or_else(|| app.tag.clone()).unwrap_or_else(|| DEFAULT_TAG.to_string()),
                        sandbox: Sandbox {
                            network: action.network,
                            memory_mb: action.memory_mb,
                            max_processes: action.max_processes,
                        }
                        .or(app_sandbox),
                        retries: action.retries.as_ref().map(RetriesFile::retries).or(app_retries),
                        warm: action.warm.or(app.warm).unwrap_or(false),
                        key,
                    }
                })
                .collect();
            App { key: app_key, tag: app.tag, actions }
        })
        .collect();
    Manifest { apps }
}

/// The manifest's schema and its validator, built once.
fn manifest_schema() -> &'static (Value, Validator) {
    static SCHEMA: OnceLock<(Value, Validator)> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let schema: Value = serde_json::from_str(MANIFEST_SCHEMA).expect("windforce.schema.json is JSON");
        let validator = jsonschema::validator_for(&schema).expect("windforce.schema.json is a JSON Schema");
        (schema, validator)
    })
}

/// The problems of one manifest, as lines naming the file and the key, each with the key's path.
#[derive(Default)]
struct Problems {
    lines: Vec<(Vec<String>, String)>,
}

impl Problems {
    /// A problem at the key `path` (none: the manifest as a whole).
    fn at(&mut self, path: &[&str], message: impl fmt::Display) {
        match path {
            [] => self.push(path, format!("{MANIFEST}: {message}")),
            _ => self.push(path, format!("{MANIFEST}: {}: {message}", key(path))),
        }
    }

    fn push(&mut self, path: &[&str], line: String) {
        if !self.lines.iter().any(|(_, known)| *known == line) {
            self.lines.push((path.iter().map(|key| key.to_string()).collect(), line));
        }
    }

    /// Grouped by key, a key before the keys inside it, whichever check found them.
    fn into_invalid(mut self) -> Invalid {
        self.lines.sort_by(|(a, _), (b, _)| a.cmp(b));
        Invalid { problems: self.lines.into_iter().map(|(_, line)| line).collect() }
    }

    /// Every way the manifest breaks its schema, said as the schema's `x-problem` and `x-missing`
    /// say it. Returns the JSON pointers of the values refused, which the repository checks skip.
    fn schema(&mut self, value: &Value) -> BTreeSet<String> {
        let (schema, validator) = manifest_schema();
        let mut refused = BTreeSet::new();
        for error in validator.iter_errors(value) {
            let mut at: Vec<String> = error.instance_path().segments().map(|segment| segment.to_string()).collect();
            let keyword = error.schema_path().segments().last().map(|segment| segment.to_string()).unwrap_or_default();
            let node = schema.pointer(parent(error.schema_path().as_str())).unwrap_or(&Value::Null);
            let message = match error.kind() {
                jsonschema::error::ValidationErrorKind::Required { property } => {
                    let property = property.as_str().unwrap_or_default().to_string();
                    let missing = node["properties"][&property]["x-missing"].as_str().map(str::to_string);
                    at.push(property);
                    missing.unwrap_or_else(|| "missing".to_string())
                }
                jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } => {
                    let known: Vec<&str> =
                        node["properties"].as_object().into_iter().flatten().map(|(name, _)| name.as_str()).collect();
                    let names: Vec<String> = unexpected.iter().map(|name| format!("`{name}`")).collect();
                    let plural = if unexpected.len() == 1 { "" } else { "s" };
                    format!("unknown field{plural} {} (known: {})", names.join(", "), known.join(", "))
                }
                jsonschema::error::ValidationErrorKind::PropertyNames { error: name } => {
                    at.push(name.instance().as_str().unwrap_or_default().to_string());
                    problem(node, &keyword, name.instance()).unwrap_or_else(|| name.to_string())
                }
                _ => problem(node, &keyword, error.instance()).unwrap_or_else(|| error.to_string()),
            };
            refused.insert(pointer(&at));
            self.at(&at.iter().map(String::as_str).collect::<Vec<_>>(), message);
        }
        refused
    }

    /// Every string and key under `path` that holds U+0000, which PostgreSQL stores neither in
    /// `jsonb` nor in `text`: the sync would store the whole tree, then fail on the catalog with a
    /// refusal that names no file or key.
    fn nul(&mut self, path: &mut Vec<String>, value: &Value) {
        if !holds_nul(value) {
            return;
        }
        match value {
            Value::String(_) => self.at(&path.iter().map(String::as_str).collect::<Vec<_>>(), NUL_PROBLEM),
            Value::Array(items) => {
                for (n, item) in items.iter().enumerate() {
                    path.push(n.to_string());
                    self.nul(path, item);
                    path.pop();
                }
            }
            Value::Object(fields) => {
                for (name, field) in fields {
                    path.push(name.replace('\0', "\\u0000"));
                    if name.contains('\0') {
                        self.at(&path.iter().map(String::as_str).collect::<Vec<_>>(), format!("the key {NUL_PROBLEM}"));
                    }
                    self.nul(path, field);
                    path.pop();
                }
            }
            _ => {}
        }
    }

    /// The repository checks of one action at `at`: its entrypoint and schema files in the tree,
    /// for the values the schema accepted.
    fn files(
        &mut self,
        repo: &Repository,
        root: &Tree,
        at: &[&str],
        action: &Value,
        refused: &BTreeSet<String>,
        found: &mut Found,
    ) {
        let field = |name: &str| {
            let mut path = at.to_vec();
            path.push(name);
            let accepted = !refused.contains(&pointer(&path));
            (path.iter().map(|key| key.to_string()).collect::<Vec<_>>(), action.get(name).filter(|_| accepted))
        };
        if let (path, Some(Value::String(entrypoint))) = field("entrypoint") {
            match lookup_blob(repo, root, entrypoint) {
                Ok((normalized, _)) => {
                    found.entrypoints.insert(entrypoint.clone(), normalized);
                }
                Err(reason) => self.at(&path.iter().map(String::as_str).collect::<Vec<_>>(), reason),
            }
        }
        for name in ["input_schema", "output_schema"] {
            let (path, Some(given)) = field(name) else { continue };
            let path: Vec<&str> = path.iter().map(String::as_str).collect();
            if let (Value::String(file), Some(schema)) = (given, self.schema_file(repo, root, &path, given)) {
                found.schema_files.insert(file.clone(), schema);
            }
        }
    }

    /// A schema given inline or by its file: it must be a JSON Schema object.
    fn schema_file(&mut self, repo: &Repository, root: &Tree, path: &[&str], given: &Value) -> Option<Value> {
        let (schema, place) = match given {
            Value::String(file) => {
                let oid = match lookup_blob(repo, root, file) {
                    Ok((_, oid)) => oid,
                    Err(reason) => {
                        self.at(path, format_args!("schema file {reason}"));
                        return None;
                    }
                };
                let place = format!("{}: {file}", key(path));
                match blob_json(repo, oid) {
                    Ok(schema) => (schema, place),
                    Err(reason) => {
                        self.push(path, format!("{MANIFEST}: {place}: {reason}"));
                        return None;
                    }
                }
            }
            schema => (schema.clone(), key(path)),
        };
        if !schema.is_object() {
            self.push(path, format!("{MANIFEST}: {place}: must be a JSON Schema object"));
            return None;
        }
        // An inline schema's are found with the manifest's (`nul`).
        if given.is_string() && holds_nul(&schema) {
            self.push(path, format!("{MANIFEST}: {place}: {NUL_PROBLEM}"));
            return None;
        }
        if let Err(error) = jsonschema::meta::validate(&schema) {
            let at = error.instance_path().to_string();
            let at = if at.is_empty() { String::new() } else { format!(" at {at}") };
            self.push(path, format!("{MANIFEST}: {place}: not a valid JSON Schema: {error}{at}"));
            return None;
        }
        if let Err(error) = jsonschema::validator_for(&schema) {
            self.push(path, format!("{MANIFEST}: {place}: cannot be used as a JSON Schema: {error}"));
            return None;
        }
        Some(schema)
    }
}

/// What a value holding U+0000 is told (see `Problems::nul`).
const NUL_PROBLEM: &str = "holds the character U+0000 (\\u0000), which PostgreSQL cannot store";

/// `apps.billing.actions.charge`: a key path as the problems name it.
fn key(path: &[&str]) -> String {
    match path.split_first() {
        Some((first, rest)) => rest.iter().fold(first.to_string(), |parent, key| join(&parent, key)),
        None => String::new(),
    }
}

/// What the schema's node says to a value that breaks its rule `keyword`: its `x-problem`, one for
/// all its keywords or one per keyword, with `{value}` the value given.
fn problem(node: &Value, keyword: &str, value: &Value) -> Option<String> {
    let template = match &node["x-problem"] {
        Value::String(template) => template.as_str(),
        Value::Object(by_keyword) => by_keyword.get(keyword)?.as_str()?,
        _ => return None,
    };
    Some(template.replace("{value}", &value.to_string()))
}

/// The JSON pointer of the node that holds the keyword at `keyword_location`.
fn parent(keyword_location: &str) -> &str {
    keyword_location.rsplit_once('/').map_or("", |(parent, _)| parent)
}

/// A JSON pointer, for the set of refused values.
fn pointer(path: &[impl AsRef<str>]) -> String {
    path.iter().map(|key| format!("/{}", key.as_ref().replace('~', "~0").replace('/', "~1"))).collect()
}

/// The largest manifest or schema file read: a larger one is refused before it is read (a file of
/// gigabytes would take the sync's memory).
const JSON_FILE_MAX: usize = 16 << 20;

fn blob_json(repo: &Repository, oid: Oid) -> Result<Value, String> {
    let (size, _) = repo.odb().and_then(|odb| odb.read_header(oid)).map_err(|e| format!("cannot be read: {e}"))?;
    if size > JSON_FILE_MAX {
        return Err(format!(
            "is {} MiB, more than the {} MiB a manifest or schema file may be",
            size >> 20,
            JSON_FILE_MAX >> 20
        ));
    }
    let blob = repo.find_blob(oid).map_err(|e| format!("cannot be read: {e}"))?;
    let text = blob.content();
    if text.starts_with("\u{feff}".as_bytes()) {
        return Err("starts with a byte order mark (U+FEFF): save it as UTF-8 without one".to_string());
    }
    // JSON lets a key appear twice in an object and serde_json keeps the last: a manifest that
    // defines an action twice would lose the first without a word.
    serde_json::from_slice::<NoDuplicateKeys>(text).map_err(|e| format!("not valid JSON: {e}"))?;
    serde_json::from_slice(text).map_err(|e| format!("not valid JSON: {e}"))
}

/// A JSON value read only to refuse an object holding a key twice.
struct NoDuplicateKeys;

impl<'de> Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NoDuplicateKeys)
    }
}

impl<'de> serde::de::Visitor<'de> for NoDuplicateKeys {
    type Value = NoDuplicateKeys;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_unit<E>(self) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut items: A) -> Result<Self, A::Error> {
        while items.next_element::<NoDuplicateKeys>()?.is_some() {}
        Ok(self)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut entries: A) -> Result<Self, A::Error> {
        let mut keys = BTreeSet::new();
        while let Some(key) = entries.next_key::<String>()? {
            if !keys.insert(key.clone()) {
                return Err(serde::de::Error::custom(format!("key {key:?} appears twice in one object")));
            }
            entries.next_value::<NoDuplicateKeys>()?;
        }
        Ok(self)
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

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::{MANIFEST_SCHEMA, RETRY_WAIT_MAX_S, RetriesFile, manifest_schema};
    use crate::source::KEY_PATTERN;

    /// Keys and tags follow one rule: the schema's copy of it is the code's.
    #[test]
    fn the_schema_holds_the_key_rule_of_the_code() {
        let schema: Value = serde_json::from_str(MANIFEST_SCHEMA).unwrap();
        let patterns = [
            "/properties/apps/propertyNames/pattern",
            "/$defs/app/properties/actions/propertyNames/pattern",
            "/$defs/tag/pattern",
        ];
        for pointer in patterns {
            assert_eq!(schema.pointer(pointer).and_then(Value::as_str), Some(KEY_PATTERN), "{pointer}");
        }
    }

    /// A wait of centuries would make the failure's completion fail (a due time past what the
    /// database holds), and the job run again after the reaper's window.
    #[test]
    fn a_retry_waits_at_most_a_year() {
        let retries: RetriesFile =
            serde_json::from_value(serde_json::json!({"max": 2, "backoff": "200000000d", "max_backoff": "90d"}))
                .unwrap();
        let retries = retries.retries();
        assert_eq!((retries.backoff_s, retries.max_backoff_s), (RETRY_WAIT_MAX_S, 90.0 * 86400.0));
    }

    #[test]
    fn an_unsaid_longest_wait_is_never_shorter_than_the_first() {
        let read = |retries: Value| serde_json::from_value::<RetriesFile>(retries).unwrap().retries();
        let hour = read(serde_json::json!({"max": 2, "backoff": "1h"}));
        assert_eq!((hour.backoff_s, hour.max_backoff_s), (3600.0, 3600.0));
        let short = read(serde_json::json!({"max": 2, "backoff": "30s"}));
        assert_eq!((short.backoff_s, short.max_backoff_s), (30.0, 600.0));
        let said = read(serde_json::json!({"max": 2, "backoff": "1h", "max_backoff": "5m"}));
        assert_eq!((said.backoff_s, said.max_backoff_s), (3600.0, 300.0));
    }

    #[test]
    fn the_example_manifest_follows_the_schema() {
        let example: Value = serde_json::from_str(include_str!("../../examples/windforce.json")).unwrap();
        let (_, validator) = manifest_schema();
        let problems: Vec<String> = validator.iter_errors(&example).map(|error| error.to_string()).collect();
        assert!(problems.is_empty(), "{problems:?}");
    }
}
