/* HIP front end of the launch interposer: hipModuleLaunchKernel,
 * hipExtModuleLaunchKernel and hipLaunchKernel; LDS is the shared memory.
 *
 * Built and tested against a fake HIP library on CPU only: there is no AMD
 * hardware here. Types and enum values are declared from hip_runtime_api.h
 * (ROCm 6) so no ROCm install is needed to build. */
#define _GNU_SOURCE
#include "interposer.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef int hipError_t;
typedef void *hipFunction_t;
typedef void *hipStream_t;
typedef void *hipEvent_t;
typedef struct { uint32_t x, y, z; } dim3;
typedef struct {
    int binaryVersion, cacheModeCA;
    size_t constSizeBytes, localSizeBytes;
    int maxDynamicSharedSizeBytes, maxThreadsPerBlock, numRegs, preferredShmemCarveout, ptxVersion;
    size_t sharedSizeBytes;
} hipFuncAttributes;

enum { hipSuccess = 0, hipErrorNotFound = 500, hipErrorNotReady = 600 };
enum { HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1, HIP_FUNC_ATTRIBUTE_NUM_REGS = 4 };
enum { hipDeviceAttributeMultiprocessorCount = 63, hipDeviceAttributeMaxSharedMemoryPerMultiprocessor = 10002 };
enum { hipEventDisableTiming = 0x2, hipStreamCaptureStatusNone = 0, hipStreamCaptureModeRelaxed = 2 };
enum { KIND_MODULE = 1, KIND_HOST_FUNCTION = 2 }; /* hipFunction_t vs the host stub's address */

extern ccov_hook ccov_hip_hooks[]; /* this front end's, defined below */

static struct {
    hipError_t (*GetDevice)(int *);
    hipError_t (*DeviceGetAttribute)(int *, int, int);
    hipError_t (*FuncGetAttribute)(int *, int, hipFunction_t);
    hipError_t (*FuncGetAttributes)(hipFuncAttributes *, const void *);
    const char *(*KernelNameRef)(hipFunction_t);
    const char *(*KernelNameRefByPtr)(const void *, hipStream_t);
    hipError_t (*EventCreateWithFlags)(hipEvent_t *, unsigned);
    hipError_t (*EventRecord)(hipEvent_t, hipStream_t);
    hipError_t (*EventQuery)(hipEvent_t);
    hipError_t (*StreamIsCapturing)(hipStream_t, int *);
    hipError_t (*ThreadExchangeStreamCaptureMode)(int *);
    hipError_t (*DeviceSynchronize)(void);
    hipError_t (*StreamGetPriority)(hipStream_t, int *);
} hip;
static pthread_once_t hip_once = PTHREAD_ONCE_INIT;

static void load_hip(void) {
    void *lib = NULL;
    for (ccov_hook *h = ccov_hip_hooks; !lib && h->name; ++h) lib = ccov_library_of(h);
    if (!lib) {
        ccov_log_once(42, "libamdhip64 not found: HIP launches go out unchanged");
        return;
    }
#define LOAD(field, name) *(void **)&hip.field = ccov_real_dlsym(lib, name)
    LOAD(GetDevice, "hipGetDevice");
    LOAD(DeviceGetAttribute, "hipDeviceGetAttribute");
    LOAD(FuncGetAttribute, "hipFuncGetAttribute");
    LOAD(FuncGetAttributes, "hipFuncGetAttributes");
    LOAD(KernelNameRef, "hipKernelNameRef");
    LOAD(KernelNameRefByPtr, "hipKernelNameRefByPtr");
    LOAD(EventCreateWithFlags, "hipEventCreateWithFlags");
    LOAD(EventRecord, "hipEventRecord");
    LOAD(EventQuery, "hipEventQuery");
    LOAD(StreamIsCapturing, "hipStreamIsCapturing");
    LOAD(ThreadExchangeStreamCaptureMode, "hipThreadExchangeStreamCaptureMode");
    LOAD(DeviceSynchronize, "hipDeviceSynchronize");
    LOAD(StreamGetPriority, "hipStreamGetPriority");
#undef LOAD
}

static int current_device(int *device) {
    pthread_once(&hip_once, load_hip);
    return hip.GetDevice ? hip.GetDevice(device) : -1;
}

static int describe(void *f, int kind, int device, ccov_info *out) {
    (void)device;
    pthread_once(&hip_once, load_hip);
    if (kind == KIND_MODULE) {
        out->name = hip.KernelNameRef ? hip.KernelNameRef(f) : NULL;
        if (!hip.FuncGetAttribute || hip.FuncGetAttribute(&out->regs, HIP_FUNC_ATTRIBUTE_NUM_REGS, f) ||
            hip.FuncGetAttribute(&out->static_smem, HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f))
            return -1;
    } else {
        hipFuncAttributes a;
        out->name = hip.KernelNameRefByPtr ? hip.KernelNameRefByPtr(f, NULL) : NULL;
        if (!hip.FuncGetAttributes || hip.FuncGetAttributes(&a, f)) return -1;
        out->regs = a.numRegs;
        out->static_smem = (int)a.sharedSizeBytes;
        out->per_device = 1;
    }
    out->max_dynamic = 1 << 30; /* no opt-in on AMD: the occupancy check keeps pads under the LDS maximum */
    out->cluster = 1;
    return out->name ? 0 : -1;
}

