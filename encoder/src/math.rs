//! The element-wise functions of the forward, written once over pulp's `Simd` (AVX-512,
//! AVX2 with FMA, or plain floats, whichever `pulp::Arch` found the CPU to have):
//! `exp` and `erf` without libm, GELU, soft-max, sums, `y += a·x`. Each slice function
//! does whole vectors, then the last few floats one by one (`pulp::Scalar`).
//!
//! Accuracy: `exp` is within 2.5·10⁻⁷ (relative) of libm's on the range it is used, `erf`
//! within 1.5·10⁻⁷ (Abramowitz and Stegun 7.1.26); the forward's vectors equal ONNX
//! Runtime's to a cosine of 1.000000 (the gateway's `the_forward_matches_an_independent_engine`).
//!
//! Why explicit vectors rather than loops the compiler vectorises: the release build is
//! optimised for size with whole-program LTO, and rustc runs LLVM's vectorisers only at
//! `opt-level` 2 or 3, and under LTO only at the level of the final binary. The same loops
//! that ran as AVX-512 in a debug build ran one float at a time in the release binary, at
//! 0.41× of ONNX Runtime on chunk-sized texts (docs/benchmarks.md, "Local embeddings").
//! pulp's operations are vector instructions at any level, and safe: a `Simd` value exists
//! only where its instruction set does.
//!
//! Every function is `#[inline(always)]`: it must be compiled inside the `#[target_feature]`
//! function pulp dispatches to (kernels.rs), or its vectors would be split into calls.

use pulp::{Scalar, Simd};

/// Bits of 1.5·2²³ less 127: `pow2`'s argument carries n + 1.5·2²³.
const ROUND_BITS_LESS_BIAS: u32 = 0x4B40_0000 - 127;

/// eˣ: x = n·ln 2 + r with |r| ≤ ln 2 / 2, e^r by its Taylor polynomial to r⁶, 2ⁿ by the
/// exponent bits. Clamped to [−87, 88], so it is neither 0 nor infinite (both ends far
/// beyond what soft-max and GELU can tell apart).
#[inline(always)]
pub(crate) fn exp<S: Simd>(s: S, x: S::f32s) -> S::f32s {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    // ln 2 in two parts, the first exact in few bits, so that n·ln 2 loses nothing.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5·2²³: adding and taking it away rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    const TAYLOR: [f32; 7] = [
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        1.0 / 2.0,
        1.0,
        1.0,
    ];
    let x = s.min_f32s(s.max_f32s(x, s.splat_f32s(-87.0)), s.splat_f32s(88.0));
    let shifted = s.mul_add_e_f32s(x, s.splat_f32s(LOG2_E), s.splat_f32s(ROUND));
    let n = s.sub_f32s(shifted, s.splat_f32s(ROUND));
    let r = s.mul_add_e_f32s(n, s.splat_f32s(-LN2_HI), x);
    let r = s.mul_add_e_f32s(n, s.splat_f32s(-LN2_LO), r);
    let mut p = s.splat_f32s(TAYLOR[0]);
    for c in &TAYLOR[1..] {
        p = s.mul_add_e_f32s(p, r, s.splat_f32s(*c));
    }
    // 2ⁿ: n + 127 in the exponent bits. n is in [−126, 127] (x is clamped), so the
    // subtraction neither wraps nor leaves the exponent's range.
    let biased = s.sub_u32s(
        s.transmute_u32s_f32s(shifted),
        s.splat_u32s(ROUND_BITS_LESS_BIAS),
    );
    let pow2 = s.transmute_f32s_u32s(s.wrapping_dyn_shl_u32s(biased, s.splat_u32s(23)));
    s.mul_f32s(p, pow2)
}

/// erf(x) by Abramowitz and Stegun's 7.1.26.
#[inline(always)]
pub(crate) fn erf<S: Simd>(s: S, x: S::f32s) -> S::f32s {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        1.061_405_4,
        -1.453_152,
        1.421_413_8,
        -0.284_496_74,
        0.254_829_6,
    ];
    let sign = s.splat_f32s(-0.0);
    let a = s.abs_f32s(x);
    let one = s.splat_f32s(1.0);
    let t = s.div_f32s(one, s.mul_add_e_f32s(s.splat_f32s(P), a, one));
    let mut poly = s.splat_f32s(A[0]);
    for c in &A[1..] {
        poly = s.mul_add_e_f32s(poly, t, s.splat_f32s(*c));
    }
    let poly = s.mul_f32s(poly, t);
    let e = exp(s, s.mul_f32s(s.sub_f32s(s.splat_f32s(0.0), a), a));
    // |1 − poly·e| with x's sign.
    let magnitude = s.sub_f32s(one, s.mul_f32s(poly, e));
    s.or_f32s(s.and_f32s(sign, x), s.abs_f32s(magnitude))
}

/// `x·Φ(x)`, Φ with erf: BERT's `gelu`.
#[inline(always)]
fn gelu<S: Simd>(s: S, x: S::f32s) -> S::f32s {
    let phi = s.add_f32s(
        s.splat_f32s(1.0),
        erf(
            s,
            s.mul_f32s(x, s.splat_f32s(std::f32::consts::FRAC_1_SQRT_2)),
        ),
    );
    s.mul_f32s(s.mul_f32s(s.splat_f32s(0.5), x), phi)
}

/// GELU over `xs`, in place.
#[inline(always)]
pub(crate) fn gelu_slice<S: Simd>(s: S, xs: &mut [f32]) {
    let (head, tail) = S::as_mut_simd_f32s(xs);
    for x in head {
        *x = gelu(s, *x);
    }
    for x in tail {
        *x = gelu(Scalar, *x);
    }
}

