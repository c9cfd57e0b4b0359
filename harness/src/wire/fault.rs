//! Faults on the pair's wire, on purpose: what the `fault` command and chapter 13's test apply.
//!
//! - RoCE-only impairments (`loss`, `delay`, `duplicate`, `reorder`, `corrupt`): in the guest
//!   of the sending node, a `prio` root qdisc whose every packet goes to band 2, except UDP
//!   datagrams to port 4791 (a `u32` filter) which go to band 3, where `netem` impairs them. The
//!   TCP side channel and everything else stay clean. netem's `limit` is raised to 100000
//!   packets: a netem queue that overflows drops packets locally, and a local drop makes rxe
//!   take a different (and racy) resend path than a loss on the wire.
//! - `partition`: a root `netem loss 100%` on the node(s): every packet that node sends is lost
//!   (the agents talk over virtio-serial, not the wire, so the lab stays in control).
//! - `freeze`/`thaw` are the QEMU monitor's (`crate::qmp`): the node's vCPUs stop, its kernel
//!   (and rxe) neither sends nor answers, then resumes where it was. [`clear`] thaws them too.
//!
//! The impairments per node are kept in `faults` in the lab's state dir and re-applied as a
//! whole at every change (`tc qdisc replace`), so several combine (`loss 5%` then
//! `delay 10ms`). [`clear`] removes every qdisc and thaws every node; `cargo lab down` removes
//! them by construction (the VMs go).

use super::capture::qmp_sock;
use crate::conn::Cmd;
use crate::proto::ExitStatus;
use crate::qmp::{frozen, thaw_all};
use crate::testbed::Testbed;
use crate::{Node, StateDir};
use anyhow::{Result, bail};
use contracts::HostRequest;
use std::path::PathBuf;
use std::time::Duration;

/// The guest interface of the pair's wire.
pub const IFACE: &str = "eth0";

/// One impairment of RoCE traffic (netem's vocabulary).
#[derive(Debug, Clone, PartialEq)]
pub enum Impair {
    /// Lose this percentage of packets.
    Loss(f64),
    /// Delay every packet by `ms`, plus or minus `jitter_ms`.
    Delay { ms: f64, jitter_ms: f64 },
    /// Send this percentage twice.
    Duplicate(f64),
    /// Send this percentage at once, ahead of the others (which netem delays by 10 ms unless a
    /// delay is set).
    Reorder(f64),
    /// Flip a random bit in this percentage.
    Corrupt(f64),
}

impl Impair {
    /// The netem keyword of this impairment (one of each kind is kept per node).
    pub fn kind(&self) -> &'static str {
        match self {
            Impair::Loss(_) => "loss",
            Impair::Delay { .. } => "delay",
            Impair::Duplicate(_) => "duplicate",
            Impair::Reorder(_) => "reorder",
            Impair::Corrupt(_) => "corrupt",
        }
    }

    /// netem's arguments for it.
    pub fn netem_args(&self) -> String {
        match self {
            Impair::Loss(p) => format!("loss {p}%"),
            Impair::Delay { ms, jitter_ms } if *jitter_ms > 0.0 => {
                format!("delay {ms}ms {jitter_ms}ms")
            }
            Impair::Delay { ms, .. } => format!("delay {ms}ms"),
            Impair::Duplicate(p) => format!("duplicate {p}%"),
            Impair::Reorder(p) => format!("reorder {p}%"),
            Impair::Corrupt(p) => format!("corrupt {p}%"),
        }
    }

    /// Parses `loss 5%`, `delay 10ms`, `delay 10ms±2ms` (or `10ms+-2ms`), `duplicate 1%`,
    /// `reorder 25%`, `corrupt 1%` (the `%` and `ms` are optional).
    pub fn parse(kind: &str, value: &str) -> Result<Impair, ParseFaultError> {
        let pct = || value.parse::<Percent>().map(|p| p.0);
        Ok(match kind {
            "loss" => Impair::Loss(pct()?),
            "duplicate" => Impair::Duplicate(pct()?),
            "reorder" => Impair::Reorder(pct()?),
            "corrupt" => Impair::Corrupt(pct()?),
            "delay" => value.parse::<Delay>()?.into(),
            other => return Err(ParseFaultError::UnknownImpairment(other.to_string())),
        })
    }
}

