//! `rxe-lab-book`: builds the course's book (what `cargo lab book` runs).
//!
//! ```text
//! rxe-lab-book build [--out DIR]          render into DIR (default: target/book)
//! rxe-lab-book serve [--out DIR] [--port N] [--serve-secs S]
//!                                         render, serve on 127.0.0.1:N (default 3000), re-render
//!                                         whenever a source of the book changes; stop after S
//!                                         seconds if given
//! ```

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, Result, bail};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rxe-lab-book: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let repo = harness::course::workspace_root()
        .context("cannot find chapters/course.toml (run this inside the rxe-lab workspace)")?;
    let mut out = repo.join("target/book");
    let mut port = 3000u16;
    let mut secs: Option<u64> = None;
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--out" => out = PathBuf::from(it.next().context("--out needs a directory")?),
            "--port" => {
                port = it
                    .next()
                    .context("--port needs a number")?
                    .parse()
                    .context("--port needs a number (1-65535)")?
            }
            "--serve-secs" => {
                secs = Some(
                    it.next()
                        .context("--serve-secs needs a number")?
                        .parse()
                        .context("--serve-secs needs a number of seconds")?,
                )
            }
            other => bail!(
                "unknown argument {other:?} (try: build [--out DIR] | serve [--out DIR] [--port N] \
                 [--serve-secs S])"
            ),
        }
    }
    match args.first().map(String::as_str) {
        Some("build") | None => {
            rxe_lab_book::build(&repo, &out)?;
            println!("book: {}", out.join("index.html").display());
            Ok(())
        }
        Some("serve") => serve(&repo, &out, port, secs),
        Some(other) => bail!("unknown command {other:?} (build or serve)"),
    }
}

/// `mdbook serve` on the generated sources, re-generated whenever a source changes (polled
/// every second: the inputs are spread over the repository).
fn serve(repo: &Path, out: &Path, port: u16, secs: Option<u64>) -> Result<()> {
    let src = rxe_lab_book::build(repo, out)?;
    let port_arg = port.to_string();
    let args = [
        OsStr::new("serve"),
        src.as_ref(),
        "-d".as_ref(),
        out.as_ref(),
        "-n".as_ref(),
        "127.0.0.1".as_ref(),
        "-p".as_ref(),
        port_arg.as_ref(),
    ];
    // Its output streams to ours; how it ended is an answer (`unchecked`).
    let child = duct::cmd(rxe_lab_book::mdbook()?, args)
        .unchecked()
        .start()
        .context("starting mdbook serve")?;
    println!("book: serving http://127.0.0.1:{port}/ (Ctrl-C stops)");
    let served = watch(repo, &src, &child, port, secs);
    // Never left running, whatever ended the watch.
    harness::host_tools::kill_and_reap(&child);
    served
}

/// Re-generates the book whenever a source changes, until `secs` have passed (if given) or
/// mdbook exits.
fn watch(
    repo: &Path,
    src: &Path,
    child: &duct::Handle,
    port: u16,
    secs: Option<u64>,
) -> Result<()> {
    let until = secs.map(|s| Instant::now() + Duration::from_secs(s));
    let mut last = fingerprint(repo);
    loop {
        std::thread::sleep(Duration::from_secs(1));
        if let Some(done) = child.try_wait().context("waiting for mdbook serve")? {
            bail!("mdbook serve exited: {}", done.status);
        }
        if until.is_some_and(|u| Instant::now() >= u) {
            // Check that it really served before it is stopped.
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                bail!("mdbook serve did not listen on 127.0.0.1:{port}");
            }
            println!("book: stopped after {}s", secs.unwrap());
            return Ok(());
        }
        let now = fingerprint(repo);
        if now != last {
            last = now;
            if let Err(e) = rxe_lab_book::regenerate(repo, src) {
                eprintln!("book: {e:#}");
            }
        }
    }
}

/// The newest modification time and the count of the files a page can draw from.
fn fingerprint(repo: &Path) -> (Option<SystemTime>, usize) {
    let mut newest = None;
    let mut n = 0;
    let mut stack: Vec<PathBuf> = [
        "book",
        "chapters",
        "docs",
        "lab/src",
        "course/src",
        "harness/README.md",
        "README.md",
    ]
    .iter()
    .map(|p| repo.join(p))
    .collect();
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            if let Ok(rd) = std::fs::read_dir(&p) {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
        } else if let Ok(m) = p.metadata().and_then(|m| m.modified()) {
            n += 1;
            newest = newest.max(Some(m));
        }
    }
    (newest, n)
}
