//! Elementwise kernels from short statements, in the spirit of torch's jiterator:
//! `out = a * b + c` over named inputs of one dtype becomes a grid-stride kernel,
//! compiled once per (statements, inputs, dtype, device) through the NVRTC caches.
//! Several statements (`s = a + b; d = s * c`) write several outputs from one kernel
//! (jiterator's multi-output functions); a statement may use the outputs before it.
//! Half and bfloat16 values are computed in float; the generated source includes no
//! headers, so it compiles wherever NVRTC does.

pub use crate::dtype::gpurt_dtype_t;
use crate::error::{Error, Result};
use crate::handle::Handle;

/// An element's C types: (storage type, compute type, load function, store function).
fn c_types(dtype: gpurt_dtype_t) -> (&'static str, &'static str, &'static str, &'static str) {
    use gpurt_dtype_t::*;
    match dtype {
        GPURT_DTYPE_F32 => ("float", "float", "", ""),
        GPURT_DTYPE_F16 => ("unsigned short", "float", "gpurt_load_f16", "gpurt_store_f16"),
        GPURT_DTYPE_BF16 => ("unsigned short", "float", "gpurt_load_bf16", "gpurt_store_bf16"),
        GPURT_DTYPE_I32 => ("int", "int", "", ""),
        GPURT_DTYPE_F64 => ("double", "double", "", ""),
        GPURT_DTYPE_I64 => ("long long", "long long", "", ""),
    }
}

pub(crate) const CONVERSIONS: &str = r#"
__device__ __forceinline__ float gpurt_load_f16(unsigned short h) {
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ unsigned short gpurt_store_f16(float f) {
    unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
__device__ __forceinline__ float gpurt_load_bf16(unsigned short b) {
    return __uint_as_float(((unsigned int)b) << 16);
}
__device__ __forceinline__ unsigned short gpurt_store_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;          /* NaN */
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* round to nearest even */
}
"#;

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Splits `statements` (`out = expr`, separated by `;`) into each output's name and
/// expression, checking names: identifiers, none used twice, none reserved.
pub fn parse(statements: &str, inputs: &[&str]) -> Result<Vec<(String, String)>> {
    if inputs.is_empty() {
        return Err(Error::invalid_argument("an elementwise kernel needs at least one input"));
    }
    for (i, name) in inputs.iter().enumerate() {
        if !is_identifier(name) || name.starts_with("gpurt_") {
            return Err(Error::invalid_argument(format!("input name {name:?} is not an identifier (or uses the reserved gpurt_ prefix)")));
        }
        if inputs[..i].contains(name) {
            return Err(Error::invalid_argument(format!("the name {name:?} is used twice")));
        }
    }
    let mut outputs: Vec<(String, String)> = Vec::new();
    for statement in statements.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (lhs, rhs) = statement
            .split_once('=')
            .filter(|(_, r)| !r.starts_with('='))
            .ok_or_else(|| Error::invalid_argument(format!("expected `output = expression`, got {statement:?}")))?;
        let (out, rhs) = (lhs.trim(), rhs.trim());
        if !is_identifier(out) || out.starts_with("gpurt_") {
            return Err(Error::invalid_argument(format!("the output name {out:?} is not an identifier (or uses the reserved gpurt_ prefix)")));
        }
        if rhs.is_empty() {
            return Err(Error::invalid_argument(format!("the expression after `{out} =` is empty")));
        }
        if inputs.contains(&out) || outputs.iter().any(|(o, _)| o == out) {
            return Err(Error::invalid_argument(format!("the name {out:?} is used twice")));
        }
        outputs.push((out.to_string(), rhs.to_string()));
    }
    if outputs.is_empty() {
        return Err(Error::invalid_argument(format!("expected `output = expression`, got {statements:?}")));
    }
    Ok(outputs)
}

pub const KERNEL_NAME: &str = "gpurt_elementwise";

