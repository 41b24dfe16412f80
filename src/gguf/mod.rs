//! The GGUF v3 container: a small general writer and a header-only reader.
//!
//! This module owns the byte layout of a GGUF file (magic, version, typed key/value metadata,
//! tensor infos, alignment padding, the data section) and nothing about what a model means;
//! `synth` decides which keys and tensors a Llama model needs. The reader parses everything up
//! to the data section without touching tensor data, treats every length in the file as
//! untrusted, and answers garbage with an error rather than a panic or a huge allocation.
//!
//! Layout (all integers little-endian), as in ggml's `gguf.cpp`:
//! `"GGUF" u32:version u64:n_tensors u64:n_kv`, then `n_kv` × `string:key u32:type value`, then
//! `n_tensors` × `string:name u32:n_dims u64[n_dims]:ne u32:ggml_type u64:offset`, zero padding
//! to the alignment, then the tensor data, each tensor starting at a multiple of the alignment.
//! A string is `u64:len` + bytes; an array is `u32:elem_type u64:count` + elements.

pub(crate) mod kv_type;
pub(crate) mod validate;

use std::collections::HashSet;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Metadata key (bool, always `true`) that marks a file as synthetic.
pub const SYNTHETIC_METADATA_KEY: &str = "tokscope.synthetic";

/// The four bytes every GGUF file starts with.
pub(crate) const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// The format version this writer produces; the reader accepts versions 2 and 3.
pub(crate) const GGUF_VERSION: u32 = 3;
/// Metadata key holding the data alignment (u32). Absent means 32.
pub(crate) const ALIGNMENT_KEY: &str = "general.alignment";
/// The alignment llama.cpp assumes when [`ALIGNMENT_KEY`] is absent, and the one we write.
pub(crate) const DEFAULT_ALIGNMENT_BYTES: u32 = 32;
/// ggml's `GGML_MAX_NAME`: tensor names must be strictly shorter than this.
pub(crate) const MAX_TENSOR_NAME_BYTES: usize = 64;
/// The longest string the header reader keeps or passes over: real models' longest (a chat
/// template) is tens of kB. A longer one is a damaged or hostile file (a sparse file can
/// declare a 40 GB string in 4 kB on disk), refused before any allocation.
pub(crate) const MAX_STRING_BYTES: u64 = 16 << 20;
/// The most elements one metadata array may have: a vocabulary of 262,144 tokens and its
/// merges are far below it.
pub(crate) const MAX_ARRAY_ELEMENTS: u64 = 16 << 20;
/// The most the header reader allocates in all (strings, arrays, names): a 262k-token
/// vocabulary with its merges takes some 40 MB.
pub(crate) const MAX_HEADER_ALLOC_BYTES: u64 = 1 << 30;
/// ggml's `GGML_MAX_DIMS`.
pub(crate) const MAX_TENSOR_DIMS: usize = 4;

/// Errors from writing or reading GGUF files.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// A file could not be created, written, renamed or read.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The file the operation was on.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// Writing to a caller-supplied stream failed.
    #[error("writing GGUF data failed: {0}")]
    Stream(#[source] io::Error),
    /// A metadata key was empty or added twice.
    #[error("invalid metadata key {key:?}: {reason}")]
    InvalidKey {
        /// The offending key.
        key: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A tensor's name, shape or type cannot be written.
    #[error("invalid tensor {name:?}: {reason}")]
    InvalidTensor {
        /// The offending tensor.
        name: String,
        /// Why it was rejected.
        reason: String,
    },
    /// A tensor's data does not have the size its shape and type require.
    #[error("tensor {name:?} has {actual_bytes} bytes of data but its shape and type need {expected_bytes}")]
    TensorSize {
        /// The offending tensor.
        name: String,
        /// Size implied by dims and type.
        expected_bytes: u64,
        /// Size supplied.
        actual_bytes: u64,
    },
    /// The input is not a GGUF file.
    #[error("not a GGUF file (magic bytes {found:02x?}, expected \"GGUF\")")]
    BadMagic {
        /// The first four bytes found.
        found: [u8; 4],
    },
    /// The GGUF version is one this reader does not understand.
    #[error("unsupported GGUF version {0} (supported: 2, 3)")]
    UnsupportedVersion(u32),
    /// The input ended in the middle of a structure.
    #[error("GGUF file truncated: needed {needed_bytes} bytes for {what} at byte {offset_bytes}, but only {available_bytes} remain")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Where it started.
        offset_bytes: u64,
        /// How many bytes it needed.
        needed_bytes: u64,
        /// How many were left.
        available_bytes: u64,
    },
    /// The input is structurally invalid.
    #[error("malformed GGUF file at byte {offset_bytes}: {reason}")]
    Malformed {
        /// Where the problem was found.
        offset_bytes: u64,
        /// What is wrong.
        reason: String,
    },
}

/// A ggml tensor element type, by its numeric id in `enum ggml_type`.
///
/// A newtype rather than an enum so that the reader can report types it does not know about
/// (ggml adds new ones regularly) instead of rejecting the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GgmlType(pub u32);

