//! Probes of the machine: the CPU's memory bandwidth (a STREAM-style probe run on all the
//! threads the engine uses, cached per machine and thread count) beside the datasheet value,
//! and the CPU's name. Timing lives here, not in the pure metrics module.

pub(crate) mod gpu;

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::metrics::roofline::{Bandwidth, BandwidthSource, Peaks};

/// Bumped whenever the probe's method changes, so that a cached figure measured another way is
/// not reused.
const PROBE_METHOD: &str = "stream-v2";
/// The cache file (in the cache dir) holding one probe result per CPU and thread count.
const PROBE_CACHE_FILE: &str = "bandwidth-probe.json";
/// Full-size probe: repetitions, best kept (STREAM's convention: the best of several runs is
/// the one least disturbed by the rest of the machine).
const PROBE_RUNS: usize = 5;
/// The probe's footprint is at least this (and at least 8 × the last-level cache).
const PROBE_MIN_BYTES: usize = 1 << 30;

/// One STREAM-style measurement: the three kernels' best rates, in bytes per second, counting
/// the bytes each kernel moves (read: 8 B per element; copy: 16; triad: 24).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StreamProbe {
    pub threads: usize,
    /// The probe's whole footprint (all three arrays).
    pub footprint_bytes: usize,
    pub runs: usize,
    pub read_bytes_per_s: f64,
    pub copy_bytes_per_s: f64,
    pub triad_bytes_per_s: f64,
    /// The slowest run of the read kernel (the ceiling's spread against its best), bytes/s.
    #[serde(default)]
    pub worst_bytes_per_s: Option<f64>,
    /// The 1-minute load average just before and just after the probe.
    #[serde(default)]
    pub load_before: Option<f64>,
    #[serde(default)]
    pub load_after: Option<f64>,
}

impl StreamProbe {
    /// The ceiling for decode: the read kernel, because decode's access is a read (every
    /// weight and the KV cache are read once per token; only activations are written). Copy
    /// and triad count their writes too: on one thread of this project's AVX2 EPYC copy came
    /// out 64% above read, and which of the three is fastest changes with the thread count,
    /// so taking the fastest made MBU read low by up to that factor. No decode measured went
    /// above read (0.60–0.69 of it). The other two stay in `method`.
    /// Measured: benchmarks/notes/20261203-cpu-ceiling.md.
    pub(crate) fn best_bytes_per_s(&self) -> f64 {
        self.read_bytes_per_s
    }

    /// How it was measured, in words, for the label beside the figure.
    pub(crate) fn method(&self) -> String {
        let gb = |b: f64| b / 1e9;
        let mut out = format!(
            "STREAM-style probe, {} thread{}, {} MiB, best of {}: read {:.1} GB/s, the ceiling (copy {:.1}, triad {:.1} GB/s, counting their writes)",
            self.threads,
            if self.threads == 1 { "" } else { "s" },
            self.footprint_bytes >> 20,
            self.runs,
            gb(self.read_bytes_per_s),
            gb(self.copy_bytes_per_s),
            gb(self.triad_bytes_per_s),
        );
        if let Some(worst) = self.worst_bytes_per_s {
            out.push_str(&format!(", slowest run {:.1} GB/s", gb(worst)));
        }
        if let Some(load) = self.load_before {
            out.push_str(&format!(", load {load:.1}"));
        }
        out
    }

    /// Warnings that the machine was busy while the probe ran (its load averages), from the
    /// same rule `run` and `bench` use.
    pub(crate) fn busy(&self) -> Vec<String> {
        crate::metrics::busy::busy_warnings(&crate::metrics::busy::BusySignals {
            threads: u32::try_from(self.threads).unwrap_or(u32::MAX),
            load_before: self.load_before,
            load_after: self.load_after,
            ..Default::default()
        })
    }

    /// Why these figures cannot be a machine's (0, negative, not finite, absurdly large: a
    /// cache file damaged or edited by hand), if they cannot.
    pub(crate) fn refusal(&self) -> Option<String> {
        if self.threads == 0 {
            return Some("0 threads".into());
        }
        let figures = [
            ("read", Some(self.read_bytes_per_s)),
            ("copy", Some(self.copy_bytes_per_s)),
            ("triad", Some(self.triad_bytes_per_s)),
            ("slowest run", self.worst_bytes_per_s),
        ];
        figures.iter().find_map(|(name, bytes_per_s)| {
            let gb_s = (*bytes_per_s)? / 1e9;
            crate::metrics::roofline::check_bandwidth_gb_s(gb_s)
                .err()
                .map(|why| format!("{name} {gb_s:e} GB/s ({why})"))
        })
    }

