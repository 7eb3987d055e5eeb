//! TLS to an external database, as libpq reads it from the connection string: `sslmode`,
//! `sslrootcert`, `sslcert` and `sslkey`. The postgres client knows only disable, prefer and require
//! and verifies nothing itself, so these options are taken out of the string before it parses the
//! rest, and the connector is built from them here.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context as TaskContext, Poll};

use anyhow::{Context, Result, bail};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::ssl::{Ssl, SslContext, SslMethod, SslVerifyMode, SslVersion};
use openssl::x509::verify::X509CheckFlags;
use percent_encoding::percent_decode_str;
use postgres::config::SslMode;
use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_openssl::SslStream;

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
    fn name(self) -> &'static str {
        match self {
            Mode::Disable => "disable",
            Mode::Allow => "allow",
            Mode::Prefer => "prefer",
            Mode::Require => "require",
            Mode::VerifyCa => "verify-ca",
            Mode::VerifyFull => "verify-full",
        }
    }

    /// `whence` says where the value was given, `{}` standing for it.
    fn parse(value: &str, whence: &str) -> Result<Mode> {
        Ok(match value {
            "disable" => Mode::Disable,
            "allow" => Mode::Allow,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            other => bail!(
                "{}: expected disable, allow, prefer, require, verify-ca or verify-full",
                whence.replace("{}", other)
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

/// The TLS of a database reached over TCP: an OpenSSL context made once (its roots read once),
/// and an `Ssl` of it per connection, which checks the host name of that connection under
/// verify-full. Made on OpenSSL directly rather than through a connector crate, which would load
/// the system's roots into every context whether they are used or not (50 ms of processor time
/// per command here).
#[derive(Clone)]
pub(crate) struct Tls {
    context: SslContext,
    verify_host: bool,
    /// Set when a server agreed to TLS on a connection made with this value (see `for_attempt`).
    agreed: Arc<AtomicBool>,
    /// What the server's certificate was checked against, for messages.
    pub describe: String,
    /// How far the server's certificate is checked: `none`, `verify-ca` or `verify-full`.
    pub checked: &'static str,
}

impl Tls {
    /// This TLS for one connection attempt, and what tells whether the server agreed to TLS in it
    /// (it answered the request for TLS with yes: whatever failed after that failed over TLS).
    pub(crate) fn for_attempt(&self) -> (Tls, Arc<AtomicBool>) {
        let agreed = Arc::new(AtomicBool::new(false));
        (Tls { agreed: Arc::clone(&agreed), ..self.clone() }, agreed)
    }
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> MakeTlsConnect<S> for Tls {
    type Stream = Stream<S>;
    type TlsConnect = Connect;
    type Error = openssl::error::ErrorStack;

    fn make_tls_connect(&mut self, host: &str) -> Result<Connect, Self::Error> {
        let mut ssl = Ssl::new(&self.context)?;
        let ip = host.parse::<IpAddr>().ok();
        // The server's name for its certificate (SNI), as libpq sends it: not for an address, nor
        // for a Unix socket (no name; no TLS there either).
        if ip.is_none() && !host.is_empty() {
            ssl.set_hostname(host)?;
        }
        if self.verify_host && !host.is_empty() {
            let param = ssl.param_mut();
            param.set_hostflags(X509CheckFlags::NO_PARTIAL_WILDCARDS);
            match ip {
                Some(ip) => param.set_ip(ip)?,
                None => param.set_host(host)?,
            }
        }
        Ok(Connect(ssl, Arc::clone(&self.agreed)))
    }
}

/// One connection's handshake, and where to say that it began.
pub(crate) struct Connect(Ssl, Arc<AtomicBool>);

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> TlsConnect<S> for Connect {
    type Stream = Stream<S>;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = Pin<Box<dyn Future<Output = Result<Stream<S>, Self::Error>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        // Called only once the server said yes to TLS.
        self.1.store(true, Ordering::SeqCst);
        Box::pin(async move {
            let mut stream = SslStream::new(self.0, stream)?;
            if let Err(error) = Pin::new(&mut stream).connect().await {
                let verify = stream.ssl().verify_result();
                return Err(match verify.as_raw() {
                    0 => error.into(),
                    _ => format!("{error} ({})", verify.error_string()).into(),
                });
            }
            Ok(Stream(stream))
        })
    }
}

/// A connection's stream once the handshake is done.
pub(crate) struct Stream<S>(SslStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for Stream<S> {
    /// SCRAM's channel binding (`tls-server-end-point`, RFC 5929): the digest of the server's
    /// certificate with the hash of its signature, SHA-256 for MD5 and SHA-1.
    fn channel_binding(&self) -> ChannelBinding {
        let digest = self.0.ssl().peer_certificate().and_then(|certificate| {
            let algorithm = certificate.signature_algorithm().object().nid().signature_algorithms()?;
            let digest = match algorithm.digest {
                Nid::MD5 | Nid::SHA1 => MessageDigest::sha256(),
                nid => MessageDigest::from_nid(nid)?,
            };
            certificate.digest(digest).ok()
        });
        match digest {
            Some(digest) => ChannelBinding::tls_server_end_point(digest.to_vec()),
            None => ChannelBinding::none(),
        }
    }
}

/// The TLS options wf reads, with the environment variable that gives each when the connection
/// string does not (as libpq's).
const TAKEN: [(&str, &str); 4] =
    [("sslmode", "PGSSLMODE"), ("sslrootcert", "PGSSLROOTCERT"), ("sslcert", "PGSSLCERT"), ("sslkey", "PGSSLKEY")];

impl Options {
    /// Take the TLS options out of a URL (`postgresql://...?sslmode=verify-full`) or a key=value
    /// string (`host=db sslmode=verify-full`); one it does not give comes from its `PGSSL*` variable.
    pub(crate) fn split(connection: &str) -> Result<Options> {
        Options::split_with(connection, |variable| std::env::var(variable).ok())
    }

    /// `split`, with the environment's variables read by `variable`.
    fn split_with(connection: &str, variable: impl Fn(&str) -> Option<String>) -> Result<Options> {
        let (taken, rest) = if connection.starts_with("postgres://") || connection.starts_with("postgresql://") {
            split_url(connection)?
        } else {
            split_key_values(connection)?
        };
        let mut given: HashMap<String, String> = taken.into_iter().collect();
        // An empty value is no value, as for libpq.
        let mut value = |key: &str, name: &str| match given.remove(key).filter(|value| !value.is_empty()) {
            Some(value) => Some((value, format!("{key}={{}} in the database URL"))),
            None => variable(name).filter(|value| !value.is_empty()).map(|value| (value, format!("{name}={{}}"))),
        };
        let [mode, root_cert, cert, key] = TAKEN.map(|(key, name)| value(key, name));
        let mode = mode.map(|(value, whence)| Mode::parse(&value, &whence)).transpose()?;
        let root_cert = root_cert.map(|(value, _)| value);
        // As libpq (16 and later): the system's roots vouch for any name someone could get a
        // certificate for, so with them only verify-full means anything, and it is the default.
        let mode = match (mode, root_cert.as_deref()) {
            (None, Some("system")) => Mode::VerifyFull,
            (Some(weak), Some("system")) if weak != Mode::VerifyFull => bail!(
                "sslmode={} may not be used with sslrootcert=system (use sslmode=verify-full): any \
                 name's certificate from the system's roots would do",
                weak.name()
            ),
            (mode, _) => mode.unwrap_or(Mode::Prefer),
        };
        Ok(Options {
            mode,
            root_cert,
            cert: cert.map(|(value, _)| PathBuf::from(value)),
            key: key.map(|(value, _)| PathBuf::from(value)),
            rest,
        })
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
        let mut context = SslContext::builder(SslMethod::tls_client())?;
        // libpq's ssl_min_protocol_version.
        context.set_min_proto_version(Some(SslVersion::TLS1_2))?;
        let (mut checked, mut verify_host) = ("none", false);
        let describe = match (&root, verifying) {
            (None, true) => bail!(
                "sslmode={} needs the root certificates to check the server against: set sslrootcert \
                 to a PEM file, or sslrootcert=system for the system's trusted roots \
                 (~/.postgresql/root.crt is not there)",
                self.mode.name()
            ),
            (None, false) => {
                context.set_verify(SslVerifyMode::NONE);
                let when = if self.client_mode() == SslMode::Prefer { " when the server offers it" } else { "" };
                format!("TLS{when}, the server's certificate not checked")
            }
            (Some(root), _) => {
                if root == "system" {
                    context.set_default_verify_paths()?;
                } else {
                    std::fs::metadata(root).with_context(|| format!("reading sslrootcert {root}"))?;
                    context
                        .set_ca_file(root)
                        .with_context(|| format!("reading the certificates of sslrootcert {root}"))?;
                }
                context.set_verify(SslVerifyMode::PEER);
                verify_host = self.mode == Mode::VerifyFull;
                checked = if verify_host { "verify-full" } else { "verify-ca" };
                let roots = if root == "system" { "the system's roots".to_string() } else { root.clone() };
                let host = if verify_host { " and its host name" } else { "" };
                format!("TLS, the server's certificate checked against {roots}{host}")
            }
        };
        if let Some((cert, key)) = self.identity(home.as_deref())? {
            context
                .set_certificate_chain_file(&cert)
                .with_context(|| format!("reading the client certificate sslcert {}", cert.display()))?;
            let private = private_key(&key)?;
            context.set_private_key(&private)?;
            context.check_private_key().with_context(|| {
                format!("the private key sslkey {} is not the key of sslcert {}", key.display(), cert.display())
            })?;
        }
        Ok(Some(Tls { context: context.build(), verify_host, agreed: Arc::default(), describe, checked }))
    }

    /// The client certificate and key files, when there are.
    fn identity(&self, home: Option<&Path>) -> Result<Option<(PathBuf, PathBuf)>> {
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
        // The key's file is read (and its permissions checked) by `private_key`.
        std::fs::metadata(&cert).with_context(|| format!("reading sslcert {}", cert.display()))?;
        Ok(Some((cert, key)))
    }
}

/// The client's private key: refused, as by libpq, when others may read its file (root's may be
/// readable by its group), and when it is encrypted (no passphrase is asked for: OpenSSL's own
/// prompt would wait on the terminal or stdin, beyond any timeout).
fn private_key(file: &Path) -> Result<PKey<Private>> {
    let meta = std::fs::metadata(file).with_context(|| format!("reading sslkey {}", file.display()))?;
    let allowed = if meta.uid() == 0 { 0o037 } else { 0o077 };
    if meta.permissions().mode() & allowed != 0 {
        bail!(
            "the private key sslkey {} has group or world access; permissions should be u=rw (0600) or less",
            file.display()
        );
    }
    let pem = std::fs::read(file).with_context(|| format!("reading sslkey {}", file.display()))?;
    PKey::private_key_from_pem_callback(&pem, |_| Err(openssl::error::ErrorStack::get())).with_context(|| {
        format!(
            "reading the private key sslkey {} (PEM; an encrypted key is not read: sslpassword is not supported)",
            file.display()
        )
    })
}

type Split = (Vec<(String, String)>, String);

/// A URL's query: its TLS pairs decoded, the others left as they were.
fn split_url(url: &str) -> Result<Split> {
    // The query begins at the first `?` after the user's part, which ends at the first `@` (as the
    // postgres client reads it): a password may hold a `?`.
    let user_part = url.find('@').map_or(0, |at| at + 1);
    let Some(at) = url[user_part..].find('?').map(|at| user_part + at) else {
        return Ok((Vec::new(), url.to_string()));
    };
    let (base, query) = (&url[..at], &url[at + 1..]);
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
        if TAKEN.iter().any(|(taken, _)| *taken == key) {
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
        if TAKEN.iter().any(|(taken, _)| *taken == key) {
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

    fn no_variables(_: &str) -> Option<String> {
        None
    }

    fn split(text: &str) -> (Vec<(String, String)>, String) {
        let options = Options::split_with(text, no_variables).unwrap();
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
        let (taken, rest) = split("postgresql://u:pa?ss@db/wf?sslmode=require&sslrootcert=");
        assert_eq!((taken, rest.as_str()), (vec![("mode".into(), "Require".into())], "postgresql://u:pa?ss@db/wf"));
    }

    #[test]
    fn a_pgssl_variable_gives_what_the_string_does_not() {
        let variables = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(key, _)| *key == name).map(|(_, value)| value.to_string())
        };
        let from = variables(&[
            ("PGSSLMODE", "verify-full"),
            ("PGSSLROOTCERT", "/etc/ca.pem"),
            ("PGSSLCERT", "/c.pem"),
            ("PGSSLKEY", "/k.pem"),
        ]);
        let options = Options::split_with("host=db", from).unwrap();
        assert_eq!((options.mode, options.root_cert.as_deref()), (Mode::VerifyFull, Some("/etc/ca.pem")));
        assert_eq!((options.cert, options.key), (Some(PathBuf::from("/c.pem")), Some(PathBuf::from("/k.pem"))));
        let options = Options::split_with("postgres://db/wf?sslmode=require&sslrootcert=/mine.pem", from).unwrap();
        assert_eq!((options.mode, options.root_cert.as_deref()), (Mode::Require, Some("/mine.pem")), "the URL's win");
        let options = Options::split_with("host=db sslmode=", variables(&[("PGSSLMODE", "disable")])).unwrap();
        assert_eq!(options.mode, Mode::Disable, "an empty value in the string is none");
        let options = Options::split_with("host=db", variables(&[("PGSSLMODE", "")])).unwrap();
        assert_eq!(options.mode, Mode::Prefer, "nor in a variable");
        let error = Options::split_with("host=db", variables(&[("PGSSLMODE", "full")])).unwrap_err().to_string();
        assert!(error.starts_with("PGSSLMODE=full: expected disable,"), "{error}");
        let error = Options::split_with("host=db", variables(&[("PGSSLROOTCERT", "system"), ("PGSSLMODE", "require")]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("sslmode=require may not be used with sslrootcert=system"), "{error}");
    }

    #[test]
    fn the_systems_roots_mean_verify_full() {
        assert_eq!(split("host=db sslrootcert=system").0[0].1, "VerifyFull");
        assert_eq!(split("host=db sslrootcert=system sslmode=verify-full").0[0].1, "VerifyFull");
        for weak in ["prefer", "require", "verify-ca"] {
            let error =
                Options::split_with(&format!("host=db sslrootcert=system sslmode={weak}"), no_variables).unwrap_err();
            assert!(error.to_string().contains(&format!("sslmode={weak} may not be used with sslrootcert=system")));
        }
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
            let error = Options::split_with(text, no_variables).unwrap_err().to_string();
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
