//! A lab's state directory, and the name of every file in it: one place, asked by the daemon
//! that writes them, the VMs that bind them and the commands that read them.
//!
//! | file | written by | what |
//! |---|---|---|
//! | `daemon.pid`, `daemon.log` | the lab's daemon (cargo lab up) | its process, its output |
//! | `info`, `userspace`, `ready` | the daemon | what it booted; present once it serves |
//! | `node-X.sock` | the daemon | where commands for node X go |
//! | `agent-X.sock`, `qmp-X.sock` | QEMU | the guest agent's channel, the QEMU monitor |
//! | `console-X.log`, `qemu-X.log` | QEMU | the guest's console, QEMU's own messages |
//! | `wire-a.sock`, `wire-b.sock` | the pair's cable | each node's end of the wire |
//! | `faults` | the fault command | the impairments in place, per node |
//! | `killed-X`, `generation-X` | the daemon | node X killed on purpose; its restarts |
//! | `run.lock` | every run | one run at a time on the lab |
//! | `owner.pid` | a process's own lab | the process; gone, the dir is removed |
//!
//! The loopback VM's files are named as node a's.

use crate::Node;
use std::path::{Path, PathBuf};

/// The state directory of one lab (one topology, or one test's own lab).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir(PathBuf);

impl StateDir {
    /// The lab whose state is kept in `path`.
    pub fn at(path: impl Into<PathBuf>) -> StateDir {
        StateDir(path.into())
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.0
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn of(&self, what: &str, n: Node, ext: &str) -> PathBuf {
        self.0.join(format!("{what}-{}{ext}", n.name()))
    }

    /// The process that made a private state dir ([`crate::vm::new_state_dir`]): when it is
    /// gone, the dir is abandoned.
    pub fn owner_pid(&self) -> PathBuf {
        self.file("owner.pid")
    }

    /// The daemon's process id.
    pub fn daemon_pid(&self) -> PathBuf {
        self.file("daemon.pid")
    }

    /// The daemon's output.
    pub fn daemon_log(&self) -> PathBuf {
        self.file("daemon.log")
    }

    /// What the daemon booted (one line, `cargo lab status` prints it).
    pub fn info(&self) -> PathBuf {
        self.file("info")
    }

    /// The userspace root the guests run.
    pub fn userspace(&self) -> PathBuf {
        self.file("userspace")
    }

    /// Present once the daemon serves.
    pub fn ready(&self) -> PathBuf {
        self.file("ready")
    }

    /// The impairments recorded by `cargo lab fault`.
    pub fn faults(&self) -> PathBuf {
        self.file("faults")
    }

    /// The lock one run at a time holds.
    pub fn run_lock(&self) -> PathBuf {
        self.file("run.lock")
    }

    /// How the lab's VMs came up: "booted", "restored" ... (snapshot.rs).
    pub fn boot_kind(&self) -> PathBuf {
        self.file("boot-kind")
    }

    /// How pair node `n` came up (snapshot.rs).
    pub fn boot_kind_of(&self, n: Node) -> PathBuf {
        self.of("boot-kind", n, "")
    }

    /// The daemon's socket for commands to node `n`.
    pub fn node_sock(&self, n: Node) -> PathBuf {
        self.of("node", n, ".sock")
    }

    /// The guest agent's channel of node `n` (QEMU's virtio-serial end).
    pub fn agent_sock(&self, n: Node) -> PathBuf {
        self.of("agent", n, ".sock")
    }

    /// The QEMU monitor (QMP) of node `n`.
    pub fn qmp_sock(&self, n: Node) -> PathBuf {
        self.of("qmp", n, ".sock")
    }

    /// Node `n`'s console.
    pub fn console_log(&self, n: Node) -> PathBuf {
        self.of("console", n, ".log")
    }

    /// QEMU's own messages for node `n`.
    pub fn qemu_log(&self, n: Node) -> PathBuf {
        self.of("qemu", n, ".log")
    }

    /// Node `n`'s snapshot gate: init waits on it for the host's go-ahead before it mounts
    /// the host's root (snapshot.rs).
    pub fn gate_sock(&self, n: Node) -> PathBuf {
        self.of("gate", n, ".sock")
    }

    /// Node `n`'s end of the pair's wire.
    pub fn wire_sock(&self, n: Node) -> PathBuf {
        self.of("wire", n, ".sock")
    }

    /// Exists while node `n` is down because someone asked (`kill`), until its `restart`.
    pub fn killed(&self, n: Node) -> PathBuf {
        self.of("killed", n, "")
    }

    /// How many times node `n` was restarted.
    pub fn generation(&self, n: Node) -> PathBuf {
        self.of("generation", n, "")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_files_as_the_lab_always_did() {
        let d = StateDir::at("/s");
        assert_eq!(d.qmp_sock(Node::B), Path::new("/s/qmp-b.sock"));
        assert_eq!(d.node_sock(Node::A), Path::new("/s/node-a.sock"));
        assert_eq!(d.console_log(Node::A), Path::new("/s/console-a.log"));
        assert_eq!(d.killed(Node::B), Path::new("/s/killed-b"));
        assert_eq!(d.generation(Node::A), Path::new("/s/generation-a"));
        assert_eq!(d.daemon_pid(), Path::new("/s/daemon.pid"));
        assert_eq!(d.faults(), Path::new("/s/faults"));
    }
}