/* gfx90a allocation rules (the mi250x preset of limits.py: wave64, 4 SIMDs
 * with 512 VGPRs per lane in blocks of 8, 16 workgroups per CU, 512-byte LDS
 * units, no reservation), with LDS per CU read from the device. */
static int device_limits(int device, ccov_device *d) {
    int lds = 0, cus = 0;
    if (!hip.DeviceGetAttribute ||
        hip.DeviceGetAttribute(&lds, hipDeviceAttributeMaxSharedMemoryPerMultiprocessor, device) || lds <= 0)
        lds = 65536;
    if (!hip.DeviceGetAttribute || hip.DeviceGetAttribute(&cus, hipDeviceAttributeMultiprocessorCount, device))
        cus = 0; /* unknown: auto mode then plans with drain 0 */
    *d = (ccov_device){
        .warp_size = 64, .max_threads_per_block = 1024, .max_threads_per_sm = 2048, .max_blocks_per_sm = 16,
        .regs_per_sm = 4 * 512 * 64, .regs_per_block = 4 * 512 * 64, .reg_alloc_unit = 8 * 64,
        .max_regs_per_thread = 512, .reg_subpartitions = 4, .smem_per_sm = lds, .smem_per_block_optin = lds,
        .smem_reserved_per_block = 0, .smem_alloc_unit = 512, .sm_count = cus,
    };
    return 0;
}

/* Communication in flight: as in interposer_cuda.c, with HIP's events; the
 * owner of an event is its device (+1, so device 0 is not NULL). */
static int relaxed_begin(void) {
    int mode = hipStreamCaptureModeRelaxed;
    if (hip.ThreadExchangeStreamCaptureMode && hip.ThreadExchangeStreamCaptureMode(&mode) == hipSuccess) return mode;
    return -1;
}
static void relaxed_end(int mode) {
    if (mode >= 0) hip.ThreadExchangeStreamCaptureMode(&mode);
}

static int capturing(hipStream_t s) {
    int status = hipStreamCaptureStatusNone;
    if (!hip.StreamIsCapturing || hip.StreamIsCapturing(s, &status) != hipSuccess) return -1;
    return status != hipStreamCaptureStatusNone;
}

static int event_record(ccov_event *ev, void *stream) {
    pthread_once(&hip_once, load_hip);
    if (capturing(stream) == 1) return 1;
    int device = -1;
    if (!hip.EventCreateWithFlags || !hip.EventRecord || !hip.EventQuery || !hip.GetDevice ||
        hip.GetDevice(&device) != hipSuccess)
        return -1;
    void *owner = (void *)(intptr_t)(device + 1);
    int mode = relaxed_begin();
    hipError_t rc = hipSuccess;
    if (!ev->event || ev->owner != owner) {
        hipEvent_t e = NULL;
        rc = hip.EventCreateWithFlags(&e, hipEventDisableTiming);
        if (rc == hipSuccess) *ev = (ccov_event){e, owner};
    }
    if (rc == hipSuccess) rc = hip.EventRecord(ev->event, stream);
    relaxed_end(mode);
    return rc == hipSuccess ? 0 : -1;
}

static int event_done(ccov_event *ev) {
    int mode = relaxed_begin();
    hipError_t rc = hip.EventQuery(ev->event);
    relaxed_end(mode);
    return rc == hipSuccess ? 1 : rc == hipErrorNotReady ? 0 : -1;
}

static int capture_done(void *stream) {
    int c = capturing(stream);
    return c < 0 ? -1 : !c;
}

/* ROCm's hipFuncSetAttribute checks a carveout's range and stores nothing (clr hipamd/src/hip_module.cpp),
 * and hipFuncGetAttribute reports 0: a CU's LDS is its own memory, not a share of the vector L1. */
/* Serialized launches: the current device drained, except on a capturing stream. */
static int drain(void *stream) {
    pthread_once(&hip_once, load_hip);
    if (!hip.DeviceSynchronize) return -1;
    if (capturing(stream) == 1) return 1;
    int mode = relaxed_begin();
    hipError_t rc = hip.DeviceSynchronize();
    relaxed_end(mode);
    return rc == hipSuccess ? 0 : -1;
}

static int stream_priority(void *stream, int *priority) {
    pthread_once(&hip_once, load_hip);
    return hip.StreamGetPriority && hip.StreamGetPriority(stream, priority) == hipSuccess ? 0 : -1;
}

