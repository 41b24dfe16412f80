//! The timed runs on a llama.cpp context, done the way llama-bench and llama-batched-bench do
//! them so that their figures and ours can be compared: random tokens (a BOS first when the
//! vocabulary wants one), the prompt fed in chunks of n_batch, one synchronisation at the end
//! of a prompt and after every generation step, the KV cache cleared and refilled to the depth
//! (untimed) before each run. Generation feeds random tokens without sampling, as llama-bench
//! does; batch tests sample each sequence with its own sampler, outside the timed decode calls.
//! Raw durations only: the statistics are the report's business.

use std::time::{Duration, Instant};

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;

use super::error::{decode_error, EngineError};
use super::sampler::HostSampler;
use super::settings::{EngineSettings, SamplingParams};
use super::{build_sampler, new_context};
use crate::ids::SplitMix64;
use crate::metrics::{ms, rate_per_s, BatchPoint, LatencyStats};

/// What one timed run measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Sample {
    /// The whole timed run.
    pub total: Duration,
    /// The prompt's decode calls (pg and batch tests).
    pub prefill: Option<Duration>,
    /// The chat's TTFT, for tests with a prompt: start of the run → the first token's text
    /// ready (the prompt's decode calls, then the first token sampled from its last logits
    /// and turned into text; pg), or the first tokens sampled after the prompts (batch).
    /// `None` for tg, which has no prompt (its first step decodes a BOS: not a TTFT).
    pub ttft: Option<Duration>,
    /// Gaps between consecutive generated tokens, from timestamps taken after each step.
    pub gaps: Vec<Duration>,
    /// The generation steps' decode calls, synchronisation included.
    pub decode: Duration,
    /// Tokens decoded as generated tokens, all sequences together, as counted while
    /// decoding.
    pub tokens_generated: u64,
    /// Generation steps of tg and pg: the time between the end of one decode call and the
    /// start of the next (choosing the next token; with `TgSampled`, the chat's sampler).
    pub host: Duration,
    /// The step profiler's record of the generation steps (`bench --profile`; tg and pg).
    pub profile: Option<Box<crate::metrics::profile::ProfileRecord>>,
    /// When the timed run started (`bench --trace` places the run on its clock by it).
    pub started: Option<Instant>,
    /// Offsets from `started`: the start of generation, then the end of each generation
    /// step (the instants `gaps` are taken from). Empty for pp.
    pub steps_at: Vec<Duration>,
}

/// What `Bencher::generate` returns: the instant each step ended, the time between decode
/// calls, and the profiler's record when one watches.
struct Generated {
    ends: Vec<Instant>,
    host: Duration,
    record: Option<Box<crate::metrics::profile::ProfileRecord>>,
}

/// One token of a batch: its id, position, sequence and whether its logits are wanted.
#[derive(Debug, Clone, Copy)]
struct Entry {
    token: LlamaToken,
    pos: i32,
    seq: i32,
    logits: bool,
}

impl Entry {
    fn new(token: LlamaToken, pos: u32, seq: u32, logits: bool) -> Self {
        Self {
            token,
            pos: i32::try_from(pos).unwrap_or(i32::MAX),
            seq: i32::try_from(seq).unwrap_or(0),
            logits,
        }
    }
}

/// Runs tests on one context.
pub(crate) struct Bencher<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    n_batch: usize,
    n_vocab: i32,
    bos: Option<LlamaToken>,
    rng: SplitMix64,
    /// Next position of sequence 0 (single-sequence tests).
    pos: i32,
    /// The step profiler watching the context, and its rate (`bench --profile`).
    profiler: Option<(std::sync::Arc<super::profile::StepProfiler>, u32)>,
    /// The cache filled to a depth, as llama-bench keeps it (`cstate`): the next repetition
    /// at the same depth restores it instead of prefilling the depth again.
    depth_state: Option<(u32, llama_cpp_2::context::session::SeqState)>,
}

