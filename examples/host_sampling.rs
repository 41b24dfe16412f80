//! Micro-benchmark of one sampling call on a model's real logits: llama.cpp's chain as the
//! decode loop used it before (`build_sampler` + `llama_sampler_sample`, which fills a
//! candidate array over the whole vocabulary every token) against `HostSampler` (argmax, or
//! one-pass top-k then the chain over k candidates), alternating A/B/B/A on the same logits
//! row, at temperature 0 and with the default chain. Prints the median and p90 per call, in
//! µs: medians, because this machine is shared and a preempted call is not the sampler's cost.
//!
//! cargo run --release --example host_sampling -- MODEL.gguf [STEPS] [CALLS_PER_STEP]

use std::time::{Duration, Instant};

use llama_cpp_2::llama_batch::LlamaBatch;
use tokscope::llama::sampler::HostSampler;
use tokscope::llama::settings::{EngineSettings, SamplingParams};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: host_sampling MODEL.gguf [STEPS] [CALLS]")?;
    let steps: usize = args.next().map_or(Ok(16), |s| s.parse())?;
    let calls: usize = args.next().map_or(Ok(50), |s| s.parse())?;
    tokscope::logging::init(None);
    let model = tokscope::llama::load_model(std::path::Path::new(&path), None, |_| true)?;
    let settings = EngineSettings {
        n_ctx: 512,
        threads: 1,
        ..EngineSettings::default()
    };
    let mut ctx = tokscope::llama::new_context(&model, &settings, 1)?;
    let n_vocab = model.n_vocab();
    let prompt = model.vocab().tokenize(b"Once upon a time", true, false);
    let mut batch = LlamaBatch::new(64, 1);
    for (i, t) in prompt.iter().enumerate() {
        batch.add(*t, i as i32, &[0], i + 1 == prompt.len())?;
    }
    ctx.decode(&mut batch)?;
    let mut idx = batch.n_tokens() - 1;
    let chains = [
        (
            "temperature 0",
            SamplingParams {
                temperature: 0.0,
                ..SamplingParams::default()
            },
        ),
        ("default chain", SamplingParams::default()),
    ];
    let mut old: Vec<Vec<Duration>> = vec![Vec::new(); chains.len()];
    let mut new: Vec<Vec<Duration>> = vec![Vec::new(); chains.len()];
    let mut old_s: Vec<_> = chains
        .iter()
        .map(|(_, p)| tokscope::llama::build_sampler(p, n_vocab))
        .collect();
    let mut new_s: Vec<_> = chains
        .iter()
        .map(|(_, p)| HostSampler::new(p, n_vocab))
        .collect();
    let first_pos = prompt.len() as i32;
    for pos in (first_pos..).take(steps) {
        for (c, _) in chains.iter().enumerate() {
            for call in 0..calls {
                let mut time_old = || {
                    let t = Instant::now();
                    std::hint::black_box(old_s[c].sample(&ctx, idx));
                    old[c].push(t.elapsed());
                };
                let mut time_new = |logits: &[f32]| {
                    let t = Instant::now();
                    let _ = std::hint::black_box(new_s[c].sample(logits));
                    new[c].push(t.elapsed());
                };
                if call % 4 == 0 || call % 4 == 3 {
                    time_old();
                    time_new(ctx.get_logits_ith(idx));
                } else {
                    time_new(ctx.get_logits_ith(idx));
                    time_old();
                }
            }
        }
        let token = HostSampler::new(&chains[0].1, n_vocab).sample(ctx.get_logits_ith(idx))?;
        batch.clear();
        batch.add(token, pos, &[0], true)?;
        ctx.decode(&mut batch)?;
        idx = 0;
    }
    // The one-pass top-k alone, for the breakdown of the default chain's figure.
    let mut topk = Vec::new();
    let mut scratch = tokscope::llama::sampler::TopKScratch::default();
    let mut topk_times = Vec::new();
    let logits = ctx.get_logits_ith(idx).to_vec();
    for _ in 0..steps * calls {
        let t = Instant::now();
        tokscope::llama::sampler::top_k_into(&logits, 40, &mut topk, &mut scratch);
        topk_times.push(t.elapsed());
        std::hint::black_box(&topk);
    }
    let stat = |v: &mut Vec<Duration>, p: f64| {
        v.sort_unstable();
        let i = ((v.len() as f64 * p).ceil() as usize).saturating_sub(1);
        v.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    };
    println!(
        "model {} (vocabulary {n_vocab}), {steps} logits rows × {calls} calls each, alternating",
        path
    );
    println!("| chain | before (llama_sampler_sample) p50 / p90 µs | after (HostSampler) p50 / p90 µs | p50 ratio |");
    println!("|---|---|---|---|");
    for (c, (name, _)) in chains.iter().enumerate() {
        let (o50, o90) = (stat(&mut old[c], 0.5), stat(&mut old[c], 0.9));
        let (n50, n90) = (stat(&mut new[c], 0.5), stat(&mut new[c], 0.9));
        println!(
            "| {name} | {o50:.1} / {o90:.1} | {n50:.1} / {n90:.1} | {:.1}× |",
            o50 / n50.max(1e-9)
        );
    }
    let t50 = stat(&mut topk_times, 0.5);
    println!("(of which the one-pass top-40 alone: p50 {t50:.1} µs)");
    Ok(())
}
