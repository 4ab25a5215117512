//! The fill kernels: one CUDA source per (distribution, dtype, words per value),
//! compiled through the NVRTC caches on first use. Each thread computes Philox
//! blocks in a grid-stride loop and stores the block's values, as one 16- or 8-byte
//! store where the output is aligned for it. `philox.rs` is the reference they
//! follow word for word.

use super::philox;
use crate::dtype::gpurt_dtype_t::{self, *};
use crate::error::{Error, Result};
use crate::handle::Handle;
use crate::kernel::elementwise::CONVERSIONS;

/// What a fill draws.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Distribution {
    /// [0, 1).
    Uniform,
    Normal { mean: f64, std: f64 },
    /// [low, low + range).
    Integers { low: i64, range: u64 },
    /// 1 with probability `p`, else 0.
    Bernoulli { p: f64 },
    /// A random permutation of [0, n) (`philox::permutation_index`).
    Permutation,
}

impl Distribution {
    fn kind(self) -> &'static str {
        match self {
            Distribution::Uniform => "uniform",
            Distribution::Normal { .. } => "normal",
            Distribution::Integers { .. } => "integers",
            Distribution::Bernoulli { .. } => "bernoulli",
            Distribution::Permutation => "permutation",
        }
    }

    /// Whether each value takes two words (64-bit draws).
    fn wide(self, dtype: gpurt_dtype_t) -> bool {
        match self {
            Distribution::Uniform | Distribution::Normal { .. } => dtype == GPURT_DTYPE_F64,
            Distribution::Integers { range, .. } => range > 1 << 32,
            Distribution::Bernoulli { .. } | Distribution::Permutation => false,
        }
    }

    /// Philox blocks a fill of `n` values draws: one per `per_block` values, or one
    /// key for a whole permutation.
    pub fn blocks(self, dtype: gpurt_dtype_t, n: u64) -> u64 {
        match self {
            Distribution::Permutation => 1,
            _ => n.div_ceil(self.per_block(dtype)),
        }
    }

    /// Threads a fill of `n` values runs: one per block, or one per index.
    fn threads(self, dtype: gpurt_dtype_t, n: u64) -> u64 {
        match self {
            Distribution::Permutation => n,
            _ => n.div_ceil(self.per_block(dtype)),
        }
    }

    /// Values per Philox block (four words).
    pub fn per_block(self, dtype: gpurt_dtype_t) -> u64 {
        if self.wide(dtype) { 2 } else { 4 }
    }

    /// The kernel's two parameters besides the output, count and state.
    pub fn parameters(self) -> (u64, u64) {
        match self {
            Distribution::Uniform => (0, 0),
            Distribution::Normal { mean, std } => (mean.to_bits(), std.to_bits()),
            Distribution::Integers { low, range } => (low as u64, range),
            Distribution::Bernoulli { p } => (p.to_bits(), 0),
            Distribution::Permutation => (philox::PERMUTATION_ROUNDS as u64, 0),
        }
    }

    /// Refuses what the distribution cannot fill or draw.
    pub fn check(self, dtype: gpurt_dtype_t) -> Result<()> {
        match self {
            Distribution::Uniform | Distribution::Normal { .. } if !dtype.is_float() => {
                Err(Error::invalid_argument(format!("{} values need a floating-point dtype", self.kind())))
            }
            Distribution::Normal { mean, std } if !(mean.is_finite() && std.is_finite() && std >= 0.0) => {
                Err(Error::invalid_argument(format!("normal(mean {mean}, std {std}): both finite, std ≥ 0")))
            }
            Distribution::Integers { .. } if dtype.is_float() => Err(Error::invalid_argument("random integers need dtype I32 or I64")),
            Distribution::Integers { range: 0, .. } => Err(Error::invalid_argument("random integers in [low, high) need low < high")),
            Distribution::Integers { low, range } if dtype == GPURT_DTYPE_I32 && (low < i32::MIN as i64 || low + (range - 1) as i64 > i32::MAX as i64) => {
                Err(Error::invalid_argument("[low, high) does not fit dtype I32"))
            }
            Distribution::Bernoulli { p } if !(0.0..=1.0).contains(&p) => Err(Error::invalid_argument(format!("bernoulli probability {p} is not in [0, 1]"))),
            Distribution::Permutation if dtype.is_float() => Err(Error::invalid_argument("a permutation needs dtype I32 or I64")),
            _ => Ok(()),
        }
    }
}

