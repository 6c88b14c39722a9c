//! The element-wise functions of the forward, written once over `Simd` (simd.rs), so that
//! the same code is AVX-512, AVX2 or plain floats: `exp` and `erf` without libm, GELU,
//! soft-max, sums, `y += a·x`. Each slice function does whole vectors, then the last few
//! floats with `Scalar`.
//!
//! Accuracy: `exp` is within 2.5·10⁻⁷ (relative) of libm's on the range it is used, `erf`
//! within 1.5·10⁻⁷ (Abramowitz and Stegun 7.1.26); the forward's vectors equal ONNX
//! Runtime's to a cosine of 1.000000 (the gateway's `the_forward_matches_an_independent_engine`).
//!
//! Every function is `unsafe` for the reason simd.rs's methods are: `S` must be an
//! instruction set the CPU has.

use crate::simd::{Scalar, Simd};

/// eˣ: x = n·ln 2 + r with |r| ≤ ln 2 / 2, e^r by its Taylor polynomial to r⁶, 2ⁿ by the
/// exponent bits. Clamped to [−87, 88], so it is neither 0 nor infinite (both ends far
/// beyond what soft-max and GELU can tell apart).
#[inline(always)]
pub(crate) unsafe fn exp<S: Simd>(x: S::V) -> S::V {
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
    // SAFETY: the caller's `S` is one the CPU has.
    unsafe {
        let x = S::min(S::max(x, S::splat(-87.0)), S::splat(88.0));
        let shifted = S::mul_add(x, S::splat(LOG2_E), S::splat(ROUND));
        let n = S::sub(shifted, S::splat(ROUND));
        let r = S::mul_add(n, S::splat(-LN2_HI), x);
        let r = S::mul_add(n, S::splat(-LN2_LO), r);
        let mut p = S::splat(TAYLOR[0]);
        for c in &TAYLOR[1..] {
            p = S::mul_add(p, r, S::splat(*c));
        }
        S::mul(p, S::pow2(shifted))
    }
}

/// erf(x) by Abramowitz and Stegun's 7.1.26.
#[inline(always)]
pub(crate) unsafe fn erf<S: Simd>(x: S::V) -> S::V {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        1.061_405_4,
        -1.453_152,
        1.421_413_8,
        -0.284_496_74,
        0.254_829_6,
    ];
    // SAFETY: as `exp`.
    unsafe {
        let a = S::abs(x);
        let one = S::splat(1.0);
        let t = S::div(one, S::mul_add(S::splat(P), a, one));
        let mut poly = S::splat(A[0]);
        for c in &A[1..] {
            poly = S::mul_add(poly, t, S::splat(*c));
        }
        let poly = S::mul(poly, t);
        let e = exp::<S>(S::mul(S::sub(S::splat(0.0), a), a));
        S::copysign(S::sub(one, S::mul(poly, e)), x)
    }
}

/// `x·Φ(x)`, Φ with erf: BERT's `gelu`.
#[inline(always)]
unsafe fn gelu<S: Simd>(x: S::V) -> S::V {
    // SAFETY: as `exp`.
    unsafe {
        let phi = S::add(
            S::splat(1.0),
            erf::<S>(S::mul(x, S::splat(std::f32::consts::FRAC_1_SQRT_2))),
        );
        S::mul(S::mul(S::splat(0.5), x), phi)
    }
}

/// GELU over `xs`, in place.
#[inline(always)]
pub(crate) unsafe fn gelu_slice<S: Simd>(xs: &mut [f32]) {
    let mut chunks = xs.chunks_exact_mut(S::LANES);
    // SAFETY: each chunk is `LANES` floats; `S` as `exp`.
    unsafe {
        for chunk in &mut chunks {
            S::store(chunk.as_mut_ptr(), gelu::<S>(S::load(chunk.as_ptr())));
        }
        for x in chunks.into_remainder() {
            *x = gelu::<Scalar>(*x);
        }
    }
}

/// Σ xs.
#[inline(always)]
pub(crate) unsafe fn sum<S: Simd>(xs: &[f32]) -> f32 {
    let chunks = xs.chunks_exact(S::LANES);
    let rest: f32 = chunks.remainder().iter().sum();
    // SAFETY: as `gelu_slice`.
    unsafe {
        let mut total = S::splat(0.0);
        for chunk in chunks {
            total = S::add(total, S::load(chunk.as_ptr()));
        }
        S::reduce_add(total) + rest
    }
}

/// Σ (x − mean)².
#[inline(always)]
pub(crate) unsafe fn sum_squares_from<S: Simd>(xs: &[f32], mean: f32) -> f32 {
    let chunks = xs.chunks_exact(S::LANES);
    let rest: f32 = chunks
        .remainder()
        .iter()
        .map(|x| (x - mean) * (x - mean))
        .sum();
    // SAFETY: as `gelu_slice`.
    unsafe {
        let (mut total, m) = (S::splat(0.0), S::splat(mean));
        for chunk in chunks {
            let d = S::sub(S::load(chunk.as_ptr()), m);
            total = S::mul_add(d, d, total);
        }
        S::reduce_add(total) + rest
    }
}

