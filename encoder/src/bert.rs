//! troupe's own forward pass of a BERT encoder (all-MiniLM-L6-v2, multilingual-e5-small…),
//! from the weights of a sentence-transformers or Hugging Face BERT checkpoint. It owns the
//! wiring of one pass: tokens in, last hidden states out. The arithmetic is kernels.rs's;
//! what is read and how it is pooled is local.rs's.
//!
//! It exists because candle-transformers' `BertModel` computed the same model at 0.24× the
//! speed of ONNX Runtime on short texts, and a first version of this module on candle's
//! tensors at 0.36× (docs/benchmarks.md, "Local embeddings"). What it does differently:
//! - **Packed tokens, no padding anywhere.** A pass is its texts' tokens, one row each
//!   (`Σ lengths` rows, not `rows × longest`): every linear layer, GELU and layer norm runs
//!   on real tokens only, and attention runs text by text, each on its own rows of the q/k/v
//!   product, read in place with their strides: no mask, no spreading into a padded layout.
//! - **One GEMM per linear layer**, over weights transposed once at load; q, k and v are one
//!   product (a `(hidden, 3·hidden)` weight), with the 1/√d of the scores folded into q's
//!   weight and bias. The bias and the residual are written into the output first and the
//!   product added to them, so neither is a pass of its own.
//! - **Four buffers a pass**, reused layer after layer, instead of a fresh tensor for every
//!   operation.
//!
//! The weights' names are those of `transformers`' `BertModel`, with or without the `bert.`
//! (or `<model_type>.`) prefix a checkpoint trained with a head carries, and LayerNorm's
//! `weight`/`bias` or the older `gamma`/`beta`, as candle-transformers accepts. They are
//! read from the safetensors file by checkpoint.rs, as F32, F16 or BF16.

use serde::Deserialize;

use crate::checkpoint::{self, Checkpoint, Error, Result, transpose};
use crate::kernels;

/// The fields of a BERT `config.json` this forward uses.
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: Activation,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub model_type: Option<String>,
}

/// The feed-forward activation, by the names `transformers` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Activation {
    /// The exact form, `x·Φ(x)` with erf: BERT's `gelu`.
    #[serde(rename = "gelu")]
    Gelu,
    /// The tanh approximation.
    #[serde(alias = "gelu_new", alias = "gelu_pytorch_tanh", alias = "gelu_fast")]
    #[serde(rename = "geluapproximate")]
    GeluTanh,
    #[serde(rename = "relu")]
    Relu,
}

impl Activation {
    fn apply(self, xs: &mut [f32]) {
        match self {
            Activation::Gelu => kernels::gelu_erf(xs),
            Activation::GeluTanh => kernels::gelu_tanh(xs),
            Activation::Relu => kernels::relu(xs),
        }
    }
}

/// A `y = x·W + b` layer, `W` stored `(in, out)`, row-major.
struct Linear {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl Linear {
    /// `xs·W + b`, plus `residual` when given, into `out`.
    fn forward(&self, out: &mut Vec<f32>, xs: &[f32], residual: Option<&[f32]>) {
        kernels::linear(out, xs, &self.weight, &self.bias, residual)
    }
}

struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    eps: f32,
}

impl Norm {
    fn apply(&self, xs: &mut [f32]) {
        kernels::layer_norm(xs, &self.weight, &self.bias, self.eps)
    }
}

struct Layer {
    /// q, k and v in one: `(hidden, 3·hidden)`, q's columns scaled by 1/√d.
    qkv: Linear,
    attention_out: Linear,
    attention_norm: Norm,
    intermediate: Linear,
    output: Linear,
    output_norm: Norm,
}

/// The encoder: embeddings, then `num_hidden_layers` layers.
pub struct Bert {
    /// `(vocab, hidden)`.
    word_embeddings: Vec<f32>,
    /// Position embeddings with token type 0's embedding added, `(positions, hidden)`:
    /// every text troupe embeds is one segment, so the two tables are one lookup.
    positions: Vec<f32>,
    embeddings_norm: Norm,
    layers: Vec<Layer>,
    heads: usize,
    hidden: usize,
    activation: Activation,
}

