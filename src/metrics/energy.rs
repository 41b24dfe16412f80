//! Energy per token from GPUs' cumulative energy counters (NVML's total energy consumption, in
//! millijoules since the driver loaded), polled during a run: the energy of chosen time windows
//! (interpolated between the counter's changes), the bound its update steps put on it, the idle
//! baseline, joules per output and per total token, tokens per kWh and the energy cost of 1M
//! tokens at a price per kWh. Pure arithmetic over polled readings; the polling is in `hw::gpu`,
//! the windows in `bench::gpu`. Defined in docs/metrics.md ("Partial offload and energy").

use serde::Serialize;

/// Joules in one kilowatt-hour.
pub(crate) const J_PER_KWH: f64 = 3.6e6;

/// `joules / tokens`; `None` when no token was made or the energy is not a number.
pub(crate) fn joules_per_token(joules: f64, tokens: u64) -> Option<f64> {
    (tokens > 0 && joules.is_finite() && joules >= 0.0).then(|| joules / tokens as f64)
}

/// `3.6e6 / (J per token)`; `None` when the energy per token is zero or not a number.
pub(crate) fn tokens_per_kwh(joules_per_token: f64) -> Option<f64> {
    (joules_per_token.is_finite() && joules_per_token > 0.0).then(|| J_PER_KWH / joules_per_token)
}

/// Energy cost of 1M tokens: `J/token × 1e6 / 3.6e6 × price per kWh`.
pub(crate) fn energy_cost_per_million_tokens(
    joules_per_token: f64,
    price_per_kwh: f64,
) -> Option<f64> {
    (joules_per_token.is_finite() && joules_per_token >= 0.0 && price_per_kwh.is_finite())
        .then(|| joules_per_token * 1e6 / J_PER_KWH * price_per_kwh)
}

/// One reading of one GPU's cumulative energy counter, at `at_s` seconds on the run's clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CounterPoint {
    pub at_s: f64,
    pub mj: u64,
}

/// The instants the counter moved. The driver updates the counter every few tens of
/// milliseconds and it is polled more often than that, so each new value is placed halfway
/// between the poll that first saw it and the poll before (within half a poll period of when
/// the driver wrote it); the first reading keeps its own instant. A counter that went back
/// (driver reload) starts the list over.
pub(crate) fn change_points(polls: &[CounterPoint]) -> Vec<CounterPoint> {
    let mut out: Vec<CounterPoint> = Vec::new();
    let mut previous_at: Option<f64> = None;
    for p in polls {
        match out.last() {
            Some(last) if p.mj == last.mj => {}
            Some(last) if p.mj > last.mj => out.push(CounterPoint {
                at_s: previous_at.map_or(p.at_s, |before| (before + p.at_s) / 2.0),
                mj: p.mj,
            }),
            _ => {
                out.clear();
                out.push(*p);
            }
        }
        previous_at = Some(p.at_s);
    }
    out
}

/// The counter's value at `t` (mJ, fractional), linear between change points; `None` before
/// the first or after the last.
fn counter_at(changes: &[CounterPoint], t: f64) -> Option<f64> {
    let after = changes.partition_point(|p| p.at_s <= t);
    let a = changes.get(after.checked_sub(1)?)?;
    if a.at_s == t {
        return Some(a.mj as f64);
    }
    let b = changes.get(after)?;
    let f = (t - a.at_s) / (b.at_s - a.at_s);
    Some(a.mj as f64 + f * (b.mj - a.mj) as f64)
}

/// Joules used from `t0` to `t1` by the counter's change points; `None` when the window is
/// empty or not inside the span the changes cover.
pub(crate) fn joules_between(changes: &[CounterPoint], t0: f64, t1: f64) -> Option<f64> {
    if t1.partial_cmp(&t0) != Some(std::cmp::Ordering::Greater) {
        return None;
    }
    Some((counter_at(changes, t1)? - counter_at(changes, t0)?) / 1e3)
}

