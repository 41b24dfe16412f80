//! The status line: engine state, the synthetic-weights warning, model name, architecture,
//! parameters, quantization, file size, backend and device, GPU layers and context use. When
//! the terminal is narrow, the least important parts are shortened and then left out.

use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use super::text::{one_line, truncate, width};
use super::view::View;
use super::{format, theme};
use crate::app::conversation::TurnPhase;
use crate::app::{App, EngineStatus};
use crate::engine::ModelInfo;

const SEPARATOR: &str = " │ ";

struct Segment {
    text: String,
    /// Shorter forms, longest first, each with its rank: when the line is too long and this
    /// segment's turn comes, the next one is used.
    shorter: Vec<(String, u8)>,
    style: Style,
    /// When the line is too long, the available step with the highest rank is taken first:
    /// using the next shorter form or leaving the segment out (`drop_rank`; `None` for
    /// segments that always stay).
    drop_rank: Option<u8>,
}

impl Segment {
    fn new(text: String, style: Style, drop_rank: Option<u8>) -> Self {
        Self {
            text,
            shorter: Vec::new(),
            style,
            drop_rank,
        }
    }

    /// A shorter form, taken at `rank`; kept only when it is shorter than the last form.
    fn or_short(mut self, short: String, rank: u8) -> Self {
        let last = self.shorter.last().map_or(&self.text, |(t, _)| t);
        if width(&short) < width(last) {
            self.shorter.push((short, rank));
        }
        self
    }
}

/// The engine's state in a word or two, with its badge style.
pub(crate) fn engine_state(app: &App) -> (String, Style) {
    if let Some(s) = &app.switching {
        let word = if s.cancelling {
            "cancelling"
        } else {
            "switching"
        };
        let state = format!("{word} {}%", format::percent(s.progress));
        return (state, theme::STATE_BUSY);
    }
    match &app.engine {
        EngineStatus::Loading {
            stage,
            progress,
            read,
        } => (
            match stage {
                crate::engine::LoadStage::Weights => {
                    let figures = crate::metrics::LoadRead::describe(read.as_ref(), *progress);
                    format!("{} {figures}", stage.short())
                }
                _ => format!("{}…", stage.short()),
            },
            theme::STATE_BUSY,
        ),
        EngineStatus::Failed(_) => ("error".to_string(), theme::STATE_ERROR),
        EngineStatus::Ready => match app.conversation.active().map(|a| (&a.phase, a.stopping)) {
            Some((_, true)) => ("stopping…".to_string(), theme::STATE_BUSY),
            Some((phase, false)) => match phase {
                TurnPhase::Queued => ("queued".to_string(), theme::STATE_BUSY),
                TurnPhase::Prefill => ("prefill".to_string(), theme::STATE_BUSY),
                _ => ("streaming".to_string(), theme::STATE_BUSY),
            },
            None => match app
                .conversation
                .exchanges
                .last()
                .and_then(|e| e.assistant.as_ref())
                .map(|a| &a.phase)
            {
                Some(TurnPhase::Stopped) => ("stopped".to_string(), theme::STATE_STOPPED),
                Some(TurnPhase::Failed(_)) => ("turn failed".to_string(), theme::STATE_ERROR),
                _ => ("ready".to_string(), theme::STATE_READY),
            },
        },
    }
}

/// A device as the engine lists it, `NAME (BACKEND: DESCRIPTION)`, shortened to its
/// description (`NVIDIA H200`); other forms are kept whole.
fn device_name(listed: &str) -> String {
    let described = listed
        .split_once(": ")
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .filter(|d| !d.is_empty());
    one_line(described.unwrap_or(listed))
}

/// Backend, and the device it runs on when that is not the CPU.
fn device(info: &ModelInfo) -> Segment {
    let backend = one_line(&info.backend);
    let gpu = info
        .devices
        .iter()
        .find(|d| !d.starts_with("CPU"))
        .filter(|_| info.backend != "CPU");
    match gpu {
        Some(d) => Segment::new(
            format!("{backend} · {}", truncate(&device_name(d), 28)),
            theme::STATUS_BAR,
            Some(40),
        )
        .or_short(backend, 47),
        None => Segment::new(backend, theme::STATUS_BAR, Some(40)),
    }
}

/// The name the file gives itself (`general.name`, as written: no other source is the
/// model's own), whole where there is room, then at 32 and 14 columns.
fn name_segment(name: &str) -> Segment {
    let name = one_line(name);
    Segment::new(truncate(&name, 64), theme::STATUS_NAME, Some(10))
        .or_short(truncate(&name, 32), 57)
        .or_short(truncate(&name, 14), 15)
}

