//! The kernel rxe runs in, and the places where rxe's behaviour changed between kernels.
//!
//! rxe is part of the kernel (drivers/infiniband/sw/rxe), so a program on Linux 6.1 and the
//! same program on 6.12 talk to two different RDMA devices. The course measured rxe on Linux
//! 6.1 (Debian 12), 6.12.117 and 7.3.4 (Debian 13). Where they differ, a chapter asks
//! [`RxeChange::holds_on`] which behaviour this kernel has, prints which one it checks against,
//! and checks that.
//!
//! Each change is dated by the mainline release of the commit that made it, read in the
//! kernel's history (`docs/rxe-observed.md`, "On later kernels", names them). Kernels
//! between 6.1 and 6.12 were not run: for them the date comes from the source alone.

use std::fmt;

/// A Linux kernel version: the `major.minor` that `uname -r` starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelVersion {
    pub major: u32,
    pub minor: u32,
}

impl KernelVersion {
    pub const fn new(major: u32, minor: u32) -> KernelVersion {
        KernelVersion { major, minor }
    }

    /// Parses a release as `uname -r` prints it: `6.1.0-44-amd64`, `6.12.117+deb13-amd64`,
    /// `7.3.4+deb13-amd64`, `6.8.0-1017-azure` (the first two numbers count).
    pub fn parse(release: &str) -> Option<KernelVersion> {
        let mut it = release.trim().split(|c: char| !c.is_ascii_digit());
        let major = it.next()?.parse().ok()?;
        let minor = it.next()?.parse().ok()?;
        Some(KernelVersion { major, minor })
    }

    /// The kernel this process runs on (`/proc/sys/kernel/osrelease`).
    pub fn running() -> Result<KernelVersion, String> {
        let path = "/proc/sys/kernel/osrelease";
        let release = std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
        KernelVersion::parse(&release)
            .ok_or_else(|| format!("{path}: {:?} is not a kernel release", release.trim()))
    }
}

impl fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// One difference between rxe on Linux 6.1 and rxe on later kernels, measured on 6.12.117 and
/// 7.3.4 against 6.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RxeChange {
    /// A send WR that fails on a local check (an lkey that is not registered or belongs to
    /// another PD, an SGE outside its MR) completes with `IBV_WC_WR_FLUSH_ERR` from 6.4 on;
    /// on 6.1 the requester's own status came through: `IBV_WC_LOC_QP_OP_ERR` for a bad key,
    /// `IBV_WC_LOC_PROT_ERR` for a bad range. The QP goes to ERR on both.
    LocalErrorFlushed,
    /// rnr_retry 7 ("retry forever") waits forever from 6.10 on, whatever retry_cnt is,
    /// as the spec asks. On 6.1 the retransmit timer kept running through the RNR waits and
    /// used up retry_cnt: `IBV_WC_RETRY_EXC_ERR`, QP in ERR.
    RnrForeverOutlastsRetryCnt,
    /// `ibv_create_qp` reports the queue size rxe really gives (max_recv_wr 4 reads back 7:
    /// 2^3 slots, one kept empty) from 6.6 on; on 6.1 it read back the 4 asked for.
    QueueCapRounded,
    /// A packet the network stack refuses to send (bigger than the link's MTU: a path_mtu above
    /// the port's active_mtu, between two nodes) fails its WR from 6.10 on: the QP goes to
    /// ERR and the SEND completes with `IBV_WC_WR_FLUSH_ERR`. On 6.1 rxe tried it again,
    /// forever, and the QP stayed RTS: a silent hang.
    XmitErrorFailsWr,
}

impl RxeChange {
    /// In order of release.
    pub const ALL: [RxeChange; 4] = [
        RxeChange::LocalErrorFlushed,
        RxeChange::QueueCapRounded,
        RxeChange::RnrForeverOutlastsRetryCnt,
        RxeChange::XmitErrorFailsWr,
    ];

    /// The first mainline release with the change: the release of the commit that made it.
    pub const fn since(self) -> KernelVersion {
        match self {
            // f55efc2ed206 "RDMA/rxe: Remove qp->comp.state" and 98e891b5e4d9 "RDMA/rxe: Remove
            // qp->req.state" (v6.4): rxe_requester's error exit moves the QP to ERR, and
            // rxe_completer, seeing ERR, flushes the whole send queue (flush_send_wqe sets
            // IB_WC_WR_FLUSH_ERR) before the failed WQE's own status is looked at.
            RxeChange::LocalErrorFlushed => KernelVersion::new(6, 4),
            // e0ba8ff46704 "RDMA/rxe: Move work queue code to subroutines" (v6.6; also
            // backported to 6.4.y and 6.5.y): rxe_init_rq copies the rounded size back into
            // init->cap.
            RxeChange::QueueCapRounded => KernelVersion::new(6, 6),
            // 67f57892f9b2 "RDMA/rxe: Merge request and complete tasks" (v6.10): one task runs
            // the requester and then the completer, which re-arms the retransmit timer after
            // each RNR resend, so the timer no longer runs out during RNR waits.
            RxeChange::RnrForeverOutlastsRetryCnt => KernelVersion::new(6, 10),
            // 9cc6290991e6 "RDMA/rxe: Get rid of pkt resend on err" (v6.10): rxe_send returns the
            // IP stack's error (6.1 turned every one into -EAGAIN, and rxe_requester rolled the
            // packet back and tried again), and rxe_requester fails the WQE on it.
            RxeChange::XmitErrorFailsWr => KernelVersion::new(6, 10),
        }
    }