    pub(crate) fn bandwidth(&self) -> Bandwidth {
        Bandwidth {
            bytes_per_s: self.best_bytes_per_s(),
            source: BandwidthSource::Measured {
                method: self.method(),
            },
        }
    }
}

/// Splits `len` elements into `threads` contiguous ranges (the last ones one shorter).
fn ranges(len: usize, threads: usize) -> Vec<std::ops::Range<usize>> {
    let threads = threads.max(1);
    let base = len / threads;
    let extra = len % threads;
    let mut start = 0;
    (0..threads)
        .map(|i| {
            let n = base + usize::from(i < extra);
            let r = start..start + n;
            start += n;
            r
        })
        .collect()
}

/// Runs `f` on each thread's own part of the three arrays, all threads at once, and returns
/// the wall time from the first start to the last finish.
fn timed_parallel<F>(a: &mut [f64], b: &mut [f64], c: &mut [f64], threads: usize, f: F) -> f64
where
    F: Fn(&mut [f64], &mut [f64], &mut [f64]) + Sync,
{
    // The first `n` elements of what is left of an array, the rest left.
    fn head<'a>(rest: &mut &'a mut [f64], n: usize) -> &'a mut [f64] {
        let (head, tail) = std::mem::take(rest).split_at_mut(n);
        *rest = tail;
        head
    }
    let (mut a, mut b, mut c) = (a, b, c);
    let slices: Vec<_> = ranges(a.len(), threads)
        .iter()
        .map(|r| r.len())
        .map(|n| (head(&mut a, n), head(&mut b, n), head(&mut c, n)))
        .collect();
    let barrier = std::sync::Barrier::new(slices.len() + 1);
    let f = &f;
    let barrier = &barrier;
    std::thread::scope(|s| {
        for (a, b, c) in slices {
            s.spawn(move || {
                barrier.wait();
                f(a, b, c);
            });
        }
        // The clock starts before the workers are released: were this thread descheduled
        // between the barrier and the clock (a busy machine), the workers could finish before
        // it read the time and the rate would come out absurdly high.
        let start = Instant::now();
        barrier.wait();
        // The scope joins every thread before it returns.
        start
    })
    .elapsed()
    .as_secs_f64()
}

/// Sums a slice with eight independent accumulators so the loop vectorises and is limited by
/// memory, not by the add latency.
fn read_kernel(a: &[f64]) -> f64 {
    let mut acc = [0.0f64; 8];
    let chunks = a.chunks_exact(8);
    let tail: f64 = chunks.remainder().iter().sum();
    for chunk in chunks {
        for (s, x) in acc.iter_mut().zip(chunk) {
            *s += *x;
        }
    }
    acc.iter().sum::<f64>() + tail
}

/// Measures the memory bandwidth the way decode reads memory: `threads` threads, each on its
/// own slice of three `footprint_bytes / 3` arrays, running read (sum), copy and triad
/// (`a = b + s·c`); the best of `runs` runs of each.
pub(crate) fn measure_cpu_bandwidth(
    threads: usize,
    footprint_bytes: usize,
    runs: usize,
) -> StreamProbe {
    let threads = threads.max(1);
    let runs = runs.max(1);
    let len = (footprint_bytes / 3 / 8).max(threads * 1024);
    let mut a = vec![0.0f64; len];
    let mut b = vec![0.0f64; len];
    let mut c = vec![0.0f64; len];
    // First touch on the thread that will read the pages (so they are mapped, and on a NUMA
    // machine placed near it); page faults are not timed.
    timed_parallel(&mut a, &mut b, &mut c, threads, |a, b, c| {
        a.fill(1.0);
        b.fill(2.0);
        c.fill(0.5);
    });
    let load_before = load_average_1m();
    let (mut read, mut copy, mut triad) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
    // The read kernel's slowest run, for the ceiling's spread.
    let mut read_w = 0.0f64;
    for _ in 0..runs {
        let r = timed_parallel(&mut a, &mut b, &mut c, threads, |a, _, _| {
            std::hint::black_box(read_kernel(std::hint::black_box(a)));
        });
        let k = timed_parallel(&mut a, &mut b, &mut c, threads, |a, b, _| {
            b.copy_from_slice(a);
            std::hint::black_box(b);
        });
        let t = timed_parallel(&mut a, &mut b, &mut c, threads, |a, b, c| {
            for ((x, y), z) in a.iter_mut().zip(b.iter()).zip(c.iter()) {
                *x = y + 3.0 * z;
            }
            std::hint::black_box(a);
        });
        (read, copy, triad) = (read.min(r), copy.min(k), triad.min(t));
        read_w = read_w.max(r);
    }
    let bytes = (len * 8) as f64;
    let rate = |moved: f64, secs: f64| if secs > 0.0 { moved / secs } else { 0.0 };
    StreamProbe {
        threads,
        footprint_bytes: 3 * len * 8,
        runs,
        read_bytes_per_s: rate(bytes, read),
        copy_bytes_per_s: rate(2.0 * bytes, copy),
        triad_bytes_per_s: rate(3.0 * bytes, triad),
        // The slowest run of the kernel the ceiling takes.
        worst_bytes_per_s: Some(rate(bytes, read_w)),
        load_before,
        load_after: load_average_1m(),
    }
}

