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
    /// A CUDA build whose runtime is newer than the driver supports: CUDA reports no usable
    /// device. The driver's version, the CUDA version it supports, and the runtime's major.
    DriverTooOld {
        driver: String,
        supports: String,
        runtime_major: u32,
    },
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
            GpuStatus::DriverTooOld {
                driver,
                supports,
                runtime_major,
            } => {
                let needs = minimum_driver(*runtime_major).map_or_else(String::new, |series| {
                    format!(", which needs driver {series} or newer")
                });
                Some(format!(
                    "CUDA build, but the NVIDIA driver {driver} supports CUDA up to {supports} and \
                     this build runs on the CUDA {runtime_major} runtime{needs}: update the driver \
                     (`nvidia-smi` shows it), or build for the CUDA the driver supports \
                     (docs/gpu.md): running on the CPU"
                ))
            }
        }
    }
}

/// The oldest Linux driver series a CUDA runtime major version runs on (NVIDIA's CUDA
/// toolkit release notes, "CUDA Driver" table: 13.0 GA 580, 12.0 GA 525, 11.0 GA 450).
fn minimum_driver(runtime_major: u32) -> Option<&'static str> {
    match runtime_major {
        13 => Some("R580"),
        12 => Some("R525"),
        11 => Some("R450"),
        _ => None,
    }
}

/// The NVIDIA driver as `decide` needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Driver {
    NotFound,
    /// Its version and the CUDA version it supports ("12.4"; "?" when NVML did not say).
    Found {
        version: String,
        cuda: String,
    },
}

/// The CUDA runtime's major version from the libraries this process mapped
/// (`libcudart.so.13`, else `libcublas.so.13`); `None` for a static runtime.
pub(crate) fn runtime_major(libraries: &[MappedLibrary]) -> Option<u32> {
    ["libcudart.so.", "libcublas.so."]
        .iter()
        .find_map(|prefix| {
            libraries.iter().find_map(|l| {
                let rest = l.file_name.strip_prefix(prefix)?;
                rest.split('.').next()?.parse().ok()
            })
        })
}

/// The major of a "12.4" CUDA version string.
fn cuda_major(version: &str) -> Option<u32> {
    version.split('.').next()?.parse().ok()
}

/// Decides the status from what was found (pure, for tests).
pub(crate) fn decide(
    cuda_build: bool,
    gpu_devices: &[String],
    driver: &Driver,
    runtime_major: Option<u32>,
    cuda_visible_devices: Option<&str>,
) -> GpuStatus {
    if !cuda_build {
        return GpuStatus::CpuBuild;
    }
    if !gpu_devices.is_empty() {
        return GpuStatus::Gpu {
            devices: gpu_devices.to_vec(),
        };
    }
    let Driver::Found { version, cuda } = driver else {
        return GpuStatus::NoDriver;
    };
    // The runtime needs a driver that supports its major version (a minor above the
    // driver's runs through CUDA's minor-version compatibility).
    if let (Some(runtime), Some(supported)) = (runtime_major, cuda_major(cuda)) {
        if runtime > supported {
            return GpuStatus::DriverTooOld {
                driver: version.clone(),
                supports: cuda.clone(),
                runtime_major: runtime,
            };
        }
    }
    GpuStatus::NoDevice {
        hint: cuda_visible_devices
            .map_or_else(String::new, |v| format!(" (CUDA_VISIBLE_DEVICES={v})")),
    }
}

