//! One error type for the whole crate, git2-style: a failed verb is one variant,
//! [`Error::Verb`], naming the C call ([`Verb`]) with the errno and, for the mistakes learners
//! make, hints; the other variants carry what differs (a work completion, a deadline, an
//! rdma_cm event, a refusal).
//!
//! The verbs report failure in three different ways (see `man ibv_modify_qp` and friends):
//!
//! * most `int`-returning verbs (`ibv_modify_qp`, `ibv_post_send`, `ibv_dealloc_pd`, ...)
//!   return `0` or a **positive errno value**; `errno` itself is often left untouched;
//! * a few (`ibv_get_cq_event`, `ibv_get_async_event`, `ibv_query_gid`) return `-1` and set
//!   `errno`;
//! * pointer-returning verbs (`ibv_alloc_pd`, `ibv_reg_mr`, ...) return `NULL` and set `errno`.
//!
//! `rc` and `ptr` (crate-private) turn each convention into a `Result` in one line:
//!
//! ```ignore
//! let pd = ptr(unsafe { ibv_alloc_pd(ctx) }, |e| Error::failed(Verb::AllocPd, e))?;
//! rc(unsafe { ibv_dealloc_pd(pd) }, |e| Error::failed(Verb::DeallocPd, e))?;
//! ```
//!
//! A hint is a code of the catalogue in `contracts::hints` ([`HintCode`]: `memlock-limit`,
//! `skipped-rtr`, ...) and its text. `Display` prints the message without them, so an error
//! chain (`{e:#}`) stays one line per cause; [`Error::report`] prints the message with each
//! hint on a line of its own, the form every chapter shows.

use std::borrow::Cow;
use std::fmt;
use std::os::raw::c_int;
use std::ptr::NonNull;
use std::time::Duration;

pub use contracts::hints::{HintCode, HintForm};

// The work completion and this module name each other: `Error::Completion` holds a
// `WorkCompletion`, and `WorkCompletion::ok` returns this `Error`.
use crate::cq::wc::WorkCompletion;

/// `Result` with [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An errno value, printed as `EINVAL (22)` (docs/conventions.md): the workspace's one errno
/// type and name table, in the `contracts` crate.
pub use contracts::verbs::Errno;

/// A hint printed after an error, on a line of its own (`  hint: ...`, see
/// [`Error::report`]): a code of the catalogue ([`HintCode`], in `contracts::hints`) and, for
/// a detailed hint, the sentence with this failure's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hint {
    code: HintCode,
    detail: Option<Cow<'static, str>>,
}

impl Hint {
    /// The hint `code`, printed with the catalogue's text.
    pub const fn new(code: HintCode) -> Hint {
        Hint { code, detail: None }
    }

    /// The hint `code`, printed as `detail`: the catalogue's meaning with this failure's
    /// values (the limit, the queue size, the state the QP was in).
    pub fn detailed(code: HintCode, detail: impl Into<Cow<'static, str>>) -> Hint {
        Hint {
            code,
            detail: Some(detail.into()),
        }
    }

    /// The code (`memlock-limit`): what tests assert.
    pub fn code(&self) -> HintCode {
        self.code
    }

    /// What is printed: the detail if there is one, else the catalogue's text.
    pub fn text(&self) -> &str {
        self.detail.as_deref().unwrap_or(self.code.text())
    }
}

impl From<HintCode> for Hint {
    fn from(code: HintCode) -> Hint {
        Hint::new(code)
    }
}

/// The text, without the `hint: ` prefix.
impl fmt::Display for Hint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

macro_rules! verbs {
    ($($variant:ident => $name:literal,)*) => {
        /// A C call of libibverbs (`ibv_*`) or librdmacm (`rdma_*`) that can fail: what
        /// [`Error::Verb`] names. `Display` prints the C name. One is no call:
        /// `rdma_cm_id.verbs`, the id's device, which `CmId::context` reads before the id has
        /// one.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Verb {
            $(#[doc = concat!("`", $name, "`")] $variant,)*
        }

        impl Verb {
            /// Every verb, libibverbs' first.
            pub const ALL: &'static [Verb] = &[$(Verb::$variant,)*];

            /// The C name (`ibv_reg_mr`).
            pub const fn name(self) -> &'static str {
                match self {
                    $(Verb::$variant => $name,)*
                }
            }
        }
    };
}