/// A full-size probe on `threads` threads (its footprint from this machine's caches and
/// memory).
fn full_probe(threads: usize) -> StreamProbe {
    let footprint = probe_footprint_bytes(last_level_cache_bytes(), available_memory_bytes());
    measure_cpu_bandwidth(threads, footprint, PROBE_RUNS)
}

/// The last-level cache's size in bytes (Linux sysfs), when known.
pub(crate) fn last_level_cache_bytes() -> Option<u64> {
    let dir = Path::new("/sys/devices/system/cpu/cpu0/cache");
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|entry| {
            let read = |f: &str| std::fs::read_to_string(entry.path().join(f)).ok();
            let level = read("level")?.trim().parse::<u32>().ok()?;
            Some((level, parse_cache_size(&read("size")?)?))
        })
        // The highest level, the first found of it.
        .min_by_key(|&(level, _)| std::cmp::Reverse(level))
        .map(|(_, size)| size)
}

/// "32768K" → 32 MiB; "8M" → 8 MiB; plain numbers are bytes.
fn parse_cache_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (digits, mult) = match t.chars().last()? {
        'K' | 'k' => (&t[..t.len() - 1], 1u64 << 10),
        'M' | 'm' => (&t[..t.len() - 1], 1 << 20),
        'G' | 'g' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    digits.trim().parse::<u64>().ok().map(|n| n * mult)
}

/// Memory the kernel says is available without swapping (`MemAvailable`), in bytes.
pub(crate) fn available_memory_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The probe's footprint: max(8 × LLC, 1 GiB), capped at half the available memory (so the
/// probe never pushes the machine into swap), and never below 64 MiB.
pub(crate) fn probe_footprint_bytes(llc: Option<u64>, available: Option<u64>) -> usize {
    let want = llc
        .map_or(0, |l| l.saturating_mul(8))
        .max(PROBE_MIN_BYTES as u64);
    let cap = available.map_or(u64::MAX, |a| a / 2);
    usize::try_from(want.min(cap).max(64 << 20)).unwrap_or(PROBE_MIN_BYTES)
}

/// One cached probe result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CachedProbe {
    pub cpu: String,
    pub method: String,
    pub measured_unix_s: u64,
    pub probe: StreamProbe,
    /// Taken on a busy machine: reused only while the machine is still busy (so a loaded
    /// machine does not probe at every start), measured again once it is quiet.
    #[serde(default)]
    pub busy: bool,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct ProbeCache {
    entries: Vec<CachedProbe>,
}

/// The cache file of probe results.
pub(crate) fn probe_cache_path() -> PathBuf {
    crate::paths::cache_dir().join(PROBE_CACHE_FILE)
}

/// The cache's largest plausible size: a few hundred bytes per CPU and thread count.
const PROBE_CACHE_MAX_BYTES: u64 = 4 * 1024 * 1024;

fn read_cache(path: &Path) -> ProbeCache {
    let (cache, refused) = read_cache_checked(path);
    for why in refused {
        tracing::warn!("{why}");
    }
    cache
}

/// The cache's entries whose figures can be a machine's (`check_bandwidth_gb_s`, the check a
/// typed `--bandwidth-gb-s` passes), and a line for each one left out, naming the file. A
/// file that is not a regular file or not JSON reads as empty (it is rewritten by the next
/// probe).
fn read_cache_checked(path: &Path) -> (ProbeCache, Vec<String>) {
    let mut cache: ProbeCache =
        crate::fsx::read_regular(path, PROBE_CACHE_MAX_BYTES, "the bandwidth probe cache")
            .ok()
            .and_then(|t| serde_json::from_slice(&t).ok())
            .unwrap_or_default();
    let mut refused = Vec::new();
    cache.entries.retain(|e| match e.probe.refusal() {
        None => true,
        Some(why) => {
            refused.push(format!(
                "ignored the cached {}-thread bandwidth in {}: {why}; it is measured again                  (`tokscope doctor bandwidth --reprobe` measures now)",
                e.probe.threads,
                crate::text::path(path)
            ));
            false
        }
    });
    (cache, refused)
}