/// The ggml types this module knows: each one's constant and its row of the layout table,
/// `name = id, ggml's name, elements per block, bytes per block` (sizes from ggml-common.h,
/// checked there by static_asserts, and ggml.c's type_traits).
macro_rules! ggml_types {
    ($($(#[$doc:meta])* $vis:vis $name:ident = $id:literal, $text:literal, $block_elems:literal, $block_bytes:literal;)+) => {
        impl GgmlType {
            $($(#[$doc])* $vis const $name: Self = Self($id);)+

            fn traits(self) -> Option<(&'static str, u64, u64)> {
                match self {
                    $(Self::$name => Some(($text, $block_elems, $block_bytes)),)+
                    _ => None,
                }
            }
        }
    };
}

ggml_types! {
    /// 32-bit float.
    pub F32 = 0, "f32", 1, 4;
    /// IEEE half precision.
    pub(crate) F16 = 1, "f16", 1, 2;
    /// 4-bit blocks of 32 with an f16 scale.
    pub(crate) Q4_0 = 2, "q4_0", 32, 18;
    /// 4-bit blocks of 32 with f16 scale and min.
    pub(crate) Q4_1 = 3, "q4_1", 32, 20;
    /// 5-bit blocks of 32 with an f16 scale.
    pub(crate) Q5_0 = 6, "q5_0", 32, 22;
    /// 5-bit blocks of 32 with f16 scale and min.
    pub(crate) Q5_1 = 7, "q5_1", 32, 24;
    /// 8-bit blocks of 32 with an f16 scale.
    pub(crate) Q8_0 = 8, "q8_0", 32, 34;
    /// 8-bit blocks of 32 with f16 scale and sum.
    pub(crate) Q8_1 = 9, "q8_1", 32, 36;
    /// k-quant, 2 bits.
    pub(crate) Q2_K = 10, "q2_K", 256, 84;
    /// k-quant, 3 bits.
    pub(crate) Q3_K = 11, "q3_K", 256, 110;
    /// k-quant, 4 bits.
    pub Q4_K = 12, "q4_K", 256, 144;
    /// k-quant, 5 bits.
    pub(crate) Q5_K = 13, "q5_K", 256, 176;
    /// k-quant, 6 bits.
    pub Q6_K = 14, "q6_K", 256, 210;
    /// k-quant, 8 bits (intermediate type).
    pub Q8_K = 15, "q8_K", 256, 292;
    /// i-quant, 2.06 bits.
    pub IQ2_XXS = 16, "iq2_xxs", 256, 66;
    /// i-quant, 2.31 bits.
    pub IQ2_XS = 17, "iq2_xs", 256, 74;
    /// i-quant, 3.06 bits.
    pub IQ3_XXS = 18, "iq3_xxs", 256, 98;
    /// i-quant, 1.56 bits.
    pub IQ1_S = 19, "iq1_s", 256, 50;
    /// Non-linear 4-bit blocks of 32.
    pub(crate) IQ4_NL = 20, "iq4_nl", 32, 18;
    /// i-quant, 3.44 bits.
    pub IQ3_S = 21, "iq3_s", 256, 110;
    /// i-quant, 2.5 bits.
    pub IQ2_S = 22, "iq2_s", 256, 82;
    /// Non-linear 4-bit super-blocks of 256.
    pub(crate) IQ4_XS = 23, "iq4_xs", 256, 136;
    /// 8-bit integer.
    pub(crate) I8 = 24, "i8", 1, 1;
    /// 16-bit integer.
    pub(crate) I16 = 25, "i16", 1, 2;
    /// 32-bit integer.
    pub(crate) I32 = 26, "i32", 1, 4;
    /// 64-bit integer.
    pub(crate) I64 = 27, "i64", 1, 8;
    /// 64-bit float.
    pub(crate) F64 = 28, "f64", 1, 8;
    /// i-quant, 1.75 bits.
    pub IQ1_M = 29, "iq1_m", 256, 56;
    /// bfloat16.
    pub(crate) BF16 = 30, "bf16", 1, 2;
    /// Ternary, 1.69 bits.
    pub TQ1_0 = 34, "tq1_0", 256, 54;
    /// Ternary, 2.06 bits.
    pub TQ2_0 = 35, "tq2_0", 256, 66;
    /// Microscaling FP4, blocks of 32.
    pub(crate) MXFP4 = 39, "mxfp4", 32, 17;
    /// NVIDIA FP4, blocks of 64 with E4M3 sub-block scales.
    pub NVFP4 = 40, "nvfp4", 64, 36;
}

impl GgmlType {
    /// ggml's name for the type, if this module knows it.
    #[must_use]
    pub(crate) fn name(self) -> Option<&'static str> {
        self.traits().map(|(name, _, _)| name)
    }

    /// `(elements per block, bytes per block)` for the types whose layout this module knows.
    #[must_use]
    pub fn block_layout(self) -> Option<(u64, u64)> {
        self.traits()
            .map(|(_, block_elems, block_bytes)| (block_elems, block_bytes))
    }

    /// Bytes of data a tensor of this type and shape occupies (without alignment padding).
    /// `None` for unknown types, rows that are not a whole number of blocks, or overflow.
    #[must_use]
    pub(crate) fn tensor_bytes(self, dims: &[u64]) -> Option<u64> {
        let (block_elems, block_bytes) = self.block_layout()?;
        let row_elems = dims.first().copied().unwrap_or(1);
        if row_elems % block_elems != 0 {
            return None;
        }
        let n_elements = dims
            .iter()
            .try_fold(1_u64, |acc, &dim| acc.checked_mul(dim))?;
        (n_elements / block_elems).checked_mul(block_bytes)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "ggml_type({})", self.0),
        }
    }
}

/// A metadata value. Arrays are homogeneous and, as in llama.cpp, never nested.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// GGUF type 0.
    U8(u8),
    /// GGUF type 1.
    I8(i8),
    /// GGUF type 2.
    U16(u16),
    /// GGUF type 3.
    I16(i16),
    /// GGUF type 4.
    U32(u32),
    /// GGUF type 5.
    I32(i32),
    /// GGUF type 6.
    F32(f32),
    /// GGUF type 7 (one byte, 0 or 1).
    Bool(bool),
    /// GGUF type 8 (UTF-8; the reader replaces invalid sequences with U+FFFD).
    String(String),
    /// GGUF type 9.
    Array(GgufArray),
    /// GGUF type 10.
    U64(u64),
    /// GGUF type 11.
    I64(i64),
    /// GGUF type 12.
    F64(f64),
}

/// The elements of a metadata array, one vector per element type.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufArray {
    /// Array of u8.
    U8(Vec<u8>),
    /// Array of i8.
    I8(Vec<i8>),
    /// Array of u16.
    U16(Vec<u16>),
    /// Array of i16.
    I16(Vec<i16>),
    /// Array of u32.
    U32(Vec<u32>),
    /// Array of i32.
    I32(Vec<i32>),
    /// Array of f32.
    F32(Vec<f32>),
    /// Array of bool.
    Bool(Vec<bool>),
    /// Array of strings.
    String(Vec<String>),
    /// Array of u64.
    U64(Vec<u64>),
    /// Array of i64.
    I64(Vec<i64>),
    /// Array of f64.
    F64(Vec<f64>),
}

/// The values the writer's callers add, each as its one GGUF type. No other integer or float
/// converts, so an unsuffixed literal (`2`, `0.5`) is a `U32` or an `F32`, never an `I32` or
/// `F64` key llama.cpp would read differently; any other type is added as its [`GgufValue`].
macro_rules! gguf_value_from {
    ($($t:ty => $make:expr),* $(,)?) => {
        $(impl From<$t> for GgufValue {
            fn from(v: $t) -> Self {
                $make(v)
            }
        })*
    };
}

gguf_value_from! {
    u32 => GgufValue::U32,
    f32 => GgufValue::F32,
    bool => GgufValue::Bool,
    String => GgufValue::String,
    &str => |v: &str| GgufValue::String(v.to_owned()),
    &String => |v: &String| GgufValue::String(v.clone()),
    Vec<String> => |v| GgufValue::Array(GgufArray::String(v)),
    Vec<i32> => |v| GgufValue::Array(GgufArray::I32(v)),
    Vec<f32> => |v| GgufValue::Array(GgufArray::F32(v)),
}

const TYPE_U8: u32 = 0;
const TYPE_I8: u32 = 1;
const TYPE_U16: u32 = 2;
const TYPE_I16: u32 = 3;
const TYPE_U32: u32 = 4;
const TYPE_I32: u32 = 5;
const TYPE_F32: u32 = 6;
const TYPE_BOOL: u32 = 7;
const TYPE_STRING: u32 = 8;
const TYPE_ARRAY: u32 = 9;
const TYPE_U64: u32 = 10;
const TYPE_I64: u32 = 11;
const TYPE_F64: u32 = 12;

/// A `match` on a [`GgufValue`] or [`GgufArray`] whose ten numeric variants share one arm
/// (`$v` bound to the number, or to the vector), followed by the arms of the other variants.
macro_rules! match_numeric {
    ($value:expr, $v:ident => $numeric:expr, $($rest:tt)*) => {
        match $value {
            Self::U8($v) => $numeric,
            Self::I8($v) => $numeric,
            Self::U16($v) => $numeric,
            Self::I16($v) => $numeric,
            Self::U32($v) => $numeric,
            Self::I32($v) => $numeric,
            Self::F32($v) => $numeric,
            Self::U64($v) => $numeric,
            Self::I64($v) => $numeric,
            Self::F64($v) => $numeric,
            $($rest)*
        }
    };
}

impl GgufValue {
    /// The GGUF value type id.
    #[must_use]
    pub(crate) fn type_id(&self) -> u32 {
        match self {
            Self::U8(_) => TYPE_U8,
            Self::I8(_) => TYPE_I8,
            Self::U16(_) => TYPE_U16,
            Self::I16(_) => TYPE_I16,
            Self::U32(_) => TYPE_U32,
            Self::I32(_) => TYPE_I32,
            Self::F32(_) => TYPE_F32,
            Self::Bool(_) => TYPE_BOOL,
            Self::String(_) => TYPE_STRING,
            Self::Array(_) => TYPE_ARRAY,
            Self::U64(_) => TYPE_U64,
            Self::I64(_) => TYPE_I64,
            Self::F64(_) => TYPE_F64,
        }
    }

