//! A bench run's GPU figures (`gpu_*` columns): NVML polled on a thread of its own while the
//! run goes on, read for the GPUs each test used (ggml's devices for its placement, found in
//! NVML by PCI bus id) over its timed windows only (the warm-up, the `-d` depth fill and the
//! gaps between repetitions left out), with the same GPUs' idle power measured before the first
//! model loads. Defined in docs/metrics.md ("Energy").

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::hw::gpu::{GpuTelemetry, Poll, Sampler};
use crate::llama::measure::{Sample, TestSpec};
use crate::llama::placement::Placement;
use crate::metrics::energy::{self, CounterPoint, WindowEnergy};

/// How long the idle baseline is measured before the first model loads.
const IDLE_BASELINE: Duration = Duration::from_secs(1);

/// How long a test's figures wait for the energy counter to move after its last window.
const CLOSE_LIMIT: Duration = Duration::from_secs(1);

/// A row's GPU figures (`gpu_*` in JSON and CSV).
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct GpuColumns {
    /// "NVML" when the GPU figures below come from the driver, else why there are none
    /// ("no NVIDIA driver (NVML not found)", "no GPU: ggml has none").
    pub gpu_telemetry: String,
    /// The GPUs the test used, by PCI bus id ("00000000:01:00.0"), `/` between them.
    pub gpu_devices: String,
    /// Energy over the timed windows ÷ the tokens generated in them.
    pub gpu_joules_per_output_token: Option<f64>,
    /// Energy over the timed windows ÷ every token they decoded (prompt and generated).
    pub gpu_joules_per_total_token: Option<f64>,
    /// Output tokens per kWh.
    pub gpu_tokens_per_kwh: Option<f64>,
    /// Energy cost of 1M output tokens at the configured `price_per_kwh`.
    pub gpu_energy_cost_per_million_tokens: Option<f64>,
    /// The same GPUs at rest, before the first model loaded, W.
    pub gpu_idle_power_w: Option<f64>,
    /// J per output token above the idle baseline.
    pub gpu_joules_per_output_token_above_idle: Option<f64>,
    /// The bound the counter's steps put on the energy, % (docs/metrics.md).
    pub gpu_energy_resolution_pct: Option<f64>,
    /// Mean power over the timed windows (energy ÷ time), W.
    pub gpu_power_w: Option<f64>,
    /// The highest power polled in the windows, W.
    pub gpu_power_max_w: Option<f64>,
    /// VRAM used on the test's GPUs, after its repetitions.
    pub gpu_vram_used_bytes: Option<u64>,
    /// VRAM this process holds on them: NVML's per-process accounting, else (a container,
    /// whose PIDs NVML does not know) the growth of the used VRAM since before the first load.
    pub gpu_vram_process_bytes: Option<u64>,
    /// "process" or "device growth": where `gpu_vram_process_bytes` comes from.
    pub gpu_vram_process_source: String,
    /// The SM clock polled in the windows (the lowest of the test's GPUs at each poll): mean
    /// and lowest, MHz.
    pub gpu_sm_clock_mhz: Option<u32>,
    pub gpu_sm_clock_min_mhz: Option<u32>,
    /// Memory clock, mean over the windows' polls, MHz.
    pub gpu_mem_clock_mhz: Option<u32>,
    /// The hottest reading in the windows, °C.
    pub gpu_temperature_c: Option<u32>,
    /// GPU utilisation, mean over the windows' polls (the busiest GPU at each poll), %.
    pub gpu_utilization_pct: Option<u32>,
}

/// Where a timed repetition starts and ends on the watch's clock, s.
fn window(origin: Instant, s: &Sample) -> Option<(f64, f64)> {
    let start = s.started?.checked_duration_since(origin)?.as_secs_f64();
    let length = s
        .steps_at
        .last()
        .copied()
        .unwrap_or_default()
        .max(s.total)
        .as_secs_f64();
    Some((start, start + length))
}

/// (tokens generated, every token decoded) in a repetition.
fn tokens(test: &TestSpec, s: &Sample) -> (u64, u64) {
    let prompt = u64::from(test.lengths().0) * u64::from(test.sequences());
    (s.tokens_generated, prompt + s.tokens_generated)
}

/// The figures polled inside the windows, for the chosen GPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct DuringRun {
    pub sm_clock_mean: Option<u32>,
    pub sm_clock_min: Option<u32>,
    pub mem_clock_mean: Option<u32>,
    pub temperature_max: Option<u32>,
    pub utilization_mean: Option<u32>,
    pub power_max_w: Option<f64>,
}

