//! A model's own chat template (`tokenizer.chat_template` in the GGUF, a Hugging Face Jinja
//! template), rendered as Hugging Face transformers' `apply_chat_template` renders it: Jinja
//! with `trim_blocks` and `lstrip_blocks`, loop controls, Python's string and dict methods,
//! `raise_exception`, `strftime_now`, a `tojson` that writes what Python's `json.dumps` writes,
//! and the variables `messages`, `add_generation_prompt`, `bos_token`, `eos_token`, `tools`
//! and `documents`. transformers (Python jinja2) is the reference: `tests/template_matrix.rs`
//! holds this renderer against it byte for byte (`scripts/template-reference.py`).
//!
//! A template comes from a file someone else wrote: rendering it is bounded. minijinja's fuel
//! counts every instruction and every 64 bytes a string operation creates, so a template that
//! loops for ever, recurses, or doubles a string until memory runs out stops with an error
//! naming the cause; the rendered prompt is capped besides. Nothing in a template can reach
//! the file system or the network (minijinja has no such functions, and none is added).

use std::fmt::Write as _;

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind};

use super::{ChatMessage, Role};

/// Instructions (and 64-byte units of created strings) one render may take: a long chat of a
/// hundred turns with a template that loops over every message twice takes a few hundred
/// thousand; a template that loops for ever stops here within about a second.
const RENDER_FUEL: u64 = 20_000_000;
/// The longest prompt a template may render, in bytes (past any context a model has: 2M
/// tokens at 4 bytes each would still be 8 MB).
pub(crate) const MAX_RENDERED_BYTES: usize = 32 << 20;
/// The longest template source taken (the largest real ones are about 20 KB).
pub(crate) const MAX_TEMPLATE_BYTES: usize = 1 << 20;
const NAME: &str = "chat_template";

/// Why a template cannot be used: it does not compile, it raised, it ran out of fuel, or it
/// rendered too much. The text names the template's own words where it has them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TemplateError(pub String);

impl From<Error> for TemplateError {
    fn from(e: Error) -> Self {
        let what = match e.kind() {
            ErrorKind::OutOfFuel => {
                "the template ran too long (a loop that does not end, or text that keeps growing)"
                    .to_string()
            }
            ErrorKind::InvalidOperation if e.detail().is_some_and(|d| d.starts_with(RAISED)) => {
                format!(
                    "the template raised an exception: {}",
                    e.detail().unwrap_or_default().trim_start_matches(RAISED)
                )
            }
            _ => {
                let mut s = e.kind().to_string();
                if let Some(d) = e.detail() {
                    let _ = write!(s, ": {d}");
                }
                s
            }
        };
        match e.line() {
            Some(line) => TemplateError(format!("{what} (template line {line})")),
            None => TemplateError(what),
        }
    }
}

/// The prefix `raise_exception` gives its error, so that it can be told apart.
const RAISED: &str = "raise_exception: ";

/// A compiled chat template with the model's BOS and EOS texts.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source`; an error names the template's syntax error and its line.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, TemplateError> {
        if source.len() > MAX_TEMPLATE_BYTES {
            return Err(TemplateError(format!(
                "the template is {} bytes, more than the {} taken",
                source.len(),
                MAX_TEMPLATE_BYTES
            )));
        }
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(TemplateError::from)?,
        );
        env.set_fuel(Some(RENDER_FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, without_generation_tags(source))?;
        Ok(Self {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        })
    }

    /// The prompt for `messages`, ending with the assistant's header when
    /// `add_generation_prompt` (as transformers and llama-server `--jinja` call it for a turn).
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| {
                let reasoning = m
                    .reasoning
                    .as_deref()
                    .map(|r| ("reasoning_content", Value::from(r)));
                Value::from_pairs(
                    [
                        ("role", Value::from(m.role.as_str())),
                        ("content", Value::from(m.content.as_str())),
                    ]
                    .into_iter()
                    .chain(reasoning),
                )
            })
            .collect();
        let ctx = Value::from_pairs([
            ("messages", Value::from(messages)),
            ("add_generation_prompt", Value::from(add_generation_prompt)),
            ("bos_token", Value::from(self.bos_token.as_str())),
            ("eos_token", Value::from(self.eos_token.as_str())),
            ("tools", Value::from(())),
            ("documents", Value::from(())),
        ]);
        let out = self.env.get_template(NAME)?.render(ctx)?;
        if out.len() > MAX_RENDERED_BYTES {
            return Err(TemplateError(format!(
                "the template rendered {} bytes, more than the {} a prompt may have",
                out.len(),
                MAX_RENDERED_BYTES
            )));
        }
        Ok(out)
    }

    /// Renders a one-message conversation: whether the template works at all, and puts the
    /// user's message in the prompt (a template that leaves it out would measure a prompt
    /// that is not the conversation).
    pub fn probe(&self) -> Result<(), TemplateError> {
        const PROBE: &str = "tokscope probe: hello";
        let prompt = self.render(&[ChatMessage::new(Role::User, PROBE)], true)?;
        if prompt.contains(PROBE) {
            Ok(())
        } else {
            Err(TemplateError(
                "the template leaves the user's message out of the prompt".into(),
            ))
        }
    }
}

