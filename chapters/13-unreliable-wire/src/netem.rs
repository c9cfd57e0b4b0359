//! The two tools of this chapter that are not verbs: `tc netem` on this node's link (the
//! client impairs what it sends), and rxe's counters in sysfs.
//!
//! Only RoCE v2 is impaired: a `prio` root qdisc sends everything to band 2, except UDP
//! datagrams to port 4791, which a `u32` filter puts in band 3, where netem waits. The TCP
//! connection the two processes talk over stays clean. netem's `limit` is raised to 100000
//! packets: when netem's own queue overflows, the packet is dropped *locally*, and rxe then
//! takes another (racy) resend path than for a packet lost on the wire.

use course::{Failure, Outcome as Result};
use std::collections::BTreeMap;

/// The link of the pair's wire in the lab's VMs.
pub const IFACE: &str = "eth0";

/// `tc ARGS` run to its end: stdin closed, its output kept, its exit status ours to judge.
fn run_tc<I>(args: I) -> std::io::Result<std::process::Output>
where
    I: IntoIterator,
    I::Item: Into<std::ffi::OsString>,
{
    duct::cmd("tc", args)
        .stdin_null()
        .stdout_capture()
        .stderr_capture()
        .unchecked()
        .run()
}

fn tc(args: &str) -> Result {
    let out = run_tc(args.split_whitespace())
        .map_err(|e| Failure(format!("cannot run tc ({e}); it is in iproute2")))?;
    if !out.status.success() {
        return Err(Failure(format!(
            "`tc {args}` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// An impairment of the RoCE packets this node sends, removed when dropped (also when the
/// case fails half way).
pub struct Netem {
    active: bool,
}

impl Netem {
    /// Puts `netem <params>` (e.g. `loss 5%`) on this node's RoCE traffic.
    pub fn apply(params: &str) -> Result<Netem> {
        remove_all();
        tc(&format!(
            "qdisc add dev {IFACE} root handle 1: prio bands 3 \
             priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1"
        ))?;
        let n = Netem { active: true };
        tc(&format!(
            "qdisc add dev {IFACE} parent 1:3 handle 30: netem limit 100000 {params}"
        ))?;
        tc(&format!(
            "filter add dev {IFACE} parent 1: protocol ip prio 1 u32 \
             match ip protocol 17 0xff match ip dport 4791 0xffff flowid 1:3"
        ))?;
        Ok(n)
    }

    /// Heals the wire without taking the qdiscs away: netem stays, with `params` (e.g. `loss
    /// 0%`). Deleting the root qdisc swaps the link's queue while rxe may be sending; from Linux
    /// 6.10 on rxe fails a WR whose packet the stack refuses (course::kernel::RxeChange::
    /// XmitErrorFailsWr) instead of trying it again, so a heal by deletion can end the QP.
    pub fn change(&self, params: &str) -> Result {
        tc(&format!(
            "qdisc change dev {IFACE} parent 1:3 handle 30: netem limit 100000 {params}"
        ))
    }

    /// Removes it now.
    pub fn remove(mut self) {
        self.active = false;
        remove_all();
    }
}

impl Drop for Netem {
    fn drop(&mut self) {
        if self.active {
            remove_all();
        }
    }
}

/// Back to the kernel's default qdisc.
pub fn remove_all() {
    let _ = run_tc(["qdisc", "del", "dev", IFACE, "root"]);
}

/// Counter name -> value.
pub type Counters = BTreeMap<String, u64>;

/// rxe's counters of port 1 (`/sys/class/infiniband/<dev>/ports/1/hw_counters`).
pub fn counters(dev: &str) -> BTreeMap<String, u64> {
    let dir = format!("/sys/class/infiniband/{dev}/ports/1/hw_counters");
    let mut out = BTreeMap::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if let Ok(v) = std::fs::read_to_string(e.path())
                && let Ok(n) = v.trim().parse()
            {
                out.insert(e.file_name().to_string_lossy().into_owned(), n);
            }
        }
    }
    out
}

/// How much each counter rose between two readings (only those that did).
pub fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> Vec<(String, u64)> {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = v.saturating_sub(*before.get(k).unwrap_or(&0));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}
