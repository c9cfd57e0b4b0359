//! The one error type of `course::exchange`.

use std::fmt;
use std::io;
use std::time::Duration;

/// What the exchange was doing when it timed out or failed on a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Connecting to the server (retried until the deadline).
    Connect,
    /// Waiting for a client to connect.
    Accept,
    /// Reading from the peer.
    Read,
    /// Writing to the peer.
    Write,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Connect => "connecting",
            Op::Accept => "waiting for a connection",
            Op::Read => "reading",
            Op::Write => "writing",
        })
    }
}

/// "reading the lab message from 127.0.0.1:5000", "waiting on 0.0.0.0:18515 for a client
/// to exchange the ibv_rc_pingpong address", ...
fn doing(op: &Op, what: &str, peer: &str) -> String {
    match op {
        Op::Connect => format!("connecting to {peer} to exchange the {what}"),
        Op::Accept => format!("waiting on {peer} for a client to exchange the {what}"),
        Op::Read => format!("reading the {what} from {peer}"),
        Op::Write => format!("writing the {what} to {peer}"),
    }
}

fn closed(op: &Op, what: &str) -> String {
    match op {
        Op::Write => format!("while the {what} was being written to it"),
        _ => format!("before sending the {what}"),
    }
}

fn secs(d: &Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}

/// Everything that can go wrong while exchanging endpoint information.
///
/// `what` fields name the message ("the ibv_rc_pingpong address", "the lab message", ...);
/// `peer` fields hold the address as text (`127.0.0.1:18515`); byte excerpts are escaped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExchangeError {
    /// The bytes arrived but do not have the expected form.
    #[error("malformed {what}: {field} {detail} (bytes: \"{bytes}\")")]
    Malformed {
        /// Which message.
        what: &'static str,
        /// Which field of it.
        field: &'static str,
        /// What is wrong with the field.
        detail: String,
        /// The offending bytes, escaped.
        bytes: String,
    },
    /// Fewer bytes than the message needs: a short buffer, or a peer that closed the
    /// connection in the middle of a message.
    #[error("truncated {what} from {from}: got {got} of {expected} bytes")]
    Truncated {
        /// Which message.
        what: &'static str,
        /// `input` for a buffer, `peer <addr>` for a connection.
        from: String,
        /// Bytes received.
        got: usize,
        /// Bytes the message needs.
        expected: usize,
    },
    /// A length larger than the format allows; rejected before allocating anything.
    #[error("oversized {what}: {len} bytes, the limit is {max} bytes")]
    Oversized {
        /// Which message.
        what: &'static str,
        /// The announced or observed length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// The first bytes are not the lab message's magic: the peer speaks something else
    /// (another chapter's format, ibv_rc_pingpong's text message, HTTP...).
    #[error(
        "not a lab exchange message: it starts with \"{found}\" where \"RXEL\" was expected \
         (is the peer the matching lab program, on the right port?)"
    )]
    BadMagic {
        /// The first bytes received, escaped.
        found: String,
    },
    /// The lab message's version is not one this build understands.
    #[error(
        "unsupported lab exchange version {found}: this build speaks version {supported} \
         (rebuild both sides from the same tree)"
    )]
    UnsupportedVersion {
        /// The version received.
        found: u16,
        /// The version this build speaks.
        supported: u16,
    },
    /// A value to be sent does not fit its field (e.g. a QPN above 24 bits).
    #[error("cannot send {field} = {value:#x}: {detail}")]
    Invalid {
        /// Which field.
        field: &'static str,
        /// The value.
        value: u64,
        /// Why it does not fit.
        detail: String,
    },
    /// The peer closed the connection before sending anything of the expected message (or,
    /// while writing, reset it).
    #[error("peer {peer} closed the connection {}", closed(.op, .what))]
    PeerClosed {
        /// What was under way.
        op: Op,
        /// Which message.
        what: &'static str,
        /// The peer's address.
        peer: String,
    },
    /// The deadline passed.
    #[error("timed out after {} {}", secs(.after), doing(.op, .what, .peer))]
    TimedOut {
        /// What was under way.
        op: Op,
        /// Which message or endpoint.
        what: &'static str,
        /// The peer's (or, for accept, the listening) address.
        peer: String,
        /// The budget of the deadline that passed.
        after: Duration,
    },
    /// Nobody listens at the address: connecting was refused until the deadline.
    #[error(
        "connection to {peer} refused (kept retrying for {}): is the server running and \
         listening on that port?",
        secs(.after)
    )]
    Refused {
        /// The address.
        peer: String,
        /// How long connecting was retried.
        after: Duration,
    },
    /// The host name could not be resolved.
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        /// `host:port` as given.
        host: String,
        /// The resolver's error.
        source: io::Error,
    },
    /// The listening socket could not be created (port in use, no permission...).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The OS error.
        source: io::Error,
    },
    /// Any other socket error.
    #[error("{} failed: {source}", doing(.op, .what, .peer))]
    Io {
        /// What was under way.
        op: Op,
        /// Which message or endpoint.
        what: &'static str,
        /// The peer's address.
        peer: String,
        /// The OS error.
        source: io::Error,
    },
}

impl ExchangeError {
    /// True for [`ExchangeError::TimedOut`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, ExchangeError::TimedOut { .. })
    }
}
