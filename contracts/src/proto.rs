// The host <-> guest agent protocol. std only: harness/build.rs compiles this crate with
// `$RUSTC` alone into the guest agent as well.
//
// A frame is `u32 length (little endian) | u8 tag | body`, the length counting tag + body.
// Integers are little endian; strings and byte strings are `u32 length | bytes`.
//
// Host -> agent: Run, Kill, Ping (answered by Ready once the guest is set up), Shutdown, and
// Stdin (bytes for a command started with `stdin`; empty = end of input).
// Agent -> host: Ready, Stdout, Stderr, Exit. Several commands run at once; each reply names
// the command's id. A command's stdin is closed unless its Run asked for it.
//
// Requests to the lab's owner (the process that runs the VMs), either way: `Host { id, line }`
// asks for something only the host can do (a `HostRequest` as text: "freeze a", "kill b",
// "restart b"), and `HostAnswer { id, ok, text }` answers it. A program in the guest asks
// through the agent (the agent's socket, `$LAB_HOST`); `cargo lab fault` asks a lab daemon
// through its relay.

use std::io::{self, Read, Write};

/// Largest frame either side accepts (output is sent in chunks far below this).
pub const MAX_FRAME: usize = 16 << 20;
/// Output chunk size the agent reads and forwards.
pub const CHUNK: usize = 64 << 10;

const T_RUN: u8 = 1;
const T_KILL: u8 = 2;
const T_PING: u8 = 3;
const T_SHUTDOWN: u8 = 4;
const T_STDIN: u8 = 5;
const T_HOST: u8 = 6;
const T_HOST_ANSWER: u8 = 7;
const T_READY: u8 = 16;
const T_STDOUT: u8 = 17;
const T_STDERR: u8 = 18;
const T_EXIT: u8 = 19;

/// A command to run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunRequest {
    /// Chosen by the sender; unique among its running commands.
    pub id: u32,
    pub argv: Vec<String>,
    /// Added to the agent's base environment (PATH, HOME).
    pub env: Vec<(String, String)>,
    /// Working directory ("" = the agent's).
    pub cwd: String,
    /// 0 = no limit. On expiry the command's process group is killed and `Exit` says `TimedOut`.
    pub timeout_ms: u64,
    /// Keep the command's stdin open for `Stdin` requests (else it reads end of file at once).
    pub stdin: bool,
    /// A guest drops its page cache, dentries and inodes before the command
    /// (`drop_caches` 3). The host asks for it unless the command's files are the ones the
    /// last drop was made for, unchanged (harness/README.md, "What the guest runs").
    pub drop_caches: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Run(RunRequest),
    Kill {
        id: u32,
    },
    /// Input for a command started with `stdin`; empty `data` closes its stdin.
    Stdin {
        id: u32,
        data: Vec<u8>,
    },
    Ping,
    Shutdown,
    /// A request to the lab's owner (from a client of a daemon).
    Host {
        id: u32,
        line: String,
    },
    /// The owner's answer to a guest program's [`Reply::Host`].
    HostAnswer {
        id: u32,
        ok: bool,
        text: String,
    },
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
    /// Killed by the agent because its timeout expired.
    TimedOut,
    /// Could not be started (no such program, bad cwd ...).
    SpawnFailed(String),
}

