//! The hint catalogue: every hint `lab` gives with an error, as data.
//!
//! A failed verb prints its errno; a classic mistake behind that errno gets a hint, on a line
//! of its own (`  hint: ...`). Each hint has a [`HintCode`]: a stable name (`memlock-limit`,
//! `skipped-rtr`, ...) that tests assert and the book lists, and the text that explains it.
//! The list is here, once, so the words of a hint are not scattered over the verbs that give
//! it, and a new hint is one more row.
//!
//! Two forms of hint:
//!
//! - a **fixed** hint prints its catalogue text as it is
//!   (`remote-without-local-write`: "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE as
//!   well: add AccessFlags::LOCAL_WRITE");
//! - a **detailed** hint prints a sentence with this failure's values (the limit, the queue
//!   size, the state the QP was in): `lab` builds that sentence where it has the values, and
//!   the catalogue text is the hint's fixed meaning, without them.
//!
//! std only, like the rest of this crate: the book reads the catalogue without linking
//! libibverbs.

use std::fmt;
use std::str::FromStr;

/// Whether a hint prints its catalogue text or a sentence with the failure's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HintForm {
    /// The catalogue text, as it is.
    Fixed,
    /// A sentence with this failure's values; the catalogue text says what it means.
    Detailed,
}

macro_rules! catalogue {
    ($(
        $(#[$doc:meta])*
        $variant:ident = $code:literal, $form:ident, $text:expr;
    )*) => {
        /// A hint's stable code. [`HintCode::ALL`] lists them in the catalogue's order.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum HintCode {
            $( $(#[$doc])* $variant, )*
        }

        impl HintCode {
            /// Every hint, in the catalogue's order (grouped by the object the verb acts on).
            pub const ALL: &'static [HintCode] = &[ $( HintCode::$variant, )* ];

            /// The stable code: lowercase words joined by hyphens (`memlock-limit`).
            pub const fn code(self) -> &'static str {
                match self { $( HintCode::$variant => $code, )* }
            }

            /// What the hint says: the printed text of a fixed hint, the meaning of a detailed
            /// one.
            pub const fn text(self) -> &'static str {
                match self { $( HintCode::$variant => $text, )* }
            }

            /// Fixed or detailed.
            pub const fn form(self) -> HintForm {
                match self { $( HintCode::$variant => HintForm::$form, )* }
            }
        }
    };
}

