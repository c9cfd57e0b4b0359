//! The API tests use: a shared lab per topology and test binary, chapters and roles run in it,
//! transcripts and the one redaction table.
//!
//! ```no_run
//! use harness::testing::run_chapter;
//! // In chapters/06-pingpong/tests/: `env!("CARGO_BIN_EXE_ch06-pingpong")` names the binary.
//! let exe = "target/debug/ch06-pingpong";
//! let t = run_chapter("ch06-pingpong", exe, &["-n", "10"]);
//! t.assert_success();
//! // insta::assert_snapshot!(t.redacted());
//! ```
//!
//! Layout: this file holds the API (roles, transcripts, the shared labs, `in_lab`, chapters);
//! `lock.rs` serializes a lab across processes; `schedule.rs` runs roles; `traced.rs` runs them
//! on the pair with the wire recorded.
//!
//! Environment: `LAB_TIMEOUT_SECS` (every run's deadline, default 180), `LAB_STATE_DIR` (labs a
//! `cargo lab test`/`cargo lab up` daemon runs), `LAB_PROVIDER`, `LAB_VM_MEM_MB`, `LAB_ACCEL`,
//! `LAB_BOOT_TIMEOUT_SECS`.

use crate::conn::Cmd;
use crate::course::{Course, workspace_root};
use crate::proto::ExitStatus;
pub use crate::redact::redact;
use crate::testbed::{Provider, Testbed};
use crate::{Node, Topology};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod lock;
mod schedule;
mod traced;
pub use lock::{LabGuard, lock};
pub use schedule::{run_roles, run_roles_in};
pub use traced::{Traced, run_chapter_traced, run_roles_traced, wire_lab};

/// One process to run in the lab.
#[derive(Debug, Clone)]
pub struct Role {
    /// Section name in the transcript ("server", "client", "run", ...).
    pub name: String,
    pub node: Node,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// The next role starts only once this role printed a stdout line containing this.
    pub ready: Option<String>,
}

impl Role {
    /// A role on node a with no readiness line.
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(name: &str, argv: I) -> Role {
        Role {
            name: name.into(),
            node: Node::A,
            argv: argv.into_iter().map(Into::into).collect(),
            env: vec![],
            ready: None,
        }
    }
    pub fn on(mut self, node: Node) -> Role {
        self.node = node;
        self
    }
    pub fn ready(mut self, line: &str) -> Role {
        self.ready = Some(line.into());
        self
    }
    pub fn env(mut self, k: &str, v: &str) -> Role {
        self.env.push((k.into(), v.into()));
        self
    }
}

/// One role's result.
#[derive(Debug, Clone)]
pub struct Section {
    pub name: String,
    /// The exit code; 128 + N if killed by signal N; 124 if the harness killed it at its
    /// deadline; 127 if it could not start; -1 if it never started (an earlier role failed).
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Every role's result, in role order.
#[derive(Debug, Clone)]
pub struct Transcript {
    pub sections: Vec<Section>,
}

impl Transcript {
    /// All sections, unredacted: each headed `== <name> (exit N)`, then its stdout, then its
    /// stderr under `-- stderr` if there is any.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for sec in &self.sections {
            s.push_str(&format!("== {} (exit {})\n", sec.name, sec.exit_code));
            s.push_str(&sec.stdout);
            if !sec.stdout.is_empty() && !sec.stdout.ends_with('\n') {
                s.push('\n');
            }
            if !sec.stderr.is_empty() {
                s.push_str("-- stderr\n");
                s.push_str(&sec.stderr);
                if !sec.stderr.ends_with('\n') {
                    s.push('\n');
                }
            }
        }
        s
    }

    /// [`Transcript::text`] through the one redaction table, numbered over all sections: what
    /// snapshots hold.
    pub fn redacted(&self) -> String {
        redact(&self.text())
    }

    /// The section of a role, by name (panics, listing the names, if there is none).
    pub fn section(&self, name: &str) -> &Section {
        self.sections
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| {
                let names: Vec<_> = self.sections.iter().map(|s| s.name.as_str()).collect();
                panic!("transcript has no section {name:?} (it has {names:?})")
            })
    }

    /// Did every role exit 0?
    pub fn success(&self) -> bool {
        self.sections.iter().all(|s| s.exit_code == 0)
    }

    /// Panics, printing the whole transcript, unless every role exited 0.
    #[track_caller]
    pub fn assert_success(&self) -> &Self {
        if !self.success() {
            let bad: Vec<String> = self
                .sections
                .iter()
                .filter(|s| s.exit_code != 0)
                .map(|s| format!("{} exited {}", s.name, s.exit_code))
                .collect();
            panic!("{}\n{}", bad.join(", "), self.text());
        }
        self
    }
}

