// Writing clouds as binary .pcd and .ply with pcnn's own encoders, through the one output path
// (output_file.hpp): every write checked, staged and committed with the command's other outputs.
// Not PCL's writers: its .pcd writer maps the file into memory (a full disk is a SIGBUS, and
// the temporary is left behind), and its .ply writer stores colors, field counts and the
// organization in forms PCL's own reader does not read back as they were.
#include <pcl/PCLPointCloud2.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "header_check.hpp"
#include "output_file.hpp"
#include "pcnn/io.hpp"
#include "stored_fields.hpp"

namespace pcnn {
namespace {

using io_detail::Format;
using io_detail::OutputFile;

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw output_error("cannot write '" + path + "': " + why, path);
}

struct TypeInfo {
  char pcd;  // PCD TYPE letter
  std::uint32_t size;
  const char* ply;  // PLY type name, null where PLY has none
};

bool type_info(std::uint8_t datatype, TypeInfo& t) {
  switch (datatype) {
    case pcl::PCLPointField::INT8:
      t = {'I', 1, "char"};
      return true;
    case pcl::PCLPointField::UINT8:
      t = {'U', 1, "uchar"};
      return true;
    case pcl::PCLPointField::INT16:
      t = {'I', 2, "short"};
      return true;
    case pcl::PCLPointField::UINT16:
      t = {'U', 2, "ushort"};
      return true;
    case pcl::PCLPointField::INT32:
      t = {'I', 4, "int"};
      return true;
    case pcl::PCLPointField::UINT32:
      t = {'U', 4, "uint"};
      return true;
    case pcl::PCLPointField::FLOAT32:
      t = {'F', 4, "float"};
      return true;
    case pcl::PCLPointField::FLOAT64:
      t = {'F', 8, "double"};
      return true;
    case pcl::PCLPointField::INT64:
      t = {'I', 8, nullptr};
      return true;
    case pcl::PCLPointField::UINT64:
      t = {'U', 8, nullptr};
      return true;
    default:
      return false;
  }
}

// Names the input gate accepts, with room for .ply's '_N' suffixes, so that pcnn reads back what
// it writes.
bool writable_name(const std::string& s) {
  return s.size() <= 120 && io_detail::name_characters_ok(s);
}

// The fields written, in order, each as count × size bytes taken from its offset in the record:
// the packed record PCL's readers rebuild from the headers written here.
struct Layout {
  struct Part {
    const pcl::PCLPointField* field;
    TypeInfo type;
    std::uint32_t offset, bytes;
    int color = 0;  // .ply: a packed color written as 3 uchar (red green blue) or 4 (+ alpha)
  };
  std::vector<Part> parts;
  std::uint32_t packed = 0;  // bytes per point written
  bool contiguous = true;    // the records are already packed: write them as they are
};

Layout layout_of(const std::string& path, const pcl::PCLPointCloud2& c, bool skip_padding) {
  Layout l;
  for (const auto& f : c.fields) {
    TypeInfo t;
    if (!type_info(f.datatype, t))
      fail(path,
           "field '" + f.name + "' has an unsupported type (" + std::to_string(f.datatype) + ")");
    if (!writable_name(f.name))
      fail(path, "field name '" + f.name +
                     "' (names are at most 120 bytes of printable ASCII or UTF-8, no spaces)");
    if (f.count == 0) continue;  // PCL drops such fields when reading; write none of it
    const std::uint64_t bytes = std::uint64_t(f.count) * t.size;
    if (f.offset + bytes > c.point_step)
      fail(path, "field '" + f.name + "' lies outside the point record");
    if (skip_padding && f.name == "_") {
      l.contiguous = false;
      continue;
    }
    if (f.offset != l.packed) l.contiguous = false;
    l.parts.push_back({&f, t, f.offset, static_cast<std::uint32_t>(bytes)});
    l.packed += static_cast<std::uint32_t>(bytes);
  }
  if (l.packed != c.point_step) l.contiguous = false;
  return l;
}

void write_points(OutputFile& file, const pcl::PCLPointCloud2& c, const Layout& l,
                  std::uint64_t n) {
  if (l.contiguous) {
    file.write(c.data.data(), n * c.point_step);
    return;
  }
  std::vector<std::uint8_t> rec(l.packed);
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint8_t* src = c.data.data() + i * c.point_step;
    std::uint32_t at = 0;
    for (const auto& p : l.parts) {
      if (p.color) {  // 0xAARRGGBB in a 4-byte field, whatever the host's byte order
        std::uint32_t v;
        std::memcpy(&v, src + p.offset, 4);
        const std::uint8_t rgba[4] = {std::uint8_t(v >> 16), std::uint8_t(v >> 8), std::uint8_t(v),
                                      std::uint8_t(v >> 24)};
        std::memcpy(rec.data() + at, rgba, p.bytes);
      } else {
        std::memcpy(rec.data() + at, src + p.offset, p.bytes);
      }
      at += p.bytes;
    }
    file.write(rec.data(), rec.size());
  }
}

