//! The help overlay: every key, every slash command and the one-line definition of every figure
//! on screen (matching `docs/metrics.md`), scrolled by `app.help_scroll`, clamped at draw time.

use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

use super::text::{truncate, width, wrap};
use super::theme;
use crate::app::App;

const KEYS: &[(&str, &str)] = &[
    ("Enter", "send the message (or run a /command)"),
    ("Alt+Enter", "new line in the message (also Shift+Enter, Ctrl+J)"),
    ("Esc", "stop the answer being generated; the partial answer is kept"),
    ("Ctrl+R", "regenerate the last answer (with the next seed)"),
    (
        "Up / Down",
        "on an empty input Up recalls the last prompt; in a message of several lines they move between its lines; else they scroll",
    ),
    ("Ctrl+N", "new conversation"),
    ("Ctrl+L", "repaint the whole screen"),
    ("Alt+C", "copy the last answer to the clipboard (OSC 52)"),
    (
        "Alt+K",
        "answers drawn token by token in colour: scored against a reference (/ref) by their KLD (<0.01 plain, <0.1, <1, ≥1), the first divergence reversed, tokens the reference gave under 1% underlined; without a reference the next answers by the model's own probability of each token (≥0.9 plain, ≥0.5, ≥0.1, <0.1), measured from its logits while the colours are on; Alt+K again: Markdown",
    ),
    (
        "Alt+T",
        "the token screen: a cursor over a coloured answer's tokens (←/→, ↑/↓ by 10, PgUp/PgDn another answer, d the first divergence) with the token's figures and both models' top 5 there",
    ),
    (
        "Alt+R",
        "unfold (again: fold) the thinking of a model that reasons before it answers (Qwen3, QwQ, DeepSeek-R1); folded it is one line: how long it thought and its tokens",
    ),
    ("PgUp / PgDn", "scroll the conversation (so does the mouse wheel)"),
    (
        "Home / End",
        "top / bottom of the conversation, with an empty input or with Ctrl; End follows the stream again",
    ),
    (
        "F1 or ?",
        "this help (? on an empty input); Esc, F1, ? or q close it; Up/Down, PgUp/PgDn scroll it",
    ),
    (
        "F2",
        "bench screen: batching on the loaded model, or (Tab or d; b back) decode against the KV cache's depth beside what its bytes predict, with this chat's answers at their depths (Enter or r runs the sweep, Esc stops it, Esc again or F2 closes; each sweep is saved to `tokscope results`)",
    ),
    (
        "F3",
        "compare screen: `tokscope compare` tables, the latest first, Pareto front marked (←→ older/newer, ↑↓ a row, Enter A/B with its model, m switches to it, r reloads, Esc closes)",
    ),
    (
        "F4",
        "profile screen: where each decode step's time goes (start the chat with --profile): the last profiled step's parts as bars with GB/s and MBU, the mean over the turn, one column per layer, the operations; Esc or F4 closes",
    ),
    (
        "A/B screen",
        "Esc closes it (and stops B while it runs); Up/Down, PgUp/PgDn scroll both answers",
    ),
    (
        "Ctrl+O",
        "model picker: the model in use (first, marked) and the GGUF files of its folder, tokscope's data dir, model_dirs, the Hugging Face cache, LM Studio and ollama; type to filter, Up/Down choose, Enter switches, Ctrl+A or Alt+A runs A/B with it, Esc closes",
    ),
    (
        "Tab",
        "after /model or /ab: complete the path (folders and .gguf files, ~ for home); several matches are listed",
    ),
    ("Ctrl+C / Ctrl+Q", "quit"),
];

/// The input's editing keys (readline/emacs; `app/keymap.rs`, `edit_key`).
const EDIT_KEYS: &[(&str, &str)] = &[
    (
        "Ctrl+A / Ctrl+E",
        "start / end of the line (also Home / End while the input has text)",
    ),
    ("Ctrl+B / Ctrl+F", "one character left / right (also ← / →)"),
    (
        "Alt+B / Alt+F",
        "a word left / right (also Ctrl+← / Ctrl+→)",
    ),
    (
        "Ctrl+W",
        "cut the word before the cursor (also Alt+Backspace)",
    ),
    ("Alt+D", "cut the word after the cursor"),
    (
        "Ctrl+K / Ctrl+U",
        "cut to the end / the start of the line (at its end / start: the line break)",
    ),
    ("Ctrl+Y", "paste what was cut last"),
    (
        "Ctrl+D / Ctrl+H",
        "delete the character under / before the cursor (as Delete / Backspace)",
    ),
    (
        "Ctrl+Z / Alt+Z",
        "undo / redo (undo also Ctrl+_; Ctrl+R stays regenerate)",
    ),
];

