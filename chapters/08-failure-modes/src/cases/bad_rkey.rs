//! Case 2, `bad-rkey`: the right address, a wrong remote key.
//!
//! The rkey is the capability: the responder looks it up and checks address, length and
//! rights against the region it names. A typo, a stale key or a key of another device all
//! look the same to it.

use course::Outcome as Result;
use course::show;
use lab::*;

use super::{region, write_must_fail};
use crate::report::Report;
use crate::rig::{Pair, PairCfg, Rig};

pub fn run(r: &mut Report) -> Result<()> {
    let rig = Rig::open()?;
    let p = Pair::connect(&rig, PairCfg::default())?;
    r.step(format!("connect {} on {}", p.describe(), rig.ctx.name()));
    let sentinel = rig.pd.reg_mr(64, AccessFlags::LOCAL_WRITE)?;
    let target = rig.pd.reg_mr(4096, AccessFlags::ALL_REMOTE)?;
    let t = target.remote();
    r.step(format!(
        "B registers 4096 bytes with every remote right: {}",
        region(&t)
    ));
    let wrong = t.rkey.wrapping_add(1);
    r.step(format!(
        "A writes 64 bytes to {} with {} (rkey + 1)",
        show::addr(t.addr),
        show::rkey(wrong)
    ));
    let src = [p.mr_a.sge(0..64)];
    let write = SendWr::write(1, &src, t.addr, wrong);
    write_must_fail(r, &p, &sentinel, write, WcStatus::RemAccessErr)?;
    let untouched = target.as_slice().iter().all(|b| *b == 0);
    r.check("B's region untouched", untouched, true);
    r.fix(
        "use exactly the rkey the peer sent with that address (course::exchange carries addr, len \
         and rkey together: RemoteRegion)",
    );
    r.hardware("the same status, IBV_WC_REM_ACCESS_ERR, and both QPs in ERR.");
    Ok(())
}
