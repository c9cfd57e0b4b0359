//! The wire of a case, as the lab's host recorded it, and the lab's host itself.
//!
//! The client asks the host (`course::host`) to record the cable between the two VMs around each
//! case (`trace start`, `trace stop`), and to freeze, kill and restart node a for the last two
//! cases. The recording comes back as one ladder line per RoCE packet:
//!
//! ```text
//! a <- b  SEND_ONLY    psn=0x00c000 len=64 qpn=0x000011 ackreq
//! a -> b  ACKNOWLEDGE  psn=0x00c000 ACK msn=1 qpn=0x000012
//! ```
//!
//! `a <- b` is a packet node b (the client) sent; `a -> b` one node a (the server) sent. The
//! cable records every packet as its VM sent it, even when the other VM is frozen or dead.
//! A packet that netem drops inside node b never reaches the cable: it is not there.

use course::host::HostRequest;
use course::{OrFail, Outcome as Result};
use std::collections::HashMap;
use std::time::Duration;

/// How long a request to the host may take: a restart boots a VM.
const HOST_WAIT: Duration = Duration::from_secs(180);

/// Asks the lab's host for `line` ("freeze a", "thaw a" ...): a [`HostRequest`] as text.
pub fn host(line: &str) -> Result<String> {
    let request: HostRequest = line
        .parse()
        .or_fail_with(|| format!("{line:?} is no request to the lab's host"))?;
    ask(request)
}

/// Asks the lab's host for `request`.
fn ask(request: HostRequest) -> Result<String> {
    course::host::ask(request, HOST_WAIT)
        .or_fail_with(|| format!("asking the lab's host to {request}"))
}

/// One recorded packet: who sent it, its PSN and its whole ladder line.
#[derive(Debug, Clone)]
pub struct Line {
    pub from_b: bool,
    pub psn: String,
    pub text: String,
}

/// A case's recording.
#[derive(Debug, Default)]
pub struct Ladder {
    pub lines: Vec<Line>,
}

/// Starts recording the wire.
pub fn start() -> Result<()> {
    ask(HostRequest::TraceStart).map(|_| ())
}

/// Stops recording: the packets since [`start`].
pub fn stop() -> Result<Ladder> {
    Ok(parse(&ask(HostRequest::TraceStop)?))
}

fn parse(text: &str) -> Ladder {
    let lines = text
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (_a, arrow, _b, _opcode) = (w.next()?, w.next()?, w.next()?, w.next()?);
            let psn = w
                .find_map(|f| f.strip_prefix("psn="))
                .unwrap_or("")
                .to_string();
            Some(Line {
                from_b: arrow == "<-",
                psn,
                text: l.to_string(),
            })
        })
        .collect();
    Ladder { lines }
}

impl Ladder {
    /// Packets node b sent.
    pub fn sent_by_b(&self) -> usize {
        self.lines.iter().filter(|l| l.from_b).count()
    }

    /// Did node a answer with this (`NAK psn-sequence-error`, `RNR_NAK timer=20`, ` ACK `)?
    pub fn a_said(&self, what: &str) -> usize {
        self.lines
            .iter()
            .filter(|l| !l.from_b && l.text.contains(what))
            .count()
    }

    /// Requests node b sent again: the same PSN on the wire more than once.
    pub fn resent_by_b(&self) -> usize {
        let mut seen: HashMap<&str, u32> = HashMap::new();
        for l in self.lines.iter().filter(|l| l.from_b) {
            *seen.entry(&l.psn).or_default() += 1;
        }
        seen.values().filter(|&&n| n > 1).count()
    }

    /// Prints the recording, indented, under a title (a short, deterministic excerpt).
    pub fn print(&self, title: &str) {
        println!("  the wire ({title}):");
        if self.lines.is_empty() {
            println!("    (no RoCE packet)");
        }
        for l in &self.lines {
            println!("    {}", l.text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ladder_lines() {
        let l = parse(
            "a <- b  SEND_ONLY    psn=0x00c000 len=64 qpn=0x000011 ackreq\n\
             a <- b  SEND_ONLY    psn=0x00c000 len=64 qpn=0x000011 ackreq\n\
             a -> b  ACKNOWLEDGE  psn=0x00c000 RNR_NAK timer=20 (10.24 ms) msn=0 qpn=0x000012\n",
        );
        assert_eq!(l.lines.len(), 3);
        assert_eq!(l.sent_by_b(), 2);
        assert_eq!(l.resent_by_b(), 1);
        assert_eq!(l.a_said("RNR_NAK timer=20"), 1);
        assert_eq!(l.lines[2].psn, "0x00c000");
    }
}
