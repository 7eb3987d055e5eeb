//! Connections: an external database from `--database-url`, or the embedded local cluster.

/// A SQL expression describing the session of `pg_stat_activity` row `$alias` for a line on
/// stderr or in the journal: `pid 123 (psql, idle in transaction, in a transaction for 00:00:05)`.
/// A literal, for statements prepared by their text.
macro_rules! session_described {
    ($alias:literal) => {
        concat!(
            "format('pid %s (%s, %s%s)', ",
            $alias,
            ".pid, coalesce(nullif(",
            $alias,
            ".application_name, ''), 'no name'), coalesce(",
            $alias,
            ".state, 'state hidden'), \
             ', in a transaction for ' || date_trunc('second', now() - ",
            $alias,
            ".xact_start))"
        )
    };
}
pub(crate) use session_described;

pub mod embedded;
pub(crate) mod failure;
pub(crate) mod listen;
mod lock_watch;
pub mod migrate;
mod passfile;
mod session;
mod tls;

use std::str::FromStr;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use postgres::config::SslMode;
use postgres::{Client, GenericClient, NoTls};

pub use session::{PLANNER, Session};

/// How long a connection may take to be made, socket and startup, unless the URL's
/// `connect_timeout` says otherwise.
const CONNECT_PATIENCE: Duration = Duration::from_secs(10);

/// Where the database is. Cheap to clone: workers open one connection per slot from it.
#[derive(Debug, Clone)]
pub struct Database {
    config: postgres::Config,
    /// How an external database is reached over TCP (None: the embedded cluster, sslmode=disable).
    tls: Option<tls::Tls>,
    /// A human description for messages (never the password).
    pub describe: String,
    /// The embedded cluster, when it is this database: a connection that finds its server gone
    /// without a shutdown (killed, out of memory) starts it again.
    cluster: Option<embedded::Cluster>,
}

impl Database {
    /// An external database, from `--database-url` or DATABASE_URL (a URL or key=value), with
    /// libpq's TLS options (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`) and, when it has no
    /// password, libpq's password file.
    pub fn external(url: &str) -> Result<Database> {
        let parsing = "parsing the database URL (DATABASE_URL or --database-url)";
        let options = tls::Options::split(url).context(parsing)?;
        let mut config = postgres::Config::from_str(&options.rest).context(parsing)?;
        // Addresses without host names are their own names, for the password file and for TLS,
        // which the postgres client would refuse without a name.
        if config.get_hosts().is_empty() {
            for address in config.get_hostaddrs().to_vec() {
                config.host(&address.to_string());
            }
        }
        passfile::fill_in(&mut config);
        // As libpq, no TLS over a Unix socket (the server offers none there): nothing to set up.
        let tcp = config.get_hosts().iter().any(|host| matches!(host, postgres::config::Host::Tcp(_)));
        let tls = if tcp { options.connector()? } else { None };
        config.ssl_mode(if tcp { options.client_mode() } else { SslMode::Disable });
        let describe = describe(&config);
        Ok(Database { config, tls, describe, cluster: None })
    }

    /// The embedded cluster (its caller started it: `Cluster::ensure_up`).
    pub fn embedded(cluster: &embedded::Cluster) -> Database {
        let describe = format!("embedded cluster at {}", cluster.home_pg().display());
        Database { config: cluster.client_config(), tls: None, describe, cluster: Some(cluster.clone()) }
    }

    pub fn is_embedded(&self) -> bool {
        self.cluster.is_some()
    }

    /// Make the schema usable: the embedded cluster is migrated on demand (returns the migrations
    /// applied); an external one is checked to be at this wf's schema version.
    pub fn prepare(&self) -> Result<Vec<migrate::Applied>> {
        let mut client = self.connect_as("wf")?;
        let session = lock_watch::watch(self, &mut client);
        let prepared = if self.is_embedded() {
            migrate::apply(&mut client)
        } else {
            migrate::check_current(&mut client).map(|()| Vec::new())
        };
        if let Some(session) = session {
            lock_watch::unwatch(session);
        }
        prepared
    }

    /// A new connection for a command: a lock its statements wait for is said after a while
    /// (`lock_watch`).
    pub fn connect(&self) -> Result<Client> {
        let mut client = self.connect_as("wf")?;
        lock_watch::watch(self, &mut client);
        Ok(client)
    }

    /// A new connection that names itself in pg_stat_activity (e.g. `wf work NAME slot 0`).
    ///
    /// Every wait is bounded: connecting, and over TCP a peer that stops answering (keepalives,
    /// and an unacknowledged send fails after TCP_USER_TIMEOUT) breaks the connection instead of
    /// blocking forever.
    ///
    /// The embedded cluster's server, found gone without a shutdown, is started again first: its
    /// workers would otherwise wait for it until some other command did. One stopped by `wf db
    /// down` stays stopped.
    pub fn connect_as(&self, application_name: &str) -> Result<Client> {
        let error = match self.connect_once(application_name) {
            Ok(client) => return Ok(client),
            Err(error) => error,
        };
        let Some(cluster) = self.cluster.as_ref().filter(|cluster| cluster.crashed()) else {
            return Err(error);
        };
        crate::diag::diag!(
            "starting the embedded PostgreSQL cluster in {} again: its server stopped without a shutdown",
            cluster.home_pg().display()
        );
        cluster.ensure_up().with_context(|| format!("{error:#}; starting the embedded cluster again"))?;
        self.connect_once(application_name)
    }

