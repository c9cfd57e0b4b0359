//! Plumbing shared by the cases: open the device, connect two RC queue pairs on it, wait for
//! completions with a deadline. Nothing here is new: chapters 01-07 did all of it by hand.
//!
//! Every case builds its own objects (a fresh device context, PD, CQs, QPs), so one case's
//! broken QP can never disturb the next one, and the async events a case sees are its own.

use std::time::{Duration, Instant};

// What a case returns: `Err` is an *unexpected* failure (a verb that should have worked), in
// the error style of every chapter (`course::Failure`).
use course::Outcome as Result;
use course::show;
use lab::*;

/// How long to wait for a completion that should come (it takes milliseconds; TCG and a busy
/// machine can make that much longer).
pub const SHOULD_COME: Duration = Duration::from_secs(10);
/// How long to watch for a completion that, on rxe, never comes ("waits forever").
pub const FOREVER_WINDOW: Duration = Duration::from_secs(2);
/// How long to watch for a completion that should not come at all.
pub const QUIET_WINDOW: Duration = Duration::from_millis(300);

/// errno values the cases expect (`EINVAL (22)`, `ENOMEM (12)` on Linux).
pub const EINVAL: i32 = 22;
pub const ENOMEM: i32 = 12;

/// The first PSNs of QP A and QP B (any 24-bit values work; fixed ones keep runs alike).
pub const PSN_A: u32 = 0x00a0a0;
pub const PSN_B: u32 = 0x00b0b0;

/// The device, its RoCE v2 GID and one protection domain.
pub struct Rig {
    pub ctx: Context,
    pub gid: GidEntry,
    pub pd: ProtectionDomain,
}

impl Rig {
    /// Opens the device (`$LAB_DEVICE` or the first one) and allocates a PD.
    pub fn open() -> Result<Rig> {
        let ctx = Context::open_default()?;
        let gid = ctx.roce_v2_ipv4_gid(1)?;
        let pd = ctx.alloc_pd()?;
        Ok(Rig { ctx, gid, pd })
    }
}

/// How to connect a pair. The defaults are lab's (finite retries, path MTU clamped).
#[derive(Clone, Copy)]
pub struct PairCfg {
    /// A's RTS attributes: its ack timeout, retry_cnt and rnr_retry matter in these cases.
    pub a_rts: RtsAttr,
    /// B's RTR `min_rnr_timer`: how long B asks a sender to wait after an RNR NAK.
    pub b_min_rnr_timer: u8,
    /// The remote operations B's QP accepts (`qp_access_flags`).
    pub b_qp_access: AccessFlags,
    /// A path MTU for both QPs, *not* clamped to the port's active MTU.
    pub mtu_unclamped: Option<Mtu>,
    /// A's CQ size (entries asked for; rxe rounds up).
    pub a_cqe: i32,
    /// B's CQ size (entries asked for; rxe rounds up).
    pub b_cqe: i32,
    /// A's send queue size.
    pub a_max_send_wr: u32,
}

impl Default for PairCfg {
    fn default() -> Self {
        PairCfg {
            a_rts: RtsAttr::new(PSN_A),
            b_min_rnr_timer: lab::qp::DEFAULT_MIN_RNR_TIMER,
            b_qp_access: AccessFlags::ALL_REMOTE,
            mtu_unclamped: None,
            a_cqe: 64,
            b_cqe: 64,
            a_max_send_wr: 64,
        }
    }
}

/// Two RC QPs on one device, connected to each other: A is the requester of every case, B the
/// responder. Each has its own CQ; `mr_a` is A's 4 KiB source buffer.
pub struct Pair {
    pub a: QueuePair,
    pub b: QueuePair,
    pub cq_a: CompletionQueue,
    pub cq_b: CompletionQueue,
    pub mr_a: MemoryRegion,
}

impl Pair {
    /// Creates and connects A and B in `rig.pd` (RESET -> INIT -> RTR -> RTS on both).
    pub fn connect(rig: &Rig, cfg: PairCfg) -> Result<Pair> {
        let cq_a = rig.ctx.create_cq(cfg.a_cqe, None)?;
        let cq_b = rig.ctx.create_cq(cfg.b_cqe, None)?;
        let a = rig.pd.create_qp(
            &QpInitAttr::rc(&cq_a, &cq_a)
                .max_send_wr(cfg.a_max_send_wr)
                .max_inline_data(0),
        )?;
        let b = rig
            .pd
            .create_qp(&QpInitAttr::rc(&cq_b, &cq_b).max_inline_data(0))?;
        let (qa, qb) = (a.qp_num(), b.qp_num());
        let gid = rig.gid.gid;
        let mut rtr_a = RtrAttr::new(qb, PSN_B, gid);
        let mut rtr_b = RtrAttr::new(qa, PSN_A, gid).min_rnr_timer(cfg.b_min_rnr_timer);
        if let Some(m) = cfg.mtu_unclamped {
            rtr_a = rtr_a.path_mtu_unclamped(m);
            rtr_b = rtr_b.path_mtu_unclamped(m);
        }
        let a = a.bring_up(&InitAttr::default(), &rtr_a, &cfg.a_rts)?;
        let b_init = InitAttr {
            access: cfg.b_qp_access,
            ..InitAttr::default()
        };
        let b = b.bring_up(&b_init, &rtr_b, &RtsAttr::new(PSN_B))?;
        let mr_a = rig.pd.reg_mr(4096, AccessFlags::ALL_REMOTE)?;
        Ok(Pair {
            a,
            b,
            cq_a,
            cq_b,
            mr_a,
        })
    }

    /// "QP A qpn=... -> QP B qpn=...", for the first step of a case.
    pub fn describe(&self) -> String {
        format!(
            "QP A {} and QP B {}",
            show::qpn(self.a.qp_num()),
            show::qpn(self.b.qp_num())
        )
    }
}

/// Waits up to `timeout` for the next completion on `cq`; `None` if none came.
pub fn wait_wc(cq: &CompletionQueue, timeout: Duration) -> Result<Option<WorkCompletion>> {
    match cq.wait_one(timeout) {
        Ok(wc) => Ok(Some(wc)),
        Err(Error::CompletionTimeout { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Waits for the next completion, which must come: an unexpected silence is an error.
pub fn must_wc(cq: &CompletionQueue, what: &str) -> Result<WorkCompletion> {
    wait_wc(cq, SHOULD_COME)?.ok_or_else(|| {
        format!(
            "no completion for {what} within {:.3}s",
            SHOULD_COME.as_secs_f64()
        )
        .into()
    })
}

/// Waits for the next completion and measures how long it took from `since`.
pub fn timed_wc(
    cq: &CompletionQueue,
    since: Instant,
    timeout: Duration,
) -> Result<Option<(WorkCompletion, Duration)>> {
    Ok(wait_wc(cq, timeout)?.map(|wc| (wc, since.elapsed())))
}

/// Drains whatever is in `cq` now (after a short pause), returning it.
pub fn drain(cq: &CompletionQueue, pause: Duration) -> Result<Vec<WorkCompletion>> {
    std::thread::sleep(pause);
    let mut out = Vec::new();
    while let Some(wc) = cq.poll_one()? {
        out.push(wc);
    }
    Ok(out)
}

/// A duration as a fixed text ("2.000s"): only for constants, never for measured times.
pub fn secs(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}
