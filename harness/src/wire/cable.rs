//! The pair's cable: the process that owns the lab relays Ethernet frames between the two VMs.
//!
//! Each VM's NIC is a QEMU `-netdev stream` client of a unix socket here (`wire-a.sock`,
//! `wire-b.sock` in the lab's state dir). QEMU frames each packet on the stream with a 4-byte
//! big-endian length. Two properties come from this relay:
//!
//! - **It loses nothing under load.** The earlier wire was two UDP sockets aimed at each
//!   other, with the host's default receive buffer (`net.core.rmem_default`, 212992 bytes
//!   here). Under a burst it dropped datagrams: a 1 MiB RDMA WRITE at path MTU 4096 took 959
//!   packets for the 256 it needs (5 NAKs, 7 ack timeouts and their go-back-N resends), in
//!   chapter 11's `--quick` run. The relay reads each frame as soon as a VM sends it and
//!   queues it for the other VM, whose QEMU takes it when it can: a busy receiver only delays
//!   frames. Through the relay the same WRITE is exactly 256 packets.
//! - **A node can die and come back.** A restarted VM connects again, and the relay carries
//!   frames to it from then on.
//!
//! Each direction has a queue of [`QUEUE_FRAMES`] frames, like a switch's buffer. A frozen or
//! dead receiver does not stall the sender: once the queue is full, frames are dropped, as a
//! real wire drops packets sent to a host that is not there.
//!
//! The relay can also record what crosses it ([`Cable::tap_start`], [`Cable::tap_stop`]): every
//! frame as its VM sent it, whether or not the other VM is there to take it (a frozen or killed
//! node's traffic shows as what was sent to it).
//!
//! **Timing log** (off by default): with `LAB_WIRE_LOG=FILE` in the environment of the process
//! that owns the lab, the relay writes one line per frame and event, the host's
//! microseconds since the cable started, to FILE: `rd` when its reader has the whole frame off
//! the sending QEMU's socket, `wr` when its writer has handed it to the receiving QEMU's
//! socket; with the direction, the length, and for RoCE v2 the BTH opcode and PSN
//! ([`log_line`]). Chapter 11 uses it to place a slow round's time: inside the relay (`rd` ->
//! `wr`) or outside it (a QEMU and its guest). The threads are named `lab-wire-<node>-rd` and
//! `-wr`, for the host's `/proc/<pid>/task/<tid>/schedstat`.

