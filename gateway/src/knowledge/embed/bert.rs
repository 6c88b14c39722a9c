//! troupe's own forward pass of a BERT encoder (all-MiniLM-L6-v2, multilingual-e5-small…),
//! on candle's tensors, from the weights of a sentence-transformers or Hugging Face BERT
//! checkpoint. It owns the arithmetic of one pass: tokens in, last hidden states out. What
//! is read and how it is pooled is local.rs's.
//!
//! It exists because candle-transformers' `BertModel` computes the same model slower than
//! ONNX Runtime does (0.4× on short texts: docs/benchmarks.md, "Local embeddings"), for
//! reasons of wiring, not arithmetic, which this module does differently:
//! - **No work on padding outside attention.** The tokens of a pass are kept packed, one row
//!   per real token (`rows·tokens` rows, not `rows × longest`): every linear layer, GELU and
//!   layer norm runs on real tokens only. Attention alone spreads them into the padded
//!   `(rows, heads, width, width)` layout it needs, and gathers them back, by groups of
//!   texts of similar lengths so that it pads little too.
//! - **One GEMM per linear layer**: a 2-D `(tokens, in) × (in, out)` product over weights
//!   transposed once at load, contiguous; q, k and v are one product (a `(hidden, 3·hidden)`
//!   weight), with the 1/√d of the scores folded into q's weight and bias.
//! - **Fused kernels where candle-nn has them**: `softmax_last_dim` (one pass, parallel over
//!   rows) and `layer_norm` (one pass); GELU is the exact erf form, as BERT's config says.
//! - **The attention mask is built once per pass**, as an additive `(rows, 1, 1, width)`
//!   tensor, not rebuilt and re-broadcast by every layer (and none where nothing pads).
//!
//! The weights' names are those of `transformers`' `BertModel`, with or without the `bert.`
//! (or `<model_type>.`) prefix a checkpoint trained with a head carries, and LayerNorm's
//! `weight`/`bias` or the older `gamma`/`beta`, as candle-transformers accepts.

use candle_core::{Device, Result, Tensor};
use candle_nn::VarBuilder;
use candle_nn::ops::{layer_norm, softmax_last_dim};
use serde::Deserialize;

/// The fields of a BERT `config.json` this forward uses.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Config {
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
pub(super) enum Activation {
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
    fn apply(self, xs: &Tensor) -> Result<Tensor> {
        match self {
            Activation::Gelu => xs.gelu_erf(),
            Activation::GeluTanh => xs.gelu(),
            Activation::Relu => xs.relu(),
        }
    }
}

/// A `y = x·W + b` layer, `W` stored `(in, out)` and contiguous, so that a packed input is
/// one GEMM.
struct Linear {
    weight: Tensor,
    bias: Tensor,
}

impl Linear {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        xs.matmul(&self.weight)?.broadcast_add(&self.bias)
    }
}

struct Norm {
    weight: Tensor,
    bias: Tensor,
    eps: f32,
}

