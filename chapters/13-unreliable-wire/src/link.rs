//! What every case shares: the device, a fresh connected QP per case, waiting for a
//! completion with a deadline, and the messages of the ping-pongs.

use crate::{CaseArg, MSG, ROUNDS, SHOULD_COME};
use course::exchange::{Endpoint, OobStream};
use course::{Failure, OrFail, Outcome as Result, expect};
use lab::{
    AccessFlags, CompletionQueue, Context, Gid, InitAttr, MemoryRegion, ProtectionDomain,
    QpInitAttr, QueuePair, RtrAttr, WorkCompletion,
};
use std::time::Duration;

/// The device, its RoCE v2 GID and a PD, shared by every case.
pub struct Node {
    pub ctx: Context,
    pub gid: Gid,
    pub pd: ProtectionDomain,
}

/// One case's QP, its CQ and a 4 KiB buffer.
pub struct Link {
    pub qp: QueuePair,
    pub cq: CompletionQueue,
    pub mr: MemoryRegion,
}

pub fn open() -> Result<Node> {
    let ctx = course::open_device(None).or_fail("cannot open the device")?;
    let gid = ctx
        .roce_v2_ipv4_gid(1)
        .or_fail("cannot find our RoCE v2 GID")?;
    let pd = ctx.alloc_pd().or_fail("cannot allocate a PD")?;
    Ok(Node {
        gid: gid.gid,
        ctx,
        pd,
    })
}

/// A fresh QP for one case, connected to the peer's through the TCP stream: the client sends
/// its endpoint first, the server answers with its own.
pub fn link(
    n: &Node,
    oob: &mut OobStream,
    case: CaseArg,
    client: bool,
    t: Duration,
) -> Result<Link> {
    let cq = n
        .ctx
        .create_cq(2 * ROUNDS as i32 + 8, None)
        .or_fail("cannot create a CQ")?;
    let qp =
        n.pd.create_qp(
            &QpInitAttr::rc(&cq, &cq)
                .max_send_wr(4)
                .max_recv_wr(ROUNDS + 4)
                .max_inline_data(0),
        )
        .or_fail("cannot create the QP")?;
    let mr =
        n.pd.reg_mr(2 * MSG, AccessFlags::LOCAL_WRITE)
            .or_fail("cannot register the buffer")?;
    let psn = if client { 0x00c000 } else { 0x00a000 };
    let me = Endpoint {
        name: if client { "client" } else { "server" }.into(),
        lid: 0,
        qpn: qp.qp_num(),
        psn,
        gid: n.gid.raw(),
        regions: vec![],
    };
    let peer = if client {
        oob.send_msg(&me, t).or_fail("cannot send our endpoint")?;
        oob.recv_msg(t)
            .or_fail("cannot receive the server's endpoint")?
    } else {
        let p = oob
            .recv_msg(t)
            .or_fail("cannot receive the client's endpoint")?;
        oob.send_msg(&me, t).or_fail("cannot send our endpoint")?;
        p
    };
    expect(peer.gid != n.gid.raw(), || {
        "the peer has our own GID: both ends are on one device, and its packets never cross a \
         wire (nothing to impair). Run it on the microVM pair: LAB_PROVIDER=vm cargo lab run 13"
            .into()
    })?;
    let (rts, min_rnr) = case.attrs(psn);
    let rtr = RtrAttr::new(peer.qpn, peer.psn, Gid(peer.gid)).min_rnr_timer(min_rnr);
    let qp = qp
        .bring_up(&InitAttr::default(), &rtr, &rts)
        .or_fail("cannot connect the QP (INIT, RTR, RTS)")?;
    // The server says when its QP is up, and the client waits for it: a packet that reaches
    // a QP not yet in RTR is dropped, and the client's first SEND would become a retry.
    if client {
        oob.expect_line("up", t)
            .or_fail("the server did not bring its QP up")?;
    } else {
        oob.send_line("up", t).or_fail("cannot tell the client")?;
    }
    Ok(Link { qp, cq, mr })
}

pub fn wait(cq: &CompletionQueue, within: Duration, what: &str) -> Result<Option<WorkCompletion>> {
    match cq.wait_one(within) {
        Ok(wc) => Ok(Some(wc)),
        Err(lab::Error::CompletionTimeout { .. }) => Ok(None),
        Err(e) => Err(Failure(format!("waiting for {what}: {}", e.report()))),
    }
}

pub fn must(cq: &CompletionQueue, what: &str) -> Result<WorkCompletion> {
    wait(cq, SHOULD_COME, what)?
        .ok_or_else(|| Failure(format!("no completion for {what} within {SHOULD_COME:?}")))
}

/// Message `round`: 4096 bytes that differ from every other round's.
fn pattern(round: u32) -> Vec<u8> {
    (0..MSG)
        .map(|i| (i as u32 ^ round.wrapping_mul(31)) as u8)
        .collect()
}

pub fn fill(mr: &MemoryRegion, round: u32) -> Result<()> {
    mr.write_from(0, &pattern(round))
        .or_fail("cannot fill the buffer")
}

/// Does the first half of the buffer hold message `round`?
pub fn intact(mr: &MemoryRegion, round: u32) -> bool {
    mr.as_slice()[..MSG] == pattern(round)[..]
}
