//! Compiles the guest agent (agent/agent.rs, std only) with `$RUSTC` alone into a static binary
//! in OUT_DIR; the harness embeds its bytes (`include_bytes!` of `LAB_AGENT_PATH`) and puts
//! them in the initramfs, so an installed `cargo-lab` needs nothing of its build tree.
//!
//! The agent's one crate is the workspace's `contracts` (std only, no dependencies): it is
//! compiled first, as an rlib for the same target with the same flags, and given to the
//! agent with `--extern`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The contracts crate's sources, relative to this package.
const CONTRACTS: &[&str] = &[
    "../contracts/src/lib.rs",
    "../contracts/src/failures.rs",
    "../contracts/src/hints.rs",
    "../contracts/src/host.rs",
    "../contracts/src/node.rs",
    "../contracts/src/proto.rs",
];

fn main() {
    for f in ["agent/agent.rs", "src/runner.rs"].iter().chain(CONTRACTS) {
        println!("cargo:rerun-if-changed={f}");
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let contracts = out_dir.join("libcontracts.rlib");
    let out = out_dir.join("lab-agent");
    rustc(
        "contracts",
        "rlib",
        Path::new(CONTRACTS[0]),
        &contracts,
        &[],
    );
    let extern_arg = format!("contracts={}", contracts.display());
    rustc(
        "lab_agent",
        "bin",
        Path::new("agent/agent.rs"),
        &out,
        &["--extern", &extern_arg],
    );
    println!("cargo:rustc-env=LAB_AGENT_PATH={}", out.display());
}

/// `$RUSTC` on one crate root, for the build's target: small, static, no unwinding.
fn rustc(name: &str, crate_type: &str, root: &Path, out: &Path, extra: &[&str]) {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let target = std::env::var("TARGET").expect("TARGET");
    let status = Command::new(&rustc)
        .args([
            "--edition=2024",
            &format!("--crate-name={name}"),
            &format!("--crate-type={crate_type}"),
            "-C",
            "opt-level=2",
            "-C",
            "panic=abort",
            "-C",
            "target-feature=+crt-static",
            "-C",
            "strip=symbols",
            "-C",
            "debuginfo=0",
            "--target",
            &target,
        ])
        .args(extra)
        .arg("-o")
        .arg(out)
        .arg(root)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .unwrap_or_else(|e| panic!("run rustc for {}: {e}", root.display()));
    assert!(
        status.success(),
        "building {} for the lab agent failed",
        root.display()
    );
}
