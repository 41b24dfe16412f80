//! Is a GPU used, and if not, why: the build's backends (ggml's backend registry), ggml's
//! device list, the NVIDIA driver (through `hw::gpu`'s NVML) and the CUDA libraries this
//! process really mapped (`/proc/self/maps`). `tokscope doctor gpu` prints all of it; `run`,
//! `bench` and the chat print the one-line [`no_gpu_note`] when a CUDA build finds no GPU.

use serde::Serialize;

use crate::hw::gpu::{GpuTelemetry, GpuTelemetryError};

/// Whether this binary was compiled with llama.cpp's CUDA backend.
pub(crate) const CUDA_BUILD: bool = cfg!(any(feature = "cuda", feature = "cuda-dl"));

/// Why a GPU is or is not used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) enum GpuStatus {
    /// Built without a GPU backend: the CPU is the plan, nothing to report.
    CpuBuild,
    /// A CUDA build on a machine without the NVIDIA driver.
    NoDriver,
    /// A CUDA build with a driver, but ggml found no CUDA device.
    NoDevice { hint: String },
    /// ggml's GPU devices, by description.
    Gpu { devices: Vec<String> },
}

impl GpuStatus {
    /// One sentence for the user, or `None` when there is nothing to say (a CPU build, or a
    /// GPU in use).
    pub(crate) fn note(&self) -> Option<String> {
        match self {
            GpuStatus::CpuBuild | GpuStatus::Gpu { .. } => None,
            GpuStatus::NoDriver => Some(
                "CUDA build, but no NVIDIA driver on this machine: running on the CPU".to_owned(),
            ),
            GpuStatus::NoDevice { hint } => Some(format!(
                "CUDA build, but CUDA found no GPU{hint}: running on the CPU"
            )),
        }
    }
}

/// Decides the status from what was found (pure, for tests).
pub(crate) fn decide(
    cuda_build: bool,
    gpu_devices: &[String],
    driver_found: bool,
    cuda_visible_devices: Option<&str>,
) -> GpuStatus {
    if !cuda_build {
        GpuStatus::CpuBuild
    } else if !gpu_devices.is_empty() {
        GpuStatus::Gpu {
            devices: gpu_devices.to_vec(),
        }
    } else if !driver_found {
        GpuStatus::NoDriver
    } else {
        let hint = match cuda_visible_devices {
            Some(v) => format!(" (CUDA_VISIBLE_DEVICES={v})"),
            None => String::new(),
        };
        GpuStatus::NoDevice { hint }
    }
}

/// The status of this process (initialises llama.cpp's backend; NVML is opened only on a CUDA
/// build that found no device).
pub(crate) fn status() -> GpuStatus {
    static STATUS: std::sync::OnceLock<GpuStatus> = std::sync::OnceLock::new();
    STATUS
        .get_or_init(|| {
            let devices = super::gpu_device_descriptions();
            let driver = !CUDA_BUILD
                || !devices.is_empty()
                || !matches!(GpuTelemetry::open(), Err(GpuTelemetryError::NotFound));
            let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
            decide(CUDA_BUILD, &devices, driver, visible.as_deref())
        })
        .clone()
}

/// The one-line note for `run` stderr, the chat's status and the bench rows; `None` on a CPU
/// build and where a GPU is used.
pub(crate) fn no_gpu_note() -> Option<String> {
    status().note()
}

/// The backends compiled into ggml (its registry: "CPU", "CUDA", ...).
#[allow(unsafe_code)]
pub(crate) fn compiled_backends() -> Vec<String> {
    if super::backend().is_err() {
        return Vec::new();
    }
    // SAFETY: ggml's registry is filled when the backend initialises and never shrinks;
    // reg_get is called with indices below reg_count, and reg_name returns a static
    // NUL-terminated string (or null), copied out at once.
    let count = unsafe { llama_cpp_sys_2::ggml_backend_reg_count() };
    (0..count)
        .filter_map(|i| {
            let reg = unsafe { llama_cpp_sys_2::ggml_backend_reg_get(i) };
            if reg.is_null() {
                return None;
            }
            let name = unsafe { llama_cpp_sys_2::ggml_backend_reg_name(reg) };
            if name.is_null() {
                return None;
            }
            Some(
                unsafe { std::ffi::CStr::from_ptr(name) }
                    .to_string_lossy()
                    .into_owned(),
            )
        })
        .collect()
}

