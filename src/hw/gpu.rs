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

impl DriverInfo {
    /// "580.65.06 (CUDA 13.0)", as a stamp records it.
    pub(crate) fn label(&self) -> String {
        format!(
            "{} (CUDA {})",
            self.driver_version, self.cuda_driver_version
        )
    }
}

/// One GPU's power limit: what the driver enforces, beside the board's default (a lower one
/// is a cap someone set, `nvidia-smi -pl`, which caps the clocks under load).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PowerLimit {
    pub index: u32,
    pub name: String,
    pub enforced_w: Option<f64>,
    pub default_w: Option<f64>,
}

impl PowerLimit {
    /// "0 NVIDIA H200: 700 W", "… 500 W, capped below its default 700 W", "… unknown".
    pub(crate) fn label(&self) -> String {
        let head = format!("{} {}", self.index, self.name);
        match (self.enforced_w, self.default_w) {
            (Some(e), Some(d)) if e + 0.5 < d => {
                format!("{head}: {e:.0} W, capped below its default {d:.0} W")
            }
            (Some(e), _) => format!("{head}: {e:.0} W"),
            (None, _) => format!("{head}: unknown"),
        }
    }
}

/// What every stamp says of the NVIDIA driver and the GPUs' power limits, read from NVML once
/// per process: the driver's label, each GPU's power limit; `None` and empty without NVML.
pub(crate) fn stamp_facts() -> &'static (Option<String>, Vec<String>) {
    static FACTS: std::sync::OnceLock<(Option<String>, Vec<String>)> = std::sync::OnceLock::new();
    FACTS.get_or_init(|| match GpuTelemetry::open() {
        Ok(t) => (
            Some(t.driver().label()),
            t.power_limits().iter().map(PowerLimit::label).collect(),
        ),
        Err(_) => (None, Vec::new()),
    })
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
    /// VRAM this process holds (NVML's per-process accounting); `None` when NVML lists no
    /// process with this PID, as in a container, whose PIDs are not the host's.
    pub vram_process_bytes: Option<u64>,
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    pub power_w: Option<f64>,
    pub temperature_c: Option<u32>,
    pub utilization_gpu_pct: Option<u32>,
    pub utilization_mem_pct: Option<u32>,
    /// Cumulative energy since the driver loaded, millijoules (Volta and newer).
    pub energy_mj: Option<u64>,
    /// The PCI bus id ("00000000:01:00.0"), which ties NVML's device to ggml's.
    pub pci_bus_id: Option<String>,
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
        let nvml = match Nvml::builder()
            .lib_path(OsStr::new("libnvidia-ml.so.1"))
            .init()
        {
            Err(NvmlError::LibloadingError(_)) => Nvml::init(),
            first => first,
        };
        nvml.map(|nvml| Self { nvml }).map_err(classify)
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

    /// Every GPU's power limit (a device NVML cannot open is left out).
    pub(crate) fn power_limits(&self) -> Vec<PowerLimit> {
        let count = self.nvml.device_count().unwrap_or(0);
        (0..count)
            .filter_map(|index| {
                let dev = self.nvml.device_by_index(index).ok()?;
                let watts = |mw: u32| f64::from(mw) / 1e3;
                Some(PowerLimit {
                    index,
                    name: dev.name().unwrap_or_else(|_| format!("GPU {index}")),
                    enforced_w: dev.enforced_power_limit().ok().map(watts),
                    default_w: dev.power_management_limit_default().ok().map(watts),
                })
            })
            .collect()
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
                let vram_process_bytes = dev.running_compute_processes().ok().and_then(|procs| {
                    // The sum of this process's entries; `None` when it has none.
                    procs
                        .iter()
                        .filter(|p| p.pid == pid)
                        .filter_map(|p| match p.used_gpu_memory {
                            UsedGpuMemory::Used(b) => Some(b),
                            UsedGpuMemory::Unavailable => None,
                        })
                        .reduce(|a, b| a + b)
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
                    pci_bus_id: dev.pci_info().ok().map(|p| p.bus_id),
                })
            })
            .collect()
    }
}

