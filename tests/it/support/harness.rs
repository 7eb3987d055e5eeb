//! The test harness: one throwaway PostgreSQL cluster per test run, one fresh database per test
//! (copied from a migrated template), a builder for git repositories, and a runner for `wf`.
//!
//! PostgreSQL and bun are required: a test that cannot find them fails, it never skips.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use serde_json::Value;

const SUPERUSER: &str = "wf";

/// The cluster shared by every test of this run.
struct TestCluster {
    socket_dir: PathBuf,
    /// Serializes CREATE DATABASE ... TEMPLATE (the template must have no other user).
    create_lock: Mutex<()>,
}

static CLUSTER: OnceLock<TestCluster> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);

fn cluster() -> &'static TestCluster {
    CLUSTER.get_or_init(start_cluster)
}

/// A run's folder holds this file, flocked for as long as the run's process lives.
const RUN_LOCK: &str = "run.lock";

/// This run's folder, with a random name (pids repeat across containers and PID namespaces), and
/// locked: the lock goes with the process, however it dies.
fn create_run_dir() -> PathBuf {
    let dir = tempfile::Builder::new().prefix("wf-test-").tempdir().unwrap().keep();
    let lock = std::fs::File::create(dir.join(RUN_LOCK)).unwrap();
    assert!(lock.try_lock().is_ok(), "a fresh run folder is locked by nobody else");
    // Held until the process ends.
    std::mem::forget(lock);
    dir
}

/// Remove the folders of earlier runs whose process is gone: nobody holds their lock. A folder
/// younger than a minute may belong to a run that has not locked it yet, and is left alone.
fn remove_stale_runs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let young = entry.metadata().ok().and_then(|m| m.modified().ok()).and_then(|t| t.elapsed().ok())
            < Some(Duration::from_secs(60));
        if !entry.file_name().to_string_lossy().starts_with("wf-test-") || young {
            continue;
        }
        let unlocked = match std::fs::File::open(entry.path().join(RUN_LOCK)) {
            Ok(lock) => lock.try_lock().is_ok(),
            Err(_) => true,
        };
        if unlocked {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A test's postmaster for the cluster in `data`, its socket and log in `socket_dir`: run as the
/// cluster's owner, without durability (a test's data dies with it), killed when the thread that
/// starts it dies; `settings` are the caller's own `-c` settings.
pub(crate) fn postmaster(data: &Path, socket_dir: &Path, settings: &[&str]) -> Command {
    let postgres = wf::db::embedded::pg_bin("postgres", &search_path()).expect("postgres binary");
    let mut command = Command::new(postgres);
    command.arg("-D").arg(data).arg("-k").arg(socket_dir);
    for setting in
        ["fsync=off", "synchronous_commit=off", "full_page_writes=off", "log_min_messages=fatal"].iter().chain(settings)
    {
        command.args(["-c", setting]);
    }
    command
        .current_dir(socket_dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(socket_dir.join("postgres.log")).unwrap());
    wf::db::embedded::run_as_cluster_owner(&mut command).unwrap();
    // SAFETY: prctl in the forked child before exec; runs after the uid change, so it sticks.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    command
}

/// A connection to `url` once its server, just started, accepts it (within a minute); `server`
/// names it in the panic otherwise.
pub(crate) fn connect_when_up(url: &str, server: &str) -> postgres::Client {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match postgres::Client::connect(url, postgres::NoTls) {
            Ok(client) => return client,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => panic!("{server} did not come up: {e}"),
        }
    }
}