impl Norm {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        layer_norm(xs, &self.weight, &self.bias, self.eps)
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
pub(super) struct Bert {
    word_embeddings: Tensor,
    /// Position embeddings with token type 0's embedding added: every text troupe embeds is
    /// one segment, so the two tables are one lookup.
    positions: Tensor,
    embeddings_norm: Norm,
    layers: Vec<Layer>,
    heads: usize,
    hidden: usize,
    activation: Activation,
}

/// Texts of one pass that attention runs together, padded to the longest of them. A pass
/// is cut into groups of similar lengths (`groups`) so that attention, the one step that
/// needs padding, pads little: its scores are `rows × heads × width²` floats.
struct Group {
    /// The group's first packed row, and its real tokens.
    start: usize,
    tokens: usize,
    rows: usize,
    width: usize,
    /// For each slot of the padded `(rows × width)` layout, the row of the group's packed
    /// tokens it reads (padding reads row 0: its scores are masked out, its outputs
    /// dropped). `None` when nothing is padded (every text as long as the longest).
    spread: Option<Tensor>,
    /// For each packed row, its slot in the padded layout (`None` as for `spread`).
    gather: Option<Tensor>,
    /// 0 on real tokens, f32's lowest on padding, `(rows, 1, 1, width)`: built once per
    /// pass, added to every layer's scores.
    mask: Option<Tensor>,
}

impl Group {
    fn new(start: usize, lengths: &[usize], device: &Device) -> Result<Group> {
        let rows = lengths.len();
        let width = lengths.iter().copied().max().unwrap_or(0);
        let tokens = lengths.iter().sum();
        let mut group = Group {
            start,
            tokens,
            rows,
            width,
            spread: None,
            gather: None,
            mask: None,
        };
        if lengths.iter().all(|&n| n == width) {
            return Ok(group);
        }
        let mut spread = vec![0u32; rows * width];
        let mut gather = Vec::with_capacity(tokens);
        let mut mask = vec![f32::MIN; rows * width];
        let mut packed = 0u32;
        for (r, &n) in lengths.iter().enumerate() {
            for slot in r * width..r * width + n {
                spread[slot] = packed;
                gather.push(slot as u32);
                mask[slot] = 0.0;
                packed += 1;
            }
        }
        group.spread = Some(Tensor::from_vec(spread, rows * width, device)?);
        group.gather = Some(Tensor::from_vec(gather, tokens, device)?);
        group.mask = Some(Tensor::from_vec(mask, (rows, 1, 1, width), device)?);
        Ok(group)
    }
}

/// Attention scores of one group at most, per head, in `rows × width²` floats: one text of
/// 256 tokens (256 KB a head). A group's scores are made, masked, soft-maxed and multiplied
/// while they are still in the cache; as one tensor for a whole pass (32 texts of 256
/// tokens: 100 MB a layer) each of those steps was a trip to memory, and the fresh pages of
/// each new tensor cost the kernel a fault apiece (a fifth of the time on chunk-sized texts).
const GROUP_SCORES: usize = 256 * 256;

/// `lengths` cut into runs of consecutive texts whose lengths differ by at most a quarter
/// of the shortest (or 8 tokens), so that padding each run to its longest wastes little
/// attention, and whose scores fit `GROUP_SCORES` (a longer text is a run of its own).
/// Sorted lengths (as local.rs passes them) give few runs; any order is correct.
fn groups(lengths: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < lengths.len() {
        let (mut low, mut high) = (lengths[start], lengths[start]);
        let mut end = start + 1;
        while end < lengths.len() {
            let (l, h) = (low.min(lengths[end]), high.max(lengths[end]));
            if h - l > (l / 4).max(8) || (end + 1 - start) * h * h > GROUP_SCORES {
                break;
            }
            (low, high) = (l, h);
            end += 1;
        }
        out.push(start..end);
        start = end;
    }
    out
}

impl Bert {
    /// The encoder of `config` from `vb` (the checkpoint's tensors, f32).
    pub(super) fn load(vb: VarBuilder, config: &Config) -> Result<Bert> {
        let vb = model_root(vb, config);
        let h = config.hidden_size;
        if config.num_attention_heads == 0 || !h.is_multiple_of(config.num_attention_heads) {
            candle_core::bail!(
                "hidden_size {h} is not a multiple of num_attention_heads {}",
                config.num_attention_heads
            );
        }
        let emb = vb.pp("embeddings");
        let word_embeddings = emb.get((config.vocab_size, h), "word_embeddings.weight")?;
        let position = emb.get(
            (config.max_position_embeddings, h),
            "position_embeddings.weight",
        )?;
        let types = emb.get(
            (config.type_vocab_size.max(1), h),
            "token_type_embeddings.weight",
        )?;
        let positions = position.broadcast_add(&types.narrow(0, 0, 1)?)?;
        let eps = config.layer_norm_eps as f32;
        let layers = (0..config.num_hidden_layers)
            .map(|i| load_layer(vb.pp(format!("encoder.layer.{i}")), config))
            .collect::<Result<Vec<_>>>()?;
        Ok(Bert {
            word_embeddings,
            positions,
            embeddings_norm: load_norm(emb.pp("LayerNorm"), h, eps)?,
            layers,
            heads: config.num_attention_heads,
            hidden: h,
            activation: config.hidden_act,
        })
    }

