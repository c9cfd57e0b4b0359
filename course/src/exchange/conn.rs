//! Plumbing shared by both formats: connect with retries, accept with a deadline, and reads
//! and writes that give up at a deadline. Not public: chapters use the typed front ends.

use super::{Deadline, ExchangeError, Op};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Longest single connect attempt; connecting is retried until the deadline anyway.
const CONNECT_TRY: Duration = Duration::from_secs(2);
/// First and longest pause between connect attempts (doubling in between).
const RETRY_FIRST: Duration = Duration::from_millis(10);
const RETRY_MAX: Duration = Duration::from_millis(100);
/// Longest pause between polls of a non-blocking accept.
const ACCEPT_POLL_MAX: Duration = Duration::from_millis(20);
/// How much one read asks the kernel for.
const READ_CHUNK: usize = 4096;

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe
    )
}

/// `host:port` as text, with brackets around an IPv6 literal.
pub(crate) fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Binds a listening socket (std sets `SO_REUSEADDR`, as `ibv_rc_pingpong` does, so a
/// server can be restarted at once on the same port).
pub(crate) fn bind(addr: SocketAddr) -> Result<TcpListener, ExchangeError> {
    TcpListener::bind(addr).map_err(|source| ExchangeError::Bind {
        addr: addr.to_string(),
        source,
    })
}

/// Connects to `host:port`, retrying while the connection is refused (the server may not
/// be listening yet) or an attempt times out, until `deadline`.
pub(crate) fn connect(
    host: &str,
    port: u16,
    what: &'static str,
    deadline: Deadline,
) -> Result<(TcpStream, SocketAddr), ExchangeError> {
    let peer = host_port(host, port);
    let mut pause = RETRY_FIRST;
    let mut last: Option<io::Error> = None;
    loop {
        let addrs: Vec<SocketAddr> = match (host, port).to_socket_addrs() {
            Ok(a) => a.collect(),
            Err(source) => return Err(ExchangeError::Resolve { host: peer, source }),
        };
        if addrs.is_empty() {
            return Err(ExchangeError::Resolve {
                host: peer,
                source: io::Error::new(ErrorKind::NotFound, "no addresses"),
            });
        }
        for addr in addrs {
            let Some(left) = deadline.remaining() else {
                break;
            };
            match TcpStream::connect_timeout(&addr, left.min(CONNECT_TRY)) {
                Ok(stream) => {
                    // Small messages, sent once: don't let Nagle delay them.
                    let _ = stream.set_nodelay(true);
                    return Ok((stream, addr));
                }
                Err(e) if e.kind() == ErrorKind::InvalidInput => {
                    return Err(ExchangeError::Io {
                        op: Op::Connect,
                        what,
                        peer,
                        source: e,
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        let Some(left) = deadline.remaining() else {
            break;
        };
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(RETRY_MAX);
    }
    let after = deadline.budget();
    Err(match last {
        Some(e) if e.kind() == ErrorKind::ConnectionRefused => {
            ExchangeError::Refused { peer, after }
        }
        Some(e) if !is_timeout(&e) => ExchangeError::Io {
            op: Op::Connect,
            what,
            peer,
            source: e,
        },
        _ => ExchangeError::TimedOut {
            op: Op::Connect,
            what,
            peer,
            after,
        },
    })
}

/// Waits for one connection on `listener` until `deadline` (std has no accept timeout:
/// the listener is polled in non-blocking mode, with short sleeps).
pub(crate) fn accept(
    listener: &TcpListener,
    what: &'static str,
    deadline: Deadline,
) -> Result<(TcpStream, SocketAddr), ExchangeError> {
    let local = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "the listening socket".into());
    let io_err = |source| ExchangeError::Io {
        op: Op::Accept,
        what,
        peer: local.clone(),
        source,
    };
    listener.set_nonblocking(true).map_err(io_err)?;
    let mut pause = Duration::from_millis(1);
    loop {
        match listener.accept() {
            Ok((stream, addr)) => {
                stream.set_nonblocking(false).map_err(io_err)?;
                let _ = stream.set_nodelay(true);
                return Ok((stream, addr));
            }
            Err(e)
                if e.kind() == ErrorKind::WouldBlock
                    || e.kind() == ErrorKind::Interrupted
                    || e.kind() == ErrorKind::ConnectionAborted =>
            {
                let Some(left) = deadline.remaining() else {
                    return Err(ExchangeError::TimedOut {
                        op: Op::Accept,
                        what,
                        peer: local,
                        after: deadline.budget(),
                    });
                };
                std::thread::sleep(pause.min(left));
                pause = (pause * 2).min(ACCEPT_POLL_MAX);
            }
            Err(e) => return Err(io_err(e)),
        }
    }
}

/// What a read attempt produced.
pub(crate) enum Got {
    /// Some bytes were appended to the buffer.
    Bytes,
    /// The peer closed its end (end of stream).
    Eof,
}

/// A connected stream with a read-ahead buffer, so text lines and binary messages can
/// follow each other on one stream.
#[derive(Debug)]
pub(crate) struct Conn {
    stream: TcpStream,
    peer: String,
    /// Bytes received but not consumed yet.
    pub(crate) buf: Vec<u8>,
}

impl Conn {
    pub(crate) fn new(stream: TcpStream, peer: SocketAddr) -> Self {
        Conn {
            stream,
            peer: peer.to_string(),
            buf: Vec::new(),
        }
    }

    pub(crate) fn peer(&self) -> &str {
        &self.peer
    }

    /// One read of up to `READ_CHUNK` bytes (fewer if `max` says so), appended to `buf`.
    pub(crate) fn read_some(
        &mut self,
        max: usize,
        what: &'static str,
        deadline: Deadline,
    ) -> Result<Got, ExchangeError> {
        let mut chunk = [0u8; READ_CHUNK];
        let want = max.clamp(1, READ_CHUNK);
        loop {
            let Some(left) = deadline.remaining() else {
                return Err(self.timed_out(Op::Read, what, deadline));
            };
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| self.io(Op::Read, what, e))?;
            match self.stream.read(&mut chunk[..want]) {
                Ok(0) => return Ok(Got::Eof),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(Got::Bytes);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if is_timeout(&e) => return Err(self.timed_out(Op::Read, what, deadline)),
                Err(e) if is_reset(&e) => return Ok(Got::Eof),
                Err(e) => return Err(self.io(Op::Read, what, e)),
            }
        }
    }

    /// Makes sure `buf` holds at least `n` bytes; a peer closing first is `PeerClosed` (no
    /// byte of the message arrived) or `Truncated` (some did). `start` is how many bytes of
    /// the message were already consumed from `buf` (for the error's byte count).
    pub(crate) fn fill(
        &mut self,
        n: usize,
        start: usize,
        total: usize,
        what: &'static str,
        deadline: Deadline,
    ) -> Result<(), ExchangeError> {
        while self.buf.len() < n {
            let missing = n - self.buf.len();
            if let Got::Eof = self.read_some(missing, what, deadline)? {
                let got = start + self.buf.len();
                return Err(if got == 0 {
                    ExchangeError::PeerClosed {
                        op: Op::Read,
                        what,
                        peer: self.peer.clone(),
                    }
                } else {
                    ExchangeError::Truncated {
                        what,
                        from: format!("peer {}", self.peer),
                        got,
                        expected: total,
                    }
                });
            }
        }
        Ok(())
    }

    /// Removes and returns the first `n` buffered bytes (`n <= buf.len()`).
    pub(crate) fn take(&mut self, n: usize) -> Vec<u8> {
        let rest = self.buf.split_off(n.min(self.buf.len()));
        std::mem::replace(&mut self.buf, rest)
    }

    /// Reads exactly `n` bytes.
    pub(crate) fn read_exact(
        &mut self,
        n: usize,
        what: &'static str,
        deadline: Deadline,
    ) -> Result<Vec<u8>, ExchangeError> {
        self.fill(n, 0, n, what, deadline)?;
        Ok(self.take(n))
    }

    /// Writes all of `bytes` before the deadline.
    pub(crate) fn write_all(
        &mut self,
        bytes: &[u8],
        what: &'static str,
        deadline: Deadline,
    ) -> Result<(), ExchangeError> {
        let mut rest = bytes;
        while !rest.is_empty() {
            let Some(left) = deadline.remaining() else {
                return Err(self.timed_out(Op::Write, what, deadline));
            };
            self.stream
                .set_write_timeout(Some(left))
                .map_err(|e| self.io(Op::Write, what, e))?;
            match self.stream.write(rest) {
                Ok(0) => {
                    return Err(ExchangeError::PeerClosed {
                        op: Op::Write,
                        what,
                        peer: self.peer.clone(),
                    });
                }
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if is_timeout(&e) => {
                    return Err(self.timed_out(Op::Write, what, deadline));
                }
                Err(e) if is_reset(&e) => {
                    return Err(ExchangeError::PeerClosed {
                        op: Op::Write,
                        what,
                        peer: self.peer.clone(),
                    });
                }
                Err(e) => return Err(self.io(Op::Write, what, e)),
            }
        }
        Ok(())
    }

    fn timed_out(&self, op: Op, what: &'static str, deadline: Deadline) -> ExchangeError {
        ExchangeError::TimedOut {
            op,
            what,
            peer: self.peer.clone(),
            after: deadline.budget(),
        }
    }

    fn io(&self, op: Op, what: &'static str, source: io::Error) -> ExchangeError {
        ExchangeError::Io {
            op,
            what,
            peer: self.peer.clone(),
            source,
        }
    }
}
