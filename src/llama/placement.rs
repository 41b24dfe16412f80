//! Where a model's layers go on a machine with several GPUs, as llama-bench's `-sm`, `-mg`,
//! `-dev` and `-ts` say it: the split mode, the main GPU, the device set, and the tensor
//! split. Parsing and validation are pure; [`Placement::apply`] sets llama-cpp-2's model
//! parameters, resolving device names against ggml's device list.

use llama_cpp_2::model::params::{LlamaModelParams, LlamaSplitMode};

/// llama.cpp's `LLAMA_MAX_DEVICES`-bounded lists: at most this many devices / split values.
pub(crate) const MAX_DEVICES: usize = 16;

/// How layers are spread over several GPUs (llama.cpp's `--split-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SplitMode {
    /// One GPU only (the main GPU).
    None,
    /// Whole layers per GPU (llama.cpp's default).
    Layer,
    /// Rows of each matrix across GPUs.
    Row,
}

impl SplitMode {
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(SplitMode::None),
            "layer" => Ok(SplitMode::Layer),
            "row" => Ok(SplitMode::Row),
            other => Err(format!(
                "invalid value `{other}` for --split-mode: one of none, layer, row"
            )),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            SplitMode::None => "none",
            SplitMode::Layer => "layer",
            SplitMode::Row => "row",
        }
    }

    fn to_llama(self) -> LlamaSplitMode {
        match self {
            SplitMode::None => LlamaSplitMode::None,
            SplitMode::Layer => LlamaSplitMode::Layer,
            SplitMode::Row => LlamaSplitMode::Row,
        }
    }
}

/// The placement of one model load. The default leaves llama.cpp's defaults alone.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Placement {
    pub split_mode: Option<SplitMode>,
    pub main_gpu: Option<u32>,
    /// ggml device names ("CUDA0"); `Some(vec![])` = no GPU device at all (llama-bench's
    /// `-dev none`).
    pub devices: Option<Vec<String>>,
    pub tensor_split: Option<Vec<f32>>,
}

impl Placement {
    /// A short label for a bench row ("CUDA0/CUDA1 row mg1"), empty for the default.
    pub(crate) fn label(&self) -> String {
        let mut parts = Vec::new();
        if let Some(d) = &self.devices {
            parts.push(if d.is_empty() {
                "dev none".to_owned()
            } else {
                d.join("/")
            });
        }
        if let Some(m) = self.split_mode {
            parts.push(format!("sm {}", m.name()));
        }
        if let Some(g) = self.main_gpu {
            parts.push(format!("mg {g}"));
        }
        if let Some(ts) = &self.tensor_split {
            parts.push(format!(
                "ts {}",
                ts.iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join("/")
            ));
        }
        parts.join(" ")
    }

    /// The GPUs a load with this placement puts work on, as llama.cpp picks them
    /// (`src/llama.cpp`, `llama_model_load_from_file_impl`, lines 221–300 of llama-cpp-sys-2
    /// 0.1.160): the named devices (`--devices`), else every GPU ggml has; with `--split-mode
    /// none`, only the `main_gpu`-th of those (0 unless `--main-gpu`). `gpus` are ggml's GPU
    /// names; named devices keep the order given, and are matched as `apply` matches them.
    pub(crate) fn gpus_used(&self, gpus: &[String]) -> Vec<String> {
        let listed: Vec<String> = match &self.devices {
            // In the order given: llama.cpp's device list, which `main_gpu` indexes.
            Some(names) => names
                .iter()
                .filter_map(|n| gpus.iter().find(|g| g.eq_ignore_ascii_case(n)).cloned())
                .collect(),
            None => gpus.to_vec(),
        };
        if self.split_mode == Some(SplitMode::None) {
            let main = usize::try_from(self.main_gpu.unwrap_or(0)).unwrap_or(usize::MAX);
            return listed.get(main).cloned().into_iter().collect();
        }
        listed
    }

