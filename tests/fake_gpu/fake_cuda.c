/* Fake libcuda.so.1: the driver entry points the interposer uses, with H200 limits. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_gpu.h"

#define MAGIC 0xC0DAF00Du
#define OPTIN 232448
enum { SUCCESS = 0, INVALID_VALUE = 1, INVALID_HANDLE = 400, NOT_FOUND = 500, NOT_READY = 600,
       CAPTURE_UNSUPPORTED = 900 };

_Atomic long fake_name_calls, fake_attr_calls;

fake_fn *fake_function(const char *name, int is_kernel, int regs, int static_smem, int max_dynamic) {
    fake_fn *f = calloc(1, sizeof *f);
    *f = (fake_fn){.magic = MAGIC, .name = name, .is_kernel = is_kernel, .regs = regs, .static_smem = static_smem};
    atomic_store(&f->max_dynamic, max_dynamic ? max_dynamic : 49152 - static_smem);
    return f;
}

static fake_fn *as(void *h, int kernel) {
    fake_fn *f = h;
    return f && f->magic == MAGIC && f->is_kernel == kernel ? f : NULL;
}

static CUresult get_attr(fake_fn *f, int a, int *v) {
    atomic_fetch_add(&fake_attr_calls, 1);
    if (!f) return INVALID_HANDLE;
    switch (a) {
    case 0: *v = 1024; return SUCCESS;
    case 1: *v = f->static_smem; return SUCCESS;
    case 4: *v = f->regs; return SUCCESS;
    case 8: *v = atomic_load(&f->max_dynamic); return SUCCESS;
    case 11: *v = 0; return SUCCESS;
    default: return INVALID_VALUE;
    }
}

static _Thread_local int current_device;
void fake_cuda_set_device(int device) { current_device = device; }

/* Every call is recorded, refused ones too (FAKE_CUDA_FAIL_CARVEOUT), so tests count attempts. */
static CUresult set_carveout(fake_fn *f, int v, int dev) {
    if (dev < 0 || dev >= FAKE_DEVICES || v < -1 || v > 100) return INVALID_VALUE;
    atomic_fetch_add(&f->carveout_calls[dev], 1);
    atomic_store(&f->carveout[dev], v);
    return getenv("FAKE_CUDA_FAIL_CARVEOUT") ? INVALID_VALUE : SUCCESS;
}

static CUresult set_attr(fake_fn *f, int a, int v, int dev) {
    if (!f) return INVALID_HANDLE;
    if (a == 9) return set_carveout(f, v, dev);
    if (a != 8 || getenv("FAKE_CUDA_FAIL_SET_ATTR") || v < 0 || v + f->static_smem > OPTIN) return INVALID_VALUE;
    atomic_store(&f->max_dynamic, v);
    atomic_fetch_add(&f->set_calls, 1);
    return SUCCESS;
}

CUresult cuFuncGetAttribute(int *v, int a, void *h) { return get_attr(as(h, 0), a, v); }
CUresult cuKernelGetAttribute(int *v, int a, void *h, int dev) { (void)dev; return get_attr(as(h, 1), a, v); }
CUresult cuFuncSetAttribute(void *h, int a, int v) { return set_attr(as(h, 0), a, v, current_device); } /* its context's */
CUresult cuKernelSetAttribute(int a, int v, void *h, int dev) { return set_attr(as(h, 1), a, v, dev); }

/* FAKE_CUDA_SLOW_NAME=US: each name look-up takes US microseconds, as a first look-up in a loaded process can;
 * the threads that launch the same handle meanwhile then all find it not cached yet. */
static CUresult get_name(fake_fn *f, const char **name) {
    atomic_fetch_add(&fake_name_calls, 1);
    const char *slow = getenv("FAKE_CUDA_SLOW_NAME");
    if (slow) usleep((useconds_t)atoi(slow));
    if (!f) return INVALID_HANDLE;
    *name = f->name;
    return SUCCESS;
}
CUresult cuFuncGetName(const char **name, void *h) { return get_name(as(h, 0), name); }
CUresult cuKernelGetName(const char **name, void *h) { return get_name(as(h, 1), name); }

