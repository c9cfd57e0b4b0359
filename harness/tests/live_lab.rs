//! The learner's loop against one long-lived lab: build, run, rebuild, run again.
//!
//! - `the_guest_runs_the_current_build`: a program rebuilt on the host runs in the lab as it
//!   is now, whichever artifact cargo last linked into `target/debug/<bin>`: run by path and
//!   through `sh -c` after every build. Cargo re-links the uplifted binary between two
//!   artifacts when the same bin is built with two feature sets (`cargo build -p X` next to
//!   `cargo test --workspace` does that; here a feature does it on purpose), and one of the two
//!   keeps its older mtime; the guest reads the host's files over 9p under an overlay that keeps
//!   dentries and pages, so without the agent's cache drop such a run maps a mix of old and new
//!   pages. The program carries 4 MiB of data that differs per build and checks it, so a mix is
//!   caught, not just a crash.
//! - `switching_commands_rebuilds_nothing`: `cargo lab run`, `build` and `tour` share one build
//!   (the chapters alone), `cargo lab test` has its own (every test binary); once both exist,
//!   switching between them compiles nothing: after `cargo lab build`, the suite's build
//!   compiles nothing, `cargo lab run 06` after it compiles nothing, and the suite's build
//!   after that compiles nothing either. Each switch only points `target/debug/<chapter>` at
//!   the other artifact, which the test above covers.

use harness::Topology;
use harness::course::workspace_root;
use harness::testing::{self, Role};
use std::path::Path;
use std::process::Command;

const FIXTURE_TOML: &str = r#"[package]
name = "lab-rebuild-fixture"
version = "0.1.0"
edition = "2021"

[features]
alt = []

[workspace]
"#;

/// The fixture's source: its version and flavour, and 4 MiB (1024 pages) filled with a byte
/// that is different in every build; `main` reads one byte of every page and prints the
/// flavour, the version and whether all pages agreed.
fn fixture_main(version: u32) -> String {
    format!(
        r#"const VERSION: u32 = {version};
const FLAVOUR: &str = if cfg!(feature = "alt") {{ "alt" }} else {{ "plain" }};
const FILL: u8 = (VERSION as u8).wrapping_mul(2) + if cfg!(feature = "alt") {{ 1 }} else {{ 0 }};
static BLOB: [u8; 4 << 20] = [FILL; 4 << 20];

fn main() {{
    let blob = std::hint::black_box(&BLOB);
    let mixed = (0..blob.len()).step_by(4096).filter(|&i| blob[i] != FILL).count();
    println!("build {{FLAVOUR}} v{{VERSION}}: {{mixed}} stale pages of 1024");
}}
"#
    )
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn build(dir: &Path, alt: bool) {
    let mut c = cargo();
    c.current_dir(dir).args(["build", "--quiet"]);
    if alt {
        c.args(["--features", "alt"]);
    }
    let out = c.output().expect("running cargo build");
    assert!(
        out.status.success(),
        "building the fixture: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_guest_runs_the_current_build() {
    // Outside the workspace, in the host's /tmp: the guest sees it through the same share.
    let dir = tempfile::Builder::new()
        .prefix("rxe-lab-rebuild.")
        .tempdir()
        .expect("a temp dir");
    std::fs::write(dir.path().join("Cargo.toml"), FIXTURE_TOML).unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    let exe = dir.path().join("target/debug/lab-rebuild-fixture");
    let exe = exe.to_str().unwrap().to_string();
    let lab = testing::lab(Topology::Loopback);
    let _g = testing::lock(&lab);
    // (version, alt): alternate the two artifacts, go back to the first (an older file cargo
    // re-links), then change the source and alternate again.
    let steps = [
        (1, false),
        (1, true),
        (1, false),
        (1, true),
        (2, false),
        (2, true),
    ];
    let mut transcript = String::new();
    for (version, alt) in steps {
        std::fs::write(dir.path().join("src/main.rs"), fixture_main(version)).unwrap();
        build(dir.path(), alt);
        let want = format!(
            "build {} v{version}: 0 stale pages of 1024",
            if alt { "alt" } else { "plain" }
        );
        let roles = [
            Role::new("by-path", [exe.as_str()]),
            Role::new("sh-c", ["sh", "-c", &format!("{exe} && echo shell-ok")]),
        ];
        for r in roles {
            let name = r.name.clone();
            let t = testing::run_roles_in(&lab, &[r], testing::run_timeout())
                .unwrap_or_else(|e| panic!("{e}"));
            let s = t.section(&name);
            transcript.push_str(&format!(
                "after build v{version} alt={alt}, {name}: exit {} {}\n",
                s.exit_code,
                s.stdout.trim()
            ));
            assert!(
                s.exit_code == 0 && s.stdout.lines().next() == Some(want.as_str()),
                "the lab did not run the current build ({want}):\n{transcript}\n{}",
                t.text()
            );
        }
    }
    eprintln!("{transcript}");
}

/// Runs a command in the repository root; returns stderr, failing on a non-zero exit.
fn run_here(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{err}",
        String::from_utf8_lossy(&out.stdout)
    );
    err
}

#[test]
fn switching_commands_rebuilds_nothing() {
    let root = workspace_root().expect("the workspace");
    let hint = "(this test expects the suite's own build: run it through `cargo lab test`)";
    // The chapters' own build (`run`'s, `build`'s, `tour`'s): on a clone that has only the
    // suite's build it compiles their artifacts once; not asserted.
    run_here(
        cargo()
            .current_dir(&root)
            .args([
                "run",
                "--quiet",
                "--package",
                "harness",
                "--bin",
                "cargo-lab",
                "--",
            ])
            .arg("build"),
        "cargo lab build",
    );
    let suite_build_compiles_nothing = |after: &str| {
        let err = run_here(
            cargo()
                .current_dir(&root)
                .args(["test", "--workspace", "--no-run"]),
            "cargo test --workspace --no-run",
        );
        assert!(
            !err.contains("Compiling"),
            "the suite's build after `{after}` compiled something {hint}:\n{err}"
        );
    };
    suite_build_compiles_nothing("cargo lab build");
    // `cargo lab run 06`, as the alias runs it but without --quiet, so that a compile shows.
    let err = run_here(
        cargo()
            .current_dir(&root)
            .args(["run", "--package", "harness", "--bin", "cargo-lab", "--"])
            .args(["run", "06"]),
        "cargo lab run 06",
    );
    assert!(
        !err.contains("Compiling"),
        "`cargo lab run 06` after the suite's build compiled something {hint}:\n{err}"
    );
    // And the suite's build after it: nothing either.
    suite_build_compiles_nothing("cargo lab run 06");
}
