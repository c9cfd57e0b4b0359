//! `cargo lab <command>`: the course's CLI (an alias in .cargo/config.toml).
//!
//! This file holds the command line (clap) and the dispatch; each command family has its file:
//! [`labs`] (up, status, down, the daemon), [`exec`] (exec, shell), [`chapters`] (list, build,
//! run, tour), [`suite`] (test), [`doctor`] (doctor, setup), [`book`], [`bench`], [`wire`]
//! (trace), [`fault`].
//!
//! Every error names the next command to run; every wait has a deadline; Ctrl-C tears down
//! what the command started.

use crate::course::workspace_root;
use crate::{Node, Topology};
use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

mod bench;
mod book;
mod chapters;
mod doctor;
mod exec;
mod exercise;
mod fault;
mod labs;
mod parallel;
mod progress;
mod suite;
mod wire;

/// scripts/setup.sh, embedded: the one source of truth for what the project needs.
pub const SETUP_SH: &str = include_str!("../../../scripts/setup.sh");

#[derive(Debug, Parser)]
#[command(
    name = "cargo lab",
    bin_name = "cargo lab",
    about = "rxe-lab: RDMA verbs on SoftRoCE, wherever you are",
    after_help = "Start here: `cargo lab doctor`, then `cargo lab setup`, then `cargo lab tour`."
)]
struct Cli {
    /// The userspace the lab's guests run: `host` (default: the host's own root), a root
    /// directory (debootstrap, scripts/debian13-root.sh), or a suite of the distribution's
    /// archive (e.g. trixie), fetched first (`cargo lab userspace fetch`). Also `LAB_USERSPACE`.
    #[arg(long, global = true, value_name = "U")]
    userspace: Option<String>,
    #[command(subcommand)]
    cmd: Sub,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Check each prerequisite and print the fix for what is missing.
    Doctor,
    /// Install what is missing (scripts/setup.sh; apt-get as root or through sudo).
    Setup {
        /// Also the microVM provider's pieces (kernel with rdma_rxe, qemu); default when this
        /// host has no RDMA device.
        #[arg(long)]
        vm: bool,
        /// Load rdma_rxe here and create an rxe link (native provider).
        #[arg(long)]
        native: bool,
        /// Also the developer tools `cargo lab test` runs (actionlint, shellcheck, vagrant,
        /// chromium) and the book's (implies --book).
        #[arg(long)]
        dev: bool,
        /// What `cargo lab book` needs: graphviz and the pinned mdbook.
        #[arg(long)]
        book: bool,
        /// Print what is missing and the command, install nothing.
        #[arg(long)]
        print: bool,
    },
    /// Start a long-lived lab (reused by exec, run, tour and tests) in the background.
    Up {
        #[arg(long, short, default_value = "loopback")]
        topology: TopoArg,
        /// vCPUs of each pair node, 1 to 16 (default 1; also LAB_PAIR_SMP). Pair only.
        #[arg(long, value_name = "N", value_parser = parse_cpus)]
        cpus: Option<u32>,
    },
    /// Show the running labs.
    Status,
    /// Stop the running labs.
    Down {
        #[arg(long, short, default_value = "all")]
        topology: TopoArg,
    },
    /// Run a command where the rxe device is (starts the lab if needed), like `docker run`:
    /// the working directory is kept, stdin is forwarded when it is a pipe or a file, the exit
    /// status passes through (128 + N for a command killed by signal N), and these variables
    /// pass through by default: RUST_*, CARGO, CARGO_*, LAB_*, IBVERBS_*, RDMAV_*, INSTA_*,
    /// TERM, NO_COLOR. Works from any directory, so it can be cargo's runner
    /// (`runner = ["cargo-lab", "exec", "--"]`).
    Exec {
        /// Node of the pair topology, a or b (implies --topology pair).
        #[arg(long, short)]
        node: Option<Node>,
        /// loopback (default) or pair.
        #[arg(long, short)]
        topology: Option<TopoArg>,
        /// Pass a variable: `-e VAR=VALUE`, or `-e VAR` for this shell's value (repeatable).
        #[arg(long = "env", short = 'e', value_name = "VAR[=VALUE]")]
        env: Vec<String>,
        /// Run `cargo <ARGS>` here with every binary it runs (tests, benches, `cargo run`)
        /// going to the lab: cargo's runner set to this `exec`.
        #[arg(long)]
        cargo: bool,
        /// Record the pair's wire into this pcap while the command runs, then print its RoCE
        /// v2 packets (implies --topology pair).
        #[arg(long, value_name = "FILE.pcap")]
        trace: Option<PathBuf>,
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        cmd: Vec<String>,
    },
    /// A shell where the rxe device is (line by line: each line runs with `sh -c`).
    Shell {
        #[arg(long, short)]
        node: Option<Node>,
        #[arg(long, short)]
        topology: Option<TopoArg>,
    },
    /// The chapters, in order.
    List,
    /// Build and run one chapter (by number, `06`, or package, `ch06-pingpong`).
    ///
    /// Arguments after `--` REPLACE the chapter's default arguments (its `defaults` in
    /// chapters/course.toml, e.g. chapter 08's `all`); they are not added to them. Each role
    /// keeps its own arguments (`--server`, the server's address ...). `cargo lab list` shows
    /// the defaults and the documented examples.
    Run {
        chapter: String,
        /// Record the pair's wire into this pcap and print its RoCE v2 packets after the run;
        /// a loopback chapter then runs on the pair (server on node a, client on node b).
        #[arg(long, value_name = "FILE.pcap")]
        trace: Option<PathBuf>,
        /// Replace the chapter's default arguments (given to every role).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Build and run every chapter in order, then a summary (chapter 11 in its quick form,
    /// `--quick`; the tour then names the full run).
    Tour,
    /// Print a pcap's RoCE v2 packets as a ladder, one line per packet (`a -> b  OPCODE
    /// psn=... len=...`); record one with `cargo lab run NN --trace FILE.pcap` or
    /// `cargo lab exec --trace FILE.pcap -- CMD`.
    Trace {
        /// The pcap to read (not needed with --update-docs).
        #[arg(required_unless_present = "update_docs")]
        file: Option<PathBuf>,
        /// Rewrite the docs' ladder diagrams (docs/wire/*.svg) from the committed captures
        /// (harness/tests/fixtures/wire/).
        #[arg(long, conflicts_with_all = ["svg", "redact", "title"])]
        update_docs: bool,
        /// Also write the ladder as an SVG sequence diagram (identifiers redacted).
        #[arg(long, value_name = "OUT.svg")]
        svg: Option<PathBuf>,
        /// Number PSNs, QPNs, keys and addresses as the snapshots do (`[PSN#1]`).
        #[arg(long)]
        redact: bool,
        /// The SVG's title (default: the file's name).
        #[arg(long)]
        title: Option<String>,
    },
    /// Build what `run` and `tour` build (`cargo build --package <chapter> ...`, every chapter)
    /// and print the chapters' binaries: the ones to run by hand with `cargo lab exec`.
    Build,
    /// Render the course as a book into target/book (`book/`: chapter READMEs, listings and
    /// the tested outputs, diagrams drawn from the project's data); sets up graphviz and the
    /// pinned mdbook first when they are missing.
    Book {
        /// Where to render (default: target/book).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Serve it on 127.0.0.1 and render again whenever a source changes (Ctrl-C stops).
        #[arg(long)]
        serve: bool,
        /// Port for --serve.
        #[arg(long, default_value_t = 3000)]
        port: u16,
        /// With --serve: stop after this many seconds (for scripts and tests).
        #[arg(long, value_name = "SECS", requires = "serve")]
        serve_secs: Option<u64>,
    },
    /// Break the running pair lab's wire on purpose, or undo it.
    ///
    /// Impairments of RoCE v2 traffic only (UDP 4791; the TCP side channel stays clean), on
    /// what node a, node b or both (default) send (tc netem in the guest, behind a prio qdisc
    /// and a u32 filter); `freeze`/`thaw` go through QEMU's monitor, `kill`/`restart` through
    /// the lab's daemon. With `-- CMD`, an impairment lasts while CMD runs on `--on` (default
    /// a), then every fault is cleared, Ctrl-C included.
    Fault {
        #[command(subcommand)]
        action: fault::FaultCmd,
    },
    /// Set up if needed, start the labs, run `cargo test [ARGS]` (with `--workspace` unless
    /// ARGS select packages with -p/--package), tear down.
    Test {
        /// Boot this kernel instead of the newest installed one: an image path, a version
        /// (`cargo lab kernel list`), or a suite of the distribution's archive (e.g. trixie,
        /// trixie-backports), fetched first.
        #[arg(long, value_name = "K")]
        kernel: Option<String>,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The kernels the lab can boot: `list`, or `fetch SUITE` (from the distribution's own
    /// archive, without root, into the lab's cache).
    Kernel {
        #[command(subcommand)]
        cmd: KernelCmd,
    },
    /// Userspace roots the guests can run instead of the host's (`--userspace`): `list`, or
    /// `fetch SUITE` (rdma-core, iproute2 and their dependencies from the distribution's own
    /// archive, without root, unpacked into the lab's cache).
    Userspace {
        #[command(subcommand)]
        cmd: UserspaceCmd,
    },
    /// The exercises: code you write, checked on the lab's rxe device (docs/exercises.md).
    Exercise {
        #[command(subcommand)]
        cmd: exercise::ExerciseCmd,
    },
    /// Boot a lab (`-t loopback` or `-t pair`) N times and report boot and exec latency (for the
    /// README).
    #[command(hide = true)]
    Bench {
        #[arg(long, default_value_t = 5)]
        runs: usize,
        #[arg(long, short, default_value = "loopback")]
        topology: TopoArg,
    },
    /// The lab daemon `up` starts (internal).
    #[command(hide = true, name = "__daemon")]
    Daemon {
        #[arg(long)]
        topology: Topology,
        #[arg(long)]
        dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum KernelCmd {
    /// The installed kernels with rdma_rxe, and the fetched ones.
    List,
    /// Download SUITE's newest kernel (linux-image-amd64 of e.g. trixie or trixie-backports),
    /// unpack it into the cache and index its modules (`depmod -b`); prints its image, for
    /// `--kernel` or `LAB_KERNEL`.
    Fetch { suite: String },
}

#[derive(Debug, Subcommand)]
enum UserspaceCmd {
    /// The fetched userspace roots, with their rdma-core (and the host's).
    List,
    /// Build SUITE's userspace root in the cache (e.g. trixie); prints its path, for
    /// `--userspace` or `LAB_USERSPACE`.
    Fetch { suite: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TopoArg {
    One(Topology),
    All,
}

impl std::str::FromStr for TopoArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "all" {
            Ok(TopoArg::All)
        } else {
            s.parse().map(TopoArg::One).map_err(|e| e.to_string())
        }
    }
}

impl TopoArg {
    fn list(self) -> Vec<Topology> {
        match self {
            TopoArg::One(t) => vec![t],
            TopoArg::All => Topology::all().to_vec(),
        }
    }
}

/// Entry point of `cargo lab`; returns the process exit code.
pub fn main() -> i32 {
    let mut args: Vec<String> = std::env::args().collect();
    // Installed as a cargo subcommand (`cargo-lab lab ...`), cargo passes "lab" first.
    if args.get(1).map(|s| s == "lab").unwrap_or(false) {
        args.remove(1);
    }
    let cli = Cli::parse_from(args);
    if let Some(u) = &cli.userspace {
        match crate::userspace::resolve(u) {
            Ok(u) => crate::userspace::set_override(u),
            Err(e) => {
                eprintln!("cargo lab: error: --userspace {u}: {e:#}");
                return 1;
            }
        }
    }
    match dispatch(cli.cmd) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cargo lab: error: {e:#}");
            1
        }
    }
}

/// `--cpus N`: clap shows the error, with what is accepted.
fn parse_cpus(s: &str) -> std::result::Result<u32, String> {
    crate::vm_options::parse_pair_smp(s).map_err(|e| format!("{e:#}"))
}

fn dispatch(cmd: Sub) -> Result<i32> {
    match cmd {
        Sub::Doctor => doctor::doctor(),
        Sub::Setup {
            vm,
            native,
            dev,
            book,
            print,
        } => doctor::setup(vm, native, dev, book, print),
        Sub::Up { topology, cpus } => {
            if cpus.is_some() && !matches!(topology, TopoArg::One(Topology::Pair)) {
                bail!(
                    "--cpus sets the vCPUs of each pair node: use it with `-t pair` (the loopback \
                     VM's come from LAB_VM_SMP)"
                );
            }
            for t in topology.list() {
                labs::up(t, true, cpus)?;
            }
            eprintln!("next: `cargo lab exec -- ibv_devinfo`; `cargo lab down` stops the labs");
            Ok(0)
        }
        Sub::Status => labs::status(),
        Sub::Book {
            out,
            serve,
            port,
            serve_secs,
        } => book::book(out, serve, port, serve_secs),
        Sub::Down { topology } => labs::down(&topology.list()),
        Sub::Exec {
            node,
            topology,
            env,
            cargo,
            trace,
            cmd,
        } => {
            if let Some(file) = trace {
                if cargo {
                    bail!("--trace and --cargo cannot be used together");
                }
                exec::exec_traced(node, topology, &env, cmd, &file)
            } else if cargo {
                exec::exec_cargo(node, topology, &env, cmd)
            } else {
                exec::exec(node, topology, &env, cmd)
            }
        }
        Sub::Shell { node, topology } => exec::shell(node, topology),
        Sub::List => chapters::list(),
        Sub::Run {
            chapter,
            trace,
            args,
        } => chapters::run(&chapter, &args, trace.as_deref()),
        Sub::Trace {
            file,
            update_docs,
            svg,
            redact,
            title,
        } => match file {
            Some(f) if !update_docs => wire::trace(&f, svg.as_deref(), redact, title.as_deref()),
            _ => wire::update_wire_docs(),
        },
        Sub::Tour => chapters::tour(),
        Sub::Build => chapters::build_cmd(),
        Sub::Test { kernel, args } => {
            if let Some(k) = kernel {
                let k = crate::kernel_fetch::resolve(&k)?;
                eprintln!(
                    "cargo lab test: kernel {} ({})",
                    k.version,
                    k.image.display()
                );
                crate::kernel::set_override(k);
            }
            suite::test(&args)
        }
        Sub::Kernel { cmd } => kernel_cmd(cmd),
        Sub::Userspace { cmd } => userspace_cmd(cmd),
        Sub::Fault { action } => fault::fault(action),
        Sub::Exercise { cmd } => exercise::exercise(cmd),
        Sub::Bench { runs, topology } => bench::bench(runs, topology),
        Sub::Daemon { topology, dir } => labs::daemon(topology, &dir),
    }
}

fn userspace_cmd(cmd: UserspaceCmd) -> Result<i32> {
    use crate::userspace;
    match cmd {
        UserspaceCmd::List => {
            let providers = "ibverbs-providers";
            println!(
                "{:<12} rdma-core {:<14} /",
                "host",
                userspace::host_version(providers).unwrap_or_else(|| "?".into())
            );
            for u in userspace::list() {
                println!(
                    "{:<12} rdma-core {:<14} {}",
                    u.name,
                    userspace::package_version(&u.root, providers).unwrap_or_else(|| "?".into()),
                    u.root.display()
                );
            }
            Ok(0)
        }
        UserspaceCmd::Fetch { suite } => {
            let u = userspace::fetch(&suite)?;
            println!("{}", u.root.display());
            eprintln!(
                "next: `cargo lab test --userspace {suite}`, or `cargo lab exec --userspace \
                 {suite} -- CMD`, or LAB_USERSPACE={} for any command",
                u.root.display()
            );
            Ok(0)
        }
    }
}

fn kernel_cmd(cmd: KernelCmd) -> Result<i32> {
    match cmd {
        KernelCmd::List => {
            let all = crate::kernel_fetch::list();
            if all.is_empty() {
                println!("no kernel with rdma_rxe here; `cargo lab setup --vm` installs one");
            }
            for (k, how) in all {
                println!("{:<28} {:<9} {}", k.version, how, k.image.display());
            }
            Ok(0)
        }
        KernelCmd::Fetch { suite } => {
            let k = crate::kernel_fetch::fetch(&suite)?;
            println!("{}", k.image.display());
            eprintln!(
                "next: `cargo lab test --kernel {}`, or LAB_KERNEL={} for any command",
                k.version,
                k.image.display()
            );
            Ok(0)
        }
    }
}

fn root() -> Result<PathBuf> {
    workspace_root().context("run `cargo lab` from inside the rxe-lab workspace")
}

/// Set by Ctrl-C (SIGINT) or SIGTERM once a command asked for it: from then on the command
/// polls it, tears down what it started and exits 130.
fn interrupted() -> &'static AtomicBool {
    static FLAG: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    FLAG.get_or_init(|| {
        let f = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            let _ = signal_hook::flag::register(sig, f.clone());
        }
        f
    })
}
