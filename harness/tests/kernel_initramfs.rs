//! Finding the kernel, module order from modules.dep, module decompression, the vmlinux
//! extraction and the initramfs archive. No VM: synthetic inputs made here.

use harness::initramfs::{self, Entry};
use harness::kernel::{self, Kernel, ModuleDeps};
use std::io::Write as _;
use std::path::Path;

const DEP: &str = "\
kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko.zst: kernel/drivers/infiniband/core/ib_uverbs.ko.zst kernel/drivers/infiniband/core/ib_core.ko.zst kernel/net/ipv6/ip6_udp_tunnel.ko.zst kernel/net/ipv4/udp_tunnel.ko.zst
kernel/drivers/infiniband/core/ib_uverbs.ko.zst: kernel/drivers/infiniband/core/ib_core.ko.zst
kernel/drivers/infiniband/core/ib_core.ko.zst:
kernel/net/ipv6/ip6_udp_tunnel.ko.zst:
kernel/net/ipv4/udp_tunnel.ko.zst:
kernel/net/9p/9pnet_virtio.ko.xz: kernel/net/9p/9pnet.ko.xz kernel/drivers/virtio/virtio_ring.ko
kernel/net/9p/9pnet.ko.xz:
kernel/drivers/virtio/virtio_ring.ko:
kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko.xz kernel/fs/fscache/fscache.ko.gz
kernel/fs/fscache/fscache.ko.gz:
kernel/drivers/net/my-dashed_mod.ko:
";

const BUILTIN: &str = "kernel/drivers/virtio/virtio_pci.ko\nkernel/drivers/virtio/virtio.ko\n";

#[test]
fn load_order_puts_dependencies_first_each_once() {
    let d = ModuleDeps::parse(DEP, Some(BUILTIN));
    let order = d
        .load_order(&["virtio_pci", "9pnet_virtio", "9p", "rdma_rxe"])
        .unwrap();
    let names: Vec<String> = order.iter().map(|p| kernel::module_name(p)).collect();
    assert_eq!(
        names,
        [
            "9pnet",
            "virtio_ring",
            "9pnet_virtio",
            "fscache",
            "9p",
            "ib_core",
            "ib_uverbs",
            "ip6_udp_tunnel",
            "udp_tunnel",
            "rdma_rxe"
        ]
    );
    // Every module comes after all of its dependencies.
    for (i, p) in order.iter().enumerate() {
        let line = DEP
            .lines()
            .find(|l| l.starts_with(&format!("{p}:")))
            .unwrap();
        for dep in line.split_once(':').unwrap().1.split_whitespace() {
            let j = order.iter().position(|q| q == dep).unwrap();
            assert!(j < i, "{dep} must load before {p}");
        }
    }
}

#[test]
fn dashes_and_underscores_name_the_same_module() {
    let d = ModuleDeps::parse(DEP, None);
    assert_eq!(
        d.load_order(&["my_dashed-mod"]).unwrap(),
        ["kernel/drivers/net/my-dashed_mod.ko"]
    );
}

#[test]
fn builtin_modules_are_skipped_and_unknown_ones_are_errors() {
    let d = ModuleDeps::parse(DEP, Some(BUILTIN));
    assert!(d.load_order(&["virtio_pci"]).unwrap().is_empty());
    let e = d.load_order(&["no_such_mod"]).unwrap_err().to_string();
    assert!(e.contains("no_such_mod"), "{e}");
}

#[test]
fn a_dependency_cycle_is_an_error() {
    let d = ModuleDeps::parse("a.ko: b.ko\nb.ko: a.ko\n", None);
    assert!(
        d.load_order(&["a"])
            .unwrap_err()
            .to_string()
            .contains("cycle")
    );
}

fn elf_like(n: usize) -> Vec<u8> {
    let mut v = b"\x7fELF\x02\x01\x01".to_vec();
    v.extend((0..n).map(|i| (i * 7 % 251) as u8));
    v
}

fn xz(data: &[u8]) -> Vec<u8> {
    let mut out = vec![];
    lzma_rs::xz_compress(&mut std::io::BufReader::new(data), &mut out).unwrap();
    out
}

fn zst(data: &[u8]) -> Vec<u8> {
    ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
}