impl<'m> Bencher<'m> {
    pub(crate) fn new(model: &'m LlamaModel, ctx: LlamaContext<'m>) -> Self {
        let n_batch = ctx.n_batch().max(1) as usize;
        let vocab = model.vocab();
        Self {
            model,
            ctx,
            batch: LlamaBatch::new(n_batch, 1),
            n_batch,
            n_vocab: model.n_vocab().max(1),
            bos: vocab.should_add_bos().then(|| vocab.bos()),
            rng: SplitMix64(42),
            pos: 0,
            profiler: None,
            depth_state: None,
        }
    }

    /// Profile one generation step in `rate` with `profiler`, which watches this context's
    /// graph (`llama::new_session_context`).
    pub(crate) fn with_profiler(
        mut self,
        profiler: std::sync::Arc<super::profile::StepProfiler>,
        rate: u32,
    ) -> Self {
        self.profiler = Some((profiler, rate));
        self
    }

    fn random_token(&mut self) -> LlamaToken {
        let n_vocab = u64::try_from(self.n_vocab).unwrap_or(1).max(1);
        LlamaToken(i32::try_from(self.rng.next_u64() % n_vocab).unwrap_or(0))
    }

    /// llama-bench's first token of a prompt or generation: BOS when the vocabulary adds one.
    fn first_token(&mut self) -> LlamaToken {
        self.bos.unwrap_or_else(|| self.random_token())
    }

    fn clear(&mut self) {
        self.ctx.clear_kv_cache();
        self.pos = 0;
    }

    /// llama-bench's `test_prompt`: `n` random tokens in chunks of n_batch, only the last
    /// token of a chunk asks for logits, one synchronisation at the end.
    fn prompt(&mut self, n: u32) -> Result<(), EngineError> {
        let mut done = 0usize;
        let n = n as usize;
        while done < n {
            let chunk = (n - done).min(self.n_batch);
            self.batch.clear();
            for i in 0..chunk {
                let token = if done == 0 && i == 0 {
                    self.first_token()
                } else {
                    self.random_token()
                };
                self.batch
                    .add(token, self.pos, &[0], i + 1 == chunk)
                    .map_err(decode_error)?;
                self.pos += 1;
            }
            self.ctx.decode(&mut self.batch).map_err(decode_error)?;
            done += chunk;
        }
        self.ctx.synchronize();
        Ok(())
    }

    /// llama-bench's `test_gen`: `n` single-token decodes, each synchronised, feeding random
    /// tokens; with a sampler, the token it samples from each step's logits instead (what a
    /// chat does). Returns the instant each step ended and the time between decode calls.
    fn generate(&mut self, n: u32, mut pick: Pick<'_>) -> Result<Generated, EngineError> {
        let mut ends: Vec<Instant> = Vec::with_capacity(n as usize);
        let mut host = Duration::ZERO;
        let mut token = self.first_token();
        let mut record = self.profiler.as_ref().map(|(_, rate)| {
            Box::new(crate::metrics::profile::ProfileRecord {
                rate: *rate,
                calls: Vec::with_capacity(n as usize),
                ..Default::default()
            })
        });
        for step in 0..n {
            self.batch.clear();
            self.batch
                .add(token, self.pos, &[0], true)
                .map_err(decode_error)?;
            let gap = ends.last().map(|end| end.elapsed());
            host += gap.unwrap_or_default();
            let profiled = self
                .profiler
                .as_ref()
                .filter(|(_, rate)| crate::metrics::profile::sampled(step as usize, *rate));
            // Profiling off: no clock read beyond llama-bench's.
            let call_start = record.as_ref().map(|_| Instant::now());
            // llama.cpp's own clock of a profiled call, read around it.
            let eval_before = profiled.map(|_| self.ctx.timings().t_eval_ms());
            if let (Some((p, _)), Some(at)) = (profiled, call_start) {
                p.arm(at);
            }
            self.ctx.decode(&mut self.batch).map_err(decode_error)?;
            self.ctx.synchronize();
            let end = Instant::now();
            let llama_eval = eval_before
                .map(|before| self.ctx.timings().t_eval_ms() - before)
                .filter(|ms| ms.is_finite() && *ms >= 0.0)
                .map(|ms| Duration::from_nanos((ms * 1e6) as u64));
            ends.push(end);
            if let (Some(rec), Some(start)) = (record.as_mut(), call_start) {
                let call = end - start;
                rec.calls.push((call, profiled.is_some()));
                if let Some((p, _)) = profiled {
                    let depth = usize::try_from(self.pos).unwrap_or(0);
                    rec.steps.push(p.finish_step(
                        end,
                        gap.unwrap_or_default(),
                        call,
                        (1, depth),
                        llama_eval,
                    ));
                }
            }
            self.pos += 1;
            let last = step + 1 == n;
            token = match &mut pick {
                // The last step's token is never decoded: do not sample it either.
                Pick::Host(s) if !last => s.sample(self.ctx.get_logits_ith(0)).map_err(|_| {
                    EngineError::NonFiniteLogits {
                        at_token: step as usize + 1,
                    }
                })?,
                Pick::Backend if !last => {
                    let t = self.ctx.sampled_token_ith(0).ok_or_else(|| {
                        EngineError::Decode("llama.cpp sampled no token on the backend".into())
                    })?;
                    super::sampler::backend_output_finite(
                        self.ctx.sampled_probs_ith(0),
                        self.ctx.sampled_logits_ith(0),
                        t,
                        usize::try_from(self.n_vocab).unwrap_or(0),
                    )
                    .map_err(|_| EngineError::NonFiniteLogits {
                        at_token: step as usize + 1,
                    })?;
                    t
                }
                _ => self.random_token(),
            };
        }
        Ok(Generated { ends, host, record })
    }