/// (storage type, the C expression of a value `x` of the compute type stored).
fn storage(dtype: gpurt_dtype_t) -> (&'static str, &'static str) {
    match dtype {
        GPURT_DTYPE_F32 => ("float", "x"),
        GPURT_DTYPE_F16 => ("unsigned short", "gpurt_store_f16(x)"),
        GPURT_DTYPE_BF16 => ("unsigned short", "gpurt_store_bf16(x)"),
        GPURT_DTYPE_F64 => ("double", "x"),
        GPURT_DTYPE_I32 => ("int", "x"),
        GPURT_DTYPE_I64 => ("long long", "x"),
    }
}

const PHILOX: &str = r#"
struct gpurt_w4 { unsigned int w[4]; };
__device__ __forceinline__ gpurt_w4 gpurt_philox4(const unsigned int c[4], unsigned long long seed) {
    unsigned int c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3];
    unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        unsigned int hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        unsigned int hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        unsigned int n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    }
    gpurt_w4 r; r.w[0] = c0; r.w[1] = c1; r.w[2] = c2; r.w[3] = c3;
    return r;
}
__device__ __forceinline__ gpurt_w4 gpurt_philox(unsigned long long ctr, unsigned long long seed) {
    const unsigned int c[4] = {(unsigned int)ctr, (unsigned int)(ctr >> 32), 0u, 0u};
    return gpurt_philox4(c, seed);
}
__device__ __forceinline__ double gpurt_unit53(unsigned int hi, unsigned int lo) {
    return (double)((((unsigned long long)hi << 32) | lo) >> 11) * 1.1102230246251565e-16;
}
"#;

/// -2 ln(u) for the f32 normal's u in (0, 1], a multiple of 2^-24, to a relative
/// error below 1e-5 at a fraction of `logf`'s cost (the fill is bound by instruction
/// issue, not memory): the hardware's log2 (absolute error 2^-22.6 near 1, 2 ulp
/// elsewhere) except within 2^-6 of 1, where that absolute error would be large against
/// the result and a series in v = 1 - u (exact) takes over (truncation v^3 / 5 ≤
/// 7.6e-7). With the hardware's square root, sine and cosine (`.ftz`: no operand is
/// subnormal), values stay within 1e-5 of the exact Box-Muller transform
/// (`philox::normal_pair_f32`): 2.5e-6 over 16 Mi values on the H100.
const MINUS_TWO_LOG: &str = r#"
__device__ __forceinline__ float gpurt_minus_two_log(float u) {
    const float v = 1.0f - u;
    const float series = 2.0f * v * (1.0f + v * (0.5f + v * (0.33333334f + v * 0.25f)));
    float log2_u;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(log2_u) : "f"(u));
    return v < 0.015625f ? series : -1.3862943611198906f * log2_u;
}
"#;

pub const KERNEL_NAME: &str = "gpurt_rng";

