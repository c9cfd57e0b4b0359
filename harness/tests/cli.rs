//! The CLI's fast paths (no VM): list, unknown and unwritten chapters, help.

use assert_cmd::Command;

fn lab() -> Command {
    let mut c = Command::cargo_bin("cargo-lab").unwrap();
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

#[test]
fn list_shows_the_course_in_order() {
    let out = lab()
        .arg("list")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    let i1 = out.find("ch01-devices").expect("ch01 listed");
    let i6 = out.find("ch06-pingpong").expect("ch06 listed");
    assert!(i1 < i6);
    assert!(out.contains("cargo lab run"));
}

#[test]
fn an_unknown_chapter_says_where_to_look() {
    let out = lab()
        .args(["run", "99"])
        .assert()
        .failure()
        .get_output()
        .stderr
        .clone();
    let err = String::from_utf8(out).unwrap();
    assert!(err.contains("no chapter \"99\""), "{err}");
    assert!(err.contains("cargo lab list"), "{err}");
}

#[test]
fn cargo_subcommand_form_is_accepted() {
    // Installed as `cargo-lab`, cargo calls it as `cargo-lab lab <cmd>`.
    lab().args(["lab", "list"]).assert().success();
}

#[test]
fn help_lists_the_commands() {
    let out = lab()
        .arg("--help")
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    // Each is the first word of a line of the command list ("up" alone would also match
    // "setup").
    let listed: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("  ")?.split_whitespace().next())
        .collect();
    for c in [
        "doctor",
        "setup",
        "up",
        "status",
        "down",
        "exec",
        "shell",
        "list",
        "run",
        "tour",
        "test",
        "kernel",
        "userspace",
    ] {
        assert!(listed.contains(&c), "{c} missing from --help:\n{out}");
    }
}

#[test]
fn setup_print_runs_the_embedded_script() {
    // --print installs nothing; exit 0 (all present) or 1 (missing, with the command).
    let out = lab().args(["setup", "--print"]).output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(0) || text.contains("apt-get install"),
        "{text}"
    );
}

/// The words of `cargo lab ARGS --help`'s command list (the first word of each indented line).
fn listed_commands(args: &[&str]) -> (Vec<String>, String) {
    let out = lab().args(args).arg("--help").assert().success();
    let out = String::from_utf8(out.get_output().stdout.clone()).unwrap();
    let listed = out
        .lines()
        .filter_map(|l| Some(l.strip_prefix("  ")?.split_whitespace().next()?.to_string()))
        .collect();
    (listed, out)
}

#[test]
fn fault_help_lists_its_actions() {
    let (listed, out) = listed_commands(&["fault"]);
    for a in [
        "loss",
        "delay",
        "duplicate",
        "reorder",
        "corrupt",
        "partition",
        "heal",
        "freeze",
        "thaw",
        "kill",
        "restart",
        "clear",
        "status",
    ] {
        assert!(
            listed.iter().any(|l| l == a),
            "{a} missing from fault --help:\n{out}"
        );
    }
}

/// A fault's arguments are parsed before the lab is looked for: a bad one exits 2 with a
/// message naming what was expected, with or without a running pair.
#[test]
fn fault_rejects_bad_arguments_with_exit_2() {
    for (args, says) in [
        (
            &["fault", "loss", "150%"][..],
            "a percentage is between 0% and 100%",
        ),
        (
            &["fault", "loss", "lots"],
            "expected a percentage such as 5%",
        ),
        (
            &["fault", "delay", "soon"],
            "expected milliseconds such as 10ms",
        ),
        (
            &["fault", "delay", "10ms±90000ms"],
            "between 0ms and 60000ms",
        ),
        (&["fault", "freeze", "c"], "invalid value 'c'"),
        (&["fault", "freeze"], "<NODE>"),
        (&["fault", "jam", "1%"], "unrecognized subcommand 'jam'"),
        (&["fault", "clear", "--", "true"], "unexpected argument"),
    ] {
        let out = lab().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(says),
            "{args:?}: {says:?} missing from:\n{err}"
        );
    }
}

/// `--cpus` and `LAB_PAIR_SMP` take 1 to 16 vCPUs per pair node: anything else stops before a
/// lab starts, naming what is accepted (clap's usage error for the flag, exit 2).
#[test]
fn a_bad_vcpu_count_is_refused_before_anything_boots() {
    for bad in ["0", "17", "two", "-1"] {
        let out = lab()
            .args(["up", "-t", "pair", &format!("--cpus={bad}")])
            .assert()
            .code(2)
            .get_output()
            .stderr
            .clone();
        let err = String::from_utf8(out).unwrap();
        assert!(err.contains("a whole number from 1 to 16"), "{bad}: {err}");
    }
    let out = lab()
        .args(["up", "--cpus", "2"])
        .assert()
        .code(1)
        .get_output()
        .stderr
        .clone();
    let err = String::from_utf8(out).unwrap();
    assert!(err.contains("use it with `-t pair`"), "{err}");
    let out = lab()
        .args(["up", "-t", "pair"])
        .env("LAB_PAIR_SMP", "0")
        .env(
            "LAB_STATE_DIR",
            std::env::temp_dir().join("rxe-lab-cli-test-no-lab"),
        )
        .assert()
        .code(1)
        .get_output()
        .stderr
        .clone();
    let err = String::from_utf8(out).unwrap();
    assert!(
        err.contains("LAB_PAIR_SMP=0") && err.contains("from 1 to 16"),
        "{err}"
    );
}