std::uint64_t checked_points(const std::string& path, const pcl::PCLPointCloud2& c) {
  const std::uint64_t n = std::uint64_t(c.width) * c.height;
  if (c.data.size() < n * c.point_step)
    fail(path, "the cloud holds less data than width x height x point size");
  return n;
}

// Binary .pcd as PCL reads it: its header order, fields packed in order.
void encode_pcd(OutputFile& file, const pcl::PCLPointCloud2& c) {
  const std::uint64_t n = checked_points(file.path(), c);
  const Layout l = layout_of(file.path(), c, /*skip_padding=*/false);
  std::string fields, sizes, types, counts;
  for (const auto& p : l.parts) {
    fields += " " + p.field->name;
    sizes += " " + std::to_string(p.type.size);
    types += std::string(" ") + p.type.pcd;
    counts += " " + std::to_string(p.field->count);
  }
  const std::string header = "# .PCD v0.7 - Point Cloud Data file format\nVERSION 0.7\nFIELDS" +
                             fields + "\nSIZE" + sizes + "\nTYPE" + types + "\nCOUNT" + counts +
                             "\nWIDTH " + std::to_string(c.width) + "\nHEIGHT " +
                             std::to_string(c.height) + "\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS " +
                             std::to_string(n) + "\nDATA binary\n";
  file.write(header);
  write_points(file, c, l, n);
}