catalogue! {
    // The device.
    /// `ibv_get_device_list` failed.
    NoUverbs = "no-uverbs", Fixed,
        "is the ib_uverbs module loaded and /dev/infiniband readable? (`rdma link` lists devices)";
    /// No RDMA device, or none with the name asked for.
    NoDevice = "no-device", Fixed,
        "create a SoftRoCE device (`rdma link add rxe0 type rxe netdev eth0`) or run inside the \
         lab (`cargo lab ...`); LAB_DEVICE picks a device by name";
    /// No RoCE v2 GID holds an IPv4-mapped address.
    NoIpv4Gid = "no-ipv4-gid", Fixed,
        "the netdev under the rxe device needs an IPv4 address (`ip addr add 10.99.0.1/24 dev \
         veth0`); rxe then adds ::ffff:a.b.c.d";

    // Protection domains, memory regions and windows.
    /// `ibv_dealloc_pd`: EBUSY.
    PdBusy = "pd-busy", Detailed,
        "objects of this PD (memory regions, queue pairs, ...) are still alive: destroy QPs and \
         deregister MRs before deallocating their PD";
    /// `ibv_reg_mr`: EINVAL for remote write or atomic access without local write.
    RemoteWithoutLocalWrite = "remote-without-local-write", Fixed,
        "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE as well: add AccessFlags::LOCAL_WRITE";
    /// `ibv_reg_mr`: ENOMEM, the pinned memory is over `RLIMIT_MEMLOCK`.
    MemlockLimit = "memlock-limit", Detailed,
        "registering pins memory, which counts against RLIMIT_MEMLOCK (`ulimit -l`): raise it \
         (`ulimit -l unlimited`, /etc/security/limits.conf `memlock`) or run with CAP_IPC_LOCK";
    /// `ibv_alloc_mw` failed.
    MwUnsupported = "mw-unsupported", Fixed,
        "is this window type supported? (query_device: max_mw)";
    /// `ibv_bind_mw`: EINVAL on a region registered without `MW_BIND`.
    MrWithoutMwBind = "mr-without-mw-bind", Fixed,
        "the memory region needs AccessFlags::MW_BIND";

    // Address handles.
    /// `ibv_create_ah` with a GRH failed.
    AhSgidIndex = "ah-sgid-index", Fixed,
        "is sgid_index the RoCE v2 entry matching the destination GID's kind?";
    /// `ibv_create_ah` without a GRH failed.
    AhWithoutGrh = "ah-without-grh", Fixed,
        "on RoCE an address handle needs a GRH: is_global = true with a dgid";

    // Shared receive queues.
    /// `ibv_create_srq`: EINVAL.
    SrqCapacity = "srq-capacity", Fixed,
        "max_wr/max_sge above the device's max_srq_wr/max_srq_sge?";
    /// `ibv_post_srq_recv`: ENOMEM.
    SrqFull = "srq-full", Fixed,
        "the shared receive queue is full (max_wr)";
    /// `ibv_destroy_srq`: EBUSY.
    SrqBusy = "srq-busy", Detailed,
        "queue pairs still use this SRQ";

    // Completion queues and channels.
    /// `ibv_create_cq`: EINVAL.
    CqeRange = "cqe-range", Fixed,
        "cqe must be between 1 and the device's max_cqe (query_device)";
    /// No completion event came on the channel within the deadline.
    CqNotArmed = "cq-not-armed", Fixed,
        "arm the CQ with req_notify() before the completion arrives, and re-arm after every \
         event; a completion already in the CQ when you arm raises no event, so drain the CQ \
         after arming";
    /// `ibv_destroy_comp_channel`: EBUSY.
    ChannelBusy = "channel-busy", Detailed,
        "completion queues still use this channel: destroy them first";
    /// `ibv_destroy_cq` refused: completion events not acknowledged.
    UnackedEvents = "unacked-events", Detailed,
        "completion events not acknowledged: ibv_destroy_cq would block forever; ack every event \
         (CqEvent::ack) first";
    /// `ibv_destroy_cq`: EBUSY.
    CqBusy = "cq-busy", Detailed,
        "queue pairs still use this CQ: destroy them first";

    // Queue pairs: creation and the state machine.
    /// `ibv_create_qp`: EINVAL.
    QpCapacity = "qp-capacity", Fixed,
        "a capacity above the device's limits? (query_device: max_qp_wr, max_sge; \
         max_inline_data)";
    /// `ibv_modify_qp` INIT -> RTS: the transition skips RTR.
    SkippedRtr = "skipped-rtr", Detailed,
        "INIT -> RTS is not a legal transition: it skips RTR, go through RTR first";
    /// `ibv_modify_qp` to a state the current one cannot reach.
    IllegalTransition = "illegal-transition", Detailed,
        "not a legal transition of the QP state machine; the hint names the legal targets";
    /// `ibv_modify_qp` with a mask that misses a required attribute or has one not accepted.
    TransitionAttributes = "transition-attributes", Detailed,
        "the attribute mask misses an attribute the transition requires, or has one it does not \
         accept";
    /// `ibv_modify_qp` to RTR without a GRH in the address vector.
    AvWithoutGrh = "av-without-grh", Fixed,
        "on RoCE the address vector needs a GRH (is_global = 1) with the peer's GID";
    /// `ibv_modify_qp`: `sgid_index` names an empty slot of the GID table.
    EmptyGidSlot = "empty-gid-slot", Detailed,
        "sgid_index is an empty GID slot";
    /// `ibv_modify_qp`: the source GID is of another kind than the destination GID.
    GidIndex = "gid-index", Detailed,
        "GID index: the source GID (sgid_index) and the destination GID are of different kinds: \
         both ends must use the same kind of GID; for RoCE v2 over IPv4 pick the ::ffff:a.b.c.d \
         entry by content (Context::roce_v2_ipv4_gid)";
    /// `ibv_modify_qp`: the source GID is not a RoCE v2 GID.
    GidNotRoceV2 = "gid-not-roce-v2", Detailed,
        "sgid_index is not a RoCE v2 GID; rxe speaks RoCE v2";
    /// `ibv_modify_qp`: `sgid_index` is outside the port's GID table.
    SgidIndexRange = "sgid-index-range", Detailed,
        "sgid_index is not in the GID table of the port";
    /// `ibv_modify_qp`: the path MTU is above the port's active MTU.
    PathMtu = "path-mtu", Detailed,
        "the path MTU is above the port's active MTU";
    /// `ibv_modify_qp`: read/atomic credits above the device's limits.
    RdAtomicLimit = "rd-atomic-limit", Detailed,
        "max_rd_atomic or max_dest_rd_atomic is above the device's limit (max_qp_init_rd_atom, \
         max_qp_rd_atom)";
    /// `ibv_modify_qp`: access flag bits no verb defines.
    UnknownAccessBits = "unknown-access-bits", Detailed,
        "unknown access flag bits";

    // Queue pairs: posting work requests.
    /// `ibv_post_recv`: ENOMEM.
    RecvQueueFull = "recv-queue-full", Detailed,
        "the receive queue is full (max_recv_wr; rxe rounds it up to 2^k-1): wait for receive \
         completions before posting more";
    /// `ibv_post_recv` or `ibv_post_send`: more SGEs than the queue takes.
    TooManySges = "too-many-sges", Detailed,
        "a work request has more SGEs than the queue's max_recv_sge or max_send_sge";
    /// `ibv_post_recv` in RESET.
    RecvInReset = "recv-in-reset", Fixed,
        "the QP is in RESET: receives can be posted from INIT on";
    /// `ibv_post_send`: ENOMEM.
    SendQueueFull = "send-queue-full", Detailed,
        "the send queue is full (max_send_wr; rxe rounds it up to 2^k-1): poll completions to \
         free slots; with unsignaled WRs, signal at least one in every max_send_wr";
    /// `ibv_post_send` before RTS.
    SendBeforeRts = "send-before-rts", Detailed,
        "sends need RTS. Beware: rxe has queued this work request anyway; it goes out with the \
         next successful post after RTS";
    /// `ibv_post_send`: more inline bytes than `max_inline_data`.
    InlineTooLarge = "inline-too-large", Detailed,
        "more bytes inline than the QP's max_inline_data";
    /// `ibv_post_send`: an atomic to a remote address not 8-byte aligned.
    AtomicAlignment = "atomic-alignment", Detailed,
        "atomics need an 8-byte aligned remote address";
    /// `ibv_post_send`: an atomic whose local SGE is not 8 bytes.
    AtomicSgeSize = "atomic-sge-size", Fixed,
        "an atomic's local SGE must be exactly 8 bytes";

    // What the verbs' errors cannot say: mistakes chapter 07 makes on purpose.
    /// Waiting for an RDMA WRITE's completion at its target.
    WriteCompletesAtWriter = "write-completes-at-writer", Fixed,
        "an RDMA WRITE completes only at the side that posted it; the target's CPU and CQ are \
         not involved. Wait for a message from the writer (a SEND, a WRITE_WITH_IMM, or TCP) \
         instead";
    /// Why RTR cannot be skipped.
    RtrLearnsPeer = "rtr-learns-peer", Fixed,
        "RTR is where a QP learns its peer (dest QPN, PSN, GID, path MTU); a QP cannot send \
         before it knows where to";
    /// A local SGE with lkey 0, or outside its region.
    UnregisteredLkey = "unregistered-lkey", Fixed,
        "every SGE needs the lkey of a registered region that covers it; lkey 0 on rxe is not a \
         key at all";

    // The connection manager (librdmacm).
    /// `rdma_create_event_channel` failed.
    NoRdmaUcm = "no-rdma-ucm", Fixed,
        "is the rdma_ucm module loaded and /dev/infiniband/rdma_cm readable? (run inside the \
         lab: `cargo lab ...`)";
    /// An id's device context asked for before the id has a device.
    CmIdWithoutDevice = "cm-id-without-device", Fixed,
        "the id has no device yet: resolve the address (active side) or use the id of a \
         CONNECT_REQUEST (passive side); a listener bound to 0.0.0.0 has none";
    /// No rdma_cm event within the deadline.
    CmNoEvent = "cm-no-event", Detailed,
        "is the peer running and reachable? A connect to a host with no CM peer waits seconds \
         per REQ try, and well over a minute in all before UNREACHABLE on rxe: give a connect a \
         deadline beyond that, or expect this timeout";
    /// A CONNECT_REQUEST event without its new id.
    RequestWithoutId = "request-without-id", Fixed,
        "a CONNECT_REQUEST without an id";
    /// `rdma_resolve_addr` or `rdma_resolve_route` toward a loopback address.
    LoopbackAddress = "loopback-address", Fixed,
        "127.0.0.1 cannot be routed on RoCE (no RDMA device sits on `lo`): use the rxe netdev's \
         address (10.99.0.1 in the loopback lab; `rdma link` names the netdev)";
    /// `rdma_resolve_addr` or `rdma_resolve_route` failed.
    NotRxeAddress = "not-rxe-address", Fixed,
        "is the address on an rxe netdev (`rdma link`, `ip -4 addr`)?";
    /// `rdma_create_qp`: EINVAL.
    CmQpPd = "cm-qp-pd", Fixed,
        "the PD must be allocated on the id's own device context (CmId::context), not on a \
         Context opened separately";
    /// `rdma_bind_addr`: EADDRINUSE.
    CmPortInUse = "cm-port-in-use", Fixed,
        "another rdma_cm listener has this port (an earlier server still running?)";
    /// `rdma_bind_addr`: EADDRNOTAVAIL or ENODEV.
    CmBindAddress = "cm-bind-address", Fixed,
        "bind to the rxe netdev's address (or 0.0.0.0)";
    /// More private data than a connection message carries.
    PrivateDataTooLong = "private-data-too-long", Detailed,
        "more bytes of private data than fit in this message on IB/RoCE";
    /// RDMA_CM_EVENT_REJECTED: what the reject reason means.
    CmRejected = "cm-rejected", Detailed,
        "the peer (or its CM) rejected the connection: the reject reason says why";
    /// RDMA_CM_EVENT_ADDR_ERROR.
    CmAddrError = "cm-addr-error", Fixed,
        "no device route or no ARP reply for that address: is it the peer's rxe netdev address \
         (`ip -4 addr`, `rdma link`), and is the peer up?";
    /// RDMA_CM_EVENT_UNREACHABLE.
    CmUnreachable = "cm-unreachable", Detailed,
        "the peer's CM never answered: a host with no rdma_cm peer costs seconds per REQ try, \
         up to 16 tries; is rdma_rxe loaded on the peer and the address right?";
    /// RDMA_CM_EVENT_DISCONNECTED where another event was awaited.
    CmDisconnected = "cm-disconnected", Fixed,
        "the peer disconnected (or its process died): reconnect from RESET";
}

