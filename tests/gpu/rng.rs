use libc::c_void;

use gpurt::alloc::ffi::gpurt_free;
use gpurt::dtype::gpurt_dtype_t::{self, *};
use gpurt::graph::ffi::*;
use gpurt::rng::ffi::*;
use gpurt::rng::gpurt_rng_state_t;
use gpurt::rng::kernels::{reference, Distribution};
use gpurt::stream::ffi::*;

use crate::expect_status;
use crate::util::{malloc, random_words, stream, Capture};

pub const TESTS: &[crate::support::Test] = &[
    ("fills_equal_the_host_reference_for_every_dtype", fills_equal_the_host_reference_for_every_dtype),
    ("the_sequence_continues_across_fills_streams_and_restored_states", the_sequence_continues_across_fills_streams_and_restored_states),
    ("ten_million_draws_pass_moments_and_kolmogorov_smirnov", ten_million_draws_pass_moments_and_kolmogorov_smirnov),
    ("a_captured_fill_draws_new_numbers_at_each_replay", a_captured_fill_draws_new_numbers_at_each_replay),
];

fn fresh_seed() -> u64 {
    let w = random_words(2);
    (w[0] as u64) << 32 | w[1] as u64
}

/// `n` values of `dtype` at `ptr`, copied to the host and widened to f64.
fn read(ptr: u64, n: usize, dtype: gpurt_dtype_t, s: gpurt_stream_t) -> Vec<f64> {
    let mut bytes = vec![0u8; n * dtype.size() as usize];
    expect_status!(gpurt::copy::ffi::gpurt_memcpy(bytes.as_mut_ptr().cast(), ptr as *const c_void, bytes.len(), s), GPURT_SUCCESS);
    let f16 = |h: u16| -> f64 {
        let (sign, exp, frac) = ((h >> 15) as i32, ((h >> 10) & 31) as i32, (h & 1023) as f64);
        let v = if exp == 0 { frac * 2f64.powi(-24) } else { (1.0 + frac / 1024.0) * 2f64.powi(exp - 15) };
        if sign == 1 { -v } else { v }
    };
    bytes
        .chunks(dtype.size() as usize)
        .map(|c| match dtype {
            GPURT_DTYPE_F32 => f32::from_le_bytes(c.try_into().unwrap()) as f64,
            GPURT_DTYPE_F64 => f64::from_le_bytes(c.try_into().unwrap()),
            GPURT_DTYPE_F16 => f16(u16::from_le_bytes(c.try_into().unwrap())),
            GPURT_DTYPE_BF16 => f32::from_bits((u16::from_le_bytes(c.try_into().unwrap()) as u32) << 16) as f64,
            GPURT_DTYPE_I32 => i32::from_le_bytes(c.try_into().unwrap()) as f64,
            GPURT_DTYPE_I64 => i64::from_le_bytes(c.try_into().unwrap()) as f64,
        })
        .collect()
}

fn fill(gen: gpurt_generator_t, out: u64, n: usize, dtype: gpurt_dtype_t, d: Distribution, s: gpurt_stream_t) {
    let out = out as *mut c_void;
    let dt = dtype as i32;
    let status = match d {
        Distribution::Uniform => gpurt_random_uniform(gen, out, n, dt, s),
        Distribution::Normal { mean, std } => gpurt_random_normal(gen, out, n, dt, mean, std, s),
        Distribution::Integers { low, range } => gpurt_random_integers(gen, out, n, dt, low, low + range as i64, s),
        Distribution::Bernoulli { p } => gpurt_random_bernoulli(gen, out, n, dt, p, s),
        Distribution::Permutation => gpurt_random_permutation(gen, out, n, dt, s),
    };
    assert_eq!(status, gpurt::Status::GPURT_SUCCESS, "{d:?} {dtype:?}: {}", crate::support::last_message());
}

