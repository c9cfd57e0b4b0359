//! # lab: RDMA verbs, safely and teachably
//!
//! `lab` is the verbs library of the rxe-lab course. It wraps `libibverbs` (through the
//! `rdma-sys` FFI bindings) in safe Rust whose names mirror the C verbs, so every call maps to
//! its man page: [`Context::alloc_pd`] is `ibv_alloc_pd(3)`, [`QueuePair::post_send`] is
//! `ibv_post_send(3)`, and each item's documentation names the C call it wraps.
//!
//! It is the only crate of the course that touches FFI; chapters use `lab`'s types only.
//!
//! ## What it teaches (and what it protects you from)
//!
//! * **Ownership mirrors the verbs' object tree.** A [`MemoryRegion`] or [`QueuePair`] keeps
//!   its [`ProtectionDomain`] alive, a [`QueuePair`] its [`CompletionQueue`]s, everything its
//!   [`Context`]; each `Drop` calls exactly one destroy verb, so teardown happens in an order
//!   that works (QP, CQ, channel, MR, PD, device). Explicit `destroy()`/`dealloc()`/`dereg()`/
//!   `close()` return the error; a failing `Drop` reports it on stderr.
//! * **The QP state machine is a type.** `QueuePair<Reset>` -> `to_init` -> `to_rtr` ->
//!   `to_rts`; only `QueuePair<Rts>` can `post_send`. [`QueuePair::modify`] and
//!   [`QueuePair::query`] are the raw escape hatch for breaking the rules on purpose.
//! * **Defaults that never hang on SoftRoCE (rxe).** `retry_cnt` 6 (rxe treats 7 as
//!   forever), `rnr_retry` 6 (7 is forever), `timeout` 14, `min_rnr_timer` 12, path MTU = the
//!   port's active MTU, read/atomic credits set, the source GID picked by content. Every wait
//!   has a deadline.
//! * **Errors say what went wrong.** One [`enum@Error`] with a variant per verb, the errno by
//!   name and number (`EINVAL (22)`), and hints for the classic mistakes (memlock limit,
//!   GID index, skipped RTR, remote access without local write, ...). Completion statuses
//!   ([`WcStatus`]) carry their `ibv_wc_status_str` text and what usually causes them on rxe.
//! * **The hot path is lean.** Work requests *are* the C structs; posting and polling
//!   allocate nothing and copy no payload (a test proves it with a counting allocator).
//!
//! ## Layout
//!
//! | module | verbs | main types |
//! |---|---|---|
//! | `device` | `ibv_get_device_list`, `ibv_open_device`, `ibv_query_device`, `ibv_query_port`, `ibv_query_gid_ex`, `ibv_get_async_event` | [`Context`], [`DeviceAttr`], [`PortAttr`], [`Gid`], [`GidEntry`], [`AsyncEvent`] |
//! | `pd` | `ibv_alloc_pd`, `ibv_dealloc_pd` | [`ProtectionDomain`] |
//! | `mw` | `ibv_alloc_mw`, `ibv_bind_mw`, `IBV_WR_BIND_MW`, `IBV_WR_LOCAL_INV`, `ibv_dealloc_mw` | [`MemoryWindow`], [`MwType`] |
//! | `mr` | `ibv_reg_mr`, `ibv_dereg_mr` | [`MemoryRegion`], [`AccessFlags`] |
//! | `clock` | (`getrusage(2)`) | [`CpuTime`], [`cpu_time`]: what a way of waiting costs in CPU |
//! | `cq` | `ibv_create_comp_channel`, `ibv_create_cq`, `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_get_cq_event`, `ibv_ack_cq_events` | [`CompletionChannel`], [`CompletionQueue`], [`CqEvent`], [`WorkCompletion`], [`WcStatus`], [`WcOpcode`] |
//! | `qp` | `ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp`, `ibv_post_send`, `ibv_post_recv` | [`QueuePair`], [`QpAttr`], [`InitAttr`], [`RtrAttr`], [`RtsAttr`], [`transition`] |
//! | `srq` | `ibv_create_srq`, `ibv_post_srq_recv`, `ibv_modify_srq` | [`SharedReceiveQueue`] |
//! | `ah` | `ibv_create_ah`, `ibv_destroy_ah` (UD) | [`AddressHandle`] |
//! | `wr` | (`struct ibv_sge`, `ibv_send_wr`, `ibv_recv_wr`) | [`Sge`], [`InlineSge`], [`SendWr`], [`RecvWr`] |
//! | [`cm`] | `rdma_create_id`, `rdma_resolve_addr`, `rdma_resolve_route`, `rdma_create_qp`, `rdma_connect`, `rdma_listen`, `rdma_accept`, `rdma_reject`, `rdma_disconnect`, `rdma_get_cm_event` | [`cm::CmId`] (`cm/id.rs`), [`cm::CmEvent`] (`cm/event.rs`), [`cm::ConnParam`] (`cm/param.rs`) |
//! | `pool` | (RDMA WRITE/READ/atomics by block index) | [`RemotePool`], [`AsyncPool`], [`Ticket`] |
//! | `error` | (errno conventions) | [`enum@Error`], [`Errno`], [`Hint`] |
//! | [`exchange`] | (TCP, out of band) | endpoint exchange: `ibv_rc_pingpong`'s format and the lab's own; [`RemoteRegion`] |
//! | [`tree`] | | [`tree::OBJECTS`]: the object tree as data, [`tree::teardown_order`] |
//! | [`show`] | | the one formatting module for labelled identifiers; [`say!`] wrapped lines |
//! | [`perf`] | (`rdtsc`, `sched_setaffinity(2)`) | [`perf::tsc_hz`], [`perf::set_affinity`]: checking a cycle clock, pinning a thread |
//! | [`process`] | | [`process::Running`]: a child process with collected output and a deadline; [`process::wait_or_kill`]: a deadline for any child (on duct) |
//! | [`host`] | (the lab's `LAB_HOST` socket) | [`host::ask`]: what a program in a VM asks the lab's host (freeze, kill, restart the peer) |
//! | [`course`] | | what every chapter repeats: `Failure`/`or_fail`, opening the device, a connected pair, FNV-1a checksums, framed private data |
//! | [`kernel`] | (`uname(2)`) | [`kernel::KernelVersion`], [`kernel::RxeChange`]: where rxe's behaviour changed between kernels |
//!
//! ## A self-connected RC QP in a few lines
//!
//! ```no_run
//! use lab::*;
//! use std::time::Duration;
//! # fn main() -> lab::Result<()> {
//! let ctx = Context::open_default()?;
//! let gid = ctx.roce_v2_ipv4_gid(1)?;
//! let pd = ctx.alloc_pd()?;
//! let mut mr = pd.reg_mr(4096, AccessFlags::ALL_REMOTE)?;
//! let cq = ctx.create_cq(16, None)?;
//! let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
//! let qpn = qp.qp_num();
//! let qp = qp
//!     .to_init(&InitAttr::default())?
//!     .to_rtr(&RtrAttr::new(qpn, 0x1234, gid.gid))?
//!     .to_rts(&RtsAttr::new(0x1234))?;
//! mr.as_mut_slice()[..5].copy_from_slice(b"hello");
//! let (src, dst) = (mr.sge(0..5), mr.sge(2048..4096));
//! qp.post_recv_one(RecvWr::new(1, std::slice::from_ref(&dst)))?;
//! qp.post_send_one(SendWr::send(2, std::slice::from_ref(&src)))?;
//! let mut wcs = [WorkCompletion::default(); 2];
//! cq.poll_exact(&mut wcs, Duration::from_secs(5))?;
//! for wc in wcs { wc.ok()?; }
//! # Ok(()) }
//! ```