const COMMANDS: &[(&str, &str)] = &[
    (
        "/system TEXT",
        "set the system prompt, from the next answer on (the whole conversation is then read again with it); without TEXT: show it; --clear: remove it",
    ),
    ("/temp X", "sampling temperature, 0 to 100 (0: greedy); without X: the current value"),
    ("/top_k N", "keep the N most likely tokens (0: off); without N: the current value"),
    ("/top_p X", "nucleus sampling threshold, 0 to 1; without X: the current value"),
    ("/min_p X", "drop tokens below X × the best one's probability (0: off); without X: the current value"),
    ("/max N", "most tokens per answer; without N: the current value"),
    ("/seed N", "sampling seed (-1: a random one, shown); without N: the current value"),
    (
        "/context-full drop-oldest|stop",
        "when the conversation no longer fits the context: leave its oldest messages out (said each time; the default) or stop and say so, leaving nothing out; without a value: the current one",
    ),
    ("/settings", "every sampling setting in force, and whether a system prompt is set"),
    ("/prompt", "the last turn's prompt as the model was given it: its chat template rendered, special tokens marked, with the template's source"),
    ("/export md|json [PATH]", "write the conversation to a file (without PATH: tokscope-ID.md or .json in the folder tokscope was started in)"),
    (
        "/trace [PATH]",
        "write this session's answers as a Chrome trace (ui.perfetto.dev): the engine's steps, each token, the UI's frames, with --profile the nodes (without PATH: tokscope-trace-ID.json)",
    ),
    (
        "/copy [N|code]",
        "copy the last answer, answer N, or the last code block to the clipboard (OSC 52: works locally, over SSH, and in tmux with set-clipboard on)",
    ),
    (
        "/model PATH",
        "load another GGUF model; the conversation is kept (without PATH: the model picker)",
    ),
    (
        "/ab PATH|URL",
        "(without PATH: the model picker, where Enter runs A/B) answer the last prompt again with another GGUF file or another server's API base (B): the same turns, sampling settings and seed; A and B side by side with their figures and the first token where they diverge, then B scored against the chat's reference when one is set (--ref, /ref: the one A's answers are scored against), else against A's model (KLD, same top, first divergence; Alt+K colours B's tokens by it). B is loaded beside the chat's model in a context of its own and dropped after; it is not added to the conversation. A local chat can ask a server, a server chat a local file",
    ),
    ("/compare", "the compare screen (as F3)"),
    (
        "/ref PATH|off",
        "score each answer against a reference model (another file of the same model: its F16 or Q8_0) after it finishes, never while it decodes: the quality block shows KLD, same-top % and the first divergence; a new message stops a score in flight (without PATH: the reference in use)",
    ),
    ("/new", "new conversation (as Ctrl+N)"),
    ("/help", "this help"),
    ("/quit", "quit (also /exit)"),
];

