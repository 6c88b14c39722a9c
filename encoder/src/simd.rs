//! The vector operations kernels.rs is written in, for three instruction sets: AVX-512
//! (16 floats), AVX2 with FMA (8), and plain `f32` (1), the fallback.
//!
//! Why explicit vectors rather than loops the compiler vectorises: the release build is
//! optimised for size with whole-program LTO, and rustc runs LLVM's vectorisers only at
//! `opt-level` 2 or 3, and under LTO only at the level of the final binary. The same loops
//! that ran as AVX-512 in a debug build (this crate at opt-level 3, no LTO) ran one float at
//! a time in the release binary, at 0.41× of ONNX Runtime on chunk-sized texts
//! (docs/benchmarks.md, "Local embeddings"). Intrinsics are vector code at any level.
//!
//! The methods are `unsafe`: the AVX ones may only run on a CPU with those features, which
//! kernels.rs's `vectorized!` checks before choosing them.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// One instruction set's vector of floats and what the kernels do with it.
pub(crate) trait Simd {
    type V: Copy;
    /// Floats in a vector.
    const LANES: usize;
    unsafe fn splat(x: f32) -> Self::V;
    /// `LANES` floats from `p`, which need not be aligned.
    unsafe fn load(p: *const f32) -> Self::V;
    unsafe fn store(p: *mut f32, v: Self::V);
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn div(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn max(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn min(a: Self::V, b: Self::V) -> Self::V;
    /// `a·b + c` (fused where the instruction set has it).
    unsafe fn mul_add(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    unsafe fn abs(a: Self::V) -> Self::V;
    /// `magnitude`'s value with `sign`'s sign.
    unsafe fn copysign(magnitude: Self::V, sign: Self::V) -> Self::V;
    /// 2ⁿ from `n + 1.5·2²³` (whose low mantissa bits hold n), for n in [−126, 127].
    unsafe fn pow2(shifted: Self::V) -> Self::V;
    unsafe fn reduce_add(v: Self::V) -> f32;
    unsafe fn reduce_max(v: Self::V) -> f32;
}

/// Bits of 1.5·2²³, the constant `pow2`'s argument carries.
const ROUND_BITS: i32 = 0x4B40_0000;
const SIGN: i32 = i32::MIN;

/// Plain floats: any CPU.
pub(crate) struct Scalar;

impl Simd for Scalar {
    type V = f32;
    const LANES: usize = 1;
    #[inline(always)]
    unsafe fn splat(x: f32) -> f32 {
        x
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> f32 {
        // SAFETY: the caller's pointer is to a float.
        unsafe { *p }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: f32) {
        // SAFETY: as `load`.
        unsafe { *p = v }
    }
    #[inline(always)]
    unsafe fn add(a: f32, b: f32) -> f32 {
        a + b
    }
    #[inline(always)]
    unsafe fn sub(a: f32, b: f32) -> f32 {
        a - b
    }
    #[inline(always)]
    unsafe fn mul(a: f32, b: f32) -> f32 {
        a * b
    }
    #[inline(always)]
    unsafe fn div(a: f32, b: f32) -> f32 {
        a / b
    }
    #[inline(always)]
    unsafe fn max(a: f32, b: f32) -> f32 {
        a.max(b)
    }
    #[inline(always)]
    unsafe fn min(a: f32, b: f32) -> f32 {
        a.min(b)
    }
    #[inline(always)]
    unsafe fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        // Not `f32::mul_add`: without the FMA feature that is a call into libm.
        a * b + c
    }
    #[inline(always)]
    unsafe fn abs(a: f32) -> f32 {
        a.abs()
    }
    #[inline(always)]
    unsafe fn copysign(magnitude: f32, sign: f32) -> f32 {
        magnitude.copysign(sign)
    }
    #[inline(always)]
    unsafe fn pow2(shifted: f32) -> f32 {
        let n = (shifted.to_bits() as i32).wrapping_sub(ROUND_BITS);
        f32::from_bits((n.wrapping_add(127) << 23) as u32)
    }
    #[inline(always)]
    unsafe fn reduce_add(v: f32) -> f32 {
        v
    }
    #[inline(always)]
    unsafe fn reduce_max(v: f32) -> f32 {
        v
    }
}

/// AVX-512F: 16 floats.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx512;

// SAFETY (every method): the caller runs them only where the CPU has AVX-512F, and
// gives `load`/`store` pointers to 16 floats.
#[cfg(target_arch = "x86_64")]
impl Simd for Avx512 {
    type V = __m512;
    const LANES: usize = 16;
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        unsafe { _mm512_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_sub_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn div(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_div_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn max(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_max_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn min(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_min_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn mul_add(a: __m512, b: __m512, c: __m512) -> __m512 {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn abs(a: __m512) -> __m512 {
        unsafe {
            let bits = _mm512_andnot_si512(_mm512_set1_epi32(SIGN), _mm512_castps_si512(a));
            _mm512_castsi512_ps(bits)
        }
    }
    #[inline(always)]
    unsafe fn copysign(magnitude: __m512, sign: __m512) -> __m512 {
        unsafe {
            let mask = _mm512_set1_epi32(SIGN);
            let sign = _mm512_and_si512(mask, _mm512_castps_si512(sign));
            let magnitude = _mm512_andnot_si512(mask, _mm512_castps_si512(magnitude));
            _mm512_castsi512_ps(_mm512_or_si512(sign, magnitude))
        }
    }
    #[inline(always)]
    unsafe fn pow2(shifted: __m512) -> __m512 {
        unsafe {
            let n = _mm512_sub_epi32(_mm512_castps_si512(shifted), _mm512_set1_epi32(ROUND_BITS));
            let biased = _mm512_add_epi32(n, _mm512_set1_epi32(127));
            _mm512_castsi512_ps(_mm512_slli_epi32::<23>(biased))
        }
    }
    #[inline(always)]
    unsafe fn reduce_add(v: __m512) -> f32 {
        unsafe { _mm512_reduce_add_ps(v) }
    }
    #[inline(always)]
    unsafe fn reduce_max(v: __m512) -> f32 {
        unsafe { _mm512_reduce_max_ps(v) }
    }
}

/// AVX2 with FMA: 8 floats.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Avx2;

// SAFETY (every method): the caller runs them only where the CPU has AVX2 and FMA, and
// gives `load`/`store` pointers to 8 floats.
#[cfg(target_arch = "x86_64")]
impl Simd for Avx2 {
    type V = __m256;
    const LANES: usize = 8;
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_sub_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn div(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_div_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn max(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_max_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn min(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_min_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn mul_add(a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn abs(a: __m256) -> __m256 {
        unsafe {
            let bits = _mm256_andnot_si256(_mm256_set1_epi32(SIGN), _mm256_castps_si256(a));
            _mm256_castsi256_ps(bits)
        }
    }
    #[inline(always)]
    unsafe fn copysign(magnitude: __m256, sign: __m256) -> __m256 {
        unsafe {
            let mask = _mm256_set1_epi32(SIGN);
            let sign = _mm256_and_si256(mask, _mm256_castps_si256(sign));
            let magnitude = _mm256_andnot_si256(mask, _mm256_castps_si256(magnitude));
            _mm256_castsi256_ps(_mm256_or_si256(sign, magnitude))
        }
    }
    #[inline(always)]
    unsafe fn pow2(shifted: __m256) -> __m256 {
        unsafe {
            let n = _mm256_sub_epi32(_mm256_castps_si256(shifted), _mm256_set1_epi32(ROUND_BITS));
            let biased = _mm256_add_epi32(n, _mm256_set1_epi32(127));
            _mm256_castsi256_ps(_mm256_slli_epi32::<23>(biased))
        }
    }
    #[inline(always)]
    unsafe fn reduce_add(v: __m256) -> f32 {
        let mut lanes = [0f32; 8];
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), v) };
        lanes.iter().sum()
    }
    #[inline(always)]
    unsafe fn reduce_max(v: __m256) -> f32 {
        let mut lanes = [0f32; 8];
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), v) };
        lanes.iter().fold(f32::MIN, |m, &x| m.max(x))
    }
}
