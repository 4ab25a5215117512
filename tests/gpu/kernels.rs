//! Kernels on the GPU: NVRTC compile, load and launch with exact results, compile
//! errors with their log, the kernel caches (memory and disk), cluster launches,
//! programmatic dependent launches, and elementwise kernels against a CPU reference
//! for every dtype, and their kernels kept apart by expression and input names across
//! a cache clear.

use gpurt::kernel::elementwise::gpurt_dtype_t::{self, *};
use gpurt::kernel::ffi::*;
use gpurt::stream::ffi::*;

use crate::expect_status;
use crate::util::{malloc, random_words, stream};

pub const TESTS: &[crate::support::Test] = &[
    ("rtc_program_loads_and_its_kernel_computes_exactly", rtc_program_loads_and_its_kernel_computes_exactly),
    ("compile_error_returns_the_nvrtc_log", compile_error_returns_the_nvrtc_log),
    ("kernel_cache_serves_repeats_and_survives_a_clear_through_disk", kernel_cache_serves_repeats_and_survives_a_clear_through_disk),
    ("cluster_launch_runs_every_block", cluster_launch_runs_every_block),
    ("programmatic_dependent_launches_keep_stream_order", programmatic_dependent_launches_keep_stream_order),
    ("elementwise_matches_the_cpu_for_every_dtype", elementwise_matches_the_cpu_for_every_dtype),
    ("elementwise_kernels_are_told_apart_and_survive_a_cache_clear", elementwise_kernels_are_told_apart_and_survive_a_cache_clear),
    ("one_elementwise_kernel_writes_several_outputs", one_elementwise_kernel_writes_several_outputs),
];

/// Kernels the GPU tests and the graph tests share.
pub const SOURCE: &str = r#"
extern "C" __global__ void axpy(float a, const float* x, float* y, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaf(a, x[i], y[i]);
}
extern "C" __global__ void affine_u32(unsigned* x, unsigned mul, unsigned add, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * mul + add;
}
extern "C" __global__ void block_ids(unsigned* out) {
    if (threadIdx.x == 0) out[blockIdx.x] = blockIdx.x + 1;
}
extern "C" __global__ void dependent_affine(unsigned* x, unsigned mul, unsigned add, unsigned n) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * mul + add;
}
"#;

pub fn cstr(s: &str) -> std::ffi::CString {
    std::ffi::CString::new(s).unwrap()
}

/// A kernel of `SOURCE`, through the kernel cache.
pub fn kernel(name: &str) -> gpurt_kernel_t {
    let (src, name) = (cstr(SOURCE), cstr(name));
    let mut k = std::ptr::null_mut();
    expect_status!(gpurt_rtc_get_kernel(src.as_ptr(), name.as_ptr(), std::ptr::null(), 0, &mut k), GPURT_SUCCESS);
    k
}

/// Pointers to each argument's value, as cuLaunchKernel takes them.
pub fn args(values: &mut [&mut dyn std::any::Any]) -> Vec<*mut libc::c_void> {
    values.iter_mut().map(|v| (&mut **v as *mut dyn std::any::Any).cast::<libc::c_void>()).collect()
}

pub fn upload(words: &[u32], s: gpurt_stream_t) -> u64 {
    let d = malloc(words.len() * 4, s);
    expect_status!(gpurt::copy::ffi::gpurt_memcpy(d as *mut _, words.as_ptr().cast(), words.len() * 4, s), GPURT_SUCCESS);
    d
}

pub fn download(d: u64, n: usize, s: gpurt_stream_t) -> Vec<u32> {
    let mut back = vec![0u32; n];
    expect_status!(gpurt::copy::ffi::gpurt_memcpy(back.as_mut_ptr().cast(), d as *const _, n * 4, s), GPURT_SUCCESS);
    back
}

fn free(d: u64) {
    expect_status!(gpurt::alloc::ffi::gpurt_free(d as *mut _), GPURT_SUCCESS);
}

fn floats(n: usize) -> Vec<f32> {
    random_words(n).iter().map(|w| (*w as i32 as f32) / 1e6).collect()
}

