//! `fault`: break the running pair lab's wire on purpose, or undo it. One subcommand per
//! action, each with typed arguments (a percentage, a delay, a node): a bad one is a parse
//! error (clap's message, exit 2) before anything touches the lab.

use super::exec::stream;
use super::labs::{daemon_pid, home};
use crate::testbed::{Provider, Testbed};
use crate::wire::fault::{self as f, Delay, Impair, Percent};
use crate::{Node, StateDir, Topology, qmp, testbed, testing, vm};
use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use contracts::HostRequest;
use std::path::{Path, PathBuf};

/// The actions of `cargo lab fault`.
#[derive(Debug, Subcommand)]
pub(super) enum FaultCmd {
    /// Lose this share of the RoCE packets the node(s) send (e.g. 5%).
    Loss {
        /// 0% to 100% (the `%` is optional).
        percent: Percent,
        #[command(flatten)]
        scope: Scope,
    },
    /// Delay the RoCE packets the node(s) send: 10ms, or 10ms±2ms (also 10ms+-2ms).
    Delay {
        /// 0ms to 60000ms, with an optional jitter: 10ms±2ms.
        delay: Delay,
        #[command(flatten)]
        scope: Scope,
    },
    /// Send this share of the RoCE packets twice (e.g. 1%).
    Duplicate {
        /// 0% to 100% (the `%` is optional).
        percent: Percent,
        #[command(flatten)]
        scope: Scope,
    },
    /// Send this share at once, ahead of the others (which wait 10 ms unless a delay is set).
    Reorder {
        /// 0% to 100% (the `%` is optional).
        percent: Percent,
        #[command(flatten)]
        scope: Scope,
    },
    /// Flip a random bit in this share of the RoCE packets (e.g. 1%).
    Corrupt {
        /// 0% to 100% (the `%` is optional).
        percent: Percent,
        #[command(flatten)]
        scope: Scope,
    },
    /// Lose everything the node(s) send (`-n a`: only a -> b); `heal` ends it.
    Partition {
        #[command(flatten)]
        scope: Scope,
    },
    /// End a partition.
    Heal {
        #[command(flatten)]
        scope: Scope,
    },
    /// Stop a node's VM (QEMU's monitor): it goes silent and keeps its state.
    Freeze {
        /// a or b.
        node: Node,
    },
    /// Resume a frozen node.
    Thaw {
        /// a or b.
        node: Node,
    },
    /// End a node's VM (its QEMU process dies, the lab stays up).
    Kill {
        /// a or b.
        node: Node,
    },
    /// Boot a fresh VM for a node, on the same wire.
    Restart {
        /// a or b.
        node: Node,
    },
    /// Undo everything, restarting a killed node (so does `cargo lab down`).
    Clear,
    /// Show what is active on each node.
    Status,
}

/// Which node's egress an impairment applies to, and the command it lasts for.
#[derive(Debug, Args)]
pub(super) struct Scope {
    /// The node whose outgoing packets are impaired (default both).
    #[arg(long, short)]
    node: Option<Node>,
    /// Where `-- CMD` runs.
    #[arg(long, default_value = "a")]
    on: Node,
    /// With `-- CMD`: the faults last while CMD runs, then are cleared (Ctrl-C included).
    #[arg(last = true)]
    cmd: Vec<String>,
}

impl Scope {
    fn nodes(&self) -> Vec<Node> {
        match self.node {
            Some(n) => vec![n],
            None => Node::ALL.to_vec(),
        }
    }
}

/// What the agents change in the guests' qdiscs.
enum OnWire {
    Impair(Impair),
    Partition,
    Heal,
}

/// The running pair lab's state dir (`cargo lab fault` acts on one; it never boots it).
fn running_pair_dir() -> Result<PathBuf> {
    if testbed::chosen_provider()? == Provider::Native {
        bail!(
            "faults need the microVM pair's wire (the native provider serves both nodes on one \
             device); run with LAB_PROVIDER=vm"
        );
    }
    let dir = home()?.join(Topology::Pair.name());
    // The daemon's process, not a round trip through the agents: a frozen node answers
    // nothing, and thaw must still work.
    let alive = daemon_pid(&dir).map(vm::pid_alive).unwrap_or(false);
    if !alive || !StateDir::at(&dir).qmp_sock(Node::A).exists() {
        bail!("no pair lab is running; start one: `cargo lab up -t pair`");
    }
    Ok(dir)
}

/// "a", "b" or "a and b".
fn names(nodes: &[Node]) -> String {
    nodes
        .iter()
        .map(|n| n.name())
        .collect::<Vec<_>>()
        .join(" and ")
}

