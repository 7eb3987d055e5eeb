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

/// `--input JSON`, `--input @FILE`, `--input -` (stdin); none is `{}`.
pub(super) fn read_input(input: Option<&str>) -> Result<Value> {
    let (text, origin) = match input {
        None => return Ok(json!({})),
        Some("-") => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).context("reading the input from stdin")?;
            (text, "stdin".to_string())
        }
        Some(arg) if arg.starts_with('@') => {
            let path = &arg[1..];
            (std::fs::read_to_string(path).with_context(|| format!("reading the input file {path}"))?, path.to_string())
        }
        Some(arg) => (arg.to_string(), "--input".to_string()),
    };
    serde_json::from_str(&text).map_err(|error| {
        // The parser's limit (as for results): valid JSON, refused for its depth alone.
        let why = if error.to_string().starts_with("recursion limit exceeded") {
            "is nested more than 127 levels deep (the most an input or a result may be)"
        } else {
            "is not valid JSON"
        };
        anyhow::Error::new(error).context(format!("the input ({origin}) {why}"))
    })
}