/// transformers' `{% generation %}` … `{% endgeneration %}` (its AssistantTracker extension,
/// which only marks the assistant's text for training masks) as a plain block, whitespace
/// control markers kept.
fn without_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        let tag = &rest[at..];
        let Some(end) = tag.find("%}") else {
            break;
        };
        let inner = &tag[2..end];
        let (lead, body) = inner.split_at(usize::from(inner.starts_with(['-', '+'])));
        let (body, trail) = body.split_at(body.len() - usize::from(body.ends_with(['-', '+'])));
        let replaced = match body.trim() {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replaced {
            Some(word) => {
                let _ = write!(out, "{{%{lead} {word} {trail}%}}");
            }
            None => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("{RAISED}{message}"),
    ))
}

/// Python's `datetime.now().strftime(format)`, as transformers defines `strftime_now`.
fn strftime_now(format: String) -> Result<String, Error> {
    use chrono::format::{Item, StrftimeItems};
    if StrftimeItems::new(&format).any(|i| matches!(i, Item::Error)) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: `{format}` is not a strftime format"),
        ));
    }
    let mut out = String::new();
    write!(out, "{}", chrono::Local::now().format(&format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: `{format}` cannot be formatted"),
        )
    })?;
    Ok(out)
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=indent,
/// separators=separators, sort_keys=sort_keys)`, written as Python writes it (", " and ": "
/// between items without an indent, "," and ": " with one).
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) if v.kind() == ValueKind::Number => {
            Some(" ".repeat(usize::try_from(i64::try_from(v)?.clamp(0, 64)).unwrap_or(0)))
        }
        Some(v) => Some(v.to_string()),
    };
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let (item_sep, key_sep) = match separators.as_deref() {
        Some([item, key]) => (item.clone(), key.clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators is a pair (item, key)",
            ))
        }
        None if indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let style = JsonStyle {
        indent,
        item_sep,
        key_sep,
        sort_keys: sort_keys.unwrap_or(false),
        ensure_ascii: ensure_ascii.unwrap_or(false),
    };
    let mut out = String::new();
    style.write(&mut out, &value, 0)?;
    Ok(Value::from_safe_string(out))
}

struct JsonStyle {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
    ensure_ascii: bool,
}

