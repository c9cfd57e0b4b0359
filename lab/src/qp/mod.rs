//! Queue pairs: creation, the state machine, posting work.
//!
//! Verbs: `ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp`, `ibv_post_send`, `ibv_post_recv`,
//! `ibv_destroy_qp`.
//!
//! A reliable-connected (RC) QP must be walked through its states before it can send:
//!
//! ```text
//!   RESET --to_init--> INIT --to_rtr--> RTR --to_rts--> RTS
//!   (created)    (port, access)  (peer's QPN, PSN, GID,   (own PSN, timeout,
//!                                 path MTU, read credits)   retries, read credits)
//! ```
//!
//! [`QueuePair<S>`] carries its state in its type: only `QueuePair<Rts>` has `post_send`, and
//! each transition consumes the QP and returns it in the next state. For experiments that
//! break the rules on purpose (chapters 05 and 08), [`QueuePair::modify`] sends any attributes
//! with any mask in any state, and [`QueuePair::query`] reads back what the QP really is; the
//! typed handle does not change then ([`QueuePair::assume_state`] re-labels it).
//!
//! [`transition`] is the table of legal RC transitions with their required and optional
//! attribute masks (IBTA spec, `ibv_modify_qp(3)`); `lab` uses it to explain an EINVAL.
//!
//! Layout of this module: `state_machine.rs` (pure: the states, the legal transitions and their
//! attribute masks), `attr.rs` (the attributes: creation, `ibv_modify_qp`, what
//! `ibv_query_qp` reports), `hints.rs` (what an errno from a verb most likely means), `rc.rs`
//! and `ud.rs` (the typed transitions of each transport), and here the queue pair itself:
//! creation, the general operations, posting.

use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys::*;

use crate::cq::CqInner;
use crate::device::{Context, Gid, Mtu};
use crate::error::{Error, Hint, HintCode, Result, Verb, ptr, rc, report_drop_failure};
use crate::mr::AccessFlags;
use crate::pd::{PdInner, ProtectionDomain};
use crate::srq::SrqInner;
use crate::wr::{RecvWr, SendWr};

/// Default `timeout` (4.096 us * 2^14 = 67 ms per try).
pub const DEFAULT_TIMEOUT: u8 = 14;
/// Default `retry_cnt`: 6. **Never 7 on rxe**, which treats 7 as "retry forever" (the spec says
/// 7 retries), so a dead peer would never produce `IBV_WC_RETRY_EXC_ERR`.
pub const DEFAULT_RETRY_CNT: u8 = 6;
/// Default `rnr_retry`: 6 retries. 7 means "retry forever" (spec and rxe): a SEND to a peer
/// that never posts a RECV would then never complete.
pub const DEFAULT_RNR_RETRY: u8 = 6;
/// Default `min_rnr_timer`: 12 (0.64 ms between RNR retries).
pub const DEFAULT_MIN_RNR_TIMER: u8 = 12;
/// Default `max_rd_atomic` / `max_dest_rd_atomic` (clamped to the device's limits). Leaving
/// them at 0 is a classic hang: a READ from a QP with `max_rd_atomic` 0 never completes on rxe.
pub const DEFAULT_RD_ATOMIC: u8 = 16;
/// Default GRH hop limit.
pub const DEFAULT_HOP_LIMIT: u8 = 64;

mod attr;
mod hints;
mod rc;
pub(crate) mod state_machine;
mod ud;

pub use attr::*;
pub use state_machine::*;

use hints::post_send_hint;

/// Typestate markers for [`QueuePair`].
pub mod state {
    /// Just created (`IBV_QPS_RESET`).
    #[derive(Debug)]
    pub struct Reset;
    /// Initialised (`IBV_QPS_INIT`): receives may be posted.
    #[derive(Debug)]
    pub struct Init;
    /// Ready to receive (`IBV_QPS_RTR`).
    #[derive(Debug)]
    pub struct Rtr;
    /// Ready to send (`IBV_QPS_RTS`): the only state with `post_send`.
    #[derive(Debug)]
    pub struct Rts;
    /// Error (`IBV_QPS_ERR`): outstanding work completes with `IBV_WC_WR_FLUSH_ERR`.
    #[derive(Debug)]
    pub struct Error;
}