pub mod ah;
pub mod clock;
pub mod cm;
pub mod course;
pub mod cq;
pub mod device;
pub mod error;
pub mod exchange;
mod flags;
pub mod host;
pub mod kernel;
pub mod mr;
pub mod mw;
pub mod pd;
pub mod perf;
pub mod pool;
pub mod process;
pub mod qp;
pub mod show;
pub mod srq;
pub mod tree;
pub mod wr;

pub use ah::{AddressHandle, UD_GRH_BYTES};
pub use clock::{CpuTime, cpu_time};
pub use cq::{
    CompletionChannel, CompletionQueue, CqEvent, WcFlags, WcOpcode, WcStatus, WorkCompletion,
};
pub use device::{
    AsyncElement, AsyncEvent, AsyncEventType, AtomicCap, Context, DeviceAttr, DeviceInfo, Gid,
    GidEntry, GidType, LinkLayer, Mtu, PortAttr, PortState, devices, libibverbs_exports,
};
pub use error::{Errno, Error, Hint, Result};
pub use mr::{
    AccessFlags, MemoryRegion, RemoteRegion, memlock_limit, page_size, set_memlock_limit,
};
pub use mw::{MemoryWindow, MwType, inc_rkey};
pub use pd::ProtectionDomain;
pub use pool::{AsyncPool, PoolOp, RemotePool, Ticket, join_all};
pub use qp::{
    AddressVector, InitAttr, QpAttr, QpAttrMask, QpCap, QpInfo, QpInitAttr, QpState, QpType,
    QpTypeState, QueuePair, RtrAttr, RtsAttr, TransitionError, check_transition,
    check_transition_for, state, transition, transition_for,
};
pub use srq::{SharedReceiveQueue, SrqAttr};
pub use wr::{InlineSge, RecvWr, SendFlags, SendWr, Sge, WrOpcode};
