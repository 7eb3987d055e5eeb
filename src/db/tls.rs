//! TLS to an external database, as libpq reads it from the connection string: `sslmode`,
//! `sslrootcert`, `sslcert` and `sslkey`. The postgres client knows only disable, prefer and require
//! and verifies nothing itself, so these options are taken out of the string before it parses the
//! rest, and the connector is built from them here.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use native_tls::{Certificate, Identity, TlsConnector};
use percent_encoding::percent_decode_str;
use postgres::config::SslMode;
use postgres_native_tls::MakeTlsConnector;

/// How far the server is trusted, libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Disable,
    /// libpq tries without TLS first; here it is `prefer` (TLS when the server offers it).
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    fn parse(value: &str) -> Result<Mode> {
        Ok(match value {
            "disable" => Mode::Disable,
            "allow" => Mode::Allow,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            other => bail!(
                "sslmode={other} in the database URL: expected disable, allow, prefer, require, verify-ca or verify-full"
            ),
        })
    }
}

/// The TLS options of a connection string, with what is left of it for the postgres client.
#[derive(Debug)]
pub(crate) struct Options {
    mode: Mode,
    root_cert: Option<String>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    /// The connection string without the options above.
    pub rest: String,
}

/// The connector of a database reached over TCP with TLS (`None`: sslmode=disable), and the
/// postgres client's mode for it.
#[derive(Clone)]
pub(crate) struct Tls {
    pub connector: MakeTlsConnector,
    /// What the server's certificate was checked against, for messages.
    pub describe: String,
    /// How far the server's certificate is checked: `none`, `verify-ca` or `verify-full`.
    pub checked: &'static str,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe)
    }
}

const TAKEN: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

impl Options {
    /// Take the TLS options out of a URL (`postgresql://...?sslmode=verify-full`) or a key=value
    /// string (`host=db sslmode=verify-full`).
    pub(crate) fn split(connection: &str) -> Result<Options> {
        let (taken, rest) = if connection.starts_with("postgres://") || connection.starts_with("postgresql://") {
            split_url(connection)?
        } else {
            split_key_values(connection)?
        };
        let mut options = Options { mode: Mode::Prefer, root_cert: None, cert: None, key: None, rest };
        for (key, value) in taken {
            match key.as_str() {
                "sslmode" => options.mode = Mode::parse(&value)?,
                "sslrootcert" => options.root_cert = Some(value),
                "sslcert" => options.cert = Some(PathBuf::from(value)),
                _ => options.key = Some(PathBuf::from(value)),
            }
        }
        Ok(options)
    }

    /// The postgres client's mode: the verifying modes require TLS, the check is the connector's.
    pub(crate) fn client_mode(&self) -> SslMode {
        match self.mode {
            Mode::Disable => SslMode::Disable,
            Mode::Allow | Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }

    /// The connector, as libpq checks the server: verify-ca and verify-full against the root
    /// certificates of `sslrootcert` (a PEM file, or `system` for the system's trusted roots;
    /// `~/.postgresql/root.crt` when not given), verify-full also the host name; require and
    /// prefer check nothing, unless a root certificate file is there (then as verify-ca, as libpq
    /// does). A client certificate from `sslcert` and `sslkey` (`~/.postgresql/postgresql.crt`
    /// and `.key` when both are there).
    pub(crate) fn connector(&self) -> Result<Option<Tls>> {
        if self.mode == Mode::Disable {
            return Ok(None);
        }
        let home = std::env::var_os("HOME").map(|home| Path::new(&home).join(".postgresql"));
        let default_root = home.as_ref().map(|dir| dir.join("root.crt")).filter(|file| file.exists());
        let root = match &self.root_cert {
            Some(given) => Some(given.clone()),
            None => default_root.map(|file| file.display().to_string()),
        };
        let verifying = matches!(self.mode, Mode::VerifyCa | Mode::VerifyFull);
        let mut builder = TlsConnector::builder();
        let mut checked = "none";
        let describe = match (&root, verifying) {
            (None, true) => bail!(
                "sslmode={} needs the root certificates to check the server against: set sslrootcert \
                 to a PEM file, or sslrootcert=system for the system's trusted roots \
                 (~/.postgresql/root.crt is not there)",
                if self.mode == Mode::VerifyCa { "verify-ca" } else { "verify-full" }
            ),
            (None, false) => {
                builder.danger_accept_invalid_certs(true).danger_accept_invalid_hostnames(true);
                let when = if self.client_mode() == SslMode::Prefer { " when the server offers it" } else { "" };
                format!("TLS{when}, the server's certificate not checked")
            }
            (Some(root), _) => {
                if root != "system" {
                    let pem = std::fs::read(root).with_context(|| format!("reading sslrootcert {root}"))?;
                    let certificates = Certificate::stack_from_pem(&pem)
                        .with_context(|| format!("reading the certificates of sslrootcert {root}"))?;
                    if certificates.is_empty() {
                        bail!("sslrootcert {root} holds no PEM certificate");
                    }
                    builder.disable_built_in_roots(true);
                    for certificate in certificates {
                        builder.add_root_certificate(certificate);
                    }
                }
                let host = self.mode == Mode::VerifyFull;
                builder.danger_accept_invalid_hostnames(!host);
                checked = if host { "verify-full" } else { "verify-ca" };
                let roots = if root == "system" { "the system's roots".to_string() } else { root.clone() };
                format!(
                    "TLS, the server's certificate checked against {roots}{}",
                    if host { " and its host name" } else { "" }
                )
            }
        };
        if let Some(identity) = self.identity(home.as_deref())? {
            builder.identity(identity);
        }
        let connector = builder.build().context("setting up TLS for the database connection")?;
        Ok(Some(Tls { connector: MakeTlsConnector::new(connector), describe, checked }))
    }

    fn identity(&self, home: Option<&Path>) -> Result<Option<Identity>> {
        let default = |name: &str| home.map(|dir| dir.join(name)).filter(|file| file.exists());
        let (cert, key) = match (&self.cert, &self.key) {
            (None, None) => match (default("postgresql.crt"), default("postgresql.key")) {
                (Some(cert), Some(key)) => (cert, key),
                _ => return Ok(None),
            },
            (Some(cert), key) => match key.clone().or_else(|| default("postgresql.key")) {
                Some(key) => (cert.clone(), key),
                None => bail!("sslcert {} needs its private key: set sslkey", cert.display()),
            },
            (None, Some(key)) => bail!("sslkey {} needs its certificate: set sslcert", key.display()),
        };
        let read =
            |file: &Path, what: &str| std::fs::read(file).with_context(|| format!("reading {what} {}", file.display()));
        // native-tls takes PKCS#8 only; libpq any PEM key (`BEGIN RSA PRIVATE KEY` too).
        let pkcs8 = openssl::pkey::PKey::private_key_from_pem(&read(&key, "sslkey")?)
            .and_then(|pkey| pkey.private_key_to_pem_pkcs8())
            .with_context(|| format!("reading the private key sslkey {} (PEM, unencrypted)", key.display()))?;
        let identity = Identity::from_pkcs8(&read(&cert, "sslcert")?, &pkcs8).with_context(|| {
            format!("reading the client certificate {} and its key {}", cert.display(), key.display())
        })?;
        Ok(Some(identity))
    }
}

type Split = (Vec<(String, String)>, String);

/// A URL's query: its TLS pairs decoded, the others left as they were.
fn split_url(url: &str) -> Result<Split> {
    let Some((base, query)) = url.split_once('?') else { return Ok((Vec::new(), url.to_string())) };
    let mut taken = Vec::new();
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |text: &str| {
            percent_decode_str(text)
                .decode_utf8()
                .map(|text| text.into_owned())
                .with_context(|| format!("decoding {text:?} in the database URL"))
        };
        let key = decode(key)?;
        if TAKEN.contains(&key.as_str()) {
            taken.push((key, decode(value)?));
        } else {
            kept.push(pair);
        }
    }
    let rest = if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
    Ok((taken, rest))
}