    /// Sets the model parameters. Device names are looked up in ggml's device list (case
    /// insensitive); an unknown name is an error that lists the known ones.
    pub(crate) fn apply(&self, mut params: LlamaModelParams) -> Result<LlamaModelParams, String> {
        if let Some(mode) = self.split_mode {
            params = params.with_split_mode(mode.to_llama());
        }
        if let Some(g) = self.main_gpu {
            params = params.with_main_gpu(i32::try_from(g).unwrap_or(i32::MAX));
        }
        if let Some(names) = &self.devices {
            let known = llama_cpp_2::list_llama_ggml_backend_devices();
            let mut indices = Vec::new();
            for name in names {
                let found = known
                    .iter()
                    .find(|d| d.name.eq_ignore_ascii_case(name))
                    .ok_or_else(|| {
                        format!(
                            "--devices: no device `{name}`; this machine has {}",
                            known
                                .iter()
                                .map(|d| d.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })?;
                indices.push(found.index);
            }
            params = params
                .with_devices(&indices)
                .map_err(|e| format!("--devices: {e}"))?;
        }
        if self.tensor_split.is_some() {
            // llama-cpp-2 0.1.160 keeps llama_model_params private and has no tensor-split
            // setter: say so rather than run with a split the user did not get.
            return Err("--tensor-split cannot be passed to llama.cpp through the llama-cpp-2 0.1.160 bindings (no setter); use --devices and --split-mode layer, which split by free memory".to_owned());
        }
        Ok(params)
    }
}

/// `CUDA0/CUDA1,CUDA0` → two device sets; `none` → the empty set (llama-bench's `-dev`).
pub(crate) fn parse_device_sets(given: &[String]) -> Result<Vec<Vec<String>>, String> {
    let mut sets = Vec::new();
    for value in given {
        for set in value.split(',') {
            let set = set.trim();
            if set.is_empty() {
                return Err(format!(
                    "invalid value `{value}` for --devices: an empty device set (use `none` for no GPU)"
                ));
            }
            if set.eq_ignore_ascii_case("none") {
                sets.push(Vec::new());
                continue;
            }
            let names: Vec<String> = set.split('/').map(|n| n.trim().to_owned()).collect();
            if names.iter().any(|n| n.is_empty()) {
                return Err(format!(
                    "invalid value `{set}` for --devices: device names separated by `/`, like CUDA0/CUDA1"
                ));
            }
            if names.len() > MAX_DEVICES {
                return Err(format!(
                    "invalid value `{set}` for --devices: at most {MAX_DEVICES} devices"
                ));
            }
            sets.push(names);
        }
    }
    Ok(sets)
}

/// `3/1` → [3.0, 1.0]: each value a proportion ≥ 0, at least one above 0.
pub(crate) fn parse_tensor_split(s: &str) -> Result<Vec<f32>, String> {
    let bad = |why: &str| format!("invalid value `{s}` for --tensor-split: {why}");
    let values = s
        .split(['/', ','])
        .map(|v| v.trim().parse::<f32>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| bad("proportions like 3/1 or 1/1/2"))?;
    if values.len() > MAX_DEVICES {
        return Err(bad(&format!("at most {MAX_DEVICES} values")));
    }
    if values.iter().any(|v| !v.is_finite() || *v < 0.0) {
        return Err(bad("each proportion must be 0 or more"));
    }
    if !values.iter().any(|v| *v > 0.0) {
        return Err(bad("at least one proportion must be above 0"));
    }
    Ok(values)
}

/// `--main-gpu N`: a device index below [`MAX_DEVICES`].
pub(crate) fn parse_main_gpu(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if (n as usize) < MAX_DEVICES => Ok(n),
        _ => Err(format!(
            "invalid value `{s}` for --main-gpu: a device index from 0 to {}",
            MAX_DEVICES - 1
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpus_a_load_uses_are_llama_cpps_choice() {
        let gpus: Vec<String> = ["CUDA0", "CUDA1", "CUDA2"].map(String::from).to_vec();
        let all = Placement::default();
        assert_eq!(all.gpus_used(&gpus), gpus);
        let two = Placement {
            devices: Some(vec!["cuda2".into(), "CUDA1".into()]),
            ..Placement::default()
        };
        assert_eq!(two.gpus_used(&gpus), ["CUDA2", "CUDA1"]);
        let none = Placement {
            devices: Some(vec![]),
            ..Placement::default()
        };
        assert!(none.gpus_used(&gpus).is_empty());
        let single = Placement {
            split_mode: Some(SplitMode::None),
            ..Placement::default()
        };
        assert_eq!(single.gpus_used(&gpus), ["CUDA0"]);
        let second = Placement {
            split_mode: Some(SplitMode::None),
            main_gpu: Some(1),
            ..two.clone()
        };
        assert_eq!(second.gpus_used(&gpus), ["CUDA1"]);
        let past_the_end = Placement {
            main_gpu: Some(7),
            ..single
        };
        assert!(past_the_end.gpus_used(&gpus).is_empty());
    }

    #[test]
    fn split_modes() {
        assert_eq!(SplitMode::parse("ROW").unwrap(), SplitMode::Row);
        assert_eq!(SplitMode::parse("none").unwrap(), SplitMode::None);
        assert!(SplitMode::parse("tensor")
            .unwrap_err()
            .contains("none, layer, row"));
    }

    #[test]
    fn device_sets_as_llama_bench_writes_them() {
        let sets = parse_device_sets(&["CUDA0/CUDA1,CUDA0".into(), "none".into()]).unwrap();
        assert_eq!(
            sets,
            vec![
                vec!["CUDA0".to_string(), "CUDA1".to_string()],
                vec!["CUDA0".to_string()],
                vec![]
            ]
        );
        assert!(parse_device_sets(&["CUDA0,,CUDA1".into()]).is_err());
        assert!(parse_device_sets(&["CUDA0//CUDA1".into()]).is_err());
    }

    #[test]
    fn tensor_split_and_main_gpu() {
        assert_eq!(parse_tensor_split("3/1").unwrap(), vec![3.0, 1.0]);
        assert_eq!(parse_tensor_split("0.5,0.5").unwrap(), vec![0.5, 0.5]);
        assert!(parse_tensor_split("0/0").unwrap_err().contains("above 0"));
        assert!(parse_tensor_split("-1/2")
            .unwrap_err()
            .contains("0 or more"));
        assert!(parse_tensor_split("a/b").is_err());
        assert_eq!(parse_main_gpu("1").unwrap(), 1);
        assert!(parse_main_gpu("16").is_err());
        assert!(parse_main_gpu("-1").is_err());
    }

    #[test]
    fn labels() {
        assert_eq!(Placement::default().label(), "");
        let p = Placement {
            split_mode: Some(SplitMode::Row),
            main_gpu: Some(1),
            devices: Some(vec!["CUDA0".into(), "CUDA1".into()]),
            tensor_split: None,
        };
        assert_eq!(p.label(), "CUDA0/CUDA1 sm row mg 1");
    }

    #[test]
    fn unknown_devices_and_tensor_split_are_refused() {
        let p = Placement {
            devices: Some(vec!["CUDA7".into()]),
            ..Placement::default()
        };
        let e = p.apply(LlamaModelParams::default()).unwrap_err();
        assert!(e.contains("no device `CUDA7`") && e.contains("CPU"), "{e}");
        let p = Placement {
            tensor_split: Some(vec![1.0, 1.0]),
            ..Placement::default()
        };
        assert!(p
            .apply(LlamaModelParams::default())
            .unwrap_err()
            .contains("--tensor-split"));
        let p = Placement {
            split_mode: Some(SplitMode::None),
            main_gpu: Some(0),
            ..Placement::default()
        };
        assert!(p.apply(LlamaModelParams::default()).is_ok());
    }
}
