// Gives the shared library a versioned soname, so that consumers link against
// libgpurt.so.<major> and a future incompatible release can be installed beside it.
fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap();
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libgpurt.so.{major}");
    }
    // Tests compile C and C++ with the `cc` crate, which needs the target triple.
    println!("cargo:rustc-env=GPURT_TARGET={}", std::env::var("TARGET").unwrap());
    // NVTX's own implementation (third_party/nvtx3), for gpurt_nvtx_*.
    cc::Build::new()
        .file("src/nvtx/shim.c")
        .include("third_party")
        .warnings(false)
        // Called from Rust inside the library only: never exported.
        .flag("-fvisibility=hidden")
        .flag_if_supported("-Werror=implicit-function-declaration")
        .compile("gpurt_nvtx");
    println!("cargo:rerun-if-changed=src/nvtx/shim.c");
    println!("cargo:rerun-if-changed=build.rs");
}
