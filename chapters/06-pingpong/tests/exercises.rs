//! Chapter 06's exercise checks, on the loopback lab's real rxe device (docs/exercises.md
//! describes the shape every chapter's `tests/exercises.rs` follows):
//!
//! - `pong` checks exercise 06-pong, the implementation `LAB_EXERCISE_IMPL` names (`starter`
//!   or `solution`): three round trips; each SEND to the learner's QP must complete with
//!   `IBV_WC_SUCCESS` (a receive was posted) and come back byte for byte.
//! - With `LAB_EXERCISE_IMPL` unset (the test suite) it runs the dev check instead: the starter
//!   fails naming the step still to write, planted wrong ones (no receive posted; the echo not
//!   sent) fail with what rxe gives, the reference solution passes.
//! - `send_imm` checks exercise 06-send-imm: a SEND_WITH_IMM from the learner's code must reach
//!   the check's receive with `IBV_WC_WITH_IMM` and the tag; the learner's receiver must give
//!   the tag of a tagged SEND and none for a plain one. Its dev check plants a plain SEND, a
//!   tag converted to network order twice, and a receiver that trusts `imm_data` without the
//!   flag.

use course::connected_pair;
use harness::Topology;
use harness::exercises::{Impl, assert_fails_with, fail, step};
use harness::testing::in_lab;
use lab::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, QueuePair, RecvWr, SendWr, WcFlags,
    WcOpcode, WcStatus,
};
use std::time::Duration;

