//! Chapter 06's exercise checks, on the loopback lab's real rxe device (docs/exercises.md
//! describes the shape every chapter's `tests/exercises.rs` follows):
//!
//! - `pong` checks exercise 06-pong, the implementation `LAB_EXERCISE_IMPL` names (`starter`
//!   or `solution`): three round trips; each SEND to the learner's QP must complete with
//!   `IBV_WC_SUCCESS` (a receive was posted) and come back byte for byte.
//! - With `LAB_EXERCISE_IMPL` unset (the test suite) it runs the dev check instead: the starter
//!   fails naming the step still to write, planted wrong ones (no receive posted; the echo not
//!   sent) fail with what rxe gives, the reference solution passes.

use harness::Topology;
use harness::exercises::{Impl, assert_fails_with, fail, step};
use harness::testing::in_lab;
use lab::course::connected_pair;
use lab::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, QueuePair, RecvWr, SendWr, WcStatus,
};
use std::time::Duration;

#[path = "../exercises/solutions/pong.rs"]
mod solution;
#[path = "../exercises/pong.rs"]
mod starter;

type Prepare = fn(&QueuePair, &MemoryRegion) -> lab::Result<()>;
type Answer = fn(&QueuePair, &CompletionQueue, &MemoryRegion) -> lab::Result<()>;

fn chosen(imp: Impl) -> (Prepare, Answer) {
    match imp {
        Impl::Starter => (starter::prepare, starter::answer),
        Impl::Solution => (solution::prepare, solution::answer),
    }
}

const LEN: usize = 64;
const WAIT: Duration = Duration::from_secs(10);
/// How long the check waits for the echo (the planted mistake that sends none waits this).
const ECHO_WAIT: Duration = Duration::from_secs(3);

/// The check: three pings from the check's QP, each answered by the learner's.
fn check_pong((prepare, answer): (Prepare, Answer)) {
    let ctx = Context::open_default().expect("open the lab's rxe device");
    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let gid = ctx.roce_v2_ipv4_gid(1).expect("RoCE v2 GID").gid;
    let cq_ping = ctx.create_cq(16, None).expect("ibv_create_cq");
    let cq_pong = ctx.create_cq(16, None).expect("ibv_create_cq");
    let (ping, pong) = connected_pair(&pd, &cq_ping, &cq_pong, gid).expect("connect two QPs");
    let mut out = pd
        .reg_mr(LEN, AccessFlags::LOCAL_WRITE)
        .expect("ibv_reg_mr");
    let back = pd
        .reg_mr(LEN, AccessFlags::LOCAL_WRITE)
        .expect("ibv_reg_mr");
    let buf = pd
        .reg_mr(LEN, AccessFlags::LOCAL_WRITE)
        .expect("ibv_reg_mr");
    for round in 1..=3u8 {
        let msg = format!("ping {round}");
        let n = msg.len();
        out.as_mut_slice()[..n].copy_from_slice(msg.as_bytes());
        if let Err(e) = step("prepare", || prepare(&pong, &buf)) {
            fail("prepare failed", "one receive posted", &e.to_string());
        }
        let rsge = [back.sge(..)];
        ping.post_recv_one(RecvWr::new(10, &rsge))
            .expect("ibv_post_recv");
        let ssge = [out.sge(..n)];
        ping.post_send_one(SendWr::send(20, &ssge))
            .expect("ibv_post_send");
        let wc = cq_ping.wait_one(WAIT).expect("the SEND's completion");
        if wc.status != WcStatus::Success {
            let what = if wc.status == WcStatus::RnrRetryExcErr {
                format!(
                    "round {round}: the SEND found no receive posted: rxe answered with RNR \
                     NAKs until rnr_retry ran out ({})",
                    wc.status
                )
            } else {
                format!("round {round}: the SEND completed with {}", wc.status)
            };
            fail(&what, "IBV_WC_SUCCESS (0)", &wc.status.to_string());
        }
        if let Err(e) = step("answer", || answer(&pong, &cq_pong, &buf)) {
            fail(
                &format!("round {round}: answer failed"),
                "the message sent back",
                &e.to_string(),
            );
        }
        let wc = match cq_ping.wait_one(ECHO_WAIT) {
            Ok(wc) => wc,
            Err(e) => fail(
                &format!("round {round}: no message came back: answer did not SEND it"),
                &format!("a receive completion of {n} bytes"),
                &e.to_string(),
            ),
        };
        let mut got = vec![0u8; wc.byte_len as usize];
        back.read_into(0, &mut got).expect("read the region");
        if wc.status != WcStatus::Success || got != msg.as_bytes() {
            fail(
                &format!("round {round}: the message that came back is not the one sent"),
                &format!("{msg:?}, IBV_WC_SUCCESS (0)"),
                &format!("{:?}, {}", String::from_utf8_lossy(&got), wc.status),
            );
        }
    }
}

#[test]
fn pong() {
    in_lab(Topology::Loopback, "pong", || match Impl::from_env() {
        Some(imp) => check_pong(chosen(imp)),
        None => dev_check(),
    });
}

/// Every implementation: the starter fails naming its first step, planted mistakes fail with
/// their messages, the reference solution passes.
fn dev_check() {
    assert_fails_with("prepare: not written yet (step 1:", || {
        check_pong((starter::prepare, starter::answer))
    });
    assert_fails_with("answer: not written yet (step 2:", || {
        check_pong((solution::prepare, starter::answer))
    });
    assert_fails_with(
        "round 1: the SEND found no receive posted: rxe answered with RNR NAKs until rnr_retry \
         ran out (IBV_WC_RNR_RETRY_EXC_ERR (13))",
        || check_pong((|_, _| Ok(()), solution::answer)),
    );
    assert_fails_with(
        "round 1: no message came back: answer did not SEND it",
        || check_pong((solution::prepare, |_, cq, _| cq.wait_one(WAIT).map(|_| ()))),
    );
    check_pong((solution::prepare, solution::answer));
}
