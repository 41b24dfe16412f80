//! A device's memory bandwidth measured through ggml's own backend, the way the decode reads
//! it: two tensors in the device's own buffer and large device-to-device copies between them,
//! sustained: each timed window queues as many copies as fill about [`MIN_WINDOW_S`]
//! (`ggml_backend_tensor_copy_async` on one backend, which on CUDA is a `cudaMemcpyAsync` device
//! to device on the backend's stream, so the copies run back to back), with the device
//! synchronised before the clock starts and after the last copy; warm-up windows first (up to
//! three, each recounting the copies from the one before until a window lasts that long), the
//! best of several windows kept. A 512 MiB copy takes about 0.25 ms on an H200: timing single
//! copies around two synchronisations measured the synchronisations as much as the memory.
//! The clock is the host's (ggml's events carry no timing, so no device-side timer is reachable
//! through it); over a window of 100 ms or more the synchronisation's microseconds are below
//! 0.1%. A copy reads every byte once and writes it once, so the rate counts 2 × size
//! (STREAM's copy convention). The datasheet figure is shown beside it.
//!
//! The same code runs on any ggml device; the tests run it on the CPU device (where the copy
//! is a `memcpy`), so the path is exercised on every machine.

use std::ffi::CString;
use std::time::Instant;

use llama_cpp_sys_2 as sys;

use crate::metrics::roofline::{Bandwidth, BandwidthSource};

/// The probe's default size per tensor: well past any GPU's last-level cache (an H200 has
/// 60 MiB of L2), small enough to fit beside nothing else on a 4 GiB card.
pub(crate) const DEVICE_PROBE_BYTES: usize = 512 << 20;
/// Timed windows after a warm-up one; the best is kept.
pub(crate) const DEVICE_PROBE_RUNS: usize = 5;
/// The shortest timed window, seconds: enough copies are queued to fill it.
pub(crate) const MIN_WINDOW_S: f64 = 0.1;
/// The most copies one window queues (a device far faster than any known is still bounded).
const MAX_COPIES: usize = 100_000;

/// Why a device could not be measured.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum DeviceProbeError {
    #[error("no ggml device named `{0}`")]
    Device(String),
    #[error("ggml could not start a backend on `{0}`")]
    Backend(String),
    #[error("could not allocate 2 × {mib} MiB on `{device}` for the bandwidth probe")]
    Memory { device: String, mib: usize },
    #[error("the bandwidth probe on `{0}` took no measurable time")]
    Time(String),
}

/// One measurement.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeviceCopyProbe {
    /// ggml's device name ("CUDA0", "CPU").
    pub device: String,
    /// Bytes per tensor (one copy moves this many bytes, reading and writing them).
    pub bytes: usize,
    pub runs: usize,
    /// Copies queued per timed window.
    pub copies: usize,
    /// The best window's length, seconds (sized from a calibration copy to last about
    /// `MIN_WINDOW_S`, unless `MAX_COPIES` capped it).
    pub window_s: f64,
    /// The best window's rate, counting 2 × `bytes` per copy.
    pub bytes_per_s: f64,
}

impl DeviceCopyProbe {
    /// The figure with its method, and the datasheet value beside it when there is one.
    pub(crate) fn bandwidth(&self, datasheet: Option<&Bandwidth>) -> Bandwidth {
        let mut method = format!(
            "ggml device copy on {}, 2 × {} MiB, best of {} windows of {} copies (≥ {:.0} ms each)",
            self.device,
            self.bytes >> 20,
            self.runs,
            self.copies,
            MIN_WINDOW_S * 1e3
        );
        if let Some(d) = datasheet {
            method.push_str(&format!(
                "; {}: {:.0} GB/s",
                d.source.label(),
                d.bytes_per_s / 1e9
            ));
        }
        Bandwidth {
            bytes_per_s: self.bytes_per_s,
            source: BandwidthSource::Measured { method },
        }
    }
}