/// Why an impairment's value (or name) does not parse: `cargo lab fault` prints it and exits 2.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseFaultError {
    #[error("{0:?}: expected a percentage such as 5%")]
    NotAPercentage(String),
    #[error("{0}: a percentage is between 0% and 100%")]
    PercentageOutOfRange(String),
    #[error("{0:?}: expected milliseconds such as 10ms, or 10ms±2ms")]
    NotMilliseconds(String),
    #[error("{0}: a delay (and its jitter) is between 0ms and 60000ms")]
    DelayOutOfRange(String),
    #[error("unknown impairment {0:?} (loss, delay, duplicate, reorder, corrupt)")]
    UnknownImpairment(String),
}

/// A share of packets, 0% to 100% (`5%`, `5`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Percent(pub f64);

impl std::str::FromStr for Percent {
    type Err = ParseFaultError;
    fn from_str(v: &str) -> Result<Percent, ParseFaultError> {
        let n: f64 = v
            .trim()
            .trim_end_matches('%')
            .parse()
            .map_err(|_| ParseFaultError::NotAPercentage(v.to_string()))?;
        if !(0.0..=100.0).contains(&n) {
            return Err(ParseFaultError::PercentageOutOfRange(v.to_string()));
        }
        Ok(Percent(n))
    }
}

/// A delay with its jitter: `10ms`, `10ms±2ms` or `10ms+-2ms` (the `ms` is optional).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Delay {
    pub ms: f64,
    pub jitter_ms: f64,
}

impl std::str::FromStr for Delay {
    type Err = ParseFaultError;
    fn from_str(value: &str) -> Result<Delay, ParseFaultError> {
        let ms = |v: &str| -> Result<f64, ParseFaultError> {
            let n: f64 = v
                .trim()
                .trim_end_matches("ms")
                .parse()
                .map_err(|_| ParseFaultError::NotMilliseconds(value.to_string()))?;
            if !(0.0..=60_000.0).contains(&n) {
                return Err(ParseFaultError::DelayOutOfRange(value.to_string()));
            }
            Ok(n)
        };
        let (d, j) = match value.split_once('±').or_else(|| value.split_once("+-")) {
            Some((d, j)) => (ms(d)?, ms(j)?),
            None => (ms(value)?, 0.0),
        };
        Ok(Delay {
            ms: d,
            jitter_ms: j,
        })
    }
}

impl From<Delay> for Impair {
    fn from(d: Delay) -> Impair {
        Impair::Delay {
            ms: d.ms,
            jitter_ms: d.jitter_ms,
        }
    }
}

/// What is applied to one node's egress.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeFaults {
    pub impair: Vec<Impair>,
    pub partitioned: bool,
}

/// The faults of both nodes, as kept in the lab's state dir.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    pub a: NodeFaults,
    pub b: NodeFaults,
}

impl Faults {
    pub fn node(&mut self, n: Node) -> &mut NodeFaults {
        match n {
            Node::A => &mut self.a,
            Node::B => &mut self.b,
        }
    }

    fn to_text(&self) -> String {
        let mut s = String::new();
        for (n, f) in [(Node::A, &self.a), (Node::B, &self.b)] {
            if f.partitioned {
                s.push_str(&format!("{n} partition\n"));
            }
            for i in &f.impair {
                s.push_str(&format!("{n} {}\n", i.netem_args()));
            }
        }
        s
    }

    fn from_text(t: &str) -> Faults {
        let mut f = Faults::default();
        for line in t.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            let Some(node) = w.first().and_then(|n| Node::from_name(n)) else {
                continue;
            };
            match w.get(1..) {
                Some(["partition"]) => f.node(node).partitioned = true,
                Some(["delay", d, j]) => {
                    if let Ok(i) = Impair::parse("delay", &format!("{d}±{j}")) {
                        f.node(node).impair.push(i);
                    }
                }
                Some([k, v]) => {
                    if let Ok(i) = Impair::parse(k, v) {
                        f.node(node).impair.push(i);
                    }
                }
                _ => {}
            }
        }
        f
    }
}

fn state_file(lab: &Testbed) -> Result<PathBuf> {
    Ok(StateDir::at(lab_dir(lab)?).faults())
}

/// The faults recorded for this lab.
pub fn recorded(lab: &Testbed) -> Result<Faults> {
    let f = state_file(lab)?;
    Ok(Faults::from_text(
        &std::fs::read_to_string(f).unwrap_or_default(),
    ))
}

