//! A checkpoint's tensors as the forward wants them: `f32` values, row-major, each of the
//! shape the model's config says. It owns reading the safetensors format (through the
//! `safetensors` crate, which checks the header, the offsets and every tensor's length
//! against its shape and type) and the conversions F16 and BF16 checkpoints need.
//!
//! Everything a file can get wrong is an `Error` naming the tensor: a missing name, another
//! shape, a type that is not a float of 32, 16 or bfloat16 bits, a malformed header or a
//! truncated file. Nothing in it panics on a file's contents.

use std::fmt;

use safetensors::{Dtype, SafeTensors};

/// What went wrong loading or running the model: one sentence for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(String);

impl Error {
    pub(crate) fn new(message: impl Into<String>) -> Error {
        Error(message.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// The tensors of `bytes`, a whole safetensors file.
pub(crate) fn parse(bytes: &[u8]) -> Result<SafeTensors<'_>> {
    SafeTensors::deserialize(bytes).map_err(|e| Error::new(format!("not a safetensors file: {e}")))
}

/// The tensors of one safetensors file, read under a name prefix (`bert.`, say).
#[derive(Clone)]
pub(crate) struct Checkpoint<'a> {
    tensors: &'a SafeTensors<'a>,
    prefix: String,
}

impl<'a> Checkpoint<'a> {
    /// All of `tensors`, no prefix.
    pub(crate) fn new(tensors: &'a SafeTensors<'a>) -> Checkpoint<'a> {
        Checkpoint {
            tensors,
            prefix: String::new(),
        }
    }

    /// The same tensors, with `name.` added to this prefix.
    pub(crate) fn under(&self, name: &str) -> Checkpoint<'a> {
        Checkpoint {
            tensors: self.tensors,
            prefix: format!("{}{name}.", self.prefix),
        }
    }

    pub(crate) fn contains(&self, name: &str) -> bool {
        self.tensors.tensor(&self.full(name)).is_ok()
    }

    /// The values of tensor `name`, which must be of `shape`, as `f32`.
    pub(crate) fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let full = self.full(name);
        let view = self
            .tensors
            .tensor(&full)
            .map_err(|_| Error::new(format!("the checkpoint has no tensor `{full}`")))?;
        if view.shape() != shape {
            return Err(Error::new(format!(
                "tensor `{full}` has shape {:?}; the config says {shape:?}",
                view.shape()
            )));
        }
        // safetensors checked that the data is exactly the shape's elements of the type.
        let data = view.data();
        Ok(match view.dtype() {
            Dtype::F32 => data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::F16 => halves(data)
                .map(|bits| half::f16::from_bits(bits).to_f32())
                .collect(),
            Dtype::BF16 => halves(data)
                .map(|bits| half::bf16::from_bits(bits).to_f32())
                .collect(),
            other => {
                return Err(Error::new(format!(
                    "tensor `{full}` is {other:?}; the encoder reads F32, F16 or BF16"
                )));
            }
        })
    }

    fn full(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

/// Little-endian 16-bit words.
fn halves(data: &[u8]) -> impl Iterator<Item = u16> + '_ {
    data.chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
}

/// `values` `(rows, cols)` row-major, transposed: `(cols, rows)`.
pub(crate) fn transpose(values: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0f32; values.len()];
    for (r, row) in values.chunks_exact(cols).enumerate().take(rows) {
        for (c, &x) in row.iter().enumerate() {
            out[c * rows + r] = x;
        }
    }
    out
}
