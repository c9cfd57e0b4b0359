//! Chapter 05's exercise checks, on the loopback lab's real rxe device (the shape:
//! docs/exercises.md):
//!
//! - `bring_up` checks exercise 05-bring-up (`LAB_EXERCISE_IMPL`: `starter` or `solution`):
//!   each `ibv_modify_qp` must be a legal transition with the minimum mask, and the QP must end
//!   in RTS. A refused call fails with its errno and the attributes its mask lacks.
//! - With `LAB_EXERCISE_IMPL` unset (the test suite), the dev check: the starter fails naming
//!   step 1, a QP moved to RTS without RTR and a mask without the access flags fail with
//!   rxe's errno, the reference solution passes.

use harness::Topology;
use harness::exercises::{Impl, assert_fails_with, fail, step};
use harness::testing::in_lab;
use lab::{
    Context, Gid, InitAttr, Mtu, QpAttr, QpAttrMask, QpInitAttr, QpState, RtrAttr, RtsAttr,
    transition,
};

#[path = "../exercises/solutions/bring_up.rs"]
mod solution;
#[path = "../exercises/bring_up.rs"]
mod starter;

/// What the peer told you, and your own first PSN: handed to the exercise's `bring_up`.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    pub peer_qpn: u32,
    pub peer_psn: u32,
    pub gid: Gid,
    pub sgid_index: u8,
    pub mtu: Mtu,
    pub my_psn: u32,
}

type BringUp = fn(&Link) -> Vec<QpAttr>;

fn chosen(imp: Impl) -> BringUp {
    match imp {
        Impl::Starter => starter::bring_up,
        Impl::Solution => solution::bring_up,
    }
}

const PSN_A: u32 = 0x00a0a0;
const PSN_B: u32 = 0x00b0b0;

/// The check: a fresh QP walked through the attributes `bring_up` returns.
fn check_bring_up(bring_up: BringUp) {
    let ctx = Context::open_default().expect("open the lab's rxe device");
    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let cq = ctx.create_cq(16, None).expect("ibv_create_cq");
    let gid = ctx.roce_v2_ipv4_gid(1).expect("RoCE v2 GID");
    let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).expect("create QP");
    let peer = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).expect("create QP");
    let rtr = RtrAttr::new(qp.qp_num(), PSN_A, gid.gid);
    let peer = peer
        .bring_up(&InitAttr::default(), &rtr, &RtsAttr::new(PSN_B))
        .expect("bring the peer up");
    let link = Link {
        peer_qpn: peer.qp_num(),
        peer_psn: PSN_B,
        gid: gid.gid,
        sgid_index: gid.index as u8,
        mtu: ctx.query_port(1).expect("query port").active_mtu,
        my_psn: PSN_A,
    };
    let attrs = step("bring_up", || bring_up(&link));
    let mut from = QpState::Reset;
    for (i, attr) in attrs.iter().enumerate() {
        let n = i + 1;
        let mask = attr.mask();
        let Some(to) = attr.target_state() else {
            fail(
                &format!("call {n} has no IBV_QP_STATE in its mask: it moves the QP nowhere"),
                "IBV_QP_STATE | ...",
                &mask.to_string(),
            )
        };
        let refused = qp.modify(attr).err();
        let errno = |e: &Option<lab::Error>| match e {
            Some(e) => match e.errno() {
                Some(x) => format!("refused with {x}"),
                None => format!("refused: {e}"),
            },
            None => "accepted (0)".into(),
        };
        let Some(t) = transition(from, to) else {
            let skipped = if (from, to) == (QpState::Init, QpState::Rts) {
                " without RTR"
            } else {
                ""
            };
            fail(
                &format!(
                    "call {n} moves the QP {from} -> {to}{skipped}: no such transition; \
                     ibv_modify_qp {}",
                    errno(&refused)
                ),
                &format!("a transition from {from} (RESET -> INIT -> RTR -> RTS)"),
                &format!("{from} -> {to}, mask {mask}"),
            )
        };
        let minimum = QpAttrMask::STATE | t.required;
        let missing = t.required - mask;
        if refused.is_some() || !missing.is_empty() {
            fail(
                &format!(
                    "{from} -> {to}: ibv_modify_qp {}; the mask lacks {missing}",
                    errno(&refused)
                ),
                &minimum.to_string(),
                &mask.to_string(),
            )
        }
        if mask != minimum {
            fail(
                &format!(
                    "{from} -> {to} works, but its mask is not the minimum: it adds {}",
                    mask - minimum
                ),
                &minimum.to_string(),
                &mask.to_string(),
            )
        }
        let now = qp.state().expect("ibv_query_qp");
        if now != to {
            fail(
                &format!("after call {n} the QP is in {now}"),
                &to.to_string(),
                &now.to_string(),
            )
        }
        from = to;
    }
    if from != QpState::Rts {
        fail(
            &format!("the QP ends in {from}, not RTS: {} calls", attrs.len()),
            "RTS",
            &from.to_string(),
        )
    }
}

#[test]
fn bring_up() {
    in_lab(Topology::Loopback, "bring_up", || match Impl::from_env() {
        Some(imp) => check_bring_up(chosen(imp)),
        None => dev_check(),
    });
}

/// Every implementation: the starter fails naming step 1, planted mistakes fail with their
/// messages, the reference solution passes.
fn dev_check() {
    assert_fails_with("bring_up: not written yet (step 1: RESET -> INIT)", || {
        check_bring_up(starter::bring_up)
    });
    // Planted: RTS straight after INIT.
    assert_fails_with(
        "call 2 moves the QP INIT -> RTS without RTR: no such transition; ibv_modify_qp \
         refused with EINVAL (22)",
        || {
            check_bring_up(|l| {
                let all = solution::bring_up(l);
                vec![all[0].clone(), all[2].clone()]
            })
        },
    );
    // Planted: RESET -> INIT without the access flags.
    assert_fails_with(
        "RESET -> INIT: ibv_modify_qp refused with EINVAL (22); the mask lacks \
         IBV_QP_ACCESS_FLAGS",
        || {
            check_bring_up(|l| {
                let mut all = solution::bring_up(l);
                let m = all[0].mask() - QpAttrMask::ACCESS_FLAGS;
                all[0] = all[0].clone().with_mask(m);
                all
            })
        },
    );
    check_bring_up(solution::bring_up);
}
