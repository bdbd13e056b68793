// One (dtype, head dim) of the decode kernels per file, so that the build parallelises.
#include "flash_decode/flash_decode_launch.h"

template void cute_ops::run_flash_decode_<cutlass::half_t, 64>(const cute_ops::FlashDecodeParams&, cudaStream_t);
