//! `/copy [N|code]` and Alt+C: which text goes to the clipboard. The loop writes it to the
//! terminal as an OSC 52 sequence (`tui::terminal::osc52`); here only the choice is made.

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

use super::{App, Effect, NoticeKind};

/// The most text one copy sends (the terminal receives it base64-encoded, a third larger;
/// terminals cap OSC 52 somewhere between 100 KB and a few MB).
pub(crate) const COPY_MAX_BYTES: usize = 1 << 20;

impl App {
    /// `/copy` (the last answer), `/copy N` (answer N, counted from 1), `/copy code` (the last
    /// code block of the last answer that has one).
    pub(super) fn copy(&mut self, arg: &str) -> Vec<Effect> {
        if let Some(why) = &self.clipboard_blocked {
            let text = format!("not copied: {why}");
            return self.notice_only(NoticeKind::Warning, text);
        }
        match self.copy_choice(arg) {
            Ok((what, text)) if text.len() > COPY_MAX_BYTES => {
                let text = format!(
                    "not copied: {what} is {} KiB, more than a terminal takes at once ({} KiB); \
                     use /export md PATH",
                    text.len() / 1024,
                    COPY_MAX_BYTES / 1024
                );
                self.notice_only(NoticeKind::Warning, text)
            }
            Ok((what, text)) => {
                let chars = text.chars().count();
                self.notice(
                    NoticeKind::Info,
                    format!(
                        "copied {what} ({chars} characters) to the clipboard with OSC 52 \
                         (the terminal must allow it; tmux: set -g set-clipboard on)"
                    ),
                );
                vec![Effect::Copy(text)]
            }
            Err(e) => self.notice_only(NoticeKind::Error, e),
        }
    }

    /// What `/copy ARG` means: (a description, the text).
    fn copy_choice(&self, arg: &str) -> Result<(String, String), String> {
        let answers: Vec<(usize, &str)> = self
            .conversation
            .exchanges
            .iter()
            .enumerate()
            .filter_map(|(i, ex)| ex.assistant.as_ref().map(|a| (i + 1, a.text.as_str())))
            .filter(|(_, text)| !text.is_empty())
            .collect();
        let usage = "usage: /copy (the last answer), /copy N (answer N), /copy code (the last \
                     code block)";
        match arg {
            "" => answers
                .last()
                .map(|&(n, text)| (format!("answer {n}"), text.to_string()))
                .ok_or_else(|| "nothing to copy yet: no answer has any text".to_string()),
            "code" => answers
                .iter()
                .rev()
                .find_map(|&(n, text)| {
                    last_code_block(text)
                        .map(|code| (format!("the code block of answer {n}"), code))
                })
                .ok_or_else(|| "no answer has a code block".to_string()),
            n => match n.parse::<usize>() {
                Ok(n) => answers
                    .iter()
                    .find(|&&(i, _)| i == n)
                    .map(|&(n, text)| (format!("answer {n}"), text.to_string()))
                    .ok_or_else(|| {
                        format!(
                            "there is no answer {n}: the conversation has {} exchanges",
                            self.conversation.exchanges.len()
                        )
                    }),
                Err(_) => Err(usage.to_string()),
            },
        }
    }
}

/// The text of the last fenced or indented code block in Markdown `text` (an unclosed fence
/// counts: it runs to the end).
fn last_code_block(text: &str) -> Option<String> {
    let mut last = None;
    let mut current: Option<String> = None;
    for event in Parser::new(text) {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(_) | CodeBlockKind::Indented)) => {
                current = Some(String::new());
            }
            Event::Text(t) => {
                if let Some(code) = current.as_mut() {
                    code.push_str(&t);
                }
            }
            Event::End(TagEnd::CodeBlock) => last = current.take(),
            _ => {}
        }
    }
    current.or(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::tests::*;
    use crate::app::{update, Msg};

    fn with_answers(answers: &[&str]) -> App {
        let mut app = ready_app();
        for (i, text) in answers.iter().enumerate() {
            app.input.set(&format!("question {i}"));
            let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
            let Some(Effect::Generate { id, .. }) = fx.first().cloned() else {
                panic!("{fx:?}")
            };
            let done = finished(id, text, crate::engine::StopReason::EndOfGeneration);
            update(&mut app, done, now());
        }
        app
    }

    fn copied(app: &mut App, line: &str) -> Option<String> {
        app.input.set(line);
        let fx = update(app, Msg::Key(key(KeyCode::Enter)), now());
        fx.into_iter().find_map(|e| match e {
            Effect::Copy(text) => Some(text),
            _ => None,
        })
    }

    #[test]
    fn copy_picks_the_last_answer_answer_n_or_the_last_code_block() {
        let mut app = with_answers(&[
            "first, with code:\n\n```rust\nfn a() {}\n```\n",
            "second, no code",
        ]);
        assert_eq!(
            copied(&mut app, "/copy").as_deref(),
            Some("second, no code")
        );
        assert!(app.notice.as_ref().unwrap().text.contains("answer 2"));
        assert_eq!(
            copied(&mut app, "/copy 1").as_deref(),
            Some("first, with code:\n\n```rust\nfn a() {}\n```\n")
        );
        assert_eq!(
            copied(&mut app, "/copy code").as_deref(),
            Some("fn a() {}\n")
        );
        assert!(app.notice.as_ref().unwrap().text.contains("answer 1"));
    }

    #[test]
    fn copy_says_why_when_there_is_nothing_to_copy_or_the_terminal_cannot_take_it() {
        let mut app = ready_app();
        assert_eq!(copied(&mut app, "/copy"), None);
        assert!(app
            .notice
            .as_ref()
            .unwrap()
            .text
            .contains("nothing to copy"));
        let mut app = with_answers(&["plain"]);
        assert_eq!(copied(&mut app, "/copy code"), None);
        assert!(app
            .notice
            .as_ref()
            .unwrap()
            .text
            .contains("no answer has a code block"));
        assert_eq!(copied(&mut app, "/copy 7"), None);
        assert!(app.notice.as_ref().unwrap().text.contains("no answer 7"));
        assert_eq!(copied(&mut app, "/copy x"), None);
        assert!(app.notice.as_ref().unwrap().text.contains("usage"));
        app.clipboard_blocked = Some("TERM=dumb cannot take OSC 52".into());
        assert_eq!(copied(&mut app, "/copy"), None);
        let notice = app.notice.as_ref().unwrap();
        assert_eq!(notice.kind, NoticeKind::Warning);
        assert!(notice.text.contains("TERM=dumb"), "{}", notice.text);
    }

    #[test]
    fn alt_c_copies_the_last_answer() {
        let mut app = with_answers(&["the answer"]);
        let alt_c = crossterm::event::KeyEvent::new(
            crossterm::event::KeyCode::Char('c'),
            crossterm::event::KeyModifiers::ALT,
        );
        let fx = update(&mut app, Msg::Key(alt_c), now());
        assert!(
            fx.iter()
                .any(|e| matches!(e, Effect::Copy(t) if t == "the answer")),
            "{fx:?}"
        );
    }
}
