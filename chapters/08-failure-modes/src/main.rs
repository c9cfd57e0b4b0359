//! # Chapter 08: failure modes, reproduced on purpose
//!
//! People learn RDMA from its failures. Each *case* of this chapter makes one classic mistake
//! on purpose, on a real rxe device, and shows what really happens: the completion status or
//! errno (name and number), what `lab`'s status table says causes it, which QP went to ERR,
//! and the fix. Every observation is checked against what `docs/rxe-observed.md` records for
//! Linux 6.1's rxe (a unit test below keeps this file's expected outcomes and that table
//! equal); any difference is printed as `MISMATCH` and the program exits non-zero.
//!
//! Verbs: nothing new. The cases break the rules of the verbs you already know:
//! `ibv_reg_mr` access flags, keys and bounds (cases 1-4, 13, 16), `ibv_post_send` before
//! RTS (5), `ibv_modify_qp` shortcuts, GID index and MTU (6, 9, 10), `rnr_retry`,
//! `retry_cnt` and `timeout` (7, 8), queue and CQ capacities (11, 15, 17), the ERR state and
//! its flush (12), `RLIMIT_MEMLOCK` (14). Where rxe differs from a hardware NIC the output
//! says so (`hardware: ...`) and records what rxe really does.
//!
//! Run it:
//!
//! ```text
//! cargo lab run 08                       # every case, in order (the default `all`)
//! cargo lab run 08 -- bad-rkey           # one case (arguments after -- replace `all`)
//! cargo lab exec -- target/debug/ch08-failure-modes --list       # the cases, one line each
//! cargo lab exec -n a -- target/debug/ch08-failure-modes mtu-too-large --serve              # terminal 1: node a
//! cargo lab exec -n b -- target/debug/ch08-failure-modes mtu-too-large --connect 10.77.0.1  # terminal 2: node b
//! ```
//!
//! `bad-rkey` and `rnr-retry-exceeded` have a pair half too (`--serve` on node a,
//! `--connect 10.77.0.1` on node b; `cases/on_the_wire.rs`): there the responder's NAK crosses
//! the wire, and `tests/wire.rs` records it.
//!
//! Layout: `cases/` holds one file per case (read them in the order of `--list`);
//! `report.rs` prints and checks; `rig.rs` is the plumbing (open, connect two QPs, wait with
//! a deadline) that earlier chapters did by hand.

mod cases;
mod report;
mod rig;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

use course::Outcome as Result;
use course::kernel::RxeChange;
use report::Report;

