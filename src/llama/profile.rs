//! The step profiler: llama.cpp's evaluation callback (`cb_eval`) times each node of a
//! sampled decode step as the scheduler computes it (docs/metrics.md, "Step profile");
//! `metrics::profile` names the parts and sums them.
//!
//! Armed, it asks the scheduler to stop after every node that computes something (views and
//! reshapes run with the node after them), so each range is one real node: its time runs from
//! the question about the range's first node to the synchronisation after it. Disarmed, it
//! answers "no" to every question: each split is computed whole, as without a callback, with
//! one synchronisation at its end.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use llama_cpp_2::context::eval::{EvalNode, EvalObserver};

use crate::metrics::profile::{NodeFacts, StepRecord};
use crate::metrics::roofline::KvShape;

/// Times the nodes of the steps it is armed for.
#[derive(Default)]
pub(crate) struct StepProfiler {
    armed: AtomicBool,
    rec: Mutex<Recorder>,
    /// The model's KV shape (its window layers), for the cells attention reads.
    kv: OnceLock<KvShape>,
    #[cfg(feature = "plant")]
    plant: Option<(String, Duration)>,
}

#[derive(Default)]
struct Recorder {
    started: Option<Instant>,
    first_ask: Option<Instant>,
    range_start: Option<Instant>,
    last_done: Option<Instant>,
    sync: Duration,
    nodes: Vec<NodeFacts>,
}

impl StepProfiler {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            #[cfg(feature = "plant")]
            plant: planted_slowdown(),
            ..Self::default()
        })
    }

    /// The model's KV shape, once the context is made (`ModelInfo::kv_shape`): which layers
    /// read a window of the cache (`metrics::profile::attention_reads`).
    pub(crate) fn set_kv_shape(&self, kv: Option<KvShape>) {
        if let Some(kv) = kv {
            let _ = self.kv.set(kv);
        }
    }

    /// Records the next decode call, which starts at `at`.
    pub(crate) fn arm(&self, at: Instant) {
        if let Ok(mut r) = self.rec.lock() {
            let capacity = r.nodes.capacity();
            *r = Recorder {
                started: Some(at),
                nodes: Vec::with_capacity(capacity),
                ..Recorder::default()
            };
        }
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Stops recording: the step's record. Its decode call took `call` and ended (its backend
    /// synchronised) at `end`, after a host gap of `host`; it computed `rows` rows with
    /// `depth` tokens in the KV cache; llama.cpp's own clock gave it `llama_eval`.
    pub(crate) fn finish_step(
        &self,
        end: Instant,
        host: Duration,
        call: Duration,
        (rows, depth): (usize, usize),
        llama_eval: Option<Duration>,
    ) -> StepRecord {
        self.armed.store(false, Ordering::SeqCst);
        let mut step = StepRecord {
            host,
            wall: host + call,
            rows,
            depth,
            llama_eval,
            ..StepRecord::default()
        };
        let Ok(mut r) = self.rec.lock() else {
            return step;
        };
        let started = r.started.unwrap_or(end);
        let first = r.first_ask.unwrap_or(end);
        // A range asked for and never computed (an error mid-graph) counts as output.
        let last = r.last_done.unwrap_or(first);
        step.nodes = std::mem::take(&mut r.nodes);
        step.graph_inputs = first.saturating_duration_since(started);
        step.sync = r.sync;
        step.output = end.saturating_duration_since(last);
        drop(r);
        crate::metrics::profile::attention_reads(&mut step, self.kv.get());
        step
    }
}

impl EvalObserver for StepProfiler {
    fn ask(&self, node: EvalNode<'_>) -> bool {
        // A planted slowdown slows every step, profiled or not, as a real one would: in a
        // profiled step inside the node's range (after its start is taken).
        if !self.armed.load(Ordering::Relaxed) {
            #[cfg(feature = "plant")]
            plant_slowdown(&self.plant, node);
            return false;
        }
        let now = Instant::now();
        let Ok(mut r) = self.rec.lock() else {
            return false;
        };
        if r.range_start.is_none() {
            r.range_start = Some(now);
            match r.last_done {
                Some(done) => r.sync += now.saturating_duration_since(done),
                None => r.first_ask = Some(now),
            }
        }
        drop(r);
        #[cfg(feature = "plant")]
        plant_slowdown(&self.plant, node);
        !node.is_noop()
    }

