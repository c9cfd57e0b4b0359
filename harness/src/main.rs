//! `cargo lab`: placeholder, replaced by the harness CLI.
fn main() {
    eprintln!("cargo lab: not built yet");
    std::process::exit(2);
}
