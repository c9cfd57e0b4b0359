//! Requests of programs in the guest to the lab's owner on the host: a program connects to
//! [`HOST_SOCK`] (exported to it as `$LAB_HOST`), writes one line, and gets the host's
//! [`HostReply`] back. The line goes to the host as `Reply::Host` on the connection being
//! served; the host's `Request::HostAnswer` comes back through `serve` in main.rs.

use contracts::HostReply;
use contracts::proto::Reply;
use lab_agent::runner::Sink;
use std::collections::HashMap;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Where programs in the guest reach the lab's owner (exported to them as `LAB_HOST`).
pub(crate) const HOST_SOCK: &str = "/run/lab-host.sock";

/// Guest programs' requests to the host: the current connection's sink, and who waits for
/// which answer.
pub(crate) struct HostDesk {
    sink: Mutex<Option<Sink>>,
    pending: Mutex<HashMap<u32, UnixStream>>,
    next: AtomicU32,
}

/// The one desk of this agent.
pub(crate) fn desk() -> &'static HostDesk {
    static D: OnceLock<HostDesk> = OnceLock::new();
    D.get_or_init(|| HostDesk {
        sink: Mutex::new(None),
        pending: Mutex::new(HashMap::new()),
        next: AtomicU32::new(1),
    })
}

impl HostDesk {
    /// Requests go to the host through `sink` (the connection now served) from now on.
    pub(crate) fn attach(&self, sink: Sink) {
        *self.sink.lock().unwrap() = Some(sink);
    }

    /// The connection ended: the sink holds the port open, so let it go with it, and forget
    /// who waits for an answer over it.
    pub(crate) fn detach(&self) {
        *self.sink.lock().unwrap() = None;
        self.pending.lock().unwrap().clear();
    }

    /// The host's answer to request `id`, to the program waiting for it (if it still is).
    pub(crate) fn deliver(&self, id: u32, reply: HostReply) {
        let waiting = self.pending.lock().unwrap().remove(&id);
        if let Some(s) = waiting {
            answer(s, reply);
        }
    }
}

fn answer(mut s: UnixStream, reply: HostReply) {
    let _ = s.write_all(reply.to_string().as_bytes());
}

/// Serves `HOST_SOCK`: each connection sends one line, which goes to the host as
/// `Reply::Host`; the host's `Request::HostAnswer` is written back (see `serve`).
pub(crate) fn serve_host_requests() -> Result<(), String> {
    let _ = fs::remove_file(HOST_SOCK);
    let l = UnixListener::bind(HOST_SOCK).map_err(|e| format!("binding {HOST_SOCK}: {e}"))?;
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let mut line = Vec::new();
                let mut byte = [0u8; 1];
                let mut r = &s;
                while line.len() < 4096 {
                    match r.read(&mut byte) {
                        Ok(1) if byte[0] != b'\n' => line.push(byte[0]),
                        _ => break,
                    }
                }
                let line = String::from_utf8_lossy(&line).trim().to_string();
                let d = desk();
                let sink = d.sink.lock().unwrap().clone();
                let (Some(sink), Ok(keep)) = (sink, s.try_clone()) else {
                    answer(
                        s,
                        HostReply::Refused(
                            "the lab's host is not connected to this VM's agent".into(),
                        ),
                    );
                    return;
                };
                let id = d.next.fetch_add(1, Ordering::Relaxed);
                d.pending.lock().unwrap().insert(id, keep);
                sink(Reply::Host { id, line });
            });
        }
    });
    Ok(())
}