verbs! {
    GetDeviceList => "ibv_get_device_list",
    OpenDevice => "ibv_open_device",
    CloseDevice => "ibv_close_device",
    QueryDevice => "ibv_query_device",
    QueryPort => "ibv_query_port",
    QueryGidEx => "ibv_query_gid_ex",
    GetAsyncEvent => "ibv_get_async_event",
    AllocPd => "ibv_alloc_pd",
    DeallocPd => "ibv_dealloc_pd",
    RegMr => "ibv_reg_mr",
    DeregMr => "ibv_dereg_mr",
    AllocMw => "ibv_alloc_mw",
    DeallocMw => "ibv_dealloc_mw",
    BindMw => "ibv_bind_mw",
    CreateSrq => "ibv_create_srq",
    ModifySrq => "ibv_modify_srq",
    QuerySrq => "ibv_query_srq",
    DestroySrq => "ibv_destroy_srq",
    PostSrqRecv => "ibv_post_srq_recv",
    CreateAh => "ibv_create_ah",
    DestroyAh => "ibv_destroy_ah",
    CreateCompChannel => "ibv_create_comp_channel",
    DestroyCompChannel => "ibv_destroy_comp_channel",
    CreateCq => "ibv_create_cq",
    DestroyCq => "ibv_destroy_cq",
    ReqNotifyCq => "ibv_req_notify_cq",
    GetCqEvent => "ibv_get_cq_event",
    CreateQp => "ibv_create_qp",
    ModifyQp => "ibv_modify_qp",
    QueryQp => "ibv_query_qp",
    DestroyQp => "ibv_destroy_qp",
    PostSend => "ibv_post_send",
    PostRecv => "ibv_post_recv",
    CreateEventChannel => "rdma_create_event_channel",
    CreateId => "rdma_create_id",
    DestroyId => "rdma_destroy_id",
    IdVerbs => "rdma_cm_id.verbs",
    GetCmEvent => "rdma_get_cm_event",
    AckCmEvent => "rdma_ack_cm_event",
    MigrateId => "rdma_migrate_id",
    ResolveAddr => "rdma_resolve_addr",
    ResolveRoute => "rdma_resolve_route",
    CreateCmQp => "rdma_create_qp",
    Connect => "rdma_connect",
    BindAddr => "rdma_bind_addr",
    Listen => "rdma_listen",
    Accept => "rdma_accept",
    Reject => "rdma_reject",
    Disconnect => "rdma_disconnect",
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What kind of failure an [`enum@Error`] is: [`Error::kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A verb returned an errno ([`Error::Verb`], [`Error::PollCq`]).
    Verb,
    /// The machine has no usable device: none, none of that name, or no RoCE v2 IPv4 GID.
    NoDevice,
    /// A work completion with an error status.
    Completion,
    /// A deadline passed: no completion, or no event.
    Timeout,
    /// An rdma_cm event other than the one awaited.
    CmEvent,
    /// `lab` refused before calling a verb: an object still in use, an argument out of
    /// bounds or invalid.
    Refused,
    /// A system call (`poll(2)`, `fcntl(2)`, ...).
    Os,
}

/// Every way a `lab` call can fail. A failed verb is [`Error::Verb`], naming the C call
/// ([`Verb`]) with its errno ([`Errno`]) and, where a classic mistake is the likely cause, a
/// [`Hint`]; the other variants carry what differs. `Display` prints the message alone, on one
/// line for a verb; [`Error::report`] adds the hints, each on a line of its own.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A verb failed: `ibv_reg_mr(len 4096, access IBV_ACCESS_REMOTE_WRITE) failed: EINVAL
    /// (22)`.
    #[error("{verb}{} failed{}: {errno}", Paren(.args.as_deref()), AtWr(*.wr_index))]
    Verb {
        /// The C call.
        verb: Verb,
        /// The errno it returned or set.
        errno: Errno,
        /// The call's arguments worth printing, between parentheses after its name (`port
        /// 1`, `INIT -> RTS, mask IBV_QP_STATE`), or none.
        args: Option<Cow<'static, str>>,
        /// For `ibv_post_send`, `ibv_post_recv` and `ibv_post_srq_recv`: the work request of
        /// the chain that was refused (0-based).
        wr_index: Option<usize>,
        /// The likely causes, most likely first; most errors have none.
        hints: Vec<Hint>,
    },
    /// `ibv_poll_cq(3)` returned a negative value (not an errno).
    #[error("ibv_poll_cq failed: returned {rc}")]
    PollCq { rc: i32 },
    /// No RDMA device (or none with the requested name).
    #[error("no RDMA device {wanted}(devices present: {available:?})")]
    NoDevice {
        wanted: String,
        available: Vec<String>,
        hints: Vec<Hint>,
    },
    /// No RoCE v2 GID whose content is an IPv4-mapped address (`::ffff:a.b.c.d`).
    #[error("no RoCE v2 IPv4-mapped GID on {device} port {port}")]
    NoRoceV2Gid {
        device: String,
        port: u8,
        hints: Vec<Hint>,
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
    #[error("no {what} within {timeout:?}")]
    EventTimeout {
        what: Cow<'static, str>,
        timeout: Duration,
        hints: Vec<Hint>,
    },
    /// `poll(2)` or `fcntl(2)` on a verbs file descriptor failed.
    #[error("{call} failed: {errno}")]
    Os { call: &'static str, errno: Errno },
    /// An rdma_cm event other than the one the program waited for (`lab::cm`).
    #[error("expected {want}, got {got}")]
    CmEvent {
        want: &'static str,
        got: String,
        hints: Vec<Hint>,
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

/// `(args)`, or nothing.
struct Paren<'a>(Option<&'a str>);

impl fmt::Display for Paren<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(a) => write!(f, "({a})"),
            None => Ok(()),
        }
    }
}

/// ` at work request #N`, or nothing.
struct AtWr(Option<usize>);

impl fmt::Display for AtWr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(i) => write!(f, " at work request #{i}"),
            None => Ok(()),
        }
    }
}

