#!/usr/bin/env bash
# The bad-input suite: malformed and hostile files, generated here (no hand-edited binaries),
# each with the exit code and message pcnn must give, and no output file left behind; then the
# outputs: full disks, FIFOs, symlinks, devices, inputs and outputs that are the same file,
# concurrent runs. Grouped by the classes of the input gate (io/input_gate.hpp) and of the one
# writer path (pcnn::OutputSet).
# Usage: bad_inputs.sh PCNN   (with PCNN_KEEP_INPUTS=DIR: the cases' .pcd/.ply files are copied
# to DIR at the end)
set -u
pcnn=$(realpath "$1")
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
passes=0
fails=0
# Under AddressSanitizer the process reserves terabytes of address space: no ulimit -v there.
asan=0
grep -q __asan_init "$pcnn" && asan=1

# No temporary of the writer path may be left anywhere in the scratch folder.
no_temporaries() { [ -z "$(find . -name '*.pcnn-*' -print -quit)" ]; }

# case NAME CODE PATTERN -- ARGS: `pcnn ARGS` must exit with CODE, say PATTERN on stderr, leave
# no out.npy (when it fails) and no temporary, and not crash (a signal gives exit codes above 128).
case_() {
  local name=$1 code=$2 pattern=$3
  shift 4
  rm -f out.npy
  "$pcnn" "$@" >stdout.txt 2>stderr.txt
  local rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qE -- "$pattern" stderr.txt || { [ "$code" -ne 0 ] && [ -e out.npy ]; } ||
    ! no_temporaries; then
    echo "FAIL [$name]: exit $rc (want $code), want /$pattern/, stderr:"
    sed 's/^/    /' stderr.txt | head -5
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}
knn() { case_ "$1" "$2" "$3" -- knn "$4" --device cpu -k 2 -o out.npy; }
# check NAME COMMAND...: COMMAND must succeed (a condition on what a case left behind).
check() {
  local name=$1
  shift
  if "$@"; then passes=$((passes + 1)); else
    echo "FAIL [$name]: $*"
    fails=$((fails + 1))
  fi
}