fn sh(lab: &Testbed, node: Node, script: &str) -> Result<String> {
    let out = lab.run(
        node,
        &Cmd::new(["sh", "-c", script]).timeout(Duration::from_secs(60)),
        Duration::from_secs(60),
    )?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status != ExitStatus::Code(0) {
        bail!(
            "node {}: `{script}` failed ({:?}): {}",
            node.name(),
            out.status,
            text.trim()
        );
    }
    Ok(text)
}

/// The tc script that puts a node's faults in place (from a clean root qdisc).
pub fn tc_script(f: &NodeFaults) -> String {
    let del = format!("tc qdisc del dev {IFACE} root 2>/dev/null; ");
    if f.partitioned {
        return format!(
            "{del}tc qdisc add dev {IFACE} root handle 1: netem limit 100000 loss 100%"
        );
    }
    if f.impair.is_empty() {
        return format!("{del}true");
    }
    let mut netem: Vec<String> = f.impair.iter().map(Impair::netem_args).collect();
    // netem reorders only delayed packets: the others go ahead of them.
    if f.impair.iter().any(|i| matches!(i, Impair::Reorder(_)))
        && !f.impair.iter().any(|i| matches!(i, Impair::Delay { .. }))
    {
        netem.insert(0, "delay 10ms".into());
    }
    format!(
        "{del}tc qdisc add dev {IFACE} root handle 1: prio bands 3 \
         priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 && \
         tc qdisc add dev {IFACE} parent 1:3 handle 30: netem limit 100000 {} && \
         tc filter add dev {IFACE} parent 1: protocol ip prio 1 u32 \
         match ip protocol 17 0xff match ip dport 4791 0xffff flowid 1:3",
        netem.join(" ")
    )
}

fn apply(lab: &Testbed, f: &Faults, nodes: &[Node]) -> Result<()> {
    for &n in nodes {
        let nf = match n {
            Node::A => &f.a,
            Node::B => &f.b,
        };
        sh(lab, n, &tc_script(nf))?;
    }
    std::fs::write(state_file(lab)?, f.to_text())?;
    Ok(())
}

/// Adds (or replaces, per kind) an impairment of RoCE traffic sent by `nodes`.
pub fn impair(lab: &Testbed, nodes: &[Node], i: Impair) -> Result<()> {
    let mut f = recorded(lab)?;
    for &n in nodes {
        let nf = f.node(n);
        nf.impair.retain(|x| x.kind() != i.kind());
        nf.impair.push(i.clone());
    }
    apply(lab, &f, nodes)
}

/// Loses everything `nodes` send (both nodes: both directions).
pub fn partition(lab: &Testbed, nodes: &[Node]) -> Result<()> {
    let mut f = recorded(lab)?;
    for &n in nodes {
        f.node(n).partitioned = true;
    }
    apply(lab, &f, nodes)
}

/// Ends a partition of `nodes` (their impairments, if any, come back).
pub fn heal(lab: &Testbed, nodes: &[Node]) -> Result<()> {
    let mut f = recorded(lab)?;
    for &n in nodes {
        f.node(n).partitioned = false;
    }
    apply(lab, &f, nodes)
}

/// The pair's state dir (where the monitors' sockets are).
pub fn lab_dir(lab: &Testbed) -> Result<PathBuf> {
    // qmp_sock checks that this is the VM pair.
    Ok(qmp_sock(lab, Node::A)?.with_file_name(""))
}

/// Undoes everything: thaws both nodes, removes every qdisc, forgets the record.
pub fn clear(lab: &Testbed) -> Result<()> {
    let dir = lab_dir(lab)?;
    // A node killed on purpose comes back first (its qdiscs went with it).
    for n in Node::ALL {
        if StateDir::at(&dir).killed(n).exists() {
            lab.host(HostRequest::Restart(n))?;
        }
    }
    thaw_all(&dir)?;
    apply(lab, &Faults::default(), &Node::ALL)
}

/// One netem qdisc found on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Netem {
    /// Its parameters as `tc qdisc show` prints them after the queue limit, without the
    /// random generator's state ([`without_seed`]): `loss 5%`, `delay 10ms 2ms` ...
    pub params: String,
    /// Under the RoCE band of the prio qdisc (an impairment), or at the root (a partition:
    /// everything the node sends).
    pub roce_only: bool,
}