    /// The commit that made the change, as `id "title"`.
    pub const fn commit(self) -> &'static str {
        match self {
            RxeChange::LocalErrorFlushed => "98e891b5e4d9 \"RDMA/rxe: Remove qp->req.state\"",
            RxeChange::QueueCapRounded => {
                "e0ba8ff46704 \"RDMA/rxe: Move work queue code to subroutines\""
            }
            RxeChange::RnrForeverOutlastsRetryCnt => {
                "67f57892f9b2 \"RDMA/rxe: Merge request and complete tasks\""
            }
            RxeChange::XmitErrorFailsWr => {
                "9cc6290991e6 \"RDMA/rxe: Get rid of pkt resend on err\""
            }
        }
    }

    /// Does rxe on kernel `k` behave the new way?
    pub fn holds_on(self, k: KernelVersion) -> bool {
        k >= self.since()
    }

    /// The behaviour a chapter checks against on kernel `k`, as it prints it: "rxe from Linux
    /// 6.4 on" or "rxe before Linux 6.4".
    pub fn record(self, k: KernelVersion) -> String {
        if self.holds_on(k) {
            format!("rxe from Linux {} on", self.since())
        } else {
            format!("rxe before Linux {}", self.since())
        }
    }

    /// The newest change that holds on `k`, which names the set of behaviours `k` has (the
    /// changes come in order of release, so the newest one implies the others): `None` on
    /// 6.1's, `Some(6.10)` on 6.12 and 7.x. Snapshots of output that shows several changes are
    /// keyed by it.
    pub fn newest_on(k: KernelVersion) -> Option<KernelVersion> {
        RxeChange::ALL
            .iter()
            .map(|c| c.since())
            .filter(|&v| v <= k)
            .max()
    }

    /// A short name (snapshot suffixes, the summary table).
    pub const fn name(self) -> &'static str {
        match self {
            RxeChange::LocalErrorFlushed => "local-error-flushed",
            RxeChange::RnrForeverOutlastsRetryCnt => "rnr-forever-outlasts-retry-cnt",
            RxeChange::QueueCapRounded => "queue-cap-rounded",
            RxeChange::XmitErrorFailsWr => "xmit-error-fails-wr",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse_as_major_minor() {
        for (release, want) in [
            ("6.1.0-44-amd64", (6, 1)),
            ("6.12.117+deb13-amd64\n", (6, 12)),
            ("7.3.4+deb13-amd64", (7, 3)),
            ("6.8.0-1017-azure", (6, 8)),
            ("6.12", (6, 12)),
        ] {
            assert_eq!(
                KernelVersion::parse(release),
                Some(KernelVersion::new(want.0, want.1)),
                "{release}"
            );
        }
        for bad in ["", "linux", "6", "6.x"] {
            assert_eq!(KernelVersion::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn versions_order_numerically() {
        assert!(KernelVersion::new(6, 12) > KernelVersion::new(6, 9));
        assert!(KernelVersion::new(7, 0) > KernelVersion::new(6, 12));
    }

    #[test]
    fn the_measured_kernels_fall_on_their_side() {
        // Measured: none of the changes on 6.1, all of them on 6.12.117 and 7.3.4.
        for c in RxeChange::ALL {
            assert!(!c.holds_on(KernelVersion::new(6, 1)), "{c:?}");
            assert!(c.holds_on(KernelVersion::new(6, 12)), "{c:?}");
            assert!(c.holds_on(KernelVersion::new(7, 3)), "{c:?}");
        }
        let c = RxeChange::LocalErrorFlushed;
        assert_eq!(c.record(KernelVersion::new(6, 1)), "rxe before Linux 6.4");
        assert_eq!(c.record(KernelVersion::new(7, 3)), "rxe from Linux 6.4 on");
    }

    #[test]
    fn the_newest_change_names_a_kernels_set() {
        let v = KernelVersion::new;
        assert_eq!(RxeChange::newest_on(v(6, 1)), None);
        assert_eq!(RxeChange::newest_on(v(6, 5)), Some(v(6, 4)));
        // Ubuntu 24.04's 6.8: two of the three.
        assert_eq!(RxeChange::newest_on(v(6, 8)), Some(v(6, 6)));
        assert_eq!(RxeChange::newest_on(v(6, 12)), Some(v(6, 10)));
        assert_eq!(RxeChange::newest_on(v(7, 3)), Some(v(6, 10)));
        // ALL is in order of release (newest_on relies on it).
        let sinces: Vec<_> = RxeChange::ALL.iter().map(|c| c.since()).collect();
        let mut sorted = sinces.clone();
        sorted.sort();
        assert_eq!(sinces, sorted);
    }
}
