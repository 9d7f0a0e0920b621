/* Build on a GPU machine: gcc module_load.c -o module_load -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcuda -lnvrtc
 * Run with CUDA_MODULE_LOADING=LAZY and =EAGER. */
/* Does loading a module wait for kernels already running? A 200 ms kernel runs on one stream;
 * meanwhile this thread loads another module several ways and times each call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda.h>
#include <nvrtc.h>
#define CK(x) do { int r_ = (int)(x); if (r_) { printf("%s failed: %d (line %d)\n", #x, r_, __LINE__); exit(1); } } while (0)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static char *compile(const char *src, size_t *n, int cubin) {
  nvrtcProgram p; CK(nvrtcCreateProgram(&p, src, "k.cu", 0, NULL, NULL));
  const char *opts[] = {cubin ? "-arch=sm_90" : "-arch=compute_90"};
  if (nvrtcCompileProgram(p, 1, opts)) { size_t l; nvrtcGetProgramLogSize(p, &l); char *b = malloc(l); nvrtcGetProgramLog(p, b); printf("%s\n", b); exit(1); }
  char *out;
  if (cubin) { CK(nvrtcGetCUBINSize(p, n)); out = malloc(*n); CK(nvrtcGetCUBIN(p, out)); }
  else { CK(nvrtcGetPTXSize(p, n)); out = malloc(*n); CK(nvrtcGetPTX(p, out)); }
  return out;
}
static const char *SPIN = "extern \"C\" __global__ void spin(long long c) { long long t = clock64(); while (clock64() - t < c) {} }";
static char *source(int i) {
  char *s = malloc(512);
  snprintf(s, 512, "__device__ float g%d[1024]; extern \"C\" __global__ void add%d(float* x) { x[threadIdx.x] += %d.0f + g%d[threadIdx.x]; }", i, i, i, i);
  return s;
}
int main(void) {
  CUdevice dev; CUcontext ctx; CUstream s;
  CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  size_t n; char *spin_bin = compile(SPIN, &n, 1);
  CUmodule sm; CUfunction spin; CK(cuModuleLoadData(&sm, spin_bin)); CK(cuModuleGetFunction(&spin, sm, "spin"));
  long long cycles = 400000000LL; /* about 200 ms at 1.98 GHz */
  void *args[] = {&cycles};
  CUevent a, b; CK(cuEventCreate(&a, 0)); CK(cuEventCreate(&b, 0));
  CK(cuEventRecord(a, s)); CK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, args, NULL)); CK(cuEventRecord(b, s));
  CK(cuStreamSynchronize(s)); float ms; CK(cuEventElapsedTime(&ms, a, b)); printf("spin kernel: %.1f ms\n", ms);
  const char *ways[] = {"cuModuleLoadData(cubin)", "cuModuleLoadData(cubin)+GetFunction", "cuLibraryLoadData(cubin)", "cuLibraryLoadData(cubin)+GetKernel+KernelGetFunction",
                        "cuModuleLoadData(ptx)", "cuLinkCreate/AddData(ptx)/Complete", "cuModuleLoadData(cubin)+GetGlobal",
                        "cuLibraryLoadData+GetKernel", "cuLibraryLoadData+GetKernel+launch(CUkernel) on s2", "cuLibraryLoadData+GetGlobal",
                        "cuLibraryLoadData+GetKernel+KernelGetAttribute", "cuLibraryLoadData+GetKernel+KernelSetAttribute(smem)"};
  CUstream s2; CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CUdeviceptr xb; CK(cuMemAlloc(&xb, 4096)); CK(cuMemsetD8(xb, 0, 4096));
  for (int w = 0; w < 12; w++) {
    for (int idle = 1; idle >= 0; idle--) {
      char *src = source(w * 2 + idle);
      size_t len; char *img = compile(src, &len, w == 4 || w == 5 ? 0 : 1);
      char fname[32]; snprintf(fname, 32, "add%d", w * 2 + idle);
      char gname[32]; snprintf(gname, 32, "g%d", w * 2 + idle);
      if (!idle) CK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
      double t0 = now();
      CUmodule m; CUlibrary l; CUfunction f; CUkernel k; CUdeviceptr gp; size_t gs;
      switch (w) {
        case 0: CK(cuModuleLoadData(&m, img)); break;
        case 1: CK(cuModuleLoadData(&m, img)); CK(cuModuleGetFunction(&f, m, fname)); break;
        case 2: CK(cuLibraryLoadData(&l, img, NULL, NULL, 0, NULL, NULL, 0)); break;
        case 3: CK(cuLibraryLoadData(&l, img, NULL, NULL, 0, NULL, NULL, 0)); CK(cuLibraryGetKernel(&k, l, fname)); CK(cuKernelGetFunction(&f, k)); break;
        case 4: CK(cuModuleLoadData(&m, img)); break;
        case 5: { CUlinkState ls; void *out; size_t outn; CK(cuLinkCreate(0, NULL, NULL, &ls)); CK(cuLinkAddData(ls, CU_JIT_INPUT_PTX, img, len, "k.ptx", 0, NULL, NULL)); CK(cuLinkComplete(ls, &out, &outn)); CK(cuLinkDestroy(ls)); break; }
        case 6: CK(cuModuleLoadData(&m, img)); CK(cuModuleGetGlobal(&gp, &gs, m, gname)); break;
        case 7: CK(cuLibraryLoadData(&l, img, NULL, NULL, 0, NULL, NULL, 0)); CK(cuLibraryGetKernel(&k, l, fname)); break;
        case 8: { CK(cuLibraryLoadData(&l, img, NULL, NULL, 0, NULL, NULL, 0)); CK(cuLibraryGetKernel(&k, l, fname));
                  void *a2[] = {&xb}; CK(cuLaunchKernel((CUfunction)k, 1, 1, 1, 32, 1, 1, 0, s2, a2, NULL));
                  double tl = now(); CK(cuStreamSynchronize(s2)); printf("   (launch returned at %.3f ms; s2 done %.3f ms later)\n", tl - t0, now() - tl); break; }
        case 9: CK(cuLibraryLoadData(&l, img, NULL, NULL, 0, NULL, NULL, 0)); CK(cuLibraryGetGlobal(&gp, &gs, l, gname)); break;
        case 10: { int v; CK(cuLibraryLoadData(&l, img, NULL, NULL, 0, NULL, NULL, 0)); CK(cuLibraryGetKernel(&k, l, fname)); CK(cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, k, dev)); break; }
        case 11: CK(cuLibraryLoadData(&l, img, NULL, NULL, 0, NULL, NULL, 0)); CK(cuLibraryGetKernel(&k, l, fname)); CK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100000, k, dev)); break;
      }
      double t1 = now();
      CUresult q = cuStreamQuery(s);
      printf("%-55s %s: %9.3f ms (spin still running after: %s)\n", ways[w], idle ? "idle" : "busy", t1 - t0, q == CUDA_ERROR_NOT_READY ? "yes" : "no");
      CK(cuStreamSynchronize(s));
    }
  }
  return 0;
}
