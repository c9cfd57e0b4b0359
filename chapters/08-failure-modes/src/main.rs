//! # Chapter 08: failure modes, reproduced on purpose
//!
//! People learn RDMA from its failures. Each *case* of this chapter makes one classic mistake
//! on purpose, on a real rxe device, and shows what really happens: the completion status or
//! errno (name and number), what `lab`'s status table says causes it, which QP went to ERR,
//! and the fix. Every observation is checked against what `docs/rxe-observed.md` records for
//! Linux 6.1's rxe; any difference is printed as `MISMATCH` and the program exits non-zero.
//! The cases, what each produces and the hint a failed verb carries are one table,
//! `contracts::failures` (unit tests below keep it, that record and the summary snapshots
//! equal).
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
//! Layout: `contracts/src/failures.rs` (outside this crate: the book reads it too) is the
//! table of the cases; `cases/` holds one file per case (read them in the order of `--list`);
//! `report.rs` prints and checks; `rig.rs` is the plumbing (open, connect two QPs, wait with
//! a deadline) that earlier chapters did by hand.

mod cases;
mod report;
mod rig;

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

use contracts::failures::{CASES, FailureCase, Outcome};
use course::Outcome as Result;
use course::kernel::RxeChange;
use report::Report;

/// The code that runs each case of the table.
///
/// The cases themselves, what rxe produces for each on Linux 6.1 and later kernels, and the
/// hint a failed verb carries, are one table, `contracts::failures::CASES` (the book draws
/// its failure diagram from it; the unit tests below keep it, `docs/rxe-observed.md` and the
/// summary snapshots equal).
pub fn run_of(case: &FailureCase) -> Option<fn(&mut Report) -> Result<()>> {
    Some(match case.name {
        "remote-access" => cases::remote_access::run,
        "bad-rkey" => cases::bad_rkey::run,
        "out-of-bounds" => cases::out_of_bounds::run,
        "unregistered-lkey" => cases::unregistered_lkey::run,
        "post-before-rts" => cases::post_before_rts::run,
        "skip-rtr" => cases::skip_rtr::run,
        "rnr-retry-exceeded" => cases::rnr_retry::run,
        "peer-gone" => cases::peer_gone::run,
        "mtu-too-large" => cases::mtu_too_large::run_loopback,
        "wrong-gid-index" => cases::wrong_gid_index::run,
        "recv-queue-full" => cases::recv_queue_full::run,
        "flush-on-error" => cases::flush_on_error::run,
        "deregistered-region" => cases::deregistered_region::run,
        "memlock" => cases::memlock::run,
        "cq-overflow" => cases::cq_overflow::run,
        "cross-pd" => cases::cross_pd::run,
        "recv-cq-overflow" => cases::recv_cq_overflow::run,
        _ => return None,
    })
}

