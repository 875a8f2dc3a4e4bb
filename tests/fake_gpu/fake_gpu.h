/* Fake CUDA driver and HIP runtime for CPU tests of the launch interposer.
 * They check launches the way the real ones do (dynamic shared memory above
 * the kernel's attribute is refused) and record what each launch received. */
#ifndef FAKE_GPU_H
#define FAKE_GPU_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

enum { V_LEGACY = 1, V_PTSZ, V_EX, V_EX_PTSZ, V_HIP_MODULE, V_HIP_EXT, V_HIP_LAUNCH };
#define FAKE_DEVICES 2

typedef struct fake_fn {
    unsigned magic;
    const char *name;
    int is_kernel; /* a CUkernel (cudart's handles) rather than a CUfunction */
    int regs, static_smem;
    _Atomic int max_dynamic;
    _Atomic long launches;
    _Atomic long long shared_sum;
    _Atomic int last_shared, last_variant, set_calls;
    /* the preferred shared-memory carveout (attribute 9): calls and last value per device */
    _Atomic int carveout_calls[FAKE_DEVICES], carveout[FAKE_DEVICES];
} fake_fn;

extern _Atomic long fake_name_calls, fake_attr_calls;
/* events and stream capture (fake_cuda.c) */
extern _Atomic long fake_event_queries, fake_event_records, fake_events_created, fake_recorded_in_capture;
extern _Atomic int fake_capture_invalidated;
void fake_cuda_hold_events(int hold);
void fake_cuda_complete_events(void);
void fake_cuda_capture(void *stream, int on);
void fake_cuda_set_device(int device); /* the calling thread's current device (cuCtxGetDevice) */
/* Serialized launches: launches that found earlier work still running (every launch runs until the next
 * cuCtxSynchronize, except on a capturing stream), and the syncs made. */
extern _Atomic long fake_busy_launches, fake_ctx_syncs, fake_stream_ctx_calls;
/* The doctor's hold: cuStreamWaitValue32 calls, and each one's stream (low 32 bits) and value (high 32), the n-th
 * at fake_wait_log[n % FAKE_WAIT_LOG]. */
enum { FAKE_WAIT_LOG = 1024 };
extern _Atomic long fake_waits;
extern _Atomic unsigned long long fake_wait_log[FAKE_WAIT_LOG];
/* A stream's priority (cuStreamGetPriority) and the SMs of the green context it belongs to (0: none). */
void fake_cuda_stream(void *stream, int priority, int green_sms);
int fake_last_shared(void *f);
fake_fn *fake_function(const char *name, int is_kernel, int regs, int static_smem, int max_dynamic);
extern _Atomic long fake_hip_syncs; /* hipDeviceSynchronize calls */
/* HIP: a module function, or a host stub address for hipLaunchKernel */
fake_fn *fake_hip_function(const void *host_stub, const char *name, int regs, int static_smem);

typedef int CUresult;
typedef struct { unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
                 void *hStream; void *attrs; unsigned numAttrs; } CUlaunchConfig;
typedef CUresult (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                              void **, void **);
typedef CUresult (*launch_ex_fn)(const CUlaunchConfig *, void *, void **, void **);
typedef CUresult (*getproc_fn)(const char *, void **, int, unsigned long long);
typedef CUresult (*getproc_v2_fn)(const char *, void **, int, unsigned long long, int *);
CUresult cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
CUresult cuGraphLaunch(void *, void *);
CUresult cuGraphExecDestroy(void *);
extern _Atomic long fake_graph_launches;
/* Per graph executable, by the handle's low byte: replays run, and destroys. A replay of FAKE_FAILING_GRAPH fails. */
extern _Atomic long fake_graph_runs[256], fake_graph_destroyed[256];
#define FAKE_FAILING_GRAPH ((void *)0xEE)
CUresult cuLaunchKernel_ptsz(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
CUresult cuLaunchKernelEx(const CUlaunchConfig *, void *, void **, void **);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *, void *, void **, void **);
CUresult cuFuncSetAttribute(void *, int, int);

typedef struct { uint32_t x, y, z; } dim3;
int hipModuleLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
int hipGraphLaunch(void *, void *);
int hipExtModuleLaunchKernel(void *, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, size_t, void *, void **,
                             void **, void *, void *, uint32_t);
int hipLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
#endif
