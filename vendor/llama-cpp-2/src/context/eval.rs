//! Watching the graph as llama.cpp's scheduler computes it (`cb_eval` / `cb_eval_user_data` in
//! `llama_context_params`). Added by tokscope's vendoring (see VENDORED.md).
//!
//! For each node of each split, the scheduler first asks [`EvalObserver::ask`]; the nodes up to
//! the first one answered `true` are computed together, the backend is synchronised, and
//! [`EvalObserver::computed`] is called with that node. Answering `false` everywhere computes
//! each split whole, with one synchronisation at its end.

use std::ffi::{c_void, CStr};
use std::fmt::{Debug, Formatter};
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// Told about the graph's nodes as they are computed. Called on the thread that called
/// `decode`, inside it.
pub trait EvalObserver: Send + Sync {
    /// Whether to stop and synchronise after `node`.
    fn ask(&self, node: EvalNode<'_>) -> bool;
    /// `node` (with the nodes before it not asked for) is computed and synchronised.
    fn computed(&self, node: EvalNode<'_>);
}

/// A graph node, readable for the length of a callback.
#[derive(Clone, Copy)]
pub struct EvalNode<'a> {
    tensor: *const llama_cpp_sys_2::ggml_tensor,
    lifetime: PhantomData<&'a ()>,
}

fn static_str(p: *const std::os::raw::c_char) -> &'static str {
    if p.is_null() {
        return "";
    }
    // SAFETY: ggml's op and type names are NUL-terminated strings in static tables.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("")
}

impl<'a> EvalNode<'a> {
    fn raw(&self) -> &'a llama_cpp_sys_2::ggml_tensor {
        // SAFETY: built only from a non-null tensor the scheduler passed to the callback,
        // which outlives the callback (the lifetime 'a).
        unsafe { &*self.tensor }
    }

    /// The node's name (`attn_norm-3`, `Qcur-0`, `blk.0.attn_q.weight`; "" when unnamed or
    /// not UTF-8).
    #[must_use]
    pub fn name(&self) -> &'a str {
        let name = &self.raw().name;
        // SAFETY: ggml keeps `name` NUL-terminated within its 64 bytes.
        let bytes = unsafe { std::slice::from_raw_parts(name.as_ptr().cast::<u8>(), name.len()) };
        CStr::from_bytes_until_nul(bytes)
            .ok()
            .and_then(|c| c.to_str().ok())
            .unwrap_or("")
    }

    /// The operation, as ggml names it (`MUL_MAT`, `ROPE`, `FLASH_ATTN_EXT`; a unary or GLU
    /// operation by its own name: `SILU`, `SWIGLU`).
    #[must_use]
    pub fn op(&self) -> &'static str {
        // SAFETY: the tensor is valid (see `raw`).
        static_str(unsafe { llama_cpp_sys_2::ggml_op_desc(self.tensor) })
    }

    /// Whether the operation only reinterprets its source (a view, reshape, permute or
    /// transpose, or no operation): nothing is computed for it.
    #[must_use]
    pub fn is_noop(&self) -> bool {
        matches!(
            self.raw().op,
            llama_cpp_sys_2::GGML_OP_NONE
                | llama_cpp_sys_2::GGML_OP_VIEW
                | llama_cpp_sys_2::GGML_OP_RESHAPE
                | llama_cpp_sys_2::GGML_OP_PERMUTE
                | llama_cpp_sys_2::GGML_OP_TRANSPOSE
        )
    }

    /// The element counts of the node's four dimensions.
    #[must_use]
    pub fn ne(&self) -> [i64; 4] {
        self.raw().ne
    }

    /// The bytes the node's data spans.
    #[must_use]
    pub fn nbytes(&self) -> usize {
        // SAFETY: the tensor is valid (see `raw`).
        unsafe { llama_cpp_sys_2::ggml_nbytes(self.tensor) }
    }

    /// The element type's name (`f32`, `q4_K`).
    #[must_use]
    pub fn type_name(&self) -> &'static str {
        // SAFETY: any type value has a name or NULL.
        static_str(unsafe { llama_cpp_sys_2::ggml_type_name(self.raw().type_) })
    }

    /// Source `i` of the operation (`None` past the last).
    #[must_use]
    pub fn src(&self, i: usize) -> Option<EvalNode<'a>> {
        let p = *self.raw().src.get(i)?;
        (!p.is_null()).then_some(EvalNode {
            tensor: p,
            lifetime: PhantomData,
        })
    }

    /// Whether the data is in a buffer of model weights (following a view to what it views).
    #[must_use]
    pub fn is_weight(&self) -> bool {
        let t = self.raw();
        let base = if t.view_src.is_null() {
            t
        } else {
            // SAFETY: a view's source outlives the view.
            unsafe { &*t.view_src }
        };
        !base.buffer.is_null()
            // SAFETY: a non-null buffer of a live tensor.
            && unsafe { llama_cpp_sys_2::ggml_backend_buffer_get_usage(base.buffer) }
                == llama_cpp_sys_2::GGML_BACKEND_BUFFER_USAGE_WEIGHTS
    }
}

impl Debug for EvalNode<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvalNode")
            .field("name", &self.name())
            .field("op", &self.op())
            .finish()
    }
}

/// The observer a context's callback reaches through its user-data pointer.
pub(crate) struct ObserverSlot(pub(crate) Arc<dyn EvalObserver>);

impl Debug for ObserverSlot {
    fn fmt(&self, f: &mut Formatter<'_>) -> std::fmt::Result {
        f.write_str("EvalObserver")
    }
}

/// The `cb_eval` function: never lets a panic cross into C, and never answers `false` to a
/// `computed` call (which would stop the split's remaining nodes).
pub(crate) unsafe extern "C" fn trampoline(
    t: *mut llama_cpp_sys_2::ggml_tensor,
    ask: bool,
    user_data: *mut c_void,
) -> bool {
    if t.is_null() || user_data.is_null() {
        return !ask;
    }
    // SAFETY: `user_data` is the `ObserverSlot` the context keeps alive (see
    // `LlamaContextParams::with_eval_observer`).
    let slot = unsafe { &*(user_data as *const ObserverSlot) };
    let node = EvalNode {
        tensor: t,
        lifetime: PhantomData,
    };
    catch_unwind(AssertUnwindSafe(|| {
        if ask {
            slot.0.ask(node)
        } else {
            slot.0.computed(node);
            true
        }
    }))
    .unwrap_or(!ask)
}
