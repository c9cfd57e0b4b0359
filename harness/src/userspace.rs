//! `--userspace U`: the lab's guests run another distribution's userspace (its glibc, rdma-core
//! and iproute2) under the same kernel, for the userspace half of the test matrix.
//!
//! By default a guest runs the host's root, shared read-only over 9p with a tmpfs overlay on
//! top, so its rdma-core is the host's. With a userspace root, init lays the overlay on that root
//! instead (it lies inside the host's share), and lays one more overlay on each of the host's
//! own top-level directories that are not the operating system's (`/root`, `/home`, `/tmp`,
//! `/var/tmp`, `/work` ...): the same test binary, built on the host, then runs in the guest
//! against the other rdma-core. libibverbs keeps its ABI (symbol versions), and a newer glibc
//! runs binaries linked against an older one; the other way round (a root older than the host)
//! fails at load time with glibc's "version `GLIBC_2.xx' not found", which is the loader's own
//! message.
//!
//! A root is either a directory (`--userspace /var/tmp/trixie`, made by debootstrap or by
//! `scripts/debian13-root.sh`), or a suite of the distribution's archive (`--userspace trixie`),
//! which `cargo lab userspace fetch <suite>` builds without root: a private apt (the one
//! `cargo lab kernel fetch <suite>` uses) resolves [`PACKAGES`] and their dependencies against an empty
//! package database, downloads them, and `dpkg-deb -x` unpacks each into
//! `<cache>/userspace/<suite>/`. No maintainer script runs: the root gets the merged-/usr links,
//! `/etc/passwd` and `/etc/group` from base-passwd's masters, and the directories a root has,
//! written here. The dynamic loader finds the libraries in its built-in multiarch directories
//! (the root has no `ld.so.cache`).

use crate::initramfs;
use crate::kernel_fetch::{PrivateApt, build_then_move, run};
use anyhow::{Context as _, Result, bail};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// What a fetched root holds: what the agent runs (a shell, coreutils' `sync`, iproute2's
/// `ip`, `rdma` and `tc`, procps' `kill`), rdma-core's libraries, providers and tools, and what
/// the chapters and their tests run in the guest (perftest, qperf, strace, util-linux's
/// `prlimit`, busybox's `nc`, `ping`, grep and sed in their shell lines).
pub const PACKAGES: &[&str] = &[
    "base-files",
    "base-passwd",
    "dash",
    "bash",
    "coreutils",
    "grep",
    "sed",
    "findutils",
    "libc-bin",
    "procps",
    "util-linux",
    "kmod",
    "iproute2",
    "libibverbs1",
    "ibverbs-providers",
    "librdmacm1",
    "ibverbs-utils",
    "rdmacm-utils",
    "perftest",
    "qperf",
    "strace",
    "busybox",
    "iputils-ping",
];

/// The file in a fetched root that lists its suite and packages (`name version` per line).
const MANIFEST: &str = ".lab-userspace";

/// A userspace root the guests run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Userspace {
    /// The suite it was fetched from, or the directory's name.
    pub name: String,
    pub root: PathBuf,
}

/// Where fetched roots live: `<cache>/userspace/<suite>/`.
pub fn userspace_dir() -> PathBuf {
    initramfs::cache_dir().join("userspace")
}

static OVERRIDE: std::sync::OnceLock<Option<Userspace>> = std::sync::OnceLock::new();

/// `--userspace U`: this process boots its guests with `u` (`None`: the host's root), and its
/// children get `LAB_USERSPACE` (see [`child_env`]).
pub fn set_override(u: Option<Userspace>) {
    let _ = OVERRIDE.set(u);
}

/// `LAB_USERSPACE` for a child process (a lab daemon, `cargo test`) when `--userspace` chose
/// one.
pub fn child_env() -> Option<(&'static str, PathBuf)> {
    match OVERRIDE.get() {
        Some(Some(u)) => Some(("LAB_USERSPACE", u.root.clone())),
        Some(None) => Some(("LAB_USERSPACE", PathBuf::from("host"))),
        None => None,
    }
}