/// The permutation kernel: a thread per index walks the keyed Feistel bijection.
fn permutation_source(dtype: gpurt_dtype_t) -> String {
    let (storage, _) = storage(dtype);
    format!(
        "{PHILOX}\n\
         extern \"C\" __global__ void {KERNEL_NAME}({storage}* __restrict__ gpurt_out, unsigned long long gpurt_n, unsigned long long gpurt_seed,\n\
         \x20   unsigned long long gpurt_offset, const unsigned long long* gpurt_cell, unsigned long long gpurt_rounds, unsigned long long gpurt_unused) {{\n\
         \x20   if (gpurt_cell) gpurt_offset += *gpurt_cell;\n\
         \x20   unsigned int gpurt_bits = 2;\n\
         \x20   while (gpurt_bits < 64 && (1ull << gpurt_bits) < gpurt_n) gpurt_bits += 2;\n\
         \x20   const unsigned int gpurt_half = gpurt_bits / 2;\n\
         \x20   const unsigned long long gpurt_mask = (1ull << gpurt_half) - 1;\n\
         \x20   for (unsigned long long gpurt_i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; gpurt_i < gpurt_n;\n\
         \x20        gpurt_i += (unsigned long long)gridDim.x * blockDim.x) {{\n\
         \x20       unsigned long long x = gpurt_i;\n\
         \x20       do {{\n\
         \x20           unsigned long long l = x >> gpurt_half, r = x & gpurt_mask;\n\
         \x20           for (unsigned int round = 0; round < gpurt_rounds; ++round) {{\n\
         \x20               const unsigned int c[4] = {{(unsigned int)r, (unsigned int)(r >> 32) ^ round, (unsigned int)gpurt_offset, (unsigned int)(gpurt_offset >> 32)}};\n\
         \x20               const gpurt_w4 f = gpurt_philox4(c, gpurt_seed);\n\
         \x20               const unsigned long long mixed = ((unsigned long long)f.w[0] | ((unsigned long long)f.w[1] << 32)) & gpurt_mask;\n\
         \x20               const unsigned long long t = l ^ mixed; l = r; r = t;\n\
         \x20           }}\n\
         \x20           x = (l << gpurt_half) | r;\n\
         \x20       }} while (x >= gpurt_n);\n\
         \x20       gpurt_out[gpurt_i] = ({storage})x;\n\
         \x20   }}\n\
         }}\n"
    )
}

