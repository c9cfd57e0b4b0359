//! Recording the pair's wire: a `filter-dump` object on node a's netdev, added through QEMU's
//! monitor for the length of a run and removed after it. It sees every frame node a sends and
//! receives, which on the pair's two-port wire is every frame there is; it costs the guests
//! nothing (QEMU writes the pcap on the host). A node a killed under the run (chapter 13's
//! killed-peer) ends the recording with its VM: the file holds what crossed until then.
//!
//! Both ends wait on the file, not on a clock: the start until QEMU has written the pcap's
//! header (or it says what did not happen), the stop until every request in the file has its
//! answer there too ([`super::settle`]: the last ACK of a run may still be on its way).

use super::decode::{decode_frame, read_pcap_from};
use super::settle::{self, ANSWER_WAIT, Settle};
use crate::qmp::{Qmp, json_str};
use crate::testbed::{Provider, Testbed};
use crate::{Node, StateDir, Topology};
use anyhow::{Context as _, Result, bail};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long QEMU may take to write a new capture's pcap header (it does so before it answers
/// `object-add`: this is a bound, not a wait).
const HEADER_WAIT: Duration = Duration::from_secs(5);

/// A classic pcap's file header.
const PCAP_HEADER: u64 = 24;

/// The monitor socket of a node of a VM lab.
pub fn qmp_sock(lab: &Testbed, node: Node) -> Result<PathBuf> {
    if lab.provider != Provider::Vm {
        bail!(
            "the wire exists only between the microVM pair's two kernels (the native provider \
             serves both nodes on one device, and rxe loops their packets back inside); run it \
             with LAB_PROVIDER=vm"
        );
    }
    if lab.topology != Topology::Pair {
        bail!(
            "the loopback lab has no wire (rxe hands packets for its own address straight back \
             to itself); trace on the pair: `-t pair`"
        );
    }
    let dir = lab.dir().context("a VM lab without a state dir")?;
    Ok(StateDir::at(dir).qmp_sock(node))
}

/// A capture in progress; [`Capture::stop`] ends it (dropping it ends it too).
#[derive(Debug)]
pub struct Capture {
    sock: PathBuf,
    id: String,
    /// The pcap being written.
    pub file: PathBuf,
    active: bool,
}

impl Capture {
    /// Starts writing the wire to `file` (created or truncated).
    pub fn start(lab: &Testbed, file: &Path) -> Result<Capture> {
        static N: AtomicU32 = AtomicU32::new(0);
        let sock = qmp_sock(lab, Node::A)?;
        let file = if file.is_absolute() {
            file.to_path_buf()
        } else {
            std::env::current_dir()?.join(file)
        };
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        let id = format!(
            "trace-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let mut q = Qmp::connect(&sock)?;
        remove_stale(&mut q);
        q.execute(
            "object-add",
            &format!(
                "{{\"qom-type\":\"filter-dump\",\"id\":{},\"netdev\":\"n0\",\"file\":{}}}",
                json_str(&id),
                json_str(&file.to_string_lossy())
            ),
        )
        .with_context(|| format!("starting a capture into {}", file.display()))?;
        let capture = Capture {
            sock,
            id,
            file,
            active: true,
        };
        capture.header_written()?;
        Ok(capture)
    }

    /// Waits until the file holds the pcap header QEMU writes when the capture starts.
    fn header_written(&self) -> Result<()> {
        let deadline = Instant::now() + HEADER_WAIT;
        loop {
            let len = std::fs::metadata(&self.file).map_or(0, |m| m.len());
            if len >= PCAP_HEADER {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "QEMU took the capture into {} but did not write its pcap header within {} s \
                     ({len} bytes)",
                    self.file.display(),
                    HEADER_WAIT.as_secs()
                );
            }
            // The poll interval of this deadline loop.
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops the capture once every request in it has its answer there too (or
    /// [`ANSWER_WAIT`] has passed: an unanswered request is what a fault case records) and
    /// returns the pcap's bytes.
    pub fn stop(mut self) -> Result<Vec<u8>> {
        self.answered()?;
        self.remove()?;
        std::fs::read(&self.file).with_context(|| format!("reading {}", self.file.display()))
    }

    /// Follows the file as QEMU writes it until no request waits for its answer, or for
    /// [`ANSWER_WAIT`].
    fn answered(&self) -> Result<()> {
        let mut f = std::fs::File::open(&self.file)
            .with_context(|| format!("opening the capture {}", self.file.display()))?;
        let (mut bytes, mut off, mut frames) = (Vec::new(), 0, 0);
        settle::until_answered(&mut Settle::default(), ANSWER_WAIT, |s| {
            f.read_to_end(&mut bytes)
                .with_context(|| format!("reading {}", self.file.display()))?;
            let (new, next) = read_pcap_from(&bytes, off)?;
            for frame in &new {
                if let Some(p) = decode_frame(frames, frame) {
                    s.add(&p);
                }
                frames += 1;
            }
            off = next;
            Ok(())
        })?;
        Ok(())
    }

    fn remove(&mut self) -> Result<()> {
        if !self.active {
            return Ok(());
        }
        self.active = false;
        let mut q = Qmp::connect(&self.sock)?;
        match q.execute("object-del", &format!("{{\"id\":{}}}", json_str(&self.id))) {
            // Node a was killed and restarted under the run (`fault kill`, chapter 13's
            // killed-peer): the recording ended with its first VM, and the file holds what
            // crossed the wire until then.
            Err(e) if format!("{e:#}").contains("not found") => Ok(()),
            r => r.map(|_| ()),
        }
    }
}

/// Removes the captures of processes that died without removing theirs (a `cargo lab run
/// --trace` stopped with Ctrl-C): their `trace-<pid>-<n>` objects would write on forever.
fn remove_stale(q: &mut Qmp) {
    let Ok(list) = q.execute("qom-list", "{\"path\":\"/objects\"}") else {
        return;
    };
    let re = regex::Regex::new(r#""name": ?"(trace-([0-9]+)-[0-9]+)""#).expect("regex");
    let stale: Vec<String> = re
        .captures_iter(&list)
        .filter(|c| {
            c[2].parse::<u32>()
                .map(|pid| !crate::vm::pid_alive(pid))
                .unwrap_or(false)
        })
        .map(|c| c[1].to_string())
        .collect();
    for id in stale {
        let _ = q.execute("object-del", &format!("{{\"id\":{}}}", json_str(&id)));
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}
