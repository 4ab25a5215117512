#!/usr/bin/env bash
# Nsight Compute sees gpurt's NVTX ranges: `ncu --nvtx --nvtx-include` profiles
# exactly the kernels that ncu_kernels.c launches inside each named range ("name/":
# a push/pop range; "name": a start/end range; "domain@name/": a range of a domain).
set -uo pipefail
prog=$1
count() {  # count FILTER: kernels ncu profiled under FILTER
    ncu --nvtx --nvtx-include "$1" --metrics gpu__time_duration.sum --csv "$prog" > "ncu-$2.csv" 2> "ncu-$2.err"
    grep -c '"gpu__time_duration.sum"' "ncu-$2.csv"
}
all=$(ncu --metrics gpu__time_duration.sum --csv "$prog" 2>/dev/null | grep -c '"gpu__time_duration.sum"')
inside=$(count "gpurt-inside/" inside)
span=$(count "gpurt-span" span)
layer=$(count "gpurt-engine@gpurt-layer/" layer)
echo "kernels ncu profiled: all $all (expected 10), in push/pop range gpurt-inside $inside (expected 3)," \
     "in start/end range gpurt-span $span (expected 2), in domain gpurt-engine's range gpurt-layer $layer (expected 1)"
[ "$all" = 10 ] && [ "$inside" = 3 ] && [ "$span" = 2 ] && [ "$layer" = 1 ] || { tail -n 5 ncu-*.err; exit 1; }
