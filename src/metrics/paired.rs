//! The judgement of paired rounds (docs/metrics.md, "Paired ratio"): each round measures two
//! things next to each other in time, so a slow spell of the machine falls on both, and the
//! figure is the median of the rounds' ratios with twice its standard error, estimated
//! robustly. `scripts/paired_ratio.py` is the same rule for the comparison scripts.

use serde::Serialize;

/// The median of per-round ratios and its spread.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PairedRatio {
    /// Rounds that gave a finite ratio.
    pub rounds: usize,
    pub median: f64,
    /// Two standard errors of the median, robustly: 2 × 1.2533 × 1.4826 × MAD ÷ √n. `None`
    /// with fewer than 3 rounds (no spread can be told).
    pub two_se: Option<f64>,
    pub min: f64,
    pub max: f64,
}

/// Where a paired ratio stands against a floor (`run ÷ tg ≥ 0.97`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FloorVerdict {
    /// The median is at or above the floor, and the spread could have seen a miss of the
    /// floor's size (2 SE ≤ 1 − floor).
    Met,
    /// Even the median plus its spread is below the floor.
    Missed,
    /// Neither: the rounds are too few or too noisy to tell.
    Unsettled,
}

/// The paired judgement of `ratios` (non-finite ones are left out); `None` when none is left.
pub fn paired(ratios: &[f64]) -> Option<PairedRatio> {
    let mut v: Vec<f64> = ratios.iter().copied().filter(|r| r.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let median = super::median(&v)?;
    let two_se = (v.len() >= 3).then(|| {
        let dev: Vec<f64> = v.iter().map(|r| (r - median).abs()).collect();
        2.0 * 1.2533 * 1.4826 * super::median(&dev).unwrap_or(0.0) / (v.len() as f64).sqrt()
    });
    Some(PairedRatio {
        rounds: v.len(),
        median,
        two_se,
        min: v[0],
        max: v[v.len() - 1],
    })
}

impl PairedRatio {
    /// Against a floor below 1 (`0.97`): met, missed or unsettled (see [`FloorVerdict`]).
    pub fn against_floor(&self, floor: f64) -> FloorVerdict {
        match self.two_se {
            Some(u) if self.median + u < floor => FloorVerdict::Missed,
            Some(u) if self.median >= floor && u <= (1.0 - floor).abs() => FloorVerdict::Met,
            _ => FloorVerdict::Unsettled,
        }
    }

    /// `0.981 ± 0.012 (0.950–1.020, 24 rounds)`.
    pub fn describe(&self) -> String {
        match self.two_se {
            Some(u) => format!(
                "{:.3} ± {u:.3} ({:.3}–{:.3}, {} rounds)",
                self.median, self.min, self.max, self.rounds
            ),
            None => format!("{:.3} ({} round(s): no spread)", self.median, self.rounds),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_robust_spread_match_the_script() {
        // scripts/paired_ratio.py on the same rounds: median 1.0, MAD 0.02,
        // 2 × 1.2533 × 1.4826 × 0.02 / √5 = 0.033239…
        let p = paired(&[0.98, 1.0, 1.02, 0.5, 1.01]).unwrap();
        assert_eq!(p.median, 1.0);
        assert!((p.two_se.unwrap() - 0.033_239).abs() < 1e-5, "{p:?}");
        assert_eq!((p.min, p.max, p.rounds), (0.5, 1.02, 5));
        // An even count takes the mean of the middle two; NaN rounds are left out.
        let p = paired(&[1.0, f64::NAN, 2.0]).unwrap();
        assert_eq!((p.median, p.rounds, p.two_se), (1.5, 2, None));
        assert_eq!(paired(&[f64::INFINITY]), None);
    }

    #[test]
    fn a_floor_is_met_missed_or_unsettled() {
        let tight = |m: f64| PairedRatio {
            rounds: 20,
            median: m,
            two_se: Some(0.01),
            min: m,
            max: m,
        };
        assert_eq!(tight(0.99).against_floor(0.97), FloorVerdict::Met);
        assert_eq!(tight(0.97).against_floor(0.97), FloorVerdict::Met);
        assert_eq!(tight(0.95).against_floor(0.97), FloorVerdict::Missed);
        assert_eq!(tight(0.965).against_floor(0.97), FloorVerdict::Unsettled);
        // A median above the floor with a spread that could not see a 3% gap settles nothing.
        let noisy = PairedRatio {
            two_se: Some(0.07),
            ..tight(1.0)
        };
        assert_eq!(noisy.against_floor(0.97), FloorVerdict::Unsettled);
        let few = PairedRatio {
            two_se: None,
            ..tight(1.0)
        };
        assert_eq!(few.against_floor(0.97), FloorVerdict::Unsettled);
    }
}