use super::decode::Frame;
use crate::{Node, StateDir};
use anyhow::{Context as _, Result};
use std::io::{Read as _, Write as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Frames buffered per direction: more than any burst rxe sends (its send window), so a
/// receiver that is only slow loses nothing.
pub const QUEUE_FRAMES: usize = 4096;
/// The largest frame accepted (a 9000-byte MTU plus headers, with room to spare).
const MAX_FRAME: usize = 65536;

/// One end of the cable: where frames for this node go (`None` while its VM is not connected).
type Port = Arc<Mutex<Option<SyncSender<Vec<u8>>>>>;
/// The frames recorded while a tap is on.
type Tap = Arc<Mutex<Option<Vec<Frame>>>>;

/// The variable that turns the timing log on (a file name).
pub const WIRE_LOG_VAR: &str = "LAB_WIRE_LOG";

/// The opt-in timing log: its start and the buffered file (flushed at least once a second,
/// and when the cable is dropped).
#[derive(Debug)]
struct TimeLog {
    t0: Instant,
    out: Mutex<(std::io::BufWriter<std::fs::File>, Instant)>,
}

impl TimeLog {
    fn open(path: Option<&Path>) -> Result<Option<Arc<TimeLog>>> {
        let Some(path) = path else {
            return Ok(None);
        };
        let f = std::fs::File::create(path)
            .with_context(|| format!("{WIRE_LOG_VAR}: creating {}", path.display()))?;
        let now = Instant::now();
        Ok(Some(Arc::new(TimeLog {
            t0: now,
            out: Mutex::new((std::io::BufWriter::with_capacity(1 << 20, f), now)),
        })))
    }

    /// Records one event of a frame (`frame`: with its 4-byte length prefix).
    fn record(&self, event: &str, from: usize, frame: &[u8]) {
        let us = self.t0.elapsed().as_micros() as u64;
        let line = log_line(us, event, from, frame.get(4..).unwrap_or_default());
        let mut g = self.out.lock().unwrap();
        let _ = writeln!(g.0, "{line}");
        if g.1.elapsed() >= Duration::from_secs(1) {
            let _ = g.0.flush();
            g.1 = Instant::now();
        }
    }

    fn flush(&self) {
        let _ = self.out.lock().unwrap().0.flush();
    }
}

/// One line of the timing log: `<us> <rd|wr> <a>b|b>a> len=<n>`, then ` op=0x<opcode>
/// psn=<psn>` when the frame is RoCE v2 over IPv4 (Ethernet, IPv4 without options, UDP to
/// 4791, then the BTH: opcode first, PSN in bytes 9-11).
pub fn log_line(us: u64, event: &str, from: usize, data: &[u8]) -> String {
    let dir = if from == 0 { "a>b" } else { "b>a" };
    let mut s = format!("{us} {event} {dir} len={}", data.len());
    let is_roce = data.len() >= 54
        && data[12..14] == [0x08, 0x00]
        && data[14] == 0x45
        && data[23] == 17
        && u16::from_be_bytes([data[36], data[37]]) == super::decode::ROCE_PORT;
    if is_roce {
        let psn = u32::from_be_bytes([0, data[51], data[52], data[53]]);
        s.push_str(&format!(" op={:#04x} psn={psn}", data[42]));
    }
    s
}

/// The running relay. Dropping it stops its threads and removes its sockets.
#[derive(Debug)]
pub struct Cable {
    socks: [PathBuf; 2],
    stop: Arc<AtomicBool>,
    /// Frames dropped because a receiver's queue was full or it was not connected.
    dropped: Arc<AtomicU64>,
    tap: Tap,
    log: Option<Arc<TimeLog>>,
}

fn idx(n: Node) -> usize {
    match n {
        Node::A => 0,
        Node::B => 1,
    }
}

impl Cable {
    /// Binds both sockets in `dir` and starts relaying (with the timing log when
    /// `LAB_WIRE_LOG` names a file).
    pub fn start(dir: &Path) -> Result<Cable> {
        let log = std::env::var_os(WIRE_LOG_VAR).map(PathBuf::from);
        Cable::start_logged(dir, log.as_deref())
    }

    /// [`Cable::start`] with the timing log written to `log` (`None`: no log).
    pub fn start_logged(dir: &Path, log: Option<&Path>) -> Result<Cable> {
        let state = StateDir::at(dir);
        let socks = [state.wire_sock(Node::A), state.wire_sock(Node::B)];
        let stop = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicU64::new(0));
        let ports: [Port; 2] = [Arc::new(Mutex::new(None)), Arc::new(Mutex::new(None))];
        let tap: Tap = Arc::new(Mutex::new(None));
        let log = TimeLog::open(log)?;
        for (i, sock) in socks.iter().enumerate() {
            let _ = std::fs::remove_file(sock);
            let l = UnixListener::bind(sock)
                .with_context(|| format!("binding the pair's wire socket {}", sock.display()))?;
            l.set_nonblocking(true)?;
            let (me, peer) = (ports[i].clone(), ports[1 - i].clone());
            let shared = Shared {
                stop: stop.clone(),
                dropped: dropped.clone(),
                tap: tap.clone(),
                log: log.clone(),
            };
            std::thread::Builder::new()
                .name(format!("lab-wire-{i}"))
                .spawn(move || accept_loop(l, i, me, peer, shared))?;
        }
        Ok(Cable {
            socks,
            stop,
            dropped,
            tap,
            log,
        })
    }

    /// Starts recording every frame (a recording in progress starts over).
    pub fn tap_start(&self) {
        *self.tap.lock().unwrap() = Some(vec![]);
    }

    /// The frames recorded so far from the `from`th on (none when no recording is on): the
    /// recording goes on.
    pub fn tap_since(&self, from: usize) -> Vec<Frame> {
        self.tap
            .lock()
            .unwrap()
            .as_ref()
            .map(|t| t.get(from..).unwrap_or_default().to_vec())
            .unwrap_or_default()
    }

    /// Stops recording; the frames since [`Cable::tap_start`], in the order the relay saw them.
    pub fn tap_stop(&self) -> Vec<Frame> {
        self.tap.lock().unwrap().take().unwrap_or_default()
    }

    /// The socket a node's QEMU connects to.
    pub fn sock(&self, n: Node) -> &Path {
        &self.socks[idx(n)]
    }

    /// Frames dropped so far (a frozen, dead or not yet connected receiver).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for Cable {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(l) = &self.log {
            l.flush();
        }
        for s in &self.socks {
            let _ = std::fs::remove_file(s);
        }
    }
}

