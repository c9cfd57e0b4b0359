//! Chapter 13's exercise checks, on the microVM pair with the wire recorded (the shape:
//! docs/exercises.md):
//!
//! - `survive_loss` checks exercise 13-survive-loss (`LAB_EXERCISE_IMPL`: `starter` or
//!   `solution`). On the host it reads the two attributes (refusing 0 for `timeout` and 7 for
//!   `retry_cnt`, with rxe's reason), puts 15% loss on what node b sends
//!   (`harness::wire::fault`), re-runs itself as two roles (`LAB_EXERCISE_ROLE=server` on node
//!   a, `client:<timeout>:<retry_cnt>` on node b, which posts 48 WRITEs), records the wire and
//!   requires every WRITE to succeed and at least one PSN sent twice (`retransmitted_psns`).
//! - With `LAB_EXERCISE_IMPL` unset (the test suite), the dev check: the starter fails naming
//!   step 1, planted timeout 0 and retry_cnt 7 are refused with rxe's reason, planted
//!   retry_cnt 0 fails with `IBV_WC_RETRY_EXC_ERR (12)` on the lossy wire, the reference
//!   solution passes.

use harness::Node;
use harness::exercises::{
    Impl, Part, assert_fails_with, fail, fail_on_role_exit, pair_roles, server_addr, step,
};
use harness::testing::{run_roles_traced, wire_lab};
use harness::wire::expect::Trace;
use harness::wire::fault::{self, Impair};
use lab::{AccessFlags, Context, InitAttr, QpInitAttr, RtrAttr, RtsAttr, SendWr, WcStatus};
use std::time::{Duration, Instant};

#[path = "../exercises/solutions/survive_loss.rs"]
mod solution;
#[path = "../exercises/survive_loss.rs"]
mod starter;

const TEST: &str = "survive_loss";
const PORT: u16 = 18593;
const WRITES: usize = 48;
const LEN: usize = 64;
const LOSS: f64 = 15.0;
const T: Duration = Duration::from_secs(30);
const SERIES: Duration = Duration::from_secs(60);
const READY: &str = "exercise server: listening";

/// The two attributes as an implementation gives them.
type Attrs = fn() -> (u8, u8);

fn chosen(imp: Impl) -> Attrs {
    match imp {
        Impl::Starter => || (starter::ack_timeout(), starter::retry_cnt()),
        Impl::Solution => || (solution::ack_timeout(), solution::retry_cnt()),
    }
}

fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

/// Node a: expose WRITES x LEN bytes to the client's WRITEs, wait for "done", check them.
fn server() {
    // The client says "done" or closes the stream (a WRITE failed): either way we stop.
    let got = course::serve_write_target(PORT, WRITES * LEN, READY, T, SERIES + T)
        .expect("the WRITE target");
    if let Some(bytes) = got {
        assert!(
            bytes.iter().enumerate().all(|(i, &b)| b == pattern(i)),
            "the {WRITES} WRITEs did not land intact in the server's region"
        );
    }
}

/// Node b: a QP with the exercise's timeout and retry_cnt, then WRITES WRITEs at once.
fn client(timeout: u8, retry: u8) {
    let ctx = Context::open_default().expect("open the rxe device");
    let pd = ctx.alloc_pd().expect("ibv_alloc_pd");
    let cq = ctx.create_cq(128, None).expect("ibv_create_cq");
    let mut src = pd
        .reg_mr(WRITES * LEN, AccessFlags::LOCAL_WRITE)
        .expect("reg_mr");
    for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
        *b = pattern(i);
    }
    let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq)).expect("create QP");
    let (mut oob, theirs) =
        course::exchange_as_client(&ctx, &qp, "ex13", 0x00bbbb, &server_addr(), PORT, T)
            .expect("exchange with the server");
    let rtr = RtrAttr::new(theirs.qpn, theirs.psn, lab::Gid(theirs.gid));
    let rts = RtsAttr::new(0x00bbbb).timeout(timeout).retry_cnt(retry);
    let qp = qp
        .bring_up(&InitAttr::default(), &rtr, &rts)
        .expect("RTR/RTS");
    let dst = &theirs.regions[0];
    for i in 0..WRITES {
        let sge = [src.sge(i * LEN..(i + 1) * LEN)];
        let addr = dst.addr + (i * LEN) as u64;
        qp.post_send_one(SendWr::write(i as u64, &sge, addr, dst.rkey))
            .expect("ibv_post_send");
    }
    let end = Instant::now() + SERIES;
    for n in 0..WRITES {
        let left = end.saturating_duration_since(Instant::now());
        let wc = match cq.wait_one(left) {
            Ok(wc) => wc,
            Err(e) => fail(
                &format!(
                    "{n} of {WRITES} WRITEs completed within {} s (timeout {timeout}: \
                     {:.1} ms per try): {e}",
                    SERIES.as_secs(),
                    4.096e-3 * f64::from(1u32 << timeout.min(31))
                ),
                &format!("{WRITES} completions with IBV_WC_SUCCESS (0)"),
                &format!("{n} completions, then none"),
            ),
        };
        if wc.status != WcStatus::Success {
            fail(
                &format!(
                    "a WRITE failed with {} under {LOSS}% loss (WRITE {} of {WRITES}; retry_cnt \
                     {retry}: at most {} tries per message)",
                    wc.status,
                    wc.wr_id,
                    u32::from(retry) + 1
                ),
                "IBV_WC_SUCCESS (0)",
                &wc.status.to_string(),
            );
        }
    }
    oob.send_line("done", T).expect("tell the server");
}