fn start_cluster() -> TestCluster {
    remove_stale_runs();
    let dir = create_run_dir();
    wf::db::embedded::chown_to_postgres(&dir).unwrap();
    let data = dir.join("data");
    let initdb = wf::db::embedded::pg_bin("initdb", &search_path()).expect("PostgreSQL server binaries are required");
    let mut command = Command::new(initdb);
    command.arg("-D").arg(&data).args(["-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-locale"]);
    command.current_dir(&dir).stdout(Stdio::null());
    wf::db::embedded::run_as_cluster_owner(&mut command).unwrap();
    let status = command.status().expect("running initdb");
    assert!(status.success(), "initdb failed");

    // The postmaster is the child of a thread that lives as long as the test process; it gets
    // SIGKILL when that thread (so the process) dies, so no server outlives the test run.
    let (ready_tx, ready_rx) = mpsc::channel();
    let socket_dir = dir.clone();
    std::thread::spawn(move || {
        let settings = ["listen_addresses=", "max_connections=400", "shared_buffers=256MB"];
        let mut child: Child = postmaster(&data, &socket_dir, &settings).spawn().expect("starting postgres");
        ready_tx.send(()).unwrap();
        let status = child.wait();
        panic!("the test PostgreSQL server exited: {status:?}");
    });
    ready_rx.recv().unwrap();
    let cluster = TestCluster { socket_dir: dir.clone(), create_lock: Mutex::new(()) };
    let mut admin = connect_when_up(&cluster.url("postgres"), "the test PostgreSQL server");
    admin.batch_execute("CREATE DATABASE wf_template").unwrap();
    let mut template = postgres::Client::connect(&cluster.url("wf_template"), postgres::NoTls).unwrap();
    wf::db::migrate::apply(&mut template).unwrap();
    drop(template);
    cluster
}

impl TestCluster {
    fn url(&self, dbname: &str) -> String {
        format!("host={} port=5432 user={SUPERUSER} dbname={dbname}", self.socket_dir.display())
    }
}

/// The folders of the tests' PATH, where the PostgreSQL server binaries are looked for first.
pub(crate) fn search_path() -> Vec<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).collect()
}

/// PATH, HOME and TZ of the tests' environment, as a worker gives them to its actions.
pub(crate) fn inherited_env() -> Vec<(String, String)> {
    ["PATH", "HOME", "TZ"]
        .into_iter()
        .filter_map(|name| std::env::var(name).ok().map(|value| (name.to_string(), value)))
        .collect()
}

/// The folder of the shared cluster's socket.
pub(crate) fn socket_dir() -> PathBuf {
    cluster().socket_dir.clone()
}

/// The bun executable the tests run actions with: WF_BUN, the project's `.tools`, or PATH.
pub(crate) fn bun() -> PathBuf {
    if let Some(path) = std::env::var_os("WF_BUN") {
        return PathBuf::from(path);
    }
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/node_modules/.bin/bun");
    if local.exists() {
        return local;
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("bun").is_file() {
                return dir.join("bun");
            }
        }
    }
    panic!("bun is required by the tests: run `scripts/test`, which installs it into .tools/");
}

/// One test's world: its own database, its own WF_HOME, and a way to run `wf` against them.
pub(crate) struct TestEnv {
    pub url: String,
    pub dbname: String,
    pub dir: tempfile::TempDir,
    pub extra_env: BTreeMap<String, String>,
}

impl TestEnv {
    pub(crate) fn new() -> TestEnv {
        let cluster = cluster();
        let n = NEXT_DB.fetch_add(1, Ordering::SeqCst);
        let dbname = format!("t{}_{n}", std::process::id());
        {
            let _guard = cluster.create_lock.lock().unwrap_or_else(|e| e.into_inner());
            let mut admin = postgres::Client::connect(&cluster.url("postgres"), postgres::NoTls).unwrap();
            admin.batch_execute(&format!("CREATE DATABASE {dbname} TEMPLATE wf_template")).unwrap();
        }
        TestEnv::with(cluster.url(&dbname), dbname)
    }

