//! lab-agent: the harness's agent inside the lab VM.
//!
//! Built by harness/build.rs with `$RUSTC` alone (std only, static; its crates are this
//! package's library, which holds the [`runner`](lab_agent::runner), and the workspace's
//! std-only `contracts`) and dropped into the initramfs. The VM's init script execs it
//! (`--guest`) chrooted into the overlay of the host's root. It then
//!  1. sets up the lab network and the rxe device (docs/conventions.md §2) and waits until the
//!     RoCE v2 GID (`::ffff:a.b.c.d`) shows in the GID table, with a deadline ([`net`]);
//!  2. serves the protocol of contracts/src/proto.rs on the virtio-serial port named `lab.agent`:
//!     runs commands, streams their output, reports exit statuses, answers `Ping` with `Ready`;
//!  3. passes requests of programs in the guest to the lab's owner on the host: a program
//!     connects to the unix socket `$LAB_HOST` ([`host::HOST_SOCK`]), writes one line ("freeze
//!     a") and reads a `contracts::HostReply`: `ok N` or `err N`, a newline, then N bytes of
//!     text (course::host is the client) ([`host`]).
//!
//! `lab-agent --stdio` serves the same protocol on stdin/stdout without any setup, so the
//! host's tests exercise it without a VM.

mod host;
mod net;

use contracts::HostReply;
use contracts::proto::{self, Reply, Request};
use host::{HOST_SOCK, desk, serve_host_requests};
use lab_agent::runner::{Runner, Sink};
use net::setup_network;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
// std::process, not duct: build.rs compiles the agent with $RUSTC alone, no crates.io crates.
use std::process::Command;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The guest's setup result: None while running, Some("") when ready, Some(error) if it failed.
type SetupState = Arc<(Mutex<Option<String>>, Condvar)>;

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    match mode.as_str() {
        "--stdio" => {
            let setup: SetupState = Arc::new((Mutex::new(Some(String::new())), Condvar::new()));
            let out: Box<dyn Write + Send> = Box::new(io::stdout());
            serve(Box::new(io::stdin()), out, setup, None, false);
        }
        "--guest" => guest(),
        _ => {
            eprintln!("usage: lab-agent --stdio | --guest");
            std::process::exit(2);
        }
    }
}

/// Serves one connection until its end of stream (a Shutdown ends the process instead).
fn serve(
    mut input: Box<dyn Read + Send>,
    output: Box<dyn Write + Send>,
    setup: SetupState,
    base_env: Option<Vec<(String, String)>>,
    guest: bool,
) {
    let output = Arc::new(Mutex::new(output));
    let out2 = output.clone();
    let sink: Sink = Arc::new(move |r: Reply| {
        let frame = r.encode();
        if let Ok(mut w) = out2.lock() {
            // A host that went away is not the agent's problem: drop the output.
            let _ = proto::write_frame(&mut *w, &frame);
        }
    });
    desk().attach(sink.clone());
    let runner = Runner::new(sink.clone(), base_env);
    loop {
        let frame = match proto::read_frame(&mut input) {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                eprintln!("lab-agent: bad input: {e}");
                break;
            }
        };
        let req = match Request::decode(frame.0, &frame.1) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("lab-agent: {e}");
                continue;
            }
        };
        match req {
            Request::Run(r) => {
                if guest && r.drop_caches {
                    // The guest must run the bytes that are on the host *now*. A file rebuilt on
                    // the host (cargo re-links `target/debug/X` to another artifact) keeps, in
                    // the guest, the overlay's cached dentry and the old inode's page cache,
                    // while reads through 9p reach the new file: an exec would map a mix of
                    // old and new pages (SIGSEGV, SIGTRAP). So drop every clean page and every
                    // unused dentry and inode ("3"): whatever the command (or a shell it
                    // starts) executes is then looked up afresh and paged in from the host's
                    // current file. Only a file still mapped by a process that is running now
                    // keeps its pages. The host asks for it unless the command's files are the
                    // ones the last drop was made for, unchanged (harness/README.md, "What the
                    // guest runs"); a drop costs about 0.2 s under TCG.
                    drop_caches();
                }
                runner.run(r)
            }
            Request::Kill { id } => runner.kill(id),
            Request::Stdin { id, data } => runner.stdin(id, data),
            Request::HostAnswer { id, ok, text } => {
                desk().deliver(id, HostReply::of(if ok { Ok(text) } else { Err(text) }));
            }
            // The agent owns nothing a host request could act on.
            Request::Host { id, .. } => sink(Reply::HostAnswer {
                id,
                ok: false,
                text: "the VM's agent serves no host requests".into(),
            }),
            Request::Ping => {
                let setup = setup.clone();
                let sink = sink.clone();
                std::thread::spawn(move || {
                    let (m, cv) = &*setup;
                    let mut g = m.lock().unwrap();
                    while g.is_none() {
                        g = cv.wait(g).unwrap();
                    }
                    sink(Reply::Ready {
                        error: g.clone().unwrap_or_default(),
                    });
                });
            }
            Request::Shutdown => {
                runner.kill_all();
                if guest {
                    let _ = Command::new("sync").status();
                    let _ = fs::write("/proc/sysrq-trigger", "o");
                }
                std::process::exit(0);
            }
        }
    }
    runner.kill_all();
    // The sink holds the port open: let it go with this connection (the port is opened again
    // for the next one, and a virtio port opens only once at a time).
    desk().detach();
}