fn mean_u32(v: &[u32]) -> Option<u32> {
    (!v.is_empty()).then(|| {
        let sum: u64 = v.iter().map(|&x| u64::from(x)).sum();
        u32::try_from(sum / v.len() as u64).unwrap_or(u32::MAX)
    })
}

/// Clocks, temperature, utilisation and peak power over the polls inside the windows (each
/// already narrowed to the test's GPUs, at seconds on the windows' clock).
pub(crate) fn during_run(polls: &[(f64, Poll)], windows: &[(f64, f64)]) -> DuringRun {
    let inside: Vec<&Poll> = polls
        .iter()
        .filter(|(t, _)| windows.iter().any(|&(a, b)| *t >= a && *t <= b))
        .map(|(_, p)| p)
        .collect();
    let per_poll = |f: &dyn Fn(&Poll) -> Option<u32>| -> Vec<u32> {
        inside.iter().filter_map(|p| f(p)).collect()
    };
    let sm = per_poll(&|p| p.devices.iter().filter_map(|d| d.sm_clock_mhz).min());
    let mem = per_poll(&|p| p.devices.iter().filter_map(|d| d.mem_clock_mhz).min());
    let temp = per_poll(&|p| p.devices.iter().filter_map(|d| d.temperature_c).max());
    let util = per_poll(&|p| p.devices.iter().filter_map(|d| d.utilization_pct).max());
    let power = inside
        .iter()
        .filter_map(|p| p.devices.iter().map(|d| d.power_w).sum::<Option<f64>>())
        .reduce(f64::max);
    DuringRun {
        sm_clock_mean: mean_u32(&sm),
        sm_clock_min: sm.iter().copied().min(),
        mem_clock_mean: mean_u32(&mem),
        temperature_max: temp.iter().copied().max(),
        utilization_mean: mean_u32(&util),
        power_max_w: power,
    }
}

/// Fills the energy columns from a test's energy.
fn add_energy(c: &mut GpuColumns, e: &WindowEnergy, price_per_kwh: Option<f64>) {
    c.gpu_joules_per_output_token = e.joules_per_output_token();
    c.gpu_joules_per_total_token = e.joules_per_total_token();
    c.gpu_tokens_per_kwh = c
        .gpu_joules_per_output_token
        .and_then(energy::tokens_per_kwh);
    c.gpu_energy_cost_per_million_tokens = (c.gpu_joules_per_output_token.zip(price_per_kwh))
        .and_then(|(j, p)| energy::energy_cost_per_million_tokens(j, p));
    c.gpu_idle_power_w = e.idle_w;
    c.gpu_joules_per_output_token_above_idle = e.above_idle_joules_per_output_token();
    c.gpu_energy_resolution_pct = e.resolution_pct();
    c.gpu_power_w = Some(e.mean_power_w());
}

/// The GPUs a bench run can use, watched from before the first load to the end.
pub(crate) struct GpuWatch {
    telemetry: GpuTelemetry,
    sampler: Sampler,
    origin: Instant,
    /// ggml's GPUs: (name, NVML index, bus id).
    gpus: Vec<(String, u32, String)>,
    /// Each GPU's idle power (NVML index → W).
    idle_w: BTreeMap<u32, f64>,
    /// Each GPU's used VRAM before the first load.
    vram_before: BTreeMap<u32, u64>,
}

impl std::fmt::Debug for GpuWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GpuWatch")
    }
}

impl GpuWatch {
    /// Opens NVML, finds ggml's GPUs in it by PCI bus id, starts the poller and measures the
    /// idle baseline (about a second). `Err` says why a row has no GPU figures.
    pub(crate) fn start() -> Result<Self, String> {
        let telemetry = GpuTelemetry::open().map_err(|e| e.to_string())?;
        let ggml = crate::llama::gpu_devices();
        if ggml.is_empty() {
            return Err(match crate::llama::gpu::no_gpu_note() {
                Some(why) => format!("no GPU used: {why}"),
                None => "no GPU used: ggml has no GPU device (a CPU build)".to_owned(),
            });
        }
        let bus_ids = ggml
            .iter()
            .map(|d| {
                d.bus_id.clone().ok_or_else(|| {
                    format!(
                        "ggml gives no PCI bus id for {}: energy not attributed",
                        d.name
                    )
                })
            })
            .collect::<Result<Vec<String>, String>>()?;
        let samples = telemetry.sample();
        let indices = crate::hw::gpu::nvml_indices(&samples, &bus_ids)?;
        let vram_before = indices
            .iter()
            .filter_map(|i| {
                let s = samples.iter().find(|s| s.index == *i)?;
                Some((*i, s.vram_used_bytes?))
            })
            .collect();
        let probe = GpuTelemetry::open().map_err(|e| e.to_string())?;
        let origin = Instant::now();
        let sampler = Sampler::start(probe, indices.clone(), crate::hw::gpu::POLL_PERIOD);
        std::thread::sleep(IDLE_BASELINE);
        let polls = sampler.polls();
        let idle_w = indices
            .iter()
            .filter_map(|&i| {
                let changes = energy::change_points(&counter_points(origin, &polls, i));
                let (first, last) = (changes.first()?, changes.last()?);
                Some((
                    i,
                    energy::mean_power_between(&changes, first.at_s, last.at_s)?,
                ))
            })
            .collect();
        Ok(Self {
            telemetry,
            sampler,
            origin,
            gpus: ggml
                .into_iter()
                .zip(indices)
                .zip(bus_ids)
                .map(|((d, i), bus)| (d.name, i, bus))
                .collect(),
            idle_w,
            vram_before,
        })
    }

