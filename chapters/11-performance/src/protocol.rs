//! What the two roles say to each other over the TCP exchange: the client's requests and the
//! server's replies, one line each.
//!
//! One type for each direction, used at both ends: the client builds a [`Request`] and the
//! server parses the same type back, so a request cannot be spelled one way here and matched
//! another way there. The line format (a word, then numbers) is what `Display` writes and
//! `FromStr` reads; a line that does not parse is an error naming the line.

use std::fmt;
use std::str::FromStr;

use crate::shared::Wait;

/// A request from the client (node b) to the server (node a).
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// The client is done: the server restores the MTU and exits.
    Bye,
    /// The server's CPU time: its process and its node as a whole.
    Cpu,
    /// The server node's softirq threads (see [`crate::softirq_threads`]).
    Softirqd,
    /// The server's cycle-counter rate and `/proc/cpuinfo`'s "cpu MHz".
    Clock,
    /// Bring up QP `id` against the endpoint the client sends next; `path_mtu` 0 is the
    /// port's active MTU.
    Qp { id: u32, path_mtu: u32 },
    /// Destroy every QP but the first.
    DropQps,
    /// Answer `iters` SENDs of `size` bytes on QP 0, waiting as `wait` says.
    SendEcho { size: usize, iters: u64, wait: Wait },
    /// The answering side of the WRITE ping-pong, into the client's buffer at `addr`/`rkey`.
    WritePong {
        size: usize,
        rounds: u64,
        addr: u64,
        rkey: u32,
    },
    /// Echo `iters` messages of `size` bytes on the TCP data port.
    TcpEcho { size: usize, iters: u64 },
    /// Read `total` bytes from the TCP data port.
    TcpSink { total: u64 },
    /// Set the netdev's MTU.
    Mtu(u32),
    /// rxe's `sent_pkts` and `rcvd_pkts` of the server's port.
    Counters,
    /// Start a reference tool's server half: the program and its arguments.
    Tool(Vec<String>),
    /// Stop the tool after at most `keep_secs` seconds more; reply with its exit code.
    ToolEnd { keep_secs: u64 },
}

impl Request {
    /// The request's first word: the server prints each kind once, as it first comes.
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Bye => "bye",
            Request::Cpu => "cpu",
            Request::Softirqd => "softirqd",
            Request::Clock => "clock",
            Request::Qp { .. } => "qp",
            Request::DropQps => "drop-qps",
            Request::SendEcho { .. } => "send-echo",
            Request::WritePong { .. } => "write-pong",
            Request::TcpEcho { .. } => "tcp-echo",
            Request::TcpSink { .. } => "tcp-sink",
            Request::Mtu(_) => "mtu",
            Request::Counters => "counters",
            Request::Tool(_) => "tool",
            Request::ToolEnd { .. } => "tool-end",
        }
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())?;
        match self {
            Request::Bye
            | Request::Cpu
            | Request::Softirqd
            | Request::Clock
            | Request::DropQps
            | Request::Counters => Ok(()),
            Request::Qp { id, path_mtu } => write!(f, " {id} {path_mtu}"),
            Request::SendEcho { size, iters, wait } => {
                write!(f, " {size} {iters} {}", wait.name())
            }
            Request::WritePong {
                size,
                rounds,
                addr,
                rkey,
            } => write!(f, " {size} {rounds} {addr} {rkey}"),
            Request::TcpEcho { size, iters } => write!(f, " {size} {iters}"),
            Request::TcpSink { total } => write!(f, " {total}"),
            Request::Mtu(m) => write!(f, " {m}"),
            Request::Tool(argv) => argv.iter().try_for_each(|a| write!(f, " {a}")),
            Request::ToolEnd { keep_secs } => write!(f, " {keep_secs}"),
        }
    }
}

/// The words of a line after its first, each parsed as a number.
struct Args<'a> {
    /// "request" or "reply", for the error.
    what: &'static str,
    line: &'a str,
    words: std::str::SplitWhitespace<'a>,
}

