//! Finding a kernel that ships `rdma_rxe`, and the modules the lab VM loads, in dependency order.

use anyhow::{Context as _, Result, bail};
use std::collections::{HashMap, HashSet};
use std::io::Read as _;
use std::path::{Path, PathBuf};

/// The modules the lab VM loads (their dependencies are added from modules.dep): virtio
/// transport and console (the agent's port), 9p + overlay (the host's root), veth (loopback) or
/// virtio_net (pair), rdma_rxe, and rdma_ucm for the rdma_cm chapter.
///
/// A name is a module or an alias of modules.alias; one that starts with `?` is optional: a
/// kernel without it boots without it. rxe asks the crypto API for "crc32" when a link is
/// added. Without the crc32 modules loaded first, the kernel runs modprobe from the host's tree
/// over 9p, which took 1-3 s of `rdma link add`. They are named by their alias
/// `crypto-crc32`, because the file names changed: Debian's 6.1 and 6.12.117 have crc32_pclmul
/// and crc32_generic, its 7.3.4 has crc32-cryptoapi alone (their modules.alias files).
pub const LOOPBACK_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_console",
    "9pnet_virtio",
    "9p",
    "overlay",
    "veth",
    "rdma_rxe",
    "rdma_ucm",
    "?crypto-crc32",
];
pub const PAIR_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_console",
    "9pnet_virtio",
    "9p",
    "overlay",
    "virtio_net",
    "rdma_rxe",
    "rdma_ucm",
    "?crypto-crc32",
];

/// An installed kernel: its image and its module tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    pub version: String,
    pub image: PathBuf,
    pub modules: PathBuf,
}

/// Compares kernel versions the way `sort -V` roughly does (numbers numerically).
fn version_key(v: &str) -> Vec<(u64, String)> {
    let mut out = vec![];
    let mut num = String::new();
    let mut txt = String::new();
    for c in v.chars() {
        if c.is_ascii_digit() {
            if !txt.is_empty() {
                out.push((0, std::mem::take(&mut txt)));
            }
            num.push(c);
        } else {
            if !num.is_empty() {
                out.push((num.parse().unwrap_or(0), String::new()));
                num.clear();
            }
            txt.push(c);
        }
    }
    if !num.is_empty() {
        out.push((num.parse().unwrap_or(0), String::new()));
    }
    if !txt.is_empty() {
        out.push((0, txt));
    }
    out
}

/// Does this module tree hold rdma_rxe (any compression)?
pub fn has_rxe(modules: &Path) -> bool {
    if let Ok(dep) = std::fs::read_to_string(modules.join("modules.dep")) {
        return dep.lines().any(|l| {
            l.split(':')
                .next()
                .map(|p| module_name(p) == "rdma_rxe")
                .unwrap_or(false)
        });
    }
    false
}

/// Finds the newest kernel with an image in `boot` (vmlinuz-<ver>) and a module tree in
/// `modules_root/<ver>` that contains rdma_rxe.
pub fn find_kernel_in(boot: &Path, modules_root: &Path) -> Result<Kernel> {
    let mut found = vec![];
    let entries = std::fs::read_dir(modules_root)
        .with_context(|| format!("reading {}", modules_root.display()))?;
    for e in entries.flatten() {
        let ver = e.file_name().to_string_lossy().into_owned();
        let image = boot.join(format!("vmlinuz-{ver}"));
        if image.is_file() && has_rxe(&e.path()) {
            found.push(Kernel {
                version: ver,
                image,
                modules: e.path(),
            });
        }
    }
    found.sort_by_key(|k| version_key(&k.version));
    if let Some(k) = found.last()
        && std::fs::File::open(&k.image).is_err()
    {
        bail!(
            "{} is not readable by this user (Ubuntu installs kernel images mode 0600); fix: \
             sudo chmod 0644 {}",
            k.image.display(),
            k.image.display()
        );
    }
    found.pop().ok_or_else(|| {
        anyhow::anyhow!(
            "no kernel with rdma_rxe found ({}/vmlinuz-* with {}/<version>/.../rdma_rxe.ko*); \
             fix: run `cargo lab setup` (it installs linux-image-amd64, or \
             linux-image-generic + linux-modules-extra-generic on Ubuntu)",
            boot.display(),
            modules_root.display()
        )
    })
}

static OVERRIDE: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();

/// `--kernel K`: this process boots `k`, and its children get `LAB_KERNEL` (see [`child_env`]).
pub fn set_override(k: Kernel) {
    let _ = OVERRIDE.set(k);
}

