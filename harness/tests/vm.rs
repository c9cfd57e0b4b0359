//! Device tests: boot each topology (or attach to the labs `cargo lab test` runs) and use rxe.
//! They fail, never skip, when no lab can be had.

use harness::testing::{self, Role, in_lab, run_roles};
use harness::{Node, Topology};
use std::time::Duration;

/// A C `ibv_rc_pingpong` server that says when it listens (the tool itself prints nothing
/// before `accept`): readiness by a line, never a sleep.
fn pingpong_server(iters: u32) -> Role {
    let script = format!(
        "ibv_rc_pingpong -g 1 -n {iters} & pid=$!; \
         until ss -ltn | grep -q ':18515 '; do kill -0 $pid 2>/dev/null || break; sleep 0.05; done; \
         echo listening; wait $pid"
    );
    Role::new("server", ["sh", "-c", &script]).ready("listening")
}

#[test]
fn loopback_port_is_active() {
    let t = run_roles(
        Topology::Loopback,
        vec![Role::new("devinfo", ["ibv_devinfo", "-d", "rxe0"])],
    );
    t.assert_success();
    let out = &t.section("devinfo").stdout;
    assert!(out.contains("PORT_ACTIVE"), "{out}");
    assert!(out.contains("active_mtu:\t\t1024"), "{out}");
}

#[test]
fn loopback_gid_is_pinned() {
    let t = run_roles(
        Topology::Loopback,
        vec![Role::new(
            "gid",
            ["cat", "/sys/class/infiniband/rxe0/ports/1/gids/1"],
        )],
    );
    t.assert_success();
    assert_eq!(
        t.section("gid").stdout.trim(),
        "0000:0000:0000:0000:0000:ffff:0a63:0001"
    );
}

#[test]
fn loopback_rc_pingpong_between_two_processes() {
    let t = run_roles(
        Topology::Loopback,
        vec![
            pingpong_server(20),
            Role::new(
                "client",
                ["ibv_rc_pingpong", "-g", "1", "-n", "20", "127.0.0.1"],
            ),
        ],
    );
    t.assert_success();
    let r = t.redacted();
    assert!(
        r.contains("20 iters in [ELAPSED] seconds = [LAT] usec/iter"),
        "{r}"
    );
    // The client's remote QPN is the server's local QPN.
    let server = &t.section("server").stdout;
    let client = &t.section("client").stdout;
    let qpn = |s: &str, which: &str| {
        s.lines()
            .find(|l| l.contains(which))
            .and_then(|l| l.split("QPN ").nth(1))
            .map(|q| q[..8].to_string())
    };
    assert_eq!(
        qpn(server, "local address"),
        qpn(client, "remote address"),
        "{t}"
    );
}

#[test]
fn in_lab_runs_the_body_where_rxe_is() {
    in_lab(
        Topology::Loopback,
        "in_lab_runs_the_body_where_rxe_is",
        || {
            assert!(std::path::Path::new("/sys/class/infiniband/rxe0").exists());
            assert_eq!(std::env::var("LAB_GUEST").as_deref(), Ok("1"));
        },
    );
}

#[test]
fn a_role_past_its_deadline_is_killed_and_reported() {
    let lab = testing::lab(Topology::Loopback);
    let roles = vec![Role::new("sleeper", ["sleep", "600"])];
    let err = testing::run_roles_in(&lab, &roles, Duration::from_secs(2))
        .unwrap_err()
        .to_string();
    assert!(err.contains("still running after 2 s"), "{err}");
    assert!(err.contains("sleeper (exited"), "{err}");
}

#[test]
fn a_server_that_dies_before_ready_stops_the_run() {
    let t = run_roles(
        Topology::Loopback,
        vec![
            Role::new("server", ["sh", "-c", "echo oops >&2; exit 3"]).ready("listening"),
            Role::new("client", ["true"]),
        ],
    );
    assert_eq!(t.section("server").exit_code, 3);
    assert_eq!(t.section("client").exit_code, -1);
    assert!(t.section("client").stderr.contains("not started"), "{t}");
}

#[test]
fn pair_rc_pingpong_between_nodes() {
    let t = run_roles(
        Topology::Pair,
        vec![
            pingpong_server(10).on(Node::A),
            Role::new(
                "client",
                ["ibv_rc_pingpong", "-g", "1", "-n", "10", "10.77.0.1"],
            )
            .on(Node::B),
        ],
    );
    t.assert_success();
    assert!(
        t.section("server").stdout.contains("::ffff:10.77.0.1"),
        "{t}"
    );
    assert!(
        t.section("client").stdout.contains("::ffff:10.77.0.2"),
        "{t}"
    );
}

#[test]
fn a_program_rebuilt_on_the_host_runs_fresh_in_the_lab() {
    // The guest caches a file's pages behind the overlay; a rebuilt binary must not run with the
    // old binary's pages (it would crash). Under target/, which the lab sees.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fresh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prog = dir.join("prog");
    let p = prog.to_string_lossy().into_owned();
    let run = |arg: &str| {
        run_roles(
            Topology::Loopback,
            vec![Role::new("prog", [p.as_str(), arg])],
        )
    };
    std::fs::copy("/bin/true", &prog).unwrap();
    run("x").assert_success();
    // Replaced by a new file (new inode), as linkers do.
    std::fs::remove_file(&prog).unwrap();
    std::fs::copy("/bin/echo", &prog).unwrap();
    let t = run("fresh");
    t.assert_success();
    assert_eq!(t.section("prog").stdout, "fresh\n");
    // Rewritten in place (same inode).
    std::fs::copy("/bin/true", &prog).unwrap();
    let t = run("quiet");
    t.assert_success();
    assert_eq!(t.section("prog").stdout, "");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cli_up_exec_status_down_leaves_nothing_running() {
    // A daemon lab in a private state dir: the path `cargo lab up` and `cargo lab test` take.
    let home = std::env::temp_dir().join(format!("rxe-lab-clitest.{}", std::process::id()));
    let lab = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_cargo-lab"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("LAB_STATE_DIR", &home)
            .env("LAB_PROVIDER", "vm")
            .output()
            .unwrap()
    };
    let up = lab(&["up"]);
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    let ex = lab(&[
        "exec",
        "--",
        "sh",
        "-c",
        "cat /sys/class/infiniband/rxe0/ports/1/state; exit 5",
    ]);
    assert_eq!(ex.status.code(), Some(5), "exit status passes through");
    assert_eq!(String::from_utf8_lossy(&ex.stdout).trim(), "4: ACTIVE");
    let st = lab(&["status"]);
    assert!(String::from_utf8_lossy(&st.stdout).contains("loopback  up"));
    let info = std::fs::read_to_string(home.join("loopback/info")).unwrap();
    let pids: Vec<u32> = info
        .split("qemu pids [")
        .nth(1)
        .unwrap()
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .split(", ")
        .map(|p| {
            p.trim_matches(|c: char| !c.is_ascii_digit())
                .parse()
                .unwrap()
        })
        .collect();
    assert!(!pids.is_empty());
    let down = lab(&["down"]);
    assert!(down.status.success());
    for p in pids {
        assert!(
            !harness::vm::pid_alive(p),
            "qemu {p} still running after down"
        );
    }
    assert!(!home.exists(), "state dir left behind");
}
