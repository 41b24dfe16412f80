//! Greedy decoding of one user message on a completion-style (base) model, the way the engine
//! prompts it (`engine::completion_transcript`), one token per decode call, printing at each
//! step the margin between the best and the second-best logit. Two greedy runs that part (with
//! and without speculation, say) can then be checked for parting at a near tie.
//!
//! With BATCHES (a comma list, e.g. 2,4,8), the same greedy tokens are then decoded again from
//! the same prompt B at a time with logits at every position, as a speculative verify pass
//! decodes them, and each position's logits are compared with the one-token decode's: the
//! largest and mean |Δ logit|, and where the best token differs.
//!
//! With `invariant` after BATCHES, the model runs on batch-invariant kernels
//! (`tokscope::llama::load_model_batch_invariant`, as the engine does while speculating).
//!
//! cargo run --release --example greedy_margins -- MODEL MESSAGE_FILE [TOKENS] [THREADS] [BATCHES] [invariant]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use llama_cpp_2::llama_batch::LlamaBatch;
use tokscope::engine::{completion_transcript, ChatMessage, Role};
use tokscope::llama::settings::EngineSettings;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: greedy_margins MODEL MESSAGE_FILE [TOKENS] [THREADS] [BATCHES] [invariant]";
    let model_path = args.get(1).ok_or(usage)?;
    let message = std::fs::read_to_string(args.get(2).ok_or(usage)?)?;
    let n: usize = args.get(3).map_or(Ok(128), |s| s.parse())?;
    let threads: u32 = args.get(4).map_or(Ok(1), |s| s.parse())?;
    let batches: Vec<usize> = match args.get(5) {
        Some(list) => list
            .split(',')
            .map(|b| b.trim().parse())
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    let invariant = match args.get(6).map(String::as_str) {
        None => false,
        Some("invariant") => true,
        Some(_) => return Err(usage.into()),
    };
    tokscope::logging::init(None);
    let path = std::path::Path::new(model_path);
    let model = if invariant {
        tokscope::llama::load_model_batch_invariant(path, None, |_| true)?
    } else {
        tokscope::llama::load_model(path, None, |_| true)?
    };
    let settings = EngineSettings {
        n_ctx: 4096,
        threads,
        ..EngineSettings::default()
    };
    let mut ctx = tokscope::llama::new_context(&model, &settings, 1)?;
    let transcript = completion_transcript(&[ChatMessage::new(Role::User, message)]);
    let vocab = model.vocab();
    let prompt = vocab.tokenize(transcript.as_bytes(), true, false);
    let mut batch = LlamaBatch::new(prompt.len().max(1), 1);
    for (i, t) in prompt.iter().enumerate() {
        batch.add(*t, i as i32, &[0], i + 1 == prompt.len())?;
    }
    ctx.decode(&mut batch)?;
    let mut idx = batch.n_tokens() - 1;
    let mut text = String::new();
    println!("step\tchars_before\ttoken\tpiece\tlogit\tsecond\tsecond_piece\tmargin");
    // Each step's logits row and token, kept for the batched comparison.
    let mut rows: Vec<Vec<f32>> = Vec::new();
    let mut tokens = Vec::new();
    let mut margins = Vec::new();
    for step in 0..n {
        let logits = ctx.get_logits_ith(idx);
        if !batches.is_empty() {
            rows.push(logits.to_vec());
        }
        let mut best = (0usize, f32::NEG_INFINITY);
        let mut second = (0usize, f32::NEG_INFINITY);
        for (i, &l) in logits.iter().enumerate() {
            if l > best.1 {
                second = best;
                best = (i, l);
            } else if l > second.1 {
                second = (i, l);
            }
        }
        let token = llama_cpp_2::token::LlamaToken(best.0 as i32);
        let piece = String::from_utf8_lossy(&vocab.token_to_piece(token, false, None)).into_owned();
        let second_piece = String::from_utf8_lossy(&vocab.token_to_piece(
            llama_cpp_2::token::LlamaToken(second.0 as i32),
            false,
            None,
        ))
        .into_owned();
        println!(
            "{step}\t{}\t{}\t{:?}\t{:.4}\t{:.4}\t{:?}\t{:.4}",
            text.chars().count(),
            best.0,
            piece,
            best.1,
            second.1,
            second_piece,
            best.1 - second.1
        );
        text.push_str(&piece);
        tokens.push(token);
        margins.push(best.1 - second.1);
        batch.clear();
        batch.add(token, (prompt.len() + step) as i32, &[0], true)?;
        ctx.decode(&mut batch)?;
        idx = 0;
    }
    for &b in &batches {
        let b = b.max(1);
        ctx.clear_kv_cache();
        batch.clear();
        for (i, t) in prompt.iter().enumerate() {
            batch.add(*t, i as i32, &[0], i + 1 == prompt.len())?;
        }
        ctx.decode(&mut batch)?;
        // Step 0's row comes from the prompt, as above; steps 1.. from the batches.
        let (mut max_d, mut sum_d, mut count) = (0f32, 0f64, 0usize);
        let mut flips = Vec::new();
        let mut chunk = LlamaBatch::new(b, 1);
        for (start, group) in tokens[..n.saturating_sub(1)].chunks(b).enumerate() {
            chunk.clear();
            for (i, t) in group.iter().enumerate() {
                chunk.add(*t, (prompt.len() + start * b + i) as i32, &[0], true)?;
            }
            ctx.decode(&mut chunk)?;
            for i in 0..group.len() {
                let step = start * b + i + 1;
                let got = ctx.get_logits_ith(i as i32);
                let want = &rows[step];
                for (g, w) in got.iter().zip(want) {
                    let d = (g - w).abs();
                    max_d = max_d.max(d);
                    sum_d += f64::from(d);
                    count += 1;
                }
                let argmax = got
                    .iter()
                    .enumerate()
                    .fold((0, f32::NEG_INFINITY), |best, (i, &l)| {
                        if l > best.1 {
                            (i, l)
                        } else {
                            best
                        }
                    })
                    .0;
                if argmax != tokens[step].0 as usize {
                    flips.push((step, margins[step]));
                }
            }
        }
        println!(
            "# B={b}: max |Δ logit| {max_d:.4}, mean {:.6}, best token differs at {} of {} steps{}",
            sum_d / count.max(1) as f64,
            flips.len(),
            n.saturating_sub(1),
            flips
                .iter()
                .map(|(s, m)| format!(" (step {s}, one-token margin {m:.4})"))
                .collect::<String>()
        );
    }
    Ok(())
}
