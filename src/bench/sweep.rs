//! The sweep: every combination of the swept settings, in llama-bench's order (model, GPU
//! layers, n_batch, n_ubatch, K type, V type, flash attention, threads, depth, then the tests:
//! every pp, every tg, every pg), which keeps model reloads to one per model and GPU-layer
//! count. Batch tests follow the other tests of their parameter set.

use std::path::{Path, PathBuf};

use crate::llama::measure::TestSpec;
use crate::llama::placement::Placement;
use crate::llama::settings::{FlashAttn, KvType};

/// The values to sweep, each a non-empty list (the tests are one list of their own).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sweep {
    /// -1 = all layers.
    pub n_gpu_layers: Vec<i64>,
    pub n_batch: Vec<u32>,
    pub n_ubatch: Vec<u32>,
    pub type_k: Vec<KvType>,
    pub type_v: Vec<KvType>,
    pub flash_attn: Vec<FlashAttn>,
    pub threads: Vec<u32>,
    pub n_depth: Vec<u32>,
    /// One per device set (`--devices`), each with the split mode, main GPU and tensor
    /// split; one default placement when none is given.
    pub placements: Vec<Placement>,
    /// pp, tg and pg tests, in that order.
    pub tests: Vec<TestSpec>,
    /// Batch tests, measured from an empty cache like llama-batched-bench (no depth).
    pub batch_tests: Vec<TestSpec>,
}

/// The settings of one llama.cpp context (and the model load, for `n_gpu_layers`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ParamSet {
    pub model: PathBuf,
    pub n_gpu_layers: i64,
    pub n_batch: u32,
    pub n_ubatch: u32,
    pub type_k: KvType,
    pub type_v: KvType,
    pub flash_attn: FlashAttn,
    pub threads: u32,
    /// Multi-GPU placement of the model load (llama.cpp's defaults unless given).
    pub placement: Placement,
}

impl ParamSet {
    /// Whether `other` can reuse this one's loaded model (same file, offload and placement).
    pub(crate) fn same_model_load(&self, other: &ParamSet) -> bool {
        self.model == other.model
            && self.n_gpu_layers == other.n_gpu_layers
            && self.placement == other.placement
    }

    /// Offloaded layers as the engine settings take them (`None` = all).
    pub(crate) fn gpu_layers_setting(&self) -> Option<u32> {
        u32::try_from(self.n_gpu_layers).ok()
    }

    /// The model loaded with this set's offload and placement.
    pub(crate) fn load(&self) -> Result<crate::llama::LoadedModel, crate::engine::EngineError> {
        let layers = self.gpu_layers_setting();
        crate::llama::load_model_placed(&self.model, layers, &self.placement, false, |_| true)
    }
}

/// One test under one parameter set at one depth.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Job {
    pub params: ParamSet,
    pub depth: u32,
    pub test: TestSpec,
}

impl Job {
    /// Tokens the context must hold: depth + prompt + generated, for every sequence.
    pub(crate) fn n_ctx(&self) -> u32 {
        let (p, n) = self.test.lengths();
        let per_sequence = self.depth.saturating_add(p).saturating_add(n).max(1);
        per_sequence.saturating_mul(self.test.sequences())
    }

    pub(crate) fn model_file_name(&self) -> String {
        file_name(&self.params.model)
    }
}

pub(crate) fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Every job, in llama-bench's order.
pub(crate) fn expand(models: &[PathBuf], sweep: &Sweep) -> Vec<Job> {
    let mut jobs = Vec::new();
    for params in param_sets(models, sweep) {
        for depth in &sweep.n_depth {
            for test in &sweep.tests {
                jobs.push(Job {
                    params: params.clone(),
                    depth: *depth,
                    test: *test,
                });
            }
        }
        for test in &sweep.batch_tests {
            jobs.push(Job {
                params: params.clone(),
                depth: 0,
                test: *test,
            });
        }
    }
    jobs
}

