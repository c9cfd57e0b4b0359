//! Process CPU time, for chapters that compare what ways of waiting cost (chapter 04: busy
//! polling vs completion events; chapter 11).
//!
//! Wall-clock time ([`std::time::Instant`]) says how long something took; CPU time says how
//! much processor the process burned meanwhile. A busy-polling loop burns CPU for its whole
//! wall time; a thread asleep in `poll(2)` on a completion channel burns almost none, and
//! its voluntary context switches count how often it went to sleep.
//!
//! ```
//! let before = lab::cpu_time().unwrap();
//! let mut x = 0u64;
//! for i in 0..100_000u64 { x = x.wrapping_add(std::hint::black_box(i)); }
//! let used = lab::cpu_time().unwrap().since(&before);
//! // A chapter prints it through `course::show::cpu`, so that snapshots redact it
//! // ("cpu=1.234ms" -> "cpu=[CPU]").
//! println!("{:?} {x}", used.total());
//! ```

use std::time::Duration;

use crate::error::{Errno, Error, Result};

/// What `getrusage(RUSAGE_SELF)` reports for the whole process so far (all threads).
///
/// `total()` is precise (the kernel's scheduler clock); the split between `user` and
/// `system` is sampled at timer ticks, so take it as a proportion, not to the microsecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTime {
    /// Time spent running user code (`ru_utime`): a busy-poll loop lands here.
    pub user: Duration,
    /// Time spent in the kernel on the process's behalf (`ru_stime`): system calls such as
    /// rxe's post doorbell, `poll(2)` and `read(2)` on a completion channel.
    pub system: Duration,
    /// Voluntary context switches (`ru_nvcsw`): how often the process went to sleep waiting
    /// (e.g. in `poll(2)` for a completion event).
    pub voluntary_switches: u64,
    /// Involuntary context switches (`ru_nivcsw`): how often the scheduler took the CPU away.
    pub involuntary_switches: u64,
}

impl CpuTime {
    /// User + system time.
    pub fn total(&self) -> Duration {
        self.user + self.system
    }

    /// What was used between `earlier` and `self` (fields saturate at zero).
    pub fn since(&self, earlier: &CpuTime) -> CpuTime {
        CpuTime {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
            voluntary_switches: self
                .voluntary_switches
                .saturating_sub(earlier.voluntary_switches),
            involuntary_switches: self
                .involuntary_switches
                .saturating_sub(earlier.involuntary_switches),
        }
    }
}

/// The CPU time this process has used so far (`getrusage(2)` with `RUSAGE_SELF`). Take one
/// before and one after a piece of work and subtract with [`CpuTime::since`].
pub fn cpu_time() -> Result<CpuTime> {
    // SAFETY: rusage is plain data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-pointer for the duration of the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Err(Error::Os {
            call: "getrusage(RUSAGE_SELF)",
            errno: Errno::last(),
        });
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Ok(CpuTime {
        user: tv(ru.ru_utime),
        system: tv(ru.ru_stime),
        voluntary_switches: ru.ru_nvcsw.max(0) as u64,
        involuntary_switches: ru.ru_nivcsw.max(0) as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn spinning_uses_cpu_and_sleeping_switches() {
        // Spin until 10 ms of CPU are charged to us (deadline 10 s, for a loaded machine).
        let a = cpu_time().unwrap();
        let start = Instant::now();
        let mut x = 0u64;
        let mut spun = CpuTime::default();
        while start.elapsed() < Duration::from_secs(10) {
            for _ in 0..10_000 {
                x = x.wrapping_add(std::hint::black_box(1));
            }
            spun = cpu_time().unwrap().since(&a);
            if spun.total() >= Duration::from_millis(10) {
                break;
            }
        }
        std::hint::black_box(x);
        assert!(spun.total() >= Duration::from_millis(10), "{spun:?}");

        // Sleeping is a voluntary context switch. (Its CPU time is not asserted: RUSAGE_SELF
        // counts every thread, and other tests run in parallel.)
        let b = cpu_time().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let slept = cpu_time().unwrap().since(&b);
        assert!(slept.voluntary_switches >= 1, "{slept:?}");
    }

    #[test]
    fn since_saturates() {
        let later = CpuTime {
            user: Duration::from_millis(1),
            ..Default::default()
        };
        let earlier = CpuTime {
            user: Duration::from_millis(2),
            system: Duration::from_millis(1),
            voluntary_switches: 3,
            involuntary_switches: 0,
        };
        assert_eq!(later.since(&earlier), CpuTime::default());
        assert_eq!(earlier.total(), Duration::from_millis(3));
    }
}