/// A shared library mapped into the process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct MappedLibrary {
    pub file_name: String,
    pub path: String,
}

/// The libraries of interest (llama.cpp, ggml, the CUDA runtime, cuBLAS, the driver, NVML,
/// OpenMP) in a `/proc/self/maps` text, once each, in the order they appear.
pub(crate) fn mapped_libraries(maps: &str) -> Vec<MappedLibrary> {
    const PREFIXES: [&str; 8] = [
        "libllama",
        "libggml",
        "libcudart",
        "libcublas",
        "libcuda.",
        "libnvidia-ml",
        "libgomp",
        "libnvrtc",
    ];
    let mut seen: Vec<MappedLibrary> = Vec::new();
    for line in maps.lines() {
        // address perms offset dev inode path: the path is the sixth field (may hold spaces).
        let Some(path) = line.splitn(6, char::is_whitespace).nth(5).map(str::trim) else {
            continue;
        };
        if !path.starts_with('/') {
            continue;
        }
        let file_name = path.rsplit('/').next().unwrap_or(path);
        if !PREFIXES.iter().any(|p| file_name.starts_with(p)) || !file_name.contains(".so") {
            continue;
        }
        if seen.iter().any(|m| m.path == path) {
            continue;
        }
        seen.push(MappedLibrary {
            file_name: file_name.to_owned(),
            path: path.to_owned(),
        });
    }
    seen
}

/// The libraries this process has mapped now (empty where `/proc` is not there).
pub(crate) fn mapped_libraries_now() -> Vec<MappedLibrary> {
    std::fs::read_to_string("/proc/self/maps")
        .map(|m| mapped_libraries(&m))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_notes() {
        assert_eq!(decide(false, &[], false, None), GpuStatus::CpuBuild);
        assert_eq!(decide(false, &[], false, None).note(), None);
        let gpu = decide(true, &["NVIDIA H200".into()], true, None);
        assert_eq!(gpu.note(), None);
        assert_eq!(
            decide(true, &[], false, None).note().unwrap(),
            "CUDA build, but no NVIDIA driver on this machine: running on the CPU"
        );
        assert_eq!(
            decide(true, &[], true, Some("")).note().unwrap(),
            "CUDA build, but CUDA found no GPU (CUDA_VISIBLE_DEVICES=): running on the CPU"
        );
        assert_eq!(
            decide(true, &[], true, None).note().unwrap(),
            "CUDA build, but CUDA found no GPU: running on the CPU"
        );
    }

    #[test]
    fn maps_give_each_library_once() {
        let maps = "\
7f1a00000000-7f1a00100000 r--p 00000000 fd:01 123 /opt/t/lib/libggml-cuda.so.0.9.4
7f1a00100000-7f1a00200000 r-xp 00100000 fd:01 123 /opt/t/lib/libggml-cuda.so.0.9.4
7f1a00300000-7f1a00400000 r--p 00000000 fd:01 456 /usr/lib/python3/site-packages/nvidia/cu13/lib/libcublas.so.13
7f1a00500000-7f1a00600000 r--p 00000000 fd:01 789 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1a00700000-7f1a00800000 rw-p 00000000 00:00 0 [heap]
7f1a00900000-7f1a00a00000 r--p 00000000 fd:01 999 /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05
";
        let libs = mapped_libraries(maps);
        let names: Vec<&str> = libs.iter().map(|l| l.file_name.as_str()).collect();
        assert_eq!(
            names,
            [
                "libggml-cuda.so.0.9.4",
                "libcublas.so.13",
                "libcuda.so.580.95.05"
            ]
        );
        assert_eq!(
            libs[1].path,
            "/usr/lib/python3/site-packages/nvidia/cu13/lib/libcublas.so.13"
        );
    }

    #[test]
    fn this_process_maps_are_readable() {
        // The test binary links llama.cpp: its libraries are mapped (statically linked on the
        // CPU build, so only OpenMP may show) and reading /proc never fails the call.
        let _ = mapped_libraries_now();
        let backends = compiled_backends();
        assert!(backends.iter().any(|b| b == "CPU"), "{backends:?}");
        assert_eq!(backends.iter().any(|b| b == "CUDA"), CUDA_BUILD);
    }
}
