//! `course::exchange`: the out-of-band exchange of endpoint information over TCP.
//!
//! Before two RC queue pairs can talk, each side must learn the other's QP number, starting
//! PSN and GID (and, for one-sided operations, the address, length and rkey of the memory it
//! may touch). Verbs have no way to do that by themselves: every program sends these few
//! bytes over an ordinary socket first. (Chapter 12 replaces this with `rdma_cm`.)
//!
//! This module speaks two formats:
//!
//! 1. **`ibv_rc_pingpong`'s text message** ([`PingpongDest`], [`PingpongListener`],
//!    [`pingpong_client_exchange`]): 52 bytes, `"%04x:%06x:%06x:%s\0"` (LID, QPN, PSN and
//!    a 32-hex-digit GID), in the exact sequence rdma-core's example uses, so chapter 06
//!    talks to the C tool in both directions.
//! 2. **the lab's own message** ([`Endpoint`], [`RemoteRegion`], [`Listener`],
//!    [`OobStream`]): magic, version, a length-checked body with QPN, PSN, GID, LID, a short
//!    name and any number of `(addr, len, rkey)` regions; plus text lines on the same stream
//!    for a final sync ("done", a checksum).
//!
//! ```no_run
//! # fn main() -> Result<(), course::exchange::ExchangeError> {
//! use course::exchange::{Endpoint, LAB_PORT, OobStream, PINGPONG_PORT, PingpongDest};
//! use course::exchange::pingpong_client_exchange;
//! use std::time::Duration;
//!
//! // Chapter 06, client role, against `ibv_rc_pingpong` or our own server:
//! let mine = PingpongDest { lid: 0, qpn: 0x11, psn: 0x1b2c3d, gid: [0; 16] };
//! let server = pingpong_client_exchange("127.0.0.1", PINGPONG_PORT, &mine, Duration::from_secs(10))?;
//!
//! // Chapters 07-10, client role: one message each way, then keep the stream for the end.
//! let me = Endpoint { name: "client".into(), qpn: 0x12, psn: 0x42, ..Default::default() };
//! let (mut oob, pool) = OobStream::connect_exchange("127.0.0.1", LAB_PORT, &me, Duration::from_secs(10))?;
//! // ... RDMA WRITE / READ into pool.regions[i] ...
//! oob.send_line("done", Duration::from_secs(5))?;
//! # let _ = (server, pool); Ok(()) }
//! ```
//!
//! Every operation takes a [`Deadline`] (a `Duration` converts into one): connecting retries
//! until the deadline because the server may not be listening yet, and every read and write
//! gives up at the deadline. Malformed, truncated, oversized or wrong-version input, a peer
//! that closes early or one that never answers all end in a typed [`ExchangeError`] with a
//! message that says what was expected and what arrived. Nothing here panics or hangs.

mod conn;
mod error;
mod message;
mod pingpong;
mod stream;

pub use error::{ExchangeError, Op};
pub use message::{
    Endpoint, HEADER_LEN, MAGIC, MAX_BODY_LEN, MAX_NAME_LEN, MAX_REGIONS, REGION_WIRE_LEN,
    RemoteRegion, VERSION,
};
pub use pingpong::{
    PINGPONG_DONE, PINGPONG_MSG_LEN, PINGPONG_PORT, PingpongDest, PingpongListener,
    PingpongServerConn, gid_from_wire, gid_to_wire, pingpong_client_exchange,
};
pub use stream::{Listener, MAX_LINE_LEN, OobStream};

/// The default TCP port of the lab's own exchange (one above `ibv_rc_pingpong`'s 18515, so
/// both can run side by side).
pub const LAB_PORT: u16 = 18516;

use std::time::{Duration, Instant};

/// A point in time by which an operation must finish, remembering the budget it was given
/// so errors can say "timed out after 2.000s".
///
/// Every function in this module takes `impl Into<Deadline>`: pass a `Duration` for "this
/// long from now", or one `Deadline` to several calls so they share one overall budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    at: Instant,
    budget: Duration,
}

impl Deadline {
    /// A deadline `budget` from now.
    pub fn after(budget: Duration) -> Self {
        let now = Instant::now();
        // A budget so large that it overflows Instant means "practically never".
        let at = now
            .checked_add(budget)
            .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600));
        Deadline { at, budget }
    }

    /// The time left, or `None` once the deadline has passed.
    pub fn remaining(&self) -> Option<Duration> {
        self.at
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    }

    /// True once the deadline has passed.
    pub fn is_expired(&self) -> bool {
        self.remaining().is_none()
    }

    /// The budget this deadline was created with.
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// The instant at which it expires.
    pub fn instant(&self) -> Instant {
        self.at
    }
}

impl From<Duration> for Deadline {
    fn from(budget: Duration) -> Self {
        Deadline::after(budget)
    }
}

/// Shows bytes as an escaped ASCII string for error messages (`"0a:00\x00..."`), at most
/// 64 bytes of them followed by `...` and the total length.
pub(crate) fn escape_bytes(bytes: &[u8]) -> String {
    const SHOWN: usize = 64;
    let mut out: String = bytes
        .iter()
        .take(SHOWN)
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    if bytes.len() > SHOWN {
        out.push_str(&format!("... ({} bytes)", bytes.len()));
    }
    out
}
