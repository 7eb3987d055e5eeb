//! WF_TOKEN: an HMAC-SHA256 signed token issued per claim and never stored. It names the job, the
//! claim and an expiry (the database's claim time + the job's timeout + a grace).

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::{Context, Result, bail};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use uuid::Uuid;

const PREFIX: &str = "wf1";
/// Added to the job's start + timeout, so a token outlives its job's run a little.
pub const EXPIRY_GRACE_S: i64 = 60;
/// Clock skew tolerated when checking expiry.
pub const LEEWAY_S: i64 = 30;
const MIN_SECRET_BYTES: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The job id.
    pub job: Uuid,
    /// The claim (job_queue.worker) the token was issued to.
    pub claim: String,
    /// Expiry, seconds since the Unix epoch.
    pub exp: i64,
}

impl Claims {
    pub fn for_claim(job: Uuid, claim: &str, started_at: DateTime<Utc>, timeout_s: i32) -> Claims {
        Claims { job, claim: claim.to_string(), exp: started_at.timestamp() + i64::from(timeout_s) + EXPIRY_GRACE_S }
    }
}

type HmacSha256 = Hmac<Sha256>;

fn mac(secret: &[u8]) -> HmacSha256 {
    <HmacSha256 as KeyInit>::new_from_slice(secret).expect("HMAC takes a key of any length")
}

/// A short name of the signing key, which tells two keys apart without saying anything of either:
/// the first 8 bytes of its MAC of a fixed text, in hex.
pub(crate) fn key_id(secret: &[u8]) -> String {
    let mut mac = mac(secret);
    mac.update(b"windforce signing key id");
    mac.finalize().into_bytes()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

pub fn issue(secret: &[u8], claims: &Claims) -> String {
    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).expect("claims serialize"));
    let signed = format!("{PREFIX}.{payload}");
    let mut mac = mac(secret);
    mac.update(signed.as_bytes());
    let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    format!("{signed}.{signature}")
}

/// The claims of a token well formed and signed with `secret`; expired or not.
pub fn signed_claims(secret: &[u8], token: &str) -> Result<Claims> {
    let token = token.trim();
    let mut parts = token.split('.');
    let (Some(prefix), Some(payload), Some(signature), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        bail!("malformed token: expected {PREFIX}.<payload>.<signature>");
    };
    if prefix != PREFIX {
        bail!("malformed token: unknown version {prefix:?}");
    }
    let signature = URL_SAFE_NO_PAD.decode(signature).context("malformed token: signature is not base64url")?;
    let mut mac = mac(secret);
    mac.update(format!("{prefix}.{payload}").as_bytes());
    mac.verify_slice(&signature)
        .map_err(|_| anyhow::anyhow!("invalid token: the signature does not match (forged, or another WF_SECRET)"))?;
    let bytes = URL_SAFE_NO_PAD.decode(payload).context("malformed token: payload is not base64url")?;
    serde_json::from_slice(&bytes).context("malformed token: payload is not valid claims")
}

/// Refuses claims expired at `now` (the database's clock), past a leeway for clocks apart.
pub fn unexpired(claims: &Claims, now: DateTime<Utc>) -> Result<()> {
    if now.timestamp() > claims.exp + LEEWAY_S {
        let expired = DateTime::<Utc>::from_timestamp(claims.exp, 0).unwrap_or_default();
        bail!("expired token: it expired at {}", expired.to_rfc3339());
    }
    Ok(())
}

/// Whether the claim a token names still owns its job: the attempt it was issued to is running.
pub(crate) fn is_current(client: &mut postgres::Client, claims: &Claims) -> Result<bool> {
    let row = client.query_opt(
        "SELECT 1 FROM job_queue WHERE job_id = $1 AND worker = $2 AND running",
        &[&claims.job, &claims.claim],
    )?;
    Ok(row.is_some())
}

/// The signing key there is: `given` (WF_SECRET), else `<home>/secret` (WF_HOME) if it exists.
pub(crate) fn existing_secret(given: Option<&str>, home: &Path) -> Result<Option<Vec<u8>>> {
    if let Some(secret) = given {
        if secret.len() < MIN_SECRET_BYTES {
            bail!("WF_SECRET must be at least {MIN_SECRET_BYTES} bytes long");
        }
        return Ok(Some(secret.as_bytes().to_vec()));
    }
    let path = home.join("secret");
    match std::fs::read(&path) {
        Ok(secret) if secret.len() >= MIN_SECRET_BYTES => Ok(Some(secret)),
        Ok(_) => bail!("{} is shorter than {MIN_SECRET_BYTES} bytes: remove it to generate a new one", path.display()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error).with_context(|| format!("reading {}", path.display())),
    }
}

/// The signing key: the one there is (`existing_secret`), else `<home>/secret` generated once
/// (mode 0600).
pub(crate) fn load_secret(given: Option<&str>, home: &Path) -> Result<Vec<u8>> {
    if let Some(secret) = existing_secret(given, home)? {
        return Ok(secret);
    }
    std::fs::create_dir_all(home).with_context(|| format!("creating {}", home.display()))?;
    let path = home.join("secret");
    let mut random = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut random)?;
    let secret: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let temp = home.join(format!("secret.{}", std::process::id()));
    {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temp)?;
        file.write_all(secret.as_bytes())?;
        file.sync_all()?;
    }
    // Two processes generating at once: the first rename wins, and both read what is there.
    if std::fs::hard_link(&temp, &path).is_err() && !path.exists() {
        bail!("could not create {}", path.display());
    }
    std::fs::remove_file(&temp).ok();
    Ok(std::fs::read(&path)?)
}