/// Prints the code (`memlock-limit`); [`HintCode::text`] is the explanation.
impl fmt::Display for HintCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// A string that is no hint's code; holds the string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseHintCodeError(pub String);

impl fmt::Display for ParseHintCodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown hint code {:?}", self.0)
    }
}

impl std::error::Error for ParseHintCodeError {}

impl FromStr for HintCode {
    type Err = ParseHintCodeError;
    fn from_str(s: &str) -> Result<HintCode, ParseHintCodeError> {
        HintCode::ALL
            .iter()
            .copied()
            .find(|h| h.code() == s)
            .ok_or_else(|| ParseHintCodeError(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_lowercase_words_and_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for &h in HintCode::ALL {
            let c = h.code();
            assert!(seen.insert(c), "{c} twice");
            assert!(
                !c.is_empty()
                    && !c.starts_with('-')
                    && !c.ends_with('-')
                    && !c.contains("--")
                    && c.chars()
                        .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '-'),
                "{c}: lowercase words joined by hyphens"
            );
            assert_eq!(c.parse::<HintCode>(), Ok(h));
            assert_eq!(h.to_string(), c);
        }
        assert!("no-such-hint".parse::<HintCode>().is_err());
    }

    #[test]
    fn every_text_is_one_line_without_the_hint_prefix() {
        for &h in HintCode::ALL {
            let t = h.text();
            assert!(!t.is_empty() && !t.contains('\n'), "{h}: {t:?}");
            assert!(!t.starts_with("hint:"), "{h}: the printer adds `hint: `");
            assert_eq!(t, t.trim(), "{h}");
            assert!(
                !t.contains("  "),
                "{h}: a doubled space (a line break in the source?)"
            );
        }
    }

    #[test]
    fn the_classic_mistakes_have_their_codes() {
        assert_eq!(HintCode::MemlockLimit.code(), "memlock-limit");
        assert_eq!(HintCode::GidIndex.code(), "gid-index");
        assert_eq!(HintCode::SkippedRtr.code(), "skipped-rtr");
        assert_eq!(
            HintCode::RemoteWithoutLocalWrite.code(),
            "remote-without-local-write"
        );
        assert_eq!(HintCode::RemoteWithoutLocalWrite.form(), HintForm::Fixed);
        assert_eq!(HintCode::MemlockLimit.form(), HintForm::Detailed);
    }
}