/// A key=value string, read as libpq reads it (values quoted with `'`, `\` escaping the next
/// character), written back without the TLS pairs.
fn split_key_values(text: &str) -> Result<Split> {
    let mut chars = text.chars().peekable();
    let mut taken = Vec::new();
    let mut kept = Vec::new();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            bail!("{key:?} in the database connection string has no value (expected key=value)");
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                    None => bail!("the value of {key:?} in the database connection string has no closing quote"),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        if TAKEN.contains(&key.as_str()) {
            taken.push((key, value));
        } else {
            kept.push(format!("{key}='{}'", value.replace('\\', "\\\\").replace('\'', "\\'")));
        }
    }
    Ok((taken, kept.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> (Vec<(String, String)>, String) {
        let options = Options::split(text).unwrap();
        let mut taken = Vec::new();
        taken.push(("mode".to_string(), format!("{:?}", options.mode)));
        if let Some(root) = options.root_cert {
            taken.push(("root".to_string(), root));
        }
        (taken, options.rest)
    }

    #[test]
    fn a_url_keeps_everything_but_its_tls_options() {
        let (taken, rest) = split(
            "postgresql://u:p%3F@db:5433/wf?connect_timeout=3&sslmode=verify-full&sslrootcert=%2Fetc%2Fca%20b.pem",
        );
        assert_eq!(rest, "postgresql://u:p%3F@db:5433/wf?connect_timeout=3");
        assert_eq!(taken, [("mode".into(), "VerifyFull".into()), ("root".into(), "/etc/ca b.pem".into())]);
        let (taken, rest) = split("postgres://db/wf?sslmode=require");
        assert_eq!((taken[0].1.as_str(), rest.as_str()), ("Require", "postgres://db/wf"));
        assert_eq!(split("postgres://db/wf").1, "postgres://db/wf");
    }

    #[test]
    fn a_key_value_string_is_read_as_libpq_reads_it() {
        let (taken, rest) =
            split(r"host=db  password = 'it\'s' dbname=w\ f sslmode=verify-ca sslrootcert='/a b/c\'s.pem'");
        assert_eq!(taken, [("mode".into(), "VerifyCa".into()), ("root".into(), "/a b/c's.pem".into())]);
        assert_eq!(rest, r"host='db' password='it\'s' dbname='w f'");
        let parsed: postgres::Config = rest.parse().unwrap();
        assert_eq!((parsed.get_password(), parsed.get_dbname()), (Some(&b"it's"[..]), Some("w f")));
        let rest = split(r"host=db password='it\'s\\' dbname=wf").1;
        let parsed: postgres::Config = rest.parse().unwrap();
        assert_eq!((parsed.get_password(), parsed.get_dbname()), (Some(&br"it's\"[..]), Some("wf")));
    }

    #[test]
    fn bad_options_are_refused_with_what_is_wrong() {
        for (text, says) in [
            ("host=db sslmode=verify", "sslmode=verify in the database URL"),
            ("postgres://db/wf?sslmode=full", "sslmode=full"),
            ("host=db password='open", "no closing quote"),
            ("host", "has no value"),
        ] {
            let error = Options::split(text).unwrap_err().to_string();
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
