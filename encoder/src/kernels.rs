//! The arithmetic of troupe's BERT forward (bert.rs), on plain `f32` slices: the linear
//! layers' products through the `gemm` crate (the kernels candle itself calls), and
//! attention and the element-wise steps (bias and residual, layer norm, GELU, soft-max)
//! written here so that they vectorise.
//!
//! Why not candle's operations: each makes a fresh tensor (a trip to memory, and the
//! kernel's page faults on its new pages), several copy to change a layout (attention's
//! permutes), and GELU and soft-max call libm's `erff`/`expf` one float at a time. Here
//! the forward owns four buffers a pass, attention reads q, k and v where the q/k/v
//! product wrote them (one text at a time, so nothing is padded), and `exp`/`erf` are
//! polynomial forms the compiler turns into vector code: each element-wise step is
//! compiled for AVX-512, AVX2 and the baseline, and the CPU picks at run time
//! (`vectorized!`).
//!
//! Accuracy: `exp` is within 2 ulp of libm's on the range it is used, `erf` within 1.5e-7
//! (Abramowitz and Stegun 7.1.26); the forward's vectors equal ONNX Runtime's to a cosine
//! of 1.000000 (local.rs's `the_forward_matches_an_independent_engine`).

use rayon::prelude::*;

/// Rows of `hidden` floats one rayon task takes in a row-wise step (layer norm, bias):
/// enough that the task outweighs its scheduling.
const ROWS_PER_TASK: usize = 64;
/// Floats one rayon task takes in GELU.
const FLOATS_PER_TASK: usize = 32 * 1024;

