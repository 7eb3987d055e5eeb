//! `wf token verify`.

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde_json::json;

use super::Ctx;
use crate::cli::{TokenCommand, TokenVerifyArgs};
use crate::error::Outcome;
use crate::token;

pub(super) fn run(ctx: &Ctx, command: TokenCommand) -> Result<Outcome> {
    match command {
        TokenCommand::Verify(args) => verify(ctx, args),
    }
}

fn verify(ctx: &Ctx, args: TokenVerifyArgs) -> Result<Outcome> {
    let secret = token::load_secret()?;
    // Expiry is judged on the database's clock, like every time that matters.
    let now: DateTime<Utc> = ctx.connect()?.query_one("SELECT now()", &[])?.get(0);
    let claims = token::verify(&secret, &args.token, now).context("verifying the token")?;
    let expires = DateTime::<Utc>::from_timestamp(claims.exp, 0).unwrap_or_default();
    if ctx.out.json {
        ctx.out.json(&json!({
            "valid": true, "job": claims.job, "claim": claims.claim,
            "expires_at": crate::output::time_json(Some(expires)),
        }))?;
    } else {
        ctx.out.table(
            &["job", "claim", "expires"],
            vec![vec![claims.job.to_string(), claims.claim, crate::output::time_cell(Some(expires))]],
        )?;
    }
    Ok(Outcome::Ok)
}
