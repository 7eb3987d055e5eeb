//! A real terminal for the tests of what wf does on one (tables, colours, prompts): `wf` runs with
//! a pseudo-terminal (of 80 columns, unless a test says otherwise) as its controlling terminal, stdin, stdout and stderr; the test
//! types into it and reads everything it drew.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A `wf` running in a terminal.
pub(crate) struct Terminal {
    child: Child,
    master: File,
    screen: Arc<Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Terminal {
    /// Start `command` in a fresh terminal of `columns` columns and 24 rows.
    pub(crate) fn start(mut command: Command, columns: u16) -> Terminal {
        let (master, slave) = open_pty();
        let size = libc::winsize { ws_row: 24, ws_col: columns, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: TIOCSWINSZ with a valid winsize on the pty's master.
        assert_eq!(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &size) }, 0);
        let stdio = || Stdio::from(slave.try_clone().unwrap());
        command.stdin(stdio()).stdout(stdio()).stderr(stdio()).env("TERM", "xterm");
        // SAFETY: setsid and ioctl are async-signal-safe; fd 0 is the pty's slave by then.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().expect("starting wf in a terminal");
        drop(slave);
        let master = File::from(master);
        let screen = Arc::new(Mutex::new(Vec::new()));
        let reader = {
            let (mut master, screen) = (master.try_clone().unwrap(), Arc::clone(&screen));
            std::thread::spawn(move || {
                let mut buffer = [0u8; 4096];
                // EIO once the last holder of the slave is gone.
                while let Ok(n @ 1..) = master.read(&mut buffer) {
                    screen.lock().unwrap().extend_from_slice(&buffer[..n]);
                }
            })
        };
        Terminal { child, master, screen, reader: Some(reader) }
    }

    /// Everything drawn so far.
    pub(crate) fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Wait until the terminal shows `text`.
    pub(crate) fn wait_for(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.screen().contains(text) {
            assert!(Instant::now() < deadline, "the terminal never showed {text:?}: {:?}", self.screen());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Type into the terminal.
    pub(crate) fn type_in(&mut self, keys: &[u8]) {
        self.master.write_all(keys).unwrap();
    }

    /// Wait for wf to exit: its exit code and everything it drew.
    pub(crate) fn finish(mut self) -> (i32, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "wf did not exit: {:?}", self.screen());
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        (status.code().unwrap_or(-1), self.screen())
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn open_pty() -> (OwnedFd, OwnedFd) {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two fds; no name, termios or size given.
    let opened =
        unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both fds were just opened and are owned by nobody else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    // openpty leaves them inheritable: a process another test starts meanwhile would hold the
    // terminal open (and this test's reader waiting) for as long as it lives. The child gets its
    // own copies as its stdin, stdout and stderr.
    for fd in [&master, &slave] {
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC).expect("making the terminal close on exec");
    }
    (master, slave)
}

/// Text without the terminal's control sequences (colours, cursor moves) and carriage returns.
pub(crate) fn plain(screen: &str) -> String {
    let mut text = String::new();
    let mut chars = screen.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                if chars.peek() == Some(&'[') {
                    chars.next();
                    // Parameters, then one final byte in @..~.
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                } else {
                    chars.next();
                }
            }
            '\r' => {}
            c => text.push(c),
        }
    }
    text
}
