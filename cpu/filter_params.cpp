// Checks of the outlier filters' parameters, shared by the GPU filters, the PCL baseline and
// the command line.
#include <cmath>
#include <string>

#include "pcnn/error.hpp"
#include "pcnn/filters.hpp"
#include "pcnn/knn.hpp"

namespace pcnn {

void validate(const SorParams& params) {
  PCNN_EXPECTS(params.mean_k >= 1 && params.mean_k <= kMaxK, "SOR: mean_k must be between 1 and " +
                                                                 std::to_string(kMaxK) + ", got " +
                                                                 std::to_string(params.mean_k));
  PCNN_EXPECTS(std::isfinite(params.std_mul), "SOR: std_mul must be finite");
}

void validate(const RorParams& params) {
  PCNN_EXPECTS(std::isfinite(params.radius) && params.radius > 0,
               "ROR: radius must be positive and finite");
  PCNN_EXPECTS(params.min_neighbors >= 0 && params.min_neighbors <= kMaxK,
               "ROR: min_neighbors must be between 0 and " + std::to_string(kMaxK) + ", got " +
                   std::to_string(params.min_neighbors));
}

}  // namespace pcnn
