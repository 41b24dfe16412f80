//! Sampling inside llama.cpp's graph (`--sampling backend`, llama.cpp's experimental backend
//! sampling API through `LlamaModel::new_context_with_samplers` and
//! `LlamaContext::sampled_token_ith`) against host sampling. Real llama.cpp on synthetic
//! models, one thread.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::common::Submit;

use common::tokscope_cmd as tokscope;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;
use tokscope::engine::EngineError;
use tokscope::llama::sampler::{backend_chain, choose_place, HostSampler, PlaceContext};
use tokscope::llama::settings::{SamplingMode, SamplingParams};
use tokscope::synth::TensorType;

use common::prefill;

/// Decode `steps` tokens after `prompt`, each picked by `pick(ctx, index)`.
fn generate(
    ctx: &mut LlamaContext<'_>,
    prompt: &[LlamaToken],
    steps: usize,
    mut pick: impl FnMut(&LlamaContext<'_>, i32) -> LlamaToken,
) -> Vec<LlamaToken> {
    let mut idx = prefill(ctx, prompt);
    let mut out = Vec::new();
    let mut batch = LlamaBatch::new(8, 1);
    for pos in (prompt.len() as i32..).take(steps) {
        let t = pick(ctx, idx);
        out.push(t);
        batch.clear();
        batch.add(t, pos, &[0], true).unwrap();
        ctx.decode(&mut batch).unwrap();
        idx = 0;
    }
    out
}

fn load(path: &std::path::Path) -> tokscope::llama::LoadedModel {
    tokscope::llama::backend().unwrap();
    tokscope::llama::load_model(path, None, |_| true).unwrap()
}

fn settings() -> tokscope::llama::settings::EngineSettings {
    let mut s = common::settings(256);
    s.n_batch = 64;
    s
}

fn prompts() -> Vec<String> {
    let words = [
        "Once upon a time",
        "The capital of France is",
        "1 2 3 4 5",
        "Why is the sky blue?",
        "hello",
        "a b c d e f g",
        "In the beginning",
        "Rust is a language",
    ];
    let mut out: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    for i in 0..16 {
        out.push(format!(
            "{} {}",
            words[i % words.len()],
            words[(i * 5 + 3) % words.len()]
        ));
    }
    out
}

/// Temperature 0: the token chosen inside the graph is the host's argmax, token after token,
/// over many prompts (llama-cpp-2 directly, so each prompt gets its own fresh contexts).
#[test]
fn backend_greedy_matches_host_greedy_over_many_prompts() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = common::synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 5);
    let model = load(&path);
    let greedy = common::greedy();
    let s = settings();
    let mut distinct = std::collections::BTreeSet::new();
    let mut compared = 0;
    for prompt in prompts() {
        let tokens = model.vocab().tokenize(prompt.as_bytes(), true, false);
        let mut host_ctx = tokscope::llama::new_context(&model, &s, 1).unwrap();
        let mut host = HostSampler::new(&greedy, model.n_vocab());
        let want = generate(&mut host_ctx, &tokens, 24, |ctx, i| {
            host.sample(ctx.get_logits_ith(i)).unwrap()
        });
        drop(host_ctx);
        let mut back_ctx =
            tokscope::llama::new_context_with_chain(&model, &s, backend_chain(&greedy)).unwrap();
        let got = generate(&mut back_ctx, &tokens, 24, |ctx, i| {
            ctx.sampled_token_ith(i).expect("a backend-sampled token")
        });
        assert_eq!(got, want, "prompt {prompt:?}");
        distinct.extend(want.iter().map(|t| t.0));
        compared += want.len();
    }
    assert_eq!(compared, prompts().len() * 24);
    assert!(
        distinct.len() > 10,
        "only {} distinct tokens",
        distinct.len()
    );
}

/// llama.cpp's top-k → temperature → draw on the host's logits row: the probability of each
/// of the k best tokens (ties by id), as the chain defines it.
fn chain_probabilities(logits: &[f32], k: usize, temp: f32) -> Vec<(i32, f64)> {
    let mut ids: Vec<usize> = (0..logits.len()).collect();
    ids.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    ids.truncate(k);
    let max = f64::from(logits[ids[0]]);
    let w: Vec<f64> = ids
        .iter()
        .map(|&i| ((f64::from(logits[i]) - max) / f64::from(temp)).exp())
        .collect();
    let sum: f64 = w.iter().sum();
    ids.iter()
        .zip(w)
        .map(|(&i, w)| (i as i32, w / sum))
        .collect()
}

