//! Chapter 08's failure cases as data: each deliberate mistake, what rxe produces for it, and
//! the hint `lab` gives when the mistake fails a verb.
//!
//! Chapter 08 runs the cases in this order and checks every observation against this table
//! (its summary prints [`FailureCase::outcome`]; a verb's error must carry
//! [`FailureCase::hint`]). The book draws its failure diagram from the same table, without
//! linking libibverbs. `docs/rxe-observed.md` records the same outcomes in prose; chapter 08's
//! tests keep the table, that record and the chapter's summary snapshots equal.

use std::fmt;

use crate::hints::HintCode;

/// One part of what a case produces: a status as `lab` prints it (`IBV_WC_REM_ACCESS_ERR
/// (10)`, `EINVAL (22)`), or words around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// A work completion status or an errno: its C name and its value.
    Status(&'static str, i32),
    /// Words: a qualifier ("at RTR"), a separator (" / "), or an outcome that is no numbered
    /// status ("IBV_EVENT_CQ_ERR per lost completion").
    Text(&'static str),
}

/// What rxe produces for a case, in parts; `Display` prints the summary's line
/// (`IBV_WC_SUCCESS (0) on one device / no completion between nodes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome(pub &'static [Part]);

impl Outcome {
    /// The statuses, in order: `("IBV_WC_LOC_QP_OP_ERR", 2)`, `("IBV_WC_LOC_PROT_ERR", 4)`.
    pub fn statuses(&self) -> impl Iterator<Item = (&'static str, i32)> + '_ {
        self.0.iter().filter_map(|p| match *p {
            Part::Status(name, value) => Some((name, value)),
            Part::Text(_) => None,
        })
    }

    /// The words without the statuses, joined (`" on one device / no completion between
    /// nodes"`; `" / "` between two statuses).
    pub fn words(&self) -> String {
        self.0
            .iter()
            .filter_map(|p| match *p {
                Part::Text(t) => Some(t),
                Part::Status(..) => None,
            })
            .collect()
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in self.0 {
            match p {
                Part::Status(name, value) => write!(f, "{name} ({value})")?,
                Part::Text(t) => f.write_str(t)?,
            }
        }
        Ok(())
    }
}

/// One failure mode of chapter 08.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureCase {
    /// The name on the command line (`bad-rkey`).
    pub name: &'static str,
    /// One line for `--list`.
    pub summary: &'static str,
    /// What rxe in Linux 6.1 produces: the summary table's "what rxe produces" column.
    pub outcome: Outcome,
    /// Where rxe changed: the change's name (`course::kernel::RxeChange::name`) and what the
    /// kernels it holds on produce (docs/rxe-observed.md, "On later kernels").
    pub later: Option<(&'static str, Outcome)>,
    /// The hint `lab`'s error carries when the mistake fails a verb (the errno cases); `None`
    /// when rxe answers with a completion status or an event instead.
    pub hint: Option<HintCode>,
}

use Part::{Status as S, Text as T};

const REM_ACCESS_ERR: Part = S("IBV_WC_REM_ACCESS_ERR", 10);
const LOC_QP_OP_ERR: Part = S("IBV_WC_LOC_QP_OP_ERR", 2);
const WR_FLUSH_ERR: Part = S("IBV_WC_WR_FLUSH_ERR", 5);
const EINVAL: Part = S("EINVAL", 22);
const ENOMEM: Part = S("ENOMEM", 12);

/// The cases, in the order of the course (the numbers of `docs/rxe-observed.md`).
pub const CASES: &[FailureCase] = &[
    FailureCase {
        name: "remote-access",
        summary: "RDMA WRITE into a region registered without REMOTE_WRITE",
        outcome: Outcome(&[REM_ACCESS_ERR]),
        later: None,
        hint: None,
    },
    FailureCase {
        name: "bad-rkey",
        summary: "RDMA WRITE to the right address with rkey + 1",
        outcome: Outcome(&[REM_ACCESS_ERR]),
        later: None,
        hint: None,
    },
    FailureCase {
        name: "out-of-bounds",
        summary: "RDMA WRITE that runs past the end of the remote region",
        outcome: Outcome(&[REM_ACCESS_ERR]),
        later: None,
        hint: None,
    },
    FailureCase {
        name: "unregistered-lkey",
        summary: "local SGE with lkey 0, or a valid lkey with an address outside its MR",
        outcome: Outcome(&[LOC_QP_OP_ERR, T(" / "), S("IBV_WC_LOC_PROT_ERR", 4)]),
        later: Some((
            "local-error-flushed",
            Outcome(&[WR_FLUSH_ERR, T(" / "), WR_FLUSH_ERR]),
        )),
        hint: None,
    },
    FailureCase {
        name: "post-before-rts",
        summary: "ibv_post_send in RESET, INIT and RTR, and the ghost sends it leaves",
        outcome: Outcome(&[EINVAL, T(", yet the WR is sent later")]),
        later: None,
        hint: Some(HintCode::SendBeforeRts),
    },
    FailureCase {
        name: "skip-rtr",
        summary: "ibv_modify_qp INIT -> RTS directly",
        outcome: Outcome(&[EINVAL]),
        later: None,
        hint: Some(HintCode::SkippedRtr),
    },
    FailureCase {
        name: "rnr-retry-exceeded",
        summary: "SEND to a peer with no RECV posted: rnr_retry 2, then rnr_retry 7 = forever",
        outcome: Outcome(&[S("IBV_WC_RNR_RETRY_EXC_ERR", 13), T(" / no completion")]),
        later: Some((
            "rnr-forever-outlasts-retry-cnt",
            Outcome(&[
                S("IBV_WC_RNR_RETRY_EXC_ERR", 13),
                T(" / no completion, even with retry_cnt 1"),
            ]),
        )),
        hint: None,
    },
    FailureCase {
        name: "peer-gone",
        summary: "the peer's QP is destroyed mid-conversation; retry_cnt 6 vs 7; recovery",
        outcome: Outcome(&[S("IBV_WC_RETRY_EXC_ERR", 12), T(" / no completion")]),
        later: None,
        hint: None,
    },
    FailureCase {
        name: "mtu-too-large",
        summary: "path MTU 4096 above the port's active MTU 1024, on one device and between two",
        outcome: Outcome(&[
            S("IBV_WC_SUCCESS", 0),
            T(" on one device / no completion between nodes"),
        ]),
        later: Some((
            "xmit-error-fails-wr",
            Outcome(&[
                S("IBV_WC_SUCCESS", 0),
                T(" on one device / "),
                WR_FLUSH_ERR,
                T(" between nodes"),
            ]),
        )),
        hint: None,
    },
    FailureCase {
        name: "wrong-gid-index",
        summary: "the link-local GID, index 0, toward an IPv4 peer",
        outcome: Outcome(&[EINVAL, T(" at RTR")]),
        later: None,
        hint: Some(HintCode::GidIndex),
    },
    FailureCase {
        name: "recv-queue-full",
        summary: "more receives than max_recv_wr",
        outcome: Outcome(&[ENOMEM, T(" at the 8th of max_recv_wr=4")]),
        later: Some((
            "queue-cap-rounded",
            Outcome(&[ENOMEM, T(" at the 8th of max_recv_wr=4 (reported as 7)")]),
        )),
        hint: Some(HintCode::RecvQueueFull),
    },
    FailureCase {
        name: "flush-on-error",
        summary: "a QP forced to ERR with work outstanding",
        outcome: Outcome(&[WR_FLUSH_ERR]),
        later: None,
        hint: None,
    },
    FailureCase {
        name: "deregistered-region",
        summary: "the server deregisters; the client's old rkey now fails",
        outcome: Outcome(&[REM_ACCESS_ERR]),
        later: None,
        hint: None,
    },
    FailureCase {
        name: "memlock",
        summary: "a non-root process with a tiny RLIMIT_MEMLOCK registers 1 MiB",
        outcome: Outcome(&[ENOMEM, T(" from ibv_reg_mr")]),
        later: None,
        hint: Some(HintCode::MemlockLimit),
    },
    FailureCase {
        name: "cq-overflow",
        summary: "more completions than the CQ holds",
        outcome: Outcome(&[T("IBV_EVENT_CQ_ERR per lost completion")]),
        later: None,
        hint: None,
    },
    FailureCase {
        name: "cross-pd",
        summary: "an MR of another protection domain in a work request",
        outcome: Outcome(&[LOC_QP_OP_ERR, T(" / "), REM_ACCESS_ERR]),
        later: Some((
            "local-error-flushed",
            Outcome(&[WR_FLUSH_ERR, T(" / "), REM_ACCESS_ERR]),
        )),
        hint: None,
    },
    FailureCase {
        name: "recv-cq-overflow",
        summary: "more receive completions than the responder's CQ holds",
        outcome: Outcome(&[T("IBV_EVENT_CQ_ERR; the responder's QP to ERR")]),
        later: None,
        hint: None,
    },
];

/// The case named `name`.
pub fn case(name: &str) -> Option<&'static FailureCase> {
    CASES.iter().find(|c| c.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_print_the_summary_line() {
        let c = case("mtu-too-large").unwrap();
        assert_eq!(
            c.outcome.to_string(),
            "IBV_WC_SUCCESS (0) on one device / no completion between nodes"
        );
        assert_eq!(
            c.later.unwrap().1.to_string(),
            "IBV_WC_SUCCESS (0) on one device / IBV_WC_WR_FLUSH_ERR (5) between nodes"
        );
        let c = case("unregistered-lkey").unwrap();
        assert_eq!(
            c.outcome.statuses().collect::<Vec<_>>(),
            [("IBV_WC_LOC_QP_OP_ERR", 2), ("IBV_WC_LOC_PROT_ERR", 4)]
        );
        assert_eq!(c.outcome.words(), " / ");
    }

    #[test]
    fn names_are_unique_and_the_errno_cases_name_their_hint() {
        let mut seen = std::collections::HashSet::new();
        for c in CASES {
            assert!(seen.insert(c.name), "{} twice", c.name);
            // A case that fails a verb (an errno) names the hint lab gives for it.
            let errno = c.outcome.statuses().any(|(n, _)| !n.starts_with("IBV_"));
            assert_eq!(errno, c.hint.is_some(), "{}", c.name);
        }
        assert_eq!(CASES.len(), 17);
    }
}
