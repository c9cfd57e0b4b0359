//! The server (node a): answers each case, and reports its own counters.

use crate::link::{Link, intact, link, must, open};
use crate::{CaseArg, MSG, Opts, ROUNDS, netem, report};
use course::exchange::Listener;
use course::show;
use course::{Failure, OrFail, Outcome as Result, expect};
use lab::{RecvWr, SendWr, WcOpcode};
use std::time::Duration;

pub fn server(o: &Opts) -> Result<()> {
    let t = Duration::from_secs(o.timeout);
    let n = open()?;
    let dev = n.ctx.name().to_string();
    println!("step 1: server: open {dev}, {}", show::gid(&n.gid.raw()));
    let listener = Listener::bind(o.port).or_fail("cannot listen")?;
    println!("step 2: listening on TCP port {} for the client", o.port);
    let mut oob = listener.accept(t).or_fail("cannot accept the client")?;
    let mut step = 3;
    loop {
        let line = oob.recv_line(t).or_fail("cannot hear from the client")?;
        if line == "bye" {
            break;
        }
        let name = line.strip_prefix("case ").unwrap_or("");
        let case = CaseArg::from_name(name)
            .ok_or_else(|| Failure(format!("the client asked for an unknown case {line:?}")))?;
        // The counters before the QP exists: the client's first SEND may reach us (and be
        // answered with an RNR NAK) as soon as we have said our QP is up.
        let before = netem::counters(&dev);
        let l = link(&n, &mut oob, case, false, t)?;
        println!("step {step}: case {}", case.name());
        step += 1;
        match case {
            CaseArg::Loss | CaseArg::Duplicate | CaseArg::Reorder | CaseArg::Corrupt => echo(&l)?,
            CaseArg::Rnr => {
                // A slow receiver: the receive is posted 200 ms after the QP is up.
                std::thread::sleep(Duration::from_millis(200));
                l.qp.post_recv_one(RecvWr::new(1, &[l.mr.sge(..MSG)]))
                    .or_fail("cannot post the late receive")?;
                let wc = must(&l.cq, "the late receive")?;
                println!(
                    "  posted our receive 200 ms late; it completes with {}",
                    wc.status
                );
            }
            CaseArg::RetryForever => {
                l.qp.post_recv_one(RecvWr::new(1, &[l.mr.sge(..MSG)]))
                    .or_fail("cannot post a receive")?;
                let wc = must(&l.cq, "the SEND that got through")?;
                println!(
                    "  one receive posted; once the wire heals it completes with {}",
                    wc.status
                );
            }
            CaseArg::TotalLoss => {
                l.qp.post_recv_one(RecvWr::new(1, &[l.mr.sge(..MSG)]))
                    .or_fail("cannot post a receive")?;
                println!("  one receive posted; nothing reaches it");
            }
            CaseArg::FrozenPeer => {
                for id in 1..=2 {
                    l.qp.post_recv_one(RecvWr::new(id, &[l.mr.sge(..MSG)]))
                        .or_fail("cannot post a receive")?;
                }
                println!("  two receives posted; this node will be frozen twice");
                oob.send_line("posted", t)
                    .or_fail("cannot tell the client")?;
                // Whatever was sent to us while we were frozen waited on the wire, and came in
                // when we were thawed: both SENDs, the second after the client gave up on it.
                for id in 1..=2 {
                    let wc = must(&l.cq, "a SEND sent while we were frozen")?;
                    println!("  receive {id} completes with {}", wc.status);
                }
                println!(
                    "  so the second SEND did arrive: the client's error said only that no ACK \
                     came in time"
                );
            }
            CaseArg::KilledPeer => {
                l.qp.post_recv_one(RecvWr::new(1, &[l.mr.sge(..MSG)]))
                    .or_fail("cannot post a receive")?;
                println!("  one receive posted; this node is about to be killed");
                oob.send_line("posted", t)
                    .or_fail("cannot tell the client")?;
            }
            CaseArg::Reconnect => {
                l.qp.post_recv_one(RecvWr::new(1, &[l.mr.sge(..MSG)]))
                    .or_fail("cannot post a receive")?;
                println!("  a fresh QP for the client that reconnected; one receive posted");
                oob.send_line("posted", t)
                    .or_fail("cannot tell the client")?;
                let wc = must(&l.cq, "the reconnected client's SEND")?;
                println!("  its SEND arrives: {}", wc.status);
            }
            _ => println!("  no receive posted: the client's SEND finds none"),
        }
        oob.expect_line("done", t)
            .or_fail("the client did not finish")?;
        let watch: &[&str] = match case {
            CaseArg::Loss | CaseArg::Reorder => &["out_of_seq_request"],
            CaseArg::Duplicate => &["duplicate_request"],
            CaseArg::Rnr | CaseArg::RnrExceeded => &["send_rnr_err"],
            _ => &[],
        };
        report(o, "server", &dev, &before, watch);
        oob.send_line("ok", t).or_fail("cannot answer the client")?;
    }
    println!("step {step}: the client is done");
    Ok(())
}

/// Echoes ROUNDS messages back to the client, in order. Receives land in the first half of
/// the buffer, echoes go from the second: a resend of echo N (its ACK lost) must not read
/// message N+1. Our echo's completion may come after the client's next message (the ACK
/// was lost and resent): every completion is taken as it comes.
fn echo(l: &Link) -> Result<()> {
    for r in 0..ROUNDS {
        l.qp.post_recv_one(RecvWr::new(u64::from(r), &[l.mr.sge(..MSG)]))
            .or_fail("cannot post a receive")?;
    }
    let (mut recvd, mut sent, mut good) = (0u32, 0u32, 0u32);
    while recvd < ROUNDS || sent < ROUNDS {
        let wc = must(&l.cq, "the client's SEND or our echo")?;
        expect(wc.is_success(), || {
            format!("after {recvd} messages: {}", wc.status)
        })?;
        if wc.opcode == WcOpcode::Recv {
            expect(wc.wr_id == u64::from(recvd), || {
                format!("message {recvd} arrived as wr_id {}", wc.wr_id)
            })?;
            if intact(&l.mr, recvd) {
                good += 1;
            }
            // A copy first: the echo goes from the second half.
            let msg = l.mr.as_slice()[..MSG].to_owned();
            l.mr.write_from(MSG, &msg)
                .or_fail("cannot copy the message")?;
            l.qp.post_send_one(SendWr::send(u64::from(recvd), &[l.mr.sge(MSG..)]).signaled(true))
                .or_fail("cannot post the echo")?;
            recvd += 1;
        } else {
            sent += 1;
        }
    }
    println!("  {ROUNDS} messages received in order, {good} intact, each echoed back");
    expect(good == ROUNDS, || format!("only {good} of {ROUNDS} intact"))
}
