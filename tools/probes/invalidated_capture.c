/* Build on a GPU machine: gcc invalidated_capture.c -O2 -o invalidated_capture -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcuda
 * Run: ./invalidated_capture CASE   (each case in a process of its own: a case may crash)
 *
 * What is left of a graph after a capture into it (cuStreamBeginCaptureToGraph) is
 * invalidated, and may it be destroyed? A recording captures each op into its graph, or into
 * the body graph of a WHILE node; an op whose capture the driver invalidates (a call the
 * capture forbids) fails the recording, which then destroys its graph.
 *   top        capture into a plain graph, invalidated, end, cuGraphDestroy(graph)
 *   body       capture into a WHILE node's body, invalidated, end, cuGraphDestroy(parent)
 *   body-ok    capture into the body with nothing forbidden, end, cuGraphDestroy(parent)
 *   body-node  as body, but the WHILE node is removed (cuGraphDestroyNode) before the parent
 * The forbidden call is a synchronous cuMemAlloc on the capturing thread (thread-local mode).
 * Each case prints the status of every call, then "survived". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda.h>

static const char *name(CUresult r) {
  const char *s = NULL;
  cuGetErrorName(r, &s);
  return s ? s : "?";
}
#define SHOW(x) do { CUresult r_ = (x); printf("%-60s -> %s\n", #x, name(r_)); } while (0)
#define CK(x) do { CUresult r_ = (x); if (r_) { printf("%s failed: %s\n", #x, name(r_)); exit(1); } } while (0)

/* A graph with a WHILE node; `body` gets the node's body graph. */
static CUgraphNode add_while(CUgraph g, CUcontext ctx, CUgraph *body) {
  CUgraphConditionalHandle h;
  CK(cuGraphConditionalHandleCreate(&h, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
  CUgraphNodeParams p;
  memset(&p, 0, sizeof p);
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.conditional.handle = h;
  p.conditional.type = CU_GRAPH_COND_TYPE_WHILE;
  p.conditional.size = 1;
  p.conditional.ctx = ctx;
  CUgraphNode node;
  CK(cuGraphAddNode_v2(&node, g, NULL, NULL, 0, &p));
  *body = p.conditional.phGraph_out[0];
  return node;
}

/* Captures into `into` on `s`: a memset, then (with `forbid`) a synchronous allocation. */
static void capture(CUstream s, CUgraph into, CUdeviceptr buf, int forbid) {
  SHOW(cuStreamBeginCaptureToGraph(s, into, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  SHOW(cuMemsetD8Async(buf, 0, 64, s));
  if (forbid) {
    CUdeviceptr p = 0;
    SHOW(cuMemAlloc(&p, 64));
  }
  CUstreamCaptureStatus st;
  SHOW(cuStreamIsCapturing(s, &st));
  printf("capture status %d (1 active, 2 invalidated)\n", (int)st);
  CUgraph out = NULL;
  SHOW(cuStreamEndCapture(s, &out));
  printf("end capture returned graph %p (into %p)\n", (void *)out, (void *)into);
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "body";
  CK(cuInit(0));
  CUdevice d;
  CUcontext ctx;
  CK(cuDeviceGet(&d, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, d));
  CK(cuCtxSetCurrent(ctx));
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr buf;
  CK(cuMemAlloc(&buf, 64));
  CUgraph g;
  CK(cuGraphCreate(&g, 0));
  printf("case %s\n", c);
  if (!strcmp(c, "top")) {
    capture(s, g, buf, 1);
  } else {
    CUgraph body;
    CUgraphNode node = add_while(g, ctx, &body);
    capture(s, body, buf, strcmp(c, "body-ok") != 0);
    if (!strcmp(c, "body-node")) SHOW(cuGraphDestroyNode(node));
  }
  size_t n = 0;
  SHOW(cuGraphGetNodes(g, NULL, &n));
  printf("parent graph has %zu nodes\n", n);
  SHOW(cuGraphDestroy(g));
  SHOW(cuStreamSynchronize(s));
  printf("survived\n");
  return 0;
}
