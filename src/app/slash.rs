//! Slash commands typed in the input (`/temp 0.2`, `/export md PATH`, …).

use super::{App, Effect, ExportFormat, Mode, NoticeKind, Now, PickFor};

/// Every slash command (the help lists each; a test keeps the two in step).
pub(crate) const SLASH_COMMANDS: &[&str] = &[
    "/system", "/temp", "/top_p", "/max", "/seed", "/export", "/model", "/ab", "/compare", "/new",
    "/copy", "/help", "/quit",
];

impl App {
    pub(super) fn slash_command(&mut self, line: &str, now: Now) -> Vec<Effect> {
        let (cmd, arg) = match line.split_once(char::is_whitespace) {
            Some((c, a)) => (c, a.trim()),
            None => (line, ""),
        };
        let parse_f32 = |s: &str| s.parse::<f32>().ok().filter(|v| v.is_finite());
        match cmd {
            "/system" => {
                self.conversation.system_prompt = Some(arg.to_string()).filter(|s| !s.is_empty());
                self.notice(
                    NoticeKind::Info,
                    if arg.is_empty() {
                        "system prompt cleared".to_string()
                    } else {
                        "system prompt set (applies from the next answer)".to_string()
                    },
                );
            }
            "/temp" => match parse_f32(arg).filter(|v| (0.0..=100.0).contains(v)) {
                Some(v) => {
                    self.sampling.temperature = v;
                    self.notice(NoticeKind::Info, format!("temperature {v}"));
                }
                None => self.notice(NoticeKind::Error, "/temp needs a number from 0 to 100"),
            },
            "/top_p" => match parse_f32(arg).filter(|v| (0.0..=1.0).contains(v)) {
                Some(v) => {
                    self.sampling.top_p = v;
                    self.notice(NoticeKind::Info, format!("top_p {v}"));
                }
                None => self.notice(NoticeKind::Error, "/top_p needs a number from 0 to 1"),
            },
            "/max" => match arg.parse::<u32>().ok().filter(|v| *v >= 1) {
                Some(v) => {
                    self.max_tokens = v;
                    self.notice(NoticeKind::Info, format!("max tokens {v}"));
                }
                None => self.notice(NoticeKind::Error, "/max needs a whole number ≥ 1"),
            },
            "/seed" => match arg.parse::<u32>() {
                Ok(v) => {
                    self.sampling.seed = v;
                    self.notice(NoticeKind::Info, format!("seed {v}"));
                }
                Err(_) => self.notice(NoticeKind::Error, "/seed needs a whole number"),
            },
            "/export" => {
                let mut parts = arg.splitn(2, char::is_whitespace);
                let format = match parts.next() {
                    Some("md") | Some("markdown") => Some(ExportFormat::Markdown),
                    Some("json") => Some(ExportFormat::Json),
                    _ => None,
                };
                let path = parts.next().map(str::trim).filter(|p| !p.is_empty());
                match (format, path) {
                    (Some(format), Some(path)) => {
                        return vec![Effect::Export {
                            format,
                            path: crate::config::expand_home(std::path::Path::new(path)),
                            conversation: self.conversation.to_saved(now.unix_s),
                            settings: self.current_settings(),
                        }]
                    }
                    _ => self.notice(NoticeKind::Error, "usage: /export md|json PATH"),
                }
            }
            "/model" if arg.is_empty() => return self.open_picker(PickFor::Switch),
            "/model" => return self.start_switch(arg),
            "/ab" if arg.is_empty() => return self.open_picker(PickFor::Ab),
            "/ab" => return self.start_ab(arg, now),
            "/compare" => return self.open_compare(),
            "/new" => return self.new_conversation(now),
            "/copy" => return self.copy(arg),
            "/help" => {
                self.help_return = Mode::Chat;
                self.help_scroll = 0;
                self.mode = Mode::Help;
            }
            "/quit" | "/exit" => return self.quit(),
            other => self.notice(
                NoticeKind::Error,
                format!("unknown command {other}: try {}", SLASH_COMMANDS.join(" ")),
            ),
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::tests::*;
    use crate::app::{update, Msg};
    use crossterm::event::KeyCode;

    #[test]
    fn slash_commands() {
        let mut app = ready_app();
        let run = |app: &mut App, line: &str| {
            app.input.set(line);
            update(app, Msg::Key(key(KeyCode::Enter)), now())
        };
        run(&mut app, "/temp 0.2");
        assert_eq!(app.sampling.temperature, 0.2);
        run(&mut app, "/top_p 0.5");
        assert_eq!(app.sampling.top_p, 0.5);
        run(&mut app, "/max 33");
        assert_eq!(app.max_tokens, 33);
        run(&mut app, "/seed 9");
        assert_eq!(app.sampling.seed, 9);
        run(&mut app, "/system be terse");
        assert_eq!(app.conversation.system_prompt.as_deref(), Some("be terse"));
        run(&mut app, "/temp -3");
        assert_eq!(app.notice.as_ref().map(|n| n.kind), Some(NoticeKind::Error));
        assert_eq!(app.sampling.temperature, 0.2);
        run(&mut app, "/bogus");
        assert!(app
            .notice
            .as_ref()
            .unwrap()
            .text
            .contains("unknown command"));
        let fx = run(&mut app, "/export md /tmp/x.md");
        assert!(matches!(
            &fx[..],
            [Effect::Export {
                format: ExportFormat::Markdown,
                ..
            }]
        ));
        let fx = run(&mut app, "/model /m/other.gguf");
        assert!(
            matches!(fx.as_slice(), [Effect::SwitchModel { path, .. }] if path == std::path::Path::new("/m/other.gguf")),
            "{fx:?}"
        );
        assert_eq!(
            app.engine,
            crate::app::EngineStatus::Ready,
            "the old model serves until then"
        );
        let fx = run(&mut app, "/new");
        assert!(fx.is_empty());
        assert_eq!(app.conversation.id, "c2");
        let fx = run(&mut app, "/quit");
        assert_eq!(fx, vec![Effect::Quit]);
    }

    #[test]
    fn a_double_slash_sends_a_message_that_starts_with_a_slash() {
        let mut app = ready_app();
        let fx = run_line(&mut app, "//etc/hosts is a file?");
        assert!(matches!(fx.as_slice(), [Effect::Generate { .. }]), "{fx:?}");
        assert_eq!(
            app.conversation.exchanges.last().unwrap().user,
            "/etc/hosts is a file?"
        );
    }

    #[test]
    fn a_new_conversation_starts_now() {
        let mut app = ready_app();
        assert_eq!(app.conversation.created_unix_s, 0);
        run_line(&mut app, "/new");
        assert_eq!(app.conversation.created_unix_s, now().unix_s);
        app.fresh_conversation_id = "c3".into();
        let later = crate::app::Now {
            unix_s: now().unix_s + 60,
            ..now()
        };
        let ctrl_n = with(KeyCode::Char('n'), KeyModifiers::CONTROL);
        update(&mut app, Msg::Key(ctrl_n), later);
        assert_eq!(app.conversation.id, "c3");
        assert_eq!(app.conversation.created_unix_s, later.unix_s);
    }
}