/// The CUDA source filling `dtype` values of `distribution`.
pub fn source(distribution: Distribution, dtype: gpurt_dtype_t) -> String {
    if distribution == Distribution::Permutation {
        return permutation_source(dtype);
    }
    let (storage, store) = storage(dtype);
    let wide = distribution.wide(dtype);
    let per = distribution.per_block(dtype);
    let vector_bytes = per * dtype.size();
    let one = |k: usize, value: &str, compute: &str| format!("        {{ const {compute} x = {value}; gpurt_v.s[{k}] = {store}; }}\n");
    // Only the f32 normal fill calls it.
    let minus_two_log = if matches!((distribution, wide), (Distribution::Normal { .. }, false)) { MINUS_TWO_LOG } else { "" };
    let values: String = match (distribution, wide) {
        (Distribution::Uniform, false) => {
            let (shift, scale) = match dtype {
                GPURT_DTYPE_F16 => (21, "4.8828125e-04f"),
                GPURT_DTYPE_BF16 => (24, "3.90625e-03f"),
                _ => (8, "5.9604644775390625e-08f"),
            };
            (0..4).map(|k| one(k, &format!("(float)(gpurt_b.w[{k}] >> {shift}) * {scale}"), "float")).collect()
        }
        (Distribution::Uniform, true) => (0..2).map(|k| one(k, &format!("gpurt_unit53(gpurt_b.w[{}], gpurt_b.w[{}])", 2 * k, 2 * k + 1), "double")).collect(),
        (Distribution::Normal { .. }, false) => {
            let mut s = String::from("        const float gpurt_mean = (float)__longlong_as_double((long long)gpurt_a), gpurt_std = (float)__longlong_as_double((long long)gpurt_c);\n");
            for pair in 0..2 {
                s += &format!(
                    "        {{ const float u1 = (float)((gpurt_b.w[{a}] >> 8) + 1) * 5.9604644775390625e-08f, u2 = (float)(gpurt_b.w[{b}] >> 8) * 5.9604644775390625e-08f;\n\
                     \x20         const float angle = 6.2831853071795865f * u2; float r, sn, cs;\n\
                     \x20         asm(\"sqrt.approx.ftz.f32 %0, %1;\" : \"=f\"(r) : \"f\"(gpurt_minus_two_log(u1)));\n\
                     \x20         asm(\"sin.approx.ftz.f32 %0, %1;\" : \"=f\"(sn) : \"f\"(angle)); asm(\"cos.approx.ftz.f32 %0, %1;\" : \"=f\"(cs) : \"f\"(angle));\n",
                    a = 2 * pair,
                    b = 2 * pair + 1
                );
                s += &one(2 * pair, "gpurt_mean + gpurt_std * r * cs", "float");
                s += &one(2 * pair + 1, "gpurt_mean + gpurt_std * r * sn", "float");
                s += "        }\n";
            }
            s
        }
        (Distribution::Normal { .. }, true) => {
            let mut s = String::from(
                "        const double gpurt_mean = __longlong_as_double((long long)gpurt_a), gpurt_std = __longlong_as_double((long long)gpurt_c);\n\
                 \x20       const double u1 = gpurt_unit53(gpurt_b.w[0], gpurt_b.w[1]) + 1.1102230246251565e-16, u2 = gpurt_unit53(gpurt_b.w[2], gpurt_b.w[3]);\n\
                 \x20       const double r = sqrt(-2.0 * log(u1)); double sn, cs; sincospi(2.0 * u2, &sn, &cs);\n",
            );
            s += &one(0, "gpurt_mean + gpurt_std * r * cs", "double");
            s += &one(1, "gpurt_mean + gpurt_std * r * sn", "double");
            s
        }
        (Distribution::Integers { .. }, false) => {
            (0..4).map(|k| one(k, &format!("(long long)gpurt_a + (long long)((unsigned long long)gpurt_b.w[{k}] % gpurt_c)"), "long long")).collect()
        }
        (Distribution::Integers { .. }, true) => (0..2)
            .map(|k| one(k, &format!("(long long)gpurt_a + (long long)(((((unsigned long long)gpurt_b.w[{}]) << 32) | gpurt_b.w[{}]) % gpurt_c)", 2 * k, 2 * k + 1), "long long"))
            .collect(),
        (Distribution::Permutation, _) => unreachable!("permutation_source"),
        (Distribution::Bernoulli { .. }, _) => {
            let mut s = String::from("        const double gpurt_p = __longlong_as_double((long long)gpurt_a);\n");
            let compute = if dtype.is_float() { "float" } else { "long long" };
            s += &(0..4).map(|k| one(k, &format!("(double)(gpurt_b.w[{k}] >> 8) * 5.9604644775390625e-08 < gpurt_p ? 1 : 0"), compute)).collect::<String>();
            s
        }
    };
    let words = vector_bytes / 4;
    let vector_fields: String = (0..words).map(|i| format!("unsigned int v{i}; ")).collect();
    format!(
        "{CONVERSIONS}{PHILOX}{minus_two_log}\n\
         struct alignas({vector_bytes}) gpurt_vec {{ {vector_fields}}};\n\
         union gpurt_block {{ {storage} s[{per}]; gpurt_vec v; }};\n\
         extern \"C\" __global__ void {KERNEL_NAME}({storage}* __restrict__ gpurt_out, unsigned long long gpurt_n, unsigned long long gpurt_seed,\n\
         \x20   unsigned long long gpurt_offset, const unsigned long long* gpurt_cell, unsigned long long gpurt_a, unsigned long long gpurt_c) {{\n\
         \x20   if (gpurt_cell) gpurt_offset += *gpurt_cell;\n\
         \x20   const unsigned long long gpurt_blocks = (gpurt_n + {per} - 1) / {per};\n\
         \x20   const bool gpurt_aligned = ((unsigned long long)gpurt_out & {align_mask}) == 0;\n\
         \x20   for (unsigned long long gpurt_j = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; gpurt_j < gpurt_blocks;\n\
         \x20        gpurt_j += (unsigned long long)gridDim.x * blockDim.x) {{\n\
         \x20       const gpurt_w4 gpurt_b = gpurt_philox(gpurt_offset + gpurt_j, gpurt_seed);\n\
         \x20       gpurt_block gpurt_v;\n\
         {values}\
         \x20       const unsigned long long gpurt_i = gpurt_j * {per};\n\
         \x20       if (gpurt_i + {per} <= gpurt_n && gpurt_aligned) {{\n\
         \x20           *(gpurt_vec*)(gpurt_out + gpurt_i) = gpurt_v.v;\n\
         \x20       }} else {{\n\
         \x20           for (int k = 0; k < {per}; ++k) if (gpurt_i + k < gpurt_n) gpurt_out[gpurt_i + k] = gpurt_v.s[k];\n\
         \x20       }}\n\
         \x20   }}\n\
         }}\n",
        align_mask = vector_bytes - 1,
    )
}

const BLOCK: u32 = 256;
const MAX_BLOCKS: u64 = 65_536;

