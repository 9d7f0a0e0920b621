/* Build on a GPU machine: gcc module_load_thread.c -o module_load_thread -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcuda -lnvrtc -lpthread
 * Run it plain, then with any argument (another stream kept busy for 600 ms). */
/* A module load on a loader thread while a 200 ms kernel runs: does it hold up other threads'
 * launches, and does work submitted meanwhile keep it waiting? */
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#include <cuda.h>
#include <nvrtc.h>
#define CK(x) do { int r_ = (int)(x); if (r_) { printf("%s failed: %d (line %d)\n", #x, r_, __LINE__); exit(1); } } while (0)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static char *compile(const char *src) {
  nvrtcProgram p; size_t n; CK(nvrtcCreateProgram(&p, src, "k.cu", 0, NULL, NULL));
  const char *opts[] = {"-arch=sm_90"}; CK(nvrtcCompileProgram(p, 1, opts));
  CK(nvrtcGetCUBINSize(p, &n)); char *out = malloc(n); CK(nvrtcGetCUBIN(p, out)); return out;
}
static CUcontext ctx; static char *img; static double t0, loaded_at;
static void *loader(void *arg) {
  (void)arg; CK(cuCtxSetCurrent(ctx)); CUmodule m; CK(cuModuleLoadData(&m, img)); loaded_at = now() - t0; return NULL;
}
int main(int argc, char **argv) {
  int keep_busy = argc > 1;
  CUdevice dev; CUstream s, s2;
  CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)); CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  char *k = compile("extern \"C\" __global__ void spin(long long c) { long long t = clock64(); while (clock64() - t < c) {} }\n"
                    "extern \"C\" __global__ void tiny(float* x) { x[threadIdx.x] += 1.0f; }");
  img = compile("extern \"C\" __global__ void other(float* x) { x[threadIdx.x] *= 2.0f; }");
  CUmodule sm; CUfunction spin, tiny; CK(cuModuleLoadData(&sm, k)); CK(cuModuleGetFunction(&spin, sm, "spin")); CK(cuModuleGetFunction(&tiny, sm, "tiny"));
  CUdeviceptr x; CK(cuMemAlloc(&x, 4096)); CK(cuMemsetD8(x, 0, 4096)); CK(cuCtxSynchronize());
  long long cycles = 400000000LL; void *sa[] = {&cycles}; void *ta[] = {&x};
  CK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, sa, NULL));
  t0 = now();
  pthread_t th; pthread_create(&th, NULL, loader, NULL);
  usleep(10000);
  /* Main thread: launches of an already-loaded kernel on another stream, each synchronized. */
  double worst = 0; int n = 0;
  while (now() - t0 < (keep_busy ? 600 : 50)) {
    double a = now();
    CK(cuLaunchKernel(tiny, 1, 1, 1, 32, 1, 1, 0, s2, ta, NULL)); CK(cuStreamSynchronize(s2));
    double d = now() - a; if (d > worst) worst = d; n++;
    if (!keep_busy && n > 100) break;
  }
  printf("%s: %d launches+syncs on s2 during the load, worst %.3f ms (first at +10 ms)\n", keep_busy ? "s2 kept busy 600 ms" : "s2 briefly", n, worst);
  pthread_join(th, NULL);
  printf("the loader thread's cuModuleLoadData returned at %.1f ms\n", loaded_at);
  CK(cuCtxSynchronize());
  return 0;
}
