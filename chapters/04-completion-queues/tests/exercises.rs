//! Chapter 04's exercise checks, on the loopback lab's real rxe device (docs/exercises.md
//! describes the shape every chapter's `tests/exercises.rs` follows):
//!
//! - `next_completion` checks exercise 04-next-completion, the implementation
//!   `LAB_EXERCISE_IMPL` names (`starter` or `solution`): with a WRITE's completion already in
//!   the CQ, and with one that lands 200 ms after the call, it must return that completion;
//!   the second call must take and acknowledge one completion event.
//! - With `LAB_EXERCISE_IMPL` unset (the test suite) it runs the dev check instead: the starter
//!   fails naming the step still to write, planted wrong ones (sleeping without draining;
//!   busy polling) fail with what rxe gives, the reference solution passes.

use course::connected_pair;
use harness::Topology;
use harness::exercises::{Impl, assert_fails_with, fail, step};
use harness::testing::in_lab;
use lab::{AccessFlags, CompletionQueue, Context, SendWr, WcStatus, WorkCompletion};
use std::time::Duration;

#[path = "../exercises/solutions/next_completion.rs"]
mod solution;
#[path = "../exercises/next_completion.rs"]
mod starter;

type Next = fn(&CompletionQueue, Duration) -> lab::Result<WorkCompletion>;

fn chosen(imp: Impl) -> Next {
    match imp {
        Impl::Starter => starter::next_completion,
        Impl::Solution => solution::next_completion,
    }
}

/// The deadline the check hands to `next_completion`.
const TIMEOUT: Duration = Duration::from_secs(3);
/// How long the check lets a WRITE complete before calling, and waits before posting.
const SETTLE: Duration = Duration::from_millis(200);

/// The check: two WRITEs, one completed before the call, one posted during it.
fn check_next_completion(next: Next) {
    let ctx = Context::open_default().expect("open the lab's rxe device");
    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let ch = ctx.create_comp_channel().expect("ibv_create_comp_channel");
    let cq = ctx.create_cq(16, Some(&ch)).expect("ibv_create_cq");
    let cq_b = ctx.create_cq(16, None).expect("ibv_create_cq");
    let gid = ctx.roce_v2_ipv4_gid(1).expect("RoCE v2 GID").gid;
    let (a, _b) = connected_pair(&pd, &cq, &cq_b, gid).expect("connect two QPs");
    let src = pd.reg_mr(64, AccessFlags::LOCAL_WRITE).expect("ibv_reg_mr");
    let dst = pd
        .reg_mr(64, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        .expect("ibv_reg_mr");
    let r = dst.remote();
    let sge = [src.sge(0..64)];

    // 1: the completion is in the CQ before the call: it raises no event of its own.
    a.post_send_one(SendWr::write(1, &sge, r.addr, r.rkey))
        .expect("ibv_post_send");
    std::thread::sleep(SETTLE);
    let wc = match step("next_completion", || next(&cq, TIMEOUT)) {
        Ok(wc) => wc,
        Err(e) => fail(
            "the completion was already in the CQ, and next_completion did not find it: arming \
             covers only the next completion, so drain after arming",
            "the WRITE's completion (wr_id 1)",
            &e.report().to_string(),
        ),
    };
    expect_write(&wc, 1);

    // 2: the CQ is empty; the WRITE is posted 200 ms into the call.
    let before = cq.comp_events_completed();
    let got = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(SETTLE);
            a.post_send_one(SendWr::write(2, &sge, r.addr, r.rkey))
                .expect("ibv_post_send");
        });
        next(&cq, TIMEOUT)
    });
    let wc = match got {
        Ok(wc) => wc,
        Err(e) => fail(
            "with an empty CQ, next_completion returned no completion: it should sleep for the \
             event, then poll",
            "the WRITE's completion (wr_id 2)",
            &e.report().to_string(),
        ),
    };
    expect_write(&wc, 2);
    let events = cq.comp_events_completed().wrapping_sub(before);
    if cq.unacked_events() > 0 {
        fail(
            "next_completion took a completion event and did not acknowledge it",
            "0 unacknowledged events (ibv_ack_cq_events)",
            &format!("{} unacknowledged", cq.unacked_events()),
        );
    }
    if events != 1 {
        fail(
            "with an empty CQ, next_completion did not sleep on the channel: it should arm, \
             take the event and acknowledge it (busy polling holds a core)",
            "1 completion event acknowledged",
            &format!("{events} events acknowledged"),
        );
    }
}

fn expect_write(wc: &WorkCompletion, wr_id: u64) {
    if wc.wr_id != wr_id || wc.status != WcStatus::Success {
        fail(
            "next_completion returned another completion than the WRITE's",
            &format!("wr_id {wr_id}, IBV_WC_SUCCESS (0)"),
            &format!("wr_id {}, {}", wc.wr_id, wc.status),
        );
    }
}

#[test]
fn next_completion() {
    in_lab(
        Topology::Loopback,
        "next_completion",
        || match Impl::from_env() {
            Some(imp) => check_next_completion(chosen(imp)),
            None => dev_check(),
        },
    );
}

/// Every implementation: the starter fails naming its first step, planted mistakes fail with
/// their messages, the reference solution passes.
fn dev_check() {
    assert_fails_with("next_completion: not written yet (step 1:", || {
        check_next_completion(starter::next_completion)
    });
    assert_fails_with(
        "the completion was already in the CQ, and next_completion did not find it",
        || {
            check_next_completion(|cq, t| {
                cq.req_notify(false)?;
                cq.get_event(t)?.ack();
                Ok(cq.poll_one()?.unwrap_or_default())
            })
        },
    );
    assert_fails_with(
        "with an empty CQ, next_completion did not sleep on the channel",
        || check_next_completion(|cq, t| cq.wait_one(t)),
    );
    check_next_completion(solution::next_completion);
}
