//! The guest's lab network and its rxe device (docs/conventions.md §2): the pinned addresses,
//! `rxe0` on the node's netdev, and the wait for its RoCE v2 GID.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::Path;
// std::process, not duct: build.rs compiles the agent with $RUSTC alone, no crates.io crates.
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn sh(prog: &str, args: &[&str], stdin: Option<&str>) -> Result<(), String> {
    let mut c = Command::new(prog);
    c.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().map_err(|e| format!("{prog}: {e}"))?;
    if let Some(input) = stdin {
        let mut i = child.stdin.take().unwrap();
        i.write_all(input.as_bytes())
            .map_err(|e| format!("{prog}: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{prog}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{prog} {}` failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// docs/conventions.md §2: the pinned lab network, then rxe0 on it.
pub(crate) fn setup_network() -> Result<(), String> {
    let node = std::env::var("LAB_NODE").unwrap_or_default();
    let (netdev, ip, batch) = match node.as_str() {
        "" => (
            "veth0",
            "10.99.0.1",
            "link set lo up\n\
             link add veth0 type veth peer name veth1\n\
             link set veth0 address 52:54:00:00:00:01\n\
             addr add 10.99.0.1/24 dev veth0\n\
             link set veth0 up\n\
             link set veth1 up\n"
                .to_string(),
        ),
        "a" | "b" => {
            let ip = if node == "a" {
                "10.77.0.1"
            } else {
                "10.77.0.2"
            };
            let dev = find_netdev_by_mac(if node == "a" {
                "52:54:00:00:00:0a"
            } else {
                "52:54:00:00:00:0b"
            })?;
            let dev: &'static str = Box::leak(dev.into_boxed_str());
            (
                dev,
                ip,
                format!("link set lo up\naddr add {ip}/24 dev {dev}\nlink set {dev} up\n"),
            )
        }
        other => return Err(format!("unknown LAB_NODE={other}")),
    };
    if Path::new("/sys/class/infiniband/rxe0").exists() {
        // Init set it up before the snapshot's gate (harness/src/snapshot.rs).
        return wait_gid(ip, Duration::from_secs(30));
    }
    let t0 = Instant::now();
    // The initramfs's static busybox (copied to /run by init): no shared libraries to page in
    // over 9p (the host's `ip` took 0.6-2.3 s here under TCG). Its `ip link add ... type veth`
    // ignores `peer name`; the kernel names the peer veth1 in a fresh VM, checked below; the
    // host's `ip -batch` is the fallback.
    let quick = Path::new(BUSYBOX).exists()
        && match quick_net(&batch) {
            Ok(()) => true,
            Err(e) => {
                eprintln!("lab-agent: busybox ip: {e}; using the host's ip");
                false
            }
        };
    if !quick {
        // Undo what busybox may have done, then the host's ip.
        if node.is_empty() {
            let _ = sh("ip", &["link", "del", "veth0"], None);
        }
        sh("ip", &["-batch", "-"], Some(&batch))?;
    }
    let t1 = Instant::now();
    sh(
        "rdma",
        &["link", "add", "rxe0", "type", "rxe", "netdev", netdev],
        None,
    )?;
    let t2 = Instant::now();
    let r = wait_gid(ip, Duration::from_secs(30));
    eprintln!(
        "lab-agent: ip {} ms, rdma link {} ms, GID wait {} ms",
        (t1 - t0).as_millis(),
        (t2 - t1).as_millis(),
        t2.elapsed().as_millis()
    );
    r
}

/// The initramfs's static busybox, copied to /run by init.
const BUSYBOX: &str = "/run/busybox";

/// The `ip -batch` lines through busybox's `ip`, one process each (a static binary: nothing to
/// page in over 9p). busybox ignores `peer name`: the peer is found by ifindex and renamed.
fn quick_net(batch: &str) -> Result<(), String> {
    let trace = std::env::var_os("LAB_AGENT_TRACE").is_some();
    let bb = |args: &[&str]| -> Result<(), String> {
        let t = Instant::now();
        let mut argv = vec!["ip"];
        argv.extend_from_slice(args);
        let r = sh(BUSYBOX, &argv, None);
        if trace {
            eprintln!(
                "lab-agent: ip {} ({} ms)",
                args.join(" "),
                t.elapsed().as_millis()
            );
        }
        r
    };
    for l in batch.lines() {
        let a: Vec<&str> = l.split_whitespace().collect();
        if let Some(i) = a.iter().position(|w| *w == "peer") {
            // link add veth0 type veth peer name veth1: busybox names the peer itself
            // ("veth%d", registered first: in a fresh VM it takes veth0 and the add fails), so
            // add under a temporary name, then rename both ends.
            let (dev, peer) = (a[2], a[i + 2]);
            let tmp = "labtmp0";
            let mut add: Vec<&str> = a[..i].to_vec();
            add[2] = tmp;
            bb(&add)?;
            let idx = fs::read_to_string(format!("/sys/class/net/{tmp}/iflink"))
                .map_err(|e| format!("{tmp}: {e}"))?;
            let other = fs::read_dir("/sys/class/net")
                .map_err(|e| e.to_string())?
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find(|n| {
                    n != tmp
                        && fs::read_to_string(format!("/sys/class/net/{n}/ifindex"))
                            .map(|s| s.trim() == idx.trim())
                            .unwrap_or(false)
                })
                .ok_or_else(|| format!("no peer of {tmp}"))?;
            if other != peer {
                bb(&["link", "set", &other, "name", peer])?;
            }
            bb(&["link", "set", tmp, "name", dev])?;
        } else if !a.is_empty() {
            bb(&a)?;
        }
    }
    Ok(())
}

fn find_netdev_by_mac(mac: &str) -> Result<String, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(dir) = fs::read_dir("/sys/class/net") {
            for e in dir.flatten() {
                let a = fs::read_to_string(e.path().join("address")).unwrap_or_default();
                if a.trim() == mac {
                    return Ok(e.file_name().to_string_lossy().into_owned());
                }
            }
        }
        if Instant::now() > deadline {
            return Err(format!("no netdev with MAC {mac}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The RoCE v2 GID of an IPv4 address (`::ffff:a.b.c.d`), as sysfs prints a GID.
fn v4_mapped_gid(ip: &str) -> String {
    let o: Vec<u32> = ip.split('.').map(|x| x.parse().unwrap_or(0)).collect();
    format!(
        "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
        o[0], o[1], o[2], o[3]
    )
}

/// Waits until rxe0's GID table holds ::ffff:<ip> and port 1 is ACTIVE.
fn wait_gid(ip: &str, limit: Duration) -> Result<(), String> {
    let want = v4_mapped_gid(ip);
    let port = "/sys/class/infiniband/rxe0/ports/1";
    let deadline = Instant::now() + limit;
    loop {
        let state = fs::read_to_string(format!("{port}/state")).unwrap_or_default();
        // Index 1 first (docs/conventions.md §2): the table has 1024 entries, slow to read
        // one by one under TCG.
        let mut found =
            fs::read_to_string(format!("{port}/gids/1")).is_ok_and(|s| s.trim() == want);
        if let (false, Ok(dir)) = (found, fs::read_dir(format!("{port}/gids"))) {
            for e in dir.flatten() {
                let mut s = String::new();
                if let Ok(mut f) = File::open(e.path()) {
                    let _ = f.read_to_string(&mut s);
                }
                if s.trim() == want {
                    found = true;
                }
            }
        }
        if found && state.contains("ACTIVE") {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "rxe0 not ready after {}s: port state {:?}, GID {want} {}",
                limit.as_secs(),
                state.trim(),
                if found { "present" } else { "missing" }
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gid_of_each_lab_address() {
        assert_eq!(
            v4_mapped_gid("10.77.0.2"),
            "0000:0000:0000:0000:0000:ffff:0a4d:0002"
        );
        assert_eq!(
            v4_mapped_gid("10.99.0.1"),
            "0000:0000:0000:0000:0000:ffff:0a63:0001"
        );
    }
}