/// Pearson's chi-square of observed counts against expected probabilities, bins with an
/// expected count under 5 pooled; returns (statistic, degrees of freedom).
fn chi_square(
    counts: &std::collections::BTreeMap<i32, usize>,
    probs: &[(i32, f64)],
    n: usize,
) -> (f64, usize) {
    let mut bins: Vec<(f64, f64)> = Vec::new();
    let mut pool = (0.0, 0.0);
    for &(id, p) in probs {
        let e = p * n as f64;
        let o = *counts.get(&id).unwrap_or(&0) as f64;
        if e < 5.0 {
            pool.0 += o;
            pool.1 += e;
        } else {
            bins.push((o, e));
        }
    }
    let outside: usize = counts
        .iter()
        .filter(|(id, _)| !probs.iter().any(|(p, _)| p == *id))
        .map(|(_, c)| *c)
        .sum();
    pool.0 += outside as f64;
    if pool.1 > 0.0 || pool.0 > 0.0 {
        bins.push((pool.0, pool.1.max(1e-9)));
    }
    let stat = bins.iter().map(|(o, e)| (o - e) * (o - e) / e).sum();
    (stat, bins.len().saturating_sub(1))
}

/// The chi-square quantile at 1 − 10⁻⁴ for `df` degrees of freedom (Wilson–Hilferty).
fn critical(df: usize) -> f64 {
    let d = df.max(1) as f64;
    let z = 3.719; // the normal quantile at 1 - 1e-4
    d * (1.0 - 2.0 / (9.0 * d) + z * (2.0 / (9.0 * d)).sqrt()).powi(3)
}

const DRAWS: u32 = 1200;

/// First-token draws at temperature > 0: `DRAWS` seeds, each a fresh backend context (the
/// draw's random number comes from the seed), against the chain's probabilities computed on
/// the host from the same logits; the host sampler with the same seeds is held to the same
/// test, so a wrong expectation would show on both. A backend that ignored the temperature
/// fails this test (checked once by planting that bug; see the report of issue 16).
#[test]
fn backend_first_token_has_the_chains_distribution() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = common::synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 7);
    let model = load(&path);
    let mut s = settings();
    s.n_ctx = 64;
    let (k, temp) = (8usize, 0.3f32);
    let tokens = model.vocab().tokenize(b"Once upon a time", true, false);
    let mut plain = tokscope::llama::new_context(&model, &s, 1).unwrap();
    let idx = prefill(&mut plain, &tokens);
    let logits = plain.get_logits_ith(idx).to_vec();
    drop(plain);
    let probs = chain_probabilities(&logits, k, temp);
    // The test can only fail on a wrong temperature when it changes the distribution.
    let cold = chain_probabilities(&logits, k, 1.0);
    let gap: f64 = probs
        .iter()
        .zip(&cold)
        .map(|(a, b)| (a.1 - b.1).abs())
        .sum();
    assert!(gap > 0.1, "temperature hardly matters here (L1 {gap:.3})");
    let mut host_counts = std::collections::BTreeMap::new();
    let mut back_counts = std::collections::BTreeMap::new();
    for seed in 0..DRAWS {
        let p = SamplingParams {
            temperature: temp,
            top_k: k as u32,
            top_p: 1.0,
            min_p: 0.0,
            seed: 10_000 + seed,
            ..SamplingParams::default()
        };
        let mut host = HostSampler::new(&p, model.n_vocab());
        *host_counts
            .entry(host.sample(&logits).unwrap().0)
            .or_insert(0usize) += 1;
        let mut ctx =
            tokscope::llama::new_context_with_chain(&model, &s, backend_chain(&p)).unwrap();
        let i = prefill(&mut ctx, &tokens);
        let t = ctx.sampled_token_ith(i).expect("a backend-sampled token");
        *back_counts.entry(t.0).or_insert(0usize) += 1;
    }
    let n = DRAWS as usize;
    let (host_stat, host_df) = chi_square(&host_counts, &probs, n);
    let (back_stat, back_df) = chi_square(&back_counts, &probs, n);
    eprintln!("expected {probs:?}\nhost {host_counts:?} chi2 {host_stat:.1} df {host_df}\nbackend {back_counts:?} chi2 {back_stat:.1} df {back_df}");
    assert!(host_df >= 3, "too few bins: {host_df}");
    assert!(
        host_stat < critical(host_df),
        "host: chi2 {host_stat:.1} df {host_df}"
    );
    assert!(
        back_stat < critical(back_df),
        "backend: chi2 {back_stat:.1} df {back_df}"
    );
}

