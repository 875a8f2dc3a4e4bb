/* Fake libamdhip64.so: the HIP entry points the interposer uses, MI250X-like (64 KiB LDS). */
#include <stdlib.h>
#include <string.h>

#include "fake_gpu.h"

#define MAGIC 0xA3DF00Du
#define LDS 65536
enum { SUCCESS = 0, INVALID_VALUE = 1, INVALID_HANDLE = 400, NOT_READY = 600 };

typedef struct { int binaryVersion, cacheModeCA; size_t constSizeBytes, localSizeBytes;
                 int maxDynamicSharedSizeBytes, maxThreadsPerBlock, numRegs, preferredShmemCarveout, ptxVersion;
                 size_t sharedSizeBytes; } hipFuncAttributes;

static struct { const void *stub; fake_fn *f; } stubs[64];
static int nstubs;

fake_fn *fake_hip_function(const void *host_stub, const char *name, int regs, int static_smem) {
    fake_fn *f = calloc(1, sizeof *f);
    *f = (fake_fn){.magic = MAGIC, .name = name, .regs = regs, .static_smem = static_smem};
    atomic_store(&f->max_dynamic, LDS - static_smem);
    if (host_stub) stubs[nstubs++] = (typeof(stubs[0])){host_stub, f};
    return f;
}

static fake_fn *module_fn(void *h) { fake_fn *f = h; return f && f->magic == MAGIC ? f : NULL; }
static fake_fn *stub_fn(const void *p) {
    for (int i = 0; i < nstubs; ++i) if (stubs[i].stub == p) return stubs[i].f;
    return NULL;
}

int hipGetDevice(int *d) { *d = 0; return SUCCESS; }
int hipDeviceGetAttribute(int *v, int a, int d) {
    if ((a != 10002 && a != 63) || d != 0) return INVALID_VALUE;
    *v = a == 63 ? 110 : LDS;
    return SUCCESS;
}

/* Events: not ready while FAKE_HIP_HOLD_EVENTS=1 and until fake_hip_complete_events(). */
typedef struct { unsigned magic; long seq; } fake_event;
static _Atomic long event_seq, events_done_upto;
void fake_hip_complete_events(void) { atomic_store(&events_done_upto, atomic_load(&event_seq)); }
int hipEventCreateWithFlags(void **ev, unsigned flags) {
    if (flags != 2) return INVALID_VALUE;
    fake_event *e = calloc(1, sizeof *e);
    e->magic = MAGIC;
    *ev = e;
    return SUCCESS;
}
int hipEventRecord(void *ev, void *stream) {
    (void)stream;
    fake_event *e = ev;
    if (!e || e->magic != MAGIC) return INVALID_HANDLE;
    e->seq = atomic_fetch_add(&event_seq, 1) + 1;
    return SUCCESS;
}
int hipEventQuery(void *ev) {
    fake_event *e = ev;
    if (!e || e->magic != MAGIC) return INVALID_HANDLE;
    const char *hold = getenv("FAKE_HIP_HOLD_EVENTS");
    return hold && *hold == '1' && e->seq > atomic_load(&events_done_upto) ? NOT_READY : SUCCESS;
}
int hipStreamIsCapturing(void *stream, int *status) { (void)stream; *status = 0; return SUCCESS; }
_Atomic long fake_hip_syncs;
int hipDeviceSynchronize(void) { atomic_fetch_add(&fake_hip_syncs, 1); return SUCCESS; }
int hipThreadExchangeStreamCaptureMode(int *mode) { (void)mode; return SUCCESS; }
int hipFuncGetAttribute(int *v, int a, void *h) {
    fake_fn *f = module_fn(h);
    if (!f) return INVALID_HANDLE;
    if (a == 1) *v = f->static_smem;
    else if (a == 4) *v = f->regs;
    else return INVALID_VALUE;
    return SUCCESS;
}
int hipFuncGetAttributes(hipFuncAttributes *a, const void *p) {
    fake_fn *f = stub_fn(p);
    if (!f) return INVALID_VALUE;
    memset(a, 0, sizeof *a);
    a->numRegs = f->regs;
    a->sharedSizeBytes = (size_t)f->static_smem;
    a->maxDynamicSharedSizeBytes = LDS - f->static_smem;
    return SUCCESS;
}
/* Recorded like the CUDA fake's attribute raises, so a test sees the interposer never calls it. */
int hipFuncSetAttribute(const void *p, int a, int v) {
    (void)a; (void)v;
    fake_fn *f = stub_fn(p);
    if (!f) return INVALID_VALUE;
    atomic_fetch_add(&f->set_calls, 1);
    return SUCCESS;
}
const char *hipKernelNameRef(void *h) { fake_fn *f = module_fn(h); return f ? f->name : NULL; }
const char *hipKernelNameRefByPtr(const void *p, void *stream) { (void)stream; fake_fn *f = stub_fn(p); return f ? f->name : NULL; }

static int record(fake_fn *f, size_t shared, int variant) {
    if (!f) return INVALID_HANDLE;
    if (shared + (size_t)f->static_smem > LDS) return INVALID_VALUE;
    atomic_fetch_add(&f->launches, 1);
    atomic_fetch_add(&f->shared_sum, (long long)shared);
    atomic_store(&f->last_shared, (int)shared);
    atomic_store(&f->last_variant, variant);
    return SUCCESS;
}

int hipModuleLaunchKernel(void *h, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned shmem, void *s, void **p, void **e) {
    (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)s; (void)p; (void)e;
    return record(module_fn(h), shmem, V_HIP_MODULE);
}
int hipExtModuleLaunchKernel(void *h, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t lx, uint32_t ly, uint32_t lz,
                             size_t shmem, void *s, void **p, void **e, void *start, void *stop, uint32_t flags) {
    (void)gx; (void)gy; (void)gz; (void)lx; (void)ly; (void)lz; (void)s; (void)p; (void)e; (void)start; (void)stop; (void)flags;
    return record(module_fn(h), shmem, V_HIP_EXT);
}
int hipGraphLaunch(void *graph, void *s) { (void)graph; (void)s; return 0; }
int hipLaunchKernel(const void *fn, dim3 grid, dim3 block, void **args, size_t shmem, void *s) {
    (void)grid; (void)block; (void)args; (void)s;
    return record(stub_fn(fn), shmem, V_HIP_LAUNCH);
}
