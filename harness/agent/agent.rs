//! lab-agent: the harness's agent inside the lab VM.
//!
//! Built by harness/build.rs with `$RUSTC` alone (std only, static, its one crate the
//! workspace's std-only `contracts`) and dropped into the initramfs. The VM's init script execs it (`--guest`) chrooted into the overlay of the
//! host's root. It then
//!  1. sets up the lab network and the rxe device (docs/conventions.md §2) and waits until the
//!     RoCE v2 GID (`::ffff:a.b.c.d`) shows in the GID table, with a deadline;
//!  2. serves the protocol of contracts/src/proto.rs on the virtio-serial port named `lab.agent`:
//!     runs commands, streams their output, reports exit statuses, answers `Ping` with `Ready`;
//!  3. passes requests of programs in the guest to the lab's owner on the host: a program
//!     connects to the unix socket `$LAB_HOST` ([`HOST_SOCK`]), writes one line ("freeze a")
//!     and reads a `contracts::HostReply`: `ok N` or `err N`, a newline, then N bytes of text
//!     (course::host is the client).
//!
//! `lab-agent --stdio` serves the same protocol on stdin/stdout without any setup, so the
//! host's tests exercise it without a VM.

#![allow(dead_code)]

use contracts::proto;
mod runner {
    include!("../src/runner.rs");
}

use contracts::HostReply;
use proto::{Reply, Request};
use runner::{Runner, Sink};
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
// std::process, not duct: build.rs compiles the agent with $RUSTC alone, no crates.io crates.
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The guest's setup result: None while running, Some("") when ready, Some(error) if it failed.
type SetupState = Arc<(Mutex<Option<String>>, Condvar)>;

/// Where programs in the guest reach the lab's owner (exported to them as `LAB_HOST`).
const HOST_SOCK: &str = "/run/lab-host.sock";

/// Guest programs' requests to the host: the current connection's sink, and who waits for
/// which answer.
struct HostDesk {
    sink: Mutex<Option<Sink>>,
    pending: Mutex<HashMap<u32, UnixStream>>,
    next: AtomicU32,
}

fn desk() -> &'static HostDesk {
    static D: OnceLock<HostDesk> = OnceLock::new();
    D.get_or_init(|| HostDesk {
        sink: Mutex::new(None),
        pending: Mutex::new(HashMap::new()),
        next: AtomicU32::new(1),
    })
}

fn answer(mut s: UnixStream, reply: HostReply) {
    let _ = s.write_all(reply.to_string().as_bytes());
}

