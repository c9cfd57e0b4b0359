//! Chapter 07's exercise checks, on the microVM pair with the wire recorded (the shape:
//! docs/exercises.md):
//!
//! - `write_4k` checks exercise 07-write-4k (`LAB_EXERCISE_IMPL`: `starter` or `solution`).
//!   On the host it re-runs itself as two roles, `LAB_EXERCISE_ROLE=server` on node a and
//!   `client` on node b (the exercise's code runs in the client), records the wire and asserts
//!   on it with `harness::wire::expect`: exactly RDMA_WRITE_FIRST, 2 x MIDDLE, LAST and one
//!   ACKNOWLEDGE.
//! - With `LAB_EXERCISE_IMPL` unset (the test suite), the dev check: the starter fails naming
//!   step 1, a planted path MTU of 256 fails naming the size of its packets on the wire, the
//!   reference solution passes.

use course::exchange::Endpoint;
use harness::exercises::{
    Impl, Part, assert_fails_with, fail, fail_on_role_exit, pair_roles, panic_message, server_addr,
    step,
};
use harness::testing::{run_roles_traced, wire_lab};
use harness::wire::expect::Trace;
use lab::{AccessFlags, Context, InitAttr, MemoryRegion, Mtu, QpInitAttr, RtrAttr, RtsAttr};
use std::time::Duration;

#[path = "../exercises/solutions/write_4k.rs"]
mod solution;
#[path = "../exercises/write_4k.rs"]
mod starter;

const TEST: &str = "write_4k";
const PORT: u16 = 18577;
const LEN: usize = 4096;
const T: Duration = Duration::from_secs(30);
const READY: &str = "exercise server: listening";
const WANT: [&str; 5] = [
    "RDMA_WRITE_FIRST",
    "RDMA_WRITE_MIDDLE",
    "RDMA_WRITE_MIDDLE",
    "RDMA_WRITE_LAST",
    "ACKNOWLEDGE",
];

/// Which code the client role runs: an implementation, or (dev check) a planted mistake.
fn rtr_of(which: &str) -> fn(&Endpoint) -> RtrAttr {
    match which {
        "starter" => starter::rtr_attr,
        "solution" => solution::rtr_attr,
        "planted-mtu256" => |e| solution::rtr_attr(e).path_mtu(Mtu::Mtu256),
        w => panic!("unknown implementation {w:?}"),
    }
}

/// Node a: expose 4 KiB to the client's WRITE, wait for "done", check the bytes.
fn server() {
    // The client says "done" or closes the stream (its code failed): either way we stop.
    let got = course::serve_write_target(PORT, LEN, READY, T, T).expect("the WRITE target");
    if let Some(bytes) = got {
        assert!(
            bytes.iter().enumerate().all(|(i, &b)| b == pattern(i)),
            "the 4096 bytes did not land intact in the server's region"
        );
    }
}

fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

/// Node b: the exercise's code: RTR with its attributes, then its WRITE.
fn client(which: &str) {
    let ctx = Context::open_default().expect("open the rxe device");
    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let cq = ctx.create_cq(16, None).expect("ibv_create_cq");
    let mut src = pd.reg_mr(LEN, AccessFlags::LOCAL_WRITE).expect("reg_mr");
    for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
        *b = pattern(i);
    }
    let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).expect("create QP");
    let (mut oob, theirs) =
        course::exchange_as_client(&ctx, &qp, "ex07", 0x00bbbb, &server_addr(), PORT, T)
            .expect("exchange with the server");
    let rtr = step("rtr_attr", || rtr_of(which)(&theirs));
    let qp = qp
        .bring_up(&InitAttr::default(), &rtr, &RtsAttr::new(0x00bbbb))
        .expect("RTR/RTS");
    let write: fn(
        &lab::QueuePair,
        &lab::CompletionQueue,
        &MemoryRegion,
        &course::exchange::RemoteRegion,
    ) -> lab::Result<()> = if which == "starter" {
        starter::write_all
    } else {
        solution::write_all
    };
    if let Err(e) = step("write_all", || write(&qp, &cq, &src, &theirs.regions[0])) {
        fail(
            &format!("the WRITE failed: {e}"),
            "IBV_WC_SUCCESS (0)",
            &e.report().to_string(),
        );
    }
    oob.send_line("done", T).expect("tell the server");
}

/// The check, on the host: both roles on the pair, the wire recorded, then the trace.
fn check_write_4k(which: &str) {
    let roles = pair_roles(TEST, READY, which, wire_lab().server_addr());
    let t = run_roles_traced(roles);
    let trace = Trace::new(t.packets.clone()).rc();
    // The wire first: a WRITE cut into packets smaller than 1024 bytes is the mistake to name,
    // even when it also made the WRITE fail (rxe's responder, at its own path MTU of 1024,
    // refuses a shorter FIRST or MIDDLE packet as an invalid request: rxe_resp.c, check_rkey).
    let first = trace.packets.iter().find(|p| p.opcode == 0x06);
    if let Some(p) = first.filter(|p| p.payload_len < 1024) {
        let role = t.transcript.sections.iter().find(|s| s.exit_code != 0);
        let then = role
            .and_then(|s| panic_message(&format!("{}{}", s.stdout, s.stderr)))
            .map(|m| format!("\nand then: {}", m.lines().next().unwrap_or("")))
            .unwrap_or_default();
        panic!(
            "the WRITE went out in packets of {} bytes: its path MTU is too small (at 1024, \
             4096 bytes are 4 packets){then}\n{}",
            p.payload_len,
            trace.side_by_side(&WANT)
        );
    }
    fail_on_role_exit(&t.transcript);
    if let Some(diff) = trace.check_opcodes(&WANT) {
        panic!("the 4 KiB WRITE is not FIRST, 2 x MIDDLE, LAST and one ACK on the wire\n{diff}");
    }
}

#[test]
fn write_4k() {
    match Part::from_env() {
        Part::Server => server(),
        Part::Client(which) => client(&which),
        Part::Check => match Impl::from_env() {
            Some(imp) => check_write_4k(imp.name()),
            None => dev_check(),
        },
    }
}

/// Every implementation: the starter fails naming step 1, a planted path MTU of 256 fails
/// naming the size of its packets on the wire, the reference solution passes.
fn dev_check() {
    assert_fails_with("rtr_attr: not written yet (step 1:", || {
        check_write_4k("starter")
    });
    assert_fails_with(
        "the WRITE went out in packets of 256 bytes: its path MTU is too small",
        || check_write_4k("planted-mtu256"),
    );
    check_write_4k("solution");
}
