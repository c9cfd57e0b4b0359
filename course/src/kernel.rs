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

/// A Linux kernel version: the `major.minor.patch` that `uname -r` starts with. The patch
/// level matters only for fixes a stable series got later (Debian 12 prints `6.1.0` whatever
/// its stable level is; no change below was backported to 6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl KernelVersion {
    /// `major.minor.0`.
    pub const fn new(major: u32, minor: u32) -> KernelVersion {
        KernelVersion {
            major,
            minor,
            patch: 0,
        }
    }

    /// Parses a release as `uname -r` prints it: `6.1.0-44-amd64`, `6.12.117+deb13-amd64`,
    /// `7.3.4+deb13-amd64`, `6.8.0-1017-azure` (a missing patch level is 0).
    pub fn parse(release: &str) -> Option<KernelVersion> {
        let mut it = release.trim().split(|c: char| !c.is_ascii_digit());
        let major = it.next()?.parse().ok()?;
        let minor = it.next()?.parse().ok()?;
        let patch = it.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        Some(KernelVersion {
            major,
            minor,
            patch,
        })
    }

    /// The kernel this process runs on (`/proc/sys/kernel/osrelease`).
    pub fn running() -> Result<KernelVersion, String> {
        let path = "/proc/sys/kernel/osrelease";
        let release = std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
        KernelVersion::parse(&release)
            .ok_or_else(|| format!("{path}: {:?} is not a kernel release", release.trim()))
    }
}

/// The running kernel's `CONFIG_HZ`, from its build configuration: `/run/lab-kernel-config` in
/// the lab's VMs (the harness puts the booted kernel's there, whichever kernel it is), else
/// `/boot/config-<release>` (a native host). `None` when neither can be read.
pub fn config_hz() -> Option<u64> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let config = std::fs::read_to_string("/run/lab-kernel-config")
        .or_else(|_| std::fs::read_to_string(format!("/boot/config-{}", release.trim())))
        .ok()?;
    config
        .lines()
        .find_map(|l| l.strip_prefix("CONFIG_HZ="))?
        .trim()
        .parse()
        .ok()
}

/// How long one try of rxe's retransmit timer really lasts for a QP's `timeout` attribute, on
/// a kernel ticking at `hz`: the nominal 4.096 us x 2^timeout in whole jiffies.
///
/// - `rxe_qp.c` `rxe_qp_from_attr`: `nsecs_to_jiffies(4096ULL << attr->timeout)`, which
///   truncates, and at least 1 jiffy;
/// - the retransmit timer is armed `jiffies + that` (`mod_timer`), and the timer wheel never
///   fires early: it rounds the expiry up to its granularity, one tick for expiries up to 63
///   jiffies away and eight for up to 504 (`kernel/time/timer.c` `calc_index`, `LVL_GRAN`).
///
/// So a try ends between `jiffies` and `jiffies + granularity` ticks after it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckTimer {
    /// The QP's `timeout` attribute (1-31; 0 means no timer at all).
    pub timeout: u8,
    /// The kernel's tick rate.
    pub hz: u64,
    /// `max(1, nsecs_to_jiffies(4096 << timeout))`.
    pub jiffies: u64,
    /// The timer wheel's granularity at that distance, in ticks.
    pub granularity: u64,
}

impl AckTimer {
    pub fn new(timeout: u8, hz: u64) -> AckTimer {
        let ns = 4096u64 << timeout.min(31);
        let jiffies = (ns * hz.max(1) / 1_000_000_000).max(1);
        // LVL_START(1) = 63, LVL_START(2) = 63 << 3 = 504, ...: each level is 8 times coarser.
        let mut granularity = 1;
        let mut start = 63;
        while jiffies >= start {
            granularity *= 8;
            start <<= 3;
        }
        AckTimer {
            timeout,
            hz,
            jiffies,
            granularity,
        }
    }