/// The CUDA C++ source of the kernel: inputs, then one output array per statement.
pub fn source(statements: &str, inputs: &[&str], dtype: gpurt_dtype_t) -> Result<String> {
    let outputs = parse(statements, inputs)?;
    let (storage, compute, load, store) = c_types(dtype);
    let mut params: Vec<String> = (0..inputs.len()).map(|i| format!("const {storage}* __restrict__ gpurt_in{i}")).collect();
    params.extend((0..outputs.len()).map(|i| format!("{storage}* __restrict__ gpurt_out{i}")));
    let loads: String = inputs.iter().enumerate().map(|(i, n)| format!("        const {compute} {n} = {load}(gpurt_in{i}[gpurt_i]);\n")).collect();
    let computes: String = outputs.iter().map(|(out, rhs)| format!("        const {compute} {out} = ({rhs});\n")).collect();
    let stores: String = outputs.iter().enumerate().map(|(i, (out, _))| format!("        gpurt_out{i}[gpurt_i] = {store}({out});\n")).collect();
    Ok(format!(
        "{CONVERSIONS}\nextern \"C\" __global__ void {KERNEL_NAME}({params}, unsigned long long gpurt_n) {{\n\
         \x20   for (unsigned long long gpurt_i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; gpurt_i < gpurt_n;\n\
         \x20        gpurt_i += (unsigned long long)gridDim.x * blockDim.x) {{\n\
         {loads}{computes}{stores}\
         \x20   }}\n}}\n",
        params = params.join(", "),
    ))
}

/// The expression this thread launched last, with its kernel: a loop over one
/// expression (the usual use) compares its text instead of building, hashing and
/// looking up its recipe. Good while the kernel caches' epoch lasts.
struct LastCall {
    device: i32,
    dtype: gpurt_dtype_t,
    epoch: u64,
    statements: String,
    names: Vec<String>,
    kernel: Handle,
    outputs: usize,
}

thread_local! {
    static LAST_CALL: std::cell::RefCell<Option<LastCall>> = const { std::cell::RefCell::new(None) };
}

/// The kernel and statement count of this thread's last call, if this call is the same.
fn same_as_last(statements: &str, names: &[&str], dtype: gpurt_dtype_t, device: i32) -> Option<(Handle, usize)> {
    LAST_CALL.with(|last| {
        let last = last.borrow();
        let l = last.as_ref()?;
        let same = l.device == device
            && l.dtype == dtype
            && l.statements == statements
            && l.names.len() == names.len()
            && l.names.iter().zip(names).all(|(a, b)| a == b)
            && l.epoch == super::rtc::cache_epoch();
        same.then_some((l.kernel, l.outputs))
    })
}

/// A call's kernel: served from a cache, or to compile from its recipe.
enum Kernel {
    Cached(Handle),
    ToCompile(String),
}

const BLOCK: u32 = 256;
/// Enough blocks to fill any current GPU; the loop strides over the rest.
const MAX_BLOCKS: u64 = 65_536;

