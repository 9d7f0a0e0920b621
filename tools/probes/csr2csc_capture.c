/* Build on a GPU machine:
 *   gcc csr2csc_capture.c -O2 -o csr2csc_capture -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcusparse -lcudart
 * Run: ./csr2csc_capture [ROWS COLS PER_ROW]
 *
 * Does `cusparseCsr2cscEx2` (ALG1, numeric, f32, i32 indices: what Sparse::convert_compressed
 * calls) replay correctly from a captured graph? A CSR matrix is converted once eagerly; the
 * same call, with a workspace allocated before the capture, is captured (thread-local mode)
 * into a graph, which is instantiated and replayed twice, the input values rewritten between
 * the replays; each replay is compared with an eager conversion of the same input. Prints the
 * status of every call, the captured graph's nodes by type, and "match" or the first
 * mismatches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>
#include <cusparse.h>

#define CK(x) do { cudaError_t r_ = (x); if (r_) { printf("%s -> %s\n", #x, cudaGetErrorName(r_)); exit(1); } } while (0)
#define SP(x) do { cusparseStatus_t r_ = (x); if (r_) { printf("%s -> %s\n", #x, cusparseGetErrorName(r_)); exit(1); } } while (0)
#define SHOW(x) do { cudaError_t r_ = (x); printf("%-50s -> %s\n", #x, cudaGetErrorName(r_)); if (r_) exit(1); } while (0)

static const char *node_type(enum cudaGraphNodeType t) {
  switch (t) {
    case cudaGraphNodeTypeKernel: return "kernel";
    case cudaGraphNodeTypeMemcpy: return "memcpy";
    case cudaGraphNodeTypeMemset: return "memset";
    case cudaGraphNodeTypeHost: return "host";
    case cudaGraphNodeTypeGraph: return "child graph";
    case cudaGraphNodeTypeEmpty: return "empty";
    case cudaGraphNodeTypeWaitEvent: return "wait event";
    case cudaGraphNodeTypeEventRecord: return "event record";
    case cudaGraphNodeTypeMemAlloc: return "mem alloc";
    case cudaGraphNodeTypeMemFree: return "mem free";
    default: return "other";
  }
}

int main(int argc, char **argv) {
  int m = argc > 1 ? atoi(argv[1]) : 64, n = argc > 2 ? atoi(argv[2]) : 48, per = argc > 3 ? atoi(argv[3]) : 5;
  if (per > n) per = n;
  int nnz = m * per;
  int *ro = malloc((m + 1) * sizeof(int)), *ci = malloc(nnz * sizeof(int));
  float *v = malloc(nnz * sizeof(float));
  srand(7);
  for (int i = 0, k = 0; i < m; i++) {
    ro[i] = k;
    int start = rand() % (n - per + 1);
    for (int j = 0; j < per; j++, k++) { ci[k] = start + j; v[k] = (float)(rand() % 1000) / 7.0f; }
  }
  ro[m] = nnz;
  printf("m %d n %d nnz %d\n", m, n, nnz);

  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cusparseHandle_t h;
  SP(cusparseCreate(&h));
  SP(cusparseSetStream(h, s));
  int *dro, *dci, *eco, *eri, *gco, *gri;
  float *dv, *ev, *gv;
  CK(cudaMalloc((void **)&dro, (m + 1) * sizeof(int)));
  CK(cudaMalloc((void **)&dci, nnz * sizeof(int)));
  CK(cudaMalloc((void **)&dv, nnz * sizeof(float)));
  CK(cudaMalloc((void **)&eco, (n + 1) * sizeof(int)));
  CK(cudaMalloc((void **)&eri, nnz * sizeof(int)));
  CK(cudaMalloc((void **)&ev, nnz * sizeof(float)));
  CK(cudaMalloc((void **)&gco, (n + 1) * sizeof(int)));
  CK(cudaMalloc((void **)&gri, nnz * sizeof(int)));
  CK(cudaMalloc((void **)&gv, nnz * sizeof(float)));
  CK(cudaMemcpy(dro, ro, (m + 1) * sizeof(int), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dci, ci, nnz * sizeof(int), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dv, v, nnz * sizeof(float), cudaMemcpyHostToDevice));

  size_t bytes = 0;
  SP(cusparseCsr2cscEx2_bufferSize(h, m, n, nnz, dv, dro, dci, ev, eco, eri, CUDA_R_32F, CUSPARSE_ACTION_NUMERIC,
                                   CUSPARSE_INDEX_BASE_ZERO, CUSPARSE_CSR2CSC_ALG1, &bytes));
  printf("workspace %zu bytes\n", bytes);
  void *work;
  CK(cudaMalloc(&work, bytes ? bytes : 1));

  /* The captured conversion, into the g* arrays. */
  cudaGraph_t g;
  cudaGraphExec_t ge;
  SHOW(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  cusparseStatus_t st = cusparseCsr2cscEx2(h, m, n, nnz, dv, dro, dci, gv, gco, gri, CUDA_R_32F, CUSPARSE_ACTION_NUMERIC,
                                           CUSPARSE_INDEX_BASE_ZERO, CUSPARSE_CSR2CSC_ALG1, work);
  printf("%-50s -> %s\n", "cusparseCsr2cscEx2 (capturing)", cusparseGetErrorName(st));
  SHOW(cudaStreamEndCapture(s, &g));
  size_t count = 0;
  CK(cudaGraphGetNodes(g, NULL, &count));
  cudaGraphNode_t *nodes = malloc((count ? count : 1) * sizeof(cudaGraphNode_t));
  CK(cudaGraphGetNodes(g, nodes, &count));
  printf("graph nodes: %zu:", count);
  for (size_t i = 0; i < count; i++) {
    enum cudaGraphNodeType t;
    CK(cudaGraphNodeGetType(nodes[i], &t));
    printf(" %s", node_type(t));
    if (t == cudaGraphNodeTypeMemset) {
      struct cudaMemsetParams p;
      CK(cudaGraphMemsetNodeGetParams(nodes[i], &p));
      printf("(dst %p, %zu x %zu, elt %u)", p.dst, p.width, p.height, p.elementSize);
    }
    if (t == cudaGraphNodeTypeMemcpy) {
      struct cudaMemcpy3DParms p;
      CK(cudaGraphMemcpyNodeGetParams(nodes[i], &p));
      printf("(%p -> %p, kind %d)", p.srcPtr.ptr ? p.srcPtr.ptr : (void *)p.srcArray, p.dstPtr.ptr, (int)p.kind);
    }
  }
  printf("\n");
  SHOW(cudaGraphInstantiate(&ge, g, 0));

  int *hco = malloc((n + 1) * sizeof(int)), *gco_h = malloc((n + 1) * sizeof(int));
  int *hri = malloc(nnz * sizeof(int)), *gri_h = malloc(nnz * sizeof(int));
  float *hv = malloc(nnz * sizeof(float)), *gv_h = malloc(nnz * sizeof(float));
  for (int round = 0; round < 3; round++) {
    if (round > 0) {
      for (int k = 0; k < nnz; k++) v[k] = (float)(rand() % 1000) / 3.0f;
      CK(cudaMemcpy(dv, v, nnz * sizeof(float), cudaMemcpyHostToDevice));
    }
    CK(cudaMemset(gco, 0xff, (n + 1) * sizeof(int)));
    CK(cudaMemset(gri, 0xff, nnz * sizeof(int)));
    CK(cudaMemset(gv, 0xff, nnz * sizeof(float)));
    SP(cusparseCsr2cscEx2(h, m, n, nnz, dv, dro, dci, ev, eco, eri, CUDA_R_32F, CUSPARSE_ACTION_NUMERIC,
                          CUSPARSE_INDEX_BASE_ZERO, CUSPARSE_CSR2CSC_ALG1, work));
    CK(cudaStreamSynchronize(s));
    cudaError_t launched = cudaGraphLaunch(ge, s);
    cudaError_t synced = cudaStreamSynchronize(s);
    printf("round %d: launch %s, synchronize %s\n", round, cudaGetErrorName(launched), cudaGetErrorName(synced));
    if (launched || synced) return 1;
    CK(cudaMemcpy(hco, eco, (n + 1) * sizeof(int), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gco_h, gco, (n + 1) * sizeof(int), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hri, eri, nnz * sizeof(int), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gri_h, gri, nnz * sizeof(int), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hv, ev, nnz * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gv_h, gv, nnz * sizeof(float), cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i <= n; i++) if (hco[i] != gco_h[i] && bad++ < 5) printf("  offsets[%d]: eager %d, graph %d\n", i, hco[i], gco_h[i]);
    for (int k = 0; k < nnz; k++) if (hri[k] != gri_h[k] && bad++ < 10) printf("  indices[%d]: eager %d, graph %d\n", k, hri[k], gri_h[k]);
    for (int k = 0; k < nnz; k++) if (hv[k] != gv_h[k] && bad++ < 15) printf("  values[%d]: eager %g, graph %g\n", k, hv[k], gv_h[k]);
    printf("round %d: %s (%d mismatches)\n", round, bad ? "MISMATCH" : "match", bad);
  }
  printf("done\n");
  return 0;
}
