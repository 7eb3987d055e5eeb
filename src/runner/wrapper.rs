//! The wrapper script bun runs around an action (`wrapper.mjs`): embedded in the binary, written
//! to `$WF_HOME/runner/` under a name derived from its content.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

const SOURCE: &str = include_str!("wrapper.mjs");

/// Write the wrapper (once: the name is its content hash) and return its path. Workers of different
/// versions sharing one WF_HOME each find their own wrapper, and none ever sees a half-written one:
/// it is written beside its final name and renamed into place.
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
        .and_then(|()| fs::rename(&partial, &path));
    if let Err(error) = written {
        let _ = fs::remove_file(&partial);
        return Err(error).with_context(|| format!("writing the action wrapper {}", path.display()));
    }
    Ok(path)
}