    /// A test world on database `dbname` at `url` (a cluster of the test's own).
    pub(crate) fn with(url: String, dbname: String) -> TestEnv {
        let dir = tempfile::Builder::new().prefix("wf-env-").tempdir().unwrap();
        let env = TestEnv { url, dbname, dir, extra_env: BTreeMap::new() };
        std::fs::create_dir(env.shared()).unwrap();
        std::fs::set_permissions(env.shared(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        env
    }

    /// A folder of the test's that actions may write (their execution logs, pid files): bound
    /// read-write into every sandbox at the same path (WF_ALLOW_WRITE) and writable by the
    /// sandbox's user.
    pub(crate) fn shared(&self) -> PathBuf {
        self.dir.path().join("shared")
    }

    /// WF_HOME of this test.
    pub(crate) fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// The source store of this test.
    pub(crate) fn store(&self) -> PathBuf {
        self.home().join("store")
    }

    /// A new connection to this test's database.
    pub(crate) fn db(&self) -> postgres::Client {
        postgres::Client::connect(&self.url, postgres::NoTls).unwrap()
    }

    /// The URL of the cluster's database `name` (for tests that need a second database).
    pub(crate) fn cluster_url(dbname: &str) -> String {
        cluster().url(dbname)
    }

    /// Run a query and return the first column of the single row.
    pub(crate) fn scalar<T: for<'a> postgres::types::FromSql<'a>>(&self, sql: &str) -> T {
        self.db().query_one(sql, &[]).unwrap().get(0)
    }

    /// Run a query and return the first column of every row, in the query's order.
    pub(crate) fn column<T: for<'a> postgres::types::FromSql<'a>>(&self, sql: &str) -> Vec<T> {
        self.db().query(sql, &[]).unwrap().iter().map(|row| row.get(0)).collect()
    }

    /// Run a query with bind parameters and return the first column of every row.
    pub(crate) fn column_of<T: for<'a> postgres::types::FromSql<'a>>(
        &self,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Vec<T> {
        self.db().query(sql, params).unwrap().iter().map(|row| row.get(0)).collect()
    }

    /// A login role of this test's own (`<database>_<suffix>`) granted each of `grants` (`ALL ON
    /// SCHEMA public`, ...); the role and the connection string of this database as it.
    pub(crate) fn role(&self, suffix: &str, grants: &[&str]) -> (String, String) {
        let role = format!("{}_{suffix}", self.dbname);
        let grants: String = grants.iter().map(|grant| format!("GRANT {grant} TO {role};")).collect();
        self.db().batch_execute(&format!("CREATE ROLE {role} LOGIN; {grants}")).unwrap();
        let url = format!("{} user={role}", self.url);
        (role, url)
    }

    /// Run a query with bind parameters and return the first column of the single row.
    pub(crate) fn scalar_of<T: for<'a> postgres::types::FromSql<'a>>(
        &self,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> T {
        self.db().query_one(sql, params).unwrap().get(0)
    }

    pub(crate) fn env(mut self, key: &str, value: &str) -> TestEnv {
        self.extra_env.insert(key.to_string(), value.to_string());
        self
    }

    /// A `wf` command set up for this test.
    pub(crate) fn wf<I, S>(&self, args: I) -> Wf
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut wf = Wf::new(args)
            .env("HOME", self.dir.path())
            .env("DATABASE_URL", &self.url)
            .env("WF_HOME", self.home())
            .env("WF_BUN", bun())
            .env("WF_ALLOW_WRITE", self.shared());
        for (key, value) in &self.extra_env {
            wf = wf.env(key, value);
        }
        wf
    }
}

/// The `wf` binary under test.
pub(crate) fn wf_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_wf"))
}

/// A copy of `wf` in `dir` that any user may run. Copied by a child process: a file this process
/// held open for writing would be inherited by any child another test's thread forks meanwhile,
/// and until that child's exec, running the copy fails with "Text file busy".
pub(crate) fn copy_of_wf(dir: &Path) -> PathBuf {
    let copy = dir.join("wf");
    let status = Command::new("install").arg("-m").arg("0755").arg(wf_binary()).arg(&copy).status();
    assert!(status.expect("running install").success(), "copying wf to {}", copy.display());
    copy
}

/// The `wf-supervise` binary under test, which a worker finds beside `wf`.
pub(crate) fn supervisor_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_wf-supervise"))
}

/// A `wf` invocation, the one way the tests start wf: `.run()` it, `.start()` it in the background
/// and `.finish()` it, or `.spawn()` a long-running worker.
pub(crate) struct Wf {
    command: Command,
}

/// What a finished `wf` printed and returned.
#[derive(Debug)]
pub(crate) struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Wf {
    /// `wf ARGS` with nothing of the tests' environment but PATH, and no stdin: for what needs no
    /// database (`TestEnv::wf` adds this test's).
    pub(crate) fn new<I, S>(args: I) -> Wf
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut command = Command::new(wf_binary());
        command
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        Wf { command }
    }

