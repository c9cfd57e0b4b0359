//! `cargo lab`: the harness CLI.
fn main() {
    std::process::exit(harness::cli::main());
}