/// One failure mode.
#[derive(Debug)]
pub struct Case {
    /// The name on the command line.
    pub name: &'static str,
    /// One line for `--list`.
    pub summary: &'static str,
    /// What it produces on rxe in Linux 6.1, for the summary table (the README's table says
    /// the same).
    pub outcome: &'static str,
    /// Where rxe changed: what it produces on the kernels the change holds on
    /// (course::kernel::RxeChange; docs/rxe-observed.md, "On later kernels").
    pub later: Option<(RxeChange, &'static str)>,
    pub run: fn(&mut Report) -> Result<()>,
}

/// The cases, in the order of the course: the numbers and names of `docs/rxe-observed.md`.
pub const CASES: &[Case] = &[
    Case {
        name: "remote-access",
        summary: "RDMA WRITE into a region registered without REMOTE_WRITE",
        outcome: "IBV_WC_REM_ACCESS_ERR (10)",
        later: None,
        run: cases::remote_access::run,
    },
    Case {
        name: "bad-rkey",
        summary: "RDMA WRITE to the right address with rkey + 1",
        outcome: "IBV_WC_REM_ACCESS_ERR (10)",
        later: None,
        run: cases::bad_rkey::run,
    },
    Case {
        name: "out-of-bounds",
        summary: "RDMA WRITE that runs past the end of the remote region",
        outcome: "IBV_WC_REM_ACCESS_ERR (10)",
        later: None,
        run: cases::out_of_bounds::run,
    },
    Case {
        name: "unregistered-lkey",
        summary: "local SGE with lkey 0, or a valid lkey with an address outside its MR",
        outcome: "IBV_WC_LOC_QP_OP_ERR (2) / IBV_WC_LOC_PROT_ERR (4)",
        later: Some((
            RxeChange::LocalErrorFlushed,
            "IBV_WC_WR_FLUSH_ERR (5) / IBV_WC_WR_FLUSH_ERR (5)",
        )),
        run: cases::unregistered_lkey::run,
    },
    Case {
        name: "post-before-rts",
        summary: "ibv_post_send in RESET, INIT and RTR, and the ghost sends it leaves",
        outcome: "EINVAL (22), yet the WR is sent later",
        later: None,
        run: cases::post_before_rts::run,
    },
    Case {
        name: "skip-rtr",
        summary: "ibv_modify_qp INIT -> RTS directly",
        outcome: "EINVAL (22)",
        later: None,
        run: cases::skip_rtr::run,
    },
    Case {
        name: "rnr-retry-exceeded",
        summary: "SEND to a peer with no RECV posted: rnr_retry 2, then rnr_retry 7 = forever",
        outcome: "IBV_WC_RNR_RETRY_EXC_ERR (13) / no completion",
        later: Some((
            RxeChange::RnrForeverOutlastsRetryCnt,
            "IBV_WC_RNR_RETRY_EXC_ERR (13) / no completion, even with retry_cnt 1",
        )),
        run: cases::rnr_retry::run,
    },
    Case {
        name: "peer-gone",
        summary: "the peer's QP is destroyed mid-conversation; retry_cnt 6 vs 7; recovery",
        outcome: "IBV_WC_RETRY_EXC_ERR (12) / no completion",
        later: None,
        run: cases::peer_gone::run,
    },
    Case {
        name: "mtu-too-large",
        summary: "path MTU 4096 above the port's active MTU 1024, on one device and between two",
        outcome: "IBV_WC_SUCCESS (0) on one device / no completion between nodes",
        later: Some((
            RxeChange::XmitErrorFailsWr,
            "IBV_WC_SUCCESS (0) on one device / IBV_WC_WR_FLUSH_ERR (5) between nodes",
        )),
        run: cases::mtu_too_large::run_loopback,
    },
    Case {
        name: "wrong-gid-index",
        summary: "the link-local GID, index 0, toward an IPv4 peer",
        outcome: "EINVAL (22) at RTR",
        later: None,
        run: cases::wrong_gid_index::run,
    },
    Case {
        name: "recv-queue-full",
        summary: "more receives than max_recv_wr",
        outcome: "ENOMEM (12) at the 8th of max_recv_wr=4",
        later: Some((
            RxeChange::QueueCapRounded,
            "ENOMEM (12) at the 8th of max_recv_wr=4 (reported as 7)",
        )),
        run: cases::recv_queue_full::run,
    },
    Case {
        name: "flush-on-error",
        summary: "a QP forced to ERR with work outstanding",
        outcome: "IBV_WC_WR_FLUSH_ERR (5)",
        later: None,
        run: cases::flush_on_error::run,
    },
    Case {
        name: "deregistered-region",
        summary: "the server deregisters; the client's old rkey now fails",
        outcome: "IBV_WC_REM_ACCESS_ERR (10)",
        later: None,
        run: cases::deregistered_region::run,
    },
    Case {
        name: "memlock",
        summary: "a non-root process with a tiny RLIMIT_MEMLOCK registers 1 MiB",
        outcome: "ENOMEM (12) from ibv_reg_mr",
        later: None,
        run: cases::memlock::run,
    },
    Case {
        name: "cq-overflow",
        summary: "more completions than the CQ holds",
        outcome: "IBV_EVENT_CQ_ERR per lost completion",
        later: None,
        run: cases::cq_overflow::run,
    },
    Case {
        name: "cross-pd",
        summary: "an MR of another protection domain in a work request",
        outcome: "IBV_WC_LOC_QP_OP_ERR (2) / IBV_WC_REM_ACCESS_ERR (10)",
        later: Some((
            RxeChange::LocalErrorFlushed,
            "IBV_WC_WR_FLUSH_ERR (5) / IBV_WC_REM_ACCESS_ERR (10)",
        )),
        run: cases::cross_pd::run,
    },
    Case {
        name: "recv-cq-overflow",
        summary: "more receive completions than the responder's CQ holds",
        outcome: "IBV_EVENT_CQ_ERR; the responder's QP to ERR",
        later: None,
        run: cases::recv_cq_overflow::run,
    },
];

/// The command line (clap: `--help`, and a clear message with exit status 2 for a bad one).
#[derive(Parser, Debug)]
#[command(
    name = "ch08-failure-modes",
    about = "Failure modes, reproduced on purpose: 17 classic mistakes and what rxe produces",
    after_help = "\
Examples:
  ch08-failure-modes all                                       every case, in order
  ch08-failure-modes bad-rkey                                  one case
  ch08-failure-modes --list                                    the cases, one line each
  ch08-failure-modes mtu-too-large --serve [--port N]          node a of the pair
  ch08-failure-modes mtu-too-large --connect <addr> [--port N] node b of the pair
  (bad-rkey and rnr-retry-exceeded take --serve and --connect too: their NAKs on a wire)"
)]
struct Args {
    /// A case (see --list), or `all` for every case in order
    #[arg(value_name = "CASE", required_unless_present_any = ["list", "memlock_child"])]
    case: Option<String>,
    /// List the cases, one line each
    #[arg(long, conflicts_with = "case")]
    list: bool,
    /// mtu-too-large, bad-rkey, rnr-retry-exceeded: serve node a of the pair topology
    #[arg(long, conflicts_with = "connect")]
    serve: bool,
    /// mtu-too-large, bad-rkey, rnr-retry-exceeded: connect to node a at <addr> (node b)
    #[arg(long, value_name = "addr")]
    connect: Option<String>,
    /// with --serve or --connect: the TCP port of the exchange [default: 18508]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    port: Option<u16>,
    /// Hidden: the memlock case re-runs this program as its own child (see cases/memlock.rs).
    #[arg(long = "memlock-child", value_name = "WHO", hide = true)]
    memlock_child: Option<String>,
}