    /// The value as a `u64` if it is any unsigned or non-negative signed integer.
    #[must_use]
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Self::U8(v) => Some(u64::from(v)),
            Self::U16(v) => Some(u64::from(v)),
            Self::U32(v) => Some(u64::from(v)),
            Self::U64(v) => Some(v),
            Self::I8(v) => u64::try_from(v).ok(),
            Self::I16(v) => u64::try_from(v).ok(),
            Self::I32(v) => u64::try_from(v).ok(),
            Self::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a string slice if it is a string.
    #[must_use]
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as an `f64` if it is a float.
    #[must_use]
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(f64::from(v)),
            Self::F64(v) => Some(v),
            _ => None,
        }
    }

    fn write_payload(&self, out: &mut impl Write) -> io::Result<()> {
        match_numeric!(self, v => out.write_all(&v.to_le_bytes()),
            Self::Bool(v) => out.write_all(&[u8::from(*v)]),
            Self::String(s) => write_string(out, s),
            Self::Array(array) => array.write(out),
        )
    }
}

impl GgufArray {
    /// The GGUF type id of the elements.
    #[must_use]
    pub(crate) fn element_type_id(&self) -> u32 {
        match self {
            Self::U8(_) => TYPE_U8,
            Self::I8(_) => TYPE_I8,
            Self::U16(_) => TYPE_U16,
            Self::I16(_) => TYPE_I16,
            Self::U32(_) => TYPE_U32,
            Self::I32(_) => TYPE_I32,
            Self::F32(_) => TYPE_F32,
            Self::Bool(_) => TYPE_BOOL,
            Self::String(_) => TYPE_STRING,
            Self::U64(_) => TYPE_U64,
            Self::I64(_) => TYPE_I64,
            Self::F64(_) => TYPE_F64,
        }
    }

    /// Number of elements.
    #[must_use]
    pub(crate) fn len(&self) -> usize {
        match_numeric!(self, v => v.len(), Self::Bool(v) => v.len(), Self::String(v) => v.len(),)
    }

    fn write(&self, out: &mut impl Write) -> io::Result<()> {
        out.write_all(&self.element_type_id().to_le_bytes())?;
        out.write_all(&(self.len() as u64).to_le_bytes())?;
        match_numeric!(self, v => v.iter().try_for_each(|x| out.write_all(&x.to_le_bytes())),
            Self::Bool(v) => v.iter().try_for_each(|x| out.write_all(&[u8::from(*x)])),
            Self::String(v) => v.iter().try_for_each(|s| write_string(out, s)),
        )
    }
}

fn write_string(out: &mut impl Write, s: &str) -> io::Result<()> {
    out.write_all(&(s.len() as u64).to_le_bytes())?;
    out.write_all(s.as_bytes())
}

/// A tensor's data, as [`GgufWriter::add_tensor`] takes it.
pub enum TensorData {
    Bytes(Vec<u8>),
    /// Written straight into the file at write time, in as many pieces as the closure likes:
    /// multi-gigabyte models are written in constant memory. Must write the same bytes each
    /// time if the writer is written more than once.
    Streamed(TensorStreamer),
}

/// Writes a tensor's bytes straight into the file, in as many pieces as it likes.
pub type TensorStreamer = Box<dyn Fn(&mut dyn Write) -> io::Result<()>>;

impl From<Vec<u8>> for TensorData {
    fn from(bytes: Vec<u8>) -> Self {
        TensorData::Bytes(bytes)
    }
}

impl TensorData {
    /// Data that `write` writes into the file (see [`TensorData::Streamed`]).
    pub fn streamed(write: impl Fn(&mut dyn Write) -> io::Result<()> + 'static) -> Self {
        TensorData::Streamed(Box::new(write))
    }
}

/// How far [`GgufWriter::write_to`] has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteProgress {
    /// Bytes written so far (header included).
    pub written_bytes: u64,
    /// Size of the finished file.
    pub total_bytes: u64,
    /// Tensors whose data has been written.
    pub tensors_done: usize,
    /// Number of tensors.
    pub tensors_total: usize,
}

struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ggml_type: GgmlType,
    n_bytes: u64,
    data: TensorData,
}

/// Builds a GGUF v3 file in memory (metadata and tensor list) and writes it out in one pass.
///
/// `general.alignment` (32) is added as the first key on construction, so a file read back
/// with [`read_metadata`] has exactly the keys that were added here, in order.
pub struct GgufWriter {
    metadata: Vec<(String, GgufValue)>,
    keys: HashSet<String>,
    tensors: Vec<PendingTensor>,
    tensor_names: HashSet<String>,
    alignment_bytes: u64,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// An empty file with 32-byte alignment.
    #[must_use]
    pub fn new() -> Self {
        let alignment = GgufValue::U32(DEFAULT_ALIGNMENT_BYTES);
        Self {
            metadata: vec![(ALIGNMENT_KEY.to_owned(), alignment)],
            keys: HashSet::from([ALIGNMENT_KEY.to_owned()]),
            tensors: Vec::new(),
            tensor_names: HashSet::new(),
            alignment_bytes: u64::from(DEFAULT_ALIGNMENT_BYTES),
        }
    }

    /// Adds a metadata key, the one way to add any (`u32`, `f32`, `bool`, strings and the
    /// arrays convert; other types as a [`GgufValue`]). Keys must be non-empty and unique
    /// (llama.cpp rejects duplicates).
    pub fn add_kv(&mut self, key: &str, value: impl Into<GgufValue>) -> Result<(), GgufError> {
        if key.is_empty() || !self.keys.insert(key.to_owned()) {
            return Err(GgufError::InvalidKey {
                key: key.to_owned(),
                reason: if key.is_empty() {
                    "keys must not be empty"
                } else {
                    "key was already added"
                },
            });
        }
        self.metadata.push((key.to_owned(), value.into()));
        Ok(())
    }

