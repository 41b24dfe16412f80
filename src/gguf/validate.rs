//! What llama.cpp would choke on, found before llama.cpp sees the file.
//!
//! llama.cpp reports many defects of a model file not with an error but with `GGML_ASSERT`,
//! `abort()` or a C++ exception that nothing catches, which kills the whole process (and with
//! it a chat and its terminal). This module owns the checks of a parsed GGUF header that catch
//! those defects by class, not by example: the tensor data layout (what ggml's `gguf.cpp`
//! demands), the vocabulary (what `llama-vocab.cpp` asserts), the hyperparameters (what
//! `llama-model.cpp` divides by or indexes with) and sizes that overflow a C `int`. It is pure:
//! it reads a [`GgufHeader`] and imports nothing above `gguf`.
//!
//! The checks are conservative: a file that passes may still be refused by llama.cpp with an
//! ordinary error (that is reported as such), and a real model from the wild must pass, so
//! each check names a rule llama.cpp itself applies or a value no real model has.

use std::collections::HashSet;

use super::{GgufArray, GgufHeader, GgufValue};

/// llama.cpp's `LLAMA_MAX_LAYERS`.
pub(crate) const MAX_LAYERS: u64 = 512;
/// llama.cpp's `LLAMA_MAX_EXPERTS`.
pub(crate) const MAX_EXPERTS: u64 = 1024;
/// No model has a wider embedding; a larger value is a corrupt or hostile file.
pub(crate) const MAX_EMBEDDING_LENGTH: u64 = 1 << 18;
/// No model has more attention heads than this.
pub(crate) const MAX_HEADS: u64 = 1 << 14;
/// Token counts and positions are C `int`s in llama.cpp.
pub(crate) const MAX_CONTEXT_LENGTH: u64 = (1 << 31) - 1;
/// Vocabulary sizes are C `int`s too, and no real vocabulary comes near this.
pub(crate) const MAX_VOCAB: usize = 1 << 24;

/// Tokenizer models tokscope chats with: llama.cpp's generative vocabularies.
pub(crate) const KNOWN_TOKENIZERS: &[&str] = &[
    "llama",
    "gpt2",
    "t5",
    "rwkv",
    "plamo2",
    "gemma4",
    "whitespace",
];

/// One defect of a model file, named by its class.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Defect {
    /// The tensor data section does not have the layout ggml's reader demands.
    #[error("its tensor data is laid out wrongly: {0}")]
    TensorLayout(String),
    /// The vocabulary is missing or empty.
    #[error("it has no vocabulary ({0})")]
    NoVocabulary(String),
    /// Two vocabulary entries have the same text.
    #[error("its vocabulary has two tokens with the same text {text:?} (ids {first} and {second}); llama.cpp aborts on such a vocabulary")]
    DuplicateToken {
        /// The repeated text (control characters escaped by `{:?}`).
        text: String,
        /// The first id.
        first: usize,
        /// The second id.
        second: usize,
    },
    /// The tokenizer model is one tokscope cannot chat with.
    #[error("its tokenizer model is {0}")]
    Tokenizer(String),
    /// An SPM vocabulary lacks a byte token, so some text cannot be tokenized.
    #[error("its Unigram (T5) character map (tokenizer.ggml.precompiled_charsmap) {0}; llama.cpp throws on text that reaches that entry (a crash)")]
    CharsMap(String),
    #[error("its SentencePiece vocabulary has no byte token <0x{0:02X}>; llama.cpp aborts when text needs it (e.g. a typed \"é\")")]
    MissingByteToken(u8),
    /// An RWKV vocabulary lacks a one-byte token, so llama.cpp's RWKV tokenizer cannot start
    /// a token at that byte.
    #[error("its RWKV vocabulary has no one-byte token for the byte 0x{0:02X}; llama.cpp's RWKV tokenizer then loops without end (or emits an invalid token) on text containing it")]
    RwkvByteToken(u8),
    /// A PLaMo-2 vocabulary whose suffix table llama.cpp cannot build in reasonable time.
    #[error("its PLaMo-2 vocabulary makes llama.cpp build {suffix_chars} characters of token suffixes at load (token {id} alone has {chars} characters; the limit is {PLAMO2_SUFFIX_CHARS}): the load would run for minutes")]
    Plamo2Suffixes {
        /// Σ n(n−1)/2 over the tokens' lengths in characters.
        suffix_chars: u64,
        /// The longest token's id.
        id: usize,
        /// Its length in characters.
        chars: usize,
    },
    /// A special token id points outside the vocabulary.
    #[error("{key} is {id} but the vocabulary has {n_vocab} tokens")]
    SpecialTokenOutOfRange {
        /// The metadata key.
        key: String,
        /// Its value.
        id: u64,
        /// The vocabulary size.
        n_vocab: usize,
    },
    /// A hyperparameter has an impossible value.
    #[error("{key} is {value}: {why}")]
    Hyperparameter {
        /// The metadata key.
        key: String,
        /// Its value as written.
        value: String,
        /// What is wrong with it.
        why: String,
    },
}

