//! The model picker overlay: the filter, the models found (name, architecture, parameters,
//! quantization, size, synthetic mark, where; the path too when wide enough, and always the
//! chosen row's path below the list), how the search went, and the keys. Reads `app.picker`.

use ratatui::layout::Rect;
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::text::{one_line, truncate, width};
use super::{format, theme};
use crate::app::{App, PickFor, Picker};
use crate::discover::FoundModel;

/// Fixed columns: marker, arch, params, quant, size, synthetic, where (each with its gap).
const FIXED: [(&str, usize); 6] = [
    ("arch", 9),
    ("params", 7),
    ("quant", 9),
    ("size", 9),
    ("", 7),
    ("where", 11),
];
const MARKER_W: usize = 2;
const NAME_MIN_W: usize = 16;
const NAME_MAX_W: usize = 48;
/// A path column narrower than this is left out (the chosen path is shown below the list).
const PATH_MIN_W: usize = 24;

pub(super) fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let Some(p) = &app.picker else {
        return;
    };
    let title = match p.purpose {
        PickFor::Switch => " Models: Enter switches the chat's model ",
        PickFor::Ab => " Models: Enter answers the last prompt again with it (A/B) ",
    };
    let inner = super::screen_block(frame, area, title.to_string());
    if inner.height < 5 || inner.width < 20 {
        return;
    }
    let w = inner.width as usize;
    let rows = p.rows();
    let total = p.found.as_ref().map_or(0, |f| f.models.len());
    let mut lines = vec![Line::from(vec![
        Span::styled("filter: ", theme::DIM),
        Span::styled(one_line(&p.filter), theme::BOLD),
        Span::styled("▏", theme::STREAM_CURSOR),
        Span::styled(
            match &p.found {
                Some(_) => format!("   {} of {total}", rows.len()),
                None => String::new(),
            },
            theme::DIM,
        ),
    ])];
    let (name_w, path_w) = name_and_path_widths(w);
    lines.push(Line::styled(header(name_w, path_w), theme::HELP_SECTION));
    // Below the rows: the chosen path, the search's outcome, the keys.
    let list_h = (inner.height as usize).saturating_sub(lines.len() + 3);
    match &p.found {
        None => lines.push(Line::styled("searching…", theme::WAITING)),
        Some(found) if found.models.is_empty() => lines.push(Line::styled(
            "no GGUF file found: put models in a folder listed in config's model_dirs, or type /model PATH",
            theme::DIM,
        )),
        Some(_) if rows.is_empty() => {
            lines.push(Line::styled("nothing matches the filter", theme::DIM));
        }
        Some(found) => {
            let selected = p.selected.min(rows.len() - 1);
            let first = (selected + 1).saturating_sub(list_h);
            for (at, &i) in rows.iter().enumerate().skip(first).take(list_h) {
                lines.push(row(&found.models[i], at == selected, name_w, path_w));
            }
        }
    }
    let list_end = 2 + list_h;
    lines.resize(list_end.max(lines.len()), Line::default());
    lines.push(chosen_path(p, w));
    lines.push(Line::styled(truncate(&outcome(p), w), theme::DIM));
    lines.push(keys(p.purpose, w));
    frame.render_widget(Paragraph::new(lines), inner);
}

fn name_and_path_widths(w: usize) -> (usize, usize) {
    let fixed: usize = MARKER_W + FIXED.iter().map(|(_, cw)| cw).sum::<usize>();
    let rest = w.saturating_sub(fixed);
    let name_w = rest.clamp(NAME_MIN_W.min(rest), NAME_MAX_W);
    let path_w = rest.saturating_sub(name_w + 1);
    if path_w >= PATH_MIN_W {
        (name_w, path_w)
    } else {
        (rest, 0)
    }
}

fn cell(text: &str, w: usize) -> String {
    let t = truncate(&one_line(text), w.saturating_sub(1));
    let pad = w.saturating_sub(width(&t));
    format!("{t}{}", " ".repeat(pad))
}

/// `…` and the end of `path`, in at most `w` columns (a path's end tells files apart).
fn tail(path: &str, w: usize) -> String {
    if width(path) <= w {
        return path.to_string();
    }
    let mut tails = path.char_indices().map(|(start, _)| &path[start..]);
    let tail = tails.find(|t| width(t) < w);
    tail.map_or_else(String::new, |t| format!("…{t}"))
}