/// `LAB_KERNEL` for a child process (a lab daemon, `cargo test`) when `--kernel` chose one.
pub fn child_env() -> Option<(&'static str, PathBuf)> {
    OVERRIDE.get().map(|k| ("LAB_KERNEL", k.image.clone()))
}

/// The directories module trees live in: `/lib/modules`, and `/usr/lib/modules` on a merged-/usr
/// system whose `/lib` is not a link to it (Debian's 7.x kernel packages install there).
pub const MODULE_ROOTS: &[&str] = &["/lib/modules", "/usr/lib/modules"];

/// The module tree of kernel `ver` whose image is `image`: beside the image
/// (`<root>/usr/lib/modules/<ver>/vmlinuz`, the layout of Debian's 7.x `linux-binary-*`), in the
/// same unpacked root as the image (`<root>/boot/vmlinuz-<ver>` with `<root>/lib/modules/<ver>`
/// or `<root>/usr/lib/modules/<ver>`), else the host's.
pub fn modules_for_image(image: &Path, ver: &str) -> Option<PathBuf> {
    let mut cands = vec![];
    if let Some(dir) = image.parent() {
        cands.push(dir.to_path_buf());
        if let Some(root) = dir.parent() {
            cands.push(root.join("lib/modules").join(ver));
            cands.push(root.join("usr/lib/modules").join(ver));
        }
    }
    cands.extend(MODULE_ROOTS.iter().map(|r| Path::new(r).join(ver)));
    cands.into_iter().find(|m| has_rxe(m))
}