/// The buffers of one pass besides the hidden states, reused by every layer.
#[derive(Default)]
struct Buffers {
    qkv: Vec<f32>,
    context: Vec<f32>,
    attended: Vec<f32>,
    inner: Vec<f32>,
}

impl Bert {
    /// The encoder of `config` from `weights`, the bytes of its `model.safetensors`.
    pub fn load(weights: &[u8], config: &Config) -> Result<Bert> {
        check(config)?;
        let file = checkpoint::parse(weights)?;
        let model = model_root(Checkpoint::new(&file), config);
        let h = config.hidden_size;
        let emb = model.under("embeddings");
        let word_embeddings = emb.get("word_embeddings.weight", &[config.vocab_size, h])?;
        let mut positions = emb.get(
            "position_embeddings.weight",
            &[config.max_position_embeddings, h],
        )?;
        let types = emb.get(
            "token_type_embeddings.weight",
            &[config.type_vocab_size.max(1), h],
        )?;
        for row in positions.chunks_exact_mut(h) {
            row.iter_mut().zip(&types[..h]).for_each(|(p, t)| *p += t);
        }
        let eps = config.layer_norm_eps as f32;
        let layers = (0..config.num_hidden_layers)
            .map(|i| load_layer(&model.under(&format!("encoder.layer.{i}")), config))
            .collect::<Result<Vec<_>>>()?;
        Ok(Bert {
            word_embeddings,
            positions,
            embeddings_norm: load_norm(&emb.under("LayerNorm"), h, eps)?,
            layers,
            heads: config.num_attention_heads,
            hidden: h,
            activation: config.hidden_act,
        })
    }

    /// The width of a hidden state.
    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// The last hidden states of `texts` (token ids, none empty), packed: `(Σ lengths,
    /// hidden)` row-major, text after text in the order given, each its own tokens in order.
    pub fn forward(&self, texts: &[&[u32]]) -> Result<Vec<f32>> {
        let h = self.hidden;
        let (vocab, most) = (self.word_embeddings.len() / h, self.positions.len() / h);
        let lengths: Vec<usize> = texts.iter().map(|t| t.len()).collect();
        if lengths.iter().any(|&n| n == 0 || n > most) {
            return Err(Error::new(format!(
                "every text needs 1 to {most} tokens, got lengths {lengths:?}"
            )));
        }
        if let Some(id) = texts
            .iter()
            .flat_map(|t| t.iter())
            .find(|&&id| id as usize >= vocab)
        {
            return Err(Error::new(format!(
                "token id {id} is outside the model's vocabulary of {vocab}"
            )));
        }
        let mut xs = Vec::with_capacity(lengths.iter().sum::<usize>() * h);
        for text in texts {
            for (at, &id) in text.iter().enumerate() {
                let word = &self.word_embeddings[id as usize * h..][..h];
                let position = &self.positions[at * h..][..h];
                xs.extend(word.iter().zip(position).map(|(w, p)| w + p));
            }
        }
        self.embeddings_norm.apply(&mut xs);
        let mut buffers = Buffers::default();
        for layer in &self.layers {
            self.layer(layer, &mut xs, &lengths, &mut buffers);
        }
        Ok(xs)
    }

    /// One encoder layer: `xs` in, its output in `xs`.
    fn layer(&self, layer: &Layer, xs: &mut Vec<f32>, lengths: &[usize], b: &mut Buffers) {
        layer.qkv.forward(&mut b.qkv, xs, None);
        kernels::attention(&mut b.context, &b.qkv, lengths, self.heads, self.hidden);
        layer
            .attention_out
            .forward(&mut b.attended, &b.context, Some(xs));
        layer.attention_norm.apply(&mut b.attended);
        layer.intermediate.forward(&mut b.inner, &b.attended, None);
        self.activation.apply(&mut b.inner);
        layer.output.forward(xs, &b.inner, Some(&b.attended));
        layer.output_norm.apply(xs);
    }
}

