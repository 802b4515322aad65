#!/usr/bin/env bash
# The bad-input suite: malformed and hostile files, generated here (no hand-edited binaries),
# each with the exit code and message pcnn must give, and no output file left behind.
# Usage: bad_inputs.sh PCNN [--list]
set -u
pcnn=$(realpath "$1")
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
passes=0
fails=0

# case NAME CODE PATTERN -- ARGS: `pcnn ARGS` must exit with CODE, say PATTERN on stderr, leave
# no out.npy, and not crash (a signal gives exit codes above 128).
case_() {
  local name=$1 code=$2 pattern=$3
  shift 4
  rm -f out.npy
  "$pcnn" "$@" >stdout.txt 2>stderr.txt
  local rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qE -- "$pattern" stderr.txt || { [ "$code" -ne 0 ] && [ -e out.npy ]; } ||
    ls ./*.pcnn-tmp >/dev/null 2>&1; then
    echo "FAIL [$name]: exit $rc (want $code), want /$pattern/, stderr:"
    sed 's/^/    /' stderr.txt | head -5
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}
knn() { case_ "$1" "$2" "$3" -- knn "$4" --device cpu -k 2 -o out.npy; }

pcd_header() {  # FIELDS SIZE TYPE COUNT WIDTH HEIGHT POINTS DATA
  printf 'VERSION 0.7\nFIELDS %s\nSIZE %s\nTYPE %s\nCOUNT %s\nWIDTH %s\nHEIGHT %s\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS %s\nDATA %s\n' "$@"
}
ply_header() {  # FORMAT COUNT [PROPERTY LINES...]
  local fmt=$1 n=$2
  shift 2
  printf 'ply\nformat %s 1.0\nelement vertex %s\n' "$fmt" "$n"
  for p in "$@"; do printf '%s\n' "$p"; done
  printf 'end_header\n'
}
xyz_props=("property float x" "property float y" "property float z")

# --- the file itself ---
knn missing 3 "no such file" nope.pcd
mkdir dir.pcd && knn directory 3 "is a directory" dir.pcd
: >empty.pcd && knn empty_pcd 3 "is empty" empty.pcd
: >empty.ply && knn empty_ply 3 "is empty" empty.ply
echo "1 2 3" >cloud.xyz && knn wrong_extension 3 "unknown extension '.xyz'" cloud.xyz
echo "1 2 3" >cloud && knn no_extension 3 "unknown extension" cloud
mkfifo fifo.pcd && knn fifo 3 "not a regular file" fifo.pcd
if [ "$(id -u)" -ne 0 ]; then
  pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 1 1 1 ascii >locked.pcd && echo "1 2 3" >>locked.pcd
  chmod 000 locked.pcd && knn unreadable 3 "cannot open" locked.pcd
fi

# --- PCD headers that lie ---
{ printf '\r\n'; pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 1 1 1 ascii; echo "1 2 3"; } >blank.pcd && knn pcd_blank_line_first 3 "blank but not empty" blank.pcd
printf 'this is not a point cloud\n' >garbage.pcd && knn pcd_garbage 3 "not a PCD header" garbage.pcd
printf 'VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\n' >header_only.pcd && knn pcd_header_only 3 "no end" header_only.pcd
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 3 1 2 ascii >wh.pcd && knn pcd_width_height 3 "does not equal POINTS" wh.pcd
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 65536 65536 0 binary >wrap.pcd && knn pcd_32bit_wrap 3 "does not equal POINTS" wrap.pcd
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 100000000 1 100000000 binary >huge.pcd && printf '\0\0\0\0' >>huge.pcd && knn pcd_huge_count 3 "truncated" huge.pcd
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 10 1 10 binary >trunc.pcd && head -c 100 /dev/zero >>trunc.pcd && knn pcd_truncated_binary 3 "truncated" trunc.pcd
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 4 1 4 binary_compressed >cbig.pcd && printf '\xff\xff\x00\x00\x30\x00\x00\x00' >>cbig.pcd && knn pcd_compressed_too_big 3 "compressed bytes" cbig.pcd
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 4 1 4 binary_compressed >cmis.pcd && printf '\x04\x00\x00\x00\x99\x00\x00\x00abcd' >>cmis.pcd && knn pcd_compressed_size_mismatch 3 "uncompressed bytes" cmis.pcd
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 4 1 4 binary_compressed >cnone.pcd && knn pcd_compressed_no_sizes 3 "size header" cnone.pcd
pcd_header "x y z" "4 4" "F F F" "1 1 1" 1 1 1 ascii >fs.pcd && echo "1 2 3" >>fs.pcd && knn pcd_fields_vs_size 3 "SIZE" fs.pcd
pcd_header "x y z" "4 4 4" "F F Q" "1 1 1" 1 1 1 ascii >ty.pcd && echo "1 2 3" >>ty.pcd && knn pcd_unknown_type 3 "unsupported TYPE" ty.pcd
pcd_header "x y z" "4 4 3" "F F F" "1 1 1" 1 1 1 ascii >sz.pcd && echo "1 2 3" >>sz.pcd && knn pcd_float_size_3 3 "unsupported TYPE" sz.pcd
pcd_header "x y" "4 4" "F F" "1 1" 1 1 1 ascii >noz.pcd && echo "1 2" >>noz.pcd && knn pcd_missing_z 3 "no 'z' field" noz.pcd
pcd_header "x y z x" "4 4 4 4" "F F F F" "1 1 1 1" 1 1 1 ascii >dup.pcd && echo "1 2 3 4" >>dup.pcd && knn pcd_duplicate_x 3 "'x' appears twice" dup.pcd
pcd_header "x y z" "4 4 4" "F F F" "1 1 0" 1 1 1 ascii >c0.pcd && echo "1 2 3" >>c0.pcd && knn pcd_count_zero 3 "COUNT 0" c0.pcd
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 1 1 1 binary_lz4 >dk.pcd && knn pcd_unknown_data 3 "unknown PCD DATA" dk.pcd
{ pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 1 1 1 ascii; echo "1 2 3"; } | sed 's/^WIDTH 1/WIDTH 1\nWIDTH 1/' >rep.pcd && knn pcd_repeated_key 3 "repeats WIDTH" rep.pcd
{ printf 'VERSION 0.7\nFIELDS x y z'; head -c 70000 /dev/zero | tr '\0' ' '; printf '\n'; } >long.pcd && knn pcd_long_line 3 "line too long" long.pcd
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 3 1 3 ascii >short.pcd && printf '1 2 3\n4 5 6\n' >>short.pcd && knn pcd_ascii_short 3 "truncated" short.pcd
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 2 1 2 ascii >cols.pcd && printf '1 2\n4 5 6\n' >>cols.pcd && knn pcd_ascii_columns 3 "has 2 values, expected 3" cols.pcd
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 2 1 2 ascii >word.pcd && printf '1 2 3\n4 five 6\n' >>word.pcd && knn pcd_ascii_word 3 "'five' is not a number" word.pcd
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 4 1 4 binary >hdr_data.pcd && { printf 'COLUMNS'; head -c 60 /dev/zero | tr '\0' '\377'; printf '\n'; } >>hdr_data.pcd && knn pcd_header_after_data 3 "begins like a header line" hdr_data.pcd
pcd_header "x y z" "8 8 8" "F F F" "1 1 1" 2 1 2 ascii >far.pcd && printf '0 0 0\n1e300 0 0\n' >>far.pcd && knn pcd_coordinate_overflow 3 "overflow" far.pcd

# --- PLY headers that lie ---
printf 'plx\nformat ascii 1.0\nend_header\n' >magic.ply && knn ply_magic 3 "not a PLY file" magic.ply
ply_header ascii_v2 1 "${xyz_props[@]}" >fmt.ply && knn ply_format 3 "unknown PLY format" fmt.ply
printf 'ply\nformat ascii 1.0\nelement face 0\nproperty list uchar int vertex_indices\nend_header\n' >nov.ply && knn ply_no_vertex 3 "no vertex element" nov.ply
ply_header ascii 1 "property float x" "property float y" >noz.ply && echo "1 2" >>noz.ply && knn ply_missing_z 3 "no 'z' property" noz.ply
ply_header ascii 1 "property float x" "property float y" "property quad z" >qt.ply && echo "1 2 3" >>qt.ply && knn ply_unknown_type 3 "unknown type 'quad'" qt.ply
ply_header binary_little_endian 1000000000 "${xyz_props[@]}" >huge.ply && printf '\0\0\0\0' >>huge.ply && knn ply_huge_count 3 "truncated" huge.ply
ply_header binary_big_endian 10 "${xyz_props[@]}" >tr.ply && head -c 64 /dev/zero >>tr.ply && knn ply_truncated 3 "truncated" tr.ply
ply_header ascii 1 "${xyz_props[@]}" "property list uchar int tags" >list.ply && echo "1 2 3 0" >>list.ply && knn ply_vertex_list 3 "list property" list.ply
printf 'ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\n' >noend.ply && knn ply_no_end_header 3 "no end" noend.ply
ply_header ascii 2 "${xyz_props[@]}" >word.ply && printf '1 2 3\n4 x 6\n' >>word.ply && knn ply_ascii_word 3 "'x' is not a number" word.ply
ply_header ascii 2 "${xyz_props[@]}" "property float x" >dupx.ply && knn ply_duplicate_x 3 "appears twice" dupx.ply

# --- valid but unusual: these must work ---
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 3 1 3 ascii >nan.pcd && printf 'nan nan nan\nnan 1 2\ninf 0 0\n' >>nan.pcd
case_ nan_only 0 "skipped \(not finite\) +3" -- knn nan.pcd --device cpu -k 2 -o out.npy
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 0 1 0 ascii >zero.pcd && case_ zero_points 0 "points +0" -- knn zero.pcd --device cpu -o out.npy

# --- outputs ---
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 2 1 2 ascii >ok.pcd && printf '0 0 0\n1 1 1\n' >>ok.pcd
case_ output_missing_dir 5 "cannot write 'nodir/out.npy'" -- knn ok.pcd --device cpu -o nodir/out.npy
mkdir out.npy.dir && case_ output_is_directory 5 "cannot write 'out.npy.dir'" -- knn ok.pcd --device cpu -o out.npy.dir
mkdir ro && chmod 555 ro
if [ "$(id -u)" -ne 0 ]; then
  case_ output_read_only_dir 5 "cannot write 'ro/out.npy'" -- knn ok.pcd --device cpu -o ro/out.npy
fi
case_ filter_output_extension 5 "unknown extension '.txt'" -- filter sor ok.pcd -o kept.txt --mean-k 1 --device cpu
[ ! -e kept.txt ] || { echo "FAIL [filter_output_extension]: left kept.txt"; fails=$((fails + 1)); }

echo "bad inputs: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
