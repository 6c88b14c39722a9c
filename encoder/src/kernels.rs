//! The arithmetic of troupe's BERT forward (bert.rs), on plain `f32` slices, spread over
//! the cores with rayon: the linear layers' products through the `gemm` crate, and
//! attention and the element-wise steps (bias and residual, layer norm, GELU, soft-max)
//! written here over math.rs's vector functions.
//!
//! Why not a tensor library's operations: each makes a fresh tensor (a trip to memory, and
//! the kernel's page faults on its new pages), several copy to change a layout (attention's
//! permutes), and GELU and soft-max call libm's `erff`/`expf` one float at a time. Here
//! the forward owns four buffers a pass, attention reads q, k and v where the q/k/v
//! product wrote them (one text at a time, so nothing is padded), and each element-wise
//! step runs as AVX-512, AVX2 or plain floats, whichever the CPU has: `pulp` picks it at
//! run time (`arch`) and compiles each step once for each (the `WithSimd` types below),
//! with no `unsafe` (gemm's call aside: it takes raw pointers).

use std::sync::OnceLock;

use pulp::{Arch, Simd, WithSimd};
use rayon::prelude::*;

use crate::math;
/// Rows of `hidden` floats one rayon task takes in a row-wise step (layer norm, bias):
/// enough that the task outweighs its scheduling.
const ROWS_PER_TASK: usize = 64;
/// Floats one rayon task takes in GELU.
const FLOATS_PER_TASK: usize = 32 * 1024;

/// The widest instruction set this CPU has, found once.
pub(crate) fn arch() -> Arch {
    static ARCH: OnceLock<Arch> = OnceLock::new();
    *ARCH.get_or_init(Arch::new)
}

/// How the matrix products of a pass use the machine: rayon's threads (all cores, as
/// ONNX Runtime's default), or none when there is one.
pub(crate) fn parallelism() -> gemm::Parallelism {
    match rayon::current_num_threads() {
        0 | 1 => gemm::Parallelism::None,
        n => gemm::Parallelism::Rayon(n),
    }
}

/// `out = xs·w + bias (+ residual)`: `xs` `(rows, inner)`, `w` `(inner, cols)`, `bias`
/// `(cols)`, `residual` and `out` `(rows, cols)`, all row-major and contiguous. `out` is
/// overwritten (its length set).
pub(crate) fn linear(
    out: &mut Vec<f32>,
    xs: &[f32],
    w: &[f32],
    bias: &[f32],
    residual: Option<&[f32]>,
) {
    let cols = bias.len();
    let inner = w.len() / cols;
    let rows = xs.len() / inner;
    assert_eq!(
        (xs.len(), w.len()),
        (rows * inner, inner * cols),
        "linear: shapes"
    );
    out.clear();
    out.resize(rows * cols, 0.0);
    let task = ROWS_PER_TASK * cols;
    match residual {
        Some(residual) => {
            assert_eq!(residual.len(), rows * cols, "linear: residual shape");
            out.par_chunks_mut(task)
                .zip(residual.par_chunks(task))
                .for_each(|(out, residual)| {
                    for (out, residual) in out.chunks_exact_mut(cols).zip(residual.chunks(cols)) {
                        for ((o, r), b) in out.iter_mut().zip(residual).zip(bias) {
                            *o = r + b;
                        }
                    }
                })
        }
        None => out.par_chunks_mut(task).for_each(|out| {
            for out in out.chunks_exact_mut(cols) {
                out.copy_from_slice(bias);
            }
        }),
    }
    // SAFETY: every matrix is contiguous and row-major with the lengths asserted above, so
    // each of gemm's reads and writes (row stride × row + column) is inside its slice.
    unsafe {
        gemm::gemm(
            rows,
            cols,
            inner,
            out.as_mut_ptr(),
            1,
            cols as isize,
            true,
            xs.as_ptr(),
            1,
            inner as isize,
            w.as_ptr(),
            1,
            cols as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism(),
        );
    }
}

/// Self-attention of a pass: `qkv` is the q/k/v product of its packed tokens, `(tokens,
/// 3·hidden)`, text after text (`lengths`), q's scale by 1/√d already in its weights.
/// Writes each token's context, `(tokens, hidden)`, into `context`. Each text attends
/// to its own tokens only, so nothing is padded and no mask is needed; texts run in
/// parallel.
pub(crate) fn attention(
    context: &mut Vec<f32>,
    qkv: &[f32],
    lengths: &[usize],
    heads: usize,
    hidden: usize,
) {
    attention_in(arch(), context, qkv, lengths, heads, hidden)
}