    fn connect_once(&self, application_name: &str) -> Result<Client> {
        let mut config = self.config.clone();
        config.application_name(application_name);
        let patience = *config.get_connect_timeout().unwrap_or(&CONNECT_PATIENCE);
        config
            .connect_timeout(patience)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(10))
            .keepalives_interval(Duration::from_secs(2))
            .keepalives_retries(3)
            .tcp_user_timeout(Duration::from_secs(20));
        // The client library bounds only the socket's connect: a server that accepts and then
        // never answers (stopped, hung, a proxy in front of a dead one) would hold the startup
        // forever, where the kernel acknowledges every probe. So the whole of it runs on a thread
        // of its own, given up after the same patience (as libpq's connect_timeout). A thread
        // given up on ends when that server answers or the connection breaks; a server that takes
        // no more connections refuses them at the socket, so they stay few.
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        let tls = self.tls.clone();
        std::thread::Builder::new()
            .name("wf connect".to_string())
            // Given up on, the connection made late is dropped (closed) with the failed send.
            .spawn(move || {
                let connected = match tls.map(|tls| tls.for_attempt()) {
                    Some((tls, agreed)) => match config.connect(tls).map_err(anyhow::Error::from) {
                        // As libpq's prefer (and allow): a try with TLS that the server turned down
                        // (a certificate that does not verify, a user it takes without TLS only)
                        // is made again without. Not one that found the server gone or busy: that
                        // error goes as it is, for the caller to wait and retry; nor one where the
                        // server offered no TLS (the try went on without it: a wrong password is
                        // not tried twice).
                        Err(error)
                            if config.get_ssl_mode() == SslMode::Prefer
                                && agreed.load(std::sync::atomic::Ordering::SeqCst)
                                && failure::classify(&error) != failure::Failure::Transient =>
                        {
                            config.ssl_mode(SslMode::Disable);
                            config.connect(NoTls).map_err(|plain| {
                                anyhow::Error::from(plain).context(format!("with TLS: {error:#}; without TLS"))
                            })
                        }
                        connected => connected,
                    },
                    None => config.connect(NoTls).map_err(anyhow::Error::from),
                };
                drop(sender.send(connected))
            })
            .context("starting a thread to connect")?;
        match receiver.recv_timeout(patience) {
            Ok(connected) => connected.with_context(|| match &self.tls {
                Some(tls) => format!("connecting to {} ({tls:?})", self.describe),
                None => format!("connecting to {}", self.describe),
            }),
            Err(RecvTimeoutError::Disconnected) => {
                bail!("connecting to {}: the connection attempt ended unanswered", self.describe)
            }
            Err(RecvTimeoutError::Timeout) => bail!(
                "connecting to {}: the server accepted the connection but did not answer within {} s \
                 (stopped or hung; connect_timeout in the URL sets how long to wait)",
                self.describe,
                patience.as_secs_f64()
            ),
        }
    }

    /// Whether `client` (a connection of this database) speaks TLS: its protocol version and how
    /// far the server's certificate was checked (`none`, `verify-ca`, `verify-full`).
    pub fn tls_of(&self, client: &mut Client) -> Result<Option<(String, &'static str)>> {
        let version: Option<String> = client
            .query_one("SELECT (SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid() AND ssl)", &[])?
            .get(0);
        Ok(version.map(|version| (version, self.tls.as_ref().map_or("none", |tls| tls.checked))))
    }

    /// A connection whose waits are bounded on the server's side too: a statement gives up after
    /// `timeout`, and a wait for a lock sooner, after three quarters of it, as lock_not_available
    /// (`failure::is_lock_held`): the database answers, and another session holds the rows. A
    /// transaction left open that long without a statement (its client cut off before its COMMIT)
    /// ends and lets go of its rows' locks, which would otherwise hide a dead worker's job from
    /// every reaper, and the server probes a TCP client that stops answering as the client probes it.
    pub(crate) fn connect_bounded(&self, application_name: &str, timeout: Duration) -> Result<Client> {
        let mut client = self.connect_as(application_name)?;
        let ms = timeout.as_millis().max(1);
        let lock_ms = (ms * 3 / 4).max(1);
        client.batch_execute(&format!(
            "SET statement_timeout = {ms}; SET lock_timeout = {lock_ms}; SET idle_in_transaction_session_timeout = {ms};
             SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 2; SET tcp_keepalives_count = 3"
        ))?;
        Ok(client)
    }
}

/// The database's clock: every time that matters is the database's, never the client's (SPEC).
pub(crate) fn now(client: &mut impl GenericClient) -> Result<DateTime<Utc>> {
    Ok(client.query_one("SELECT now()", &[])?.get(0))
}

fn describe(config: &postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            postgres::config::Host::Tcp(name) => name.clone(),
            postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    format!(
        "database {} on {}",
        config.get_dbname().unwrap_or("(default)"),
        if hosts.is_empty() { "localhost".to_string() } else { hosts.join(",") }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that is not there is an outage whatever the sslmode: its error keeps the client's
    /// own (for the callers that wait and retry), and prefer does not try again without TLS.
    #[test]
    fn a_refused_connection_is_transient_with_every_sslmode() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        for mode in ["disable", "prefer", "require"] {
            let database =
                Database::external(&format!("host=127.0.0.1 port={port} user=u dbname=d sslmode={mode}")).unwrap();
            let Err(error) = database.connect() else { panic!("{mode}: connected to a port nothing listens on") };
            assert_eq!(failure::classify(&error), failure::Failure::Transient, "{mode}: {error:#}");
            assert!(!format!("{error:#}").contains("without TLS"), "{mode}: {error:#}");
        }
    }
}
