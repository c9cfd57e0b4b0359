//! The owner of a booted VM lab: what only the process that runs the VMs can do.
//!
//! Requests come as one line of text, from a program in a guest (through its agent: the
//! chapters' `lab::host`) or from `cargo lab fault <action>` (through a daemon's relay):
//!
//! | line | what happens |
//! |---|---|
//! | `freeze N` / `thaw N` | QEMU `stop` / `cont` on node N: it goes silent and keeps its state |
//! | `kill N` | node N's QEMU is killed: the VM and everything in it are gone |
//! | `restart N` | a fresh VM for node N (killed first if it runs), on the same cable |
//! | `status` | each node: running, frozen or killed |
//! | `trace start` / `trace stop` | record the pair's wire (the cable); `stop` answers the ladder |
//!
//! Other processes see a node killed on purpose through a marker file in the state dir
//! ([`killed_marker`]), and count its restarts in another ([`generation`]): the relay answers
//! heartbeats for it, [`Testbed::check`] does not call the lab dead, and the role scheduler
//! starts the node's role again once it is back.

use super::*;
use crate::wire::cable::Cable;

/// A booted lab's VMs and what it takes to start one again.
pub(super) struct Owner {
    pub(super) dir: PathBuf,
    pub(super) topology: Topology,
    pub(super) plan: vm::BootPlan,
    pub(super) opts: VmOptions,
    pub(super) vms: Mutex<Vec<Vm>>,
    pub(super) cable: Option<Cable>,
    /// Each node's connection (clones of the lab's: a restart replaces them all at once).
    pub(super) conns: Vec<(Node, Conn)>,
    /// One request that changes a VM at a time.
    pub(super) busy: Mutex<()>,
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owner").field("dir", &self.dir).finish()
    }
}

/// Exists while node `n` is down because someone asked (`kill`), until its `restart`.
pub fn killed_marker(dir: &Path, n: Node) -> PathBuf {
    dir.join(format!("killed-{}", node_tag(n)))
}

/// How many times node `n` was restarted.
pub fn generation(dir: &Path, n: Node) -> u64 {
    std::fs::read_to_string(dir.join(format!("generation-{}", node_tag(n))))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn parse_node(s: Option<&str>) -> Result<Node, String> {
    match s {
        Some("a") => Ok(Node::A),
        Some("b") => Ok(Node::B),
        Some(o) => Err(format!("no node {o:?} (the pair's nodes are a and b)")),
        None => Err("which node? (a or b)".into()),
    }
}

impl Owner {
    /// Serves one request line; the text says what was done.
    pub(super) fn handle(&self, line: &str) -> Result<String, String> {
        let mut w = line.split_whitespace();
        let verb = w.next().unwrap_or("");
        if verb == "status" {
            return Ok(self.status());
        }
        if verb == "trace" {
            return self.trace(w.next());
        }
        let n = parse_node(w.next())?;
        if self.topology == Topology::Loopback && n == Node::B {
            return Err("the loopback lab has one node, a".into());
        }
        let _g = self.busy.lock().unwrap();
        let r = match verb {
            "freeze" | "thaw" if self.is_killed(n) => Err(anyhow::anyhow!(
                "node {} was killed; `restart {}` first",
                n.name(),
                n.name()
            )),
            "freeze" => crate::wire::fault::freeze(&self.dir, n)
                .map(|()| format!("node {} frozen (QEMU stopped its vCPUs)", n.name())),
            "thaw" => crate::wire::fault::thaw(&self.dir, n)
                .map(|()| format!("node {} running again", n.name())),
            "kill" => self.kill(n),
            "restart" => self.restart(n),
            other => Err(anyhow::anyhow!(
                "unknown request {other:?}: freeze, thaw, kill or restart a node, or status"
            )),
        };
        r.map_err(|e| format!("{e:#}"))
    }

    /// `trace start|stop`: the cable's tap. `stop` waits a moment first (the last ACK of what
    /// was just done is still on its way), then answers one ladder line per RoCE packet.
    fn trace(&self, what: Option<&str>) -> Result<String, String> {
        let Some(c) = &self.cable else {
            return Err(
                "only the pair has a wire to trace (in one VM rxe loops packets back)".into(),
            );
        };
        match what {
            Some("start") => {
                c.tap_start();
                Ok("recording the wire".into())
            }
            Some("stop") => {
                std::thread::sleep(Duration::from_millis(200));
                let frames = c.tap_stop();
                let packets: Vec<_> = frames
                    .iter()
                    .enumerate()
                    .filter_map(|(i, f)| crate::wire::decode::decode_frame(i + 1, f))
                    .collect();
                Ok(crate::wire::ladder::text(&packets))
            }
            _ => Err("trace start or trace stop".into()),
        }
    }

    fn is_killed(&self, n: Node) -> bool {
        killed_marker(&self.dir, n).exists()
    }

    fn status(&self) -> String {
        topo_nodes(self.topology)
            .iter()
            .map(|&n| {
                let state = if self.is_killed(n) {
                    "killed"
                } else {
                    match crate::wire::fault::frozen(&self.dir, n) {
                        Ok(true) => "frozen",
                        Ok(false) => "running",
                        Err(_) => "unreachable",
                    }
                };
                format!(
                    "node {}: {state} (restarts: {})\n",
                    n.name(),
                    generation(&self.dir, n)
                )
            })
            .collect()
    }

    fn kill(&self, n: Node) -> Result<String> {
        std::fs::write(killed_marker(&self.dir, n), "")?;
        let vms = self.vms.lock().unwrap();
        let v = vms
            .iter()
            .find(|v| v.node == n)
            .context("no VM for that node")?;
        let pid = v.pid();
        // Vm::kill waits for the process: when this returns, the VM is gone.
        v.kill();
        Ok(format!("node {} killed (QEMU pid {pid} is gone)", n.name()))
    }

    fn restart(&self, n: Node) -> Result<String> {
        let t0 = Instant::now();
        if !self.is_killed(n) {
            self.kill(n)?;
        }
        let wire = self.cable.as_ref().map(|c| vm::Wire::of(c, n, None));
        let node = (self.topology == Topology::Pair).then_some(n);
        let smp = if node.is_some() {
            1
        } else {
            self.opts.loopback_smp
        };
        let fresh = vm::start_one(&self.plan, &self.dir, node, smp, self.opts.mem_mb, wire)?;
        let conn = vm::connect(&fresh, Instant::now() + self.opts.boot_timeout)
            .with_context(|| format!("restarting node {}", n.name()))?;
        for (cn, c) in &self.conns {
            if *cn == n {
                c.replace(&conn);
            }
        }
        {
            let mut vms = self.vms.lock().unwrap();
            vms.retain(|v| v.node != n);
            vms.push(fresh);
        }
        let g = generation(&self.dir, n) + 1;
        std::fs::write(
            self.dir.join(format!("generation-{}", node_tag(n))),
            g.to_string(),
        )?;
        std::fs::remove_file(killed_marker(&self.dir, n))?;
        Ok(format!(
            "node {} restarted: a fresh VM, booted in {:.1} s",
            n.name(),
            t0.elapsed().as_secs_f64()
        ))
    }
}