/// Computes `statements` for `count` elements of `inputs` into `outputs` (one per
/// statement, in order) on `stream`.
pub fn launch(
    statements: &str,
    names: &[&str],
    dtype: gpurt_dtype_t,
    count: u64,
    inputs: &[u64],
    outputs: &[u64],
    stream: Handle,
) -> Result<()> {
    if names.len() != inputs.len() {
        return Err(Error::invalid_argument("one input pointer per input name"));
    }
    let s = crate::stream::get(stream)?;
    let epoch = super::rtc::cache_epoch(); // before any lookup: a clear after it forgets what this call remembers
    let last = same_as_last(statements, names, dtype, s.device());
    let (kernel, statements_count) = match last {
        Some((kernel, outputs)) => (Kernel::Cached(kernel), outputs),
        None => {
            // The recipe names the source: the dtype, the statements and the input
            // names, each ended by a NUL (which none of them can hold).
            let mut recipe = format!("{}\0{statements}\0", dtype as i32);
            names.iter().for_each(|n| recipe.extend([n, "\0"]));
            // A cached recipe was parsed when it was compiled: its statements are only counted.
            match super::rtc::cached_kernel(s.device(), &recipe) {
                Some(kernel) => (Kernel::Cached(kernel), statements.split(';').filter(|s| !s.trim().is_empty()).count()),
                None => (Kernel::ToCompile(recipe), parse(statements, names)?.len()),
            }
        }
    };
    if outputs.len() != statements_count {
        return Err(Error::invalid_argument(format!("{statements_count} statement(s) need as many output pointers, not {}", outputs.len())));
    }
    if count == 0 {
        return Ok(());
    }
    if outputs.contains(&0) || inputs.contains(&0) {
        return Err(Error::invalid_argument("an input or output pointer is NULL"));
    }
    let bytes = crate::boundary::checked_bytes(count, dtype.size(), "count")?;
    for &p in inputs.iter().chain(outputs) {
        crate::boundary::check_range(p, bytes, "count")?;
        crate::alloc::device::require_awake(p)?;
    }
    let kernel = match kernel {
        Kernel::Cached(kernel) => kernel,
        Kernel::ToCompile(recipe) => super::rtc::get_kernel_by_recipe(s.device(), &recipe, KERNEL_NAME, || source(statements, names, dtype))?,
    };
    if last.is_none() {
        let remembered = LastCall {
            device: s.device(),
            dtype,
            epoch,
            statements: statements.to_string(),
            names: names.iter().map(|n| n.to_string()).collect(),
            kernel,
            outputs: statements_count,
        };
        LAST_CALL.with(|last| *last.borrow_mut() = Some(remembered));
    }
    let n = inputs.len() + outputs.len() + 1;
    let (mut value_stack, mut value_heap) = ([0u64; 8], Vec::new());
    let values = crate::boundary::slots(n, 0, &mut value_stack, &mut value_heap);
    values.iter_mut().zip(inputs.iter().chain(outputs).chain([&count])).for_each(|(v, &p)| *v = p);
    let (mut arg_stack, mut arg_heap) = ([std::ptr::null_mut(); 8], Vec::new());
    let args = crate::boundary::slots(n, std::ptr::null_mut(), &mut arg_stack, &mut arg_heap);
    args.iter_mut().zip(values.iter_mut()).for_each(|(a, v)| *a = (v as *mut u64).cast::<libc::c_void>());
    let blocks = count.div_ceil(BLOCK as u64).min(MAX_BLOCKS) as u32;
    let shape = super::LaunchShape::plain([blocks, 1, 1], [BLOCK, 1, 1]);
    // SAFETY: one pointer per parameter of the generated kernel: the inputs and the
    // outputs (device pointers) and the count, each a u64 that lives until the call returns.
    unsafe { super::launch(kernel, &shape, stream, args.as_mut_ptr()) }?;
    if crate::sanitizer::enabled() {
        use crate::sanitizer::Access;
        let accesses = inputs.iter().map(|&p| (p, Access::Read)).chain(outputs.iter().map(|&p| (p, Access::Write)));
        accesses.for_each(|(p, access)| crate::sanitizer::access(s, p, bytes, access, "gpurt_elementwise"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpurt_dtype_t::*;

    #[test]
    fn expressions_and_names_are_checked() {
        assert_eq!(parse("out = a * b + c", &["a", "b", "c"]).unwrap(), vec![("out".into(), "a * b + c".into())]);
        assert_eq!(parse("y=a>=b?a:b", &["a", "b"]).unwrap()[0].1, "a>=b?a:b");
        assert_eq!(parse("s = a + b; d = s * a;", &["a", "b"]).unwrap(), vec![("s".into(), "a + b".into()), ("d".into(), "s * a".into())]);
        assert!(parse("s = a; s = b", &["a", "b"]).unwrap_err().message.contains("twice"), "two outputs of one name");
        assert!(parse(" ; ", &["a"]).is_err(), "no statement");
        for bad in ["a * b", "= a", "1x = a", "out ==a", "out = "] {
            assert!(parse(bad, &["a", "b"]).is_err(), "{bad:?}");
        }
        assert!(parse("out = a", &[]).is_err());
        assert!(parse("out = a", &["a", "a"]).unwrap_err().message.contains("twice"));
        assert!(parse("a = a", &["a"]).is_err(), "output named like an input");
        assert!(parse("out = gpurt_x", &["gpurt_x"]).is_err(), "reserved prefix");
        assert!(parse("out = a", &["a b"]).is_err());
    }

    #[test]
    fn the_source_loads_computes_and_stores_in_the_dtype() {
        let f16 = source("out = a * b", &["a", "b"], GPURT_DTYPE_F16).unwrap();
        assert!(f16.contains("const unsigned short* __restrict__ gpurt_in1"));
        assert!(f16.contains("const float a = gpurt_load_f16(gpurt_in0[gpurt_i]);"));
        assert!(f16.contains("gpurt_out0[gpurt_i] = gpurt_store_f16(out);"));
        let i32 = source("r = x + 1", &["x"], GPURT_DTYPE_I32).unwrap();
        assert!(i32.contains("const int x = (gpurt_in0[gpurt_i]);") && i32.contains("int* __restrict__ gpurt_out0"));
        let two = source("s = a + b; d = s * 2", &["a", "b"], GPURT_DTYPE_F32).unwrap();
        assert!(two.contains("float* __restrict__ gpurt_out1, unsigned long long gpurt_n") && two.contains("const float d = (s * 2);"));
        assert!(two.find("const float s").unwrap() < two.find("const float d").unwrap(), "in statement order");
        let f64 = source("r = x * 2", &["x"], GPURT_DTYPE_F64).unwrap();
        assert!(f64.contains("const double x = (gpurt_in0[gpurt_i]);") && f64.contains("double* __restrict__ gpurt_out0"));
    }
}
