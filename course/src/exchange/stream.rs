//! The lab's TCP side channel: a listener, and a stream that carries [`Endpoint`] messages
//! and short text lines, every call with a deadline.

use super::conn::{self, Conn, Got};
use super::message::{Endpoint, HEADER_LEN};
use super::{Deadline, ExchangeError, Op, escape_bytes};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};

/// Longest text line [`OobStream::recv_line`] accepts (without its newline).
pub const MAX_LINE_LEN: usize = 4096;

const WHAT_MSG: &str = "lab message";
const WHAT_LINE: &str = "text line";
const WHAT_CONN: &str = "lab message";

/// A listening socket for the lab's exchange. Accept as many clients as you like, each
/// with its own deadline.
///
/// ```no_run
/// # fn main() -> Result<(), course::exchange::ExchangeError> {
/// use course::exchange::{Endpoint, Listener, RemoteRegion};
/// use std::time::Duration;
/// let listener = Listener::bind(18516)?;
/// println!("server: listening on port 18516");       // the readiness line
/// let mut oob = listener.accept(Duration::from_secs(30))?;
/// let mine = Endpoint { name: "server".into(), qpn: 0x11, psn: 0x1b2c3d,
///     regions: vec![RemoteRegion { addr: 0x7f00_0000_0000, len: 4096, rkey: 0x1234 }],
///     ..Default::default() };
/// let client = oob.exchange_as_server(&mine, Duration::from_secs(5))?;
/// // ... connect the QP to `client`, let the client work ...
/// oob.expect_line("done", Duration::from_secs(30))?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Listener {
    inner: TcpListener,
}

impl Listener {
    /// Listens on `0.0.0.0:port`.
    pub fn bind(port: u16) -> Result<Self, ExchangeError> {
        Self::bind_addr(SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::UNSPECIFIED,
            port,
        )))
    }

    /// Listens on a specific address (port 0: an ephemeral port, see [`local_addr`](Self::local_addr)).
    pub fn bind_addr(addr: SocketAddr) -> Result<Self, ExchangeError> {
        Ok(Listener {
            inner: conn::bind(addr)?,
        })
    }

    /// The address actually listened on.
    pub fn local_addr(&self) -> Result<SocketAddr, ExchangeError> {
        self.inner.local_addr().map_err(|source| ExchangeError::Io {
            op: Op::Accept,
            what: WHAT_CONN,
            peer: "the listening socket".into(),
            source,
        })
    }

    /// Waits for one client until `deadline`.
    pub fn accept(&self, deadline: impl Into<Deadline>) -> Result<OobStream, ExchangeError> {
        let (stream, peer) = conn::accept(&self.inner, WHAT_CONN, deadline.into())?;
        Ok(OobStream {
            conn: Conn::new(stream, peer),
        })
    }

    /// Waits for one client, receives its [`Endpoint`] and sends `mine`, all before
    /// `deadline`; returns the stream (for a final sync) and the client's endpoint.
    pub fn accept_exchange(
        &self,
        mine: &Endpoint,
        deadline: impl Into<Deadline>,
    ) -> Result<(OobStream, Endpoint), ExchangeError> {
        let deadline = deadline.into();
        let mut oob = self.accept(deadline)?;
        let theirs = oob.exchange_as_server(mine, deadline)?;
        Ok((oob, theirs))
    }
}

/// A connected side channel: [`Endpoint`] messages and text lines, each call with a
/// deadline. Keep it open for a final sync after the RDMA work ("done", a checksum).
#[derive(Debug)]
pub struct OobStream {
    conn: Conn,
}

impl OobStream {
    /// Connects to `host:port`, retrying until `deadline` while the server is not
    /// listening yet.
    pub fn connect(
        host: &str,
        port: u16,
        deadline: impl Into<Deadline>,
    ) -> Result<Self, ExchangeError> {
        let (stream, peer) = conn::connect(host, port, WHAT_CONN, deadline.into())?;
        Ok(OobStream {
            conn: Conn::new(stream, peer),
        })
    }

    /// Connects (retrying until `deadline`), sends `mine` and receives the server's
    /// [`Endpoint`]; returns the stream (for a final sync) and the server's endpoint.
    pub fn connect_exchange(
        host: &str,
        port: u16,
        mine: &Endpoint,
        deadline: impl Into<Deadline>,
    ) -> Result<(OobStream, Endpoint), ExchangeError> {
        let deadline = deadline.into();
        let mut oob = Self::connect(host, port, deadline)?;
        let theirs = oob.exchange_as_client(mine, deadline)?;
        Ok((oob, theirs))
    }

    /// The peer's address, as text.
    pub fn peer(&self) -> &str {
        self.conn.peer()
    }

    /// Sends one [`Endpoint`] message.
    pub fn send_msg(
        &mut self,
        msg: &Endpoint,
        deadline: impl Into<Deadline>,
    ) -> Result<(), ExchangeError> {
        let bytes = msg.encode()?;
        self.conn.write_all(&bytes, WHAT_MSG, deadline.into())
    }