const METRICS: &[(&str, &str)] = &[
    (
        "TTFT ms",
        "time to first token: request handed to the engine → first token's text ready = queue wait + template+tokenize + prefill + first sample",
    ),
    (
        "waiting ms",
        "time since the request was handed to the engine, while no token has arrived yet",
    ),
    (
        "tmpl+tok ms",
        "building the prompt with the chat template and tokenizing it",
    ),
    (
        "prefill ms",
        "the decode calls over the prompt tokens not already in the KV cache",
    ),
    (
        "first sample ms",
        "end of prefill → first token ready (sampling it and decoding its text)",
    ),
    (
        "prefill tok",
        "prompt tokens that had to be prefilled: prompt tokens − cached tokens",
    ),
    (
        "cached tok",
        "prompt tokens whose KV entries were kept from the previous turn (the longest common prefix)",
    ),
    ("prefill tok/s", "prefilled tokens ÷ prefill time"),
    (
        "decode tok/s",
        "(N − 1) ÷ (t_last − t_first): tokens per second after the first, the steady decode speed",
    ),
    (
        "TPOT ms",
        "time per output token after the first: (E2E − TTFT) ÷ (N − 1); equals the mean ITL",
    ),
    (
        "ITL ms",
        "inter-token latency: each token's ready time minus the previous token's. last = the latest gap; mean; p50, p90, p99 by nearest rank (the gap at rank ⌈p/100 × n⌉ of the sorted gaps, always a gap that really happened); max. The bars show the latest gaps, oldest left",
    ),
    (
        "tokens",
        "tokens generated (N); the end-of-generation token is not counted",
    ),
    (
        "E2E ms",
        "end to end: request → last token ready (→ end of the turn when no token came)",
    ),
    (
        "thinking",
        "a model that reasons before it answers (<think>…</think>): its thinking tokens, markers included (part of tokens); thinking ms = first token → the token that closed the thinking; still thinking… while it does; ended while thinking when the turn ended first. TTFT stays the first token of any kind",
    ),
    (
        "1st answer ms",
        "request → the first token after the closing marker (the answer's first token, whatever its text)",
    ),
    (
        "answer tok/s",
        "the answer's own decode speed: (answer tokens − 1) ÷ (last token − first answer token); decode tok/s is the whole turn's",
    ),
    (
        "#  history",
        "TTFT and decode tok/s of each finished answer, newest last; ■ marks a stopped one, ~ a rate from fewer than 8 gaps (also \"N gaps, few\" on the ITL row); a resumed turn keeps its figures, not its ITL bars",
    ),
    (
        "context tok",
        "tokens in the KV cache (prompt and answer so far) / the context window (n_ctx)",
    ),
    (
        "roofline",
        "decode at batch 1 reads every weight once per token, so speed is capped by memory bandwidth; the source of the bandwidth is shown (configured, datasheet, or measured by a copy probe)",
    ),
    (
        "bytes/token MB",
        "weights read per decode step (all tensors but the embedding table, plus one row of it) + the KV cache at the current context depth",
    ),
    (
        "ceiling tok/s",
        "bandwidth ÷ bytes per token: the fastest decode this hardware allows",
    ),
    (
        "MBU",
        "memory bandwidth utilisation: decode tok/s ÷ ceiling",
    ),
    (
        "$/1M @P/…-h",
        "cost per million tokens: price per hour ÷ (decode tok/s × 3600) × 10⁶, the price from config price_per_gpu_hour_usd; the label says what the hour is of: GPU-h when layers run on a GPU, server-h for a remote chat, machine-h on the CPU",
    ),
    (
        "quality REF",
        "with --ref or /ref: the answer against the reference model, teacher-forced on the same tokens after it finished. KLD: KL(reference ‖ model) per token in nats, its mean and p99 (0: the same distributions); same top: tokens where both models rank the same token first; 1st diverges: the first such token that differs (counted from 1, as the token screen counts); <1% ref: tokens the model chose that the reference gave under 1%; the conversation row pools every scored answer. Shown to the digits the data support: the mean to the precision of its standard error over the answer's tokens and at most 3 significant digits (the chat's scoring is within 1% of llama-perplexity's), the p99 to 2 (within about 6%), same top in whole percent (near ties flip: about 2%)",
    ),
    (
        "divergence",
        "A/B: walking B's tokens, the first one (counted from 0) after which B's text is no longer a prefix of A's; identical when the texts are equal",
    ),
    (
        "—",
        "not defined: TTFT needs one token; ITL, TPOT and decode tok/s need two; prefill tok/s needs prefilled tokens; the breakdown arrives when prefill ends; the roofline needs a known bandwidth",
    ),
];

fn entries(out: &mut Vec<Line<'static>>, items: &[(&str, &str)], w: usize) {
    // Column where descriptions start.
    let col = if w >= 70 { 22 } else { 16 };
    let pad = |n: usize| Span::raw(" ".repeat(n));
    let rest = [pad(col + 2)];
    for (key, text) in items {
        let kw = width(key);
        let text = [Span::styled(text.to_string(), theme::HELP_TEXT)];
        let mut first = vec![
            Span::raw("  "),
            Span::styled(key.to_string(), theme::HELP_KEY),
        ];
        if kw < col {
            first.push(pad(col - kw));
            out.extend(wrap(&text, w, &first, &rest));
        } else {
            out.push(Line::from(first));
            out.extend(wrap(&text, w, &rest, &rest));
        }
    }
}

/// A section of the help: its title, a note under it in its style, its entries.
type Section<'a> = (&'a str, Option<(&'a str, Style)>, &'a [(&'a str, &'a str)]);

