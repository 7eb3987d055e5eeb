//! Several hosts on this one machine: each host is a network namespace of its own, with its own
//! WF_HOME and WF_STORE, that reaches a PostgreSQL server of the test's own over TCP through a
//! bridge. Nothing is shared between the hosts but the database and WF_SECRET: every `wf` of a host
//! runs inside its namespace (`ip netns exec`) with the server's TCP address as DATABASE_URL. (The
//! hosts still share the machine's file system: the folder the test's actions write their ledgers to
//! is the test's instrument, not wf's.)
//!
//! The bridge and the server live in one more namespace, the run's network: its subnet, addresses
//! and interface names are private to it and to the hosts' namespaces, so parallel runs cannot
//! collide on them; only the namespaces' names are seen by the rest of the machine, and they are
//! unique (the test process's pid and a random part). Everything is removed when `Hosts` is dropped,
//! a failing test included; what an earlier run killed outright left behind is removed by the next.
//!
//! Network namespaces need root and `ip` (iproute2): without them these tests fail, saying so.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, mpsc};

use serde_json::Value;

use crate::support::harness::{Process, TestEnv, Wf, bun, connect_when_up, postmaster, search_path};

/// The first part of the name of every namespace and server folder these tests make; the next is
/// the owner's pid.
const PREFIX: &str = "wfh-";
/// The run's subnet (private to its namespaces): the bridge is .1, host N is .(10 + N).
const SUBNET: &str = "10.213.0";
const SUPERUSER: &str = "wf";
/// The one WF_SECRET of every host.
const SECRET: &str = "the secret every host of the multi-host tests shares";

/// Namespaces are made one run at a time within this process (`ip netns add` sets up /run/netns the
/// first time, which two at once could both try).
static SETUP: Mutex<()> = Mutex::new(());

/// The `ip` executable, on PATH or where distributions put it.
fn ip_binary() -> PathBuf {
    let mut dirs = search_path();
    dirs.extend(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from));
    dirs.iter().map(|dir| dir.join("ip")).find(|path| path.is_file()).unwrap_or_else(|| {
        panic!("the multi-host tests need `ip` (iproute2) to build network namespaces; install iproute2")
    })
}

