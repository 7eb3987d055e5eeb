//! `wf-supervise`: the supervisor of one action attempt (see `wf::runner::supervisor`), as a binary
//! of its own. It links only what a supervisor needs, so it starts in about a millisecond where
//! `wf __supervise` (the same code, the fallback) takes several: once per attempt.

fn main() {
    std::process::exit(wf::runner::supervise_main(std::env::args().skip(1)));
}