/// Σ xs.
#[inline(always)]
pub(crate) fn sum<S: Simd>(s: S, xs: &[f32]) -> f32 {
    let (head, tail) = S::as_simd_f32s(xs);
    let total = head
        .iter()
        .fold(s.splat_f32s(0.0), |total, &x| s.add_f32s(total, x));
    s.reduce_sum_f32s(total) + tail.iter().sum::<f32>()
}

/// Σ (x − mean)².
#[inline(always)]
pub(crate) fn sum_squares_from<S: Simd>(s: S, xs: &[f32], mean: f32) -> f32 {
    let (head, tail) = S::as_simd_f32s(xs);
    let m = s.splat_f32s(mean);
    let total = head.iter().fold(s.splat_f32s(0.0), |total, &x| {
        let d = s.sub_f32s(x, m);
        s.mul_add_e_f32s(d, d, total)
    });
    let rest: f32 = tail.iter().map(|x| (x - mean) * (x - mean)).sum();
    s.reduce_sum_f32s(total) + rest
}

/// `row`'s scores turned into weights that sum to 1.
#[inline(always)]
pub(crate) fn softmax<S: Simd>(s: S, row: &mut [f32]) {
    let (head, tail) = S::as_mut_simd_f32s(row);
    let top = head
        .iter()
        .fold(s.splat_f32s(f32::MIN), |top, &x| s.max_f32s(top, x));
    let max = tail.iter().fold(s.reduce_max_f32s(top), |m, &x| m.max(x));
    let m = s.splat_f32s(max);
    let mut total = s.splat_f32s(0.0);
    for x in head.iter_mut() {
        *x = exp(s, s.sub_f32s(*x, m));
        total = s.add_f32s(total, *x);
    }
    let mut total = s.reduce_sum_f32s(total);
    for x in tail.iter_mut() {
        *x = exp(Scalar, *x - max);
        total += *x;
    }
    let a = s.splat_f32s(1.0 / total);
    for x in head {
        *x = s.mul_f32s(*x, a);
    }
    tail.iter_mut().for_each(|x| *x *= 1.0 / total);
}

/// `ys += a·xs`.
#[inline(always)]
pub(crate) fn axpy<S: Simd>(s: S, ys: &mut [f32], a: f32, xs: &[f32]) {
    let n = ys.len().min(xs.len());
    let (ys, ys_tail) = S::as_mut_simd_f32s(&mut ys[..n]);
    let (xs, xs_tail) = S::as_simd_f32s(&xs[..n]);
    let a_v = s.splat_f32s(a);
    for (y, &x) in ys.iter_mut().zip(xs) {
        *y = s.mul_add_e_f32s(a_v, x, *y);
    }
    for (y, x) in ys_tail.iter_mut().zip(xs_tail) {
        *y += a * x;
    }
}

/// `row = (row − mean)·scale·weight + bias`.
#[inline(always)]
pub(crate) fn normalize<S: Simd>(
    s: S,
    row: &mut [f32],
    mean: f32,
    scale: f32,
    weight: &[f32],
    bias: &[f32],
) {
    let n = row.len().min(weight.len()).min(bias.len());
    let (rows, row_tail) = S::as_mut_simd_f32s(&mut row[..n]);
    let (weights, weight_tail) = S::as_simd_f32s(&weight[..n]);
    let (biases, bias_tail) = S::as_simd_f32s(&bias[..n]);
    let (m, sc) = (s.splat_f32s(mean), s.splat_f32s(scale));
    for ((x, &w), &b) in rows.iter_mut().zip(weights).zip(biases) {
        let y = s.mul_f32s(s.sub_f32s(*x, m), sc);
        *x = s.mul_add_e_f32s(y, w, b);
    }
    for ((x, w), b) in row_tail.iter_mut().zip(weight_tail).zip(bias_tail) {
        *x = (*x - mean) * scale * w + b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::tests::each_arch;
    use pulp::WithSimd;

    /// `exp` or `erf` of `x`, in a whole vector, one lane read back.
    struct Apply {
        x: f32,
        erf: bool,
    }

    impl WithSimd for Apply {
        type Output = f32;
        #[inline(always)]
        fn with_simd<S: Simd>(self, s: S) -> f32 {
            let mut out = [0f32; 16];
            let (head, _) = S::as_mut_simd_f32s(&mut out);
            let x = s.splat_f32s(self.x);
            head[0] = if self.erf { erf(s, x) } else { exp(s, x) };
            out[S::F32_LANES - 1]
        }
    }

    #[test]
    fn exp_is_within_two_ulp_of_libm_in_every_instruction_set() {
        for (set, arch) in each_arch() {
            let exp = |x| arch.dispatch(Apply { x, erf: false });
            let mut worst = 0f64;
            for i in -80_000..=80_000 {
                let x = i as f32 / 1000.0;
                let (got, want) = (exp(x) as f64, (x as f64).exp());
                worst = worst.max(((got - want) / want).abs());
            }
            assert!(worst < 2.5e-7, "{set}: relative error {worst}");
            assert_eq!(exp(0.0), 1.0, "{set}");
            // Clamped: finite and positive at both ends.
            assert!(exp(-1000.0) > 0.0 && exp(1000.0).is_finite(), "{set}");
            assert!(exp(f32::MIN) > 0.0 && exp(f32::MAX).is_finite(), "{set}");
        }
    }

    #[test]
    fn erf_matches_its_tables_in_every_instruction_set() {
        for (set, arch) in each_arch() {
            let erf = |x| arch.dispatch(Apply { x, erf: true });
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
                    assert!(
                        (got - want).abs() < 3e-7,
                        "{set}: erf({x}) = {got}, not {want}"
                    );
                }
            }
            assert_eq!(erf(10.0), 1.0, "{set}");
            assert_eq!(erf(-10.0), -1.0, "{set}");
        }
    }
}
