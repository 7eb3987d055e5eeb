//! `wf token verify`.

use std::io::Read;

use anyhow::{Context, anyhow};
use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::{CommandResult, Ctx};
use crate::cli::{TokenCommand, TokenVerifyArgs};
use crate::db;
use crate::error::Exit;
use crate::token;

pub(super) fn run(ctx: &Ctx, command: TokenCommand) -> CommandResult {
    match command {
        TokenCommand::Verify(args) => verify(ctx, args),
    }
}

/// A token is valid while it is well signed, unexpired, and its claim still owns the job: a
/// token that outlived its attempt (completed, reaped, put back) is printed with `current: false`
/// and refused (exit 1).
fn verify(ctx: &Ctx, args: TokenVerifyArgs) -> CommandResult {
    // Never made here: a key made now could not have signed the token, and the workers of this
    // host would sign with it from then on.
    let home = ctx.config.home()?;
    let secret = token::existing_secret(ctx.config.secret(), home)?.with_context(|| {
        format!(
            "no signing key: WF_SECRET is not set and {} does not exist (set WF_SECRET as the workers have it)",
            home.join("secret").display()
        )
    })?;
    let text = if args.token == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).context("reading the token from stdin")?;
        text
    } else {
        args.token
    };
    // A forged or malformed token is refused before any connection.
    let claims = token::signed_claims(&secret, &text).context("verifying the token")?;
    let mut client = ctx.connect()?;
    // Expiry is judged on the database's clock, like every time that matters.
    token::unexpired(&claims, db::now(&mut client)?).context("verifying the token")?;
    let current = token::is_current(&mut client, &claims)?;
    let expires = DateTime::<Utc>::from_timestamp(claims.exp, 0).unwrap_or_default();
    if ctx.out.json {
        ctx.out.json(&VerifiedDocument {
            valid: current,
            current,
            job: claims.job,
            claim: &claims.claim,
            expires_at: expires,
        })?;
    } else {
        ctx.out.table(
            &["job", "claim", "expires", "current"],
            vec![vec![
                claims.job.to_string(),
                claims.claim.clone(),
                crate::output::time_cell(Some(expires)),
                if current { "yes" } else { "no" }.to_string(),
            ]],
        )?;
    }
    if !current {
        let known: bool = client.query_one("SELECT EXISTS (SELECT 1 FROM job WHERE id = $1)", &[&claims.job])?.get(0);
        return Err(if known {
            anyhow!(
                "token no longer current: claim {} does not own job {} any more (its attempt ended)",
                claims.claim,
                claims.job
            )
        } else {
            anyhow!(
                "token not current: this database has no job {} (the token is another database's, or its job was pruned)",
                claims.job
            )
        }
        .into());
    }
    Ok(Exit::Ok)
}

/// A token's claims, and whether it holds.
#[derive(Serialize)]
struct VerifiedDocument<'a> {
    /// Well signed, unexpired and current.
    valid: bool,
    /// Its claim still owns the job.
    current: bool,
    job: Uuid,
    claim: &'a str,
    #[serde(serialize_with = "crate::output::rfc3339")]
    expires_at: DateTime<Utc>,
}