/// `cargo lab fault <action>`.
pub(super) fn fault(action: FaultCmd) -> Result<i32> {
    let dir = running_pair_dir()?;
    match action {
        // The monitor's actions: they need no agent (a frozen node's does not answer).
        FaultCmd::Freeze { node } => {
            qmp::freeze(&dir, node)?;
            println!("node {node} frozen (`cargo lab fault thaw {node}`)");
            Ok(0)
        }
        FaultCmd::Thaw { node } => {
            qmp::thaw(&dir, node)?;
            println!("node {node} thawed");
            Ok(0)
        }
        // The daemon owns the VMs: it kills or boots one, and keeps the lab up meanwhile.
        FaultCmd::Kill { node } => {
            let lab = Testbed::attach(Topology::Pair, &dir)?;
            println!("{}", lab.host(HostRequest::Kill(node))?);
            println!(
                "(`cargo lab fault restart {node}` boots it again; so does `cargo lab fault clear`)"
            );
            Ok(0)
        }
        FaultCmd::Restart { node } => {
            let lab = Testbed::attach(Topology::Pair, &dir)?;
            println!("{}", lab.host(HostRequest::Restart(node))?);
            Ok(0)
        }
        FaultCmd::Clear => clear(&dir),
        FaultCmd::Status => status(&dir),
        FaultCmd::Loss { percent, scope } => {
            on_the_wire(&dir, OnWire::Impair(Impair::Loss(percent.0)), scope)
        }
        FaultCmd::Delay { delay, scope } => on_the_wire(&dir, OnWire::Impair(delay.into()), scope),
        FaultCmd::Duplicate { percent, scope } => {
            on_the_wire(&dir, OnWire::Impair(Impair::Duplicate(percent.0)), scope)
        }
        FaultCmd::Reorder { percent, scope } => {
            on_the_wire(&dir, OnWire::Impair(Impair::Reorder(percent.0)), scope)
        }
        FaultCmd::Corrupt { percent, scope } => {
            on_the_wire(&dir, OnWire::Impair(Impair::Corrupt(percent.0)), scope)
        }
        FaultCmd::Partition { scope } => on_the_wire(&dir, OnWire::Partition, scope),
        FaultCmd::Heal { scope } => on_the_wire(&dir, OnWire::Heal, scope),
    }
}

fn clear(dir: &Path) -> Result<i32> {
    for n in qmp::thaw_all(dir)? {
        println!("node {n} thawed");
    }
    let lab = Testbed::attach(Topology::Pair, dir)?;
    let _g = testing::lock(&lab);
    f::clear(&lab)?;
    println!("no fault is active");
    Ok(0)
}

fn status(dir: &Path) -> Result<i32> {
    let frozen: Vec<Node> = Node::ALL
        .into_iter()
        .filter(|&n| qmp::frozen(dir, n).unwrap_or(false))
        .collect();
    if !frozen.is_empty() {
        // A frozen node's agent does not answer: what the monitor and the record say.
        for n in frozen {
            println!("node {n}: frozen (`cargo lab fault thaw {n}`)");
        }
        let rec = std::fs::read_to_string(StateDir::at(dir).faults()).unwrap_or_default();
        let rec = rec.trim();
        let rec = if rec.is_empty() {
            "none".to_string()
        } else {
            rec.replace('\n', "; ")
        };
        println!("recorded impairments: {rec}");
        return Ok(0);
    }
    let lab = Testbed::attach(Topology::Pair, dir)?;
    let _g = testing::lock(&lab);
    for node in f::status(&lab)? {
        println!("{node}");
    }
    Ok(0)
}

/// The netem actions, partition and heal: in the guests, through their agents, optionally for
/// the time `-- CMD` runs.
fn on_the_wire(dir: &Path, what: OnWire, scope: Scope) -> Result<i32> {
    let lab = Testbed::attach(Topology::Pair, dir)?;
    // Like a run: not in the middle of someone else's (a test's) use of the lab.
    let _g = testing::lock(&lab);
    let nodes = scope.nodes();
    match what {
        OnWire::Impair(i) => {
            f::impair(&lab, &nodes, i.clone())?;
            let on = names(&nodes);
            println!("{} on RoCE (UDP 4791) sent by node {on}", i.netem_args());
        }
        OnWire::Partition => {
            f::partition(&lab, &nodes)?;
            println!(
                "partition: everything sent by node {} is lost",
                names(&nodes)
            );
        }
        OnWire::Heal => {
            f::heal(&lab, &nodes)?;
            println!("healed");
        }
    }
    if scope.cmd.is_empty() {
        println!("(active until `cargo lab fault clear` or `cargo lab down`)");
        return Ok(0);
    }
    // With a command: the faults last as long as it runs (Ctrl-C included), then go.
    let code = stream(&lab, scope.on, scope.cmd, &[], false);
    let cleared = f::clear(&lab);
    eprintln!("cargo lab fault: cleared every fault");
    cleared?;
    code
}
