//! The embedded default cluster: with no DATABASE_URL, wf creates, starts and migrates a private
//! PostgreSQL cluster under WF_HOME, as root (run as `postgres`, files under /var/lib/windforce)
//! and as a normal user, and starts it again after a crash.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use wf::db::embedded::is_root;

use crate::support::checks::pin;
use crate::support::harness::{Run, TestEnv, Wf, copy_of_wf, wait_for, wf_binary};

const CLUSTER_MESSAGE: &str = "embedded PostgreSQL cluster";

/// A user other than root to run `wf` as.
struct OtherUser {
    uid: u32,
    gid: u32,
    /// A copy of the wf binary where that user can reach it.
    bin: PathBuf,
    /// World-traversable, holds `bin` and WF_HOME.
    _shared: tempfile::TempDir,
}

/// A fresh WF_HOME and no DATABASE_URL. When dropped, even by a failing test, the cluster is
/// stopped and its folders removed.
struct EmbeddedHome {
    env: TestEnv,
    home: PathBuf,
    other_user: Option<OtherUser>,
}

impl EmbeddedHome {
    /// As the user running the tests.
    fn new() -> EmbeddedHome {
        let env = TestEnv::new();
        let home = env.home();
        EmbeddedHome { env, home, other_user: None }
    }

    /// As a normal user: `nobody` when the tests run as root, else the user running them.
    /// `home_name` is the last part of WF_HOME (long ones make a long socket path).
    fn normal_user(home_name: &str) -> EmbeddedHome {
        let env = TestEnv::new();
        if !is_root() {
            let home = env.dir.path().join(home_name);
            return EmbeddedHome { env, home, other_user: None };
        }
        let (uid, gid) = nobody();
        let shared = tempfile::Builder::new().prefix("wf-nobody-").tempdir().unwrap();
        fs::set_permissions(shared.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let bin = copy_of_wf(shared.path());
        let home = shared.path().join(home_name);
        fs::create_dir(&home).unwrap();
        std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
        EmbeddedHome { env, home, other_user: Some(OtherUser { uid, gid, bin, _shared: shared }) }
    }

    fn wf<const N: usize>(&self, args: [&str; N]) -> Wf {
        let Some(user) = &self.other_user else {
            return self.env.wf(args).env_remove("DATABASE_URL").env("WF_HOME", &self.home);
        };
        Wf::new(args)
            .env("HOME", &self.home)
            .env("WF_HOME", &self.home)
            .current_dir(&self.home)
            .run_as(&user.bin, user.uid, user.gid)
    }

    fn status(&self) -> Value {
        self.wf(["db", "status", "--json"]).ok().json()
    }

    fn pg(&self) -> PathBuf {
        self.home.join("pg")
    }

    /// The first lines of `postmaster.pid`: pid, data folder, start time, port, socket folder.
    fn postmaster_pid_file(&self) -> Option<Vec<String>> {
        let text = fs::read_to_string(self.pg().join("data/postmaster.pid")).ok()?;
        Some(text.lines().map(str::to_string).collect())
    }

    fn assert_running_and_migrated(&self) {
        let status = self.status();
        assert_eq!(status["embedded"], true, "{status}");
        assert_eq!(status["running"], true, "{status}");
        assert_eq!(status["schema_version"], wf::db::migrate::latest_version(), "{status}");
        assert_eq!(status["location"], self.pg().display().to_string(), "{status}");
    }

    /// `wf source add` and `wf sync` of a small repository owned by the user running wf (git
    /// refuses to fetch a local repository of another user) on this embedded cluster: the catalog
    /// shows its action and the store holds the tree with its marker.
    fn assert_sync_works(&self) {
        let repo = crate::support::harness::GitRepo::new();
        repo.manifest(&serde_json::json!({"apps": {"hello": {"actions": {"hi": {"entrypoint": "hi.ts"}}}}}));
        repo.file("hi.ts", "export function main() { return 'hi'; }\n");
        let commit = repo.commit("hello");
        if let Some(user) = &self.other_user {
            let owner = format!("{}:{}", user.uid, user.gid);
            let given = Command::new("chown").args(["-R", &owner]).arg(repo.path()).status().unwrap();
            assert!(given.success());
            let reachable = Command::new("chmod").arg("a+rx").arg(repo.path()).status().unwrap();
            assert!(reachable.success());
        }
        self.wf(["source", "add", "hello", &repo.url()]).ok();
        let synced = self.wf(["sync", "hello", "--json"]).ok().json();
        assert_eq!(synced["commit_sha"], commit.as_str(), "{synced}");
        let actions = self.wf(["actions", "--json"]).ok().json();
        assert_eq!(actions[0]["action"], "hi", "{actions}");
        let source_id = self.wf(["source", "list", "--json"]).ok().json()[0]["id"].as_str().unwrap().to_string();
        let marker = self.home.join("store").join(source_id).join(&commit).join(".windforce_clone_complete");
        assert!(marker.is_file(), "{marker:?}");
    }

    /// The running server's pid.
    fn server_pid(&self) -> i32 {
        self.postmaster_pid_file().expect("postmaster.pid of the running server")[0].parse().unwrap()
    }

    /// SIGKILL the server and wait until it is gone; its pid.
    fn kill_server(&self) -> i32 {
        let pid = self.server_pid();
        // SAFETY: kill sends a signal to the server's process.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        // The killed server stays a zombie when its parent (init, in a container) does not reap it.
        wait_for(Duration::from_secs(10), "the killed server to die", || {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let gone =
                stat.is_empty() || stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
            gone.then_some(())
        });
        pid
    }

    fn assert_stopped(&self) {
        let status = self.status();
        assert_eq!((&status["running"], &status["created"]), (&json!(false), &json!(true)), "{status}");
        let table = self.wf(["db", "status"]).ok().stdout;
        assert!(table.lines().nth(1).is_some_and(|row| row.contains("  stopped")), "{table}");
    }
}

impl Drop for EmbeddedHome {
    fn drop(&mut self) {
        let socket_dir = self.postmaster_pid_file().and_then(|lines| lines.get(4).map(PathBuf::from));
        let down = self.wf(["db", "down"]).run();
        if down.code != 0 {
            eprintln!("cleanup: wf db down failed: {down:?}");
        }
        if let Ok(target) = fs::read_link(self.pg()) {
            let _ = fs::remove_dir_all(target);
        }
        if let Some(dir) = socket_dir.filter(|dir| dir.to_string_lossy().starts_with("/tmp/windforce-")) {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

fn nobody() -> (u32, u32) {
    let name = std::ffi::CString::new("nobody").unwrap();
    // SAFETY: getpwnam returns NULL or a pointer to a valid record, read at once.
    let entry = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(!entry.is_null(), "the tests need a `nobody` user to run wf as a normal user");
    // SAFETY: entry is non-null.
    unsafe { ((*entry).pw_uid, (*entry).pw_gid) }
}

fn postgres_uid() -> u32 {
    let name = std::ffi::CString::new("postgres").unwrap();
    // SAFETY: as in nobody().
    let entry = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(!entry.is_null(), "as root, the embedded cluster needs a `postgres` user");
    // SAFETY: entry is non-null.
    unsafe { (*entry).pw_uid }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().mode() & 0o777
}

fn mentions_of_the_cluster(run: &Run) -> usize {
    run.stderr.matches(CLUSTER_MESSAGE).count()
}

#[test]
fn db_up_creates_starts_and_migrates_the_embedded_cluster() {
    let embedded = EmbeddedHome::new();
    let up = embedded.wf(["db", "up"]).ok();
    assert!(up.stderr.contains("creating and starting the embedded PostgreSQL cluster"), "{up:?}");
    embedded.assert_running_and_migrated();

    let pg = embedded.pg();
    if is_root() {
        // PostgreSQL refuses root: the cluster belongs to `postgres`, outside root's home.
        let target = fs::read_link(&pg).expect("as root, WF_HOME/pg is a link");
        assert!(target.starts_with("/var/lib/windforce/"), "{target:?}");
        assert_eq!(mode(Path::new("/var/lib/windforce")), 0o755, "postgres must traverse /var/lib/windforce");
        assert_eq!(fs::metadata(&target).unwrap().uid(), postgres_uid());
        assert_eq!(mode(&target), 0o700, "trust authentication: only the owner may reach the socket");
    } else {
        assert!(fs::symlink_metadata(&pg).unwrap().is_dir());
        assert_eq!(mode(&pg), 0o700);
    }

    let again = embedded.wf(["db", "up"]).ok();
    assert_eq!(mentions_of_the_cluster(&again), 0, "a running cluster is left alone: {again:?}");
    embedded.assert_running_and_migrated();
    let up = embedded.wf(["db", "up", "--json"]).ok();
    let dir = &embedded.home;
    pin(&up, dir, &["schema_version"], r#"{"path": "<dir>/pg", "running": true, "schema_version": "<number>"}"#);
    let status = embedded.wf(["db", "status", "--json"]).ok();
    let expected = r#"{"created": true, "embedded": true, "held_down": false, "latest_version": "<number>", "location": "<dir>/pg", "running": true,
                       "schema_version": "<number>", "tls": null}"#;
    pin(&status, dir, &["schema_version", "latest_version"], expected);

    let down = embedded.wf(["db", "down"]).ok();
    assert!(down.stderr.contains("embedded cluster stopped"), "{down:?}");
    assert!(!down.stderr.contains("warning"), "no worker was live: {down:?}");
    embedded.assert_stopped();
    // Stopped on purpose, it stays stopped: no other command starts it (they did, so a `wf jobs`
    // during a copy of the cluster's files started it under the copy).
    let refused = embedded.wf(["jobs"]).run().expect_code(1);
    assert!(refused.stderr.contains("was stopped by `wf db down`: `wf db up` starts it again"), "{refused:?}");
    embedded.assert_stopped();
    let table = embedded.wf(["db", "status"]).ok().stdout;
    assert!(table.contains("  stopped (wf db down)  "), "{table}");
    assert_eq!(embedded.status()["held_down"], true);
    let down_again = embedded.wf(["db", "down"]).ok();
    assert!(down_again.stderr.contains("was not running"), "{down_again:?}");
    pin(&embedded.wf(["db", "down", "--json"]).ok(), &embedded.home, &[], r#"{"stopped": false}"#);

    let restart = embedded.wf(["db", "up"]).ok();
    assert!(restart.stderr.contains("starting the embedded PostgreSQL cluster"), "{restart:?}");
    assert!(!restart.stderr.contains("creating"), "{restart:?}");
    assert_eq!(embedded.status()["held_down"], false, "wf db up takes the mark away");
    embedded.assert_running_and_migrated();
    embedded.assert_sync_works();
    // A running server is used whatever the mark says (one left by hand, say).
    fs::write(embedded.home.join("pg.down"), "").unwrap();
    embedded.wf(["jobs"]).ok();
}

#[test]
fn db_up_starts_the_cluster_again_after_its_server_was_killed() {
    let embedded = EmbeddedHome::new();
    embedded.wf(["db", "up"]).ok();
    let pid = embedded.kill_server();
    assert!(embedded.postmaster_pid_file().is_some(), "the crash leaves its pid file behind");
    embedded.assert_stopped();

    let up = embedded.wf(["db", "up"]).ok();
    assert!(up.stderr.contains("starting the embedded PostgreSQL cluster"), "{up:?}");
    embedded.assert_running_and_migrated();
    let new_pid: i32 = embedded.postmaster_pid_file().unwrap()[0].parse().unwrap();
    assert_ne!(new_pid, pid);
}

/// A worker on the embedded cluster starts its server again when the server died without a
/// shutdown, before any other command does, and goes on with its jobs; a server stopped by `wf db
/// down` it leaves stopped.
#[test]
fn a_worker_starts_the_embedded_cluster_again_after_its_server_was_killed() {
    let embedded = EmbeddedHome::new();
    embedded.assert_sync_works();
    let log = embedded.env.dir.path().join("worker.log");
    let _worker = embedded.wf(["work", "--concurrency", "1"]).spawn(&log);
    let first = embedded.wf(["enqueue", "hello/hi", "--wait"]).ok();
    assert_eq!(first.stdout.trim(), "\"hi\"", "{first:?}");

    let killed = embedded.kill_server();
    let revived = wait_for(Duration::from_secs(60), "the worker to start the server again", || {
        // The file may be read empty, as the new server is writing it.
        embedded.postmaster_pid_file().and_then(|lines| lines.first()?.parse::<i32>().ok()).filter(|pid| *pid != killed)
    });
    let said = fs::read_to_string(&log).unwrap();
    assert!(said.contains("starting the embedded PostgreSQL cluster in") && said.contains("again"), "{said}");
    let second = embedded.wf(["enqueue", "hello/hi", "--wait"]).ok();
    assert_eq!(second.stdout.trim(), "\"hi\"", "{second:?}");
    assert_eq!(embedded.server_pid(), revived, "the command after the revival found it running");

    let down = embedded.wf(["db", "down"]).ok();
    let warning = "warning: stopping the cluster under 1 live worker(s) (";
    assert!(down.stderr.contains(warning) && down.stderr.contains("running 0 job(s): they wait"), "{down:?}");
    // Longer than the worker's longest wait between two tries to reconnect (5 s).
    std::thread::sleep(Duration::from_secs(8));
    assert!(embedded.postmaster_pid_file().is_none(), "a cluster stopped on purpose stays stopped");
    let said = fs::read_to_string(&log).unwrap();
    assert_eq!(said.matches("starting the embedded PostgreSQL cluster").count(), 1, "{said}");
}

/// The server's log grew for as long as the cluster lived (no rotation); past 10 MiB it is set
/// aside as `postgres.log.1` when the server starts, and the new log holds that start.
#[test]
fn a_long_server_log_is_set_aside_when_the_server_starts() {
    let embedded = EmbeddedHome::new();
    embedded.wf(["db", "up"]).ok();
    embedded.wf(["db", "down"]).ok();
    let log = fs::canonicalize(embedded.pg()).unwrap().join("postgres.log");
    let long = vec![b'x'; 10 * 1024 * 1024 + 1];
    fs::OpenOptions::new().append(true).open(&log).unwrap().write_all(&long).unwrap();
    let before = fs::metadata(&log).unwrap().len();
    embedded.wf(["db", "up"]).ok();
    embedded.assert_running_and_migrated();
    let aside = log.with_file_name("postgres.log.1");
    assert_eq!(fs::metadata(&aside).map(|meta| meta.len()).ok(), Some(before), "the long log set aside whole");
    let new = fs::read_to_string(&log).unwrap();
    assert!(new.len() < 1024 * 1024 && new.contains("database system is ready"), "{new}");
    // A short log is kept as it is.
    embedded.wf(["db", "down"]).ok();
    embedded.wf(["db", "up"]).ok();
    assert!(fs::read_to_string(&log).unwrap().starts_with(&new), "the short log was kept and appended to");
}

/// A cluster that lost its PG_VERSION (by hand here) is not a cluster wf made and left
/// incomplete: it is refused and kept, running or not (it was removed and created again empty,
/// under its running server too).
#[test]
fn a_cluster_without_pg_version_is_refused_and_kept() {
    let embedded = EmbeddedHome::new();
    embedded.wf(["db", "up"]).ok();
    let data = embedded.pg().join("data");
    let server = embedded.postmaster_pid_file().unwrap()[0].clone();
    fs::rename(data.join("PG_VERSION"), embedded.pg().join("PG_VERSION.away")).unwrap();
    let runs = [
        embedded.wf(["db", "status"]).run(),
        embedded.wf(["jobs"]).run(),
        embedded.wf(["db", "up"]).run(),
        embedded.wf(["db", "down"]).run(),
    ];
    for run in runs {
        assert_eq!(run.code, 1, "{run:?}");
        assert!(run.stderr.contains("has no PG_VERSION) and wf will not remove it"), "{run:?}");
    }
    assert!(data.join("postgresql.conf").is_file() && data.join("base").is_dir(), "the cluster is kept");
    fs::rename(embedded.pg().join("PG_VERSION.away"), data.join("PG_VERSION")).unwrap();
    embedded.assert_running_and_migrated();
    assert_eq!(embedded.postmaster_pid_file().unwrap()[0], server, "the same server, never stopped");
}

/// `wf db up` killed while initdb makes the cluster (initdb goes on alone): no cluster without
/// wf's settings is left (it was: listening on TCP, any local user let in as its superuser); the
/// next `wf db up` makes one with them. Connections over TCP are refused by its rules too.
#[test]
fn a_creation_killed_midway_leaves_no_cluster_without_its_settings() {
    let embedded = EmbeddedHome::new();
    let mut up = embedded.wf(["db", "up"]).start();
    wait_for(Duration::from_secs(60), "initdb to begin", || {
        let entries = fs::read_dir(embedded.pg()).ok()?;
        entries.flatten().any(|entry| entry.file_name().to_string_lossy().starts_with("data")).then_some(())
    });
    up.kill().unwrap();
    up.wait().unwrap();
    embedded.wf(["db", "up"]).ok();
    embedded.assert_running_and_migrated();
    let conf = fs::read_to_string(embedded.pg().join("data/postgresql.conf")).unwrap();
    assert!(conf.contains("listen_addresses = ''"), "{conf}");
    let hba = fs::read_to_string(embedded.pg().join("data/pg_hba.conf")).unwrap();
    let rules: Vec<&str> = hba.lines().filter(|line| line.starts_with("host")).collect();
    assert!(!rules.is_empty() && rules.iter().all(|rule| rule.ends_with("reject")), "{hba}");
}

#[test]
fn concurrent_db_up_on_a_fresh_home_all_succeed() {
    let embedded = EmbeddedHome::new();
    let children: Vec<_> = (0..3).map(|_| embedded.wf(["db", "up"]).start()).collect();
    let runs: Vec<Run> = children.into_iter().map(|child| child.finish()).collect();
    for run in &runs {
        assert_eq!(run.code, 0, "{run:?}");
    }
    let creators = runs.iter().filter(|run| run.stderr.contains("creating and starting")).count();
    assert_eq!(creators, 1, "exactly one process creates the cluster: {runs:?}");
    embedded.assert_running_and_migrated();
}

#[test]
fn a_normal_user_gets_the_cluster_in_wf_home() {
    let embedded = EmbeddedHome::normal_user("home");
    let up = embedded.wf(["db", "up"]).ok();
    assert!(up.stderr.contains("creating and starting"), "{up:?}");
    embedded.assert_running_and_migrated();

    let pg = embedded.pg();
    let meta = fs::symlink_metadata(&pg).unwrap();
    assert!(meta.is_dir(), "the cluster is in WF_HOME/pg itself, not linked to /var/lib");
    assert!(pg.join("data/PG_VERSION").is_file());
    assert_eq!(meta.uid(), fs::metadata(&embedded.home).unwrap().uid(), "owned by the user running wf");
    assert_eq!(embedded.postmaster_pid_file().unwrap()[4], pg.display().to_string(), "socket in WF_HOME/pg");
    embedded.assert_sync_works();

    embedded.wf(["db", "down"]).ok();
    embedded.assert_stopped();
}

#[test]
fn a_wf_home_too_long_for_a_socket_path_gets_its_socket_under_tmp() {
    let embedded = EmbeddedHome::normal_user(&format!("home-{}", "long".repeat(20)));
    assert!(embedded.pg().join(".s.PGSQL.5432").as_os_str().len() > 107, "the path must not fit a socket");
    embedded.wf(["db", "up"]).ok();
    embedded.assert_running_and_migrated();

    let socket_dir = PathBuf::from(&embedded.postmaster_pid_file().unwrap()[4]);
    assert!(socket_dir.to_string_lossy().starts_with("/tmp/windforce-"), "{socket_dir:?}");
    assert_eq!(mode(&socket_dir), 0o700, "trust authentication: only the owner may reach the socket");

    // A reboot empties /tmp: the next start makes the socket folder again.
    embedded.wf(["db", "down"]).ok();
    fs::remove_dir_all(&socket_dir).unwrap();
    embedded.wf(["db", "up"]).ok();
    embedded.assert_running_and_migrated();
}

/// pg_ctl starts the server through /bin/sh with the data folder in double quotes: a WF_HOME
/// holding `$(...)` ran it as a command (as a normal user, whose cluster lives in WF_HOME), and
/// left an initialized cluster that could not start. Refused before anything is made.
#[test]
fn a_wf_home_the_shell_would_read_is_refused_before_anything_is_made() {
    let embedded = EmbeddedHome::normal_user("home-$(touch PROOF)");
    let run = embedded.wf(["db", "up"]).run().expect_code(1);
    assert!(run.stderr.contains("which pg_ctl would hand to a shell"), "{}", run.stderr);
    assert!(!embedded.home.join("PROOF").exists(), "the shell ran the WF_HOME's command");
    assert!(!embedded.pg().exists(), "nothing made: {:?}", embedded.pg());
}

#[test]
fn a_command_without_database_url_says_once_that_it_creates_the_cluster() {
    let embedded = EmbeddedHome::new();
    let first = embedded.wf(["actions"]).ok();
    assert_eq!(mentions_of_the_cluster(&first), 1, "{first:?}");
    assert!(first.stderr.contains("creating and starting the embedded PostgreSQL cluster"), "{first:?}");
    assert!(first.stderr.contains("DATABASE_URL"), "says how to use another database: {first:?}");
    let second = embedded.wf(["actions"]).ok();
    assert_eq!(mentions_of_the_cluster(&second), 0, "{second:?}");
    embedded.assert_running_and_migrated();
}

#[test]
fn an_existing_empty_wf_home_pg_is_used_and_a_wrong_link_is_repaired() {
    let embedded = EmbeddedHome::new();
    fs::create_dir_all(embedded.pg()).unwrap();
    embedded.wf(["db", "up"]).ok();
    embedded.assert_running_and_migrated();
    if is_root() {
        // A link that points elsewhere (a WF_HOME restored from a backup, say) is put right.
        let target = fs::read_link(embedded.pg()).unwrap();
        embedded.wf(["db", "down"]).ok();
        fs::remove_file(embedded.pg()).unwrap();
        std::os::unix::fs::symlink("/nonexistent", embedded.pg()).unwrap();
        embedded.wf(["db", "up"]).ok();
        assert_eq!(fs::read_link(embedded.pg()).unwrap(), target);
        embedded.assert_running_and_migrated();
    }
}

/// A WF_HOME moved while its cluster runs keeps that cluster and what it holds. As root the
/// cluster is named after WF_HOME's path: before, the next command found none of the new path's
/// name, made one, empty, and pointed the link at it, the old server left running unreachable.
#[test]
fn a_moved_wf_home_keeps_its_cluster() {
    let mut embedded = EmbeddedHome::new();
    let repo = crate::support::harness::GitRepo::new();
    repo.file("README", "kept\n");
    repo.commit("kept");
    embedded.wf(["source", "add", "kept", &repo.url()]).ok();
    let target = fs::read_link(embedded.pg()).ok();
    let moved = embedded.env.dir.path().join("moved-home");
    fs::rename(&embedded.home, &moved).unwrap();
    embedded.home = moved;
    embedded.assert_running_and_migrated();
    let sources = embedded.wf(["source", "list", "--json"]).ok().json();
    assert_eq!(sources[0]["name"], "kept", "{sources}");
    assert_eq!(fs::read_link(embedded.pg()).ok(), target, "the same cluster");
}

/// A user other than root on a WF_HOME whose cluster is root's was told it was stopped (`db
/// status`, `db down`: "not running", exit 0) while it ran, or failed on the lock file: each says
/// whose it is, and changes nothing.
#[test]
fn a_normal_user_on_roots_wf_home_is_told_whose_cluster_it_is() {
    if !is_root() {
        return;
    }
    let embedded = EmbeddedHome::normal_user("home");
    let as_root = |args: &[&str]| embedded.env.wf(args).env_remove("DATABASE_URL").env("WF_HOME", &embedded.home);
    as_root(&["db", "up"]).ok();
    for args in [["db", "status"], ["db", "down"], ["db", "up"]] {
        let run = embedded.wf(args).run().expect_code(1);
        assert!(run.stderr.contains("links to root's embedded cluster"), "{args:?}: {}", run.stderr);
    }
    let status = as_root(&["db", "status", "--json"]).ok().json();
    assert_eq!(status["running"], true, "still running: {status}");
    as_root(&["db", "down"]).ok();
}

#[test]
fn something_else_in_place_of_wf_home_pg_is_refused_and_kept() {
    let embedded = EmbeddedHome::new();
    fs::create_dir_all(&embedded.home).unwrap();
    fs::write(embedded.pg(), "not a cluster").unwrap();
    let up = embedded.wf(["db", "up"]).run();
    assert_eq!(up.code, 1, "{up:?}");
    assert!(up.stderr.starts_with("error: ") && up.stderr.contains("move"), "says what to do: {up:?}");
    assert!(up.stderr.contains(&embedded.pg().display().to_string()), "{up:?}");
    assert_eq!(fs::read_to_string(embedded.pg()).unwrap(), "not a cluster");
    // So it is for `wf db status` and `down`, which could otherwise only say "not running" of
    // another user's cluster that may be running there.
    if is_root() {
        for command in ["status", "down"] {
            let run = embedded.wf(["db", command]).run();
            assert_eq!(run.code, 1, "wf db {command}: {run:?}");
            assert!(run.stderr.contains("is in the way"), "wf db {command}: {run:?}");
        }
    }
}

/// A WF_HOME that is a file: every command says so (`db status` said "not created", `db up` "File
/// exists"), and the file is kept.
#[test]
fn a_wf_home_that_is_a_file_is_refused_and_kept() {
    let embedded = EmbeddedHome::new();
    fs::write(&embedded.home, "a file").unwrap();
    for command in ["status", "up", "down"] {
        let run = embedded.wf(["db", command]).run().expect_code(1);
        assert!(run.stderr.contains("is not a folder"), "wf db {command}: {run:?}");
    }
    embedded.wf(["jobs"]).run().expect_code(1);
    assert_eq!(fs::read_to_string(&embedded.home).unwrap(), "a file");
}

/// `wf db status` and `wf db down` change nothing: on a WF_HOME that does not exist they say no
/// cluster runs, and leave no folder behind.
#[test]
fn db_status_and_down_create_nothing() {
    let embedded = EmbeddedHome::new();
    assert!(!embedded.home.exists());
    let status = embedded.wf(["db", "status", "--json"]).ok().json();
    assert_eq!((&status["running"], &status["created"]), (&json!(false), &json!(false)), "{status}");
    let table = embedded.wf(["db", "status"]).ok().stdout;
    assert!(table.lines().nth(1).is_some_and(|row| row.contains("  not created  ")), "{table}");
    embedded.wf(["db", "down"]).ok();
    assert!(!embedded.home.exists(), "WF_HOME was created");
}

/// An empty DATABASE_URL (`DATABASE_URL= wf ...`) is unset, as an empty WF_HOME is: the embedded
/// cluster, where it was read as a URL ("both host and hostaddr are missing"); `wf db down` with a
/// DATABASE_URL says which it stopped.
#[test]
fn an_empty_database_url_is_the_embedded_cluster() {
    let embedded = EmbeddedHome::new();
    let status = embedded.wf(["db", "status", "--json"]).env("DATABASE_URL", "").ok().json();
    assert_eq!(status["embedded"], true, "{status}");
    embedded.wf(["db", "up"]).env("DATABASE_URL", "").ok();
    embedded.assert_running_and_migrated();
    let down = embedded.wf(["db", "down"]).env("DATABASE_URL", "host=/nonexistent").ok();
    assert!(down.stderr.contains("this was the embedded cluster, not that database"), "{}", down.stderr);
}

/// The README's main command, on a fresh WF_HOME: the embedded cluster, the example source
/// synced, its jobs run by real bun, their results and logs shown.
#[test]
fn the_quick_start_demo_runs_the_example_jobs_end_to_end() {
    let embedded = EmbeddedHome::new();
    let demo = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/demo"))
        .env_remove("DATABASE_URL")
        .env("WF_HOME", &embedded.home)
        .env("WF_DEMO_DIR", embedded.env.dir.path().join("demo"))
        .env("WF_EXE", wf_binary())
        .env("WF_BUN", crate::support::harness::bun())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&demo.stdout);
    let stderr = String::from_utf8_lossy(&demo.stderr);
    assert!(demo.status.success(), "scripts/demo failed:\n{stdout}\n{stderr}");
    for shown in [
        "\"greeting\": \"Hello, operator!\"",
        "\"sum\": 42",
        "\"slept\": 500",
        "\"message\": \"this action always fails\"",
        "exit code 4",
        "chatty: line 3 of 4 (stdout)",
        "chatty: line 4 of 4 (stderr)",
    ] {
        assert!(stdout.contains(shown), "the demo did not show {shown:?}:\n{stdout}");
    }
    let jobs = embedded.wf(["jobs", "--json"]).ok().json();
    let mut statuses: Vec<&str> = jobs.as_array().unwrap().iter().map(|job| job["status"].as_str().unwrap()).collect();
    statuses.sort();
    assert_eq!(statuses, ["failure", "success", "success", "success", "success"], "{jobs}");
}
