//! `ibv_rc_pingpong`'s exchange, byte for byte (rdma-core, `libibverbs/examples/`).
//!
//! The message is the C string `"%04x:%06x:%06x:%s"` of LID, QPN, PSN and the GID in
//! "wire" form, sent as a fixed 52-byte buffer (`sizeof "0000:000000:000000:" + 32 hex
//! digits + NUL`). The sequence, from `pp_client_exch_dest` / `pp_server_exch_dest`:
//!
//! ```text
//! client                                   server
//!   connect ------------------------------>  accept (one connection, then stops listening)
//!   write 52 bytes (client's address) ---->  read 52 bytes
//!                                            bring its QP to RTR and RTS  <- work in between
//!   read 52 bytes  <-----------------------  write 52 bytes (server's address)
//!   write "done\0" (5 bytes) ------------->  read, expecting exactly 5 bytes
//!   close; bring its QP to RTR and RTS       close
//! ```
//!
//! The client sends "done" right after reading the server's address, before the ping-pong
//! starts (not after it): the TCP connection is gone during the test.
//!
//! The GID's wire form: `gid_to_wire_gid` copies the 16 bytes into four `uint32_t`, converts
//! each with `htobe32` and prints it with `%08x`. On any host that comes out as the 16 bytes
//! in memory order, two hex digits each: `::ffff:10.99.0.1` is
//! `00000000000000000000ffff0a630001`.

use super::conn::{self, Conn};
use super::{Deadline, ExchangeError, escape_bytes};
use crate::show;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};

/// `ibv_rc_pingpong`'s default TCP port (`-p`).
pub const PINGPONG_PORT: u16 = 18515;
/// Size of the address message on the wire: `sizeof "0000:000000:000000:" + 32 + 1` = 52.
pub const PINGPONG_MSG_LEN: usize = 52;
/// The client's final sync, with its NUL: `sizeof "done"` = 5 bytes.
pub const PINGPONG_DONE: &[u8; 5] = b"done\0";

const WHAT: &str = "ibv_rc_pingpong address";
const WHAT_DONE: &str = "ibv_rc_pingpong \"done\" sync";
const MAX24: u32 = 0xff_ffff;

/// One end's address as `ibv_rc_pingpong` exchanges it (`struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PingpongDest {
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// Starting packet sequence number (24 bits).
    pub psn: u32,
    /// The GID, raw bytes in network order (all zero when `-g` is not given).
    pub gid: [u8; 16],
}

/// The 32-hex-digit wire form of a GID (rdma-core's `gid_to_wire_gid`), lowercase.
pub fn gid_to_wire(gid: &[u8; 16]) -> [u8; 32] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 32];
    for (i, b) in gid.iter().enumerate() {
        out[2 * i] = HEX[usize::from(b >> 4)];
        out[2 * i + 1] = HEX[usize::from(b & 0xf)];
    }
    out
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Parses exactly `digits.len()` hex digits (at most 8) into a number.
fn parse_hex(digits: &[u8]) -> Option<u32> {
    digits
        .iter()
        .try_fold(0u32, |acc, &c| Some((acc << 4) | u32::from(hex_val(c)?)))
}

/// Parses the 32-hex-digit wire form of a GID (rdma-core's `wire_gid_to_gid`); upper or
/// lower case.
pub fn gid_from_wire(wire: &[u8]) -> Result<[u8; 16], ExchangeError> {
    let bad = |detail: String| ExchangeError::Malformed {
        what: "GID wire form",
        field: "GID",
        detail,
        bytes: escape_bytes(wire),
    };
    if wire.len() != 32 {
        return Err(bad(format!(
            "must be 32 hex digits, got {} bytes",
            wire.len()
        )));
    }
    let mut gid = [0u8; 16];
    for (i, pair) in wire.chunks_exact(2).enumerate() {
        match (hex_val(pair[0]), hex_val(pair[1])) {
            (Some(h), Some(l)) => gid[i] = (h << 4) | l,
            _ => {
                return Err(bad(format!(
                    "has a non-hex character at offset {}",
                    2 * i + usize::from(hex_val(pair[0]).is_some())
                )));
            }
        }
    }
    Ok(gid)
}

