//! The pair's wire, visible: capture ([`capture`], QEMU's `filter-dump` added and removed
//! through the monitor, [`crate::qmp`]), faults on it ([`fault`]), the cable between the
//! pair's VMs ([`cable`]), RoCE v2 decoding ([`decode`]), ladder diagrams ([`ladder`]),
//! assertions on a trace ([`expect`]), when a recording is whole ([`settle`]).
//!
//! Only the microVM pair has a wire: in the loopback VM (and on one native device) rxe hands
//! packets for its own address straight back to itself, and nothing reaches a netdev.

pub mod cable;
pub mod capture;
pub mod decode;
pub mod docs;
pub mod expect;
pub mod fault;
pub mod ladder;
pub mod settle;

pub use capture::Capture;
pub use decode::{Dir, Packet, decode_pcap};