/// A row of the list (or its header): the marker, then each column's cell.
fn columns(marker: &str, name: &str, fixed: [String; 6], name_w: usize, path: &str) -> String {
    let cells: String = FIXED
        .iter()
        .zip(fixed)
        .map(|((_, cw), v)| cell(&v, *cw))
        .collect();
    format!("{marker}{}{cells}{path}", cell(name, name_w))
}

fn header(name_w: usize, path_w: usize) -> String {
    let path = if path_w > 0 { "path" } else { "" };
    let heads = FIXED.map(|(h, _)| h.to_string());
    columns(&" ".repeat(MARKER_W), "name", heads, name_w, path)
}

fn row(m: &FoundModel, selected: bool, name_w: usize, path_w: usize) -> Line<'static> {
    let values = [
        m.architecture.clone(),
        format::params(m.n_params),
        m.quantization.clone(),
        format::bytes(m.size_bytes),
        // The model in use is marked; a synthetic file says so otherwise.
        match (m.in_use, m.synthetic) {
            (true, _) => "in use",
            (false, true) => "synth",
            (false, false) => "",
        }
        .to_string(),
        m.origin.label().to_string(),
    ];
    let path = if path_w > 0 {
        tail(&one_line(&m.path.to_string_lossy()), path_w)
    } else {
        String::new()
    };
    let marker = if selected { "▶ " } else { "  " };
    let s = columns(marker, &m.name, values, name_w, &path);
    let style = if selected {
        theme::BOLD.add_modifier(Modifier::REVERSED)
    } else if m.synthetic {
        theme::DIM
    } else {
        theme::TEXT
    };
    Line::styled(s, style)
}

fn chosen_path(p: &Picker, w: usize) -> Line<'static> {
    p.chosen().map_or_else(Line::default, |m| {
        let path = one_line(&m.path.to_string_lossy());
        let shown = tail(&path, w.saturating_sub(6));
        Line::from(vec![
            Span::styled("path: ", theme::DIM),
            Span::styled(shown, theme::TEXT),
        ])
    })
}

/// How the search went: its time, files skipped, and whether it was cut short.
fn outcome(p: &Picker) -> String {
    let Some(found) = &p.found else {
        return "searching tokscope's data dir, model_dirs, the Hugging Face cache, LM Studio and ollama…".into();
    };
    let mut s = format!(
        "{} found in {}",
        found.models.len(),
        format::secs(found.elapsed)
    );
    if found.skipped > 0 {
        s.push_str(&format!(
            "; {} skipped (unreadable or not GGUF)",
            found.skipped
        ));
    }
    if let Some(why) = &found.cut_short {
        s.push_str(&format!("; {why}"));
    }
    s
}

fn keys(purpose: PickFor, w: usize) -> Line<'static> {
    let enter = match purpose {
        PickFor::Switch => "switch",
        PickFor::Ab => "A/B",
    };
    let parts = [
        ("type", "filter"),
        ("↑↓", "choose"),
        ("Enter", enter),
        ("Ctrl+A/Alt+A", "A/B"),
        ("Esc", "close"),
    ];
    let mut spans = Vec::new();
    let mut used = 0;
    for (k, what) in parts {
        let piece = width(k) + 1 + width(what) + 2;
        if used + piece > w {
            break;
        }
        used += piece;
        spans.push(Span::styled(k, theme::KEY));
        spans.push(Span::styled(format!(" {what}  "), theme::DIM));
    }
    Line::from(spans)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_keep_their_end_and_columns_fit() {
        assert_eq!(tail("/a/b/model.gguf", 40), "/a/b/model.gguf");
        let t = tail("/very/long/folder/name/model-q4.gguf", 16);
        assert!(t.starts_with('…') && t.ends_with("model-q4.gguf"), "{t}");
        assert!(width(&t) <= 16);
        for w in [20usize, 60, 78, 118, 200] {
            let (name_w, path_w) = name_and_path_widths(w);
            let fixed: usize = MARKER_W + FIXED.iter().map(|(_, cw)| cw).sum::<usize>();
            assert!(fixed + name_w + path_w <= w.max(fixed), "{w}");
        }
    }
}