/// Where rxe changed for a case: the change (course::kernel) and what it produces where the
/// change holds.
pub fn later(case: &FailureCase) -> Option<(RxeChange, Outcome)> {
    let (name, outcome) = case.later?;
    let change = RxeChange::ALL.into_iter().find(|c| c.name() == name)?;
    Some((change, outcome))
}

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
    One(&'static FailureCase),
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
fn run_case(index: usize, case: &'static FailureCase) -> bool {
    println!(
        "=== case {} of {}: {}: {}",
        index + 1,
        CASES.len(),
        case.name,
        case.summary
    );
    let mut r = Report::for_case(case);
    let outcome = match run_of(case) {
        Some(run) => run(&mut r),
        None => Err(format!("case {} has no code", case.name).into()),
    };
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
                let outcome = match (later(c), kernel) {
                    (Some((change, later)), Some(k)) if change.holds_on(k) => later,
                    _ => c.outcome,
                };
                t.row([
                    c.name,
                    &outcome.to_string(),
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
    use super::{CASES, later, run_of};
    use course::kernel::KernelVersion;
    use lab::{Errno, WcStatus};

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
                let (change, outcome) = later(c)?;
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
                &case.outcome.to_string(),
                outcome,
                "case {}: the program expects {:?}, docs/rxe-observed.md records {:?}",
                case.name,
                case.outcome.to_string(),
                outcome
            );
        }
    }

    #[test]
    fn every_case_of_the_table_has_its_code_and_its_change() {
        for c in CASES {
            assert!(run_of(c).is_some(), "case {} has no code", c.name);
            if let Some((name, _)) = c.later {
                assert!(later(c).is_some(), "case {}: no RxeChange {name:?}", c.name);
            }
        }
    }

    /// The table's statuses are spelled as lab prints them: a completion status by
    /// `WcStatus`, an errno by `Errno` (`IBV_WC_REM_ACCESS_ERR (10)`, `EINVAL (22)`).
    #[test]
    fn every_status_of_the_table_is_lab_s_own() {
        for c in CASES {
            let outcomes = std::iter::once(c.outcome).chain(c.later.map(|(_, o)| o));
            for (name, value) in outcomes.flat_map(|o| o.statuses().collect::<Vec<_>>()) {
                let lab = if name.starts_with("IBV_WC_") {
                    WcStatus::from_raw(value as u32).to_string()
                } else {
                    Errno(value).to_string()
                };
                assert_eq!(lab, format!("{name} ({value})"), "case {}", c.name);
            }
        }
    }

    /// The summary tables of the chapter's snapshots, recorded on real rxe: `(suffix, text)`
    /// for `e2e__all_summary.snap` and each `e2e__all_summary@<suffix>.snap`.
    fn summary_snapshots() -> Vec<(Option<String>, String)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
        let mut out = vec![];
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix("e2e__all_summary") else {
                continue;
            };
            let suffix = rest
                .strip_suffix(".snap")
                .unwrap()
                .strip_prefix('@')
                .map(String::from);
            out.push((suffix, std::fs::read_to_string(&path).unwrap()));
        }
        out.sort();
        out
    }

    /// The table cannot drift from what rxe really produced: each summary snapshot (the
    /// chapter's `all`, checked on rxe by tests/e2e.rs) shows, row by row, the table's
    /// outcome for the kernel the snapshot is for (`linux-6.10`: the later outcome of every
    /// change since 6.10 or earlier).
    #[test]
    fn every_summary_snapshot_shows_the_table() {
        let snaps = summary_snapshots();
        assert!(
            snaps.iter().any(|(s, _)| s.is_none()),
            "no e2e__all_summary.snap"
        );
        for (suffix, text) in snaps {
            let kernel = suffix.as_deref().map(|s| {
                let v = s.strip_prefix("linux-").expect("suffix linux-X.Y");
                let (major, minor) = v.split_once('.').expect("X.Y");
                KernelVersion::new(major.parse().unwrap(), minor.parse().unwrap())
            });
            let mut lines = text
                .lines()
                .skip_while(|l| !l.trim_start().starts_with("case "));
            let header = lines.next().expect("a header line");
            let what_at = header
                .find("what rxe produces")
                .expect("the outcome column");
            let result_at = header.find("result").expect("the result column");
            let rows: Vec<(&str, &str)> = lines
                .take_while(|l| !l.contains("cases behaved"))
                .map(|l| (l[..what_at].trim(), l[what_at..result_at].trim()))
                .collect();
            let ours: Vec<(&str, String)> = CASES
                .iter()
                .map(|c| {
                    let outcome = match (later(c), kernel) {
                        (Some((change, later)), Some(k)) if change.holds_on(k) => later,
                        _ => c.outcome,
                    };
                    (c.name, outcome.to_string())
                })
                .collect();
            let theirs: Vec<(&str, String)> =
                rows.iter().map(|(n, w)| (*n, w.to_string())).collect();
            assert_eq!(theirs, ours, "summary snapshot {suffix:?}");
        }
    }
}