/// The backend's draw takes a new random number for every token, from the same stream as
/// the host's `dist` with the same seed: at a temperature so high that the top 16 are nearly
/// equally likely, the rank drawn at each step follows the random number, so the backend's
/// ranks vary from step to step and match the host's (up to near-ties at a step's edge).
/// A backend whose random state did not advance would draw the same rank at every step.
#[test]
fn backend_draws_follow_the_hosts_random_stream() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = common::synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 7);
    let model = load(&path);
    let s = settings();
    let p = SamplingParams {
        temperature: 1000.0,
        top_k: 16,
        top_p: 1.0,
        min_p: 0.0,
        seed: 77,
        ..SamplingParams::default()
    };
    let tokens = model.vocab().tokenize(b"Once upon a time", true, false);
    let mut host_ctx = tokscope::llama::new_context(&model, &s, 1).unwrap();
    let mut host = HostSampler::new(&p, model.n_vocab());
    let mut host_ranks = Vec::new();
    generate(&mut host_ctx, &tokens, 40, |ctx, i| {
        let logits = ctx.get_logits_ith(i);
        let t = host.sample(logits).unwrap();
        host_ranks.push(rank(logits, t));
        t
    });
    drop(host_ctx);
    let mut ctx = tokscope::llama::new_context_with_chain(&model, &s, backend_chain(&p)).unwrap();
    let mut back_ranks = Vec::new();
    // The backend context has no logits to rank with: a plain context beside it decodes the
    // same tokens.
    let mut shadow = tokscope::llama::new_context(&model, &s, 1).unwrap();
    let mut sidx = prefill(&mut shadow, &tokens);
    let mut batch = LlamaBatch::new(8, 1);
    let mut pos = tokens.len() as i32;
    generate(&mut ctx, &tokens, 40, |ctx, i| {
        let t = ctx.sampled_token_ith(i).unwrap();
        back_ranks.push(rank(shadow.get_logits_ith(sidx), t));
        batch.clear();
        batch.add(t, pos, &[0], true).unwrap();
        shadow.decode(&mut batch).unwrap();
        sidx = 0;
        pos += 1;
        t
    });
    let distinct = |r: &[usize]| r.iter().collect::<std::collections::BTreeSet<_>>().len();
    eprintln!("host ranks {host_ranks:?}\nbackend ranks {back_ranks:?}");
    assert!(distinct(&host_ranks) >= 8, "host: {host_ranks:?}");
    assert!(distinct(&back_ranks) >= 8, "backend: {back_ranks:?}");
    let close = host_ranks
        .iter()
        .zip(&back_ranks)
        .filter(|(h, b)| h.abs_diff(**b) <= 1)
        .count();
    assert!(
        close >= 36,
        "only {close} of 40 steps agree: {host_ranks:?} vs {back_ranks:?}"
    );
}

/// A token's rank among the logits (0 = the largest).
fn rank(logits: &[f32], t: LlamaToken) -> usize {
    let v = logits[t.0 as usize];
    logits.iter().filter(|&&x| x > v).count()
}