/// The light readings of the devices at `indices` (NVML's order), for the [`Sampler`]: no
/// process list, no memory query.
impl Probe for GpuTelemetry {
    fn read(&self, indices: &[u32]) -> Vec<Reading> {
        indices
            .iter()
            .filter_map(|&index| {
                let dev = self.nvml.device_by_index(index).ok()?;
                Some(Reading {
                    index,
                    energy_mj: dev.total_energy_consumption().ok(),
                    power_w: dev.power_usage().ok().map(|mw| f64::from(mw) / 1e3),
                    sm_clock_mhz: dev.clock_info(Clock::SM).ok(),
                    mem_clock_mhz: dev.clock_info(Clock::Memory).ok(),
                    temperature_c: dev.temperature(TemperatureSensor::Gpu).ok(),
                    utilization_pct: dev.utilization_rates().ok().map(|u| u.gpu),
                })
            })
            .collect()
    }
}

/// A PCI bus id as one key: NVML writes "00000000:01:00.0" (a 32-bit domain), CUDA and ggml
/// "0000:01:00.0" (lower case in ggml; "-v1" after it for a virtual device). `None` for a
/// string that is not `domain:bus:device.function` in hex.
pub(crate) fn bus_id_key(id: &str) -> Option<(u32, u8, u8, u8)> {
    let id = id.split_once("-v").map_or(id, |(base, _)| base).trim();
    let mut parts = id.split(':');
    let (domain, bus, dev_fn) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let (device, function) = dev_fn.split_once('.')?;
    Some((
        u32::from_str_radix(domain, 16).ok()?,
        u8::from_str_radix(bus, 16).ok()?,
        u8::from_str_radix(device, 16).ok()?,
        u8::from_str_radix(function, 16).ok()?,
    ))
}

/// Whether two bus ids (either writing, `None` for none) name one device; never for an id that
/// does not parse.
pub(crate) fn same_bus(a: Option<&str>, b: Option<&str>) -> bool {
    let key = a.and_then(bus_id_key);
    key.is_some() && b.and_then(bus_id_key) == key
}

/// NVML's indices of the devices with these bus ids (ggml's GPUs that a run used), in the
/// order given; `Err` names the first bus id NVML does not have (or that is not one), so a
/// figure is never taken from the wrong GPU.
pub(crate) fn nvml_indices(samples: &[GpuSample], bus_ids: &[String]) -> Result<Vec<u32>, String> {
    bus_ids
        .iter()
        .map(|id| {
            samples
                .iter()
                .find(|s| same_bus(Some(id), s.pci_bus_id.as_deref()))
                .map(|s| s.index)
                .ok_or_else(|| format!("no NVML device has the PCI bus id {id} that ggml reports"))
        })
        .collect()
}

/// The light figures of one device, polled while a run goes on.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Reading {
    /// NVML's index of the device.
    pub index: u32,
    pub energy_mj: Option<u64>,
    pub power_w: Option<f64>,
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    pub temperature_c: Option<u32>,
    pub utilization_pct: Option<u32>,
}

/// One poll of the devices a run uses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Poll {
    pub at: std::time::Instant,
    pub devices: Vec<Reading>,
}

impl Poll {
    /// The devices' energy counters summed, mJ; `None` when one has none (a partial sum would
    /// understate the energy).
    pub(crate) fn energy_mj(&self) -> Option<u64> {
        if self.devices.is_empty() {
            return None;
        }
        self.devices.iter().map(|d| d.energy_mj).sum()
    }

    /// The readings of the devices at these NVML indices, `None` unless every one was read.
    pub(crate) fn of(&self, indices: &[u32]) -> Option<Poll> {
        let devices: Option<Vec<Reading>> = indices
            .iter()
            .map(|i| self.devices.iter().find(|d| d.index == *i).copied())
            .collect();
        Some(Poll {
            at: self.at,
            devices: devices?,
        })
    }
}

/// What the [`Sampler`] reads: NVML, or a scripted source in tests.
pub(crate) trait Probe: Send + 'static {
    fn read(&self, indices: &[u32]) -> Vec<Reading>;
}

