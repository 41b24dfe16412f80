//! Markdown of assistant answers as terminal lines: headings, bullet and numbered lists,
//! emphasis, strong, strikethrough, links, inline code, block quotes, rules and fenced code
//! blocks set apart in a frame. Pure: text and width in, lines out. Partial Markdown from a
//! stream renders sensibly: an unclosed fence is a code block up to the end of the text, an
//! unclosed `**` is shown as typed.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use ratatui::style::Style;
use ratatui::text::{Line, Span};

use super::text::{clean, hard_wrap, wrap};
use super::theme;

/// Render `text` as Markdown wrapped to `width` columns.
pub(crate) fn render(text: &str, width: usize) -> Vec<Line<'static>> {
    let width = width.max(1);
    let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let source = clean(text);
    let mut r = Renderer {
        width,
        lines: Vec::new(),
        styles: vec![theme::TEXT],
        inline: Vec::new(),
        containers: Vec::new(),
        lists: Vec::new(),
        code: None,
    };
    for (event, range) in Parser::new_ext(&source, options).into_offset_iter() {
        if let Event::End(TagEnd::CodeBlock) = event {
            let closed = fence_closed(source.get(range).unwrap_or(""));
            r.end_code_block(closed);
            r.block_gap();
        } else {
            r.event(event);
        }
    }
    r.flush_inline();
    if r.code.is_some() {
        r.end_code_block(false);
    }
    while r.lines.last().is_some_and(is_blank) {
        r.lines.pop();
    }
    r.lines
}

/// Whether a code block's source ends with its closing fence. A fence still open (an answer
/// being streamed, or one that ended inside a code block) gets no bottom line, so the block
/// reads as continuing.
fn fence_closed(block: &str) -> bool {
    let strip = |l: &str| l.trim_start_matches([' ', '>']).to_string();
    let mut lines = block.trim_end_matches('\n').lines().map(strip);
    let Some(first) = lines.next() else {
        return true;
    };
    let fence: String = first
        .chars()
        .take_while(|c| *c == '`' || *c == '~')
        .collect();
    if fence.len() < 3 {
        // An indented code block has no fence to close.
        return true;
    }
    lines.next_back().is_some_and(|last| {
        let last = last.trim_end();
        last.starts_with(&fence) && last.chars().all(|c| c == '`' || c == '~')
    })
}

fn is_blank(line: &Line<'_>) -> bool {
    line.spans.iter().all(|s| s.content.trim().is_empty())
}

enum Container {
    Quote,
    Item { marker: String, shown: bool },
}

struct CodeBlock {
    lang: String,
    text: String,
}

struct Renderer {
    width: usize,
    lines: Vec<Line<'static>>,
    /// Inline style stack; the bottom entry is the base style.
    styles: Vec<Style>,
    /// The inline text of the block being built (paragraph, heading, tight list item).
    inline: Vec<Span<'static>>,
    containers: Vec<Container>,
    /// Next number of each open list (`None`: bullets).
    lists: Vec<Option<u64>>,
    code: Option<CodeBlock>,
}

impl Renderer {
    fn style(&self) -> Style {
        self.styles.last().copied().unwrap_or(theme::TEXT)
    }

    fn push_style(&mut self, s: Style) {
        let patched = self.style().patch(s);
        self.styles.push(patched);
    }

    fn pop_style(&mut self) {
        if self.styles.len() > 1 {
            self.styles.pop();
        }
    }

    /// The prefixes of the next block: for its first line (showing any list marker not shown
    /// yet) and for the lines after it.
    fn prefixes(&mut self) -> (Vec<Span<'static>>, Vec<Span<'static>>) {
        let mut first = Vec::new();
        let mut rest = Vec::new();
        for c in &mut self.containers {
            match c {
                Container::Quote => {
                    first.push(Span::styled("│ ", theme::MD_QUOTE_BAR));
                    rest.push(Span::styled("│ ", theme::MD_QUOTE_BAR));
                }
                Container::Item { marker, shown } => {
                    let pad = " ".repeat(super::text::width(marker));
                    if *shown {
                        first.push(Span::raw(pad.clone()));
                    } else {
                        first.push(Span::styled(marker.clone(), theme::MD_LIST_MARKER));
                        *shown = true;
                    }
                    rest.push(Span::raw(pad));
                }
            }
        }
        (first, rest)
    }

