//! Probes of the machine: a memory-bandwidth copy probe (the "measured" bandwidth beside the
//! datasheet value) and the CPU's name. Timing lives here, not in the pure metrics module.

pub mod gpu;

use std::time::Instant;

use crate::metrics::roofline::{Bandwidth, BandwidthSource};

/// Measure main-memory bandwidth with large copies: the best of `repeats` copies of a
/// `buffer_bytes` buffer, counting each byte twice (read and written), as STREAM's copy does.
pub fn measure_cpu_bandwidth(buffer_bytes: usize, repeats: usize) -> Bandwidth {
    let len = buffer_bytes.max(1 << 20) / 8;
    let src: Vec<u64> = (0..len as u64).collect();
    let mut dst = vec![0u64; len];
    // Touch the destination once so page faults are not timed.
    dst.copy_from_slice(&src);
    let mut best = f64::INFINITY;
    for _ in 0..repeats.max(1) {
        let t = Instant::now();
        dst.copy_from_slice(&src);
        std::hint::black_box(&dst);
        best = best.min(t.elapsed().as_secs_f64());
    }
    let bytes = 2.0 * (len * 8) as f64;
    Bandwidth {
        bytes_per_s: if best > 0.0 { bytes / best } else { 0.0 },
        source: BandwidthSource::Measured {
            method: format!(
                "CPU copy probe, {} MiB × {}, best",
                (len * 8) >> 20,
                repeats.max(1)
            ),
        },
    }
}

/// The peak memory bandwidth to compare decode with: the configured value, else the datasheet
/// value of the first GPU (by name), else, on the CPU, a measured copy probe. `None` for a GPU
/// not in the table (a CPU probe would say nothing about it).
pub fn peak_bandwidth(
    configured_gb_s: Option<f64>,
    devices: &[String],
    gpu: bool,
) -> Option<Bandwidth> {
    if let Some(gb) = configured_gb_s {
        return Some(Bandwidth {
            bytes_per_s: gb * 1e9,
            source: BandwidthSource::Config,
        });
    }
    if gpu {
        return devices
            .iter()
            .find_map(|d| crate::metrics::roofline::datasheet_bandwidth(d));
    }
    Some(measure_cpu_bandwidth(64 << 20, 5))
}

/// The CPU's model name (Linux `/proc/cpuinfo`), when known.
pub fn cpu_name() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_probe_gives_a_plausible_labelled_figure() {
        let bw = measure_cpu_bandwidth(8 << 20, 3);
        // Anything from 100 MB/s to 10 TB/s is a machine; NaN or zero is a bug.
        assert!(
            bw.bytes_per_s > 1e8 && bw.bytes_per_s < 1e13,
            "{}",
            bw.bytes_per_s
        );
        assert!(bw.source.label().starts_with("measured"));
    }
}
