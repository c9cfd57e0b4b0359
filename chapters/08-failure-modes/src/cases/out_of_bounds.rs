//! Case 3, `out-of-bounds`: a WRITE that starts inside the remote region and runs past its end.
//!
//! The responder checks the whole range `[remote_addr, remote_addr + length)` against the
//! region before it writes anything.

use course::Outcome as Result;
use course::show;
use lab::*;

use super::{region, write_must_fail};
use crate::report::Report;
use crate::rig::{Pair, PairCfg, Rig};

pub fn run(r: &mut Report) -> Result<()> {
    let rig = Rig::open()?;
    let mut p = Pair::connect(&rig, PairCfg::default())?;
    r.step(format!("connect {} on {}", p.describe(), rig.ctx.name()));
    let sentinel = rig.pd.reg_mr(64, AccessFlags::LOCAL_WRITE)?;
    let target = rig.pd.reg_mr(4096, AccessFlags::ALL_REMOTE)?;
    let t = target.remote();
    r.step(format!("B registers 4096 bytes: {}", region(&t)));
    let start = t.addr + 4096 - 64;
    r.step(format!(
        "A writes 128 bytes of 0xab at {} (64 bytes before the end: 64 inside, 64 outside)",
        show::addr(start)
    ));
    p.mr_a.as_mut_slice()[..128].fill(0xab);
    let src = [p.mr_a.sge(0..128)];
    let write = SendWr::write(1, &src, start, t.rkey);
    write_must_fail(r, &p, &sentinel, write, WcStatus::RemAccessErr)?;
    let inside_untouched = target.as_slice()[4096 - 64..].iter().all(|b| *b == 0);
    r.check(
        "the 64 in-range bytes at the end of B's region are still zero (nothing was written)",
        inside_untouched,
        true,
    );
    r.fix(
        "check offset + length against the region's length before posting \
         (RemoteRegion::addr_of does it); split or shorten the transfer",
    );
    r.hardware("the same status; whether in-range bytes were written first is not specified.");
    Ok(())
}
