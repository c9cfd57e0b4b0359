//! Chapter 01's exercise checks, on the loopback lab's real rxe device (the shape:
//! docs/exercises.md):
//!
//! - `roce_gid` checks exercise 01-roce-gid (`LAB_EXERCISE_IMPL`: `starter` or `solution`):
//!   the entry it picks from port 1's real GID table must be RoCE v2 and IPv4-mapped, and two
//!   QPs brought up through it must move an RDMA WRITE.
//! - With `LAB_EXERCISE_IMPL` unset (the test suite), the dev check: the starter fails naming
//!   step 1, a planted "index 0" pick fails naming the link-local entry, the solution passes.

use harness::Topology;
use harness::exercises::{Impl, assert_fails_with, fail, step};
use harness::testing::in_lab;
use lab::{
    AccessFlags, Context, GidEntry, GidType, InitAttr, QpInitAttr, RtrAttr, RtsAttr, SendWr,
};
use std::time::Duration;

#[path = "../exercises/solutions/roce_gid.rs"]
mod solution;
#[path = "../exercises/roce_gid.rs"]
mod starter;

type Pick = fn(&[GidEntry]) -> Option<GidEntry>;

fn chosen(imp: Impl) -> Pick {
    match imp {
        Impl::Starter => starter::pick_gid,
        Impl::Solution => solution::pick_gid,
    }
}

fn listing(table: &[GidEntry]) -> String {
    table
        .iter()
        .map(|e| format!("GID[{}] {} {}", e.index, e.gid.to_ipv6(), e.gid_type))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The check: the pick from the real table, then a QP pair through it and a WRITE.
fn check_roce_gid(pick: Pick) {
    let ctx = Context::open_default().expect("open the lab's rxe device");
    let table = ctx.gid_table(1).expect("port 1's GID table");
    let want = "the RoCE v2 entry with an IPv4-mapped GID (::ffff:a.b.c.d)";
    let Some(e) = step("pick_gid", || pick(&table)) else {
        fail(
            "pick_gid found no entry in port 1's table",
            want,
            &listing(&table),
        )
    };
    let which = format!("GID[{}] {} ({})", e.index, e.gid.to_ipv6(), e.gid_type);
    if e.gid_type != GidType::RoceV2 {
        fail(
            &format!("{which} is not a RoCE v2 entry"),
            want,
            &listing(&table),
        );
    }
    if e.gid.to_ipv4().is_none() {
        fail(
            &format!("{which} is not an IPv4-mapped address: RoCE v2 over IPv4 needs one"),
            want,
            &listing(&table),
        );
    }
    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let cq = ctx.create_cq(16, None).expect("ibv_create_cq");
    let a = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).expect("create QP");
    let b = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).expect("create QP");
    let (qa, qb) = (a.qp_num(), b.qp_num());
    let up = |q: lab::QueuePair<lab::state::Reset>, peer: u32| {
        let rtr = RtrAttr::new(peer, 0x10, e.gid).sgid(&e);
        q.bring_up(&InitAttr::default(), &rtr, &RtsAttr::new(0x10))
    };
    let (a, _b) = match (up(a, qb), up(b, qa)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(x), _) | (_, Err(x)) => fail(
            &format!("RTR through {which} was refused: {x}"),
            "both QPs in RTS",
            &x.report().to_string(),
        ),
    };
    let mut mr = pd.reg_mr(64, AccessFlags::ALL_REMOTE).expect("ibv_reg_mr");
    mr.as_mut_slice()[..4].copy_from_slice(b"gid!");
    let r = mr.remote();
    let sge = [mr.sge(0..4)];
    a.post_send_one(SendWr::write(1, &sge, r.addr + 32, r.rkey))
        .expect("ibv_post_send");
    let wc = cq
        .wait_one(Duration::from_secs(10))
        .expect("the WRITE's completion");
    if !wc.is_success() {
        fail(
            &format!("a WRITE through {which} completed with {}", wc.status),
            "IBV_WC_SUCCESS (0)",
            &wc.status.to_string(),
        );
    }
}

#[test]
fn roce_gid() {
    in_lab(Topology::Loopback, "roce_gid", || match Impl::from_env() {
        Some(imp) => check_roce_gid(chosen(imp)),
        None => dev_check(),
    });
}

/// Every implementation: the starter fails naming step 1, the planted "index 0" pick fails
/// naming the entry it took, the reference solution passes.
fn dev_check() {
    assert_fails_with("pick_gid: not written yet (step 1:", || {
        check_roce_gid(starter::pick_gid)
    });
    assert_fails_with("GID[0] fe80::", || check_roce_gid(|t| t.first().copied()));
    check_roce_gid(solution::pick_gid);
}
