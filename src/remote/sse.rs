//! Server-sent events, parsed from the bytes of a chat stream as they arrive: lines end with
//! LF, CRLF or CR; `data:` lines are joined into one event; comments (`: ping`) and the other
//! fields are skipped. Bounded and linear: every byte is copied at most twice (into the line,
//! then into the event), a line and an event's data are each at most `limit_bytes`, and bytes
//! that are not UTF-8 become U+FFFD, line by line, so one bad byte never holds back the rest.
//! The same reader takes newline-delimited JSON (ollama's native `/api/chat`): there every
//! non-empty line is one event's data.

/// An event's data grew past the limit before the blank line that ends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EventTooLarge;

#[derive(Debug)]
pub(crate) struct SseParser {
    limit_bytes: usize,
    /// The line being read (no terminator).
    line: Vec<u8>,
    /// The data of the event being read: its `data:` values, each followed by LF.
    data: String,
    /// The last byte seen was a CR: a LF right after it ends nothing more.
    after_cr: bool,
    /// No byte seen yet (a leading UTF-8 BOM is dropped).
    at_start: bool,
    /// Newline-delimited JSON: each non-empty line is an event's whole data.
    lines_are_events: bool,
    /// Events ended so far, comments and empty ones included (`blocks_ended`).
    blocks: u64,
}

impl SseParser {
    pub(crate) fn new(limit_bytes: usize) -> Self {
        Self {
            limit_bytes,
            line: Vec::new(),
            data: String::new(),
            after_cr: false,
            at_start: true,
            lines_are_events: false,
            blocks: 0,
        }
    }

    /// How many events the bytes so far have ended (a blank line in SSE, a non-empty line in
    /// NDJSON), comments such as `: ping` included: what shows the server is alive, where
    /// bytes that never end an event do not.
    pub(crate) fn blocks_ended(&self) -> u64 {
        self.blocks
    }

    /// A reader of newline-delimited JSON: every non-empty line is one event, at most
    /// `limit_bytes`.
    pub(crate) fn ndjson(limit_bytes: usize) -> Self {
        Self {
            lines_are_events: true,
            ..Self::new(limit_bytes)
        }
    }

