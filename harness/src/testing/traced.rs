//! Chapters run on the pair with the wire recorded: the transcript and the RoCE v2 packets
//! between the two nodes, redacted together (one numbering: the `PSN [PSN#2]` a chapter
//! prints is the `psn=[PSN#2]` of its first packet).

use super::{Role, Transcript, lab, lock, run_roles_in, run_timeout};
use crate::Topology;
use crate::course::Course;
use crate::redact::redact;
use crate::testbed::Testbed;
use crate::wire::{self, Capture, Packet};
use std::sync::{Arc, Mutex};

/// A run and its wire.
#[derive(Debug, Clone)]
pub struct Traced {
    pub transcript: Transcript,
    pub packets: Vec<Packet>,
}

impl Traced {
    /// The ladder, one line per packet (unredacted).
    pub fn ladder(&self) -> String {
        wire::ladder::text(&self.packets)
    }

    /// The transcript, then `== wire (N RoCE v2 packets)` and the ladder, through the
    /// redaction table as one text; QP numbers then become a plain `[QPN]`: each node numbers
    /// its own QPs, so whether node a's and node b's happen to be equal depends on what ran on
    /// them before, and a numbered placeholder would make the snapshot depend on it too.
    pub fn redacted(&self) -> String {
        let text = redact(&format!(
            "{}== wire ({} RoCE v2 packets)\n{}",
            self.transcript.text(),
            self.packets.len(),
            self.ladder()
        ));
        regex::Regex::new(r"\[QPN#[0-9]+\]")
            .expect("regex")
            .replace_all(&text, "[QPN]")
            .into_owned()
    }

    /// The opcode names in wire order, with their direction (`a -> b RDMA_WRITE_ONLY`).
    pub fn ops(&self) -> Vec<String> {
        wire::ladder::ops(&self.packets)
    }
}

/// The pair whose nodes are two kernels on a wire: the shared pair lab, or, when that is the
/// native provider's one device, a microVM pair booted here once for this test binary (with
/// KVM only: [`Testbed::boot_wire_pair`] says why and what to run instead). Panics with that
/// message when there is none: a wire test never passes by skipping.
pub fn wire_lab() -> Arc<Testbed> {
    static WIRE: Mutex<Option<Result<Arc<Testbed>, String>>> = Mutex::new(None);
    let shared = lab(Topology::Pair);
    if !shared.single_device() {
        return shared;
    }
    let mut g = WIRE.lock().unwrap_or_else(|p| p.into_inner());
    let r = g.get_or_insert_with(|| {
        Testbed::boot_wire_pair()
            .map(Arc::new)
            .map_err(|e| format!("{e:#}"))
    });
    match r {
        Ok(l) => l.clone(),
        Err(e) => panic!("{e}"),
    }
}

/// Runs a chapter as chapters/course.toml describes it, but on the microVM pair whatever its
/// topology (a loopback chapter's server on node a, its client on node b: only the pair has a
/// wire), with the wire recorded. `args` replace the chapter's defaults when not empty.
/// On the native provider it uses [`wire_lab`]'s microVM pair.
pub fn run_chapter_traced(package: &str, exe: &str, args: &[&str]) -> Traced {
    let (course, _) = Course::load().unwrap_or_else(|e| panic!("{e:#}"));
    let ch = course
        .find(package)
        .unwrap_or_else(|| panic!("chapter {package} is not in chapters/course.toml"));
    let lab = wire_lab();
    let roles = ch.roles(exe, args, lab.server_addr());
    run_roles_traced_in(&lab, &roles)
}

/// [`run_roles`](super::run_roles) on the pair with the wire recorded.
pub fn run_roles_traced(roles: Vec<Role>) -> Traced {
    let lab = wire_lab();
    run_roles_traced_in(&lab, &roles)
}

fn run_roles_traced_in(lab: &Testbed, roles: &[Role]) -> Traced {
    let _g = lock(lab);
    let file = std::env::temp_dir().join(format!(
        "rxe-lab-trace.{}.{}.pcap",
        std::process::id(),
        std::thread::current()
            .name()
            .unwrap_or("main")
            .replace("::", "-")
    ));
    let cap = Capture::start(lab, &file).unwrap_or_else(|e| panic!("{e:#}"));
    let t = run_roles_in(lab, roles, run_timeout());
    let bytes = cap
        .stop()
        .unwrap_or_else(|e| panic!("stopping the capture: {e:#}"));
    let _ = std::fs::remove_file(&file);
    let transcript = t.unwrap_or_else(|e| panic!("{e}"));
    let packets =
        wire::decode_pcap(&bytes).unwrap_or_else(|e| panic!("decoding the capture: {e:#}"));
    Traced {
        transcript,
        packets,
    }
}