impl std::fmt::Display for Netem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let on = if self.roce_only {
            "RoCE only"
        } else {
            "everything (partition)"
        };
        write!(f, "netem {} on {on}", self.params)
    }
}

/// The netem qdiscs in the output of `tc qdisc show`.
fn netem_qdiscs(tc_show: &str) -> Vec<Netem> {
    tc_show
        .lines()
        .filter(|l| l.starts_with("qdisc netem"))
        .map(|l| {
            let params = l
                .split_once("limit ")
                .map(|(_, r)| r.split_once(' ').map(|x| x.1).unwrap_or(""))
                .unwrap_or("");
            Netem {
                params: without_seed(params),
                roce_only: l.contains("parent 1:3"),
            }
        })
        .collect()
}

/// What a node is doing, as [`status`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeState {
    /// Killed on purpose; gone until its restart.
    Killed,
    /// Its vCPUs are stopped, so its qdiscs cannot be read.
    Frozen,
    /// Running, with these netem qdiscs (none: no fault).
    Running(Vec<Netem>),
}

/// One node's faults, read from the node itself. [`std::fmt::Display`] writes the line
/// `cargo lab fault status` prints for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFault {
    pub node: Node,
    pub state: NodeState,
}

impl NodeFault {
    /// Is a fault active on this node: killed, frozen, or a netem qdisc in place?
    pub fn active(&self) -> bool {
        !matches!(&self.state, NodeState::Running(netem) if netem.is_empty())
    }
}

impl std::fmt::Display for NodeFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.node.name();
        match &self.state {
            NodeState::Killed => write!(
                f,
                "node {n}: killed (`cargo lab fault restart {n}`, or `clear`)"
            ),
            NodeState::Frozen => write!(f, "node {n}: frozen (its qdiscs cannot be read)"),
            NodeState::Running(netem) if netem.is_empty() => {
                write!(f, "node {n}: running, no fault")
            }
            NodeState::Running(netem) => {
                let active: Vec<String> = netem.iter().map(Netem::to_string).collect();
                write!(f, "node {n}: running, {}", active.join("; "))
            }
        }
    }
}

/// What is active, read from the nodes themselves (their qdiscs, their run state): one value
/// per node, each printed as one line.
pub fn status(lab: &Testbed) -> Result<Vec<NodeFault>> {
    let mut out = vec![];
    let dir = lab_dir(lab)?;
    for node in Node::ALL {
        let state = if StateDir::at(&dir).killed(node).exists() {
            NodeState::Killed
        } else if frozen(&dir, node)? {
            NodeState::Frozen
        } else {
            let q = sh(lab, node, &format!("tc qdisc show dev {IFACE}"))?;
            NodeState::Running(netem_qdiscs(&q))
        };
        out.push(NodeFault { node, state });
    }
    Ok(out)
}

/// netem's parameters as `tc qdisc show` prints them, without the `seed N` pair that
/// iproute2 6.15 (Debian 13) adds: the starting state of netem's loss generator
/// (`TCA_NETEM_PRNG_SEED` in net/sched/sch_netem.c), drawn at random when the qdisc is made without one, so a new one
/// each time (two tests here saw two), which says nothing about the fault.
fn without_seed(params: &str) -> String {
    /// The word before the value: skipped with it.
    const NETEM_PRNG_KEYWORD: &str = "seed";
    let mut out = vec![];
    let mut words = params.split_whitespace();
    while let Some(w) = words.next() {
        if w == NETEM_PRNG_KEYWORD {
            words.next();
        } else {
            out.push(w);
        }
    }
    out.join(" ")
}

/// Is anything active (a netem qdisc on either node, a frozen or killed node)?
pub fn any_active(lab: &Testbed) -> Result<bool> {
    Ok(status(lab)?.iter().any(NodeFault::active))
}

/// Clears every fault when dropped (a test that panics leaves nothing behind).
#[derive(Debug)]
pub struct ClearOnDrop<'a>(pub &'a Testbed);