fn rtc_program_loads_and_its_kernel_computes_exactly() {
    let s = stream();
    let src = cstr(SOURCE);
    let opts = [cstr("--std=c++17")];
    let opt_ptrs: Vec<_> = opts.iter().map(|o| o.as_ptr()).collect();
    let mut program = std::ptr::null_mut();
    expect_status!(gpurt_rtc_compile(src.as_ptr(), opt_ptrs.as_ptr(), 1, &mut program), GPURT_SUCCESS);
    let (mut code, mut size, mut is_cubin) = (std::ptr::null(), 0usize, -1);
    expect_status!(gpurt_rtc_program_code(program, &mut code, &mut size, &mut is_cubin), GPURT_SUCCESS);
    assert!(size > 0 && is_cubin == 1, "sm_ targets give cubin");
    // Through a file, as an engine shipping cubins would load them.
    let path = std::env::temp_dir().join(format!("gpurt-axpy-{}.cubin", std::process::id()));
    std::fs::write(&path, unsafe { std::slice::from_raw_parts(code.cast::<u8>(), size) }).unwrap();
    expect_status!(gpurt_rtc_program_destroy(program), GPURT_SUCCESS);
    let mut module = std::ptr::null_mut();
    expect_status!(gpurt_module_load_file(cstr(path.to_str().unwrap()).as_ptr(), &mut module), GPURT_SUCCESS);
    let _ = std::fs::remove_file(&path);
    let mut k = std::ptr::null_mut();
    expect_status!(gpurt_module_get_kernel(module, cstr("axpy").as_ptr(), &mut k), GPURT_SUCCESS);
    let mut regs = 0;
    expect_status!(gpurt_kernel_get_attribute(k, gpurt::kernel::GPURT_KERNEL_NUM_REGS, &mut regs), GPURT_SUCCESS);
    assert!(regs > 0);
    let mut shared = 0;
    expect_status!(gpurt_kernel_set_max_dynamic_shared_memory(k, 100 << 10), GPURT_SUCCESS);
    expect_status!(gpurt_kernel_get_attribute(k, gpurt::kernel::GPURT_KERNEL_MAX_DYNAMIC_SHARED_SIZE_BYTES, &mut shared), GPURT_SUCCESS);
    assert_eq!(shared, 100 << 10);
    let n = 100_003u32;
    let (x, y) = (floats(n as usize), floats(n as usize));
    let to_words = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
    let (dx, dy) = (upload(&to_words(&x), s), upload(&to_words(&y), s));
    let mut a = 1.75f32;
    let (mut px, mut py, mut pn) = (dx, dy, n);
    let mut argv = args(&mut [&mut a, &mut px, &mut py, &mut pn]);
    expect_status!(gpurt_launch_kernel(k, n.div_ceil(256), 1, 1, 256, 1, 1, 0, s, argv.as_mut_ptr()), GPURT_SUCCESS);
    let got = download(dy, n as usize, s);
    let want: Vec<u32> = x.iter().zip(&y).map(|(x, y)| 1.75f32.mul_add(*x, *y).to_bits()).collect();
    assert!(got == want, "axpy differs from the CPU's fused multiply-add");
    expect_status!(gpurt_module_unload(module), GPURT_SUCCESS);
    free(dx);
    free(dy);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

fn compile_error_returns_the_nvrtc_log() {
    let src = cstr("extern \"C\" __global__ void broken(int* p) { p[0] = undeclared_thing; }");
    let mut program = std::ptr::null_mut();
    let status = gpurt_rtc_compile(src.as_ptr(), std::ptr::null(), 0, &mut program);
    assert_eq!(status, gpurt::Status::GPURT_ERROR_COMPILATION);
    let message = crate::support::last_message();
    assert!(message.contains("undeclared_thing") && message.contains("error"), "{message}");
}

fn kernel_cache_serves_repeats_and_survives_a_clear_through_disk() {
    let dir = std::env::temp_dir().join(format!("gpurt-rtc-{}", std::process::id()));
    let dir_c = cstr(dir.to_str().unwrap());
    expect_status!(gpurt_rtc_set_cache_dir(dir_c.as_ptr()), GPURT_SUCCESS);
    let unique = format!("{SOURCE}\n// {:?}\n", random_words(2));
    let (src, name) = (cstr(&unique), cstr("affine_u32"));
    let get = || {
        let mut k = std::ptr::null_mut();
        let t = std::time::Instant::now();
        expect_status!(gpurt_rtc_get_kernel(src.as_ptr(), name.as_ptr(), std::ptr::null(), 0, &mut k), GPURT_SUCCESS);
        (k, t.elapsed())
    };
    let (first, compile_time) = get();
    let (second, _) = get();
    assert_eq!(first, second, "a repeat is served from the cache");
    let entries = std::fs::read_dir(&dir).unwrap().filter(|e| e.as_ref().unwrap().path().extension() == Some("gpurtc".as_ref())).count();
    assert_eq!(entries, 1, "the compiled code was written to the cache directory");
    expect_status!(gpurt_rtc_clear_cache(), GPURT_SUCCESS);
    let mut regs = 0;
    expect_status!(gpurt_kernel_get_attribute(first, gpurt::kernel::GPURT_KERNEL_NUM_REGS, &mut regs), GPURT_ERROR_INVALID_HANDLE);
    let (third, from_disk) = get();
    expect_status!(gpurt_kernel_get_attribute(third, gpurt::kernel::GPURT_KERNEL_NUM_REGS, &mut regs), GPURT_SUCCESS);
    assert!(from_disk < compile_time, "the disk cache ({from_disk:?}) beats compiling ({compile_time:?})");
    expect_status!(gpurt_rtc_set_cache_dir(std::ptr::null()), GPURT_SUCCESS);
    let _ = std::fs::remove_dir_all(&dir);
}

fn cluster_launch_runs_every_block() {
    let s = stream();
    let k = kernel("block_ids");
    let blocks = 64u32;
    let d = upload(&vec![0; blocks as usize], s);
    let mut p = d;
    let mut argv = args(&mut [&mut p]);
    let config = gpurt_launch_config_t {
        struct_size: std::mem::size_of::<gpurt_launch_config_t>(),
        grid: [blocks, 1, 1],
        block: [32, 1, 1],
        shared_memory_bytes: 0,
        stream: s,
        cluster: [4, 1, 1],
        programmatic_dependent_launch: 0,
    };
    expect_status!(gpurt_launch_kernel_ex(k, &config, argv.as_mut_ptr()), GPURT_SUCCESS);
    assert_eq!(download(d, blocks as usize, s), (1..=blocks).collect::<Vec<_>>());
    free(d);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

/// 100 launches that may each start before the previous one ends (each waits for it
/// before touching the data): the result is exactly 100 steps in order.
fn programmatic_dependent_launches_keep_stream_order() {
    let s = stream();
    let k = kernel("dependent_affine");
    let n = 1u32 << 20;
    let words = random_words(n as usize);
    let d = upload(&words, s);
    let (mut p, mut mul, mut add, mut count) = (d, 2_654_435_761u32, 12_345u32, n);
    let config = gpurt_launch_config_t {
        struct_size: std::mem::size_of::<gpurt_launch_config_t>(),
        grid: [n / 256, 1, 1],
        block: [256, 1, 1],
        shared_memory_bytes: 0,
        stream: s,
        cluster: [0, 0, 0],
        programmatic_dependent_launch: 1,
    };
    for _ in 0..100 {
        let mut argv = args(&mut [&mut p, &mut mul, &mut add, &mut count]);
        expect_status!(gpurt_launch_kernel_ex(k, &config, argv.as_mut_ptr()), GPURT_SUCCESS);
    }
    let want: Vec<u32> = words.iter().map(|&w| (0..100).fold(w, |x, _| x.wrapping_mul(mul).wrapping_add(add))).collect();
    assert!(download(d, n as usize, s) == want, "100 dependent launches in stream order");
    free(d);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

fn f16_bits(v: f32) -> u16 {
    // Exact for the test's values (multiples of 1/8 below 64 in magnitude).
    if v == 0.0 {
        return 0;
    }
    let b = v.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    sign | ((exp as u16) << 10) | ((b >> 13) & 0x3ff) as u16
}

fn f16_value(h: u16) -> f32 {
    let (sign, exp, man) = ((h >> 15) as u32, ((h >> 10) & 0x1f) as i32, (h & 0x3ff) as f32);
    let magnitude = match exp {
        0 => man * 2f32.powi(-24),
        e => (1.0 + man / 1024.0) * 2f32.powi(e - 15),
    };
    if sign == 1 { -magnitude } else { magnitude }
}

/// `out = a * b + c` for each dtype: inputs of fresh random small values, the
/// result compared to the CPU's (exact for the integers, f32 and f64 with a fused multiply-add,
/// within half and bfloat16 rounding otherwise).
fn elementwise_matches_the_cpu_for_every_dtype() {
    let s = stream();
    let n = 50_001usize;
    let names = [cstr("a"), cstr("b"), cstr("c")];
    let name_ptrs: Vec<_> = names.iter().map(|c| c.as_ptr()).collect();
    let expr = cstr("out = a * b + c");
    let small = |seed: usize| -> Vec<f32> { random_words(n + seed).iter().skip(seed).map(|w| ((*w % 512) as f32 - 256.0) / 8.0).collect() };
    let (a, b, c) = (small(0), small(1), small(2));
    // A dtype's element from an f32, as a 64-bit word (the low bytes are used), and back.
    type Codec = (fn(f32) -> u64, fn(u64) -> f64);
    for dtype in [GPURT_DTYPE_F32, GPURT_DTYPE_F16, GPURT_DTYPE_BF16, GPURT_DTYPE_I32, GPURT_DTYPE_F64, GPURT_DTYPE_I64] {
        let (encode, decode): Codec = match dtype {
            GPURT_DTYPE_F32 => (|v| v.to_bits() as u64, |w| f32::from_bits(w as u32) as f64),
            GPURT_DTYPE_F16 => (|v| f16_bits(v) as u64, |w| f16_value(w as u16) as f64),
            GPURT_DTYPE_BF16 => (|v| (v.to_bits() >> 16) as u64, |w| f32::from_bits((w as u32) << 16) as f64),
            gpurt_dtype_t::GPURT_DTYPE_I32 => (|v| (v * 8.0) as i32 as u32 as u64, |w| w as u32 as i32 as f64),
            GPURT_DTYPE_F64 => (|v| (v as f64).to_bits(), f64::from_bits),
            GPURT_DTYPE_I64 => (|v| (v * 8.0) as i64 as u64, |w| w as i64 as f64),
        };
        let width = dtype.size() as usize;
        let to_device = |v: &[f32]| -> u64 {
            let bytes: Vec<u8> = v.iter().flat_map(|x| encode(*x).to_le_bytes()[..width].to_vec()).collect();
            let d = malloc(bytes.len(), s);
            expect_status!(gpurt::copy::ffi::gpurt_memcpy(d as *mut _, bytes.as_ptr().cast(), bytes.len(), s), GPURT_SUCCESS);
            d
        };
        let inputs = [to_device(&a), to_device(&b), to_device(&c)];
        let out = malloc(n * width, s);
        let in_ptrs: Vec<*const libc::c_void> = inputs.iter().map(|&p| p as *const _).collect();
        expect_status!(gpurt_elementwise(expr.as_ptr(), name_ptrs.as_ptr(), in_ptrs.as_ptr(), 3, dtype as i32, n, out as *mut _, s), GPURT_SUCCESS);
        let mut bytes = vec![0u8; n * width];
        expect_status!(gpurt::copy::ffi::gpurt_memcpy(bytes.as_mut_ptr().cast(), out as *const _, n * width, s), GPURT_SUCCESS);
        for i in 0..n {
            let mut word = [0u8; 8];
            word[..width].copy_from_slice(&bytes[i * width..(i + 1) * width]);
            let got = decode(u64::from_le_bytes(word));
            let (x, y, z) = (decode(encode(a[i])), decode(encode(b[i])), decode(encode(c[i])));
            let want = match dtype {
                GPURT_DTYPE_I32 => (x as i32).wrapping_mul(y as i32).wrapping_add(z as i32) as f64,
                GPURT_DTYPE_I64 => (x as i64).wrapping_mul(y as i64).wrapping_add(z as i64) as f64,
                GPURT_DTYPE_F64 => x.mul_add(y, z),
                _ => (x as f32).mul_add(y as f32, z as f32) as f64,
            };
            let tolerance = match dtype {
                GPURT_DTYPE_F16 => want.abs() / 1024.0 + 1e-3,
                GPURT_DTYPE_BF16 => want.abs() / 128.0 + 1e-2,
                _ => 0.0,
            };
            assert!((got - want).abs() <= tolerance, "{dtype:?} element {i}: {x} * {y} + {z} gave {got}, want {want}");
        }
        inputs.into_iter().chain([out]).for_each(free);
    }
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

/// Calls that share names or an expression get their own kernels: a changed
/// expression, the same names in another order, and a repeat after
/// `gpurt_rtc_clear_cache` (which invalidates cached kernels) all compute exactly.
fn elementwise_kernels_are_told_apart_and_survive_a_cache_clear() {
    let s = stream();
    let n = 4099usize;
    let values = |seed: usize| -> Vec<f32> { random_words(n + seed).iter().skip(seed).map(|w| ((*w % 1024) as f32 - 512.0) / 16.0).collect() };
    let host = [values(0), values(1), values(2)];
    let inputs: Vec<u64> = host
        .iter()
        .map(|v| {
            let d = malloc(n * 4, s);
            expect_status!(gpurt::copy::ffi::gpurt_memcpy(d as *mut _, v.as_ptr().cast(), n * 4, s), GPURT_SUCCESS);
            d
        })
        .collect();
    let out = malloc(n * 4, s);
    let run = |expression: &str, names: [&str; 3]| -> Vec<f32> {
        let (expr, names) = (cstr(expression), names.map(cstr));
        let name_ptrs = names.each_ref().map(|c| c.as_ptr());
        let in_ptrs: Vec<*const libc::c_void> = inputs.iter().map(|&p| p as *const _).collect();
        expect_status!(gpurt_elementwise(expr.as_ptr(), name_ptrs.as_ptr(), in_ptrs.as_ptr(), 3, GPURT_DTYPE_F32 as i32, n, out as *mut _, s), GPURT_SUCCESS);
        let mut got = vec![0f32; n];
        expect_status!(gpurt::copy::ffi::gpurt_memcpy(got.as_mut_ptr().cast(), out as *const _, n * 4, s), GPURT_SUCCESS);
        got
    };
    let [x, y, z] = &host;
    let fma: Vec<f32> = (0..n).map(|i| x[i].mul_add(y[i], z[i])).collect();
    let fms: Vec<f32> = (0..n).map(|i| (-y[i]).mul_add(z[i], x[i])).collect();
    // With the names reordered, `a` is the second input and `b` the first.
    let swapped: Vec<f32> = (0..n).map(|i| y[i].mul_add(x[i], z[i]) - y[i]).collect();
    assert_eq!(run("out = a * b + c", ["a", "b", "c"]), fma);
    assert_eq!(run("out = a - b * c", ["a", "b", "c"]), fms);
    assert_eq!(run("out = a * b + c - a", ["b", "a", "c"]), swapped);
    assert_eq!(run("out = a * b + c", ["a", "b", "c"]), fma, "a repeat");
    expect_status!(gpurt_rtc_clear_cache(), GPURT_SUCCESS);
    assert_eq!(run("out = a * b + c", ["a", "b", "c"]), fma, "after the cache was cleared");
    inputs.into_iter().chain([out]).for_each(free);
}

/// `s = a + b; d = s * a; m = a > b ? a : b` in one kernel, on fresh random f32
/// values: each output exact against the CPU (no statement offers a fused multiply-add).
fn one_elementwise_kernel_writes_several_outputs() {
    let s = stream();
    let n = 70_001usize;
    let values = |seed: usize| -> Vec<f32> { random_words(n + seed).iter().skip(seed).map(|w| (*w % 4096) as f32 / 16.0 - 128.0).collect() };
    let (a, b) = (values(0), values(1));
    let upload = |v: &[f32]| -> u64 {
        let d = malloc(n * 4, s);
        expect_status!(gpurt::copy::ffi::gpurt_memcpy(d as *mut _, v.as_ptr().cast(), n * 4, s), GPURT_SUCCESS);
        d
    };
    let inputs = [upload(&a), upload(&b)];
    let outputs = [malloc(n * 4, s), malloc(n * 4, s), malloc(n * 4, s)];
    let names = [cstr("a"), cstr("b")];
    let name_ptrs: Vec<_> = names.iter().map(|c| c.as_ptr()).collect();
    let in_ptrs: Vec<*const libc::c_void> = inputs.iter().map(|&p| p as *const _).collect();
    let out_ptrs: Vec<*mut libc::c_void> = outputs.iter().map(|&p| p as *mut _).collect();
    let statements = cstr("s = a + b; d = s * a; m = a > b ? a : b");
    expect_status!(
        gpurt_elementwise_multi(statements.as_ptr(), name_ptrs.as_ptr(), in_ptrs.as_ptr(), 2, GPURT_DTYPE_F32 as i32, n, out_ptrs.as_ptr(), 3, s),
        GPURT_SUCCESS
    );
    expect_status!(
        gpurt_elementwise_multi(statements.as_ptr(), name_ptrs.as_ptr(), in_ptrs.as_ptr(), 2, GPURT_DTYPE_F32 as i32, n, out_ptrs.as_ptr(), 2, s),
        GPURT_ERROR_INVALID_ARGUMENT
    );
    let read = |p: u64| -> Vec<f32> {
        let mut v = vec![0f32; n];
        expect_status!(gpurt::copy::ffi::gpurt_memcpy(v.as_mut_ptr().cast(), p as *const _, n * 4, s), GPURT_SUCCESS);
        v
    };
    let (sum, product, max) = (read(outputs[0]), read(outputs[1]), read(outputs[2]));
    for i in 0..n {
        let want = a[i] + b[i];
        assert_eq!((sum[i], product[i], max[i]), (want, want * a[i], if a[i] > b[i] { a[i] } else { b[i] }), "element {i}");
    }
    inputs.into_iter().chain(outputs).for_each(free);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}