/// The time between polls: well under NVML's energy counter updates (tens of ms), and light
/// (six NVML queries a device, on a thread of its own).
pub(crate) const POLL_PERIOD: std::time::Duration = std::time::Duration::from_millis(10);

struct Shared {
    devices: Vec<u32>,
    polls: Vec<Poll>,
    stop: bool,
}

/// Polls the run's GPUs on a thread of its own while the run goes on, so that energy is taken
/// over exactly the timed windows and clocks, power and temperature are seen during the run
/// rather than once after it. Stops when dropped.
pub(crate) struct Sampler {
    shared: std::sync::Arc<(std::sync::Mutex<Shared>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sampler")
    }
}

impl Sampler {
    /// Starts polling the devices at `devices` (NVML indices) every `period`.
    pub(crate) fn start<P: Probe>(
        probe: P,
        devices: Vec<u32>,
        period: std::time::Duration,
    ) -> Self {
        let shared = std::sync::Arc::new((
            std::sync::Mutex::new(Shared {
                devices,
                polls: Vec::new(),
                stop: false,
            }),
            std::sync::Condvar::new(),
        ));
        let theirs = std::sync::Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("tokscope-gpu-sampler".into())
            .spawn(move || loop {
                let (lock, wake) = &*theirs;
                let devices = match lock.lock() {
                    Ok(s) if !s.stop => s.devices.clone(),
                    _ => return,
                };
                let devices = probe.read(&devices);
                let at = std::time::Instant::now();
                let Ok(mut s) = lock.lock() else { return };
                s.polls.push(Poll { at, devices });
                let Ok((s, _)) = wake.wait_timeout(s, period) else {
                    return;
                };
                if s.stop {
                    return;
                }
            })
            .ok();
        Self { shared, thread }
    }

    /// Drops the polls before `t` but the last one (a long bench keeps only what the next
    /// windows need).
    pub(crate) fn forget_before(&self, t: std::time::Instant) {
        if let Ok(mut s) = self.shared.0.lock() {
            let keep_from = s.polls.partition_point(|p| p.at < t).saturating_sub(1);
            s.polls.drain(..keep_from);
        }
    }

    /// The polls so far.
    pub(crate) fn polls(&self) -> Vec<Poll> {
        self.shared
            .0
            .lock()
            .map(|s| s.polls.clone())
            .unwrap_or_default()
    }