impl Drop for ClearOnDrop<'_> {
    fn drop(&mut self) {
        if let Err(e) = clear(self.0) {
            eprintln!("harness: clearing the wire's faults failed: {e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netem_status_drops_the_seed_newer_iproute2_prints() {
        // iproute2 6.1 (Debian 12) and 6.15 (Debian 13) on the same qdisc.
        assert_eq!(without_seed("loss 50%"), "loss 50%");
        assert_eq!(
            without_seed("loss 50% seed 16011505550571958062"),
            "loss 50%"
        );
        assert_eq!(
            without_seed(" delay 10ms  2ms seed 7 reorder 25% "),
            "delay 10ms 2ms reorder 25%"
        );
    }

    #[test]
    fn status_lines_are_read_from_tc_and_printed_as_before() {
        // `tc qdisc show dev eth0` with an impairment (iproute2 6.15 prints netem's `seed N` pair).
        let roce = "qdisc prio 1: root refcnt 2 bands 3 priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1\n\
                    qdisc netem 30: parent 1:3 limit 100000 loss 5% seed 77 delay 10ms\n";
        let partition = "qdisc netem 1: root refcnt 2 limit 100000 loss 100%\n";
        let clean = "qdisc fq_codel 0: root refcnt 2 limit 10240p flows 1024\n";
        let fault = |node, state| NodeFault { node, state };
        let cases = [
            (
                fault(Node::A, NodeState::Running(netem_qdiscs(roce))),
                "node a: running, netem loss 5% delay 10ms on RoCE only",
                true,
            ),
            (
                fault(Node::B, NodeState::Running(netem_qdiscs(partition))),
                "node b: running, netem loss 100% on everything (partition)",
                true,
            ),
            (
                fault(Node::A, NodeState::Running(netem_qdiscs(clean))),
                "node a: running, no fault",
                false,
            ),
            (
                fault(Node::B, NodeState::Frozen),
                "node b: frozen (its qdiscs cannot be read)",
                true,
            ),
            (
                fault(Node::A, NodeState::Killed),
                "node a: killed (`cargo lab fault restart a`, or `clear`)",
                true,
            ),
        ];
        for (f, line, active) in cases {
            assert_eq!(f.to_string(), line);
            assert_eq!(f.active(), active, "{line}");
        }
        let two = NodeState::Running(netem_qdiscs(&format!("{roce}{partition}")));
        assert_eq!(
            fault(Node::A, two).to_string(),
            "node a: running, netem loss 5% delay 10ms on RoCE only; \
             netem loss 100% on everything (partition)"
        );
    }

    #[test]
    fn parses_impairments() {
        assert_eq!(Impair::parse("loss", "5%").unwrap(), Impair::Loss(5.0));
        assert_eq!(
            Impair::parse("delay", "10ms±2ms").unwrap(),
            Impair::Delay {
                ms: 10.0,
                jitter_ms: 2.0
            }
        );
        assert_eq!(
            Impair::parse("delay", "10+-2").unwrap().netem_args(),
            "delay 10ms 2ms"
        );
        assert!(Impair::parse("loss", "150%").is_err());
        assert!(Impair::parse("loss", "lots").is_err());
        assert_eq!(
            Impair::parse("jam", "1%"),
            Err(ParseFaultError::UnknownImpairment("jam".into()))
        );
        assert_eq!(
            "150%".parse::<Percent>(),
            Err(ParseFaultError::PercentageOutOfRange("150%".into()))
        );
        assert_eq!(
            "soon".parse::<Delay>(),
            Err(ParseFaultError::NotMilliseconds("soon".into()))
        );
        assert_eq!(
            "10ms±70000ms".parse::<Delay>(),
            Err(ParseFaultError::DelayOutOfRange("10ms±70000ms".into()))
        );
    }

    #[test]
    fn record_round_trips() {
        let mut f = Faults::default();
        f.a.impair.push(Impair::Loss(5.0));
        f.a.impair.push(Impair::Delay {
            ms: 3.0,
            jitter_ms: 1.0,
        });
        f.b.partitioned = true;
        assert_eq!(Faults::from_text(&f.to_text()), f);
    }

    #[test]
    fn roce_only_script() {
        let s = tc_script(&NodeFaults {
            impair: vec![Impair::Reorder(25.0)],
            partitioned: false,
        });
        assert!(
            s.contains("netem limit 100000 delay 10ms reorder 25%"),
            "{s}"
        );
        assert!(s.contains("match ip dport 4791 0xffff flowid 1:3"), "{s}");
        assert!(tc_script(&NodeFaults::default()).ends_with("true"));
    }
}
