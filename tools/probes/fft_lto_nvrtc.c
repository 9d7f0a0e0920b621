/* Build on a GPU machine: nvcc FILE -o probe -lcufft -lnvrtc -lcudart (the fatbin probe takes a
 * fatbin of fft_lto_callback.cu: nvcc -arch=sm_90 -dlto -rdc=true -fatbin fft_lto_callback.cu).
 * On an H100 with CUDA 13.0 (cuFFT 12.0.0.61, driver 580.159) cufftXtSetJITCallback succeeds and
 * cufftMakePlan1d then returns CUFFT_INTERNAL_ERROR (5) for every form of the callback. */
// Probe: NVRTC LTO-IR for a cuFFT JIT load callback, with several arch options.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <nvrtc.h>
#include <cufft.h>
#include <cufftXt.h>
#include <cuda_runtime.h>
static const char* SRC =
 "extern \"C\" __device__ float2 window_load(void* in, unsigned long long i, void* w, void* shared) {\n"
 "  float2 v = ((float2*)in)[i]; float s = ((float*)w)[i % 256]; return make_float2(v.x*s, v.y*s); }\n";
int try_one(const char* arch, int rdc) {
  nvrtcProgram p; nvrtcCreateProgram(&p, SRC, "cb.cu", 0, 0, 0);
  const char* opts[3]; int n = 0; opts[n++] = "-dlto"; if (rdc) opts[n++] = "-rdc=true"; opts[n++] = arch;
  nvrtcResult r = nvrtcCompileProgram(p, n, opts);
  size_t ls; nvrtcGetProgramLogSize(p, &ls); char* log = malloc(ls + 1); nvrtcGetProgramLog(p, log); 
  if (r != NVRTC_SUCCESS) { printf("%s rdc=%d: compile %s %s\n", arch, rdc, nvrtcGetErrorString(r), log); return 1; }
  size_t sz; nvrtcGetLTOIRSize(p, &sz); char* ir = malloc(sz); nvrtcGetLTOIR(p, ir);
  float* w; cudaMalloc((void**)&w, 256 * 4);
  cufftHandle plan; cufftResult c = cufftCreate(&plan);
  void* data = w;
  c = cufftXtSetJITCallback(plan, "window_load", ir, sz, CUFFT_CB_LD_COMPLEX, &data);
  printf("%s rdc=%d: lto %zu bytes, SetJITCallback %d", arch, rdc, sz, (int)c);
  size_t ws; c = cufftMakePlan1d(plan, 256, CUFFT_C2C, 4, &ws);
  printf(", MakePlan1d %d\n", (int)c);
  cufftDestroy(plan); cudaFree(w);
  return 0;
}
int main() {
  int v; cufftGetVersion(&v); int a, b; nvrtcVersion(&a, &b); printf("cufft %d nvrtc %d.%d\n", v, a, b);
  try_one("-arch=sm_90", 1); try_one("-arch=compute_90", 1); try_one("-arch=lto_90", 0); try_one("-arch=sm_90", 0);
  return 0;
}