    /// Receives one [`Endpoint`] message. The header is checked (magic, version, length)
    /// before the body is read or any memory allocated for it.
    pub fn recv_msg(&mut self, deadline: impl Into<Deadline>) -> Result<Endpoint, ExchangeError> {
        let deadline = deadline.into();
        self.conn
            .fill(HEADER_LEN, 0, HEADER_LEN, WHAT_MSG, deadline)?;
        let body_len = Endpoint::decode_header(&self.conn.buf[..HEADER_LEN])?;
        let _header = self.conn.take(HEADER_LEN);
        self.conn.fill(
            body_len,
            HEADER_LEN,
            HEADER_LEN + body_len,
            WHAT_MSG,
            deadline,
        )?;
        let body = self.conn.take(body_len);
        Endpoint::decode_body(&body)
    }

    /// Client side of a one-message-each-way exchange: sends `mine`, then receives the
    /// server's.
    pub fn exchange_as_client(
        &mut self,
        mine: &Endpoint,
        deadline: impl Into<Deadline>,
    ) -> Result<Endpoint, ExchangeError> {
        let deadline = deadline.into();
        self.send_msg(mine, deadline)?;
        self.recv_msg(deadline)
    }

    /// Server side of a one-message-each-way exchange: receives the client's, then sends
    /// `mine`. (To do work in between, call [`recv_msg`](Self::recv_msg) and
    /// [`send_msg`](Self::send_msg) yourself.)
    pub fn exchange_as_server(
        &mut self,
        mine: &Endpoint,
        deadline: impl Into<Deadline>,
    ) -> Result<Endpoint, ExchangeError> {
        let deadline = deadline.into();
        let theirs = self.recv_msg(deadline)?;
        self.send_msg(mine, deadline)?;
        Ok(theirs)
    }

    /// Sends one line of text (a newline is appended). The line must not contain a
    /// newline and must be at most [`MAX_LINE_LEN`] bytes.
    pub fn send_line(
        &mut self,
        line: &str,
        deadline: impl Into<Deadline>,
    ) -> Result<(), ExchangeError> {
        if line.len() > MAX_LINE_LEN {
            return Err(ExchangeError::Invalid {
                field: "line length",
                value: line.len() as u64,
                detail: format!("a line is at most {MAX_LINE_LEN} bytes"),
            });
        }
        if let Some(at) = line.find('\n') {
            return Err(ExchangeError::Invalid {
                field: "line",
                value: at as u64,
                detail: "contains a newline at that offset".into(),
            });
        }
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        self.conn.write_all(&bytes, WHAT_LINE, deadline.into())
    }

    /// Receives one line of text, without its newline (a `\r` before it is dropped too).
    pub fn recv_line(&mut self, deadline: impl Into<Deadline>) -> Result<String, ExchangeError> {
        let deadline = deadline.into();
        let mut searched = 0;
        loop {
            if let Some(i) = self.conn.buf[searched..].iter().position(|&b| b == b'\n') {
                let end = searched + i;
                if end > MAX_LINE_LEN {
                    return Err(ExchangeError::Oversized {
                        what: WHAT_LINE,
                        len: end as u64,
                        max: MAX_LINE_LEN as u64,
                    });
                }
                let mut line = self.conn.take(end + 1);
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return String::from_utf8(line).map_err(|e| ExchangeError::Malformed {
                    what: WHAT_LINE,
                    field: "text",
                    detail: format!("is not UTF-8 ({})", e.utf8_error()),
                    bytes: escape_bytes(e.as_bytes()),
                });
            }
            searched = self.conn.buf.len();
            if searched > MAX_LINE_LEN {
                return Err(ExchangeError::Oversized {
                    what: WHAT_LINE,
                    len: searched as u64,
                    max: MAX_LINE_LEN as u64,
                });
            }
            if let Got::Eof = self.conn.read_some(usize::MAX, WHAT_LINE, deadline)? {
                let got = self.conn.buf.len();
                return Err(if got == 0 {
                    ExchangeError::PeerClosed {
                        op: Op::Read,
                        what: WHAT_LINE,
                        peer: self.conn.peer().to_owned(),
                    }
                } else {
                    ExchangeError::Truncated {
                        what: WHAT_LINE,
                        from: format!("peer {}", self.conn.peer()),
                        got,
                        // At least the newline was missing.
                        expected: got + 1,
                    }
                });
            }
        }
    }

    /// Receives one line and checks that it is exactly `expected` (e.g. `"done"`).
    pub fn expect_line(
        &mut self,
        expected: &str,
        deadline: impl Into<Deadline>,
    ) -> Result<(), ExchangeError> {
        let line = self.recv_line(deadline)?;
        if line == expected {
            Ok(())
        } else {
            Err(ExchangeError::Malformed {
                what: WHAT_LINE,
                field: "text",
                detail: format!("expected {expected:?}"),
                bytes: escape_bytes(line.as_bytes()),
            })
        }
    }
}
