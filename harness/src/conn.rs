//! The host side of the agent protocol: one connection, many concurrent commands.
//!
//! A [`Conn`] owns one byte stream to an agent (the VM's virtio-serial socket, a `cargo lab up`
//! daemon's relay socket, or a local [`Runner`](crate::runner::Runner) for the native provider)
//! and multiplexes it: a reader thread routes each reply to the command it names.
//!
//! All clones of a `Conn` share one slot: [`Conn::replace`] points every clone at a new
//! connection. A node restarted by `cargo lab fault restart <node>` gets a new VM and agent,
//! and the daemon's relays, the heartbeat and the tests carry on with it. A Conn can also
//! serve requests to the lab's owner ([`Conn::serve_host`]) and send them
//! ([`Conn::host_request`]).

use crate::exec_files;
use crate::proto::{self, ExitStatus, Reply, Request, RunRequest};
use crate::runner::Runner;
use std::collections::HashMap;
use std::io;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

/// A command to run in the lab.
#[derive(Debug, Clone, Default)]
pub struct Cmd {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Working directory ("" = the agent's default, `/`).
    pub cwd: String,
    /// Enforced by the agent (kills the process group); `None` = no limit there.
    pub timeout: Option<Duration>,
    /// Keep stdin open for [`Conn::write_stdin`] (else the command reads end of file).
    pub stdin: bool,
}

impl Cmd {
    pub fn new<I: IntoIterator<Item = S>, S: Into<String>>(argv: I) -> Cmd {
        Cmd {
            argv: argv.into_iter().map(Into::into).collect(),
            ..Cmd::default()
        }
    }
    pub fn env(mut self, k: impl Into<String>, v: impl Into<String>) -> Cmd {
        self.env.push((k.into(), v.into()));
        self
    }
    pub fn cwd(mut self, dir: impl Into<String>) -> Cmd {
        self.cwd = dir.into();
        self
    }
    pub fn timeout(mut self, t: Duration) -> Cmd {
        self.timeout = Some(t);
        self
    }
    pub fn with_stdin(mut self) -> Cmd {
        self.stdin = true;
        self
    }
}

/// What happens to a running command, in order: output chunks, then one `Exit` (or `Lost`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Exit(ExitStatus),
    /// The connection to the agent broke (the VM died, the daemon went away).
    Lost(String),
}

/// A finished command.
#[derive(Debug, Clone)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

type Route = Arc<Mutex<Box<dyn FnMut(Event) + Send>>>;

/// Answers a request to the lab's owner ("kill b"): Ok(text) or Err(why).
pub type HostHandler = Arc<dyn Fn(&str) -> Result<String, String> + Send + Sync>;

struct Routes {
    map: HashMap<u32, Route>,
    closed: Option<String>,
}

enum Transport {
    Stream(Mutex<UnixStream>),
    Local(Runner),
}

struct Inner {
    name: String,
    transport: Transport,
    routes: Mutex<Routes>,
    ready: Mutex<Option<Result<(), String>>>,
    ready_cv: Condvar,
    /// Every `Ready` seen (answers to pings: the heartbeat) and the last one's error.
    pongs: Mutex<(u64, String)>,
    next_id: AtomicU32,
    /// Serves the other end's `Host` requests (the owner of a lab sets it).
    host: Mutex<Option<HostHandler>>,
    /// Our own `Host` requests waiting for their answer.
    answers: Mutex<HashMap<u32, mpsc::Sender<(bool, String)>>>,
    /// The [`exec_files::fingerprint`] of the last command this connection asked the agent to
    /// drop its caches for (none yet: the first command asks). Held while a `Run` is sent, so
    /// that a command never overtakes the drop another one asked for.
    dropped_for: Mutex<Option<u64>>,
}

/// How long a write to the agent may block (a peer that stopped reading): past it the write
/// fails instead of hanging the caller.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection to an agent. Cheap to clone; all clones share the connection.
#[derive(Clone)]
pub struct Conn {
    slot: Arc<Mutex<Arc<Inner>>>,
    name: Arc<str>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("name", &self.name).finish()
    }
}

