/* Build on a GPU machine (NCCL from the image's Python environment):
 *   N=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
 *   gcc nccl_lone_rank_tail.c -O2 -o nccl_lone_rank_tail -I/usr/local/cuda/include -I$N/include \
 *       -L/usr/local/cuda/lib64 -L$N/lib -lcudart -l:libnccl.so.2
 * Run: LD_LIBRARY_PATH=$N/lib ./nccl_lone_rank_tail
 *
 * Does a one-rank communicator's all-reduce write every element? An f32 input of n elements
 * (1..5 repeating) is all-reduced by each built-in op and by PreMulSum(2) into a zeroed output
 * (out of place), and by Avg and PreMulSum(2) in place; each result is compared with the
 * input (times 2 for PreMulSum). Prints one line per case with the elements that are wrong.
 * NCCL 2.28.9 on an H200: Avg out of place and PreMulSum both ways leave the last n % 4
 * elements unwritten from n = 100,003 up (65,537 and less are right); every other case is
 * right. (f64, from cusched's tests: from 65,537 up.) */
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>
#include <nccl.h>

#define NC(x) do { ncclResult_t r_ = (x); if (r_) { printf("%s -> %s\n", #x, ncclGetErrorString(r_)); exit(1); } } while (0)

static const size_t LENS[] = {1, 3, 7, 17, 1001, 65537, 100003, 262147, 1048579};
static const int NLENS = sizeof LENS / sizeof LENS[0];

/* All-reduces `n` elements with `op` (out of place unless `in_place`) and counts the output
 * elements that are not `scale` times the input. */
static size_t wrong(ncclComm_t comm, cudaStream_t s, size_t n, ncclRedOp_t op, float scale, int in_place) {
  float *x, *y, *h = malloc(n * 4), *g = malloc(n * 4);
  for (size_t i = 0; i < n; i++) h[i] = (float)(i % 5 + 1);
  cudaMalloc((void **)&x, n * 4);
  cudaMalloc((void **)&y, n * 4);
  cudaMemcpy(x, h, n * 4, cudaMemcpyHostToDevice);
  cudaMemset(y, 0, n * 4);
  float *out = in_place ? x : y;
  NC(ncclAllReduce(x, out, n, ncclFloat32, op, comm, s));
  cudaStreamSynchronize(s);
  cudaMemcpy(g, out, n * 4, cudaMemcpyDeviceToHost);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += g[i] != scale * h[i];
  cudaFree(x);
  cudaFree(y);
  free(h);
  free(g);
  return bad;
}

int main(void) {
  ncclComm_t comm;
  int dev = 0, version;
  NC(ncclCommInitAll(&comm, 1, &dev));
  NC(ncclGetVersion(&version));
  printf("NCCL %d, one rank on GPU 0\n", version);
  cudaStream_t s;
  cudaStreamCreate(&s);
  const char *names[] = {"sum", "prod", "max", "min", "avg"};
  for (int li = 0; li < NLENS; li++) {
    size_t n = LENS[li];
    for (int op = 0; op < 5; op++)
      printf("n=%-8zu %-10s out of place: %zu wrong\n", n, names[op], wrong(comm, s, n, (ncclRedOp_t)op, 1, 0));
    printf("n=%-8zu %-10s in place:     %zu wrong\n", n, "avg", wrong(comm, s, n, ncclAvg, 1, 1));
    float two = 2;
    for (int in_place = 0; in_place < 2; in_place++) {
      ncclRedOp_t pm;
      NC(ncclRedOpCreatePreMulSum(&pm, &two, ncclFloat32, ncclScalarHostImmediate, comm));
      size_t bad = wrong(comm, s, n, pm, 2, in_place);
      NC(ncclRedOpDestroy(pm, comm));
      printf("n=%-8zu %-10s %s %zu wrong\n", n, "premulsum", in_place ? "in place:    " : "out of place:", bad);
    }
  }
  NC(ncclCommDestroy(comm));
  return 0;
}
