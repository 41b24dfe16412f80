//! Request arrival times for a rate-driven load test: a gamma process, as vLLM's serving
//! benchmark draws them. Shape 1 is a Poisson process; a smaller shape is burstier, a larger
//! one more regular; the mean rate is the same for every shape.

use std::time::Duration;

/// The crate's one deterministic generator (`ids::SplitMix64`), with the draws a schedule
/// needs, so that a seed reproduces it.
#[derive(Debug, Clone)]
pub(crate) struct Rng(crate::ids::SplitMix64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(crate::ids::SplitMix64(seed))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in (0, 1].
    pub(crate) fn unit(&mut self) -> f64 {
        self.0.unit_nonzero()
    }

    /// Uniform integer in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: usize, hi: usize) -> usize {
        if hi <= lo {
            return lo;
        }
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }

    fn normal(&mut self) -> f64 {
        // Box–Muller.
        let (u1, u2) = (self.unit(), self.unit());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// Gamma(shape, scale = 1) by Marsaglia and Tsang (with the shape < 1 boost).
    pub(crate) fn gamma(&mut self, shape: f64) -> f64 {
        if shape < 1.0 {
            let u = self.unit();
            return self.gamma(shape + 1.0) * u.powf(1.0 / shape);
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = (1.0 + c * x).powi(3);
            if v <= 0.0 {
                continue;
            }
            let u = self.unit();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v;
            }
        }
    }
}

/// The gap before the next request at `rate` requests/s with gamma `shape` (mean 1/rate).
pub(crate) fn next_gap(rng: &mut Rng, rate: f64, shape: f64) -> Duration {
    let theta = 1.0 / (rate * shape);
    let secs = rng.gamma(shape) * theta;
    if secs.is_finite() && secs >= 0.0 {
        Duration::from_secs_f64(secs.min(3600.0))
    } else {
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_gap_is_one_over_the_rate_for_every_shape() {
        for shape in [0.5, 1.0, 4.0] {
            let mut rng = Rng::new(7);
            let n = 20_000;
            let total: f64 = (0..n)
                .map(|_| next_gap(&mut rng, 4.0, shape).as_secs_f64())
                .sum();
            let mean = total / n as f64;
            assert!((mean - 0.25).abs() < 0.01, "shape {shape}: mean gap {mean}");
        }
    }

    #[test]
    fn burstier_shapes_spread_more() {
        let cv = |shape: f64| {
            let mut rng = Rng::new(3);
            let g: Vec<f64> = (0..20_000)
                .map(|_| next_gap(&mut rng, 1.0, shape).as_secs_f64())
                .collect();
            let m = g.iter().sum::<f64>() / g.len() as f64;
            let var = g.iter().map(|x| (x - m).powi(2)).sum::<f64>() / g.len() as f64;
            var.sqrt() / m
        };
        // The coefficient of variation of a gamma is 1/sqrt(shape).
        assert!((cv(1.0) - 1.0).abs() < 0.05);
        assert!((cv(4.0) - 0.5).abs() < 0.05);
        assert!(cv(0.25) > 1.8);
    }
}
