//! The client's half of each case (node b): it impairs what it sends, posts, waits and
//! says what the wire showed.

use crate::link::{Link, Node, fill, intact, must, wait};
use crate::netem::Netem;
use crate::wire::{self, host};
use crate::{CaseArg, MSG, ROUNDS, yes};
use course::exchange::{Endpoint, OobStream};
use course::{Failure, OrFail, Outcome as Result, expect};
use lab::{Gid, InitAttr, RecvWr, RtrAttr, RtsAttr, SendWr, WcOpcode, WcStatus};
use std::time::{Duration, Instant};

/// What the recording of a case shows: verdicts where the packets vary from run to run (which
/// one was lost), the packets themselves where they are few and always the same.
pub fn show_wire(case: CaseArg, w: &wire::Ladder) {
    match case {
        CaseArg::Loss | CaseArg::Reorder => println!(
            "  on the wire: a NAK psn-sequence-error from node a: {}; a PSN node b sent again \
             (go-back-N): {}",
            yes(w.a_said("NAK psn-sequence-error") > 0),
            yes(w.resent_by_b() > 0)
        ),
        CaseArg::Duplicate => println!(
            "  on the wire: a PSN node b sent twice (netem's copies): {}",
            yes(w.resent_by_b() > 0)
        ),
        CaseArg::Corrupt => println!(
            "  on the wire: a PSN node b sent again (node a dropped the damaged copy and \
             answered nothing; the ack timeout resent it): {}",
            yes(w.resent_by_b() > 0)
        ),
        CaseArg::TotalLoss => println!(
            "  on the wire: {} packets from node b (netem drops them inside node b, before its \
             NIC: a lost packet is one that never arrives)",
            w.sent_by_b()
        ),
        CaseArg::RetryForever => w.print(
            "the loss took every try off the wire; once it healed, the next try and its ACK",
        ),
        CaseArg::Rnr => println!(
            "  on the wire: RNR NAKs from node a with its timer 20 (10.24 ms): {}; then an ACK: {}",
            yes(w.a_said("RNR_NAK timer=20") > 0),
            yes(w.a_said(" ACK ") > 0)
        ),
        CaseArg::RnrExceeded => w.print("the SEND, an RNR NAK, the one retry, another RNR NAK"),
        _ => {}
    }
}

/// Node a is frozen (its VM stopped) twice while our SEND waits for its ACK: thawed within
/// the retry budget, and thawed after it.
pub fn frozen_peer(l: &Link, oob: &mut OobStream, t: Duration) -> Result<()> {
    let per_try_ms = 4.096 * f64::from(1u32 << 16) / 1000.0;
    let budget_ms = per_try_ms * 4.0;
    println!(
        "  timeout 16, retry_cnt 3: each try waits 4.096 us x 2^16 = {per_try_ms:.1} ms; \
         budget {budget_ms:.1} ms"
    );
    oob.expect_line("posted", t)
        .or_fail("the server did not post its receives")?;
    // 1. Frozen for a quarter of the budget. A frozen VM runs nothing: its rxe neither
    // receives nor answers, and its clock stands still. What we send waits on the wire.
    host("freeze a")?;
    println!("  node a frozen: QEMU stopped its vCPUs (it hears nothing and says nothing)");
    l.qp.post_send_one(SendWr::send(1, &[l.mr.sge(..64)]).signaled(true))
        .or_fail("cannot post the first SEND")?;
    std::thread::sleep(Duration::from_millis(300));
    host("thaw a")?;
    let wc = must(&l.cq, "the first SEND")?;
    println!(
        "  thawed after 300 ms, within the budget: the SEND completes with {}; the QP is {}",
        wc.status,
        l.qp.state().or_fail("cannot query the QP")?
    );
    expect(wc.is_success(), || {
        format!("expected success, got {}", wc.status)
    })?;
    // 2. Frozen until our budget has run out.
    wire::start()?;
    host("freeze a")?;
    println!("  node a frozen again, this time until our budget has run out");
    let t0 = Instant::now();
    l.qp.post_send_one(SendWr::send(2, &[l.mr.sge(..64)]).signaled(true))
        .or_fail("cannot post the second SEND")?;
    let wc = wait(&l.cq, Duration::from_secs(20), "the second SEND")?
        .ok_or_else(|| Failure("no completion for the second SEND within 20 s".into()))?;
    let took = t0.elapsed();
    let w = wire::stop()?;
    host("thaw a")?;
    println!(
        "  the SEND completes with {} after elapsed={:.1}ms, node a still frozen; the QP is {}",
        wc.status,
        took.as_secs_f64() * 1000.0,
        l.qp.state().or_fail("cannot query the QP")?
    );
    w.print("while node a was frozen: one SEND, sent retry_cnt + 1 = 4 times, never answered");
    println!("  node a thawed; the server reports what reached it");
    expect(wc.status == WcStatus::RetryExcErr, || {
        format!("expected IBV_WC_RETRY_EXC_ERR, got {}", wc.status)
    })
}