/// How often the counter moves: the median time between its changes (s); `None` with fewer
/// than three changes.
pub(crate) fn update_period_s(changes: &[CounterPoint]) -> Option<f64> {
    let gaps: Vec<f64> = changes.windows(2).map(|w| w[1].at_s - w[0].at_s).collect();
    if gaps.len() < 2 {
        return None;
    }
    crate::metrics::median(&gaps)
}

/// A bound on how much of a measured energy the counter's steps can move it by, in %: each
/// end of each window lies up to half an update period from a change, so the error is at most
/// `windows × update period ÷ the windows' summed time`.
pub(crate) fn resolution_pct(windows: usize, seconds: f64, update_s: f64) -> f64 {
    100.0 * windows as f64 * update_s / seconds
}

/// Above this bound a row's energy figures carry a warning.
pub(crate) const WARN_RESOLUTION_PCT: f64 = 5.0;

/// The energy of a bench row: its timed windows only (the depth fill, the warm-up and the
/// gaps between repetitions left out), on the GPUs the run used.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct WindowEnergy {
    pub joules: f64,
    /// The windows' summed length, s.
    pub seconds: f64,
    pub windows: usize,
    /// Tokens generated in the windows (every sequence).
    pub output_tokens: u64,
    /// Prompt tokens decoded in the windows plus `output_tokens`.
    pub total_tokens: u64,
    /// The same GPUs' power at rest, measured before the first model loaded, W.
    pub idle_w: Option<f64>,
    /// How often the counter moved during the run, s: on several GPUs, the slowest one's.
    pub update_s: Option<f64>,
}

impl WindowEnergy {
    /// Mean power over the windows, W.
    pub(crate) fn mean_power_w(&self) -> f64 {
        self.joules / self.seconds
    }

    /// The energy above the idle baseline (idle power × the windows' time taken off), J.
    pub(crate) fn above_idle_joules(&self) -> Option<f64> {
        self.idle_w
            .map(|w| (self.joules - w * self.seconds).max(0.0))
    }

    pub(crate) fn joules_per_output_token(&self) -> Option<f64> {
        joules_per_token(self.joules, self.output_tokens)
    }

    pub(crate) fn joules_per_total_token(&self) -> Option<f64> {
        joules_per_token(self.joules, self.total_tokens)
    }

    /// J per output token above the idle baseline: what generating cost on top of keeping the
    /// GPU on.
    pub(crate) fn above_idle_joules_per_output_token(&self) -> Option<f64> {
        joules_per_token(self.above_idle_joules()?, self.output_tokens)
    }

    /// The counter-step bound of [`resolution_pct`], when the update period is known.
    pub(crate) fn resolution_pct(&self) -> Option<f64> {
        self.update_s
            .map(|u| resolution_pct(self.windows, self.seconds, u))
    }

    /// Why the figures should be read with care, or `None`.
    pub(crate) fn warning(&self) -> Option<String> {
        let bound = self.resolution_pct()?;
        (bound > WARN_RESOLUTION_PCT).then(|| {
            format!(
                "GPU energy: the {} timed window(s) ({:.0} ms together) are short against NVML's \
                 energy counter, which moved every {:.0} ms: J/token is good to ±{:.0}% at best \
                 (more tokens, -n or -p, make it finer)",
                self.windows,
                self.seconds * 1e3,
                self.update_s.unwrap_or_default() * 1e3,
                bound
            )
        })
    }
}