    /// The last hidden states of `texts` (token ids, none empty), packed: `(Σ lengths,
    /// hidden)`, text after text in the order given, each its own tokens in order.
    pub(super) fn forward(&self, texts: &[&[u32]]) -> Result<Tensor> {
        let device = self.word_embeddings.device();
        let lengths: Vec<usize> = texts.iter().map(|t| t.len()).collect();
        let longest = lengths.iter().copied().max().unwrap_or(0);
        if lengths.contains(&0) || longest > self.positions.dim(0)? {
            candle_core::bail!(
                "every text needs 1 to {} tokens, got lengths {lengths:?}",
                self.positions.dim(0)?
            );
        }
        let ids: Vec<u32> = texts.iter().flat_map(|t| t.iter().copied()).collect();
        let at: Vec<u32> = lengths.iter().flat_map(|&n| 0..n as u32).collect();
        let tokens = ids.len();
        let ids = Tensor::from_vec(ids, tokens, device)?;
        let at = Tensor::from_vec(at, tokens, device)?;
        let embedded =
            (self.word_embeddings.index_select(&ids, 0)? + self.positions.index_select(&at, 0)?)?;
        let mut xs = self.embeddings_norm.forward(&embedded)?;
        let mut start = 0;
        let mut pass = Vec::new();
        for texts in groups(&lengths) {
            let group = Group::new(start, &lengths[texts], device)?;
            start += group.tokens;
            pass.push(group);
        }
        for layer in &self.layers {
            xs = self.layer(layer, &xs, &pass)?;
        }
        Ok(xs)
    }

    fn layer(&self, layer: &Layer, xs: &Tensor, pass: &[Group]) -> Result<Tensor> {
        let qkv = layer.qkv.forward(xs)?;
        let mut context = pass
            .iter()
            .map(|group| self.attention(&qkv.narrow(0, group.start, group.tokens)?, group))
            .collect::<Result<Vec<_>>>()?;
        let context = match context.len() {
            1 => context.remove(0),
            _ => Tensor::cat(&context, 0)?,
        };
        let attended = (layer.attention_out.forward(&context)? + xs)?;
        let attended = layer.attention_norm.forward(&attended)?;
        let inner = self
            .activation
            .apply(&layer.intermediate.forward(&attended)?)?;
        let out = (layer.output.forward(&inner)? + attended)?;
        layer.output_norm.forward(&out)
    }

    /// Self-attention of one group, from its packed q, k and v `(tokens, 3·hidden)`: its
    /// context `(tokens, hidden)`.
    fn attention(&self, qkv: &Tensor, group: &Group) -> Result<Tensor> {
        let (rows, width, heads) = (group.rows, group.width, self.heads);
        let head = self.hidden / heads;
        let qkv = match &group.spread {
            Some(spread) => qkv.index_select(spread, 0)?,
            None => qkv.clone(),
        };
        // (rows, width, q|k|v, heads, head) → (q|k|v, rows, heads, width, head).
        let qkv = qkv
            .reshape((rows, width, 3, heads, head))?
            .permute((2, 0, 3, 1, 4))?
            .contiguous()?;
        let (q, k, v) = (qkv.get(0)?, qkv.get(1)?, qkv.get(2)?);
        let scores = q.matmul(&k.t()?)?;
        let scores = match &group.mask {
            Some(mask) => scores.broadcast_add(mask)?,
            None => scores,
        };
        let context = softmax_last_dim(&scores)?
            .matmul(&v)?
            .transpose(1, 2)?
            .reshape((rows * width, self.hidden))?;
        match &group.gather {
            Some(gather) => context.index_select(gather, 0),
            None => Ok(context),
        }
    }
}

/// `vb` at the encoder's root: the checkpoint's names with no prefix, or under `bert.` or
/// `<model_type>.` (a checkpoint saved with a task head), whichever holds the embeddings.
fn model_root<'a>(vb: VarBuilder<'a>, config: &Config) -> VarBuilder<'a> {
    let probe = "embeddings.word_embeddings.weight";
    if vb.contains_tensor(probe) {
        return vb;
    }
    let prefixes = std::iter::once("bert").chain(config.model_type.as_deref());
    for prefix in prefixes {
        let under = vb.pp(prefix);
        if under.contains_tensor(probe) {
            return under;
        }
    }
    // Not found: loading names the missing tensor.
    vb
}