// Binary .ply as PCL reads it back: one scalar property per value (a field of count c becomes
// NAME_0 .. NAME_c-1), the organization as obj_info num_cols / num_rows before the vertex
// element; and as other tools (CloudCompare, Open3D, MeshLab, PDAL) read colors and normals: a
// packed color field rgb (rgba) as uchar red, green, blue (and alpha), which PCL's reader packs
// back into a field of that name (rgb: a float32, without the alpha byte, which means nothing
// there), and normal_x/y/z as nx/ny/nz, which it names normal_x/y/z again.
void encode_ply(OutputFile& file, const pcl::PCLPointCloud2& c) {
  const std::string& path = file.path();
  const std::uint64_t n = checked_points(path, c);
  Layout l = layout_of(path, c, /*skip_padding=*/true);
  // One packed color only: PCL's reader gives every color group the name of the first.
  const auto packed = [](const pcl::PCLPointField& f) {
    return (f.name == "rgb" || f.name == "rgba") && f.count == 1 &&
           (f.datatype == pcl::PCLPointField::FLOAT32 || f.datatype == pcl::PCLPointField::UINT32);
  };
  if (std::count_if(l.parts.begin(), l.parts.end(),
                    [&](const Layout::Part& p) { return packed(*p.field); }) == 1)
    for (auto& p : l.parts)
      if (packed(*p.field)) {
        p.color = p.field->name == "rgba" ? 4 : 3;
        l.packed -= p.bytes - p.color;
        p.bytes = p.color;
        l.contiguous = false;
      }
  std::string props;
  std::vector<std::string> read_back;  // the field names PCL's reader will make of them
  for (const auto& p : l.parts) {
    const pcl::PCLPointField& f = *p.field;
    if (p.color) {
      props += "property uchar red\nproperty uchar green\nproperty uchar blue\n";
      if (p.color == 4) props += "property uchar alpha\n";
      read_back.push_back(f.name);
      continue;
    }
    if (!p.type.ply)
      fail(path, "field '" + f.name + "' is a 64-bit integer, which .ply cannot hold (write .pcd)");
    static const char* merged[] = {"red",           "green",        "blue", "diffuse_red",
                                   "diffuse_green", "diffuse_blue", "alpha"};
    if (f.datatype == pcl::PCLPointField::UINT8)
      for (const char* m : merged)
        if (f.name == m)
          fail(path, "field '" + f.name +
                         "' (uint8) would be read back from .ply as part of a packed color "
                         "(write .pcd)");
    for (std::uint32_t k = 0; k < f.count; ++k) {
      std::string name = f.count > 1 ? f.name + "_" + std::to_string(k) : f.name;
      if (name == "normal_x" || name == "normal_y" || name == "normal_z")
        name = std::string("n") + name.back();
      props += std::string("property ") + p.type.ply + " " + name + "\n";
      read_back.push_back(
          name == "nx" || name == "ny" || name == "nz" ? std::string("normal_") + name[1] : name);
    }
  }
  for (std::size_t i = 0; i < read_back.size(); ++i)
    if (std::find(read_back.begin(), read_back.begin() + i, read_back[i]) != read_back.begin() + i)
      fail(path, "two fields would be read back from .ply as '" + read_back[i] + "' (write .pcd)");
  std::string header =
      std::string("ply\nformat ") +
      (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? "binary_big_endian" : "binary_little_endian") +
      " 1.0\ncomment written by pcnn\n";
  if (c.height > 1)
    header += "obj_info num_cols " + std::to_string(c.width) + "\nobj_info num_rows " +
              std::to_string(c.height) + "\n";
  header += "element vertex " + std::to_string(n) + "\n" + props + "end_header\n";
  file.write(header);
  write_points(file, c, l, n);
}

void encode(OutputSet& outputs, const std::string& path, const pcl::PCLPointCloud2& c) {
  const Format f = io_detail::output_format(outputs, path);
  if (f != Format::pcd && f != Format::ply) fail(path, "it was declared as another kind of output");
  OutputFile& file = io_detail::begin_output(outputs, path);
  if (f == Format::pcd)
    encode_pcd(file, c);
  else
    encode_ply(file, c);
  file.finish();
}

const pcl::PCLPointField& coordinate(const std::string& path, const pcl::PCLPointCloud2& c,
                                     const char* name) {
  for (const auto& f : c.fields)
    if (f.name == name && f.count == 1) return f;
  fail(path, std::string("the cloud has no '") + name + "' field");
}

// Stores v in the given PCL type: floats as they are (NaN included), integers rounded; an
// integer field keeps its old value where v is not finite (integers have no NaN).
void write_from_double(std::uint8_t* p, std::uint8_t type, double v) {
  auto put = [p](auto x) { std::memcpy(p, &x, sizeof(x)); };
  if (type == pcl::PCLPointField::FLOAT32) return put(static_cast<float>(v));
  if (type == pcl::PCLPointField::FLOAT64) return put(v);
  if (!std::isfinite(v)) return;
  const double r = std::nearbyint(v);
  switch (type) {
    case pcl::PCLPointField::INT8:
      return put(static_cast<std::int8_t>(std::clamp(r, -128.0, 127.0)));
    case pcl::PCLPointField::UINT8:
      return put(static_cast<std::uint8_t>(std::clamp(r, 0.0, 255.0)));
    case pcl::PCLPointField::INT16:
      return put(static_cast<std::int16_t>(std::clamp(r, -32768.0, 32767.0)));
    case pcl::PCLPointField::UINT16:
      return put(static_cast<std::uint16_t>(std::clamp(r, 0.0, 65535.0)));
    case pcl::PCLPointField::INT32:
      return put(static_cast<std::int32_t>(std::clamp(r, -2147483648.0, 2147483647.0)));
    case pcl::PCLPointField::UINT32:
      return put(static_cast<std::uint32_t>(std::clamp(r, 0.0, 4294967295.0)));
    case pcl::PCLPointField::INT64:
      return put(static_cast<std::int64_t>(std::clamp(r, -9.2e18, 9.2e18)));
    case pcl::PCLPointField::UINT64:
      return put(static_cast<std::uint64_t>(std::clamp(r, 0.0, 1.8e19)));
    default:
      return;
  }
}