/// Every check, in order; the first defect found.
pub(crate) fn validate_model(header: &GgufHeader) -> Result<(), Defect> {
    validate_layout(header)?;
    validate_hyperparameters(header)?;
    validate_vocabulary(header)
}

/// The data section's layout as ggml's `gguf.cpp` demands it: in file order, each tensor starts
/// exactly where the previous one ended, padded to the alignment. A file that passes has no
/// overlapping tensors, so its size bounds the data it describes (what `synth --like` relies on).
pub(crate) fn validate_layout(header: &GgufHeader) -> Result<(), Defect> {
    let mut expected: u64 = 0;
    for t in &header.tensors {
        if t.offset_bytes != expected {
            return Err(Defect::TensorLayout(format!(
                "tensor {:?} starts at data offset {} but the tensors before it end at {expected} (overlapping or gapped tensors)",
                t.name, t.offset_bytes
            )));
        }
        let Some(n_bytes) = t.n_bytes() else {
            return Err(Defect::TensorLayout(format!(
                "tensor {:?} has ggml type {} which this build does not know",
                t.name, t.ggml_type.0
            )));
        };
        expected = n_bytes
            .checked_add(header.alignment_bytes - 1)
            .map(|n| n / header.alignment_bytes * header.alignment_bytes)
            .and_then(|n| expected.checked_add(n))
            .ok_or_else(|| {
                Defect::TensorLayout(format!("tensor {:?} is impossibly large", t.name))
            })?;
    }
    Ok(())
}

/// A count that may be a scalar or a per-layer array (llama.cpp's `get_key_or_arr`): every
/// value in it.
fn counts(v: &GgufValue) -> Option<Vec<u64>> {
    match v {
        GgufValue::Array(GgufArray::U32(a)) => Some(a.iter().map(|&x| u64::from(x)).collect()),
        GgufValue::Array(GgufArray::I32(a)) => a.iter().map(|&x| u64::try_from(x).ok()).collect(),
        GgufValue::Array(GgufArray::U64(a)) => Some(a.clone()),
        GgufValue::Array(GgufArray::I64(a)) => a.iter().map(|&x| u64::try_from(x).ok()).collect(),
        other => other.as_u64().map(|x| vec![x]),
    }
}

fn bad(key: &str, value: impl std::fmt::Display, why: impl Into<String>) -> Defect {
    Defect::Hyperparameter {
        key: key.to_owned(),
        value: value.to_string(),
        why: why.into(),
    }
}

fn count_of(header: &GgufHeader, key: &str) -> Result<Option<Vec<u64>>, Defect> {
    match header.get(key) {
        None => Ok(None),
        Some(v) => counts(v)
            .map(Some)
            .ok_or_else(|| bad(key, format!("{v:?}"), "it must be a non-negative integer")),
    }
}

/// Layer, head and embedding counts, sizes that fit a C `int`, and finite positive norm
/// epsilons and RoPE bases.
pub(crate) fn validate_hyperparameters(header: &GgufHeader) -> Result<(), Defect> {
    let arch = architecture(header)?;
    let key = |k: &str| format!("{arch}.{k}");
    let n_layer = check_layer_count(header, &key("block_count"))?;
    let n_embd = first_in(
        header,
        &key("embedding_length"),
        MAX_EMBEDDING_LENGTH,
        format!("an embedding has between 1 and {MAX_EMBEDDING_LENGTH} dimensions"),
    )?;
    check_head_counts(header, arch, n_layer, n_embd)?;
    check_head_sizes(header, arch)?;
    first_in(
        header,
        &key("context_length"),
        MAX_CONTEXT_LENGTH,
        format!("llama.cpp counts positions in a C int (1 to {MAX_CONTEXT_LENGTH})"),
    )?;
    check_expert_counts(header, arch)?;
    check_floats(header, arch)
}