/// Every line of the help at `w` columns.
pub(crate) fn lines(w: usize) -> Vec<Line<'static>> {
    let metrics = "As defined in docs/metrics.md. Times are taken on the engine thread, from the moment the request is handed to the engine; the figures shown are those of the answer in flight, or else of the last finished one.";
    let status = "engine state (loading %, ready, queued, prefill, streaming, stopped, turn failed, error) · model name · architecture · parameters · quantization · file size · backend and device · GPU layers · context used/total.";
    let sections: [Section; 5] = [
        ("Keys", None, KEYS),
        ("Editing the message", None, EDIT_KEYS),
        ("Commands", None, COMMANDS),
        ("Metrics", Some((metrics, theme::DIM)), METRICS),
        ("Status line", Some((status, theme::HELP_TEXT)), &[]),
    ];
    let mut out = Vec::new();
    for (i, (title, note, items)) in sections.into_iter().enumerate() {
        if i > 0 {
            out.push(Line::default());
        }
        out.push(Line::from(Span::styled(title, theme::HELP_SECTION)));
        if let Some((text, style)) = note {
            out.extend(wrap(&[Span::styled(text, style)], w, &[], &[]));
        }
        entries(&mut out, items, w);
    }
    out
}

/// `/prompt`: the last turn's prompt, line by line, its special tokens marked, under a line
/// that names the template and why it was chosen.
pub(crate) fn prompt_lines(app: &App, w: usize) -> Vec<Line<'static>> {
    let Some(prompt) = &app.last_prompt else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(info) = &app.model {
        let why = info
            .template_note
            .as_deref()
            .map_or_else(String::new, |n| format!(" ({n})"));
        let source = match info.template.as_str() {
            "model" => "the model's own (its GGUF's chat template, rendered as transformers and llama-server --jinja render it)".to_string(),
            other => other.to_string(),
        };
        let head = format!(
            "Template: {source}{why}. Special tokens are marked; the rest is the text as tokenized."
        );
        out.extend(wrap(&[Span::styled(head, theme::DIM)], w, &[], &[]));
        out.push(Line::default());
    }
    let text = &prompt.text;
    let mut start = 0;
    for line in text.split('\n') {
        let end = start + line.len();
        let mut spans = Vec::new();
        let mut at = start;
        for r in prompt
            .special
            .iter()
            .filter(|r| r.start < end && r.end > start)
        {
            let (a, b) = (r.start.max(start), r.end.min(end));
            if a > at {
                spans.push(Span::raw(
                    crate::text::terminal_safe(&text[at..a]).into_owned(),
                ));
            }
            spans.push(Span::styled(
                crate::text::terminal_safe(&text[a..b]).into_owned(),
                theme::HELP_KEY,
            ));
            at = b;
        }
        if end > at {
            spans.push(Span::raw(
                crate::text::terminal_safe(&text[at..end]).into_owned(),
            ));
        }
        if spans.is_empty() {
            out.push(Line::default());
        } else {
            out.extend(wrap(&spans, w, &[], &[]));
        }
        start = end + 1;
    }
    out
}