/// `attention` in the instruction set of `arch`.
fn attention_in(
    arch: Arch,
    context: &mut Vec<f32>,
    qkv: &[f32],
    lengths: &[usize],
    heads: usize,
    hidden: usize,
) {
    let tokens: usize = lengths.iter().sum();
    assert_eq!(qkv.len(), tokens * 3 * hidden, "attention: q/k/v shape");
    assert!(
        heads > 0 && hidden.is_multiple_of(heads),
        "attention: heads"
    );
    context.clear();
    context.resize(tokens * hidden, 0.0);
    let mut texts = Vec::with_capacity(lengths.len());
    let (mut qkv_rest, mut out_rest) = (qkv, &mut context[..]);
    for &n in lengths {
        let (qkv, q_next) = qkv_rest.split_at(n * 3 * hidden);
        let (out, out_next) = out_rest.split_at_mut(n * hidden);
        texts.push((qkv, out));
        (qkv_rest, out_rest) = (q_next, out_next);
    }
    texts
        .into_par_iter()
        .for_each_init(Vec::new, |scores, (qkv, out)| {
            text_attention(arch, out, qkv, heads, hidden, scores)
        });
}

/// Attention of one text of `n` tokens: `qkv` `(n, 3·hidden)`, `out` `(n, hidden)`.
/// `scratch` is the task's, reused text after text.
///
/// Not gemm: a head's products are `n × 32` by `32 × n`, too small for gemm's packing and
/// tiles to pay (they took a fifth of a pass on short texts); as `axpy`s over contiguous
/// rows (math.rs) they run in whole vectors, with the soft-max between them.
fn text_attention(
    arch: Arch,
    out: &mut [f32],
    qkv: &[f32],
    heads: usize,
    hidden: usize,
    scratch: &mut Vec<f32>,
) {
    let d = hidden / heads;
    let n = out.len() / hidden;
    // kᵀ of a head `(d, n)`, then one row of scores `(n)`.
    scratch.clear();
    scratch.resize(d * n + n, 0.0);
    let (keys, scores) = scratch.split_at_mut(d * n);
    for head in 0..heads {
        arch.dispatch(HeadAttention {
            out: &mut *out,
            qkv,
            hidden,
            at: head * d,
            d,
            keys: &mut *keys,
            scores: &mut *scores,
        });
    }
}

/// One head of a text's attention: the head's q, k and v are columns `at..at + d` of
/// each third of `qkv`'s rows; its context goes to columns `at..at + d` of `out`'s.
struct HeadAttention<'a> {
    out: &'a mut [f32],
    qkv: &'a [f32],
    hidden: usize,
    at: usize,
    d: usize,
    keys: &'a mut [f32],
    scores: &'a mut [f32],
}

impl WithSimd for HeadAttention<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, s: S) {
        let HeadAttention {
            out,
            qkv,
            hidden,
            at,
            d,
            keys,
            scores,
        } = self;
        let n = scores.len();
        let stride = 3 * hidden;
        for (j, row) in qkv.chunks_exact(stride).enumerate() {
            for (c, &k) in row[hidden + at..][..d].iter().enumerate() {
                keys[c * n + j] = k;
            }
        }
        for (i, row) in qkv.chunks_exact(stride).enumerate() {
            // scores = q_i · kᵀ, as a sum of kᵀ's rows scaled by q_i's elements.
            scores.fill(0.0);
            for (&q, keys) in row[at..][..d].iter().zip(keys.chunks_exact(n)) {
                math::axpy(s, scores, q, keys);
            }
            math::softmax(s, scores);
            // context_i = Σ_j p_j · v_j.
            let context = &mut out[i * hidden + at..][..d];
            context.fill(0.0);
            for (&p, row) in scores.iter().zip(qkv.chunks_exact(stride)) {
                math::axpy(s, context, p, &row[2 * hidden + at..][..d]);
            }
        }
    }
}

/// Each row of `xs` (rows of `weight.len()` floats) normalised to mean 0 and variance 1,
/// then scaled and shifted: BERT's LayerNorm.
pub(crate) fn layer_norm(xs: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
    layer_norm_in(arch(), xs, weight, bias, eps)
}

fn layer_norm_in(arch: Arch, xs: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
    let width = weight.len();
    xs.par_chunks_mut(ROWS_PER_TASK * width).for_each(|rows| {
        arch.dispatch(NormRows {
            rows,
            weight,
            bias,
            eps,
        })
    });
}

struct NormRows<'a> {
    rows: &'a mut [f32],
    weight: &'a [f32],
    bias: &'a [f32],
    eps: f32,
}

