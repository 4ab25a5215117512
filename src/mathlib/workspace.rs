//! Workspace sizes, read from the environment once as PyTorch reads them:
//! `CUBLAS_WORKSPACE_CONFIG` (`:SIZE_KIB:COUNT` pairs, summed) for cuBLAS and
//! `CUBLASLT_WORKSPACE_SIZE` (KiB) for cuBLASLt, with PyTorch's defaults.

use std::sync::OnceLock;

/// cuBLAS's workspace where `CUBLAS_WORKSPACE_CONFIG` is unset or unreadable:
/// 32 MiB from compute capability 9 (Hopper, Blackwell), else `:4096:2:16:8`.
pub fn default_blas_size(major: i32) -> usize {
    if major >= 9 {
        32 << 20
    } else {
        (4096 * 2 + 16 * 8) << 10
    }
}

/// cuBLASLt's workspace where `CUBLASLT_WORKSPACE_SIZE` is unset or unreadable: 1 MiB.
pub(crate) const DEFAULT_BLASLT_SIZE: usize = 1 << 20;

/// `CUBLAS_WORKSPACE_CONFIG`'s size: the sum of SIZE KiB × COUNT over each
/// `:SIZE:COUNT` in the text (`:4096:8`, `:4096:2:16:8`; `:0:0` for none); None
/// where the text holds no such pair or a number overflows.
pub fn parse_blas_config(text: &str) -> Option<usize> {
    let mut total = 0usize;
    let mut found = false;
    let mut rest = text;
    // Each pair is ":digits:digits"; anything else between pairs is skipped, as
    // PyTorch's regular expression search skips it.
    while let Some(start) = rest.find(':') {
        let after = &rest[start + 1..];
        let size_len = after.bytes().take_while(u8::is_ascii_digit).count();
        let count_text = after[size_len..].strip_prefix(':');
        let count_len = count_text.map_or(0, |c| c.bytes().take_while(u8::is_ascii_digit).count());
        if size_len == 0 || count_len == 0 {
            rest = after;
            continue;
        }
        let size: usize = after[..size_len].parse().ok()?;
        let count: usize = count_text?[..count_len].parse().ok()?;
        total = total.checked_add(size.checked_mul(1024)?.checked_mul(count)?)?;
        found = true;
        rest = &after[size_len + 1 + count_len..];
    }
    found.then_some(total)
}

/// `CUBLASLT_WORKSPACE_SIZE`'s size: KiB as a decimal number; None where unreadable.
pub fn parse_blaslt_size(text: &str) -> Option<usize> {
    text.trim().parse::<usize>().ok()?.checked_mul(1024)
}

/// The size a variable gives, or the default, logging once why a set but
/// unreadable value was not used.
fn from_env(var: &str, parse: fn(&str) -> Option<usize>) -> Option<usize> {
    let text = std::env::var(var).ok()?;
    let size = parse(&text);
    if size.is_none() {
        crate::log::log(crate::log::Level::Warn, &format!("{var}={text:?} is not understood; the default workspace size is used"));
    }
    size
}

/// cuBLAS's workspace size on a device of compute capability `major`.
pub fn blas_size(major: i32) -> usize {
    static CONFIGURED: OnceLock<Option<usize>> = OnceLock::new();
    CONFIGURED.get_or_init(|| from_env("CUBLAS_WORKSPACE_CONFIG", parse_blas_config)).unwrap_or_else(|| default_blas_size(major))
}

/// cuBLASLt's workspace size.
pub fn blaslt_size() -> usize {
    static CONFIGURED: OnceLock<usize> = OnceLock::new();
    *CONFIGURED.get_or_init(|| from_env("CUBLASLT_WORKSPACE_SIZE", parse_blaslt_size).unwrap_or(DEFAULT_BLASLT_SIZE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cublas_workspace_config_sums_its_pairs() {
        assert_eq!(parse_blas_config(":4096:8"), Some(4096 * 1024 * 8));
        assert_eq!(parse_blas_config(":4096:2:16:8"), Some((4096 * 2 + 16 * 8) * 1024));
        assert_eq!(parse_blas_config(":0:0"), Some(0));
        assert_eq!(parse_blas_config("x:16:8y"), Some(16 * 1024 * 8));
    }

    #[test]
    fn unreadable_cublas_workspace_config_is_none() {
        for text in ["", "4096", ":4096", "::8", ":a:b", ":99999999999999999999:1", ":18446744073709551615:2"] {
            assert_eq!(parse_blas_config(text), None, "{text:?}");
        }
    }

    #[test]
    fn cublaslt_workspace_size_is_kib() {
        assert_eq!(parse_blaslt_size("1024"), Some(1 << 20));
        assert_eq!(parse_blaslt_size(" 0 "), Some(0));
        for text in ["", "-1", "1.5", "lots"] {
            assert_eq!(parse_blaslt_size(text), None, "{text:?}");
        }
    }

    #[test]
    fn defaults_follow_pytorch_per_architecture() {
        assert_eq!(default_blas_size(9), 32 << 20);
        assert_eq!(default_blas_size(10), 32 << 20);
        assert_eq!(default_blas_size(8), 8_519_680);
        assert_eq!(DEFAULT_BLASLT_SIZE, 1 << 20);
    }
}