#[path = "../exercises/solutions/send_imm.rs"]
mod send_imm_solution;
#[path = "../exercises/send_imm.rs"]
mod send_imm_starter;
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
            fail(
                "prepare failed",
                "one receive posted",
                &e.report().to_string(),
            );
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
                &e.report().to_string(),
            );
        }
        let wc = match cq_ping.wait_one(ECHO_WAIT) {
            Ok(wc) => wc,
            Err(e) => fail(
                &format!("round {round}: no message came back: answer did not SEND it"),
                &format!("a receive completion of {n} bytes"),
                &e.report().to_string(),
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

type SendTagged = fn(&QueuePair, &CompletionQueue, &MemoryRegion, usize, u32) -> lab::Result<()>;
type ReceiveTagged = fn(&CompletionQueue) -> lab::Result<(Option<u32>, u32)>;

fn chosen_imm(imp: Impl) -> (SendTagged, ReceiveTagged) {
    match imp {
        Impl::Starter => (
            send_imm_starter::send_tagged,
            send_imm_starter::receive_tagged,
        ),
        Impl::Solution => (
            send_imm_solution::send_tagged,
            send_imm_solution::receive_tagged,
        ),
    }
}

/// The tag the learner's SEND carries (round 1), and the check's (round 2).
const TAG_OUT: u32 = 0xc0ff_ee06;
const TAG_IN: u32 = 7;

/// The check: round 1, the learner's SEND_WITH_IMM into the check's receive; rounds 2 and 3,
/// the check's tagged and plain SENDs read by the learner's receiver. The check posts every
/// receive, on QP `b`; `a` sends.
fn check_send_imm((send_tagged, receive_tagged): (SendTagged, ReceiveTagged)) {
    let ctx = Context::open_default().expect("open the lab's rxe device");
    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let gid = ctx.roce_v2_ipv4_gid(1).expect("RoCE v2 GID").gid;
    let cq_a = ctx.create_cq(16, None).expect("ibv_create_cq");
    let cq_b = ctx.create_cq(16, None).expect("ibv_create_cq");
    let (a, b) = connected_pair(&pd, &cq_a, &cq_b, gid).expect("connect two QPs");
    let mut out = pd
        .reg_mr(LEN, AccessFlags::LOCAL_WRITE)
        .expect("ibv_reg_mr");
    let inb = pd
        .reg_mr(LEN, AccessFlags::LOCAL_WRITE)
        .expect("ibv_reg_mr");
    let rsge = [inb.sge(..)];

    let msg = b"tagged by you";
    let n = msg.len();
    out.as_mut_slice()[..n].copy_from_slice(msg);
    b.post_recv_one(RecvWr::new(10, &rsge))
        .expect("ibv_post_recv");
    if let Err(e) = step("send_tagged", || send_tagged(&a, &cq_a, &out, n, TAG_OUT)) {
        fail(
            "round 1: send_tagged failed",
            "the SEND completed with IBV_WC_SUCCESS (0)",
            &e.report().to_string(),
        );
    }
    let wc = match cq_b.wait_one(WAIT) {
        Ok(wc) => wc,
        Err(e) => fail(
            "round 1: no message arrived: send_tagged posted no SEND",
            &format!("a receive completion of {n} bytes"),
            &e.report().to_string(),
        ),
    };
    let expected = format!(
        "{}, flags IBV_WC_GRH | IBV_WC_WITH_IMM, imm 0x{TAG_OUT:08x}, {n} bytes",
        WcOpcode::Recv
    );
    let actual = format!(
        "{}, {}, flags {}, imm 0x{:08x}, {} bytes",
        wc.opcode, wc.status, wc.flags, wc.imm_data, wc.byte_len
    );
    if !wc.is_success() {
        fail(
            &format!("round 1: the receive completed with {}", wc.status),
            &expected,
            &actual,
        );
    }
    if !wc.flags.contains(WcFlags::WITH_IMM) {
        fail(
            "round 1: the message arrived without an immediate: IBV_WC_WITH_IMM is not in the \
             receive's flags (an IBV_WR_SEND, not IBV_WR_SEND_WITH_IMM)",
            &expected,
            &actual,
        );
    }
    if wc.imm_data != TAG_OUT {
        let what = if wc.imm_data == TAG_OUT.swap_bytes() {
            format!(
                "round 1: the immediate arrived as 0x{:08x}, not 0x{TAG_OUT:08x}: its bytes are \
                 swapped (converted to network order twice: send_with_imm takes host order)",
                wc.imm_data
            )
        } else {
            format!(
                "round 1: the immediate arrived as 0x{:08x}, not the tag 0x{TAG_OUT:08x}",
                wc.imm_data
            )
        };
        fail(&what, &expected, &actual);
    }
    let mut got = vec![0u8; wc.byte_len as usize];
    inb.read_into(0, &mut got).expect("read the region");
    if got != msg {
        fail(
            "round 1: the bytes that arrived are not the first len bytes of buf",
            &format!("{:?}", String::from_utf8_lossy(msg)),
            &format!("{:?}", String::from_utf8_lossy(&got)),
        );
    }

    receive_rounds(&a, &b, &cq_a, &cq_b, &mut out, &inb, receive_tagged);
}

/// Rounds 2 and 3 of the check: the check's tagged, then plain SEND from `a`, each read by the
/// learner's receiver from `cq_b`.
fn receive_rounds(
    a: &QueuePair,
    b: &QueuePair,
    cq_a: &CompletionQueue,
    cq_b: &CompletionQueue,
    out: &mut MemoryRegion,
    inb: &MemoryRegion,
    receive_tagged: ReceiveTagged,
) {
    let rsge = [inb.sge(..)];
    for (round, tag, text) in [
        (2, Some(TAG_IN), &b"tagged by the check"[..]),
        (3, None, &b"plain"[..]),
    ] {
        let n = text.len();
        out.as_mut_slice()[..n].copy_from_slice(text);
        b.post_recv_one(RecvWr::new(10 + round, &rsge))
            .expect("ibv_post_recv");
        let ssge = [out.sge(..n)];
        let wr = match tag {
            Some(t) => SendWr::send_with_imm(20 + round, &ssge, t),
            None => SendWr::send(20 + round, &ssge),
        };
        a.post_send_one(wr).expect("ibv_post_send");
        cq_a.wait_one(WAIT)
            .and_then(|wc| wc.ok())
            .expect("the check's SEND completes");
        let got = match step("receive_tagged", || receive_tagged(cq_b)) {
            Ok(got) => got,
            Err(e) => fail(
                &format!("round {round}: receive_tagged failed"),
                &format!("the receive completion of {n} bytes"),
                &e.report().to_string(),
            ),
        };
        if got == (tag, n as u32) {
            continue;
        }
        let what = match (tag, got.0) {
            (None, Some(v)) => format!(
                "round {round}: a plain SEND was read as tag 0x{v:08x}: its completion has no \
                 IBV_WC_WITH_IMM, and without it imm_data is no tag"
            ),
            (Some(t), None) => format!(
                "round {round}: the tag 0x{t:08x} was lost: the completion has IBV_WC_WITH_IMM"
            ),
            _ => format!("round {round}: receive_tagged returned {got:?}"),
        };
        fail(
            &what,
            &format!("{:?}", (tag, n as u32)),
            &format!("{got:?}"),
        );
    }
}

#[test]
fn send_imm() {
    in_lab(Topology::Loopback, "send_imm", || match Impl::from_env() {
        Some(imp) => check_send_imm(chosen_imm(imp)),
        None => dev_check_send_imm(),
    });
}

/// Every implementation of 06-send-imm: the starter fails naming its first step, planted
/// mistakes fail with what rxe delivered, the reference solution passes.
fn dev_check_send_imm() {
    use send_imm_solution as sol;
    use send_imm_starter as st;
    assert_fails_with("send_tagged: not written yet (step 1:", || {
        check_send_imm((st::send_tagged, st::receive_tagged))
    });
    assert_fails_with("receive_tagged: not written yet (step 3:", || {
        check_send_imm((sol::send_tagged, st::receive_tagged))
    });
    assert_fails_with(
        "round 1: the message arrived without an immediate: IBV_WC_WITH_IMM is not in the \
         receive's flags (an IBV_WR_SEND, not IBV_WR_SEND_WITH_IMM)",
        || {
            check_send_imm((
                |qp, cq, buf, len, _| {
                    let sge = [buf.sge(..len)];
                    qp.post_send_one(SendWr::send(2, &sge))?;
                    cq.wait_one(WAIT)?.ok().map(|_| ())
                },
                sol::receive_tagged,
            ))
        },
    );
    assert_fails_with(
        "round 1: the immediate arrived as 0x06eeffc0, not 0xc0ffee06: its bytes are swapped",
        || {
            check_send_imm((
                |qp, cq, buf, len, tag| sol::send_tagged(qp, cq, buf, len, tag.to_be()),
                sol::receive_tagged,
            ))
        },
    );
    assert_fails_with("round 3: a plain SEND was read as tag 0x", || {
        check_send_imm((sol::send_tagged, |cq| {
            let wc = cq.wait_one(WAIT)?.ok()?;
            Ok((Some(wc.imm_data), wc.byte_len))
        }))
    });
    check_send_imm((sol::send_tagged, sol::receive_tagged));
}