fn fills_equal_the_host_reference_for_every_dtype() {
    let s = stream();
    let seed = fresh_seed();
    let mut gen = std::ptr::null_mut();
    expect_status!(gpurt_generator_create(0, seed, &mut gen), GPURT_SUCCESS);
    let n = 100_003; // a tail that fills part of a block
    let buffer = malloc(n * 8 + 64, s);
    let cases = [
        (Distribution::Uniform, GPURT_DTYPE_F32, 0.0),
        (Distribution::Uniform, GPURT_DTYPE_F64, 0.0),
        (Distribution::Uniform, GPURT_DTYPE_F16, 0.0),
        (Distribution::Uniform, GPURT_DTYPE_BF16, 0.0),
        (Distribution::Normal { mean: 3.0, std: 0.5 }, GPURT_DTYPE_F32, 2e-5),
        (Distribution::Normal { mean: -1.0, std: 2.0 }, GPURT_DTYPE_F64, 1e-12),
        (Distribution::Normal { mean: 0.0, std: 1.0 }, GPURT_DTYPE_F16, 4e-3),
        (Distribution::Normal { mean: 0.0, std: 1.0 }, GPURT_DTYPE_BF16, 3e-2),
        (Distribution::Integers { low: -1000, range: 12345 }, GPURT_DTYPE_I32, 0.0),
        (Distribution::Integers { low: -(1 << 40), range: 1 << 41 }, GPURT_DTYPE_I64, 0.0),
        (Distribution::Bernoulli { p: 0.3 }, GPURT_DTYPE_F32, 0.0),
        (Distribution::Bernoulli { p: 0.7 }, GPURT_DTYPE_I64, 0.0),
        (Distribution::Permutation, GPURT_DTYPE_I32, 0.0),
        (Distribution::Permutation, GPURT_DTYPE_I64, 0.0),
    ];
    for (d, dtype, tolerance) in cases {
        // Aligned, then one element past (the scalar stores).
        for shift in [0, dtype.size()] {
            let state = {
                let mut st = gpurt_rng_state_t::default();
                expect_status!(gpurt_rng_get_state(gen, &mut st), GPURT_SUCCESS);
                st
            };
            fill(gen, buffer + shift, n, dtype, d, s);
            let got = read(buffer + shift, n, dtype, s);
            let want = reference(d, dtype, n as u64, seed, state.offset);
            if d == Distribution::Permutation {
                let mut sorted: Vec<u64> = got.iter().map(|&v| v as u64).collect();
                sorted.sort_unstable();
                assert!(sorted.iter().copied().eq(0..n as u64), "{dtype:?}: a permutation of [0, n)");
            }
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let close = if tolerance == 0.0 { g == w } else { (g - w).abs() <= tolerance * w.abs().max(1.0) };
                assert!(close, "{d:?} {dtype:?} shift {shift}: element {i}: GPU {g}, host {w}");
            }
        }
    }
    expect_status!(gpurt_free(buffer as *mut c_void), GPURT_SUCCESS);
    expect_status!(gpurt_generator_destroy(gen), GPURT_SUCCESS);
}

