//! Case 16, `cross-pd`: using memory of another protection domain.
//!
//! A protection domain is an isolation boundary: a QP may use only the memory regions of its
//! own PD, through its lkeys locally and through rkeys remotely. The keys of another PD on
//! the same device are real keys, just not valid here.

use course::Outcome as Result;
use course::kernel::RxeChange;
use course::show;
use lab::*;

use super::{region, write_must_fail};
use crate::report::Report;
use crate::rig::{Pair, PairCfg, QUIET_WINDOW, Rig, drain, must_wc};

pub fn run(r: &mut Report) -> Result<()> {
    // (a) A local SGE with the lkey of an MR of another PD.
    let rig = Rig::open()?;
    let p = Pair::connect(&rig, PairCfg::default())?;
    let pd2 = rig.ctx.alloc_pd()?;
    let other = pd2.reg_mr(4096, AccessFlags::ALL_REMOTE)?;
    r.step(format!(
        "connect {} in PD 1; register 4096 bytes in PD 2: {}",
        p.describe(),
        show::lkey(other.lkey())
    ));
    let mr_b = rig.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
    let dst = [mr_b.sge(..)];
    p.b.post_recv_one(RecvWr::new(100, &dst))?;
    r.step("B posts a RECV; A SENDs 64 bytes from PD 2's region");
    let src = [other.sge(0..64)];
    p.a.post_send_one(SendWr::send(1, &src))?;
    let wc = must_wc(&p.cq_a, "A's SEND")?;
    // The status depends on the kernel, as in case 4 (course::kernel::RxeChange).
    let want = if r.record(RxeChange::LocalErrorFlushed)? {
        WcStatus::WrFlushErr
    } else {
        WcStatus::LocQpOpErr
    };
    r.status("A's completion", &wc, want);
    r.check("A's QP state", p.a.state()?, QpState::Err);
    r.check("B's QP state", p.b.state()?, QpState::Rts);
    r.check(
        "completions at B (nothing was sent)",
        drain(&p.cq_b, QUIET_WINDOW)?.len(),
        0,
    );

    // (b) A remote key of an MR in another PD than the responder's QP.
    let rig = Rig::open()?;
    let p = Pair::connect(&rig, PairCfg::default())?;
    let pd2 = rig.ctx.alloc_pd()?;
    let other = pd2.reg_mr(4096, AccessFlags::ALL_REMOTE)?;
    let sentinel = rig.pd.reg_mr(64, AccessFlags::LOCAL_WRITE)?;
    let t = other.remote();
    r.step(format!(
        "fresh {} in PD 1; a region in PD 2 with every remote right: {}",
        p.describe(),
        region(&t)
    ));
    r.step("A writes 64 bytes into PD 2's region through B's QP (PD 1)");
    let src = [p.mr_a.sge(0..64)];
    let write = SendWr::write(1, &src, t.addr, t.rkey);
    write_must_fail(r, &p, &sentinel, write, WcStatus::RemAccessErr)?;
    r.fix(
        "allocate one PD per connection/tenant and register each buffer in the PD of the QPs \
         that use it; share a PD between QPs that may share memory",
    );
    r.hardware(
        "a foreign lkey typically gives IBV_WC_LOC_PROT_ERR (4) on a NIC (rxe says \
         LOC_QP_OP_ERR before Linux 6.4, as for lkey 0, and WR_FLUSH_ERR from 6.4 on); a foreign \
         rkey gives IBV_WC_REM_ACCESS_ERR everywhere.",
    );
    Ok(())
}
