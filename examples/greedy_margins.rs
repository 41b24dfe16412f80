//! Greedy decoding of one user message on a completion-style (base) model, the way the engine
//! prompts it (`engine::completion_transcript`), one token per decode call, printing at each
//! step the margin between the best and the second-best logit. Two greedy runs that part (with
//! and without speculation, say) can then be checked for parting at a near tie.
//!
//! cargo run --release --example greedy_margins -- MODEL MESSAGE_FILE [TOKENS] [THREADS]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use llama_cpp_2::llama_batch::LlamaBatch;
use tokscope::engine::{completion_transcript, ChatMessage, Role};
use tokscope::llama::settings::EngineSettings;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: greedy_margins MODEL MESSAGE_FILE [TOKENS] [THREADS]";
    let model_path = args.get(1).ok_or(usage)?;
    let message = std::fs::read_to_string(args.get(2).ok_or(usage)?)?;
    let n: usize = args.get(3).map_or(Ok(128), |s| s.parse())?;
    let threads: u32 = args.get(4).map_or(Ok(1), |s| s.parse())?;
    tokscope::logging::init(None);
    let model = tokscope::llama::load_model(std::path::Path::new(model_path), None, |_| true)?;
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
    for step in 0..n {
        let logits = ctx.get_logits_ith(idx);
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
        batch.clear();
        batch.add(token, (prompt.len() + step) as i32, &[0], true)?;
        ctx.decode(&mut batch)?;
        idx = 0;
    }
    Ok(())
}
