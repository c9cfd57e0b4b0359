//! The daemon's relay: one client of `cargo lab up`'s daemon, its commands run on the lab's
//! connection under fresh ids and killed when the client goes away.

use super::HEARTBEAT_LIMIT;
use crate::conn::{Cmd, Conn, Event};
use crate::proto::{self, Reply, Request, RunRequest};
use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the relay reports a command lost with its VM (its client sees an exit that could not
/// start, whose message begins with this).
const LOST: &str = "lab lost";

/// Is this the exit the relay reports for a command lost with its VM (see [`LOST`])?
pub fn lost_in_relay(status: &proto::ExitStatus) -> bool {
    matches!(status, proto::ExitStatus::SpawnFailed(m) if m.starts_with(LOST))
}

/// The client's end, shared by the threads that answer it.
type Writer = Arc<Mutex<UnixStream>>;
/// The client's command ids -> the lab connection's ids, for the commands still running.
type Ids = Arc<Mutex<HashMap<u32, u32>>>;

/// Writes one reply to the client (a client gone or stuck is not the relay's error).
fn send(w: &Writer, r: Reply) {
    if let Ok(mut g) = w.lock() {
        let _ = proto::write_frame(&mut *g, &r.encode());
    }
}

/// One client of the daemon: its commands run on `conn` under fresh ids; replies come back
/// under the client's ids; its commands are killed when it disconnects.
///
/// `killed` is the node's on-purpose-kill marker (see owner.rs): while it exists, a ping is
/// answered at once (the node is down because someone asked, not because the lab broke).
pub(super) fn relay(
    client: UnixStream,
    conn: Conn,
    stop: Arc<(Mutex<bool>, std::sync::Condvar)>,
    killed: PathBuf,
) {
    let Ok(writer) = client.try_clone() else {
        return;
    };
    // A client that stopped reading must not block the relay (nor the lab's reader thread).
    let _ = writer.set_write_timeout(Some(Duration::from_secs(10)));
    let writer: Writer = Arc::new(Mutex::new(writer));
    let ids: Ids = Arc::new(Mutex::new(HashMap::new()));
    let mut reader = client;
    while let Ok(Some((tag, body))) = proto::read_frame(&mut reader) {
        let Ok(req) = Request::decode(tag, &body) else {
            break;
        };
        match req {
            Request::Host { id, line } => answer_host(&writer, &conn, id, line),
            Request::HostAnswer { .. } => {}
            Request::Ping if killed.exists() => send(
                &writer,
                Reply::Ready {
                    error: String::new(),
                },
            ),
            Request::Ping => answer_ping(&writer, &conn),
            Request::Run(r) => run(&writer, &conn, &ids, r),
            Request::Kill { id } => {
                let gid = ids.lock().unwrap().get(&id).copied();
                if let Some(g) = gid {
                    conn.kill(g);
                }
            }
            Request::Stdin { id, data } => {
                let gid = ids.lock().unwrap().get(&id).copied();
                if let Some(g) = gid {
                    let _ = conn.write_stdin(g, data);
                }
            }
            Request::Shutdown => {
                let (m, cv) = &*stop;
                *m.lock().unwrap() = true;
                cv.notify_all();
                break;
            }
        }
    }
    // The client went away: its commands go too.
    let left: Vec<u32> = ids.lock().unwrap().values().copied().collect();
    for g in left {
        conn.kill(g);
    }
    if let Ok(mut w) = writer.lock() {
        let _ = w.flush();
    }
}

/// A host request from the client, answered by the lab's owner from a thread of its own.
fn answer_host(writer: &Writer, conn: &Conn, id: u32, line: String) {
    let w = writer.clone();
    let conn = conn.clone();
    std::thread::spawn(move || {
        let (ok, text) = match conn.handle_host(&line) {
            Ok(t) => (true, t),
            Err(e) => (false, e),
        };
        send(&w, Reply::HostAnswer { id, ok, text });
    });
}

/// A heartbeat, answered end to end: the answer says the agent in the VM answered, not just
/// the relay.
fn answer_ping(writer: &Writer, conn: &Conn) {
    let w = writer.clone();
    let conn = conn.clone();
    std::thread::spawn(move || {
        let error = match conn.ping(HEARTBEAT_LIMIT) {
            Ok(()) => String::new(),
            Err(e) => format!("the lab's VM does not answer: {e}"),
        };
        send(&w, Reply::Ready { error });
    });
}

/// Runs the client's command `r` on the lab under a fresh id, its output and exit sent back
/// under the client's id.
fn run(writer: &Writer, conn: &Conn, ids: &Ids, r: RunRequest) {
    let cid = r.id;
    let cmd = Cmd {
        argv: r.argv,
        env: r.env,
        cwd: r.cwd,
        timeout: (r.timeout_ms > 0).then(|| Duration::from_millis(r.timeout_ms)),
        stdin: r.stdin,
    };
    let w = writer.clone();
    let ids2 = ids.clone();
    let res = conn.spawn(&cmd, move |ev| {
        let reply = match ev {
            Event::Stdout(data) => Reply::Stdout { id: cid, data },
            Event::Stderr(data) => Reply::Stderr { id: cid, data },
            Event::Exit(status) => {
                ids2.lock().unwrap().remove(&cid);
                Reply::Exit { id: cid, status }
            }
            Event::Lost(why) => {
                ids2.lock().unwrap().remove(&cid);
                Reply::Exit {
                    id: cid,
                    status: proto::ExitStatus::SpawnFailed(format!("{LOST}: {why}")),
                }
            }
        };
        send(&w, reply);
    });
    match res {
        Ok(gid) => {
            ids.lock().unwrap().insert(cid, gid);
        }
        Err(e) => send(
            writer,
            Reply::Exit {
                id: cid,
                status: proto::ExitStatus::SpawnFailed(format!("{e:#}")),
            },
        ),
    }
}