impl Args<'_> {
    fn num<T: FromStr>(&mut self) -> Result<T, String> {
        self.words
            .next()
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| format!("bad {} {:?}", self.what, self.line))
    }

    /// No word may be left over.
    fn end<T>(mut self, v: T) -> Result<T, String> {
        match self.words.next() {
            None => Ok(v),
            Some(_) => Err(format!("bad {} {:?}", self.what, self.line)),
        }
    }
}

impl FromStr for Request {
    type Err = String;

    fn from_str(line: &str) -> Result<Request, String> {
        let mut words = line.split_whitespace();
        let kind = words.next().unwrap_or("");
        let mut a = Args {
            what: "request",
            line,
            words,
        };
        let r = match kind {
            "bye" => Request::Bye,
            "cpu" => Request::Cpu,
            "softirqd" => Request::Softirqd,
            "clock" => Request::Clock,
            "drop-qps" => Request::DropQps,
            "counters" => Request::Counters,
            "qp" => Request::Qp {
                id: a.num()?,
                path_mtu: a.num()?,
            },
            "send-echo" => {
                let (size, iters) = (a.num()?, a.num()?);
                let w = a.words.next().unwrap_or("");
                let wait = Wait::parse(w).ok_or_else(|| format!("bad wait in {line:?}"))?;
                Request::SendEcho { size, iters, wait }
            }
            "write-pong" => Request::WritePong {
                size: a.num()?,
                rounds: a.num()?,
                addr: a.num()?,
                rkey: a.num()?,
            },
            "tcp-echo" => Request::TcpEcho {
                size: a.num()?,
                iters: a.num()?,
            },
            "tcp-sink" => Request::TcpSink { total: a.num()? },
            "mtu" => Request::Mtu(a.num()?),
            "tool" => {
                let argv: Vec<String> = a.words.map(str::to_string).collect();
                if argv.is_empty() {
                    return Err(format!("bad request {line:?}: no tool"));
                }
                return Ok(Request::Tool(argv));
            }
            "tool-end" => Request::ToolEnd {
                keep_secs: a.num()?,
            },
            _ => return Err(format!("unknown request {line:?}")),
        };
        a.end(r)
    }
}

/// The server's answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Done (drop-qps).
    Ok,
    /// The MTU was set: the port's active MTU now.
    ActiveMtu(u32),
    /// Ready for the client's half (send-echo, write-pong, tcp-*, tool).
    Ready,
    /// The server's half is over.
    Done,
    /// The tool's server half ended with this exit code.
    ToolDone(i32),
    /// ns of CPU: the server's process, and its node.
    Cpu { process_ns: u64, node_ns: u64 },
    /// The server node's softirq threads: ns run, ns waited runnable, times scheduled.
    Softirqd([u64; 3]),
    /// The server's cycle-counter rate (Hz, 0 if unknown) and "cpu MHz".
    Clock { tsc_hz: f64, cpuinfo_mhz: f64 },
    /// rxe's packet counters of the server's port.
    Counters { sent: u64, rcvd: u64 },
    /// The request failed on the server.
    Error(String),
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Ok => f.write_str("ok"),
            Reply::ActiveMtu(m) => write!(f, "ok {m}"),
            Reply::Ready => f.write_str("ready"),
            Reply::Done => f.write_str("done"),
            Reply::ToolDone(code) => write!(f, "done {code}"),
            Reply::Cpu {
                process_ns,
                node_ns,
            } => write!(f, "cpu {process_ns} {node_ns}"),
            Reply::Softirqd([run, wait, slices]) => write!(f, "softirqd {run} {wait} {slices}"),
            Reply::Clock {
                tsc_hz,
                cpuinfo_mhz,
            } => write!(f, "clock {tsc_hz} {cpuinfo_mhz}"),
            Reply::Counters { sent, rcvd } => write!(f, "counters {sent} {rcvd}"),
            Reply::Error(e) => write!(f, "error {e}"),
        }
    }
}