/// Run `ip ARGS`, which must succeed.
fn ip(args: &[&str]) {
    let output = Command::new(ip_binary()).args(args).stdin(Stdio::null()).output().expect("running ip");
    assert!(output.status.success(), "ip {} failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr));
}

/// SIGKILL every process inside network namespace `name`.
fn kill_all_in(name: &str) {
    let Ok(output) = Command::new(ip_binary()).args(["netns", "pids", name]).stdin(Stdio::null()).output() else {
        return;
    };
    for pid in String::from_utf8_lossy(&output.stdout).split_whitespace().filter_map(|pid| pid.parse::<i32>().ok()) {
        // SAFETY: a signal to a process of a namespace these tests made.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Whether `name` (a namespace's or a folder's) is of these tests and the process that made it is
/// gone.
fn orphaned(name: &str) -> bool {
    let Some(owner) = name.strip_prefix(PREFIX).and_then(|rest| rest.split('-').next()) else { return false };
    owner.parse::<u32>().is_ok_and(|owner| !Path::new(&format!("/proc/{owner}")).exists())
}

/// Remove what earlier runs killed before they could clean up left behind: their namespaces, with
/// whatever still runs in them (deleting a namespace deletes its bridge and veth pairs too), and
/// their servers' folders.
fn remove_stale() {
    for entry in std::fs::read_dir("/run/netns").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if orphaned(&name) {
            kill_all_in(&name);
            let _ = Command::new(ip_binary()).args(["netns", "del", &name]).stderr(Stdio::null()).status();
        }
    }
    for entry in std::fs::read_dir(std::env::temp_dir()).into_iter().flatten().flatten() {
        if orphaned(&entry.file_name().to_string_lossy()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The run's namespaces, deleted when dropped with everything inside them.
struct Namespaces(Vec<String>);

impl Namespaces {
    fn add(&mut self, name: &str) {
        ip(&["netns", "add", name]);
        self.0.push(name.to_string());
        ip(&["-n", name, "link", "set", "lo", "up"]);
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in self.0.iter().rev() {
            kill_all_in(name);
            let _ = Command::new(ip_binary()).args(["netns", "del", name]).stderr(Stdio::null()).status();
        }
    }
}

/// A PostgreSQL server of the test's own inside the run's network namespace: TCP on the bridge's
/// address for the hosts, a Unix socket in its folder for the test's own checks. Stopped when
/// dropped; killed with the test process if that dies first.
struct Server {
    dir: tempfile::TempDir,
    pid: i32,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(netns: &str) -> Server {
        let dir = tempfile::Builder::new().prefix(&format!("{PREFIX}{}-pg-", std::process::id())).tempdir().unwrap();
        wf::db::embedded::chown_to_postgres(dir.path()).unwrap();
        let data = dir.path().join("data");
        let initdb =
            wf::db::embedded::pg_bin("initdb", &search_path()).expect("PostgreSQL server binaries are required");
        let mut command = Command::new(initdb);
        command.arg("-D").arg(&data).args(["-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-locale"]);
        command.current_dir(dir.path()).stdout(Stdio::null());
        wf::db::embedded::run_as_cluster_owner(&mut command).unwrap();
        assert!(command.status().expect("running initdb").success(), "initdb failed");
        // The hosts come over TCP from the subnet.
        let hba = data.join("pg_hba.conf");
        let mut rules = std::fs::read_to_string(&hba).unwrap();
        rules.push_str(&format!("host all all {SUBNET}.0/24 trust\n"));
        std::fs::write(&hba, rules).unwrap();

        // The postmaster is the child of a thread that moved into the run's network namespace (a
        // thread's own, which its children inherit) and lives as long as the server: the server
        // gets SIGKILL when that thread dies, so it never outlives the test process.
        let namespace = std::fs::File::open(format!("/run/netns/{netns}")).unwrap();
        let (started_tx, started_rx) = mpsc::channel();
        let socket_dir = dir.path().to_path_buf();
        let thread = std::thread::spawn(move || {
            // SAFETY: setns on a file descriptor of a network namespace; it moves this thread only.
            let moved = unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(moved, 0, "moving into the network namespace: {}", std::io::Error::last_os_error());
            let listen = format!("listen_addresses={SUBNET}.1");
            let mut command = postmaster(&data, &socket_dir, &[&listen, "port=5432"]);
            let mut child = command.spawn().expect("starting postgres");
            started_tx.send(child.id() as i32).unwrap();
            let _ = child.wait();
        });
        let pid = started_rx.recv().expect("the server's thread starts postgres");
        let server = Server { dir, pid, thread: Some(thread) };
        let mut admin = connect_when_up(&server.socket_url("postgres"), "the hosts' PostgreSQL server");
        admin.batch_execute("CREATE DATABASE wf").unwrap();
        server
    }

    /// Database `dbname` through the Unix socket, for the test itself.
    fn socket_url(&self, dbname: &str) -> String {
        format!("host={} port=5432 user={SUPERUSER} dbname={dbname}", self.dir.path().display())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Immediate shutdown: the data is thrown away.
        // SAFETY: a signal to the postmaster this server started, which its thread has not reaped.
        unsafe { libc::kill(self.pid, libc::SIGQUIT) };
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One host: its namespace, its own WF_HOME and WF_STORE, the database over TCP.
pub(crate) struct Host {
    /// h1, h2, ...: also the name of its worker, the prefix of that worker's claims.
    pub(crate) name: String,
    netns: String,
    dir: PathBuf,
    vars: Vec<(String, String)>,
}

impl Host {
    /// `wf ARGS` on this host.
    pub(crate) fn wf<I, S>(&self, args: I) -> Wf
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut wf = Wf::new(args);
        for (key, value) in &self.vars {
            wf = wf.env(key, value);
        }
        wf.in_netns(&ip_binary(), &self.netns)
    }

    /// Start `wf work --name NAME ARGS` on this host, its stdout (the `--json` summary) in
    /// `worker.out` and its stderr in `worker.log` of the host's folder; killed when dropped.
    pub(crate) fn worker(&self, args: &[&str]) -> Process {
        let mut all = vec!["work", "--name", &self.name];
        all.extend_from_slice(args);
        let out = std::fs::File::create(self.dir.join("worker.out")).unwrap();
        let err = std::fs::File::create(self.dir.join("worker.log")).unwrap();
        self.wf(all).spawn_into(out.into(), err.into())
    }

    /// What this host's worker wrote on stderr.
    pub(crate) fn worker_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("worker.log")).unwrap_or_default()
    }

    /// The `--json` summary this host's worker printed when it ended.
    pub(crate) fn worker_summary(&self) -> Value {
        let text = std::fs::read_to_string(self.dir.join("worker.out")).unwrap_or_default();
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{}'s worker printed no JSON ({e}): {text:?}; {}", self.name, self.worker_log()))
    }

    /// This host's WF_STORE.
    pub(crate) fn store(&self) -> PathBuf {
        self.dir.join("store")
    }

    /// Take the host off the network: its interface goes down, every packet to or from it is lost
    /// and new connections fail, as when a host's network fails.
    pub(crate) fn cut(&self) {
        ip(&["-n", &self.netns, "link", "set", "eth0", "down"]);
    }

    /// Put it back on the network.
    pub(crate) fn reconnect(&self) {
        ip(&["-n", &self.netns, "link", "set", "eth0", "up"]);
    }
}

/// The hosts of one test, their network and their database, all removed when dropped.
pub(crate) struct Hosts {
    pub(crate) hosts: Vec<Host>,
    /// The database through the server's Unix socket, for the test's checks; its `shared()` folder
    /// is bound read-write into every host's sandboxes.
    pub(crate) env: TestEnv,
    // Dropped in this order: the server, then the namespaces.
    _server: Server,
    _namespaces: Namespaces,
}

impl Hosts {
    /// `count` hosts, every `wf` of which has these variables too; the database migrated by host 1's
    /// `wf db migrate`.
    pub(crate) fn start(count: usize, vars: &[(&str, &str)]) -> Hosts {
        assert!(
            wf::db::embedded::is_root(),
            "the multi-host tests need root: they build network namespaces (run the tests as root)"
        );
        let mut namespaces = Namespaces(Vec::new());
        let network = {
            let _setup = SETUP.lock().unwrap_or_else(|e| e.into_inner());
            remove_stale();
            let run = format!("{PREFIX}{}-{}", std::process::id(), &uuid::Uuid::new_v4().simple().to_string()[..6]);
            let network = format!("{run}-net");
            namespaces.add(&network);
            ip(&["-n", &network, "link", "add", "br0", "type", "bridge"]);
            ip(&["-n", &network, "addr", "add", &format!("{SUBNET}.1/24"), "dev", "br0"]);
            ip(&["-n", &network, "link", "set", "br0", "up"]);
            for n in 1..=count {
                let host = format!("{run}-h{n}");
                namespaces.add(&host);
                // One veth pair per host, made in place: eth0 in the host, hN on the bridge.
                let port = format!("h{n}");
                ip(&["link", "add", "eth0", "netns", &host, "type", "veth", "peer", "name", &port, "netns", &network]);
                ip(&["-n", &network, "link", "set", &port, "master", "br0", "up"]);
                ip(&["-n", &host, "addr", "add", &format!("{SUBNET}.{}/24", 10 + n), "dev", "eth0"]);
                ip(&["-n", &host, "link", "set", "eth0", "up"]);
            }
            network
        };
        let server = Server::start(&network);
        let env = TestEnv::with(server.socket_url("wf"), "wf".to_string());
        let url = format!("postgres://{SUPERUSER}@{SUBNET}.1:5432/wf");
        let hosts: Vec<Host> = (1..=count)
            .map(|n| {
                let name = format!("h{n}");
                let dir = env.dir.path().join(&name);
                std::fs::create_dir(&dir).unwrap();
                let text = |path: &Path| path.display().to_string();
                let own = [
                    ("HOME", text(env.dir.path())),
                    ("DATABASE_URL", url.clone()),
                    ("WF_HOME", text(&dir.join("home"))),
                    ("WF_STORE", text(&dir.join("store"))),
                    ("WF_SECRET", SECRET.to_string()),
                    ("WF_BUN", text(&bun())),
                    ("WF_ALLOW_WRITE", text(&env.shared())),
                ];
                let all = own
                    .into_iter()
                    .chain(vars.iter().map(|(key, value)| (*key, value.to_string())))
                    .map(|(key, value)| (key.to_string(), value))
                    .collect();
                Host { name, netns: namespaces.0[n].clone(), dir, vars: all }
            })
            .collect();
        hosts[0].wf(["db", "migrate"]).ok();
        Hosts { hosts, env, _server: server, _namespaces: namespaces }
    }
}