    /// Adds a tensor, the one way to add any: its bytes, or a [`TensorData::Streamed`] writer
    /// of them. `dims` are in ggml order: `dims[0]` (ne0) is the row length, the contiguous
    /// one. The data's length must match the shape and type exactly: bytes are checked here,
    /// a stream when it is written ([`GgufError::TensorSize`]).
    pub fn add_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ggml_type: GgmlType,
        data: impl Into<TensorData>,
    ) -> Result<(), GgufError> {
        let n_bytes = self.check_tensor(name, dims, ggml_type)?;
        let data = data.into();
        if let TensorData::Bytes(bytes) = &data {
            if bytes.len() as u64 != n_bytes {
                return Err(GgufError::TensorSize {
                    name: name.to_owned(),
                    expected_bytes: n_bytes,
                    actual_bytes: bytes.len() as u64,
                });
            }
        }
        self.tensor_names.insert(name.to_owned());
        self.tensors.push(PendingTensor {
            name: name.to_owned(),
            dims: dims.to_vec(),
            ggml_type,
            n_bytes,
            data,
        });
        Ok(())
    }

    /// Size of the file [`GgufWriter::write_to`] would produce, without generating any tensor
    /// data (the header is serialised to count it).
    pub(crate) fn file_size_bytes(&self) -> Result<u64, GgufError> {
        let mut counted = CountingWriter {
            inner: io::sink(),
            written_bytes: 0,
        };
        self.write_header(&mut counted).map_err(GgufError::Stream)?;
        let data_bytes: u64 = self
            .tensors
            .iter()
            .map(|t| align_up(t.n_bytes, self.alignment_bytes))
            .sum();
        Ok(counted.written_bytes + data_bytes)
    }

    /// Number of tensors added so far.
    #[must_use]
    pub(crate) fn n_tensors(&self) -> usize {
        self.tensors.len()
    }

    /// How many tensors of each type were added, the type with the most bytes first.
    #[must_use]
    pub(crate) fn type_counts(&self) -> Vec<(GgmlType, usize)> {
        let mut totals: Vec<(GgmlType, usize, u64)> = Vec::new();
        for tensor in &self.tensors {
            match totals.iter_mut().find(|(t, _, _)| *t == tensor.ggml_type) {
                Some((_, count, bytes)) => {
                    *count += 1;
                    *bytes += tensor.n_bytes;
                }
                None => totals.push((tensor.ggml_type, 1, tensor.n_bytes)),
            }
        }
        totals.sort_by(|a, b| b.2.cmp(&a.2).then(a.0 .0.cmp(&b.0 .0)));
        totals.into_iter().map(|(t, count, _)| (t, count)).collect()
    }

    /// Total number of tensor elements added so far.
    #[must_use]
    pub(crate) fn n_elements(&self) -> u64 {
        self.tensors
            .iter()
            .map(|t| t.dims.iter().product::<u64>())
            .sum()
    }

    fn check_tensor(
        &self,
        name: &str,
        dims: &[u64],
        ggml_type: GgmlType,
    ) -> Result<u64, GgufError> {
        let invalid = |reason: String| GgufError::InvalidTensor {
            name: name.to_owned(),
            reason,
        };
        if name.is_empty() {
            return Err(invalid("names must not be empty".to_owned()));
        }
        if name.len() >= MAX_TENSOR_NAME_BYTES {
            return Err(invalid(format!(
                "names must be shorter than {MAX_TENSOR_NAME_BYTES} bytes"
            )));
        }
        if self.tensor_names.contains(name) {
            return Err(invalid(
                "a tensor with this name was already added".to_owned(),
            ));
        }
        if dims.is_empty() || dims.len() > MAX_TENSOR_DIMS {
            return Err(invalid(format!(
                "{} dimensions; 1 to {MAX_TENSOR_DIMS} are allowed",
                dims.len()
            )));
        }
        if dims.iter().any(|&d| d > i64::MAX as u64) {
            return Err(invalid(format!("dimension out of range in {dims:?}")));
        }
        ggml_type.tensor_bytes(dims).ok_or_else(|| {
            invalid(format!(
                "type {ggml_type} is unknown here, or the row length {} is not a whole number of its blocks, or {dims:?} overflows",
                dims[0]
            ))
        })
    }

    /// Writes the whole file to `out`, calling `on_progress` after the header and after each
    /// tensor; returns the number of bytes written.
    pub fn write_to(
        &self,
        out: &mut impl Write,
        on_progress: &mut dyn FnMut(WriteProgress),
    ) -> Result<u64, GgufError> {
        let total_bytes = self.file_size_bytes()?;
        let mut counted = CountingWriter {
            inner: out,
            written_bytes: 0,
        };
        self.write_counted(&mut counted, total_bytes, on_progress)?;
        Ok(counted.written_bytes)
    }

    /// [`GgufWriter::write_to`] a file at `path`, atomically (a temporary file in the same
    /// directory, then a rename), so a reader never sees a half-written model. Returns the
    /// file size in bytes.
    pub fn write_file(
        &self,
        path: &Path,
        on_progress: &mut dyn FnMut(WriteProgress),
    ) -> Result<u64, GgufError> {
        write_atomically(path, |out| self.write_to(out, on_progress))
    }

    fn write_header<W: Write>(&self, out: &mut CountingWriter<W>) -> io::Result<()> {
        out.write_all(&GGUF_MAGIC)?;
        out.write_all(&GGUF_VERSION.to_le_bytes())?;
        out.write_all(&(self.tensors.len() as u64).to_le_bytes())?;
        out.write_all(&(self.metadata.len() as u64).to_le_bytes())?;
        for (key, value) in &self.metadata {
            write_string(out, key)?;
            out.write_all(&value.type_id().to_le_bytes())?;
            value.write_payload(out)?;
        }

        let mut offset_bytes = 0_u64;
        for tensor in &self.tensors {
            write_string(out, &tensor.name)?;
            out.write_all(&(tensor.dims.len() as u32).to_le_bytes())?;
            for dim in &tensor.dims {
                out.write_all(&dim.to_le_bytes())?;
            }
            out.write_all(&tensor.ggml_type.0.to_le_bytes())?;
            out.write_all(&offset_bytes.to_le_bytes())?;
            offset_bytes += align_up(tensor.n_bytes, self.alignment_bytes);
        }

        out.pad_to(self.alignment_bytes)
    }

    fn write_counted<W: Write>(
        &self,
        out: &mut CountingWriter<W>,
        total_bytes: u64,
        on_progress: &mut dyn FnMut(WriteProgress),
    ) -> Result<(), GgufError> {
        let stream = GgufError::Stream;
        self.write_header(out).map_err(stream)?;
        let mut report = |out: &CountingWriter<W>, tensors_done| {
            on_progress(WriteProgress {
                written_bytes: out.written_bytes,
                total_bytes,
                tensors_done,
                tensors_total: self.tensors.len(),
            });
        };
        report(out, 0);
        for (index, tensor) in self.tensors.iter().enumerate() {
            let start = out.written_bytes;
            match &tensor.data {
                TensorData::Bytes(bytes) => out.write_all(bytes).map_err(stream)?,
                TensorData::Streamed(write) => write(out).map_err(stream)?,
            }
            let actual_bytes = out.written_bytes - start;
            if actual_bytes != tensor.n_bytes {
                return Err(GgufError::TensorSize {
                    name: tensor.name.clone(),
                    expected_bytes: tensor.n_bytes,
                    actual_bytes,
                });
            }
            out.pad_to(self.alignment_bytes).map_err(stream)?;
            report(out, index + 1);
        }
        out.flush().map_err(stream)
    }
}

struct CountingWriter<W> {
    inner: W,
    written_bytes: u64,
}

impl<W: Write> CountingWriter<W> {
    fn pad_to(&mut self, alignment_bytes: u64) -> io::Result<()> {
        const ZEROS: [u8; 64] = [0; 64];
        let mut padding = align_up(self.written_bytes, alignment_bytes) - self.written_bytes;
        while padding > 0 {
            let chunk = padding.min(ZEROS.len() as u64) as usize;
            self.write_all(&ZEROS[..chunk])?;
            padding -= chunk as u64;
        }
        Ok(())
    }
}

impl<W: Write> Write for CountingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written_bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn align_up(value: u64, alignment: u64) -> u64 {
    value.div_ceil(alignment) * alignment
}

/// Writes `path` through a temporary sibling file and a rename. The temporary name carries the
/// process id so that two processes writing the same model do not interleave their bytes.
pub(crate) fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<u64, GgufError>,
) -> Result<u64, GgufError> {
    let io_error = |path: &Path, source| GgufError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file_name = path.file_name().ok_or_else(|| {
        io_error(
            path,
            io::Error::new(io::ErrorKind::InvalidInput, "the path has no file name"),
        )
    })?;
    // A device node, FIFO or symbolic link at `path` would be replaced by the rename.
    crate::fsx::check_writable_target(path).map_err(|e| io_error(path, e))?;
    let mut temp_name = file_name.to_os_string();
    temp_name.push(format!(".{}.tmp", std::process::id()));
    let temp_path = path.with_file_name(temp_name);

    let result = (|| {
        // Created new: never through a link or FIFO planted under the temp name.
        let create = || {
            File::options()
                .write(true)
                .create_new(true)
                .open(&temp_path)
        };
        let file = match create() {
            // Left by an earlier process with this id that was killed: a plain file is ours.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                crate::fsx::check_writable_target(&temp_path)
                    .and_then(|()| fs::remove_file(&temp_path))
                    .and_then(|()| create())
            }
            other => other,
        }
        .map_err(|e| io_error(&temp_path, e))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let written_bytes = write(&mut out).map_err(|e| match e {
            GgufError::Stream(source) => io_error(&temp_path, source),
            other => other,
        })?;
        let file = out
            .into_inner()
            .map_err(|e| io_error(&temp_path, e.into_error()))?;
        // Flush to disk before the rename, or a crash could leave an empty file at `path`.
        file.sync_all().map_err(|e| io_error(&temp_path, e))?;
        fs::rename(&temp_path, path).map_err(|e| io_error(path, e))?;
        Ok(written_bytes)
    })();
    if result.is_err() {
        // Best effort: the original error is the one worth reporting.
        let _ = fs::remove_file(&temp_path);
    }
    result
}

