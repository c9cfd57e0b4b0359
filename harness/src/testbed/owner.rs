//! The owner of a booted VM lab: what only the process that runs the VMs can do.
//!
//! Requests come as one line of text, from a program in a guest (through its agent: the
//! chapters' `course::host`) or from `cargo lab fault <action>` (through a daemon's relay). The
//! line is a [`HostRequest`] (its table says what each one does); [`Owner::handle`] parses it
//! and carries it out.
//!
//! Other processes see a node killed on purpose through a marker file in the state dir
//! ([`StateDir::killed`](crate::StateDir::killed)), and count its restarts in another ([`generation`]): the relay answers
//! heartbeats for it, [`Testbed::check`](super::Testbed::check) does not call the lab dead, and the role scheduler
//! starts the node's role again once it is back.

use crate::conn::Conn;
use crate::vm::{self, Vm};
use crate::vm_options::VmOptions;
use crate::wire::cable::Cable;
use crate::wire::decode::decode_frame;
use crate::wire::settle::{self, ANSWER_WAIT, Settle};
use crate::{Node, Topology};
use crate::{StateDir, qmp};
use anyhow::{Context as _, Result};
use contracts::HostRequest;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

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

/// How many times node `n` was restarted.
pub fn generation(dir: &Path, n: Node) -> u64 {
    std::fs::read_to_string(StateDir::at(dir).generation(n))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

impl Owner {
    /// Serves one request line; the text says what was done, or why it was not.
    pub(super) fn handle(&self, line: &str) -> Result<String, String> {
        let request: HostRequest = line.parse().map_err(|e| format!("{e}"))?;
        self.carry_out(request)
    }

    /// Carries out one request.
    pub(super) fn carry_out(&self, request: HostRequest) -> Result<String, String> {
        match request {
            HostRequest::Status => Ok(self.status()),
            HostRequest::TraceStart => self.trace(true),
            HostRequest::TraceStop => self.trace(false),
            HostRequest::Freeze(n) => self.change(n, true, || {
                qmp::freeze(&self.dir, n)
                    .map(|()| format!("node {} frozen (QEMU stopped its vCPUs)", n.name()))
            }),
            HostRequest::Thaw(n) => self.change(n, true, || {
                qmp::thaw(&self.dir, n).map(|()| format!("node {} running again", n.name()))
            }),
            HostRequest::Kill(n) => self.change(n, false, || self.kill(n)),
            HostRequest::Restart(n) => self.change(n, false, || self.restart(n)),
        }
    }

    /// Runs `f`, which changes node `n`'s VM, with no other change under way. `needs_vm`: `f`
    /// talks to the VM's monitor, so a node killed on purpose is refused.
    fn change(
        &self,
        n: Node,
        needs_vm: bool,
        f: impl FnOnce() -> Result<String>,
    ) -> Result<String, String> {
        if !self.topology.nodes().contains(&n) {
            return Err("the loopback lab has one node, a".into());
        }
        let _g = self.busy.lock().unwrap();
        if needs_vm && self.is_killed(n) {
            return Err(format!(
                "node {} was killed; `restart {}` first",
                n.name(),
                n.name()
            ));
        }
        f().map_err(|e| format!("{e:#}"))
    }

    /// `trace start` (`start`) or `trace stop`: the cable's tap. `stop` first waits until every
    /// request on the tap has its answer there (the last ACK of what was just done may still
    /// be on its way), for [`ANSWER_WAIT`] at most (an unanswered request is what a fault case
    /// records: [`settle`]), then answers one ladder line per RoCE packet.
    fn trace(&self, start: bool) -> Result<String, String> {
        let Some(c) = &self.cable else {
            return Err(
                "only the pair has a wire to trace (in one VM rxe loops packets back)".into(),
            );
        };
        if start {
            c.tap_start();
            Ok("recording the wire".into())
        } else {
            let mut seen = 0;
            settle::until_answered(&mut Settle::default(), ANSWER_WAIT, |s| {
                for f in c.tap_since(seen) {
                    seen += 1;
                    if let Some(p) = decode_frame(seen, &f) {
                        s.add(&p);
                    }
                }
                Ok(())
            })
            .map_err(|e| format!("{e:#}"))?;
            let frames = c.tap_stop();
            let packets: Vec<_> = frames
                .iter()
                .enumerate()
                .filter_map(|(i, f)| decode_frame(i + 1, f))
                .collect();
            Ok(crate::wire::ladder::text(&packets))
        }
    }

    fn is_killed(&self, n: Node) -> bool {
        StateDir::at(&self.dir).killed(n).exists()
    }

    fn status(&self) -> String {
        self.topology
            .nodes()
            .iter()
            .map(|&n| {
                let state = if self.is_killed(n) {
                    "killed"
                } else {
                    match qmp::frozen(&self.dir, n) {
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
        std::fs::write(StateDir::at(&self.dir).killed(n), "")?;
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
            self.opts.pair_smp
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
        std::fs::write(StateDir::at(&self.dir).generation(n), g.to_string())?;
        std::fs::remove_file(StateDir::at(&self.dir).killed(n))?;
        Ok(format!(
            "node {} restarted: a fresh VM, booted in {:.1} s",
            n.name(),
            t0.elapsed().as_secs_f64()
        ))
    }
}
