//! Optional CUDA libraries (NVRTC, cuBLAS, cuDNN, ...), opened at run time from the
//! first place that has them, so that libgpurt links none of them and loads where
//! they are absent.

/// Where a library may be: the path in `override_var` if set, then each soname on
/// the loader's path, then in the usual CUDA install directories (a toolkit's lib64
/// is often not on the loader's path).
fn candidates(override_var: &str, sonames: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = std::env::var(override_var).into_iter().filter(|v| !v.is_empty()).collect();
    names.extend(sonames.iter().map(|s| s.to_string()));
    let homes = ["CUDA_HOME", "CUDA_PATH"].iter().filter_map(|v| std::env::var(v).ok());
    for dir in homes.chain(["/usr/local/cuda".to_string()]) {
        names.extend(sonames.iter().map(|s| format!("{dir}/lib64/{s}")));
    }
    names
}

/// The first of `candidates(override_var, sonames)` that loads, or a message naming
/// `what`, everything tried and `override_var`.
pub(crate) fn open_first(what: &str, override_var: &str, sonames: &[&str]) -> Result<libloading::Library, String> {
    let tried = candidates(override_var, sonames);
    // SAFETY: loading a CUDA library runs its initialisers, which have no preconditions.
    tried
        .iter()
        .find_map(|name| unsafe { libloading::Library::new(name) }.ok())
        .ok_or_else(|| format!("{what} could not be loaded; tried {} (set {override_var} to its path)", tried.join(", ")))
}

/// The function `name` of `lib` as the function-pointer type `F`.
///
/// # Safety
/// `F` must be the symbol's C signature.
pub(crate) unsafe fn symbol<F: Copy>(lib: &libloading::Library, what: &str, name: &str) -> Result<F, String> {
    lib.get::<F>(name.as_bytes()).map(|s| *s).map_err(|_| format!("{what} lacks {name}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_override_comes_first_then_sonames_then_toolkit_directories() {
        let names = super::candidates("GPURT_TEST_NO_SUCH_VARIABLE", &["liba.so.2", "liba.so.1"]);
        assert_eq!(&names[..2], ["liba.so.2", "liba.so.1"]);
        assert!(names.contains(&"/usr/local/cuda/lib64/liba.so.1".to_string()));
    }

    #[test]
    fn a_missing_library_is_named_with_what_was_tried() {
        let err = super::open_first("libnothing", "GPURT_TEST_NO_SUCH_VARIABLE", &["libgpurt-test-nothing.so.9"]).err().unwrap();
        assert!(err.contains("libnothing could not be loaded") && err.contains("libgpurt-test-nothing.so.9") && err.contains("GPURT_TEST_NO_SUCH_VARIABLE"), "{err}");
    }
}