/// What the attributes must be before any packet is sent: rxe's reasons.
fn check_attrs(attrs: Attrs) -> (u8, u8) {
    let timeout = step("ack_timeout", || attrs().0);
    let retry = step("retry_cnt", || attrs().1);
    if timeout == 0 {
        fail(
            "timeout 0: rxe arms no retransmit timer (rxe_qp.c, rxe_qp_from_attr: \
             qp_timeout_jiffies = 0), so a lost packet with none behind it is never sent again",
            "timeout 1 to 31 (4.096 us x 2^timeout per try)",
            "0",
        );
    }
    if timeout > 31 || retry > 7 {
        fail(
            "out of range: timeout has 5 bits, retry_cnt 3",
            "timeout 1 to 31, retry_cnt 0 to 6",
            &format!("timeout {timeout}, retry_cnt {retry}"),
        );
    }
    if retry == 7 {
        fail(
            "retry_cnt 7: rxe never counts it down (rxe_comp.c, rxe_completer: `if \
             (qp->comp.retry_cnt != 7) qp->comp.retry_cnt--`), so toward a dead peer the QP \
             resends forever and no error ever comes",
            "retry_cnt 0 to 6: a budget that can run out",
            "7",
        );
    }
    (timeout, retry)
}

/// Removes the loss however the check ends.
struct Healed(std::sync::Arc<harness::testbed::Testbed>);

impl Drop for Healed {
    fn drop(&mut self) {
        if let Err(e) = fault::clear(&self.0) {
            eprintln!("removing the loss: {e:#}");
        }
    }
}

/// The check, on the host: the attributes, then both roles on the lossy pair, then the trace.
fn check_survive_loss(attrs: Attrs) {
    let (timeout, retry) = check_attrs(attrs);
    let lab = wire_lab();
    let healed = Healed(lab.clone());
    fault::impair(&lab, &[Node::B], Impair::Loss(LOSS)).expect("put loss on node b");
    let client = format!("{timeout}:{retry}");
    let roles = pair_roles(TEST, READY, &client, lab.server_addr());
    let t = run_roles_traced(roles);
    drop(healed);
    fail_on_role_exit(&t.transcript);
    let trace = Trace::new(t.packets.clone()).rc();
    let again = trace.retransmitted_psns();
    if again.is_empty() {
        fail(
            "every WRITE completed, but no PSN crossed the wire twice: the loss (random) did \
             not hit this run, so it proves nothing; run the check again",
            "at least one PSN retransmitted",
            &format!("counts {:?}", trace.counts()),
        );
    }
    println!(
        "{WRITES} WRITEs completed under {LOSS}% loss; {} PSNs sent again on the wire",
        again.len()
    );
}

#[test]
fn survive_loss() {
    match Part::from_env() {
        Part::Server => server(),
        Part::Client(arg) => {
            let v: Vec<u8> = arg
                .split(':')
                .map(|x| x.parse().expect("client:<timeout>:<retry_cnt>"))
                .collect();
            client(v[0], v[1])
        }
        Part::Check => match Impl::from_env() {
            Some(imp) => check_survive_loss(chosen(imp)),
            None => dev_check(),
        },
    }
}

/// Every implementation: the starter fails naming step 1, timeout 0 and retry_cnt 7 are
/// refused with rxe's reason, retry_cnt 0 fails on the lossy wire, the solution passes.
fn dev_check() {
    assert_fails_with("ack_timeout: not written yet (step 1:", || {
        check_survive_loss(chosen(Impl::Starter))
    });
    assert_fails_with("timeout 0: rxe arms no retransmit timer", || {
        check_survive_loss(|| (0, 6))
    });
    assert_fails_with("retry_cnt 7: rxe never counts it down", || {
        check_survive_loss(|| (16, 7))
    });
    assert_fails_with(
        "a WRITE failed with IBV_WC_RETRY_EXC_ERR (12) under 15% loss",
        || check_survive_loss(|| (16, 0)),
    );
    check_survive_loss(chosen(Impl::Solution));
}
