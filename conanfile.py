"""Conan 2 recipe: `conan create .` builds gpurt from this tree (CMake drives cargo)
and packages the shared or the static library with the headers. gpurt's ABI is C, so
the package does not depend on the consumer's C++ compiler or standard library."""
import os

from conan import ConanFile
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import rm


class GpurtConan(ConanFile):
    name = "gpurt"
    version = "0.1.0"
    license = "MIT OR Apache-2.0"
    description = "The CUDA runtime layer of torch.cuda and cupy.cuda for C, C++ and any C FFI"
    topics = ("cuda", "gpu", "allocator", "runtime")
    settings = "os", "arch", "compiler", "build_type"
    options = {"shared": [True, False]}
    default_options = {"shared": True}
    # Everything cargo and CMake read: Cargo.toml names the benches and tests.
    exports_sources = ("*", "!target/*", "!build/*", "!prefix/*", "!gpu-bundle/*", "!.git/*", "!fuzz/*",
                       "!bindings/*", "!python/*", "!gpu/*", "!docs/*")

    def layout(self):
        cmake_layout(self)

    def package_id(self):
        # A C ABI: the same package serves every C and C++ compiler.
        del self.info.settings.compiler

    def generate(self):
        tc = CMakeToolchain(self)
        tc.cache_variables["GPURT_BUILD_EXAMPLES"] = False
        # A cargo target directory shared with other builds (CI) saves compiling twice.
        if os.environ.get("GPURT_CARGO_TARGET_DIR"):
            tc.cache_variables["GPURT_CARGO_TARGET_DIR"] = os.environ["GPURT_CARGO_TARGET_DIR"]
        tc.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def package(self):
        cmake = CMake(self)
        cmake.install()
        libdir = os.path.join(self.package_folder, "lib")
        # One kind of library, so that the linker cannot pick the other; Conan writes
        # its own CMake and pkg-config files from package_info.
        if self.options.shared:
            rm(self, "libgpurt.a", libdir)
        else:
            rm(self, "libgpurt.so*", libdir)
        rm(self, "*.cmake", os.path.join(libdir, "cmake", "gpurt"))
        rm(self, "gpurt.pc", os.path.join(libdir, "pkgconfig"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "gpurt")
        self.cpp_info.set_property("cmake_target_name", "gpurt::gpurt")
        self.cpp_info.set_property("pkg_config_name", "gpurt")
        self.cpp_info.libs = ["gpurt"]
        if not self.options.shared:
            # The Rust static library's own needs (`rustc --print native-static-libs`).
            self.cpp_info.system_libs = ["pthread", "dl", "m", "rt", "util", "gcc_s"]
