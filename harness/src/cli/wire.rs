//! The wire: `trace` (a pcap's RoCE v2 packets as a ladder, text or SVG), and the `--trace`
//! of `run` and `exec` (record the pair's wire while they run).

use super::root;
use crate::testbed::Testbed;
use crate::wire::{self, Capture};
use anyhow::{Context as _, Result};
use std::path::Path;

/// `cargo lab trace FILE.pcap [--svg OUT] [--redact] [--title T]`.
pub(super) fn trace(
    file: &Path,
    svg: Option<&Path>,
    redact: bool,
    title: Option<&str>,
) -> Result<i32> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let packets =
        wire::decode_pcap(&bytes).with_context(|| format!("decoding {}", file.display()))?;
    let mut text = wire::ladder::text(&packets);
    if redact || svg.is_some() {
        text = crate::redact::redact(&text);
    }
    print!("{text}");
    eprintln!("{} RoCE v2 packets in {}", packets.len(), file.display());
    if let Some(out) = svg {
        let title = title.map(str::to_string).unwrap_or_else(|| {
            file.file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        std::fs::write(out, wire::ladder::svg(&title, &text))
            .with_context(|| format!("writing {}", out.display()))?;
        eprintln!("wrote {}", out.display());
    }
    Ok(0)
}

/// `cargo lab trace --update-docs`.
pub(super) fn update_wire_docs() -> Result<i32> {
    for p in wire::docs::update(&root()?)? {
        println!("wrote {p}");
    }
    Ok(0)
}

/// Starts recording the pair's wire into `file`.
pub(super) fn start_trace(lab: &Testbed, file: &Path) -> Result<Capture> {
    let c = Capture::start(lab, file).with_context(|| format!("--trace {}", file.display()))?;
    eprintln!("tracing the wire into {}", c.file.display());
    Ok(c)
}

/// Stops a capture; returns its ladder with a heading, to print after the run's own output.
pub(super) fn finish_trace(c: Capture) -> Result<String> {
    let file = c.file.clone();
    let bytes = c.stop()?;
    let packets = wire::decode_pcap(&bytes)?;
    Ok(format!(
        "── the wire: {} RoCE v2 packets in {} (Wireshark opens it; `cargo lab trace FILE` \
         prints this again)\n{}",
        packets.len(),
        file.display(),
        wire::ladder::text(&packets)
    ))
}
