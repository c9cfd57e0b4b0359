//! The wire: `trace` (a pcap's RoCE v2 packets as a ladder, text or SVG), and the `--trace`
//! of `run` and `exec` (record the pair's wire while they run).

use super::exec::stream;
use super::labs::{daemon_pid, home};
use super::root;
use crate::testbed::{Provider, Testbed};
use crate::{Node, Topology, testbed, testing, vm};
use anyhow::{Context as _, Result, bail};
use std::path::{Path, PathBuf};

use crate::wire::{self, Capture};
use contracts::HostRequest;

/// `cargo lab trace FILE.pcap [--svg OUT] [--redact] [--title T]`.
pub(super) fn trace(
    file: &Path,
    svg: Option<&Path>,
    redact: bool,
    title: Option<&str>,
) -> Result<i32> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let packets =
        wire::decode_pcap(&bytes).with_context(|| format!("decoding {}", file.display()))?;
    let mut text = wire::ladder::text(&packets);
    if redact || svg.is_some() {
        text = crate::redact::redact(&text);
    }
    print!("{text}");
    eprintln!("{} RoCE v2 packets in {}", packets.len(), file.display());
    if let Some(out) = svg {
        let title = title.map(str::to_string).unwrap_or_else(|| {
            file.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        std::fs::write(out, wire::ladder::svg(&title, &text))
            .with_context(|| format!("writing {}", out.display()))?;
        eprintln!("wrote {}", out.display());
    }
    Ok(0)
}

/// `cargo lab trace --update-docs`.
pub(super) fn update_wire_docs() -> Result<i32> {
    for p in wire::docs::update(&root()?)? {
        println!("wrote {p}");
    }
    Ok(0)
}

/// Starts recording the pair's wire into `file`.
pub(super) fn start_trace(lab: &Testbed, file: &Path) -> Result<Capture> {
    let c = Capture::start(lab, file).with_context(|| format!("--trace {}", file.display()))?;
    eprintln!("tracing the wire into {}", c.file.display());
    Ok(c)
}

/// Stops a capture; returns its ladder with a heading, to print after the run's own output.
pub(super) fn finish_trace(c: Capture) -> Result<String> {
    let file = c.file.clone();
    let bytes = c.stop()?;
    let packets = wire::decode_pcap(&bytes)?;
    Ok(format!(
        "── the wire: {} RoCE v2 packets in {} (Wireshark opens it; `cargo lab trace FILE` \
         prints this again)\n{}",
        packets.len(),
        file.display(),
        wire::ladder::text(&packets)
    ))
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
    if !alive || !dir.join("qmp-a.sock").exists() {
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

fn nodes_of(n: Option<Node>) -> Vec<Node> {
    match n {
        Some(n) => vec![n],
        None => Node::ALL.to_vec(),
    }
}

/// `cargo lab fault ACTION [VALUE] [-n NODE] [-- CMD]`.
pub(super) fn fault(
    action: &str,
    value: Option<&str>,
    node: Option<Node>,
    on: Node,
    cmd: Vec<String>,
) -> Result<i32> {
    use crate::wire::fault as f;
    let need_node = |what: &str| -> Result<Node> {
        match (value, node) {
            (Some(v), _) => v.parse().map_err(anyhow::Error::msg),
            (None, Some(n)) => Ok(n),
            (None, None) => bail!("`cargo lab fault {what}` needs a node: a or b"),
        }
    };
    let dir = running_pair_dir()?;
    // The monitor's actions first: they need no agent (a frozen node's does not answer).
    match action {
        "freeze" | "thaw" => {
            let n = need_node(action)?;
            if !cmd.is_empty() {
                bail!("`cargo lab fault {action}` takes no `-- CMD`");
            }
            if action == "freeze" {
                f::freeze(&dir, n)?;
                println!(
                    "node {} frozen (`cargo lab fault thaw {}`)",
                    n.name(),
                    n.name()
                );
                return Ok(0);
            } else {
                f::thaw(&dir, n)?;
                println!("node {} thawed", n.name());
                return Ok(0);
            }
        }
        "kill" | "restart" => {
            let n = need_node(action)?;
            if !cmd.is_empty() {
                bail!("`cargo lab fault {action}` takes no `-- CMD`");
            }
            // The daemon owns the VMs: it kills or boots one, and keeps the lab up meanwhile.
            let lab = Testbed::attach(Topology::Pair, &dir)?;
            let request = if action == "kill" {
                HostRequest::Kill(n)
            } else {
                HostRequest::Restart(n)
            };
            println!("{}", lab.host(request)?);
            if action == "kill" {
                println!(
                    "(`cargo lab fault restart {}` boots it again; so does `cargo lab fault clear`)",
                    n.name()
                );
            }
            return Ok(0);
        }
        "clear" => {
            for n in f::thaw_all(&dir)? {
                println!("node {} thawed", n.name());
            }
        }
        "status" => {
            let frozen: Vec<Node> = Node::ALL
                .into_iter()
                .filter(|&n| f::frozen(&dir, n).unwrap_or(false))
                .collect();
            if !frozen.is_empty() {
                for n in frozen {
                    println!(
                        "node {}: frozen (`cargo lab fault thaw {}`)",
                        n.name(),
                        n.name()
                    );
                }
                let rec = std::fs::read_to_string(dir.join("faults")).unwrap_or_default();
                println!(
                    "recorded impairments: {}",
                    if rec.trim().is_empty() {
                        "none".to_string()
                    } else {
                        rec.trim().replace('\n', "; ")
                    }
                );
                return Ok(0);
            }
        }
        _ => {}
    }
    let lab = Testbed::attach(Topology::Pair, &dir)?;
    // Like a run: not in the middle of someone else's (a test's) use of the lab.
    let _g = testing::lock(&lab);
    match action {
        "loss" | "delay" | "duplicate" | "reorder" | "corrupt" => {
            let v = value.with_context(|| {
                format!("`cargo lab fault {action}` needs a value (e.g. 5%, or 10ms±2ms)")
            })?;
            let i = f::Impair::parse(action, v)?;
            f::impair(&lab, &nodes_of(node), i.clone())?;
            println!(
                "{} on RoCE (UDP 4791) sent by node {}",
                i.netem_args(),
                names(&nodes_of(node))
            );
        }
        "partition" => {
            f::partition(&lab, &nodes_of(node))?;
            println!(
                "partition: everything sent by node {} is lost",
                names(&nodes_of(node))
            );
        }
        "heal" => {
            f::heal(&lab, &nodes_of(node))?;
            println!("healed");
        }
        "clear" => {
            f::clear(&lab)?;
            println!("no fault is active");
            return Ok(0);
        }
        "status" => {
            for node in f::status(&lab)? {
                println!("{node}");
            }
            return Ok(0);
        }
        other => bail!(
            "unknown fault {other:?}: loss, delay, duplicate, reorder, corrupt, partition, heal, \
             freeze, thaw, kill, restart, clear, status (`cargo lab fault --help`)"
        ),
    }
    if cmd.is_empty() {
        println!("(active until `cargo lab fault clear` or `cargo lab down`)");
        return Ok(0);
    }
    // With a command: the faults last as long as it runs (Ctrl-C included), then go.
    let code = stream(&lab, on, cmd, &[], false);
    let cleared = f::clear(&lab);
    eprintln!("cargo lab fault: cleared every fault");
    cleared?;
    code
}
