//! Chapter 02's exercise checks, on the loopback lab's real rxe device (the shape:
//! docs/exercises.md):
//!
//! - `same_pd` checks exercise 02-same-pd (`LAB_EXERCISE_IMPL`: `starter` or `solution`): a
//!   SEND from the region `build` registered, through the QP it created, must complete with
//!   `IBV_WC_SUCCESS (0)` and reach the peer.
//! - With `LAB_EXERCISE_IMPL` unset (the test suite), the dev check: the starter fails naming
//!   step 1, a planted region in a second PD fails with the status rxe gives, the reference
//!   solution passes.

use harness::Topology;
use harness::exercises::{Impl, assert_fails_with, fail, step};
use harness::testing::in_lab;
use lab::{
    AccessFlags, CompletionQueue, Context, InitAttr, MemoryRegion, ProtectionDomain, QpInitAttr,
    QueuePair, RecvWr, RtrAttr, RtsAttr, SendWr, state,
};
use std::time::Duration;

#[path = "../exercises/solutions/same_pd.rs"]
mod solution;
#[path = "../exercises/same_pd.rs"]
mod starter;

/// What the exercise's `build` returns (field order is drop order: children first).
#[derive(Debug)]
pub struct Objects {
    pub qp: QueuePair<state::Reset>,
    pub mr: MemoryRegion,
    pub cq: CompletionQueue,
    pub pd: ProtectionDomain,
}

type Build = fn(&Context) -> lab::Result<Objects>;

fn chosen(imp: Impl) -> Build {
    match imp {
        Impl::Starter => starter::build,
        Impl::Solution => solution::build,
    }
}

const T: Duration = Duration::from_secs(10);

/// The check: the objects `build` made, connected to a peer, SEND "hello".
fn check_same_pd(build: Build) {
    let ctx = Context::open_default().expect("open the lab's rxe device");
    let o = match step("build", || build(&ctx)) {
        Ok(o) => o,
        Err(e) => fail(
            &format!("build failed: {e}"),
            "the objects",
            &e.report().to_string(),
        ),
    };
    let gid = ctx.roce_v2_ipv4_gid(1).expect("RoCE v2 GID").gid;
    let peer_pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let peer_cq = ctx.create_cq(16, None).expect("ibv_create_cq");
    let peer = peer_pd
        .create_qp(&QpInitAttr::rc(&peer_cq, &peer_cq))
        .expect("create QP");
    let (qa, qb) = (o.qp.qp_num(), peer.qp_num());
    let up = |q: QueuePair<state::Reset>, to: u32| {
        q.bring_up(
            &InitAttr::default(),
            &RtrAttr::new(to, 0x20, gid),
            &RtsAttr::new(0x20),
        )
    };
    let Objects {
        qp,
        mut mr,
        cq,
        pd: _pd,
    } = o;
    let qp = up(qp, qb)
        .unwrap_or_else(|e| fail("your QP did not come up", "RTS", &e.report().to_string()));
    let peer = up(peer, qa).expect("bring the peer up");
    let inbox = peer_pd
        .reg_mr(64, AccessFlags::LOCAL_WRITE)
        .expect("ibv_reg_mr");
    peer.post_recv_one(RecvWr::new(9, &[inbox.sge(0..64)]))
        .expect("ibv_post_recv");
    mr.as_mut_slice()[..5].copy_from_slice(b"hello");
    let sge = [mr.sge(0..5)];
    qp.post_send_one(SendWr::send(1, &sge))
        .expect("ibv_post_send");
    let wc = cq.wait_one(T).expect("the SEND's completion");
    if !wc.is_success() {
        fail(
            &format!(
                "the SEND from your region completed with {}: what rxe gives for an lkey of \
                 another PD than the QP's (chapter 02, step 6)",
                wc.status
            ),
            "IBV_WC_SUCCESS (0)",
            &wc.status.to_string(),
        );
    }
    let got = peer_cq.wait_one(T).expect("the peer's RECV");
    let mut bytes = [0u8; 5];
    inbox.read_into(0, &mut bytes).expect("read");
    if !got.is_success() || &bytes != b"hello" {
        fail(
            "the peer did not receive \"hello\"",
            "hello",
            &format!("{} {bytes:?}", got.status),
        );
    }
}

#[test]
fn same_pd() {
    in_lab(Topology::Loopback, "same_pd", || match Impl::from_env() {
        Some(imp) => check_same_pd(chosen(imp)),
        None => dev_check(),
    });
}

/// Every implementation: the starter fails naming step 1, a region registered in a second PD
/// fails with rxe's status, the reference solution passes.
fn dev_check() {
    assert_fails_with("build: not written yet (step 1:", || {
        check_same_pd(starter::build)
    });
    assert_fails_with("the SEND from your region completed with IBV_WC_", || {
        check_same_pd(|ctx| {
            let o = solution::build(ctx)?;
            let other = ctx.alloc_pd()?;
            let mr = other.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
            Ok(Objects { mr, ..o })
        })
    });
    check_same_pd(solution::build);
}