/// A row's energy from each GPU's counter change points (one list per GPU the row used) and
/// its timed windows (`(start, end)` on the same clock): each GPU's energy from its own
/// counter, summed. `None` when a window lies outside the changes seen on any GPU, or when
/// the counters cannot resolve the windows at all (their steps are as long as the windows
/// together).
///
/// The update period is each GPU's own, and the slowest one bounds the sum: GPU i's energy is
/// off by at most `windows × u_i × P_i`, so the sum is off by at most `windows × max(u_i)` of
/// its own time. Summing the counters first would not do: two counters each moving every
/// 100 ms out of phase make a sum that moves every 50 ms, and a bound half the true one.
pub(crate) fn window_energy(
    devices: &[Vec<CounterPoint>],
    windows: &[(f64, f64)],
    output_tokens: u64,
    total_tokens: u64,
    idle_w: Option<f64>,
) -> Option<WindowEnergy> {
    let mut joules = 0.0;
    let mut seconds = 0.0;
    for &(t0, t1) in windows {
        for changes in devices {
            joules += joules_between(changes, t0, t1)?;
        }
        seconds += t1 - t0;
    }
    let periods: Option<Vec<f64>> = devices.iter().map(|c| update_period_s(c)).collect();
    let update_s = periods
        .filter(|p| !p.is_empty())
        .map(|p| p.into_iter().fold(0.0, f64::max));
    let energy = WindowEnergy {
        joules,
        seconds,
        windows: windows.len(),
        output_tokens,
        total_tokens,
        idle_w,
        update_s,
    };
    let unresolved = energy.resolution_pct().is_none_or(|b| b >= 100.0);
    (!windows.is_empty() && seconds > 0.0 && !unresolved).then_some(energy)
}

