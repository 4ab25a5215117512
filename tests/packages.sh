#!/usr/bin/env bash
# Packages as a user takes them (docs/compatibility.md):
#   1. CPack from the CMake build: libgpurt0, libgpurt-dev, gpurt-tools (.deb) and a
#      .tar.gz; each .deb holds what Debian's split puts there;
#   2. the .debs installed with dpkg -i into this machine's /usr, a C consumer built
#      with pkg-config and a C++ consumer with find_package(gpurt) against them, both
#      run; then dpkg -r, which must leave none of their files behind;
#   3. the .tar.gz unpacked anywhere is a prefix find_package and pkg-config use;
#   4. Conan 2 (from PyPI, in a venv): `conan create` of conanfile.py, offline (its
#      remote disabled), shared and static, whose test_package links and runs.
# usage: tests/packages.sh WORK_DIR CARGO_TARGET_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$1 cargo_dir=$2
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
build=$work/package-build
rm -rf "$build" "$work/package-consumers"
mkdir -p "$work/package-consumers"

echo "== packages: cpack (libgpurt0, libgpurt-dev, gpurt-tools, .tar.gz)"
cmake -S . -B "$build" -DCMAKE_INSTALL_PREFIX=/usr -DGPURT_CARGO_TARGET_DIR="$cargo_dir" >/dev/null
cmake --build "$build" >/dev/null
(cd "$build" && cpack >/dev/null)
version=$(sed -n 's/^project(gpurt VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
major=${version%%.*}
arch=$(dpkg --print-architecture)
multiarch=$(gcc -print-multiarch)
runtime=$build/libgpurt${major}_${version}_$arch.deb dev=$build/libgpurt-dev_${version}_$arch.deb tools=$build/gpurt-tools_${version}_$arch.deb
tarball=$build/gpurt-$version-Linux.tar.gz
contents() { dpkg-deb -c "$1" | awk '{print $6}' | sed 's|^\./|/|' | grep -v '/$' | sort; }
expect_contents() {  # expect_contents DEB PATH...: exactly these files and links
  local deb=$1; shift
  diff <(printf '%s\n' "$@" | sort) <(contents "$deb") || { echo "$(basename "$deb") holds other files than the split says"; exit 1; }
}
lib=/usr/lib/$multiarch
expect_contents "$runtime" "$lib/libgpurt.so.$major" "$lib/libgpurt.so.$version" \
  "/usr/share/doc/libgpurt$major/LICENSE-APACHE" "/usr/share/doc/libgpurt$major/LICENSE-MIT"
expect_contents "$dev" /usr/include/gpurt.h /usr/include/gpurt.hpp /usr/include/gpurt_rmm.hpp \
  "$lib/libgpurt.so" "$lib/libgpurt.a" "$lib/pkgconfig/gpurt.pc" "$lib/cmake/gpurt/gpurtConfig.cmake" "$lib/cmake/gpurt/gpurtConfigVersion.cmake"
expect_contents "$tools" /usr/bin/gpurt-info
dpkg-deb -f "$dev" Depends | grep -x "libgpurt$major (= $version)" >/dev/null || { echo "libgpurt-dev must depend on exactly libgpurt$major $version"; exit 1; }
dpkg-deb --ctrl-tarfile "$runtime" | tar t | grep shlibs >/dev/null || { echo "libgpurt$major has no shlibs file"; exit 1; }
echo "three .debs, each with its part; $(basename "$tarball")"

echo "== packages: dpkg -i into /usr, consumers through pkg-config and find_package, dpkg -r"
packages=("libgpurt$major" libgpurt-dev gpurt-tools)
remove() { $sudo dpkg -r "${packages[@]}" >/dev/null 2>&1 || true; }
trap remove EXIT
remove
installed_files=$(for deb in "$runtime" "$dev" "$tools"; do contents "$deb"; done)
for f in $installed_files; do
  [ ! -e "$f" ] && [ ! -L "$f" ] || { echo "$f exists before the packages are installed"; exit 1; }
done
$sudo dpkg -i "$runtime" "$dev" "$tools" >/dev/null
gpurt-info
consumers=$work/package-consumers
# shellcheck disable=SC2046   # pkg-config's flags split into words
cc -std=c99 -Wall -Wextra -pedantic -Werror tests/c/abi_test.c $(pkg-config --cflags --libs gpurt) -o "$consumers/abi_test_pkgconfig"
"$consumers/abi_test_pkgconfig" >/dev/null
# grep reads all of its input (no -q): under pipefail, a grep that quits at its first
# match can kill the writer with SIGPIPE and fail the pipeline at random.
ldd "$consumers/abi_test_pkgconfig" | grep -E "libgpurt.so.$major => (/usr)?/lib/$multiarch/libgpurt.so.$major" >/dev/null || { echo "the consumer does not load /usr's libgpurt"; exit 1; }
cmake -S tests/consumer -B "$consumers/cmake" >/dev/null   # no CMAKE_PREFIX_PATH: /usr is searched
cmake --build "$consumers/cmake" >/dev/null
grep -q "$lib/libgpurt.so.$version" "$consumers/cmake/CMakeFiles/abi_c_gpurt.dir/link.txt" || { echo "find_package did not find /usr's gpurt"; exit 1; }
(cd "$consumers/cmake" && ctest --output-on-failure >/dev/null)
echo "pkg-config and find_package consumers built and ran against /usr"
remove
trap - EXIT
left=()
for f in $installed_files; do [ -e "$f" ] || [ -L "$f" ] && left+=("$f"); done
((${#left[@]} == 0)) || { echo "dpkg -r left files behind: ${left[*]}"; exit 1; }
for d in "$lib/cmake/gpurt"; do [ ! -e "$d" ] || { echo "dpkg -r left $d"; exit 1; }; done
echo "dpkg -r removed every file the packages installed"

echo "== packages: the .tar.gz as a prefix of its own"
rm -rf "$work/package-tarball" && mkdir -p "$work/package-tarball"
tar xzf "$tarball" -C "$work/package-tarball"
prefix=$work/package-tarball/gpurt-$version-Linux
"$prefix/bin/gpurt-info" >/dev/null
cmake -S tests/consumer -B "$consumers/tarball" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$consumers/tarball" >/dev/null
(cd "$consumers/tarball" && ctest --output-on-failure >/dev/null)
echo "find_package from the unpacked .tar.gz: built and ran"

echo "== packages: Conan 2 (conan create, offline; test_package links and runs)"
venv=$work/conan-venv
[ -x "$venv/bin/conan" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q conan; }
export CONAN_HOME=$work/conan-home
rm -rf "$CONAN_HOME"
"$venv/bin/conan" profile detect >/dev/null 2>&1
"$venv/bin/conan" remote disable conancenter >/dev/null   # offline: nothing comes from a remote
for shared in True False; do
  GPURT_CARGO_TARGET_DIR=$cargo_dir "$venv/bin/conan" create . --build=missing -o "gpurt/*:shared=$shared" > "$work/conan-$shared.log" 2>&1 \
    || { tail -n 40 "$work/conan-$shared.log"; exit 1; }
  grep "from the Conan package" "$work/conan-$shared.log" | sed "s/^/shared=$shared: /"
done
