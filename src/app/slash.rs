//! Slash commands typed in the input (`/temp 0.2`, `/export md PATH`, …).

use super::{App, Effect, ExportFormat, Mode, NoticeKind, Now, PickFor};

/// Every slash command (the help lists each; a test keeps the two in step).
pub(crate) const SLASH_COMMANDS: &[&str] = &[
    "/system",
    "/temp",
    "/top_k",
    "/top_p",
    "/min_p",
    "/max",
    "/seed",
    "/context-full",
    "/settings",
    "/export",
    "/prompt",
    "/trace",
    "/model",
    "/ab",
    "/compare",
    "/ref",
    "/new",
    "/copy",
    "/help",
    "/quit",
];

impl App {
    /// The answers of this session that `/trace` can place on its clock (finished or
    /// stopped, with their submission known; answers read back from history have none).
    fn traced_turns(&self) -> Vec<super::TracedTurn> {
        self.conversation
            .exchanges
            .iter()
            .filter_map(|e| e.assistant.as_ref())
            .enumerate()
            .filter(|(_, a)| a.is_finished() && a.timeline.submitted_at.is_some())
            .map(|(i, a)| super::TracedTurn {
                label: format!(
                    "answer {} · {}",
                    i + 1,
                    a.model_file.as_deref().unwrap_or("model")
                ),
                timeline: a.timeline.clone(),
                profile: a.profile.clone(),
            })
            .collect()
    }

    /// A setting's current value, for a command typed without one.
    fn show_setting(&mut self, name: &str, value: String, how: &str) {
        self.notice(NoticeKind::Info, format!("{name} {value} (change: {how})"));
    }

    /// Runs one command typed in the input: each has its own handler; the ones that need the
    /// loop to act return its effects.
    pub(super) fn slash_command(&mut self, line: &str, now: Now) -> Vec<Effect> {
        let (cmd, arg) = line
            .split_once(char::is_whitespace)
            .map_or((line, ""), |(c, a)| (c, a.trim()));
        match cmd {
            "/system" => self.system_command(arg),
            "/temp" => self.number_setting(
                arg,
                (
                    "temperature",
                    "/temp X, 0 to 100 (0: greedy)",
                    "/temp needs a number from 0 to 100",
                ),
                |a| finite_f32(a).filter(|v| (0.0..=100.0).contains(v)),
                |app| &mut app.sampling.temperature,
            ),
            "/top_p" => self.number_setting(
                arg,
                (
                    "top_p",
                    "/top_p X, 0 to 1 (1: off)",
                    "/top_p needs a number from 0 to 1",
                ),
                |a| finite_f32(a).filter(|v| (0.0..=1.0).contains(v)),
                |app| &mut app.sampling.top_p,
            ),
            "/min_p" => self.number_setting(
                arg,
                (
                    "min_p",
                    "/min_p X, 0 to 1 (0: off)",
                    "/min_p needs a number from 0 to 1",
                ),
                |a| finite_f32(a).filter(|v| (0.0..=1.0).contains(v)),
                |app| &mut app.sampling.min_p,
            ),
            "/top_k" => self.number_setting(
                arg,
                (
                    "top_k",
                    "/top_k N (0: off)",
                    "/top_k needs a whole number (0 turns it off)",
                ),
                // Up to 2^24; 0 turns it off.
                |a| a.parse::<u32>().ok().filter(|v| *v <= 1 << 24),
                |app| &mut app.sampling.top_k,
            ),
            "/max" => self.number_setting(
                arg,
                ("max tokens", "/max N", "/max needs a whole number ≥ 1"),
                |a| a.parse::<u32>().ok().filter(|v| *v >= 1),
                |app| &mut app.max_tokens,
            ),
            "/seed" => self.seed_command(arg),
            "/context-full" => self.context_full_command(arg),
            "/settings" => self.settings_command(),
            "/export" => return self.export_command(arg, now),
            "/trace" => return self.trace_command(arg),
            "/prompt" => self.open_prompt(),
            "/model" if arg.is_empty() => return self.open_picker(PickFor::Switch),
            "/model" => return self.start_switch(arg),
            "/ab" if arg.is_empty() => return self.open_picker(PickFor::Ab),
            "/ab" => return self.start_ab(arg, now),
            "/compare" => return self.open_compare(),
            "/ref" => return self.ref_command(arg),
            "/new" => return self.new_conversation(now),
            "/copy" => return self.copy(arg),
            // The help opens at its top, returning to the chat.
            "/help" => {
                self.mode = Mode::Chat;
                self.open_help();
            }
            "/quit" | "/exit" => return self.quit(now),
            other => self.notice(
                NoticeKind::Error,
                format!("unknown command {other}: try {}", SLASH_COMMANDS.join(" ")),
            ),
        }
        Vec::new()
    }

