//! `cargo lab test` with `LAB_TEST_JOBS`: test binaries run N at a time
//! (harness/src/cli/parallel.rs), on two small crates whose tests need no lab, so that the run
//! is quick: the contracts' and the agent's unit tests and their doc tests (four jobs: two
//! libraries, the agent's binary, the doc tests). Inside the suite the nested run reuses the
//! suite's labs (`LAB_STATE_DIR`); alone, it boots its own.

use std::process::Command;

const LAB: &str = env!("CARGO_BIN_EXE_cargo-lab");

fn lab_test(jobs: &str) -> (Option<i32>, String, String) {
    let out = Command::new(LAB)
        .args(["test", "--", "-p", "rxe-contracts", "-p", "lab-agent"])
        .env("LAB_TEST_JOBS", jobs)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running cargo-lab");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn two_at_a_time_each_binary_whole_and_counted() {
    let (code, out, err) = lab_test("2");
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.contains("cargo lab test: 4 test binaries, 2 at a time (LAB_TEST_JOBS)"),
        "{out}"
    );
    for label in [
        "contracts/src/lib.rs (unit tests)",
        "agent/src/lib.rs (unit tests)",
        "agent/src/main.rs (unit tests)",
        "doc tests",
    ] {
        let ok = format!("cargo lab test: ok {label} in ");
        assert_eq!(
            out.matches(&ok).count(),
            1,
            "{label} not ended once:\n{out}"
        );
    }
    // Each binary's output is one block: its `Running` line (the doc tests: cargo's own
    // `Doc-tests` lines), its tests, one result per binary, then the line that counts it.
    let mut results = 0;
    for line in out.lines() {
        if line.starts_with("test result: ") {
            results += 1;
        }
        if line.starts_with("cargo lab test: ok ") {
            // The doc tests: one result per crate with doc tests (two here).
            let want = if line.contains(" doc tests ") { 2 } else { 1 };
            assert_eq!(
                results, want,
                "a block with other than {want} results:\n{out}"
            );
            results = 0;
        }
    }
    let slowest = out
        .split("slowest test binaries (")
        .nth(1)
        .unwrap_or_else(|| panic!("no list of the slowest:\n{out}"));
    for label in ["contracts/src/lib.rs (unit tests)", "Doc-tests lab_agent"] {
        assert!(
            slowest.contains(label),
            "{label} not in the slowest:\n{out}"
        );
    }
}

#[test]
fn a_bad_job_count_says_what_is_accepted() {
    let (code, _, err) = lab_test("many");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("LAB_TEST_JOBS=\"many\"") && err.contains("1 to 16"),
        "{err}"
    );
}
