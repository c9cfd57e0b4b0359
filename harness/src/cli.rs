//! The `cargo lab` CLI (placeholder while it is written).

/// Entry point of `cargo lab`.
pub fn main() -> i32 {
    eprintln!("cargo lab: not built yet");
    2
}
