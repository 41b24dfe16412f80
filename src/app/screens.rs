//! The bench (F2), compare (F3) and profile (F4) screens' state, and what opens and runs them.

use super::{App, Effect, EngineStatus, Mode};
use crate::compare::Comparison;
use crate::engine::RequestId;

/// The compare screen's table: read from the comparisons log when the screen opens.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum CompareView {
    /// Not read yet, or being read.
    #[default]
    Reading,
    /// The log has no comparison.
    Empty,
    Loaded(Box<Comparison>),
    Failed(String),
}

/// The most profiled steps of one turn the profile screen keeps for its mean (the latest).
pub(crate) const PROFILE_STEPS_KEPT: usize = 64;

/// The profile screen (F4): where the decode steps' time goes, from the engine's profiled
/// steps (`--profile`), the last one and the mean over the turn.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProfileScreen {
    /// One decode step in `rate` is profiled; 0: profiling is off (no callback installed).
    pub rate: u32,
    /// The turn the steps below belong to.
    pub request: Option<RequestId>,
    pub steps: Vec<crate::metrics::profile::StepRecord>,
    /// Profiled steps this turn (more than `steps` holds past `PROFILE_STEPS_KEPT`).
    pub seen: usize,
    pub last: Option<crate::metrics::profile::StepBreakdown>,
    pub mean: Option<crate::metrics::profile::StepBreakdown>,
    /// What profiling adds to each node, as the engine measured it this turn, with its spread.
    pub per_node: crate::metrics::profile::Correction,
}

impl ProfileScreen {
    /// A profiled step arrived; `bandwidth` is the roofline's (bytes/s) for each part's MBU.
    pub fn add(
        &mut self,
        request: RequestId,
        step: crate::metrics::profile::StepRecord,
        per_node: crate::metrics::profile::Correction,
        bandwidth: Option<f64>,
    ) {
        if self.request != Some(request) {
            self.request = Some(request);
            self.steps.clear();
            self.seen = 0;
        }
        if self.steps.len() == PROFILE_STEPS_KEPT {
            self.steps.remove(0);
        }
        self.steps.push(step);
        self.seen += 1;
        self.per_node = per_node;
        let last = self.steps.last().map(std::slice::from_ref).unwrap_or(&[]);
        let limits = crate::metrics::profile::Limits {
            bandwidth,
            correction: per_node,
            ..Default::default()
        };
        self.last = crate::metrics::profile::breakdown(last, &limits);
        self.mean = crate::metrics::profile::breakdown(&self.steps, &limits);
    }
}

/// One batch size's figures on the bench screen.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchPoint {
    pub point: crate::metrics::BatchPoint,
    /// Prefill of all B prompts together; `None` when it was not timed.
    pub prefill_ms: Option<f64>,
}

/// Which sweep the bench screen shows and runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SweepView {
    /// B sequences decoded together.
    #[default]
    Batch,
    /// Decode against the depth of the KV cache.
    Depth,
}

/// The depths a depth sweep may measure; those that fit the chat's context run
/// (`BenchScreen::depths_for`).
pub(crate) const SWEEP_DEPTHS: [u32; 6] = [0, 512, 2048, 8192, 32768, 131_072];

/// The bench screen: which sweep, its points so far, and whether it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchScreen {
    pub view: SweepView,
    pub batches: Vec<u32>,
    pub n_prompt: u32,
    pub n_gen: u32,
    pub points: Vec<BenchPoint>,
    /// Tokens generated at each depth of a depth sweep.
    pub depth_n_gen: u32,
    pub depth_points: Vec<crate::metrics::DepthRun>,
    pub running: Option<RequestId>,
    /// The view of the sweep running or last run: the error, stop and save below are its.
    pub ran: SweepView,
    pub error: Option<String>,
    /// The last sweep was stopped with Esc (its points are kept).
    pub stopped: bool,
    /// Where the last sweep went in the results log: its run id, or why it could not be
    /// saved; `None` while running or before the first.
    pub saved: Option<Result<String, String>>,
}

impl Default for BenchScreen {
    fn default() -> Self {
        Self {
            view: SweepView::Batch,
            batches: vec![1, 2, 4, 8, 16, 32],
            n_prompt: 64,
            n_gen: 32,
            points: Vec::new(),
            depth_n_gen: 32,
            depth_points: Vec::new(),
            running: None,
            ran: SweepView::Batch,
            error: None,
            stopped: false,
            saved: None,
        }
    }
}

impl BenchScreen {
    /// The depths a depth sweep runs in a context of `n_ctx` tokens: each of `SWEEP_DEPTHS`
    /// with room for the generated tokens after it (bench's context is depth + n_gen; the
    /// chat's own context bounds it, as memory for that was already found).
    pub(crate) fn depths_for(&self, n_ctx: u32) -> Vec<u32> {
        SWEEP_DEPTHS
            .into_iter()
            .filter(|d| d.saturating_add(self.depth_n_gen) <= n_ctx.max(self.depth_n_gen))
            .collect()
    }

