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

use super::decode::Frame;
use crate::{Node, StateDir};
use anyhow::{Context as _, Result};
use std::io::{Read as _, Write as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Frames buffered per direction: more than any burst rxe sends (its send window), so a
/// receiver that is only slow loses nothing.
pub const QUEUE_FRAMES: usize = 4096;
/// The largest frame accepted (a 9000-byte MTU plus headers, with room to spare).
const MAX_FRAME: usize = 65536;

/// One end of the cable: where frames for this node go (`None` while its VM is not connected).
type Port = Arc<Mutex<Option<SyncSender<Vec<u8>>>>>;
/// The frames recorded while a tap is on.
type Tap = Arc<Mutex<Option<Vec<Frame>>>>;

/// The running relay. Dropping it stops its threads and removes its sockets.
#[derive(Debug)]
pub struct Cable {
    socks: [PathBuf; 2],
    stop: Arc<AtomicBool>,
    /// Frames dropped because a receiver's queue was full or it was not connected.
    dropped: Arc<AtomicU64>,
    tap: Tap,
}

fn idx(n: Node) -> usize {
    match n {
        Node::A => 0,
        Node::B => 1,
    }
}

impl Cable {
    /// Binds both sockets in `dir` and starts relaying.
    pub fn start(dir: &Path) -> Result<Cable> {
        let state = StateDir::at(dir);
        let socks = [state.wire_sock(Node::A), state.wire_sock(Node::B)];
        let stop = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicU64::new(0));
        let ports: [Port; 2] = [Arc::new(Mutex::new(None)), Arc::new(Mutex::new(None))];
        let tap: Tap = Arc::new(Mutex::new(None));
        for (i, sock) in socks.iter().enumerate() {
            let _ = std::fs::remove_file(sock);
            let l = UnixListener::bind(sock)
                .with_context(|| format!("binding the pair's wire socket {}", sock.display()))?;
            l.set_nonblocking(true)?;
            let (me, peer) = (ports[i].clone(), ports[1 - i].clone());
            let (stop, dropped, tap) = (stop.clone(), dropped.clone(), tap.clone());
            std::thread::Builder::new()
                .name(format!("lab-wire-{i}"))
                .spawn(move || accept_loop(l, me, peer, stop, dropped, tap))?;
        }
        Ok(Cable {
            socks,
            stop,
            dropped,
            tap,
        })
    }

    /// Starts recording every frame (a recording in progress starts over).
    pub fn tap_start(&self) {
        *self.tap.lock().unwrap() = Some(vec![]);
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
        for s in &self.socks {
            let _ = std::fs::remove_file(s);
        }
    }
}

/// Accepts this node's VM (again after a restart): frames it sends go to the peer's port;
/// frames for it come through a queue and a writer thread of its own.
fn accept_loop(
    l: UnixListener,
    me: Port,
    peer: Port,
    stop: Arc<AtomicBool>,
    dropped: Arc<AtomicU64>,
    tap: Tap,
) {
    while !stop.load(Ordering::SeqCst) {
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
        let (Ok(mut writer), mut reader) = (s.try_clone(), s) else {
            continue;
        };
        let (tx, rx) = sync_channel::<Vec<u8>>(QUEUE_FRAMES);
        *me.lock().unwrap() = Some(tx);
        std::thread::spawn(move || {
            // Blocking writes: a QEMU that reads slowly holds this queue back, not the sender.
            while let Ok(f) = rx.recv() {
                if writer.write_all(&f).is_err() {
                    break;
                }
            }
        });
        let (peer, stop, dropped, tap) = (peer.clone(), stop.clone(), dropped.clone(), tap.clone());
        std::thread::spawn(move || {
            let _ = reader.set_read_timeout(Some(Duration::from_millis(500)));
            let mut len = [0u8; 4];
            loop {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                match read_full(&mut reader, &mut len, &stop) {
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
                match read_full(&mut reader, &mut frame[4..], &stop) {
                    Ok(true) => {}
                    _ => break,
                }
                if let Some(t) = tap.lock().unwrap().as_mut() {
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
                    dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
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
        for i in 0..500u32 {
            let f = read_frame(&mut b);
            // Skip leftovers of the first loop's retries.
            if f == b"hello" {
                continue;
            }
            assert_eq!(f[..4], i.to_be_bytes());
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
}