    /// `/system`: shows the system prompt, or sets it (`--clear` removes it) from the next
    /// answer on.
    fn system_command(&mut self, arg: &str) {
        if arg.is_empty() {
            let text = match &self.conversation.system_prompt {
                Some(p) => format!(
                    "system prompt: {} (/system TEXT replaces it, /system --clear removes it)",
                    crate::text::ellipsis(&crate::text::collapse_spaces(p), 200)
                ),
                None => "no system prompt (/system TEXT sets one)".to_string(),
            };
            self.notice(NoticeKind::Info, text);
            return;
        }
        let clear = matches!(arg, "--clear" | "-c" | "clear");
        self.conversation.system_prompt = (!clear).then(|| arg.to_string());
        let reread = if self.conversation.exchanges.is_empty() {
            ""
        } else {
            "; the next answer re-reads the whole conversation with it (its prefill is longer)"
        };
        let done = if clear {
            "system prompt cleared"
        } else {
            "system prompt set, from the next answer on"
        };
        self.notice(NoticeKind::Info, format!("{done}{reread}"));
    }

    /// A number setting typed as `/cmd [VALUE]`: shown (with `usage`) when typed without a
    /// value; else set when `parse` takes the value, or the error `wrong` said.
    fn number_setting<T: std::fmt::Display + Copy>(
        &mut self,
        arg: &str,
        (name, usage, wrong): (&str, &str, &str),
        parse: impl Fn(&str) -> Option<T>,
        field: fn(&mut App) -> &mut T,
    ) {
        if arg.is_empty() {
            let value = field(self).to_string();
            self.show_setting(name, value, usage);
            return;
        }
        match parse(arg) {
            Some(v) => {
                *field(self) = v;
                self.notice(NoticeKind::Info, format!("{name} {v}"));
            }
            None => self.notice(NoticeKind::Error, wrong),
        }
    }

    /// `/context-full`: shows or sets what a turn does when the conversation no longer fits.
    fn context_full_command(&mut self, arg: &str) {
        if arg.is_empty() {
            let value = self.context_full.name().to_string();
            self.show_setting(
                "when the context is full:",
                value,
                "/context-full drop-oldest or stop",
            );
            return;
        }
        match arg.parse::<crate::engine::ContextFull>() {
            Ok(policy) => {
                self.context_full = policy;
                let what = match policy {
                    crate::engine::ContextFull::DropOldest => {
                        "the oldest messages are left out (and said) when the context is full; Ctrl+R sends the last message again"
                    }
                    crate::engine::ContextFull::Stop => {
                        "an answer that does not fit stops and says so, leaving nothing out"
                    }
                };
                self.notice(
                    NoticeKind::Info,
                    format!("context-full {}: {what}", policy.name()),
                );
            }
            Err(e) => self.notice(NoticeKind::Error, format!("/context-full: {e}")),
        }
    }

    /// `/seed`: shows the seed, or sets it (`-1` draws a random one and shows it).
    fn seed_command(&mut self, arg: &str) {
        if arg.is_empty() {
            self.show_setting(
                "seed",
                self.sampling.seed.to_string(),
                "/seed N, or -1 for a random one",
            );
            return;
        }
        // llama.cpp's -1: a random seed. This one is drawn here and shown, so that the turn can
        // be repeated (it is saved with the turn, as every seed is).
        let (v, how) = match arg.parse::<u32>() {
            _ if arg == "-1" => (crate::ids::random_u32(), " (random)"),
            Ok(v) => (v, ""),
            Err(_) => {
                let text = "/seed needs a whole number, or -1 for a random one";
                return self.notice(NoticeKind::Error, text);
            }
        };
        self.sampling.seed = v;
        self.notice(NoticeKind::Info, format!("seed {v}{how}"));
    }

    /// `/settings`: every sampling setting, the token limit and whether a system prompt is set,
    /// on one line.
    fn settings_command(&mut self) {
        let p = &self.sampling;
        let system = match &self.conversation.system_prompt {
            Some(_) => "system prompt set (/system shows it)",
            None => "no system prompt",
        };
        self.notice(
            NoticeKind::Info,
            format!(
                "temperature {} · top_k {} · top_p {} · min_p {} · repeat penalty {} · seed {} · max {} tokens · {system}",
                p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.seed, self.max_tokens
            ),
        );
    }