    /// Parses `bytes`, appending the data of every event they complete to `out`, in order.
    pub(crate) fn push(
        &mut self,
        bytes: &[u8],
        out: &mut Vec<String>,
    ) -> Result<(), EventTooLarge> {
        let mut rest = bytes;
        if self.at_start && !rest.is_empty() {
            self.at_start = false;
            rest = rest.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(rest);
        }
        while !rest.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if rest[0] == b'\n' {
                    rest = &rest[1..];
                    continue;
                }
            }
            let Some(i) = rest.iter().position(|&b| b == b'\n' || b == b'\r') else {
                return self.extend_line(rest);
            };
            self.extend_line(&rest[..i])?;
            self.after_cr = rest[i] == b'\r';
            self.end_line(out)?;
            rest = &rest[i + 1..];
        }
        Ok(())
    }

    fn extend_line(&mut self, part: &[u8]) -> Result<(), EventTooLarge> {
        if self.line.len() + part.len() > self.limit_bytes {
            return Err(EventTooLarge);
        }
        self.line.extend_from_slice(part);
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<String>) -> Result<(), EventTooLarge> {
        let line = std::mem::take(&mut self.line);
        if self.lines_are_events {
            if !line.is_empty() {
                self.blocks += 1;
                out.push(String::from_utf8_lossy(&line).into_owned());
            }
            self.line = line;
            self.line.clear();
            return Ok(());
        }
        if line.is_empty() {
            self.blocks += 1;
            if !self.data.is_empty() {
                let mut data = std::mem::take(&mut self.data);
                data.pop(); // the LF after the last data line
                out.push(data);
            }
            return Ok(());
        }
        // A comment, or a field other than `data`: nothing to keep.
        let Some(value) = line.strip_prefix(b"data") else {
            return Ok(());
        };
        let value = match value {
            [] => &[][..],
            [b':', b' ', v @ ..] | [b':', v @ ..] => v,
            _ => return Ok(()), // a field named e.g. `database`
        };
        let text = String::from_utf8_lossy(value);
        if self.data.len() + text.len() + 1 > self.limit_bytes {
            return Err(EventTooLarge);
        }
        self.data.push_str(&text);
        self.data.push('\n');
        // Keep the line's allocation for the next one.
        self.line = line;
        self.line.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A comment-only event ends a block (the server is alive); bytes that end no event do not.
    #[test]
    fn blocks_ended_counts_complete_events_comments_included() {
        let mut p = SseParser::new(1024);
        let mut out = Vec::new();
        p.push(b": ping\n\n", &mut out).unwrap();
        assert_eq!((p.blocks_ended(), out.len()), (1, 0));
        p.push(b"data: {\"a\"", &mut out).unwrap();
        p.push(b"d", &mut out).unwrap();
        p.push(b"d\n", &mut out).unwrap();
        assert_eq!(p.blocks_ended(), 1, "no event ended yet");
        p.push(b"\n", &mut out).unwrap();
        assert_eq!((p.blocks_ended(), out.len()), (2, 1));
        let mut n = SseParser::ndjson(1024);
        n.push(b"{}\n{", &mut out).unwrap();
        assert_eq!(n.blocks_ended(), 1);
    }

    fn parse(chunks: &[&[u8]], limit: usize) -> Result<Vec<String>, EventTooLarge> {
        let mut p = SseParser::new(limit);
        let mut out = Vec::new();
        for c in chunks {
            p.push(c, &mut out)?;
        }
        Ok(out)
    }

    /// Parses `bytes` whole and cut at `cuts`: the same events or the same error.
    fn alike(bytes: &[u8], cuts: &[usize], limit: usize) -> Result<Vec<String>, EventTooLarge> {
        let whole = parse(&[bytes], limit);
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        points.sort_unstable();
        let mut pieces = Vec::new();
        let mut from = 0;
        for p in points {
            pieces.push(&bytes[from..p]);
            from = p;
        }
        pieces.push(&bytes[from..]);
        assert_eq!(parse(&pieces, limit), whole, "cut at {cuts:?}");
        if let Ok(events) = &whole {
            let total: usize = events.iter().map(String::len).sum();
            // U+FFFD is 3 bytes for 1 bad byte; nothing else grows.
            assert!(total <= 3 * bytes.len(), "{total} from {}", bytes.len());
            assert!(events.iter().all(|e| e.len() <= limit));
        }
        whole
    }

    /// The seed inputs committed in `tests/fixtures/fuzz/sse` (see its README), each parsed
    /// whole, byte by byte and cut at every point.
    #[test]
    fn the_committed_corpus_parses_alike_however_it_is_split() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fuzz/sse");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let bytes = std::fs::read(entry.unwrap().path()).unwrap();
            for limit in [64, 4 << 20] {
                let whole = alike(&bytes, &[], limit);
                let single: Vec<&[u8]> = bytes.chunks(1).collect();
                assert_eq!(parse(&single, limit), whole);
                for cut in (0..=bytes.len()).step_by(97) {
                    let _ = alike(&bytes, &[cut], limit);
                }
            }
            n += 1;
        }
        assert!(n >= 9, "found {n} seeds in {}", dir.display());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Any bytes, cut anywhere: no panic, the same result as whole, bounded output.
        #[test]
        fn any_bytes_cut_anywhere_parse_alike(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048),
            cuts in proptest::collection::vec(0usize..4096, 0..6),
            limit in 1usize..512,
        ) {
            alike(&bytes, &cuts, limit).ok();
        }

        /// Events written as a server writes them come back as they were.
        #[test]
        fn written_events_read_back(
            events in proptest::collection::vec("[^\r\n]{1,40}", 0..20),
            crlf in proptest::prelude::any::<bool>(),
            cuts in proptest::collection::vec(0usize..4096, 0..6),
        ) {
            let end = if crlf { "\r\n" } else { "\n" };
            let text: String = events.iter().map(|e| format!("data: {e}{end}{end}")).collect();
            let got = alike(text.as_bytes(), &cuts, 1 << 20).unwrap();
            proptest::prop_assert_eq!(got, events);
        }
    }

    #[test]
    fn events_split_anywhere_come_out_whole() {
        let text = b"data: {\"a\":1}\n\n: ping\n\ndata:x\r\ndata: y\r\n\r\nevent: e\rdata: z\r\r";
        let whole = parse(&[text], 1 << 10).unwrap();
        assert_eq!(whole, vec!["{\"a\":1}", "x\ny", "z"]);
        for cut in 0..text.len() {
            let (a, b) = text.split_at(cut);
            assert_eq!(parse(&[a, b], 1 << 10).unwrap(), whole, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(parse(&bytes, 1 << 10).unwrap(), whole);
    }

    #[test]
    fn comments_other_fields_and_empty_events_give_nothing() {
        let out = parse(
            &[b"\xEF\xBB\xBF: hi\nid: 3\nretry: 10\ndatabase: no\n\n\n"],
            64,
        )
        .unwrap();
        assert!(out.is_empty(), "{out:?}");
        // A bare `data` line is an empty value: the event is "" (the client skips it).
        assert_eq!(parse(&[b"data\n\n"], 64).unwrap(), vec![""]);
        assert_eq!(parse(&[b"data\ndata: a\n\n"], 64).unwrap(), vec!["\na"]);
    }

    #[test]
    fn invalid_utf8_becomes_replacement_and_the_rest_goes_on() {
        let out = parse(
            &[b"data: a\xFFb\n\ndata: c\xE2", b"\x82\xAC\n\ndata: d\n\n"],
            64,
        )
        .unwrap();
        assert_eq!(out, vec!["a\u{FFFD}b", "c€", "d"]);
    }

    #[test]
    fn a_line_or_an_event_past_the_limit_is_refused() {
        assert_eq!(parse(&[&[b'x'; 65]], 64), Err(EventTooLarge));
        // Many short data lines: each line is small, the event is not.
        let lines = b"data: 0123456789\n".repeat(8);
        assert_eq!(parse(&[&lines], 64), Err(EventTooLarge));
        // Endless comments never grow the event.
        let pings = b": ping\n".repeat(1000);
        assert_eq!(parse(&[&pings, b"data: ok\n\n"], 64).unwrap(), vec!["ok"]);
    }

    #[test]
    fn ndjson_lines_are_events_bounded_and_lossy() {
        let mut p = SseParser::ndjson(16);
        let mut out = Vec::new();
        p.push(b"{\"a\":1}\n\r\n{\"b\"", &mut out).unwrap();
        p.push(b":\xff}\r", &mut out).unwrap();
        assert_eq!(
            out,
            vec!["{\"a\":1}".to_owned(), "{\"b\":\u{FFFD}}".to_owned()]
        );
        assert_eq!(p.push(&[b'x'; 17], &mut out), Err(EventTooLarge));
    }
}