/// The architecture the file names (`general.architecture`), which prefixes every other key.
fn architecture(header: &GgufHeader) -> Result<&str, Defect> {
    header
        .get("general.architecture")
        .and_then(GgufValue::as_str)
        .ok_or_else(|| {
            bad(
                "general.architecture",
                "missing",
                "llama.cpp needs the architecture to load the file",
            )
        })
}

/// The first value of the count `key`, when present: between 1 and `max`, else refused with
/// `why` (the embedding and context lengths: a wider embedding is a corrupt or hostile file,
/// and llama.cpp counts positions in a C `int`).
fn first_in(header: &GgufHeader, key: &str, max: u64, why: String) -> Result<Option<u64>, Defect> {
    let Some(v) = count_of(header, key)? else {
        return Ok(None);
    };
    let n = v.first().copied().unwrap_or(0);
    if n == 0 || n > max {
        return Err(bad(key, n, why));
    }
    Ok(Some(n))
}

/// The block count, when present: between 1 and `MAX_LAYERS`, and above every layer that has
/// tensors.
fn check_layer_count(header: &GgufHeader, layers_key: &str) -> Result<Option<u64>, Defect> {
    let why = format!("a model has between 1 and {MAX_LAYERS} layers");
    let n_layer = first_in(header, layers_key, MAX_LAYERS, why)?;
    // The layers that have tensors: a block count beyond them would index missing layers.
    let layer = |t: &super::GgufTensorInfo| {
        t.name
            .strip_prefix("blk.")?
            .split('.')
            .next()?
            .parse::<u64>()
            .ok()
    };
    match (n_layer, header.tensors.iter().filter_map(layer).max()) {
        (Some(n), Some(h)) if h >= n => Err(bad(
            layers_key,
            n,
            format!("the file has tensors for layer {h}"),
        )),
        _ => Ok(n_layer),
    }
}

/// The attention head counts (scalar or per layer): one value per layer, at most `MAX_HEADS`,
/// dividing the embedding into whole heads, with key/value heads that divide them, and at
/// least one of each where the model has attention tensors.
fn check_head_counts(
    header: &GgufHeader,
    arch: &str,
    n_layer: Option<u64>,
    n_embd: Option<u64>,
) -> Result<(), Defect> {
    let key = |k: &str| format!("{arch}.{k}");
    let embd_key = key("embedding_length");
    let heads_key = key("attention.head_count");
    let kv_heads_key = key("attention.head_count_kv");
    let heads = count_of(header, &heads_key)?;
    let kv_heads = count_of(header, &kv_heads_key)?;
    let has_attention = header
        .tensors
        .iter()
        .any(|t| t.name.starts_with("blk.") && t.name.contains(".attn_q"));
    let explicit_head_size = header.get(&key("attention.key_length")).is_some();
    let Some(heads) = &heads else {
        if has_attention && n_embd.is_some() {
            return Err(bad(
                &heads_key,
                "missing",
                "the model has attention tensors but no head count",
            ));
        }
        return Ok(());
    };
    if let Some(n) = n_layer.filter(|&n| heads.len() > 1 && heads.len() as u64 != n) {
        return Err(bad(
            &heads_key,
            format!("{} values", heads.len()),
            format!("a per-layer list must have one value per layer ({n})"),
        ));
    }
    for (layer, &h) in heads.iter().enumerate() {
        if h > MAX_HEADS {
            return Err(bad(&heads_key, h, format!("at most {MAX_HEADS} heads")));
        }
        if h == 0 {
            if has_attention {
                return Err(bad(
                    &heads_key,
                    0,
                    "the model has attention tensors, so it needs at least one head",
                ));
            }
            continue;
        }
        if let (Some(e), false) = (n_embd, explicit_head_size) {
            if e % h != 0 {
                return Err(bad(
                    &heads_key,
                    h,
                    format!("it does not divide {embd_key} ({e}) into whole heads"),
                ));
            }
        }
        if let Some(kv) = &kv_heads {
            let k = kv.get(layer).or(kv.first()).copied().unwrap_or(h);
            if k > h || (k > 0 && h % k != 0) {
                return Err(bad(
                    &kv_heads_key,
                    k,
                    format!("it must divide {heads_key} ({h})"),
                ));
            }
            if k == 0 && has_attention {
                return Err(bad(
                    &kv_heads_key,
                    0,
                    "the model has attention tensors, so it needs at least one key/value head",
                ));
            }
        }
    }
    Ok(())
}

