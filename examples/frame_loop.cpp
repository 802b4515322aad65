// A robotics frame loop: the map is indexed once on the GPU; every new scan asks it for each
// scan point's nearest map points (the matching step of ICP, for instance), on the caller's stream.
#include <cuda_runtime.h>
#include <pcnn/error.hpp>
#include <pcnn/knn_index.hpp>
#include <pcnn/synthetic.hpp>

#include <cstdio>

int main() {
  try {
    const std::vector<float> map =
        pcnn::make_synthetic_cloud(pcnn::SyntheticKind::lidar, 500000, 1);
    cudaStream_t stream = nullptr;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
      std::printf("no GPU here: cannot create a CUDA stream\n");
      return 0;
    }
    {
      const pcnn::KnnIndex index({map.data(), static_cast<std::int64_t>(map.size() / 3), 3},
                                 stream);
      for (int frame = 0; frame < 5; ++frame) {
        // A new scan from the sensor (here: a synthetic one, shifted a little every frame).
        std::vector<float> scan =
            pcnn::make_synthetic_cloud(pcnn::SyntheticKind::lidar, 60000, 10 + frame);
        for (std::size_t i = 0; i < scan.size(); i += 3) scan[i] += 0.05f * frame;
        pcnn::GpuKnnTimings t;
        const pcnn::KnnResult nn =
            index.query({scan.data(), static_cast<std::int64_t>(scan.size() / 3), 3},
                        {/*k=*/1, /*exclude_self=*/false}, &t, stream);
        double sum = 0;
        for (float d : nn.sqdist) sum += d;
        std::printf("frame %d: %lld points, mean squared match distance %.5f m^2, search %.3f ms\n",
                    frame, static_cast<long long>(nn.rows), sum / nn.rows,
                    t.build_ms + t.search_ms);
      }
    }  // the index is gone before its stream
    cudaStreamDestroy(stream);
  } catch (const pcnn::no_device_error& e) {
    std::printf("no GPU here: %s\n", e.what());
  }
}
