#include <cufft.h>
extern "C" __device__ cufftComplex window_load(void* in, unsigned long long i, void* w, void* shared) {
  cufftComplex v = ((cufftComplex*)in)[i]; float s = ((float*)w)[i % 256]; v.x *= s; v.y *= s; return v; }
