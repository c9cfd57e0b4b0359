//! The guest agent, on the host: `lab-agent --stdio` speaks the same protocol as in the VM, so
//! the protocol's hard cases run here in a second: timeouts, large output, stdout/stderr
//! separation, exit codes and signals, concurrent commands. The native provider's local
//! runner is checked against the same cases.

use harness::conn::{Cmd, Conn};
use harness::proto::ExitStatus;
use rstest::rstest;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An agent process with its stdin and stdout on one end of a socket pair; the Conn on the
/// other end.
struct Agent {
    conn: Conn,
    child: Child,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent() -> Agent {
    let (host, guest) = UnixStream::pair().unwrap();
    let child = Command::new(harness::vm::agent_file().expect("the embedded lab agent as a file"))
        .arg("--stdio")
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(
            guest.try_clone().unwrap(),
        )))
        .stdout(Stdio::from(std::os::fd::OwnedFd::from(guest)))
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start lab-agent --stdio");
    let conn = Conn::new(host, "test agent").unwrap();
    conn.wait_ready(Duration::from_secs(10)).unwrap();
    Agent { conn, child }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Agent,
    Local,
}

/// Keeps the agent process alive as long as the connection is used.
struct Conns {
    conn: Conn,
    _agent: Option<Agent>,
}

fn conn(kind: Kind) -> Conns {
    match kind {
        Kind::Agent => {
            let a = agent();
            Conns {
                conn: a.conn.clone(),
                _agent: Some(a),
            }
        }
        Kind::Local => {
            let c = Conn::local("local");
            c.wait_ready(Duration::from_secs(1)).unwrap();
            Conns {
                conn: c,
                _agent: None,
            }
        }
    }
}

const LIMIT: Duration = Duration::from_secs(30);

fn sh(script: &str) -> Cmd {
    Cmd::new(["sh", "-c", script])
}

#[rstest]
fn stdout_stderr_and_exit_code_come_back_separately(#[values(Kind::Agent, Kind::Local)] k: Kind) {
    let c = conn(k);
    let out = c
        .conn
        .run(&sh("echo out; echo err >&2; echo more; exit 3"), LIMIT)
        .unwrap();
    assert_eq!(out.status, ExitStatus::Code(3));
    assert_eq!(out.stdout, b"out\nmore\n");
    assert_eq!(out.stderr, b"err\n");
}

#[rstest]
fn a_signal_is_reported_as_a_signal(#[values(Kind::Agent, Kind::Local)] k: Kind) {
    let c = conn(k);
    let out = c.conn.run(&sh("kill -TERM $$"), LIMIT).unwrap();
    assert_eq!(out.status, ExitStatus::Signal(15));
    assert_eq!(out.status.code(), 143);
}

