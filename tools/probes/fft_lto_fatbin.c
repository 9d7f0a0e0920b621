/* Build on a GPU machine: nvcc FILE -o probe -lcufft -lnvrtc -lcudart (the fatbin probe takes a
 * fatbin of fft_lto_callback.cu: nvcc -arch=sm_90 -dlto -rdc=true -fatbin fft_lto_callback.cu).
 * On an H100 with CUDA 13.0 (cuFFT 12.0.0.61, driver 580.159) cufftXtSetJITCallback succeeds and
 * cufftMakePlan1d then returns CUFFT_INTERNAL_ERROR (5) for every form of the callback. */
// Probe: a cuFFT JIT load callback from an nvcc-made fatbin (LTO-IR).
#include <stdio.h>
#include <stdlib.h>
#include <cufft.h>
#include <cufftXt.h>
#include <cuda_runtime.h>
int main(int argc, char** argv) {
  FILE* f = fopen(argv[1], "rb"); fseek(f, 0, SEEK_END); long sz = ftell(f); fseek(f, 0, SEEK_SET);
  char* ir = malloc(sz); fread(ir, 1, sz, f); fclose(f);
  float* w; cudaMalloc((void**)&w, 256 * 4); void* data = w;
  cufftHandle plan; cufftCreate(&plan);
  cufftResult c = cufftXtSetJITCallback(plan, "window_load", ir, sz, CUFFT_CB_LD_COMPLEX, &data);
  size_t ws; cufftResult m = cufftMakePlan1d(plan, 256, CUFFT_C2C, 4, &ws);
  printf("%s: %ld bytes, SetJITCallback %d, MakePlan1d %d\n", argv[1], sz, (int)c, (int)m);
  return 0;
}
