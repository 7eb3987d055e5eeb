//! TLS to an external database, with libpq's options in the connection string: `sslmode`,
//! `sslrootcert`, `sslcert`, `sslkey`. The server of these tests takes TCP connections with TLS
//! only (its pg_hba.conf has `hostssl` lines and no `host` line), so every command that works
//! over TCP spoke TLS; the one exception, role `plain`, is taken without TLS only.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::support::fixtures::{enqueue, synced};
use crate::support::harness::{PrivateCluster, Proxy, TestEnv, wait_for};

#[test]
fn a_server_that_takes_only_tls_is_reached_and_its_certificate_checked_as_the_url_says() {
    let (cluster, files) = PrivateCluster::start_tls();
    let port = cluster.port();
    let (ca, rogue) = (files.file("ca.crt"), files.file("rogue.crt"));
    let (ca, rogue) = (ca.to_str().unwrap(), rogue.to_str().unwrap());
    let url = |host: &str, user: &str, tail: &str| format!("host={host} port={port} user={user} dbname=wf {tail}");
    let checked = url("localhost", "wf", &format!("sslmode=verify-full sslrootcert={ca}"));
    // Every command of this world, a worker's too, goes over TLS, checked to the host name.
    let env = cluster.env().env("DATABASE_URL", &checked);
    let status = |database: &str| env.wf(["status"]).env("DATABASE_URL", database).run();

    synced(&env);
    let id = enqueue(&env, "t/echo", json!({"over": "tls"}));
    env.wf(["work", "--drain", "--concurrency", "1"]).ok();
    let (outcome, result): (String, serde_json::Value) = {
        let row = env
            .db()
            .query_one("SELECT status, result FROM job_completed WHERE job_id = $1::text::uuid", &[&id])
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(outcome, "success", "{result}");
    assert_eq!(result["input"]["over"], "tls", "{result}");

    let client =
        |key: &str| format!("sslcert={} sslkey={}", files.file("client.crt").display(), files.file(key).display());
    let legacy = std::fs::read_to_string(files.file("client-legacy.key")).unwrap();
    assert!(legacy.starts_with("-----BEGIN EC PRIVATE KEY-----"), "{legacy}");
    let url_form = format!(
        "postgresql://wf@localhost:{port}/wf?connect_timeout=5&sslmode=verify-full&sslrootcert={}",
        ca.replace('/', "%2F")
    );
    let works = [
        // prefer, the default: the TLS the server offers.
        url("localhost", "wf", ""),
        url("localhost", "wf", "sslmode=require"),
        // verify-ca checks the authority, not the name.
        url("127.0.0.1", "wf", &format!("sslmode=verify-ca sslrootcert={ca}")),
        url("localhost", "certified", &format!("sslmode=verify-full sslrootcert={ca} {}", client("client.key"))),
        url("localhost", "certified", &format!("sslmode=verify-full sslrootcert={ca} {}", client("client-legacy.key"))),
        url_form,
        // An address without a host name is its own name.
        format!("hostaddr=127.0.0.1 port={port} user=wf dbname=wf"),
        format!("hostaddr=127.0.0.1 port={port} user=wf dbname=wf sslmode=verify-ca sslrootcert={ca}"),
        // A Unix socket beside a TCP host: no TLS over the socket, and no name to give one.
        format!("{} localhost port={port},{port} user=wf dbname=wf", cluster.url().split_whitespace().next().unwrap())
            .replacen(' ', ",", 1),
        // prefer: a try with TLS that the server refuses is made again without.
        url("localhost", "plain", ""),
        url("localhost", "wf", "sslrootcert='' sslcert='' sslmode=require"),
        // SCRAM bound to this TLS channel: the server checks the certificate digest wf sends.
        url(
            "localhost",
            "scrammer",
            &format!("password=secret-word channel_binding=require sslmode=verify-full sslrootcert={ca}"),
        ),
    ];
    for database in works {
        let run = status(&database);
        assert_eq!(run.code, 0, "{database}: {run:?}");
    }
    // `wf db status` says whether its connection is encrypted, and how far the server was checked.
    let tls_of =
        |database: &str| env.wf(["db", "status", "--json"]).env("DATABASE_URL", database).ok().json()["tls"].clone();
    let checked = tls_of(&checked);
    assert!(checked["version"].as_str().unwrap().starts_with("TLSv1."), "{checked}");
    assert_eq!(checked["checked"], "verify-full");
    assert_eq!(tls_of(&url("127.0.0.1", "wf", &format!("sslmode=verify-ca sslrootcert={ca}")))["checked"], "verify-ca");
    assert_eq!(tls_of(&url("localhost", "wf", "sslmode=require"))["checked"], "none");
    assert_eq!(tls_of(&cluster.url()), serde_json::Value::Null, "over the Unix socket");
    assert_eq!(tls_of(&url("localhost", "plain", "")), serde_json::Value::Null, "taken without TLS after a try with");
    // The PGSSL* variables give what the URL does not, as for libpq: a check asked for there is made.
    let bare = url("localhost", "wf", "");
    let with_variables = |root: &str| {
        env.wf(["db", "status", "--json"])
            .env("DATABASE_URL", &bare)
            .env("PGSSLMODE", "verify-full")
            .env("PGSSLROOTCERT", root)
            .run()
    };
    let run = with_variables(rogue);
    assert!(run.code == 1 && run.stderr.contains("certificate verify failed"), "{run:?}");
    assert_eq!(with_variables(ca).expect_code(0).json()["tls"]["checked"], "verify-full");
    let refused = [
        (url("localhost", "wf", "sslmode=disable"), "no encryption"),
        // The certificate names localhost, not 127.0.0.1.
        (url("127.0.0.1", "wf", &format!("sslmode=verify-full sslrootcert={ca}")), "certificate verify failed"),
        (url("localhost", "wf", &format!("sslmode=verify-full sslrootcert={rogue}")), "certificate verify failed"),
        // A root certificate given makes require check the authority, as libpq does.
        (url("localhost", "wf", &format!("sslmode=require sslrootcert={rogue}")), "certificate verify failed"),
        (url("localhost", "wf", "sslmode=verify-full"), "needs the root certificates"),
        // A `?` in the password does not hide the query's TLS options.
        (
            format!("postgresql://wf:pa?ss@localhost:{port}/wf?sslmode=verify-full&sslrootcert={rogue}"),
            "certificate verify failed",
        ),
        (url("localhost", "plain", "sslmode=require"), "pg_hba.conf rejects connection"),
        (url("localhost", "wf", "sslrootcert=system sslmode=require"), "may not be used with sslrootcert=system"),
        // The system's roots do not know the test authority.
        (url("localhost", "wf", "sslmode=verify-full sslrootcert=system"), "certificate verify failed"),
        (
            url("localhost", "scrammer", &format!("password=secret-word sslmode=verify-full sslrootcert={rogue}")),
            "certificate verify failed",
        ),
        (
            url("localhost", "wf", "sslmode=verify-full sslrootcert=/nowhere/ca.crt"),
            "reading sslrootcert /nowhere/ca.crt",
        ),
        (url("localhost", "wf", "sslmode=verified"), "sslmode=verified in the database URL"),
        (url("localhost", "certified", &format!("sslmode=verify-full sslrootcert={ca}")), "certificate"),
        (
            url("localhost", "wf", &format!("sslmode=verify-full sslrootcert={ca} sslkey=/nowhere/k")),
            "needs its certificate",
        ),
    ];
    let shared_key = env.dir.path().join("shared.key");
    std::fs::copy(files.file("client.key"), &shared_key).unwrap();
    std::fs::set_permissions(&shared_key, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let with_key = |key: &Path| {
        let client = files.file("client.crt");
        url(
            "localhost",
            "certified",
            &format!("sslmode=verify-full sslrootcert={ca} sslcert={} sslkey={}", client.display(), key.display()),
        )
    };
    let refused = refused.into_iter().chain([
        // No passphrase is asked for (it would wait on the terminal or stdin).
        (with_key(&files.file("client-encrypted.key")), "an encrypted key is not read"),
        (with_key(&shared_key), "has group or world access"),
    ]);
    for (database, says) in refused {
        let run = status(&database);
        assert_eq!(run.code, 1, "{database}: {run:?}");
        assert!(run.stderr.contains(says), "{database}: expected {says:?} in {}", run.stderr);
        assert!(!run.stderr.contains("secret-word"), "no password in a message: {}", run.stderr);
    }

    // The authority in ~/.postgresql/root.crt checks the server when the URL names none.
    let home = env.dir.path().join(".postgresql");
    std::fs::create_dir(&home).unwrap();
    std::fs::copy(ca, home.join("root.crt")).unwrap();
    let run = status(&url("localhost", "wf", "sslmode=verify-full"));
    assert_eq!(run.code, 0, "{run:?}");
    std::fs::copy(rogue, home.join("root.crt")).unwrap();
    let run = status(&url("localhost", "wf", "sslmode=require"));
    assert!(run.code == 1 && run.stderr.contains("certificate verify failed"), "{run:?}");
    // prefer tries again without TLS, which this server refuses: both are said.
    let run = status(&url("localhost", "wf", ""));
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr.contains("certificate verify failed") && run.stderr.contains("without TLS: db error"),
        "{run:?}"
    );
}

/// A server that offers no TLS (the shared test cluster, over TCP through a proxy): the default
/// goes on without it, `require` refuses to.
#[test]
fn require_refuses_a_server_without_tls_and_prefer_goes_on_without_it() {
    let env = TestEnv::new();
    let proxy = Proxy::start();
    let database = proxy.url(&env.dbname);
    let run = env.wf(["status"]).env("DATABASE_URL", &database).run();
    assert_eq!(run.code, 0, "{database}: {run:?}");
    let shown = env.wf(["db", "status", "--json"]).env("DATABASE_URL", &database).ok().json();
    assert_eq!(shown["tls"], serde_json::Value::Null, "{shown}");
    // A failure there (a database that does not exist) is the server's answer without TLS, and
    // not asked again "without TLS".
    let missing = proxy.url("no_such_database");
    let run = env.wf(["status"]).env("DATABASE_URL", &missing).run();
    assert!(run.code == 1 && run.stderr.contains("does not exist"), "{run:?}");
    assert!(!run.stderr.contains("without TLS"), "tried once: {run:?}");
    let required = format!("{database} sslmode=require");
    let run = env.wf(["status"]).env("DATABASE_URL", &required).run();
    assert_eq!(run.code, 1, "{required}: {run:?}");
    assert!(run.stderr.contains("server does not support TLS"), "{}", run.stderr);
}

/// A connection string without a password takes it from libpq's password file (`~/.pgpass`, or the
/// file PGPASSFILE names), read only when its group and others may not read it.
#[test]
fn a_password_comes_from_the_password_file_when_the_url_has_none() {
    let (cluster, files) = PrivateCluster::start_tls();
    let env = cluster.env();
    let port = cluster.port();
    let database = format!(
        "host=localhost port={port} user=scrammer dbname=wf sslmode=verify-full sslrootcert={}",
        files.file("ca.crt").display()
    );
    let status = || env.wf(["status"]).env("DATABASE_URL", &database).run();
    let run = status();
    assert!(run.code == 1 && run.stderr.contains("password missing"), "{run:?}");

    let passfile = env.dir.path().join(".pgpass");
    std::fs::write(
        &passfile,
        format!("# the test's\nother:{port}:wf:scrammer:wrong\nlocalhost:{port}:wf:scrammer:secret-word\n"),
    )
    .unwrap();
    let mode = |mode: u32| {
        std::fs::set_permissions(&passfile, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    };
    mode(0o644);
    let run = status();
    assert!(run.code == 1 && run.stderr.contains("has group or world access"), "{run:?}");
    mode(0o600);
    let run = status();
    assert_eq!(run.code, 0, "{run:?}");
    assert!(!run.stderr.contains("secret-word"), "{run:?}");

    let elsewhere = env.dir.path().join("passwords");
    std::fs::write(&elsewhere, format!("*:{port}:*:scrammer:wrong\n")).unwrap();
    std::fs::set_permissions(&elsewhere, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let run = env.wf(["status"]).env("DATABASE_URL", &database).env("PGPASSFILE", &elsewhere).run();
    assert!(run.code == 1 && run.stderr.contains("password authentication failed"), "PGPASSFILE is read: {run:?}");
    let given = format!("{database} password=secret-word");
    let run = env.wf(["status"]).env("DATABASE_URL", &given).env("PGPASSFILE", &elsewhere).run();
    assert_eq!(run.code, 0, "the URL's own password comes first: {run:?}");
}

/// A wait over TCP with the default sslmode (prefer, here over TLS) goes on through a restart of
/// the database: while the server is down, a refused connection is an outage to wait out, not a
/// try with TLS to make again without.
#[test]
fn a_wait_over_tls_goes_on_through_a_restart_of_the_database() {
    let (cluster, _files) = PrivateCluster::start_tls();
    let database = format!("host=localhost port={} user=wf dbname=wf", cluster.port());
    let env = cluster.env().env("DATABASE_URL", &database);
    synced(&env);
    let id = env.wf(["enqueue", "t/echo", "--in", "1h"]).ok().stdout.trim().to_string();
    let waiter = env.wf(["result", &id, "--wait", "--timeout", "120s"]).start();
    wait_for(Duration::from_secs(30), "the wait", || {
        env.scalar::<bool>("SELECT coalesce(bool_or(awaited), false) FROM job_queue").then_some(())
    });
    crate::waits::restart_and_cancel(&cluster, &env, &id, waiter);
}