impl std::fmt::Display for Transcript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text())
    }
}

/// The 8 characters of a labelled 24-bit number (`0x00001a`: a QPN, a PSN) after the first
/// `marker` in a chapter's output, for tests that compare what two roles printed. Panics,
/// showing the text, when the marker is missing.
pub fn value_after<'a>(text: &'a str, marker: &str) -> &'a str {
    let i = text
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker:?} in\n{text}"))
        + marker.len();
    text.get(i..i + 8)
        .unwrap_or_else(|| panic!("fewer than 8 characters after {marker:?} in\n{text}"))
}

/// The deadline of one run (`LAB_TIMEOUT_SECS`, default 180 s: generous for TCG).
pub fn run_timeout() -> Duration {
    Duration::from_secs(
        std::env::var("LAB_TIMEOUT_SECS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(180),
    )
}

fn topo_index(t: Topology) -> usize {
    match t {
        Topology::Loopback => 0,
        Topology::Pair => 1,
    }
}

type Shared = Mutex<Option<Result<Arc<Testbed>, String>>>;
static LABS: [Shared; 2] = [Mutex::new(None), Mutex::new(None)];

/// The lab for a topology, shared by every test of this binary: attached to a running daemon
/// (`cargo lab test`, `cargo lab up`) or booted once here. Panics, saying which command fixes
/// it, when no lab can be had: a device test never passes by skipping.
pub fn lab(topology: Topology) -> Arc<Testbed> {
    match try_lab(topology) {
        Ok(l) => l,
        Err(e) => panic!("{e}"),
    }
}

/// [`testbed`] without the panic.
pub fn try_lab(topology: Topology) -> anyhow::Result<Arc<Testbed>> {
    let mut g = LABS[topo_index(topology)]
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    // A lab that died (its daemon stopped or restarted by `cargo lab down`/`up`, its VM gone):
    // get a new one rather than fail every later test.
    if let Some(Ok(l)) = &*g
        && let Err(why) = l.check()
    {
        eprintln!(
            "harness: the {} lab is gone ({why}); getting a new one",
            topology.name()
        );
        *g = None;
    }
    let r = g.get_or_insert_with(|| {
        let t0 = Instant::now();
        eprintln!("harness: getting a {} lab ...", topology.name());
        match Testbed::acquire(topology, workspace_root().as_deref()) {
            Ok(l) => {
                eprintln!(
                    "harness: {} lab ready: {} [{:.1} s]",
                    topology.name(),
                    l.origin,
                    t0.elapsed().as_secs_f64()
                );
                Ok(Arc::new(l))
            }
            Err(e) => Err(format!(
                "harness: no {} lab: {e:#}\n\
                 next: run `cargo lab doctor` to see what is missing and `cargo lab setup` to \
                 install it (then `cargo lab test`)",
                topology.name()
            )),
        }
    });
    r.clone().map_err(anyhow::Error::msg)
}

/// Environment passed from the host to commands in the lab.
fn passthrough_env() -> Vec<(String, String)> {
    let mut env = vec![("LAB_GUEST".to_string(), "1".to_string())];
    for (k, v) in std::env::vars() {
        let pass = matches!(
            k.as_str(),
            "RUST_BACKTRACE"
                | "RUST_LIB_BACKTRACE"
                | "RUST_LOG"
                | "LAB_DEVICE"
                | "LAB_TIMEOUT_SECS"
                | "LAB_EXERCISE_IMPL"
                | "NO_COLOR"
                | "CLICOLOR"
                | "CARGO_MANIFEST_DIR"
                | "CARGO_PKG_NAME"
                | "CARGO_TARGET_TMPDIR"
        ) || k.starts_with("INSTA_");
        if pass {
            env.push((k, v));
        }
    }
    if std::env::var_os("INSTA_WORKSPACE_ROOT").is_none()
        && let Some(root) = workspace_root()
    {
        env.push((
            "INSTA_WORKSPACE_ROOT".into(),
            root.to_string_lossy().into_owned(),
        ));
    }
    env
}

fn cwd() -> String {
    std::env::current_dir()
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "/".into())
}

