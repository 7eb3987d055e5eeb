fn main() {
    std::process::exit(wf::run());
}