    /// The same invocation of a copy of wf at `binary` (where `uid` can reach it), run as that user.
    pub(crate) fn run_as(self, binary: &Path, uid: u32, gid: u32) -> Wf {
        let mut command = Command::new(binary);
        command.uid(uid).gid(gid);
        self.onto(command)
    }

    /// The same invocation inside network namespace `netns` (`ip netns exec`, which execs it: the
    /// process started is wf itself), for a test's hosts (`support::hosts`).
    pub(crate) fn in_netns(self, ip: &Path, netns: &str) -> Wf {
        let program = self.command.get_program().to_owned();
        self.under(ip, ["netns", "exec", netns], &program)
    }

    /// The same invocation of `binary` as the last argument of `wrapper WRAPPER_ARGS` (a program
    /// that sets something up, then execs the rest: setpriv, prlimit, ip netns exec).
    pub(crate) fn under<I, S>(
        self,
        wrapper: impl AsRef<std::ffi::OsStr>,
        wrapper_args: I,
        binary: &std::ffi::OsStr,
    ) -> Wf
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut command = Command::new(wrapper);
        command.args(wrapper_args).arg(binary);
        self.onto(command)
    }

    /// `command` with this invocation's arguments, environment (and nothing else of the test's)
    /// and folder.
    fn onto(self, mut command: Command) -> Wf {
        command.args(self.command.get_args()).env_clear().stdin(Stdio::null());
        for (key, value) in self.command.get_envs() {
            if let Some(value) = value {
                command.env(key, value);
            }
        }
        if let Some(dir) = self.command.get_current_dir() {
            command.current_dir(dir);
        }
        Wf { command }
    }

    /// Start in a terminal of its own (`support::terminal`).
    pub(crate) fn in_terminal(self) -> crate::support::terminal::Terminal {
        self.in_terminal_of(80)
    }

    /// In a terminal of `columns` columns (0: one that reports no width).
    pub(crate) fn in_terminal_of(self, columns: u16) -> crate::support::terminal::Terminal {
        crate::support::terminal::Terminal::start(self.command, columns)
    }

    /// The command, for a test that runs wf inside another program (`unshare`, `runuser`).
    pub(crate) fn command(&self) -> &Command {
        &self.command
    }

    pub(crate) fn current_dir(mut self, dir: &Path) -> Wf {
        self.command.current_dir(dir);
        self
    }

    /// Run `setup` in the child between its fork and its exec: raw system calls only (nothing that
    /// allocates or takes a lock).
    pub(crate) fn before_exec(mut self, setup: impl FnMut() -> std::io::Result<()> + Send + Sync + 'static) -> Wf {
        use std::os::unix::process::CommandExt;
        // SAFETY: the setups the tests give make raw system calls only.
        unsafe { self.command.pre_exec(setup) };
        self
    }

    pub(crate) fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Wf {
        self.command.env(key, value);
        self
    }

    pub(crate) fn env_remove(mut self, key: &str) -> Wf {
        self.command.env_remove(key);
        self
    }

    pub(crate) fn stdin_bytes(self, input: &[u8]) -> Run {
        let mut command = self.command;
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawning wf");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(input).unwrap();
        }
        Run::from(child.wait_with_output().unwrap())
    }

    pub(crate) fn run(mut self) -> Run {
        Run::from(self.command.output().expect("running wf"))
    }

    /// Run and expect exit 0.
    pub(crate) fn ok(self) -> Run {
        let run = self.run();
        assert_eq!(run.code, 0, "wf failed: {run:?}");
        run
    }

    /// Run with stdout and stderr going where given (a pipe whose reader went away).
    pub(crate) fn run_into(mut self, stdout: Stdio, stderr: Stdio) -> Run {
        Run::from(self.command.stdout(stdout).stderr(stderr).output().expect("running wf"))
    }

    /// Start in the background, stdout and stderr piped (read them, or `finish`); killed when
    /// dropped.
    pub(crate) fn start(self) -> Process {
        self.spawn_into(Stdio::piped(), Stdio::piped())
    }

    /// Start in the background as `start` does, with its stdin a pipe the test writes to (and closes
    /// by dropping it: `.stdin.take()`).
    pub(crate) fn start_fed(mut self) -> Process {
        self.command.stdin(Stdio::piped());
        self.start()
    }

    /// Start in the background (a worker), stdout to nowhere and stderr to `log`; killed when
    /// dropped.
    pub(crate) fn spawn(self, log: &Path) -> Process {
        self.spawn_into(Stdio::null(), std::fs::File::create(log).unwrap().into())
    }

    /// Start in the background with stdout and stderr going where given; killed when dropped.
    pub(crate) fn spawn_into(mut self, stdout: Stdio, stderr: Stdio) -> Process {
        Process(self.command.stdout(stdout).stderr(stderr).spawn().expect("spawning wf"))
    }
}