/// The sizes `config` gives are ones a BERT can have.
fn check(config: &Config) -> Result<()> {
    let h = config.hidden_size;
    let sizes = [
        ("vocab_size", config.vocab_size),
        ("hidden_size", h),
        ("intermediate_size", config.intermediate_size),
        ("max_position_embeddings", config.max_position_embeddings),
    ];
    if let Some((name, _)) = sizes.iter().find(|(_, size)| *size == 0) {
        return Err(Error::new(format!(
            "config.json: {name} is 0; a BERT model needs at least 1"
        )));
    }
    if config.num_attention_heads == 0 || !h.is_multiple_of(config.num_attention_heads) {
        return Err(Error::new(format!(
            "hidden_size {h} is not a multiple of num_attention_heads {}",
            config.num_attention_heads
        )));
    }
    Ok(())
}

/// The checkpoint at the encoder's root: its names with no prefix, or under `bert.` or
/// `<model_type>.` (a checkpoint saved with a task head), whichever holds the embeddings.
fn model_root<'a>(root: Checkpoint<'a>, config: &Config) -> Checkpoint<'a> {
    let probe = "embeddings.word_embeddings.weight";
    if root.contains(probe) {
        return root;
    }
    let prefixes = std::iter::once("bert").chain(config.model_type.as_deref());
    for prefix in prefixes {
        let under = root.under(prefix);
        if under.contains(probe) {
            return under;
        }
    }
    // Not found: loading names the missing tensor.
    root
}

fn load_layer(at: &Checkpoint, config: &Config) -> Result<Layer> {
    let h = config.hidden_size;
    // As the f64 scalar candle multiplied by: the same f32 products.
    let scale = (1.0 / ((h / config.num_attention_heads) as f64).sqrt()) as f32;
    let attention = at.under("attention");
    let own = attention.under("self");
    let (mut q_w, mut q_b) = raw_linear(&own.under("query"), h, h)?;
    let (k_w, k_b) = raw_linear(&own.under("key"), h, h)?;
    let (v_w, v_b) = raw_linear(&own.under("value"), h, h)?;
    // Scores are q·k/√d: scaling q's weight and bias once here is the same product.
    q_w.iter_mut().chain(&mut q_b).for_each(|x| *x *= scale);
    // Stacked as stored, `(3·hidden, hidden)`, then transposed: `(hidden, 3·hidden)`.
    let qkv = Linear {
        weight: transpose(&[q_w, k_w, v_w].concat(), 3 * h, h),
        bias: [q_b, k_b, v_b].concat(),
    };
    let eps = config.layer_norm_eps as f32;
    let i = config.intermediate_size;
    Ok(Layer {
        qkv,
        attention_out: load_linear(&attention.under("output.dense"), h, h)?,
        attention_norm: load_norm(&attention.under("output.LayerNorm"), h, eps)?,
        intermediate: load_linear(&at.under("intermediate.dense"), h, i)?,
        output: load_linear(&at.under("output.dense"), i, h)?,
        output_norm: load_norm(&at.under("output.LayerNorm"), h, eps)?,
    })
}

/// A checkpoint's linear layer as stored: weight `(out, in)`, bias `(out)`.
fn raw_linear(at: &Checkpoint, inputs: usize, outputs: usize) -> Result<(Vec<f32>, Vec<f32>)> {
    Ok((
        at.get("weight", &[outputs, inputs])?,
        at.get("bias", &[outputs])?,
    ))
}

fn load_linear(at: &Checkpoint, inputs: usize, outputs: usize) -> Result<Linear> {
    let (weight, bias) = raw_linear(at, inputs, outputs)?;
    Ok(Linear {
        weight: transpose(&weight, outputs, inputs),
        bias,
    })
}