    pub(super) fn show(&mut self, view: Option<SweepView>) {
        self.view = view.unwrap_or(match self.view {
            SweepView::Batch => SweepView::Depth,
            SweepView::Depth => SweepView::Batch,
        });
    }
}

impl App {
    pub(super) fn run_bench(&mut self) -> Vec<Effect> {
        if self.bench.running.is_some() {
            return Vec::new();
        }
        self.bench.ran = self.bench.view;
        if self.is_generating() || self.engine != EngineStatus::Ready {
            self.bench.error = Some("the engine is busy or not ready: try again when it is".into());
            return Vec::new();
        }
        let plan = match self.bench.view {
            SweepView::Batch => {
                self.bench.points.clear();
                crate::engine::SweepPlan::Batch {
                    batches: self.bench.batches.clone(),
                    n_prompt: self.bench.n_prompt,
                    n_gen: self.bench.n_gen,
                }
            }
            SweepView::Depth => {
                self.bench.depth_points.clear();
                let n_ctx = self.model.as_ref().map_or(0, |m| m.n_ctx);
                crate::engine::SweepPlan::Depth {
                    depths: self.bench.depths_for(n_ctx),
                    n_gen: self.bench.depth_n_gen,
                }
            }
        };
        let id = self.request_ids.next();
        self.bench.running = Some(id);
        self.bench.error = None;
        self.bench.stopped = false;
        self.bench.saved = None;
        vec![Effect::Sweep { id, plan }]
    }

    /// The sweep's points, to the results log (nothing to save without a point or a model).
    pub(super) fn save_sweep(&mut self, stopped: bool) -> Vec<Effect> {
        let Some(model) = self.model.clone() else {
            return Vec::new();
        };
        let b = &self.bench;
        let (points, depths) = match b.ran {
            SweepView::Batch => (
                b.points.iter().map(|p| (p.point, p.prefill_ms)).collect(),
                Vec::new(),
            ),
            SweepView::Depth => (Vec::new(), b.depth_points.clone()),
        };
        if points.is_empty() && depths.is_empty() {
            return Vec::new();
        }
        vec![Effect::SaveSweep(Box::new(super::SweepToSave {
            points,
            depths,
            n_prompt: b.n_prompt,
            n_gen: b.n_gen,
            stopped,
            model,
            sampling: self.sampling.clone(),
        }))]
    }