impl Error {
    /// `verb` failed with `errno`; add its arguments, the work request and hints with the
    /// builder methods below.
    pub(crate) fn failed(verb: Verb, errno: Errno) -> Error {
        Error::Verb {
            verb,
            errno,
            args: None,
            wr_index: None,
            hints: Vec::new(),
        }
    }

    /// The arguments printed after a verb's name: `ibv_query_port(port 1) failed: ...`.
    pub(crate) fn args(mut self, text: impl Into<Cow<'static, str>>) -> Error {
        if let Error::Verb { args, .. } = &mut self {
            *args = Some(text.into());
        }
        self
    }

    /// The work request of a chain a post verb refused.
    pub(crate) fn at_wr(mut self, index: usize) -> Error {
        if let Error::Verb { wr_index, .. } = &mut self {
            *wr_index = Some(index);
        }
        self
    }

    /// Adds a hint (after those already there), if there is one.
    pub(crate) fn with_hint(mut self, hint: impl Into<Option<Hint>>) -> Error {
        let Some(hint) = hint.into() else {
            return self;
        };
        match &mut self {
            Error::Verb { hints, .. }
            | Error::NoDevice { hints, .. }
            | Error::NoRoceV2Gid { hints, .. }
            | Error::EventTimeout { hints, .. }
            | Error::CmEvent { hints, .. } => hints.push(hint),
            _ => debug_assert!(false, "this error carries no hints: {self}"),
        }
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        use Error::*;
        match self {
            Verb { .. } | PollCq { .. } => ErrorKind::Verb,
            NoDevice { .. } | NoRoceV2Gid { .. } => ErrorKind::NoDevice,
            Completion { .. } => ErrorKind::Completion,
            CompletionTimeout { .. } | EventTimeout { .. } => ErrorKind::Timeout,
            CmEvent { .. } => ErrorKind::CmEvent,
            InUse { .. } | OutOfBounds(_) | InvalidArgument(_) => ErrorKind::Refused,
            Os { .. } => ErrorKind::Os,
        }
    }

    /// The verb that failed, for [`Error::Verb`].
    pub fn verb(&self) -> Option<Verb> {
        match self {
            Error::Verb { verb, .. } => Some(*verb),
            _ => None,
        }
    }

    /// The errno carried by this error, if it came from a verb or a system call.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Verb { errno, .. } | Error::Os { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// The work request a post verb refused (0-based in the chain).
    pub fn wr_index(&self) -> Option<usize> {
        match self {
            Error::Verb { wr_index, .. } => *wr_index,
            _ => None,
        }
    }

    /// The first (most likely) hint, if any: its code and its text.
    pub fn hint(&self) -> Option<&Hint> {
        self.hints().first()
    }

    /// Every hint, most likely first.
    pub fn hints(&self) -> &[Hint] {
        match self {
            Error::Verb { hints, .. }
            | Error::NoDevice { hints, .. }
            | Error::NoRoceV2Gid { hints, .. }
            | Error::EventTimeout { hints, .. }
            | Error::CmEvent { hints, .. } => hints,
            _ => &[],
        }
    }

    /// The failed work completion, for [`Error::Completion`].
    pub fn completion(&self) -> Option<&WorkCompletion> {
        match self {
            Error::Completion { wc } => Some(wc),
            _ => None,
        }
    }

    /// The message with its hints, each on a line of its own, as a chapter prints it:
    ///
    /// ```text
    /// ibv_dealloc_pd failed: EBUSY (16)
    ///   hint: 1 object(s) of this PD (memory regions, queue pairs, ...) are still alive: ...
    /// ```
    pub fn report(&self) -> Report<'_> {
        Report(self)
    }
}