    /// The untimed warm-up, as llama-bench does it: the prompt once and one generated token;
    /// for a batch test, one step of B tokens so that its graph is built before timing.
    pub(crate) fn warm_up(&mut self, test: &TestSpec) -> Result<(), EngineError> {
        self.clear();
        let (p, n) = test.lengths();
        if let TestSpec::Batch { sequences, .. } = *test {
            let entries: Vec<Entry> = (0..sequences)
                .map(|seq| Entry::new(self.random_token(), 0, seq, true))
                .collect();
            self.decode_entries(&entries, |_, _| {})?;
        } else {
            if p > 0 {
                self.prompt(p)?;
            }
            if n > 0 {
                self.generate(1, Pick::Random)?;
            }
        }
        self.clear();
        Ok(())
    }

    /// One timed run of `test` after filling the cache to `depth` (untimed).
    pub(crate) fn run(
        &mut self,
        test: &TestSpec,
        depth: u32,
        sampling: &SamplingParams,
    ) -> Result<Sample, EngineError> {
        self.clear();
        if depth > 0 {
            self.fill_depth(depth)?;
        }
        match *test {
            TestSpec::Pp { n_prompt } => self.run_pp(n_prompt),
            TestSpec::Tg { n_gen } => self.run_pg(0, n_gen, sampling, Pick::Random),
            TestSpec::TgSampled { n_gen } => {
                let mut sampler = HostSampler::new(sampling, self.n_vocab);
                self.run_pg(0, n_gen, sampling, Pick::Host(&mut sampler))
            }
            TestSpec::TgBackend { n_gen } => self.run_pg(0, n_gen, sampling, Pick::Backend),
            TestSpec::Pg { n_prompt, n_gen } => {
                self.run_pg(n_prompt, n_gen, sampling, Pick::Random)
            }
            TestSpec::Batch {
                sequences,
                n_prompt,
                n_gen,
            } => self.run_batch(sequences, n_prompt, n_gen, sampling),
        }
    }

    /// The (cleared) cache filled to `depth`, untimed, as llama-bench does it: the first
    /// repetition at a depth prefills it and keeps the sequence's state; the next ones restore
    /// that state, and prefill again only when llama.cpp does not take it back whole.
    fn fill_depth(&mut self, depth: u32) -> Result<(), EngineError> {
        use llama_cpp_2::context::session::LlamaStateSeqFlags;
        if let Some((_, state)) = self.depth_state.as_ref().filter(|(d, _)| *d == depth) {
            let last = i32::try_from(depth).unwrap_or(i32::MAX) - 1;
            if self.ctx.state_seq_set(state, 0).is_ok() && self.ctx.kv_cache_seq_pos_max(0) == last
            {
                self.pos = last + 1;
                return Ok(());
            }
            self.clear();
        }
        self.prompt(depth)?;
        self.depth_state = self
            .ctx
            .state_seq_get(0, LlamaStateSeqFlags::empty())
            .ok()
            .map(|state| (depth, state));
        Ok(())
    }

