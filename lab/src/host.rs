//! Asking the lab's host for what a program inside a VM cannot do itself.
//!
//! Some failures need someone outside both nodes: freezing the peer's VM (QEMU stops its
//! vCPUs), killing it, booting it again, recording the wire between the two. The microVM lab's
//! agent exports `LAB_HOST`, the path of a unix socket, to every program it starts. [`ask`]
//! writes one line there ("freeze a", "kill a", "restart a", "trace start", "trace stop",
//! "status") and reads the answer: `ok N` or `err N`, a newline, then N bytes of text. The
//! process that runs the VMs carries out the request.
//!
//! On a native host there is no VM to freeze or kill, and `LAB_HOST` is not set: [`ask`] says
//! so, and says where it works.

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
pub fn ask(line: &str, limit: Duration) -> Result<String, HostError> {
    let path = std::env::var_os("LAB_HOST").ok_or(HostError::NotInLab)?;
    ask_at(std::path::Path::new(&path), line, limit)
}

/// [`ask`] at a given socket.
pub fn ask_at(path: &std::path::Path, line: &str, limit: Duration) -> Result<String, HostError> {
    let io = |e: std::io::Error| HostError::Io(format!("{}: {e}", line.trim()));
    let mut s = UnixStream::connect(path).map_err(io)?;
    let deadline = Instant::now() + limit;
    s.set_write_timeout(Some(limit)).map_err(io)?;
    s.write_all(format!("{}\n", line.trim()).as_bytes())
        .map_err(io)?;
    // The head, `ok N` or `err N`, byte by byte up to its newline.
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HostError::Io(format!(
                "no answer to {:?} within {} s",
                line.trim(),
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
    let head = String::from_utf8_lossy(&head).into_owned();
    let (ok, n) = parse_head(&head).ok_or_else(|| HostError::Io(format!("bad answer {head:?}")))?;
    let mut text = vec![0u8; n];
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(io)?;
    s.read_exact(&mut text).map_err(io)?;
    let text = String::from_utf8_lossy(&text).into_owned();
    if ok {
        Ok(text)
    } else {
        Err(HostError::Refused(text))
    }
}

/// `ok 12` -> (true, 12); `err 3` -> (false, 3).
fn parse_head(head: &str) -> Option<(bool, usize)> {
    let (word, n) = head.split_once(' ')?;
    let ok = match word {
        "ok" => true,
        "err" => false,
        _ => return None,
    };
    Some((ok, n.trim().parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads() {
        assert_eq!(parse_head("ok 12"), Some((true, 12)));
        assert_eq!(parse_head("err 0"), Some((false, 0)));
        assert_eq!(parse_head("maybe 3"), None);
        assert_eq!(parse_head("ok many"), None);
    }

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
                let (head, body) = if i == 0 {
                    ("ok", format!("did {}", String::from_utf8_lossy(&line)))
                } else {
                    ("err", "no such node".to_string())
                };
                s.write_all(format!("{head} {}\n{body}", body.len()).as_bytes())
                    .unwrap();
            }
        });
        assert_eq!(
            ask_at(&sock, "freeze a", Duration::from_secs(5)).unwrap(),
            "did freeze a"
        );
        assert_eq!(
            ask_at(&sock, "kill c", Duration::from_secs(5)),
            Err(HostError::Refused("no such node".into()))
        );
        t.join().unwrap();
    }
}
