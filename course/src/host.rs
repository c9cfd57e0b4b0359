//! Asking the lab's host for what a program inside a VM cannot do itself.
//!
//! Some failures need someone outside both nodes: freezing the peer's VM (QEMU stops its
//! vCPUs), killing it, booting it again, recording the wire between the two. The microVM lab's
//! agent exports `LAB_HOST`, the path of a unix socket, to every program it starts. [`ask`]
//! writes one [`HostRequest`] there as a line ("freeze a", "kill a", "restart a",
//! "trace start", "trace stop", "status") and reads the [`HostReply`]: `ok N` or `err N`, a
//! newline, then N bytes of text. The process that runs the VMs carries out the request.
//!
//! On a native host there is no VM to freeze or kill, and `LAB_HOST` is not set: [`ask`] says
//! so, and says where it works.

pub use contracts::{HostReply, HostRequest, Node, ParseRequestError, ReplyHead};
use std::fmt;
use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Why a request to the host did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostError {
    /// Not in the microVM lab (`LAB_HOST` unset).
    NotInLab,
    /// The socket or the exchange on it failed, or the answer did not come in time.
    Io(String),
    /// The host answered, and refused: the text says why.
    Refused(String),
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::NotInLab => write!(
                f,
                "this needs the microVM lab's host (LAB_HOST is not set: not inside a lab VM); \
                 run it with `LAB_PROVIDER=vm cargo lab run ...`"
            ),
            HostError::Io(e) => write!(
                f,
                "talking to the lab's host: {e} (the lab VM's agent serves LAB_HOST; `cargo lab \
                 status` shows whether the lab is up)"
            ),
            HostError::Refused(why) => write!(f, "the lab's host refused: {why}"),
        }
    }
}

impl std::error::Error for HostError {}

/// Is there a host to ask?
pub fn available() -> bool {
    std::env::var_os("LAB_HOST").is_some()
}

/// Sends one request and waits at most `limit` for its answer (a restart takes seconds).
pub fn ask(request: HostRequest, limit: Duration) -> Result<String, HostError> {
    let path = std::env::var_os("LAB_HOST").ok_or(HostError::NotInLab)?;
    ask_at(std::path::Path::new(&path), request, limit)
}

/// [`ask`] at a given socket.
pub fn ask_at(
    path: &std::path::Path,
    request: HostRequest,
    limit: Duration,
) -> Result<String, HostError> {
    let line = request.to_string();
    let io = |e: std::io::Error| HostError::Io(format!("{line}: {e}"));
    let mut s = UnixStream::connect(path).map_err(io)?;
    let deadline = Instant::now() + limit;
    s.set_write_timeout(Some(limit)).map_err(io)?;
    s.write_all(format!("{line}\n").as_bytes()).map_err(io)?;
    // The head, `ok N` or `err N`, byte by byte up to its newline.
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HostError::Io(format!(
                "no answer to {line:?} within {} s",
                limit.as_secs()
            )));
        }
        s.set_read_timeout(Some(left)).map_err(io)?;
        match s.read(&mut b) {
            Ok(0) => return Err(HostError::Io("the host closed the socket".into())),
            Ok(_) if b[0] == b'\n' => break,
            Ok(_) if head.len() < 64 => head.push(b[0]),
            Ok(_) => return Err(HostError::Io("a malformed answer".into())),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(io(e)),
        }
    }
    let head: ReplyHead = String::from_utf8_lossy(&head)
        .parse()
        .map_err(|e| HostError::Io(format!("{e}")))?;
    let mut text = vec![0u8; head.len];
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(io)?;
    s.read_exact(&mut text).map_err(io)?;
    let text = String::from_utf8_lossy(&text).into_owned();
    HostReply::from_parts(head, text)
        .into_result()
        .map_err(HostError::Refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_that_answers_and_one_that_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("host.sock");
        let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let t = std::thread::spawn(move || {
            for (i, s) in l.incoming().take(2).enumerate() {
                let mut s = s.unwrap();
                let mut line = Vec::new();
                let mut b = [0u8; 1];
                while s.read(&mut b).unwrap() == 1 && b[0] != b'\n' {
                    line.push(b[0]);
                }
                let reply = if i == 0 {
                    HostReply::Done(format!("did {}", String::from_utf8_lossy(&line)))
                } else {
                    HostReply::Refused("node b is not here".to_string())
                };
                s.write_all(reply.to_string().as_bytes()).unwrap();
            }
        });
        assert_eq!(
            ask_at(&sock, HostRequest::Freeze(Node::A), Duration::from_secs(5)).unwrap(),
            "did freeze a"
        );
        assert_eq!(
            ask_at(&sock, HostRequest::Kill(Node::B), Duration::from_secs(5)),
            Err(HostError::Refused("node b is not here".into()))
        );
        t.join().unwrap();
    }
}
