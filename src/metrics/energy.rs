//! Energy per token from a GPU's cumulative energy counter (NVML's total energy consumption, in
//! millijoules since the driver loaded): joules per token, tokens per kWh and the energy cost of
//! 1M tokens at a price per kWh. Pure arithmetic over two counter readings; the sampling itself
//! is in `hw::gpu`. Defined in docs/metrics.md ("Energy").

use serde::Serialize;

/// Joules in one kilowatt-hour.
pub(crate) const J_PER_KWH: f64 = 3.6e6;

/// The energy a span of work used, from two readings of the cumulative counter.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct EnergySpan {
    pub joules: f64,
    pub tokens: u64,
    pub seconds: f64,
}

impl EnergySpan {
    /// From the counter (millijoules) before and after, the tokens made in between and the
    /// span's length. `None` when the counter went backwards (driver reload, wrap) or nothing
    /// was measured.
    pub(crate) fn from_counter_mj(
        before_mj: u64,
        after_mj: u64,
        tokens: u64,
        seconds: f64,
    ) -> Option<Self> {
        let delta = after_mj.checked_sub(before_mj)?;
        (seconds.is_finite() && seconds > 0.0).then_some(Self {
            joules: delta as f64 / 1e3,
            tokens,
            seconds,
        })
    }

    /// Mean power over the span, watts.
    pub(crate) fn mean_power_w(&self) -> f64 {
        self.joules / self.seconds
    }

    /// Joules per token; `None` without tokens.
    pub(crate) fn joules_per_token(&self) -> Option<f64> {
        joules_per_token(self.joules, self.tokens)
    }

    /// Tokens per kWh; `None` without energy or tokens.
    pub(crate) fn tokens_per_kwh(&self) -> Option<f64> {
        self.joules_per_token().and_then(tokens_per_kwh)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joules_per_token_and_tokens_per_kwh() {
        // 350 W for 2 s while 200 tokens were made: 700 J, 3.5 J/token.
        let span = EnergySpan::from_counter_mj(1_000_000, 1_700_000, 200, 2.0).unwrap();
        assert_eq!(span.joules, 700.0);
        assert_eq!(span.mean_power_w(), 350.0);
        assert_eq!(span.joules_per_token(), Some(3.5));
        // 3.6e6 J per kWh / 3.5 J per token.
        let per_kwh = span.tokens_per_kwh().unwrap();
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
    fn no_tokens_no_time_or_a_counter_that_went_back_give_none() {
        assert_eq!(joules_per_token(10.0, 0), None);
        assert_eq!(tokens_per_kwh(0.0), None);
        assert_eq!(EnergySpan::from_counter_mj(5, 4, 10, 1.0), None);
        assert_eq!(EnergySpan::from_counter_mj(4, 5, 10, 0.0), None);
        let idle = EnergySpan::from_counter_mj(4, 5, 0, 1.0).unwrap();
        assert_eq!(idle.joules_per_token(), None);
        assert_eq!(idle.tokens_per_kwh(), None);
    }
}