impl JsonStyle {
    fn write(&self, out: &mut String, v: &Value, depth: usize) -> Result<(), Error> {
        if depth > 64 {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: nested too deep",
            ));
        }
        match v.kind() {
            ValueKind::Undefined | ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => out.push_str(&python_number(v)),
            ValueKind::String | ValueKind::Bytes | ValueKind::Plain | ValueKind::Invalid => {
                self.string(out, &v.to_string())
            }
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                self.container(out, ('[', ']'), items.len(), depth, |out, i| {
                    self.write(out, &items[i], depth + 1)
                })?;
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = v.try_iter()?.collect();
                if self.sort_keys {
                    keys.sort_by_key(|a| a.to_string());
                }
                self.container(out, ('{', '}'), keys.len(), depth, |out, i| {
                    self.string(out, &keys[i].to_string());
                    out.push_str(&self.key_sep);
                    self.write(out, &v.get_item(&keys[i])?, depth + 1)
                })?;
            }
            // Kinds added to minijinja later (non-exhaustive): written as their text.
            _ => self.string(out, &v.to_string()),
        }
        Ok(())
    }

    fn container(
        &self,
        out: &mut String,
        (open, close): (char, char),
        len: usize,
        depth: usize,
        mut item: impl FnMut(&mut String, usize) -> Result<(), Error>,
    ) -> Result<(), Error> {
        out.push(open);
        if len == 0 {
            out.push(close);
            return Ok(());
        }
        let newline = |out: &mut String, level: usize| {
            if let Some(indent) = &self.indent {
                out.push('\n');
                (0..level).for_each(|_| out.push_str(indent));
            }
        };
        for i in 0..len {
            if i > 0 {
                out.push_str(&self.item_sep);
            }
            newline(out, depth + 1);
            item(out, i)?;
        }
        newline(out, depth);
        out.push(close);
        Ok(())
    }

    /// A JSON string as Python's `json.dumps` writes it.
    fn string(&self, out: &mut String, s: &str) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ensure_ascii && !c.is_ascii()) => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        let _ = write!(out, "\\u{u:04x}");
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// A number as Python's `json.dumps` writes it: integers as they are, floats by `repr`.
fn python_number(v: &Value) -> String {
    if let Ok(i) = i64::try_from(v.clone()) {
        if !v.to_string().contains(['.', 'e', 'E']) {
            return i.to_string();
        }
    }
    let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else if f == f.trunc() && f.abs() < 1e16 {
        format!("{f:.1}")
    } else {
        // Rust's shortest round-trip form is Python's repr but for the exponent's sign.
        let s = format!("{f:?}");
        match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e:0>2}"),
            Some((m, e)) => format!("{m}e-{:0>2}", &e[1..]),
            None => s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(pairs: &[(Role, &str)]) -> Vec<ChatMessage> {
        pairs
            .iter()
            .map(|(r, c)| ChatMessage::new(*r, *c))
            .collect()
    }

    const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn chatml_renders_as_python_jinja_does() {
        let t = ChatTemplate::new(CHATML, "<s>", "</s>").unwrap();
        let out = t
            .render(
                &msgs(&[(Role::System, "Be brief."), (Role::User, "Hi")]),
                true,
            )
            .unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn blocks_are_trimmed_as_transformers_trims_them() {
        // trim_blocks drops the newline after a block tag; lstrip_blocks the indent before it.
        let src = "{% for m in messages %}\n    {% if m.role == 'user' %}\nU:{{ m.content }}\n    {% endif %}\n{% endfor %}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        assert_eq!(
            t.render(&msgs(&[(Role::User, "a"), (Role::User, "b")]), false)
                .unwrap(),
            "U:a\nU:b\n"
        );
    }

    #[test]
    fn python_methods_namespace_and_loop_controls_work() {
        let src = "{%- set ns = namespace(n=0) -%}{%- for m in messages -%}{%- if loop.index0 > 1 %}{% break %}{% endif -%}{%- set ns.n = ns.n + 1 -%}{{ m.content.strip().upper() }}|{{ m['content'].split('</think>')[-1].lstrip() }}|{%- endfor -%}{{ ns.n }}{{ bos_token }}";
        let t = ChatTemplate::new(src, "<s>", "").unwrap();
        let out = t
            .render(
                &msgs(&[
                    (Role::User, " a "),
                    (Role::Assistant, "<think>x</think> b"),
                    (Role::User, "c"),
                ]),
                false,
            )
            .unwrap();
        assert_eq!(out, "A|a |<THINK>X</THINK> B|b|2<s>");
    }

    #[test]
    fn tojson_writes_what_python_json_dumps_writes() {
        let src = "{{ {'a': 1, 'b': [1.5, 'é\"\n', none, true], 'c': {}} | tojson }}|{{ {'a': [1, 2]} | tojson(indent=2) }}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        assert_eq!(
            t.render(&[], false).unwrap(),
            "{\"a\": 1, \"b\": [1.5, \"é\\\"\\n\", null, true], \"c\": {}}|{\n  \"a\": [\n    1,\n    2\n  ]\n}"
        );
    }

    #[test]
    fn a_raised_exception_names_the_template_words() {
        let src = "{{ raise_exception('Conversation roles must alternate') }}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let e = t.probe().unwrap_err();
        assert!(
            e.0.contains("the template raised an exception: Conversation roles must alternate"),
            "{e}"
        );
    }

    #[test]
    fn a_template_that_never_ends_or_grows_without_bound_is_stopped() {
        for src in [
            "{% for i in range(1000000000) %}{{ i }}{% endfor %}",
            "{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}",
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        ] {
            let t = ChatTemplate::new(src, "", "").unwrap();
            let started = std::time::Instant::now();
            let e = t.probe().unwrap_err();
            assert!(!e.0.is_empty());
            assert!(started.elapsed().as_secs() < 30, "{src}: {e}");
        }
    }

    #[test]
    fn a_syntax_error_names_its_line() {
        let e = ChatTemplate::new("ok\n{% for %}", "", "").unwrap_err();
        assert!(e.0.contains("line 2"), "{e}");
    }

    #[test]
    fn generation_tags_become_plain_blocks() {
        assert_eq!(
            without_generation_tags("a{%- generation %}b{% endgeneration -%}c{{ x }}"),
            "a{%- if true %}b{% endif -%}c{{ x }}"
        );
        let t = ChatTemplate::new(
            "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}",
            "",
            "",
        )
        .unwrap();
        assert_eq!(t.render(&msgs(&[(Role::User, "q")]), false).unwrap(), "q");
    }

    #[test]
    fn strftime_now_formats_today_and_refuses_a_bad_format() {
        let t = ChatTemplate::new("{{ strftime_now('%Y') }}", "", "").unwrap();
        let year = t.render(&[], false).unwrap();
        assert_eq!(year.len(), 4, "{year}");
        let bad = ChatTemplate::new("{{ strftime_now('%Q%') }}", "", "").unwrap();
        assert!(bad.probe().is_err());
    }
}