/// Draw the help over `area` (everything below the status line), hiding what is under it.
pub(crate) fn draw(frame: &mut Frame, area: Rect, app: &App) {
    frame.render_widget(Clear, area);
    let w = area.width.saturating_sub(2).min(100);
    let h = area.height;
    let rect = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y,
        width: w,
        height: h,
    };
    let inner_w = w.saturating_sub(4) as usize;
    let (title, all) = match app.help_shows_prompt {
        true => (
            " prompt of the last turn ",
            prompt_lines(app, inner_w.max(1)),
        ),
        false => (" help ", lines(inner_w.max(1))),
    };
    let inner_h = h.saturating_sub(2) as usize;
    let max_scroll = all.len().saturating_sub(inner_h);
    let scroll = match app.help_from_end {
        Some(k) => max_scroll.saturating_sub(k),
        None => app.help_scroll.min(max_scroll),
    };
    let position = if max_scroll == 0 {
        " all shown ".to_string()
    } else {
        format!(
            " {}–{} of {} ",
            scroll + 1,
            (scroll + inner_h).min(all.len()),
            all.len()
        )
    };
    let keys = truncate(" ↑↓ PgUp PgDn scroll · Esc closes ", w as usize / 2);
    let block = Block::new()
        .borders(Borders::ALL)
        .border_style(theme::HELP_BORDER)
        .title(Line::from(Span::styled(title, theme::HELP_TITLE)))
        .title_bottom(Line::from(Span::styled(keys, theme::DIM)))
        .title_bottom(Line::from(Span::styled(position, theme::DIM)).right_aligned());
    let inner = block.inner(rect);
    frame.render_widget(block, rect);
    let inner = Rect {
        x: inner.x + 1,
        width: inner.width.saturating_sub(2),
        ..inner
    };
    let visible: Vec<Line<'static>> = all.into_iter().skip(scroll).take(inner_h).collect();
    frame.render_widget(Paragraph::new(visible), inner);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_view_marks_special_tokens_and_keeps_the_prompts_lines() {
        let mut app = App::default();
        assert!(prompt_lines(&app, 60).is_empty());
        let text = "<|im_start|>user\nHi <|im_end|> typed<|im_end|>\n<|im_start|>assistant\n";
        // The typed "<|im_end|>" is text: only the engine's ranges are special.
        let special = vec![0..12, 36..46, 47..59];
        assert_eq!(&text[36..46], "<|im_end|>");
        assert_eq!(&text[47..59], "<|im_start|>");
        app.last_prompt = Some(crate::engine::PromptText {
            text: text.into(),
            special,
        });
        let lines = prompt_lines(&app, 60);
        let plain: Vec<String> = lines
            .iter()
            .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
            .collect();
        assert_eq!(
            plain,
            [
                "<|im_start|>user",
                "Hi <|im_end|> typed<|im_end|>",
                "<|im_start|>assistant",
                ""
            ]
        );
        let marked = |line: usize| -> Vec<String> {
            lines[line]
                .spans
                .iter()
                .filter(|s| s.style == theme::HELP_KEY)
                .map(|s| s.content.to_string())
                .collect()
        };
        assert_eq!(marked(0), ["<|im_start|>"]);
        assert_eq!(marked(1), ["<|im_end|>"], "one of the two is a token");
        assert!(lines[1].spans[0].content.starts_with("Hi <|im_end|> typed"));
    }

    #[test]
    fn every_command_and_function_key_is_listed() {
        for command in crate::app::SLASH_COMMANDS {
            assert!(
                COMMANDS
                    .iter()
                    .any(|(k, _)| k.split_whitespace().next() == Some(*command)),
                "{command} is not in the help"
            );
        }
        for (n, _) in crate::app::FUNCTION_KEYS {
            let name = format!("F{n}");
            assert!(
                KEYS.iter()
                    .any(|(k, _)| k.split_whitespace().any(|w| w == name)),
                "{name} is not in the help"
            );
        }
    }

    /// `Ctrl+X`, `Alt+X`, `Home`, `End` as the key event a terminal sends.
    fn key_event(name: &str) -> Option<crossterm::event::KeyEvent> {
        use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
        let (mods, rest) = if let Some(r) = name.strip_prefix("Ctrl+") {
            (KeyModifiers::CONTROL, r)
        } else if let Some(r) = name.strip_prefix("Alt+") {
            (KeyModifiers::ALT, r)
        } else {
            (KeyModifiers::NONE, name)
        };
        let code = match rest {
            "Home" => KeyCode::Home,
            "End" => KeyCode::End,
            "Backspace" => KeyCode::Backspace,
            "←" => KeyCode::Left,
            "→" => KeyCode::Right,
            "_" => KeyCode::Char('7'),
            r if r.chars().count() == 1 => KeyCode::Char(r.chars().next()?.to_ascii_lowercase()),
            _ => return None,
        };
        Some(KeyEvent::new(code, mods))
    }

    #[test]
    fn every_readline_key_is_listed_and_edits() {
        use crate::app::{action_for, Action, Mode};
        let listed: Vec<&str> = EDIT_KEYS.iter().flat_map(|(k, _)| k.split(" / ")).collect();
        for key in [
            "Ctrl+A", "Ctrl+E", "Ctrl+B", "Ctrl+F", "Ctrl+K", "Ctrl+U", "Ctrl+W", "Ctrl+Y",
            "Alt+B", "Alt+F", "Alt+D", "Ctrl+Z", "Alt+Z", "Ctrl+D", "Ctrl+H",
        ] {
            assert!(listed.contains(&key), "{key} is not in the help");
        }
        for key in listed {
            let event = key_event(key).unwrap_or_else(|| panic!("{key}: not a key"));
            assert!(
                matches!(action_for(Mode::Chat, false, event), Some(Action::Edit(_))),
                "{key} is listed but edits nothing"
            );
        }
    }
}