/// Serves `HOST_SOCK`: each connection sends one line, which goes to the host as
/// `Reply::Host`; the host's `Request::HostAnswer` is written back (see `serve`).
fn serve_host_requests() -> Result<(), String> {
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

/// Serves one connection until its end of stream. Returns true if a Shutdown was asked.
fn serve(
    mut input: Box<dyn Read + Send>,
    output: Box<dyn Write + Send>,
    setup: SetupState,
    base_env: Option<Vec<(String, String)>>,
    guest: bool,
) -> bool {
    let output = Arc::new(Mutex::new(output));
    let out2 = output.clone();
    let sink: Sink = Arc::new(move |r: Reply| {
        let frame = r.encode();
        if let Ok(mut w) = out2.lock() {
            // A host that went away is not the agent's problem: drop the output.
            let _ = proto::write_frame(&mut *w, &frame);
        }
    });
    *desk().sink.lock().unwrap() = Some(sink.clone());
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
                let waiting = desk().pending.lock().unwrap().remove(&id);
                if let Some(s) = waiting {
                    answer(s, HostReply::of(if ok { Ok(text) } else { Err(text) }));
                }
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
    *desk().sink.lock().unwrap() = None;
    desk().pending.lock().unwrap().clear();
    false
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

fn sh(prog: &str, args: &[&str], stdin: Option<&str>) -> Result<(), String> {
    let mut c = Command::new(prog);
    c.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().map_err(|e| format!("{prog}: {e}"))?;
    if let Some(input) = stdin {
        let mut i = child.stdin.take().unwrap();
        i.write_all(input.as_bytes())
            .map_err(|e| format!("{prog}: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{prog}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{prog} {}` failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// docs/conventions.md §2: the pinned lab network, then rxe0 on it.
fn setup_network() -> Result<(), String> {
    let node = std::env::var("LAB_NODE").unwrap_or_default();
    let (netdev, ip, batch) = match node.as_str() {
        "" => (
            "veth0",
            "10.99.0.1",
            "link set lo up\n\
             link add veth0 type veth peer name veth1\n\
             link set veth0 address 52:54:00:00:00:01\n\
             addr add 10.99.0.1/24 dev veth0\n\
             link set veth0 up\n\
             link set veth1 up\n"
                .to_string(),
        ),
        "a" | "b" => {
            let ip = if node == "a" {
                "10.77.0.1"
            } else {
                "10.77.0.2"
            };
            let dev = find_netdev_by_mac(if node == "a" {
                "52:54:00:00:00:0a"
            } else {
                "52:54:00:00:00:0b"
            })?;
            let dev: &'static str = Box::leak(dev.into_boxed_str());
            (
                dev,
                ip,
                format!("link set lo up\naddr add {ip}/24 dev {dev}\nlink set {dev} up\n"),
            )
        }
        other => return Err(format!("unknown LAB_NODE={other}")),
    };
    if Path::new("/sys/class/infiniband/rxe0").exists() {
        // Init set it up before the snapshot's gate (harness/src/snapshot.rs).
        return wait_gid(ip, Duration::from_secs(30));
    }
    let t0 = Instant::now();
    // The initramfs's static busybox (copied to /run by init): no shared libraries to page in
    // over 9p (the host's `ip` took 0.6-2.3 s here under TCG). Its `ip link add ... type veth`
    // ignores `peer name`; the kernel names the peer veth1 in a fresh VM, checked below; the
    // host's `ip -batch` is the fallback.
    let quick = Path::new(BUSYBOX).exists()
        && match quick_net(&batch) {
            Ok(()) => true,
            Err(e) => {
                eprintln!("lab-agent: busybox ip: {e}; using the host's ip");
                false
            }
        };
    if !quick {
        // Undo what busybox may have done, then the host's ip.
        if node.is_empty() {
            let _ = sh("ip", &["link", "del", "veth0"], None);
        }
        sh("ip", &["-batch", "-"], Some(&batch))?;
    }
    let t1 = Instant::now();
    sh(
        "rdma",
        &["link", "add", "rxe0", "type", "rxe", "netdev", netdev],
        None,
    )?;
    let t2 = Instant::now();
    let r = wait_gid(ip, Duration::from_secs(30));
    eprintln!(
        "lab-agent: ip {} ms, rdma link {} ms, GID wait {} ms",
        (t1 - t0).as_millis(),
        (t2 - t1).as_millis(),
        t2.elapsed().as_millis()
    );
    r
}

/// The initramfs's static busybox, copied to /run by init.
const BUSYBOX: &str = "/run/busybox";

/// The `ip -batch` lines through busybox's `ip`, one process each (a static binary: nothing to
/// page in over 9p). busybox ignores `peer name`: the peer is found by ifindex and renamed.
fn quick_net(batch: &str) -> Result<(), String> {
    let trace = std::env::var_os("LAB_AGENT_TRACE").is_some();
    let bb = |args: &[&str]| -> Result<(), String> {
        let t = Instant::now();
        let mut argv = vec!["ip"];
        argv.extend_from_slice(args);
        let r = sh(BUSYBOX, &argv, None);
        if trace {
            eprintln!(
                "lab-agent: ip {} ({} ms)",
                args.join(" "),
                t.elapsed().as_millis()
            );
        }
        r
    };
    for l in batch.lines() {
        let a: Vec<&str> = l.split_whitespace().collect();
        if let Some(i) = a.iter().position(|w| *w == "peer") {
            // link add veth0 type veth peer name veth1: busybox names the peer itself
            // ("veth%d", registered first: in a fresh VM it takes veth0 and the add fails), so
            // add under a temporary name, then rename both ends.
            let (dev, peer) = (a[2], a[i + 2]);
            let tmp = "labtmp0";
            let mut add: Vec<&str> = a[..i].to_vec();
            add[2] = tmp;
            bb(&add)?;
            let idx = fs::read_to_string(format!("/sys/class/net/{tmp}/iflink"))
                .map_err(|e| format!("{tmp}: {e}"))?;
            let other = fs::read_dir("/sys/class/net")
                .map_err(|e| e.to_string())?
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find(|n| {
                    n != tmp
                        && fs::read_to_string(format!("/sys/class/net/{n}/ifindex"))
                            .map(|s| s.trim() == idx.trim())
                            .unwrap_or(false)
                })
                .ok_or_else(|| format!("no peer of {tmp}"))?;
            if other != peer {
                bb(&["link", "set", &other, "name", peer])?;
            }
            bb(&["link", "set", tmp, "name", dev])?;
        } else if !a.is_empty() {
            bb(&a)?;
        }
    }
    Ok(())
}

fn find_netdev_by_mac(mac: &str) -> Result<String, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(dir) = fs::read_dir("/sys/class/net") {
            for e in dir.flatten() {
                let a = fs::read_to_string(e.path().join("address")).unwrap_or_default();
                if a.trim() == mac {
                    return Ok(e.file_name().to_string_lossy().into_owned());
                }
            }
        }
        if Instant::now() > deadline {
            return Err(format!("no netdev with MAC {mac}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until rxe0's GID table holds ::ffff:<ip> and port 1 is ACTIVE.
fn wait_gid(ip: &str, limit: Duration) -> Result<(), String> {
    let o: Vec<u32> = ip.split('.').map(|x| x.parse().unwrap_or(0)).collect();
    let want = format!(
        "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
        o[0], o[1], o[2], o[3]
    );
    let port = "/sys/class/infiniband/rxe0/ports/1";
    let deadline = Instant::now() + limit;
    loop {
        let state = fs::read_to_string(format!("{port}/state")).unwrap_or_default();
        // Index 1 first (docs/conventions.md §2): the table has 1024 entries, slow to read
        // one by one under TCG.
        let mut found = fs::read_to_string(format!("{port}/gids/1"))
            .is_ok_and(|s| s.trim() == want);
        if let (false, Ok(dir)) = (found, fs::read_dir(format!("{port}/gids"))) {
            for e in dir.flatten() {
                let mut s = String::new();
                if let Ok(mut f) = File::open(e.path()) {
                    let _ = f.read_to_string(&mut s);
                }
                if s.trim() == want {
                    found = true;
                }
            }
        }
        if found && state.contains("ACTIVE") {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "rxe0 not ready after {}s: port state {:?}, GID {want} {}",
                limit.as_secs(),
                state.trim(),
                if found { "present" } else { "missing" }
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