fn load_layer(vb: VarBuilder, config: &Config) -> Result<Layer> {
    let h = config.hidden_size;
    let scale = 1.0 / ((h / config.num_attention_heads) as f64).sqrt();
    let attention = vb.pp("attention");
    let own = attention.pp("self");
    let (q_w, q_b) = raw_linear(own.pp("query"), h, h)?;
    let (k_w, k_b) = raw_linear(own.pp("key"), h, h)?;
    let (v_w, v_b) = raw_linear(own.pp("value"), h, h)?;
    // Scores are q·k/√d: scaling q's weight and bias once here is the same product.
    let qkv = Linear {
        weight: Tensor::cat(&[(q_w * scale)?, k_w, v_w], 0)?
            .t()?
            .contiguous()?,
        bias: Tensor::cat(&[(q_b * scale)?, k_b, v_b], 0)?,
    };
    let eps = config.layer_norm_eps as f32;
    let i = config.intermediate_size;
    Ok(Layer {
        qkv,
        attention_out: load_linear(attention.pp("output.dense"), h, h)?,
        attention_norm: load_norm(attention.pp("output.LayerNorm"), h, eps)?,
        intermediate: load_linear(vb.pp("intermediate.dense"), h, i)?,
        output: load_linear(vb.pp("output.dense"), i, h)?,
        output_norm: load_norm(vb.pp("output.LayerNorm"), h, eps)?,
    })
}

/// A checkpoint's linear layer as stored: weight `(out, in)`, bias `(out)`.
fn raw_linear(vb: VarBuilder, inputs: usize, outputs: usize) -> Result<(Tensor, Tensor)> {
    Ok((
        vb.get((outputs, inputs), "weight")?,
        vb.get(outputs, "bias")?,
    ))
}

fn load_linear(vb: VarBuilder, inputs: usize, outputs: usize) -> Result<Linear> {
    let (weight, bias) = raw_linear(vb, inputs, outputs)?;
    Ok(Linear {
        weight: weight.t()?.contiguous()?,
        bias,
    })
}

/// A LayerNorm's scale and shift, as `weight`/`bias` or the older `gamma`/`beta`.
fn load_norm(vb: VarBuilder, size: usize, eps: f32) -> Result<Norm> {
    let pick = |names: [&'static str; 2]| {
        names
            .into_iter()
            .find(|n| vb.contains_tensor(n))
            .unwrap_or(names[0])
    };
    Ok(Norm {
        weight: vb.get(size, pick(["weight", "gamma"]))?,
        bias: vb.get(size, pick(["bias", "beta"]))?,
        eps,
    })
}

/// The mean of each text's rows of packed `hidden` `(Σ lengths, hidden)`: `(texts, hidden)`.
pub(super) fn mean_rows(hidden: &Tensor, lengths: &[usize]) -> Result<Tensor> {
    let mut at = 0;
    let means = lengths
        .iter()
        .map(|&n| {
            let mean = hidden.narrow(0, at, n)?.mean_keepdim(0);
            at += n;
            mean
        })
        .collect::<Result<Vec<_>>>()?;
    Tensor::cat(&means, 0)
}