/// Mean power from `t0` to `t1` (the idle baseline), W.
pub(crate) fn mean_power_between(changes: &[CounterPoint], t0: f64, t1: f64) -> Option<f64> {
    Some(joules_between(changes, t0, t1)? / (t1 - t0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joules_per_token_and_tokens_per_kwh() {
        // 700 J for 200 tokens: 3.5 J/token; 3.6e6 J per kWh / 3.5 J per token.
        assert_eq!(joules_per_token(700.0, 200), Some(3.5));
        let per_kwh = tokens_per_kwh(3.5).unwrap();
        assert!((per_kwh - 1_028_571.428_571).abs() < 1e-3, "{per_kwh}");
    }

    #[test]
    fn cost_per_million_tokens_at_a_price_per_kwh() {
        // 3.6 J/token → 1M tokens use 3.6e6 J = 1 kWh, at 0.30 per kWh.
        let cost = energy_cost_per_million_tokens(3.6, 0.30).unwrap();
        assert!((cost - 0.30).abs() < 1e-12, "{cost}");
        assert_eq!(energy_cost_per_million_tokens(f64::NAN, 0.30), None);
    }

    #[test]
    fn no_tokens_or_no_energy_give_none() {
        assert_eq!(joules_per_token(10.0, 0), None);
        assert_eq!(joules_per_token(f64::NAN, 3), None);
        assert_eq!(tokens_per_kwh(0.0), None);
    }

    /// The polls of a counter the driver publishes every `update_s` (the energy used so far
    /// at that instant, power integrated finely), read every `poll_s` up to `until`.
    fn polls(
        power_w: impl Fn(f64) -> f64,
        update_s: f64,
        poll_s: f64,
        until: f64,
    ) -> Vec<CounterPoint> {
        let dt = 1e-4;
        let energy_until = |t: f64| -> f64 {
            let steps = (t / dt).round() as u64;
            (0..steps).map(|i| power_w(i as f64 * dt) * dt).sum::<f64>() * 1e3
        };
        let mut out = Vec::new();
        let mut j = 0u64;
        loop {
            let at = j as f64 * poll_s;
            if at > until {
                break;
            }
            let published = (at / update_s).floor() * update_s;
            out.push(CounterPoint {
                at_s: at,
                mj: 1_000_000 + energy_until(published) as u64,
            });
            j += 1;
        }
        out
    }

    #[test]
    fn a_new_counter_value_is_placed_between_the_poll_that_saw_it_and_the_one_before() {
        let p = |at_s, mj| CounterPoint { at_s, mj };
        let changes = change_points(&[
            p(0.0, 10),
            p(0.01, 10),
            p(0.02, 15),
            p(0.03, 15),
            p(0.04, 20),
        ]);
        assert_eq!(changes, vec![p(0.0, 10), p(0.015, 15), p(0.035, 20)]);
        // A counter that went back (the driver reloaded) starts over.
        let changes = change_points(&[p(0.0, 10), p(0.01, 15), p(0.02, 3), p(0.03, 4)]);
        assert_eq!(changes, vec![p(0.02, 3), p(0.025, 4)]);
    }

    #[test]
    fn steady_power_through_a_stepped_counter_is_measured_within_half_a_poll() {
        // 300 W, the counter published every 100 ms, polled every 10 ms.
        let changes = change_points(&polls(|_| 300.0, 0.1, 0.01, 3.0));
        let update = update_period_s(&changes).unwrap();
        assert!((update - 0.1).abs() < 1e-9, "{update}");
        let j = joules_between(&changes, 0.73, 1.91).unwrap();
        assert!((j / (300.0 * 1.18) - 1.0).abs() < 0.01, "{j} J");
        // Outside what was polled, or an empty window: no figure.
        assert_eq!(joules_between(&changes, 0.5, 3.5), None);
        assert_eq!(joules_between(&changes, 1.0, 1.0), None);
    }

    /// The depth fill (`-d`) runs before a repetition's timed window: its energy is not the
    /// row's. A counter read around the whole repetition gave 400 × 1 + 100 × 1 J here.
    #[test]
    fn the_depth_fill_before_a_window_is_left_out() {
        let power = |t: f64| if t < 1.0 { 400.0 } else { 100.0 };
        let changes = change_points(&polls(power, 0.04, 0.004, 2.5));
        let around_the_repetition = joules_between(&changes, 0.0, 2.0).unwrap();
        assert!(
            (around_the_repetition - 500.0).abs() < 10.0,
            "{around_the_repetition}"
        );
        let e = window_energy(&[changes], &[(1.0, 2.0)], 100, 100, Some(60.0)).unwrap();
        assert!((e.joules - 100.0).abs() < 3.0, "{} J", e.joules);
        assert!((e.mean_power_w() - 100.0).abs() < 3.0);
        assert!((e.above_idle_joules().unwrap() - 40.0).abs() < 3.0);
        assert!((e.above_idle_joules_per_output_token().unwrap() - 0.4).abs() < 0.03);
        assert_eq!(e.warning(), None, "1 s against 40 ms steps is 4% at most");
    }

    #[test]
    fn output_and_total_tokens_each_have_their_joules() {
        let changes = change_points(&polls(|_| 200.0, 0.1, 0.01, 4.0));
        // Two windows of 1 s: 400 J for 100 prompt + 300 generated tokens.
        let e = window_energy(&[changes], &[(0.5, 1.5), (2.0, 3.0)], 300, 400, None).unwrap();
        assert!((e.joules - 400.0).abs() < 4.0, "{}", e.joules);
        assert!((e.joules_per_output_token().unwrap() - 400.0 / 300.0).abs() < 0.02);
        assert!((e.joules_per_total_token().unwrap() - 1.0).abs() < 0.01);
        assert_eq!(e.above_idle_joules(), None);
        assert!((e.resolution_pct().unwrap() - 10.0).abs() < 1e-6);
        let w = e.warning().unwrap();
        assert!(w.contains("every 100 ms") && w.contains("±10%"), "{w}");
    }

    #[test]
    fn windows_the_counter_cannot_resolve_give_no_figure() {
        let changes = change_points(&polls(|_| 200.0, 0.1, 0.01, 2.0));
        // 40 ms against 100 ms steps: the bound is 250%.
        assert_eq!(
            window_energy(std::slice::from_ref(&changes), &[(0.5, 0.54)], 4, 4, None),
            None
        );
        // A counter that never moved: no update period, no figure.
        let still = [
            CounterPoint { at_s: 0.0, mj: 5 },
            CounterPoint { at_s: 1.0, mj: 5 },
        ];
        assert_eq!(
            window_energy(&[change_points(&still)], &[(0.2, 0.8)], 4, 4, None),
            None
        );
        assert_eq!(
            window_energy(std::slice::from_ref(&changes), &[], 0, 0, None),
            None
        );
        // The idle baseline over a span.
        let idle = mean_power_between(&changes, 0.2, 1.8).unwrap();
        assert!((idle - 200.0).abs() < 2.0, "{idle}");
    }
}