pcd_header() {  # FIELDS SIZE TYPE COUNT WIDTH HEIGHT POINTS DATA
  printf 'VERSION 0.7\nFIELDS %s\nSIZE %s\nTYPE %s\nCOUNT %s\nWIDTH %s\nHEIGHT %s\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS %s\nDATA %s\n' "$@"
}
xyz_pcd() {  # POINTS DATA: a header for x y z float32
  pcd_header "x y z" "4 4 4" "F F F" "1 1 1" "$1" 1 "$1" "$2"
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
  xyz_pcd 1 ascii >locked.pcd && echo "1 2 3" >>locked.pcd
  chmod 000 locked.pcd && knn unreadable 3 "cannot open" locked.pcd
fi

# --- crashes of PCL's readers: rejected before PCL sees the file ---
printf 'VERSION 0.7\nFIELDS x y z\nPOINTS 2\nSIZE 8 8 8\nTYPE F F F\nCOUNT 1 1 1\nWIDTH 2\nDATA ascii\n1 2 3\n4 5 6\n' >size_after.pcd
knn crash_pcd_size_after_points 3 "line 4: SIZE after POINTS" size_after.pcd
printf 'VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nPOINTS 2\nCOUNT 2 2 2\nWIDTH 2\nDATA ascii\n1 2 3 1 2 3\n4 5 6 4 5 6\n' >count_after.pcd
knn crash_pcd_count_after_points 3 "line 6: COUNT after POINTS" count_after.pcd
printf 'ply\nformat ascii 1.0\nobj_info num_cols 2\nobj_info num_rows 1\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\nelement range_grid 2\nproperty list uchar int vertex_indices\nend_header\n1 2 3\n1 -5\n1 0\n' >rg_negative.ply
knn crash_ply_range_grid_negative_index 3 "line 13: range_grid cell 0 refers to vertex -5" rg_negative.ply
{ ply_header binary_little_endian 1 "${xyz_props[@]}" | sed 's/^end_header/element range_grid 2\nproperty list uchar int vertex_indices\nend_header/' |
  sed 's/^element vertex/obj_info num_cols 2\nobj_info num_rows 1\nelement vertex/'; head -c 12 /dev/zero; printf '\x01\x00\x00\x00\x80\x01\x00\x00\x00\x00'; } >rg_negative_bin.ply
knn crash_ply_range_grid_negative_binary 3 "range_grid cell 0 refers to vertex -2147483648" rg_negative_bin.ply
printf 'ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\nobj_info num_cols 2\nobj_info num_rows 3\nend_header\n1 2 3\n' >objinfo_after.ply
knn crash_ply_obj_info_after_vertex 3 "line 7: obj_info num_cols after an element" objinfo_after.ply
# binary_compressed with a zero-length block (PCL reads a byte past the data)
xyz_pcd 4 binary_compressed >empty_block.pcd && printf '\x00\x00\x00\x00\x30\x00\x00\x00' >>empty_block.pcd
knn crash_pcd_compressed_empty_block 3 "an empty compressed block" empty_block.pcd
xyz_pcd 4 binary_compressed >backref.pcd && printf '\x02\x00\x00\x00\x30\x00\x00\x00\x20\x05' >>backref.pcd
knn crash_pcd_compressed_reference_before_start 3 "a back reference before the start" backref.pcd
{ printf '\r\n'; xyz_pcd 1 ascii; echo "1 2 3"; } >blank.pcd && knn crash_pcd_blank_line_first 3 "line 1: an empty line ending in CR LF in the PCD header" blank.pcd
xyz_pcd 4 binary >hdr_data.pcd && { printf 'COLUMNS'; head -c 41 /dev/zero | tr '\0' '\377'; } >>hdr_data.pcd
knn crash_pcd_header_after_data 3 "begins like a header line" hdr_data.pcd

# --- silent changes: values or points PCL would read differently, or not at all ---
printf 'ply\nformat ascii 1.0\nobj_info num_cols 2\nobj_info num_rows 3\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\nend_header\n1 2 3\n' >objinfo_six.ply
knn silent_ply_obj_info_one_vertex_six_points 3 "obj_info num_cols x num_rows \(2 x 3\) does not equal the 1 vertices" objinfo_six.ply
printf 'ply\nformat ascii 1.0\nobj_info num_cols 20000\nobj_info num_rows 10000\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\nend_header\n1 2 3\n' >objinfo_huge.ply
knn silent_ply_obj_info_amplification 3 "20000 x 10000" objinfo_huge.ply
xyz_pcd 2 ascii >vt.pcd && printf '1\v2 3\n4 5 6\n' >>vt.pcd && knn silent_pcd_vertical_tab 3 "line 11: a control character \(0x0B\)" vt.pcd
xyz_pcd 2 ascii >ff.pcd && printf '1 2 3\n4\f5 6\n' >>ff.pcd && knn silent_pcd_form_feed 3 "line 12: a control character \(0x0C\)" ff.pcd
ply_header ascii 1 "${xyz_props[@]}" >vt.ply && printf '1\v2 3\n' >>vt.ply && knn silent_ply_vertical_tab 3 "a control character \(0x0B\)" vt.ply
printf 'VERSION 0.7\nFIELDS x y z\nSIZE 4\v4 4\nTYPE F F F\nWIDTH 1\nPOINTS 1\nDATA ascii\n1 2 3\n' >vt_header.pcd
knn silent_pcd_vertical_tab_in_header 3 "line 3: a character \(0x0B\)" vt_header.pcd
xyz_pcd 1 ascii >hex.pcd && printf '0x1p3 2 3\n' >>hex.pcd && knn silent_pcd_hex_float 3 "'0x1p3' is not a number" hex.pcd
ply_header ascii 1 "${xyz_props[@]}" >hex.ply && printf '1 0x10 3\n' >>hex.ply && knn silent_ply_hex_float 3 "'0x10' is not a number" hex.ply
pcd_header "x y z i" "4 4 4 4" "F F F I" "1 1 1 1" 1 1 1 ascii >int_exp.pcd && printf '1 2 3 1e3\n' >>int_exp.pcd
knn silent_pcd_integer_exponent 3 "'1e3' is not an integer \(the field is int32\)" int_exp.pcd
pcd_header "x y z i" "4 4 4 2" "F F F U" "1 1 1 1" 1 1 1 ascii >int_frac.pcd && printf '1 2 3 2.7\n' >>int_frac.pcd
knn silent_pcd_integer_fraction 3 "'2.7' is not an integer \(the field is uint16\)" int_frac.pcd
pcd_header "x y z i" "4 4 4 4" "F F F I" "1 1 1 1" 1 1 1 ascii >int_hex.pcd && printf '1 2 3 0x10\n' >>int_hex.pcd
knn silent_pcd_integer_hex 3 "'0x10' is not an integer" int_hex.pcd
pcd_header "x y z i" "4 4 4 1" "F F F U" "1 1 1 1" 1 1 1 ascii >u1_wrap.pcd && printf '1 2 3 300\n' >>u1_wrap.pcd
knn silent_pcd_u1_wraps 3 "'300' is out of range for uint8 \(0 to 255\)" u1_wrap.pcd
pcd_header "x y z i" "4 4 4 4" "F F F U" "1 1 1 1" 1 1 1 ascii >u4_neg.pcd && printf '1 2 3 -1\n' >>u4_neg.pcd
knn silent_pcd_unsigned_negative 3 "'-1' is negative, but the field is uint32" u4_neg.pcd
pcd_header "x y z t" "4 4 4 8" "F F F U" "1 1 1 1" 1 1 1 ascii >u8_big.pcd && printf '1 2 3 9007199254740993\n' >>u8_big.pcd
knn silent_pcd_u8_beyond_double 3 "beyond 2\^53 \(9007199254740992\): PCL.s ascii reader reads uint64 through a double" u8_big.pcd
# Binary 64-bit integer coordinates beyond ±2^53 (2^59 + 60): a double rounds them (to 2^59 + 64),
# and the rows were those of the rounded points, labelled exact; refused, as in ascii files.
# Exactly 2^53 is held: accepted.
pcd_header "x y z" "8 8 8" "I I I" "1 1 1" 2 1 2 binary >i8_big.pcd &&
  { printf '\x3c\x00\x00\x00\x00\x00\x00\x08'; head -c 40 /dev/zero; } >>i8_big.pcd
knn silent_pcd_i8_coordinate_beyond_double 3 "point 0: x = 576460752303423548 lies beyond ±2\^53" i8_big.pcd
pcd_header "x y z" "8 8 8" "U U U" "1 1 1" 2 1 2 binary >u8_edge.pcd &&
  { printf '\x00\x00\x00\x00\x00\x00\x20\x00'; head -c 40 /dev/zero; } >>u8_edge.pcd
knn pcd_u8_coordinate_at_2_53 0 "" u8_edge.pcd
# Forms PCL reads as meant, read the same (test_load_paths compares both readers on these files):
# indented header lines, empty LF lines, mixed line endings in .pcd, blank lines in a .ply header,
# CloudCompare's and UTF-8 names, 'Infinity', '3.000000' in an integer .pcd field, blank lines
# after the last row.
printf '\n  VERSION 0.7\r\n\tFIELDS x y z scalar_Roughness_(0.1) i\n\n  SIZE 4 4 4 4 4\n  # c\r\nTYPE F F F F U\nCOUNT 1 1 1 1 1\r\nWIDTH 2\nHEIGHT 1\nPOINTS 2\n  DATA ascii\r\n1 2 3 Infinity 3.000000\r\n4 5 6 -infinity 7.\n\n  \n' >forms.pcd
knn pcd_header_forms_pcl_reads 0 "" forms.pcd
printf 'ply\n  format ascii 1.0\n\n  comment c\n \t \n  element vertex 2\n  property float x\n  property float y\n\tproperty float z\n  property float Dichte_\xc3\xa4\n  end_header\n1 2 3 Infinity\n4 5 1.00000005960464477550 2\n\n' >forms.ply
knn ply_header_forms_pcl_reads 0 "" forms.ply
xyz_pcd 1 ascii >f_over.pcd && printf '1e39 2 3\n' >>f_over.pcd && knn silent_pcd_float_overflow 3 "'1e39' is too large for float32" f_over.pcd
ply_header ascii 1 "property float x" "property float y" "property char z" >char_wrap.ply && printf '1 2 200\n' >>char_wrap.ply
knn silent_ply_char_wraps 3 "'200' is out of range for int8" char_wrap.ply
ply_header ascii 1 "property float x" "property float y" "property uint z" >uint_neg.ply && printf '1 2 -1\n' >>uint_neg.ply
knn silent_ply_uint_negative 3 "'-1' is negative" uint_neg.ply
ply_header ascii 1 "${xyz_props[@]}" >inf_word.ply && printf '1 2 infinity\n' >>inf_word.ply
knn ply_infinity_word 0 "" inf_word.ply  # PCL reads 'infinity' as inf, as pcnn now does
pcd_header "x _ y z" "4 4 4 4" "F F F F" "1 1 1 1" 4 1 4 binary_compressed >pad.pcd && printf '\x01\x00\x00\x00\x40\x00\x00\x00\x00' >>pad.pcd
knn silent_pcd_compressed_padding_field 3 "a '_' \(padding\) field in binary_compressed" pad.pcd
xyz_pcd 1 ascii >rows_after.pcd && printf '1 2 3\n4 5 6\n' >>rows_after.pcd
knn silent_pcd_rows_after_points 3 "line 12: data after the last of the 1 POINTS rows" rows_after.pcd
ply_header ascii 1 "${xyz_props[@]}" >rows_after.ply && printf '1 2 3\n4 5 6\n' >>rows_after.ply
knn silent_ply_rows_after_vertices 3 "data after the last element" rows_after.ply
xyz_pcd 2 binary >bytes_after.pcd && head -c 24 /dev/zero >>bytes_after.pcd && printf '\x00\x00\x80\x3f' >>bytes_after.pcd
knn silent_pcd_binary_bytes_after_points 3 "4 bytes after the last of the POINTS points" bytes_after.pcd
ply_header binary_little_endian 1 "${xyz_props[@]}" >bytes_after.ply && head -c 24 /dev/zero >>bytes_after.ply
knn silent_ply_binary_bytes_after_vertices 3 "12 bytes after the last element" bytes_after.ply
ply_header ascii 1 "property uchar red" "property float x" "property uchar green" "property uchar blue" "property float y" "property float z" >colors.ply && printf '1 2 3 4 5 6\n' >>colors.ply
knn silent_ply_scattered_colors 3 "three consecutive properties red, green, blue" colors.ply
ply_header ascii 1 "${xyz_props[@]}" "property uchar alpha" >alpha.ply && printf '1 2 3 4\n' >>alpha.ply
knn silent_ply_alpha_without_colors 3 "alpha" alpha.ply
ply_header ascii 1 "${xyz_props[@]}" "property float nx" "property float normal_x" >normals.ply && printf '1 2 3 4 5\n' >>normals.ply
knn silent_ply_nx_and_normal_x 3 "two fields named 'normal_x'" normals.ply
ply_header ascii 4 "${xyz_props[@]}" >cam.ply && sed -i 's/^end_header/element camera 1\nproperty int viewportx\nproperty int viewporty\nend_header/' cam.ply && printf '1 2 3\n1 2 3\n1 2 3\n1 2 3\n1 3\n' >>cam.ply
knn silent_ply_camera_viewport_mismatch 3 "viewport \(1 x 3\) does not hold the 4 vertices" cam.ply
printf 'ply\nformat ascii 1.0\nobj_info num_cols 2\nobj_info num_rows 1\nelement vertex 2\nproperty float x\nproperty float y\nproperty float z\nelement range_grid 2\nproperty list uchar int vertex_indices\nend_header\n1 2 3\n4 5 6\n1 1\n1 0\n' >rg_permuted.ply
knn silent_ply_range_grid_ignored_by_pcl 3 "maps cell 0 to vertex 1" rg_permuted.ply
printf 'VERSION 0.7\nFIELDSX x y z\nSIZE 4 4 4\nTYPE F F F\nWIDTH 1\nPOINTS 1\nDATA ascii\n1 2 3\n' >prefix.pcd
knn silent_pcd_keyword_prefix 3 "'FIELDSX' is not a PCD header keyword" prefix.pcd
pcd_header "x y z" "4 4 4" "Float F F" "1 1 1" 1 1 1 ascii >type_word.pcd && echo "1 2 3" >>type_word.pcd
knn silent_pcd_type_word 3 "unsupported TYPE 'Float'" type_word.pcd
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 1 1 1 binary_lz4 >dk.pcd && knn silent_pcd_data_prefix 3 "unknown PCD DATA kind 'binary_lz4'" dk.pcd
{ printf 'ply\r\nformat ascii 1.0\r\nelement vertex 1\r\n'; printf 'property float x\nproperty float y\r\nproperty float z\r\nend_header\r\n1 2 3\r\n'; } >mixed_eol.ply
knn silent_ply_mixed_line_endings 3 "line 4: ends with LF but line 1 with CR LF" mixed_eol.ply
{ xyz_pcd 1 ascii | sed 's/$/\r/'; printf '1 2 3\n'; } >mixed_eol.pcd
knn pcd_mixed_line_endings 0 "" mixed_eol.pcd  # PCL's tokenizer drops the CR: read as meant
printf 'ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\n  obj_info num_cols 1\nend_header\n1 2 3\n' >leading_space.ply
knn silent_ply_leading_space 3 "line 7: an obj_info line may not start with white space" leading_space.ply

# --- headers that lie about the data ---
printf 'this is not a point cloud\n' >garbage.pcd && knn pcd_garbage 3 "is not a PCD header keyword" garbage.pcd
printf 'VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\n' >header_only.pcd && knn pcd_header_only 3 "no end" header_only.pcd
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 3 1 2 ascii >wh.pcd && knn pcd_width_height 3 "does not equal POINTS" wh.pcd
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 65536 65536 0 binary >wrap.pcd && knn pcd_32bit_wrap 3 "does not equal POINTS" wrap.pcd
xyz_pcd 3000000000 binary >over.pcd && knn pcd_more_than_2_31_points 3 "at most 2\^31-1 points" over.pcd
xyz_pcd 100000000 binary >huge.pcd && printf '\0\0\0\0' >>huge.pcd && knn pcd_huge_count 3 "truncated" huge.pcd
xyz_pcd 10 binary >trunc.pcd && head -c 100 /dev/zero >>trunc.pcd && knn pcd_truncated_binary 3 "truncated" trunc.pcd
xyz_pcd 100000000 ascii >amp.pcd && printf '1 2 3\n' >>amp.pcd && knn pcd_ascii_amplification 3 "hold at most 1 rows" amp.pcd
xyz_pcd 4 binary_compressed >cbig.pcd && printf '\xff\xff\x00\x00\x30\x00\x00\x00' >>cbig.pcd && knn pcd_compressed_too_big 3 "compressed bytes" cbig.pcd
xyz_pcd 4 binary_compressed >cmis.pcd && printf '\x04\x00\x00\x00\x99\x00\x00\x00abcd' >>cmis.pcd && knn pcd_compressed_size_mismatch 3 "binary_compressed data of 153 bytes, but POINTS x point size is 48" cmis.pcd
xyz_pcd 4 binary_compressed >cnone.pcd && knn pcd_compressed_no_sizes 3 "without its sizes" cnone.pcd
xyz_pcd 4 binary_compressed >clong.pcd && printf '\x03\x00\x00\x00\x30\x00\x00\x00\x1f\x00\x00' >>clong.pcd && knn pcd_compressed_decodes_long 3 "literal run goes past the end" clong.pcd
pcd_header "x y z" "4 4" "F F F" "1 1 1" 1 1 1 ascii >fs.pcd && echo "1 2 3" >>fs.pcd && knn pcd_fields_vs_size 3 "SIZE has 2 entries for the 3 FIELDS" fs.pcd
pcd_header "x y z" "4 4 4" "F F Q" "1 1 1" 1 1 1 ascii >ty.pcd && echo "1 2 3" >>ty.pcd && knn pcd_unknown_type 3 "unsupported TYPE" ty.pcd
pcd_header "x y z" "4 4 3" "F F F" "1 1 1" 1 1 1 ascii >sz.pcd && echo "1 2 3" >>sz.pcd && knn pcd_float_size_3 3 "unsupported TYPE" sz.pcd
pcd_header "x y" "4 4" "F F" "1 1" 1 1 1 ascii >noz.pcd && echo "1 2" >>noz.pcd && knn pcd_missing_z 3 "no 'z' field" noz.pcd
pcd_header "x y z x" "4 4 4 4" "F F F F" "1 1 1 1" 1 1 1 ascii >dup.pcd && echo "1 2 3 4" >>dup.pcd && knn pcd_duplicate_x 3 "'x' appears twice" dup.pcd
pcd_header "x y z" "4 4 4" "F F F" "1 1 0" 1 1 1 ascii >c0.pcd && echo "1 2 3" >>c0.pcd && knn pcd_count_zero 3 "COUNT '0'" c0.pcd
pcd_header "x y z" "4 4 4" "F F F" "2 1 1" 1 1 1 ascii >c2.pcd && echo "1 1 2 3" >>c2.pcd && knn pcd_x_count_two 3 "field 'x' has COUNT 2, expected 1" c2.pcd
{ xyz_pcd 1 ascii; echo "1 2 3"; } | sed 's/^WIDTH 1/WIDTH 1\nWIDTH 1/' >rep.pcd && knn pcd_repeated_key 3 "a second WIDTH line" rep.pcd
{ printf 'VERSION 0.7\nFIELDS x y z'; head -c 70000 /dev/zero | tr '\0' ' '; printf '\n'; } >long.pcd && knn pcd_long_line 3 "longer than 65536 bytes" long.pcd
xyz_pcd 3 ascii >short.pcd && printf '1.5 2.5 3.5\n4.5 5.5 6.5\n' >>short.pcd && knn pcd_ascii_short 3 "truncated" short.pcd
xyz_pcd 2 ascii >cols.pcd && printf '1.5 2.5\n4.5 5.5 6.5\n' >>cols.pcd && knn pcd_ascii_columns 3 "line 11: point 0 has 2 values, expected 3" cols.pcd
xyz_pcd 2 ascii >word.pcd && printf '1 2 3\n4 five 6\n' >>word.pcd && knn pcd_ascii_word 3 "'five' is not a number" word.pcd
pcd_header "x y z" "8 8 8" "F F F" "1 1 1" 2 1 2 ascii >far.pcd && printf '0 0 0\n1e300 0 0\n' >>far.pcd && knn pcd_coordinate_overflow 3 "overflow" far.pcd
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
ply_header ascii 1 "${xyz_props[@]}" >list_count.ply && sed -i 's/^end_header/element face 1\nproperty list float int vertex_indices\nend_header/' list_count.ply && printf '1 2 3\n0\n' >>list_count.ply
knn ply_list_count_type 3 "has a count of type float32" list_count.ply
ply_header ascii 1 "${xyz_props[@]}" >face_short.ply && sed -i 's/^end_header/element face 1\nproperty list uchar int vertex_indices\nend_header/' face_short.ply && printf '1 2 3\n3 0 0\n' >>face_short.ply
knn ply_face_list_short 3 "too few values" face_short.ply

# --- valid but unusual: these must work ---
xyz_pcd 3 ascii >nan.pcd && printf 'nan nan nan\nNaN 1 2\n-inf 0 0\n' >>nan.pcd
case_ nan_only 0 "skipped \(not finite\) +3" -- knn nan.pcd --device cpu -k 2 -o out.npy
xyz_pcd 0 ascii >zero.pcd && case_ zero_points 0 "points +0" -- knn zero.pcd --device cpu -o out.npy
{ xyz_pcd 2 ascii | sed 's/$/\r/'; printf '1 2 3\r\n+4.5 .5 6e-1\r\n'; } >crlf.pcd && case_ crlf_pcd 0 "points +2" -- knn crlf.pcd --device cpu -k 1
{ printf 'ply\r\nformat ascii 1.0\r\ncomment CR LF\r\nelement vertex 2\r\nproperty float x\r\nproperty float y\r\nproperty float z\r\nend_header\r\n'; printf '1 2 3\r\n4 5 6\r\n'; } >crlf.ply
case_ crlf_ply 0 "points +2" -- knn crlf.ply --device cpu -k 1
xyz_pcd 2 binary >padded.pcd && head -c 24 /dev/zero >>padded.pcd && head -c 3000 /dev/zero >>padded.pcd
case_ pcd_writer_page_padding 0 "points +2" -- knn padded.pcd --device cpu -k 1
printf 'ply\nformat ascii 1.0\nobj_info num_cols 2\nobj_info num_rows 2\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\nelement range_grid 4\nproperty list uchar int vertex_indices\nend_header\n1 2 3\n4 5 6\n7 8 9\n1 0\n0\n1 1\n1 2\n' >grid.ply
case_ ply_range_grid_with_a_hole 0 "organized +2 x 2" -- stats grid.ply --device cpu
ply_header ascii 2 "${xyz_props[@]}" "property uchar red" "property uchar green" "property uchar blue" "property uchar alpha" >rgba.ply && printf '1 2 3 4 5 6 7\n1 2 4 4 5 6 7\n' >>rgba.ply
case_ ply_rgba 0 "points +2" -- knn rgba.ply --device cpu -k 1

# --- outputs ---
pcd_header "x y z" "4 4 4" "F F F" "1 1 1" 2 1 2 ascii >ok.pcd && printf '0 0 0\n1 1 1\n' >>ok.pcd
case_ output_missing_dir 5 "cannot write 'nodir/out.npy': its directory 'nodir' does not exist" -- knn ok.pcd --device cpu -o nodir/out.npy
mkdir out.npy.dir && case_ output_is_directory 5 "cannot write 'out.npy.dir': is a directory" -- knn ok.pcd --device cpu -o out.npy.dir
mkdir ro && chmod 555 ro
if [ "$(id -u)" -ne 0 ]; then
  case_ output_read_only_dir 5 "cannot write 'ro/out.npy'" -- knn ok.pcd --device cpu -o ro/out.npy
fi
case_ output_unknown_extension 5 "cannot write 'out.txt': unknown extension '.txt' \(expected .npy or .csv\)" -- knn ok.pcd --device cpu -o out.txt
check output_unknown_extension_left_nothing test ! -e out.txt
case_ output_no_extension 5 "cannot write 'out': no extension" -- knn ok.pcd --device cpu -o out
case_ filter_output_extension 5 "unknown extension '.txt'" -- filter sor ok.pcd -o kept.txt --mean-k 1 --device cpu
check filter_output_extension_left_nothing test ! -e kept.txt
case_ radius_output_extension 5 "unknown extension '.txt'" -- radius ok.pcd -r 1 --device cpu -o rad.txt
# -o naming the input (by its name, a symlink or a hard link) is refused before anything is read
cp ok.pcd keep.pcd && sum_before=$(cksum <keep.pcd)
case_ output_is_the_input 5 "cannot write 'keep.pcd': it is the input 'keep.pcd'" -- filter sor keep.pcd -o keep.pcd --mean-k 1 --device cpu
ln -s keep.pcd keep_link.pcd && ln keep.pcd keep_hard.pcd
case_ output_is_the_input_by_symlink 5 "it is the input 'keep.pcd'" -- filter sor keep.pcd -o keep_link.pcd --mean-k 1 --device cpu
case_ output_is_the_input_by_hard_link 5 "it is the input 'keep.pcd'" -- smooth keep.pcd -o keep_hard.pcd --device cpu
check output_is_the_input_left_it_intact test "$(cksum <keep.pcd)" = "$sum_before"
case_ query_is_an_output 5 "it is the input 'ok.pcd'" -- knn keep.pcd --query ok.pcd --device cpu -o ok.pcd
case_ same_output_twice 5 "cannot write 'same.npy': it is also the output 'same.npy'" -- knn ok.pcd --device cpu -k 1 -o same.npy --distances same.npy
check same_output_twice_left_nothing test ! -e same.npy
echo old >d.npy && ln -s d.npy d_link.npy
case_ same_output_twice_by_symlink 5 "it is also the output 'd.npy'" -- knn ok.pcd --device cpu -k 1 -o d.npy --distances d_link.npy
rm d.npy
case_ same_output_twice_by_dangling_symlink 5 "it is also the output 'd.npy'" -- knn ok.pcd --device cpu -k 1 -o d.npy --distances d_link.npy
case_ json_and_stdout 5 "stdout is taken by --json" -- knn ok.pcd --device cpu -k 1 -o - --json
# several outputs: one that cannot be written stops the command before any work, leaving none
case_ one_bad_output_of_two 5 "cannot write 'nodir/d.npy'" -- knn ok.pcd --device cpu -k 1 -o good.npy --distances nodir/d.npy
check one_bad_output_of_two_left_nothing test ! -e good.npy
# arguments and outputs are checked before loading: a missing input is not even looked at
case_ k_zero_before_loading 2 "k must be between 1 and 128, got 0" -- knn missing.pcd -k 0
case_ radius_negative_before_loading 2 "radius must be a finite number >= 0" -- radius missing.pcd -r -1
case_ output_dir_before_loading 5 "cannot write 'nodir/x.npy'" -- knn missing.pcd -o nodir/x.npy
case_ smooth_stencil_before_loading 2 "radius must be 0..7" -- smooth missing.pcd -o s.pcd --stencil box:9
case_ hybrid_max_nn_before_loading 2 "--max-nn must be between 1 and 128, got 500" -- radius missing.pcd -r 1 --max-nn 500
case_ query_exclude_self_before_loading 2 "exclude-self applies" -- knn missing.pcd --query missing2.pcd --exclude-self
case_ memory_size_before_loading 2 "not a memory size" -- knn missing.pcd --max-device-memory lots
if ! "$pcnn" devices >/dev/null 2>&1; then  # --device cuda without a GPU: found before loading
  for cmd in "knn missing.pcd" "radius missing.pcd -r 1" "stats missing.pcd" "filter sor missing.pcd -o f.pcd" "smooth missing.pcd -o s.pcd"; do
    # shellcheck disable=SC2086
    case_ "no_device_before_loading_${cmd%% *}" 4 "no usable CUDA device" -- $cmd --device cuda
  done
fi
# a full disk: a file size limit (ulimit -f, in KiB in bash) for every kind of output
sample_big() { "$pcnn" generate uniform -n 20000 -o "$1" >/dev/null 2>&1; }
sample_big big.pcd
for out in big_out.npy big_out.csv big_out.pcd big_out.ply; do
  case "$out" in
    *.pcd | *.ply) args=(filter sor big.pcd -o "$out" --mean-k 2 --device cpu) ;;
    *) args=(knn big.pcd --device cpu -k 4 -o "$out") ;;
  esac
  # .npy sizes are known before the search: refused at once, naming the bytes and the limit;
  # a CSV's only from below (each value at least a digit): this limit lets the search run and
  # the write fail
  case "$out" in
    *.npy) limit=8 why="cannot write '$out': the kNN results (20000 x 4) need .* in this file, over the file size limit of .* (8192 bytes)" ;;
    *.csv) limit=400 why="cannot write '$out': File too large" ;;
    *) limit=8 why="cannot write '$out': File too large" ;;
  esac
  (ulimit -f $limit && "$pcnn" "${args[@]}" >stdout.txt 2>stderr.txt)
  rc=$?
  check "full_disk_$out" test "$rc" -eq 5
  check "full_disk_${out}_says_why" grep -q "$why" stderr.txt
  check "full_disk_${out}_left_nothing" test ! -e "$out"
  check "full_disk_${out}_no_temporary" no_temporaries
