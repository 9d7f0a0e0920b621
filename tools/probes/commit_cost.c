/* Build on a GPU machine: gcc commit_cost.c -O2 -o commit_cost -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcuda
 * Run: ./commit_cost [copies per round] (two GPUs: the copy is a peer copy 0 -> 1; one GPU: a
 * device-to-device copy).
 *
 * What does the host pay per small copy for the mark a later user orders itself after? A
 * tracked launch commits one such mark per op. Each row enqueues 4 KiB copies back to back on
 * one stream of GPU 0 and adds, after each copy:
 *   raw             nothing
 *   event           cuEventRecord of one event, re-recorded every copy
 *   event ring 4    cuEventRecord of one of four events in turn (a pool's reuse pattern)
 *   write dev       cuStreamWriteValue64 of the copy's number into device memory (a timeline
 *                   counter, which a consumer stream waits on with cuStreamWaitValue64)
 *   write host      cuStreamWriteValue64 into pinned host memory mapped for the device (a
 *                   counter the host reads with a load, no driver call)
 *   query           cuEventRecord then cuEventQuery of the event (what a completion poll adds)
 * Rows run in turn, seven rounds; each row prints its median round, per copy, and the
 * difference to the raw row of the same round (median of the differences). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cuda.h>
#define CK(x) do { int r_ = (int)(x); if (r_) { printf("%s failed: %d (line %d)\n", #x, r_, __LINE__); exit(1); } } while (0)
static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static double median(double *v, int n) { qsort(v, n, sizeof *v, cmp); return v[n / 2]; }

enum { RAW, EVENT, RING, WRITE_DEV, WRITE_HOST, QUERY, ROWS };
static const char *NAMES[ROWS] = {"raw", "event", "event ring 4", "write dev", "write host", "query"};
#define ROUNDS 7

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20000;
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
  CUdeviceptr src, dst, counter;
  size_t bytes = 4096;
  CK(cuMemAlloc(&src, bytes));
  CK(cuMemAlloc(&counter, 64));
  if (peer) {
    CK(cuCtxSetCurrent(c1));
    CK(cuMemAlloc(&dst, bytes));
    CK(cuCtxSetCurrent(c0));
  } else {
    CK(cuMemAlloc(&dst, bytes));
  }
  void *host;
  CK(cuMemHostAlloc(&host, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  CUdeviceptr host_dev;
  CK(cuMemHostGetDevicePointer(&host_dev, host, 0));
  CUevent ev[4];
  for (int i = 0; i < 4; i++) CK(cuEventCreate(&ev[i], CU_EVENT_DISABLE_TIMING));
  printf("%s, %d copies of %zu bytes per round, %d rounds\n", peer ? "peer copy GPU 0 -> GPU 1" : "device copy", n, bytes,
         ROUNDS);
  double t[ROWS][ROUNDS], diff[ROWS][ROUNDS];
  for (int round = -1; round < ROUNDS; round++) {
    for (int row = 0; row < ROWS; row++) {
      CK(cuStreamSynchronize(s));
      double start = now_us();
      for (int i = 0; i < n; i++) {
        if (peer) CK(cuMemcpyPeerAsync(dst, c1, src, c0, bytes, s));
        else CK(cuMemcpyDtoDAsync(dst, src, bytes, s));
        switch (row) {
        case EVENT: CK(cuEventRecord(ev[0], s)); break;
        case RING: CK(cuEventRecord(ev[i & 3], s)); break;
        case WRITE_DEV: CK(cuStreamWriteValue64(s, counter, (cuuint64_t)i, 0)); break;
        case WRITE_HOST: CK(cuStreamWriteValue64(s, host_dev, (cuuint64_t)i, 0)); break;
        case QUERY:
          CK(cuEventRecord(ev[0], s));
          (void)cuEventQuery(ev[0]);
          break;
        default: break;
        }
      }
      double host = (now_us() - start) / n;
      CK(cuStreamSynchronize(s));
      double all = (now_us() - start) / n;
      if (round >= 0) t[row][round] = all;
      (void)host;
    }
    if (round >= 0)
      for (int row = 0; row < ROWS; row++) diff[row][round] = t[row][round] - t[RAW][round];
  }
  for (int row = 0; row < ROWS; row++) {
    double d = median(diff[row], ROUNDS);
    printf("%-14s %7.3f us per copy, %+6.3f us over raw (paired median)\n", NAMES[row], median(t[row], ROUNDS), d);
  }
  return 0;
}