/// Node a is killed while our SEND waits; once the host has restarted it (and the harness the
/// server in it), we reconnect the same QP: ERR -> RESET -> INIT -> RTR -> RTS, with a fresh
/// exchange over a new TCP connection. Returns that connection.
pub fn killed_peer(
    n: &Node,
    l: Link,
    oob: &mut OobStream,
    server: &str,
    port: u16,
    t: Duration,
) -> Result<OobStream> {
    println!("  timeout 12, retry_cnt 3: budget 4 x 4.096 us x 2^12 = 67.1 ms");
    oob.expect_line("posted", t)
        .or_fail("the server did not post its receive")?;
    wire::start()?;
    host("kill a")?;
    println!("  node a killed: its VM is gone, with the server, its QP and its TCP socket");
    l.qp.post_send_one(SendWr::send(1, &[l.mr.sge(..64)]).signaled(true))
        .or_fail("cannot post the SEND")?;
    let wc = must(&l.cq, "the SEND to a dead node")?;
    let w = wire::stop()?;
    println!(
        "  the SEND completes with {}; the QP is {}",
        wc.status,
        l.qp.state().or_fail("cannot query the QP")?
    );
    expect(wc.status == WcStatus::RetryExcErr, || {
        format!("expected IBV_WC_RETRY_EXC_ERR, got {}", wc.status)
    })?;
    w.print("one SEND, sent retry_cnt + 1 = 4 times to a node that is not there");
    // The node comes back as a fresh VM: nothing of the old server survives, not its QP
    // number, not its PSNs. The harness starts the server role in it again.
    host("restart a")?;
    println!("  node a restarted (a fresh VM); the server starts again there");
    let mut fresh = OobStream::connect(server, port, t).or_fail("cannot reach the new server")?;
    println!("  connected again over TCP to the new server");
    fresh
        .send_line(&format!("case {}", CaseArg::Reconnect.name()), t)
        .or_fail("cannot tell the new server the case")?;
    // Our QP is in ERR: RESET empties it, and from there it can go to a new peer.
    let qp =
        l.qp.reset()
            .map_err(|e| Failure(format!("ERR -> RESET: {e}")))?;
    println!("  our QP: ERR -> RESET (its queues emptied)");
    let psn = 0x00c100;
    let me = Endpoint {
        name: "client".into(),
        lid: 0,
        qpn: qp.qp_num(),
        psn,
        gid: n.gid.raw(),
        regions: vec![],
    };
    fresh.send_msg(&me, t).or_fail("cannot send our endpoint")?;
    let peer = fresh
        .recv_msg(t)
        .or_fail("cannot receive the new server's endpoint")?;
    let rtr = RtrAttr::new(peer.qpn, peer.psn, Gid(peer.gid));
    let qp = qp
        .bring_up(&InitAttr::default(), &rtr, &RtsAttr::new(psn))
        .or_fail("cannot bring the QP up again")?;
    println!("  RESET -> INIT -> RTR -> RTS toward the new server's QP (a fresh exchange)");
    fresh
        .expect_line("up", t)
        .or_fail("the new server did not bring its QP up")?;
    fresh
        .expect_line("posted", t)
        .or_fail("the new server did not post its receive")?;
    qp.post_send_one(SendWr::send(2, &[l.mr.sge(..64)]).signaled(true))
        .or_fail("cannot post the SEND")?;
    let wc = must(&l.cq, "the SEND on the reconnected QP")?;
    println!(
        "  a SEND on the reconnected QP completes with {}",
        wc.status
    );
    expect(wc.is_success(), || format!("{}", wc.status))?;
    Ok(fresh)
}

/// ROUNDS round trips of 4 KiB under netem: every message must come back intact, in order.
pub fn pingpong_client(case: CaseArg, l: &Link) -> Result<()> {
    let params = case.netem().unwrap_or("loss 0%");
    for r in 0..ROUNDS {
        l.qp.post_recv_one(RecvWr::new(u64::from(r), &[l.mr.sge(..MSG)]))
            .or_fail("cannot post a receive")?;
    }
    let fault = Netem::apply(params)?;
    println!("  tc netem {params} on the RoCE packets this node sends (UDP 4791 only)");
    println!(
        "  retry_cnt 7 on both QPs, which rxe never counts down: NAKs and timeouts cost resends, \
         never the message"
    );
    let mut good = 0;
    for r in 0..ROUNDS {
        fill(&l.mr, r)?;
        l.qp.post_send_one(SendWr::send(u64::from(r), &[l.mr.sge(..MSG)]).signaled(true))
            .or_fail("cannot post the SEND")?;
        // Two completions per round: our SEND (acknowledged) and the echo's receive.
        for _ in 0..2 {
            let wc = must(&l.cq, "a SEND or the echo")?;
            expect(wc.is_success(), || format!("round {r}: {}", wc.status))?;
            if wc.opcode == WcOpcode::Recv && intact(&l.mr, r) && wc.wr_id == u64::from(r) {
                good += 1;
            }
        }
    }
    fault.remove();
    println!(
        "  {ROUNDS} SENDs of {MSG} bytes and their echoes: {good} of {ROUNDS} came back intact \
         and in order; the QP is still {}",
        l.qp.state().or_fail("cannot query the QP")?
    );
    expect(good == ROUNDS, || {
        format!("only {good} of {ROUNDS} echoes were intact")
    })
}

