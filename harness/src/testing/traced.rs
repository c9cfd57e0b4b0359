//! Chapters run on the pair with the wire recorded: the transcript and the RoCE v2 packets
//! between the two nodes, redacted together (one numbering: the `PSN [PSN#2]` a chapter
//! prints is the `psn=[PSN#2]` of its first packet).

use super::*;
use crate::wire::{self, Capture, Packet};

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
    /// redaction table as one text.
    pub fn redacted(&self) -> String {
        redact(&format!(
            "{}== wire ({} RoCE v2 packets)\n{}",
            self.transcript.text(),
            self.packets.len(),
            self.ladder()
        ))
    }

    /// The opcode names in wire order, with their direction (`a -> b RDMA_WRITE_ONLY`).
    pub fn ops(&self) -> Vec<String> {
        self.packets
            .iter()
            .map(|p| format!("{} {}", p.dir.arrow(), wire::decode::opcode_name(p.opcode)))
            .collect()
    }
}

/// Runs a chapter as chapters/course.toml describes it, but on the microVM pair whatever its
/// topology (a loopback chapter's server on node a, its client on node b: only the pair has a
/// wire), with the wire recorded. `args` replace the chapter's defaults when not empty.
/// Panics with the command that fixes it when there is no pair of VMs (the native provider's
/// pair is one device: nothing crosses a wire).
pub fn run_chapter_traced(package: &str, exe: &str, args: &[&str]) -> Traced {
    let (course, _) = Course::load().unwrap_or_else(|e| panic!("{e:#}"));
    let ch = course
        .find(package)
        .unwrap_or_else(|| panic!("chapter {package} is not in chapters/course.toml"));
    let lab = lab(Topology::Pair);
    let roles = ch.roles(exe, args, lab.server_addr());
    run_roles_traced_in(&lab, &roles)
}

/// [`run_roles`] on the pair with the wire recorded.
pub fn run_roles_traced(roles: Vec<Role>) -> Traced {
    let lab = lab(Topology::Pair);
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
