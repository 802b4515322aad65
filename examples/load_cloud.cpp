// The io component (pcnn::io): write a small cloud as binary .pcd, read it back through pcnn's
// input gate, find each point's nearest neighbor and write the indices as a 2-D .npy and the
// neighbor counts within 0.3 m as a 1-D .npy. Usage: load_cloud [DIR] (default: the current one).
#include <pcnn/error.hpp>
#include <pcnn/index.hpp>
#include <pcnn/io.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : ".";
  try {
    // A 10 x 10 grid, 0.25 m apart.
    std::vector<float> xyz;
    for (int i = 0; i < 10; ++i)
      for (int j = 0; j < 10; ++j) xyz.insert(xyz.end(), {0.25f * i, 0.25f * j, 0.f});
    pcnn::save_xyz_pcd(dir + "/grid.pcd", xyz);

    const pcnn::Cloud cloud = pcnn::load_cloud(dir + "/grid.pcd");
    pcnn::IndexOptions options;
    options.backend = pcnn::Backend::cpu;
    pcnn::Index index(cloud.view(), options);
    const pcnn::KnnResult nn = index.self_knn({1, true});
    const pcnn::RadiusResult r = index.self_radius({0.3, true});
    std::vector<std::int32_t> counts(static_cast<std::size_t>(r.rows));
    for (std::int64_t q = 0; q < r.rows; ++q) counts[q] = static_cast<std::int32_t>(r.count(q));

    pcnn::OutputSet outputs;  // both written, or neither
    outputs.add(dir + "/nearest.npy", pcnn::OutputKind::array);
    outputs.add(dir + "/counts.npy", pcnn::OutputKind::array);
    pcnn::write_array(outputs, dir + "/nearest.npy", nn.indices.data(), nn.rows, nn.k);
    pcnn::write_vector(outputs, dir + "/counts.npy", counts.data(), r.rows, "count");
    outputs.commit();
    std::printf(
        "read %lld points (%s); point 0's nearest is %d; %d neighbors within 0.3 m of "
        "point 11\n",
        static_cast<long long>(cloud.size()), cloud.coordinate_type.c_str(), nn.indices[0],
        counts[11]);
  } catch (const pcnn::error& e) {
    std::fprintf(stderr, "pcnn: %s\n", e.what());
    return 1;
  }
}