// Runs `write` against a one-output set and commits it: the single-output writers.
template <class F>
void write_one(const std::string& path, F&& write) {
  OutputSet outputs;
  outputs.add(path, OutputKind::cloud);
  write(outputs);
  outputs.commit();
}

}  // namespace

void save_cloud_subset(OutputSet& outputs, const Cloud& cloud,
                       const std::vector<std::int32_t>& indices, const std::string& path) {
  if (!cloud.fields) fail(path, "the cloud has no fields");
  const pcl::PCLPointCloud2& in = cloud.fields->cloud;
  pcl::PCLPointCloud2 out;
  out.fields = in.fields;
  out.point_step = in.point_step;
  out.is_bigendian = in.is_bigendian;
  out.height = 1;
  out.width = static_cast<std::uint32_t>(indices.size());
  out.row_step = out.point_step * out.width;
  out.is_dense = false;
  out.data.resize(static_cast<std::size_t>(out.row_step));
  for (std::size_t j = 0; j < indices.size(); ++j) {
    const std::int64_t i = indices[j];
    if (i < 0 || i >= cloud.size())
      fail(path, "index " + std::to_string(i) + " is outside the cloud");
    std::memcpy(&out.data[j * out.point_step], &in.data[i * in.point_step], in.point_step);
  }
  encode(outputs, path, out);
}

void save_cloud_moved(OutputSet& outputs, const Cloud& cloud, const std::vector<float>& xyz,
                      const std::string& path) {
  if (!cloud.fields) fail(path, "the cloud has no fields");
  if (static_cast<std::int64_t>(xyz.size()) != cloud.size() * 3)
    fail(path, std::to_string(xyz.size() / 3) + " new positions for " +
                   std::to_string(cloud.size()) + " points");
  pcl::PCLPointCloud2 out = cloud.fields->cloud;
  const pcl::PCLPointField* f[3] = {&coordinate(path, out, "x"), &coordinate(path, out, "y"),
                                    &coordinate(path, out, "z")};
  const auto same = [](float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); };
  for (std::int64_t i = 0; i < cloud.size(); ++i) {
    const float* was = &cloud.xyz[i * 3];
    const float* now = &xyz[i * 3];
    // A point that did not move (not smoothed: not finite, no neighbors, no iterations) keeps
    // its record as stored; one that moved, its stored coordinates plus the move. Both exact
    // where the float offsets are not (float64 coordinates far from the origin).
    if (same(was[0], now[0]) && same(was[1], now[1]) && same(was[2], now[2])) continue;
    std::uint8_t* rec = out.data.data() + i * out.point_step;
    for (int a = 0; a < 3; ++a) {
      const double stored =
          cloud.stored.empty() ? double(was[a]) + cloud.origin[a] : cloud.stored[i * 3 + a];
      write_from_double(rec + f[a]->offset, f[a]->datatype,
                        stored + (double(now[a]) - double(was[a])));
    }
  }
  encode(outputs, path, out);
}

