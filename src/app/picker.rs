//! The model picker: `/model` or `/ab` without a path, or Ctrl+O, lists the GGUF files found
//! where people keep them (`crate::discover`, run by the loop off the UI thread). Typing filters
//! the list, Up/Down choose, Enter switches the model (or, when opened by `/ab`, runs A/B), Ctrl+A
//! or Alt+A runs A/B with the chosen file whatever opened the list, Esc closes.

use super::{App, Effect, Mode, Now};
use crate::discover::{Discovery, FoundModel};

/// What Enter does with the chosen file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PickFor {
    /// Switch the chat's model (`/model`, Ctrl+O).
    Switch,
    /// Answer the last prompt again with it, side by side (`/ab`).
    Ab,
}

/// The picker's state, while it is open.
#[derive(Debug, Clone, PartialEq)]
pub struct Picker {
    pub purpose: PickFor,
    /// What the user typed: every word must appear in the row (name, architecture,
    /// quantization, where, path), case ignored.
    pub filter: String,
    /// Index into the filtered rows.
    pub selected: usize,
    /// `None` while the search runs.
    pub found: Option<Discovery>,
}

impl Picker {
    /// Indices into `found.models` of the rows the filter keeps, in list order.
    pub fn rows(&self) -> Vec<usize> {
        let Some(found) = &self.found else {
            return Vec::new();
        };
        let words: Vec<String> = self
            .filter
            .split_whitespace()
            .map(str::to_lowercase)
            .collect();
        found
            .models
            .iter()
            .enumerate()
            .filter(|(_, m)| {
                let hay = haystack(m);
                words.iter().all(|w| hay.contains(w.as_str()))
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// The model under the cursor.
    pub fn chosen(&self) -> Option<&FoundModel> {
        let rows = self.rows();
        let i = *rows.get(self.selected.min(rows.len().saturating_sub(1)))?;
        self.found.as_ref()?.models.get(i)
    }

    fn clamp(&mut self) {
        let n = self.rows().len();
        self.selected = self.selected.min(n.saturating_sub(1));
    }
}

fn haystack(m: &FoundModel) -> String {
    format!(
        "{} {} {} {} {}{}",
        m.name,
        m.architecture,
        m.quantization,
        m.origin.label(),
        m.path.display(),
        match (m.synthetic, m.in_use) {
            (true, true) => " synthetic in use",
            (true, false) => " synthetic",
            (false, true) => " in use",
            (false, false) => "",
        }
    )
    .to_lowercase()
}

/// The picker's keys, after the key table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PickerKey {
    Char(char),
    Backspace,
    Up,
    Down,
    PageUp,
    PageDown,
    /// Enter: the picker's purpose with the chosen file.
    Pick,
    /// Ctrl+A / Alt+A: A/B with the chosen file.
    Ab,
    Close,
}

/// Rows one PgUp/PgDn moves in the list.
const PICKER_PAGE: usize = 10;

impl App {
    /// Open the picker and ask the loop to search for models.
    pub(super) fn open_picker(&mut self, purpose: PickFor) -> Vec<Effect> {
        self.picker = Some(Picker {
            purpose,
            filter: String::new(),
            selected: 0,
            found: None,
        });
        self.mode = Mode::Picker;
        // A server's chat runs no file here.
        let in_use = Some(self.model_path.clone()).filter(|p| !crate::remote::is_url(p));
        vec![Effect::DiscoverModels {
            model_dirs: self.model_dirs.clone(),
            in_use,
        }]
    }

    /// The search's result: shown if the picker is still open.
    pub(super) fn on_models_found(&mut self, found: Discovery) {
        if let Some(p) = self.picker.as_mut() {
            p.found = Some(found);
            p.clamp();
        }
    }

    pub(super) fn on_picker_key(&mut self, key: PickerKey, now: Now) -> Vec<Effect> {
        let Some(p) = self.picker.as_mut() else {
            self.mode = Mode::Chat;
            return Vec::new();
        };
        match key {
            PickerKey::Char(c) => {
                p.filter.push(c);
                p.selected = 0;
            }
            PickerKey::Backspace => {
                p.filter.pop();
                p.selected = 0;
            }
            PickerKey::Up => p.selected = p.selected.saturating_sub(1),
            PickerKey::Down => p.selected = p.selected.saturating_add(1),
            PickerKey::PageUp => p.selected = p.selected.saturating_sub(PICKER_PAGE),
            PickerKey::PageDown => p.selected = p.selected.saturating_add(PICKER_PAGE),
            PickerKey::Close => self.close_picker(),
            PickerKey::Pick | PickerKey::Ab => {
                let Some(path) = p.chosen().map(|m| m.path.clone()) else {
                    return Vec::new();
                };
                let ab = key == PickerKey::Ab || p.purpose == PickFor::Ab;
                self.close_picker();
                // The path goes through the same door as a typed one (`/model PATH`, `/ab PATH`).
                return self.use_model(&path.to_string_lossy(), ab, now);
            }
        }
        if let Some(p) = self.picker.as_mut() {
            p.clamp();
        }
        Vec::new()
    }

    fn close_picker(&mut self) {
        self.picker = None;
        self.mode = Mode::Chat;
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::app::tests::*;
    use crate::app::{update, Msg};
    use crate::discover::Origin;

    fn model(name: &str, arch: &str, quant: &str, synthetic: bool) -> FoundModel {
        FoundModel {
            name: name.into(),
            path: PathBuf::from(format!("/m/{name}")),
            origin: Origin::ConfigDir,
            architecture: arch.into(),
            n_params: 1_000_000,
            quantization: quant.into(),
            size_bytes: 2_000_000,
            synthetic,
            in_use: false,
        }
    }

    fn found() -> Discovery {
        Discovery {
            models: vec![
                model("llama-8b-q4.gguf", "llama", "Q4_K_M", false),
                model("qwen-0.5b.gguf", "qwen2", "Q8_0", false),
                model("tiny.gguf", "llama", "F32", true),
            ],
            ..Discovery::default()
        }
    }

    fn open(app: &mut App, line: &str) -> Vec<Effect> {
        let fx = run_line(app, line);
        update(app, Msg::ModelsFound(found()), now());
        fx
    }

    #[test]
    fn model_without_a_path_opens_the_picker_and_asks_for_a_search() {
        let mut app = ready_app();
        app.model_dirs = vec![PathBuf::from("/srv/models")];
        let fx = run_line(&mut app, "/model");
        // The model in use goes with the search: listed, marked, its folder searched.
        assert_eq!(
            fx,
            vec![Effect::DiscoverModels {
                model_dirs: vec![PathBuf::from("/srv/models")],
                in_use: Some(app.model_path.clone()),
            }]
        );
        assert!(!app.model_path.as_os_str().is_empty());
        assert_eq!(app.mode, Mode::Picker);
        assert_eq!(
            app.picker.as_ref().map(|p| p.purpose),
            Some(PickFor::Switch)
        );
        assert!(app.picker.as_ref().unwrap().found.is_none(), "searching");
        let ctrl_o = with(KeyCode::Char('o'), KeyModifiers::CONTROL);
        let mut app = ready_app();
        update(&mut app, Msg::Key(ctrl_o), now());
        assert_eq!(app.mode, Mode::Picker);
    }

    #[test]
    fn typing_filters_and_enter_switches_to_the_chosen_file() {
        let mut app = ready_app();
        open(&mut app, "/model");
        assert_eq!(app.picker.as_ref().unwrap().rows(), vec![0, 1, 2]);
        // `a` is typeable: it filters (llama-8b, tiny's "llama" architecture), no A/B.
        type_text(&mut app, "lla");
        assert_eq!(app.picker.as_ref().unwrap().rows(), vec![0, 2]);
        type_text(&mut app, " synth");
        assert_eq!(app.picker.as_ref().unwrap().rows(), vec![2]);
        update(&mut app, Msg::Key(key(KeyCode::Backspace)), now());
        assert_eq!(app.picker.as_ref().unwrap().filter, "lla synt");
        for _ in 0..5 {
            update(&mut app, Msg::Key(key(KeyCode::Backspace)), now());
        }
        assert_eq!(app.picker.as_ref().unwrap().filter, "lla");
        update(&mut app, Msg::Key(key(KeyCode::Down)), now());
        update(&mut app, Msg::Key(key(KeyCode::Down)), now());
        assert_eq!(app.picker.as_ref().unwrap().selected, 1, "clamped");
        let fx = update(&mut app, Msg::Key(key(KeyCode::Enter)), now());
        assert!(
            matches!(fx.as_slice(), [Effect::SwitchModel { path, .. }] if path == &PathBuf::from("/m/tiny.gguf")),
            "{fx:?}"
        );
        assert_eq!(app.mode, Mode::Chat);
        assert!(app.picker.is_none());
        assert!(app.full_repaint, "a closed overlay repaints fully");
        assert!(app.switching.is_some());
    }

    #[test]
    fn ctrl_a_or_alt_a_runs_ab_and_ab_opens_a_picker_whose_enter_runs_ab() {
        for (line, k) in [
            ("/model", with(KeyCode::Char('a'), KeyModifiers::CONTROL)),
            ("/model", with(KeyCode::Char('a'), KeyModifiers::ALT)),
            ("/ab", key(KeyCode::Enter)),
        ] {
            let (mut app, _) = answered_app();
            open(&mut app, line);
            update(&mut app, Msg::Key(key(KeyCode::Down)), now());
            let fx = update(&mut app, Msg::Key(k), now());
            assert!(
                matches!(fx.as_slice(), [Effect::Generate { model: Some(p), .. }] if p == &PathBuf::from("/m/qwen-0.5b.gguf")),
                "{line} {k:?}: {fx:?}"
            );
            assert_eq!(app.mode, Mode::Ab);
        }
    }

    #[test]
    fn esc_closes_and_an_empty_list_or_a_late_result_does_nothing() {
        let mut app = ready_app();
        run_line(&mut app, "/model");
        // Enter before the search is back: nothing to pick.
        assert!(update(&mut app, Msg::Key(key(KeyCode::Enter)), now()).is_empty());
        assert_eq!(app.mode, Mode::Picker);
        update(&mut app, Msg::Key(key(KeyCode::Esc)), now());
        assert_eq!(app.mode, Mode::Chat);
        assert!(app.picker.is_none());
        assert!(app.full_repaint);
        assert!(app.switching.is_none());
        update(&mut app, Msg::ModelsFound(found()), now());
        assert!(app.picker.is_none(), "a late result opens nothing");
        assert_eq!(app.mode, Mode::Chat);
        open(&mut app, "/model");
        type_text(&mut app, "nothing matches this");
        assert!(update(&mut app, Msg::Key(key(KeyCode::Enter)), now()).is_empty());
        assert_eq!(app.mode, Mode::Picker);
    }
}
