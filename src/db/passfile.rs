//! The password file of libpq (`~/.pgpass`, or the file `PGPASSFILE` names): a connection string
//! without a password takes the first line matching its host, port, database and user, so that the
//! password need not be in DATABASE_URL. As libpq, a file that its group or others may read is
//! ignored, with a warning.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use postgres::config::Host;

/// The password for `config` from the password file, when it has none of its own.
pub(crate) fn fill_in(config: &mut postgres::Config) {
    if config.get_password().is_some() {
        return;
    }
    let Some(file) = std::env::var_os("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".pgpass")))
    else {
        return;
    };
    let Ok(meta) = std::fs::metadata(&file) else { return };
    if !meta.is_file() {
        return;
    }
    if meta.permissions().mode() & 0o077 != 0 {
        crate::diag::diag!(
            "warning: password file {} has group or world access; permissions should be u=rw (0600) or less: not read",
            file.display()
        );
        return;
    }
    let Ok(text) = std::fs::read_to_string(&file) else { return };
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_string(),
    };
    let unix = matches!(config.get_hosts().first(), Some(Host::Unix(_)));
    let port = config.get_ports().first().copied().unwrap_or(5432).to_string();
    let user = config.get_user().unwrap_or_default().to_string();
    let database = config.get_dbname().map_or_else(|| user.clone(), str::to_string);
    let wanted = [host.as_str(), port.as_str(), database.as_str(), user.as_str()];
    if let Some(password) = lookup(&text, wanted, unix) {
        config.password(password);
    }
}

/// The password of the first line of `text` whose fields match `wanted` (host, port, database,
/// user; `*` matches anything; over a Unix socket `localhost` matches too).
fn lookup(text: &str, wanted: [&str; 4], unix: bool) -> Option<String> {
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = split(line);
        let [host, port, database, user, password] = fields.as_slice() else { continue };
        let host_matches = host == "*" || host == wanted[0] || (unix && host == "localhost");
        let matches = |field: &str, want: &str| field == "*" || field == want;
        if host_matches && matches(port, wanted[1]) && matches(database, wanted[2]) && matches(user, wanted[3]) {
            return Some(password.clone());
        }
    }
    None
}

/// A line's fields, split at `:`, with `\:` and `\\` read as `:` and `\`.
fn split(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => fields.last_mut().expect("one field at least").extend(chars.next()),
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut().expect("one field at least").push(c),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_matching_line_gives_the_password() {
        let text = "# comment\n\
                    other:5432:wf:u:no\n\
                    db.example:5432:wf:u:pass\\:word\\\\\n\
                    *:*:*:*:fallback\n";
        assert_eq!(lookup(text, ["db.example", "5432", "wf", "u"], false).as_deref(), Some("pass:word\\"));
        assert_eq!(lookup(text, ["db.example", "5433", "wf", "u"], false).as_deref(), Some("fallback"));
        assert_eq!(
            lookup("localhost:5432:wf:u:local\n", ["/run/postgresql", "5432", "wf", "u"], true).as_deref(),
            Some("local")
        );
        assert_eq!(lookup("localhost:5432:wf:u:local\n", ["db", "5432", "wf", "u"], false), None);
        // A password may hold a `:` unescaped: the fifth field is the rest of the line.
        assert_eq!(lookup("h:1:d:u:a:b\n", ["h", "1", "d", "u"], false).as_deref(), Some("a:b"));
        assert_eq!(lookup("h:1:d:u\n", ["h", "1", "d", "u"], false), None);
    }
}