/// Frees what the probe allocated, in reverse order, whatever happens.
struct Owned {
    backend: sys::ggml_backend_t,
    ctx: *mut sys::ggml_context,
    buffer: sys::ggml_backend_buffer_t,
}

impl Drop for Owned {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: each pointer is either null or was returned by the matching ggml allocator
        // and is freed exactly once, here.
        unsafe {
            if !self.buffer.is_null() {
                sys::ggml_backend_buffer_free(self.buffer);
            }
            if !self.ctx.is_null() {
                sys::ggml_free(self.ctx);
            }
            if !self.backend.is_null() {
                sys::ggml_backend_free(self.backend);
            }
        }
    }
}

/// Measures `device`'s copy bandwidth with two tensors of `bytes` each: `runs` timed windows of
/// at least `MIN_WINDOW_S` of copies, after a warm-up. llama.cpp's backend must be initialised
/// (`crate::llama::backend()`).
#[allow(unsafe_code)]
pub(crate) fn measure_device_copy(
    device: &str,
    bytes: usize,
    runs: usize,
) -> Result<DeviceCopyProbe, DeviceProbeError> {
    let name = CString::new(device).map_err(|_| DeviceProbeError::Device(device.into()))?;
    let bytes = bytes.max(1);
    // SAFETY: plain calls into ggml's C API; every returned pointer is checked for null before
    // use, the tensors live in `ctx` and `buffer`, which outlive every use below, and `Owned`
    // frees them once.
    unsafe {
        let dev = sys::ggml_backend_dev_by_name(name.as_ptr());
        if dev.is_null() {
            return Err(DeviceProbeError::Device(device.into()));
        }
        let mut owned = Owned {
            backend: sys::ggml_backend_dev_init(dev, std::ptr::null()),
            ctx: std::ptr::null_mut(),
            buffer: std::ptr::null_mut(),
        };
        if owned.backend.is_null() {
            return Err(DeviceProbeError::Backend(device.into()));
        }
        owned.ctx = sys::ggml_init(sys::ggml_init_params {
            mem_size: 2 * sys::ggml_tensor_overhead() + 1024,
            mem_buffer: std::ptr::null_mut(),
            no_alloc: true,
        });
        let out_of_memory = || DeviceProbeError::Memory {
            device: device.into(),
            mib: bytes >> 20,
        };
        if owned.ctx.is_null() {
            return Err(out_of_memory());
        }
        let n = i64::try_from(bytes).map_err(|_| out_of_memory())?;
        let src = sys::ggml_new_tensor_1d(owned.ctx, sys::GGML_TYPE_I8, n);
        let dst = sys::ggml_new_tensor_1d(owned.ctx, sys::GGML_TYPE_I8, n);
        if src.is_null() || dst.is_null() {
            return Err(out_of_memory());
        }
        owned.buffer = sys::ggml_backend_alloc_ctx_tensors_from_buft(
            owned.ctx,
            sys::ggml_backend_dev_buffer_type(dev),
        );
        if owned.buffer.is_null() {
            return Err(out_of_memory());
        }
        // Touch both tensors, so that no page is first faulted in inside a timed copy.
        sys::ggml_backend_tensor_memset(src, 0x5a, 0, bytes);
        sys::ggml_backend_tensor_memset(dst, 0, 0, bytes);
        // `copies` copies back to back on the backend's queue, timed from a synchronised device
        // to the end of the last (alternating directions, so no copy is of a copy's result).
        let window = |copies: usize| {
            sys::ggml_backend_synchronize(owned.backend);
            let started = Instant::now();
            for i in 0..copies {
                let (from, to) = if i % 2 == 0 { (src, dst) } else { (dst, src) };
                sys::ggml_backend_tensor_copy_async(owned.backend, owned.backend, from, to);
            }
            sys::ggml_backend_synchronize(owned.backend);
            started.elapsed().as_secs_f64()
        };
        // Warm-up, and how many copies fill a window.
        let one = window(1).min(window(1));
        if !(one > 0.0 && one.is_finite()) {
            return Err(DeviceProbeError::Time(device.into()));
        }
        let mut copies = ((MIN_WINDOW_S / one).ceil() as usize).clamp(1, MAX_COPIES);
        // The warm-up windows recalibrate the count: a single copy carries a synchronisation
        // and may have met a busy moment, so it can promise more speed than it had, or less
        // (a window of 48 ms was seen where 100 were promised).
        for _ in 0..3 {
            let took = window(copies);
            if took >= MIN_WINDOW_S || copies == MAX_COPIES || took <= 0.0 {
                break;
            }
            copies = ((copies as f64 * MIN_WINDOW_S / took).ceil() as usize)
                .clamp(copies + 1, MAX_COPIES);
        }
        let mut best = f64::INFINITY;
        for _ in 0..runs.max(1) {
            best = best.min(window(copies));
        }
        if !(best > 0.0 && best.is_finite()) {
            return Err(DeviceProbeError::Time(device.into()));
        }
        Ok(DeviceCopyProbe {
            device: device.into(),
            bytes,
            runs: runs.max(1),
            copies,
            window_s: best,
            bytes_per_s: 2.0 * bytes as f64 * copies as f64 / best,
        })
    }
}