done
(ulimit -f 8 && "$pcnn" generate uniform -n 20000 -o gen_big.pcd >stdout.txt 2>stderr.txt)
check full_disk_generate test $? -eq 5 -a ! -e gen_big.pcd
check full_disk_generate_no_temporary no_temporaries
# a full disk for real: a 64 KiB tmpfs, in a private mount namespace (where permitted)
if unshare -m --propagation private true 2>/dev/null; then
  mkdir -p small
  # written until the disk is full (a CSV's size is known only from below: 400k lets the
  # search run), or refused before the search where the sizes say it cannot fit
  for out in small.csv:400k:No_space_left_on_device small.pcd:64k:No_space_left_on_device \
    small.ply:64k:No_space_left_on_device small.npy:64k:need_.*_on_the_file_system_of_.small.,_which_has_.*_free \
    small:64k:need_.*_on_the_file_system_of_.small.,_which_has_.*_free; do
    IFS=: read -r name size why <<<"$out"
    unshare -m --propagation private sh -c '
      mount -t tmpfs -o size=$3 tmpfs small || exit 9
      case "$2" in
        *.pcd | *.ply) "$1" filter sor big.pcd -o "small/$2" --mean-k 2 --device cpu ;;
        *.npy | *.csv) "$1" knn big.pcd --device cpu -k 4 -o "small/$2" ;;
        *) "$1" radius big.pcd --device cpu -r 0.05 -o "small/$2" ;;
      esac >/dev/null 2>stderr.txt
      [ $? -eq 5 ] && grep -q "cannot write .small/$2.*$4" stderr.txt &&
        [ -z "$(ls -A small)" ]' sh "$pcnn" "$name" "$size" "${why//_/ }"
    check "tmpfs_full_$name" test $? -eq 0
  done