impl From<Output> for Run {
    fn from(output: Output) -> Run {
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).to_string(),
        }
    }
}

impl Run {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {self:?}"))
    }

    pub(crate) fn expect_code(self, code: i32) -> Run {
        assert_eq!(self.code, code, "unexpected exit code: {self:?}");
        self
    }
}

/// A git repository for tests, built file by file and committed with git2.
pub(crate) struct GitRepo {
    pub dir: tempfile::TempDir,
    pub repo: git2::Repository,
}

impl GitRepo {
    pub(crate) fn new() -> GitRepo {
        let dir = tempfile::Builder::new().prefix("wf-repo-").tempdir().unwrap();
        let mut options = git2::RepositoryInitOptions::new();
        options.initial_head("main");
        let repo = git2::Repository::init_opts(dir.path(), &options).unwrap();
        GitRepo { dir, repo }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn url(&self) -> String {
        self.dir.path().display().to_string()
    }

    /// Write a file (creating folders).
    pub(crate) fn file(&self, path: &str, content: &str) -> &GitRepo {
        let full = self.dir.path().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, content).unwrap();
        self
    }

    /// Write `windforce.json`.
    pub(crate) fn manifest(&self, manifest: &Value) -> &GitRepo {
        self.file("windforce.json", &serde_json::to_string_pretty(manifest).unwrap())
    }

    pub(crate) fn remove(&self, path: &str) -> &GitRepo {
        std::fs::remove_file(self.dir.path().join(path)).unwrap();
        self
    }

    /// Commit everything in the work tree; returns the commit id.
    pub(crate) fn commit(&self, message: &str) -> String {
        let mut index = self.repo.index().unwrap();
        index.add_all(["*"], git2::IndexAddOption::DEFAULT, None).unwrap();
        index.update_all(["*"], None).unwrap();
        index.write().unwrap();
        let tree = self.repo.find_tree(index.write_tree().unwrap()).unwrap();
        let signature = git2::Signature::now("wf tests", "tests@windforce.invalid").unwrap();
        let parent = self.repo.head().ok().and_then(|head| head.peel_to_commit().ok());
        let parents: Vec<&git2::Commit> = parent.iter().collect();
        let id = self.repo.commit(Some("HEAD"), &signature, &signature, message, &tree, &parents).unwrap();
        id.to_string()
    }
}