/// The first GPU's measured bandwidth, with its datasheet figure beside it; the datasheet
/// alone when the probe fails (said in the label); `None` without a GPU.
pub(crate) fn first_gpu_bandwidth() -> Option<Bandwidth> {
    let device = super::gpu_devices().into_iter().next()?;
    let datasheet = crate::metrics::roofline::datasheet_bandwidth(&device.description);
    match measure_device_copy(&device.name, DEVICE_PROBE_BYTES, DEVICE_PROBE_RUNS) {
        Ok(probe) => Some(probe.bandwidth(datasheet.as_ref())),
        Err(e) => {
            tracing::warn!("GPU bandwidth probe: {e}; using the datasheet");
            datasheet
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_probe_measures_the_cpu_device_through_ggml() {
        crate::llama::backend().unwrap();
        let p = measure_device_copy("CPU", 32 << 20, 3).unwrap();
        assert_eq!(p.device, "CPU");
        assert_eq!(p.bytes, 32 << 20);
        // A memcpy of 64 MiB (read + write) on any machine of this century: between
        // 100 MB/s and 1 TB/s.
        assert!(
            p.bytes_per_s > 1e8 && p.bytes_per_s < 1e12,
            "{}",
            p.bytes_per_s
        );
        let datasheet = crate::metrics::roofline::datasheet_bandwidth("NVIDIA H200");
        let label = p.bandwidth(datasheet.as_ref()).source.label();
        assert!(
            label
                .starts_with("measured, ggml device copy on CPU, 2 × 32 MiB, best of 3 windows of")
                && label.ends_with("datasheet, H200: 4800 GB/s"),
            "{label}"
        );
        // Sustained: every window holds enough copies to last at least 100 ms, so a single
        // copy's synchronisation cost is a small part of it (a window's length varies with the
        // machine, never below what the calibration copy promised by more than its jitter).
        assert!(
            p.copies > 1,
            "32 MiB copies: many per window ({})",
            p.copies
        );
        assert!(p.window_s >= 0.5 * MIN_WINDOW_S, "{} s", p.window_s);
    }

    #[test]
    fn a_device_that_is_not_there_is_an_error_not_a_crash() {
        crate::llama::backend().unwrap();
        assert_eq!(
            measure_device_copy("CUDA7", 1 << 20, 1),
            Err(DeviceProbeError::Device("CUDA7".into()))
        );
        assert!(matches!(
            measure_device_copy("CP\0U", 1 << 20, 1),
            Err(DeviceProbeError::Device(_))
        ));
    }
}
