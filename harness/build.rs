//! Compiles the guest agent (the workspace's `lab-agent` package, agent/) into a static binary in
//! OUT_DIR; the harness embeds its bytes (`include_bytes!` of `LAB_AGENT_PATH`) and puts them in
//! the initramfs, so an installed `cargo-lab` needs nothing of its build tree.
//!
//! It runs `$RUSTC` on the crate roots, not a nested cargo. The agent is std only and its one
//! dependency, `contracts`, has none, so three rustc calls build it: `contracts` and the agent's
//! library (which holds the runner) as rlibs, then the binary, each for the same target with the
//! same flags (rustc follows each root's `mod` declarations, so a crate may have many files). A
//! nested cargo would add what this build must not depend on: a second target dir and lock,
//! the outer build's environment to sort out (RUSTFLAGS, a wrapper, `--offline`/`--locked` not
//! passed down), and a profile for a static, abort-on-panic binary, which only the workspace
//! root's Cargo.toml can set and which would then apply to every crate. The price: a crate
//! added to agent/Cargo.toml is not seen here, so the agent stays std only plus `contracts`
//! (its Cargo.toml says so).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The agent's package and `contracts`, relative to this package.
const AGENT: &str = "../agent/src";
const CONTRACTS: &str = "../contracts/src";

fn main() {
    // Directories: cargo reruns this script when any file under them changes (a new module
    // too).
    for dir in [AGENT, CONTRACTS] {
        println!("cargo:rerun-if-changed={dir}");
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    let contracts = out_dir.join("libcontracts.rlib");
    let runner = out_dir.join("liblab_agent.rlib");
    let out = out_dir.join("lab-agent");
    let src = |dir: &str, root: &str| Path::new(dir).join(root);
    let search = format!("dependency={}", out_dir.display());
    let with_contracts = format!("contracts={}", contracts.display());
    let with_runner = format!("lab_agent={}", runner.display());
    rustc(
        "contracts",
        "rlib",
        &src(CONTRACTS, "lib.rs"),
        &contracts,
        &[],
    );
    rustc(
        "lab_agent",
        "rlib",
        &src(AGENT, "lib.rs"),
        &runner,
        &["-L", &search, "--extern", &with_contracts],
    );
    rustc(
        "lab_agent",
        "bin",
        &src(AGENT, "main.rs"),
        &out,
        &[
            "-L",
            &search,
            "--extern",
            &with_contracts,
            "--extern",
            &with_runner,
        ],
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
