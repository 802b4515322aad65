// pcnn — the one forward declaration of CUDA's stream type, so that public headers need no CUDA
// header. Identical to the CUDA runtime's own declaration; either may come first.
#pragma once

struct CUstream_st;
using cudaStream_t = CUstream_st*;