/// What one fill writes: `n` values of `dtype` from `distribution` at `out`.
#[derive(Debug, Clone, Copy)]
pub struct Fill {
    pub distribution: Distribution,
    pub dtype: gpurt_dtype_t,
    pub out: u64,
    pub n: u64,
}

/// Where a fill draws from: block `offset` of the stream of `seed`, plus the u64 at
/// `cell` when it is not 0 (the base a graph replay sets).
#[derive(Debug, Clone, Copy)]
pub struct Draw {
    pub seed: u64,
    pub offset: u64,
    pub cell: u64,
}

/// Enqueues `fill` on `stream`, drawing from `draw`.
pub fn launch(fill: &Fill, draw: Draw, stream: Handle) -> Result<()> {
    let Fill { distribution, dtype, out, n } = *fill;
    let s = crate::stream::get(stream)?;
    let recipe = format!("rng\0{}\0{}\0{}", distribution.kind(), dtype as i32, distribution.wide(dtype));
    let generate = || Ok(source(distribution, dtype));
    let kernel = crate::kernel::rtc::get_kernel_by_recipe(s.device(), &recipe, KERNEL_NAME, generate)?;
    let (a, c) = distribution.parameters();
    let mut values = [out, n, draw.seed, draw.offset, draw.cell, a, c];
    let mut args: [*mut libc::c_void; 7] = values.each_mut().map(|v| (v as *mut u64).cast());
    let blocks = distribution.threads(dtype, n).div_ceil(BLOCK as u64).min(MAX_BLOCKS) as u32;
    let shape = crate::kernel::LaunchShape::plain([blocks, 1, 1], [BLOCK, 1, 1]);
    // SAFETY: one pointer per kernel parameter (the output and cell are device
    // pointers, the rest values), each a u64 that lives until the call returns.
    unsafe { crate::kernel::launch(kernel, &shape, stream, args.as_mut_ptr()) }
}