    /// The nominal time of one try, 4.096 us x 2^timeout, in milliseconds.
    pub fn nominal_ms(&self) -> f64 {
        (4096u64 << self.timeout.min(31)) as f64 / 1e6
    }

    /// The shortest and the longest a try lasts, in milliseconds.
    pub fn window_ms(&self) -> (f64, f64) {
        let tick = 1000.0 / self.hz.max(1) as f64;
        (
            self.jiffies as f64 * tick,
            (self.jiffies + self.granularity) as f64 * tick,
        )
    }
}

impl AckTimer {
    /// `rxe's timer: <the arithmetic>, 64.0-80.0 ms for 4`: what `tries` transmissions take on
    /// the running kernel, or why that cannot be said (its HZ unknown).
    pub fn explain(timeout: u8, tries: u32) -> String {
        match config_hz() {
            Some(hz) if hz > 0 => {
                let t = AckTimer::new(timeout, hz);
                let (lo, hi) = t.window_ms();
                let n = f64::from(tries);
                format!(
                    "rxe's timer: {t}, {:.1}-{:.1} ms for {tries}",
                    lo * n,
                    hi * n
                )
            }
            _ => "rxe's timer: this kernel's HZ is unknown (no kernel config to read)".into(),
        }
    }
}

impl fmt::Display for AckTimer {
    /// `4.096 us x 2^12 = 16.8 ms = 4 jiffies at HZ 250, up to 1 tick late: 16.0-20.0 ms a try`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (lo, hi) = self.window_ms();
        write!(
            f,
            "4.096 us x 2^{} = {:.2} ms = {} jiff{} at HZ {} (rounded down, at least 1), fired up \
             to {} tick{} late: {lo:.1}-{hi:.1} ms a try",
            self.timeout,
            self.nominal_ms(),
            self.jiffies,
            if self.jiffies == 1 { "y" } else { "ies" },
            self.hz,
            self.granularity,
            if self.granularity == 1 { "" } else { "s" },
        )
    }
}

impl fmt::Display for KernelVersion {
    /// `6.4`, or `6.12.13` when there is a patch level.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)?;
        if self.patch > 0 {
            write!(f, ".{}", self.patch)?;
        }
        Ok(())
    }
}

/// One difference between rxe on Linux 6.1 and rxe on later kernels, measured on 6.12.117 and
/// 7.3.4 against 6.1: in rxe itself, or in the kernel's RDMA core as a program on rxe sees it
/// (the connection manager's two).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RxeChange {
    /// rdma_cm's RoCE packet lifetime is 16 from 6.2 on (18 before), so a QP it connects gets
    /// `timeout` 17 (4.096 us x 2^17 = 537 ms) instead of 19 (2.1 s).
    CmaPacketLifetime16,
    /// A QP that rdma_cm connects carries `IBV_ACCESS_FLUSH_GLOBAL | IBV_ACCESS_FLUSH_PERSISTENT`
    /// in its access flags from 6.2 on, on a device that supports RDMA FLUSH, as rxe does from
    /// 6.2 on.
    CmFlushAccess,
    /// A send WR that fails on a local check (an lkey that is not registered or belongs to
    /// another PD, an SGE outside its MR) completes with `IBV_WC_WR_FLUSH_ERR` from 6.4 on;
    /// on 6.1 the requester's own status came through: `IBV_WC_LOC_QP_OP_ERR` for a bad key,
    /// `IBV_WC_LOC_PROT_ERR` for a bad range. The QP goes to ERR on both.
    LocalErrorFlushed,
    /// rnr_retry 7 ("retry forever") waits forever from 6.10 on, whatever retry_cnt is,
    /// as the spec asks. On 6.1 the retransmit timer kept running through the RNR waits and
    /// used up retry_cnt: `IBV_WC_RETRY_EXC_ERR`, QP in ERR.
    RnrForeverOutlastsRetryCnt,
    /// Every MR gets an rkey, equal to its lkey, from 6.5 on; before, an MR without a REMOTE_*
    /// flag had rkey 0. Either way a peer's READ, WRITE or atomic through it is refused: the
    /// responder checks the MR's access flags (rxe_resp.c `check_rkey`, rxe_mr.c `lookup_mr`).
    RkeyIsLkey,
    /// `ibv_create_qp` reports the queue size rxe really gives (max_recv_wr 4 reads back 7:
    /// 2^3 slots, one kept empty) from 6.6 on; on 6.1 it read back the 4 asked for.
    QueueCapRounded,
    /// A packet the network stack refuses to send (bigger than the link's MTU: a path_mtu above
    /// the port's active_mtu, between two nodes) fails its WR from 6.10 on: the QP goes to
    /// ERR and the SEND completes with `IBV_WC_WR_FLUSH_ERR`. On 6.1 rxe tried it again,
    /// forever, and the QP stayed RTS: a silent hang.
    XmitErrorFailsWr,
    /// The port's `max_msg_sz` reads 2 GiB (`RXE_PORT_MAX_MSG_SZ`, rxe_param.h); before the
    /// fix it read 8 MiB (0x800000).
    PortMaxMsgSz2GiB,
}

