//! The one writer of each output format the measuring commands print (bench, its
//! speculative sweep and `--run-vs-tg`, compare, load, results): Markdown tables with padded
//! columns, CSV with every cell escaped, JSON arrays and JSON lines from serde rows. What goes
//! in the rows is each feature's; how a row is written is here.

use serde::Serialize;
use serde_json::Value;

#[derive(Clone, Copy)]
pub(crate) enum Align {
    Left,
    Right,
}

/// A Markdown table with padded columns (`---:` marks the right-aligned ones), padded by
/// terminal display width so the bars line up in a terminal too (a CJK file name is two
/// columns a character).
pub(crate) fn table(headers: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    let cols = |text: &str| unicode_width::UnicodeWidthStr::width(text);
    let width = |i: usize| {
        rows.iter()
            .filter_map(|r| r.get(i))
            .chain(std::iter::once(&headers[i].0.to_string()))
            .map(|c| cols(c))
            .max()
            .unwrap_or(1)
            .max(3)
    };
    let widths: Vec<usize> = (0..headers.len()).map(width).collect();
    let pad = |text: &str, i: usize| {
        let fill = " ".repeat(widths[i].saturating_sub(cols(text)));
        match headers[i].1 {
            Align::Left => format!("{text}{fill}"),
            Align::Right => format!("{fill}{text}"),
        }
    };
    let line = |cells: Vec<String>| format!("| {} |\n", cells.join(" | "));
    let mut out = line(
        headers
            .iter()
            .enumerate()
            .map(|(i, (h, _))| pad(h, i))
            .collect(),
    );
    out.push_str(&line(
        headers
            .iter()
            .enumerate()
            .map(|(i, (_, a))| match a {
                Align::Left => "-".repeat(widths[i]),
                Align::Right => format!("{}:", "-".repeat(widths[i] - 1)),
            })
            .collect(),
    ));
    for row in rows {
        out.push_str(&line(
            row.iter().enumerate().map(|(i, c)| pad(c, i)).collect(),
        ));
    }
    out
}

/// The cells of one Markdown table line, trimmed (`| a | b |` → `["a", "b"]`); a line that
/// is not a table row gives none.
#[cfg(test)]
pub(crate) fn cells(line: &str) -> Vec<&str> {
    match line
        .trim()
        .strip_prefix('|')
        .and_then(|l| l.strip_suffix('|'))
    {
        Some(inner) => inner.split('|').map(str::trim).collect(),
        None => Vec::new(),
    }
}

pub(crate) fn cell(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) if items.iter().all(Value::is_number) => items
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(";"),
        Some(other) => other.to_string(),
    }
}

pub(crate) fn csv_escape(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// CSV text from rows of (column, value) pairs: a header from the first row's columns, then a
/// line per row, every cell escaped.
pub(crate) fn csv_lines(rows: &[Vec<(String, String)>]) -> String {
    let line = |cells: Vec<String>| format!("{}\n", cells.join(","));
    let mut out = String::new();
    if let Some(first) = rows.first() {
        out.push_str(&line(first.iter().map(|(k, _)| csv_escape(k)).collect()));
    }
    for fields in rows {
        out.push_str(&line(fields.iter().map(|(_, v)| csv_escape(v)).collect()));
    }
    out
}

/// Rows as one pretty-printed JSON array, with a final newline.
pub(crate) fn json<T: Serialize>(rows: &[T]) -> Result<String, serde_json::Error> {
    Ok(format!("{}\n", serde_json::to_string_pretty(rows)?))
}

/// Rows as JSON lines: one compact object per line.
pub(crate) fn json_lines<T: Serialize>(rows: &[T]) -> Result<String, serde_json::Error> {
    let mut out = String::new();
    for row in rows {
        out.push_str(&serde_json::to_string(row)?);
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_pads_and_marks_right_aligned_columns() {
        let t = table(
            &[("name", Align::Left), ("n", Align::Right)],
            &[
                vec!["a".into(), "10".into()],
                vec!["bbbbb".into(), "2".into()],
            ],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "| name  |   n |");
        assert_eq!(lines[1], "| ----- | --: |");
        assert_eq!(lines[2], "| a     |  10 |");
        assert_eq!(lines[3], "| bbbbb |   2 |");
    }

    #[test]
    fn csv_quotes_only_what_needs_it_and_doubles_quotes() {
        let rows = vec![vec![
            ("a,b".to_string(), "x".to_string()),
            ("c".to_string(), "say \"hi\"".to_string()),
        ]];
        assert_eq!(csv_lines(&rows), "\"a,b\",c\nx,\"say \"\"hi\"\"\"\n");
    }

    #[test]
    fn json_lines_has_one_object_per_line() {
        let text = json_lines(&[serde_json::json!({"a": 1}), serde_json::json!({"a": 2})]).unwrap();
        assert_eq!(text, "{\"a\":1}\n{\"a\":2}\n");
        assert!(json(&[1, 2]).unwrap().ends_with("]\n"));
    }
}