/// `row`'s scores turned into weights that sum to 1.
#[inline(always)]
pub(crate) unsafe fn softmax<S: Simd>(row: &mut [f32]) {
    // SAFETY: as `gelu_slice`.
    unsafe {
        let mut chunks = row.chunks_exact_mut(S::LANES);
        let mut top = S::splat(f32::MIN);
        for chunk in &mut chunks {
            top = S::max(top, S::load(chunk.as_ptr()));
        }
        let rest = chunks.into_remainder();
        let max = rest.iter().fold(S::reduce_max(top), |m, &x| m.max(x));
        let (m, mut total) = (S::splat(max), S::splat(0.0));
        let mut chunks = row.chunks_exact_mut(S::LANES);
        for chunk in &mut chunks {
            let e = exp::<S>(S::sub(S::load(chunk.as_ptr()), m));
            S::store(chunk.as_mut_ptr(), e);
            total = S::add(total, e);
        }
        let mut total = S::reduce_add(total);
        for x in chunks.into_remainder() {
            *x = exp::<Scalar>(*x - max);
            total += *x;
        }
        scale::<S>(row, 1.0 / total);
    }
}

/// `xs *= a`.
#[inline(always)]
pub(crate) unsafe fn scale<S: Simd>(xs: &mut [f32], a: f32) {
    let mut chunks = xs.chunks_exact_mut(S::LANES);
    // SAFETY: as `gelu_slice`.
    unsafe {
        let a = S::splat(a);
        for chunk in &mut chunks {
            S::store(chunk.as_mut_ptr(), S::mul(S::load(chunk.as_ptr()), a));
        }
    }
    chunks.into_remainder().iter_mut().for_each(|x| *x *= a);
}

/// `ys += a·xs`.
#[inline(always)]
pub(crate) unsafe fn axpy<S: Simd>(ys: &mut [f32], a: f32, xs: &[f32]) {
    let n = ys.len().min(xs.len());
    let (ys, xs) = (&mut ys[..n], &xs[..n]);
    let whole = n - n % S::LANES;
    // SAFETY: `at + LANES ≤ whole ≤ n`, inside both slices; `S` as `exp`.
    unsafe {
        let a_v = S::splat(a);
        for at in (0..whole).step_by(S::LANES) {
            let y = S::mul_add(
                a_v,
                S::load(xs.as_ptr().add(at)),
                S::load(ys.as_ptr().add(at)),
            );
            S::store(ys.as_mut_ptr().add(at), y);
        }
    }
    for (y, x) in ys[whole..].iter_mut().zip(&xs[whole..]) {
        *y += a * x;
    }
}

/// `row = (row − mean)·scale·weight + bias`.
#[inline(always)]
pub(crate) unsafe fn normalize<S: Simd>(
    row: &mut [f32],
    mean: f32,
    scale: f32,
    weight: &[f32],
    bias: &[f32],
) {
    let n = row.len().min(weight.len()).min(bias.len());
    let whole = n - n % S::LANES;
    // SAFETY: as `axpy`.
    unsafe {
        let (m, s) = (S::splat(mean), S::splat(scale));
        for at in (0..whole).step_by(S::LANES) {
            let x = S::mul(S::sub(S::load(row.as_ptr().add(at)), m), s);
            let w = S::load(weight.as_ptr().add(at));
            let b = S::load(bias.as_ptr().add(at));
            S::store(row.as_mut_ptr().add(at), S::mul_add(x, w, b));
        }
    }
    for at in whole..n {
        row[at] = (row[at] - mean) * scale * weight[at] + bias[at];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each instruction set this CPU has, by name, running `f`.
    fn each_set(f: impl Fn(&str, &dyn Fn(f32) -> f32, &dyn Fn(f32) -> f32)) {
        // SAFETY (each closure): Scalar runs anywhere; the others only where detected.
        f("scalar", &|x| unsafe { exp::<Scalar>(x) }, &|x| unsafe {
            erf::<Scalar>(x)
        });
        #[cfg(target_arch = "x86_64")]
        {
            use crate::simd::{Avx2, Avx512};
            let lane = |v: std::arch::x86_64::__m512| unsafe {
                let mut out = [0f32; 16];
                Avx512::store(out.as_mut_ptr(), v);
                out[3]
            };
            if std::is_x86_feature_detected!("avx512f") {
                f(
                    "avx512",
                    &|x| unsafe { lane(exp::<Avx512>(Avx512::splat(x))) },
                    &|x| unsafe { lane(erf::<Avx512>(Avx512::splat(x))) },
                );
            }
            let lane = |v: std::arch::x86_64::__m256| unsafe {
                let mut out = [0f32; 8];
                Avx2::store(out.as_mut_ptr(), v);
                out[5]
            };
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                f(
                    "avx2",
                    &|x| unsafe { lane(exp::<Avx2>(Avx2::splat(x))) },
                    &|x| unsafe { lane(erf::<Avx2>(Avx2::splat(x))) },
                );
            }
        }
    }

    #[test]
    fn exp_is_within_two_ulp_of_libm_in_every_instruction_set() {
        each_set(|set, exp, _| {
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
        });
    }

    #[test]
    fn erf_matches_its_tables_in_every_instruction_set() {
        each_set(|set, _, erf| {
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
        });
    }
}