/// A LayerNorm's scale and shift, as `weight`/`bias` or the older `gamma`/`beta`.
fn load_norm(at: &Checkpoint, size: usize, eps: f32) -> Result<Norm> {
    let pick = |names: [&'static str; 2]| {
        names
            .into_iter()
            .find(|n| at.contains(n))
            .unwrap_or(names[0])
    };
    Ok(Norm {
        weight: at.get(pick(["weight", "gamma"]), &[size])?,
        bias: at.get(pick(["bias", "beta"]), &[size])?,
        eps,
    })
}

/// The mean of each text's rows of packed `hidden` states (`width` floats a row): one
/// vector a text.
pub fn mean_rows(hidden: &[f32], width: usize, lengths: &[usize]) -> Vec<Vec<f32>> {
    let mut rows = hidden.chunks_exact(width);
    lengths
        .iter()
        .map(|&n| {
            let mut mean = vec![0f32; width];
            for row in rows.by_ref().take(n) {
                mean.iter_mut().zip(row).for_each(|(m, x)| *m += x);
            }
            mean.iter_mut().for_each(|m| *m /= n.max(1) as f32);
            mean
        })
        .collect()
}

/// Each text's first row of packed `hidden` states (its `[CLS]` token).
pub fn first_rows(hidden: &[f32], width: usize, lengths: &[usize]) -> Vec<Vec<f32>> {
    let mut at = 0;
    lengths
        .iter()
        .map(|&n| {
            let row = hidden[at * width..][..width].to_vec();
            at += n;
            row
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::Dtype;
    use safetensors::tensor::TensorView;

    type Tensors = Vec<(String, Vec<usize>, Vec<f32>)>;

    /// A tiny BERT's tensors (hidden 4, 2 heads, 1 layer), named as `transformers` saves
    /// them under `prefix`, its LayerNorms as `weight`/`bias` or the older `gamma`/`beta`.
    fn tiny(prefix: &str, old_norms: bool) -> (Tensors, Config) {
        let config: Config = serde_json::from_value(serde_json::json!({
            "vocab_size": 10, "hidden_size": 4, "num_hidden_layers": 1,
            "num_attention_heads": 2, "intermediate_size": 8, "hidden_act": "gelu",
            "max_position_embeddings": 8, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
            "model_type": "bert"
        }))
        .unwrap();
        let (scale, shift) = if old_norms {
            ("gamma", "beta")
        } else {
            ("weight", "bias")
        };
        let mut shapes: Vec<(String, Vec<usize>)> = vec![
            ("embeddings.word_embeddings.weight".into(), vec![10, 4]),
            ("embeddings.position_embeddings.weight".into(), vec![8, 4]),
            ("embeddings.token_type_embeddings.weight".into(), vec![2, 4]),
        ];
        let layer = "encoder.layer.0";
        for (name, out, inp) in [
            ("attention.self.query", 4, 4),
            ("attention.self.key", 4, 4),
            ("attention.self.value", 4, 4),
            ("attention.output.dense", 4, 4),
            ("intermediate.dense", 8, 4),
            ("output.dense", 4, 8),
        ] {
            shapes.push((format!("{layer}.{name}.weight"), vec![out, inp]));
            shapes.push((format!("{layer}.{name}.bias"), vec![out]));
        }
        for norm in [
            "embeddings",
            "encoder.layer.0.attention.output",
            "encoder.layer.0.output",
        ] {
            shapes.push((format!("{norm}.LayerNorm.{scale}"), vec![4]));
            shapes.push((format!("{norm}.LayerNorm.{shift}"), vec![4]));
        }
        let tensors = shapes
            .into_iter()
            .enumerate()
            .map(|(i, (name, shape))| {
                let n: usize = shape.iter().product();
                // Deterministic, different for every tensor and element.
                let values: Vec<f32> = (0..n)
                    .map(|j| ((i * 31 + j * 7) % 13) as f32 / 13.0 - 0.4)
                    .collect();
                (format!("{prefix}{name}"), shape, values)
            })
            .collect();
        (tensors, config)
    }

    /// `tensors` as a safetensors file, each stored as `dtype` (F32, F16 or BF16, rounded
    /// to it), as `transformers` writes one.
    fn file(tensors: &Tensors, dtype: Dtype) -> Vec<u8> {
        let bytes: Vec<Vec<u8>> = tensors
            .iter()
            .map(|(_, _, values)| match dtype {
                Dtype::F32 => values.iter().flat_map(|x| x.to_le_bytes()).collect(),
                Dtype::F16 => (values.iter())
                    .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                    .collect(),
                Dtype::BF16 => (values.iter())
                    .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
                    .collect(),
                other => panic!("no test stores {other:?}"),
            })
            .collect();
        let views = tensors.iter().zip(&bytes).map(|((name, shape, _), data)| {
            (name, TensorView::new(dtype, shape.clone(), data).unwrap())
        });
        safetensors::serialize(views, None).unwrap()
    }

    fn run_file(weights: &[u8], config: &Config) -> Vec<Vec<f32>> {
        let bert = Bert::load(weights, config).expect("loads");
        let texts: [&[u32]; 2] = [&[1, 2, 3], &[4, 5]];
        let hidden = bert.forward(&texts).unwrap();
        hidden.chunks(bert.hidden()).map(|r| r.to_vec()).collect()
    }

    fn run(prefix: &str, old_norms: bool) -> Vec<Vec<f32>> {
        let (tensors, config) = tiny(prefix, old_norms);
        run_file(&file(&tensors, Dtype::F32), &config)
    }

    fn load_error(weights: &[u8], config: &Config) -> String {
        Bert::load(weights, config)
            .err()
            .expect("an error")
            .to_string()
    }

    #[test]
    fn checkpoints_load_with_or_without_a_prefix_and_old_norm_names() {
        let plain = run("", false);
        assert_eq!((plain.len(), plain[0].len()), (5, 4), "one row a token");
        assert!(plain.iter().flatten().all(|x| x.is_finite()));
        assert_eq!(run("bert.", false), plain);
        assert_eq!(run("", true), plain);
        // A checkpoint missing a tensor is an error naming it, not a panic.
        let (mut tensors, config) = tiny("", false);
        tensors.retain(|(name, _, _)| name != "encoder.layer.0.output.dense.bias");
        let err = load_error(&file(&tensors, Dtype::F32), &config);
        assert!(err.contains("output.dense.bias"), "{err}");
    }

    #[test]
    fn half_precision_checkpoints_load_as_their_values_in_f32() {
        let (tensors, config) = tiny("", false);
        for (dtype, round) in [
            (
                Dtype::F16,
                (|x| half::f16::from_f32(x).to_f32()) as fn(f32) -> f32,
            ),
            (Dtype::BF16, |x| half::bf16::from_f32(x).to_f32()),
        ] {
            // The same values stored as f32: what the half file must load as, exactly.
            let rounded: Tensors = (tensors.iter().cloned())
                .map(|(name, shape, values)| (name, shape, values.into_iter().map(round).collect()))
                .collect();
            let want = run_file(&file(&rounded, Dtype::F32), &config);
            assert_eq!(run_file(&file(&tensors, dtype), &config), want, "{dtype:?}");
            assert_ne!(want, run("", false), "{dtype:?} rounds some value");
        }
    }

    #[test]
    fn a_tensor_of_another_shape_or_type_is_an_error_naming_it() {
        let (tensors, config) = tiny("", false);
        let name = "encoder.layer.0.intermediate.dense.weight";
        let mut reshaped = tensors.clone();
        let at = reshaped.iter().position(|(n, _, _)| n == name).unwrap();
        reshaped[at].1 = vec![4, 8];
        let err = load_error(&file(&reshaped, Dtype::F32), &config);
        assert!(err.contains(name) && err.contains("[4, 8]"), "{err}");
        // Integers where floats belong: the same tensor's bytes, typed I32.
        let bytes: Vec<Vec<u8>> = (tensors.iter())
            .map(|(_, _, v)| v.iter().flat_map(|x| x.to_le_bytes()).collect())
            .collect();
        let views = tensors.iter().zip(&bytes).map(|((n, shape, _), data)| {
            let dtype = if n == name { Dtype::I32 } else { Dtype::F32 };
            (n, TensorView::new(dtype, shape.clone(), data).unwrap())
        });
        let weights = safetensors::serialize(views, None).unwrap();
        let err = load_error(&weights, &config);
        assert!(err.contains(name) && err.contains("I32"), "{err}");
    }

    #[test]
    fn a_malformed_file_is_an_error_not_a_panic() {
        let (tensors, config) = tiny("", false);
        let good = file(&tensors, Dtype::F32);
        let header = 8 + u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
        // Every truncation, and every byte of the header and its length changed.
        for len in 0..good.len() {
            assert!(Bert::load(&good[..len], &config).is_err(), "cut at {len}");
        }
        for at in 0..header {
            for byte in [0u8, b'9', b'"', b'}', 0xff] {
                let mut bad = good.clone();
                bad[at] = byte;
                // Either still a checkpoint of the right shapes, or an error; never a panic.
                let _ = Bert::load(&bad, &config);
            }
        }
        let err = load_error(b"not safetensors at all", &config);
        assert!(err.contains("not a safetensors file"), "{err}");
    }

    #[test]
    fn a_config_with_a_size_of_zero_is_an_error_naming_it() {
        type Set = fn(&mut Config);
        let zero: [(&str, Set); 3] = [
            ("hidden_size", |c| c.hidden_size = 0),
            ("intermediate_size", |c| c.intermediate_size = 0),
            ("vocab_size", |c| c.vocab_size = 0),
        ];
        for (field, set) in zero {
            let (tensors, mut config) = tiny("", false);
            set(&mut config);
            let err = load_error(&file(&tensors, Dtype::F32), &config);
            assert!(err.contains(field), "{err}");
        }
    }

    #[test]
    fn bad_token_ids_and_lengths_are_errors_not_panics() {
        let (tensors, config) = tiny("", false);
        let bert = Bert::load(&file(&tensors, Dtype::F32), &config).unwrap();
        let err = bert.forward(&[&[1, 10]]).unwrap_err().to_string();
        assert!(
            err.contains("token id 10") && err.contains("vocabulary of 10"),
            "{err}"
        );
        let err = bert.forward(&[&[1], &[]]).unwrap_err().to_string();
        assert!(err.contains("1 to 8 tokens"), "{err}");
        assert!(bert.forward(&[&[1; 9]]).is_err());
    }
    #[test]
    fn pooling_takes_each_texts_own_rows() {
        // Three texts of 1, 2 and 3 rows of width 2.
        let hidden = [
            1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0,
        ];
        let lengths = [1, 2, 3];
        assert_eq!(
            mean_rows(&hidden, 2, &lengths),
            [vec![1.0, 2.0], vec![4.0, 5.0], vec![9.0, 10.0]]
        );
        assert_eq!(
            first_rows(&hidden, 2, &lengths),
            [vec![1.0, 2.0], vec![3.0, 4.0], vec![7.0, 8.0]]
        );
    }

    #[test]
    fn activations_parse_by_their_transformers_names() {
        let act = |name: &str| serde_json::from_value::<Activation>(serde_json::json!(name));
        assert_eq!(act("gelu").unwrap(), Activation::Gelu);
        assert_eq!(act("gelu_new").unwrap(), Activation::GeluTanh);
        assert_eq!(act("gelu_pytorch_tanh").unwrap(), Activation::GeluTanh);
        assert_eq!(act("relu").unwrap(), Activation::Relu);
        assert!(act("swish").is_err());
    }
}