/// The key and value head sizes, when present: every value between 1 and
/// `MAX_EMBEDDING_LENGTH`.
fn check_head_sizes(header: &GgufHeader, arch: &str) -> Result<(), Defect> {
    for k in ["attention.key_length", "attention.value_length"] {
        let k = format!("{arch}.{k}");
        if let Some(v) = count_of(header, &k)? {
            if v.iter().any(|&x| x == 0 || x > MAX_EMBEDDING_LENGTH) {
                return Err(bad(&k, format!("{v:?}"), "a head has 1 or more dimensions"));
            }
        }
    }
    Ok(())
}

/// The expert counts, when present: at most `MAX_EXPERTS`, and no more experts used per token
/// than the model has.
fn check_expert_counts(header: &GgufHeader, arch: &str) -> Result<(), Defect> {
    let experts_key = format!("{arch}.expert_count");
    let first =
        |key: &str| Ok::<_, Defect>(count_of(header, key)?.and_then(|v| v.first().copied()));
    let experts = first(&experts_key)?;
    if let Some(n) = experts.filter(|&n| n > MAX_EXPERTS) {
        return Err(bad(
            &experts_key,
            n,
            format!("at most {MAX_EXPERTS} experts"),
        ));
    }
    let (used_key, n) = (format!("{arch}.expert_used_count"), experts.unwrap_or(0));
    match first(&used_key)? {
        Some(u) if u > n => Err(bad(
            &used_key,
            u,
            format!("more than the {n} experts the model has"),
        )),
        _ => Ok(()),
    }
}

/// Every float of the architecture is finite; epsilons and RoPE bases are positive.
fn check_floats(header: &GgufHeader, arch: &str) -> Result<(), Defect> {
    for (k, v) in &header.metadata {
        if !k.starts_with(&format!("{arch}.")) {
            continue;
        }
        let values: Vec<f64> = match v {
            GgufValue::F32(x) => vec![f64::from(*x)],
            GgufValue::F64(x) => vec![*x],
            GgufValue::Array(GgufArray::F32(a)) => a.iter().map(|&x| f64::from(x)).collect(),
            GgufValue::Array(GgufArray::F64(a)) => a.clone(),
            _ => continue,
        };
        let must_be_positive = k.ends_with("epsilon") || k.ends_with("freq_base");
        for x in values {
            if !x.is_finite() {
                return Err(bad(k, x, "it must be a finite number"));
            }
            if must_be_positive && x <= 0.0 {
                return Err(bad(k, x, "it must be greater than zero"));
            }
        }
    }
    Ok(())
}