/// The kernel version an image's file name or place says: `vmlinuz-<ver>`, or
/// `.../modules/<ver>/vmlinuz`.
pub fn image_version(image: &Path) -> String {
    let name = image
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(v) = name.strip_prefix("vmlinuz-") {
        return v.to_string();
    }
    image
        .parent()
        .and_then(|d| d.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or(name)
}

/// The kernel the VM boots: `LAB_KERNEL=/path/vmlinuz-<ver>` (or `.../modules/<ver>/vmlinuz`)
/// forces one, else the newest installed kernel with rdma_rxe.
pub fn find_kernel() -> Result<Kernel> {
    if let Some(k) = OVERRIDE.get() {
        return Ok(k.clone());
    }
    if let Some(img) = std::env::var_os("LAB_KERNEL") {
        let image = PathBuf::from(img);
        let ver = image_version(&image);
        if !image.is_file() {
            bail!(
                "LAB_KERNEL={}: no such kernel image (`cargo lab kernel list` shows the kernels \
                 the lab can boot)",
                image.display()
            );
        }
        let Some(modules) = modules_for_image(&image, &ver) else {
            bail!(
                "LAB_KERNEL={} needs a module tree for {ver} with rdma_rxe (beside the image, \
                 or in /lib/modules/{ver} or /usr/lib/modules/{ver})",
                image.display()
            );
        };
        return Ok(Kernel {
            version: ver,
            image,
            modules,
        });
    }
    let mut found = vec![];
    let mut first_err = None;
    for root in MODULE_ROOTS {
        match find_kernel_in(Path::new("/boot"), Path::new(root)) {
            Ok(k) => found.push(k),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
        // merged /usr: the image may sit in the module tree itself.
        if let Ok(rd) = std::fs::read_dir(root) {
            for e in rd.flatten() {
                let image = e.path().join("vmlinuz");
                if image.is_file() && has_rxe(&e.path()) {
                    found.push(Kernel {
                        version: e.file_name().to_string_lossy().into_owned(),
                        image,
                        modules: e.path(),
                    });
                }
            }
        }
    }
    found.sort_by_key(|k| version_key(&k.version));
    match found.pop() {
        Some(k) => Ok(k),
        None => Err(first_err.unwrap_or_else(|| anyhow::anyhow!("no kernel with rdma_rxe found"))),
    }
}

/// `kernel/net/9p/9pnet_virtio.ko.zst` -> `9pnet_virtio` (dashes become underscores, as
/// modprobe treats them).
pub fn module_name(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    let base = base.split(".ko").next().unwrap_or(base);
    base.replace('-', "_")
}

/// modules.dep parsed: module name -> (path relative to the module tree, dependencies).
#[derive(Debug, Default, Clone)]
pub struct ModuleDeps {
    entries: HashMap<String, (String, Vec<String>)>,
    builtin: HashSet<String>,
    /// modules.alias: alias -> the modules that provide it (exact aliases only; the lab names
    /// none with wildcards).
    aliases: HashMap<String, Vec<String>>,
}

impl ModuleDeps {
    /// Parses `modules.dep` (and optionally `modules.builtin`).
    pub fn parse(dep: &str, builtin: Option<&str>) -> ModuleDeps {
        let mut entries = HashMap::new();
        for line in dep.lines() {
            let Some((path, deps)) = line.split_once(':') else {
                continue;
            };
            let path = path.trim();
            if path.is_empty() {
                continue;
            }
            let deps = deps.split_whitespace().map(module_name).collect();
            entries.insert(module_name(path), (path.to_string(), deps));
        }
        let builtin = builtin
            .unwrap_or("")
            .lines()
            .map(|l| module_name(l.trim()))
            .filter(|n| !n.is_empty())
            .collect();
        ModuleDeps {
            entries,
            builtin,
            aliases: HashMap::new(),
        }
    }

    /// Adds modules.alias (`alias <name> <module>` lines).
    pub fn with_aliases(mut self, alias: &str) -> ModuleDeps {
        for line in alias.lines() {
            let mut w = line.split_whitespace();
            if let (Some("alias"), Some(name), Some(module)) = (w.next(), w.next(), w.next()) {
                self.aliases
                    .entry(name.to_string())
                    .or_default()
                    .push(module_name(module));
            }
        }
        self
    }

    pub fn load(modules: &Path) -> Result<ModuleDeps> {
        let dep = std::fs::read_to_string(modules.join("modules.dep"))
            .with_context(|| format!("reading {}/modules.dep", modules.display()))?;
        let builtin = std::fs::read_to_string(modules.join("modules.builtin")).ok();
        let alias = std::fs::read_to_string(modules.join("modules.alias")).unwrap_or_default();
        Ok(ModuleDeps::parse(&dep, builtin.as_deref()).with_aliases(&alias))
    }

    /// Paths (relative to the module tree) to load, dependencies first, each once. A wanted
    /// name is a module, or an alias (every module that provides it, as modprobe does); `?name`
    /// is optional. Modules built into the kernel are skipped; an unknown required module is an
    /// error that names it, an unknown optional one is left out.
    pub fn load_order(&self, wanted: &[&str]) -> Result<Vec<String>> {
        let mut order = vec![];
        let mut done = HashSet::new();
        let mut visiting = HashSet::new();
        for w in wanted {
            let (optional, w) = match w.strip_prefix('?') {
                Some(rest) => (true, rest),
                None => (false, *w),
            };
            let name = module_name(w);
            if self.entries.contains_key(&name) || self.builtin.contains(&name) {
                self.visit(&name, &mut order, &mut done, &mut visiting)?;
                continue;
            }
            let providers: Vec<&String> = self
                .aliases
                .get(w)
                .into_iter()
                .flatten()
                .filter(|m| self.entries.contains_key(*m) || self.builtin.contains(*m))
                .collect();
            if providers.is_empty() {
                if optional {
                    continue;
                }
                bail!(
                    "module {name} is neither in modules.dep, built into the kernel, nor an alias \
                     in modules.alias: this kernel cannot run the lab"
                );
            }
            for m in providers {
                self.visit(m, &mut order, &mut done, &mut visiting)?;
            }
        }
        Ok(order)
    }

    fn visit(
        &self,
        name: &str,
        order: &mut Vec<String>,
        done: &mut HashSet<String>,
        visiting: &mut HashSet<String>,
    ) -> Result<()> {
        if done.contains(name) {
            return Ok(());
        }
        let Some((path, deps)) = self.entries.get(name) else {
            if self.builtin.contains(name) {
                done.insert(name.to_string());
                return Ok(());
            }
            bail!("module {name} is neither in modules.dep nor built into the kernel");
        };
        if !visiting.insert(name.to_string()) {
            bail!("dependency cycle through module {name}");
        }
        for d in deps {
            self.visit(d, order, done, visiting)?;
        }
        visiting.remove(name);
        done.insert(name.to_string());
        order.push(path.clone());
        Ok(())
    }
}

/// A module file's contents, decompressed (`.ko`, `.ko.xz`, `.ko.zst`, `.ko.gz`).
pub fn read_module(path: &Path) -> Result<Vec<u8>> {
    let raw = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    decompress_module(&path.to_string_lossy(), &raw)
}

/// Decompresses a module by its file name's suffix.
pub fn decompress_module(name: &str, raw: &[u8]) -> Result<Vec<u8>> {
    let mut out = vec![];
    if name.ends_with(".ko") {
        return Ok(raw.to_vec());
    } else if name.ends_with(".ko.xz") {
        lzma_rs::xz_decompress(&mut std::io::BufReader::new(raw), &mut out)
            .map_err(|e| anyhow::anyhow!("xz: {e:?}"))
            .with_context(|| format!("decompressing {name}"))?;
    } else if name.ends_with(".ko.zst") {
        let mut d = ruzstd::decoding::StreamingDecoder::new(raw)
            .map_err(|e| anyhow::anyhow!("zstd: {e}"))
            .with_context(|| format!("decompressing {name}"))?;
        d.read_to_end(&mut out)
            .with_context(|| format!("decompressing {name}"))?;
    } else if name.ends_with(".ko.gz") {
        flate2::read::GzDecoder::new(raw)
            .read_to_end(&mut out)
            .with_context(|| format!("decompressing {name}"))?;
    } else {
        bail!("{name}: not a kernel module (.ko, .ko.xz, .ko.zst, .ko.gz)");
    }
    Ok(out)
}

/// Drops a module's appended signature (`~Module signature appended~`): the lab kernel does
/// not force signatures, and checking one RSA signature per module is slow under TCG.
/// Returns the module unchanged when it carries none.
pub fn strip_signature(mut m: Vec<u8>) -> Vec<u8> {
    const MARKER: &[u8] = b"~Module signature appended~\n";
    // Layout: module | signature (sig_len) | struct module_signature (12 bytes) | MARKER.
    if m.len() < MARKER.len() + 12 || !m.ends_with(MARKER) {
        return m;
    }
    let info = m.len() - MARKER.len() - 12;
    let sig_len =
        u32::from_be_bytes([m[info + 8], m[info + 9], m[info + 10], m[info + 11]]) as usize;
    if sig_len > info {
        return m;
    }
    m.truncate(info - sig_len);
    m
}

/// The file name a module gets in the initramfs (compression suffix dropped).
pub fn plain_name(rel: &str) -> String {
    let base = rel.rsplit('/').next().unwrap_or(rel);
    match base.find(".ko") {
        Some(i) => format!("{}.ko", &base[..i]),
        None => base.to_string(),
    }
}

/// Extracts the uncompressed ELF kernel (vmlinux) from a bzImage, so QEMU can boot it through
/// its PVH entry point and skip real mode and the decompressor (slow under TCG).
/// Looks for the compressed payload (xz, gzip or zstd) after the setup code.
pub fn extract_vmlinux(bzimage: &[u8]) -> Result<Vec<u8>> {
    const XZ: &[u8] = &[0xfd, b'7', b'z', b'X', b'Z', 0];
    const GZ: &[u8] = &[0x1f, 0x8b, 0x08];
    const ZSTD: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];
    let is_elf = |b: &[u8]| b.len() > 4 && &b[..4] == b"\x7fELF";
    for (magic, kind) in [(XZ, "xz"), (ZSTD, "zstd"), (GZ, "gzip")] {
        let mut from = 0;
        while let Some(pos) = find(&bzimage[from..], magic) {
            let at = from + pos;
            from = at + 1;
            let data = &bzimage[at..];
            let mut out = vec![];
            let ok = match kind {
                // Kernels compress with xz's x86 BCJ filter, which lzma-rs lacks: use xz(1)
                // (xz-utils, present on Debian and Ubuntu) and lzma-rs only as a fallback.
                "xz" => {
                    out = xz_cli(data).unwrap_or_default();
                    is_elf(&out)
                        || lzma_rs::xz_decompress(&mut std::io::BufReader::new(data), &mut out)
                            .is_ok()
                }
                "zstd" => ruzstd::decoding::StreamingDecoder::new(data)
                    .map(|mut d| d.read_to_end(&mut out).is_ok() || is_elf(&out))
                    .unwrap_or(false),
                _ => {
                    flate2::read::GzDecoder::new(data)
                        .read_to_end(&mut out)
                        .is_ok()
                        || is_elf(&out)
                }
            };
            if ok && is_elf(&out) {
                return Ok(out);
            }
        }
    }
    bail!("no compressed ELF kernel found in the image")
}

/// `xz -dc --single-stream` (stops at the end of the first stream, ignoring what follows).
fn xz_cli(data: &[u8]) -> Option<Vec<u8>> {
    // duct writes stdin from a thread of its own while it reads stdout: neither pipe fills up.
    let out = duct::cmd!("xz", "-dc", "--single-stream")
        .stdin_bytes(data)
        .stdout_capture()
        .stderr_null()
        .unchecked()
        .run()
        .ok()?;
    Some(out.stdout)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