/// The typestate marker trait (sealed).
pub trait QpTypeState: private::Sealed + Send + Sync + 'static {
    /// The run-time state this marker stands for.
    const STATE: QpState;
}
mod private {
    pub trait Sealed {}
}
macro_rules! typestate {
    ($($t:ident => $s:ident),*) => {$(
        impl private::Sealed for state::$t {}
        impl QpTypeState for state::$t { const STATE: QpState = QpState::$s; }
    )*};
}
typestate!(Reset => Reset, Init => Init, Rtr => Rtr, Rts => Rts, Error => Err);

struct QpInner {
    qp: NonNull<ibv_qp>,
    ctx: Context,
    cap: QpCap,
    /// The port set at INIT (used as the default for RTR).
    port: u8,
    qp_type: QpType,
    destroyed: bool,
    /// The rdma_cm id whose `id->qp` this is (`cm::CmId::create_qp`): kept alive until the QP
    /// is destroyed, then told to forget it.
    cm_id: Option<Arc<crate::cm::IdInner>>,
    // Parents, kept alive until after ibv_destroy_qp (fields drop after Drop::drop).
    _pd: Arc<PdInner>,
    _send_cq: Arc<CqInner>,
    _recv_cq: Arc<CqInner>,
    _srq: Option<Arc<SrqInner>>,
}

// SAFETY: verbs objects may be used from any thread (libibverbs is thread-safe).
unsafe impl Send for QpInner {}
// SAFETY: as above; post/poll verbs lock internally.
unsafe impl Sync for QpInner {}

impl Drop for QpInner {
    fn drop(&mut self) {
        if self.destroyed {
            return;
        }
        // SAFETY: the QP is alive and destroyed exactly once; its CQs and PD are still alive
        // (we hold Arcs, released after this).
        let ret = unsafe { ibv_destroy_qp(self.qp.as_ptr()) };
        if let (0, Some(id)) = (ret, &self.cm_id) {
            id.forget_qp();
        }
        if let Err(e) = rc(ret, |errno| Error::failed(Verb::DestroyQp, errno)) {
            report_drop_failure("ibv_destroy_qp", &e);
        }
    }
}

/// A queue pair (`struct ibv_qp`, `ibv_create_qp(3)`), RC, in typestate `S`.
pub struct QueuePair<S: QpTypeState = state::Rts> {
    inner: QpInner,
    _state: PhantomData<S>,
}

impl<S: QpTypeState> fmt::Debug for QueuePair<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuePair")
            .field("qp_num", &format_args!("{:#08x}", self.qp_num()))
            .field("typestate", &S::STATE)
            .finish()
    }
}

/// A failed typed transition: the error, and the QP back in the state it was in (as far as
/// the type knows; [`QueuePair::query`] tells the truth). Converts into [`enum@Error`] with `?`
/// (the QP is then dropped, i.e. destroyed).
pub struct TransitionError<S: QpTypeState> {
    inner: Box<(QueuePair<S>, Error)>,
}

impl<S: QpTypeState> TransitionError<S> {
    fn new(qp: QueuePair<S>, error: Error) -> Self {
        TransitionError {
            inner: Box::new((qp, error)),
        }
    }
    /// The error.
    pub fn error(&self) -> &Error {
        &self.inner.1
    }
    /// The QP, still usable (e.g. to try another transition or to query it).
    pub fn qp(&self) -> &QueuePair<S> {
        &self.inner.0
    }
    /// Takes the QP and the error apart.
    pub fn into_parts(self) -> (QueuePair<S>, Error) {
        *self.inner
    }
}

