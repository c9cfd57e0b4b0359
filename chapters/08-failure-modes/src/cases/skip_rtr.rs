//! Case 6, `skip-rtr`: INIT -> RTS directly, as some tutorials do.
//!
//! RTR ("ready to receive") is where a QP learns who its peer is: the peer's QP number,
//! GID and first PSN, the path MTU. A QP cannot send before it can receive the peer's
//! acknowledgements, so INIT -> RTS is not a legal transition and `ibv_modify_qp` refuses it.

use course::Outcome as Result;
use course::show;
use lab::*;

use crate::report::Report;
use crate::rig::{EINVAL, PSN_A, Rig};

pub fn run(r: &mut Report) -> Result<()> {
    let rig = Rig::open()?;
    let cq = rig.ctx.create_cq(8, None)?;
    let qp = rig.pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
    let qpn = qp.qp_num();
    let qp = qp.to_init(&InitAttr::default())?;
    r.step(format!("create QP {} and move it to INIT", show::qpn(qpn)));

    // The raw escape hatch: the attributes and mask of the RTR -> RTS call (what to_rts
    // sends), sent from INIT instead.
    let attr = RtsAttr::new(PSN_A).qp_attr(1);
    r.step(format!(
        "ibv_modify_qp(INIT -> RTS) with mask {}",
        attr.mask()
    ));
    let res = qp.modify(&attr);
    r.errno("ibv_modify_qp", &res, EINVAL);
    r.check(
        "QP state afterwards (ibv_query_qp)",
        qp.state()?,
        QpState::Init,
    );

    r.step("the legal path: INIT -> RTR (toward a peer; here the QP itself) -> RTS");
    let qp = qp.to_rtr(&RtrAttr::new(qpn, PSN_A, rig.gid.gid))?;
    let qp = qp.to_rts(&RtsAttr::new(PSN_A))?;
    r.check("QP state", qp.state()?, QpState::Rts);
    r.fix("always RESET -> INIT -> RTR -> RTS; lab's typestate makes the shortcut a compile error");
    r.hardware("the same EINVAL: the state machine is checked by the kernel's ib_modify_qp_is_ok.");
    Ok(())
}