/// The kernel release the lab's node A runs (`/proc/sys/kernel/osrelease` there: the guest's
/// kernel in the microVM lab, this host's natively), for tests whose expectations depend on
/// the kernel rxe is part of (`course::kernel` in the chapters). Asked once per topology and
/// test binary.
pub fn lab_kernel(topology: Topology) -> String {
    static KERNELS: [Mutex<Option<String>>; 2] = [Mutex::new(None), Mutex::new(None)];
    let mut g = KERNELS[topo_index(topology)]
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(k) = &*g {
        return k.clone();
    }
    let lab = lab(topology);
    let cmd = Cmd::new(["cat", "/proc/sys/kernel/osrelease"]).timeout(Duration::from_secs(30));
    let out = lab
        .run(Node::A, &cmd, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("lab_kernel: {e:#}"));
    let release = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        matches!(out.status, ExitStatus::Code(0)) && !release.is_empty(),
        "lab_kernel: `cat /proc/sys/kernel/osrelease` on node a gave {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    *g = Some(release.clone());
    release
}

/// Runs `body` where the rxe device is. Inside the lab (`LAB_GUEST=1`) it runs `body`
/// directly; elsewhere it re-runs this test (`test_name`, as libtest names it, e.g.
/// `tests::opens_a_device`; "" = the current thread's name, which libtest sets to the test's
/// name) inside the lab and fails unless it passes there.
pub fn in_lab<F: FnOnce()>(topology: Topology, test_name: &str, body: F) {
    if std::env::var_os("LAB_GUEST").is_some() {
        body();
        return;
    }
    let name = if test_name.is_empty() {
        std::thread::current()
            .name()
            .filter(|n| *n != "main")
            .map(str::to_string)
            .unwrap_or_else(|| {
                panic!("in_lab: pass the test's name (libtest did not name this thread)")
            })
    } else {
        test_name.to_string()
    };
    let lab = lab(topology);
    let _g = lock(&lab);
    if lab.provider == Provider::Native {
        body();
        return;
    }
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Cmd::new([
        exe.to_string_lossy().into_owned(),
        name.clone(),
        "--exact".into(),
        "--nocapture".into(),
        "--test-threads=1".into(),
    ])
    .cwd(cwd())
    .timeout(run_timeout() + Duration::from_secs(5));
    cmd.env = passthrough_env();
    let out = lab
        .run(Node::A, &cmd, run_timeout())
        .unwrap_or_else(|e| panic!("in_lab({name}): {e:#}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    match out.status {
        ExitStatus::Code(0) => {}
        ExitStatus::TimedOut => panic!(
            "in_lab({name}): still running after {} s (LAB_TIMEOUT_SECS); killed it\n{}",
            run_timeout().as_secs(),
            lab.console_tail(20)
        ),
        s => panic!("in_lab({name}): the test failed in the lab ({s:?})"),
    }
    if !stdout.contains("test result: ok. 1 passed") {
        panic!(
            "in_lab({name}): expected exactly 1 test to pass in the lab; is {name:?} the full \
             test name as libtest prints it (module path included)?"
        );
    }
}

/// The roles of a chapter as `chapters/course.toml` describes it, for a lab.
pub fn chapter_roles(
    lab: &Testbed,
    package: &str,
    exe: &str,
    args: &[&str],
) -> anyhow::Result<Vec<Role>> {
    let (course, _) = Course::load()?;
    let ch = course
        .find(package)
        .ok_or_else(|| anyhow::anyhow!("chapter {package} is not in chapters/course.toml"))?;
    let t = ch.topology;
    if t != lab.topology {
        anyhow::bail!(
            "chapter {package} needs the {} topology, got a {} lab",
            t.name(),
            lab.topology.name()
        );
    }
    Ok(ch.roles(exe, args, lab.server_addr()))
}

/// Runs a chapter as `chapters/course.toml` describes it; `exe` is the chapter binary
/// (`env!("CARGO_BIN_EXE_<package>")`); `args` replace the chapter's `defaults` when not empty,
/// exactly as `cargo lab run NN -- <args>` does.
pub fn run_chapter(package: &str, exe: &str, args: &[&str]) -> Transcript {
    let (course, _) = Course::load().unwrap_or_else(|e| panic!("{e:#}"));
    let ch = course
        .find(package)
        .unwrap_or_else(|| panic!("chapter {package} is not in chapters/course.toml"));
    let topology = ch.topology;
    let lab = lab(topology);
    let roles = chapter_roles(&lab, package, exe, args).unwrap_or_else(|e| panic!("{e}"));
    let _g = lock(&lab);
    match run_roles_in(&lab, &roles, run_timeout()) {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    }
}

/// package -> the path of that package's `e2e` test binary, from `cargo test --workspace
/// --no-run --message-format=json` (what `cargo lab test` has just built: nothing is rebuilt).
/// For tests that run a chapter's own test binary somewhere else: natively inside the lab VM,
/// or against another userspace.
pub fn e2e_binaries(packages: &[&str]) -> Vec<(String, String)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = workspace_root().expect("inside the rxe-lab workspace");
    let args = [
        "test",
        "--workspace",
        "--no-run",
        "--message-format=json",
        "--quiet",
    ];
    let out = crate::host_tools::captured(duct::cmd(&cargo, args).dir(root))
        .unwrap_or_else(|e| panic!("running {cargo} test --no-run: {e}"));
    assert!(
        out.status.success(),
        "cargo test --workspace --no-run failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = String::from_utf8_lossy(&out.stdout);
    let field = |line: &str, key: &str| -> Option<String> {
        let start = line.find(key)? + key.len();
        let rest = &line[start..];
        Some(rest[..rest.find('"')?].to_string())
    };
    packages
        .iter()
        .map(|p| {
            let exe = json
                .lines()
                .filter(|l| {
                    l.contains("\"reason\":\"compiler-artifact\"")
                        && l.contains(&format!("#{p}@"))
                        && l.contains("\"name\":\"e2e\"")
                        && l.contains("\"kind\":[\"test\"]")
                })
                .find_map(|l| field(l, "\"executable\":\""))
                .unwrap_or_else(|| panic!("no e2e test binary for {p} in cargo's output"));
            (p.to_string(), exe)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Transcript {
        Transcript {
            sections: vec![
                Section {
                    name: "server".into(),
                    exit_code: 0,
                    stdout: "listening on 127.0.0.1\nlocal qpn=0x000011\nremote qpn=0x000012"
                        .into(),
                    stderr: String::new(),
                },
                Section {
                    name: "client".into(),
                    exit_code: 2,
                    stdout: "local qpn=0x000012\nremote qpn=0x000011\n".into(),
                    stderr: "warning: x\n".into(),
                },
            ],
        }
    }

    #[test]
    fn redacted_has_sections_exit_codes_and_shared_numbering() {
        insta::assert_snapshot!(t().redacted(), @r"
        == server (exit 0)
        listening on 127.0.0.1
        local qpn=[QPN#1]
        remote qpn=[QPN#2]
        == client (exit 2)
        local qpn=[QPN#2]
        remote qpn=[QPN#1]
        -- stderr
        warning: x
        ");
    }

    #[test]
    fn section_and_success() {
        let t = t();
        assert_eq!(t.section("client").exit_code, 2);
        assert!(!t.success());
        let r = std::panic::catch_unwind(|| {
            t.assert_success();
        });
        assert!(r.is_err());
        let r = std::panic::catch_unwind(|| {
            t.section("nope");
        });
        let msg = r.unwrap_err().downcast::<String>().unwrap();
        assert!(msg.contains("\"server\", \"client\""), "{msg}");
    }

    #[test]
    fn role_builder() {
        let r = Role::new("client", ["x", "-g", "1"])
            .on(Node::B)
            .ready("go")
            .env("A", "1");
        assert_eq!(r.node, Node::B);
        assert_eq!(r.argv, ["x", "-g", "1"]);
        assert_eq!(r.ready.as_deref(), Some("go"));
        assert_eq!(r.env, [("A".to_string(), "1".to_string())]);
    }
}
