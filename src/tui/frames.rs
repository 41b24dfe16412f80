//! When to draw: the frame scheduler, whose stream interval adapts to what a draw costs.

use std::time::{Duration, Instant};

/// Shortest time between two frames after the user did something (60 Hz).
pub const FRAME_INTERVAL: Duration = Duration::from_millis(16);

/// Longest time between two frames of streamed tokens (10 Hz); the shortest is the engine's
/// event pace, `engine::STREAM_FRAME_INTERVAL`.
pub const SLOWEST_STREAM_FRAME_INTERVAL: Duration = Duration::from_millis(100);

/// The share of one core that drawing streamed tokens may take. On a machine whose cores
/// llama.cpp's threads fill, every millisecond the UI runs costs the decode more than a
/// millisecond (the other threads wait at their barrier), so the stream frame interval is
/// fitted to the measured cost of a draw (BENCHMARKS.md).
pub const STREAM_DRAW_BUDGET: f64 = 0.005;

/// Decides when to draw: only when something changed, and at most once per frame interval:
/// the short one when the user did something, the longer one for streamed output alone.
#[derive(Debug, Clone)]
pub struct FrameScheduler {
    pub input_interval: Duration,
    /// The current stream frame interval, between the two bounds below.
    pub stream_interval: Duration,
    fastest_stream: Duration,
    slowest_stream: Duration,
    /// Moving average of what a draw costs (wall time, output included).
    draw_cost: Option<Duration>,
    last_draw: Option<Instant>,
    dirty: bool,
    /// A change the user caused is pending (drawn at the input rate).
    urgent: bool,
}

impl FrameScheduler {
    /// Fixed intervals.
    #[cfg(test)]
    pub(crate) fn new(input_interval: Duration, stream_interval: Duration) -> Self {
        Self::adaptive(input_interval, stream_interval, stream_interval)
    }

    /// A stream interval fitted to the cost of a draw, between `fastest` and `slowest`.
    pub(crate) fn adaptive(input_interval: Duration, fastest: Duration, slowest: Duration) -> Self {
        Self {
            input_interval,
            stream_interval: fastest,
            fastest_stream: fastest,
            slowest_stream: slowest.max(fastest),
            draw_cost: None,
            last_draw: None,
            dirty: true,
            urgent: true,
        }
    }

    /// Something changed; `urgent` when the user caused it (a key, a paste, a resize).
    pub(crate) fn mark_dirty(&mut self, urgent: bool) {
        self.dirty = true;
        self.urgent |= urgent;
    }

    fn interval(&self) -> Duration {
        if self.urgent {
            self.input_interval
        } else {
            self.stream_interval
        }
    }

    pub(crate) fn due(&self, now: Instant) -> bool {
        self.dirty
            && self
                .last_draw
                .is_none_or(|t| now.saturating_duration_since(t) >= self.interval())
    }

    /// When a pending change may be drawn (None when nothing is pending).
    pub(crate) fn next_frame_at(&self) -> Option<Instant> {
        self.dirty.then(|| {
            self.last_draw
                .map_or_else(Instant::now, |t| t + self.interval())
        })
    }

    /// Until when streamed output alone need not be looked at (the next stream frame).
    pub(crate) fn stream_quiet_until(&self) -> Instant {
        self.last_draw
            .map_or_else(Instant::now, |t| t + self.stream_interval)
    }

    /// A draw took `cost`: keep drawing streamed tokens within `STREAM_DRAW_BUDGET` of a core.
    pub(crate) fn record_draw_cost(&mut self, cost: Duration) {
        let average = self
            .draw_cost
            .map_or(cost, |previous| (previous * 7 + cost) / 8);
        self.draw_cost = Some(average);
        self.stream_interval = average
            .div_f64(STREAM_DRAW_BUDGET)
            .clamp(self.fastest_stream, self.slowest_stream);
    }

    pub(crate) fn drawn(&mut self, now: Instant) {
        self.dirty = false;
        self.urgent = false;
        self.last_draw = Some(now);
    }
}

/// The frames drawn, kept for the chat's `/trace`: each frame's start and what drawing it
/// cost, the newest `FRAME_LOG_CAPACITY` (at the stream's fastest pace, over ten minutes).
#[derive(Debug, Clone, Default)]
pub struct FrameLog {
    frames: std::collections::VecDeque<(Instant, Duration)>,
}

/// Frames the log keeps (16 bytes and an instant each: under 2 MB).
pub const FRAME_LOG_CAPACITY: usize = 1 << 16;

impl FrameLog {
    pub(crate) fn push(&mut self, started: Instant, cost: Duration) {
        if self.frames.len() == FRAME_LOG_CAPACITY {
            self.frames.pop_front();
        }
        self.frames.push_back((started, cost));
    }

    /// The kept frames, oldest first.
    pub fn frames(&self) -> Vec<(Instant, Duration)> {
        self.frames.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::STREAM_FRAME_INTERVAL;

    fn scheduler() -> FrameScheduler {
        FrameScheduler::adaptive(
            FRAME_INTERVAL,
            STREAM_FRAME_INTERVAL,
            SLOWEST_STREAM_FRAME_INTERVAL,
        )
    }

    #[test]
    fn the_stream_interval_follows_the_draw_cost() {
        let mut f = scheduler();
        assert_eq!(f.stream_interval, STREAM_FRAME_INTERVAL);
        // Cheap draws: the fastest rate.
        f.record_draw_cost(Duration::from_micros(50));
        assert_eq!(f.stream_interval, STREAM_FRAME_INTERVAL);
        // 0.35 ms a draw at 0.5% of a core: one frame every 70 ms.
        let mut g = scheduler();
        g.record_draw_cost(Duration::from_micros(350));
        assert_eq!(g.stream_interval, Duration::from_millis(70));
        // Expensive draws: never slower than the slowest rate.
        for _ in 0..50 {
            g.record_draw_cost(Duration::from_millis(5));
        }
        assert_eq!(g.stream_interval, SLOWEST_STREAM_FRAME_INTERVAL);
        // Input frames keep their rate.
        assert_eq!(g.input_interval, FRAME_INTERVAL);
        // A fixed scheduler stays fixed.
        let mut fixed = FrameScheduler::new(FRAME_INTERVAL, STREAM_FRAME_INTERVAL);
        fixed.record_draw_cost(Duration::from_millis(5));
        assert_eq!(fixed.stream_interval, STREAM_FRAME_INTERVAL);
    }

    #[test]
    fn the_frame_log_keeps_the_newest_frames_up_to_its_capacity() {
        let t0 = Instant::now();
        let mut log = FrameLog::default();
        for i in 0..FRAME_LOG_CAPACITY + 3 {
            log.push(
                t0 + Duration::from_millis(i as u64),
                Duration::from_micros(i as u64),
            );
        }
        let kept = log.frames();
        assert_eq!(kept.len(), FRAME_LOG_CAPACITY);
        assert_eq!(
            kept[0],
            (t0 + Duration::from_millis(3), Duration::from_micros(3))
        );
    }
}