/// `echo 3 > /proc/sys/vm/drop_caches`: page cache, dentries and inodes (only clean,
/// unused ones: a running program's mapped pages stay).
fn drop_caches() {
    if let Err(e) = fs::write("/proc/sys/vm/drop_caches", "3") {
        eprintln!("lab-agent: dropping the page cache failed: {e}");
    }
}

fn guest() {
    let setup: SetupState = Arc::new((Mutex::new(None), Condvar::new()));
    let s2 = setup.clone();
    std::thread::spawn(move || {
        let t0 = Instant::now();
        let r = match setup_network() {
            Ok(()) => String::new(),
            Err(e) => e,
        };
        eprintln!(
            "lab-agent: setup {} in {} ms",
            if r.is_empty() { "done" } else { "FAILED" },
            t0.elapsed().as_millis()
        );
        if !r.is_empty() {
            eprintln!("lab-agent: {r}");
        }
        let (m, cv) = &*s2;
        *m.lock().unwrap() = Some(r);
        cv.notify_all();
    });
    let mut base_env: Vec<(String, String)> = vec![
        (
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ),
        ("HOME".into(), "/root".into()),
        ("LAB_GUEST".into(), "1".into()),
    ];
    if let Ok(node) = std::env::var("LAB_NODE") {
        base_env.push(("LAB_NODE".into(), node));
    }
    match serve_host_requests() {
        Ok(()) => base_env.push(("LAB_HOST".into(), HOST_SOCK.into())),
        Err(e) => eprintln!("lab-agent: requests to the host unavailable: {e}"),
    }
    let port = match find_port(Duration::from_secs(20)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("lab-agent: {e}");
            let _ = fs::write("/proc/sysrq-trigger", "o");
            std::process::exit(1);
        }
    };
    loop {
        let f = match OpenOptions::new().read(true).write(true).open(&port) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("lab-agent: open {port}: {e}");
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        let w = f.try_clone().expect("dup port");
        serve(
            Box::new(f),
            Box::new(w),
            setup.clone(),
            Some(base_env.clone()),
            true,
        );
        // The host closed its end: wait a moment and serve the next connection.
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// /dev/vportNpM of the virtio-serial port named `lab.agent`.
fn find_port(limit: Duration) -> Result<String, String> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(dir) = fs::read_dir("/sys/class/virtio-ports") {
            for e in dir.flatten() {
                let name = fs::read_to_string(e.path().join("name")).unwrap_or_default();
                let dev = format!("/dev/{}", e.file_name().to_string_lossy());
                if name.trim() == "lab.agent" && fs::metadata(&dev).is_ok() {
                    return Ok(dev);
                }
            }
        }
        if Instant::now() > deadline {
            return Err("no virtio-serial port named lab.agent (is virtio_console loaded?)".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
