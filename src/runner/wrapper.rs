//! The wrapper script bun runs around an action (`wrapper.mjs`): embedded in the binary, written
//! to `$WF_HOME/runner/` under a name derived from its content.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

const SOURCE: &str = include_str!("wrapper.mjs");

/// Write the wrapper (once: the name is its content hash) and return its path. Workers of different
/// versions sharing one WF_HOME each find their own wrapper, and none ever sees a half-written one:
/// it is written beside its final name and linked into place. Linked, not renamed: a rename by a
/// second worker starting at the same moment would replace the file the first one has already
/// opened for its sandbox, and bun would then find `/wf/wrapper.mjs (deleted)`. The first link wins
/// and the file at the final name never changes.
pub(super) fn install(wf_home: &Path) -> Result<PathBuf> {
    let digest = Sha256::digest(SOURCE.as_bytes());
    let hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let dir = wf_home.join("runner");
    let path = dir.join(format!("wrapper-{hash}.mjs"));
    if path.is_file() {
        return Ok(path);
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let partial = dir.join(format!(".wrapper-{hash}.{}.{:08x}", std::process::id(), fastrand::u32(..)));
    let written = fs::File::create(&partial)
        .and_then(|mut file| {
            file.write_all(SOURCE.as_bytes())?;
            file.sync_all()
        })
        .and_then(|()| match fs::hard_link(&partial, &path) {
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            linked => linked,
        });
    let _ = fs::remove_file(&partial);
    written.with_context(|| format!("writing the action wrapper {}", path.display()))?;
    Ok(path)
}

/// bun's cache of the modules it transpiled, named by their content: where the wrapper's is, for
/// every attempt of the worker to read (see `transpile`).
pub(super) const CACHE_VARIABLE: &str = "BUN_RUNTIME_TRANSPILER_CACHE_PATH";

/// Have `bun` transpile the wrapper into `cache`, once per worker: bun reads a module's
/// transpiled form from there instead of transpiling it at every start (a `bun run` of the wrapper
/// took 1.3 to 2.7 ms less processor time with it, of 17.5 to 18.8 here). Without a cache of its
/// own an attempt's bun transpiled the wrapper every time, and in a sandbox wrote the result to its
/// fresh `/tmp` for nobody. The wrapper
/// runs as a warm runner whose requests (stdin) are already over: it loads no action and exits.
/// Run by the worker itself, outside any sandbox, so that the files are the worker's: attempts get
/// the folder read-only, and no action can put its code in the place of the wrapper's.
pub(super) fn transpile(bun: &Path, wrapper: &Path, cache: &Path) -> Result<()> {
    let status = Command::new(bun)
        .arg("run")
        .arg(wrapper)
        .args(["-", "-", "-", "warm"])
        .env_clear()
        .env(CACHE_VARIABLE, cache)
        .current_dir(cache)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("running {} to transpile the action wrapper", bun.display()))?;
    anyhow::ensure!(status.success(), "{} ended with {status} transpiling the action wrapper", bun.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::sync::Barrier;

    use super::*;

    /// Workers starting together each open the wrapper they were given; none may find it replaced
    /// (unlinked) afterwards, which is what a rename into place did.
    #[test]
    fn workers_installing_at_once_keep_the_file_each_opened() {
        for _ in 0..40 {
            let home = tempfile::tempdir().unwrap();
            let barrier = Barrier::new(6);
            let opened: Vec<fs::File> = std::thread::scope(|scope| {
                let starts: Vec<_> = (0..6)
                    .map(|_| {
                        scope.spawn(|| {
                            barrier.wait();
                            fs::File::open(install(home.path()).unwrap()).unwrap()
                        })
                    })
                    .collect();
                starts.into_iter().map(|start| start.join().unwrap()).collect()
            });
            let on_disk = fs::metadata(install(home.path()).unwrap()).unwrap();
            for file in opened {
                let held = file.metadata().unwrap();
                assert_eq!((held.nlink(), held.ino()), (1, on_disk.ino()), "a wrapper opened by a worker was replaced");
            }
            let left: Vec<_> =
                fs::read_dir(home.path().join("runner")).unwrap().flatten().map(|e| e.file_name()).collect();
            assert_eq!(left.len(), 1, "partial files left behind: {left:?}");
        }
    }
}