CUresult cuCtxGetDevice(int *dev) { *dev = current_device; return SUCCESS; }
CUresult cuDeviceGetAttribute(int *v, int a, int dev) {
    static const int table[][2] = {{1, 1024}, {10, 32}, {12, 65536}, {16, 132}, {39, 2048}, {75, 9}, {76, 0},
                                   {81, 233472}, {82, 65536}, {97, OPTIN}, {106, 32}, {111, 1024}, {120, 1}};
    if (dev < 0 || dev >= FAKE_DEVICES) return INVALID_VALUE;
    for (size_t i = 0; i < sizeof table / sizeof *table; ++i)
        if (table[i][0] == a) { *v = table[i][1]; return SUCCESS; }
    return INVALID_VALUE;
}

static _Thread_local int entered_as; /* the variant a nested call was made for */
static int is_capturing(void *stream);
_Atomic long fake_busy_launches, fake_ctx_syncs, fake_stream_ctx_calls;
static _Atomic long outstanding; /* launches since the last cuCtxSynchronize */

static CUresult record(const CUlaunchConfig *c, void *h, int variant) {
    fake_fn *f = h;
    if (!f || f->magic != MAGIC) return INVALID_HANDLE;
    if ((int)c->sharedMemBytes > atomic_load(&f->max_dynamic)) return INVALID_VALUE;
    atomic_fetch_add(&f->launches, 1);
    atomic_fetch_add(&f->shared_sum, c->sharedMemBytes);
    atomic_store(&f->last_shared, (int)c->sharedMemBytes);
    atomic_store(&f->last_variant, entered_as ? entered_as : variant);
    if (!is_capturing(c->hStream) && atomic_fetch_add(&outstanding, 1) > 0) atomic_fetch_add(&fake_busy_launches, 1);
    return SUCCESS;
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *c, void *h, void **p, void **e) { (void)p; (void)e; return record(c, h, V_EX); }
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, void *h, void **p, void **e) { (void)p; (void)e; return record(c, h, V_EX_PTSZ); }

/* Like a driver whose legacy launch calls its exported Ex through the PLT:
 * with the interposer preloaded that inner call reaches the wrapper again,
 * which must pass it through rather than pad twice. */
CUresult cuLaunchKernel(void *h, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, void *s, void **p, void **e) {
    CUlaunchConfig c = {gx, gy, gz, bx, by, bz, shmem, s, NULL, 0};
    entered_as = V_LEGACY;
    CUresult rc = cuLaunchKernelEx(&c, h, p, e);
    entered_as = 0;
    return rc;
}
CUresult cuLaunchKernel_ptsz(void *h, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned shmem, void *s, void **p, void **e) {
    (void)p; (void)e;
    CUlaunchConfig c = {gx, gy, gz, bx, by, bz, shmem, s, NULL, 0};
    return record(&c, h, V_PTSZ);
}

/* A CUDA graph replay: its kernels run until the next cuCtxSynchronize, as a launch's. */
_Atomic long fake_graph_launches, fake_graph_runs[256], fake_graph_destroyed[256];
CUresult cuGraphLaunch(void *g, void *s) {
    if (g == FAKE_FAILING_GRAPH) return INVALID_VALUE;
    atomic_fetch_add(&fake_graph_launches, 1);
    atomic_fetch_add(&fake_graph_runs[(uintptr_t)g & 0xff], 1);
    if (!is_capturing(s) && atomic_fetch_add(&outstanding, 1) > 0) atomic_fetch_add(&fake_busy_launches, 1);
    return SUCCESS;
}
CUresult cuGraphLaunch_ptsz(void *g, void *s) { return cuGraphLaunch(g, s); }
CUresult cuGraphExecDestroy(void *g) {
    atomic_fetch_add(&fake_graph_destroyed[(uintptr_t)g & 0xff], 1);
    return SUCCESS;
}

CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int version, unsigned long long flags, int *status);
CUresult cuGetProcAddress(const char *sym, void **pfn, int version, unsigned long long flags);

/* ---------- events and stream capture ----------
 * An event recorded while events are held (fake_cuda_hold_events, or
 * FAKE_CUDA_HOLD_EVENTS=1 at start) is not ready until
 * fake_cuda_complete_events(); otherwise it completes at once. Streams marked
 * by fake_cuda_capture are capturing. As in the real driver's global capture
 * mode, while any stream captures, an event call from a thread whose capture
 * mode is not relaxed fails and invalidates the captures (fake_capture_invalidated). */