/// The machine's CPU memory bandwidth for `threads` threads: the cached probe result for this
/// CPU, thread count and method when there is one, else a fresh probe, stored in the cache,
/// calling `announce` just before a fresh probe (not on a cache hit), so that the caller can
/// say what the seconds of waiting are for. Chat, `run` and `bench` all call this, so they
/// share one figure. A cache that cannot be written costs a fresh probe next time and nothing
/// else.
pub(crate) fn cpu_bandwidth_announced(threads: usize, announce: impl FnOnce()) -> Bandwidth {
    cpu_bandwidth_cached(&probe_cache_path(), threads, || {
        announce();
        full_probe(threads)
    })
}

/// [`cpu_bandwidth_announced`] with its cache file and its probe given (tests use a small probe).
///
/// A probe taken on a busy machine (its load averages, by `run`'s and `bench`'s rule) is kept
/// marked busy and says so; it is reused only while the machine is still busy and measured
/// again as soon as it is quiet, so a figure poisoned once is not the ceiling for ever.
/// A figure below the one cached for fewer threads on the same CPU says that too (more threads
/// do not read memory slower on an idle machine).
pub(crate) fn cpu_bandwidth_cached(
    cache_path: &Path,
    threads: usize,
    probe: impl FnOnce() -> StreamProbe,
) -> Bandwidth {
    let threads = threads.max(1);
    let cpu = cpu_name().unwrap_or_else(|| "unknown CPU".into());
    let (mut cache, refused) = read_cache_checked(cache_path);
    for why in &refused {
        tracing::warn!("{why}");
    }
    let fewer_threads_best = |cache: &ProbeCache| {
        cache
            .entries
            .iter()
            .filter(|e| e.cpu == cpu && e.method == PROBE_METHOD && e.probe.threads < threads)
            .max_by(|a, b| {
                a.probe
                    .best_bytes_per_s()
                    .total_cmp(&b.probe.best_bytes_per_s())
            })
            .map(|e| e.probe.clone())
    };
    let quiet_now = || load_average_1m().is_some_and(|l| l <= threads as f64);
    if let Some(hit) = cache.entries.iter().find(|e| {
        e.cpu == cpu
            && e.method == PROBE_METHOD
            && e.probe.threads == threads
            && !(e.busy && quiet_now())
    }) {
        let mut bw = hit.probe.bandwidth();
        if let BandwidthSource::Measured { method } = &mut bw.source {
            method.push_str(if hit.busy {
                ", cached from a busy machine (measured again once it is quiet)"
            } else {
                ", cached"
            });
        }
        return no_less_than_fewer_threads(bw, threads, fewer_threads_best(&cache).as_ref());
    }
    let fresh = probe();
    let mut bw = fresh.bandwidth();
    if let BandwidthSource::Measured { method } = &mut bw.source {
        for why in &refused {
            method.push_str(&format!("; {why}"));
        }
    }
    if let Some(why) = fresh.refusal() {
        // A probe that measured nothing (a clock that did not move): not kept as a ceiling.
        tracing::warn!("the bandwidth probe measured no usable figure: {why}");
        return bw;
    }
    let busy = fresh.busy();
    if !busy.is_empty() {
        tracing::warn!("bandwidth probe on a busy machine: {}", busy.join("; "));
        if let BandwidthSource::Measured { method } = &mut bw.source {
            method.push_str(&format!(
                "; measured on a busy machine ({})",
                busy.join("; ")
            ));
        }
    }
    let bw = no_less_than_fewer_threads(bw, threads, fewer_threads_best(&cache).as_ref());
    // A figure replaced by a fewer-thread one was disturbed: kept as busy, so that it is
    // measured again once the machine is quiet rather than replaced for ever.
    let disturbed = !busy.is_empty() || bw.bytes_per_s != fresh.best_bytes_per_s();
    store_probe(cache_path, &mut cache, cpu, fresh, disturbed);
    bw
}

/// Below this share of a fewer-thread figure, a probe is taken as inverted (the probe's own
/// best-of-runs spread on a quiet machine stays within a few percent).
const INVERSION_SHARE: f64 = 0.95;