fn gz(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(vec![], flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[test]
fn modules_decompress_by_suffix() {
    let m = elf_like(100_000);
    assert_eq!(kernel::decompress_module("a.ko", &m).unwrap(), m);
    assert_eq!(kernel::decompress_module("a.ko.xz", &xz(&m)).unwrap(), m);
    assert_eq!(kernel::decompress_module("a.ko.zst", &zst(&m)).unwrap(), m);
    assert_eq!(kernel::decompress_module("a.ko.gz", &gz(&m)).unwrap(), m);
    assert!(kernel::decompress_module("a.ko.xz", b"garbage").is_err());
    assert!(kernel::decompress_module("a.txt", b"x").is_err());
    assert_eq!(
        kernel::plain_name("kernel/x/rdma_rxe.ko.zst"),
        "rdma_rxe.ko"
    );
    assert_eq!(kernel::plain_name("veth.ko"), "veth.ko");
}

#[test]
fn vmlinux_is_found_inside_a_compressed_image() {
    let elf = elf_like(50_000);
    for payload in [gz(&elf), zst(&elf)] {
        let mut img = vec![0u8; 20_000];
        img[100..104].copy_from_slice(&[0x1f, 0x8b, 0x08, 0]); // a false gzip start
        img.extend(&payload);
        img.extend([0u8; 64]);
        assert_eq!(kernel::extract_vmlinux(&img).unwrap(), elf);
    }
    assert!(kernel::extract_vmlinux(&[0u8; 1000]).is_err());
}

/// A fake installed-kernel layout: boot/vmlinuz-<v>, modules/<v>/modules.dep (+ files).
fn fake_tree(root: &Path, versions: &[(&str, bool, bool)]) {
    for (v, image, rxe) in versions {
        if *image {
            std::fs::create_dir_all(root.join("boot")).unwrap();
            std::fs::write(root.join(format!("boot/vmlinuz-{v}")), b"img").unwrap();
        }
        let m = root.join("modules").join(v);
        std::fs::create_dir_all(&m).unwrap();
        let dep = if *rxe { DEP } else { "kernel/fs/9p/9p.ko:\n" };
        std::fs::write(m.join("modules.dep"), dep).unwrap();
    }
}

#[test]
fn the_newest_kernel_with_image_and_rxe_wins() {
    let t = tempfile::tempdir().unwrap();
    fake_tree(
        t.path(),
        &[
            ("6.1.0-9-amd64", true, true),
            ("6.10.0-1-amd64", true, true),
            ("6.12.0-1-amd64", true, false), // no rdma_rxe
            ("6.15.0-1-amd64", false, true), // no image
            ("6.2.0-1-amd64", true, true),
        ],
    );
    let k = kernel::find_kernel_in(&t.path().join("boot"), &t.path().join("modules")).unwrap();
    assert_eq!(k.version, "6.10.0-1-amd64");
    assert_eq!(k.image, t.path().join("boot/vmlinuz-6.10.0-1-amd64"));
}

#[test]
fn no_kernel_names_the_fix() {
    let t = tempfile::tempdir().unwrap();
    fake_tree(t.path(), &[("6.1.0-9-amd64", true, false)]);
    let e = kernel::find_kernel_in(&t.path().join("boot"), &t.path().join("modules"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cargo lab setup"), "{e}");
    assert!(e.contains("linux-image-amd64"), "{e}");
}

#[test]
fn cpio_roundtrips() {
    let entries = vec![
        Entry::Dir("bin".into()),
        Entry::File {
            path: "bin/busybox".into(),
            mode: 0o755,
            data: (0..5000u32).map(|i| i as u8).collect(),
        },
        Entry::Symlink {
            path: "bin/sh".into(),
            target: "busybox".into(),
        },
        Entry::File {
            path: "empty".into(),
            mode: 0o600,
            data: vec![],
        },
        Entry::File {
            path: "odd-size".into(),
            mode: 0o644,
            data: vec![1, 2, 3],
        },
    ];
    let archive = initramfs::write_cpio(&entries).unwrap();
    assert_eq!(&archive[..6], b"070701", "newc magic");
    assert_eq!(archive.len() % 4, 0, "newc pads to 4 bytes");
    assert_eq!(initramfs::read_cpio(&archive).unwrap(), entries);
}

#[test]
fn the_initramfs_holds_busybox_modules_in_order_init_and_agent() {
    let t = tempfile::tempdir().unwrap();
    let m = t.path().join("modules/6.1.0-9-amd64");
    std::fs::create_dir_all(&m).unwrap();
    std::fs::write(m.join("modules.dep"), DEP).unwrap();
    // Module files, each compressed as its name says, with distinct contents.
    let mut contents = std::collections::HashMap::new();
    for line in DEP.lines() {
        let rel = line.split(':').next().unwrap();
        let body = format!("module {rel}").into_bytes();
        let raw = if rel.ends_with(".xz") {
            xz(&body)
        } else if rel.ends_with(".zst") {
            zst(&body)
        } else if rel.ends_with(".gz") {
            gz(&body)
        } else {
            body.clone()
        };
        let p = m.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, raw).unwrap();
        contents.insert(kernel::plain_name(rel), body);
    }
    let k = Kernel {
        version: "6.1.0-9-amd64".into(),
        image: t.path().join("vmlinuz"),
        modules: m,
    };
    let e = initramfs::entries(&k, &["9p", "rdma_rxe"], b"BUSYBOX", b"AGENT").unwrap();
    let archive = initramfs::write_cpio(&e).unwrap();
    let back = initramfs::read_cpio(&archive).unwrap();
    let file = |name: &str| {
        back.iter()
            .find_map(|x| match x {
                Entry::File { path, mode, data } if path == name => Some((*mode, data.clone())),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no {name} in the initramfs"))
    };
    assert_eq!(file("bin/busybox"), (0o755, b"BUSYBOX".to_vec()));
    assert_eq!(file("lab-agent"), (0o755, b"AGENT".to_vec()));
    let (mode, init) = file("init");
    assert_eq!(mode, 0o755);
    assert!(
        String::from_utf8(init)
            .unwrap()
            .contains("chroot /newroot /run/lab-agent --guest")
    );
    let order = String::from_utf8(file("mods/order").1).unwrap();
    assert_eq!(
        order.lines().collect::<Vec<_>>(),
        [
            "9pnet.ko",
            "fscache.ko",
            "9p.ko",
            "ib_core.ko",
            "ib_uverbs.ko",
            "ip6_udp_tunnel.ko",
            "udp_tunnel.ko",
            "rdma_rxe.ko"
        ]
    );
    for name in order.lines() {
        assert_eq!(
            file(&format!("mods/{name}")).1,
            contents[name],
            "{name} decompressed"
        );
    }
    assert!(back.contains(&Entry::Symlink {
        path: "bin/sh".into(),
        target: "busybox".into()
    }));
}

#[test]
fn fnv_is_stable() {
    assert_eq!(initramfs::fnv64(&[b""]), initramfs::fnv64(&[b""]));
    assert_ne!(initramfs::fnv64(&[b"a", b"b"]), initramfs::fnv64(&[b"ab"]));
}

#[test]
fn module_signatures_are_stripped() {
    let body = elf_like(1000);
    let mut signed = body.clone();
    let sig = vec![0xaa; 300];
    signed.extend(&sig);
    signed.extend([0, 0, 2, 0, 0, 0, 0, 0]);
    signed.extend((sig.len() as u32).to_be_bytes());
    signed.extend(b"~Module signature appended~\n");
    assert_eq!(kernel::strip_signature(signed), body);
    assert_eq!(kernel::strip_signature(body.clone()), body);
    // A real one, if this host has it.
    let real = std::path::Path::new("/lib/modules")
        .read_dir()
        .ok()
        .and_then(|mut d| d.next())
        .and_then(|e| e.ok())
        .map(|e| e.path().join("kernel/drivers/net/veth.ko"));
    if let Some(p) = real.filter(|p| p.is_file()) {
        let raw = std::fs::read(&p).unwrap();
        let stripped = kernel::strip_signature(raw.clone());
        assert!(stripped.len() <= raw.len());
        assert_eq!(&stripped[..4], b"\x7fELF");
    }
}

#[test]
fn an_alias_loads_every_module_that_provides_it_and_an_optional_miss_is_left_out() {
    // 6.1: crypto-crc32 is crc32_pclmul and crc32_generic; 7.x: crc32_cryptoapi (file
    // crc32-cryptoapi.ko); a kernel with neither boots without them.
    let dep = "kernel/arch/x86/crypto/crc32-pclmul.ko.xz:\n\
               kernel/crypto/crc32_generic.ko.xz:\n";
    let alias = "alias crypto-crc32 crc32_pclmul\nalias crypto-crc32 crc32_generic\n";
    let d = ModuleDeps::parse(dep, None).with_aliases(alias);
    assert_eq!(
        d.load_order(&["?crypto-crc32"]).unwrap(),
        [
            "kernel/arch/x86/crypto/crc32-pclmul.ko.xz",
            "kernel/crypto/crc32_generic.ko.xz"
        ]
    );
    let d7 = ModuleDeps::parse("kernel/crypto/crc32-cryptoapi.ko.xz:\n", None)
        .with_aliases("alias crypto-crc32 crc32_cryptoapi\n");
    assert_eq!(
        d7.load_order(&["?crypto-crc32"]).unwrap(),
        ["kernel/crypto/crc32-cryptoapi.ko.xz"]
    );
    let none = ModuleDeps::parse(DEP, Some(BUILTIN));
    assert!(none.load_order(&["?crypto-crc32"]).unwrap().is_empty());
    let e = none.load_order(&["crypto-crc32"]).unwrap_err().to_string();
    assert!(
        e.contains("crypto_crc32") && e.contains("modules.alias"),
        "{e}"
    );
}

#[test]
fn the_module_tree_of_a_fetched_7x_kernel_is_found_beside_its_image() {
    // Debian's 7.x linux-binary-*: usr/lib/modules/<ver>/vmlinuz, modules in the same dir.
    let t = tempfile::tempdir().unwrap();
    let m = t.path().join("usr/lib/modules/7.3.4+deb13-amd64");
    std::fs::create_dir_all(&m).unwrap();
    std::fs::write(m.join("vmlinuz"), b"image").unwrap();
    std::fs::write(
        m.join("modules.dep"),
        "kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko.xz:\n",
    )
    .unwrap();
    let image = m.join("vmlinuz");
    assert_eq!(kernel::image_version(&image), "7.3.4+deb13-amd64");
    assert_eq!(
        kernel::modules_for_image(&image, "7.3.4+deb13-amd64").as_deref(),
        Some(m.as_path())
    );
}