/// A tensor as described in the file header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensorInfo {
    /// Tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Shape in ggml order (`dims[0]` is the contiguous row length).
    pub dims: Vec<u64>,
    /// Element type.
    pub ggml_type: GgmlType,
    /// Offset of the data from the start of the data section.
    pub offset_bytes: u64,
}

impl GgufTensorInfo {
    /// Number of elements (saturating: the reader has already rejected overflowing shapes).
    #[must_use]
    pub(crate) fn n_elements(&self) -> u64 {
        self.dims
            .iter()
            .fold(1_u64, |acc, &d| acc.saturating_mul(d))
    }

    /// Bytes of data, when the type's layout is known.
    #[must_use]
    pub fn n_bytes(&self) -> Option<u64> {
        self.ggml_type.tensor_bytes(&self.dims)
    }
}

/// Everything in a GGUF file before the tensor data.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufHeader {
    /// Format version (2 or 3).
    pub version: u32,
    /// Data alignment (from `general.alignment`, default 32).
    pub alignment_bytes: u64,
    /// Metadata in file order.
    pub metadata: Vec<(String, GgufValue)>,
    /// Tensor infos in file order.
    pub tensors: Vec<GgufTensorInfo>,
    /// Absolute file offset where the data section starts.
    pub data_offset_bytes: u64,
    /// Total size of the input.
    pub file_size_bytes: u64,
}

impl GgufHeader {
    /// The value of a metadata key.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, value)| value)
    }

    /// A tensor by name.
    #[must_use]
    pub fn tensor(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Total tensor data bytes, when every tensor's type layout is known.
    #[must_use]
    pub fn tensor_data_bytes(&self) -> Option<u64> {
        self.tensors
            .iter()
            .try_fold(0_u64, |acc, t| acc.checked_add(t.n_bytes()?))
    }
}

/// Reads the header, all metadata and all tensor infos of a GGUF file, without its tensor data.
pub fn read_metadata(path: &Path) -> Result<GgufHeader, GgufError> {
    read_header_file(path, Arrays::Keep)
}

/// [`read_metadata`] without the array values (the vocabulary, merges, scores): every check is
/// made and every tensor info read, but array-valued keys are passed over and left out of
/// `metadata`. Several times faster on a large vocabulary; for listing models.
pub fn read_metadata_without_arrays(path: &Path) -> Result<GgufHeader, GgufError> {
    read_header_file(path, Arrays::Skip)
}

fn read_header_file(path: &Path, arrays: Arrays) -> Result<GgufHeader, GgufError> {
    let io_error = |source| GgufError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io_error)?;
    let file_size_bytes = file.metadata().map_err(io_error)?.len();
    let reader = BufReader::with_capacity(1 << 16, file);
    parse_header(reader, file_size_bytes, arrays).map_err(|e| match e {
        GgufError::Stream(source) => io_error(source),
        other => other,
    })
}

/// Whether the header reader keeps array values or passes over them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arrays {
    Keep,
    Skip,
}

/// [`read_metadata`] for a file already in memory.
pub fn parse_metadata(bytes: &[u8]) -> Result<GgufHeader, GgufError> {
    parse_header(bytes, bytes.len() as u64, Arrays::Keep)
}