/// The ceiling for `threads` threads given `bw`, the figure measured for them, and `fewer`,
/// the best probe cached for fewer threads on this CPU. More threads never have less bandwidth
/// than fewer on the same machine (each thread's reads add to the others'; at worst they
/// share one controller), so a figure below the fewer-thread one was disturbed (a busy
/// machine): it is not the ceiling, the fewer-thread figure is, and the label says so with
/// both figures. Otherwise `bw` as it is.
fn no_less_than_fewer_threads(
    bw: Bandwidth,
    threads: usize,
    fewer: Option<&StreamProbe>,
) -> Bandwidth {
    let Some(fewer) = fewer else { return bw };
    let floor = fewer.best_bytes_per_s();
    if bw.bytes_per_s >= INVERSION_SHARE * floor {
        return bw;
    }
    let measured = match &bw.source {
        BandwidthSource::Measured { method } => method.clone(),
        other => other.label(),
    };
    let mut used = fewer.bandwidth();
    if let BandwidthSource::Measured { method } = &mut used.source {
        method.push_str(&format!(
            "; used for {threads} threads: the {threads}-thread probe read {:.1} GB/s, below this {}-thread figure, and more threads never have less bandwidth (a busy machine?); `tokscope doctor bandwidth --reprobe` measures again [the {threads}-thread probe: {measured}]",
            bw.bytes_per_s / 1e9,
            fewer.threads,
        ));
    }
    used
}

/// Replaces this CPU's entry for the probe's thread count and writes the cache.
fn store_probe(
    cache_path: &Path,
    cache: &mut ProbeCache,
    cpu: String,
    fresh: StreamProbe,
    busy: bool,
) {
    cache
        .entries
        .retain(|e| !(e.cpu == cpu && e.probe.threads == fresh.threads));
    cache.entries.push(CachedProbe {
        cpu,
        method: PROBE_METHOD.into(),
        measured_unix_s: crate::ids::now_unix_s(),
        probe: fresh,
        busy,
    });
    if let Ok(text) = serde_json::to_vec_pretty(&cache) {
        if let Err(e) = crate::fsx::write_private(cache_path, &text) {
            tracing::warn!("could not cache the bandwidth probe: {e}");
        }
    }
}

/// `tokscope doctor bandwidth`: the cached probes, one line each; with `reprobe`, the thread
/// counts given (or every cached one for this CPU) are measured again first, a busy result
/// left out of the cache as always. Returns the report.
pub(crate) fn bandwidth_report(reprobe: Option<&[usize]>) -> String {
    let path = probe_cache_path();
    let cpu = cpu_name().unwrap_or_else(|| "unknown CPU".into());
    let mut out = String::new();
    if let Some(threads) = reprobe {
        let mut list: Vec<usize> = threads.to_vec();
        if list.is_empty() {
            list = read_cache(&path)
                .entries
                .iter()
                .filter(|e| e.cpu == cpu)
                .map(|e| e.probe.threads)
                .collect();
        }
        if list.is_empty() {
            list.push(std::thread::available_parallelism().map_or(1, usize::from));
        }
        list.sort_unstable();
        list.dedup();
        for t in list {
            let fresh = full_probe(t);
            let busy = fresh.busy();
            out.push_str(&format!(
                "measured {t} thread{}: {:.1} GB/s{}\n",
                if t == 1 { "" } else { "s" },
                fresh.best_bytes_per_s() / 1e9,
                if busy.is_empty() {
                    String::new()
                } else {
                    format!(
                        " — kept as busy, measured again once the machine is quiet: {}",
                        busy.join("; ")
                    )
                }
            ));
            // This CPU's entry for `t` threads is replaced.
            let mut cache = read_cache(&path);
            store_probe(&path, &mut cache, cpu.clone(), fresh, !busy.is_empty());
        }
    }
    let (cache, refused) = read_cache_checked(&path);
    out.push_str(&format!(
        "bandwidth probe cache: {}\n",
        crate::text::path(&path)
    ));
    for why in refused {
        out.push_str(&format!("  warning: {why}\n"));
    }
    if cache.entries.is_empty() {
        out.push_str(
            "  (empty: the chat, `run` and `bench` measure on first use; --reprobe measures now)\n",
        );
        return out;
    }
    let mut entries = cache.entries;
    entries.sort_by(|a, b| (&a.cpu, a.probe.threads).cmp(&(&b.cpu, b.probe.threads)));
    let mut previous: Option<(&str, f64, usize)> = None;
    for e in &entries {
        let p = &e.probe;
        let mut line = format!(
            "  {} · {} thread{} · {:.1} GB/s (read {:.1}, copy {:.1}, triad {:.1}){} · load {} · {}{}",
            crate::text::one_line(&e.cpu),
            p.threads,
            if p.threads == 1 { "" } else { "s" },
            p.best_bytes_per_s() / 1e9,
            p.read_bytes_per_s / 1e9,
            p.copy_bytes_per_s / 1e9,
            p.triad_bytes_per_s / 1e9,
            p.worst_bytes_per_s
                .map_or(String::new(), |w| format!(", slowest run {:.1}", w / 1e9)),
            p.load_before.map_or("unknown".to_string(), |l| format!("{l:.1}")),
            crate::ids::utc_minute(e.measured_unix_s),
            if e.method != PROBE_METHOD {
                " · older method, not used"
            } else if e.busy {
                " · taken on a busy machine (measured again once quiet)"
            } else {
                ""
            },
        );
        if let Some((c, best, t)) = previous {
            if c == e.cpu && p.best_bytes_per_s() < 0.95 * best {
                line.push_str(&format!(
                    " · below the {t}-thread figure, which is the ceiling instead: busy when measured? (--reprobe)"
                ));
            }
        }
        line.push('\n');
        out.push_str(&line);
        if !previous.is_some_and(|(c, best, _)| c == e.cpu && best >= p.best_bytes_per_s()) {
            previous = Some((e.cpu.as_str(), p.best_bytes_per_s(), p.threads));
        }
    }
    out
}

