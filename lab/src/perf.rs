//! Measuring helpers for chapter 11 (performance): the CPU's time-stamp counter, and pinning
//! the calling thread to one CPU.
//!
//! * [`tsc`] reads the time-stamp counter (`rdtsc`), the clock perftest times with: it
//!   converts cycles to microseconds with the "cpu MHz" of `/proc/cpuinfo`, or with its own
//!   sample of the counter's rate when the two differ by more than 2% (perftest's
//!   `get_cpu_mhz`, src/get_clock.c). [`tsc_hz`] measures the rate against the monotonic
//!   clock, so a chapter can show which of the two perftest uses.
//! * [`set_affinity`] / [`affinity`] wrap `sched_setaffinity(2)` / `sched_getaffinity(2)`
//!   for the calling thread: the "one QP and CQ per pinned thread" advice, measured.
//!
//! Huge-page memory regions are [`crate::ProtectionDomain::reg_mr_huge`] (in `mr`).

use std::time::{Duration, Instant};

use crate::error::{Errno, Error, Result};

/// The time-stamp counter now (`rdtsc`): cycles since reset, at a constant rate on current
/// x86-64 CPUs ("constant_tsc"). Not serialising: good for intervals of microseconds and up.
#[cfg(target_arch = "x86_64")]
pub fn tsc() -> Option<u64> {
    // SAFETY: `rdtsc` has no preconditions on x86-64 (every x86-64 CPU has it); it only reads
    // a counter.
    Some(unsafe { std::arch::x86_64::_rdtsc() })
}

/// The time-stamp counter: not available on this architecture.
#[cfg(not(target_arch = "x86_64"))]
pub fn tsc() -> Option<u64> {
    None
}

/// The time-stamp counter's rate in Hz, measured against the monotonic clock
/// ([`Instant`]) over `sample` (spinning). `None` where there is no such counter.
pub fn tsc_hz(sample: Duration) -> Option<f64> {
    let (t0, c0) = (Instant::now(), tsc()?);
    while t0.elapsed() < sample {
        std::hint::spin_loop();
    }
    let (c1, t1) = (tsc()?, t0.elapsed());
    Some(c1.wrapping_sub(c0) as f64 / t1.as_secs_f64().max(1e-9))
}

/// Pins the calling thread to CPU `cpu` (`sched_setaffinity(2)` with pid 0).
pub fn set_affinity(cpu: usize) -> Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(Error::InvalidArgument(
            format!("CPU {cpu} is beyond CPU_SETSIZE").into(),
        ));
    }
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes one bit inside `set` (cpu < CPU_SETSIZE, checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(Error::Os {
            call: "sched_setaffinity",
            errno: Errno::last(),
        });
    }
    Ok(())
}

/// The CPUs the calling thread may run on (`sched_getaffinity(2)` with pid 0).
pub fn affinity() -> Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(Error::Os {
            call: "sched_getaffinity",
            errno: Errno::last(),
        });
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads one bit inside `set` (i < CPU_SETSIZE).
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect())
}

/// The CPU the calling thread runs on right now (`sched_getcpu(3)`).
pub fn current_cpu() -> Result<usize> {
    // SAFETY: no arguments; returns -1 with errno on failure.
    let c = unsafe { libc::sched_getcpu() };
    if c < 0 {
        return Err(Error::Os {
            call: "sched_getcpu",
            errno: Errno::last(),
        });
    }
    Ok(c as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counter_advances_and_has_a_rate() {
        if let Some(hz) = tsc_hz(Duration::from_millis(20)) {
            assert!(hz > 1e6, "{hz}");
        }
    }

    #[test]
    fn pinning_to_an_allowed_cpu_sticks() {
        let cpus = affinity().unwrap();
        assert!(!cpus.is_empty());
        let first = cpus[0];
        // In a thread of its own, so the test runner's other threads keep their mask.
        std::thread::spawn(move || {
            set_affinity(first).unwrap();
            assert_eq!(affinity().unwrap(), vec![first]);
            assert_eq!(current_cpu().unwrap(), first);
        })
        .join()
        .unwrap();
        assert!(set_affinity(libc::CPU_SETSIZE as usize).is_err());
    }
}
