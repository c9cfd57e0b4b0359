//! Chapter 08's exercise checks, on the loopback lab's real rxe device (docs/exercises.md
//! describes the shape every chapter's `tests/exercises.rs` follows):
//!
//! - `break_write` checks exercise 08-break-write, the implementation `LAB_EXERCISE_IMPL`
//!   names (`starter` or `solution`): each WRITE it builds must complete with
//!   `IBV_WC_REM_ACCESS_ERR (10)` and leave the target region untouched.
//! - With `LAB_EXERCISE_IMPL` unset (the test suite) it runs the dev check instead: the starter
//!   fails naming the step still to write, planted wrong ones (the right rkey; an address
//!   inside the region) fail with the success they get, the reference solution passes.

use harness::Topology;
use harness::exercises::{Impl, assert_fails_with, fail, step};
use harness::testing::in_lab;
use lab::course::connected_pair;
use lab::{AccessFlags, Context, RemoteRegion, SendWr, WcStatus};
use std::time::Duration;

#[path = "../exercises/solutions/break_write.rs"]
mod solution;
#[path = "../exercises/break_write.rs"]
mod starter;

type BadRkey = fn(RemoteRegion) -> (u64, u32);
type OutOfBounds = fn(RemoteRegion, u64) -> (u64, u32);

fn chosen(imp: Impl) -> (BadRkey, OutOfBounds) {
    match imp {
        Impl::Starter => (starter::bad_rkey, starter::out_of_bounds),
        Impl::Solution => (solution::bad_rkey, solution::out_of_bounds),
    }
}

const TARGET: usize = 4096;
const LEN: u64 = 128;

/// One WRITE of LEN bytes of 0xab to what `pick` returns, on a fresh pair of QPs (the first
/// error moves them to ERR); expects REM_ACCESS_ERR and the target still all zero.
fn expect_refused(case: &str, pick: impl FnOnce(RemoteRegion) -> (u64, u32)) {
    let ctx = Context::open_default().expect("open the lab's rxe device");
    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let gid = ctx.roce_v2_ipv4_gid(1).expect("RoCE v2 GID").gid;
    let cq_a = ctx.create_cq(16, None).expect("ibv_create_cq");
    let cq_b = ctx.create_cq(16, None).expect("ibv_create_cq");
    let (a, _b) = connected_pair(&pd, &cq_a, &cq_b, gid).expect("connect two QPs");
    let target = pd
        .reg_mr(TARGET, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        .expect("ibv_reg_mr");
    let mut src = pd
        .reg_mr(LEN as usize, AccessFlags::LOCAL_WRITE)
        .expect("ibv_reg_mr");
    src.as_mut_slice().fill(0xab);
    let r = target.remote();
    let (addr, rkey) = step(case, || pick(r));
    let sge = [src.sge(..)];
    a.post_send_one(SendWr::write(1, &sge, addr, rkey))
        .expect("ibv_post_send");
    let wc = cq_a
        .wait_one(Duration::from_secs(10))
        .expect("the WRITE's completion");
    let written = target.as_slice().iter().filter(|&&b| b != 0).count();
    let aim = format!(
        "addr region+{} rkey {rkey:#x} (the region: {} bytes, rkey {:#x})",
        addr.wrapping_sub(r.addr) as i64,
        r.len,
        r.rkey
    );
    if wc.status != WcStatus::RemAccessErr {
        let what = if wc.status == WcStatus::Success {
            format!(
                "{case}: the WRITE succeeded ({written} bytes written): rxe found nothing wrong with {aim}"
            )
        } else {
            format!("{case}: the WRITE failed, but not the way the case names")
        };
        fail(&what, "IBV_WC_REM_ACCESS_ERR (10)", &wc.status.to_string());
    }
    if written != 0 {
        fail(
            &format!("{case}: the WRITE was refused, but {written} bytes of the target changed"),
            "the target untouched",
            &format!("{written} bytes changed"),
        );
    }
}

/// The check: both cases, each on its own QPs.
fn check_break_write((bad, oob): (BadRkey, OutOfBounds)) {
    expect_refused("bad_rkey", bad);
    expect_refused("out_of_bounds", |r| oob(r, LEN));
}

#[test]
fn break_write() {
    in_lab(Topology::Loopback, "break_write", || {
        match Impl::from_env() {
            Some(imp) => check_break_write(chosen(imp)),
            None => dev_check(),
        }
    });
}

/// Every implementation: the starter fails naming its first step, planted mistakes fail with
/// their messages, the reference solution passes.
fn dev_check() {
    assert_fails_with("bad_rkey: not written yet (step 1:", || {
        check_break_write((starter::bad_rkey, starter::out_of_bounds))
    });
    assert_fails_with("out_of_bounds: not written yet (step 2:", || {
        check_break_write((solution::bad_rkey, starter::out_of_bounds))
    });
    assert_fails_with(
        "bad_rkey: the WRITE succeeded (128 bytes written): rxe found nothing wrong",
        || check_break_write((|r| (r.addr, r.rkey), solution::out_of_bounds)),
    );
    assert_fails_with(
        "out_of_bounds: the WRITE succeeded (128 bytes written)",
        || check_break_write((solution::bad_rkey, |r, len| (r.addr + r.len - len, r.rkey))),
    );
    check_break_write((solution::bad_rkey, solution::out_of_bounds));
}
