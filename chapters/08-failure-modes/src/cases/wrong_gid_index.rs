//! Case 10, `wrong-gid-index`: the link-local GID toward an IPv4 peer.
//!
//! A RoCE v2 packet is a UDP/IP packet; the source GID picks its source address. GID index 0
//! is usually the link-local `fe80::` entry, derived from the MAC; an IPv4 peer's GID is
//! `::ffff:a.b.c.d`. rxe cannot route an IPv6 link-local source to an IPv4 destination and
//! refuses RTR. The peer, configured correctly, never hears back.

use course::Outcome as Result;
use course::show;
use lab::*;

use crate::report::Report;
use crate::rig::{EINVAL, PSN_A, PSN_B, Rig, must_wc};

pub fn run(r: &mut Report) -> Result<()> {
    let rig = Rig::open()?;
    let table = rig.ctx.gid_table(1)?;
    let ll = table
        .iter()
        .find(|e| e.gid.is_link_local())
        .ok_or("no link-local GID in the table")?;
    r.step(format!("{} port 1, the GID table:", rig.ctx.name()));
    for e in &table {
        r.say(format!(
            "index {}  {}  {}",
            e.index,
            e.gid_type,
            show::gid(&e.gid.raw())
        ));
    }
    r.check("index of the link-local GID", ll.index, 0);

    let cq_a = rig.ctx.create_cq(8, None)?;
    let cq_b = rig.ctx.create_cq(8, None)?;
    let a = rig.pd.create_qp(&QpInitAttr::rc(&cq_a, &cq_a))?;
    let b = rig.pd.create_qp(&QpInitAttr::rc(&cq_b, &cq_b))?;
    let (qa, qb) = (a.qp_num(), b.qp_num());
    let v4 = rig.gid.gid;
    let a = a.to_init(&InitAttr::default())?;
    r.step(format!(
        "QP A {}: INIT -> RTR toward {} {} with sgid_index {} ({})",
        show::qpn(qa),
        show::qpn(qb),
        show::gid(&v4.raw()),
        ll.index,
        ll.gid
    ));
    let err = match a.to_rtr(&RtrAttr::new(qb, PSN_B, v4).sgid_index(ll.index as u8)) {
        Ok(_) => {
            r.mismatch("RTR succeeded".into());
            return Ok(());
        }
        Err(e) => e,
    };
    r.error("ibv_modify_qp", err.error(), EINVAL);
    let (a, _) = err.into_parts();
    r.check("A's QP state", a.state()?, QpState::Init);

    r.step(format!(
        "meanwhile QP B {} is brought up correctly toward A (timeout=8 retry_cnt=2) and SENDs",
        show::qpn(qb)
    ));
    let b = b.bring_up(
        &InitAttr::default(),
        &RtrAttr::new(qa, PSN_A, v4),
        &RtsAttr::new(PSN_B).timeout(8).retry_cnt(2),
    )?;
    let mr = rig.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
    let src = [mr.sge(0..64)];
    b.post_send_one(SendWr::send(1, &src))?;
    let wc = must_wc(&cq_b, "B's SEND")?;
    r.status("B's completion", &wc, WcStatus::RetryExcErr);
    r.say("A, stuck in INIT, drops B's packets without an answer: B's retries run out");

    r.step("the fix: pick the source GID by content (the RoCE v2 ::ffff:a.b.c.d entry)");
    r.say(format!(
        "Context::roce_v2_ipv4_gid -> index {} {}",
        rig.gid.index,
        show::gid(&v4.raw())
    ));
    let a = a.to_rtr(&RtrAttr::new(qb, PSN_B, v4))?;
    r.check("A's QP state", a.state()?, QpState::Rtr);
    r.fix(
        "choose sgid_index by type and content (RoCE v2, IPv4-mapped), never by number; the \
         same GID index can mean another address on another machine",
    );
    r.hardware(
        "the same: the GID table is the kernel's, and index 0 is the link-local entry on any \
         RoCE NIC.",
    );
    Ok(())
}