    fn computed(&self, node: EvalNode<'_>) {
        if !self.armed.load(Ordering::Relaxed) {
            return;
        }
        let now = Instant::now();
        let Ok(mut r) = self.rec.lock() else {
            return;
        };
        let start = r.range_start.take().unwrap_or(now);
        let mut facts = facts(node, now.saturating_duration_since(start));
        facts.start = start.saturating_duration_since(r.started.unwrap_or(start));
        r.nodes.push(facts);
        // The bookkeeping above is the callback's time: it goes to "sync / other".
        r.last_done = Some(now);
    }
}

/// The first source that is a model weight: its name and bytes.
fn weight_of(node: EvalNode<'_>) -> Option<(&str, usize)> {
    (0..4)
        .filter_map(|i| node.src(i))
        .find(|s| s.is_weight())
        .map(|s| (s.name(), s.nbytes()))
}

/// What the metrics need of a computed node.
fn facts(node: EvalNode<'_>, time: Duration) -> NodeFacts {
    let op = node.op();
    let weight = weight_of(node);
    let ne = node.ne();
    let elems = |v: [i64; 4]| v.iter().map(|x| (*x).max(0) as u64).product::<u64>();
    let mut kv_cells = 0;
    let (kv_bytes, flops) = match op {
        // KV views read by attention: K and V (sources 1 and 2); 2 FLOPs per multiply-add in
        // Q·K and in P·V: 4 × head size × KV length × rows × heads. The views' whole length
        // here: `finish_step` counts the cells the kernel reads.
        "FLASH_ATTN_EXT" => {
            let k = node.src(1);
            let kv = [node.src(1), node.src(2)]
                .iter()
                .flatten()
                .map(|s| s.nbytes() as u64)
                .sum();
            let q = node.src(0).map_or([0; 4], |q| q.ne());
            let n_kv = k.map_or(0, |k| k.ne()[1]).max(0) as u64;
            kv_cells = n_kv;
            (
                kv,
                4 * q[0].max(0) as u64 * n_kv * q[1].max(0) as u64 * q[2].max(0) as u64,
            )
        }
        "MUL_MAT" | "MUL_MAT_ID" => {
            let k = node.src(0).map_or(0, |a| a.ne()[0]).max(0) as u64;
            let kv = if weight.is_none() {
                node.src(0).map_or(0, |a| a.nbytes() as u64)
            } else {
                0
            };
            (kv, 2 * k * elems(ne))
        }
        _ => (0, 0),
    };
    // A row lookup reads only the rows it looks up, not the table.
    let weight_bytes = match (op, weight, node.src(0)) {
        ("GET_ROWS", Some(_), Some(table)) => {
            let rows = table.ne()[1].max(1) as u64;
            table.nbytes() as u64 / rows * ne[1].max(0) as u64
        }
        (_, Some((_, b)), _) => b as u64,
        _ => 0,
    };
    NodeFacts {
        name: node.name().to_string(),
        op,
        weight: weight.map(|(w, _)| w.to_string()),
        weight_bytes,
        kv_bytes,
        kv_cells,
        flops,
        time,
        start: Duration::ZERO,
    }
}

/// A planted slowdown for the profiler's check (`plant` builds only):
/// `TOKSCOPE_PLANT_SLOW=ffn_down:300` spins 300 µs before every node reading a weight whose
/// name contains `ffn_down`, in every decode step, so the check can show it lands in that
/// part and no other (scripts/profile-physics.sh --plant).
#[cfg(feature = "plant")]
fn planted_slowdown() -> Option<(String, Duration)> {
    let v = std::env::var("TOKSCOPE_PLANT_SLOW").ok()?;
    let (kind, us) = v.split_once(':')?;
    Some((kind.to_string(), Duration::from_micros(us.parse().ok()?)))
}

/// Spins for the planted pause before a node that computes and reads a matching weight.
#[cfg(feature = "plant")]
fn plant_slowdown(plant: &Option<(String, Duration)>, node: EvalNode<'_>) {
    let Some((kind, pause)) = plant else {
        return;
    };
    if !node.is_noop() && weight_of(node).is_some_and(|(w, _)| w.contains(kind.as_str())) {
        let until = Instant::now() + *pause;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }
}