impl<S: QpTypeState> fmt::Debug for TransitionError<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransitionError")
            .field("qp", &self.inner.0)
            .field("error", &self.inner.1)
            .finish()
    }
}

impl<S: QpTypeState> fmt::Display for TransitionError<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.inner.1, f)
    }
}

impl<S: QpTypeState> std::error::Error for TransitionError<S> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner.1.source()
    }
}

impl<S: QpTypeState> From<TransitionError<S>> for Error {
    fn from(t: TransitionError<S>) -> Error {
        t.inner.1
    }
}

impl QpInitAttr<'_> {
    /// The C struct (`struct ibv_qp_init_attr`) for `ibv_create_qp` / `rdma_create_qp`.
    pub(crate) fn raw(&self) -> ibv_qp_init_attr {
        ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: self.send_cq.inner.cq.as_ptr(),
            recv_cq: self.recv_cq.inner.cq.as_ptr(),
            srq: self
                .srq
                .map_or(std::ptr::null_mut(), |s| s.inner.srq.as_ptr()),
            cap: ibv_qp_cap {
                max_send_wr: self.cap.max_send_wr,
                max_recv_wr: self.cap.max_recv_wr,
                max_send_sge: self.cap.max_send_sge,
                max_recv_sge: self.cap.max_recv_sge,
                max_inline_data: self.cap.max_inline_data,
            },
            qp_type: self.qp_type.raw(),
            sq_sig_all: self.sq_sig_all as i32,
        }
    }
}

impl ProtectionDomain {
    /// Creates an RC queue pair in RESET (`ibv_create_qp(3)`).
    pub fn create_qp(&self, init: &QpInitAttr<'_>) -> Result<QueuePair<state::Reset>> {
        let mut ia = init.raw();
        // SAFETY: the PD and both CQs are alive; `ia` is a valid in/out pointer.
        let qp = unsafe { ibv_create_qp(self.inner.pd.as_ptr(), &mut ia) };
        let qp = ptr(qp, |errno| {
            Error::failed(Verb::CreateQp, errno)
                .with_hint((errno.0 == libc::EINVAL).then_some(Hint::new(HintCode::QpCapacity)))
        })?;
        Ok(QueuePair::wrap(qp, self, init, ia.cap, 1, None))
    }
}

impl<S: QpTypeState> QueuePair<S> {
    /// Wraps a QP just created on `pd` (by `ibv_create_qp`, or by `rdma_create_qp` for `cm`).
    fn wrap(
        qp: NonNull<ibv_qp>,
        pd: &ProtectionDomain,
        init: &QpInitAttr<'_>,
        c: ibv_qp_cap,
        port: u8,
        cm_id: Option<Arc<crate::cm::IdInner>>,
    ) -> QueuePair<S> {
        QueuePair {
            inner: QpInner {
                qp,
                ctx: pd.inner.ctx.clone(),
                cap: QpCap {
                    max_send_wr: c.max_send_wr,
                    max_recv_wr: c.max_recv_wr,
                    max_send_sge: c.max_send_sge,
                    max_recv_sge: c.max_recv_sge,
                    max_inline_data: c.max_inline_data,
                },
                port,
                qp_type: init.qp_type,
                destroyed: false,
                cm_id,
                _pd: pd.inner.clone(),
                _send_cq: init.send_cq.inner.clone(),
                _recv_cq: init.recv_cq.inner.clone(),
                _srq: init.srq.map(|s| s.inner.clone()),
            },
            _state: PhantomData,
        }
    }
}

impl QueuePair<state::Init> {
    /// A QP that `rdma_create_qp` made on a `cm::CmId` (in INIT already); it keeps the id
    /// alive, and its destroy clears `id->qp`.
    pub(crate) fn from_cm(
        qp: NonNull<ibv_qp>,
        pd: &ProtectionDomain,
        init: &QpInitAttr<'_>,
        cap: ibv_qp_cap,
        port: u8,
        id: Arc<crate::cm::IdInner>,
    ) -> QueuePair<state::Init> {
        QueuePair::wrap(qp, pd, init, cap, port.max(1), Some(id))
    }
}

