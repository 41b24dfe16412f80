//! Thinking spans of the models that reason before they answer (Qwen3, QwQ, the DeepSeek-R1
//! distills): `<think>…</think>`, then the answer. `ThinkingDetector` follows a turn's token
//! texts as they stream, splits each into its thinking and answer parts and keeps the span's
//! figures (`metrics::ThinkingSpan`): markers may be split over several tokens or come as one
//! token, and a prompt whose template opened the thinking (`prompt_opens_thinking`) starts it
//! inside the span. Pure: the session feeds it each token's text and ready time.
//!
//! The span is recognised only where it can be: at the start of the generation (after
//! whitespace), or from the first token when the prompt opened it. A `<think>` later in an
//! answer is the answer's text.

use std::time::Duration;

use crate::metrics::ThinkingSpan;

/// A pair of markers around a model's thinking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Markers {
    pub open: &'static str,
    pub close: &'static str,
}

/// The pairs recognised, in order: another family's markers are one more entry here.
pub(crate) const MARKERS: &[Markers] = &[Markers {
    open: "<think>",
    close: "</think>",
}];

/// Whitespace held at the start while it may still come before an opening marker; past this
/// the turn has no thinking span.
const MAX_LEADING_WHITESPACE: usize = 64;

/// Whether the prompt's text leaves a thinking span open for the model to continue: its last
/// opening marker comes after its last closing marker (DeepSeek-R1-Distill's newer template
/// ends with `<｜Assistant｜><think>\n`; Qwen3's with thinking off writes an empty, closed
/// `<think>\n\n</think>\n\n`, which does not).
pub(crate) fn prompt_opens_thinking(prompt: &str) -> bool {
    MARKERS.iter().any(|m| match prompt.rfind(m.open) {
        Some(open) => prompt.rfind(m.close).is_none_or(|close| close < open),
        None => false,
    })
}

/// One token's text split into its thinking and its answer (either may be empty: text that
/// may be part of a marker waits for the next token), and the span after it when this token
/// changed it.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Split {
    /// Thinking text, the markers left out (and the whitespace that follows the opening one).
    pub thinking: String,
    /// Answer text (after a span, the whitespace that follows the closing marker left out).
    pub answer: String,
    /// The span as it stands after this token, when the token changed it.
    pub changed: Option<ThinkingSpan>,
}

#[derive(Debug)]
enum State {
    /// No text yet, or only text that may still open a span (held).
    Start { held: String },
    /// In the span: `pair` is the one that opened it (`None`: the prompt did, and any pair's
    /// closing marker ends it); `held` may be the beginning of a closing marker; `started`:
    /// thinking text has begun (whitespace before it is dropped).
    Inside {
        pair: Option<Markers>,
        held: String,
        started: bool,
    },
    /// After the span; `started`: answer text has begun.
    After { started: bool },
    /// A turn without a span: every text is the answer's, as it comes.
    Plain,
}

/// Follows one turn's token texts (see the module's note).
#[derive(Debug)]
pub(crate) struct ThinkingDetector {
    state: State,
    span: Option<ThinkingSpan>,
    /// Tokens pushed so far.
    seen: usize,
}

impl ThinkingDetector {
    /// A turn's detector; `starts_in_thinking`: the prompt opened the span
    /// (`prompt_opens_thinking`), so the first token is already thinking.
    pub(crate) fn new(starts_in_thinking: bool) -> Self {
        let state = if starts_in_thinking {
            State::Inside {
                pair: None,
                held: String::new(),
                started: false,
            }
        } else {
            State::Start {
                held: String::new(),
            }
        };
        Self {
            state,
            span: None,
            seen: 0,
        }
    }

    /// The span so far (`None`: no thinking, or not known yet).
    pub(crate) fn span(&self) -> Option<ThinkingSpan> {
        self.span
    }

    /// One token's text, ready at `at`. A token in the span (its markers included) counts
    /// as thinking; the span ends at the ready time of the token that completed the closing
    /// marker, and the answer starts at the first token after it (whatever its text: the
    /// whitespace after the marker included).
    pub(crate) fn push(&mut self, text: String, at: Duration) -> Split {
        if let State::Plain = self.state {
            return Split {
                answer: text,
                ..Split::default()
            };
        }
        self.seen += 1;
        let before = self.span;
        match self.span.as_mut() {
            Some(span) if span.ended_at.is_some() && span.first_answer_at.is_none() => {
                span.first_answer_at = Some(at);
            }
            _ => {}
        }
        if let State::Inside { .. } = self.state {
            self.span.get_or_insert_with(ThinkingSpan::default).tokens += 1;
        }
        let mut out = Split::default();
        self.feed(text, Some(at), &mut out);
        out.changed = self.span.filter(|now| before != Some(*now));
        out
    }

