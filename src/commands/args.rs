//! Arguments several commands read the same way: `APP/ACTION` and a job's input.

use std::io::Read;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

pub(super) fn split_target(target: &str) -> Result<(&str, &str)> {
    match target.split_once('/') {
        Some((app, action)) if !app.is_empty() && !action.is_empty() && !action.contains('/') => Ok((app, action)),
        _ => bail!("{target:?} is not APP/ACTION (e.g. billing/charge)"),
    }
}

/// The `--app` and `--action` filters of a listing or a bulk cancel: `--action APP/ACTION` is that
/// app's action (an action's name holds no `/`: such a filter matched nothing, silently).
pub(super) fn app_action<'a>(
    app: Option<&'a str>,
    action: Option<&'a str>,
) -> Result<(Option<&'a str>, Option<&'a str>), crate::error::CommandError> {
    let Some(target) = action.filter(|action| action.contains('/')) else {
        return Ok((app, action));
    };
    let (target_app, name) = split_target(target)?;
    match app {
        Some(app) if app != target_app => Err(crate::error::CommandError::usage(format!(
            "--action {target_app}/{name} names an action of app {target_app:?}, and --app says {app:?}"
        ))),
        _ => Ok((Some(target_app), Some(name))),
    }
}

/// `--input JSON`, `--input @FILE`, `--input -` or `--input @-` (stdin); none is `{}`.
pub(super) fn read_input(input: Option<&str>) -> Result<Value> {
    let (text, origin) = match input {
        None => return Ok(json!({})),
        Some("-" | "@-") => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).context("reading the input from stdin")?;
            skip_bom(&mut text);
            (text, "stdin".to_string())
        }
        Some(arg) if arg.starts_with('@') => {
            let path = &arg[1..];
            let mut text = std::fs::read_to_string(path).with_context(|| format!("reading the input file {path}"))?;
            skip_bom(&mut text);
            (text, path.to_string())
        }
        Some(arg) => (arg.to_string(), "--input".to_string()),
    };
    serde_json::from_str(&text).map_err(|error| {
        let why = why_not_json(&error);
        anyhow::Error::new(error).context(format!("the input ({origin}): {why}"))
    })
}

/// Takes away the UTF-8 byte-order mark at the very start of a file's or stdin's text, if it has one
/// (as some Windows editors save text): it is not JSON. The text of an argument is kept as given.
pub(super) fn skip_bom(text: &mut String) {
    if text.starts_with('\u{feff}') {
        text.drain(..'\u{feff}'.len_utf8());
    }
}

/// Why an input did not parse: the parser's limit (as for results) refuses valid JSON for its depth
/// alone, which "not valid JSON" misnamed.
pub(super) fn why_not_json(error: &serde_json::Error) -> &'static str {
    if error.to_string().starts_with("recursion limit exceeded") {
        "nested more than 127 levels deep (the most an input or a result may be)"
    } else {
        "not valid JSON"
    }
}