/// [`Error::report`]: the message, then `\n  hint: ` and each hint's text.
#[derive(Debug, Clone, Copy)]
pub struct Report<'a>(&'a Error);

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        for h in self.0.hints() {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
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
    eprintln!("lab: {what} failed while dropping: {}", err.report());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_table_matches_libc() {
        use libc::*;
        let known = [
            EPERM,
            ENOENT,
            EINTR,
            EIO,
            EBADF,
            EAGAIN,
            ENOMEM,
            EACCES,
            EFAULT,
            EBUSY,
            EEXIST,
            ENODEV,
            EINVAL,
            ENOSPC,
            EPIPE,
            ERANGE,
            ENOSYS,
            ENODATA,
            ETIME,
            EPROTO,
            EOVERFLOW,
            EMSGSIZE,
            EOPNOTSUPP,
            EAFNOSUPPORT,
            EADDRINUSE,
            EADDRNOTAVAIL,
            ENETDOWN,
            ENETUNREACH,
            ECONNABORTED,
            ECONNRESET,
            ENOBUFS,
            EISCONN,
            ENOTCONN,
            ETIMEDOUT,
            ECONNREFUSED,
            EHOSTUNREACH,
            EALREADY,
            EINPROGRESS,
            ECANCELED,
            ENOTRECOVERABLE,
        ];
        for n in known {
            let name = Errno(n).name();
            assert_ne!(name, "E?", "{n}");
            // The table's number for that name is libc's.
            let back = contracts::verbs::errno::ERRNOS
                .iter()
                .find(|(_, nm)| *nm == name)
                .map(|(v, _)| *v);
            assert_eq!(back, Some(n), "{name}");
        }
        assert_eq!(Errno(EINVAL).to_string(), "EINVAL (22)");
        assert_eq!(Errno(ENOMEM).description(), "Cannot allocate memory");
    }

    #[test]
    fn rc_handles_both_conventions() {
        let e = rc(16, |errno| Error::failed(Verb::DeallocPd, errno)).unwrap_err();
        assert_eq!(e.errno(), Some(Errno(16)));
        assert_eq!(e.verb(), Some(Verb::DeallocPd));
        assert_eq!(e.kind(), ErrorKind::Verb);
        assert!(rc(0, |errno| Error::failed(Verb::QueryQp, errno)).is_ok());
        let e = rc(-22, |errno| Error::failed(Verb::QueryQp, errno)).unwrap_err();
        assert!(e.errno().is_some());
    }

    #[test]
    fn a_verb_prints_its_c_name_arguments_and_work_request() {
        let e = Error::failed(Verb::QueryPort, Errno(22)).args("port 1");
        assert_eq!(e.to_string(), "ibv_query_port(port 1) failed: EINVAL (22)");
        let e = Error::failed(Verb::PostSend, Errno(12)).at_wr(3);
        assert_eq!(
            e.to_string(),
            "ibv_post_send failed at work request #3: ENOMEM (12)"
        );
        assert_eq!(e.wr_index(), Some(3));
        let e = Error::failed(Verb::ResolveAddr, Errno(19));
        assert_eq!(e.to_string(), "rdma_resolve_addr failed: ENODEV (19)");
        let mut names = std::collections::HashSet::new();
        for v in Verb::ALL {
            assert!(names.insert(v.name()), "{v} twice");
            assert!(v.name().starts_with("ibv_") || v.name().starts_with("rdma_"));
        }
    }

    #[test]
    fn hints_are_printed_by_report_each_on_its_own_line() {
        let e = Error::failed(Verb::DeallocPd, Errno(16))
            .with_hint(Hint::detailed(HintCode::PdBusy, "drop the MRs first"));
        // Display is the message alone: one line for an error chain.
        assert_eq!(e.to_string(), "ibv_dealloc_pd failed: EBUSY (16)");
        assert_eq!(
            e.report().to_string(),
            "ibv_dealloc_pd failed: EBUSY (16)\n  hint: drop the MRs first"
        );
        assert_eq!(e.hint().map(Hint::code), Some(HintCode::PdBusy));
        let e = e.with_hint(Hint::new(HintCode::QpCapacity));
        assert_eq!(e.hints().len(), 2);
        assert!(e.report().to_string().ends_with(&format!(
            "\n  hint: drop the MRs first\n  hint: {}",
            HintCode::QpCapacity.text()
        )));
        // No hint: the report is the message.
        let e = Error::failed(Verb::AllocPd, Errno(12)).with_hint(None);
        assert_eq!(e.report().to_string(), e.to_string());
        assert!(e.hint().is_none());
    }

    #[test]
    fn a_fixed_hint_prints_the_catalogue_text() {
        let h = Hint::new(HintCode::RemoteWithoutLocalWrite);
        assert_eq!(
            h.to_string(),
            "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE as well: add \
             AccessFlags::LOCAL_WRITE"
        );
        assert_eq!(
            Hint::from(HintCode::NoDevice),
            Hint::new(HintCode::NoDevice)
        );
    }
}
