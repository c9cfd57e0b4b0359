//! `cargo lab kernel fetch <suite>`: another kernel from the distribution's own archive, without
//! root, for the kernel matrix (`cargo lab test --kernel <K>`).
//!
//! A private apt (its own sources list, lists and package cache under the lab's cache dir; the
//! host's apt state untouched) resolves the suite's `linux-image-<arch>` to the versioned image
//! package and downloads it with the packages that carry the image and the modules:
//! `linux-image-<ver>` (up to 6.x: image and modules), or from 7.x on `linux-binary-<ver>`
//! (the image, at `usr/lib/modules/<ver>/vmlinuz`), `linux-modules-<ver>` and `linux-base-<ver>`
//! (`modules.builtin`). `dpkg-deb -x` unpacks them into `kernels/<ver>/` and `depmod -b`
//! writes modules.dep and modules.alias there. Nothing is installed on the host.
//!
//! Tried here against Debian's archive (trixie, trixie-backports). The Ubuntu branch (the
//! archive from the host's sources, `linux-image-generic`, `linux-modules-extra-<ver>`) is
//! written, not tried. Network stalls are bounded by apt's own timeout (60 s per connection,
//! two retries), set below.

use crate::host_tools;
use crate::initramfs;
use crate::kernel::{self, Kernel};
use anyhow::{Context as _, Result, bail};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Where fetched kernels live: `<cache>/kernels/<ver>/` (an unpacked root).
pub fn kernels_dir() -> PathBuf {
    initramfs::cache_dir().join("kernels")
}

/// The archive the host's apt uses for `debian` or `ubuntu` packages (first `deb` URI of the
/// host's sources), else Debian's.
fn archive_uri() -> String {
    let mut texts = vec![std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default()];
    if let Ok(rd) = std::fs::read_dir("/etc/apt/sources.list.d") {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.ends_with(".sources") || n.ends_with(".list") {
                texts.push(std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
    }
    for t in &texts {
        for line in t.lines() {
            let l = line.trim();
            let uri = if let Some(rest) = l.strip_prefix("URIs:") {
                rest.split_whitespace().next()
            } else if let Some(rest) = l.strip_prefix("deb ") {
                rest.split_whitespace().find(|w| w.contains("://"))
            } else {
                None
            };
            if let Some(u) = uri
                && (u.ends_with("/debian") || u.ends_with("/ubuntu") || u.ends_with("/debian/"))
                && !u.contains("security")
            {
                return u.trim_end_matches('/').to_string();
            }
        }
    }
    "http://deb.debian.org/debian".into()
}

/// The keyring that signs the archive (Debian's or Ubuntu's).
fn keyring(uri: &str) -> &'static str {
    if uri.ends_with("/ubuntu") {
        "/usr/share/keyrings/ubuntu-archive-keyring.gpg"
    } else {
        "/usr/share/keyrings/debian-archive-keyring.gpg"
    }
}

/// A private apt: options that point every path apt writes or reads state from at `root`.
fn apt_opts(root: &Path) -> Vec<String> {
    let r = root.display();
    vec![
        format!("-oDir::Etc::SourceList={r}/sources.list"),
        "-oDir::Etc::SourceParts=/dev/null".into(),
        "-oDir::Etc::Preferences=/dev/null".into(),
        "-oDir::Etc::PreferencesParts=/dev/null".into(),
        format!("-oDir::State={r}/state"),
        "-oDir::State::status=/dev/null".into(),
        format!("-oDir::Cache={r}/cache"),
        "-oDebug::NoLocking=1".into(),
        "-oAPT::Sandbox::User=".into(),
        "-oAcquire::Retries=2".into(),
        "-oAcquire::http::Timeout=60".into(),
    ]
}

/// A private apt for one suite of the host's archive: its sources list, lists and package
/// cache under `<cache>/apt/<suite>/`, its package lists fresh (`apt-get update`).
pub(crate) struct PrivateApt {
    pub root: PathBuf,
    pub opts: Vec<String>,
    pub ubuntu: bool,
}

impl PrivateApt {
    /// `who` prefixes the progress lines (`kernel fetch`, `userspace fetch`).
    pub fn new(suite: &str, who: &str) -> Result<PrivateApt> {
        if suite.is_empty() || !suite.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            bail!("`{suite}` is not a suite name (for example trixie, trixie-backports, bookworm)");
        }
        let uri = archive_uri();
        let ring = keyring(&uri);
        let ubuntu = uri.ends_with("/ubuntu");
        let root = initramfs::cache_dir().join("apt").join(suite);
        for d in ["state/lists/partial", "cache/archives/partial", "debs"] {
            std::fs::create_dir_all(root.join(d))
                .with_context(|| format!("creating {}", root.join(d).display()))?;
        }
        let comps = if ubuntu { "main universe" } else { "main" };
        // A backports suite needs its base suite too (its packages' dependencies live there).
        let mut lines = format!("deb [signed-by={ring}] {uri} {suite} {comps}\n");
        if let Some(base) = suite.strip_suffix("-backports") {
            lines.push_str(&format!("deb [signed-by={ring}] {uri} {base} {comps}\n"));
        }
        std::fs::write(root.join("sources.list"), lines)?;
        let opts = apt_opts(&root);
        eprintln!("{who}: reading {suite}'s package lists from {uri}");
        run(
            duct::cmd(
                "apt-get",
                opts.iter().map(String::as_str).chain(["-q", "update"]),
            ),
            "apt-get update (the private package lists)",
        )
        .map_err(|e| {
            e.context(format!(
                "is `{suite}` a suite of {uri}? (and {ring} present: debian-archive-keyring or \
                 ubuntu-keyring)"
            ))
        })?;
        Ok(PrivateApt { root, opts, ubuntu })
    }

    /// Downloads `pkgs` (the suite's candidates) into `<root>/debs`; returns each one's file.
    pub fn download(&self, suite: &str, pkgs: &[String]) -> Result<Vec<PathBuf>> {
        let debs = self.root.join("debs");
        let release = format!("APT::Default-Release={suite}");
        let args = (self.opts.iter().map(String::as_str))
            .chain(["-q", "-o", &release, "download"])
            .chain(pkgs.iter().map(String::as_str));
        run(duct::cmd("apt-get", args).dir(&debs), "apt-get download")?;
        pkgs.iter()
            .map(|p| {
                // apt names a file <name>_<version>_<arch>.deb; the version's `:` is escaped.
                std::fs::read_dir(&debs)?
                    .flatten()
                    .map(|e| e.path())
                    .filter(|f| {
                        f.file_name()
                            .map(|n| n.to_string_lossy().starts_with(&format!("{p}_")))
                            .unwrap_or(false)
                    })
                    .max()
                    .with_context(|| {
                        format!("apt-get download left no {p}_*.deb in {}", debs.display())
                    })
            })
            .collect()
    }
}