#[rstest]
fn the_agent_kills_a_command_at_its_timeout(#[values(Kind::Agent, Kind::Local)] k: Kind) {
    let c = conn(k);
    let t0 = Instant::now();
    // The child `sleep` holds the pipes: the whole process group must go.
    let out = c
        .conn
        .run(
            &sh("echo started; sleep 60 & wait").timeout(Duration::from_millis(300)),
            LIMIT,
        )
        .unwrap();
    assert_eq!(out.status, ExitStatus::TimedOut);
    assert_eq!(out.status.code(), 124);
    assert_eq!(out.stdout, b"started\n");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

#[rstest]
fn the_host_kills_a_command_past_its_deadline(#[values(Kind::Agent, Kind::Local)] k: Kind) {
    let c = conn(k);
    let t0 = Instant::now();
    let out = c
        .conn
        .run(&sh("sleep 60"), Duration::from_millis(300))
        .unwrap();
    assert_eq!(out.status, ExitStatus::TimedOut);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

#[rstest]
fn large_output_arrives_whole(#[values(Kind::Agent, Kind::Local)] k: Kind) {
    let c = conn(k);
    // 6 MB on stdout and 3 MB on stderr at the same time, with recognisable content.
    let out = c
        .conn
        .run(&sh("seq 1 800000 & seq 1 400000 >&2 & wait"), LIMIT)
        .unwrap();
    assert_eq!(out.status, ExitStatus::Code(0));
    let expect = |n: u32| -> Vec<u8> {
        (1..=n)
            .map(|i| format!("{i}\n"))
            .collect::<String>()
            .into_bytes()
    };
    assert_eq!(out.stdout.len(), expect(800000).len());
    assert!(out.stdout == expect(800000), "stdout differs");
    assert!(out.stderr == expect(400000), "stderr differs");
}

#[rstest]
fn commands_run_concurrently(#[values(Kind::Agent, Kind::Local)] k: Kind) {
    let c = conn(k);
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("flag");
    let flag = flag.to_string_lossy();
    // The first command can only finish once the second has run.
    let (tx, rx) = std::sync::mpsc::channel();
    let tx2 = tx.clone();
    c.conn
        .spawn(
            &sh(&format!(
                "n=0; while [ ! -e {flag} ]; do n=$((n+1)); [ $n -gt 1000 ] && exit 9; sleep 0.01; done; echo first"
            )),
            move |e| {
                let _ = tx.send((1, e));
            },
        )
        .unwrap();
    c.conn
        .spawn(&sh(&format!("touch {flag}; echo second")), move |e| {
            let _ = tx2.send((2, e));
        })
        .unwrap();
    let mut exits = vec![];
    let mut outs = [Vec::new(), Vec::new()];
    while exits.len() < 2 {
        match rx.recv_timeout(LIMIT).expect("both commands end") {
            (i, harness::conn::Event::Stdout(d)) => outs[i - 1].extend(d),
            (i, harness::conn::Event::Exit(s)) => exits.push((i, s)),
            (_, e) => panic!("unexpected {e:?}"),
        }
    }
    // Run one after the other, the first would give up (exit 9) before the second started;
    // which of the two reports its exit first is a race (the first may end right after the
    // second's touch), so only the statuses are checked.
    exits.sort_by_key(|(i, _)| *i);
    assert_eq!(
        exits[0],
        (1, ExitStatus::Code(0)),
        "the first saw the second's flag"
    );
    assert_eq!(exits[1], (2, ExitStatus::Code(0)));
    assert_eq!(outs[0], b"first\n");
    assert_eq!(outs[1], b"second\n");
}

#[rstest]
fn env_cwd_and_closed_stdin(#[values(Kind::Agent, Kind::Local)] k: Kind) {
    let c = conn(k);
    let out = c
        .conn
        .run(
            &sh("echo $LAB_TEST_VAR; pwd; cat; echo after-cat")
                .env("LAB_TEST_VAR", "hello")
                .cwd("/usr"),
            LIMIT,
        )
        .unwrap();
    assert_eq!(out.status, ExitStatus::Code(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello\n/usr\nafter-cat\n"
    );
}

#[rstest]
fn a_missing_program_or_directory_is_a_spawn_failure(#[values(Kind::Agent, Kind::Local)] k: Kind) {
    let c = conn(k);
    let out = c.conn.run(&Cmd::new(["/nonexistent/prog"]), LIMIT).unwrap();
    assert!(
        matches!(out.status, ExitStatus::SpawnFailed(ref m) if m.contains("/nonexistent/prog"))
    );
    assert_eq!(out.status.code(), 127);
    let out = c
        .conn
        .run(&Cmd::new(["true"]).cwd("/nonexistent-dir"), LIMIT)
        .unwrap();
    assert!(matches!(out.status, ExitStatus::SpawnFailed(ref m) if m.contains("/nonexistent-dir")));
}

#[test]
fn a_dead_agent_is_reported_not_waited_for() {
    let mut a = agent();
    let (tx, rx) = std::sync::mpsc::channel();
    a.conn
        .spawn(&sh("sleep 60"), move |e| {
            let _ = tx.send(e);
        })
        .unwrap();
    let _ = a.child.kill();
    let ev = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(matches!(ev, harness::conn::Event::Lost(_)), "{ev:?}");
    assert!(!a.conn.is_alive());
    assert!(a.conn.spawn(&sh("true"), |_| {}).is_err());
}

#[test]
fn kill_by_id_ends_a_command_with_sigkill() {
    let a = agent();
    let (tx, rx) = std::sync::mpsc::channel();
    let id = a
        .conn
        .spawn(&sh("echo up; exec sleep 60"), move |e| {
            let _ = tx.send(e);
        })
        .unwrap();
    assert_eq!(
        rx.recv_timeout(LIMIT).unwrap(),
        harness::conn::Event::Stdout(b"up\n".to_vec())
    );
    a.conn.kill(id);
    assert_eq!(
        rx.recv_timeout(LIMIT).unwrap(),
        harness::conn::Event::Exit(ExitStatus::Signal(9))
    );
}
