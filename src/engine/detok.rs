//! Incremental detokenization: token pieces arrive as bytes, and a character may be split
//! across tokens (byte-fallback tokens carry one byte each). `Utf8Stream` emits only whole
//! characters and holds an incomplete tail until the next piece completes it. `StopMatcher`
//! holds back text that might be the beginning of a stop string, so a stop string is never
//! shown and then taken back.

/// Turns a stream of byte pieces into whole UTF-8 text.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a piece; returns the text that is now complete. Bytes that can never form a valid
    /// character are replaced by U+FFFD (the model really produced them); an incomplete
    /// sequence at the end is held back.
    pub fn push(&mut self, piece: &[u8]) -> String {
        self.pending.extend_from_slice(piece);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    out.push_str(valid);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // `valid` is valid UTF-8 by construction.
                    out.push_str(&String::from_utf8_lossy(valid));
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }

    /// Bytes held back waiting for the rest of a character.
    #[cfg(test)]
    pub(crate) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// End of stream: whatever is still held is emitted (as U+FFFD, being incomplete).
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

/// Finds stop strings in streamed text without ever emitting part of one.
#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

impl StopMatcher {
    pub(crate) fn new(stops: &[&str]) -> Self {
        Self {
            stops: stops
                .iter()
                .filter(|s| !s.is_empty())
                .map(|s| s.to_string())
                .collect(),
            held: String::new(),
        }
    }

    /// Add text; returns `(text safe to emit, stopped)`. After a stop, the stop string and
    /// anything after it are dropped.
    pub(crate) fn push(&mut self, text: &str) -> (String, bool) {
        self.held.push_str(text);
        if let Some(pos) = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            let out = self.held[..pos].to_string();
            self.held.clear();
            return (out, true);
        }
        // Hold the longest suffix that is a prefix of some stop string.
        let keep_from = self
            .held
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                let suffix = &self.held[i..];
                self.stops.iter().any(|s| s.starts_with(suffix))
            })
            .unwrap_or(self.held.len());
        let out = self.held[..keep_from].to_string();
        self.held.drain(..keep_from);
        (out, false)
    }

    /// End of stream: text held as a possible stop-string prefix is released.
    pub(crate) fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn character_split_across_pieces_comes_out_whole() {
        // "é" = C3 A9, "☕" = E2 98 95, "🦀" = F0 9F A6 80, fed one byte at a time.
        let text = "café ☕ 🦀!";
        let mut s = Utf8Stream::new();
        let mut out = String::new();
        for b in text.as_bytes() {
            let piece = s.push(&[*b]);
            assert!(!piece.contains('\u{FFFD}'), "replacement char in {piece:?}");
            out.push_str(&piece);
        }
        out.push_str(&s.finish());
        assert_eq!(out, text);
    }

    #[test]
    fn partial_character_is_held_until_complete() {
        let mut s = Utf8Stream::new();
        assert_eq!(s.push(b"a\xF0\x9F"), "a");
        assert_eq!(s.pending_len(), 2);
        assert_eq!(s.push(b"\xA6"), "");
        assert_eq!(s.push(b"\x80b"), "🦀b");
        assert_eq!(s.pending_len(), 0);
    }

    #[test]
    fn invalid_bytes_become_one_replacement_each_and_stream_continues() {
        let mut s = Utf8Stream::new();
        assert_eq!(s.push(b"x\xFFy"), "x\u{FFFD}y");
        // A lone continuation byte is invalid at once.
        assert_eq!(s.push(b"\x80z"), "\u{FFFD}z");
        // A truncated sequence interrupted by ASCII is invalid too.
        assert_eq!(s.push(b"\xE2\x98"), "");
        assert_eq!(s.push(b"A"), "\u{FFFD}A");
    }

    #[test]
    fn unfinished_tail_is_flushed_on_finish() {
        let mut s = Utf8Stream::new();
        assert_eq!(s.push(b"ok\xE2\x98"), "ok");
        assert_eq!(s.finish(), "\u{FFFD}");
        assert_eq!(s.finish(), "");
    }

    #[test]
    fn stop_string_split_over_pieces_is_never_emitted() {
        let mut m = StopMatcher::new(&["\nQuestion:"]);
        let mut out = String::new();
        let mut stopped = false;
        for piece in [" Paris", ".", "\n", "Quest", "ion", ": what"] {
            let (text, stop) = m.push(piece);
            out.push_str(&text);
            if stop {
                stopped = true;
                break;
            }
        }
        assert!(stopped);
        assert_eq!(out, " Paris.");
    }

    #[test]
    fn held_prefix_is_released_when_it_diverges() {
        let mut m = StopMatcher::new(&["\nQuestion:"]);
        assert_eq!(m.push("a\nQue"), ("a".to_string(), false));
        assert_eq!(m.push("en"), ("\nQueen".to_string(), false));
        assert_eq!(m.push("\n"), (String::new(), false));
        assert_eq!(m.finish(), "\n");
    }

    #[test]
    fn no_stops_passes_everything() {
        let mut m = StopMatcher::new(&[]);
        assert_eq!(m.push("héllo\n"), ("héllo\n".to_string(), false));
    }
}