/// What every relay thread shares.
#[derive(Clone)]
struct Shared {
    stop: Arc<AtomicBool>,
    /// Frames dropped because a receiver's queue was full or it was not connected.
    dropped: Arc<AtomicU64>,
    tap: Tap,
    log: Option<Arc<TimeLog>>,
}

/// The node letter of port `i`, for thread names.
fn letter(i: usize) -> &'static str {
    if i == 0 { "a" } else { "b" }
}

/// Accepts node `i`'s VM (again after a restart): frames it sends go to the peer's port;
/// frames for it come through a queue and a writer thread of its own.
fn accept_loop(l: UnixListener, i: usize, me: Port, peer: Port, sh: Shared) {
    while !sh.stop.load(Ordering::SeqCst) {
        let s = match l.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(_) => break,
        };
        if s.set_nonblocking(false).is_err() {
            continue;
        }
        let (Ok(mut writer), reader) = (s.try_clone(), s) else {
            continue;
        };
        let (tx, rx) = sync_channel::<Vec<u8>>(QUEUE_FRAMES);
        *me.lock().unwrap() = Some(tx);
        let log = sh.log.clone();
        let w = std::thread::Builder::new()
            .name(format!("lab-wire-{}-wr", letter(i)))
            .spawn(move || {
                // Blocking writes: a QEMU that reads slowly holds this queue back, not the
                // sender.
                while let Ok(f) = rx.recv() {
                    if writer.write_all(&f).is_err() {
                        break;
                    }
                    if let Some(l) = &log {
                        l.record("wr", 1 - i, &f);
                    }
                }
            });
        let (peer, sh2) = (peer.clone(), sh.clone());
        let r = std::thread::Builder::new()
            .name(format!("lab-wire-{}-rd", letter(i)))
            .spawn(move || read_loop(reader, i, &peer, &sh2));
        if w.is_err() || r.is_err() {
            break;
        }
    }
}

