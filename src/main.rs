fn main() -> std::process::ExitCode {
    wf::run()
}
