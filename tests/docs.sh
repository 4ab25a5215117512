#!/usr/bin/env bash
# The reference manual (docs/compatibility.md, docs/building.md "Reference manual"):
#   1. CMake with GPURT_BUILD_DOCS=ON builds the `docs` target: Doxygen over gpurt.h,
#      gpurt.hpp and gpurt_rmm.hpp, every warning an error, and an undocumented
#      function, parameter or return value a warning;
#   2. the check proves itself: copies of the header with a function that has no
#      reference, and with one whose parameter has none, each fail the build.
# usage: tests/docs.sh WORK_DIR CARGO_TARGET_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
work=$1/docs cargo_dir=$2
command -v doxygen >/dev/null || { echo "tests/docs.sh: doxygen missing (apt-get install doxygen)"; exit 1; }
rm -rf "$work"
echo "== reference manual: Doxygen, warnings as errors"
cmake -S . -B "$work/build" -DGPURT_BUILD_DOCS=ON -DGPURT_BUILD_EXAMPLES=OFF -DGPURT_CARGO_TARGET_DIR="$cargo_dir" >/dev/null
if ! cmake --build "$work/build" --target docs >"$work/docs.log" 2>&1; then
  cat "$work/docs.log" "$work/build/reference/warnings.txt" 2>/dev/null; exit 1
fi
for page in index.html gpurt_8h.html gpurt_8hpp.html; do
  [ -s "$work/build/reference/html/$page" ] || { echo "the reference has no $page"; exit 1; }
done
grep -q "gpurt_malloc" "$work/build/reference/html/gpurt_8h.html" || { echo "gpurt_malloc is missing from the reference"; exit 1; }
echo "reference built without a warning: $work/build/reference/html/index.html"

# refused NAME PYTHON: a header changed by PYTHON (on `s`) must fail Doxygen, naming
# the function.
refused() {
  local name=$1 edit=$2 dir=$work/self-test/$1
  mkdir -p "$dir/include"
  cp include/gpurt.hpp include/gpurt_rmm.hpp "$dir/include/"
  python3 -c "
s = open('include/gpurt.h').read()
$edit
open('$dir/include/gpurt.h', 'w').write(s)"
  sed -e "s|$PWD/include/|$dir/include/|g" -e "s|$work/build/reference|$dir/out|g" "$work/build/Doxyfile" > "$dir/Doxyfile"
  mkdir -p "$dir/out"
  if doxygen "$dir/Doxyfile" >"$dir/log" 2>&1; then
    echo "reference self-test '$name': Doxygen passed a header it must refuse"; exit 1
  fi
  grep -q "gpurt_new_call" "$dir/out/warnings.txt" || { echo "reference self-test '$name': failed without naming gpurt_new_call"; cat "$dir/out/warnings.txt"; exit 1; }
  echo "reference self-test '$name': refused: $(grep -m1 gpurt_new_call "$dir/out/warnings.txt" | sed 's/.*warning: //')"
}
end="#ifdef __cplusplus\n}  // extern"
refused undocumented-function "s = s.replace('$end', 'gpurt_status_t gpurt_new_call(int device);\n\n$end')"
refused undocumented-parameter "s = s.replace('$end', '/**\n * Does something.\n * @return GPURT_SUCCESS.\n */\ngpurt_status_t gpurt_new_call(int device);\n\n$end')"
refused undocumented-return "s = s.replace('$end', '/**\n * Does something.\n * @param device a device\n */\ngpurt_status_t gpurt_new_call(int device);\n\n$end')"