    /// The figures of one test: its GPUs (by its placement) over its repetitions' timed
    /// windows; a warning when the counter resolves them poorly.
    pub(crate) fn columns(
        &self,
        placement: &Placement,
        test: &TestSpec,
        samples: &[Sample],
        price_per_kwh: Option<f64>,
    ) -> (GpuColumns, Option<String>) {
        let names: Vec<String> = self.gpus.iter().map(|(n, _, _)| n.clone()).collect();
        let used: Vec<&(String, u32, String)> = placement
            .gpus_used(&names)
            .iter()
            .filter_map(|n| self.gpus.iter().find(|(g, _, _)| g == n))
            .collect();
        let mut c = GpuColumns {
            gpu_telemetry: "NVML".to_owned(),
            gpu_devices: used
                .iter()
                .map(|(_, _, bus)| bus.as_str())
                .collect::<Vec<_>>()
                .join("/"),
            ..GpuColumns::default()
        };
        if used.is_empty() {
            c.gpu_telemetry = "NVML: this test's placement uses no GPU".to_owned();
            return (c, None);
        }
        let indices: Vec<u32> = used.iter().map(|(_, i, _)| *i).collect();
        let windows: Vec<(f64, f64)> = samples
            .iter()
            .filter_map(|s| window(self.origin, s))
            .collect();
        let last_end = windows.iter().map(|w| w.1).fold(0.0, f64::max);
        let polls = self
            .sampler
            .polls_after(self.origin + Duration::from_secs_f64(last_end), CLOSE_LIMIT);
        let changes = device_changes(self.origin, &polls, &indices);
        let (output, total) = samples
            .iter()
            .map(|s| tokens(test, s))
            .fold((0, 0), |(a, b), (o, t)| (a + o, b + t));
        let idle: Option<f64> = indices.iter().map(|i| self.idle_w.get(i).copied()).sum();
        let energy = energy::window_energy(&changes, &windows, output, total, idle);
        let warning = match &energy {
            Some(e) => {
                add_energy(&mut c, e, price_per_kwh);
                e.warning()
            }
            None if !windows.is_empty() => Some(
                "GPU energy: NVML's energy counter did not resolve the timed windows (too \
                 short, or no counter on this GPU): no J/token (more tokens, -n or -p)"
                    .to_owned(),
            ),
            None => None,
        };
        let narrowed: Vec<(f64, Poll)> = polls
            .iter()
            .filter_map(|p| {
                let at = p.at.checked_duration_since(self.origin)?.as_secs_f64();
                Some((at, p.of(&indices)?))
            })
            .collect();
        let during = during_run(&narrowed, &windows);
        c.gpu_sm_clock_mhz = during.sm_clock_mean;
        c.gpu_sm_clock_min_mhz = during.sm_clock_min;
        c.gpu_mem_clock_mhz = during.mem_clock_mean;
        c.gpu_temperature_c = during.temperature_max;
        c.gpu_utilization_pct = during.utilization_mean;
        c.gpu_power_max_w = during.power_max_w;
        self.add_vram(&mut c, &indices);
        (c, warning)
    }

    /// Forgets the polls before `t` (what a finished test needed).
    pub(crate) fn forget_before_now(&self) {
        self.sampler.forget_before(Instant::now());
    }

