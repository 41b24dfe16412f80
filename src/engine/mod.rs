//! The engine: one named OS thread that owns llama.cpp's backend, the model and the context
//! for their whole life. Commands go in over a channel, events come out over another, and every
//! event carries the request id it belongs to. Timestamps are taken on the engine thread at the
//! moment a token's text is ready, so UI scheduling never distorts TTFT or inter-token latency.

mod detok;
mod handle;
mod prompt;
mod protocol;
mod score;
mod session;
mod spec;
pub mod template;
mod thinking;
mod worker;

pub use crate::llama::error::EngineError;
pub use crate::llama::model_info::{check_model_file, fingerprint, quantization_name, ModelInfo};
pub use crate::llama::settings::{EngineSettings, SamplingParams, TemplateChoice};
pub use detok::{StopMatcher, Utf8Stream};
pub use handle::{EngineHandle, RequestIds};
pub(crate) use prompt::PromptBuilder;
pub use prompt::{common_prefix_len, completion_transcript, COMPLETION_STOPS};
pub use protocol::{recv_paced, STREAM_FRAME_INTERVAL};
pub use protocol::{
    AbReport, ChatMessage, ContextFull, EngineCommand, EngineConfig, EngineEvent, EventReceiver,
    EventSender, GenerateRequest, LlamaCounters, LoadStage, PromptText, RequestId, Role,
    StopReason, SweepPlan, TgSample, TurnReport, TurnRequest,
};
pub use score::Passes;