    fn blank(&mut self) {
        if self.lines.last().is_some_and(|l| !is_blank(l)) {
            self.lines.push(Line::default());
        }
    }

    /// A blank line after a block, except between the blocks of a list item.
    fn block_gap(&mut self) {
        if !self
            .containers
            .iter()
            .any(|c| matches!(c, Container::Item { .. }))
        {
            self.blank();
        }
    }

    fn flush_inline(&mut self) {
        if self.inline.is_empty() {
            return;
        }
        let spans = std::mem::take(&mut self.inline);
        let (first, rest) = self.prefixes();
        let lines = wrap(&spans, self.width, &first, &rest);
        self.lines.extend(lines);
    }

    fn text(&mut self, t: &str) {
        if let Some(code) = &mut self.code {
            code.text.push_str(t);
        } else {
            let style = self.style();
            self.inline.push(Span::styled(clean(t), style));
        }
    }

    fn end_code_block(&mut self, closed: bool) {
        let Some(code) = self.code.take() else {
            return;
        };
        let (first, rest) = self.prefixes();
        let prefix_w: usize = rest.iter().map(|s| super::text::width(&s.content)).sum();
        let inner = self.width.saturating_sub(prefix_w + 2).max(1);
        let mut top = first;
        let space = if code.lang.is_empty() { "" } else { " " };
        let label = format!("┌─{space}{}", super::text::one_line(&code.lang));
        top.push(Span::styled(label, theme::MD_CODE_FRAME));
        self.lines.push(Line::from(top));
        let body = code.text.strip_suffix('\n').unwrap_or(&code.text);
        let rows = if code.text.is_empty() {
            Vec::new()
        } else {
            hard_wrap(body, theme::MD_CODE_BLOCK, inner)
        };
        for row in rows {
            let mut spans = rest.clone();
            spans.push(Span::styled("│ ", theme::MD_CODE_FRAME));
            spans.extend(row);
            self.lines.push(Line::from(spans));
        }
        if closed {
            let mut bottom = rest;
            bottom.push(Span::styled("└─", theme::MD_CODE_FRAME));
            self.lines.push(Line::from(bottom));
        }
    }

    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(t) => self.text(&t),
            Event::Code(t) => {
                let style = self.style().patch(theme::MD_INLINE_CODE);
                self.inline.push(Span::styled(clean(&t), style));
            }
            Event::InlineMath(t) | Event::DisplayMath(t) => self.text(&t),
            Event::Html(t) | Event::InlineHtml(t) => self.text(&t),
            Event::FootnoteReference(t) => self.text(&format!("[{t}]")),
            Event::SoftBreak => self.text(" "),
            Event::HardBreak => self.text("\n"),
            Event::Rule => {
                self.flush_inline();
                let (first, _) = self.prefixes();
                let used: usize = first.iter().map(|s| super::text::width(&s.content)).sum();
                let mut spans = first;
                spans.push(Span::styled(
                    "─".repeat(self.width.saturating_sub(used).max(1)),
                    theme::MD_RULE,
                ));
                self.lines.push(Line::from(spans));
                self.block_gap();
            }
            Event::TaskListMarker(done) => self.text(if done { "[x] " } else { "[ ] " }),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Heading { level, .. } => {
                self.flush_inline();
                self.push_style(match level {
                    HeadingLevel::H1 => theme::MD_H1,
                    HeadingLevel::H2 => theme::MD_H2,
                    _ => theme::MD_H3,
                });
            }
            Tag::BlockQuote(_) => {
                self.flush_inline();
                self.containers.push(Container::Quote);
                self.push_style(theme::MD_QUOTE);
            }
            Tag::CodeBlock(kind) => {
                self.flush_inline();
                let lang = match kind {
                    CodeBlockKind::Fenced(info) => {
                        info.split_whitespace().next().unwrap_or("").to_string()
                    }
                    CodeBlockKind::Indented => String::new(),
                };
                let text = String::new();
                self.code = Some(CodeBlock { lang, text });
            }
            Tag::List(start) => {
                self.flush_inline();
                self.lists.push(start);
            }
            Tag::Item => {
                self.flush_inline();
                let depth = self.lists.len().saturating_sub(1);
                let marker = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        let m = format!("{n}. ");
                        *n += 1;
                        m
                    }
                    _ => match depth % 3 {
                        0 => "• ",
                        1 => "◦ ",
                        _ => "▪ ",
                    }
                    .to_string(),
                };
                self.containers.push(Container::Item {
                    marker,
                    shown: false,
                });
            }
            Tag::Emphasis => self.push_style(theme::MD_EMPHASIS),
            Tag::Strong => self.push_style(theme::MD_STRONG),
            Tag::Strikethrough => self.push_style(theme::MD_STRIKE),
            Tag::Link { .. } | Tag::Image { .. } => self.push_style(theme::MD_LINK),
            Tag::Superscript | Tag::Subscript => self.push_style(theme::TEXT),
            // Paragraphs, and blocks drawn as plain text (HTML, tables, footnotes, …).
            _ => self.flush_inline(),
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph => {
                self.flush_inline();
                self.block_gap();
            }
            TagEnd::Heading(_) => {
                self.flush_inline();
                self.pop_style();
                self.block_gap();
            }
            TagEnd::BlockQuote(_) => {
                self.flush_inline();
                self.pop_style();
                self.containers.pop();
                self.block_gap();
            }
            TagEnd::CodeBlock => {
                self.end_code_block(true);
                self.block_gap();
            }
            TagEnd::List(_) => {
                self.flush_inline();
                self.lists.pop();
                if self.lists.is_empty() {
                    self.block_gap();
                }
            }
            TagEnd::Item => {
                self.flush_inline();
                // An empty item still shows its marker.
                if let Some(Container::Item { shown: false, .. }) = self.containers.last() {
                    let (first, _) = self.prefixes();
                    self.lines.push(Line::from(first));
                }
                self.containers.pop();
            }
            TagEnd::Emphasis
            | TagEnd::Strong
            | TagEnd::Strikethrough
            | TagEnd::Link
            | TagEnd::Image
            | TagEnd::Superscript
            | TagEnd::Subscript => self.pop_style(),
            // Blocks drawn as plain text (HTML, tables, footnotes, …).
            _ => self.flush_inline(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::style::Modifier;

    use crate::ui::text::plain;

    fn style_of<'a>(lines: &'a [Line<'_>], text: &str) -> Option<&'a Style> {
        lines
            .iter()
            .flat_map(|l| l.spans.iter())
            .find(|s| s.content.contains(text))
            .map(|s| &s.style)
    }

    #[test]
    fn headings_are_bold_without_hashes() {
        let lines = render("# Title\n\n## Sub\n\ntext", 40);
        assert_eq!(plain(&lines), ["Title", "", "Sub", "", "text"]);
        let h1 = style_of(&lines, "Title").copied().unwrap_or_default();
        assert!(h1.add_modifier.contains(Modifier::BOLD));
        assert!(h1.add_modifier.contains(Modifier::UNDERLINED));
    }

    #[test]
    fn bullet_and_numbered_lists() {
        let lines = render("- one\n- two\n  - nested\n\n1. first\n2. second\n", 40);
        assert_eq!(
            plain(&lines),
            ["• one", "• two", "  ◦ nested", "", "1. first", "2. second"]
        );
    }

    #[test]
    fn list_items_wrap_under_their_text() {
        let lines = render("- a long item that has to wrap", 14);
        assert_eq!(plain(&lines), ["• a long item", "  that has to", "  wrap"]);
    }

    #[test]
    fn emphasis_strong_and_inline_code() {
        let lines = render("plain *it* **bold** `code` ~~gone~~", 60);
        assert_eq!(plain(&lines), ["plain it bold code gone"]);
        let it = style_of(&lines, "it").copied().unwrap_or_default();
        assert!(it.add_modifier.contains(Modifier::ITALIC));
        let bold = style_of(&lines, "bold").copied().unwrap_or_default();
        assert!(bold.add_modifier.contains(Modifier::BOLD));
        assert_eq!(style_of(&lines, "code"), Some(&theme::MD_INLINE_CODE));
        let gone = style_of(&lines, "gone").copied().unwrap_or_default();
        assert!(gone.add_modifier.contains(Modifier::CROSSED_OUT));
    }

    #[test]
    fn fenced_code_is_framed_and_not_word_wrapped() {
        let lines = render(
            "Look:\n\n```rust\nfn main() {\n    let x = 1;\n}\n```\n\nafter",
            40,
        );
        assert_eq!(
            plain(&lines),
            [
                "Look:",
                "",
                "┌─ rust",
                "│ fn main() {",
                "│     let x = 1;",
                "│ }",
                "└─",
                "",
                "after"
            ]
        );
        assert_eq!(style_of(&lines, "fn main"), Some(&theme::MD_CODE_BLOCK));
    }

    #[test]
    fn long_code_lines_break_inside_the_frame() {
        let lines = render("```\nabcdefghij\n```", 8);
        assert_eq!(plain(&lines), ["┌─", "│ abcdef", "│ ghij", "└─"]);
    }

    #[test]
    fn unclosed_fence_renders_while_streaming() {
        let lines = render("Here:\n\n```py\nprint(1)\nprint(", 40);
        assert_eq!(
            plain(&lines),
            ["Here:", "", "┌─ py", "│ print(1)", "│ print("]
        );
        // Just opened: the frame starts, nothing inside yet.
        assert_eq!(plain(&render("```rust", 40)), ["┌─ rust"]);
        assert_eq!(plain(&render("```rust\n", 40)), ["┌─ rust"]);
        // Closed by a longer fence, or inside a list: closed.
        assert_eq!(plain(&render("````\nx\n`````", 40)), ["┌─", "│ x", "└─"]);
        assert_eq!(
            plain(&render("- item\n\n  ```\n  x\n  ```", 40)),
            ["• item", "  ┌─", "  │ x", "  └─"]
        );
        // Indented code has no fence.
        assert_eq!(plain(&render("    code", 40)), ["┌─", "│ code", "└─"]);
        // An unclosed emphasis is shown as typed.
        assert_eq!(plain(&render("so **bold", 40)), ["so **bold"]);
    }

    #[test]
    fn wraps_wide_characters_and_long_words() {
        let lines = render("日本語のテキストです 🙂🙂 supercalifragilistic", 10);
        assert_eq!(
            plain(&lines),
            [
                "日本語のテ",
                "キストです",
                "🙂🙂",
                "supercalif",
                "ragilistic"
            ]
        );
        for l in &lines {
            assert!(super::super::text::line_width(l) <= 10, "{l:?}");
        }
    }

    #[test]
    fn quotes_and_rules() {
        let lines = render("> quoted text\n\n---\n\nend", 14);
        assert_eq!(
            plain(&lines),
            ["│ quoted text", "", "──────────────", "", "end"]
        );
    }

    #[test]
    fn escapes_in_answers_are_neutralised() {
        let lines = render("a \u{1b}[2J b &#27; c\n\n```\n\u{1b}]52;c;x\u{7}\n```", 40);
        for l in &lines {
            for s in &l.spans {
                assert!(
                    !s.content.chars().any(|c| c.is_control()),
                    "{:?}",
                    s.content
                );
            }
        }
    }

    #[test]
    fn empty_and_blank_text() {
        assert!(render("", 20).is_empty());
        assert!(render("\n\n", 20).is_empty());
    }
}