/// The userspace the guests run: `--userspace`, else `LAB_USERSPACE` (a directory, a fetched
/// suite, or `host`), else the host's own root (`None`).
pub fn chosen() -> Result<Option<Userspace>> {
    if let Some(u) = OVERRIDE.get() {
        return Ok(u.clone());
    }
    // Resolved once per process (a suite name is looked up, and fetched if need be, once).
    static FROM_ENV: std::sync::OnceLock<Result<Option<Userspace>, String>> =
        std::sync::OnceLock::new();
    FROM_ENV
        .get_or_init(|| match std::env::var("LAB_USERSPACE") {
            Ok(v) if !v.is_empty() => resolve(&v).map_err(|e| format!("LAB_USERSPACE={v}: {e:#}")),
            _ => Ok(None),
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// Checks that `root` can be a guest's root; the error names what is missing and the fix.
pub fn check_root(root: &Path) -> Result<()> {
    if !root.is_absolute() {
        bail!("{}: a userspace root is an absolute path", root.display());
    }
    let printable = root
        .to_str()
        .is_some_and(|s| !s.contains(|c: char| c.is_whitespace() || c == ':'));
    if !printable {
        bail!(
            "{}: the kernel command line cannot carry a path with spaces or colons; move the \
             root",
            root.display()
        );
    }
    if root == Path::new("/") {
        bail!("/ is the host's own root: leave --userspace out (or say `host`)");
    }
    let find = |names: &[&str]| names.iter().any(|n| root.join(n).exists());
    let mut missing = vec![];
    if !find(&["usr/bin/sh", "bin/sh"]) {
        missing.push("a shell (dash)");
    }
    if !find(&["usr/sbin/ip", "usr/bin/ip", "sbin/ip", "bin/ip"])
        || !find(&["usr/sbin/rdma", "usr/bin/rdma", "sbin/rdma", "bin/rdma"])
    {
        missing.push("iproute2 (ip, rdma: the agent sets up the rxe link with them)");
    }
    if !find(&[
        "usr/lib/x86_64-linux-gnu/libibverbs.so.1",
        "usr/lib64/libibverbs.so.1",
        "lib/x86_64-linux-gnu/libibverbs.so.1",
    ]) {
        missing.push("libibverbs1 and ibverbs-providers (rdma-core)");
    }
    if !missing.is_empty() {
        bail!(
            "{} cannot be a lab userspace: it lacks {}; fix: install them in the root (`chroot {} \
             apt-get install iproute2 libibverbs1 ibverbs-providers`), or use a fetched one \
             (`cargo lab userspace fetch SUITE`)",
            root.display(),
            missing.join(", "),
            root.display()
        );
    }
    Ok(())
}

/// Resolves `--userspace U`: `host` (the host's root: `None`), a directory, or a suite name,
/// fetched when no root of it is here yet.
pub fn resolve(u: &str) -> Result<Option<Userspace>> {
    if u == "host" {
        return Ok(None);
    }
    if u.contains('/') {
        let root = std::fs::canonicalize(u)
            .with_context(|| format!("--userspace {u}: no such directory"))?;
        if !root.is_dir() {
            bail!("--userspace {u}: not a directory");
        }
        check_root(&root)?;
        let name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| u.to_string());
        return Ok(Some(Userspace { name, root }));
    }
    // A fetched root that is current is used as it is; fetch says so on stderr.
    fetch(u).map(Some)
}

/// The fetched roots.
pub fn list() -> Vec<Userspace> {
    let mut out = vec![];
    if let Ok(rd) = std::fs::read_dir(userspace_dir()) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.') && e.path().join(MANIFEST).is_file() {
                out.push(Userspace {
                    name,
                    root: e.path(),
                });
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The version of `pkg` in a root: its manifest (a fetched root) or its dpkg database (a
/// debootstrapped one); `None` for the host's, which [`host_version`] reads.
pub fn package_version(root: &Path, pkg: &str) -> Option<String> {
    if let Ok(m) = std::fs::read_to_string(root.join(MANIFEST)) {
        return m.lines().find_map(|l| {
            let (n, v) = l.split_once(' ')?;
            (n == pkg).then(|| v.to_string())
        });
    }
    dpkg_version(Some(root), pkg)
}

/// `pkg`'s version in the host's dpkg database.
pub fn host_version(pkg: &str) -> Option<String> {
    dpkg_version(None, pkg)
}

fn dpkg_version(root: Option<&Path>, pkg: &str) -> Option<String> {
    let mut args = vec![];
    if let Some(r) = root {
        args.push(format!("--admindir={}", r.join("var/lib/dpkg").display()));
    }
    args.extend(["-W".into(), "-f=${Version}".into(), pkg.into()]);
    let out = crate::host_tools::captured(duct::cmd("dpkg-query", args)).ok()?;
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !v.is_empty()).then_some(v)
}

/// The host directories a guest with a userspace root sees as the host has them (each under a
/// tmpfs overlay of its own, as the host's root is without one): every top-level directory that
/// is not the operating system's, and `/var/tmp`. Names a kernel command line cannot carry
/// (spaces, colons) are left out.
pub fn host_dirs() -> Vec<String> {
    const SYSTEM: &[&str] = &[
        "bin",
        "boot",
        "dev",
        "etc",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "lost+found",
        "proc",
        "run",
        "sbin",
        "sys",
        "usr",
        "var",
    ];
    let mut out = vec![];
    if let Ok(rd) = std::fs::read_dir("/") {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
            if is_dir && !SYSTEM.contains(&name.as_str()) {
                out.push(format!("/{name}"));
            }
        }
    }
    if Path::new("/var/tmp").is_dir() {
        out.push("/var/tmp".into());
    }
    out.retain(|d| !d.contains(|c: char| c.is_whitespace() || c == ':'));
    out.sort();
    out
}

/// The package names an `apt-get -s install` transcript would install (`Inst NAME ...`).
fn simulated_installs(sim: &str) -> Vec<String> {
    sim.lines()
        .filter_map(|l| l.strip_prefix("Inst "))
        .filter_map(|l| l.split_whitespace().next())
        .map(|n| n.split(':').next().unwrap_or(n).to_string())
        .collect()
}

/// `name version` from a .deb's file name (`name_version_arch.deb`, `%3a` for an epoch's `:`).
fn deb_name_version(deb: &Path) -> Option<(String, String)> {
    let f = deb.file_name()?.to_string_lossy().into_owned();
    let mut parts = f.trim_end_matches(".deb").splitn(3, '_');
    let name = parts.next()?.to_string();
    let ver = parts.next()?.replace("%3a", ":");
    Some((name, ver))
}

/// Downloads [`PACKAGES`] of `suite` with their dependencies and unpacks them into
/// `<cache>/userspace/<suite>/`; returns the root. Progress goes to stderr.
pub fn fetch(suite: &str) -> Result<Userspace> {
    let dest = userspace_dir().join(suite);
    let wanted = format!("packages {}", PACKAGES.join(" "));
    // A root fetched for another package list is fetched again.
    let same =
        std::fs::read_to_string(dest.join(MANIFEST)).is_ok_and(|m| m.lines().any(|l| l == wanted));
    if same {
        eprintln!("userspace: {suite} ({})", dest.display());
        return Ok(Userspace {
            name: suite.to_string(),
            root: dest,
        });
    }
    let apt = PrivateApt::new(suite, "userspace fetch")?;
    // Against an empty package database (the private apt's status is /dev/null), a simulated
    // install lists the whole closure: libc6 and everything else the packages depend on.
    let release = format!("APT::Default-Release={suite}");
    let args = (apt.opts.iter().map(String::as_str))
        .chain([
            "-s",
            "-q",
            "--no-install-recommends",
            "-o",
            &release,
            "install",
        ])
        .chain(PACKAGES.iter().copied());
    let sim = run(
        duct::cmd("apt-get", args),
        "apt-get -s install (the userspace's package closure)",
    )?;
    let pkgs = simulated_installs(&sim);
    if pkgs.is_empty() {
        bail!("apt-get -s install listed no packages for {suite}:\n{sim}");
    }
    eprintln!(
        "userspace fetch: downloading {} packages ({} and their dependencies)",
        pkgs.len(),
        PACKAGES.join(" ")
    );
    let files = apt.download(suite, &pkgs)?;
    let tmp = userspace_dir().join(format!(".{suite}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let unpack = || -> Result<()> {
        std::fs::create_dir_all(&tmp)?;
        let mut manifest = format!("suite {suite}\n{wanted}\n");
        for deb in &files {
            run(
                duct::cmd("dpkg-deb", [OsStr::new("-x"), deb.as_ref(), tmp.as_ref()]),
                "dpkg-deb -x",
            )?;
            if let Some((n, v)) = deb_name_version(deb) {
                manifest.push_str(&format!("{n} {v}\n"));
            }
        }
        finish_root(&tmp)?;
        check_root(&tmp)?;
        std::fs::write(tmp.join(MANIFEST), manifest)?;
        Ok(())
    };
    eprintln!("userspace fetch: unpacking into {}", dest.display());
    build_then_move(&tmp, &dest, unpack)?;
    Ok(Userspace {
        name: suite.to_string(),
        root: dest,
    })
}

/// What maintainer scripts and debootstrap would have made: the merged-/usr links, the
/// directories a root has, `/etc/passwd` and `/etc/group`.
fn finish_root(root: &Path) -> Result<()> {
    use std::os::unix::fs::{PermissionsExt as _, symlink};
    for (link, target) in [
        ("bin", "usr/bin"),
        ("sbin", "usr/sbin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        let l = root.join(link);
        if l.symlink_metadata().is_err() && root.join(target).is_dir() {
            symlink(target, &l).with_context(|| format!("linking {}", l.display()))?;
        }
    }
    for d in [
        "proc", "sys", "dev", "run", "tmp", "root", "home", "var/tmp", "etc",
    ] {
        std::fs::create_dir_all(root.join(d))?;
    }
    for d in ["tmp", "var/tmp"] {
        std::fs::set_permissions(root.join(d), std::fs::Permissions::from_mode(0o1777))?;
    }
    for f in ["passwd", "group"] {
        let master = root.join(format!("usr/share/base-passwd/{f}.master"));
        let etc = root.join("etc").join(f);
        if !etc.exists() && master.is_file() {
            std::fs::copy(&master, &etc)
                .with_context(|| format!("copying {} to {}", master.display(), etc.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_simulated_install_names_its_packages() {
        let sim = "NOTE: This is only a simulation!\n\
                   Inst libc6 (2.41-12 Debian:13.2/stable [amd64])\n\
                   Inst libibverbs1:amd64 (56.1-1 Debian:13.2/stable [amd64])\n\
                   Conf libc6 (2.41-12 Debian:13.2/stable [amd64])\n";
        assert_eq!(simulated_installs(sim), ["libc6", "libibverbs1"]);
    }

    #[test]
    fn a_deb_file_name_gives_name_and_version() {
        assert_eq!(
            deb_name_version(Path::new("/x/base-passwd_3.6.7_amd64.deb")),
            Some(("base-passwd".into(), "3.6.7".into()))
        );
        assert_eq!(
            deb_name_version(Path::new("libc6_2%3a2.41-12_amd64.deb")),
            Some(("libc6".into(), "2:2.41-12".into()))
        );
    }

    #[test]
    fn a_root_without_rdma_core_is_refused_with_the_fix() {
        let d = tempfile::tempdir().unwrap();
        let e = check_root(d.path()).unwrap_err().to_string();
        assert!(e.contains("lacks a shell (dash), iproute2"), "{e}");
        assert!(e.contains("cargo lab userspace fetch SUITE"), "{e}");
        assert!(check_root(Path::new("/")).is_err());
        assert!(check_root(Path::new("relative/root")).is_err());
    }

    #[test]
    fn host_dirs_leave_the_operating_system_out() {
        let dirs = host_dirs();
        for sys in ["/usr", "/etc", "/proc", "/var"] {
            assert!(!dirs.iter().any(|d| d == sys), "{dirs:?}");
        }
        assert!(dirs.iter().any(|d| d == "/tmp"), "{dirs:?}");
    }
}