void save_cloud_with_fields(OutputSet& outputs, const Cloud& cloud,
                            const std::vector<AddedField>& added, const std::string& path) {
  if (!cloud.fields) fail(path, "the cloud has no fields");
  const pcl::PCLPointCloud2& in = cloud.fields->cloud;
  const std::uint64_t n = checked_points(path, in);
  if (static_cast<std::int64_t>(n) != cloud.size())
    fail(path, "the stored fields hold " + std::to_string(n) + " points, the cloud " +
                   std::to_string(cloud.size()));
  pcl::PCLPointCloud2 out;
  out.header = in.header;
  out.width = in.width;
  out.height = in.height;
  out.is_bigendian = in.is_bigendian;
  out.is_dense = false;
  out.fields = in.fields;
  out.point_step = in.point_step;
  std::vector<std::size_t> where;  // the field each added one goes to
  for (const AddedField& a : added) {
    if (!a.values && n > 0) fail(path, "no values for field '" + a.name + "'");
    std::size_t f = 0;
    while (f < out.fields.size() && out.fields[f].name != a.name) ++f;
    if (f < out.fields.size() && out.fields[f].count != 1)
      fail(path, "the cloud's field '" + a.name + "' holds " + std::to_string(out.fields[f].count) +
                     " values per point, not 1");
    if (f < out.fields.size() && out.fields[f].datatype != pcl::PCLPointField::FLOAT32 &&
        out.fields[f].datatype != pcl::PCLPointField::FLOAT64) {
      // A field of that name in an integer type (which rounded and clamped the values: normals
      // of 0 and -1) becomes float32, in its place among the fields; its old bytes stay in the
      // record, unwritten.
      out.fields[f].datatype = pcl::PCLPointField::FLOAT32;
      out.fields[f].offset = out.point_step;
      out.point_step += sizeof(float);
    }
    if (f == out.fields.size()) {
      pcl::PCLPointField field;
      field.name = a.name;
      field.offset = out.point_step;
      field.datatype = pcl::PCLPointField::FLOAT32;
      field.count = 1;
      out.fields.push_back(field);
      out.point_step += sizeof(float);
    }
    where.push_back(f);
  }
  out.row_step = out.point_step * out.width;
  out.data.resize(static_cast<std::size_t>(n) * out.point_step);
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint8_t* rec = out.data.data() + i * out.point_step;
    std::memcpy(rec, in.data.data() + i * in.point_step, in.point_step);
    for (std::size_t j = 0; j < added.size(); ++j) {
      const pcl::PCLPointField& f = out.fields[where[j]];
      write_from_double(rec + f.offset, f.datatype, added[j].values[i * added[j].stride]);
    }
  }
  encode(outputs, path, out);
}

void save_xyz(OutputSet& outputs, const std::string& path, const std::vector<float>& xyz,
              std::uint32_t width) {
  PCNN_EXPECTS(xyz.size() % 3 == 0 && xyz.size() / 3 <= UINT32_MAX,
               "save_xyz '" + path + "': " + std::to_string(xyz.size()) +
                   " floats are not a whole number of points (3 floats each, at most 2^32 - 1)");
  pcl::PCLPointCloud2 pc;
  const std::uint32_t n = static_cast<std::uint32_t>(xyz.size() / 3);
  if (width > 0 && n % width != 0)
    fail(path, std::to_string(n) + " points do not make rows of " + std::to_string(width));
  pc.width = width > 0 ? width : n;
  pc.height = width > 0 ? n / width : 1;
  pc.is_dense = std::all_of(xyz.begin(), xyz.end(), [](float v) { return std::isfinite(v); });
  pc.point_step = 12;
  pc.row_step = 12 * pc.width;
  const char* names[3] = {"x", "y", "z"};
  for (std::uint32_t a = 0; a < 3; ++a) {
    pcl::PCLPointField f;
    f.name = names[a];
    f.offset = 4 * a;
    f.datatype = pcl::PCLPointField::FLOAT32;
    f.count = 1;
    pc.fields.push_back(f);
  }
  pc.data.resize(xyz.size() * sizeof(float));
  std::memcpy(pc.data.data(), xyz.data(), pc.data.size());
  encode(outputs, path, pc);
}

void save_cloud_subset(const Cloud& cloud, const std::vector<std::int32_t>& indices,
                       const std::string& path) {
  write_one(path, [&](OutputSet& o) { save_cloud_subset(o, cloud, indices, path); });
}

void save_cloud_moved(const Cloud& cloud, const std::vector<float>& xyz, const std::string& path) {
  write_one(path, [&](OutputSet& o) { save_cloud_moved(o, cloud, xyz, path); });
}

void save_xyz_pcd(const std::string& path, const std::vector<float>& xyz, std::uint32_t width) {
  write_one(path, [&](OutputSet& o) { save_xyz(o, path, xyz, width); });
}

}  // namespace pcnn