/// Reads node `i`'s frames and queues each for the peer (dropping it when the peer's queue
/// is full or nobody is there).
fn read_loop(mut reader: UnixStream, i: usize, peer: &Port, sh: &Shared) {
    let _ = reader.set_read_timeout(Some(Duration::from_millis(500)));
    let mut len = [0u8; 4];
    loop {
        if sh.stop.load(Ordering::SeqCst) {
            break;
        }
        match read_full(&mut reader, &mut len, &sh.stop) {
            Ok(true) => {}
            _ => break,
        }
        let n = u32::from_be_bytes(len) as usize;
        if n > MAX_FRAME {
            break;
        }
        let mut frame = Vec::with_capacity(4 + n);
        frame.extend_from_slice(&len);
        frame.resize(4 + n, 0);
        match read_full(&mut reader, &mut frame[4..], &sh.stop) {
            Ok(true) => {}
            _ => break,
        }
        if let Some(l) = &sh.log {
            l.record("rd", i, &frame);
        }
        if let Some(t) = sh.tap.lock().unwrap().as_mut() {
            let ts_us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_micros() as u64)
                .unwrap_or(0);
            t.push(Frame {
                ts_us,
                data: frame[4..].to_vec(),
            });
        }
        let g = peer.lock().unwrap();
        let sent = match g.as_ref() {
            Some(tx) => match tx.try_send(frame) {
                Ok(()) => true,
                Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => false,
            },
            None => false,
        };
        if !sent {
            sh.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Fills `buf`, riding out read timeouts (they only let the loop see `stop`). Ok(false): the
/// VM closed its end (it stopped or was killed).
fn read_full(r: &mut UnixStream, buf: &mut [u8], stop: &AtomicBool) -> std::io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => return Ok(false),
            Ok(n) => got += n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                if stop.load(Ordering::SeqCst) {
                    return Ok(false);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(payload);
        f
    }

    fn read_frame(s: &mut UnixStream) -> Vec<u8> {
        let mut len = [0u8; 4];
        s.read_exact(&mut len).unwrap();
        let mut b = vec![0u8; u32::from_be_bytes(len) as usize];
        s.read_exact(&mut b).unwrap();
        b
    }

    #[test]
    fn relays_both_ways_and_survives_a_reconnect() {
        let dir = tempfile::tempdir().unwrap();
        let cable = Cable::start(dir.path()).unwrap();
        let mut a = UnixStream::connect(cable.sock(Node::A)).unwrap();
        let mut b = UnixStream::connect(cable.sock(Node::B)).unwrap();
        a.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // Both ends are accepted asynchronously: send until the first frame gets through.
        let mut got = None;
        for _ in 0..100 {
            a.write_all(&frame(b"hello")).unwrap();
            b.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            let mut len = [0u8; 4];
            if b.read_exact(&mut len).is_ok() {
                let mut p = vec![0u8; u32::from_be_bytes(len) as usize];
                b.read_exact(&mut p).unwrap();
                got = Some(p);
                break;
            }
        }
        assert_eq!(got.as_deref(), Some(&b"hello"[..]));
        b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // A burst larger than a socket buffer arrives whole and in order.
        let big = vec![7u8; 4096];
        for i in 0..500u32 {
            let mut p = i.to_be_bytes().to_vec();
            p.extend_from_slice(&big);
            a.write_all(&frame(&p)).unwrap();
        }
        let mut i = 0u32;
        while i < 500 {
            let f = read_frame(&mut b);
            // Skip leftovers of the first loop's retries (they do not count as frames of the
            // burst).
            if f == b"hello" {
                continue;
            }
            assert_eq!(f[..4], i.to_be_bytes());
            i += 1;
        }
        // Node b dies and comes back: frames reach the new connection.
        drop(b);
        std::thread::sleep(Duration::from_millis(100));
        let mut b2 = UnixStream::connect(cable.sock(Node::B)).unwrap();
        b2.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let mut ok = false;
        for _ in 0..100 {
            a.write_all(&frame(b"again")).unwrap();
            let mut len = [0u8; 4];
            if b2.read_exact(&mut len).is_ok() {
                let mut p = vec![0u8; u32::from_be_bytes(len) as usize];
                b2.read_exact(&mut p).unwrap();
                assert_eq!(p, b"again");
                ok = true;
                break;
            }
        }
        assert!(ok, "no frame reached the reconnected node");
        // And back the other way, recorded by the tap.
        cable.tap_start();
        b2.write_all(&frame(b"back")).unwrap();
        a.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(read_frame(&mut a), b"back");
        let seen = cable.tap_stop();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].data, b"back");
        drop(cable);
        assert!(!dir.path().join("wire-a.sock").exists());
    }

    /// The timing log: each frame once when the relay reads it (`rd`) and once when it has
    /// handed it on (`wr`, not earlier), with its RoCE v2 opcode and PSN.
    #[test]
    fn the_timing_log_has_each_frame_read_then_written() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("wire.log");
        let cable = Cable::start_logged(dir.path(), Some(&log)).unwrap();
        let mut a = UnixStream::connect(cable.sock(Node::A)).unwrap();
        let mut b = UnixStream::connect(cable.sock(Node::B)).unwrap();
        b.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        // A RoCE v2 frame: Ethernet (IPv4), IPv4 (proto UDP), UDP to 4791, a BTH with opcode
        // 0x0a (RC RDMA WRITE Only) and PSN 0x123456.
        let mut roce = vec![0u8; 60];
        roce[12..14].copy_from_slice(&[0x08, 0x00]);
        roce[14] = 0x45;
        roce[23] = 17;
        roce[36..38].copy_from_slice(&4791u16.to_be_bytes());
        roce[42] = 0x0a;
        roce[51..54].copy_from_slice(&[0x12, 0x34, 0x56]);
        let mut got = false;
        for _ in 0..100 {
            a.write_all(&frame(&roce)).unwrap();
            let mut len = [0u8; 4];
            if b.read_exact(&mut len).is_ok() {
                let mut p = vec![0u8; u32::from_be_bytes(len) as usize];
                b.read_exact(&mut p).unwrap();
                got = true;
                break;
            }
        }
        assert!(got, "no frame crossed the cable");
        // The writer logs after its write returns: wait for that line (deadline 5 s).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let text = loop {
            cable.log.as_ref().unwrap().flush();
            let t = std::fs::read_to_string(&log).unwrap();
            if t.contains(" wr a>b ") || std::time::Instant::now() > deadline {
                break t;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let rd: Vec<&str> = text.lines().filter(|l| l.contains(" rd a>b ")).collect();
        let wr: Vec<&str> = text.lines().filter(|l| l.contains(" wr a>b ")).collect();
        assert!(!rd.is_empty() && !wr.is_empty(), "{text}");
        assert!(rd[0].ends_with("len=60 op=0x0a psn=1193046"), "{text}");
        let us = |l: &str| l.split(' ').next().unwrap().parse::<u64>().unwrap();
        assert!(us(wr[0]) >= us(rd[0]), "{text}");
        assert_eq!(log_line(7, "rd", 1, b"short"), "7 rd b>a len=5");
    }
}