fn parse_header(
    reader: impl Read,
    file_size_bytes: u64,
    arrays: Arrays,
) -> Result<GgufHeader, GgufError> {
    let mut src = Source {
        inner: reader,
        pos: 0,
        len: file_size_bytes,
        allocated: 0,
    };

    let magic: [u8; 4] = src.array("magic")?;
    if magic != GGUF_MAGIC {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = src.u32("version")?;
    if !(2..=GGUF_VERSION).contains(&version) {
        return Err(GgufError::UnsupportedVersion(version));
    }
    let n_tensors = src.u64("tensor count")?;
    let n_kv = src.u64("metadata count")?;
    // Smallest possible entries (an empty name is still 8 bytes of length, plus type fields):
    // a count the rest of the file cannot hold is garbage, caught before any allocation.
    src.check_count(n_kv, 8 + 4 + 1, "metadata entries")?;
    src.check_count(n_tensors, 8 + 4 + 4 + 8, "tensor infos")?;

    let mut metadata = Vec::new();
    let mut seen_keys = HashSet::new();
    for _ in 0..n_kv {
        let key_offset = src.pos;
        let key = src.string("metadata key")?;
        if key.is_empty() {
            return Err(src.malformed_at(key_offset, "empty metadata key".to_owned()));
        }
        if !seen_keys.insert(key.clone()) {
            return Err(src.malformed_at(key_offset, format!("duplicate metadata key {key:?}")));
        }
        let value_type = src.u32("value type")?;
        if arrays == Arrays::Skip && value_type == TYPE_ARRAY {
            src.skip_array()?;
            continue;
        }
        let value = src.value(value_type)?;
        metadata.push((key, value));
    }

    let alignment_bytes = match metadata.iter().find(|(k, _)| k == ALIGNMENT_KEY) {
        None => u64::from(DEFAULT_ALIGNMENT_BYTES),
        Some((_, GgufValue::U32(a))) if a.is_power_of_two() => u64::from(*a),
        Some((_, other)) => {
            return Err(src.malformed(format!(
                "{ALIGNMENT_KEY} must be a u32 power of two, found {other:?}"
            )))
        }
    };

    let mut tensors = Vec::new();
    let mut seen_names = HashSet::new();
    for _ in 0..n_tensors {
        let info_offset = src.pos;
        let name = src.string("tensor name")?;
        if !seen_names.insert(name.clone()) {
            return Err(src.malformed_at(info_offset, format!("duplicate tensor name {name:?}")));
        }
        let n_dims = src.u32("tensor dimension count")?;
        if n_dims as usize > MAX_TENSOR_DIMS {
            return Err(src.malformed_at(
                info_offset,
                format!("tensor {name:?} has {n_dims} dimensions; at most {MAX_TENSOR_DIMS} are allowed"),
            ));
        }
        let dims = (0..n_dims)
            .map(|_| src.u64("tensor dimension"))
            .collect::<Result<Vec<_>, _>>()?;
        let n_elements = dims
            .iter()
            .try_fold(1_u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64);
        if n_elements.is_none() {
            return Err(src.malformed_at(
                info_offset,
                format!("tensor {name:?} has an impossible shape {dims:?}"),
            ));
        }
        let ggml_type = GgmlType(src.u32("tensor type")?);
        let offset_bytes = src.u64("tensor offset")?;
        if offset_bytes % alignment_bytes != 0 {
            return Err(src.malformed_at(
                info_offset,
                format!("tensor {name:?} offset {offset_bytes} is not a multiple of the alignment {alignment_bytes}"),
            ));
        }
        tensors.push(GgufTensorInfo {
            name,
            dims,
            ggml_type,
            offset_bytes,
        });
    }

    let data_offset_bytes = if tensors.is_empty() {
        src.pos
    } else {
        align_up(src.pos, alignment_bytes)
    };
    for tensor in &tensors {
        // Unknown types cannot be size-checked; their presence is not an error in itself.
        let Some(n_bytes) = tensor.n_bytes() else {
            continue;
        };
        let end = data_offset_bytes
            .checked_add(tensor.offset_bytes)
            .and_then(|start| start.checked_add(n_bytes));
        if end.is_none_or(|end| end > file_size_bytes) {
            return Err(GgufError::Truncated {
                what: "tensor data",
                offset_bytes: data_offset_bytes.saturating_add(tensor.offset_bytes),
                needed_bytes: n_bytes,
                available_bytes: file_size_bytes
                    .saturating_sub(data_offset_bytes.saturating_add(tensor.offset_bytes)),
            });
        }
    }

    Ok(GgufHeader {
        version,
        alignment_bytes,
        metadata,
        tensors,
        data_offset_bytes,
        file_size_bytes,
    })
}

/// A bounded reader: it knows how many bytes remain, so no length read from the file can make
/// it allocate or read past the end.
struct Source<R> {
    inner: R,
    pos: u64,
    len: u64,
    /// Bytes allocated so far for what was read, bounded by [`MAX_HEADER_ALLOC_BYTES`].
    allocated: u64,
}

impl<R: Read> Source<R> {
    fn remaining(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    fn need(&self, n_bytes: u64, what: &'static str) -> Result<(), GgufError> {
        if n_bytes > self.remaining() {
            return Err(GgufError::Truncated {
                what,
                offset_bytes: self.pos,
                needed_bytes: n_bytes,
                available_bytes: self.remaining(),
            });
        }
        Ok(())
    }

    fn check_count(
        &self,
        count: u64,
        min_bytes_each: u64,
        what: &'static str,
    ) -> Result<(), GgufError> {
        match count.checked_mul(min_bytes_each) {
            Some(n_bytes) => self.need(n_bytes, what),
            None => Err(self.malformed(format!("{what}: count {count} is impossibly large"))),
        }
    }

    /// Count `n_bytes` of allocation against the header's budget before making it.
    fn charge(&mut self, n_bytes: u64, what: &'static str) -> Result<(), GgufError> {
        let total = self.allocated.saturating_add(n_bytes);
        if total > MAX_HEADER_ALLOC_BYTES {
            return Err(self.malformed(format!(
                "{what}: the header would take more than {} of memory (no real model's does): the file is damaged or not a model",
                crate::fmt::bytes(MAX_HEADER_ALLOC_BYTES)
            )));
        }
        self.allocated = total;
        Ok(())
    }

    /// A string's length, read and bounded by [`MAX_STRING_BYTES`] and the file.
    fn string_len(&mut self, what: &'static str) -> Result<u64, GgufError> {
        let offset = self.pos;
        let len = self.u64(what)?;
        if len > MAX_STRING_BYTES {
            return Err(self.malformed_at(
                offset,
                format!(
                    "{what}: a string of {len} bytes; tokscope reads at most {} per string (no real model has a longer one): the file is damaged or not a model",
                    crate::fmt::bytes(MAX_STRING_BYTES)
                ),
            ));
        }
        self.need(len, what)?;
        Ok(len)
    }

    fn malformed(&self, reason: String) -> GgufError {
        self.malformed_at(self.pos, reason)
    }

    fn malformed_at(&self, offset_bytes: u64, reason: String) -> GgufError {
        GgufError::Malformed {
            offset_bytes,
            reason,
        }
    }

    fn fill(&mut self, buf: &mut [u8], what: &'static str) -> Result<(), GgufError> {
        self.need(buf.len() as u64, what)?;
        self.inner.read_exact(buf).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                // The file shrank while being read, or the caller's length was wrong.
                GgufError::Truncated {
                    what,
                    offset_bytes: self.pos,
                    needed_bytes: buf.len() as u64,
                    available_bytes: 0,
                }
            } else {
                GgufError::Stream(e)
            }
        })?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], GgufError> {
        let mut buf = [0_u8; N];
        self.fill(&mut buf, what)?;
        Ok(buf)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    fn string(&mut self, what: &'static str) -> Result<String, GgufError> {
        let len = self.string_len(what)?;
        self.charge(len + std::mem::size_of::<String>() as u64, what)?;
        let mut bytes = vec![0_u8; len as usize];
        self.fill(&mut bytes, what)?;
        // Lossy rather than an error: one odd vocabulary entry should not make a real model's
        // metadata unreadable.
        Ok(String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    fn bool(&mut self, what: &'static str) -> Result<bool, GgufError> {
        // Any non-zero byte is true, as in ggml's reader.
        Ok(self.array::<1>(what)?[0] != 0)
    }

    fn value(&mut self, value_type: u32) -> Result<GgufValue, GgufError> {
        const W: &str = "metadata value";
        Ok(match value_type {
            TYPE_U8 => GgufValue::U8(u8::from_le_bytes(self.array(W)?)),
            TYPE_I8 => GgufValue::I8(i8::from_le_bytes(self.array(W)?)),
            TYPE_U16 => GgufValue::U16(u16::from_le_bytes(self.array(W)?)),
            TYPE_I16 => GgufValue::I16(i16::from_le_bytes(self.array(W)?)),
            TYPE_U32 => GgufValue::U32(u32::from_le_bytes(self.array(W)?)),
            TYPE_I32 => GgufValue::I32(i32::from_le_bytes(self.array(W)?)),
            TYPE_F32 => GgufValue::F32(f32::from_le_bytes(self.array(W)?)),
            TYPE_BOOL => GgufValue::Bool(self.bool(W)?),
            TYPE_STRING => GgufValue::String(self.string(W)?),
            TYPE_U64 => GgufValue::U64(u64::from_le_bytes(self.array(W)?)),
            TYPE_I64 => GgufValue::I64(i64::from_le_bytes(self.array(W)?)),
            TYPE_F64 => GgufValue::F64(f64::from_le_bytes(self.array(W)?)),
            TYPE_ARRAY => GgufValue::Array(self.array_value()?),
            other => return Err(self.malformed(format!("unknown metadata value type {other}"))),
        })
    }

    /// Pass over `n_bytes` without keeping them.
    fn skip(&mut self, n_bytes: u64, what: &'static str) -> Result<(), GgufError> {
        self.need(n_bytes, what)?;
        let copied = io::copy(&mut (&mut self.inner).take(n_bytes), &mut io::sink())
            .map_err(GgufError::Stream)?;
        if copied != n_bytes {
            return Err(GgufError::Truncated {
                what,
                offset_bytes: self.pos + copied,
                needed_bytes: n_bytes - copied,
                available_bytes: 0,
            });
        }
        self.pos += n_bytes;
        Ok(())
    }

    /// Pass over an array value, with the checks [`Self::array_value`] makes.
    fn skip_array(&mut self) -> Result<(), GgufError> {
        const W: &str = "array element";
        let (element_type, count, element_bytes) = self.array_header()?;
        if element_type != TYPE_STRING {
            return self.skip(count * element_bytes, W);
        }
        for _ in 0..count {
            let len = self.string_len(W)?;
            self.skip(len, W)?;
        }
        Ok(())
    }

    /// An array's element type and count, checked: a known, non-nested type, and no more
    /// elements than the bytes left in the file can hold at their smallest size (a string's
    /// length prefix). Returns that size too.
    fn array_header(&mut self) -> Result<(u32, u64, u64), GgufError> {
        let element_type = self.u32("array element type")?;
        let count = self.u64("array length")?;
        let min_element_bytes = match element_type {
            TYPE_U8 | TYPE_I8 | TYPE_BOOL => 1,
            TYPE_U16 | TYPE_I16 => 2,
            TYPE_U32 | TYPE_I32 | TYPE_F32 => 4,
            TYPE_U64 | TYPE_I64 | TYPE_F64 | TYPE_STRING => 8,
            TYPE_ARRAY => {
                return Err(self.malformed("nested arrays are not supported".to_owned()));
            }
            other => return Err(self.malformed(format!("unknown array element type {other}"))),
        };
        if count > MAX_ARRAY_ELEMENTS {
            return Err(self.malformed(format!(
                "an array of {count} elements; tokscope reads at most {MAX_ARRAY_ELEMENTS} (a vocabulary is far smaller): the file is damaged or not a model"
            )));
        }
        self.check_count(count, min_element_bytes, "array elements")?;
        Ok((element_type, count, min_element_bytes))
    }

    fn array_value(&mut self) -> Result<GgufArray, GgufError> {
        const W: &str = "array element";
        let (element_type, count, element_bytes) = self.array_header()?;
        // Safe to preallocate: the checks above bound `count` by the bytes left in the file
        // and by MAX_ARRAY_ELEMENTS, and the budget counts what the vector takes (a number
        // takes its size in the file; each string charges itself, its `String` included).
        let in_memory = if element_type == TYPE_STRING {
            0
        } else {
            element_bytes
        };
        self.charge(count * in_memory, W)?;
        let n = count as usize;
        macro_rules! read_vec {
            ($variant:ident, $read:expr) => {{
                let mut values = Vec::with_capacity(n);
                for _ in 0..n {
                    values.push($read);
                }
                GgufArray::$variant(values)
            }};
        }
        Ok(match element_type {
            TYPE_U8 => read_vec!(U8, u8::from_le_bytes(self.array(W)?)),
            TYPE_I8 => read_vec!(I8, i8::from_le_bytes(self.array(W)?)),
            TYPE_U16 => read_vec!(U16, u16::from_le_bytes(self.array(W)?)),
            TYPE_I16 => read_vec!(I16, i16::from_le_bytes(self.array(W)?)),
            TYPE_U32 => read_vec!(U32, u32::from_le_bytes(self.array(W)?)),
            TYPE_I32 => read_vec!(I32, i32::from_le_bytes(self.array(W)?)),
            TYPE_F32 => read_vec!(F32, f32::from_le_bytes(self.array(W)?)),
            TYPE_BOOL => read_vec!(Bool, self.bool(W)?),
            TYPE_STRING => read_vec!(String, self.string(W)?),
            TYPE_U64 => read_vec!(U64, u64::from_le_bytes(self.array(W)?)),
            TYPE_I64 => read_vec!(I64, i64::from_le_bytes(self.array(W)?)),
            _ => read_vec!(F64, f64::from_le_bytes(self.array(W)?)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header that declares `len` bytes of string for its first key's value, followed by
    /// zeros for ever, as a sparse file of `file_size` bytes reads.
    fn declared_string(len: u64, file_size: u64) -> Result<GgufHeader, GgufError> {
        let mut head = Vec::new();
        head.extend_from_slice(&GGUF_MAGIC);
        head.extend_from_slice(&GGUF_VERSION.to_le_bytes());
        head.extend_from_slice(&0u64.to_le_bytes()); // tensors
        head.extend_from_slice(&1u64.to_le_bytes()); // metadata entries
        head.extend_from_slice(&(4u64).to_le_bytes());
        head.extend_from_slice(b"k.ey");
        head.extend_from_slice(&TYPE_STRING.to_le_bytes());
        head.extend_from_slice(&len.to_le_bytes());
        parse_header(
            std::io::Read::chain(&head[..], std::io::repeat(0)),
            file_size,
            Arrays::Keep,
        )
    }

    #[test]
    fn a_huge_declared_string_is_refused_before_any_allocation() {
        // 40 GB declared in a 40 GB sparse file: within the file, far past the bound.
        let err = declared_string(40_000_000_000, 40_000_000_100).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("40000000000 bytes"), "{text}");
        assert!(text.contains("at most 17 MB per string"), "{text}");
        // Just past the bound is refused, and a long but real string is read.
        assert!(declared_string(MAX_STRING_BYTES + 1, 1 << 40).is_err());
        let ok = declared_string(1 << 20, 1 << 40).unwrap();
        assert_eq!(ok.metadata.len(), 1);
    }

    #[test]
    fn a_huge_declared_array_is_refused_and_the_budget_holds() {
        let mut head = Vec::new();
        head.extend_from_slice(&GGUF_MAGIC);
        head.extend_from_slice(&GGUF_VERSION.to_le_bytes());
        head.extend_from_slice(&0u64.to_le_bytes());
        head.extend_from_slice(&1u64.to_le_bytes());
        head.extend_from_slice(&(4u64).to_le_bytes());
        head.extend_from_slice(b"a.rr");
        head.extend_from_slice(&TYPE_ARRAY.to_le_bytes());
        head.extend_from_slice(&TYPE_U64.to_le_bytes());
        head.extend_from_slice(&(5_000_000_000u64).to_le_bytes());
        for arrays in [Arrays::Keep, Arrays::Skip] {
            let err = parse_header(
                std::io::Read::chain(&head[..], std::io::repeat(0)),
                1 << 40,
                arrays,
            )
            .unwrap_err();
            assert!(err.to_string().contains("5000000000 elements"), "{err}");
        }
        // The total budget: many strings each under the per-string bound.
        let mut src = Source {
            inner: std::io::repeat(0),
            pos: 0,
            len: u64::MAX,
            allocated: MAX_HEADER_ALLOC_BYTES - 10,
        };
        assert!(src.charge(11, "x").is_err());
        assert!(src.charge(10, "x").is_ok());
    }

    fn sample_writer() -> GgufWriter {
        let mut w = GgufWriter::new();
        w.add_kv("general.architecture", "llama").unwrap();
        w.add_kv("llama.block_count", 2).unwrap();
        w.add_kv("test.negative", GgufValue::I32(-7)).unwrap();
        w.add_kv("llama.rope.freq_base", 500_000.0).unwrap();
        w.add_kv("tokscope.synthetic", true).unwrap();
        w.add_kv(
            "tokenizer.ggml.tokens",
            vec!["<unk>".into(), "▁hello".into(), String::new()],
        )
        .unwrap();
        w.add_kv("tokenizer.ggml.token_type", vec![2, 1, 1])
            .unwrap();
        w.add_kv("tokenizer.ggml.scores", vec![0.0, -1.5, 3.25])
            .unwrap();
        w.add_kv("test.u64", GgufValue::U64(u64::MAX)).unwrap();
        w.add_kv(
            "test.u8_array",
            GgufValue::Array(GgufArray::U8(vec![1, 2, 3])),
        )
        .unwrap();
        w.add_tensor(
            "a.weight",
            &[3],
            GgmlType::F32,
            [1.0_f32, 2.0, 3.0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>(),
        )
        .unwrap();
        let q8: Vec<u8> = (0..68).map(|i| i as u8).collect();
        let data = TensorData::streamed(move |out| out.write_all(&q8));
        w.add_tensor("b.weight", &[32, 2], GgmlType::Q8_0, data)
            .unwrap();
        w.add_tensor("c.weight", &[4, 2, 1], GgmlType::F16, vec![7; 16])
            .unwrap();
        w
    }

    fn sample_bytes() -> Vec<u8> {
        let mut bytes = Vec::new();
        let written = sample_writer().write_to(&mut bytes, &mut |_| {}).unwrap();
        assert_eq!(written, bytes.len() as u64);
        bytes
    }

    #[test]
    fn round_trip_preserves_metadata_and_tensor_infos() {
        let writer = sample_writer();
        let bytes = sample_bytes();
        let header = parse_metadata(&bytes).unwrap();

        assert_eq!(header.version, GGUF_VERSION);
        assert_eq!(header.alignment_bytes, 32);
        assert_eq!(header.metadata, writer.metadata);
        assert_eq!(header.metadata[0].0, ALIGNMENT_KEY);
        assert_eq!(header.file_size_bytes, bytes.len() as u64);
        assert_eq!(header.data_offset_bytes % 32, 0);

        let names: Vec<&str> = header.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a.weight", "b.weight", "c.weight"]);
        assert_eq!(header.tensors[1].dims, vec![32, 2]);
        assert_eq!(header.tensors[1].ggml_type, GgmlType::Q8_0);
        assert_eq!(header.tensors[2].dims, vec![4, 2, 1]);
        // Each tensor starts on an alignment boundary after the padded previous one.
        let offsets: Vec<u64> = header.tensors.iter().map(|t| t.offset_bytes).collect();
        assert_eq!(offsets, vec![0, 32, 128]);
        assert_eq!(header.tensor_data_bytes(), Some(12 + 68 + 16));
        assert_eq!(bytes.len() as u64, header.data_offset_bytes + 128 + 32);

        // The data lands where the infos say.
        let start = (header.data_offset_bytes + header.tensors[1].offset_bytes) as usize;
        let expected: Vec<u8> = (0..68).map(|i| i as u8).collect();
        assert_eq!(&bytes[start..start + 68], expected.as_slice());

        assert_eq!(header.get("llama.block_count"), Some(&GgufValue::U32(2)));
        assert_eq!(
            header
                .get("general.architecture")
                .and_then(GgufValue::as_str),
            Some("llama")
        );
        assert!(header.tensor("c.weight").is_some());
    }

    #[test]
    fn file_round_trip_is_atomic_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        let size = sample_writer().write_file(&path, &mut |_| {}).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), size);
        let header = read_metadata(&path).unwrap();
        assert_eq!(header.metadata, sample_writer().metadata);
        let entries: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(entries.len(), 1);
    }

    #[test]
    fn reading_without_arrays_keeps_everything_else_and_every_check() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        sample_writer().write_file(&path, &mut |_| {}).unwrap();
        let full = read_metadata(&path).unwrap();
        let lean = read_metadata_without_arrays(&path).unwrap();
        let scalars: Vec<_> = full
            .metadata
            .iter()
            .filter(|(_, v)| !matches!(v, GgufValue::Array(_)))
            .cloned()
            .collect();
        assert!(scalars.len() < full.metadata.len(), "the sample has arrays");
        assert_eq!(lean.metadata, scalars);
        assert_eq!(lean.tensors, full.tensors);
        assert_eq!(lean.data_offset_bytes, full.data_offset_bytes);
        // A file cut inside the vocabulary is truncated either way.
        let bytes = sample_bytes();
        let cut = dir.path().join("cut.gguf");
        let at = bytes
            .windows("▁hello".len())
            .position(|w| w == "▁hello".as_bytes())
            .unwrap();
        fs::write(&cut, &bytes[..at + 2]).unwrap();
        assert!(matches!(
            read_metadata_without_arrays(&cut),
            Err(GgufError::Truncated { .. })
        ));
    }

    #[test]
    fn writer_rejects_bad_keys_and_tensors() {
        let mut w = GgufWriter::new();
        assert!(matches!(
            w.add_kv(ALIGNMENT_KEY, 64),
            Err(GgufError::InvalidKey { .. })
        ));
        assert!(matches!(w.add_kv("", 1), Err(GgufError::InvalidKey { .. })));
        assert!(matches!(
            w.add_tensor("t", &[3], GgmlType::F32, vec![0; 8]),
            Err(GgufError::TensorSize { .. })
        ));
        assert!(matches!(
            w.add_tensor("q", &[16], GgmlType::Q8_0, vec![0; 17]),
            Err(GgufError::InvalidTensor { .. })
        ));
        assert!(matches!(
            w.add_tensor("u", &[1], GgmlType(99), vec![0; 1]),
            Err(GgufError::InvalidTensor { .. })
        ));
        assert!(matches!(
            w.add_tensor(&"x".repeat(64), &[1], GgmlType::F32, vec![0; 4]),
            Err(GgufError::InvalidTensor { .. })
        ));
        w.add_tensor("t", &[1], GgmlType::F32, vec![0; 4]).unwrap();
        assert!(matches!(
            w.add_tensor("t", &[1], GgmlType::F32, vec![0; 4]),
            Err(GgufError::InvalidTensor { .. })
        ));
        let short = TensorData::streamed(|out| out.write_all(&[1]));
        w.add_tensor("g", &[2], GgmlType::F32, short).unwrap();
        assert!(matches!(
            w.write_to(&mut Vec::new(), &mut |_| {}),
            Err(GgufError::TensorSize { .. })
        ));
    }

    #[test]
    fn reader_rejects_every_truncation_without_panicking() {
        let bytes = sample_bytes();
        let header = parse_metadata(&bytes).unwrap();
        for len in 0..bytes.len() {
            let result = parse_metadata(&bytes[..len]);
            // Cutting into the data section of the last tensor is still detected; cutting only
            // the final tensor's alignment padding is not an error.
            let needed = header.data_offset_bytes + 128 + 16;
            if (len as u64) < needed {
                assert!(result.is_err(), "length {len} was accepted");
            } else {
                assert!(result.is_ok(), "length {len} was rejected");
            }
        }
    }

    #[test]
    fn reader_rejects_garbage_without_panicking() {
        assert!(matches!(
            parse_metadata(b"GGML\x03\0\0\0"),
            Err(GgufError::BadMagic { .. })
        ));
        assert!(matches!(
            parse_metadata(b"GGUF\x01\0\0\0"),
            Err(GgufError::UnsupportedVersion(1))
        ));

        // Huge counts and lengths must be rejected before anything is allocated.
        let mut huge_kv = b"GGUF\x03\0\0\0".to_vec();
        huge_kv.extend(0_u64.to_le_bytes());
        huge_kv.extend(u64::MAX.to_le_bytes());
        assert!(parse_metadata(&huge_kv).is_err());

        let mut huge_string = b"GGUF\x03\0\0\0".to_vec();
        huge_string.extend(0_u64.to_le_bytes());
        huge_string.extend(1_u64.to_le_bytes());
        huge_string.extend((u64::MAX - 3).to_le_bytes());
        huge_string.extend(b"key");
        assert!(matches!(
            parse_metadata(&huge_string),
            Err(GgufError::Truncated { .. })
        ));

        let mut huge_array = b"GGUF\x03\0\0\0".to_vec();
        huge_array.extend(0_u64.to_le_bytes());
        huge_array.extend(1_u64.to_le_bytes());
        huge_array.extend(1_u64.to_le_bytes());
        huge_array.extend(b"k");
        huge_array.extend(TYPE_ARRAY.to_le_bytes());
        huge_array.extend(TYPE_U64.to_le_bytes());
        huge_array.extend((u64::MAX / 4).to_le_bytes());
        assert!(parse_metadata(&huge_array).is_err());

        // Flip each byte of a valid file in turn: every outcome must be Ok or Err, never a panic.
        let bytes = sample_bytes();
        let header_len = parse_metadata(&bytes).unwrap().data_offset_bytes as usize;
        for i in 0..header_len {
            for flip in [0xff_u8, 0x80, 0x01] {
                let mut corrupted = bytes.clone();
                corrupted[i] ^= flip;
                let _ = parse_metadata(&corrupted);
            }
        }

        // Pseudo-random garbage after a valid magic and version.
        let mut state = 0x1234_5678_9abc_def0_u64;
        for _ in 0..2000 {
            let mut garbage = b"GGUF\x03\0\0\0".to_vec();
            for _ in 0..64 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                garbage.push((state >> 24) as u8);
            }
            let _ = parse_metadata(&garbage);
        }
    }

    #[test]
    fn reader_reports_missing_files_as_io_errors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.gguf");
        assert!(matches!(
            read_metadata(&missing),
            Err(GgufError::Io { path, .. }) if path == missing
        ));
    }

    #[test]
    fn tensor_bytes_follow_block_layouts() {
        assert_eq!(GgmlType::F32.tensor_bytes(&[64, 10]), Some(2560));
        assert_eq!(GgmlType::F16.tensor_bytes(&[64, 10]), Some(1280));
        assert_eq!(GgmlType::Q8_0.tensor_bytes(&[64, 10]), Some(680));
        assert_eq!(GgmlType::Q4_K.tensor_bytes(&[256, 2]), Some(288));
        assert_eq!(GgmlType::Q8_0.tensor_bytes(&[48]), None);
        assert_eq!(GgmlType(1000).tensor_bytes(&[1]), None);
        assert_eq!(GgmlType::F32.tensor_bytes(&[u64::MAX, 2]), None);
        assert_eq!(GgmlType::Q8_0.to_string(), "q8_0");
        assert_eq!(GgmlType(77).to_string(), "ggml_type(77)");
    }
}