fi
# /dev/full: a device that is always full (written directly, ENOSPC reported)
if [ -w /dev/full ]; then
  case_ output_dev_full 5 "cannot write '/dev/full': No space left on device" -- knn ok.pcd --device cpu -k 1 -o /dev/full
fi
# several outputs, the second one failing while written: the first is not left behind, and an
# older file of the same name stays as it was
echo old >first.npy
(ulimit -f 3000 && "$pcnn" knn big.pcd --device cpu -k 16 -o first.npy --distances second.csv >stdout.txt 2>stderr.txt)
check second_output_fails_exit test $? -eq 5
check second_output_fails_says_why grep -q "cannot write 'second.csv': File too large" stderr.txt
check second_output_fails_first_unchanged test "$(cat first.npy)" = old
check second_output_fails_no_second test ! -e second.csv
check second_output_fails_no_temporary no_temporaries
# a FIFO is written to, never replaced
mkfifo pipe.npy
cat pipe.npy >from_pipe.npy &
reader=$!
case_ output_fifo 0 "indices written to" -- knn ok.pcd --device cpu -k 1 -o pipe.npy
wait "$reader"
check output_fifo_still_a_fifo test -p pipe.npy
check output_fifo_data_arrived grep -q NUMPY from_pipe.npy
# a device node: /dev/null stays the device it is (as root, replacing it would break the system)
case_ output_dev_null 0 "indices written to" -- knn ok.pcd --device cpu -k 1 -o /dev/null --distances /dev/null
check output_dev_null_still_a_device test -c /dev/null
# stdout, by '-' and by /dev/stdout
"$pcnn" knn ok.pcd --device cpu -k 1 -o - >to_stdout.npy 2>stderr.txt
check output_stdout_dash grep -q NUMPY to_stdout.npy
"$pcnn" knn ok.pcd --device cpu -k 1 -o /dev/stdout >to_stdout2.npy 2>stderr.txt
check output_dev_stdout cmp -s to_stdout.npy to_stdout2.npy
# a symlink is written through: the file it names is replaced, the link stays a link
echo old >real.npy && ln -s real.npy link.npy
case_ output_symlink 0 "indices written to" -- knn ok.pcd --device cpu -k 1 -o link.npy
check output_symlink_still_a_link test -L link.npy
check output_symlink_target_written grep -q NUMPY real.npy
ln -s new_target.npy dangling.npy
case_ output_dangling_symlink 0 "indices written to" -- knn ok.pcd --device cpu -k 1 -o dangling.npy
check output_dangling_symlink_target_created grep -q NUMPY new_target.npy
# the temporary's name cannot be planted: a symlink at the old fixed name is never followed
echo victim >victim.txt && ln -s victim.txt planted.npy.pcnn-tmp
"$pcnn" knn ok.pcd --device cpu -k 1 -o planted.npy >stdout.txt 2>stderr.txt
check output_planted_temporary_symlink test $? -eq 0 -a -s planted.npy
check output_planted_symlink_not_followed test "$(cat victim.txt)" = victim
rm planted.npy.pcnn-tmp
check output_planted_no_temporary no_temporaries
# two runs writing the same output at once: each writes its own temporary; the file is one run's
for i in 1 2 3 4; do "$pcnn" knn big.pcd --device cpu -k 8 -o race.npy --distances race.csv >/dev/null 2>&1 & done
wait
check concurrent_runs_complete test "$(stat -c %s race.npy)" -eq $((128 + 20000 * 8 * 4))
check concurrent_runs_csv_complete test "$(wc -l <race.csv)" -eq 20001
check concurrent_runs_no_temporary no_temporaries
# out of host memory: exit 4 with the bytes needed (not under ASan, which needs the address space)
if [ "$asan" -eq 0 ]; then
  (ulimit -v 300000 && "$pcnn" generate uniform -n 200000000 -o huge_gen.pcd >stdout.txt 2>stderr.txt)
  check out_of_host_memory_exit test $? -eq 4
  check out_of_host_memory_says_bytes grep -q "out of host memory: 2400000000 bytes needed" stderr.txt
  check out_of_host_memory_no_temporary no_temporaries
fi

# The cases' cloud files, for the loader's differential test (tests/test_load_paths.cpp): both of
# its readers must give the same cloud or the same error on each.
if [ -n "${PCNN_KEEP_INPUTS:-}" ]; then
  rm -rf "$PCNN_KEEP_INPUTS" && mkdir -p "$PCNN_KEEP_INPUTS"
  find . -maxdepth 1 -type f \( -name '*.pcd' -o -name '*.ply' \) -size -64M -readable \
    -exec cp {} "$PCNN_KEEP_INPUTS"/ \;
fi

echo "bad inputs: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