/// Each text's first row of packed `hidden` (its `[CLS]` token): `(texts, hidden)`.
pub(super) fn first_rows(hidden: &Tensor, lengths: &[usize]) -> Result<Tensor> {
    let starts: Vec<u32> = lengths
        .iter()
        .scan(0u32, |at, &n| {
            let start = *at;
            *at += n as u32;
            Some(start)
        })
        .collect();
    let count = starts.len();
    hidden.index_select(&Tensor::from_vec(starts, count, hidden.device())?, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_cover_every_text_in_order_and_pad_little() {
        let lengths = [5, 6, 9, 12, 13, 14, 20, 40, 44, 50, 51, 256, 256];
        let cut = groups(&lengths);
        let mut next = 0;
        for group in &cut {
            assert_eq!(group.start, next, "{cut:?}");
            let run = &lengths[group.clone()];
            let (low, high) = (run.iter().min().unwrap(), run.iter().max().unwrap());
            assert!(high - low <= (low / 4).max(8), "{run:?}");
            assert!(
                run.len() == 1 || run.len() * high * high <= GROUP_SCORES,
                "{run:?}"
            );
            next = group.end;
        }
        assert_eq!(next, lengths.len());
        // Similar lengths share a group: not one group a text.
        assert_eq!(cut, [0..5, 5..7, 7..10, 10..11, 11..12, 12..13]);
        // Many short texts go together up to the budget of scores.
        let short = [16; 300];
        let cut = groups(&short);
        assert_eq!(cut[0], 0..GROUP_SCORES / (16 * 16));
        // Any order is covered, one text alone included.
        assert_eq!(groups(&[256, 5, 256]), [0..1, 1..2, 2..3]);
        assert_eq!(groups(&[7]), vec![0..1]);
        assert!(groups(&[]).is_empty());
    }

    /// A tiny BERT's tensors (hidden 4, 2 heads, 1 layer), named as `transformers` saves
    /// them under `prefix`, its LayerNorms as `weight`/`bias` or the older `gamma`/`beta`.
    fn tiny(prefix: &str, old_norms: bool) -> (std::collections::HashMap<String, Tensor>, Config) {
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
                let t = Tensor::from_vec(values, shape, &Device::Cpu).unwrap();
                (format!("{prefix}{name}"), t)
            })
            .collect();
        (tensors, config)
    }

    fn run(prefix: &str, old_norms: bool) -> Vec<Vec<f32>> {
        let (tensors, config) = tiny(prefix, old_norms);
        let vb = VarBuilder::from_tensors(tensors, candle_core::DType::F32, &Device::Cpu);
        let bert = Bert::load(vb, &config).expect("loads");
        let texts: [&[u32]; 2] = [&[1, 2, 3], &[4, 5]];
        bert.forward(&texts).unwrap().to_vec2().unwrap()
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
        tensors.remove("encoder.layer.0.output.dense.bias");
        let vb = VarBuilder::from_tensors(tensors, candle_core::DType::F32, &Device::Cpu);
        let err = Bert::load(vb, &config).err().expect("an error").to_string();
        assert!(err.contains("output.dense.bias"), "{err}");
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

    #[test]
    fn a_group_spreads_gathers_and_masks_its_padding() {
        let group = Group::new(3, &[2, 3], &Device::Cpu).unwrap();
        assert_eq!(
            (group.start, group.tokens, group.rows, group.width),
            (3, 5, 2, 3)
        );
        let spread = group.spread.unwrap().to_vec1::<u32>().unwrap();
        // Row 0's padding slot reads packed row 0; its output is never gathered.
        assert_eq!(spread, [0, 1, 0, 2, 3, 4]);
        assert_eq!(
            group.gather.unwrap().to_vec1::<u32>().unwrap(),
            [0, 1, 3, 4, 5]
        );
        let mask = group
            .mask
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(mask, [0.0, 0.0, f32::MIN, 0.0, 0.0, 0.0]);
        // Equal lengths: no padding, nothing to spread.
        let even = Group::new(0, &[4, 4], &Device::Cpu).unwrap();
        assert!(even.spread.is_none() && even.gather.is_none() && even.mask.is_none());
    }
}
