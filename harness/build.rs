//! Compiles the guest agent (agent/agent.rs, std only) with `$RUSTC` alone into a static binary
//! in OUT_DIR; the harness embeds its bytes (`include_bytes!` of `LAB_AGENT_PATH`) and puts
//! them in the initramfs, so an installed `cargo-lab` needs nothing of its build tree.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    for f in ["agent/agent.rs", "src/proto.rs", "src/runner.rs"] {
        println!("cargo:rerun-if-changed={f}");
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("lab-agent");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let target = std::env::var("TARGET").expect("TARGET");
    let status = Command::new(&rustc)
        .args([
            "--edition=2024",
            "--crate-name=lab_agent",
            "--crate-type=bin",
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
            "-o",
        ])
        .arg(&out)
        .arg("agent/agent.rs")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .expect("run rustc for the lab agent");
    assert!(
        status.success(),
        "building the lab agent (agent/agent.rs) failed"
    );
    println!("cargo:rustc-env=LAB_AGENT_PATH={}", out.display());
}
