/* Launches fake kernels through every path a program can reach the driver by,
 * and prints one JSON line per launch with what the fake driver received.
 *
 *   launcher paths              every CUDA path, three kernels each
 *   launcher auto               compute, then communication, then compute again
 *   launcher repeat N           N launches of one kernel: look-ups must be cached
 *   launcher threads T N        T threads x N launches of two kernels
 *   launcher bench N REPS       median ns per cached launch
 *   launcher hip                every HIP path
 *   launcher big                a kernel whose pad would pass the opt-in maximum
 *   launcher raised             the program raises a kernel's attribute after its first launch */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_gpu.h"

#define PTDS 2ull
static fake_fn *compute, *kernel, *comm;

static void report(const char *path, const char *fn, fake_fn *f, unsigned requested, int rc) {
    printf("{\"path\": \"%s\", \"fn\": \"%s\", \"kernel\": \"%s\", \"rc\": %d, \"requested\": %u, \"shared\": %d, "
           "\"variant\": %d, \"set_calls\": %d}\n",
           path, fn, f->name, rc, requested, atomic_load(&f->last_shared), atomic_load(&f->last_variant),
           atomic_load(&f->set_calls));
}

static unsigned dyn_of(fake_fn *f) { return f == comm ? 82240 : 1024; }
static unsigned threads_of(fake_fn *f) { return f == comm ? 640 : 256; }

static void via_launch(const char *path, const char *fn, launch_fn l) {
    fake_fn *all[] = {compute, kernel, comm};
    for (int i = 0; i < 3; ++i) {
        fake_fn *f = all[i];
        int rc = l(f, 132, 1, 1, threads_of(f), 1, 1, dyn_of(f), NULL, NULL, NULL);
        report(path, fn, f, dyn_of(f), rc);
    }
}

static void via_launch_ex(const char *path, const char *fn, launch_ex_fn l) {
    fake_fn *all[] = {compute, kernel, comm};
    for (int i = 0; i < 3; ++i) {
        fake_fn *f = all[i];
        CUlaunchConfig c = {132, 1, 1, threads_of(f), 1, 1, dyn_of(f), NULL, NULL, 0};
        int rc = l(&c, f, NULL, NULL);
        report(path, fn, f, dyn_of(f), rc);
    }
}

static void *must(void *p, const char *what) {
    if (!p) { fprintf(stderr, "launcher: %s not found\n", what); exit(3); }
    return p;
}

static void paths(void) {
    via_launch("direct", "cuLaunchKernel", cuLaunchKernel);
    via_launch("direct", "cuLaunchKernel_ptsz", cuLaunchKernel_ptsz);
    via_launch_ex("direct", "cuLaunchKernelEx", cuLaunchKernelEx);
    via_launch_ex("direct", "cuLaunchKernelEx_ptsz", cuLaunchKernelEx_ptsz);

    void *lib = must(dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL), "libcuda.so.1");
    via_launch("dlsym", "cuLaunchKernel", must(dlsym(lib, "cuLaunchKernel"), "dlsym cuLaunchKernel"));
    via_launch("dlsym", "cuLaunchKernel_ptsz", must(dlsym(lib, "cuLaunchKernel_ptsz"), "dlsym ptsz"));
    via_launch_ex("dlsym", "cuLaunchKernelEx", must(dlsym(lib, "cuLaunchKernelEx"), "dlsym Ex"));
    via_launch_ex("dlsym", "cuLaunchKernelEx_ptsz", must(dlsym(lib, "cuLaunchKernelEx_ptsz"), "dlsym Ex ptsz"));
    via_launch_ex("dlsym_default", "cuLaunchKernelEx", must(dlsym(RTLD_DEFAULT, "cuLaunchKernelEx"), "default Ex"));

    getproc_v2_fn gp2 = must(dlsym(lib, "cuGetProcAddress_v2"), "cuGetProcAddress_v2");
    getproc_fn gp1 = must(dlsym(lib, "cuGetProcAddress"), "cuGetProcAddress");
    void *p;
    int st;
    const char *names[] = {"cuLaunchKernel", "cuLaunchKernelEx"};
    for (int flags = 0; flags <= 1; ++flags)
        for (int ex = 0; ex <= 1; ++ex) {
            char fn[64];
            snprintf(fn, sizeof fn, "%s%s", names[ex], flags ? "/ptds" : "");
            if (gp2(names[ex], &p, 12080, flags ? PTDS : 0, &st) != 0) exit(4);
            if (ex) via_launch_ex("getproc_v2", fn, p); else via_launch("getproc_v2", fn, p);
            if (gp1(names[ex], &p, 11030, flags ? PTDS : 0) != 0) exit(4);
            if (ex) via_launch_ex("getproc_v1", fn, p); else via_launch("getproc_v1", fn, p);
        }
    /* cudart and NCCL ask cuGetProcAddress for itself, then resolve through the answer */
    getproc_v2_fn self;
    if (gp2("cuGetProcAddress", (void **)&self, 12080, 0, &st) != 0) exit(4);
    if (self("cuLaunchKernelEx", &p, 12080, PTDS, &st) != 0) exit(4);
    via_launch_ex("getproc_self", "cuLaunchKernelEx/ptds", p);
}

static void auto_mode(void) {
    via_launch("before_comm", "cuLaunchKernel_ptsz", cuLaunchKernel_ptsz);
    via_launch("after_comm", "cuLaunchKernel_ptsz", cuLaunchKernel_ptsz);
}