impl FromStr for Reply {
    type Err = String;

    fn from_str(line: &str) -> Result<Reply, String> {
        if let Some(e) = line.strip_prefix("error ") {
            return Ok(Reply::Error(e.to_string()));
        }
        let mut words = line.split_whitespace();
        let kind = words.next().unwrap_or("");
        let mut a = Args {
            what: "reply",
            line,
            words,
        };
        let has_more = a.words.clone().next().is_some();
        let r = match (kind, has_more) {
            ("ok", false) => Reply::Ok,
            ("ok", true) => Reply::ActiveMtu(a.num()?),
            ("ready", _) => Reply::Ready,
            ("done", false) => Reply::Done,
            ("done", true) => Reply::ToolDone(a.num()?),
            ("cpu", _) => Reply::Cpu {
                process_ns: a.num()?,
                node_ns: a.num()?,
            },
            ("softirqd", _) => Reply::Softirqd([a.num()?, a.num()?, a.num()?]),
            ("clock", _) => Reply::Clock {
                tsc_hz: a.num()?,
                cpuinfo_mhz: a.num()?,
            },
            ("counters", _) => Reply::Counters {
                sent: a.num()?,
                rcvd: a.num()?,
            },
            _ => return Err(format!("unknown reply {line:?}")),
        };
        a.end(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every request reads back as itself, so the two ends agree on every line.
    #[test]
    fn requests_round_trip() {
        let all = [
            Request::Bye,
            Request::Cpu,
            Request::Softirqd,
            Request::Clock,
            Request::Qp { id: 3, path_mtu: 0 },
            Request::DropQps,
            Request::SendEcho {
                size: 8,
                iters: 13,
                wait: Wait::Sleep10,
            },
            Request::WritePong {
                size: 64,
                rounds: 5,
                addr: 0x7f00_0000_1000,
                rkey: 0x1234,
            },
            Request::TcpEcho { size: 8, iters: 2 },
            Request::TcpSink { total: 1 << 20 },
            Request::Mtu(9000),
            Request::Counters,
            Request::Tool(vec!["ib_write_lat".into(), "-s".into(), "8".into()]),
            Request::ToolEnd { keep_secs: 2 },
        ];
        for r in all {
            let line = r.to_string();
            assert_eq!(line.parse::<Request>(), Ok(r), "{line}");
        }
    }

    #[test]
    fn replies_round_trip() {
        let all = [
            Reply::Ok,
            Reply::ActiveMtu(4096),
            Reply::Ready,
            Reply::Done,
            Reply::ToolDone(-1),
            Reply::Cpu {
                process_ns: 1,
                node_ns: 2,
            },
            Reply::Softirqd([1, 2, 3]),
            Reply::Clock {
                tsc_hz: 2.5e9,
                cpuinfo_mhz: 2500.0,
            },
            Reply::Counters { sent: 9, rcvd: 4 },
            Reply::Error("unknown request \"x\"".into()),
        ];
        for r in all {
            let line = r.to_string();
            assert_eq!(line.parse::<Reply>(), Ok(r), "{line}");
        }
    }

    #[test]
    fn bad_lines_name_the_line() {
        for (line, want) in [
            ("qp 1", "bad request \"qp 1\""),
            ("mtu x", "bad request \"mtu x\""),
            ("cpu 1", "bad request \"cpu 1\""),
            ("send-echo 8 2 spin", "bad wait in \"send-echo 8 2 spin\""),
            ("tool", "bad request \"tool\": no tool"),
            ("reboot", "unknown request \"reboot\""),
        ] {
            assert_eq!(line.parse::<Request>(), Err(want.to_string()), "{line}");
        }
        assert_eq!(
            "cpu 1".parse::<Reply>(),
            Err("bad reply \"cpu 1\"".to_string())
        );
    }
}