impl RxeChange {
    /// In order of mainline release.
    pub const ALL: [RxeChange; 8] = [
        RxeChange::CmaPacketLifetime16,
        RxeChange::CmFlushAccess,
        RxeChange::LocalErrorFlushed,
        RxeChange::RkeyIsLkey,
        RxeChange::QueueCapRounded,
        RxeChange::RnrForeverOutlastsRetryCnt,
        RxeChange::XmitErrorFailsWr,
        RxeChange::PortMaxMsgSz2GiB,
    ];

    /// The first mainline release with the change: the release of the commit that made it.
    pub const fn since(self) -> KernelVersion {
        match self {
            // fb4907f48725 "RDMA/cma: Change RoCE packet life time from 18 to 16" (v6.2):
            // CMA_IBOE_PACKET_LIFETIME in drivers/infiniband/core/cma.c; cm_init_av_by_path
            // (cm.c) makes the QP's timeout packet_life_time + 1.
            RxeChange::CmaPacketLifetime16 => KernelVersion::new(6, 2),
            // 8b4d379b399d "RDMA/cm: Make QP FLUSHABLE for supported device" (v6.2):
            // cm_init_qp_init_attr (cm.c) adds the FLUSH rights when the device has the
            // capability, which 124011e6e933 "RDMA/rxe: Enable RDMA FLUSH capability for rxe
            // device" (v6.2) gave rxe.
            RxeChange::CmFlushAccess => KernelVersion::new(6, 2),
            // f55efc2ed206 "RDMA/rxe: Remove qp->comp.state" and 98e891b5e4d9 "RDMA/rxe: Remove
            // qp->req.state" (v6.4): rxe_requester's error exit moves the QP to ERR, and
            // rxe_completer, seeing ERR, flushes the whole send queue (flush_send_wqe sets
            // IB_WC_WR_FLUSH_ERR) before the failed WQE's own status is looked at.
            RxeChange::LocalErrorFlushed => KernelVersion::new(6, 4),
            // 86a3fb55bc4f "RDMA/rxe: Let rkey == lkey for local access" (v6.5): rxe_mr_init
            // sets `mr->rkey = key` whatever the access flags (6.1: `(access &
            // IB_ACCESS_REMOTE) ? lkey : 0`).
            RxeChange::RkeyIsLkey => KernelVersion::new(6, 5),
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
            // db03b70969aa "RDMA/rxe: Fix mismatched max_msg_sz" (v6.14; backports below).
            RxeChange::PortMaxMsgSz2GiB => KernelVersion::new(6, 14),
        }
    }