fn the_sequence_continues_across_fills_streams_and_restored_states() {
    let (a, b) = (stream(), stream());
    let seed = fresh_seed();
    expect_status!(gpurt_rng_manual_seed(0, seed), GPURT_SUCCESS);
    let mut initial = 0;
    expect_status!(gpurt_rng_initial_seed(0, &mut initial), GPURT_SUCCESS);
    assert_eq!(initial, seed);
    let n = 1000;
    let out = malloc(n * 4 * 3, a);
    let mut saved = gpurt_rng_state_t::default();
    expect_status!(gpurt_rng_get_state(std::ptr::null_mut(), &mut saved), GPURT_SUCCESS);
    assert_eq!(saved, gpurt_rng_state_t { seed, offset: 0 });
    fill(std::ptr::null_mut(), out, n, GPURT_DTYPE_F32, Distribution::Uniform, a);
    expect_status!(gpurt_stream_synchronize(a), GPURT_SUCCESS);
    fill(std::ptr::null_mut(), out + 4 * n as u64, n, GPURT_DTYPE_F32, Distribution::Uniform, b);
    let two = read(out, 2 * n, GPURT_DTYPE_F32, b);
    assert_eq!(two, reference(Distribution::Uniform, GPURT_DTYPE_F32, 2 * n as u64, seed, 0), "the second fill continues the first, on another stream");
    expect_status!(gpurt_rng_set_state(std::ptr::null_mut(), &saved), GPURT_SUCCESS);
    fill(std::ptr::null_mut(), out + 8 * n as u64, n, GPURT_DTYPE_F32, Distribution::Uniform, a);
    assert_eq!(read(out + 8 * n as u64, n, GPURT_DTYPE_F32, a), two[..n], "a restored state draws the same numbers again");
    // A failed fill changes no state.
    let mut before = gpurt_rng_state_t::default();
    expect_status!(gpurt_rng_get_state(std::ptr::null_mut(), &mut before), GPURT_SUCCESS);
    let bad = gpurt_random_normal(std::ptr::null_mut(), out as *mut c_void, n, GPURT_DTYPE_F32 as i32, 0.0, -1.0, a);
    assert_eq!(bad, gpurt::Status::GPURT_ERROR_INVALID_ARGUMENT);
    let mut after = gpurt_rng_state_t::default();
    expect_status!(gpurt_rng_get_state(std::ptr::null_mut(), &mut after), GPURT_SUCCESS);
    assert_eq!(before, after);
    expect_status!(gpurt_free(out as *mut c_void), GPURT_SUCCESS);
}

fn ks(sample: &mut [f64], cdf: impl Fn(f64) -> f64) -> f64 {
    sample.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = sample.len() as f64;
    sample.iter().enumerate().map(|(i, &x)| (cdf(x) - i as f64 / n).abs().max(((i + 1) as f64 / n - cdf(x)).abs())).fold(0.0, f64::max)
}

fn ten_million_draws_pass_moments_and_kolmogorov_smirnov() {
    let s = stream();
    let n = 10_000_000usize;
    let out = malloc(n * 4, s);
    let mut gen = std::ptr::null_mut();
    expect_status!(gpurt_generator_create(0, fresh_seed(), &mut gen), GPURT_SUCCESS);
    let bound = 1.95 / (n as f64).sqrt(); // KS at the 0.1 % level
    fill(gen, out, n, GPURT_DTYPE_F32, Distribution::Uniform, s);
    let mut u = read(out, n, GPURT_DTYPE_F32, s);
    let mean = u.iter().sum::<f64>() / n as f64;
    let var = u.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
    assert!((mean - 0.5).abs() < 5.0 * (1.0 / 12.0 / n as f64).sqrt() && (var - 1.0 / 12.0).abs() < 5e-4, "uniform mean {mean} variance {var}");
    let d = ks(&mut u, |x| x.clamp(0.0, 1.0));
    assert!(d < bound, "uniform KS {d} (bound {bound})");
    fill(gen, out, n, GPURT_DTYPE_F32, Distribution::Normal { mean: 0.0, std: 1.0 }, s);
    let mut z = read(out, n, GPURT_DTYPE_F32, s);
    let mean = z.iter().sum::<f64>() / n as f64;
    let var = z.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
    assert!(mean.abs() < 5.0 / (n as f64).sqrt() && (var - 1.0).abs() < 3e-3, "normal mean {mean} variance {var}");
    let normal_cdf = |x: f64| 0.5 * erfc(-x / std::f64::consts::SQRT_2);
    let d = ks(&mut z, normal_cdf);
    assert!(d < bound, "normal KS {d} (bound {bound})");
    fill(gen, out, n, GPURT_DTYPE_I32, Distribution::Integers { low: 0, range: 100 }, s);
    let mut counts = [0f64; 100];
    read(out, n, GPURT_DTYPE_I32, s).iter().for_each(|&v| counts[v as usize] += 1.0);
    let expected = n as f64 / 100.0;
    let chi2: f64 = counts.iter().map(|c| (c - expected).powi(2) / expected).sum();
    assert!(chi2 < 148.2, "chi-square {chi2} over 99 degrees of freedom (0.1 % critical value 148.2)");
    expect_status!(gpurt_generator_destroy(gen), GPURT_SUCCESS);
    expect_status!(gpurt_free(out as *mut c_void), GPURT_SUCCESS);
}

