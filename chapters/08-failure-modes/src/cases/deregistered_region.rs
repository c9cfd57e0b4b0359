//! Case 13, `deregistered-region`: the server deregisters a region; the client still has its
//! rkey.
//!
//! `ibv_dereg_mr` invalidates the keys at once. The peer is not told: its next one-sided
//! operation with the old rkey is refused, and the connection goes down with it.

use course::Outcome as Result;
use lab::*;

use super::{region, write_must_fail};
use crate::report::Report;
use crate::rig::{Pair, PairCfg, Rig, must_wc};

pub fn run(r: &mut Report) -> Result<()> {
    let rig = Rig::open()?;
    let p = Pair::connect(&rig, PairCfg::default())?;
    r.step(format!("connect {} on {}", p.describe(), rig.ctx.name()));
    let sentinel = rig.pd.reg_mr(64, AccessFlags::LOCAL_WRITE)?;
    let target = rig.pd.reg_mr(4096, AccessFlags::ALL_REMOTE)?;
    let t = target.remote();
    r.step(format!(
        "B (the server) registers 4096 bytes and gives A {}",
        region(&t)
    ));
    let src = [p.mr_a.sge(0..64)];
    r.step("A writes 64 bytes with that rkey");
    p.a.post_send_one(SendWr::write(1, &src, t.addr, t.rkey))?;
    let wc = must_wc(&p.cq_a, "the first WRITE")?;
    r.status("A's completion", &wc, WcStatus::Success);
    r.step("B deregisters the region (ibv_dereg_mr) without telling A");
    target.dereg()?;
    r.step("A writes again with the old rkey; B has a sentinel RECV posted");
    let write = SendWr::write(2, &src, t.addr, t.rkey);
    write_must_fail(r, &p, &sentinel, write, WcStatus::RemAccessErr)?;
    r.fix(
        "keep a region registered while any peer may use its rkey: tell peers first (a \
         message, then wait for their \"done\"), then deregister; to revoke access on purpose, \
         use memory windows (ibv_alloc_mw, ibv_bind_mw; no chapter of this course covers them)",
    );
    r.hardware("the same status, IBV_WC_REM_ACCESS_ERR, and both QPs in ERR.");
    Ok(())
}
