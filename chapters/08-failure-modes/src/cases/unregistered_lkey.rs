//! Case 4, `unregistered-lkey`: a local scatter/gather entry the device cannot use.
//!
//! Every SGE names memory by (address, length, lkey), and the device checks all three
//! against its table of registered regions before it reads a byte. Tutorials sometimes set
//! `lkey = 0` for a buffer that was never registered (a common claim: "lkey 0 is fine for a
//! local buffer"): that is not
//! "no key", it is a wrong key. On rxe in Linux 6.1 a wrong key and a wrong range give
//! different statuses; from 6.4 on both complete as flushed (course::kernel).

use course::Outcome as Result;
use course::kernel::RxeChange;
use course::show;
use lab::*;

use crate::report::Report;
use crate::rig::{Pair, PairCfg, QUIET_WINDOW, Rig, drain, must_wc};

/// A fresh pair; B posts one RECV; A SENDs from `sge`, which must fail with `want` while B is
/// unaffected (nothing reached the wire).
fn send_must_fail(
    r: &mut Report,
    what: &str,
    make_sge: impl Fn(&Pair) -> Sge,
    want: WcStatus,
) -> Result<()> {
    let rig = Rig::open()?;
    let p = Pair::connect(&rig, PairCfg::default())?;
    let mr_b = rig.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
    let sge = make_sge(&p);
    r.step(format!(
        "fresh {}; B posts a RECV; A SENDs 1 SGE: {} ({what})",
        p.describe(),
        sge_text(&sge)
    ));
    let dst = [mr_b.sge(..)];
    p.b.post_recv_one(RecvWr::new(100, &dst))?;
    let src = [sge];
    p.a.post_send_one(SendWr::send(1, &src))?;
    let wc = must_wc(&p.cq_a, "A's SEND")?;
    r.status("A's completion", &wc, want);
    r.check("A's QP state", p.a.state()?, QpState::Err);
    r.check("B's QP state", p.b.state()?, QpState::Rts);
    let at_b = drain(&p.cq_b, QUIET_WINDOW)?.len();
    r.check(
        "completions at B (its RECV is still posted: nothing went on the wire)",
        at_b,
        0,
    );
    Ok(())
}

fn sge_text(s: &Sge) -> String {
    // lkey 0 is the point of (a): print it as a plain number, not as a redacted key.
    let key = match s.lkey() {
        0 => "lkey 0".to_string(),
        k => show::lkey(k).to_string(),
    };
    format!("{} length={} {key}", show::addr(s.addr()), s.length())
}

pub fn run(r: &mut Report) -> Result<()> {
    // From Linux 6.4 on rxe moves the QP to ERR first and flushes the failed WR, so the
    // three statuses below all read WR_FLUSH_ERR there (course::kernel::RxeChange).
    let flushed = r.record(RxeChange::LocalErrorFlushed)?;
    let (bad_key, bad_range) = if flushed {
        (WcStatus::WrFlushErr, WcStatus::WrFlushErr)
    } else {
        (WcStatus::LocQpOpErr, WcStatus::LocProtErr)
    };
    // (a) lkey 0 on plain, unregistered memory. The buffer outlives the post and the
    // completion; the device never reads it anyway.
    let plain = vec![0x5au8; 64];
    let plain_addr = plain.as_ptr() as u64;
    send_must_fail(
        r,
        "an unregistered Vec<u8> with lkey 0",
        |_| Sge::raw(plain_addr, 64, 0),
        bad_key,
    )?;
    // (b) A valid lkey, an address 4 KiB past the end of its region.
    send_must_fail(
        r,
        "A's valid lkey, address 4 KiB past the end of its 4 KiB region",
        |p| Sge::raw(p.mr_a.addr() + 8192, 64, p.mr_a.lkey()),
        bad_range,
    )?;
    // (c) A valid lkey, a range straddling the end: 32 bytes inside, 32 outside.
    send_must_fail(
        r,
        "A's valid lkey, 32 bytes inside the region and 32 past its end",
        |p| Sge::raw(p.mr_a.addr() + 4096 - 32, 64, p.mr_a.lkey()),
        bad_range,
    )?;
    drop(plain);
    if flushed {
        r.say(
            "the status names no cause here: a bad key and a bad range both read WR_FLUSH_ERR; \
             that it is the first error after good traffic is what marks the failed WR",
        );
    } else {
        r.say("a bad key gives LOC_QP_OP_ERR; a good key with a bad range gives LOC_PROT_ERR");
    }
    r.fix(
        "register the buffer (ibv_reg_mr) and build SGEs from the region (MemoryRegion::sge \
         checks the range); for small payloads without registration use IBV_SEND_INLINE \
         (SendWr::send_inline)",
    );
    r.hardware(
        "NICs such as mlx5 typically report an invalid lkey as IBV_WC_LOC_PROT_ERR (4), the \
         status rxe keeps for a bad range; treat both as \"this SGE is not registered memory\".",
    );
    Ok(())
}