impl ExitStatus {
    /// A shell-like exit code: the code, 128 + signal, 124 on timeout, 127 if never started.
    pub fn code(&self) -> i32 {
        match self {
            ExitStatus::Code(c) => *c,
            ExitStatus::Signal(s) => 128 + s,
            ExitStatus::TimedOut => 124,
            ExitStatus::SpawnFailed(_) => 127,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The guest is set up (`error` empty) or its setup failed (`error` says why).
    Ready {
        error: String,
    },
    Stdout {
        id: u32,
        data: Vec<u8>,
    },
    Stderr {
        id: u32,
        data: Vec<u8>,
    },
    Exit {
        id: u32,
        status: ExitStatus,
    },
    /// A guest program's request to the lab's owner.
    Host {
        id: u32,
        line: String,
    },
    /// The owner's answer to a [`Request::Host`].
    HostAnswer {
        id: u32,
        ok: bool,
        text: String,
    },
}

fn enc_host(tag: u8, id: u32, line: &str) -> Vec<u8> {
    let mut e = Enc::new(tag);
    e.u32(id);
    e.bytes(line.as_bytes());
    e.finish()
}

fn enc_answer(id: u32, ok: bool, text: &str) -> Vec<u8> {
    let mut e = Enc::new(T_HOST_ANSWER);
    e.u32(id);
    e.u32(u32::from(ok));
    e.bytes(text.as_bytes());
    e.finish()
}

struct Enc(Vec<u8>);

impl Enc {
    fn new(tag: u8) -> Enc {
        Enc(vec![0, 0, 0, 0, tag])
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    fn finish(mut self) -> Vec<u8> {
        let len = (self.0.len() - 4) as u32;
        self.0[..4].copy_from_slice(&len.to_le_bytes());
        self.0
    }
}

struct Dec<'a>(&'a [u8]);

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("lab protocol: {what}"))
}