/// Poll until `check` returns Some, or panic after `timeout` with `what`.
pub(crate) fn wait_for<T>(timeout: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A PostgreSQL cluster of one test's own, for tests that restart or stop the server (the shared
/// cluster serves other tests in parallel). One migrated database `wf`; stopped when dropped.
pub(crate) struct PrivateCluster {
    dir: tempfile::TempDir,
    /// The server's port (its Unix socket's name, and its TCP port when it listens on one).
    port: u16,
    /// Settings of the server beyond the socket's folder and fsync.
    settings: String,
}

impl PrivateCluster {
    pub(crate) fn start() -> PrivateCluster {
        let cluster = PrivateCluster::init(5432, "-c listen_addresses=".to_string());
        cluster.start_server();
        cluster.create_wf();
        cluster
    }

    /// A cluster that takes TCP connections on 127.0.0.1 with TLS only (no `host` line in its
    /// pg_hba.conf, only `hostssl`), its certificate for the name `localhost` signed by the test
    /// authority of `TlsFiles`; role `certified` must show a client certificate of that
    /// authority for database `wf`, role `scrammer` its password `secret-word` (SCRAM); role
    /// `plain` is the exception, taken without TLS only. Its Unix socket serves the test's own connections.
    pub(crate) fn start_tls() -> (PrivateCluster, TlsFiles) {
        let dir = tempfile::Builder::new().prefix("wf-tls-").tempdir().unwrap();
        let files = TlsFiles::make(dir);
        let mut cluster = PrivateCluster::init(0, String::new());
        std::fs::write(
            cluster.data().join("pg_hba.conf"),
            "local all all trust\n\
             hostssl wf certified 127.0.0.1/32 cert\n\
             hostssl wf scrammer 127.0.0.1/32 scram-sha-256\n\
             hostssl wf plain 127.0.0.1/32 reject\n\
             hostnossl wf plain 127.0.0.1/32 trust\n\
             hostssl all all 127.0.0.1/32 trust\n\
             hostssl all all ::1/128 trust\n",
        )
        .unwrap();
        // A port free a moment ago: another test may take it before the server does, then the
        // next one.
        let started = (0..5).any(|_| {
            cluster.port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
            cluster.settings = format!(
                "-c listen_addresses=127.0.0.1 -c port={} -c ssl=on -c ssl_cert_file={} -c ssl_key_file={} -c ssl_ca_file={}",
                cluster.port,
                files.file("server.crt").display(),
                files.file("server.key").display(),
                files.file("ca.crt").display()
            );
            cluster.try_start_server()
        });
        assert!(started, "the TLS cluster did not start (see its postgres.log)");
        cluster.create_wf();
        postgres::Client::connect(&cluster.url(), postgres::NoTls)
            .unwrap()
            .batch_execute(
                "CREATE ROLE certified LOGIN SUPERUSER;
                 CREATE ROLE plain LOGIN SUPERUSER;
                 SET password_encryption = 'scram-sha-256';
                 CREATE ROLE scrammer LOGIN SUPERUSER PASSWORD 'secret-word'",
            )
            .unwrap();
        (cluster, files)
    }

    /// The port of its server.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    fn init(port: u16, settings: String) -> PrivateCluster {
        let dir = tempfile::Builder::new().prefix("wf-pg-").tempdir().unwrap();
        wf::db::embedded::chown_to_postgres(dir.path()).unwrap();
        let cluster = PrivateCluster { dir, port, settings };
        let initdb =
            wf::db::embedded::pg_bin("initdb", &search_path()).expect("PostgreSQL server binaries are required");
        let mut command = Command::new(initdb);
        command.arg("-D").arg(cluster.data()).args(["-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-locale"]);
        command.current_dir(cluster.dir.path()).stdout(Stdio::null());
        wf::db::embedded::run_as_cluster_owner(&mut command).unwrap();
        assert!(command.status().expect("running initdb").success(), "initdb failed");
        cluster
    }

    /// Database `wf`, migrated.
    fn create_wf(&self) {
        let cluster = self;
        let mut admin = postgres::Client::connect(&cluster.url_of("postgres"), postgres::NoTls).unwrap();
        admin.batch_execute("CREATE DATABASE wf").unwrap();
        let mut client = postgres::Client::connect(&cluster.url(), postgres::NoTls).unwrap();
        wf::db::migrate::apply(&mut client).unwrap();
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn url_of(&self, dbname: &str) -> String {
        format!("host={} port={} user={SUPERUSER} dbname={dbname}", self.dir.path().display(), self.port)
    }

    /// The URL of its database `wf`.
    pub(crate) fn url(&self) -> String {
        self.url_of("wf")
    }

    /// A test world on this cluster's database (its own WF_HOME).
    pub(crate) fn env(&self) -> TestEnv {
        TestEnv::with(self.url(), "wf".to_string())
    }

    fn pg_ctl(&self, args: &[&str]) {
        let status = self.pg_ctl_status(args);
        assert!(status.success(), "pg_ctl {args:?} failed: {status}");
    }

    fn pg_ctl_status(&self, args: &[&str]) -> std::process::ExitStatus {
        let mut command = Command::new(wf::db::embedded::pg_bin("pg_ctl", &search_path()).expect("pg_ctl"));
        command.arg("-D").arg(self.data()).args(["-l"]).arg(self.dir.path().join("postgres.log")).args(args);
        command.current_dir(self.dir.path()).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        wf::db::embedded::run_as_cluster_owner(&mut command).unwrap();
        command.status().expect("running pg_ctl")
    }

    /// Start the server and wait until it accepts connections; false when it did not start.
    fn try_start_server(&self) -> bool {
        let options = format!("-k {} -c fsync=off {}", self.dir.path().display(), self.settings);
        self.pg_ctl_status(&["start", "-w", "-o", &options]).success()
    }

    /// Start the server and wait until it accepts connections.
    pub(crate) fn start_server(&self) {
        assert!(
            self.try_start_server(),
            "the server did not start (see {})",
            self.dir.path().join("postgres.log").display()
        );
    }

    /// Stop the server (fast: clients are disconnected) and wait until it is down.
    pub(crate) fn stop_server(&self) {
        self.pg_ctl(&["stop", "-m", "fast", "-w"]);
    }

    /// `pg_ctl restart -m fast -w`: clients are disconnected, the server comes back.
    pub(crate) fn restart(&self) {
        self.pg_ctl(&["restart", "-m", "fast", "-w"]);
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let mut command = Command::new(wf::db::embedded::pg_bin("pg_ctl", &search_path()).expect("pg_ctl"));
        command.arg("-D").arg(self.data()).args(["stop", "-m", "immediate", "-w"]);
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        if wf::db::embedded::run_as_cluster_owner(&mut command).is_ok() {
            let _ = command.status();
        }
    }
}

/// A test certificate authority and what it signed, made with the `openssl` command: `ca.crt`,
/// the server's `server.crt` (for `localhost` only) and `server.key`, a client certificate
/// `client.crt` and its key `client.key` (PKCS#8; `client-legacy.key`, the same in the older EC
/// form; `client-encrypted.key`, encrypted with the passphrase `keypass`) for the role `certified`, and `rogue.crt`, an authority that signed none of them.
pub(crate) struct TlsFiles {
    dir: tempfile::TempDir,
}

impl TlsFiles {
    fn make(dir: tempfile::TempDir) -> TlsFiles {
        let files = TlsFiles { dir };
        let openssl = |args: &[&str]| {
            let output = Command::new("openssl")
                .args(args)
                .current_dir(files.dir.path())
                .output()
                .expect("the openssl command is required to make the test certificates");
            assert!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        };
        let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        for (name, subject) in [("ca", "/CN=wf test authority"), ("rogue", "/CN=wf test authority")] {
            let (key_file, cert_file) = (format!("{name}.key"), format!("{name}.crt"));
            let mut args =
                vec!["req", "-x509", "-days", "2", "-subj", subject, "-keyout", &key_file, "-out", &cert_file];
            args.extend(key);
            openssl(&args);
        }
        std::fs::write(files.file("server.ext"), "subjectAltName=DNS:localhost\n").unwrap();
        std::fs::write(files.file("client.ext"), "basicConstraints=CA:FALSE\n").unwrap();
        for (name, subject) in [("server", "/CN=localhost"), ("client", "/CN=certified")] {
            let (key_file, request, cert_file, ext) =
                (format!("{name}.key"), format!("{name}.csr"), format!("{name}.crt"), format!("{name}.ext"));
            let mut args = vec!["req", "-subj", subject, "-keyout", &key_file, "-out", &request];
            args.extend(key);
            openssl(&args);
            openssl(&[
                "x509",
                "-req",
                "-in",
                &request,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &ext,
                "-out",
                &cert_file,
            ]);
        }
        // The client's key in the older form (`BEGIN EC PRIVATE KEY`), as many keys are.
        openssl(&["ec", "-in", "client.key", "-out", "client-legacy.key"]);
        openssl(&["pkey", "-in", "client.key", "-aes256", "-passout", "pass:keypass", "-out", "client-encrypted.key"]);
        // The server reads its key as the cluster's owner, and only from a file no one else reads.
        wf::db::embedded::chown_to_postgres(files.dir.path()).unwrap();
        for name in ["ca.crt", "server.crt", "server.key"] {
            std::fs::set_permissions(files.file(name), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
            wf::db::embedded::chown_to_postgres(&files.file(name)).unwrap();
        }
        files
    }

    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// A child process killed and reaped when dropped, so that a failing test leaves no worker
/// behind.
pub(crate) struct Process(Child);

impl Process {
    /// Wait for a process started with its output piped (`Wf::start`); what it printed.
    pub(crate) fn finish(mut self) -> Run {
        let mut stderr = self.0.stderr.take();
        let errors = std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(stderr) = stderr.as_mut() {
                std::io::Read::read_to_end(stderr, &mut text).unwrap();
            }
            text
        });
        let mut stdout = Vec::new();
        if let Some(mut out) = self.0.stdout.take() {
            std::io::Read::read_to_end(&mut out, &mut stdout).unwrap();
        }
        let status = self.0.wait().unwrap();
        let stderr = errors.join().unwrap();
        Run::from(Output { status, stdout, stderr })
    }
}

impl std::ops::Deref for Process {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Process {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A TCP front for the test cluster's Unix socket that a test can cut: while cut, no byte moves
/// either way and new connections are accepted but never answered, as with a server that stopped
/// answering or a network that drops everything; once restored, everything moves again.
pub(crate) struct Proxy {
    pub(crate) port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Proxy {
    pub(crate) fn start() -> Proxy {
        use std::sync::Arc;
        use std::sync::atomic::AtomicBool;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let socket = socket_dir().join(".s.PGSQL.5432");
        let accept_cut = Arc::clone(&cut);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let (cut, socket) = (Arc::clone(&accept_cut), socket.clone());
                std::thread::spawn(move || {
                    while cut.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    let Ok(server) = std::os::unix::net::UnixStream::connect(&socket) else { return };
                    let (Ok(client_in), Ok(server_in)) = (client.try_clone(), server.try_clone()) else { return };
                    let up = Arc::clone(&cut);
                    std::thread::spawn(move || pump(client_in, server, &up));
                    pump(server_in, client, &cut);
                });
            }
        });
        Proxy { port, cut }
    }

    /// The URL of database `dbname` through this proxy.
    pub(crate) fn url(&self, dbname: &str) -> String {
        format!("host=127.0.0.1 port={} user={SUPERUSER} dbname={dbname}", self.port)
    }

    pub(crate) fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
    }
}

/// Copy `from` to `to` until either closes, holding every byte while `cut` is set.
fn pump(mut from: impl std::io::Read, mut to: impl std::io::Write, cut: &std::sync::atomic::AtomicBool) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let Ok(n) = from.read(&mut buffer) else { return };
        if n == 0 {
            return;
        }
        while cut.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if to.write_all(&buffer[..n]).is_err() {
            return;
        }
    }
}