impl WithSimd for NormRows<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, s: S) {
        let NormRows {
            rows,
            weight,
            bias,
            eps,
        } = self;
        let width = weight.len() as f32;
        for row in rows.chunks_exact_mut(weight.len()) {
            let mean = math::sum(s, row) / width;
            let variance = math::sum_squares_from(s, row, mean) / width;
            let scale = 1.0 / (variance + eps).sqrt();
            math::normalize(s, row, mean, scale, weight, bias);
        }
    }
}

/// The feed-forward activations, in place.
pub(crate) fn gelu_erf(xs: &mut [f32]) {
    gelu_erf_in(arch(), xs)
}

/// `x·Φ(x)`, Φ with erf: BERT's `gelu`.
fn gelu_erf_in(arch: Arch, xs: &mut [f32]) {
    struct Gelu<'a>(&'a mut [f32]);
    impl WithSimd for Gelu<'_> {
        type Output = ();
        #[inline(always)]
        fn with_simd<S: Simd>(self, s: S) {
            math::gelu_slice(s, self.0)
        }
    }
    xs.par_chunks_mut(FLOATS_PER_TASK)
        .for_each(|xs| arch.dispatch(Gelu(xs)));
}

pub(crate) fn gelu_tanh(xs: &mut [f32]) {
    xs.par_chunks_mut(FLOATS_PER_TASK).for_each(gelu_tanh_chunk);
}

pub(crate) fn relu(xs: &mut [f32]) {
    xs.par_chunks_mut(FLOATS_PER_TASK)
        .for_each(|xs| xs.iter_mut().for_each(|x| *x = x.max(0.0)));
}