static void repeat(long n) {
    for (long i = 0; i < n; ++i) cuLaunchKernel_ptsz(kernel, 132, 1, 1, 256, 1, 1, 1024, NULL, NULL, NULL);
    printf("{\"launches\": %ld, \"shared_sum\": %lld, \"name_calls\": %ld, \"attr_calls\": %ld, \"set_calls\": %d}\n",
           atomic_load(&kernel->launches), atomic_load(&kernel->shared_sum), atomic_load(&fake_name_calls),
           atomic_load(&fake_attr_calls), atomic_load(&kernel->set_calls));
}

static long per_thread;
static void *worker(void *arg) {
    long id = (long)arg;
    for (long i = 0; i < per_thread; ++i) {
        if ((i + id) % 2) {
            cuLaunchKernel_ptsz(compute, 132, 1, 1, 256, 1, 1, 1024, NULL, NULL, NULL);
        } else {
            CUlaunchConfig c = {132, 1, 1, 256, 1, 1, 1024, NULL, NULL, 0};
            cuLaunchKernelEx(&c, kernel, NULL, NULL);
        }
    }
    return NULL;
}

static void threads(int t, long n) {
    pthread_t tid[256];
    per_thread = n;
    for (long i = 0; i < t; ++i) pthread_create(&tid[i], NULL, worker, (void *)i);
    for (int i = 0; i < t; ++i) pthread_join(tid[i], NULL);
    printf("{\"launches\": %ld, \"shared_sum\": %lld, \"name_calls\": %ld}\n",
           atomic_load(&compute->launches) + atomic_load(&kernel->launches),
           atomic_load(&compute->shared_sum) + atomic_load(&kernel->shared_sum), atomic_load(&fake_name_calls));
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void bench(long n, int reps) {
    double ns[64];
    for (int r = 0; r < reps && r < 64; ++r) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long i = 0; i < n; ++i) cuLaunchKernel_ptsz(kernel, 132, 1, 1, 256, 1, 1, 1024, NULL, NULL, NULL);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ns[r] = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n;
    }
    qsort(ns, reps, sizeof *ns, by_value);
    printf("{\"ns_per_launch\": %.2f, \"launches\": %ld, \"reps\": %d}\n", ns[reps / 2], n, reps);
}

static void host_stub(void) {}

static void hip(void) {
    fake_fn *mod = fake_hip_function(NULL, "hip_gemm_kernel", 64, 0);
    fake_fn *rccl = fake_hip_function(NULL, "ncclDevKernel_rccl_AllReduce", 128, 0);
    fake_fn *stub = fake_hip_function((const void *)host_stub, "hip_elementwise_kernel", 32, 512);
    fake_fn *mods[] = {mod, rccl};
    for (int i = 0; i < 2; ++i) {
        report("hip", "hipModuleLaunchKernel", mods[i],
               1024, hipModuleLaunchKernel(mods[i], 110, 1, 1, 256, 1, 1, 1024, NULL, NULL, NULL));
        report("hip", "hipExtModuleLaunchKernel", mods[i],
               1024, hipExtModuleLaunchKernel(mods[i], 110 * 256, 1, 1, 256, 1, 1, 1024, NULL, NULL, NULL, NULL, NULL, 0));
    }
    dim3 grid = {110, 1, 1}, block = {256, 1, 1};
    report("hip", "hipLaunchKernel", stub, 1024, hipLaunchKernel((const void *)host_stub, grid, block, NULL, 1024, NULL));
    void *lib = must(dlopen("libamdhip64.so", RTLD_NOW), "libamdhip64.so");
    launch_fn l = must(dlsym(lib, "hipModuleLaunchKernel"), "dlsym hipModuleLaunchKernel");
    report("hip_dlsym", "hipModuleLaunchKernel", mod, 2048, l(mod, 110, 1, 1, 256, 1, 1, 2048, NULL, NULL, NULL));
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    compute = fake_function("computeA_func", 0, 16, 0, 0);
    kernel = fake_function("computeK_cudart_kernel", 1, 32, 1024, 0);
    comm = fake_function("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 0, 96, 22592, 82240);
    const char *cmd = argv[1];
    if (!strcmp(cmd, "paths")) paths();
    else if (!strcmp(cmd, "auto")) auto_mode();
    else if (!strcmp(cmd, "repeat") && argc > 2) repeat(atol(argv[2]));
    else if (!strcmp(cmd, "threads") && argc > 3) threads(atoi(argv[2]), atol(argv[3]));
    else if (!strcmp(cmd, "bench") && argc > 3) bench(atol(argv[2]), atoi(argv[3]));
    else if (!strcmp(cmd, "hip")) hip();
    else if (!strcmp(cmd, "big")) {
        fake_fn *big = fake_function("big_smem_kernel", 0, 32, 200000, 30000);
        int rc = cuLaunchKernel_ptsz(big, 132, 1, 1, 256, 1, 1, 30000, NULL, NULL, NULL);
        report("big", "cuLaunchKernel_ptsz", big, 30000, rc);
    } else if (!strcmp(cmd, "raised")) {
        unsigned dyn[] = {1024, 2048, 190000};
        for (int i = 0; i < 3; ++i) {
            if (i == 1) cuFuncSetAttribute(compute, 8, 200000); /* what cutlass or Triton do before big launches */
            int rc = cuLaunchKernel_ptsz(compute, 132, 1, 1, 256, 1, 1, dyn[i], NULL, NULL, NULL);
            report("raised", "cuLaunchKernel_ptsz", compute, dyn[i], rc);
        }
    } else return 2;
    return 0;
}