#define EVENT_MAGIC 0xE7E7u
typedef struct { unsigned magic; _Atomic long seq; _Atomic int held; } fake_event; /* thread-safe, like the driver's */
static _Atomic long event_seq, events_done_upto;
static _Atomic int events_held = -1;
static void *capturing_streams[8];
static _Atomic int captures;
static _Thread_local int capture_mode; /* 0 global, 1 thread-local, 2 relaxed */
_Atomic long fake_event_queries, fake_event_records, fake_events_created, fake_recorded_in_capture;
_Atomic int fake_capture_invalidated;

void fake_cuda_hold_events(int hold) { atomic_store(&events_held, hold); }
void fake_cuda_complete_events(void) { atomic_store(&events_done_upto, atomic_load(&event_seq)); }
void fake_cuda_capture(void *stream, int on) {
    for (int i = 0; i < 8; ++i)
        if (on ? !capturing_streams[i] : capturing_streams[i] == stream) {
            capturing_streams[i] = on ? stream : NULL;
            atomic_fetch_add(&captures, on ? 1 : -1);
            return;
        }
}
int fake_last_shared(void *h) { fake_fn *f = h; return f && f->magic == MAGIC ? atomic_load(&f->last_shared) : -1; }

static int is_capturing(void *stream) {
    for (int i = 0; i < 8; ++i)
        if (stream && capturing_streams[i] == stream) return 1;
    return 0;
}

/* A potentially unsafe call during a global-mode capture: refused, and the capture is lost. */
static int prohibited(void) {
    if (atomic_load(&captures) == 0 || capture_mode == 2) return 0;
    atomic_store(&fake_capture_invalidated, 1);
    return 1;
}

static int held(void) {
    if (atomic_load(&events_held) < 0) {
        const char *v = getenv("FAKE_CUDA_HOLD_EVENTS");
        atomic_store(&events_held, v && *v == '1');
    }
    return atomic_load(&events_held);
}

CUresult cuCtxGetCurrent(void **ctx) { *ctx = (void *)0xC7C; return SUCCESS; }
CUresult cuThreadExchangeStreamCaptureMode(int *mode) {
    int old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return SUCCESS;
}
CUresult cuStreamIsCapturing(void *stream, int *status) { *status = is_capturing(stream); return SUCCESS; }
CUresult cuEventCreate(void **ev, unsigned flags) {
    if (flags != 2) return INVALID_VALUE; /* the interposer asks for CU_EVENT_DISABLE_TIMING */
    if (prohibited()) return CAPTURE_UNSUPPORTED;
    fake_event *e = calloc(1, sizeof *e);
    e->magic = EVENT_MAGIC;
    *ev = e;
    atomic_fetch_add(&fake_events_created, 1);
    return SUCCESS;
}
CUresult cuEventRecord(void *ev, void *stream) {
    fake_event *e = ev;
    if (!e || e->magic != EVENT_MAGIC) return INVALID_HANDLE;
    if (getenv("FAKE_CUDA_FAIL_EVENT_RECORD")) return INVALID_VALUE;
    if (is_capturing(stream)) atomic_fetch_add(&fake_recorded_in_capture, 1);
    else if (prohibited()) return CAPTURE_UNSUPPORTED;
    atomic_store(&e->held, held());
    atomic_store(&e->seq, atomic_fetch_add(&event_seq, 1) + 1);
    atomic_fetch_add(&fake_event_records, 1);
    return SUCCESS;
}
CUresult cuEventQuery(void *ev) {
    fake_event *e = ev;
    atomic_fetch_add(&fake_event_queries, 1);
    if (!e || e->magic != EVENT_MAGIC) return INVALID_HANDLE;
    if (prohibited()) return CAPTURE_UNSUPPORTED;
    return atomic_load(&e->held) && atomic_load(&e->seq) > atomic_load(&events_done_upto) ? NOT_READY : SUCCESS;
}
CUresult cuEventDestroy_v2(void *ev) {
    fake_event *e = ev;
    if (!e || e->magic != EVENT_MAGIC) return INVALID_HANDLE;
    e->magic = 0;
    free(e);
    return SUCCESS;
}
CUresult cuEventDestroy(void *ev) { return cuEventDestroy_v2(ev); }

