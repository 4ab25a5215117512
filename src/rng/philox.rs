//! Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
//! SC'11; the generator PyTorch and cuRAND use) and the maps from its words to each
//! distribution. This is the reference the GPU kernels (`kernels.rs`) implement
//! word for word: element `i` of a fill with seed `s` at offset `o` comes from block
//! `o + i / per_block` under key `s`, so a value depends only on the seed, the offset
//! and the element's index, never on the stream, the launch shape or the GPU.

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// The 128-bit output of Philox4x32-10 for `counter` under `key`.
pub fn philox(mut c: [u32; 4], mut k: [u32; 2]) -> [u32; 4] {
    for round in 0..10 {
        if round > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        let p0 = M0 as u64 * c[0] as u64;
        let p1 = M1 as u64 * c[2] as u64;
        c = [(p1 >> 32) as u32 ^ c[1] ^ k[0], p1 as u32, (p0 >> 32) as u32 ^ c[3] ^ k[1], p0 as u32];
    }
    c
}

/// The words of block `block` of the stream of `seed`.
pub fn block(seed: u64, block: u64) -> [u32; 4] {
    philox([block as u32, (block >> 32) as u32, 0, 0], [seed as u32, (seed >> 32) as u32])
}

/// A uniform f32 in [0, 1) from a word: its top 24 bits.
pub fn unit_f32(x: u32) -> f32 {
    (x >> 8) as f32 * (1.0 / (1u32 << 24) as f32)
}