    fn add_vram(&self, c: &mut GpuColumns, indices: &[u32]) {
        let now = self.telemetry.sample();
        let mine: Vec<_> = indices
            .iter()
            .filter_map(|i| now.iter().find(|s| s.index == *i))
            .collect();
        if mine.len() != indices.len() {
            return;
        }
        c.gpu_vram_used_bytes = mine.iter().map(|s| s.vram_used_bytes).sum();
        let (bytes, source) = vram_of_process(
            mine.iter()
                .map(|s| (s.vram_process_bytes, s.vram_used_bytes)),
            indices.iter().map(|i| self.vram_before.get(i).copied()),
        );
        c.gpu_vram_process_bytes = bytes;
        c.gpu_vram_process_source = source.to_owned();
    }
}

/// The VRAM this process holds on its GPUs: NVML's per-process figures when every GPU lists
/// this PID, else the growth of each GPU's used VRAM since before the first load (a container:
/// NVML knows the host's PIDs, not ours). `now` is (per-process, used) per GPU, `before` the
/// used VRAM before loading, in the same order.
pub(crate) fn vram_of_process(
    now: impl Iterator<Item = (Option<u64>, Option<u64>)> + Clone,
    before: impl Iterator<Item = Option<u64>>,
) -> (Option<u64>, &'static str) {
    let process: Option<u64> = now.clone().map(|(p, _)| p).sum();
    if process.is_some() {
        return (process, "process");
    }
    let grown: Option<u64> = now
        .zip(before)
        .map(|((_, used), before)| Some(used?.saturating_sub(before?)))
        .sum();
    (grown, if grown.is_some() { "device growth" } else { "" })
}

/// The summed counter of the GPUs at `indices`, poll by poll, on the watch's clock.
/// One GPU's energy counter as polled, on the watch's clock.
fn counter_points(origin: Instant, polls: &[Poll], index: u32) -> Vec<CounterPoint> {
    polls
        .iter()
        .filter_map(|p| {
            Some(CounterPoint {
                at_s: p.at.checked_duration_since(origin)?.as_secs_f64(),
                mj: p.of(&[index])?.energy_mj()?,
            })
        })
        .collect()
}