/// The values a fill gives, computed on the host: the kernels' reference (normal
/// values agree to rounding: the GPU's sincospi and log differ in the last bits).
pub fn reference(distribution: Distribution, dtype: gpurt_dtype_t, n: u64, seed: u64, offset: u64) -> Vec<f64> {
    if distribution == Distribution::Permutation {
        return (0..n).map(|i| philox::permutation_index(seed, offset, n, i) as f64).collect();
    }
    let per = distribution.per_block(dtype);
    let wide = distribution.wide(dtype);
    (0..n.div_ceil(per))
        .flat_map(|j| {
            let w = philox::block(seed, offset + j);
            let values: Vec<f64> = match (distribution, wide) {
                (Distribution::Uniform, false) => w
                    .iter()
                    .map(|&x| match dtype {
                        GPURT_DTYPE_F16 => philox::unit_f16(x),
                        GPURT_DTYPE_BF16 => philox::unit_bf16(x),
                        _ => philox::unit_f32(x),
                    } as f64)
                    .collect(),
                (Distribution::Uniform, true) => vec![philox::unit_f64(w[0], w[1]), philox::unit_f64(w[2], w[3])],
                (Distribution::Normal { mean, std }, false) => {
                    let (a, b) = philox::normal_pair_f32(w[0], w[1]);
                    let (c, d) = philox::normal_pair_f32(w[2], w[3]);
                    [a, b, c, d].iter().map(|&z| mean + std * z as f64).collect()
                }
                (Distribution::Normal { mean, std }, true) => {
                    let (a, b) = philox::normal_pair_f64(w);
                    vec![mean + std * a, mean + std * b]
                }
                (Distribution::Integers { low, range }, false) => w.iter().map(|&x| (low + philox::below_u32(x, range) as i64) as f64).collect(),
                (Distribution::Integers { low, range }, true) => {
                    vec![(low + philox::below_u64(w[0], w[1], range) as i64) as f64, (low + philox::below_u64(w[2], w[3], range) as i64) as f64]
                }
                (Distribution::Bernoulli { p }, _) => w.iter().map(|&x| f64::from(u8::from((philox::unit_f32(x) as f64) < p))).collect(),
                (Distribution::Permutation, _) => unreachable!("handled above"),
            };
            values
        })
        .take(n as usize)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_takes_its_words_and_bad_requests_are_refused() {
        assert_eq!(Distribution::Uniform.per_block(GPURT_DTYPE_F32), 4);
        assert_eq!(Distribution::Uniform.per_block(GPURT_DTYPE_F64), 2);
        assert_eq!(Distribution::Integers { low: 0, range: 1 << 33 }.per_block(GPURT_DTYPE_I64), 2);
        assert!(Distribution::Uniform.check(GPURT_DTYPE_I32).is_err());
        assert!(Distribution::Normal { mean: 0.0, std: -1.0 }.check(GPURT_DTYPE_F32).is_err());
        assert!(Distribution::Normal { mean: f64::NAN, std: 1.0 }.check(GPURT_DTYPE_F32).is_err());
        assert!(Distribution::Integers { low: 0, range: 0 }.check(GPURT_DTYPE_I64).is_err());
        assert!(Distribution::Integers { low: 0, range: 10 }.check(GPURT_DTYPE_F32).is_err());
        assert!(Distribution::Integers { low: i32::MAX as i64, range: 2 }.check(GPURT_DTYPE_I32).is_err());
        assert!(Distribution::Integers { low: i32::MAX as i64, range: 1 }.check(GPURT_DTYPE_I32).is_ok());
        assert!(Distribution::Bernoulli { p: 1.5 }.check(GPURT_DTYPE_F32).is_err());
        assert!(Distribution::Permutation.check(GPURT_DTYPE_F32).is_err());
        assert_eq!((Distribution::Permutation.blocks(GPURT_DTYPE_I64, 1 << 30), Distribution::Uniform.blocks(GPURT_DTYPE_F32, 9)), (1, 3));
        assert!(source(Distribution::Permutation, GPURT_DTYPE_I32).contains("while (x >= gpurt_n)"));
    }

    /// MINUS_TWO_LOG's series near 1, in f32 as the kernel computes it, against
    /// -2 ln(u) in f64: within its stated 1e-5 (truncation 7.6e-7, then rounding).
    #[test]
    fn the_normal_fill_series_near_one_is_within_its_bound() {
        let series = |v: f32| 2.0 * v * (1.0 + v * (0.5 + v * (0.333_333_34 + v * 0.25)));
        let mut worst = 0f64;
        for k in (1..=1u32 << 18).step_by(7).chain([1 << 18]) {
            let v = k as f32 / (1u32 << 24) as f32; // u = 1 - v, a multiple of 2^-24, up to v = 2^-6
            let exact = -2.0 * (1.0 - v as f64).ln();
            worst = worst.max(((series(v) as f64) - exact).abs() / exact);
        }
        assert!(worst < 1e-6, "worst relative error {worst:e}");
    }

    #[test]
    fn the_sources_name_their_stores_and_the_reference_follows_the_offset() {
        let f16 = source(Distribution::Normal { mean: 0.0, std: 1.0 }, GPURT_DTYPE_F16);
        assert!(f16.contains("gpurt_store_f16(x)") && f16.contains("alignas(8)") && f16.contains("gpurt_minus_two_log(u1)"));
        assert!(f16.contains("sin.approx.ftz.f32") && !f16.contains("sincospif"));
        assert!(!source(Distribution::Uniform, GPURT_DTYPE_F32).contains("gpurt_minus_two_log"), "only the f32 normal fill carries its helper");
        let f64_normal = source(Distribution::Normal { mean: 0.0, std: 1.0 }, GPURT_DTYPE_F64);
        assert!(f64_normal.contains("sincospi(") && f64_normal.contains("log(u1)"), "f64 normals keep the accurate functions");
        let wide = source(Distribution::Integers { low: -5, range: 1 << 40 }, GPURT_DTYPE_I64);
        assert!(wide.contains("alignas(16)") && wide.contains("% gpurt_c"));
        let all = reference(Distribution::Uniform, GPURT_DTYPE_F32, 10, 42, 0);
        assert_eq!(&reference(Distribution::Uniform, GPURT_DTYPE_F32, 6, 42, 1)[..], &all[4..], "offset 1 skips one block of four");
        let ints = reference(Distribution::Integers { low: -3, range: 7 }, GPURT_DTYPE_I32, 1000, 9, 0);
        assert!(ints.iter().all(|&v| (-3.0..4.0).contains(&v)));
    }
}
