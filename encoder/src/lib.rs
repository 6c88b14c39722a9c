//! The forward pass of a BERT sentence encoder (all-MiniLM-L6-v2, multilingual-e5-small…)
//! on the CPU: token ids in, last hidden states out, and the poolings sentence-transformers
//! applies to them. The gateway's local embedder (gateway/src/knowledge/embed/local.rs)
//! tokenizes, batches and normalises around it.
//!
//! - `bert`: the model's wiring, loaded from a checkpoint's tensors;
//! - `checkpoint`: those tensors, read from a safetensors file as `f32`;
//! - `kernels`: its arithmetic on plain buffers (gemm's products, attention, the
//!   element-wise steps), parallel over the cores;
//! - `math`: the element-wise functions, once over `simd`'s vectors (AVX-512, AVX2, floats).

mod bert;
mod checkpoint;
mod kernels;
mod math;
mod simd;

pub use bert::{Activation, Bert, Config, first_rows, mean_rows};
pub use checkpoint::{Error, Result};