    fn run_pp(&mut self, n_prompt: u32) -> Result<Sample, EngineError> {
        let start = Instant::now();
        self.prompt(n_prompt)?;
        Ok(Sample {
            total: start.elapsed(),
            started: Some(start),
            ..Sample::default()
        })
    }

    /// A prompt (none for tg) then `n_gen` generated tokens, in one timed run.
    ///
    /// With a prompt, the first token is then sampled from the prompt's last logits and
    /// turned into text, as the chat does: that instant ends the TTFT (the chat's definition,
    /// with no queue and no template: the prompt is random tokens). This sample is not part
    /// of `total`, `decode` or the gaps, so t/s stays llama-bench's (which does not sample).
    fn run_pg(
        &mut self,
        n_prompt: u32,
        n_gen: u32,
        sampling: &SamplingParams,
        sampler: Pick<'_>,
    ) -> Result<Sample, EngineError> {
        let start = Instant::now();
        let mut ttft = None;
        let mut prefill = None;
        if n_prompt > 0 {
            self.prompt(n_prompt)?;
            let prefill_time = start.elapsed();
            let sample_start = Instant::now();
            // The chat's sampler, as the chat samples its first token.
            let token = HostSampler::new(sampling, self.n_vocab)
                .sample(self.ctx.get_logits_ith(-1))
                .map_err(|_| EngineError::NonFiniteLogits { at_token: 0 })?;
            let piece = self.model.vocab().token_to_piece(token, false, None);
            std::hint::black_box(piece);
            let first_sample = sample_start.elapsed();
            prefill = Some(prefill_time);
            ttft = Some(prefill_time + first_sample);
        }
        let gen_start = Instant::now();
        let Generated { ends, host, record } = self.generate(n_gen, sampler)?;
        let last = ends.last().copied().unwrap_or(gen_start);
        let decode = last.duration_since(gen_start);
        let steps_at = std::iter::once(gen_start)
            .chain(ends.iter().copied())
            .map(|t| t.duration_since(start))
            .collect();
        Ok(Sample {
            total: prefill.unwrap_or_default() + decode,
            prefill,
            ttft,
            gaps: gaps(&ends),
            decode,
            tokens_generated: ends.len() as u64,
            host,
            profile: record,
            started: Some(start),
            steps_at,
        })
    }

    /// llama-batched-bench's method: the prompts of all sequences decoded together in chunks
    /// of n_batch, then `n_gen` steps each decoding one token of every sequence. Each sequence
    /// samples its next token with its own sampler between the timed decode calls.
    fn run_batch(
        &mut self,
        sequences: u32,
        n_prompt: u32,
        n_gen: u32,
        sampling: &SamplingParams,
    ) -> Result<Sample, EngineError> {
        let mut samplers: Vec<LlamaSampler> = (0..sequences)
            .map(|seq| {
                let mut params = sampling.clone();
                params.seed = params.seed.wrapping_add(seq);
                build_sampler(&params, self.n_vocab)
            })
            .collect();
        let mut next: Vec<LlamaToken> = (0..sequences).map(|_| self.first_token()).collect();
        let prompts = self.prompts(sequences, n_prompt, false);
        let start = Instant::now();
        let prefill = self.decode_entries(&prompts, |ctx, chunk| {
            sample_chunk(ctx, chunk, &mut samplers, &mut next)
        })?;
        let mut ends = vec![Instant::now()];
        let mut decode = Duration::ZERO;
        let mut decoded = 0u64;
        for step in 0..n_gen {
            let entries: Vec<Entry> = (0..sequences)
                .zip(&next)
                .map(|(seq, &token)| Entry::new(token, n_prompt + step, seq, true))
                .collect();
            decode += self.decode_entries(&entries, |ctx, chunk| {
                sample_chunk(ctx, chunk, &mut samplers, &mut next)
            })?;
            decoded += entries.len() as u64;
            ends.push(Instant::now());
        }
        let last = ends.last().copied().unwrap_or(start);
        Ok(Sample {
            total: last.duration_since(start),
            prefill: Some(prefill),
            ttft: ends.first().map(|t| t.duration_since(start)),
            gaps: gaps(&ends),
            decode,
            tokens_generated: decoded,
            host: Duration::ZERO,
            profile: None,
            started: Some(start),
            steps_at: ends.iter().map(|t| t.duration_since(start)).collect(),
        })
    }