/// GELU's tanh approximation (rare in sentence encoders: plain floats).
fn gelu_tanh_chunk(xs: &mut [f32]) {
    const C: f32 = 0.797_884_6; // √(2/π)
    for x in xs {
        let y = C * (*x + 0.044_715 * *x * *x * *x);
        // tanh y = 1 − 2/(e^{2y} + 1), which `exp`'s clamping keeps finite.
        let e = math::exp(pulp::Scalar, 2.0 * y);
        *x = 0.5 * *x * (2.0 - 2.0 / (e + 1.0));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Every instruction set this CPU has, plain floats first, by name.
    pub(crate) fn each_arch() -> Vec<(&'static str, Arch)> {
        let mut archs = vec![("scalar", Arch::Scalar)];
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(v3) = pulp::x86::V3::try_new() {
                archs.push(("avx2", Arch::V3(v3)));
            }
            if let Some(v4) = pulp::x86::V4::try_new() {
                archs.push(("avx512", Arch::V4(v4)));
            }
        }
        archs
    }

    /// `got` within `tolerance` of `want`, relative to `want`'s size where it is over 1.
    fn close(set: &str, what: &str, got: &[f32], want: &[f32], tolerance: f32) {
        assert_eq!(got.len(), want.len(), "{set} {what}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= tolerance * w.abs().max(1.0),
                "{set} {what}[{i}]: {g}, the scalar path {w}"
            );
        }
    }

    /// Deterministic values in roughly [−4, 4], none repeating soon.
    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7919 + seed * 104_729) % 1000) as f32 / 125.0 - 4.0)
            .collect()
    }

    #[test]
    fn every_instruction_set_computes_what_the_scalar_path_does() {
        let archs = each_arch();
        // Lengths past a whole number of vectors of 8 and 16, and below one.
        for n in [3, 20, 37, 130] {
            for &(set, arch) in &archs {
                let mut gelu = values(n, 1);
                let mut want = gelu.clone();
                gelu_erf_in(arch, &mut gelu);
                gelu_erf_in(Arch::Scalar, &mut want);
                close(set, "gelu", &gelu, &want, 1e-6);

                let (weight, bias) = (values(n, 2), values(n, 3));
                let mut norm = values(4 * n, 4);
                let mut want = norm.clone();
                layer_norm_in(arch, &mut norm, &weight, &bias, 1e-12);
                layer_norm_in(Arch::Scalar, &mut want, &weight, &bias, 1e-12);
                close(set, "layer norm", &norm, &want, 1e-5);

                // Two texts of n and 5 tokens, 4 heads of 8: the soft-max runs over n scores.
                let (hidden, lengths) = (32, [n, 5]);
                // Scores of a few units, as a trained model's are: FMA and plain floats
                // round them apart by ~1e-7 of their size, which e^score makes relative.
                let qkv: Vec<f32> = (values((n + 5) * 3 * hidden, 5).iter())
                    .map(|x| x / 4.0)
                    .collect();
                let (mut context, mut want) = (Vec::new(), Vec::new());
                attention_in(arch, &mut context, &qkv, &lengths, 4, hidden);
                attention_in(Arch::Scalar, &mut want, &qkv, &lengths, 4, hidden);
                close(set, "attention", &context, &want, 1e-5);
            }
        }
    }

    #[test]
    fn the_vectorised_steps_compute_what_they_say() {
        for (set, arch) in each_arch() {
            struct Softmax<'a>(&'a mut [f32]);
            impl WithSimd for Softmax<'_> {
                type Output = ();
                #[inline(always)]
                fn with_simd<S: Simd>(self, s: S) {
                    math::softmax(s, self.0)
                }
            }
            // Soft-max: rows that sum to 1, in the order of their scores, a huge score too,
            // over rows shorter and longer than a vector.
            for len in [3, 19] {
                let mut scores: Vec<f32> = (0..len).map(|i| (i % 4) as f32).collect();
                arch.dispatch(Softmax(&mut scores));
                let e: Vec<f32> = (0..len).map(|i| ((i % 4) as f32).exp()).collect();
                let total: f32 = e.iter().sum();
                for (got, want) in scores.iter().zip(e.iter().map(|x| x / total)) {
                    assert!((got - want).abs() < 1e-6, "{set}: {scores:?}");
                }
            }
            let mut scores = vec![-1e30, 0.0, 1e30];
            arch.dispatch(Softmax(&mut scores));
            assert!(
                scores[0] < 1e-30 && scores[1] < 1e-30 && scores[2] == 1.0,
                "{set}: {scores:?}"
            );
            // GELU: x·Φ(x).
            let mut xs = vec![-3.0, -1.0, 0.0, 1.0, 3.0];
            gelu_erf_in(arch, &mut xs);
            let want = [-0.004_049_7, -0.158_655_25, 0.0, 0.841_344_7, 2.995_950_3];
            for (got, want) in xs.iter().zip(want) {
                assert!((got - want).abs() < 1e-6, "{set}: {xs:?}");
            }
            // Layer norm over rows of 20 (past the 16 lanes): mean 0, variance 1, then w·x + b.
            let mut rows: Vec<f32> = (0..40).map(|i| (i * i % 17) as f32).collect();
            layer_norm_in(arch, &mut rows, &[2.0; 20], &[1.0; 20], 1e-12);
            for row in rows.chunks(20) {
                let mean = row.iter().map(|x| (x - 1.0) / 2.0).sum::<f32>() / 20.0;
                let var = row
                    .iter()
                    .map(|x| ((x - 1.0) / 2.0 - mean).powi(2))
                    .sum::<f32>()
                    / 20.0;
                assert!(
                    mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-4,
                    "{set}: {mean} {var}"
                );
            }
        }
    }

    #[test]
    fn linear_adds_its_bias_and_residual() {
        // [1 2; 3 4] · [1 0 1; 0 1 1] + [10 20 30] + residual.
        let (xs, w, bias) = (
            [1.0, 2.0, 3.0, 4.0],
            [1.0, 0.0, 1.0, 0.0, 1.0, 1.0],
            [10.0, 20.0, 30.0],
        );
        let mut out = vec![7.0; 2];
        linear(&mut out, &xs, &w, &bias, None);
        assert_eq!(out, [11.0, 22.0, 33.0, 13.0, 24.0, 37.0]);
        let residual = [1.0; 6];
        linear(&mut out, &xs, &w, &bias, Some(&residual));
        assert_eq!(out, [12.0, 23.0, 34.0, 14.0, 25.0, 38.0]);
    }

    #[test]
    fn a_text_attends_to_its_own_tokens_only() {
        // hidden 2, 1 head; two texts. Each token's context is a weighted mean of its own
        // text's v rows, so a text of one token gets exactly its own v.
        let qkv = [
            // text 0, token 0: q, k, v
            1.0, 0.0, 1.0, 0.0, 5.0, 6.0, //
            // text 1, tokens 0 and 1
            0.0, 0.0, 0.0, 0.0, 1.0, 2.0, //
            0.0, 0.0, 0.0, 0.0, 3.0, 4.0,
        ];
        let mut context = Vec::new();
        attention(&mut context, &qkv, &[1, 2], 1, 2);
        // Text 1's scores are all 0: equal weights, the mean of its two v rows.
        assert_eq!(context, [5.0, 6.0, 2.0, 3.0, 2.0, 3.0]);
    }
}
