//! Chapter 03's exercise checks, on the loopback lab's real rxe device (docs/exercises.md
//! describes the shape every chapter's `tests/exercises.rs` follows):
//!
//! - `remote_write` checks exercise 03-remote-write, the implementation `LAB_EXERCISE_IMPL`
//!   names (`starter` or `solution`): a real remote RDMA WRITE into the region it registers
//!   must complete with `IBV_WC_SUCCESS` and land.
//! - With `LAB_EXERCISE_IMPL` unset (the test suite) it runs the dev check instead: the starter
//!   fails naming the step still to write, planted wrong ones (no REMOTE_WRITE; REMOTE_WRITE
//!   without LOCAL_WRITE) fail with what rxe gives, the reference solution passes.

use course::connected_pair;
use harness::Topology;
use harness::exercises::{Impl, assert_fails_with, fail, step};
use harness::testing::in_lab;
use lab::{AccessFlags, Context, MemoryRegion, ProtectionDomain, SendWr, WcStatus};
use std::time::Duration;

#[path = "../exercises/solutions/remote_write.rs"]
mod solution;
#[path = "../exercises/remote_write.rs"]
mod starter;

type Register = fn(&ProtectionDomain, usize) -> lab::Result<MemoryRegion>;

fn chosen(imp: Impl) -> Register {
    match imp {
        Impl::Starter => starter::register_target,
        Impl::Solution => solution::register_target,
    }
}

const LEN: usize = 4096;
const DATA: &[u8] = b"written by the peer";

/// The check: register through `register`, then a second QP WRITEs into it by its rkey.
fn check_remote_write(register: Register) {
    let ctx = Context::open_default().expect("open the lab's rxe device");
    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let target = match step("register_target", || register(&pd, LEN)) {
        Ok(mr) => mr,
        Err(e) => fail(
            &format!("ibv_reg_mr refused the region: {e}"),
            "a registered region of 4096 bytes",
            &e.report().to_string(),
        ),
    };
    let access = target.access();
    let gid = ctx.roce_v2_ipv4_gid(1).expect("RoCE v2 GID").gid;
    let cq_peer = ctx.create_cq(16, None).expect("ibv_create_cq");
    let cq_target = ctx.create_cq(16, None).expect("ibv_create_cq");
    let (peer, _target_qp) =
        connected_pair(&pd, &cq_peer, &cq_target, gid).expect("connect two QPs");
    let mut src = pd
        .reg_mr(LEN, AccessFlags::LOCAL_WRITE)
        .expect("ibv_reg_mr");
    src.as_mut_slice()[..DATA.len()].copy_from_slice(DATA);
    let r = target.remote();
    let sge = [src.sge(0..DATA.len())];
    peer.post_send_one(SendWr::write(1, &sge, r.addr, r.rkey))
        .expect("ibv_post_send");
    let wc = cq_peer
        .wait_one(Duration::from_secs(10))
        .expect("the WRITE's completion");
    if wc.status != WcStatus::Success {
        let what = if access.contains(AccessFlags::REMOTE_WRITE) {
            format!("the peer's WRITE completed with {}", wc.status)
        } else {
            format!(
                "the MR lacks IBV_ACCESS_REMOTE_WRITE: the peer's WRITE completed with {}",
                wc.status
            )
        };
        fail(
            &what,
            "IBV_WC_SUCCESS (0)",
            &format!("{} (the region's access: {access})", wc.status),
        );
    }
    let mut got = vec![0u8; DATA.len()];
    target.read_into(0, &mut got).expect("read the region");
    if got != DATA {
        fail(
            "the WRITE completed but its bytes are not at the start of the region",
            &format!("{:?}", String::from_utf8_lossy(DATA)),
            &format!("{:?}", String::from_utf8_lossy(&got)),
        );
    }
}

#[test]
fn remote_write() {
    in_lab(
        Topology::Loopback,
        "remote_write",
        || match Impl::from_env() {
            Some(imp) => check_remote_write(chosen(imp)),
            None => dev_check(),
        },
    );
}

/// Every implementation: the starter fails naming its first step, planted mistakes fail with
/// their messages, the reference solution passes.
fn dev_check() {
    assert_fails_with("register_target: not written yet (step 1:", || {
        check_remote_write(starter::register_target)
    });
    assert_fails_with(
        "the MR lacks IBV_ACCESS_REMOTE_WRITE: the peer's WRITE completed with \
         IBV_WC_REM_ACCESS_ERR (10)",
        || check_remote_write(|pd, len| pd.reg_mr(len, AccessFlags::LOCAL_WRITE)),
    );
    assert_fails_with("ibv_reg_mr refused the region:", || {
        check_remote_write(|pd, len| pd.reg_mr(len, AccessFlags::REMOTE_WRITE))
    });
    check_remote_write(solution::register_target);
}