impl<S: QpTypeState> QueuePair<S> {
    fn relabel<T: QpTypeState>(self) -> QueuePair<T> {
        QueuePair {
            inner: self.inner,
            _state: PhantomData,
        }
    }

    pub(crate) fn raw(&self) -> *mut ibv_qp {
        self.inner.qp.as_ptr()
    }

    /// The QP number (`qp->qp_num`), what the peer needs as `dest_qp_num`.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: the QP is alive while `self` is.
        unsafe { (*self.inner.qp.as_ptr()).qp_num }
    }

    /// RC or UD.
    pub fn qp_type(&self) -> QpType {
        self.inner.qp_type
    }

    /// The capacities granted at creation.
    pub fn cap(&self) -> QpCap {
        self.inner.cap
    }

    /// The device context.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The state the type says the QP is in.
    pub fn typestate(&self) -> QpState {
        S::STATE
    }

    /// Raw `ibv_modify_qp(3)` with any attributes and mask, in any state: the escape hatch for
    /// attempting illegal transitions on purpose. On failure the error names the transition,
    /// the mask, the errno and what the transition table says is wrong. The typed handle is
    /// not changed: use [`QueuePair::assume_state`] if you moved the QP yourself.
    pub fn modify(&self, attr: &QpAttr) -> Result<()> {
        let mut a = attr.clone();
        // SAFETY: the QP is alive and `a.attr` is a valid attribute struct.
        let ret =
            unsafe { ibv_modify_qp(self.inner.qp.as_ptr(), &mut a.attr, a.mask.bits() as i32) };
        rc(ret, |errno| {
            // The state the QP is really in (the modify failed, so it did not change). Not
            // `qp->state`: libibverbs only updates that on a successful modify, so it misses
            // the device moving the QP to ERR on its own.
            let from = self.state().unwrap_or_else(|_| {
                // SAFETY: the QP is alive; `state` is a plain field.
                QpState::from_raw(unsafe { (*self.inner.qp.as_ptr()).state })
            });
            let to = attr.target_state().unwrap_or(from);
            let mut e = Error::failed(Verb::ModifyQp, errno)
                .args(format!("{from} -> {to}, mask {}", attr.mask));
            for h in self.modify_hints(from, to, attr, errno) {
                e = e.with_hint(h);
            }
            e
        })
    }

    /// `ibv_query_qp(3)`: what the QP really is now.
    pub fn query(&self) -> Result<QpInfo> {
        // SAFETY: plain data; all-zero is valid.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: plain data; all-zero is valid.
        let mut ia: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // Every attribute below IBV_QP_RATE_LIMIT: libibverbs refuses the mask with EOPNOTSUPP
        // if it has RATE_LIMIT or a higher bit.
        let all = QpAttrMask::RATE_LIMIT.bits() - 1;
        // SAFETY: the QP is alive; out-pointers are valid.
        let ret = unsafe { ibv_query_qp(self.inner.qp.as_ptr(), &mut a, all as i32, &mut ia) };
        rc(ret, |errno| Error::failed(Verb::QueryQp, errno))?;
        let ah = a.ah_attr;
        Ok(QpInfo {
            state: QpState::from_raw(a.qp_state),
            path_mtu: Mtu::from_raw(a.path_mtu),
            qkey: a.qkey,
            rq_psn: a.rq_psn,
            sq_psn: a.sq_psn,
            dest_qp_num: a.dest_qp_num,
            access: AccessFlags::from_bits(a.qp_access_flags),
            pkey_index: a.pkey_index,
            port_num: a.port_num,
            av: AddressVector {
                // SAFETY: reading the bytes of a plain-data union.
                dgid: Gid(unsafe { ah.grh.dgid.raw }),
                sgid_index: ah.grh.sgid_index,
                hop_limit: ah.grh.hop_limit,
                traffic_class: ah.grh.traffic_class,
                flow_label: ah.grh.flow_label,
                sl: ah.sl,
                port_num: ah.port_num,
                dlid: ah.dlid,
                is_global: ah.is_global != 0,
            },
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            cap: QpCap {
                max_send_wr: a.cap.max_send_wr,
                max_recv_wr: a.cap.max_recv_wr,
                max_send_sge: a.cap.max_send_sge,
                max_recv_sge: a.cap.max_recv_sge,
                max_inline_data: a.cap.max_inline_data,
            },
        })
    }

    /// The current state (`ibv_query_qp(3)` with `IBV_QP_STATE`).
    pub fn state(&self) -> Result<QpState> {
        Ok(self.query()?.state)
    }

    fn transition_to<T: QpTypeState>(
        self,
        attr: QpAttr,
    ) -> std::result::Result<QueuePair<T>, TransitionError<S>> {
        match self.modify(&attr) {
            Ok(()) => Ok(self.relabel()),
            Err(error) => Err(TransitionError::new(self, error)),
        }
    }

    /// Moves the QP to ERR (`ibv_modify_qp(3)`): outstanding and later work requests complete
    /// with `IBV_WC_WR_FLUSH_ERR`.
    pub fn to_error(self) -> std::result::Result<QueuePair<state::Error>, TransitionError<S>> {
        self.transition_to(QpAttr::new().state(QpState::Err))
    }

    /// Moves the QP back to RESET (`ibv_modify_qp(3)`), from any state: queues are emptied
    /// (without completions) and the QP can be brought up again, even toward a new peer.
    pub fn reset(self) -> std::result::Result<QueuePair<state::Reset>, TransitionError<S>> {
        self.transition_to(QpAttr::new().state(QpState::Reset))
    }

    /// Re-labels the typed handle after moving the QP with [`QueuePair::modify`]. No verb is
    /// called and nothing is checked: posting in the wrong state just fails with EINVAL.
    pub fn assume_state<T: QpTypeState>(self) -> QueuePair<T> {
        self.relabel()
    }

    /// `ibv_post_recv(3)`: posts the receive work requests as one chain. Allowed from INIT on
    /// (in RESET it fails with EINVAL). Allocates nothing.
    pub fn post_recv(&self, wrs: &mut [RecvWr<'_>]) -> Result<()> {
        let n = wrs.len();
        if n == 0 {
            return Ok(());
        }
        for i in 0..n - 1 {
            let next: *mut ibv_recv_wr = &mut wrs[i + 1].wr;
            wrs[i].wr.next = next;
        }
        wrs[n - 1].wr.next = std::ptr::null_mut();
        let first: *mut ibv_recv_wr = &mut wrs[0].wr;
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: the QP is alive; the chain links valid WRs living in `wrs`, whose SGEs are
        // borrowed for the call (the provider copies them into the queue).
        let ret = unsafe { ibv_post_recv(self.inner.qp.as_ptr(), first, &mut bad) };
        if ret == 0 {
            return Ok(());
        }
        let index = chain_index(first as usize, bad as usize, size_of::<ibv_recv_wr>(), n);
        rc(ret, |errno| {
            Error::failed(Verb::PostRecv, errno)
                .at_wr(index)
                .with_hint(self.post_recv_hint(errno, &wrs[index.min(n - 1)]))
        })
    }

    /// Posts one receive work request (`ibv_post_recv(3)`).
    pub fn post_recv_one(&self, wr: RecvWr<'_>) -> Result<()> {
        self.post_recv(&mut [wr])
    }

    /// `ibv_post_send(3)` in any state, bypassing the typestate: for showing what posting
    /// before RTS does. On rxe it returns EINVAL **but queues the work request anyway**; it
    /// goes out with the next successful post once the QP is in RTS (a "ghost send").
    pub fn post_send_any_state(&self, wrs: &mut [SendWr<'_>]) -> Result<()> {
        post_send_impl(&self.inner, wrs)
    }

    /// Destroys the QP now (`ibv_destroy_qp(3)`), reporting failure.
    pub fn destroy(mut self) -> Result<()> {
        self.inner.destroyed = true;
        // SAFETY: the QP is alive; `destroyed` stops Drop from destroying it again.
        let ret = unsafe { ibv_destroy_qp(self.inner.qp.as_ptr()) };
        if let (0, Some(id)) = (ret, &self.inner.cm_id) {
            id.forget_qp();
        }
        rc(ret, |errno| Error::failed(Verb::DestroyQp, errno))
    }
}

fn chain_index(first: usize, bad: usize, size: usize, n: usize) -> usize {
    if bad < first {
        return 0;
    }
    ((bad - first) / size).min(n.saturating_sub(1))
}

fn post_send_impl(inner: &QpInner, wrs: &mut [SendWr<'_>]) -> Result<()> {
    let n = wrs.len();
    if n == 0 {
        return Ok(());
    }
    for i in 0..n - 1 {
        let next: *mut ibv_send_wr = &mut wrs[i + 1].wr;
        wrs[i].wr.next = next;
    }
    wrs[n - 1].wr.next = std::ptr::null_mut();
    let first: *mut ibv_send_wr = &mut wrs[0].wr;
    let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
    // SAFETY: the QP is alive; the chain links valid WRs living in `wrs`. SGEs point at
    // registered memory (validated by the device through the lkey) or, for inline WRs, at
    // borrowed slices the provider copies during this call.
    let ret = unsafe { ibv_post_send(inner.qp.as_ptr(), first, &mut bad) };
    if ret == 0 {
        return Ok(());
    }
    let index = chain_index(first as usize, bad as usize, size_of::<ibv_send_wr>(), n);
    rc(ret, |errno| {
        Error::failed(Verb::PostSend, errno)
            .at_wr(index)
            .with_hint(post_send_hint(inner, errno, &wrs[index]))
    })
}

impl QueuePair<state::Rts> {
    /// `ibv_post_send(3)`: posts the work requests as one chain (one call, one doorbell).
    /// Allocates nothing and copies no payload. On failure the error says which WR of the
    /// chain was refused (those before it were posted).
    pub fn post_send(&self, wrs: &mut [SendWr<'_>]) -> Result<()> {
        post_send_impl(&self.inner, wrs)
    }

    /// Posts one send work request (`ibv_post_send(3)`).
    pub fn post_send_one(&self, wr: SendWr<'_>) -> Result<()> {
        post_send_impl(&self.inner, &mut [wr])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use QpAttrMask as M;

    #[test]
    fn rc_bring_up_masks() {
        let t = transition(QpState::Reset, QpState::Init).unwrap();
        assert_eq!(t.required, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS);
        let t = transition(QpState::Init, QpState::Rtr).unwrap();
        assert_eq!(
            t.required,
            M::AV
                | M::PATH_MTU
                | M::DEST_QPN
                | M::RQ_PSN
                | M::MAX_DEST_RD_ATOMIC
                | M::MIN_RNR_TIMER
        );
        let t = transition(QpState::Rtr, QpState::Rts).unwrap();
        assert_eq!(
            t.required,
            M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC
        );
    }

    #[test]
    fn illegal_shortcuts_are_illegal() {
        assert!(transition(QpState::Init, QpState::Rts).is_none());
        assert!(transition(QpState::Reset, QpState::Rtr).is_none());
        assert!(transition(QpState::Reset, QpState::Rts).is_none());
        assert!(transition(QpState::Err, QpState::Init).is_none());
        let p = check_transition(QpState::Init, QpState::Rts, M::STATE).unwrap_err();
        let s = p.to_string();
        assert!(s.contains("INIT -> RTS is not a legal transition"), "{s}");
        assert!(s.contains("skips RTR"), "{s}");
    }

    #[test]
    fn any_state_can_reset_or_fail() {
        for s in [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Sqd,
            QpState::Err,
        ] {
            assert!(transition(s, QpState::Reset).is_some());
            assert!(transition(s, QpState::Err).is_some());
        }
    }

    #[test]
    fn ud_table_differs() {
        let t = transition_for(QpType::Ud, QpState::Reset, QpState::Init).unwrap();
        assert_eq!(t.required, M::PKEY_INDEX | M::PORT | M::QKEY);
        let t = transition_for(QpType::Ud, QpState::Rtr, QpState::Rts).unwrap();
        assert_eq!(t.required, M::SQ_PSN);
        let p = check_transition_for(
            QpType::Ud,
            QpState::Reset,
            QpState::Init,
            M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
        )
        .unwrap_err();
        assert_eq!(
            p,
            MaskProblem::Mask {
                missing: M::QKEY,
                not_allowed: M::ACCESS_FLAGS
            }
        );
    }

    #[test]
    fn missing_attribute_is_named() {
        let mask = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MIN_RNR_TIMER;
        let p = check_transition(QpState::Init, QpState::Rtr, mask).unwrap_err();
        assert_eq!(
            p,
            MaskProblem::Mask {
                missing: M::MAX_DEST_RD_ATOMIC,
                not_allowed: M::empty()
            }
        );
        assert!(p.to_string().contains("IBV_QP_MAX_DEST_RD_ATOMIC"));
        let p = check_transition(
            QpState::Reset,
            QpState::Init,
            M::STATE | M::PORT | M::PKEY_INDEX | M::ACCESS_FLAGS | M::SQ_PSN,
        )
        .unwrap_err();
        assert!(p.to_string().contains("not accepted"), "{p}");
    }

    #[test]
    fn builder_sets_field_and_mask_together() {
        let a = QpAttr::new()
            .state(QpState::Rts)
            .timeout(14)
            .retry_cnt(6)
            .rnr_retry(6)
            .sq_psn(0x123)
            .max_rd_atomic(16);
        assert_eq!(
            a.mask(),
            M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC
        );
        assert!(check_transition(QpState::Rtr, QpState::Rts, a.mask()).is_ok());
        assert_eq!(a.attr.sq_psn, 0x123);
        assert_eq!(a.target_state(), Some(QpState::Rts));
        let b = a.clone().with_mask(M::STATE);
        assert_eq!(b.mask(), M::STATE);
    }

    #[test]
    fn masks_match_rdma_sys() {
        use rdma_sys::ibv_qp_attr_mask as R;
        assert_eq!(M::STATE.bits(), R::IBV_QP_STATE.0);
        assert_eq!(M::AV.bits(), R::IBV_QP_AV.0);
        assert_eq!(M::MAX_DEST_RD_ATOMIC.bits(), R::IBV_QP_MAX_DEST_RD_ATOMIC.0);
        assert_eq!(M::DEST_QPN.bits(), R::IBV_QP_DEST_QPN.0);
        assert_eq!(M::RATE_LIMIT.bits(), R::IBV_QP_RATE_LIMIT.0);
        assert_eq!(M::SQ_PSN.bits(), R::IBV_QP_SQ_PSN.0);
    }

    #[test]
    fn defaults_never_hang_on_rxe() {
        let r = RtsAttr::new(1);
        assert!(r.retry_cnt <= 6);
        assert!(r.rnr_retry < 7);
        assert_eq!(r.timeout, 14);
        assert_eq!(RtrAttr::new(1, 2, Gid::default()).min_rnr_timer, 12);
        assert_eq!(QpState::Rts.to_string(), "RTS");
        assert_eq!(QpState::Err.name(), "IBV_QPS_ERR");
    }
}