/// erfc by its continued-fraction-free Chebyshev fit (Numerical Recipes' erfcc,
/// relative error < 1.2e-7), enough for a KS bound of 6e-4.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t * (-z * z - 1.26551223
        + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (0.27886807
        + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))))).exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

fn a_captured_fill_draws_new_numbers_at_each_replay() {
    let s = stream();
    let seed = fresh_seed();
    let mut gen = std::ptr::null_mut();
    expect_status!(gpurt_generator_create(0, seed, &mut gen), GPURT_SUCCESS);
    let n = 4099;
    let out = malloc(n * 4 * 2, s);
    // One eager fill first: the graph starts from where it leaves the generator.
    fill(gen, out, 8, GPURT_DTYPE_F32, Distribution::Uniform, s);
    let capture = Capture::begin(s, gpurt::graph::GPURT_CAPTURE_MODE_THREAD_LOCAL);
    fill(gen, out, n, GPURT_DTYPE_F32, Distribution::Uniform, s);
    fill(gen, out + 4 * n as u64, n, GPURT_DTYPE_F32, Distribution::Normal { mean: 0.0, std: 1.0 }, s);
    let graph = capture.end();
    let mut state = gpurt_rng_state_t::default();
    expect_status!(gpurt_rng_get_state(gen, &mut state), GPURT_SUCCESS);
    assert_eq!(state.offset, 2, "capturing draws nothing yet");
    let mut exec = std::ptr::null_mut();
    expect_status!(gpurt_graph_instantiate(graph, 0, std::ptr::null_mut(), &mut exec), GPURT_SUCCESS);
    let blocks = (n as u64).div_ceil(4);
    let mut previous = Vec::new();
    for replay in 0..3u64 {
        expect_status!(gpurt_graph_launch(exec, s), GPURT_SUCCESS);
        let got = read(out, n, GPURT_DTYPE_F32, s);
        let base = 2 + replay * 2 * blocks;
        assert_eq!(got, reference(Distribution::Uniform, GPURT_DTYPE_F32, n as u64, seed, base), "replay {replay} draws from the generator's offset");
        let normal = read(out + 4 * n as u64, n, GPURT_DTYPE_F32, s);
        let want = reference(Distribution::Normal { mean: 0.0, std: 1.0 }, GPURT_DTYPE_F32, n as u64, seed, base + blocks);
        assert!(normal.iter().zip(&want).all(|(g, w)| (g - w).abs() < 2e-5 * w.abs().max(1.0)), "replay {replay}: the second fill follows the first");
        assert_ne!(got, previous, "each replay draws new numbers");
        previous = got;
    }
    expect_status!(gpurt_rng_get_state(gen, &mut state), GPURT_SUCCESS);
    assert_eq!(state.offset, 2 + 3 * 2 * blocks, "each replay advanced the generator by what the graph draws");
    expect_status!(gpurt_graph_exec_destroy(exec), GPURT_SUCCESS);
    expect_status!(gpurt_graph_destroy(graph), GPURT_SUCCESS);
    expect_status!(gpurt_generator_destroy(gen), GPURT_SUCCESS);
    expect_status!(gpurt_free(out as *mut c_void), GPURT_SUCCESS);
}
