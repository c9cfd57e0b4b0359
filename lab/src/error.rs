//! One error type for the whole crate: a variant per verb, naming the C call, with the errno
//! and, for the mistakes learners make, a hint.
//!
//! The verbs report failure in three different ways (see `man ibv_modify_qp` and friends):
//!
//! * most `int`-returning verbs (`ibv_modify_qp`, `ibv_post_send`, `ibv_dealloc_pd`, ...)
//!   return `0` or a **positive errno value**; `errno` itself is often left untouched;
//! * a few (`ibv_get_cq_event`, `ibv_get_async_event`, `ibv_query_gid`) return `-1` and set
//!   `errno`;
//! * pointer-returning verbs (`ibv_alloc_pd`, `ibv_reg_mr`, ...) return `NULL` and set `errno`.
//!
//! `rc` and `ptr` (crate-private) turn each convention into a `Result` in one line, git2-style:
//!
//! ```ignore
//! let pd = ptr(unsafe { ibv_alloc_pd(ctx) }, |e| Error::AllocPd { errno: e })?;
//! rc(unsafe { ibv_dealloc_pd(pd) }, |e| Error::DeallocPd { errno: e, hint: Hint::none() })?;
//! ```

use std::borrow::Cow;
use std::fmt;
use std::os::raw::c_int;
use std::ptr::NonNull;
use std::time::Duration;

// The QP state machine and the access flags are pure tables that depend on nothing here. The
// work completion and this module name each other: `Error::Completion` holds a
// `WorkCompletion`, and `WorkCompletion::ok` returns this `Error`.
use crate::cq::wc::WorkCompletion;
use crate::mr::access::AccessFlags;
use crate::qp::state_machine::{QpAttrMask, QpState};

