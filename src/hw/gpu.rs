//! Live NVIDIA GPU telemetry through NVML (`nvml-wrapper`, which loads `libnvidia-ml` at run
//! time, so nothing is needed at build time and a machine without the driver simply has no
//! telemetry): VRAM used by this process and in total, SM and memory clocks, power,
//! temperature, utilisation, and the cumulative energy counter that `metrics::energy` turns
//! into joules per token.

use std::ffi::OsStr;

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use serde::Serialize;

/// What the device pane and the bench rows say where there is no NVML.
pub(crate) const NO_NVML: &str = "no NVIDIA driver (NVML not found)";

/// Why there is no telemetry.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GpuTelemetryError {
    /// libnvidia-ml is not installed: no NVIDIA driver on this machine.
    #[error("{NO_NVML}")]
    NotFound,
    /// The library is there but the driver is not running or refused.
    #[error("NVIDIA driver present but NVML failed: {0}")]
    Nvml(String),
}

/// The driver as NVML reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct DriverInfo {
    pub driver_version: String,
    /// The CUDA version the driver supports, e.g. "13.0".
    pub cuda_driver_version: String,
}

/// One reading of one GPU. Fields NVML does not report on this device are `None`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct GpuSample {
    pub index: u32,
    pub name: String,
    /// "9.0" for an H100/H200.
    pub compute_capability: Option<String>,
    pub vram_total_bytes: Option<u64>,
    pub vram_used_bytes: Option<u64>,
    /// VRAM this process holds (NVML's per-process accounting).
    pub vram_process_bytes: Option<u64>,
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    pub power_w: Option<f64>,
    pub temperature_c: Option<u32>,
    pub utilization_gpu_pct: Option<u32>,
    pub utilization_mem_pct: Option<u32>,
    /// Cumulative energy since the driver loaded, millijoules (Volta and newer).
    pub energy_mj: Option<u64>,
}

/// An open NVML session.
pub(crate) struct GpuTelemetry {
    nvml: Nvml,
}

impl std::fmt::Debug for GpuTelemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GpuTelemetry")
    }
}

fn classify(e: NvmlError) -> GpuTelemetryError {
    match e {
        NvmlError::LibloadingError(_) | NvmlError::LibraryNotFound => GpuTelemetryError::NotFound,
        other => GpuTelemetryError::Nvml(other.to_string()),
    }
}

impl GpuTelemetry {
    /// Loads NVML: the driver's `libnvidia-ml.so.1` (what the driver installs), else the
    /// unversioned name (development installs).
    pub(crate) fn open() -> Result<Self, GpuTelemetryError> {
        let first = Nvml::builder()
            .lib_path(OsStr::new("libnvidia-ml.so.1"))
            .init();
        match first {
            Ok(nvml) => Ok(Self { nvml }),
            Err(NvmlError::LibloadingError(_)) => {
                Nvml::init().map(|nvml| Self { nvml }).map_err(classify)
            }
            Err(e) => Err(classify(e)),
        }
    }

    pub(crate) fn driver(&self) -> DriverInfo {
        let cuda = self.nvml.sys_cuda_driver_version().ok();
        DriverInfo {
            driver_version: self
                .nvml
                .sys_driver_version()
                .unwrap_or_else(|_| "?".to_owned()),
            cuda_driver_version: cuda.map_or_else(|| "?".to_owned(), cuda_version_string),
        }
    }

    /// One reading of every GPU NVML sees (a device it cannot open is left out).
    pub(crate) fn sample(&self) -> Vec<GpuSample> {
        let count = self.nvml.device_count().unwrap_or(0);
        let pid = std::process::id();
        (0..count)
            .filter_map(|index| {
                let dev = self.nvml.device_by_index(index).ok()?;
                let memory = dev.memory_info().ok();
                let utilization = dev.utilization_rates().ok();
                let vram_process_bytes = dev.running_compute_processes().ok().map(|procs| {
                    procs
                        .iter()
                        .filter(|p| p.pid == pid)
                        .map(|p| match p.used_gpu_memory {
                            UsedGpuMemory::Used(b) => b,
                            UsedGpuMemory::Unavailable => 0,
                        })
                        .sum()
                });
                Some(GpuSample {
                    index,
                    name: dev.name().unwrap_or_else(|_| format!("GPU {index}")),
                    compute_capability: dev
                        .cuda_compute_capability()
                        .ok()
                        .map(|c| format!("{}.{}", c.major, c.minor)),
                    vram_total_bytes: memory.as_ref().map(|m| m.total),
                    vram_used_bytes: memory.as_ref().map(|m| m.used),
                    vram_process_bytes,
                    sm_clock_mhz: dev.clock_info(Clock::SM).ok(),
                    mem_clock_mhz: dev.clock_info(Clock::Memory).ok(),
                    power_w: dev.power_usage().ok().map(|mw| f64::from(mw) / 1e3),
                    temperature_c: dev.temperature(TemperatureSensor::Gpu).ok(),
                    utilization_gpu_pct: utilization.as_ref().map(|u| u.gpu),
                    utilization_mem_pct: utilization.as_ref().map(|u| u.memory),
                    energy_mj: dev.total_energy_consumption().ok(),
                })
            })
            .collect()
    }
}

/// NVML's CUDA version integer (1000 × major + 10 × minor) as "major.minor".
pub(crate) fn cuda_version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// The energy counters of all GPUs summed, millijoules; `None` if any GPU lacks one (a partial
/// sum would understate the energy).
pub(crate) fn total_energy_mj(samples: &[GpuSample]) -> Option<u64> {
    if samples.is_empty() {
        return None;
    }
    samples.iter().map(|s| s.energy_mj).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(energy_mj: Option<u64>) -> GpuSample {
        GpuSample {
            index: 0,
            name: "NVIDIA H200".into(),
            compute_capability: Some("9.0".into()),
            vram_total_bytes: Some(141_000_000_000),
            vram_used_bytes: Some(61_200_000_000),
            vram_process_bytes: Some(17_000_000_000),
            sm_clock_mhz: Some(1980),
            mem_clock_mhz: Some(3201),
            power_w: Some(412.4),
            temperature_c: Some(63),
            utilization_gpu_pct: Some(97),
            utilization_mem_pct: Some(80),
            energy_mj,
        }
    }

    #[test]
    fn cuda_versions() {
        assert_eq!(cuda_version_string(13000), "13.0");
        assert_eq!(cuda_version_string(12080), "12.8");
    }

    #[test]
    fn energy_is_summed_only_when_every_gpu_has_a_counter() {
        assert_eq!(
            total_energy_mj(&[sample(Some(5)), sample(Some(7))]),
            Some(12)
        );
        assert_eq!(total_energy_mj(&[sample(Some(5)), sample(None)]), None);
        assert_eq!(total_energy_mj(&[]), None);
    }

    /// Real: on a machine without the NVIDIA driver (this project's CI) opening NVML fails
    /// with the one sentence the pane shows; with a driver it reads at least one GPU.
    #[test]
    fn open_says_no_driver_or_reads_a_gpu() {
        match GpuTelemetry::open() {
            Err(GpuTelemetryError::NotFound) => {
                assert_eq!(GpuTelemetryError::NotFound.to_string(), NO_NVML);
            }
            Err(GpuTelemetryError::Nvml(why)) => assert!(!why.is_empty()),
            Ok(t) => {
                let samples = t.sample();
                assert!(!samples.is_empty());
                assert!(!t.driver().driver_version.is_empty());
            }
        }
    }
}