/// The status of this process (initialises llama.cpp's backend; NVML is opened only on a CUDA
/// build that found no device).
pub(crate) fn status() -> GpuStatus {
    static STATUS: std::sync::OnceLock<GpuStatus> = std::sync::OnceLock::new();
    STATUS
        .get_or_init(|| {
            let devices: Vec<String> = super::gpu_devices()
                .into_iter()
                .map(|d| d.description)
                .collect();
            // NVML is asked only where it can change the verdict: a CUDA build without a device.
            let driver = if !CUDA_BUILD || !devices.is_empty() {
                Driver::Found {
                    version: String::new(),
                    cuda: String::new(),
                }
            } else {
                match GpuTelemetry::open() {
                    Err(GpuTelemetryError::NotFound) => Driver::NotFound,
                    Err(GpuTelemetryError::Nvml(_)) => Driver::Found {
                        version: "?".into(),
                        cuda: "?".into(),
                    },
                    Ok(t) => {
                        let d = t.driver();
                        Driver::Found {
                            version: d.driver_version,
                            cuda: d.cuda_driver_version,
                        }
                    }
                }
            };
            let runtime = runtime_major(&mapped_libraries_now());
            let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
            decide(CUDA_BUILD, &devices, &driver, runtime, visible.as_deref())
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
        let file_name = path.rsplit('/').next().unwrap_or(path);
        let wanted = PREFIXES.iter().any(|p| file_name.starts_with(p)) && file_name.contains(".so");
        if path.starts_with('/') && wanted && !seen.iter().any(|m| m.path == path) {
            seen.push(MappedLibrary {
                file_name: file_name.to_owned(),
                path: path.to_owned(),
            });
        }
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
        let none = Driver::NotFound;
        let driver = |cuda: &str| Driver::Found {
            version: "580.95.05".into(),
            cuda: cuda.into(),
        };
        assert_eq!(decide(false, &[], &none, None, None), GpuStatus::CpuBuild);
        assert_eq!(decide(false, &[], &none, None, None).note(), None);
        let gpu = decide(
            true,
            &["NVIDIA H200".into()],
            &driver("13.0"),
            Some(13),
            None,
        );
        assert_eq!(gpu.note(), None);
        assert_eq!(
            decide(true, &[], &none, Some(13), None).note().unwrap(),
            "CUDA build, but no NVIDIA driver on this machine: running on the CPU"
        );
        assert_eq!(
            decide(true, &[], &driver("13.0"), Some(13), Some(""))
                .note()
                .unwrap(),
            "CUDA build, but CUDA found no GPU (CUDA_VISIBLE_DEVICES=): running on the CPU"
        );
        assert_eq!(
            decide(true, &[], &driver("13.0"), None, None)
                .note()
                .unwrap(),
            "CUDA build, but CUDA found no GPU: running on the CPU"
        );
    }

    #[test]
    fn a_driver_older_than_the_runtime_is_named_with_what_it_needs() {
        let old = Driver::Found {
            version: "550.54.15".into(),
            cuda: "12.4".into(),
        };
        let status = decide(true, &[], &old, Some(13), None);
        assert_eq!(
            status,
            GpuStatus::DriverTooOld {
                driver: "550.54.15".into(),
                supports: "12.4".into(),
                runtime_major: 13
            }
        );
        let note = status.note().unwrap();
        for part in [
            "550.54.15",
            "CUDA up to 12.4",
            "CUDA 13 runtime",
            "R580",
            "running on the CPU",
        ] {
            assert!(note.contains(part), "{part}: {note}");
        }
        // A minor version above the driver's runs (CUDA's minor-version compatibility), an
        // unknown runtime (static) or driver CUDA version says what it can.
        let minor = Driver::Found {
            version: "570.1".into(),
            cuda: "12.8".into(),
        };
        assert!(matches!(
            decide(true, &[], &minor, Some(12), None),
            GpuStatus::NoDevice { .. }
        ));
        assert!(matches!(
            decide(true, &[], &old, None, None),
            GpuStatus::NoDevice { .. }
        ));
        let unknown = Driver::Found {
            version: "?".into(),
            cuda: "?".into(),
        };
        assert!(matches!(
            decide(true, &[], &unknown, Some(13), None),
            GpuStatus::NoDevice { .. }
        ));
        // A GPU in use: never blamed on the driver.
        assert!(matches!(
            decide(true, &["H200".into()], &old, Some(13), None),
            GpuStatus::Gpu { .. }
        ));
    }

    #[test]
    fn the_runtime_major_comes_from_the_mapped_cudart_or_cublas() {
        let lib = |name: &str| MappedLibrary {
            file_name: name.into(),
            path: format!("/x/{name}"),
        };
        assert_eq!(
            runtime_major(&[lib("libggml-cuda.so"), lib("libcudart.so.13")]),
            Some(13)
        );
        assert_eq!(runtime_major(&[lib("libcudart.so.12.4.127")]), Some(12));
        assert_eq!(
            runtime_major(&[lib("libcublasLt.so.13"), lib("libcublas.so.13")]),
            Some(13)
        );
        assert_eq!(
            runtime_major(&[lib("libggml-cuda.so"), lib("libcuda.so.1")]),
            None
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