    /// The end of the turn: `tail` (text the session still held) and whatever this detector
    /// holds, split as the tokens' texts were (text held as a possible opening marker is the
    /// answer's; a possible closing marker is thinking).
    pub(crate) fn finish(&mut self, tail: String) -> Split {
        let mut out = Split::default();
        self.feed(tail, None, &mut out);
        match std::mem::replace(&mut self.state, State::Plain) {
            State::Start { held } => out.answer.push_str(&held),
            State::Inside { held, started, .. } => {
                push_part(&mut out.thinking, started, &held);
            }
            other => self.state = other,
        }
        out
    }

    /// Moves `text` through the states; `at` is the token's ready time (`None` for the tail
    /// at the end, which completes no marker's token).
    fn feed(&mut self, text: String, at: Option<Duration>, out: &mut Split) {
        let mut text = text;
        loop {
            match std::mem::replace(&mut self.state, State::Plain) {
                State::Plain => {
                    out.answer.push_str(&text);
                    return;
                }
                State::After { started } => {
                    let started = push_part(&mut out.answer, started, &text);
                    self.state = State::After { started };
                    return;
                }
                State::Start { mut held } => {
                    held.push_str(&text);
                    let lead = held.trim_start();
                    if let Some(m) = MARKERS.iter().find(|m| lead.starts_with(m.open)) {
                        text = lead[m.open.len()..].to_string();
                        self.span = Some(ThinkingSpan {
                            tokens: self.seen,
                            ..ThinkingSpan::default()
                        });
                        self.state = State::Inside {
                            pair: Some(*m),
                            held: String::new(),
                            started: false,
                        };
                        continue;
                    }
                    let may_open = MARKERS.iter().any(|m| m.open.starts_with(lead))
                        && held.len() - lead.len() <= MAX_LEADING_WHITESPACE;
                    if may_open && at.is_some() {
                        self.state = State::Start { held };
                    } else {
                        out.answer.push_str(&held);
                    }
                    return;
                }
                State::Inside {
                    pair,
                    mut held,
                    started,
                } => {
                    held.push_str(&text);
                    let pairs = pair.as_ref().map_or(MARKERS, std::slice::from_ref);
                    let close = pairs
                        .iter()
                        .filter_map(|m| held.find(m.close).map(|at| (at, m.close.len())))
                        .min();
                    if let Some((pos, len)) = close {
                        push_part(&mut out.thinking, started, &held[..pos]);
                        text = held[pos + len..].to_string();
                        if let Some(span) = self.span.as_mut() {
                            span.ended_at = at.or(span.ended_at);
                        }
                        self.state = State::After { started: false };
                        continue;
                    }
                    // Hold the longest end that may begin a closing marker.
                    let keep_from = held
                        .char_indices()
                        .map(|(i, _)| i)
                        .find(|&i| pairs.iter().any(|m| m.close.starts_with(&held[i..])))
                        .unwrap_or(held.len());
                    let started = push_part(&mut out.thinking, started, &held[..keep_from]);
                    held.drain(..keep_from);
                    self.state = State::Inside {
                        pair,
                        held,
                        started,
                    };
                    return;
                }
            }
        }
    }
}