impl Inner {
    fn dispatch(self: &Arc<Self>, reply: Reply) {
        let (id, ev) = match reply {
            Reply::Ready { error } => {
                {
                    let mut p = self.pongs.lock().unwrap();
                    p.0 += 1;
                    p.1 = error.clone();
                }
                *self.ready.lock().unwrap() =
                    Some(if error.is_empty() { Ok(()) } else { Err(error) });
                self.ready_cv.notify_all();
                return;
            }
            Reply::Stdout { id, data } => (id, Event::Stdout(data)),
            Reply::Stderr { id, data } => (id, Event::Stderr(data)),
            Reply::Exit { id, status } => (id, Event::Exit(status)),
            Reply::Host { id, line } => {
                // Served on a thread of its own: a restart takes seconds, and the reader
                // thread must go on routing output meanwhile.
                let handler = self.host.lock().unwrap().clone();
                let me = Arc::downgrade(self);
                std::thread::spawn(move || {
                    let (ok, text) = match handler {
                        Some(h) => match h(&line) {
                            Ok(t) => (true, t),
                            Err(e) => (false, e),
                        },
                        None => (
                            false,
                            "this lab's host serves no requests (a native lab has no VM to \
                             freeze, kill or trace)"
                                .to_string(),
                        ),
                    };
                    if let Some(i) = me.upgrade() {
                        let _ = i.send(&Request::HostAnswer { id, ok, text });
                    }
                });
                return;
            }
            Reply::HostAnswer { id, ok, text } => {
                if let Some(tx) = self.answers.lock().unwrap().remove(&id) {
                    let _ = tx.send((ok, text));
                }
                return;
            }
        };
        // Call the route outside the map's lock, so a slow consumer never blocks the other
        // commands (and a callback may itself use the connection).
        let route = {
            let mut g = self.routes.lock().unwrap();
            if matches!(ev, Event::Exit(_)) {
                g.map.remove(&id)
            } else {
                g.map.get(&id).cloned()
            }
        };
        if let Some(r) = route {
            (r.lock().unwrap())(ev);
        }
    }

    fn close(&self, why: String) {
        let routes: Vec<Route> = {
            let mut g = self.routes.lock().unwrap();
            if g.closed.is_none() {
                g.closed = Some(why.clone());
            }
            g.map.drain().map(|(_, r)| r).collect()
        };
        for r in routes {
            (r.lock().unwrap())(Event::Lost(why.clone()));
        }
        let mut rd = self.ready.lock().unwrap();
        if rd.is_none() {
            *rd = Some(Err(why));
        }
        self.ready_cv.notify_all();
    }

