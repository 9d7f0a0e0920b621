/* Build on a GPU machine: gcc host_tax.c -O2 -o host_tax -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcuda
 * Run: ./host_tax [copies per round] (two GPUs: a peer copy 0 -> 1; one GPU: a device copy).
 *
 * What does host work between small copies cost, and does it matter where it sits and what
 * kind it is? A tracked launch adds its bookkeeping around the driver call: some of it plain
 * loads and stores, some of it locked read-modify-writes (mutexes, reference counts). Each row
 * enqueues 4 KiB copies back to back on one stream of GPU 0 and adds, per copy:
 *   raw               nothing
 *   event             cuEventRecord after the copy (the floor of a tracked copy)
 *   plain N           N ns of register arithmetic after the copy (no memory traffic)
 *   locked K after    K locked adds on a private cache line right after the copy
 *   plain+locked K    150 ns of arithmetic, then K locked adds (the adds away from the call)
 *   locked K before   K locked adds right before the copy
 *   event+locked K    the copy, K locked adds, then the event (locks between the two calls)
 *   event, locked K   the copy, the event, then K locked adds
 * It prints each row's median round per copy, the paired median difference to raw, and the
 * host's own time per copy (the loop without the final synchronize): where that is below the
 * whole time, the GPU bounds the loop. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cuda.h>
#define CK(x) do { int r_ = (int)(x); if (r_) { printf("%s failed: %d (line %d)\n", #x, r_, __LINE__); exit(1); } } while (0)
static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static double median(double *v, int n) { qsort(v, n, sizeof *v, cmp); return v[n / 2]; }

static volatile uint64_t sink;
static _Alignas(128) uint64_t line[16];
/* Register arithmetic: `n` dependent multiply-adds, no memory traffic. */
static uint64_t spin(uint64_t n) {
  uint64_t x = sink;
  for (uint64_t i = 0; i < n; i++) { x = x * 6364136223846793005ull + 1442695040888963407ull; __asm__ volatile("" : "+r"(x)); }
  return x;
}
static void locked(int k) { for (int i = 0; i < k; i++) __atomic_fetch_add(&line[0], 1, __ATOMIC_SEQ_CST); }

enum { RAW, EVENT, PLAIN150, PLAIN400, LOCK1, LOCK8, PLAIN_LOCK8, LOCK8_BEFORE, EV_MID_LOCK8, EV_THEN_LOCK8, ROWS };
static const char *NAMES[ROWS] = {"raw", "event", "plain 150 ns", "plain 400 ns", "locked 1 after", "locked 8 after",
                                  "plain+locked 8", "locked 8 before", "event+locked 8", "event, locked 8"};
#define ROUNDS 9

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20000;
  /* Spin iterations per ns. */
  double t0 = now_us();
  sink = spin(20000000);
  double per_ns = 20000000 / ((now_us() - t0) * 1e3);
  uint64_t n150 = (uint64_t)(150 * per_ns), n400 = (uint64_t)(400 * per_ns);
  int ndev;
  CK(cuInit(0));
  CK(cuDeviceGetCount(&ndev));
  CUdevice d0, d1;
  CUcontext c0, c1;
  CK(cuDeviceGet(&d0, 0));
  CK(cuDevicePrimaryCtxRetain(&c0, d0));
  int peer = ndev > 1;
  if (peer) {
    CK(cuDeviceGet(&d1, 1));
    CK(cuDevicePrimaryCtxRetain(&c1, d1));
    CK(cuCtxSetCurrent(c1));
    CK(cuCtxEnablePeerAccess(c0, 0));
  }
  CK(cuCtxSetCurrent(c0));
  if (peer) CK(cuCtxEnablePeerAccess(c1, 0));
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr src, dst;
  size_t bytes = 4096;
  CK(cuMemAlloc(&src, bytes));
  if (peer) {
    CK(cuCtxSetCurrent(c1));
    CK(cuMemAlloc(&dst, bytes));
    CK(cuCtxSetCurrent(c0));
  } else {
    CK(cuMemAlloc(&dst, bytes));
  }
  CUevent ev;
  CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  printf("%s, %d copies of %zu bytes per round, %d rounds; %.2f spin iterations per ns\n",
         peer ? "peer copy GPU 0 -> GPU 1" : "device copy", n, bytes, ROUNDS, per_ns);
  double t[ROWS][ROUNDS], h[ROWS][ROUNDS], diff[ROWS][ROUNDS];
  for (int round = -1; round < ROUNDS; round++) {
    for (int row = 0; row < ROWS; row++) {
      CK(cuStreamSynchronize(s));
      double start = now_us();
      for (int i = 0; i < n; i++) {
        if (row == LOCK8_BEFORE) locked(8);
        if (peer) CK(cuMemcpyPeerAsync(dst, c1, src, c0, bytes, s));
        else CK(cuMemcpyDtoDAsync(dst, src, bytes, s));
        switch (row) {
        case EVENT: CK(cuEventRecord(ev, s)); break;
        case PLAIN150: sink = spin(n150); break;
        case PLAIN400: sink = spin(n400); break;
        case LOCK1: locked(1); break;
        case LOCK8: locked(8); break;
        case PLAIN_LOCK8: sink = spin(n150); locked(8); break;
        case EV_MID_LOCK8: locked(8); CK(cuEventRecord(ev, s)); break;
        case EV_THEN_LOCK8: CK(cuEventRecord(ev, s)); locked(8); break;
        default: break;
        }
      }
      double host = (now_us() - start) / n;
      CK(cuStreamSynchronize(s));
      double all = (now_us() - start) / n;
      if (round >= 0) { t[row][round] = all; h[row][round] = host; }
    }
    if (round >= 0)
      for (int row = 0; row < ROWS; row++) diff[row][round] = t[row][round] - t[RAW][round];
  }
  for (int row = 0; row < ROWS; row++) {
    double d = median(diff[row], ROUNDS);
    printf("%-16s %7.3f us per copy, %+6.3f us over raw (paired median), host alone %7.3f us\n", NAMES[row],
           median(t[row], ROUNDS), d, median(h[row], ROUNDS));
  }
  return 0;
}