/// 100% loss: the first send and retry_cnt resends, one ack timeout apart, then the error.
pub fn total_loss(l: &Link) -> Result<()> {
    let (timeout, retry) = (12u32, 3u32);
    let per_try_us = 4.096 * f64::from(1u32 << timeout);
    let budget = per_try_us * f64::from(retry + 1) / 1000.0;
    println!(
        "  timeout {timeout}, retry_cnt {retry}: budget (retry_cnt + 1) x 4.096 us x 2^{timeout} \
         = {budget:.1} ms"
    );
    println!(
        "  {}",
        course::kernel::AckTimer::explain(timeout as u8, retry + 1)
    );
    let fault = Netem::apply("loss 100%")?;
    println!("  tc netem loss 100% on the RoCE packets this node sends");
    let t0 = Instant::now();
    l.qp.post_send_one(SendWr::send(1, &[l.mr.sge(..64)]).signaled(true))
        .or_fail("cannot post the SEND")?;
    let wc = must(&l.cq, "the SEND into the void")?;
    let took = t0.elapsed();
    fault.remove();
    println!("  the SEND completes with {}", wc.status);
    println!(
        "  measured elapsed={:.1}ms; within 0.5x to 20x of the budget (rxe's timer ticks in \
         jiffies, and this is an emulated CPU): {}",
        took.as_secs_f64() * 1000.0,
        yes((budget * 0.5..budget * 20.0).contains(&(took.as_secs_f64() * 1000.0)))
    );
    println!(
        "  the QP is now {}: it must go to RESET and be connected again",
        l.qp.state().or_fail("cannot query the QP")?
    );
    expect(wc.status == WcStatus::RetryExcErr, || {
        format!("expected IBV_WC_RETRY_EXC_ERR, got {}", wc.status)
    })
}

/// retry_cnt 7: rxe keeps resending; heal the wire after a deadline and the SEND completes.
pub fn retry_forever(l: &Link) -> Result<()> {
    let watch = Duration::from_secs(2);
    let fault = Netem::apply("loss 100%")?;
    println!(
        "  timeout 12, retry_cnt 7 (what ibv_rc_pingpong and rping ask for); tc netem loss 100%"
    );
    l.qp.post_send_one(SendWr::send(1, &[l.mr.sge(..64)]).signaled(true))
        .or_fail("cannot post the SEND")?;
    let early = wait(&l.cq, watch, "the SEND")?;
    println!(
        "  after {:.0} s (15x the 8-try budget of 134 ms): a completion? {}",
        watch.as_secs_f64(),
        yes(early.is_some())
    );
    expect(early.is_none(), || "rxe gave up on retry_cnt 7".into())?;
    // Heal in place (netem's loss to 0%), and remove the qdiscs only once the SEND is back:
    // see Netem::change.
    fault.change("loss 0%")?;
    println!("  the wire heals (netem's loss set to 0%)");
    let wc = must(&l.cq, "the SEND after the wire healed")?;
    fault.remove();
    println!("  the next resend gets through: {}", wc.status);
    expect(wc.is_success(), || format!("{}", wc.status))
}

/// The server posts its receive late (rnr) or never (rnr-exceeded).
pub fn rnr_client(case: CaseArg, l: &Link) -> Result<()> {
    let rnr_retry = if case == CaseArg::Rnr { 7 } else { 1 };
    println!(
        "  the server's min_rnr_timer is 20 (10.24 ms); our rnr_retry is {rnr_retry}{}",
        if rnr_retry == 7 { " (forever)" } else { "" }
    );
    let t0 = Instant::now();
    l.qp.post_send_one(SendWr::send(1, &[l.mr.sge(..64)]).signaled(true))
        .or_fail("cannot post the SEND")?;
    let wc = must(&l.cq, "the SEND")?;
    println!(
        "  the SEND completes with {} (elapsed={:.1}ms)",
        wc.status,
        t0.elapsed().as_secs_f64() * 1000.0
    );
    let want = if case == CaseArg::Rnr {
        WcStatus::Success
    } else {
        WcStatus::RnrRetryExcErr
    };
    expect(wc.status == want, || {
        format!("expected {want}, got {}", wc.status)
    })
}