    fn send(self: &Arc<Self>, req: &Request) -> io::Result<()> {
        match &self.transport {
            Transport::Stream(s) => {
                let frame = req.encode();
                let mut g = s.lock().unwrap();
                proto::write_frame(&mut *g, &frame)
            }
            Transport::Local(r) => {
                match req {
                    Request::Run(rr) => r.run(rr.clone()),
                    Request::Kill { id } => r.kill(*id),
                    Request::Stdin { id, data } => r.stdin(*id, data.clone()),
                    Request::Ping => self.dispatch(Reply::Ready {
                        error: String::new(),
                    }),
                    Request::Shutdown => r.kill_all(),
                    // A native lab: nothing to act on (no VM), and no agent asks.
                    Request::Host { id, .. } => self.dispatch(Reply::HostAnswer {
                        id: *id,
                        ok: false,
                        text: "a native lab has no VM to freeze, kill or trace".into(),
                    }),
                    Request::HostAnswer { .. } => {}
                }
                Ok(())
            }
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Transport::Stream(s) = &self.transport
            && let Ok(s) = s.lock()
        {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Conn {
    fn inner(&self) -> Arc<Inner> {
        self.slot.lock().unwrap().clone()
    }

    /// Takes over a stream to an agent (or a relay) and starts its reader thread.
    pub fn new(stream: UnixStream, name: &str) -> io::Result<Conn> {
        let reader = stream.try_clone()?;
        // Never block forever on a peer that stopped reading (SO_SNDTIMEO: writes only).
        stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
        let inner = Arc::new(Inner {
            name: name.to_string(),
            transport: Transport::Stream(Mutex::new(stream)),
            routes: Mutex::new(Routes {
                map: HashMap::new(),
                closed: None,
            }),
            ready: Mutex::new(None),
            ready_cv: Condvar::new(),
            pongs: Mutex::new((0, String::new())),
            next_id: AtomicU32::new(1),
            host: Mutex::new(None),
            answers: Mutex::new(HashMap::new()),
            dropped_for: Mutex::new(None),
        });
        let weak = Arc::downgrade(&inner);
        std::thread::Builder::new()
            .name(format!("lab-conn-{name}"))
            .spawn(move || reader_loop(reader, weak))?;
        Ok(Conn {
            slot: Arc::new(Mutex::new(inner)),
            name: name.into(),
        })
    }

    /// Runs commands on this host with the same protocol semantics (the native provider).
    pub fn local(name: &str) -> Conn {
        Conn::local_with(name, &[])
    }

    /// [`Conn::local`], with `extra` variables set (replacing this process's) for every command.
    pub fn local_with(name: &str, extra: &[(String, String)]) -> Conn {
        let inner = Arc::new_cyclic(|weak: &Weak<Inner>| {
            let w = weak.clone();
            let sink: crate::runner::Sink = Arc::new(move |r: Reply| {
                if let Some(i) = w.upgrade() {
                    i.dispatch(r);
                }
            });
            let mut env: Vec<(String, String)> = std::env::vars().collect();
            env.retain(|(k, _)| k != "LAB_GUEST" && !extra.iter().any(|(e, _)| e == k));
            env.push(("LAB_GUEST".into(), "1".into()));
            env.extend(extra.iter().cloned());
            Inner {
                name: name.to_string(),
                transport: Transport::Local(Runner::new(sink, Some(env))),
                routes: Mutex::new(Routes {
                    map: HashMap::new(),
                    closed: None,
                }),
                ready: Mutex::new(None),
                ready_cv: Condvar::new(),
                pongs: Mutex::new((0, String::new())),
                next_id: AtomicU32::new(1),
                host: Mutex::new(None),
                answers: Mutex::new(HashMap::new()),
                dropped_for: Mutex::new(None),
            }
        });
        Conn {
            slot: Arc::new(Mutex::new(inner)),
            name: name.into(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Asks the agent whether the guest is set up and waits for the answer.
    pub fn wait_ready(&self, limit: Duration) -> anyhow::Result<()> {
        let inner = self.inner();
        inner
            .send(&Request::Ping)
            .map_err(|e| anyhow::anyhow!("{}: cannot reach the agent: {e}", inner.name))?;
        let deadline = Instant::now() + limit;
        let mut g = inner.ready.lock().unwrap();
        loop {
            if let Some(r) = g.clone() {
                return r.map_err(anyhow::Error::msg);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                anyhow::bail!(
                    "{}: no answer from the agent within {} s",
                    inner.name,
                    limit.as_secs()
                );
            }
            g = inner.ready_cv.wait_timeout(g, left).unwrap().0;
        }
    }

    /// Is the connection still open?
    pub fn is_alive(&self) -> bool {
        let inner = self.inner();
        inner.routes.lock().unwrap().closed.is_none()
    }

    /// Why the connection closed (`None` while open).
    pub fn closed_why(&self) -> Option<String> {
        let inner = self.inner();
        inner.routes.lock().unwrap().closed.clone()
    }

    /// How many `Ready` replies arrived so far (each answers a ping) and the last one's error
    /// ("" = fine). With [`Conn::send_ping`], a heartbeat that never blocks.
    pub fn pongs(&self) -> (u64, String) {
        let inner = self.inner();
        inner.pongs.lock().unwrap().clone()
    }

    /// Sends a ping without waiting for its answer (see [`Conn::pongs`]).
    pub fn send_ping(&self) -> anyhow::Result<()> {
        let inner = self.inner();
        inner
            .send(&Request::Ping)
            .map_err(|e| anyhow::anyhow!("{}: cannot reach the agent: {e}", inner.name))
    }

    /// Pings and waits for an answer: is the other end alive and set up, now?
    pub fn ping(&self, limit: Duration) -> anyhow::Result<()> {
        let inner = self.inner();
        let before = self.pongs().0;
        self.send_ping()?;
        let deadline = Instant::now() + limit;
        let mut g = inner.pongs.lock().unwrap();
        loop {
            if g.0 > before {
                return if g.1.is_empty() {
                    Ok(())
                } else {
                    Err(anyhow::anyhow!(g.1.clone()))
                };
            }
            if let Some(why) = self.closed_why() {
                anyhow::bail!("{}: connection lost: {why}", inner.name);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                anyhow::bail!(
                    "{}: no answer to a ping within {} s",
                    inner.name,
                    limit.as_secs()
                );
            }
            let wait = left.min(Duration::from_millis(200));
            drop(g);
            {
                let r = inner.ready.lock().unwrap();
                let _ = inner.ready_cv.wait_timeout(r, wait).unwrap();
            }
            g = inner.pongs.lock().unwrap();
        }
    }

    /// Starts a command; `on_event` receives its output and then exactly one `Exit` or `Lost`.
    /// Returns the command's id (for [`Conn::kill`]).
    pub fn spawn(
        &self,
        cmd: &Cmd,
        on_event: impl FnMut(Event) + Send + 'static,
    ) -> anyhow::Result<u32> {
        let inner = self.inner();
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut g = inner.routes.lock().unwrap();
            if let Some(why) = &g.closed {
                anyhow::bail!("{}: connection lost: {why}", inner.name);
            }
            g.map.insert(id, Arc::new(Mutex::new(Box::new(on_event))));
        }
        // A guest drops its caches unless this command's files are the ones the last drop was
        // made for, unchanged (crate::exec_files). A daemon's relay decides again for its VM.
        let mut dropped_for = inner.dropped_for.lock().unwrap();
        let files = exec_files::fingerprint(&cmd.argv, &cmd.cwd, &cmd.env);
        let drop_caches = exec_files::always(&cmd.env) || *dropped_for != Some(files);
        let req = Request::Run(RunRequest {
            id,
            argv: cmd.argv.clone(),
            env: cmd.env.clone(),
            cwd: cmd.cwd.clone(),
            timeout_ms: cmd.timeout.map(|t| t.as_millis() as u64).unwrap_or(0),
            stdin: cmd.stdin,
            drop_caches,
        });
        if let Err(e) = inner.send(&req) {
            inner.routes.lock().unwrap().map.remove(&id);
            anyhow::bail!("{}: cannot send to the agent: {e}", inner.name);
        }
        if drop_caches {
            *dropped_for = Some(files);
        }
        Ok(id)
    }

    /// Kills a command (its whole process group) by id.
    /// Input for a command spawned with `Cmd::stdin`; empty `data` closes its stdin.
    pub fn write_stdin(&self, id: u32, data: Vec<u8>) -> anyhow::Result<()> {
        let inner = self.inner();
        inner
            .send(&Request::Stdin { id, data })
            .map_err(|e| anyhow::anyhow!("{}: sending input: {e}", inner.name))
    }

    pub fn kill(&self, id: u32) {
        let inner = self.inner();
        let _ = inner.send(&Request::Kill { id });
    }

    /// Asks the other end to shut down (a daemon stops its lab; an agent powers the VM off).
    pub fn shutdown(&self) {
        let inner = self.inner();
        let _ = inner.send(&Request::Shutdown);
    }

    /// Points this connection, and every clone of it, at `other`'s (a restarted node's new
    /// agent). Commands still running on the old connection are lost; a host handler set here
    /// carries over.
    pub fn replace(&self, other: &Conn) {
        let new = other.inner();
        let old = self.inner();
        let h = old.host.lock().unwrap().clone();
        if h.is_some() {
            *new.host.lock().unwrap() = h;
        }
        *self.slot.lock().unwrap() = new;
    }

    /// Serves the other end's requests to the lab's owner with `handler` (the agent passes on
    /// its guest programs' requests).
    pub fn serve_host(&self, handler: HostHandler) {
        *self.inner().host.lock().unwrap() = Some(handler);
    }

    /// Answers a request here, with this connection's handler (a daemon's relay serving its
    /// client's `Host` request).
    pub fn handle_host(&self, line: &str) -> Result<String, String> {
        let h = self.inner().host.lock().unwrap().clone();
        match h {
            Some(h) => h(line),
            None => Err("this lab's owner serves no requests".into()),
        }
    }

    /// Sends a request to the lab's owner at the other end (a daemon) and waits for its answer.
    pub fn host_request(&self, line: &str, limit: Duration) -> anyhow::Result<String> {
        let inner = self.inner();
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        inner.answers.lock().unwrap().insert(id, tx);
        inner
            .send(&Request::Host {
                id,
                line: line.to_string(),
            })
            .map_err(|e| anyhow::anyhow!("{}: sending {line:?}: {e}", self.name))?;
        let r = rx.recv_timeout(limit);
        inner.answers.lock().unwrap().remove(&id);
        match r {
            Ok((true, text)) => Ok(text),
            Ok((false, why)) => anyhow::bail!("{why}"),
            Err(_) => anyhow::bail!(
                "{}: no answer to {line:?} within {} s",
                self.name,
                limit.as_secs()
            ),
        }
    }

    /// Runs a command to completion, killing it if `limit` passes first (then the status is
    /// `TimedOut`).
    pub fn run(&self, cmd: &Cmd, limit: Duration) -> anyhow::Result<Output> {
        let inner = self.inner();
        let (tx, rx) = mpsc::channel();
        let id = self.spawn(cmd, move |e| {
            let _ = tx.send(e);
        })?;
        let deadline = Instant::now() + limit;
        let mut out = Output {
            status: ExitStatus::Code(-1),
            stdout: vec![],
            stderr: vec![],
        };
        let mut killed = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let wait = if killed {
                Duration::from_secs(10)
            } else {
                left
            };
            match rx.recv_timeout(wait) {
                Ok(Event::Stdout(d)) => out.stdout.extend(d),
                Ok(Event::Stderr(d)) => out.stderr.extend(d),
                Ok(Event::Exit(s)) => {
                    out.status = if killed { ExitStatus::TimedOut } else { s };
                    return Ok(out);
                }
                Ok(Event::Lost(why)) => anyhow::bail!("{}: {why}", inner.name),
                Err(mpsc::RecvTimeoutError::Timeout) if !killed => {
                    killed = true;
                    self.kill(id);
                }
                Err(_) => {
                    anyhow::bail!("{}: command did not end even after a kill", inner.name);
                }
            }
        }
    }
}

fn reader_loop(mut stream: UnixStream, inner: Weak<Inner>) {
    let why = loop {
        match proto::read_frame(&mut stream) {
            Ok(Some((tag, body))) => match Reply::decode(tag, &body) {
                Ok(r) => match inner.upgrade() {
                    Some(i) => i.dispatch(r),
                    None => return,
                },
                Err(e) => break format!("bad reply from the agent: {e}"),
            },
            Ok(None) => break "the agent closed the connection (did the VM stop?)".to_string(),
            Err(e) => break format!("reading from the agent: {e}"),
        }
    };
    if let Some(i) = inner.upgrade() {
        i.close(why);
    }
}