/// Each GPU's counter change points, one list per GPU of `indices`: each counter moves at its
/// own instants, so each is read on its own (`energy::window_energy` combines them).
fn device_changes(origin: Instant, polls: &[Poll], indices: &[u32]) -> Vec<Vec<CounterPoint>> {
    indices
        .iter()
        .map(|&i| energy::change_points(&counter_points(origin, polls, i)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::gpu::Reading;

    fn poll(origin: Instant, at_s: f64, readings: &[(u32, u32, u32, f64)]) -> (f64, Poll) {
        (
            at_s,
            Poll {
                at: origin + Duration::from_secs_f64(at_s),
                devices: readings
                    .iter()
                    .map(|&(index, sm, temp, power)| Reading {
                        index,
                        sm_clock_mhz: Some(sm),
                        mem_clock_mhz: Some(2619),
                        temperature_c: Some(temp),
                        utilization_pct: Some(90 + index),
                        power_w: Some(power),
                        energy_mj: None,
                    })
                    .collect(),
            },
        )
    }

    /// Clocks, temperature and power are what was polled inside the windows, not a snapshot
    /// after them: the cool, fast readings between the windows are left out.
    #[test]
    fn clocks_and_power_come_from_the_polls_inside_the_windows() {
        let o = Instant::now();
        let polls = [
            poll(o, 0.5, &[(0, 1980, 40, 90.0), (1, 1980, 41, 90.0)]),
            poll(o, 1.1, &[(0, 1755, 70, 650.0), (1, 1800, 72, 640.0)]),
            poll(o, 1.5, &[(0, 1650, 74, 700.0), (1, 1700, 75, 690.0)]),
            poll(o, 2.5, &[(0, 1980, 45, 95.0), (1, 1980, 46, 95.0)]),
            poll(o, 3.2, &[(0, 1500, 79, 700.0), (1, 1400, 80, 710.0)]),
        ];
        let d = during_run(&polls, &[(1.0, 2.0), (3.0, 4.0)]);
        // The lowest GPU's clock at each poll inside: 1755, 1650, 1400.
        assert_eq!(d.sm_clock_mean, Some((1755 + 1650 + 1400) / 3));
        assert_eq!(d.sm_clock_min, Some(1400));
        assert_eq!(d.temperature_max, Some(80));
        assert_eq!(d.utilization_mean, Some(91));
        assert_eq!(d.power_max_w, Some(1410.0));
        assert_eq!(during_run(&polls, &[(5.0, 6.0)]), DuringRun::default());
    }

    /// Polls every 10 ms to 4 s of GPUs drawing 200 W each, whose energy counters the driver
    /// publishes every 100 ms, GPU i's `phases_s[i]` after GPU 0's.
    fn counter_polls(origin: Instant, phases_s: &[f64]) -> Vec<Poll> {
        (0..=400)
            .map(|j| {
                let at_s = f64::from(j) * 0.01;
                let devices = phases_s
                    .iter()
                    .enumerate()
                    .map(|(i, phase)| {
                        let published = ((at_s - phase) / 0.1).floor() * 0.1 + phase;
                        Reading {
                            index: i as u32,
                            energy_mj: Some(1_000_000 + (200.0 * published.max(0.0) * 1e3) as u64),
                            power_w: Some(200.0),
                            sm_clock_mhz: None,
                            mem_clock_mhz: None,
                            temperature_c: None,
                            utilization_pct: None,
                        }
                    })
                    .collect();
                Poll {
                    at: origin + Duration::from_secs_f64(at_s),
                    devices,
                }
            })
            .collect()
    }

    /// Issue 58, item 8: two GPUs whose counters each move every 100 ms, half a period apart.
    /// Their sum moves every 50 ms, which would halve the resolution bound (5%, no warning);
    /// each counter read on its own keeps it at 10%, and the row says so.
    #[test]
    fn each_gpus_counter_period_bounds_the_energy_not_the_sums() {
        let origin = Instant::now();
        let polls = counter_polls(origin, &[0.0, 0.05]);
        let windows = [(0.5, 1.5), (2.0, 3.0)];
        let e = energy::window_energy(
            &device_changes(origin, &polls, &[0, 1]),
            &windows,
            300,
            400,
            None,
        )
        .unwrap();
        assert!(
            (e.joules - 800.0).abs() < 8.0,
            "two GPUs × 200 W × 2 s: {} J",
            e.joules
        );
        let update = e.update_s.unwrap();
        assert!(
            (update - 0.1).abs() < 1e-6,
            "each counter's own period: {update} s"
        );
        assert!((e.resolution_pct().unwrap() - 10.0).abs() < 1e-3);
        let w = e.warning().expect("a 10% bound warns");
        assert!(w.contains("every 100 ms") && w.contains("±10%"), "{w}");
        // One GPU alone: the same period, the same bound.
        let one =
            energy::window_energy(&device_changes(origin, &polls, &[1]), &windows, 1, 1, None)
                .unwrap();
        assert!((one.joules - 400.0).abs() < 4.0, "{} J", one.joules);
        assert_eq!(one.update_s.map(|u| (u * 1e3).round()), Some(100.0));
    }

    #[test]
    fn a_container_falls_back_to_the_growth_of_the_used_vram() {
        let gib = 1u64 << 30;
        // NVML lists this PID on both GPUs: its own figures.
        let listed = [
            (Some(5 * gib), Some(9 * gib)),
            (Some(3 * gib), Some(7 * gib)),
        ];
        assert_eq!(
            vram_of_process(listed.iter().copied(), [Some(gib), Some(gib)].into_iter()),
            (Some(8 * gib), "process")
        );
        // In a container NVML knows only the host's PIDs: the used VRAM's growth.
        let unlisted = [(None, Some(9 * gib)), (None, Some(7 * gib))];
        assert_eq!(
            vram_of_process(
                unlisted.iter().copied(),
                [Some(gib), Some(2 * gib)].into_iter()
            ),
            (Some(13 * gib), "device growth")
        );
        assert_eq!(
            vram_of_process([(None, None)].into_iter(), [Some(gib)].into_iter()),
            (None, "")
        );
    }

    #[test]
    fn a_window_runs_from_the_start_to_the_last_step_and_counts_prompt_tokens_per_sequence() {
        let origin = Instant::now();
        let s = Sample {
            started: Some(origin + Duration::from_millis(1500)),
            total: Duration::from_millis(900),
            steps_at: vec![Duration::from_millis(200), Duration::from_millis(1000)],
            tokens_generated: 64,
            ..Sample::default()
        };
        let (a, b) = window(origin, &s).unwrap();
        assert!((a - 1.5).abs() < 1e-9 && (b - 2.5).abs() < 1e-9, "{a} {b}");
        let batch = TestSpec::Batch {
            sequences: 4,
            n_prompt: 32,
            n_gen: 16,
        };
        assert_eq!(tokens(&batch, &s), (64, 4 * 32 + 64));
        assert_eq!(tokens(&TestSpec::Tg { n_gen: 64 }, &s), (64, 64));
        let before_origin = Sample {
            started: Some(origin),
            ..Sample::default()
        };
        assert_eq!(
            window(origin + Duration::from_secs(1), &before_origin),
            None
        );
    }
}
