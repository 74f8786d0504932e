/* A stand-in for the CUDA driver library (libcuda.so.1) on a host without a GPU.

   sglang-kernel's wheels (the only ones on the package index) link libcuda.so.1, so importing
   them on a CPU host fails with "libcuda.so.1: cannot open shared object file" before sglang's
   CPU engine runs a single plain-torch path. Every entry point the wheel's libraries import
   (sglang-kernel 0.4.10, `nm -D --undefined-only`) is defined here and reports that there is no
   device, which is the truth on this host; nothing here pretends to compute.
   Built by the testbed (sandboxes/testbed/framework_venvs.py) with gcc -shared -fPIC. */
#include <stddef.h>

#define CUDA_ERROR_NO_DEVICE 100
typedef int CUresult;

static const char no_device[] = "no CUDA device (inferloop's libcuda stub on a CPU host)";

CUresult cuGetErrorString(CUresult err, const char **out) { (void)err; if (out) *out = no_device; return 0; }
CUresult cuDriverGetVersion(int *v) { if (v) *v = 0; return CUDA_ERROR_NO_DEVICE; }
CUresult cuGetProcAddress_v2(const char *s, void **fn, int v, unsigned long long f, void *st) {
    (void)s; (void)v; (void)f; (void)st; if (fn) *fn = NULL; return CUDA_ERROR_NO_DEVICE; }
CUresult cuInit(unsigned int flags) { (void)flags; return CUDA_ERROR_NO_DEVICE; }
CUresult cuDeviceGetCount(int *n) { if (n) *n = 0; return CUDA_ERROR_NO_DEVICE; }

#define NO_DEVICE(name) CUresult name(void) { return CUDA_ERROR_NO_DEVICE; }
NO_DEVICE(cuCtxFromGreenCtx) NO_DEVICE(cuCtxPopCurrent_v2) NO_DEVICE(cuCtxPushCurrent_v2)
NO_DEVICE(cuDevResourceGenerateDesc) NO_DEVICE(cuDevSmResourceSplitByCount) NO_DEVICE(cuDeviceGetDevResource)
NO_DEVICE(cuGreenCtxCreate) NO_DEVICE(cuGreenCtxDestroy) NO_DEVICE(cuGreenCtxGetDevResource)
NO_DEVICE(cuPointerGetAttribute) NO_DEVICE(cuStreamCreate)