fn param_sets(models: &[PathBuf], s: &Sweep) -> Vec<ParamSet> {
    let default_placement = [Placement::default()];
    let placements: &[Placement] = if s.placements.is_empty() {
        &default_placement
    } else {
        &s.placements
    };
    let base = models.iter().map(|model| ParamSet {
        model: model.clone(),
        n_gpu_layers: 0,
        n_batch: 0,
        n_ubatch: 0,
        type_k: KvType::F16,
        type_v: KvType::F16,
        flash_attn: FlashAttn::Auto,
        threads: 0,
        placement: Placement::default(),
    });
    let sets = cross(base.collect(), placements, |p, v| p.placement = v);
    let sets = cross(sets, &s.n_gpu_layers, |p, v| p.n_gpu_layers = v);
    let sets = cross(sets, &s.n_batch, |p, v| p.n_batch = v);
    let sets = cross(sets, &s.n_ubatch, |p, v| p.n_ubatch = v);
    let sets = cross(sets, &s.type_k, |p, v| p.type_k = v);
    let sets = cross(sets, &s.type_v, |p, v| p.type_v = v);
    let sets = cross(sets, &s.flash_attn, |p, v| p.flash_attn = v);
    cross(sets, &s.threads, |p, v| p.threads = v)
}

/// Each item once per value, `set` giving it the value: the values vary fastest, as in nested
/// loops with `values` innermost.
pub(crate) fn cross<T: Clone, V: Clone>(items: Vec<T>, values: &[V], set: fn(&mut T, V)) -> Vec<T> {
    let each = |item: T| {
        values.iter().map(move |v| {
            let mut item = item.clone();
            set(&mut item, v.clone());
            item
        })
    };
    items.into_iter().flat_map(each).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep() -> Sweep {
        Sweep {
            n_gpu_layers: vec![-1],
            n_batch: vec![2048],
            n_ubatch: vec![512],
            type_k: vec![KvType::F16, KvType::Q8_0],
            type_v: vec![KvType::F16],
            flash_attn: vec![FlashAttn::Auto],
            threads: vec![1, 2],
            n_depth: vec![0],
            placements: Vec::new(),
            tests: vec![TestSpec::Pp { n_prompt: 16 }, TestSpec::Tg { n_gen: 8 }],
            batch_tests: Vec::new(),
        }
    }

    #[test]
    fn cartesian_product_in_llama_bench_order() {
        let jobs = expand(&[PathBuf::from("a.gguf")], &sweep());
        let got: Vec<(KvType, u32, String)> = jobs
            .iter()
            .map(|j| (j.params.type_k, j.params.threads, j.test.name(j.depth)))
            .collect();
        let want = [
            (KvType::F16, 1, "pp16"),
            (KvType::F16, 1, "tg8"),
            (KvType::F16, 2, "pp16"),
            (KvType::F16, 2, "tg8"),
            (KvType::Q8_0, 1, "pp16"),
            (KvType::Q8_0, 1, "tg8"),
            (KvType::Q8_0, 2, "pp16"),
            (KvType::Q8_0, 2, "tg8"),
        ];
        let want: Vec<(KvType, u32, String)> = want
            .iter()
            .map(|(k, t, n)| (*k, *t, n.to_string()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn models_outermost_depth_inside_and_batch_after() {
        let mut s = sweep();
        s.type_k = vec![KvType::F16];
        s.threads = vec![1];
        s.n_depth = vec![0, 64];
        s.batch_tests = vec![
            TestSpec::Batch {
                sequences: 1,
                n_prompt: 16,
                n_gen: 8,
            },
            TestSpec::Batch {
                sequences: 4,
                n_prompt: 16,
                n_gen: 8,
            },
        ];
        let jobs = expand(&[PathBuf::from("a.gguf"), PathBuf::from("b.gguf")], &s);
        let names: Vec<String> = jobs
            .iter()
            .map(|j| format!("{} {}", j.model_file_name(), j.test.name(j.depth)))
            .collect();
        assert_eq!(
            names,
            [
                "a.gguf pp16",
                "a.gguf tg8",
                "a.gguf pp16 @ d64",
                "a.gguf tg8 @ d64",
                "a.gguf B1 pp16+tg8",
                "a.gguf B4 pp16+tg8",
                "b.gguf pp16",
                "b.gguf tg8",
                "b.gguf pp16 @ d64",
                "b.gguf tg8 @ d64",
                "b.gguf B1 pp16+tg8",
                "b.gguf B4 pp16+tg8",
            ]
        );
        assert_eq!(jobs[2].n_ctx(), 80);
        assert_eq!(jobs[5].n_ctx(), 4 * 24);
    }

    #[test]
    fn test_names_match_llama_bench() {
        assert_eq!(TestSpec::Pp { n_prompt: 512 }.name(0), "pp512");
        assert_eq!(TestSpec::Tg { n_gen: 128 }.name(512), "tg128 @ d512");
        assert_eq!(
            TestSpec::Pg {
                n_prompt: 512,
                n_gen: 128
            }
            .name(0),
            "pp512+tg128"
        );
    }
}