impl Dec<'_> {
    fn take(&mut self, n: usize) -> io::Result<&[u8]> {
        if self.0.len() < n {
            return Err(bad("truncated frame"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u32(&mut self) -> io::Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> io::Result<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn bytes(&mut self) -> io::Result<Vec<u8>> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn string(&mut self) -> io::Result<String> {
        String::from_utf8(self.bytes()?).map_err(|_| bad("string is not UTF-8"))
    }
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Request::Run(r) => {
                let mut e = Enc::new(T_RUN);
                e.u32(r.id);
                e.u32(r.argv.len() as u32);
                for a in &r.argv {
                    e.bytes(a.as_bytes());
                }
                e.u32(r.env.len() as u32);
                for (k, v) in &r.env {
                    e.bytes(k.as_bytes());
                    e.bytes(v.as_bytes());
                }
                e.bytes(r.cwd.as_bytes());
                e.u64(r.timeout_ms);
                e.u32(u32::from(r.stdin));
                e.u32(u32::from(r.drop_caches));
                e.finish()
            }
            Request::Stdin { id, data } => {
                let mut e = Enc::new(T_STDIN);
                e.u32(*id);
                e.bytes(data);
                e.finish()
            }
            Request::Kill { id } => {
                let mut e = Enc::new(T_KILL);
                e.u32(*id);
                e.finish()
            }
            Request::Ping => Enc::new(T_PING).finish(),
            Request::Shutdown => Enc::new(T_SHUTDOWN).finish(),
            Request::Host { id, line } => enc_host(T_HOST, *id, line),
            Request::HostAnswer { id, ok, text } => enc_answer(*id, *ok, text),
        }
    }

    pub fn decode(tag: u8, body: &[u8]) -> io::Result<Request> {
        let mut d = Dec(body);
        Ok(match tag {
            T_RUN => {
                let id = d.u32()?;
                let n = d.u32()? as usize;
                let mut argv = Vec::with_capacity(n.min(4096));
                for _ in 0..n {
                    argv.push(d.string()?);
                }
                let n = d.u32()? as usize;
                let mut env = Vec::with_capacity(n.min(4096));
                for _ in 0..n {
                    let k = d.string()?;
                    let v = d.string()?;
                    env.push((k, v));
                }
                let cwd = d.string()?;
                let timeout_ms = d.u64()?;
                let stdin = d.u32()? != 0;
                // A sender from before the field (a client older than its lab's daemon):
                // drop, as every command did then.
                let drop_caches = d.0.is_empty() || d.u32()? != 0;
                Request::Run(RunRequest {
                    id,
                    argv,
                    env,
                    cwd,
                    timeout_ms,
                    stdin,
                    drop_caches,
                })
            }
            T_STDIN => Request::Stdin {
                id: d.u32()?,
                data: d.bytes()?,
            },
            T_KILL => Request::Kill { id: d.u32()? },
            T_PING => Request::Ping,
            T_SHUTDOWN => Request::Shutdown,
            T_HOST => Request::Host {
                id: d.u32()?,
                line: d.string()?,
            },
            T_HOST_ANSWER => Request::HostAnswer {
                id: d.u32()?,
                ok: d.u32()? != 0,
                text: d.string()?,
            },
            t => return Err(bad(&format!("unknown request tag {t}"))),
        })
    }
}

impl Reply {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Reply::Ready { error } => {
                let mut e = Enc::new(T_READY);
                e.bytes(error.as_bytes());
                e.finish()
            }
            Reply::Stdout { id, data } | Reply::Stderr { id, data } => {
                let tag = if matches!(self, Reply::Stdout { .. }) {
                    T_STDOUT
                } else {
                    T_STDERR
                };
                let mut e = Enc::new(tag);
                e.u32(*id);
                e.bytes(data);
                e.finish()
            }
            Reply::Exit { id, status } => {
                let mut e = Enc::new(T_EXIT);
                e.u32(*id);
                match status {
                    ExitStatus::Code(c) => {
                        e.u32(0);
                        e.u32(*c as u32);
                    }
                    ExitStatus::Signal(s) => {
                        e.u32(1);
                        e.u32(*s as u32);
                    }
                    ExitStatus::TimedOut => {
                        e.u32(2);
                        e.u32(0);
                    }
                    ExitStatus::SpawnFailed(m) => {
                        e.u32(3);
                        e.bytes(m.as_bytes());
                    }
                }
                e.finish()
            }
            Reply::Host { id, line } => enc_host(T_HOST, *id, line),
            Reply::HostAnswer { id, ok, text } => enc_answer(*id, *ok, text),
        }
    }

    pub fn decode(tag: u8, body: &[u8]) -> io::Result<Reply> {
        let mut d = Dec(body);
        Ok(match tag {
            T_READY => Reply::Ready { error: d.string()? },
            T_STDOUT => Reply::Stdout {
                id: d.u32()?,
                data: d.bytes()?,
            },
            T_STDERR => Reply::Stderr {
                id: d.u32()?,
                data: d.bytes()?,
            },
            T_EXIT => {
                let id = d.u32()?;
                let status = match d.u32()? {
                    0 => ExitStatus::Code(d.u32()? as i32),
                    1 => ExitStatus::Signal(d.u32()? as i32),
                    2 => ExitStatus::TimedOut,
                    3 => ExitStatus::SpawnFailed(d.string()?),
                    k => return Err(bad(&format!("unknown exit kind {k}"))),
                };
                Reply::Exit { id, status }
            }
            T_HOST => Reply::Host {
                id: d.u32()?,
                line: d.string()?,
            },
            T_HOST_ANSWER => Reply::HostAnswer {
                id: d.u32()?,
                ok: d.u32()? != 0,
                text: d.string()?,
            },
            t => return Err(bad(&format!("unknown reply tag {t}"))),
        })
    }
}

/// Reads one frame: `Ok(None)` on a clean end of stream before a frame starts.
pub fn read_frame<R: Read>(r: &mut R) -> io::Result<Option<(u8, Vec<u8>)>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_le_bytes(len) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(bad(&format!("bad frame length {len}")));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    let tag = buf[0];
    buf.remove(0);
    Ok(Some((tag, buf)))
}

