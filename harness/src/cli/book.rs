//! `book`: the course as an mdBook (the `rxe-lab-book` crate under `book/` generates and renders
//! it). Sets up what it needs first (`scripts/setup.sh --book`: graphviz and the pinned mdbook),
//! builds with the one shared build, then runs the generator.

use super::chapters::{Build, build, prepare};
use super::doctor::run_setup;
use super::root;
use crate::host_tools::captured;
use crate::vm;
use anyhow::{Context as _, Result, bail};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The mdbook `scripts/setup.sh --book` pins (book/src/lib.rs says why this one).
const MDBOOK_VERSION: &str = "0.4.52";

/// The pinned mdbook's path and version, if it is installed (`$MDBOOK`, or the cache dir's).
pub(super) fn pinned_mdbook() -> Option<String> {
    let pinned = crate::initramfs::cache_dir()
        .join("tools")
        .join(format!("mdbook-{MDBOOK_VERSION}"))
        .join("bin/mdbook");
    let ok = |p: &Path| {
        captured(duct::cmd(p, ["--version"])).is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout).trim() == format!("mdbook v{MDBOOK_VERSION}")
        })
    };
    let env = std::env::var_os("MDBOOK").map(PathBuf::from);
    [env, Some(pinned)]
        .into_iter()
        .flatten()
        .find(|p| ok(p))
        .map(|p| format!("{} (v{MDBOOK_VERSION})", p.display()))
}

pub(super) fn book(
    out: Option<PathBuf>,
    serve: bool,
    port: u16,
    serve_secs: Option<u64>,
) -> Result<i32> {
    let root = root()?;
    if vm::which("dot").is_none() || pinned_mdbook().is_none() {
        eprintln!(
            "cargo lab book: needs graphviz and mdbook {MDBOOK_VERSION}; running \
             `scripts/setup.sh --book` first ..."
        );
        let code = run_setup(&["--book"])?;
        if code != 0 {
            bail!(
                "setup --book failed (exit {code}; see above); next: `bash scripts/setup.sh --book \
                 --print` shows what to install, then `cargo lab book` again"
            );
        }
    }
    prepare("book")?;
    let exes = build(Build::Suite, &["rxe-lab-book"])?;
    let exe = &exes.iter().find(|(n, _)| n == "rxe-lab-book").unwrap().1;
    let out = out.unwrap_or_else(|| root.join("target/book"));
    let mut args: Vec<OsString> = vec![
        (if serve { "serve" } else { "build" }).into(),
        "--out".into(),
        out.into(),
    ];
    if serve {
        args.extend(["--port".into(), port.to_string().into()]);
        if let Some(s) = serve_secs {
            args.extend(["--serve-secs".into(), s.to_string().into()]);
        }
    }
    // Its output streams to ours; its exit code is ours.
    let done = duct::cmd(exe, args)
        .dir(&root)
        .unchecked()
        .run()
        .context("running rxe-lab-book")?;
    Ok(done.status.code().unwrap_or(1))
}
