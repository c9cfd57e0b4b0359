//! End-to-end tests of chapter 01 on a real rxe device (the loopback lab), through the harness:
//! the transcript is redacted by the harness's one table and compared with the snapshots in
//! `tests/snapshots/`.
//!
//! - `chapter`: the chapter as `cargo lab run 01` runs it (success), plus bad-flow cases that
//!   need the device (an unknown device name, a port that does not exist): each must fail
//!   with a clear message and a non-zero exit.
//! - `bad_command_line`: runs the binary on the host; no device needed.

use course::kernel::{KernelVersion, RxeChange};
use harness::Topology;
use harness::testing::{lab_kernel, run_chapter};
use harness::testing_cli::{prints_help, refuses_command_line};
use rstest::rstest;

const EXE: &str = env!("CARGO_BIN_EXE_ch01-devices");

#[rstest]
#[case::default(&[], 0)]
#[case::bad_flow_unknown_device(&["-d", "nosuchdev0"], 1)]
#[case::bad_flow_no_such_port(&["-i", "2"], 1)]
fn chapter(#[case] args: &[&str], #[case] exit: i32) {
    let t = run_chapter("ch01-devices", EXE, args);
    let name = match (args, exit) {
        ([], _) => "default",
        (["-d", ..], _) => "unknown_device",
        _ => "no_such_port",
    };
    // The port's max_msg_sz depends on the lab's kernel (course::kernel): kernels with the fix
    // have their own snapshot of the default run (`e2e__default@linux-6.14.snap`).
    let release = lab_kernel(Topology::Loopback);
    let kernel = KernelVersion::parse(&release).unwrap_or_else(|| panic!("kernel {release:?}"));
    let change = RxeChange::PortMaxMsgSz2GiB;
    let fixed = change.holds_on(kernel);
    if name == "default" && fixed {
        insta::with_settings!({ snapshot_suffix => format!("linux-{}", change.since()) }, {
            insta::assert_snapshot!(name, t.redacted());
        });
    } else {
        insta::assert_snapshot!(name, t.redacted());
    }
    let run = &t.sections[0];
    assert_eq!(run.exit_code, exit, "{t}");
    if exit == 0 {
        t.assert_success();
        // The facts the chapter teaches, asserted one by one (the snapshot has the rest).
        for fact in [
            "state: IBV_PORT_ACTIVE (active)",
            "link_layer: Ethernet",
            "max_mtu: 4096, active_mtu: 1024",
            "atomic_cap: IBV_ATOMIC_HCA (1)",
            "use sgid_index=1 gid=::ffff:10.99.0.1 (RoCE v2, IPv4 10.99.0.1)",
            "sgid_index=0 (fe80::5054:ff:fe00:1) toward gid=::ffff:10.99.0.1: ibv_modify_qp failed with",
            "EINVAL (22)",
            "ok, the QP is in IBV_QPS_RTR",
            "step 8: close the device (ibv_close_device)",
        ] {
            assert!(run.stdout.contains(fact), "missing {fact:?} in\n{t}");
        }
    } else {
        assert!(run.stderr.contains("ch01-devices: error:"), "{t}");
    }
}

#[rstest]
#[case::unknown_flag(&["--bogus"], "unexpected argument '--bogus'")]
#[case::missing_value(&["-d"], "a value is required for '--device <DEVICE>'")]
#[case::port_zero(&["-i", "0"], "invalid value '0' for '--ib-port <PORT>'")]
#[case::port_not_a_number(&["--ib-port", "one"], "invalid value 'one' for '--ib-port <PORT>'")]
fn bad_command_line(#[case] args: &[&str], #[case] message: &str) {
    let stderr = refuses_command_line(EXE, args, message);
    // clap names the flag and points at --help.
    assert!(stderr.contains("try '--help'"), "{stderr}");
}

#[test]
fn help_prints_usage() {
    assert!(prints_help(EXE, "--help").contains("Usage: ch01-devices"));
}