    /// `/export md|json [PATH]`: the effect that writes the conversation, or the usage.
    fn export_command(&mut self, arg: &str, now: Now) -> Vec<Effect> {
        let mut parts = arg.splitn(2, char::is_whitespace);
        let (format, ext) = match parts.next() {
            Some("md") | Some("markdown") => (ExportFormat::Markdown, "md"),
            Some("json") => (ExportFormat::Json, "json"),
            _ => {
                return self.notice_only(NoticeKind::Error, "usage: /export md|json [PATH]");
            }
        };
        // Without a path: a file named after the conversation, in the folder tokscope was
        // started in (the notice after the write says where).
        let path = match parts.next().map(str::trim).filter(|p| !p.is_empty()) {
            Some(p) => crate::config::expand_home(std::path::Path::new(p)),
            None => format!("tokscope-{}.{ext}", self.conversation.id).into(),
        };
        vec![Effect::Export {
            format,
            path,
            conversation: self.conversation.to_saved(now.unix_s),
            settings: self.current_settings(),
        }]
    }

    /// `/trace [PATH]`: the effect that writes this session's answers as a trace, or why there
    /// is nothing to write.
    fn trace_command(&mut self, arg: &str) -> Vec<Effect> {
        let path = match arg.trim() {
            "" => std::path::PathBuf::from(format!("tokscope-trace-{}.json", self.conversation.id)),
            p => crate::config::expand_home(std::path::Path::new(p)),
        };
        let turns = self.traced_turns();
        if turns.is_empty() {
            return self.notice_only(
                NoticeKind::Error,
                "nothing to trace yet: the trace covers the answers of this session (send a message first)",
            );
        }
        vec![Effect::WriteTrace { path, turns }]
    }
}

/// A finite number typed after a command (`NaN` and infinities are refused like text).
fn finite_f32(s: &str) -> Option<f32> {
    s.parse::<f32>().ok().filter(|v| v.is_finite())
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
        // Each number setting names what it needs, and keeps its value.
        for (line, said) in [
            ("/top_p 1.5", "/top_p needs a number from 0 to 1"),
            ("/min_p nan", "/min_p needs a number from 0 to 1"),
            (
                "/top_k 99999999",
                "/top_k needs a whole number (0 turns it off)",
            ),
            ("/max 0", "/max needs a whole number ≥ 1"),
        ] {
            run(&mut app, line);
            assert_eq!(app.notice.as_ref().map(|n| n.text.as_str()), Some(said));
        }
        assert_eq!((app.sampling.top_p, app.max_tokens), (0.5, 33));
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

    /// Daily friction: a command without a value shows the current one, `/settings` lists them
    /// all, `/seed -1` draws a seed and says which, `/system --clear` clears, `/export md`
    /// without a path names a default file.
    #[test]
    fn commands_without_a_value_show_it_and_the_new_ones_set_it() {
        let mut app = ready_app();
        let text = |app: &App| {
            app.notice
                .as_ref()
                .map(|n| n.text.clone())
                .unwrap_or_default()
        };
        run_line(&mut app, "/temp");
        assert!(
            text(&app).starts_with("temperature 0.8 (change:"),
            "{}",
            text(&app)
        );
        run_line(&mut app, "/top_k 7");
        assert_eq!(app.sampling.top_k, 7);
        run_line(&mut app, "/min_p 0.1");
        assert_eq!(app.sampling.min_p, 0.1);
        run_line(&mut app, "/max");
        assert!(text(&app).starts_with("max tokens "), "{}", text(&app));
        run_line(&mut app, "/seed 5");
        run_line(&mut app, "/seed -1");
        assert!(text(&app).ends_with("(random)"), "{}", text(&app));
        assert!(text(&app).contains(&app.sampling.seed.to_string()));
        run_line(&mut app, "/system");
        assert!(text(&app).starts_with("no system prompt"), "{}", text(&app));
        run_line(&mut app, "/system be brief");
        run_line(&mut app, "/system");
        assert!(
            text(&app).contains("system prompt: be brief"),
            "{}",
            text(&app)
        );
        run_line(&mut app, "/settings");
        assert!(
            text(&app).contains("top_k 7") && text(&app).contains("min_p 0.1"),
            "{}",
            text(&app)
        );
        run_line(&mut app, "/system --clear");
        assert_eq!(app.conversation.system_prompt, None);
        let fx = run_line(&mut app, "/export md");
        match &fx[..] {
            [Effect::Export { path, .. }] => assert_eq!(
                path,
                &std::path::PathBuf::from(format!("tokscope-{}.md", app.conversation.id))
            ),
            other => panic!("{other:?}"),
        }
    }
}