impl PingpongDest {
    /// The 52-byte message `ibv_rc_pingpong` sends: `"%04x:%06x:%06x:%s"` and a NUL.
    ///
    /// Fails if the QPN or PSN does not fit 24 bits (the C tool would overflow its buffer).
    pub fn to_wire(&self) -> Result<[u8; PINGPONG_MSG_LEN], ExchangeError> {
        for (field, v) in [("QPN", self.qpn), ("PSN", self.psn)] {
            if v > MAX24 {
                return Err(ExchangeError::Invalid {
                    field,
                    value: u64::from(v),
                    detail: "must fit 24 bits (at most 0xffffff)".into(),
                });
            }
        }
        let text = format!("{:04x}:{:06x}:{:06x}:", self.lid, self.qpn, self.psn);
        let mut out = [0u8; PINGPONG_MSG_LEN];
        out[..19].copy_from_slice(text.as_bytes());
        out[19..51].copy_from_slice(&gid_to_wire(&self.gid));
        // out[51] stays 0: the C string's terminating NUL, sent as part of the message.
        Ok(out)
    }

    /// Parses the 52-byte message. Strict about the layout the C tool produces (fixed
    /// widths, `:` separators, a NUL at the end), lenient about hex case.
    pub fn from_wire(bytes: &[u8]) -> Result<Self, ExchangeError> {
        if bytes.len() < PINGPONG_MSG_LEN {
            return Err(ExchangeError::Truncated {
                what: WHAT,
                from: "input".into(),
                got: bytes.len(),
                expected: PINGPONG_MSG_LEN,
            });
        }
        let bad = |field: &'static str, detail: String| ExchangeError::Malformed {
            what: WHAT,
            field,
            detail,
            bytes: escape_bytes(bytes),
        };
        if bytes.len() > PINGPONG_MSG_LEN {
            return Err(bad(
                "length",
                format!("must be {PINGPONG_MSG_LEN} bytes, got {}", bytes.len()),
            ));
        }
        for (pos, name) in [(4, "after LID"), (11, "after QPN"), (18, "after PSN")] {
            if bytes[pos] != b':' {
                return Err(bad(
                    "separator",
                    format!("expected ':' {name} at offset {pos}"),
                ));
            }
        }
        if bytes[51] != 0 {
            return Err(bad("terminator", "expected a NUL byte at offset 51".into()));
        }
        let field = |name: &'static str, range: std::ops::Range<usize>| {
            parse_hex(&bytes[range.clone()]).ok_or_else(|| {
                bad(
                    name,
                    format!(
                        "must be {} hex digits at offsets {}..{}",
                        range.len(),
                        range.start,
                        range.end
                    ),
                )
            })
        };
        let lid = field("LID", 0..4)?;
        let qpn = field("QPN", 5..11)?;
        let psn = field("PSN", 12..18)?;
        let gid = gid_from_wire(&bytes[19..51]).map_err(|e| match e {
            ExchangeError::Malformed { detail, .. } => bad("GID", detail),
            other => other,
        })?;
        Ok(PingpongDest {
            // A 4-digit hex number always fits u16.
            lid: u16::try_from(lid).unwrap_or(u16::MAX),
            qpn,
            psn,
            gid,
        })
    }

    /// The line `ibv_rc_pingpong` prints for this end:
    /// `  local address:  LID 0x0000, QPN 0x000011, PSN 0x1b2c3d, GID ::ffff:10.99.0.1`.
    pub fn address_line(&self, side: show::Side) -> show::PingpongAddress {
        show::pingpong_address(side, self.lid, self.qpn, self.psn, &self.gid)
    }
}

/// The server side of `ibv_rc_pingpong`'s exchange: listens on a port and accepts one
/// client.
///
/// ```no_run
/// # fn main() -> Result<(), course::exchange::ExchangeError> {
/// use course::exchange::{PingpongDest, PingpongListener, PINGPONG_PORT};
/// use std::time::Duration;
/// let mine = PingpongDest { lid: 0, qpn: 0x11, psn: 0x1b2c3d, gid: [0; 16] };
/// let listener = PingpongListener::bind(PINGPONG_PORT)?;
/// println!("waiting for a client");                       // the readiness line
/// let conn = listener.accept(Duration::from_secs(30))?;    // reads the client's address
/// let remote = conn.remote();
/// // ... bring the QP to RTR with `remote`, then RTS ...
/// conn.finish(&mine, Duration::from_secs(5))?;             // sends ours, reads "done"
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct PingpongListener {
    inner: TcpListener,
}

