//! Summary statistics of a set of samples: median, p99, standard deviation.
//!
//! Percentiles use the nearest-rank method on the sorted samples: the p-th percentile is the
//! smallest sample with at least p % of the samples at or below it (so the p99 of 20 samples
//! is the largest one). No interpolation: every figure printed is a value that was measured.

use std::time::Duration;

/// Median, p99, standard deviation, minimum and maximum of `n` samples (in the samples' unit:
/// nanoseconds for latencies, bytes per second for rates).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    pub n: usize,
    pub median: f64,
    pub p99: f64,
    pub stdev: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    /// The statistics of `samples` (which it sorts). `None` for no samples.
    pub fn of(samples: &mut [f64]) -> Option<Stats> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_by(f64::total_cmp);
        let n = samples.len();
        let mean = samples.iter().sum::<f64>() / n as f64;
        // The sample standard deviation (n - 1); 0 for a single sample.
        let var = if n > 1 {
            samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        Some(Stats {
            n,
            median: percentile(samples, 50.0),
            p99: percentile(samples, 99.0),
            stdev: var.sqrt(),
            min: samples[0],
            max: samples[n - 1],
        })
    }

    /// The statistics of durations, in nanoseconds.
    pub fn of_durations(samples: &[Duration]) -> Option<Stats> {
        let mut v: Vec<f64> = samples.iter().map(|d| d.as_nanos() as f64).collect();
        Stats::of(&mut v)
    }
}

/// Nearest-rank percentile of sorted, non-empty `sorted`.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Nanoseconds (as the stats hold them) back to a duration.
pub fn ns(v: f64) -> Duration {
    Duration::from_nanos(v.max(0.0).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        let s = Stats::of(&mut v).unwrap();
        assert_eq!((s.median, s.p99, s.min, s.max), (50.0, 99.0, 1.0, 100.0));
        let mut few = vec![3.0, 1.0, 2.0];
        let s = Stats::of(&mut few).unwrap();
        assert_eq!((s.median, s.p99), (2.0, 3.0));
        assert!((s.stdev - 1.0).abs() < 1e-9);
        assert_eq!(Stats::of(&mut []), None);
        assert_eq!(Stats::of(&mut [5.0]).unwrap().stdev, 0.0);
    }
}
