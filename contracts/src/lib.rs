//! contracts: what the lab's processes say to each other, typed once.
//!
//! Several processes meet in the lab: `cargo lab` and its daemon on the host, the agent in
//! each VM, and the chapters' programs inside the VMs. Where they exchange text, the text is
//! defined here, once, with a parser next to its printer, so that the two ends cannot drift
//! apart:
//!
//! - [`Node`] and [`Topology`]: the nodes of a lab and their names (`a`, `b`), the topologies
//!   (`loopback`, `pair`);
//! - [`host`]: the requests a program sends to the lab's host (`freeze a`, `trace stop` ...)
//!   and the host's replies (`ok N` or `err N`, a newline, then N bytes of text);
//! - [`proto`]: the framed protocol between the host and the agent in each VM;
//! - [`labels`]: the labelled forms chapters print (`qpn=0x00001a`), each with its format and
//!   the placeholder a snapshot shows (`[QPN#1]`): the course's `show` prints from it, the
//!   harness's redaction matches from it;
//! - [`verbs`]: the verbs' pure tables (QP states and transitions, access flags, completion
//!   statuses, errno names, the object tree), which `lab` re-exports and the book draws.
//! - [`hints`]: the catalogue of the hints `lab` gives with an error, each with a stable code
//!   ([`HintCode`]), which `lab` prints and the book lists;
//! - [`failures`]: chapter 08's failure cases, what rxe produces for each and the hint it
//!   names, which the chapter checks and the book draws.
//!
//! std only, and nothing here links libibverbs: every crate of the workspace may use it. The
//! guest agent is built without cargo (harness/build.rs runs `$RUSTC` on this crate, then on
//! the agent with this crate as its one dependency), so this crate takes no dependencies.

mod macros;

pub mod failures;
pub mod hints;
pub mod host;
pub mod labels;
mod node;
pub mod proto;
pub mod verbs;

pub use hints::{HintCode, HintForm, ParseHintCodeError};
pub use host::{HostReply, HostRequest, ParseReplyError, ParseRequestError, ReplyHead};
pub use node::{Node, ParseNodeError, ParseTopologyError, Topology};