    /// Every sequence's prompt of random tokens (BOS first when the vocabulary wants one), one
    /// after the other, with logits for each one's last token or, `every_row`, for all.
    fn prompts(&mut self, sequences: u32, n_prompt: u32, every_row: bool) -> Vec<Entry> {
        let mut entries = Vec::with_capacity((sequences * n_prompt) as usize);
        for seq in 0..sequences {
            for pos in 0..n_prompt {
                let token = if pos == 0 {
                    self.first_token()
                } else {
                    self.random_token()
                };
                entries.push(Entry::new(
                    token,
                    pos,
                    seq,
                    every_row || pos + 1 == n_prompt,
                ));
            }
        }
        entries
    }

    /// One pass of `n` random tokens from position 0, every row with its logits (a verify
    /// pass's shape), the cache cleared first: its decode call and synchronisation.
    fn rows_pass(&mut self, n: u32) -> Result<Duration, EngineError> {
        self.clear();
        let entries = self.prompts(1, n, true);
        let busy = self.decode_entries(&entries, |_, _| {})?;
        self.clear();
        Ok(busy)
    }

    /// Decode `entries` in chunks of n_batch, synchronising after each (batched-bench's
    /// `decode_helper`); `after_chunk` runs untimed after each chunk. Returns the time spent
    /// in decode and synchronisation.
    fn decode_entries(
        &mut self,
        entries: &[Entry],
        mut after_chunk: impl FnMut(&LlamaContext<'m>, &[Entry]),
    ) -> Result<Duration, EngineError> {
        let mut busy = Duration::ZERO;
        for chunk in entries.chunks(self.n_batch) {
            self.batch.clear();
            for e in chunk {
                self.batch
                    .add(e.token, e.pos, &[e.seq], e.logits)
                    .map_err(decode_error)?;
            }
            let started = Instant::now();
            self.ctx.decode(&mut self.batch).map_err(decode_error)?;
            self.ctx.synchronize();
            busy += started.elapsed();
            after_chunk(&self.ctx, chunk);
        }
        Ok(busy)
    }
}

/// Sample the next token of each sequence whose logits this chunk produced.
fn sample_chunk(
    ctx: &LlamaContext<'_>,
    chunk: &[Entry],
    samplers: &mut [LlamaSampler],
    next: &mut [LlamaToken],
) {
    for (index, entry) in chunk.iter().enumerate().filter(|(_, e)| e.logits) {
        let seq = usize::try_from(entry.seq).unwrap_or(0);
        if let (Some(sampler), Some(slot), Ok(idx)) = (
            samplers.get_mut(seq),
            next.get_mut(seq),
            i32::try_from(index),
        ) {
            *slot = sampler.sample(ctx, idx);
        }
    }
}

fn gaps(ends: &[Instant]) -> Vec<Duration> {
    ends.windows(2).map(|w| w[1].duration_since(w[0])).collect()
}

/// How a tg step chooses the next token.
pub(crate) enum Pick<'s> {
    /// A random token (llama-bench's tg: no sampling).
    Random,
    /// The chat's host sampler over the logits row.
    Host(&'s mut HostSampler),
    /// The token the context's graph sampled (a context made with a backend chain).
    Backend,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TestSpec {
    /// Process a prompt of `n_prompt` tokens.
    Pp { n_prompt: u32 },
    /// Generate `n_gen` tokens one at a time.
    Tg { n_gen: u32 },
    /// `Tg`, but each next token is sampled from the logits with the chat's sampler chain
    /// instead of drawn at random (what a chat pays per token on top of llama-bench's tg).
    TgSampled { n_gen: u32 },
    /// `Tg` on a context whose graph samples each next token with the chat's chain (llama.cpp's
    /// backend sampling); the token is read back instead of the logits.
    TgBackend { n_gen: u32 },
    /// A prompt then generation, timed together.
    Pg { n_prompt: u32, n_gen: u32 },
    /// `sequences` prompts of `n_prompt` tokens, then `n_gen` steps each decoding one token
    /// of every sequence in one batch.
    Batch {
        sequences: u32,
        n_prompt: u32,
        n_gen: u32,
    },
}

impl TestSpec {
    /// Whether `bench --profile` profiles this test's generation steps (one sequence, the
    /// logits read on the host: tg, tg with sampling, pg).
    pub(crate) fn profilable(&self) -> bool {
        matches!(
            self,
            TestSpec::Tg { .. } | TestSpec::TgSampled { .. } | TestSpec::Pg { .. }
        )
    }

    pub(crate) fn kind(&self) -> TestKind {
        match self {
            TestSpec::Pp { .. } => TestKind::Pp,
            TestSpec::Tg { .. } | TestSpec::TgSampled { .. } | TestSpec::TgBackend { .. } => {
                TestKind::Tg
            }
            TestSpec::Pg { .. } => TestKind::Pg,
            TestSpec::Batch { .. } => TestKind::Batch,
        }
    }

    /// (prompt tokens, generated tokens) per sequence.
    pub(crate) fn lengths(&self) -> (u32, u32) {
        match *self {
            TestSpec::Pp { n_prompt } => (n_prompt, 0),
            TestSpec::Tg { n_gen }
            | TestSpec::TgSampled { n_gen }
            | TestSpec::TgBackend { n_gen } => (0, n_gen),
            TestSpec::Pg { n_prompt, n_gen }
            | TestSpec::Batch {
                n_prompt, n_gen, ..
            } => (n_prompt, n_gen),
        }
    }

    /// Sequences decoded together (1 but for batch tests).
    pub(crate) fn sequences(&self) -> u32 {
        match self {
            TestSpec::Batch { sequences, .. } => *sequences,
            _ => 1,
        }
    }

    /// llama-bench's test name (`pp512`, `tg128`, `pp512+tg128`, ` @ d512` at a depth), and
    /// `B4 pp128+tg128` for batch tests.
    pub(crate) fn name(&self, depth: u32) -> String {
        let base = match *self {
            TestSpec::Pp { n_prompt } => format!("pp{n_prompt}"),
            TestSpec::Tg { n_gen } => format!("tg{n_gen}"),
            TestSpec::TgSampled { n_gen } => format!("tg{n_gen}+sampling"),
            TestSpec::TgBackend { n_gen } => format!("tg{n_gen}+backend"),
            TestSpec::Pg { n_prompt, n_gen } => format!("pp{n_prompt}+tg{n_gen}"),
            TestSpec::Batch {
                sequences,
                n_prompt,
                n_gen,
            } => format!("B{sequences} pp{n_prompt}+tg{n_gen}"),
        };
        if depth > 0 {
            format!("{base} @ d{depth}")
        } else {
            base
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TestKind {
    Pp,
    Tg,
    Pg,
    Batch,
}

/// Measure `sequences` prompts of `n_prompt` tokens then `n_gen` batched steps (one warm-up
/// and one timed run). Returns the point and the prefill time in ms (`None` when not timed).
pub(crate) fn measure_batch(
    model: &LlamaModel,
    settings: &EngineSettings,
    sequences: u32,
    n_prompt: u32,
    n_gen: u32,
) -> Result<(BatchPoint, Option<f64>), EngineError> {
    let sequences = sequences.max(1);
    let per_sequence = n_prompt.saturating_add(n_gen).max(1);
    let mut s = settings.clone();
    s.n_ctx = per_sequence.saturating_mul(sequences).max(64);
    s.n_batch = s.n_batch.max(sequences);
    let ctx = new_context(model, &s, sequences)?;
    let mut bencher = Bencher::new(model, ctx);
    let test = TestSpec::Batch {
        sequences,
        n_prompt,
        n_gen,
    };
    let greedy = SamplingParams {
        temperature: 0.0,
        ..SamplingParams::default()
    };
    bencher.warm_up(&test)?;
    let sample = bencher.run(&test, 0, &greedy)?;
    let aggregate = rate_per_s(sample.tokens_generated as usize, sample.decode);
    let itl = LatencyStats::from_durations(&sample.gaps);
    Ok((
        BatchPoint {
            batch: sequences,
            aggregate_tok_per_s: aggregate,
            per_sequence_tok_per_s: aggregate.map(|a| a / f64::from(sequences)),
            itl_p50_ms: itl.map(|i| i.p50_ms),
            itl_p99_ms: itl.map(|i| i.p99_ms),
        },
        sample.prefill.map(ms),
    ))
}

/// Decode at one depth (the chat's depth sweep, F2): bench's tg test of `n_gen` random
/// tokens after the cache is filled to `depth` (untimed), in a context of its own sized as
/// bench sizes it (depth + n_gen, llama-bench's rule), warmed up once.
pub(crate) fn measure_depth(
    model: &LlamaModel,
    settings: &EngineSettings,
    depth: u32,
    n_gen: u32,
) -> Result<crate::metrics::DepthRun, EngineError> {
    let n_gen = n_gen.max(1);
    let mut s = settings.clone();
    s.n_ctx = depth.saturating_add(n_gen);
    s.sampling = super::settings::SamplingMode::Host;
    s.first_sampling = None;
    let mut bencher = Bencher::new(model, new_context(model, &s, 1)?);
    let test = TestSpec::Tg { n_gen };
    bencher.warm_up(&test)?;
    let started = Instant::now();
    // tg feeds random tokens: the sampling is never used.
    let sample = bencher.run(&test, depth, &SamplingParams::default())?;
    let itl = LatencyStats::from_durations(&sample.gaps);
    Ok(crate::metrics::DepthRun {
        depth,
        n_gen,
        tok_per_s: rate_per_s(sample.tokens_generated as usize, sample.total).unwrap_or(0.0),
        itl_p50_ms: itl.map(|i| i.p50_ms),
        itl_p99_ms: itl.map(|i| i.p99_ms),
        fill_ms: ms(started.elapsed().saturating_sub(sample.total)),
    })
}

/// The roofline's compute term (`metrics::spec::RowCost`), measured on `model` with the
/// engine's settings and kernels, on a context of its own: one untimed pass of each shape,
/// then one-row passes and passes of `rows` rows in turn (5 and 3), every row with its logits;
/// the medians.
pub(crate) fn row_cost(
    model: &LlamaModel,
    settings: &EngineSettings,
    rows: u32,
) -> Result<crate::metrics::spec::RowCost, EngineError> {
    let rows = rows.max(2);
    let mut s = settings.clone();
    s.n_ctx = rows.max(64);
    s.n_batch = s.n_batch.max(rows);
    s.n_ubatch = s.n_ubatch.max(rows);
    s.sampling = super::settings::SamplingMode::Host;
    s.first_sampling = None;
    let mut bencher = Bencher::new(model, new_context(model, &s, 1)?);
    bencher.rows_pass(1)?;
    bencher.rows_pass(rows)?;
    let (mut one, mut many) = (Vec::new(), Vec::new());
    for i in 0..5 {
        one.push(ms(bencher.rows_pass(1)?));
        if i < 3 {
            many.push(ms(bencher.rows_pass(rows)?));
        }
    }
    Ok(crate::metrics::spec::RowCost {
        one_row_ms: crate::metrics::median(&one).unwrap_or(0.0),
        rows,
        rows_ms: crate::metrics::median(&many).unwrap_or(0.0),
    })
}
