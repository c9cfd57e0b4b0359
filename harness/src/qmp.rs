//! The QEMU monitor of each VM: freezing and thawing a node ([`freeze`], [`thaw`]: QMP's
//! `stop`/`cont`, which need no agent, so they work on a frozen node too), and a minimal client
//! of the QEMU monitor protocol (QMP) on a VM's `qmp-<node>.sock` ([`Qmp`]): one
//! command at a time, one JSON object per line, replies recognized by their `"return"` or
//! `"error"` member (asynchronous events are skipped). No JSON crate: the commands are fixed
//! strings, and what is read back is only success, an error's description, or `query-status`.

use crate::{Node, StateDir};
use anyhow::{Context as _, Result, bail};
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

fn monitor(dir: &Path, node: Node) -> Result<Qmp> {
    Qmp::connect(&StateDir::at(dir).qmp_sock(node))
}

/// Stops a node's vCPUs (QEMU `stop`): it goes silent, and keeps its state. `dir`: the lab's
/// state dir.
pub fn freeze(dir: &Path, node: Node) -> Result<()> {
    monitor(dir, node)?.execute("stop", "")?;
    Ok(())
}

/// Resumes a frozen node (QEMU `cont`).
pub fn thaw(dir: &Path, node: Node) -> Result<()> {
    monitor(dir, node)?.execute("cont", "")?;
    Ok(())
}

/// Is the node frozen?
pub fn frozen(dir: &Path, node: Node) -> Result<bool> {
    Ok(!monitor(dir, node)?.running()?)
}

/// Thaws every frozen node of the pair in `dir`; returns the nodes it thawed. (A node killed
/// on purpose has no monitor until its restart.)
pub fn thaw_all(dir: &Path) -> Result<Vec<Node>> {
    let mut out = vec![];
    for n in Node::ALL {
        if StateDir::at(dir).killed(n).exists() {
            continue;
        }
        if frozen(dir, n)? {
            thaw(dir, n)?;
            out.push(n);
        }
    }
    Ok(out)
}

/// A connected monitor, past the capabilities negotiation.
#[derive(Debug)]
pub struct Qmp {
    r: BufReader<UnixStream>,
    w: UnixStream,
}

/// A string as a JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

impl Qmp {
    /// Connects (every read and write has a 10 s deadline) and negotiates capabilities.
    pub fn connect(sock: &Path) -> Result<Qmp> {
        let s = UnixStream::connect(sock).with_context(|| {
            format!(
                "connecting to the QEMU monitor {} (a lab booted before the monitor existed: \
                 `cargo lab down`, then start it again)",
                sock.display()
            )
        })?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.set_write_timeout(Some(Duration::from_secs(10)))?;
        let mut q = Qmp {
            r: BufReader::new(s.try_clone()?),
            w: s,
        };
        let mut greeting = String::new();
        q.r.read_line(&mut greeting)
            .context("reading the QMP greeting")?;
        if !greeting.contains("\"QMP\"") {
            bail!("{} is not a QEMU monitor: {greeting:?}", sock.display());
        }
        q.execute("qmp_capabilities", "")?;
        Ok(q)
    }

    /// Runs one command (`args`: the JSON object of its arguments, or "") and returns the
    /// reply line.
    pub fn execute(&mut self, cmd: &str, args: &str) -> Result<String> {
        let line = if args.is_empty() {
            format!("{{\"execute\":{}}}\n", json_str(cmd))
        } else {
            format!("{{\"execute\":{},\"arguments\":{args}}}\n", json_str(cmd))
        };
        self.w
            .write_all(line.as_bytes())
            .with_context(|| format!("sending {cmd} to the QEMU monitor"))?;
        loop {
            let mut reply = String::new();
            let n = self
                .r
                .read_line(&mut reply)
                .with_context(|| format!("waiting for the QEMU monitor's answer to {cmd}"))?;
            if n == 0 {
                bail!("the QEMU monitor closed the connection during {cmd}");
            }
            if reply.contains("\"return\"") {
                return Ok(reply);
            }
            if reply.contains("\"error\"") {
                let desc = reply
                    .split("\"desc\":")
                    .nth(1)
                    .map(|d| d.trim().trim_end_matches('}').trim())
                    .unwrap_or(reply.trim());
                bail!("QEMU monitor: {cmd} failed: {desc}");
            }
            // An event ({"event": ...}): not our answer.
        }
    }

    /// Is the VM running (`query-status`)? False when stopped (`cargo lab fault freeze`).
    pub fn running(&mut self) -> Result<bool> {
        let r = self.execute("query-status", "")?;
        Ok(r.contains("\"running\":true") || r.contains("\"running\": true"))
    }
}
