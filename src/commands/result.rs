//! `wf result ID [--wait [--timeout D]]`: a job's result, with the exit code of how it ended.

use super::render::print_result;
use super::{CommandResult, Ctx};
use crate::cli::ResultArgs;
use crate::queue::inspect;

pub(super) fn run(ctx: &Ctx, args: ResultArgs) -> CommandResult {
    let database = ctx.database()?;
    let mut client = database.connect()?;
    let id = inspect::resolve_id(&mut client, &args.id)?;
    let job = if args.wait {
        inspect::wait_until_finished(&mut client, &|| database.connect(), id, args.timeout)?
    } else {
        inspect::show_existing(&mut client, id)?
    };
    print_result(&ctx.out, &job, args.wait)
}
