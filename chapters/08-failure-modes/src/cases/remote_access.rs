//! Case 1, `remote-access`: an RDMA WRITE into memory the target did not open for writing.
//!
//! Remote access is granted twice, and both must allow it: by the memory region
//! (`ibv_reg_mr(..., IBV_ACCESS_REMOTE_WRITE)`) and by the responder's QP
//! (`qp_access_flags` at INIT). The two refusals give different statuses on rxe.

use course::Outcome as Result;
use course::show;
use lab::*;

use super::{region, write_must_fail};
use crate::report::Report;
use crate::rig::{Pair, PairCfg, Rig};

pub fn run(r: &mut Report) -> Result<()> {
    let rig = Rig::open()?;
    let p = Pair::connect(&rig, PairCfg::default())?;
    r.step(format!(
        "connect {} on {} (one device, {})",
        p.describe(),
        rig.ctx.name(),
        show::gid(&rig.gid.gid.raw())
    ));
    let sentinel = rig.pd.reg_mr(64, AccessFlags::LOCAL_WRITE)?;

    // The mistake: the target region allows remote READ, not remote WRITE.
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    let target = rig.pd.reg_mr(4096, access)?;
    r.step(format!(
        "B registers 4096 bytes with {access} (no REMOTE_WRITE): {}",
        region(&target.remote())
    ));
    r.step("B posts a sentinel RECV; A posts an RDMA WRITE of 64 bytes into B's region");
    let t = target.remote();
    let src = [p.mr_a.sge(0..64)];
    let write = SendWr::write(1, &src, t.addr, t.rkey);
    write_must_fail(r, &p, &sentinel, write, WcStatus::RemAccessErr)?;
    r.say(
        "the responder's QP went to ERR silently: no async event, only the flushed RECV shows it",
    );

    // The same WRITE into a region that allows it, through a QP that does not.
    let rig = Rig::open()?;
    let cfg = PairCfg {
        b_qp_access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        ..PairCfg::default()
    };
    let p = Pair::connect(&rig, cfg)?;
    let sentinel = rig.pd.reg_mr(64, AccessFlags::LOCAL_WRITE)?;
    let target = rig.pd.reg_mr(4096, AccessFlags::ALL_REMOTE)?;
    r.step(format!(
        "again with fresh QPs: B's region allows REMOTE_WRITE, but B's QP was brought up with \
         qp_access_flags {}",
        cfg.b_qp_access
    ));
    let t = target.remote();
    let src = [p.mr_a.sge(0..64)];
    let write = SendWr::write(1, &src, t.addr, t.rkey);
    write_must_fail(r, &p, &sentinel, write, WcStatus::RemInvReqErr)?;
    r.fix(
        "register the target with IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE and bring its \
         QP to INIT with IBV_ACCESS_REMOTE_WRITE in qp_access_flags (lab's InitAttr default)",
    );
    r.hardware(
        "a NIC also completes the WRITE with IBV_WC_REM_ACCESS_ERR and moves the responder's QP \
         to ERR, and typically raises IBV_EVENT_QP_ACCESS_ERR on the responder; rxe raises no \
         async event. A QP-level refusal may be reported as REM_ACCESS_ERR instead of \
         REM_INV_REQ_ERR.",
    );
    Ok(())
}