    pub(super) fn open_compare(&mut self) -> Vec<Effect> {
        self.mode = Mode::Compare;
        self.compare = CompareView::Reading;
        vec![Effect::LoadComparison {
            back: self.compare_place.back,
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::tests::*;
    use crate::app::{update, Msg};
    use crate::engine::EngineEvent;
    use crossterm::event::KeyCode;

    #[test]
    fn bench_screen_runs_a_sweep_and_collects_points() {
        let mut app = ready_app();
        update(&mut app, Msg::Key(key(KeyCode::F(2))), now());
        assert_eq!(app.mode, Mode::Bench);
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        let Some(Effect::Sweep {
            id,
            plan: crate::engine::SweepPlan::Batch { batches, .. },
        }) = fx.first().cloned()
        else {
            panic!("{fx:?}")
        };
        assert_eq!(batches, app.bench.batches);
        assert!(
            update(&mut app, Msg::Key(key(KeyCode::Enter)), now()).is_empty(),
            "one at a time"
        );
        let point = crate::metrics::BatchPoint {
            batch: 1,
            aggregate_tok_per_s: Some(10.0),
            per_sequence_tok_per_s: Some(10.0),
            itl_p50_ms: Some(100.0),
            itl_p99_ms: Some(120.0),
        };
        update(
            &mut app,
            Msg::Engine(EngineEvent::BatchPoint {
                request_id: id,
                point,
                prefill_ms: Some(5.0),
            }),
            now(),
        );
        assert_eq!(app.bench.points.len(), 1);
        // Esc stops a running sweep and keeps the screen and its points.
        let fx = update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        assert_eq!(fx, vec![Effect::Cancel(id)]);
        assert_eq!(app.mode, Mode::Bench);
        assert!(app.bench.running.is_none());
        assert!(app.bench.stopped);
        assert_eq!(app.bench.points.len(), 1);
        // A late point of the stopped sweep is dropped.
        update(
            &mut app,
            Msg::Engine(EngineEvent::BatchPoint {
                request_id: id,
                point,
                prefill_ms: None,
            }),
            now(),
        );
        assert_eq!(app.bench.points.len(), 1);
        // Esc on an idle screen closes it.
        assert!(update(&mut app, Msg::Key(key(KeyCode::Esc)), now()).is_empty());
        assert_eq!(app.mode, Mode::Chat);
        // F2 on a running sweep closes the screen and stops it.
        update(&mut app, Msg::Key(key(KeyCode::F(2))), now());
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        let Some(Effect::Sweep { id, .. }) = fx.first().cloned() else {
            panic!("{fx:?}")
        };
        assert!(!app.bench.stopped, "a new sweep clears the stop");
        let fx = update(&mut app, Msg::Key(key(KeyCode::F(2))), now());
        assert_eq!(fx, vec![Effect::Cancel(id)]);
        assert_eq!(app.mode, Mode::Chat);
    }

    #[test]
    fn the_depth_view_runs_the_depths_that_fit_the_chat_s_context_and_saves_them() {
        let mut app = ready_app();
        app.model = Some(crate::engine::ModelInfo {
            n_ctx: 4096,
            ..Default::default()
        });
        update(&mut app, Msg::Key(key(KeyCode::F(2))), now());
        update(&mut app, Msg::Key(key(KeyCode::Tab)), now());
        assert_eq!(app.bench.view, SweepView::Depth);
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        let Some(Effect::Sweep {
            id,
            plan: crate::engine::SweepPlan::Depth { depths, n_gen },
        }) = fx.first().cloned()
        else {
            panic!("{fx:?}")
        };
        // 8192 + 32 generated tokens would not fit -c 4096.
        assert_eq!((depths.as_slice(), n_gen), ([0, 512, 2048].as_slice(), 32));
        let run = |depth| crate::metrics::DepthRun {
            depth,
            n_gen: 32,
            tok_per_s: 10.0,
            itl_p50_ms: Some(100.0),
            itl_p99_ms: Some(110.0),
            fill_ms: 5.0,
        };
        for depth in [0, 512] {
            let run = run(depth);
            update(
                &mut app,
                Msg::Engine(EngineEvent::DepthPoint {
                    request_id: id,
                    run,
                }),
                now(),
            );
        }
        // Switching views while it runs keeps the sweep and its points.
        update(&mut app, Msg::Key(key(KeyCode::Char('b'))), now());
        assert_eq!(app.bench.view, SweepView::Batch);
        assert_eq!(app.bench.depth_points.len(), 2);
        let done = EngineEvent::SweepDone {
            request_id: id,
            error: None,
        };
        let fx = update(&mut app, Msg::Engine(done), now());
        let [Effect::SaveSweep(sweep)] = fx.as_slice() else {
            panic!("{fx:?}")
        };
        assert_eq!(sweep.depths, vec![run(0), run(512)]);
        assert!(sweep.points.is_empty() && !sweep.stopped);
        // A depth sweep leaves the batching sweep's points as they were, and back.
        assert!(app.bench.points.is_empty());
    }

    #[test]
    fn a_finished_or_stopped_sweep_goes_to_the_results_log() {
        let mut app = ready_app();
        app.model = Some(crate::engine::ModelInfo::default());
        let point = |batch| crate::metrics::BatchPoint {
            batch,
            aggregate_tok_per_s: Some(10.0 * f64::from(batch)),
            per_sequence_tok_per_s: Some(10.0),
            itl_p50_ms: Some(100.0),
            itl_p99_ms: Some(120.0),
        };
        update(&mut app, Msg::Key(key(KeyCode::F(2))), now());
        let run = |app: &mut App| {
            let fx = update(app, Msg::Key(key(KeyCode::Enter)), now());
            let Some(Effect::Sweep { id, .. }) = fx.first().cloned() else {
                panic!("{fx:?}")
            };
            for b in [1, 2] {
                update(
                    app,
                    Msg::Engine(EngineEvent::BatchPoint {
                        request_id: id,
                        point: point(b),
                        prefill_ms: Some(5.0),
                    }),
                    now(),
                );
            }
            id
        };
        // Finished: saved whole, not marked stopped.
        let id = run(&mut app);
        let fx = update(
            &mut app,
            Msg::Engine(EngineEvent::SweepDone {
                request_id: id,
                error: None,
            }),
            now(),
        );
        let [Effect::SaveSweep(sweep)] = fx.as_slice() else {
            panic!("{fx:?}")
        };
        assert_eq!(sweep.points.len(), 2);
        assert_eq!(sweep.points[1], (point(2), Some(5.0)));
        assert!(!sweep.stopped);
        update(&mut app, Msg::SweepSaved(Ok(("run-1".into(), None))), now());
        assert_eq!(app.bench.saved, Some(Ok("run-1".into())));
        // Stopped with Esc: the points so far are saved, marked stopped; a new sweep clears
        // the saved id.
        run(&mut app);
        assert_eq!(app.bench.saved, None);
        let fx = update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        let [Effect::Cancel(_), Effect::SaveSweep(sweep)] = fx.as_slice() else {
            panic!("{fx:?}")
        };
        assert!(sweep.stopped);
        assert_eq!(sweep.points.len(), 2);
        // Nothing measured: nothing saved.
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        let Some(Effect::Sweep { id, .. }) = fx.first().cloned() else {
            panic!("{fx:?}")
        };
        let fx = update(
            &mut app,
            Msg::Engine(EngineEvent::SweepDone {
                request_id: id,
                error: None,
            }),
            now(),
        );
        assert!(fx.is_empty(), "{fx:?}");
    }

    #[test]
    fn the_compare_screen_walks_the_log_and_uses_a_rows_model() {
        use crate::compare::log::Place;
        use crate::compare::report::tests::{comparison, row};
        let mut app = ready_app();
        update(&mut app, Msg::Key(key(KeyCode::F(3))), now());
        let c = comparison(vec![row("f16", 50.0, 0.0), row("q4_0", 140.0, 0.05)]);
        let loaded = |back, c: &crate::compare::Comparison| {
            Msg::ComparisonLoaded(Ok(Some((c.clone(), Place { back, total: 3 }))))
        };
        update(&mut app, loaded(0, &c), now());
        // Newer than the newest: nothing to read.
        assert!(update(&mut app, Msg::Key(key(KeyCode::Right)), now()).is_empty());
        let fx = update(&mut app, Msg::Key(key(KeyCode::Left)), now());
        assert_eq!(fx, vec![Effect::LoadComparison { back: 1 }]);
        update(&mut app, loaded(1, &c), now());
        assert_eq!(app.compare_place, Place { back: 1, total: 3 });
        update(&mut app, Msg::Key(key(KeyCode::Left)), now());
        update(&mut app, loaded(2, &c), now());
        // Older than the oldest: nothing to read; r reloads the one shown.
        assert!(update(&mut app, Msg::Key(key(KeyCode::Left)), now()).is_empty());
        let fx = update(&mut app, Msg::Key(key(KeyCode::Char('r'))), now());
        assert_eq!(fx, vec![Effect::LoadComparison { back: 2 }]);
        update(&mut app, loaded(2, &c), now());
        // Rows: clamped at both ends.
        update(&mut app, Msg::Key(key(KeyCode::Up)), now());
        assert_eq!(app.compare_row, 0);
        for _ in 0..3 {
            update(&mut app, Msg::Key(key(KeyCode::Down)), now());
        }
        assert_eq!(app.compare_row, 1);
        // m switches the chat to the selected row's model, through /model's door.
        let fx = update(&mut app, Msg::Key(key(KeyCode::Char('m'))), now());
        assert!(
            fx.iter()
                .any(|e| matches!(e, Effect::SwitchModel { path, .. }
                if path == std::path::Path::new("/m/q4_0.gguf"))),
            "{fx:?}"
        );
        assert_eq!(app.mode, Mode::Chat);
        // F3 again opens the newest, first row.
        let fx = update(&mut app, Msg::Key(key(KeyCode::F(3))), now());
        assert_eq!(fx, vec![Effect::LoadComparison { back: 0 }]);
        assert_eq!(app.compare_row, 0);
    }

    #[test]
    fn compare_screen_reads_the_log_through_an_effect() {
        let mut app = ready_app();
        let fx = update(&mut app, Msg::Key(key(KeyCode::F(3))), now());
        assert_eq!(fx, vec![Effect::LoadComparison { back: 0 }]);
        assert_eq!(app.mode, Mode::Compare);
        assert_eq!(app.compare, CompareView::Reading);
        update(&mut app, Msg::ComparisonLoaded(Ok(None)), now());
        assert_eq!(app.compare, CompareView::Empty);
        let fx = update(&mut app, Msg::Key(key(KeyCode::Char('r'))), now());
        assert_eq!(fx, vec![Effect::LoadComparison { back: 0 }]);
        update(&mut app, Msg::ComparisonLoaded(Err("denied".into())), now());
        assert_eq!(app.compare, CompareView::Failed("denied".into()));
        // Help opened from the compare screen returns to it.
        update(&mut app, Msg::Key(key(KeyCode::F(1))), now());
        assert_eq!(app.mode, Mode::Help);
        update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        assert_eq!(app.mode, Mode::Compare);
        update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        assert_eq!(app.mode, Mode::Chat);
        let fx = run_line(&mut app, "/compare");
        assert_eq!(fx, vec![Effect::LoadComparison { back: 0 }]);
        assert_eq!(app.mode, Mode::Compare);
    }
}