    /// Waits (at most `limit`) until the summed energy counter has moved after `t`, so that a
    /// window ending at `t` lies inside the counter's changes; the polls so far.
    pub(crate) fn polls_after(
        &self,
        t: std::time::Instant,
        limit: std::time::Duration,
    ) -> Vec<Poll> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let polls = self.polls();
            // The counter's value at `t` (else the first after it), and whether it has
            // moved since; a GPU without a counter has nothing to wait for.
            let reference = polls
                .iter()
                .rev()
                .find(|p| p.at <= t)
                .or_else(|| polls.iter().find(|p| p.at > t));
            let no_counter = polls.last().is_some_and(|p| p.energy_mj().is_none());
            let at_t = reference.and_then(Poll::energy_mj);
            let moved = polls
                .iter()
                .filter(|p| p.at > t)
                .filter_map(Poll::energy_mj)
                .any(|e| at_t.is_some_and(|b| e != b));
            if moved || no_counter || std::time::Instant::now() >= deadline || self.thread.is_none()
            {
                return polls;
            }
            std::thread::sleep(POLL_PERIOD);
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        let (lock, wake) = &*self.shared;
        if let Ok(mut s) = lock.lock() {
            s.stop = true;
        }
        wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// NVML's CUDA version integer (1000 × major + 10 × minor) as "major.minor".
pub(crate) fn cuda_version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_power_limit_below_the_default_is_called_a_cap() {
        let limit = |enforced_w, default_w| PowerLimit {
            index: 0,
            name: "NVIDIA H200".into(),
            enforced_w,
            default_w,
        };
        assert_eq!(
            limit(Some(700.0), Some(700.0)).label(),
            "0 NVIDIA H200: 700 W"
        );
        assert_eq!(
            limit(Some(500.0), Some(700.0)).label(),
            "0 NVIDIA H200: 500 W, capped below its default 700 W"
        );
        assert_eq!(limit(None, Some(700.0)).label(), "0 NVIDIA H200: unknown");
        let driver = DriverInfo {
            driver_version: "580.65.06".into(),
            cuda_driver_version: "13.0".into(),
        };
        assert_eq!(driver.label(), "580.65.06 (CUDA 13.0)");
    }

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
            pci_bus_id: Some("00000000:01:00.0".into()),
        }
    }

    #[test]
    fn nvml_and_ggml_bus_ids_name_the_same_device() {
        assert_eq!(bus_id_key("00000000:01:00.0"), Some((0, 1, 0, 0)));
        assert_eq!(bus_id_key("0000:01:00.0"), bus_id_key("00000000:01:00.0"));
        assert_eq!(
            bus_id_key("0000:c1:00.0-v1"),
            bus_id_key("00000000:C1:00.0")
        );
        assert_eq!(bus_id_key("CUDA0"), None);
        assert!(same_bus(Some("0000:41:00.0"), Some("00000000:41:00.0")));
        assert!(!same_bus(Some("CUDA0"), Some("CUDA0")));
        assert!(!same_bus(None, None));
        assert_eq!(bus_id_key("0:1:2:3.0"), None);
        let mut second = sample(Some(1));
        second.index = 1;
        second.pci_bus_id = Some("00000000:41:00.0".into());
        let nvml = [sample(Some(1)), second];
        // ggml sees only the second GPU (CUDA_VISIBLE_DEVICES=1): NVML's index 1, not 0.
        assert_eq!(nvml_indices(&nvml, &["0000:41:00.0".into()]), Ok(vec![1]));
        assert_eq!(
            nvml_indices(&nvml, &["0000:41:00.0".into(), "0000:01:00.0".into()]),
            Ok(vec![1, 0])
        );
        let missing = nvml_indices(&nvml, &["0000:81:00.0".into()]).unwrap_err();
        assert!(missing.contains("0000:81:00.0"), "{missing}");
    }

    /// A scripted counter: each read adds 5 mJ to device 0 and 7 to device 1.
    struct Counter(std::sync::atomic::AtomicU64);

    impl Probe for Counter {
        fn read(&self, indices: &[u32]) -> Vec<Reading> {
            let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            indices
                .iter()
                .map(|&i| Reading {
                    index: i,
                    energy_mj: Some(n * if i == 0 { 5 } else { 7 }),
                    power_w: Some(100.0),
                    ..Reading::default()
                })
                .collect()
        }
    }

    #[test]
    fn the_sampler_polls_the_chosen_devices_until_dropped() {
        let sampler = Sampler::start(
            Counter(std::sync::atomic::AtomicU64::new(0)),
            vec![0, 1],
            std::time::Duration::from_millis(2),
        );
        let t = std::time::Instant::now();
        let polls = sampler.polls_after(t, std::time::Duration::from_secs(5));
        let last = polls.last().unwrap();
        assert!(last.at > t);
        assert_eq!(last.devices.len(), 2);
        // Both counters summed, in order of the polls.
        let sums: Vec<u64> = polls.iter().filter_map(Poll::energy_mj).collect();
        assert!(sums.windows(2).all(|w| w[1] == w[0] + 12), "{sums:?}");
        assert_eq!(
            last.of(&[1]).and_then(|p| p.energy_mj()),
            last.devices[1].energy_mj
        );
        assert_eq!(last.of(&[1, 2]), None);
        sampler.forget_before(last.at);
        // One poll before the instant stays: a window starting there still has its start.
        let kept = sampler.polls();
        assert_eq!(
            kept.iter().filter(|p| p.at < last.at).count(),
            1,
            "{kept:?}"
        );
        assert!(kept.iter().any(|p| p.at == last.at));
        drop(sampler);
        assert_eq!(
            Poll {
                at: t,
                devices: vec![Reading::default()]
            }
            .energy_mj(),
            None
        );
    }

    #[test]
    fn cuda_versions() {
        assert_eq!(cuda_version_string(13000), "13.0");
        assert_eq!(cuda_version_string(12080), "12.8");
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