/// Builds a cache entry in `tmp` (beside `dest`) with `build`, then moves it to `dest`,
/// replacing what was there; a failed build leaves nothing behind.
pub(crate) fn build_then_move(
    tmp: &Path,
    dest: &Path,
    build: impl FnOnce() -> Result<()>,
) -> Result<()> {
    if let Err(e) = build() {
        let _ = std::fs::remove_dir_all(tmp);
        return Err(e);
    }
    let _ = std::fs::remove_dir_all(dest);
    std::fs::rename(tmp, dest)
        .with_context(|| format!("moving {} to {}", tmp.display(), dest.display()))
}

/// Runs `cmd` (stdin closed, its output captured) to its end; its stdout, or an error that
/// starts with `what` (the command as the user knows it) and carries the tool's stderr.
pub(crate) fn run(cmd: duct::Expression, what: &str) -> Result<String> {
    let out = host_tools::captured(cmd).with_context(|| format!("{what}: cannot start it"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The names in an `apt-cache show` Depends line (alternatives and versions dropped).
fn depends(show: &str) -> Vec<String> {
    show.lines()
        .find_map(|l| l.strip_prefix("Depends:"))
        .unwrap_or("")
        .split(',')
        .flat_map(|d| d.split('|'))
        .filter_map(|d| d.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Finds `depmod` (in /sbin or /usr/sbin, which a user's PATH may lack).
fn depmod() -> PathBuf {
    for p in ["/usr/sbin/depmod", "/sbin/depmod"] {
        if Path::new(p).exists() {
            return p.into();
        }
    }
    "depmod".into()
}

/// Downloads and unpacks the newest kernel of `suite` (e.g. `trixie`, `trixie-backports`,
/// `noble`); returns it. Progress goes to stderr.
pub fn fetch(suite: &str) -> Result<Kernel> {
    let apt = PrivateApt::new(suite, "kernel fetch")?;
    let (opts, ubuntu) = (&apt.opts, apt.ubuntu);
    let meta = if ubuntu {
        "linux-image-generic"
    } else {
        "linux-image-amd64"
    };
    let show = |pkg: &str| -> Result<String> {
        let args = opts.iter().map(String::as_str).chain(["show", pkg]);
        let out = run(
            duct::cmd("apt-cache", args),
            &format!("apt-cache show {pkg}"),
        )?;
        // The first stanza whose version is the suite's candidate: apt-cache show lists the
        // newest first.
        Ok(out.split("\n\n").next().unwrap_or("").to_string())
    };
    let meta_show = show(meta)?;
    let image_pkg = depends(&meta_show)
        .into_iter()
        .find(|d| d.starts_with("linux-image-") && d.chars().any(|c| c.is_ascii_digit()))
        .with_context(|| format!("{meta} in {suite} names no versioned linux-image package"))?;
    let ver = image_pkg.trim_start_matches("linux-image-").to_string();
    let dest = kernels_dir().join(&ver);
    if let Some(k) = cached(&dest, &ver) {
        eprintln!("kernel fetch: {ver} is already in {}", dest.display());
        return Ok(k);
    }
    let image_show = show(&image_pkg)?;
    let mut pkgs = vec![image_pkg.clone()];
    for d in depends(&image_show) {
        for part in ["linux-binary-", "linux-modules-", "linux-base-"] {
            if d.starts_with(part) && d.ends_with(&ver) && !pkgs.contains(&d) {
                pkgs.push(d.clone());
            }
        }
    }
    if ubuntu {
        // rdma_rxe is in Ubuntu's modules-extra package.
        let extra = format!("linux-modules-extra-{ver}");
        if show(&extra).is_ok() && !pkgs.contains(&extra) {
            pkgs.push(extra);
        }
    }
    eprintln!("kernel fetch: downloading {}", pkgs.join(" "));
    let files = apt.download(suite, &pkgs)?;
    let tmp = kernels_dir().join(format!(".{ver}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    // Unpacked into a temporary dir beside the cache entry, removed again if any step fails.
    let unpack = || -> Result<()> {
        std::fs::create_dir_all(&tmp)?;
        for deb in &files {
            eprintln!("kernel fetch: unpacking {}", deb.display());
            run(
                duct::cmd("dpkg-deb", [OsStr::new("-x"), deb.as_ref(), tmp.as_ref()]),
                "dpkg-deb -x",
            )?;
        }
        // The module tree: usr/lib/modules/<ver> (Debian 13's 6.12 and 7.x packages) or
        // lib/modules/<ver> (older packages).
        let base = if tmp.join("usr/lib/modules").join(&ver).is_dir() {
            tmp.join("usr")
        } else {
            tmp.clone()
        };
        run(
            duct::cmd(depmod(), [OsStr::new("-b"), base.as_ref(), ver.as_ref()]),
            "depmod -b",
        )?;
        Ok(())
    };
    build_then_move(&tmp, &dest, unpack)?;
    cached(&dest, &ver).with_context(|| {
        format!(
            "{} holds no kernel image with an rdma_rxe module tree for {ver}",
            dest.display()
        )
    })
}

/// A fetched kernel in `dir`, if it is complete.
fn cached(dir: &Path, ver: &str) -> Option<Kernel> {
    let images = [
        dir.join("boot").join(format!("vmlinuz-{ver}")),
        dir.join("usr/lib/modules").join(ver).join("vmlinuz"),
        dir.join("lib/modules").join(ver).join("vmlinuz"),
    ];
    let image = images.into_iter().find(|i| i.is_file())?;
    let modules = kernel::modules_for_image(&image, ver)?;
    // Only the fetched tree, never the host's of the same version.
    if !modules.starts_with(dir) {
        return None;
    }
    Some(Kernel {
        version: ver.to_string(),
        image,
        modules,
    })
}

/// The kernels the lab can boot: the host's (with rdma_rxe) and the fetched ones.
pub fn list() -> Vec<(Kernel, &'static str)> {
    let mut out = vec![];
    let mut seen = std::collections::HashSet::new();
    for root in kernel::MODULE_ROOTS {
        if let Ok(rd) = std::fs::read_dir(root) {
            for e in rd.flatten() {
                let ver = e.file_name().to_string_lossy().into_owned();
                let images = [
                    Path::new("/boot").join(format!("vmlinuz-{ver}")),
                    e.path().join("vmlinuz"),
                ];
                if let Some(image) = images.into_iter().find(|i| i.is_file())
                    && kernel::has_rxe(&e.path())
                    && seen.insert(ver.clone())
                {
                    out.push((
                        Kernel {
                            version: ver,
                            image,
                            modules: e.path(),
                        },
                        "installed",
                    ));
                }
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir(kernels_dir()) {
        for e in rd.flatten() {
            let ver = e.file_name().to_string_lossy().into_owned();
            if ver.starts_with('.') {
                continue;
            }
            if let Some(k) = cached(&e.path(), &ver) {
                out.push((k, "fetched"));
            }
        }
    }
    out
}

/// Resolves `--kernel K`: a path to an image, a version (installed or fetched), or a suite
/// name, which is fetched when no kernel of it is here yet.
pub fn resolve(k: &str) -> Result<Kernel> {
    let p = Path::new(k);
    if k.contains('/') {
        if !p.is_file() {
            bail!("--kernel {k}: no such kernel image");
        }
        let ver = kernel::image_version(p);
        let modules = kernel::modules_for_image(p, &ver)
            .with_context(|| format!("--kernel {k}: no module tree with rdma_rxe for {ver}"))?;
        return Ok(Kernel {
            version: ver,
            image: p.to_path_buf(),
            modules,
        });
    }
    let all = list();
    if let Some((kern, _)) = all
        .iter()
        .find(|(kern, _)| kern.version == k)
        .or_else(|| all.iter().find(|(kern, _)| kern.version.starts_with(k)))
    {
        return Ok(kern.clone());
    }
    if k.chars().next().is_some_and(|c| c.is_ascii_digit()) {
        bail!(
            "--kernel {k}: no such kernel here; `cargo lab kernel list` shows them, `cargo lab \
             kernel fetch SUITE` fetches one (e.g. trixie)"
        );
    }
    fetch(k)
}