#[test]
fn auto_and_explicit_choices() {
    let greedy = common::greedy();
    let warm = SamplingParams::default();
    let penalty = SamplingParams {
        repeat_penalty: 1.1,
        ..common::greedy()
    };
    let at = |m, p: &SamplingParams, speculative, needs_logits| {
        let gpu = PlaceContext {
            speculative,
            needs_logits,
            output_on_gpu: true,
        };
        let cpu = PlaceContext {
            output_on_gpu: false,
            ..gpu
        };
        let on_cpu = choose_place(m, p, cpu);
        // On the CPU, auto stays on the host; explicit choices do not depend on the device.
        if m == SamplingMode::Auto {
            assert!(!on_cpu.unwrap().backend);
        } else {
            assert_eq!(on_cpu.is_ok(), choose_place(m, p, gpu).is_ok());
        }
        choose_place(m, p, gpu)
    };
    assert!(
        at(SamplingMode::Auto, &greedy, false, false)
            .unwrap()
            .backend
    );
    assert!(at(SamplingMode::Auto, &warm, false, false).unwrap().backend);
    assert!(
        !at(SamplingMode::Auto, &penalty, false, false)
            .unwrap()
            .backend
    );
    assert!(
        !at(SamplingMode::Auto, &greedy, true, false)
            .unwrap()
            .backend
    );
    assert!(
        !at(SamplingMode::Auto, &greedy, false, true)
            .unwrap()
            .backend
    );
    assert!(
        !at(SamplingMode::Host, &greedy, false, false)
            .unwrap()
            .backend
    );
    assert!(
        at(SamplingMode::Backend, &greedy, false, false)
            .unwrap()
            .backend
    );
    assert!(
        at(SamplingMode::Backend, &warm, false, false)
            .unwrap()
            .backend
    );
    for (p, spec, name) in [
        (&penalty, false, "repeat_penalty"),
        (&warm, true, "speculative"),
    ] {
        let e = at(SamplingMode::Backend, p, spec, false).unwrap_err();
        assert!(matches!(e, EngineError::BackendSampling(_)));
        assert!(e.to_string().contains(name), "{e}");
        assert!(e.to_string().contains("--sampling host"), "{e}");
    }
}

fn engine_with(model: &std::path::Path, mode: SamplingMode) -> common::TestEngine {
    let mut s = common::settings(512);
    s.sampling = mode;
    s.first_sampling = Some(common::greedy());
    common::start(model, s)
}

/// The engine's own decode loop: `--sampling backend` and `--sampling host` give the same
/// answers at temperature 0, token for token, and the report says where it sampled.
#[test]
fn engine_backend_and_host_agree_at_temperature_zero() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = common::synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 11);
    let mut answers = Vec::new();
    for mode in [SamplingMode::Host, SamplingMode::Backend] {
        let mut engine = engine_with(&path, mode);
        let mut texts = Vec::new();
        for prompt in prompts().iter().take(12) {
            let turn = engine.turn(vec![common::user(prompt)], common::greedy(), 20);
            assert_eq!(turn.report.sampling.backend, mode == SamplingMode::Backend);
            assert_eq!(
                turn.report.sampler == "backend",
                mode == SamplingMode::Backend
            );
            assert!(turn.report.text.starts_with(&turn.streamed));
            texts.push((turn.report.text, turn.report.timeline.token_ready_at.len()));
        }
        answers.push(texts);
    }
    assert_eq!(answers[0], answers[1]);
    assert!(answers[0].iter().map(|(_, n)| n).sum::<usize>() > 50);
}