/// The peak memory bandwidths to compare decode with: the configured value (which wins), the
/// GPU's (`gpu`: measured through ggml with the datasheet beside it, see
/// `llama::device_bw`) and the shared CPU probe for `threads` threads — measured on a machine
/// with a GPU too, because layers that are not offloaded are read at the CPU's speed (see
/// `metrics::roofline::placed_bandwidth`).
pub(crate) fn peak_bandwidths(
    configured_gb_s: Option<f64>,
    gpu: impl FnOnce() -> Option<Bandwidth>,
    threads: usize,
    announce: impl FnOnce(),
) -> Peaks {
    if let Some(gb) = configured_gb_s {
        return Peaks::configured(Some(Bandwidth {
            bytes_per_s: gb * 1e9,
            source: BandwidthSource::Config,
        }));
    }
    Peaks {
        configured: None,
        gpu: gpu(),
        cpu: Some(cpu_bandwidth_announced(threads, announce)),
    }
}

/// The 1-minute load average (Linux `/proc/loadavg`), when known.
pub(crate) fn load_average_1m() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The CPU's model name (Linux `/proc/cpuinfo`), when known.
pub(crate) fn cpu_name() -> Option<String> {
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
    fn stream_probe_gives_plausible_labelled_figures() {
        let p = measure_cpu_bandwidth(2, 24 << 20, 2);
        for rate in [p.read_bytes_per_s, p.copy_bytes_per_s, p.triad_bytes_per_s] {
            // Anything from 100 MB/s to 10 TB/s is a machine; NaN or zero is a bug.
            assert!(rate > 1e8 && rate < 1e13, "{rate}");
        }
        assert_eq!(p.threads, 2);
        assert_eq!(p.best_bytes_per_s(), p.read_bytes_per_s);
        let label = p.bandwidth().source.label();
        assert!(
            label.starts_with("measured, STREAM-style probe, 2 threads"),
            "{label}"
        );
        assert!(label.contains("best of 2"), "{label}");
    }

    #[test]
    fn the_ceiling_is_the_read_kernel_even_when_copy_moves_more() {
        // As this project's VMs measure: copy (counting its writes) 59% above read.
        let p = StreamProbe {
            threads: 1,
            footprint_bytes: 3 << 30,
            runs: 5,
            read_bytes_per_s: 15.0e9,
            copy_bytes_per_s: 23.8e9,
            triad_bytes_per_s: 15.6e9,
            worst_bytes_per_s: Some(14.0e9),
            load_before: Some(0.1),
            load_after: Some(0.1),
        };
        assert_eq!(p.bandwidth().bytes_per_s, 15.0e9);
        let label = p.bandwidth().source.label();
        assert!(label.contains("read 15.0 GB/s, the ceiling"), "{label}");
        assert!(label.contains("copy 23.8"), "{label}");
    }

    #[test]
    fn ranges_cover_every_element_once() {
        for (len, threads) in [(10, 3), (3, 8), (1024, 1), (0, 2)] {
            let r = ranges(len, threads);
            assert_eq!(r.len(), threads);
            assert_eq!(r.iter().map(|r| r.len()).sum::<usize>(), len);
            assert!(r.windows(2).all(|w| w[0].end == w[1].start));
        }
    }

    #[test]
    fn footprint_is_well_past_the_cache_and_within_memory() {
        // 32 MiB LLC: 1 GiB wins over 8 × 32 MiB.
        assert_eq!(
            probe_footprint_bytes(Some(32 << 20), Some(64 << 30)),
            1 << 30
        );
        // 256 MiB LLC: 8 × it.
        assert_eq!(
            probe_footprint_bytes(Some(256 << 20), Some(64 << 30)),
            2 << 30
        );
        // Little free memory: half of it.
        assert_eq!(
            probe_footprint_bytes(Some(32 << 20), Some(1 << 30)),
            512 << 20
        );
        assert_eq!(probe_footprint_bytes(None, None), 1 << 30);
        assert_eq!(parse_cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("8M"), Some(8 << 20));
        assert_eq!(parse_cache_size("x"), None);
    }

    #[test]
    fn the_probe_is_cached_per_cpu_and_thread_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.json");
        let calls = std::cell::Cell::new(0);
        let probe = |threads| {
            calls.set(calls.get() + 1);
            StreamProbe {
                threads,
                footprint_bytes: 3 << 20,
                runs: 1,
                read_bytes_per_s: 10e9 * threads as f64,
                copy_bytes_per_s: 1e9,
                triad_bytes_per_s: 1e9,
                worst_bytes_per_s: None,
                load_before: Some(0.0),
                load_after: Some(0.0),
            }
        };
        let first = cpu_bandwidth_cached(&path, 2, || probe(2));
        assert_eq!(first.bytes_per_s, 20e9);
        assert!(!first.source.label().ends_with("cached"));
        let again = cpu_bandwidth_cached(&path, 2, || probe(2));
        assert_eq!(calls.get(), 1, "the second call reuses the cached result");
        assert_eq!(again.bytes_per_s, 20e9);
        assert!(
            again.source.label().ends_with(", cached"),
            "{}",
            again.source.label()
        );
        // Another thread count is another probe, and both stay cached.
        assert_eq!(
            cpu_bandwidth_cached(&path, 1, || probe(1)).bytes_per_s,
            10e9
        );
        assert_eq!(calls.get(), 2);
        cpu_bandwidth_cached(&path, 2, || probe(2));
        cpu_bandwidth_cached(&path, 1, || probe(1));
        assert_eq!(calls.get(), 2);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(PROBE_METHOD) && text.contains("\"threads\": 1"),
            "{text}"
        );
    }

    /// A cached figure that cannot be a machine's (0, -1, 1e308: a damaged or hand-edited
    /// cache) is not used: the probe runs again, the label names the file, and the cache
    /// keeps the new figure.
    #[test]
    fn a_bad_cached_figure_is_ignored_named_and_measured_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.json");
        let probe = |threads: usize, read: f64| StreamProbe {
            threads,
            footprint_bytes: 3 << 20,
            runs: 1,
            read_bytes_per_s: read,
            copy_bytes_per_s: 1e9,
            triad_bytes_per_s: 1e9,
            worst_bytes_per_s: None,
            load_before: Some(0.0),
            load_after: Some(0.0),
        };
        for bad in [0.0, -1e9, 1e308] {
            let cpu = cpu_name().unwrap_or_else(|| "unknown CPU".into());
            let mut cache = ProbeCache::default();
            store_probe(&path, &mut cache, cpu, probe(1, bad), false);
            let calls = std::cell::Cell::new(0);
            let bw = cpu_bandwidth_cached(&path, 1, || {
                calls.set(calls.get() + 1);
                probe(1, 12e9)
            });
            assert_eq!(calls.get(), 1, "{bad}: measured again");
            assert_eq!(bw.bytes_per_s, 12e9);
            let label = bw.source.label();
            assert!(
                label.contains("ignored the cached 1-thread bandwidth in")
                    && label.contains("probe.json"),
                "{label}"
            );
            let (kept, refused) = read_cache_checked(&path);
            assert!(refused.is_empty(), "{refused:?}");
            assert_eq!(kept.entries[0].probe.read_bytes_per_s, 12e9);
        }
    }

    /// A probe taken on a busy machine is used once but never cached (a 2-thread figure of 9.7
    /// GB/s against 11.5–18.2 for one thread was cached for ever); a figure below the
    /// fewer-thread one is replaced by it.
    #[test]
    fn a_busy_probe_is_kept_as_busy_and_an_inversion_is_not_the_ceiling() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.json");
        let probe = |threads: usize, gb_s: f64, load: f64| StreamProbe {
            threads,
            footprint_bytes: 3 << 20,
            runs: 3,
            read_bytes_per_s: gb_s * 1e9,
            copy_bytes_per_s: 1e9,
            triad_bytes_per_s: 1e9,
            worst_bytes_per_s: Some(gb_s * 0.9e9),
            load_before: Some(load),
            load_after: Some(load + threads as f64),
        };
        let quiet_one = cpu_bandwidth_cached(&path, 1, || probe(1, 15.0, 0.1));
        assert!(quiet_one.source.label().contains("slowest run 13.5 GB/s"));
        // Two threads on a machine with a load of 3: used, labelled, kept as busy.
        let busy = cpu_bandwidth_cached(&path, 2, || probe(2, 9.7, 3.0));
        let label = busy.source.label();
        assert!(label.contains("measured on a busy machine"), "{label}");
        assert!(
            label.contains("the 2-thread probe read 9.7 GB/s, below this 1-thread figure"),
            "{label}"
        );
        assert_eq!(busy.bytes_per_s, 15e9, "the 1-thread figure is the ceiling");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"busy\": true"), "{text}");
        // Whether it is reused depends on the load now; on a quiet machine it is measured
        // again and the quiet figure replaces it.
        let now_quiet = load_average_1m().is_some_and(|l| l <= 2.0);
        let next = cpu_bandwidth_cached(&path, 2, || probe(2, 18.0, 0.2));
        if now_quiet {
            assert_eq!(next.bytes_per_s, 18e9);
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(!text.contains("\"busy\": true"), "{text}");
        } else {
            // The busy 9.7 is still below the 1-thread 15.0: the 1-thread figure is used.
            assert_eq!(next.bytes_per_s, 15e9);
            assert!(next.source.label().contains("cached from a busy machine"));
        }
    }

    /// More threads never have less bandwidth: the 8B chat computed MBU 22% from a 2-thread
    /// probe of 11.2 GB/s taken below the 1-thread 31.2 GB/s. Such a figure is not the ceiling,
    /// even when the load averages said the machine was quiet: the 1-thread figure is, and the
    /// label says so; the inverted entry is kept as busy (measured again once quiet). A figure
    /// within the probes' spread of the fewer-thread one stays as measured.
    #[test]
    fn a_probe_below_a_fewer_thread_one_is_not_the_ceiling() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.json");
        let probe = |threads: usize, gb_s: f64| StreamProbe {
            threads,
            footprint_bytes: 3 << 20,
            runs: 3,
            read_bytes_per_s: gb_s * 1e9,
            copy_bytes_per_s: 1e9,
            triad_bytes_per_s: 1e9,
            worst_bytes_per_s: None,
            load_before: Some(0.0),
            load_after: Some(0.0),
        };
        assert_eq!(
            cpu_bandwidth_cached(&path, 1, || probe(1, 31.2)).bytes_per_s,
            31.2e9
        );
        let two = cpu_bandwidth_cached(&path, 2, || probe(2, 11.2));
        assert_eq!(two.bytes_per_s, 31.2e9, "{}", two.source.label());
        let label = two.source.label();
        assert!(
            label.contains("1 thread,")
                && label.contains("used for 2 threads: the 2-thread probe read 11.2 GB/s, below this 1-thread figure")
                && label.contains("--reprobe"),
            "{label}"
        );
        let (cache, _) = read_cache_checked(&path);
        let kept = cache.entries.iter().find(|e| e.probe.threads == 2).unwrap();
        assert!(kept.busy, "the inverted probe is kept as busy");
        // Within 5% of the 1-thread figure: a probe's own spread, used as measured.
        let near = no_less_than_fewer_threads(probe(2, 30.0).bandwidth(), 2, Some(&probe(1, 31.2)));
        assert_eq!(near.bytes_per_s, 30e9);
        // Above it: as measured; with no fewer-thread figure: as measured.
        let above =
            no_less_than_fewer_threads(probe(4, 40.0).bandwidth(), 4, Some(&probe(1, 31.2)));
        assert_eq!(above.bytes_per_s, 40e9);
        assert_eq!(
            no_less_than_fewer_threads(probe(2, 11.2).bandwidth(), 2, None).bytes_per_s,
            11.2e9
        );
    }
}
