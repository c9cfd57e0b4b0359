//! # course: what the chapters share besides the verbs
//!
//! `lab` wraps libibverbs and librdmacm; this crate holds everything else the chapters of
//! rxe-lab have in common, so that each chapter's `main.rs` holds its lesson and nothing it
//! would otherwise copy from another chapter. It teaches nothing by itself.
//!
//! It is apart from `lab` because none of it is a verb: `lab` stays the one crate with FFI and
//! `unsafe` (and is read as the verbs' reference), and this one has no `unsafe` at all. It
//! depends on `lab` for the types its helpers take and return (QPs, CQs, MRs, `lab::Error`),
//! so it links libibverbs as `lab` does; `lab` never depends on it.
//!
//! ## Layout
//!
//! | module | what it holds | main items |
//! |---|---|---|
//! | `common` (re-exported here) | the furniture every chapter repeats | [`Failure`], [`OrFail`], [`Outcome`] (a chapter's `Result`), [`expect`], [`exit_code`]; [`open_device`], [`rxe_address`]; [`random_psn`]; [`fnv1a32`], [`fnv1a64`]; private data: [`framed`]/[`unframed`], [`Tagged`]; [`connected_pair`], [`wait_for_err`]; [`accept_peer`], [`connect_peer`], [`accept_clients`]; [`serve_write_target`], [`exchange_as_client`] (the exercises' WRITE checks); copies of this program: [`client_role`], [`this_program_again`], [`wait_or_kill`], [`run_copy`], [`crash`]; [`done`] |
//! | [`cli`] | the flags of the chapters whose client role fans out to several processes (09, 10) | [`cli::FanOut`] |
//! | [`show`] | the labelled output forms of `docs/conventions.md` | [`show::qpn`], [`show::psn`], [`show::elapsed`], [`show::Table`] ...; [`say!`] wrapped lines |
//! | [`exchange`] | the out-of-band TCP exchange: `ibv_rc_pingpong`'s format and the lab's own | [`exchange::Endpoint`], [`exchange::Listener`], [`exchange::OobStream`], [`exchange::PingpongDest`] |
//! | [`pool`] | a client of a remote block pool (RDMA WRITE/READ/atomics by block index), blocking and as futures | [`RemotePool`], [`AsyncPool`], [`Ticket`], [`join_all`]; [`pool::block_table`] |
//! | [`process`] | a child process with collected output and a deadline | [`process::Running`] |
//! | [`host`] | what a program in a VM asks the lab's host (freeze, kill, restart a node), through `LAB_HOST` | [`host::ask`] |
//! | [`kernel`] | the kernel rxe runs in, and where rxe's behaviour changed between kernels | [`kernel::KernelVersion`], [`kernel::RxeChange`], [`kernel::AckTimer`] |

pub mod cli;
mod common;
pub mod exchange;
pub mod host;
pub mod kernel;
pub mod pool;
pub mod process;
pub mod show;

pub use common::{
    Failure, OrFail, Outcome, Peer, Tagged, TaggedReader, accept_clients, accept_peer, client_role,
    connect_peer, connected_pair, crash, done, exchange_as_client, exit_code, exit_code_of, expect,
    fnv1a32, fnv1a64, framed, open_device, random_psn, report_copies, run_copy, rxe_address,
    serve_write_target, spawn_copies, this_program_again, unframed, wait_for_err, wanted_device,
};
pub use pool::{AsyncPool, PoolOp, RemotePool, Ticket, join_all};
pub use process::wait_or_kill;