/// A turn whose chain differs from the context's creates the context again (the KV cache
/// starts empty), the same chain reuses it; auto on this CPU-only machine samples on the host
/// and says why; an explicit backend with a setting it cannot do fails naming the setting.
#[test]
fn engine_rebuilds_for_a_new_chain_and_explicit_backend_refuses() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = common::synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 13);
    let mut engine = engine_with(&path, SamplingMode::Backend);
    let warm = SamplingParams {
        seed: 9,
        ..SamplingParams::default()
    };
    let msgs = || vec![common::user("Once upon a time")];
    let a = engine.turn(msgs(), common::greedy(), 16);
    assert!(a.report.sampling.backend, "{:?}", a.report.sampling);
    let b = engine.turn(msgs(), warm.clone(), 16);
    assert!(b.report.sampling.backend);
    // The context was created again for the new chain: nothing of the earlier turn is reused.
    assert_eq!(b.prefill_started.unwrap().1, 0);
    let c = engine.turn(msgs(), common::greedy(), 16);
    assert_eq!(c.prefill_started.unwrap().1, 0);
    assert_eq!(c.report.text, a.report.text);
    // The same chain again: the KV cache is reused.
    let d = engine.turn(msgs(), common::greedy(), 16);
    assert!(d.prefill_started.unwrap().1 > 0);
    assert_eq!(d.report.text, a.report.text);
    let penalty = SamplingParams {
        repeat_penalty: 1.2,
        ..common::greedy()
    };
    let id = engine.handle.generate(msgs(), penalty, 8).unwrap();
    loop {
        match engine.events.blocking_recv().expect("engine gone") {
            tokscope::engine::EngineEvent::Failed { request_id, error } if request_id == id => {
                let text = error.to_string();
                assert!(text.contains("repeat_penalty"), "{text}");
                assert!(text.contains("--sampling host"), "{text}");
                break;
            }
            tokscope::engine::EngineEvent::Finished { request_id, .. } if request_id == id => {
                panic!("backend sampling with a repetition penalty must fail")
            }
            _ => {}
        }
    }
    // The engine goes on after the refusal.
    let e = engine.turn(msgs(), common::greedy(), 16);
    assert_eq!(e.report.text, a.report.text);
    // Creating the context again is setup, in the queue part, not in template + tokenize
    // (which held it until 2026-12-07). Turns that each create it (the chain alternating)
    // against turns that keep it (the same chain), the same messages, medians of 5 each (on a
    // busy machine one turn's parts move by milliseconds): the creation shows as extra queue,
    // not as extra template + tokenize.
    let parts = |engine: &mut common::TestEngine, chain: &dyn Fn(usize) -> SamplingParams| {
        let (mut queue, mut template): (Vec<f64>, Vec<f64>) = (0..5)
            .map(|i| {
                let t = engine.turn(msgs(), chain(i), 2);
                let tl = &t.report.timeline;
                let ms = |d: Option<std::time::Duration>| d.unwrap().as_secs_f64() * 1e3;
                (ms(tl.queue), ms(tl.template_tokenize))
            })
            .unzip();
        queue.sort_by(f64::total_cmp);
        template.sort_by(f64::total_cmp);
        (queue[2], template[2])
    };
    let (queue_new, template_new) = parts(&mut engine, &|i| {
        if i % 2 == 0 {
            warm.clone()
        } else {
            common::greedy()
        }
    });
    engine.turn(msgs(), common::greedy(), 2);
    let (queue_kept, template_kept) = parts(&mut engine, &|_| common::greedy());
    // What one creation costs on this machine now: the engine's context (its settings and
    // the backend chain), made here 5 times, the median.
    let creation_ms = {
        let model = load(&path);
        let s = common::settings(512);
        let mut times: Vec<f64> = (0..5)
            .map(|_| {
                let t = std::time::Instant::now();
                let ctx = tokscope::llama::new_context_with_chain(&model, &s, backend_chain(&warm))
                    .unwrap();
                let ms = t.elapsed().as_secs_f64() * 1e3;
                drop(ctx);
                ms
            })
            .collect();
        times.sort_by(f64::total_cmp);
        times[2]
    };
    eprintln!(
        "created again: queue {queue_new} ms, template + tokenize {template_new} ms; kept: queue {queue_kept} ms, template + tokenize {template_kept} ms; one creation {creation_ms} ms"
    );
    assert!(
        queue_new - queue_kept >= 0.5 * creation_ms,
        "the context's creation ({creation_ms} ms) is not in queue: created again, queue {queue_new} ms and template + tokenize {template_new} ms; kept, {queue_kept} and {template_kept} ms"
    );
    drop(engine);

    let mut engine = engine_with(&path, SamplingMode::Auto);
    let f = engine.turn(msgs(), common::greedy(), 16);
    assert!(!f.report.sampling.backend);
    assert!(
        f.report.sampling.why.contains("CPU"),
        "{:?}",
        f.report.sampling
    );
    assert_eq!(f.report.text, a.report.text);
}