/// The vocabulary: present, not empty, no two tokens with one text, a tokenizer model tokscope
/// can chat with, special token ids inside it, and every byte token of an SPM vocabulary.
pub(crate) fn validate_vocabulary(header: &GgufHeader) -> Result<(), Defect> {
    let model = match header.get("tokenizer.ggml.model") {
        None => {
            return Err(Defect::NoVocabulary(
                "tokenizer.ggml.model is missing".to_owned(),
            ))
        }
        Some(v) => v.as_str().ok_or_else(|| {
            Defect::Tokenizer(format!("{v:?}, not a name (tokenizer.ggml.model)"))
        })?,
    };
    match model {
        "none" | "no_vocab" => {
            return Err(Defect::NoVocabulary(format!(
                "tokenizer.ggml.model is {model:?}: the file cannot turn text into tokens"
            )))
        }
        "bert" => {
            return Err(Defect::Tokenizer(
                "\"bert\" (WordPiece): an encoder's vocabulary for embedding models, not a chat model's"
                    .to_owned(),
            ))
        }
        m if !KNOWN_TOKENIZERS.contains(&m) => {
            return Err(Defect::Tokenizer(format!(
                "{m:?}, which tokscope does not know (known: {})",
                KNOWN_TOKENIZERS.join(", ")
            )))
        }
        _ => {}
    }
    let no_vocab = |why: &str| Err(Defect::NoVocabulary(format!("tokenizer.ggml.tokens {why}")));
    let tokens = match header.get("tokenizer.ggml.tokens") {
        Some(GgufValue::Array(GgufArray::String(t))) if t.is_empty() => {
            return no_vocab("is empty")
        }
        Some(GgufValue::Array(GgufArray::String(t))) if t.len() > MAX_VOCAB => {
            let n = t.len();
            return no_vocab(&format!(
                "has {n} entries, more than the {MAX_VOCAB} tokscope accepts"
            ));
        }
        Some(GgufValue::Array(GgufArray::String(t))) => t,
        Some(_) => return no_vocab("is not a list of strings"),
        None => return no_vocab("is missing"),
    };
    let mut seen = std::collections::HashMap::with_capacity(tokens.len());
    for (id, text) in tokens.iter().enumerate() {
        if let Some(first) = seen.insert(text.as_str(), id) {
            return Err(Defect::DuplicateToken {
                text: text.clone(),
                first,
                second: id,
            });
        }
    }
    for (k, v) in &header.metadata {
        if k.starts_with("tokenizer.ggml.") && k.ends_with("_token_id") {
            if let Some(id) = v.as_u64() {
                if id >= tokens.len() as u64 && id != u64::from(u32::MAX) {
                    return Err(Defect::SpecialTokenOutOfRange {
                        key: k.clone(),
                        id,
                        n_vocab: tokens.len(),
                    });
                }
            }
        }
    }
    if model == "t5" {
        match header.get(CHARSMAP_KEY) {
            None => {}
            Some(GgufValue::Array(GgufArray::U8(bytes))) => check_charsmap(bytes)?,
            Some(GgufValue::Array(GgufArray::I8(bytes))) => {
                check_charsmap(&bytes.iter().map(|&b| b as u8).collect::<Vec<_>>())?
            }
            Some(_) => return Err(Defect::CharsMap("is not an array of bytes".to_owned())),
        }
    }
    if model == "rwkv" {
        let mut one_byte = [false; 256];
        for text in tokens {
            if let [b] = unescape_rwkv(text).as_slice() {
                one_byte[usize::from(*b)] = true;
            }
        }
        if let Some(b) = (0..=255u8).find(|&b| !one_byte[usize::from(b)]) {
            return Err(Defect::RwkvByteToken(b));
        }
    }
    if model == "plamo2" {
        check_plamo2_suffixes(tokens)?;
    }
    if model == "llama" {
        let texts: HashSet<&str> = tokens.iter().map(String::as_str).collect();
        for b in 0..=255u8 {
            let hex = format!("<0x{b:02X}>");
            let raw = (b < 0x80).then(|| char::from(b).to_string());
            let found =
                texts.contains(hex.as_str()) || raw.as_deref().is_some_and(|r| texts.contains(r));
            if !found {
                return Err(Defect::MissingByteToken(b));
            }
        }
    }
    Ok(())
}

/// llama.cpp's `llama_unescape_rwkv_token`, byte for byte: `\\t`, `\\n`, `\\r`, `\\xNN` (its
/// hex digits read as it reads them, lower case only) and `\\` before any other byte.
fn unescape_rwkv(escaped: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(escaped.len());
    let (mut escaping, mut hex_remaining, mut hex_acc) = (false, 0u8, 0u8);
    for &c in escaped.as_bytes() {
        // `c` is a C `char` there: signed.
        let signed = i32::from(c as i8);
        if hex_remaining != 0 {
            let value = if signed >= i32::from(b'a') {
                signed - i32::from(b'a') + 10
            } else {
                signed - i32::from(b'0')
            };
            hex_acc = ((i32::from(hex_acc) << 4) + value) as u8;
            hex_remaining -= 1;
            if hex_remaining == 0 {
                out.push(hex_acc);
                hex_acc = 0;
            }
            continue;
        }
        if escaping {
            match c {
                b't' => out.push(b'\t'),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                b'x' => hex_remaining = 2,
                other => out.push(other),
            }
            escaping = false;
            continue;
        }
        if c == b'\\' {
            escaping = true;
            continue;
        }
        out.push(c);
    }
    out
}

/// The most suffix text a PLaMo-2 vocabulary may make llama.cpp build: it stores every suffix
/// of every token and sorts them by their reversal (copying both strings per comparison). A
/// real vocabulary (100k tokens of a few characters) makes a few million; one token of 30,000
/// characters makes 450 million and its load ran past 120 s.
pub(crate) const PLAMO2_SUFFIX_CHARS: u64 = 1 << 26;

fn check_plamo2_suffixes(tokens: &[String]) -> Result<(), Defect> {
    let mut total = 0u64;
    let mut longest = (0usize, 0usize);
    for (id, text) in tokens.iter().enumerate() {
        let n = text.chars().count();
        if n > longest.1 {
            longest = (id, n);
        }
        let n = n as u64;
        total = total.saturating_add(n * n.saturating_sub(1) / 2);
    }
    if total > PLAMO2_SUFFIX_CHARS {
        return Err(Defect::Plamo2Suffixes {
            suffix_chars: total,
            id: longest.0,
            chars: longest.1,
        });
    }
    Ok(())
}

