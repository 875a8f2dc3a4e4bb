/* CUDA front end of the launch interposer: cuLaunchKernel(Ex)[_ptsz] and
 * cuGetProcAddress[_v2], whichever way the program reaches them (direct link,
 * dlsym on a libcuda handle, cuGetProcAddress, cudaGetDriverEntryPoint*).
 *
 * No CUDA toolkit is needed to build it: the few driver types and enum values
 * used are declared here, with their cuda.h (CUDA 13.0) values. */
#define _GNU_SOURCE
#include "interposer.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUfunction; /* also a CUkernel: cudart launches those */
typedef void *CUstream;
typedef void *CUevent;
typedef void *CUcontext;

enum { CUDA_SUCCESS = 0, CUDA_ERROR_NOT_FOUND = 500, CUDA_ERROR_NOT_READY = 600 };
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
enum { CU_EVENT_DISABLE_TIMING = 0x2 };
enum { CU_STREAM_CAPTURE_STATUS_NONE = 0 };
enum { CU_STREAM_CAPTURE_MODE_RELAXED = 2 };
enum { CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM = 1 << 1 };
enum {
    CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
    CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
    CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9,
    CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH = 11,
};
enum { CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4 };
/* Device attributes, the ones limits.read_live reads. */
enum {
    A_MAX_THREADS_PER_BLOCK = 1, A_WARP_SIZE = 10, A_MAX_REGISTERS_PER_BLOCK = 12, A_MULTIPROCESSOR_COUNT = 16,
    A_MAX_THREADS_PER_MULTIPROCESSOR = 39, A_COMPUTE_CAPABILITY_MAJOR = 75,
    A_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81, A_MAX_REGISTERS_PER_MULTIPROCESSOR = 82,
    A_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97, A_MAX_BLOCKS_PER_MULTIPROCESSOR = 106,
    A_RESERVED_SHARED_MEMORY_PER_BLOCK = 111,
};

typedef struct {
    int id;
    char pad[4];
    union {
        char raw[64];
        void *align;
        int cooperative;
        struct { unsigned x, y, z; } cluster;
    } value;
} CUlaunchAttribute;
_Static_assert(sizeof(CUlaunchAttribute) == 72, "CUlaunchAttribute layout");

typedef struct {
    unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned numAttrs;
} CUlaunchConfig;

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, CUstream, void **, void **);
typedef CUresult (*launch_ex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*getproc_fn)(const char *, void **, int, unsigned long long);
typedef CUresult (*getproc_v2_fn)(const char *, void **, int, unsigned long long, int *);

extern ccov_hook ccov_cuda_hooks[]; /* this front end's, defined below */
static void *ccov_cuda_proc(const char *symbol, void *p, int version, unsigned long long flags);

/* ---------- driver helpers, from the library that provides the launches ---------- */