/// `run --json` says where it sampled and why; `--sampling backend` with a repetition penalty
/// fails naming it; a bad value is a usage error.
#[test]
fn run_json_says_where_it_sampled() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    let json = |extra: &[&str]| -> serde_json::Value {
        let out = common::ok_stdout(
            tokscope(dir.path())
                .arg("run")
                .arg("-m")
                .arg(&model)
                .args(["-p", "Once upon a time", "-n", "8", "-t", "1", "--json"])
                .args(extra),
        );
        serde_json::from_slice(&out).unwrap()
    };
    let auto = json(&["--temp", "0"]);
    // This CPU-only machine: auto stays on the host.
    assert_eq!(auto["sampling"]["place"], "host");
    assert!(auto["sampling"]["why"]
        .as_str()
        .unwrap()
        .starts_with("auto"));
    let backend = json(&["--temp", "0", "--sampling", "backend"]);
    assert_eq!(backend["sampling"]["place"], "backend");
    assert_eq!(backend["sampler"], "backend");
    let host = json(&["--temp", "0", "--sampling", "host"]);
    assert_eq!(host["sampling"]["place"], "host");
    assert_eq!(host["sampler"], "host-greedy");
    assert_eq!(host["text"], backend["text"]);
    let penalty = json(&["--repeat-penalty", "1.1"]);
    assert_eq!(penalty["sampling"]["place"], "host");
    assert!(penalty["sampling"]["why"]
        .as_str()
        .unwrap()
        .contains("repeat_penalty"));
    let failed = tokscope(dir.path())
        .arg("run")
        .arg("-m")
        .arg(&model)
        .args(["-p", "Hi", "-n", "4", "-t", "1", "--repeat-penalty", "1.1"])
        .args(["--sampling", "backend"])
        .assert()
        .failure()
        .get_output()
        .clone();
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(
        err.contains("repeat_penalty") && err.contains("--sampling host"),
        "{err}"
    );
    tokscope(dir.path())
        .arg("run")
        .arg("-m")
        .arg(&model)
        .args(["-p", "Hi", "--sampling", "gpu"])
        .assert()
        .code(2);
}

/// `bench --tg-sampling`: llama-bench's tg (no sampling), the chat's chain on the host, and
/// the chain inside the graph with `--sampling backend` (and with auto where the output layer
/// is on a GPU: not on this CPU-only machine); `--sampling host` leaves the backend row out.
#[test]
fn bench_rows_without_and_with_sampling() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let model = common::synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 1);
    let tests = |extra: &[&str]| -> Vec<String> {
        let out = common::ok_stdout(
            tokscope(dir.path())
                .arg("bench")
                .arg("-m")
                .arg(&model)
                .args(["--no-probe", "-p", "0", "-n", "16", "-r", "1", "-t", "1"])
                .args(["--tg-sampling", "-o", "json"])
                .args(extra),
        );
        let rows: serde_json::Value = serde_json::from_slice(&out).unwrap();
        rows.as_array()
            .unwrap()
            .iter()
            .map(|r| r["test"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(tests(&[]), ["tg16", "tg16+sampling"]);
    assert_eq!(tests(&["--sampling", "host"]), ["tg16", "tg16+sampling"]);
    assert_eq!(tests(&["--sampling", "backend"]), ["tg16", "tg16+backend"]);
}

/// The seed's random stream at temperature > 0: host sampling starts it again every turn (the
/// same turn twice gives the same answer); backend sampling seeds the chain once, when the
/// context is created for it, and a later turn with the same settings continues the stream.
#[test]
fn seeded_stream_per_turn_on_the_host_per_context_on_the_backend() {
    let _lock = common::model_lock();
    let dir = tempfile::tempdir().unwrap();
    let path = common::synth(dir.path(), "tiny.gguf", "tiny", TensorType::F32, 17);
    let warm = SamplingParams {
        temperature: 1.5,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed: 5,
        ..SamplingParams::default()
    };
    let msgs = || vec![common::user("Once upon a time")];
    let mut texts = Vec::new();
    for mode in [SamplingMode::Host, SamplingMode::Backend] {
        let mut s = common::settings(512);
        s.sampling = mode;
        s.first_sampling = Some(warm.clone());
        let mut engine = common::start(&path, s);
        let a = engine.turn(msgs(), warm.clone(), 24).report.text;
        let b = engine.turn(msgs(), warm.clone(), 24).report.text;
        texts.push((a, b));
    }
    let (host, backend) = (&texts[0], &texts[1]);
    assert_eq!(host.0, host.1, "host: the same seed, the same answer");
    assert_ne!(backend.0, backend.1, "backend: the stream goes on");
    // The first turn on each draws from the same seeded stream.
    assert_eq!(host.0, backend.0);
}