/// `Result` with [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An errno value, printed as `EINVAL (22)` (docs/conventions.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// The calling thread's current `errno`.
    pub fn last() -> Errno {
        Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }

    /// The symbolic name (`"EINVAL"`), or `"E?"` for a number the one errno table
    /// ([`crate::errno_name`]) does not know.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "0",
            n => crate::errno_name(n).unwrap_or("E?"),
        }
    }

    /// `strerror(3)`'s text ("Invalid argument").
    pub fn description(self) -> String {
        let s = std::io::Error::from_raw_os_error(self.0).to_string();
        // std appends " (os error N)": the number is printed by Display already.
        match s.rfind(" (os error") {
            Some(i) => s[..i].to_string(),
            None => s,
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

/// An optional hint printed after an error ("hint: ..."). Empty for most errors.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hint(pub Option<Cow<'static, str>>);

impl Hint {
    /// No hint.
    pub fn none() -> Hint {
        Hint(None)
    }
    /// A hint with this text.
    pub fn new(s: impl Into<Cow<'static, str>>) -> Hint {
        Hint(Some(s.into()))
    }
    /// The text, if any.
    pub fn text(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl fmt::Display for Hint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(h) => write!(f, "\n  hint: {h}"),
            None => Ok(()),
        }
    }
}

/// Every way a `lab` call can fail. Each verb has its own variant, named after the C call, with
/// the errno ([`Errno`]) the call returned and, where a classic mistake is the likely cause, a
/// [`Hint`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `ibv_get_device_list(3)` failed (no `ib_uverbs` module?).
    #[error("ibv_get_device_list failed: {errno}{hint}")]
    GetDeviceList { errno: Errno, hint: Hint },
    /// No RDMA device (or none with the requested name).
    #[error("no RDMA device {wanted}(devices present: {available:?}){hint}")]
    NoDevice {
        wanted: String,
        available: Vec<String>,
        hint: Hint,
    },
    /// `ibv_open_device(3)` failed.
    #[error("ibv_open_device({device}) failed: {errno}")]
    OpenDevice { device: String, errno: Errno },
    /// `ibv_close_device(3)` failed, or was refused because children are still alive.
    #[error("ibv_close_device({device}) failed: {errno}{hint}")]
    CloseDevice {
        device: String,
        errno: Errno,
        hint: Hint,
    },
    /// `ibv_query_device(3)` failed.
    #[error("ibv_query_device failed: {errno}")]
    QueryDevice { errno: Errno },
    /// `ibv_query_port(3)` failed.
    #[error("ibv_query_port(port {port}) failed: {errno}")]
    QueryPort { port: u8, errno: Errno },
    /// `ibv_query_gid_ex(3)` / `ibv_query_gid(3)` failed.
    #[error("ibv_query_gid_ex(port {port}, index {index}) failed: {errno}")]
    QueryGid { port: u8, index: u32, errno: Errno },
    /// No RoCE v2 GID whose content is an IPv4-mapped address (`::ffff:a.b.c.d`).
    #[error("no RoCE v2 IPv4-mapped GID on {device} port {port}{hint}")]
    NoRoceV2Gid {
        device: String,
        port: u8,
        hint: Hint,
    },
    /// `ibv_get_async_event(3)` failed.
    #[error("ibv_get_async_event failed: {errno}")]
    GetAsyncEvent { errno: Errno },
    /// `ibv_alloc_pd(3)` failed.
    #[error("ibv_alloc_pd failed: {errno}")]
    AllocPd { errno: Errno },
    /// `ibv_dealloc_pd(3)` failed (EBUSY: children still alive).
    #[error("ibv_dealloc_pd failed: {errno}{hint}")]
    DeallocPd { errno: Errno, hint: Hint },
    /// `ibv_reg_mr(3)` failed.
    #[error("ibv_reg_mr(len {len}, access {access}) failed: {errno}{hint}")]
    RegMr {
        len: usize,
        access: AccessFlags,
        errno: Errno,
        hint: Hint,
    },
    /// `ibv_dereg_mr(3)` failed.
    #[error("ibv_dereg_mr failed: {errno}")]
    DeregMr { errno: Errno },
    /// `ibv_alloc_mw(3)` failed.
    #[error("ibv_alloc_mw failed: {errno}{hint}")]
    AllocMw { errno: Errno, hint: Hint },
    /// `ibv_dealloc_mw(3)` failed.
    #[error("ibv_dealloc_mw failed: {errno}")]
    DeallocMw { errno: Errno },
    /// `ibv_bind_mw(3)` failed.
    #[error("ibv_bind_mw failed: {errno}{hint}")]
    BindMw { errno: Errno, hint: Hint },
    /// `ibv_create_srq(3)` failed.
    #[error("ibv_create_srq failed: {errno}{hint}")]
    CreateSrq { errno: Errno, hint: Hint },
    /// `ibv_modify_srq(3)` failed.
    #[error("ibv_modify_srq failed: {errno}")]
    ModifySrq { errno: Errno },
    /// `ibv_query_srq(3)` failed.
    #[error("ibv_query_srq failed: {errno}")]
    QuerySrq { errno: Errno },
    /// `ibv_destroy_srq(3)` failed (EBUSY: a QP still uses it).
    #[error("ibv_destroy_srq failed: {errno}{hint}")]
    DestroySrq { errno: Errno, hint: Hint },
    /// `ibv_post_srq_recv(3)` refused work request number `index` of the chain (0-based).
    #[error("ibv_post_srq_recv failed at work request #{index}: {errno}{hint}")]
    PostSrqRecv {
        errno: Errno,
        index: usize,
        hint: Hint,
    },
    /// `ibv_create_ah(3)` failed.
    #[error("ibv_create_ah failed: {errno}{hint}")]
    CreateAh { errno: Errno, hint: Hint },
    /// `ibv_destroy_ah(3)` failed.
    #[error("ibv_destroy_ah failed: {errno}")]
    DestroyAh { errno: Errno },
    /// `ibv_create_comp_channel(3)` failed.
    #[error("ibv_create_comp_channel failed: {errno}")]
    CreateCompChannel { errno: Errno },
    /// `ibv_destroy_comp_channel(3)` failed (EBUSY: a CQ still uses it).
    #[error("ibv_destroy_comp_channel failed: {errno}{hint}")]
    DestroyCompChannel { errno: Errno, hint: Hint },
    /// `ibv_create_cq(3)` failed.
    #[error("ibv_create_cq(cqe {cqe}) failed: {errno}{hint}")]
    CreateCq { cqe: i32, errno: Errno, hint: Hint },
    /// `ibv_destroy_cq(3)` failed or was refused (EBUSY: a QP still uses it; unacked events).
    #[error("ibv_destroy_cq failed: {errno}{hint}")]
    DestroyCq { errno: Errno, hint: Hint },
    /// `ibv_req_notify_cq(3)` failed.
    #[error("ibv_req_notify_cq failed: {errno}")]
    ReqNotifyCq { errno: Errno },
    /// `ibv_get_cq_event(3)` failed.
    #[error("ibv_get_cq_event failed: {errno}{hint}")]
    GetCqEvent { errno: Errno, hint: Hint },
    /// `ibv_poll_cq(3)` returned a negative value.
    #[error("ibv_poll_cq failed: returned {rc}")]
    PollCq { rc: i32 },
    /// `ibv_create_qp(3)` failed.
    #[error("ibv_create_qp failed: {errno}{hint}")]
    CreateQp { errno: Errno, hint: Hint },
    /// `ibv_modify_qp(3)` failed.
    #[error("ibv_modify_qp({from} -> {to}, mask {mask}) failed: {errno}{hint}")]
    ModifyQp {
        from: QpState,
        to: QpState,
        mask: QpAttrMask,
        errno: Errno,
        hint: Hint,
    },
    /// `ibv_query_qp(3)` failed.
    #[error("ibv_query_qp failed: {errno}")]
    QueryQp { errno: Errno },
    /// `ibv_destroy_qp(3)` failed.
    #[error("ibv_destroy_qp failed: {errno}")]
    DestroyQp { errno: Errno },
    /// `ibv_post_send(3)` refused work request number `index` of the chain (0-based).
    #[error("ibv_post_send failed at work request #{index}: {errno}{hint}")]
    PostSend {
        errno: Errno,
        index: usize,
        hint: Hint,
    },
    /// `ibv_post_recv(3)` refused work request number `index` of the chain (0-based).
    #[error("ibv_post_recv failed at work request #{index}: {errno}{hint}")]
    PostRecv {
        errno: Errno,
        index: usize,
        hint: Hint,
    },
    /// A work completion arrived with a status other than `IBV_WC_SUCCESS`.
    #[error(
        "work completion wr_id={} failed: {} \"{}\"\n  why: {}",
        .wc.wr_id, .wc.status, .wc.status.str(), .wc.status.explanation()
    )]
    Completion { wc: WorkCompletion },
    /// The deadline passed while polling a CQ for completions.
    #[error(
        "no completion for {what} within {timeout:?} (got {got} of {expected}).\n  \
         likely causes on rxe: the peer posted no RECV and rnr_retry is 7 (retries forever); \
         retry_cnt 7 toward a dead or errored peer (forever on rxe); an RDMA READ/atomic with \
         max_rd_atomic 0 at RTS (never completes); the WR was posted unsignaled (no CQE by \
         design); path MTU above the link's MTU between two nodes; or waiting on the responder \
         of a plain RDMA WRITE/READ, which never gets a completion"
    )]
    CompletionTimeout {
        what: Cow<'static, str>,
        timeout: Duration,
        got: usize,
        expected: usize,
    },
    /// The deadline passed while waiting for an event on a file descriptor.
    #[error("no {what} within {timeout:?}{hint}")]
    EventTimeout {
        what: Cow<'static, str>,
        timeout: Duration,
        hint: Hint,
    },
    /// `poll(2)` or `fcntl(2)` on a verbs file descriptor failed.
    #[error("{call} failed: {errno}")]
    Os { call: &'static str, errno: Errno },
    /// An `rdma_*` call of librdmacm failed (they return -1 and set `errno`).
    #[error("{call} failed: {errno}{hint}")]
    Cm {
        call: &'static str,
        errno: Errno,
        hint: Hint,
    },
    /// An rdma_cm event other than the one the program waited for (`lab::cm`).
    #[error("expected {want}, got {got}{hint}")]
    CmEvent {
        want: &'static str,
        got: String,
        hint: Hint,
    },
    /// The object is still in use by others (its children, events not yet acknowledged),
    /// so `lab` refused to call the destroy verb (which would fail or block).
    #[error("{object} is still in use: {detail}")]
    InUse {
        object: &'static str,
        detail: Cow<'static, str>,
    },
    /// A block index, offset or length outside a remote pool's table or region
    /// (`course::RemotePool`); nothing was posted.
    #[error("out of bounds: {0}")]
    OutOfBounds(Cow<'static, str>),
    /// An argument `lab` checked before calling into libibverbs was invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(Cow<'static, str>),
}

impl Error {
    /// The errno carried by this error, if it came from a verb or a system call.
    pub fn errno(&self) -> Option<Errno> {
        use Error::*;
        match self {
            GetDeviceList { errno, .. }
            | OpenDevice { errno, .. }
            | CloseDevice { errno, .. }
            | QueryDevice { errno }
            | QueryPort { errno, .. }
            | QueryGid { errno, .. }
            | GetAsyncEvent { errno }
            | AllocPd { errno }
            | DeallocPd { errno, .. }
            | RegMr { errno, .. }
            | DeregMr { errno }
            | CreateAh { errno, .. }
            | DestroyAh { errno }
            | CreateSrq { errno, .. }
            | ModifySrq { errno }
            | QuerySrq { errno }
            | DestroySrq { errno, .. }
            | PostSrqRecv { errno, .. }
            | AllocMw { errno, .. }
            | DeallocMw { errno }
            | BindMw { errno, .. }
            | CreateCompChannel { errno }
            | DestroyCompChannel { errno, .. }
            | CreateCq { errno, .. }
            | DestroyCq { errno, .. }
            | ReqNotifyCq { errno }
            | GetCqEvent { errno, .. }
            | CreateQp { errno, .. }
            | ModifyQp { errno, .. }
            | QueryQp { errno }
            | DestroyQp { errno }
            | PostSend { errno, .. }
            | PostRecv { errno, .. }
            | Os { errno, .. }
            | Cm { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// The hint attached to this error, if any.
    pub fn hint(&self) -> Option<&str> {
        use Error::*;
        match self {
            GetDeviceList { hint, .. }
            | NoDevice { hint, .. }
            | CloseDevice { hint, .. }
            | NoRoceV2Gid { hint, .. }
            | DeallocPd { hint, .. }
            | RegMr { hint, .. }
            | CreateAh { hint, .. }
            | CreateSrq { hint, .. }
            | DestroySrq { hint, .. }
            | PostSrqRecv { hint, .. }
            | AllocMw { hint, .. }
            | BindMw { hint, .. }
            | DestroyCompChannel { hint, .. }
            | CreateCq { hint, .. }
            | DestroyCq { hint, .. }
            | GetCqEvent { hint, .. }
            | CreateQp { hint, .. }
            | ModifyQp { hint, .. }
            | PostSend { hint, .. }
            | PostRecv { hint, .. }
            | EventTimeout { hint, .. }
            | Cm { hint, .. }
            | CmEvent { hint, .. } => hint.text(),
            _ => None,
        }
    }

    /// The failed work completion, for [`Error::Completion`].
    pub fn completion(&self) -> Option<&WorkCompletion> {
        match self {
            Error::Completion { wc } => Some(wc),
            _ => None,
        }
    }
}

/// Turns an `int` return of a verb into a `Result`: `0` is success; a positive value is the
/// errno itself (the common verbs convention); a negative value means "look at `errno`".
pub(crate) fn rc(ret: c_int, err: impl FnOnce(Errno) -> Error) -> Result<()> {
    match ret {
        0 => Ok(()),
        n if n > 0 => Err(err(Errno(n))),
        n => {
            let e = Errno::last();
            Err(err(if e.0 != 0 { e } else { Errno(-n) }))
        }
    }
}

/// Turns a pointer return of a verb into a `Result`: `NULL` means failure, reason in `errno`.
pub(crate) fn ptr<T>(p: *mut T, err: impl FnOnce(Errno) -> Error) -> Result<NonNull<T>> {
    match NonNull::new(p) {
        Some(p) => Ok(p),
        None => {
            let e = Errno::last();
            // Some providers return NULL without setting errno; say so rather than print 0.
            Err(err(if e.0 != 0 { e } else { Errno(libc::EIO) }))
        }
    }
}

/// Reports a teardown failure from a `Drop` (which cannot return it) on stderr, so it is seen,
/// not lost. Explicit `destroy()`/`close()` methods return the error instead.
pub(crate) fn report_drop_failure(what: &str, err: &Error) {
    eprintln!("lab: {what} failed while dropping: {err}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_prints_name_and_number() {
        assert_eq!(Errno(22).to_string(), "EINVAL (22)");
        assert_eq!(Errno(16).to_string(), "EBUSY (16)");
        assert_eq!(Errno(12).name(), "ENOMEM");
        assert_eq!(Errno(22).description(), "Invalid argument");
    }

    #[test]
    fn rc_handles_both_conventions() {
        let e = rc(16, |errno| Error::DeallocPd {
            errno,
            hint: Hint::none(),
        })
        .unwrap_err();
        assert_eq!(e.errno(), Some(Errno(16)));
        assert!(rc(0, |errno| Error::QueryQp { errno }).is_ok());
        let e = rc(-22, |errno| Error::QueryQp { errno }).unwrap_err();
        assert!(e.errno().is_some());
    }

    #[test]
    fn hint_is_printed_on_its_own_line() {
        let e = Error::DeallocPd {
            errno: Errno(16),
            hint: Hint::new("drop the MRs first"),
        };
        assert_eq!(
            e.to_string(),
            "ibv_dealloc_pd failed: EBUSY (16)\n  hint: drop the MRs first"
        );
    }
}
