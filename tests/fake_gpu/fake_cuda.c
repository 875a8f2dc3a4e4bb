/* Fake libcuda.so.1: the driver entry points the interposer uses, with H200 limits. */
#include <stdlib.h>
#include <string.h>

#include "fake_gpu.h"

#define MAGIC 0xC0DAF00Du
#define OPTIN 232448
enum { SUCCESS = 0, INVALID_VALUE = 1, INVALID_HANDLE = 400, NOT_FOUND = 500 };

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

static CUresult set_attr(fake_fn *f, int a, int v) {
    if (!f) return INVALID_HANDLE;
    if (a != 8 || getenv("FAKE_CUDA_FAIL_SET_ATTR") || v < 0 || v + f->static_smem > OPTIN) return INVALID_VALUE;
    atomic_store(&f->max_dynamic, v);
    atomic_fetch_add(&f->set_calls, 1);
    return SUCCESS;
}

CUresult cuFuncGetAttribute(int *v, int a, void *h) { return get_attr(as(h, 0), a, v); }
CUresult cuKernelGetAttribute(int *v, int a, void *h, int dev) { (void)dev; return get_attr(as(h, 1), a, v); }
CUresult cuFuncSetAttribute(void *h, int a, int v) { return set_attr(as(h, 0), a, v); }
CUresult cuKernelSetAttribute(int a, int v, void *h, int dev) { (void)dev; return set_attr(as(h, 1), a, v); }

static CUresult get_name(fake_fn *f, const char **name) {
    atomic_fetch_add(&fake_name_calls, 1);
    if (!f) return INVALID_HANDLE;
    *name = f->name;
    return SUCCESS;
}
CUresult cuFuncGetName(const char **name, void *h) { return get_name(as(h, 0), name); }
CUresult cuKernelGetName(const char **name, void *h) { return get_name(as(h, 1), name); }

CUresult cuCtxGetDevice(int *dev) { *dev = 0; return SUCCESS; }
CUresult cuDeviceGetAttribute(int *v, int a, int dev) {
    static const int table[][2] = {{1, 1024}, {10, 32}, {12, 65536}, {16, 132}, {39, 2048}, {75, 9}, {76, 0},
                                   {81, 233472}, {82, 65536}, {97, OPTIN}, {106, 32}, {111, 1024}, {120, 1}};
    if (dev != 0) return INVALID_VALUE;
    for (size_t i = 0; i < sizeof table / sizeof *table; ++i)
        if (table[i][0] == a) { *v = table[i][1]; return SUCCESS; }
    return INVALID_VALUE;
}

static _Thread_local int entered_as; /* the variant a nested call was made for */

static CUresult record(const CUlaunchConfig *c, void *h, int variant) {
    fake_fn *f = h;
    if (!f || f->magic != MAGIC) return INVALID_HANDLE;
    if ((int)c->sharedMemBytes > atomic_load(&f->max_dynamic)) return INVALID_VALUE;
    atomic_fetch_add(&f->launches, 1);
    atomic_fetch_add(&f->shared_sum, c->sharedMemBytes);
    atomic_store(&f->last_shared, (int)c->sharedMemBytes);
    atomic_store(&f->last_variant, entered_as ? entered_as : variant);
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

CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int version, unsigned long long flags, int *status);
CUresult cuGetProcAddress(const char *sym, void **pfn, int version, unsigned long long flags);

static void *lookup(const char *sym, int version, unsigned long long flags) {
    int ptds = (flags & 2) != 0;
    if (!strcmp(sym, "cuLaunchKernel")) return ptds ? (void *)cuLaunchKernel_ptsz : (void *)cuLaunchKernel;
    if (!strcmp(sym, "cuLaunchKernelEx")) return ptds ? (void *)cuLaunchKernelEx_ptsz : (void *)cuLaunchKernelEx;
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