/// Defines a function whose body is compiled three times: for AVX-512, for AVX2, and for
/// the baseline the binary targets, the first the CPU has being run. The body must only
/// call `#[inline(always)]` functions, so that they are compiled for the same features.
macro_rules! vectorized {
    ($(#[$meta:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $body:block) => {
        $(#[$meta])*
        fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                fn avx512($($arg: $ty),*) { body($($arg),*) }
                #[target_feature(enable = "avx2")]
                fn avx2($($arg: $ty),*) { body($($arg),*) }
                if std::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has the feature the function was compiled for.
                    return unsafe { avx512($($arg),*) };
                }
                if std::is_x86_feature_detected!("avx2") {
                    // SAFETY: as above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            body($($arg),*)
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
/// Plain loops rather than gemm: a head's products are `n × 32` by `32 × n`, too small for
/// gemm's packing and tiles to pay (they took a fifth of a pass on short texts), and as
/// loops over contiguous rows they vectorise with the soft-max between them.
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
    fn head_attention(
        out: &mut [f32],
        qkv: &[f32],
        hidden: usize,
        at: usize,
        d: usize,
        keys: &mut [f32],
        scores: &mut [f32]
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
            for (&q, keys) in row[at..][..d].iter().zip(keys.chunks_exact(n)) {
                for (s, k) in scores.iter_mut().zip(keys) {
                    *s += q * k;
                }
            }
            softmax(scores);
            // context_i = Σ_j p_j · v_j.
            let context = &mut out[i * hidden + at..][..d];
            context.fill(0.0);
            for (&p, row) in scores.iter().zip(qkv.chunks_exact(stride)) {
                for (c, v) in context.iter_mut().zip(&row[2 * hidden + at..][..d]) {
                    *c += p * v;
                }
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
    fn norm_rows(rows: &mut [f32], weight: &[f32], bias: &[f32], eps: f32) {
        let width = weight.len() as f32;
        for row in rows.chunks_exact_mut(weight.len()) {
            let mean = sum(row) / width;
            let variance = sum_squares_from(row, mean) / width;
            let scale = 1.0 / (variance + eps).sqrt();
            for ((x, w), b) in row.iter_mut().zip(weight).zip(bias) {
                *x = (*x - mean) * scale * w + b;
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
    fn gelu_erf_chunk(xs: &mut [f32]) {
        for x in xs {
            *x = 0.5 * *x * (1.0 + erf(*x * std::f32::consts::FRAC_1_SQRT_2));
        }
    }
}

vectorized! {
    /// GELU's tanh approximation.
    fn gelu_tanh_chunk(xs: &mut [f32]) {
        const C: f32 = 0.797_884_6; // √(2/π)
        for x in xs {
            let y = C * (*x + 0.044_715 * *x * *x * *x);
            // tanh y = 1 − 2/(e^{2y} + 1), which `exp`'s clamping keeps finite.
            *x = 0.5 * *x * (2.0 - 2.0 / (exp(2.0 * y) + 1.0));
        }
    }
}

/// `row`'s scores turned into weights that sum to 1.
#[inline(always)]
fn softmax(row: &mut [f32]) {
    let max = row.iter().fold(f32::MIN, |m, &x| m.max(x));
    for x in row.iter_mut() {
        *x = exp(*x - max);
    }
    let scale = 1.0 / sum(row);
    for x in row.iter_mut() {
        *x *= scale;
    }
}

/// The sum of `xs` in 16 lanes (vector registers) rather than one float after another.
#[inline(always)]
fn sum(xs: &[f32]) -> f32 {
    let mut lanes = [0f32; 16];
    let chunks = xs.chunks_exact(16);
    let rest: f32 = chunks.remainder().iter().sum();
    for chunk in chunks {
        for (lane, x) in lanes.iter_mut().zip(chunk) {
            *lane += x;
        }
    }
    lanes.iter().sum::<f32>() + rest
}

/// Σ (x − mean)², in lanes as `sum`.
#[inline(always)]
fn sum_squares_from(xs: &[f32], mean: f32) -> f32 {
    let mut lanes = [0f32; 16];
    let chunks = xs.chunks_exact(16);
    let rest: f32 = chunks
        .remainder()
        .iter()
        .map(|x| (x - mean) * (x - mean))
        .sum();
    for chunk in chunks {
        for (lane, x) in lanes.iter_mut().zip(chunk) {
            *lane += (x - mean) * (x - mean);
        }
    }
    lanes.iter().sum::<f32>() + rest
}

/// eˣ without libm, in operations that vectorise: x = n·ln 2 + r with |r| ≤ ln 2 / 2,
/// e^r by its Taylor polynomial to r⁶ (relative error < 2·10⁻⁷), 2ⁿ by the exponent bits.
/// Clamped to [−87, 88], so it is neither 0 nor infinite (both ends far beyond what
/// soft-max and GELU can tell apart).
#[inline(always)]
fn exp(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    // ln 2 in two parts, the first exact in few bits, so that n·ln 2 loses nothing.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5·2²³: adding and taking it away rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    // The sum's low mantissa bits hold n (as 2²² + n): 2ⁿ's exponent field is n + 127.
    let shifted = x * LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (1.0 / 2.0
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    let two_n = f32::from_bits(
        shifted
            .to_bits()
            .wrapping_sub(ROUND.to_bits())
            .wrapping_add(127)
            << 23,
    );
    p * two_n
}

/// erf(x) by Abramowitz and Stegun's 7.1.26 (absolute error ≤ 1.5·10⁻⁷).
#[inline(always)]
fn erf(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_8,
        -1.453_152,
        1.061_405_4,
    ];
    let a = x.abs();
    let t = 1.0 / (1.0 + P * a);
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    (1.0 - poly * exp(-a * a)).copysign(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_two_ulp_of_libm_where_the_forward_uses_it() {
        let mut worst = 0f64;
        for i in -80_000..=80_000 {
            let x = i as f32 / 1000.0;
            let (got, want) = (exp(x) as f64, (x as f64).exp());
            worst = worst.max(((got - want) / want).abs());
        }
        assert!(worst < 2.5e-7, "relative error {worst}");
        assert_eq!(exp(0.0), 1.0);
        // Clamped: finite and positive at both ends.
        assert!(exp(-1000.0) > 0.0 && exp(1000.0).is_finite());
        assert!(exp(f32::MIN) > 0.0 && exp(f32::MAX).is_finite());
    }

    #[test]
    fn erf_matches_its_tables() {
        // erf's values to 10 places (Abramowitz and Stegun, table 7.1).
        for (x, want) in [
            (0.0, 0.0),
            (0.1, 0.112_462_916_0),
            (0.5, 0.520_499_877_8),
            (1.0, 0.842_700_792_9),
            (1.5, 0.966_105_146_5),
            (2.0, 0.995_322_265_0),
            (3.0, 0.999_977_909_5),
        ] {
            for (x, want) in [(x, want), (-x, -want)] {
                let got = erf(x as f32) as f64;
                assert!((got - want).abs() < 3e-7, "erf({x}) = {got}, not {want}");
            }
        }
        assert_eq!(erf(10.0), 1.0);
        assert_eq!(erf(-10.0), -1.0);
    }

    #[test]
    fn the_vectorised_steps_compute_what_they_say() {
        // Soft-max: rows that sum to 1, in the order of their scores, a huge score too.
        let mut scores = vec![1.0, 2.0, 3.0, -1e30, 0.0, 1e30];
        let (first, second) = scores.split_at_mut(3);
        softmax(first);
        softmax(second);
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
