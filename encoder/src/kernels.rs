//! The arithmetic of troupe's BERT forward (bert.rs), on plain `f32` slices, spread over
//! the cores with rayon: the linear layers' products through the `gemm` crate (the kernels
//! candle itself calls), and attention and the element-wise steps (bias and residual,
//! layer norm, GELU, soft-max) written here over math.rs's vector functions.
//!
//! Why not candle's operations: each makes a fresh tensor (a trip to memory, and the
//! kernel's page faults on its new pages), several copy to change a layout (attention's
//! permutes), and GELU and soft-max call libm's `erff`/`expf` one float at a time. Here
//! the forward owns four buffers a pass, attention reads q, k and v where the q/k/v
//! product wrote them (one text at a time, so nothing is padded), and each element-wise
//! step runs as AVX-512, AVX2 or plain floats, whichever the CPU has (`vectorized!`).

use rayon::prelude::*;

use crate::math;
use crate::simd::{Scalar, Simd};

/// Rows of `hidden` floats one rayon task takes in a row-wise step (layer norm, bias):
/// enough that the task outweighs its scheduling.
const ROWS_PER_TASK: usize = 64;
/// Floats one rayon task takes in GELU.
const FLOATS_PER_TASK: usize = 32 * 1024;

/// Defines a function whose body, generic over `Simd`, runs as AVX-512 where the CPU has
/// it, else as AVX2 with FMA, else on plain floats (simd.rs says why explicit vectors). The
/// body is compiled inside a `#[target_feature]` function for each, so that its
/// `#[inline(always)]` helpers and their intrinsics are inlined there.
macro_rules! vectorized {
    ($(#[$meta:meta])* fn $name:ident<$s:ident>($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn body<$s: Simd>($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                fn avx512($($arg: $ty),*) { body::<crate::simd::Avx512>($($arg),*) }
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: $ty),*) { body::<crate::simd::Avx2>($($arg),*) }
                if std::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has the feature the function was compiled for.
                    return unsafe { avx512($($arg),*) };
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: as above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            body::<crate::simd::Scalar>($($arg),*)
        }
    };
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
            text_attention(out, qkv, heads, hidden, scores)
        });
}

/// Attention of one text of `n` tokens: `qkv` `(n, 3·hidden)`, `out` `(n, hidden)`.
/// `scratch` is the task's, reused text after text.
///
/// Not gemm: a head's products are `n × 32` by `32 × n`, too small for gemm's packing and
/// tiles to pay (they took a fifth of a pass on short texts); as `axpy`s over contiguous
/// rows (math.rs) they run in whole vectors, with the soft-max between them.
fn text_attention(
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
        head_attention(out, qkv, hidden, head * d, d, keys, scores);
    }
}

vectorized! {
    /// One head of a text's attention: the head's q, k and v are columns `at..at + d` of
    /// each third of `qkv`'s rows; its context goes to columns `at..at + d` of `out`'s.
    fn head_attention<S>(
        out: &mut [f32],
        qkv: &[f32],
        hidden: usize,
        at: usize,
        d: usize,
        keys: &mut [f32],
        scores: &mut [f32],
    ) {
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
            // SAFETY (each call): `S` is an instruction set the CPU has (`vectorized!`).
            for (&q, keys) in row[at..][..d].iter().zip(keys.chunks_exact(n)) {
                unsafe { math::axpy::<S>(scores, q, keys) };
            }
            unsafe { math::softmax::<S>(scores) };
            // context_i = Σ_j p_j · v_j.
            let context = &mut out[i * hidden + at..][..d];
            context.fill(0.0);
            for (&p, row) in scores.iter().zip(qkv.chunks_exact(stride)) {
                unsafe { math::axpy::<S>(context, p, &row[2 * hidden + at..][..d]) };
            }
        }
    }
}

/// Each row of `xs` (rows of `weight.len()` floats) normalised to mean 0 and variance 1,
/// then scaled and shifted: BERT's LayerNorm.
pub(crate) fn layer_norm(xs: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
    let width = weight.len();
    xs.par_chunks_mut(ROWS_PER_TASK * width)
        .for_each(|rows| norm_rows(rows, weight, bias, eps));
}