static const ccov_backend hip_backend = {
    "hip", current_device, describe, device_limits, NULL, NULL,
    "n/a on HIP (LDS is its own memory on AMD GPUs, not carved out of L1; ROCm ignores the hint)",
    event_record, event_done, capture_done, drain, stream_priority, NULL, NULL, NULL};

enum { H_MODULE, H_EXT_MODULE, H_LAUNCH, H_GRAPH };
static const char *const libhip[] = {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", NULL};

typedef hipError_t (*module_fn)(hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                unsigned, hipStream_t, void **, void **);
typedef hipError_t (*ext_module_fn)(hipFunction_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t,
                                    size_t, hipStream_t, void **, void **, hipEvent_t, hipEvent_t, uint32_t);
typedef hipError_t (*launch_fn)(const void *, dim3, dim3, void **, size_t, hipStream_t);

/* Every HIP launch has the same shape: decide, launch padded, relaunch unchanged on failure. */
#define PADDED_LAUNCH(handle, kind, threads, grid, shmem, stream, CALL)                          \
    do {                                                                                         \
        ccov_launch_info li = {(grid), 0, 0, (stream)};                                          \
        ccov_launch l;                                                                           \
        size_t pad = (size_t)ccov_begin(&hip_backend, (void *)(handle), kind, threads, (unsigned)(shmem), &li, &l); \
        size_t smem = (shmem) + pad;                                                             \
        hipError_t rc = CALL;                                                                    \
        if (rc != hipSuccess && pad) {                                                           \
            ccov_failed(&l);                                                                     \
            smem = (shmem);                                                                      \
            rc = CALL;                                                                           \
        }                                                                                        \
        ccov_end(&l, rc == hipSuccess);                                                          \
        return rc;                                                                               \
    } while (0)

CCOV_EXPORT hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                             unsigned by, unsigned bz, unsigned shmem, hipStream_t s,
                                             void **params, void **extra) {
    module_fn real = (module_fn)ccov_real(&ccov_hip_hooks[H_MODULE]);
    if (!real) return hipErrorNotFound;
    PADDED_LAUNCH(f, KIND_MODULE, (int)(bx * by * bz), gx * gy * gz, shmem, s,
                  real(f, gx, gy, gz, bx, by, bz, (unsigned)smem, s, params, extra));
}

/* The global size is in threads, not blocks. */
CCOV_EXPORT hipError_t hipExtModuleLaunchKernel(hipFunction_t f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx,
                                                uint32_t ly, uint32_t lz, size_t shmem, hipStream_t s,
                                                void **params, void **extra, hipEvent_t start, hipEvent_t stop,
                                                uint32_t flags) {
    ext_module_fn real = (ext_module_fn)ccov_real(&ccov_hip_hooks[H_EXT_MODULE]);
    if (!real) return hipErrorNotFound;
    unsigned grid = lx && ly && lz ? (gx / lx) * (gy / ly) * (gz / lz) : 0;
    PADDED_LAUNCH(f, KIND_MODULE, (int)(lx * ly * lz), grid, shmem, s,
                  real(f, gx, gy, gz, lx, ly, lz, smem, s, params, extra, start, stop, flags));
}

CCOV_EXPORT hipError_t hipLaunchKernel(const void *fn, dim3 grid, dim3 block, void **args, size_t shmem,
                                       hipStream_t s) {
    launch_fn real = (launch_fn)ccov_real(&ccov_hip_hooks[H_LAUNCH]);
    if (!real) return hipErrorNotFound;
    PADDED_LAUNCH(fn, KIND_HOST_FUNCTION, (int)(block.x * block.y * block.z), grid.x * grid.y * grid.z, shmem, s,
                  real(fn, grid, block, args, smem, s));
}

/* A HIP graph replay: serialized as one unit in the alone window, as cuGraphLaunch. */
typedef hipError_t (*graph_fn)(void *, hipStream_t);
CCOV_EXPORT hipError_t hipGraphLaunch(void *graph, hipStream_t s) {
    graph_fn real = (graph_fn)ccov_real(&ccov_hip_hooks[H_GRAPH]);
    if (!real) return hipErrorNotFound;
    ccov_launch l;
    ccov_serial_unit_begin(&hip_backend, s, &l);
    hipError_t rc = real(graph, s);
    ccov_serial_unit_end(&l);
    return rc;
}

ccov_hook ccov_hip_hooks[] = {
    [H_MODULE] = {"hipModuleLaunchKernel", (void *)hipModuleLaunchKernel, NULL, libhip},
    [H_EXT_MODULE] = {"hipExtModuleLaunchKernel", (void *)hipExtModuleLaunchKernel, NULL, libhip},
    [H_LAUNCH] = {"hipLaunchKernel", (void *)hipLaunchKernel, NULL, libhip},
    [H_GRAPH] = {"hipGraphLaunch", (void *)hipGraphLaunch, NULL, libhip},
    {NULL, NULL, NULL, NULL},
};

static const ccov_frontend hip_frontend = {ccov_hip_hooks, NULL};
CCOV_FRONTEND(hip_frontend);