fn segments(app: &App, view: &View) -> Vec<Segment> {
    let (state, state_style) = engine_state(app);
    let mut out = vec![Segment::new(format!(" {state} "), state_style, None)];
    let Some(info) = &app.model else {
        let file = app
            .model_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let file = one_line(&file);
        out.push(
            Segment::new(file.clone(), theme::STATUS_NAME, Some(10))
                .or_short(truncate(&file, 16), 15),
        );
        return out;
    };
    if info.synthetic {
        out.push(
            Segment::new(
                format!(" ⚠ {} ", ModelInfo::SYNTHETIC_LABEL),
                theme::SYNTHETIC,
                None,
            )
            .or_short(" ⚠ SYNTHETIC ".to_string(), 35),
        );
    }
    out.push(name_segment(&info.name));
    let plain = |text: String, drop: u8| Segment::new(text, theme::STATUS_BAR, Some(drop));
    let total = view
        .n_ctx
        .map_or_else(|| "—".to_string(), |t| t.to_string());
    if info.backend == crate::remote::REMOTE_BACKEND {
        // A server's model: its name, where it is, the context this chat uses; the file,
        // parameters and layers are the server's business.
        out.push(device(info));
        out.push(plain(format!("ctx {}/{total}", view.context_used), 20));
        return out;
    }
    out.push(plain(one_line(&info.architecture), 60));
    out.push(plain(format::params(info.n_params), 31));
    out.push(plain(one_line(&info.quantization), 30));
    out.push(plain(format::bytes(info.file_size_bytes), 52));
    // The reference loaded beside the model (`--ref`, `/ref`): its size, and on a GPU where
    // llama.cpp put it.
    if let Some(r) = app.reference_loaded() {
        let size = format!("ref {}", format::bytes(r.reference_file_bytes));
        if info.backend == "CPU" {
            out.push(plain(size, 54));
        } else {
            out.push(
                plain(format!("{size} · ngl {}", r.reference_gpu_layers), 54).or_short(size, 56),
            );
        }
    }
    out.push(device(info));
    out.push(
        plain(format!("GPU layers {}", info.n_gpu_layers), 45)
            .or_short(format!("ngl {}", info.n_gpu_layers), 55),
    );
    out.push(plain(format!("ctx {}/{total}", view.context_used), 20));
    // Speculation's kernels change every figure (prefill is slower on them): said where the
    // figures are, dropped only after the file size.
    if info.kernels == "batch-invariant" {
        out.push(
            plain("batch-invariant kernels".to_string(), 50).or_short("b-inv".to_string(), 35),
        );
    }
    out
}

fn total_width(segments: &[Segment]) -> usize {
    segments.iter().map(|s| width(&s.text)).sum::<usize>()
        + width(SEPARATOR) * segments.len().saturating_sub(1)
}

/// Shorten, then leave out, the least important segments until the line fits.
fn fit(mut segments: Vec<Segment>, max: usize) -> Vec<Segment> {
    while total_width(&segments) > max {
        // (rank, index, shorten?) of the next step: the highest rank, the last of equals.
        let steps = segments.iter().enumerate().flat_map(|(i, s)| {
            let shorten = s.shorter.first().map(|(_, rank)| (*rank, i, true));
            [shorten, s.drop_rank.map(|rank| (rank, i, false))]
        });
        let best = steps.flatten().max_by_key(|(rank, ..)| *rank);
        match best {
            Some((_, i, true)) => {
                let (short, _) = segments[i].shorter.remove(0);
                segments[i].text = short;
            }
            Some((_, i, false)) => {
                segments.remove(i);
            }
            None => break,
        }
    }
    segments
}

pub(crate) fn draw(frame: &mut Frame, area: Rect, app: &App, view: &View) {
    let segments = fit(segments(app, view), area.width as usize);
    let mut spans = Vec::new();
    for (i, s) in segments.into_iter().enumerate() {
        if i > 0 {
            spans.push(Span::styled(SEPARATOR, theme::STATUS_SEPARATOR));
        }
        spans.push(Span::styled(s.text, s.style));
    }
    frame.render_widget(
        Paragraph::new(Line::from(spans)).style(theme::STATUS_BAR),
        area,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(segments: &[Segment]) -> Vec<&str> {
        segments.iter().map(|s| s.text.as_str()).collect()
    }

    fn line() -> Vec<Segment> {
        vec![
            Segment::new(" ready ".into(), theme::STATUS_BAR, None),
            name_segment("Meta Llama 3.1 8B Instruct Abliterated (synthetic)"),
            Segment::new("llama".into(), theme::STATUS_BAR, Some(60)),
            Segment::new("ctx 10/8192".into(), theme::STATUS_BAR, Some(20)),
        ]
    }

    #[test]
    fn a_long_model_name_is_whole_where_there_is_room_and_shortened_in_steps() {
        let wide = fit(line(), 200);
        assert_eq!(
            texts(&wide)[1],
            "Meta Llama 3.1 8B Instruct Abliterated (synthetic)"
        );
        // Narrower: the architecture goes first, then the name's 32-column form.
        let mid = fit(line(), 60);
        assert_eq!(
            texts(&mid),
            [" ready ", "Meta Llama 3.1 8B Instruct Abli…", "ctx 10/8192"]
        );
        let narrow = fit(line(), 40);
        assert_eq!(texts(&narrow), [" ready ", "Meta Llama 3.…"]);
    }
}