/* ---------- serialized launches, stream priorities, green contexts ---------- */
static struct { void *stream; int priority, sms; } streams[16];
static _Atomic int nstreams;
void fake_cuda_stream(void *stream, int priority, int green_sms) {
    int i = atomic_fetch_add(&nstreams, 1);
    if (i < 16) streams[i].stream = stream, streams[i].priority = priority, streams[i].sms = green_sms;
}
static int stream_index(void *stream) {
    for (int i = 0; i < atomic_load(&nstreams) && i < 16; ++i)
        if (streams[i].stream == stream) return i;
    return -1;
}
CUresult cuCtxSynchronize(void) {
    if (prohibited()) return CAPTURE_UNSUPPORTED;
    atomic_fetch_add(&fake_ctx_syncs, 1);
    atomic_store(&outstanding, 0);
    return SUCCESS;
}
_Atomic long fake_waits;
_Atomic unsigned long long fake_wait_log[FAKE_WAIT_LOG];
CUresult cuStreamWaitValue32_v2(void *stream, uint64_t ptr, uint32_t value, unsigned flags) {
    if (flags != 0 || !ptr) return INVALID_VALUE; /* the doctor's hold waits for "at least" (GEQ) */
    long n = atomic_fetch_add(&fake_waits, 1);
    atomic_store(&fake_wait_log[n % FAKE_WAIT_LOG], (unsigned long long)value << 32 | (uint32_t)(uintptr_t)stream);
    return SUCCESS;
}
CUresult cuStreamGetPriority(void *stream, int *priority) {
    int i = stream_index(stream);
    *priority = i < 0 ? 0 : streams[i].priority;
    return SUCCESS;
}
#define GREEN_BASE 0x6000u
CUresult cuStreamGetCtx_v2(void *stream, void **ctx, void **green) {
    atomic_fetch_add(&fake_stream_ctx_calls, 1);
    int i = stream_index(stream);
    *ctx = (void *)0xC7C;
    *green = i >= 0 && streams[i].sms ? (void *)(uintptr_t)(GREEN_BASE + streams[i].sms) : NULL;
    return SUCCESS;
}
CUresult cuGreenCtxGetDevResource(void *green, void *resource, int type) {
    if (type != 1 || (uintptr_t)green <= GREEN_BASE) return INVALID_VALUE;
    memset(resource, 0, 144); /* CUdevResource: type, 92 bytes, then smCount */
    *(int *)resource = 1;
    unsigned sms = (unsigned)((uintptr_t)green - GREEN_BASE);
    memcpy((char *)resource + 96, &sms, sizeof sms);
    return SUCCESS;
}

static void *lookup(const char *sym, int version, unsigned long long flags) {
    int ptds = (flags & 2) != 0;
    if (!strcmp(sym, "cuLaunchKernel")) return ptds ? (void *)cuLaunchKernel_ptsz : (void *)cuLaunchKernel;
    if (!strcmp(sym, "cuLaunchKernelEx")) return ptds ? (void *)cuLaunchKernelEx_ptsz : (void *)cuLaunchKernelEx;
    if (!strcmp(sym, "cuGraphLaunch")) return ptds ? (void *)cuGraphLaunch_ptsz : (void *)cuGraphLaunch;
    if (!strcmp(sym, "cuGraphExecDestroy")) return (void *)cuGraphExecDestroy;
    if (!strcmp(sym, "cuGetProcAddress")) return version >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
    if (!strcmp(sym, "cuFuncGetName")) return (void *)cuFuncGetName;
    if (!strcmp(sym, "cuCtxGetDevice")) return (void *)cuCtxGetDevice;
    return NULL;
}

CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int version, unsigned long long flags, int *status) {
    *pfn = lookup(sym, version, flags);
    if (status) *status = *pfn ? 0 : 1;
    return *pfn ? SUCCESS : NOT_FOUND;
}
CUresult cuGetProcAddress(const char *sym, void **pfn, int version, unsigned long long flags) {
    return cuGetProcAddress_v2(sym, pfn, version, flags, NULL);
}
