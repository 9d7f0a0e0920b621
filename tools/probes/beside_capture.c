/* Build on a GPU machine:
 *   gcc beside_capture.c -O2 -o beside_capture -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcurand -lcudart -lcuda -lpthread
 * Run: ./beside_capture CASE   (CUDA_MODULE_LOADING=EAGER in the environment to compare)
 *
 * Which work on one thread fails, or breaks the capture, while another thread has a capture
 * open (thread-local mode, as cusched's recordings) on a stream of the same context? Thread A
 * begins a capture on its stream, enqueues a memset, tells thread B to go, waits for B to
 * finish, and ends the capture. B, on a stream of its own:
 *   curand-cold     curandCreateGenerator (Philox), curandSetStream, curandGenerateUniform
 *   curand-create   curandCreateGenerator only (the generate runs after the capture ended)
 *   curand-warm     the generator made and used once before A begins; B only generates
 *   curand-relaxed  as curand-warm, with B's capture mode relaxed (cudaThreadExchangeStreamCaptureMode)
 *   curand-self     no thread B: A generates with a warm generator on its own capturing stream
 *   xorwow-cold     as curand-cold with the default XORWOW generator
 *   module          cuModuleLoadData of a small PTX kernel, then a launch of it
 *   module-warm     the module loaded and launched once before A begins; B launches again
 * Prints each call's status, then the capture's end. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <curand.h>

static const char *CASE;
static cudaStream_t sa, sb;
static int *buf;
static float *out;
static curandGenerator_t warm_gen;
static CUfunction warm_fn;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int go = 0, done = 0;

static const char *PTX =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry bump(.param .u64 p) {\n .reg .b64 %rd<3>;\n .reg .b32 %r<3>;\n"
    " ld.param.u64 %rd1, [p];\n cvta.to.global.u64 %rd2, %rd1;\n ld.global.u32 %r1, [%rd2];\n"
    " add.s32 %r2, %r1, 1;\n st.global.u32 [%rd2], %r2;\n ret;\n}\n";

static const char *cu_name(CUresult r) {
  const char *s = NULL;
  cuGetErrorName(r, &s);
  return s ? s : "?";
}

static void wait_flag(int *flag) {
  pthread_mutex_lock(&mu);
  while (!*flag) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
}

static void set_flag(int *flag) {
  pthread_mutex_lock(&mu);
  *flag = 1;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

static void load_and_launch(CUfunction *fn, int launch) {
  CUmodule m;
  CUresult r = cuModuleLoadData(&m, PTX);
  printf("B: cuModuleLoadData -> %s\n", cu_name(r));
  if (r) return;
  r = cuModuleGetFunction(fn, m, "bump");
  printf("B: cuModuleGetFunction -> %s\n", cu_name(r));
  if (r || !launch) return;
  void *args[] = {&buf};
  r = cuLaunchKernel(*fn, 1, 1, 1, 1, 1, 1, 0, (CUstream)sb, args, NULL);
  printf("B: cuLaunchKernel -> %s\n", cu_name(r));
}

static void *thread_b(void *unused) {
  (void)unused;
  cudaSetDevice(0);
  wait_flag(&go);
  curandGenerator_t g;
  if (!strcmp(CASE, "curand-cold") || !strcmp(CASE, "xorwow-cold") || !strcmp(CASE, "curand-create")) {
    curandRngType_t t = strcmp(CASE, "xorwow-cold") ? CURAND_RNG_PSEUDO_PHILOX4_32_10 : CURAND_RNG_PSEUDO_XORWOW;
    printf("B: curandCreateGenerator -> %d\n", curandCreateGenerator(&g, t));
    printf("B: curandSetStream -> %d\n", curandSetStream(g, sb));
    if (strcmp(CASE, "curand-create")) {
      printf("B: curandGenerateUniform -> %d\n", curandGenerateUniform(g, out, 4096));
      printf("B: cudaStreamSynchronize -> %s\n", cudaGetErrorName(cudaStreamSynchronize(sb)));
    }
  } else if (!strcmp(CASE, "curand-relaxed")) {
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    printf("B: cudaThreadExchangeStreamCaptureMode -> %s\n", cudaGetErrorName(cudaThreadExchangeStreamCaptureMode(&mode)));
    printf("B: curandGenerateUniform (warm, relaxed) -> %d\n", curandGenerateUniform(warm_gen, out, 4096));
    printf("B: cudaStreamSynchronize -> %s\n", cudaGetErrorName(cudaStreamSynchronize(sb)));
  } else if (!strcmp(CASE, "curand-warm")) {
    printf("B: curandGenerateUniform (warm) -> %d\n", curandGenerateUniform(warm_gen, out, 4096));
    printf("B: cudaStreamSynchronize -> %s\n", cudaGetErrorName(cudaStreamSynchronize(sb)));
  } else if (!strcmp(CASE, "module")) {
    CUfunction fn;
    load_and_launch(&fn, 1);
    printf("B: cudaStreamSynchronize -> %s\n", cudaGetErrorName(cudaStreamSynchronize(sb)));
  } else if (!strcmp(CASE, "module-warm")) {
    void *args[] = {&buf};
    printf("B: cuLaunchKernel (warm) -> %s\n", cu_name(cuLaunchKernel(warm_fn, 1, 1, 1, 1, 1, 1, 0, (CUstream)sb, args, NULL)));
    printf("B: cudaStreamSynchronize -> %s\n", cudaGetErrorName(cudaStreamSynchronize(sb)));
  }
  set_flag(&done);
  if (!strcmp(CASE, "curand-create")) {
    usleep(200000);
    printf("B: curandGenerateUniform (after the capture) -> %d\n", curandGenerateUniform(g, out, 4096));
    printf("B: cudaStreamSynchronize -> %s\n", cudaGetErrorName(cudaStreamSynchronize(sb)));
  }
  return NULL;
}

int main(int argc, char **argv) {
  CASE = argc > 1 ? argv[1] : "curand-cold";
  printf("case %s, CUDA_MODULE_LOADING=%s\n", CASE, getenv("CUDA_MODULE_LOADING") ? getenv("CUDA_MODULE_LOADING") : "(unset)");
  cudaSetDevice(0);
  cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking);
  cudaMalloc((void **)&buf, 1 << 20);
  cudaMalloc((void **)&out, 4096 * sizeof(float));
  if (!strcmp(CASE, "curand-warm") || !strcmp(CASE, "curand-relaxed") || !strcmp(CASE, "curand-self")) {
    curandCreateGenerator(&warm_gen, CURAND_RNG_PSEUDO_PHILOX4_32_10);
    curandSetStream(warm_gen, sb);
    printf("pre: curandGenerateUniform -> %d\n", curandGenerateUniform(warm_gen, out, 4096));
    cudaStreamSynchronize(sb);
  }
  if (!strcmp(CASE, "module-warm")) {
    load_and_launch(&warm_fn, 1);
    cudaStreamSynchronize(sb);
  }
  if (!strcmp(CASE, "curand-self")) {
    curandSetStream(warm_gen, sa);
    printf("A: cudaStreamBeginCapture -> %s\n", cudaGetErrorName(cudaStreamBeginCapture(sa, cudaStreamCaptureModeThreadLocal)));
    printf("A: curandGenerateUniform (captured) -> %d\n", curandGenerateUniform(warm_gen, out, 4096));
    cudaGraph_t g = NULL;
    printf("A: cudaStreamEndCapture -> %s\n", cudaGetErrorName(cudaStreamEndCapture(sa, &g)));
    cudaGraphExec_t ge;
    if (g) {
      printf("A: cudaGraphInstantiate -> %s\n", cudaGetErrorName(cudaGraphInstantiate(&ge, g, 0)));
      printf("A: cudaGraphLaunch -> %s\n", cudaGetErrorName(cudaGraphLaunch(ge, sa)));
      printf("A: cudaStreamSynchronize -> %s\n", cudaGetErrorName(cudaStreamSynchronize(sa)));
    }
    return 0;
  }
  pthread_t b;
  pthread_create(&b, NULL, thread_b, NULL);
  printf("A: cudaStreamBeginCapture -> %s\n", cudaGetErrorName(cudaStreamBeginCapture(sa, cudaStreamCaptureModeThreadLocal)));
  printf("A: cudaMemsetAsync (captured) -> %s\n", cudaGetErrorName(cudaMemsetAsync(buf, 0, 1024, sa)));
  set_flag(&go);
  wait_flag(&done);
  cudaGraph_t g = NULL;
  printf("A: cudaStreamEndCapture -> %s\n", cudaGetErrorName(cudaStreamEndCapture(sa, &g)));
  pthread_join(b, NULL);
  printf("device after: %s\n", cudaGetErrorName(cudaDeviceSynchronize()));
  return 0;
}