    /// The stable releases that got the change before its mainline release: a kernel of that
    /// series at or past that patch level has it too.
    pub const fn backports(self) -> &'static [KernelVersion] {
        const MAX_MSG_SZ: &[KernelVersion] = &[
            KernelVersion {
                major: 6,
                minor: 6,
                patch: 76,
            },
            KernelVersion {
                major: 6,
                minor: 12,
                patch: 13,
            },
            KernelVersion {
                major: 6,
                minor: 13,
                patch: 2,
            },
        ];
        match self {
            RxeChange::PortMaxMsgSz2GiB => MAX_MSG_SZ,
            // e0ba8ff46704 went to 6.4.y and 6.5.y too, at levels not traced: those series
            // count as without it.
            _ => &[],
        }
    }

    /// The commit that made the change, as `id "title"`.
    pub const fn commit(self) -> &'static str {
        match self {
            RxeChange::CmaPacketLifetime16 => {
                "fb4907f48725 \"RDMA/cma: Change RoCE packet life time from 18 to 16\""
            }
            RxeChange::CmFlushAccess => {
                "8b4d379b399d \"RDMA/cm: Make QP FLUSHABLE for supported device\""
            }
            RxeChange::LocalErrorFlushed => "98e891b5e4d9 \"RDMA/rxe: Remove qp->req.state\"",
            RxeChange::RkeyIsLkey => "86a3fb55bc4f \"RDMA/rxe: Let rkey == lkey for local access\"",
            RxeChange::QueueCapRounded => {
                "e0ba8ff46704 \"RDMA/rxe: Move work queue code to subroutines\""
            }
            RxeChange::RnrForeverOutlastsRetryCnt => {
                "67f57892f9b2 \"RDMA/rxe: Merge request and complete tasks\""
            }
            RxeChange::XmitErrorFailsWr => {
                "9cc6290991e6 \"RDMA/rxe: Get rid of pkt resend on err\""
            }
            RxeChange::PortMaxMsgSz2GiB => "db03b70969aa \"RDMA/rxe: Fix mismatched max_msg_sz\"",
        }
    }

    /// Does rxe on kernel `k` behave the new way?
    pub fn holds_on(self, k: KernelVersion) -> bool {
        k >= self.since()
            || self
                .backports()
                .iter()
                .any(|b| (b.major, b.minor) == (k.major, k.minor) && k.patch >= b.patch)
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

    /// For output that shows several changes (none of them backported): the newest of
    /// `changes` that holds on `k`, which names the set `k` has (the changes come in order of
    /// release, so the newest implies the older ones). `None` on 6.1; chapter 08's four give
    /// `Some(6.10)` on 6.12 and 7.x. Snapshots of such output are keyed by it.
    pub fn newest_on(changes: &[RxeChange], k: KernelVersion) -> Option<KernelVersion> {
        changes
            .iter()
            .filter(|c| c.holds_on(k))
            .map(|c| c.since())
            .max()
    }

    /// A short name (snapshot suffixes, the summary table).
    pub const fn name(self) -> &'static str {
        match self {
            RxeChange::CmaPacketLifetime16 => "cma-packet-lifetime-16",
            RxeChange::CmFlushAccess => "cm-flush-access",
            RxeChange::LocalErrorFlushed => "local-error-flushed",
            RxeChange::RnrForeverOutlastsRetryCnt => "rnr-forever-outlasts-retry-cnt",
            RxeChange::QueueCapRounded => "queue-cap-rounded",
            RxeChange::RkeyIsLkey => "rkey-is-lkey",
            RxeChange::XmitErrorFailsWr => "xmit-error-fails-wr",
            RxeChange::PortMaxMsgSz2GiB => "port-max-msg-sz-2gib",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AckTimer;

    #[test]
    fn ack_timer_in_jiffies() {
        // timeout 8: 1.05 ms, below one jiffy at 250 Hz: 1 jiffy, 4-8 ms a try.
        let t = AckTimer::new(8, 250);
        assert_eq!((t.jiffies, t.granularity), (1, 1));
        assert_eq!(t.window_ms(), (4.0, 8.0));
        // timeout 12: 16.8 ms, truncated to 4 jiffies: 16-20 ms a try.
        assert_eq!(AckTimer::new(12, 250).window_ms(), (16.0, 20.0));
        // timeout 14: 67.1 ms, 16 jiffies: 64-68 ms.
        assert_eq!(AckTimer::new(14, 250).window_ms(), (64.0, 68.0));
        // timeout 16: 268.4 ms, 67 jiffies, past 63: the wheel's second level, 8 ticks.
        let t = AckTimer::new(16, 250);
        assert_eq!((t.jiffies, t.granularity), (67, 8));
        assert_eq!(
            AckTimer::new(12, 250).to_string(),
            "4.096 us x 2^12 = 16.78 ms = 4 jiffies at HZ 250 (rounded down, at least 1), fired \
             up to 1 tick late: 16.0-20.0 ms a try"
        );
    }

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
            let got = KernelVersion::parse(release).unwrap_or_else(|| panic!("{release}"));
            assert_eq!((got.major, got.minor), want, "{release}");
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
        let k = |s| KernelVersion::parse(s).unwrap();
        for c in RxeChange::ALL {
            assert!(!c.holds_on(k("6.1.0-44-amd64")), "{c:?}");
            assert!(c.holds_on(k("6.12.117+deb13-amd64")), "{c:?}");
            assert!(c.holds_on(k("7.3.4+deb13-amd64")), "{c:?}");
        }
        let c = RxeChange::LocalErrorFlushed;
        assert_eq!(c.record(KernelVersion::new(6, 1)), "rxe before Linux 6.4");
        assert!(KernelVersion::parse("6.12.117").unwrap() > KernelVersion::new(6, 12));
        assert_eq!(c.record(KernelVersion::new(7, 3)), "rxe from Linux 6.4 on");
    }

    #[test]
    fn backports_count_from_their_patch_level() {
        let c = RxeChange::PortMaxMsgSz2GiB;
        let k = |s| KernelVersion::parse(s).unwrap();
        assert!(!c.holds_on(k("6.1.0-44-amd64")));
        assert!(!c.holds_on(k("6.6.75")));
        assert!(c.holds_on(k("6.6.76")));
        assert!(!c.holds_on(k("6.12.12")));
        assert!(c.holds_on(k("6.12.117+deb13-amd64")));
        assert!(!c.holds_on(k("6.8.0-1017-azure")));
        assert!(c.holds_on(k("6.14.0")));
        assert!(c.holds_on(k("7.3.4+deb13-amd64")));
        assert_eq!(k("6.12.13").to_string(), "6.12.13");
        assert_eq!(c.since().to_string(), "6.14");
    }

    #[test]
    fn the_newest_change_names_a_kernels_set() {
        let v = KernelVersion::new;
        let four = &[
            RxeChange::LocalErrorFlushed,
            RxeChange::QueueCapRounded,
            RxeChange::RnrForeverOutlastsRetryCnt,
            RxeChange::XmitErrorFailsWr,
        ];
        assert_eq!(RxeChange::newest_on(four, v(6, 1)), None);
        assert_eq!(RxeChange::newest_on(four, v(6, 5)), Some(v(6, 4)));
        // Ubuntu 24.04's 6.8: two of the four.
        assert_eq!(RxeChange::newest_on(four, v(6, 8)), Some(v(6, 6)));
        assert_eq!(RxeChange::newest_on(four, v(6, 12)), Some(v(6, 10)));
        assert_eq!(RxeChange::newest_on(four, v(7, 3)), Some(v(6, 10)));
        // ALL is in order of release (newest_on relies on it).
        let sinces: Vec<_> = RxeChange::ALL.iter().map(|c| c.since()).collect();
        let mut sorted = sinces.clone();
        sorted.sort();
        assert_eq!(sinces, sorted);
    }
}
