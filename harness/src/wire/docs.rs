//! The ladder diagrams the docs show (`docs/wire/*.svg`), each rendered from a capture
//! committed under `harness/tests/fixtures/wire/`. `cargo lab trace --update-docs` rewrites
//! them; `harness/tests/wire_decode.rs` checks that every one is current.

use super::{decode_pcap, ladder};
use anyhow::{Context as _, Result};
use std::path::Path;

/// (fixture under harness/tests/fixtures/wire, SVG under docs/wire, title).
pub const DOC_TRACES: &[(&str, &str, &str)] = &[
    (
        "06-send-4k-mtu1024.pcap",
        "06-pingpong.svg",
        "06: a 4 KiB SEND each way at path MTU 1024",
    ),
    (
        "07-write-imm.pcap",
        "07-rdma-write.svg",
        "07: RDMA WRITE, then WRITE_WITH_IMM",
    ),
    (
        "09-read-and-nak.pcap",
        "09-memory-pool.svg",
        "09: WRITEs and READs of a pool block, then a forged rkey",
    ),
    (
        "10-atomics.pcap",
        "10-atomics.svg",
        "10: FETCH_ADD and CMP_SWAP with their ATOMIC_ACKNOWLEDGE",
    ),
    (
        "12-cm.pcap",
        "12-connection-manager.svg",
        "12: rdma_cm's REQ, REP and RTU, a WRITE and a READ, then DREQ and DREP",
    ),
    (
        "13-rnr.pcap",
        "13-rnr.svg",
        "13: a SEND to a receiver that posts its receive late: RNR NAKs, then the ACK",
    ),
];

/// The SVG of one fixture, as the docs hold it: redacted ladder lines.
pub fn render(root: &Path, fixture: &str, title: &str) -> Result<String> {
    let path = root.join("harness/tests/fixtures/wire").join(fixture);
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let text = crate::redact::redact(&ladder::text(&decode_pcap(&bytes)?));
    Ok(ladder::svg(title, &text))
}

/// Rewrites every `docs/wire/*.svg` from its fixture; returns the paths written.
pub fn update(root: &Path) -> Result<Vec<String>> {
    let dir = root.join("docs/wire");
    std::fs::create_dir_all(&dir)?;
    let mut out = vec![];
    for (fixture, svg, title) in DOC_TRACES {
        let p = dir.join(svg);
        std::fs::write(&p, render(root, fixture, title)?)
            .with_context(|| format!("writing {}", p.display()))?;
        out.push(format!("docs/wire/{svg}"));
    }
    Ok(out)
}