static struct {
    CUresult (*FuncGetName)(const char **, CUfunction);
    CUresult (*KernelGetName)(const char **, CUfunction);
    CUresult (*FuncGetAttribute)(int *, int, CUfunction);
    CUresult (*KernelGetAttribute)(int *, int, CUfunction, CUdevice);
    CUresult (*FuncSetAttribute)(CUfunction, int, int);
    CUresult (*KernelSetAttribute)(int, int, CUfunction, CUdevice);
    CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*CtxGetDevice)(CUdevice *);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventQuery)(CUevent);
    CUresult (*StreamIsCapturing)(CUstream, int *);
    CUresult (*ThreadExchangeStreamCaptureMode)(int *);
    CUresult (*CtxSynchronize)(void);
    CUresult (*StreamGetPriority)(CUstream, int *);
    CUresult (*StreamGetCtx_v2)(CUstream, CUcontext *, void **); /* CUDA 12.5+: the green context too */
    CUresult (*GreenCtxGetDevResource)(void *, void *, int);
    CUresult (*StreamWaitValue32)(CUstream, uint64_t, uint32_t, unsigned);
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void load_driver(void) {
    void *lib = NULL;
    for (ccov_hook *h = ccov_cuda_hooks; !lib && h->name; ++h) lib = ccov_library_of(h);
    if (!lib) {
        ccov_log_once(40, "libcuda not found: CUDA launches go out unchanged");
        return;
    }
#define LOAD(field, name) *(void **)&drv.field = ccov_real_dlsym(lib, name)
    LOAD(FuncGetName, "cuFuncGetName");
    LOAD(KernelGetName, "cuKernelGetName");
    LOAD(FuncGetAttribute, "cuFuncGetAttribute");
    LOAD(KernelGetAttribute, "cuKernelGetAttribute");
    LOAD(FuncSetAttribute, "cuFuncSetAttribute");
    LOAD(KernelSetAttribute, "cuKernelSetAttribute");
    LOAD(DeviceGetAttribute, "cuDeviceGetAttribute");
    LOAD(CtxGetDevice, "cuCtxGetDevice");
    LOAD(CtxGetCurrent, "cuCtxGetCurrent");
    LOAD(EventCreate, "cuEventCreate");
    LOAD(EventRecord, "cuEventRecord");
    LOAD(EventQuery, "cuEventQuery");
    LOAD(StreamIsCapturing, "cuStreamIsCapturing");
    LOAD(ThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode");
    LOAD(CtxSynchronize, "cuCtxSynchronize");
    LOAD(StreamGetPriority, "cuStreamGetPriority");
    LOAD(StreamGetCtx_v2, "cuStreamGetCtx_v2");
    LOAD(GreenCtxGetDevResource, "cuGreenCtxGetDevResource");
    LOAD(StreamWaitValue32, "cuStreamWaitValue32_v2");
#undef LOAD
}

static int current_device(int *device) {
    pthread_once(&drv_once, load_driver);
    return drv.CtxGetDevice ? drv.CtxGetDevice(device) : -1;
}

static int attribute(CUfunction f, int per_device, int device, int a, int *out) {
    if (per_device) return drv.KernelGetAttribute ? drv.KernelGetAttribute(out, a, f, device) : -1;
    return drv.FuncGetAttribute ? drv.FuncGetAttribute(out, a, f) : -1;
}

/* A CUfunction answers cuFuncGetName; a CUkernel does not (400) but answers cuKernelGetName. */
static int describe(void *f, int kind, int device, ccov_info *out) {
    (void)kind;
    pthread_once(&drv_once, load_driver);
    const char *name = NULL;
    if (drv.FuncGetName && drv.FuncGetName(&name, f) == CUDA_SUCCESS && name) out->per_device = 0;
    else if (drv.KernelGetName && drv.KernelGetName(&name, f) == CUDA_SUCCESS && name) out->per_device = 1;
    else return -1;
    out->name = name;
    if (attribute(f, out->per_device, device, CU_FUNC_ATTRIBUTE_NUM_REGS, &out->regs) ||
        attribute(f, out->per_device, device, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &out->static_smem) ||
        attribute(f, out->per_device, device, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, &out->max_dynamic))
        return -1;
    if (attribute(f, out->per_device, device, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, &out->cluster)) out->cluster = 1;
    return 0;
}

static int get_max_dynamic(void *f, int per_device, int device, int *bytes) {
    return attribute(f, per_device, device, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
}

/* A CUkernel's attributes are per device; a CUfunction's belong to its context. */
static int set_attribute(void *f, int per_device, int device, int attr, int value) {
    int a = attr == CCOV_ATTR_CARVEOUT ? CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
                                       : CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
    if (per_device) return drv.KernelSetAttribute ? drv.KernelSetAttribute(a, value, f, device) : -1;
    return drv.FuncSetAttribute ? drv.FuncSetAttribute(f, a, value) : -1;
}

/* Attributes as limits.read_live reads them; the allocation rules the driver
 * does not report are limits._nvidia_arch_constants' (cc 8.0 and newer). */
static int device_limits(int device, ccov_device *d) {
    static const int attrs[] = {
        A_WARP_SIZE, A_MAX_THREADS_PER_BLOCK, A_MAX_THREADS_PER_MULTIPROCESSOR, A_MAX_BLOCKS_PER_MULTIPROCESSOR,
        A_MAX_REGISTERS_PER_MULTIPROCESSOR, A_MAX_REGISTERS_PER_BLOCK, A_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
        A_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, A_RESERVED_SHARED_MEMORY_PER_BLOCK, A_COMPUTE_CAPABILITY_MAJOR,
        A_MULTIPROCESSOR_COUNT};
    int v[sizeof attrs / sizeof *attrs];
    for (size_t i = 0; i < sizeof attrs / sizeof *attrs; ++i)
        if (!drv.DeviceGetAttribute || drv.DeviceGetAttribute(&v[i], attrs[i], device) != CUDA_SUCCESS) return -1;
    if (v[9] < 8) return -1;
    *d = (ccov_device){
        .warp_size = v[0], .max_threads_per_block = v[1], .max_threads_per_sm = v[2], .max_blocks_per_sm = v[3],
        .regs_per_sm = v[4], .regs_per_block = v[5], .smem_per_sm = v[6], .smem_per_block_optin = v[7],
        .smem_reserved_per_block = v[8], .sm_count = v[10],
        .reg_alloc_unit = 256, .max_regs_per_thread = 255, .reg_subpartitions = 4, .smem_alloc_unit = 128,
    };
    return 0;
}

/* Communication in flight. While any thread captures a graph in the global
 * mode, event calls are "potentially unsafe" and would invalidate that
 * capture: they run with this thread's capture mode set to relaxed, the
 * driver's way for a library to make calls it knows are safe (the events are
 * never recorded into a capture: a capturing comm stream is only asked
 * cuStreamIsCapturing, which is always allowed). */
static int relaxed_begin(void) {
    int mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (drv.ThreadExchangeStreamCaptureMode && drv.ThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS) return mode;
    return -1;
}
static void relaxed_end(int mode) {
    if (mode >= 0) drv.ThreadExchangeStreamCaptureMode(&mode);
}

static int capturing(CUstream s) {
    int status = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!drv.StreamIsCapturing || drv.StreamIsCapturing(s, &status) != CUDA_SUCCESS) return -1;
    return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

static int event_record(ccov_event *ev, void *stream) {
    pthread_once(&drv_once, load_driver);
    if (capturing(stream) == 1) return 1;
    CUcontext ctx = NULL;
    if (!drv.EventCreate || !drv.EventRecord || !drv.EventQuery || !drv.CtxGetCurrent ||
        drv.CtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx)
        return -1;
    int mode = relaxed_begin();
    CUresult rc = CUDA_SUCCESS;
    if (!ev->event || ev->owner != ctx) { /* one of another context stays with it (never destroyed under a query) */
        CUevent e = NULL;
        rc = drv.EventCreate(&e, CU_EVENT_DISABLE_TIMING);
        if (rc == CUDA_SUCCESS) *ev = (ccov_event){e, ctx};
    }
    if (rc == CUDA_SUCCESS) rc = drv.EventRecord(ev->event, stream);
    relaxed_end(mode);
    return rc == CUDA_SUCCESS ? 0 : -1;
}

static int event_done(ccov_event *ev) {
    int mode = relaxed_begin();
    CUresult rc = drv.EventQuery(ev->event);
    relaxed_end(mode);
    return rc == CUDA_SUCCESS ? 1 : rc == CUDA_ERROR_NOT_READY ? 0 : -1;
}

static int capture_done(void *stream) {
    int c = capturing(stream);
    return c < 0 ? -1 : !c;
}

/* Serialized launches: the context drained (in relaxed capture mode, as the events above), except on a
 * stream that captures a graph, where nothing runs. */
static int drain(void *stream) {
    pthread_once(&drv_once, load_driver);
    if (!drv.CtxSynchronize) return -1;
    if (capturing(stream) == 1) return 1;
    int mode = relaxed_begin();
    CUresult rc = drv.CtxSynchronize();
    relaxed_end(mode);
    return rc == CUDA_SUCCESS ? 0 : -1;
}

static int stream_priority(void *stream, int *priority) {
    pthread_once(&drv_once, load_driver);
    return drv.StreamGetPriority && drv.StreamGetPriority(stream, priority) == CUDA_SUCCESS ? 0 : -1;
}

/* CUdevResource (cuda.h, CUDA 12.4+): type, 92 bytes of padding, then the SM resource, whose first
 * field is smCount; 144 bytes in all, room kept for more. */
enum { CU_DEV_RESOURCE_TYPE_SM = 1, DEV_RESOURCE_SM_COUNT_AT = 96 };

static int stream_sms(void *stream, int *sms) {
    pthread_once(&drv_once, load_driver);
    CUcontext ctx = NULL;
    void *green = NULL;
    if (!drv.StreamGetCtx_v2 || drv.StreamGetCtx_v2(stream, &ctx, &green) != CUDA_SUCCESS) return -1;
    if (!green) {
        *sms = 0;
        return 0;
    }
    _Alignas(8) unsigned char resource[256] = {0};
    if (!drv.GreenCtxGetDevResource || drv.GreenCtxGetDevResource(green, resource, CU_DEV_RESOURCE_TYPE_SM) != CUDA_SUCCESS)
        return -1;
    memcpy(sms, resource + DEV_RESOURCE_SM_COUNT_AT, sizeof *sms);
    return 0;
}

/* The doctor's hold: a wait on the word (CU_STREAM_WAIT_VALUE_GEQ), never on a capturing stream (it would
 * become a node of the graph). */
static int wait_value(void *stream, uint64_t ptr, uint32_t value) {
    pthread_once(&drv_once, load_driver);
    if (!drv.StreamWaitValue32) return -1;
    int c = capturing(stream);
    if (c) return c;
    return drv.StreamWaitValue32(stream, ptr, value, 0) == CUDA_SUCCESS ? 0 : -1;
}

static void *current_context(void) {
    CUcontext ctx = NULL;
    return drv.CtxGetCurrent && drv.CtxGetCurrent(&ctx) == CUDA_SUCCESS ? ctx : NULL;
}

static const ccov_backend cuda = {"cuda", current_device, describe, device_limits, get_max_dynamic,
                                  set_attribute, NULL, event_record, event_done, capture_done,
                                  drain, stream_priority, stream_sms, current_context, wait_value};

/* ---------- hooks ---------- */

enum { H_GETPROC, H_GETPROC_V2, H_LAUNCH, H_LAUNCH_PTSZ, H_LAUNCH_EX, H_LAUNCH_EX_PTSZ, H_GRAPH, H_GRAPH_PTSZ,
       H_EXEC_DESTROY };
static const char *const libcuda[] = {"libcuda.so.1", "libcuda.so", NULL};

static int threads_of(unsigned x, unsigned y, unsigned z) {
    unsigned long long t = (unsigned long long)x * y * z;
    return t > 1u << 30 ? 1 << 30 : (int)t;
}

static unsigned grid_of(unsigned x, unsigned y, unsigned z) {
    unsigned long long g = (unsigned long long)x * y * z;
    return g > UINT_MAX ? UINT_MAX : (unsigned)g;
}

/* The launch's stream as any call takes it: NULL on a _ptsz entry point is
 * the calling thread's default stream. */
static CUstream stream_of(const ccov_hook *h, CUstream s) {
    int ptsz = h == &ccov_cuda_hooks[H_LAUNCH_PTSZ] || h == &ccov_cuda_hooks[H_LAUNCH_EX_PTSZ];
    return !s && ptsz ? CU_STREAM_PER_THREAD : s;
}

static CUresult launch(ccov_hook *h, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params, void **extra) {
    launch_fn real = (launch_fn)ccov_real(h);
    if (!real) return CUDA_ERROR_NOT_FOUND;
    ccov_launch_info li = {grid_of(gx, gy, gz), 0, 0, stream_of(h, s)};
    int threads = threads_of(bx, by, bz);
    ccov_launch l;
    int pad = ccov_begin(&cuda, f, 0, threads, shmem, &li, &l);
    CUresult rc = real(f, gx, gy, gz, bx, by, bz, shmem + (unsigned)pad, s, params, extra);
    if (rc != CUDA_SUCCESS && pad) {
        ccov_failed(&l);
        rc = real(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
    }
    ccov_end(&l, rc == CUDA_SUCCESS);
    return rc;
}

static CUresult launch_ex(ccov_hook *h, const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    launch_ex_fn real = (launch_ex_fn)ccov_real(h);
    if (!real) return CUDA_ERROR_NOT_FOUND;
    if (!c) return real(c, f, params, extra);
    ccov_launch_info li = {grid_of(c->gridDimX, c->gridDimY, c->gridDimZ), 0, 0, stream_of(h, c->hStream)};
    for (unsigned i = 0; c->attrs && i < c->numAttrs; ++i) {
        const CUlaunchAttribute *a = &c->attrs[i];
        if (a->id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && a->value.cooperative) li.cooperative = 1;
        if (a->id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
            li.cluster = threads_of(a->value.cluster.x, a->value.cluster.y, a->value.cluster.z);
    }
    int threads = threads_of(c->blockDimX, c->blockDimY, c->blockDimZ);
    ccov_launch l;
    int pad = ccov_begin(&cuda, f, 0, threads, c->sharedMemBytes, &li, &l);
    CUresult rc;
    if (pad) {
        CUlaunchConfig padded = *c; /* the caller's config is const: pad a copy */
        padded.sharedMemBytes += (unsigned)pad;
        rc = real(&padded, f, params, extra);
        if (rc != CUDA_SUCCESS) {
            ccov_failed(&l);
            rc = real(c, f, params, extra);
        }
    } else {
        rc = real(c, f, params, extra);
    }
    ccov_end(&l, rc == CUDA_SUCCESS);
    return rc;
}

#define LAUNCH_ARGS CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
                    unsigned shmem, CUstream s, void **params, void **extra
CCOV_EXPORT CUresult cuLaunchKernel(LAUNCH_ARGS) {
    return launch(&ccov_cuda_hooks[H_LAUNCH], f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}
CCOV_EXPORT CUresult cuLaunchKernel_ptsz(LAUNCH_ARGS) {
    return launch(&ccov_cuda_hooks[H_LAUNCH_PTSZ], f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}
CCOV_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    return launch_ex(&ccov_cuda_hooks[H_LAUNCH_EX], c, f, params, extra);
}
CCOV_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra) {
    return launch_ex(&ccov_cuda_hooks[H_LAUNCH_EX_PTSZ], c, f, params, extra);
}

/* A CUDA graph replay: serialized as one unit in the alone window (its kernels are not decided one by one);
 * there, a graph with a registered serial twin replays the twin (interposer.c), the graph itself where the twin
 * fails to launch. */
typedef CUresult (*graph_fn)(void *, CUstream);
static CUresult graph_launch(ccov_hook *h, void *graph, CUstream s) {
    graph_fn real = (graph_fn)ccov_real(h);
    if (!real) return CUDA_ERROR_NOT_FOUND;
    ccov_launch l;
    ccov_serial_unit_begin(&cuda, h == &ccov_cuda_hooks[H_GRAPH_PTSZ] && !s ? CU_STREAM_PER_THREAD : s, &l);
    void *twin = ccov_serial_twin(&l, graph);
    CUresult rc;
    if (twin && (rc = real(twin, s)) == CUDA_SUCCESS) ccov_serial_twin_ran();
    else rc = real(graph, s);
    ccov_serial_unit_end(&l);
    return rc;
}
CCOV_EXPORT CUresult cuGraphLaunch(void *g, CUstream s) { return graph_launch(&ccov_cuda_hooks[H_GRAPH], g, s); }
CCOV_EXPORT CUresult cuGraphLaunch_ptsz(void *g, CUstream s) { return graph_launch(&ccov_cuda_hooks[H_GRAPH_PTSZ], g, s); }

/* An executable destroyed: its serial twin, where one is registered, goes with it. */
typedef CUresult (*exec_destroy_fn)(void *);
CCOV_EXPORT CUresult cuGraphExecDestroy(void *exec) {
    exec_destroy_fn real = (exec_destroy_fn)ccov_real(&ccov_cuda_hooks[H_EXEC_DESTROY]);
    if (!real) return CUDA_ERROR_NOT_FOUND;
    void *twin = ccov_twin_forget(exec);
    if (twin) real(twin);
    return real(exec);
}

CCOV_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags) {
    getproc_fn real = (getproc_fn)ccov_real(&ccov_cuda_hooks[H_GETPROC]);
    if (!real) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = real(symbol, pfn, version, flags);
    if (rc == CUDA_SUCCESS && symbol && pfn && *pfn) *pfn = ccov_cuda_proc(symbol, *pfn, version, flags);
    return rc;
}

CCOV_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                                         int *status) {
    getproc_v2_fn real = (getproc_v2_fn)ccov_real(&ccov_cuda_hooks[H_GETPROC_V2]);
    if (!real) return CUDA_ERROR_NOT_FOUND;
    CUresult rc = real(symbol, pfn, version, flags, status);
    if (rc == CUDA_SUCCESS && symbol && pfn && *pfn) *pfn = ccov_cuda_proc(symbol, *pfn, version, flags);
    return rc;
}

ccov_hook ccov_cuda_hooks[] = {
    [H_GETPROC] = {"cuGetProcAddress", (void *)cuGetProcAddress, NULL, libcuda},
    [H_GETPROC_V2] = {"cuGetProcAddress_v2", (void *)cuGetProcAddress_v2, NULL, libcuda},
    [H_LAUNCH] = {"cuLaunchKernel", (void *)cuLaunchKernel, NULL, libcuda},
    [H_LAUNCH_PTSZ] = {"cuLaunchKernel_ptsz", (void *)cuLaunchKernel_ptsz, NULL, libcuda},
    [H_LAUNCH_EX] = {"cuLaunchKernelEx", (void *)cuLaunchKernelEx, NULL, libcuda},
    [H_LAUNCH_EX_PTSZ] = {"cuLaunchKernelEx_ptsz", (void *)cuLaunchKernelEx_ptsz, NULL, libcuda},
    [H_GRAPH] = {"cuGraphLaunch", (void *)cuGraphLaunch, NULL, libcuda},
    [H_GRAPH_PTSZ] = {"cuGraphLaunch_ptsz", (void *)cuGraphLaunch_ptsz, NULL, libcuda},
    [H_EXEC_DESTROY] = {"cuGraphExecDestroy", (void *)cuGraphExecDestroy, NULL, libcuda},
    {NULL, NULL, NULL, NULL},
};

/* The wrapper to hand out for `symbol`, whose real function is `p`; `p` itself
 * for anything not hooked. `version` is the CUDA version a cuGetProcAddress
 * look-up asked for, -1 for dlsym: the name "cuGetProcAddress" means the v2
 * ABI from CUDA 12.0 on (cuda.h maps it to cuGetProcAddress_v2), the exported
 * symbol of that name is the v1 ABI. */
static void *ccov_cuda_proc(const char *symbol, void *p, int version, unsigned long long flags) {
    if (strcmp(symbol, "cuGetProcAddress") == 0 || strcmp(symbol, "cuGetProcAddress_v2") == 0) {
        int v2 = symbol[16] == '_' || version >= 12000;
        ccov_hook *h = &ccov_cuda_hooks[v2 ? H_GETPROC_V2 : H_GETPROC];
        ccov_remember(h, p);
        return h->wrapper;
    }
    if (strncmp(symbol, "cuGraphLaunch", 13) == 0 && (!symbol[13] || strcmp(symbol + 13, "_ptsz") == 0)) {
        int ptsz = symbol[13] ? 1 : (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
        ccov_hook *h = &ccov_cuda_hooks[ptsz ? H_GRAPH_PTSZ : H_GRAPH];
        ccov_remember(h, p);
        return h->wrapper;
    }
    if (strcmp(symbol, "cuGraphExecDestroy") == 0) {
        ccov_remember(&ccov_cuda_hooks[H_EXEC_DESTROY], p);
        return ccov_cuda_hooks[H_EXEC_DESTROY].wrapper;
    }
    int ex = strncmp(symbol, "cuLaunchKernelEx", 16) == 0;
    if (!ex && strncmp(symbol, "cuLaunchKernel", 14) != 0) return p;
    const char *suffix = symbol + (ex ? 16 : 14);
    int ptsz;
    if (!*suffix) ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    else if (strcmp(suffix, "_ptsz") == 0) ptsz = 1;
    else return p;
    ccov_hook *h = &ccov_cuda_hooks[H_LAUNCH + 2 * ex + ptsz];
    ccov_remember(h, p);
    return h->wrapper;
}

/* dlsym of a hooked name: as cuGetProcAddress of it with no version or flags. */
static void *dlsym_answer(ccov_hook *h, const char *symbol, void *real) {
    (void)h;
    return ccov_cuda_proc(symbol, real, -1, 0);
}

static const ccov_frontend cuda_frontend = {ccov_cuda_hooks, dlsym_answer};
CCOV_FRONTEND(cuda_frontend);