vectorized! {
    fn norm_rows<S>(rows: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
        let width = weight.len() as f32;
        for row in rows.chunks_exact_mut(weight.len()) {
            // SAFETY: `S` is an instruction set the CPU has (`vectorized!`).
            unsafe {
                let mean = math::sum::<S>(row) / width;
                let variance = math::sum_squares_from::<S>(row, mean) / width;
                let scale = 1.0 / (variance + eps).sqrt();
                math::normalize::<S>(row, mean, scale, weight, bias);
            }
        }
    }
}

/// The feed-forward activations, in place.
pub(crate) fn gelu_erf(xs: &mut [f32]) {
    xs.par_chunks_mut(FLOATS_PER_TASK).for_each(gelu_erf_chunk);
}

pub(crate) fn gelu_tanh(xs: &mut [f32]) {
    xs.par_chunks_mut(FLOATS_PER_TASK).for_each(gelu_tanh_chunk);
}

pub(crate) fn relu(xs: &mut [f32]) {
    xs.par_chunks_mut(FLOATS_PER_TASK)
        .for_each(|xs| xs.iter_mut().for_each(|x| *x = x.max(0.0)));
}

vectorized! {
    /// `x·Φ(x)`, Φ with erf: BERT's `gelu`.
    fn gelu_erf_chunk<S>(xs: &mut [f32]) {
        // SAFETY: `S` is an instruction set the CPU has (`vectorized!`).
        unsafe { math::gelu_slice::<S>(xs) }
    }
}

/// GELU's tanh approximation (rare in sentence encoders: plain floats).
fn gelu_tanh_chunk(xs: &mut [f32]) {
    const C: f32 = 0.797_884_6; // √(2/π)
    for x in xs {
        let y = C * (*x + 0.044_715 * *x * *x * *x);
        // tanh y = 1 − 2/(e^{2y} + 1), which `exp`'s clamping keeps finite.
        // SAFETY: Scalar runs on any CPU.
        let e = unsafe { math::exp::<Scalar>(2.0 * y) };
        *x = 0.5 * *x * (2.0 - 2.0 / (e + 1.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vectorised_steps_compute_what_they_say() {
        // Soft-max: rows that sum to 1, in the order of their scores, a huge score too.
        let mut scores = vec![1.0, 2.0, 3.0, -1e30, 0.0, 1e30];
        let (first, second) = scores.split_at_mut(3);
        // SAFETY: Scalar runs on any CPU.
        unsafe {
            math::softmax::<Scalar>(first);
            math::softmax::<Scalar>(second);
        }
        let e = [1f32.exp(), 2f32.exp(), 3f32.exp()];
        let total: f32 = e.iter().sum();
        for (got, want) in scores[..3].iter().zip(e.iter().map(|x| x / total)) {
            assert!((got - want).abs() < 1e-6, "{scores:?}");
        }
        assert!(
            scores[3] < 1e-30 && scores[4] < 1e-30 && scores[5] == 1.0,
            "{scores:?}"
        );
        // GELU: x·Φ(x).
        let mut xs = vec![-3.0, -1.0, 0.0, 1.0, 3.0];
        gelu_erf(&mut xs);
        let want = [-0.004_049_7, -0.158_655_25, 0.0, 0.841_344_7, 2.995_950_3];
        for (got, want) in xs.iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{xs:?}");
        }
        // Layer norm over rows of 20 (past the 16 lanes): mean 0, variance 1, then w·x + b.
        let mut rows: Vec<f32> = (0..40).map(|i| (i * i % 17) as f32).collect();
        layer_norm(&mut rows, &[2.0; 20], &[1.0; 20], 1e-12);
        for row in rows.chunks(20) {
            let mean = row.iter().map(|x| (x - 1.0) / 2.0).sum::<f32>() / 20.0;
            let var = row
                .iter()
                .map(|x| ((x - 1.0) / 2.0 - mean).powi(2))
                .sum::<f32>()
                / 20.0;
            assert!(
                mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-4,
                "{mean} {var}"
            );
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