/// A uniform f64 in [0, 1) from two words: the top 53 of their 64 bits.
pub fn unit_f64(hi: u32, lo: u32) -> f64 {
    (((hi as u64) << 32 | lo as u64) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Uniform f16 and bf16 in [0, 1): the top 11 and 8 bits, exact in those formats.
pub fn unit_f16(x: u32) -> f32 {
    (x >> 21) as f32 * (1.0 / 2048.0)
}

pub fn unit_bf16(x: u32) -> f32 {
    (x >> 24) as f32 * (1.0 / 256.0)
}

/// Box-Muller on two f32 uniforms: the first in (0, 1], so its log is finite.
pub fn normal_pair_f32(a: u32, b: u32) -> (f32, f32) {
    let u1 = ((a >> 8) + 1) as f32 * (1.0 / (1u32 << 24) as f32);
    let u2 = unit_f32(b);
    let r = (-2.0 * u1.ln()).sqrt();
    let theta = 2.0 * std::f32::consts::PI * u2;
    (r * theta.cos(), r * theta.sin())
}

/// Box-Muller on two f64 uniforms of two words each.
pub fn normal_pair_f64(w: [u32; 4]) -> (f64, f64) {
    let u1 = unit_f64(w[0], w[1]) + 1.0 / (1u64 << 53) as f64;
    let u2 = unit_f64(w[2], w[3]);
    let r = (-2.0 * u1.ln()).sqrt();
    let theta = 2.0 * std::f64::consts::PI * u2;
    (r * theta.cos(), r * theta.sin())
}

/// An integer in [0, range) from one word (`range` ≤ 2^32) or two (larger ranges),
/// by remainder, as torch's `random_(from, to)`: the bias is below range / 2^32
/// (2^64), negligible for the ranges one draws from.
pub fn below_u32(x: u32, range: u64) -> u64 {
    x as u64 % range
}

pub fn below_u64(hi: u32, lo: u32, range: u64) -> u64 {
    ((hi as u64) << 32 | lo as u64) % range
}

/// Feistel rounds of the permutation's bijection: each round function is a whole
/// Philox4x32-10 block, so a few rounds mix fully.
pub(crate) const PERMUTATION_ROUNDS: u32 = 8;

/// The bits a permutation of `n` works in: even (a balanced Feistel network), at
/// least 2, and at most twice `n`'s range, so a cycle walk takes ≤ 4 steps on average.
pub fn permutation_bits(n: u64) -> u32 {
    let bits = (64 - n.saturating_sub(1).leading_zeros()).max(2);
    bits + bits % 2
}

/// Where index `i` goes in the permutation of [0, n) keyed by `seed` and `offset`:
/// a Feistel bijection on `permutation_bits(n)` bits, walked until it lands below
/// `n` (cycle walking keeps it a bijection of [0, n)). Each index is computed on its
/// own, so a GPU thread per index writes the permutation in one pass (Mitchell et
/// al., "Bandwidth-optimal random shuffling for GPUs", use the same construction).
pub fn permutation_index(seed: u64, offset: u64, n: u64, i: u64) -> u64 {
    let half = permutation_bits(n) / 2;
    let mask = (1u64 << half) - 1;
    let key = [seed as u32, (seed >> 32) as u32];
    let mut x = i;
    loop {
        let (mut left, mut right) = (x >> half, x & mask);
        for round in 0..PERMUTATION_ROUNDS {
            let f = philox([right as u32, (right >> 32) as u32 ^ round, offset as u32, (offset >> 32) as u32], key);
            let mixed = (f[0] as u64 | (f[1] as u64) << 32) & mask;
            (left, right) = (right, left ^ mixed);
        }
        x = left << half | right;
        if x < n {
            return x;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random123's known-answer vectors for Philox4x32-10 (tests/kat_vectors).
    #[test]
    fn known_answers() {
        assert_eq!(philox([0; 4], [0; 2]), [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]);
        assert_eq!(philox([u32::MAX; 4], [u32::MAX; 2]), [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]);
        assert_eq!(
            philox([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0]),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn uniforms_stay_in_the_unit_interval() {
        for x in [0, 1, 255, 256, u32::MAX - 1, u32::MAX] {
            for v in [unit_f32(x), unit_f16(x), unit_bf16(x)] {
                assert!((0.0..1.0).contains(&v), "{x:#x} -> {v}");
            }
            assert!((0.0..1.0).contains(&unit_f64(x, x)));
            let (a, b) = normal_pair_f32(x, x);
            assert!(a.is_finite() && b.is_finite());
        }
        assert_eq!(unit_f32(u32::MAX), 1.0 - f32::EPSILON / 2.0);
        assert!(unit_f64(u32::MAX, u32::MAX) < 1.0);
        let (a, b) = normal_pair_f64([0; 4]);
        assert!(a.is_finite() && b.is_finite(), "u1 is never 0");
        assert_eq!(below_u64(u32::MAX, u32::MAX, 1 << 40), (1 << 40) - 1);
    }

    /// The Kolmogorov-Smirnov statistic of `sample` (sorted here) against `cdf`.
    fn ks(sample: &mut [f64], cdf: impl Fn(f64) -> f64) -> f64 {
        sample.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let n = sample.len() as f64;
        sample.iter().enumerate().map(|(i, &x)| {
            let f = cdf(x);
            (f - i as f64 / n).abs().max(((i + 1) as f64 / n - f).abs())
        }).fold(0.0, f64::max)
    }

    fn normal_cdf(x: f64) -> f64 {
        // Abramowitz-Stegun 7.1.26 for erf: |error| < 1.5e-7, far below the KS bound.
        let z = x / std::f64::consts::SQRT_2;
        let t = 1.0 / (1.0 + 0.3275911 * z.abs());
        let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
        let erf = 1.0 - poly * (-z * z).exp();
        0.5 * (1.0 + if z >= 0.0 { erf } else { -erf })
    }

    const SAMPLES: u64 = crate::test_iterations(1 << 21);
    /// The KS statistic's 0.1 % critical value is 1.95 / sqrt(n).
    fn ks_bound(n: usize) -> f64 {
        1.95 / (n as f64).sqrt()
    }

    #[test]
    fn uniform_and_normal_pass_moments_and_kolmogorov_smirnov() {
        let seed = 0x1234_5678_9abc_def0;
        let words: Vec<u32> = (0..SAMPLES / 4).flat_map(|b| block(seed, b)).collect();
        let mut uniform: Vec<f64> = words.iter().map(|&x| unit_f32(x) as f64).collect();
        let n = uniform.len() as f64;
        let mean = uniform.iter().sum::<f64>() / n;
        let var = uniform.iter().map(|u| (u - mean).powi(2)).sum::<f64>() / n;
        assert!((mean - 0.5).abs() < 5.0 * (1.0 / 12.0 / n).sqrt(), "mean {mean}");
        assert!((var - 1.0 / 12.0).abs() < 0.002, "variance {var}");
        let d = ks(&mut uniform, |x| x.clamp(0.0, 1.0));
        assert!(d < ks_bound(uniform.len()), "uniform KS {d}");
        let mut normal: Vec<f64> = words.chunks(2).flat_map(|w| {
            let (a, b) = normal_pair_f32(w[0], w[1]);
            [a as f64, b as f64]
        }).collect();
        let mean = normal.iter().sum::<f64>() / n;
        let var = normal.iter().map(|z| (z - mean).powi(2)).sum::<f64>() / n;
        assert!(mean.abs() < 5.0 / n.sqrt() && (var - 1.0).abs() < 0.01, "normal mean {mean}, variance {var}");
        let d = ks(&mut normal, normal_cdf);
        assert!(d < ks_bound(normal.len()), "normal KS {d}");
    }

    #[test]
    fn permutations_are_bijections_that_differ_by_offset_and_spread_evenly() {
        for n in [1u64, 2, 3, 5, 10, 1000, 4097] {
            let mut p: Vec<u64> = (0..n).map(|i| permutation_index(9, 4, n, i)).collect();
            let first = p.clone();
            p.sort_unstable();
            assert!(p.iter().copied().eq(0..n), "n = {n}: a permutation");
            let other: Vec<u64> = (0..n).map(|i| permutation_index(9, 5, n, i)).collect();
            assert!(n < 10 || other != first, "n = {n}: another offset, another permutation");
        }
        // Where index 0 lands in permutations of 8, over many offsets: uniform.
        let trials = crate::test_iterations(40_000);
        let mut counts = [0f64; 8];
        (0..trials).for_each(|o| counts[permutation_index(3, o, 8, 0) as usize] += 1.0);
        let expected = trials as f64 / 8.0;
        let chi2: f64 = counts.iter().map(|c| (c - expected).powi(2) / expected).sum();
        assert!(chi2 < 24.32, "chi-square {chi2} over 7 degrees of freedom (0.1 % critical value 24.32)");
        assert_eq!((permutation_bits(1), permutation_bits(4), permutation_bits(5), permutation_bits(1 << 20)), (2, 2, 4, 20));
    }

    #[test]
    fn integers_pass_chi_square_and_streams_of_two_seeds_differ() {
        let bins = 10u64;
        let mut counts = vec![0u64; bins as usize];
        for b in 0..SAMPLES / 4 {
            for x in block(7, b) {
                counts[below_u32(x, bins) as usize] += 1;
            }
        }
        let expected = (SAMPLES / 4 * 4) as f64 / bins as f64;
        let chi2: f64 = counts.iter().map(|&c| (c as f64 - expected).powi(2) / expected).sum();
        assert!(chi2 < 27.88, "chi-square {chi2} over 9 degrees of freedom (0.1 % critical value 27.88)");
        // Two seeds' blocks: no shared 128-bit outputs among the first blocks.
        let a: std::collections::HashSet<[u32; 4]> = (0..crate::test_iterations(1 << 16)).map(|b| block(1, b)).collect();
        assert!((0..crate::test_iterations(1 << 16)).all(|b| !a.contains(&block(2, b))));
    }
}
