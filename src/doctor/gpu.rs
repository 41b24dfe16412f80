//! The report of `tokscope doctor gpu`: what this build can use and what the machine has: the
//! compiled backends, ggml's devices, the NVIDIA driver and its CUDA version (NVML), each GPU's
//! compute capability, the CUDA libraries this process really loaded and from where (and which
//! folder the CUDA folder's launcher chose), and, when no GPU is used, why. Printing it and the
//! exit code are the command's (`commands/doctor.rs`).

use std::fmt::Write as _;

use crate::hw::gpu::GpuTelemetry;
use crate::llama::gpu::{self as lgpu, GpuStatus};

/// The report's text and the GPU status its verdict line states.
pub(crate) fn report() -> (String, GpuStatus) {
    let backends = lgpu::compiled_backends();
    let devices = llama_cpp_2::list_llama_ggml_backend_devices();
    let telemetry = GpuTelemetry::open();
    let status = lgpu::status();
    let build = if lgpu::CUDA_BUILD {
        if cfg!(feature = "cuda-dl") {
            "CUDA (shared libraries, feature cuda-dl)"
        } else {
            "CUDA (static, feature cuda)"
        }
    } else {
        "CPU only (built without the cuda / cuda-dl feature)"
    };
    let driver = match &telemetry {
        Ok(t) => {
            let d = t.driver();
            format!(
                "{} (supports CUDA {})",
                d.driver_version, d.cuda_driver_version
            )
        }
        Err(e) => e.to_string(),
    };
    let mut out = format!(
        "build:          {build}\nggml backends:  {}\nNVIDIA driver:  {driver}\nggml devices:\n",
        backends.join(", ")
    );
    for d in &devices {
        let _ = writeln!(
            out,
            "  {:<8} {:<5} {}  ({:.1} GB, {:.1} GB free){}",
            d.name,
            d.backend,
            d.description,
            d.memory_total as f64 / 1e9,
            d.memory_free as f64 / 1e9,
            d.device_id
                .as_deref()
                .map(|id| format!("  PCI {id}"))
                .unwrap_or_default()
        );
    }
    // Each GPU's bandwidth measured through ggml (a device-to-device copy), with the
    // datasheet beside it: the figure the roofline uses.
    let gpus = crate::llama::gpu_devices();
    for crate::llama::GpuDevice {
        name, description, ..
    } in &gpus
    {
        let datasheet = crate::metrics::roofline::datasheet_bandwidth(description);
        let sheet = datasheet.as_ref().map_or_else(
            || "not in the datasheet table".to_string(),
            |d| format!("{} {:.0} GB/s", d.source.label(), d.bytes_per_s / 1e9),
        );
        let measured = crate::llama::device_bw::measure_device_copy(
            name,
            crate::llama::device_bw::DEVICE_PROBE_BYTES,
            crate::llama::device_bw::DEVICE_PROBE_RUNS,
        );
        let _ = match measured {
            Ok(p) => writeln!(
                out,
                "bandwidth:      {name} {:.0} GB/s measured (ggml device copy, 2 × {} MiB, best of {}); {sheet}",
                p.bytes_per_s / 1e9,
                p.bytes >> 20,
                p.runs
            ),
            Err(e) => writeln!(out, "bandwidth:      {name} not measured ({e}); {sheet}"),
        };
    }
    if let Ok(t) = &telemetry {
        let _ = writeln!(out, "NVML devices:");
        let samples = t.sample();
        for s in &samples {
            // Which of ggml's devices this is, by PCI bus id (NVML counts every GPU,
            // CUDA_VISIBLE_DEVICES or not).
            let ggml = gpus
                .iter()
                .find(|g| crate::hw::gpu::same_bus(s.pci_bus_id.as_deref(), g.bus_id.as_deref()))
                .map_or_else(
                    || "not used by ggml".to_owned(),
                    |g| format!("= {}", g.name),
                );
            let _ = writeln!(
                out,
                "  GPU {}  {}  compute capability {}  PCI {}  {ggml}",
                s.index,
                s.name,
                s.compute_capability.as_deref().unwrap_or("?"),
                s.pci_bus_id.as_deref().unwrap_or("?")
            );
        }
    }
    if let Ok(chosen) = std::env::var("TOKSCOPE_CUDA_LIBS") {
        let (source, dir) = chosen.split_once(':').unwrap_or((chosen.as_str(), ""));
        let said = match source {
            "bundle" => "the folder's own lib/",
            "pip" => "a pip-installed nvidia/cu13/lib",
            "system" => "a system CUDA",
            "env" => "TOKSCOPE_CUDA_LIB_DIR",
            _ => "not found",
        };
        let _ = writeln!(out, "CUDA libraries: launcher chose {said} {dir}");
    }
    let libs = lgpu::mapped_libraries_now();
    if libs.is_empty() {
        let _ = writeln!(
            out,
            "loaded:         no shared llama.cpp/CUDA libraries (llama.cpp is linked statically)"
        );
    } else {
        let _ = writeln!(out, "loaded:");
        for l in &libs {
            let _ = writeln!(out, "  {:<28} {}", l.file_name, l.path);
        }
    }
    let verdict = match &status {
        GpuStatus::Gpu { devices } => format!("GPU used: yes ({})", devices.join("; ")),
        GpuStatus::CpuBuild => "GPU used: no, this is a CPU-only build; build with scripts/build-cuda.sh or --features cuda".to_owned(),
        GpuStatus::NoDriver => "GPU used: no, no NVIDIA driver on this machine (libnvidia-ml not found); the CUDA build runs on the CPU".to_owned(),
        GpuStatus::NoDevice { hint } => format!(
            "GPU used: no, the driver is there but CUDA found no device{hint}; check nvidia-smi and CUDA_VISIBLE_DEVICES"
        ),
        GpuStatus::DriverTooOld { .. } => format!(
            "GPU used: no, {}",
            status.note().unwrap_or_default().trim_start_matches("CUDA build, but ")
        ),
    };
    let _ = writeln!(out, "{verdict}");
    (out, status)
}
