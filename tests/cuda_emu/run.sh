#!/bin/sh
# Emulation check of the CUDA attention kernels: sh run.sh [case-filter]; EMU_CP=late, EMU_SAN=thread|address.
set -e
H=$(cd "$(dirname "$0")" && pwd)
M=${SMELT_ROOT:-$(cd "$H/../.." && pwd)}
[ -f "$M/inductor/cuda/attention.c" ] || M=/work/main
W=${EMU_WORK:-/tmp/smelt_cuda_emu}
mkdir -p "$W"
SAN=${EMU_SAN:+-fsanitize=$EMU_SAN}
gcc -std=c11 -O1 -I"$M" -c "$M/inductor/cuda/attention.c" -o "$W/attention.o"
gcc -std=c11 -O1 -I"$M" -c "$M/inductor/cuda/text.c" -o "$W/text.o"
g++ -std=c++20 -O1 -DEMU_STAGE=1 -I"$M" -I"$H" "$H/harness.cpp" "$W/attention.o" "$W/text.o" -o "$W/gen"
"$W/gen" > "$W/cases.inc"
g++ -std=c++20 -O2 -g $SAN -Wno-unknown-pragmas -DEMU_STAGE=2 -I"$M" -I"$H" -I"$W" "$H/harness.cpp" "$W/attention.o" "$W/text.o" \
    -o "$W/emu" -lpthread
"$W/emu" "$@"