impl PingpongListener {
    /// Listens on `0.0.0.0:port` (all IPv4 addresses), as the C server does.
    pub fn bind(port: u16) -> Result<Self, ExchangeError> {
        Self::bind_addr(SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::UNSPECIFIED,
            port,
        )))
    }

    /// Listens on a specific address (use port 0 for an ephemeral port, e.g. in tests).
    pub fn bind_addr(addr: SocketAddr) -> Result<Self, ExchangeError> {
        Ok(PingpongListener {
            inner: conn::bind(addr)?,
        })
    }

    /// The address actually listened on (with the real port when bound to port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, ExchangeError> {
        self.inner.local_addr().map_err(|source| ExchangeError::Io {
            op: super::Op::Accept,
            what: WHAT,
            peer: "the listening socket".into(),
            source,
        })
    }

    /// Waits for a client and reads its 52-byte address, all before `deadline`.
    pub fn accept(
        &self,
        deadline: impl Into<Deadline>,
    ) -> Result<PingpongServerConn, ExchangeError> {
        let deadline = deadline.into();
        let (stream, peer) = conn::accept(&self.inner, WHAT, deadline)?;
        let mut conn = Conn::new(stream, peer);
        let bytes = conn.read_exact(PINGPONG_MSG_LEN, WHAT, deadline)?;
        let remote = PingpongDest::from_wire(&bytes)?;
        Ok(PingpongServerConn { conn, remote })
    }
}

/// A client accepted by [`PingpongListener::accept`], whose address has been read. Bring
/// the QP up, then call [`finish`](Self::finish).
#[derive(Debug)]
pub struct PingpongServerConn {
    conn: Conn,
    remote: PingpongDest,
}

impl PingpongServerConn {
    /// The client's address.
    pub fn remote(&self) -> PingpongDest {
        self.remote
    }

    /// The client's TCP address, as text.
    pub fn peer(&self) -> &str {
        self.conn.peer()
    }

    /// Sends this end's address, then reads the client's `"done\0"`, then closes.
    pub fn finish(
        mut self,
        mine: &PingpongDest,
        deadline: impl Into<Deadline>,
    ) -> Result<(), ExchangeError> {
        let deadline = deadline.into();
        let msg = mine.to_wire()?;
        self.conn.write_all(&msg, WHAT, deadline)?;
        let done = self
            .conn
            .read_exact(PINGPONG_DONE.len(), WHAT_DONE, deadline)?;
        if done != PINGPONG_DONE {
            return Err(ExchangeError::Malformed {
                what: WHAT_DONE,
                field: "sync",
                detail: "expected \"done\\0\"".into(),
                bytes: escape_bytes(&done),
            });
        }
        Ok(())
    }
}

/// The client side of `ibv_rc_pingpong`'s exchange: connects to `host:port` (retrying until
/// `deadline` while the server is not listening yet), sends `mine`, reads the server's
/// address, sends `"done\0"` and closes. Returns the server's address.
pub fn pingpong_client_exchange(
    host: &str,
    port: u16,
    mine: &PingpongDest,
    deadline: impl Into<Deadline>,
) -> Result<PingpongDest, ExchangeError> {
    let deadline = deadline.into();
    let msg = mine.to_wire()?;
    let (stream, peer) = conn::connect(host, port, WHAT, deadline)?;
    let mut conn = Conn::new(stream, peer);
    conn.write_all(&msg, WHAT, deadline)?;
    let bytes = conn.read_exact(PINGPONG_MSG_LEN, WHAT, deadline)?;
    let remote = PingpongDest::from_wire(&bytes)?;
    conn.write_all(PINGPONG_DONE, WHAT_DONE, deadline)?;
    Ok(remote)
}