/// Appends `text` to `part`, dropping leading whitespace until `part`'s text has `started`;
/// returns whether it has now.
fn push_part(part: &mut String, started: bool, text: &str) -> bool {
    let text = if started { text } else { text.trim_start() };
    part.push_str(text);
    started || !text.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// Feeds `pieces` as tokens ready at 10, 20, 30 … ms, then the end; returns the thinking
    /// text, the answer text and the span.
    fn run(starts_in_thinking: bool, pieces: &[&str]) -> (String, String, Option<ThinkingSpan>) {
        let mut d = ThinkingDetector::new(starts_in_thinking);
        let (mut thinking, mut answer) = (String::new(), String::new());
        for (i, p) in pieces.iter().enumerate() {
            let s = d.push(p.to_string(), ms(10 * (i as u64 + 1)));
            thinking.push_str(&s.thinking);
            answer.push_str(&s.answer);
        }
        let s = d.finish(String::new());
        thinking.push_str(&s.thinking);
        answer.push_str(&s.answer);
        (thinking, answer, d.span())
    }

    fn span(tokens: usize, ended: Option<u64>, answer: Option<u64>) -> Option<ThinkingSpan> {
        Some(ThinkingSpan {
            tokens,
            ended_at: ended.map(ms),
            first_answer_at: answer.map(ms),
        })
    }

    #[test]
    fn markers_split_across_tokens_are_recognised() {
        let (t, a, s) = run(
            false,
            &[
                "<", "th", "ink", ">\n", "Let me", " think", ".\n</", "thi", "nk>", "\n\n", "Hi",
                "!",
            ],
        );
        assert_eq!(t, "Let me think.\n");
        assert_eq!(a, "Hi!");
        // Nine tokens up to the one that completed `</think>` (at 90 ms); the answer starts
        // at the next token, whitespace as it is.
        assert_eq!(s, span(9, Some(90), Some(100)));
    }

    #[test]
    fn markers_as_single_tokens_are_recognised() {
        let (t, a, s) = run(false, &["<think>", "hmm", "</think>", "Yes"]);
        assert_eq!((t.as_str(), a.as_str()), ("hmm", "Yes"));
        assert_eq!(s, span(3, Some(30), Some(40)));
    }

    #[test]
    fn a_prompt_that_opened_the_span_starts_inside_it() {
        let (t, a, s) = run(true, &["First", ", check", "</think>", "\n\nDone"]);
        assert_eq!((t.as_str(), a.as_str()), ("First, check", "Done"));
        assert_eq!(s, span(3, Some(30), Some(40)));
    }

    #[test]
    fn no_closing_marker_leaves_every_token_thinking() {
        let (t, a, s) = run(true, &["a", "b", "</th"]);
        // The held start of a marker that never closed is thinking text.
        assert_eq!((t.as_str(), a.as_str()), ("ab</th", ""));
        assert_eq!(s, span(3, None, None));
        let (t, a, s) = run(false, &["<think>", "x"]);
        assert_eq!((t.as_str(), a.as_str()), ("x", ""));
        assert_eq!(s, span(2, None, None));
    }

    #[test]
    fn text_after_the_closing_marker_in_its_token_is_the_answer_s() {
        let (t, a, s) = run(false, &["<think>plan</think>\n\nThe", " answer"]);
        assert_eq!((t.as_str(), a.as_str()), ("plan", "The answer"));
        // One token held all of it: the span is that token; the answer's first token is the
        // next one.
        assert_eq!(s, span(1, Some(10), Some(20)));
    }

    #[test]
    fn an_answer_without_markers_passes_unchanged() {
        let (t, a, s) = run(false, &["\n", "<", "div>", " later <think> is text"]);
        assert_eq!(
            (t.as_str(), a.as_str(), s),
            ("", "\n<div> later <think> is text", None)
        );
        let (_, a, s) = run(false, &["Hello", " <think>"]);
        assert_eq!((a.as_str(), s), ("Hello <think>", None));
        // Text held as a possible marker at the end is the answer's.
        let (_, a, s) = run(false, &["<thi"]);
        assert_eq!((a.as_str(), s), ("<thi", None));
        // Each token's text comes out as soon as it cannot begin a marker.
        let mut d = ThinkingDetector::new(false);
        assert_eq!(d.push("Hi".into(), ms(1)).answer, "Hi");
        assert_eq!(d.push(" <".into(), ms(2)).answer, " <");
    }

    #[test]
    fn the_span_is_reported_when_it_changes() {
        let mut d = ThinkingDetector::new(false);
        assert_eq!(d.push("<".into(), ms(1)).changed, None);
        assert_eq!(d.push("think>".into(), ms(2)).changed, span(2, None, None));
        assert_eq!(d.push("x".into(), ms(3)).changed, span(3, None, None));
        assert_eq!(
            d.push("</think>".into(), ms(4)).changed,
            span(4, Some(4), None)
        );
        assert_eq!(d.push("A".into(), ms(5)).changed, span(4, Some(4), Some(5)));
        assert_eq!(d.push("B".into(), ms(6)).changed, None);
    }

    #[test]
    fn whether_a_prompt_opens_the_span() {
        assert!(prompt_opens_thinking(
            "<｜User｜>hi<｜Assistant｜><think>\n"
        ));
        assert!(prompt_opens_thinking("<role>ASSISTANT</role><think>"));
        // Qwen3 with thinking off: an empty span, closed.
        assert!(!prompt_opens_thinking(
            "<|im_start|>assistant\n<think>\n\n</think>\n\n"
        ));
        assert!(!prompt_opens_thinking("<|im_start|>assistant\n"));
        // An earlier turn's span is closed; the new one opens after it.
        assert!(prompt_opens_thinking(
            "<think>a</think>b<|User|>c<|Assistant|><think>"
        ));
    }
}