/// The Unigram tokenizer's normalization map: a double-array trie (darts-clone's XOR-compressed
/// units) and the replacement strings it points into.
const CHARSMAP_KEY: &str = "tokenizer.ggml.precompiled_charsmap";

/// Walks every state of the character map's trie that some input reaches, as llama.cpp's
/// `normalize_prefix` does (`llama-vocab.cpp`, `xcda_array_view`), and refuses a map where any
/// input would make it throw: an index outside the array, a replacement offset outside the
/// strings, a replacement without its terminating NUL. Linear in the states reached times the
/// 255 bytes that can follow each (a real T5 map: a few tens of millions of steps at most).
fn check_charsmap(bytes: &[u8]) -> Result<(), Defect> {
    let bad = |why: String| Err(Defect::CharsMap(why));
    let Some(head) = bytes.get(..4) else {
        return bad(format!(
            "is {} bytes, too short for its size field",
            bytes.len()
        ));
    };
    let blob = u64::from(u32::from_le_bytes([head[0], head[1], head[2], head[3]]));
    if blob + 4 >= bytes.len() as u64 {
        return bad(format!(
            "says its trie is {blob} bytes, but the map is {} bytes in all",
            bytes.len()
        ));
    }
    let blob = blob as usize;
    let units: Vec<u32> = bytes[4..4 + blob]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let strings = &bytes[4 + blob..];
    if units.is_empty() {
        return Ok(());
    }
    let unit = |i: u32| units.get(i as usize).copied();
    let base = |u: u32| (u >> 10) << ((u & (1 << 9)) >> 6);
    let outside = |i: u32| {
        Err(Defect::CharsMap(format!(
            "points at unit {i} of its {}-unit trie",
            units.len()
        )))
    };
    let Some(root) = unit(0) else {
        return outside(0);
    };
    let mut seen = vec![false; units.len()];
    let mut todo = vec![base(root)];
    while let Some(node) = todo.pop() {
        // A state past the end throws at the next byte of input.
        let Some(slot) = seen.get_mut(node as usize) else {
            return outside(node);
        };
        if std::mem::replace(slot, true) {
            continue;
        }
        for c in 1..=255u32 {
            let at = node ^ c;
            let Some(u) = unit(at) else {
                return outside(at);
            };
            if u & ((1 << 31) | 0xff) != c {
                continue;
            }
            let next = at ^ base(u);
            if (u >> 8) & 1 == 1 {
                let Some(value) = unit(next) else {
                    return outside(next);
                };
                let offset = (value & 0x7fff_ffff) as usize;
                match strings.get(offset..) {
                    None | Some([]) => {
                        return bad(format!(
                            "points at replacement offset {offset} of its {} bytes of strings",
                            strings.len()
                        ))
                    }
                    Some(rest) if !rest.contains(&0) => {
                        return bad(format!(
                            "has a replacement at offset {offset} without its terminating NUL"
                        ))
                    }
                    Some(_) => {}
                }
            }
            todo.push(next);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (The character map's walk is tested end to end in `tests/hostile.rs`, on crafted maps.)
    #[test]
    fn a_character_map_too_short_for_its_size_field_is_named() {
        let short = check_charsmap(&[255, 255, 0, 0, 1])
            .unwrap_err()
            .to_string();
        assert!(short.contains("says its trie is"), "{short}");
        let tiny = check_charsmap(&[1, 2]).unwrap_err().to_string();
        assert!(tiny.contains("too short"), "{tiny}");
    }
    use crate::gguf::{parse_metadata, GgmlType, GgufWriter};

    fn spm_tokens() -> Vec<String> {
        let mut t = vec!["<unk>".to_owned(), "<s>".to_owned(), "</s>".to_owned()];
        t.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
        t.push("▁hello".to_owned());
        t
    }

    fn model(edit: impl Fn(&mut Vec<(String, GgufValue)>)) -> GgufHeader {
        let mut kv = vec![
            (
                "general.architecture".to_owned(),
                GgufValue::String("llama".into()),
            ),
            ("llama.block_count".to_owned(), GgufValue::U32(2)),
            ("llama.embedding_length".to_owned(), GgufValue::U32(64)),
            ("llama.attention.head_count".to_owned(), GgufValue::U32(4)),
            (
                "llama.attention.head_count_kv".to_owned(),
                GgufValue::U32(2),
            ),
            ("llama.context_length".to_owned(), GgufValue::U32(2048)),
            (
                "llama.attention.layer_norm_rms_epsilon".to_owned(),
                GgufValue::F32(1e-5),
            ),
            (
                "tokenizer.ggml.model".to_owned(),
                GgufValue::String("llama".into()),
            ),
            (
                "tokenizer.ggml.tokens".to_owned(),
                GgufValue::Array(GgufArray::String(spm_tokens())),
            ),
            ("tokenizer.ggml.bos_token_id".to_owned(), GgufValue::U32(1)),
        ];
        edit(&mut kv);
        let mut w = GgufWriter::new();
        for (k, v) in kv {
            w.add_kv(&k, v).unwrap();
        }
        for layer in 0..2 {
            w.add_tensor(
                &format!("blk.{layer}.attn_q.weight"),
                &[64, 64],
                GgmlType(0),
                vec![0; 64 * 64 * 4],
            )
            .unwrap();
        }
        let mut bytes = Vec::new();
        w.write_to(&mut bytes, &mut |_| {}).unwrap();
        parse_metadata(&bytes).unwrap()
    }

    fn set(kv: &mut Vec<(String, GgufValue)>, key: &str, value: GgufValue) {
        kv.retain(|(k, _)| k != key);
        kv.push((key.to_owned(), value));
    }

    #[test]
    fn a_sound_model_passes() {
        validate_model(&model(|_| {})).unwrap();
    }

    #[test]
    fn each_hyperparameter_defect_is_named() {
        let cases: Vec<(&str, GgufValue, &str)> = vec![
            ("llama.block_count", GgufValue::U32(0), "block_count"),
            (
                "llama.block_count",
                GgufValue::U32(1_000_000_000),
                "block_count",
            ),
            ("llama.block_count", GgufValue::U32(1), "layer 1"),
            (
                "llama.embedding_length",
                GgufValue::U32(0),
                "embedding_length",
            ),
            ("llama.attention.head_count", GgufValue::U32(5), "divide"),
            ("llama.attention.head_count", GgufValue::U32(0), "head"),
            (
                "llama.attention.head_count_kv",
                GgufValue::U32(3),
                "head_count_kv",
            ),
            ("llama.context_length", GgufValue::U64(1 << 31), "C int"),
            ("llama.context_length", GgufValue::U32(u32::MAX), "C int"),
            (
                "llama.attention.layer_norm_rms_epsilon",
                GgufValue::F32(f32::NAN),
                "finite",
            ),
            (
                "llama.attention.layer_norm_rms_epsilon",
                GgufValue::F32(f32::INFINITY),
                "finite",
            ),
            (
                "llama.attention.layer_norm_rms_epsilon",
                GgufValue::F32(0.0),
                "greater than zero",
            ),
            (
                "llama.attention.layer_norm_rms_epsilon",
                GgufValue::F32(-1e-5),
                "greater than zero",
            ),
            ("llama.rope.freq_base", GgufValue::F32(f32::NAN), "finite"),
        ];
        for (key, value, expect) in cases {
            let h = model(|kv| set(kv, key, value.clone()));
            let e = validate_model(&h).expect_err(key).to_string();
            assert!(e.contains(expect), "{key}={value:?}: {e}");
        }
    }

    #[test]
    fn each_vocabulary_defect_is_named() {
        let mut dup = spm_tokens();
        dup[259] = "<0x05>".to_owned();
        let mut no_byte = spm_tokens();
        no_byte[3 + 0xC3] = "x".to_owned();
        let cases: Vec<(&str, GgufValue, &str)> = vec![
            (
                "tokenizer.ggml.tokens",
                GgufValue::Array(GgufArray::String(dup)),
                "same text",
            ),
            (
                "tokenizer.ggml.tokens",
                GgufValue::Array(GgufArray::String(vec![String::new(); 300])),
                "same text",
            ),
            (
                "tokenizer.ggml.tokens",
                GgufValue::Array(GgufArray::String(Vec::new())),
                "empty",
            ),
            (
                "tokenizer.ggml.tokens",
                GgufValue::Array(GgufArray::String(no_byte)),
                "<0xC3>",
            ),
            (
                "tokenizer.ggml.model",
                GgufValue::String("bert".into()),
                "bert",
            ),
            (
                "tokenizer.ggml.model",
                GgufValue::String("none".into()),
                "no vocabulary",
            ),
            (
                "tokenizer.ggml.model",
                GgufValue::String("klingon".into()),
                "does not know",
            ),
            (
                "tokenizer.ggml.bos_token_id",
                GgufValue::U32(100_000),
                "bos_token_id",
            ),
        ];
        for (key, value, expect) in cases {
            let h = model(|kv| set(kv, key, value.clone()));
            let e = validate_model(&h).expect_err(key).to_string();
            assert!(e.contains(expect), "{key}: {e}");
        }
    }

    /// A byte as convert_hf_to_gguf.py writes an RWKV World token: Python's `repr` of it.
    fn python_repr(b: u8) -> String {
        match b {
            b'\\' => "\\\\".to_owned(),
            b'\'' => "\\'".to_owned(),
            b'\t' => "\\t".to_owned(),
            b'\n' => "\\n".to_owned(),
            b'\r' => "\\r".to_owned(),
            0x20..=0x7e => char::from(b).to_string(),
            _ => format!("\\x{b:02x}"),
        }
    }

    #[test]
    fn rwkv_tokens_unescape_as_llama_cpp_reads_them() {
        for b in 0..=255u8 {
            assert_eq!(unescape_rwkv(&python_repr(b)), vec![b], "{b:#04x}");
        }
        assert_eq!(unescape_rwkv("\\xe6\\x97\\xa5"), "日".as_bytes());
        assert_eq!(unescape_rwkv("a\\qb"), b"aqb");
        // llama.cpp's quirks kept: upper-case hex is read as `c - '0'`, a trailing escape is
        // dropped.
        assert_eq!(unescape_rwkv("\\xA0"), vec![(17u8 << 4)]);
        assert_eq!(unescape_rwkv("ab\\"), b"ab");
    }

    #[test]
    fn an_rwkv_vocabulary_needs_every_byte_as_one_token() {
        let world: Vec<String> = std::iter::once("<s>".to_owned())
            .chain((0..=255u8).map(python_repr))
            .chain(["ab", "\\xe6\\x97\\xa5"].map(str::to_owned))
            .collect();
        let with = |tokens: Vec<String>| {
            model(|kv| {
                set(kv, "tokenizer.ggml.model", GgufValue::String("rwkv".into()));
                set(
                    kv,
                    "tokenizer.ggml.tokens",
                    GgufValue::Array(GgufArray::String(tokens.clone())),
                );
            })
        };
        validate_vocabulary(&with(world.clone())).unwrap();
        // No "z" alone but "zq": llama.cpp's tokenizer went back to the start of the text for
        // ever on "za".
        let mut prefix_only = world.clone();
        prefix_only[1 + usize::from(b'z')] = "zq".to_owned();
        let e = validate_vocabulary(&with(prefix_only)).unwrap_err();
        assert_eq!(e, Defect::RwkvByteToken(b'z'));
        assert!(e.to_string().contains("0x7A") && e.to_string().contains("RWKV"));
        // A byte no token starts with: llama.cpp emitted the token -1.
        let mut absent = world;
        absent[1 + 0xE6] = "<not a byte>".to_owned();
        assert_eq!(
            validate_vocabulary(&with(absent)),
            Err(Defect::RwkvByteToken(0xE6))
        );
    }

    #[test]
    fn a_plamo2_vocabulary_with_a_huge_token_is_refused() {
        let with = |last: String| {
            model(|kv| {
                set(
                    kv,
                    "tokenizer.ggml.model",
                    GgufValue::String("plamo2".into()),
                );
                let mut tokens = spm_tokens();
                *tokens.last_mut().unwrap() = last.clone();
                set(
                    kv,
                    "tokenizer.ggml.tokens",
                    GgufValue::Array(GgufArray::String(tokens)),
                );
            })
        };
        validate_vocabulary(&with("日".repeat(1000))).unwrap();
        let e = validate_vocabulary(&with("日".repeat(30_000)))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("PLaMo-2") && e.contains("token 259 alone has 30000 characters"),
            "{e}"
        );
    }

    #[test]
    fn overlapping_or_gapped_tensors_are_refused() {
        let mut h = model(|_| {});
        h.tensors[1].offset_bytes = 0;
        let e = validate_layout(&h).unwrap_err().to_string();
        assert!(e.contains("overlapping"), "{e}");
        let mut h = model(|_| {});
        h.tensors[1].offset_bytes += 32;
        assert!(validate_layout(&h).is_err());
    }
}