/// Writes one already encoded frame and flushes it.
pub fn write_frame<W: Write>(w: &mut W, frame: &[u8]) -> io::Result<()> {
    w.write_all(frame)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip_req(r: Request) {
        let f = r.encode();
        let (tag, body) = read_frame(&mut &f[..]).unwrap().unwrap();
        assert_eq!(Request::decode(tag, &body).unwrap(), r);
    }

    fn roundtrip_reply(r: Reply) {
        let f = r.encode();
        let (tag, body) = read_frame(&mut &f[..]).unwrap().unwrap();
        assert_eq!(Reply::decode(tag, &body).unwrap(), r);
    }

    #[test]
    fn a_run_from_before_drop_caches_drops() {
        let r = Request::Run(RunRequest {
            argv: vec!["true".into()],
            ..RunRequest::default()
        });
        let f = r.encode();
        let (tag, body) = read_frame(&mut &f[..]).unwrap().unwrap();
        let old = &body[..body.len() - 4];
        match Request::decode(tag, old).unwrap() {
            Request::Run(r) => assert!(r.drop_caches && r.argv == ["true"]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_message_roundtrips() {
        roundtrip_req(Request::Run(RunRequest {
            id: 7,
            argv: vec!["sh".into(), "-c".into(), "echo é".into()],
            env: vec![("A".into(), "1".into()), ("EMPTY".into(), String::new())],
            cwd: "/tmp".into(),
            timeout_ms: 1234,
            stdin: true,
            drop_caches: true,
        }));
        roundtrip_req(Request::Run(RunRequest::default()));
        roundtrip_req(Request::Kill { id: u32::MAX });
        roundtrip_req(Request::Stdin {
            id: 3,
            data: b"line\n".to_vec(),
        });
        roundtrip_req(Request::Stdin {
            id: 3,
            data: vec![],
        });
        roundtrip_req(Request::Ping);
        roundtrip_req(Request::Shutdown);
        roundtrip_req(Request::Host {
            id: 4,
            line: "kill b".into(),
        });
        roundtrip_req(Request::HostAnswer {
            id: 5,
            ok: false,
            text: "no such node".into(),
        });
        roundtrip_reply(Reply::Host {
            id: 6,
            line: "freeze a".into(),
        });
        roundtrip_reply(Reply::HostAnswer {
            id: 7,
            ok: true,
            text: "node a frozen\n".into(),
        });
        roundtrip_reply(Reply::Ready {
            error: String::new(),
        });
        roundtrip_reply(Reply::Ready {
            error: "no GID".into(),
        });
        roundtrip_reply(Reply::Stdout {
            id: 1,
            data: vec![0, 1, 2, 255],
        });
        roundtrip_reply(Reply::Stderr {
            id: 2,
            data: vec![],
        });
        for status in [
            ExitStatus::Code(0),
            ExitStatus::Code(-1),
            ExitStatus::Signal(9),
            ExitStatus::TimedOut,
            ExitStatus::SpawnFailed("nope".into()),
        ] {
            roundtrip_reply(Reply::Exit { id: 3, status });
        }
    }

    #[test]
    fn frames_follow_each_other_and_end_cleanly() {
        let mut buf = Request::Ping.encode();
        buf.extend(Request::Kill { id: 5 }.encode());
        let mut r = &buf[..];
        assert_eq!(read_frame(&mut r).unwrap().unwrap().0, T_PING);
        assert_eq!(read_frame(&mut r).unwrap().unwrap().0, T_KILL);
        assert!(read_frame(&mut r).unwrap().is_none());
    }

    #[test]
    fn truncated_and_bad_frames_are_errors() {
        let f = Request::Kill { id: 5 }.encode();
        assert!(read_frame(&mut &f[..f.len() - 1]).is_err());
        assert!(read_frame(&mut &f[..2]).is_err());
        assert!(read_frame(&mut &[0u8, 0, 0, 0][..]).is_err());
        assert!(read_frame(&mut &[0xffu8, 0xff, 0xff, 0x7f][..]).is_err());
        assert!(Request::decode(99, &[]).is_err());
        assert!(Reply::decode(T_EXIT, &[1, 0, 0, 0, 9, 0, 0, 0]).is_err());
        assert!(Request::decode(T_RUN, &[1, 0]).is_err());
    }

    #[test]
    fn exit_codes_are_shell_like() {
        assert_eq!(ExitStatus::Code(3).code(), 3);
        assert_eq!(ExitStatus::Signal(9).code(), 137);
        assert_eq!(ExitStatus::TimedOut.code(), 124);
        assert_eq!(ExitStatus::SpawnFailed(String::new()).code(), 127);
    }
}