/// What the command line asks for.
enum Command {
    List,
    All,
    One(&'static Case),
    MtuServe {
        port: u16,
    },
    MtuConnect {
        addr: String,
        port: u16,
    },
    WireServe {
        case: cases::on_the_wire::WireCase,
        port: u16,
    },
    WireConnect {
        case: cases::on_the_wire::WireCase,
        addr: String,
        port: u16,
    },
    MemlockChild {
        who: String,
    },
}

/// What clap cannot check by itself: the case name, and options that only mtu-too-large takes.
fn command(a: Args) -> Result<Command, String> {
    if let Some(who) = a.memlock_child {
        return Ok(Command::MemlockChild { who });
    }
    if a.list {
        return Ok(Command::List);
    }
    let name = a.case.unwrap_or_default();
    let has_options = a.serve || a.connect.is_some() || a.port.is_some();
    if name == "all" {
        if has_options {
            return Err(
                "all takes no options; only mtu-too-large, bad-rkey and rnr-retry-exceeded have \
                 --serve/--connect/--port"
                    .into(),
            );
        }
        return Ok(Command::All);
    }
    let case = CASES.iter().find(|c| c.name == name).ok_or_else(|| {
        format!("unknown case {name:?}; `ch08-failure-modes --list` shows the cases")
    })?;
    let wire = cases::on_the_wire::WireCase::of(case.name);
    if case.name != "mtu-too-large" && wire.is_none() {
        if has_options {
            return Err(format!(
                "case {} takes no options; only mtu-too-large, bad-rkey and rnr-retry-exceeded \
                 have --serve/--connect/--port",
                case.name
            ));
        }
        return Ok(Command::One(case));
    }
    let port = a.port.unwrap_or(cases::mtu_too_large::DEFAULT_PORT);
    match (a.serve, a.connect, wire) {
        (true, None, Some(case)) => Ok(Command::WireServe { case, port }),
        (false, Some(addr), Some(case)) => Ok(Command::WireConnect { case, addr, port }),
        (true, None, None) => Ok(Command::MtuServe { port }),
        (false, Some(addr), None) => Ok(Command::MtuConnect { addr, port }),
        (false, None, _) if a.port.is_some() => Err("--port needs --serve or --connect".into()),
        _ => Ok(Command::One(case)),
    }
}

/// Runs one case: header, steps, result line. Returns whether it behaved as recorded.
fn run_case(index: usize, case: &Case) -> bool {
    println!(
        "=== case {} of {}: {}: {}",
        index + 1,
        CASES.len(),
        case.name,
        case.summary
    );
    let mut r = Report::new();
    let outcome = (case.run)(&mut r);
    let ok = match outcome {
        Ok(()) if r.mismatches().is_empty() => {
            println!(
                "result: {}: as recorded for rxe ({})",
                case.name,
                report::checks(r.checks())
            );
            true
        }
        Ok(()) => {
            println!(
                "result: {}: MISMATCH in {} of {} checks",
                case.name,
                r.mismatches().len(),
                r.checks()
            );
            false
        }
        Err(e) => {
            println!("  unexpected error: {e}");
            println!("result: {}: FAILED (an unexpected error)", case.name);
            false
        }
    };
    println!();
    ok
}

fn main() -> ExitCode {
    let cmd = match command(Args::parse()) {
        Ok(c) => c,
        // The same form and exit status (2) as clap's own errors.
        Err(e) => Args::command().error(ErrorKind::InvalidValue, e).exit(),
    };
    let ok = match cmd {
        Command::List => {
            let width = CASES.iter().map(|c| c.name.len()).max().unwrap_or(0);
            for (i, c) in CASES.iter().enumerate() {
                println!("{:>2}  {:width$}  {}", i + 1, c.name, c.summary);
            }
            true
        }
        Command::One(case) => {
            let i = CASES.iter().position(|c| c.name == case.name).unwrap_or(0);
            run_case(i, case)
        }
        Command::All => {
            let results: Vec<bool> = CASES
                .iter()
                .enumerate()
                .map(|(i, c)| run_case(i, c))
                .collect();
            println!("summary:");
            let mut t = course::show::Table::new([
                ("case", course::show::Align::Left),
                ("what rxe produces", course::show::Align::Left),
                ("result", course::show::Align::Left),
            ])
            .indent(2);
            // The outcome this kernel's rxe was checked against (course::kernel).
            let kernel = course::kernel::KernelVersion::running().ok();
            for (c, ok) in CASES.iter().zip(&results) {
                let outcome = match (c.later, kernel) {
                    (Some((change, later)), Some(k)) if change.holds_on(k) => later,
                    _ => c.outcome,
                };
                t.row([
                    c.name,
                    outcome,
                    if *ok { "as recorded" } else { "MISMATCH" },
                ]);
            }
            print!("{t}");
            let bad = results.iter().filter(|ok| !**ok).count();
            println!(
                "{} of {} cases behaved as recorded",
                CASES.len() - bad,
                CASES.len()
            );
            bad == 0
        }
        Command::MtuServe { port } => run_role(cases::mtu_too_large::serve(port)),
        Command::MtuConnect { addr, port } => run_role(cases::mtu_too_large::connect(&addr, port)),
        Command::WireServe { case, port } => run_role(cases::on_the_wire::serve(case, port)),
        Command::WireConnect { case, addr, port } => {
            run_role(cases::on_the_wire::connect(case, &addr, port))
        }
        Command::MemlockChild { who } => cases::memlock::child(&who),
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Ends a server/client role: an unexpected error is printed, and fails the run.
fn run_role(r: Result<bool>) -> bool {
    match r {
        Ok(ok) => ok,
        Err(e) => {
            println!("unexpected error: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CASES;

    /// The project's record of what rxe does: the table this chapter checks against.
    const OBSERVED: &str = include_str!("../../../docs/rxe-observed.md");

    /// The record's `## heading` section, up to the next `## `.
    fn section(heading: &str) -> &'static str {
        let start = OBSERVED
            .find(&format!("## {heading}"))
            .unwrap_or_else(|| panic!("docs/rxe-observed.md has no section \"{heading}\""));
        let rest = &OBSERVED[start..];
        &rest[..rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3)]
    }

    /// `(number, name, what rxe produces)` of every row of the record's case table.
    fn recorded_cases() -> Vec<(String, String, String)> {
        section("The cases")
            .lines()
            .filter_map(|line| {
                // "| 1 | `remote-access` | outcome | details |": the first three cells count
                // (the details may hold escaped pipes, `\|`).
                let cells: Vec<&str> = line.splitn(5, '|').map(str::trim).collect();
                let ["", num, name, outcome, _] = cells[..] else {
                    return None;
                };
                let name = name.strip_prefix('`')?.strip_suffix('`')?;
                num.parse::<u32>().ok()?;
                Some((num.to_string(), name.to_string(), outcome.to_string()))
            })
            .collect()
    }

    /// `(number, name, change, what rxe produces)` of every row of the record's table of the
    /// later kernels ("On later kernels").
    fn recorded_later() -> Vec<(String, String, String, String)> {
        section("On later kernels")
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.splitn(6, '|').map(str::trim).collect();
                let ["", num, name, change, outcome, _] = cells[..] else {
                    return None;
                };
                num.parse::<u32>().ok()?;
                let name = name.strip_prefix('`')?.strip_suffix('`')?;
                let change = change.strip_prefix('`')?.strip_suffix('`')?;
                Some((num.into(), name.into(), change.into(), outcome.into()))
            })
            .collect()
    }

    #[test]
    fn every_change_expects_what_docs_rxe_observed_records_for_later_kernels() {
        let recorded = recorded_later();
        let ours: Vec<(String, String, String, String)> = CASES
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let (change, outcome) = c.later?;
                Some((
                    (i + 1).to_string(),
                    c.name.to_string(),
                    change.name().to_string(),
                    outcome.to_string(),
                ))
            })
            .collect();
        assert_eq!(ours, recorded);
    }

    #[test]
    fn every_case_expects_what_docs_rxe_observed_records() {
        let recorded = recorded_cases();
        let names: Vec<&str> = recorded.iter().map(|(_, n, _)| n.as_str()).collect();
        let ours: Vec<&str> = CASES.iter().map(|c| c.name).collect();
        assert_eq!(
            names, ours,
            "docs/rxe-observed.md lists other cases, or another order"
        );
        for (i, (case, (num, _, outcome))) in CASES.iter().zip(&recorded).enumerate() {
            assert_eq!(
                num,
                &(i + 1).to_string(),
                "case {} is numbered {num}",
                case.name
            );
            assert_eq!(
                case.outcome, outcome,
                "case {}: the program expects {:?}, docs/rxe-observed.md records {:?}",
                case.name, case.outcome, outcome
            );
        }
    }
}
