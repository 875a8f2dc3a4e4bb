/* Launches fake kernels through every path a program can reach the driver by,
 * and prints one JSON line per launch with what the fake driver received.
 *
 *   launcher paths              every CUDA path, three kernels each
 *   launcher auto               compute, then communication, then compute again
 *   launcher repeat N           N launches of one kernel: look-ups must be cached
 *   launcher threads T N        T threads x N launches of two kernels
 *   launcher bench N REPS [comm] median ns per cached launch (comm: after one comm launch, for auto mode)
 *   launcher hip                every HIP path
 *   launcher big                a kernel whose pad would pass the opt-in maximum
 *   launcher raised             the program raises a kernel's attribute after its first launch
 *   launcher waves G...         the H200 DDP comm kernel, then three compute kernels at each grid G
 *   launcher gate               compute while comm events are pending, complete, and captured
 *   launcher switch             ccoverlap_set_policy between launches
 *   launcher switch_threads T N T threads launching while the policy flips
 *   launcher gate_threads T N   T threads launching comm and compute while events complete
 *   launcher keep NAME:THREADS:REGS:DYN:GRID...  the Hopper NCCL comm kernel (in flight), then each kernel
 *   launcher carveout T N       T threads (thread i on device i % 2) x N rounds of compute, comm and a cooperative
 *                               launch; then the carveout calls each kernel received per device
 *   launcher first T H          T threads (thread i on device i % 2) released at once, each launching H fresh
 *                               CUfunctions, H fresh CUkernels and H fresh cooperative CUfunctions, one launch
 *                               each: the first launches of every handle race; then the carveout calls received
 *   launcher serialize T N      T threads x N launches (compute, comm, graph, Ex) with ccoverlap_set_serialize(1), a
 *                               launch on a capturing stream, then 10 launches serialized off: busy launches
 *   launcher hip_serialize N    N HIP launches serialized: the device syncs they made
 *   launcher twin T N           serial twins of graph executables (ccoverlap_graph_twin): who replays, refusals,
 *                               a failing twin, destroys; then T threads x N rounds of register, serialized
 *                               replay and destroy, each thread its own executable; then the table filled
 *   launcher hold T N           N rounds: ccoverlap_arm_hold, then T threads launching at once (kernels and graph
 *                               replays): the waits placed; then a disarmed hold and one armed on a capturing stream
 *   launcher observe            comm launches on streams of known priority and cluster, compute on a green
 *                               context's stream and elsewhere: what the stats must say */
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

static double ns_between(const struct timespec *t0, const struct timespec *t1) {
    return (t1->tv_sec - t0->tv_sec) * 1e9 + (t1->tv_nsec - t0->tv_nsec);
}

/* ns_per_launch: the median rep's wall time; cpu_ns_per_launch: the least thread CPU time of a rep, which a
 * loaded machine does not inflate (time spent preempted is not the thread's). */
static void bench(long n, int reps, int after_comm) {
    double ns[64], cpu = 0;
    if (after_comm) cuLaunchKernel(comm, 16, 1, 1, 640, 1, 1, 82240, (void *)0x1000, NULL, NULL);
    reps = reps < 64 ? reps : 64;
    for (int r = 0; r < reps; ++r) {
        struct timespec t0, t1, c0, c1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long i = 0; i < n; ++i) /* after comm: a kernel auto mode pads */
            cuLaunchKernel_ptsz(after_comm ? compute : kernel, 132, 1, 1, 256, 1, 1, 1024, NULL, NULL, NULL);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
        ns[r] = ns_between(&t0, &t1) / n;
        if (r == 0 || ns_between(&c0, &c1) / n < cpu) cpu = ns_between(&c0, &c1) / n;
    }
    qsort(ns, reps, sizeof *ns, by_value);
    printf("{\"ns_per_launch\": %.2f, \"cpu_ns_per_launch\": %.2f, \"launches\": %ld, \"reps\": %d}\n",
           ns[reps / 2], cpu, n, reps);
}

/* ---------- gating, waves and the runtime switch ---------- */

#define COMM_STREAM ((void *)0x1000)
#define CAPTURED_STREAM ((void *)0x2000)
#define COMPUTE_STREAM ((void *)0x3000)

static void step(const char *path, fake_fn *f, unsigned grid, unsigned threads, unsigned dyn, void *stream) {
    int rc = f == comm || strncmp(f->name, "nccl", 4) == 0
                 ? cuLaunchKernel(f, grid, 1, 1, threads, 1, 1, dyn, stream, NULL, NULL) /* re-enters Ex: nested */
                 : cuLaunchKernel_ptsz(f, grid, 1, 1, threads, 1, 1, dyn, stream, NULL, NULL);
    printf("{\"path\": \"%s\", \"kernel\": \"%s\", \"grid\": %u, \"rc\": %d, \"requested\": %u, \"shared\": %d}\n",
           path, f->name, grid, rc, dyn, atomic_load(&f->last_shared));
}

static void compute_step(const char *path) { step(path, compute, 132, 256, 1024, COMPUTE_STREAM); }
static void comm_step(const char *path, void *stream) { step(path, comm, 16, 640, 82240, stream); }

static void waves(int n, char **grids) {
    /* the footprint auto mode learned from DDP's first NCCL kernel on two H200 */
    fake_fn *allgather = fake_function("ncclDevKernel_AllGather_RING_LL", 0, 96, 21568, 82240);
    fake_fn *elementwise = fake_function("elementwise_kernel", 0, 16, 0, 0);
    step("comm", allgather, 1, 128, 82240, COMM_STREAM);
    for (int i = 0; i < n; ++i) {
        unsigned g = (unsigned)strtoul(grids[i], NULL, 10);
        step(grids[i], elementwise, g, 128, 0, COMPUTE_STREAM);
        step(grids[i], compute, g, 256, 1024, COMPUTE_STREAM);
        step(grids[i], kernel, g, 256, 1024, COMPUTE_STREAM);
    }
}

static void counters(void) {
    printf("{\"path\": \"counters\", \"queries\": %ld, \"records\": %ld, \"created\": %ld, "
           "\"recorded_in_capture\": %ld, \"invalidated\": %d}\n",
           atomic_load(&fake_event_queries), atomic_load(&fake_event_records), atomic_load(&fake_events_created),
           atomic_load(&fake_recorded_in_capture), atomic_load(&fake_capture_invalidated));
}

static void gate(void) {
    fake_cuda_hold_events(1);
    compute_step("before_comm");
    comm_step("comm", COMM_STREAM);
    compute_step("pending");
    fake_cuda_complete_events();
    compute_step("completed");
    long q = atomic_load(&fake_event_queries);
    for (int i = 0; i < 1000; ++i) cuLaunchKernel_ptsz(compute, 132, 1, 1, 256, 1, 1, 1024, COMPUTE_STREAM, NULL, NULL);
    printf("{\"path\": \"idle\", \"queries\": %ld}\n", atomic_load(&fake_event_queries) - q);
    comm_step("comm2", COMM_STREAM);
    comm_step("comm3", COMM_STREAM); /* the same stream: supersedes comm2's event */
    compute_step("pending2");
    fake_cuda_complete_events();
    compute_step("completed2");
    comm_step("comm_before_capture", COMM_STREAM); /* still running while another stream captures */
    fake_cuda_capture(CAPTURED_STREAM, 1);
    comm_step("comm_captured", CAPTURED_STREAM);
    compute_step("capturing");
    fake_cuda_complete_events();
    compute_step("capturing_events_done");
    fake_cuda_capture(CAPTURED_STREAM, 0);
    compute_step("capture_ended");
    counters();
}

typedef int (*set_policy_fn)(int, int);

static set_policy_fn find_set_policy(void) {
    set_policy_fn set = (set_policy_fn)dlsym(RTLD_DEFAULT, "ccoverlap_set_policy");
    if (!set) { printf("{\"path\": \"no_set_policy\"}\n"); exit(0); }
    return set;
}

static void switch_policy(void) {
    set_policy_fn set = find_set_policy();
    fake_cuda_hold_events(1); /* auto's gate: communication stays in flight */
    compute_step("start");
    static const struct { const char *name; int mode, value; } steps[] = {
        {"off", 0, 0}, {"pad4096", 1, 4096}, {"pad8192", 1, 8192}, {"blocks2", 2, 2}, {"bad_pad", 1, 0},
        {"bad_blocks", 2, 2049}, {"bad_mode", 7, 1}, {"auto", 3, 0}};
    for (size_t i = 0; i < sizeof steps / sizeof *steps; ++i) {
        int rc = set(steps[i].mode, steps[i].value);
        printf("{\"path\": \"set\", \"step\": \"%s\", \"set_rc\": %d}\n", steps[i].name, rc);
        compute_step(steps[i].name);
    }
    comm_step("comm", COMM_STREAM);
    compute_step("auto_after_comm");
}

static _Atomic int flipping, bad_pads;
static void *switch_worker(void *arg) {
    fake_fn *f = arg;
    for (long i = 0; i < per_thread || atomic_load(&flipping); ++i) {
        cuLaunchKernel_ptsz(f, 132, 1, 1, 256, 1, 1, 1024, COMPUTE_STREAM, NULL, NULL);
        int shared = atomic_load(&f->last_shared);
        if (shared != 1024 && shared != 1024 + 256 && shared != 1024 + 512) atomic_fetch_add(&bad_pads, 1);
    }
    return NULL;
}

static void switch_threads(int t, long n) {
    set_policy_fn set = find_set_policy();
    pthread_t tid[64];
    fake_fn *fs[64];
    per_thread = n;
    atomic_store(&flipping, 1);
    for (int i = 0; i < t && i < 64; ++i) {
        fs[i] = fake_function("computeT_func", 0, 16, 0, 0);
        pthread_create(&tid[i], NULL, switch_worker, fs[i]);
    }
    for (int i = 0; i < 3000; ++i) set(i % 3 == 0 ? 0 : 1, i % 3 == 1 ? 256 : 512);
    set(1, 512);
    atomic_store(&flipping, 0);
    for (int i = 0; i < t && i < 64; ++i) pthread_join(tid[i], NULL);
    long launches = 0, last_ok = 0;
    for (int i = 0; i < t && i < 64; ++i) { /* after the last switch, every shape is decided afresh */
        cuLaunchKernel_ptsz(fs[i], 132, 1, 1, 256, 1, 1, 1024, COMPUTE_STREAM, NULL, NULL);
        last_ok += atomic_load(&fs[i]->last_shared) == 1024 + 512;
        launches += atomic_load(&fs[i]->launches);
    }
    printf("{\"launches\": %ld, \"bad_pads\": %d, \"last_ok\": %ld}\n", launches, atomic_load(&bad_pads), last_ok);
}

static _Atomic int gating;
static void *gate_worker(void *arg) {
    long id = (long)arg;
    void *own = (void *)(0x10000 + 0x100 * id), *shared = (void *)0x5000;
    for (long i = 0; i < per_thread; ++i) {
        if (i % 4 == 0) cuLaunchKernel(comm, 16, 1, 1, 640, 1, 1, 82240, i % 8 ? own : shared, NULL, NULL);
        else cuLaunchKernel_ptsz(compute, 132, 1, 1, 256, 1, 1, 1024, COMPUTE_STREAM, NULL, NULL);
    }
    return NULL;
}

static void gate_threads(int t, long n) {
    pthread_t tid[64];
    per_thread = n;
    fake_cuda_hold_events(1);
    atomic_store(&gating, 1);
    for (long i = 0; i < t && i < 64; ++i) pthread_create(&tid[i], NULL, gate_worker, (void *)i);
    for (int i = 0; i < 2000; ++i) fake_cuda_complete_events();
    for (int i = 0; i < t && i < 64; ++i) pthread_join(tid[i], NULL);
    /* one comm more, after the workers: in flight whatever the completions above overtook (under load the main
     * thread's loop may complete every worker's last event) */
    cuLaunchKernel(comm, 16, 1, 1, 640, 1, 1, 82240, (void *)0x5000, NULL, NULL);
    cuLaunchKernel_ptsz(compute, 132, 1, 1, 256, 1, 1, 1024, COMPUTE_STREAM, NULL, NULL);
    int pending = atomic_load(&compute->last_shared) != 1024; /* events held: that comm is in flight */
    fake_cuda_complete_events();
    cuLaunchKernel_ptsz(compute, 132, 1, 1, 256, 1, 1, 1024, COMPUTE_STREAM, NULL, NULL); /* retires them all */
    long q = atomic_load(&fake_event_queries);
    cuLaunchKernel_ptsz(compute, 132, 1, 1, 256, 1, 1, 1024, COMPUTE_STREAM, NULL, NULL);
    printf("{\"pending_padded\": %d, \"idle_shared\": %d, \"idle_queries\": %ld, \"created\": %ld}\n", pending,
           atomic_load(&compute->last_shared), atomic_load(&fake_event_queries) - q, atomic_load(&fake_events_created));
}

/* Auto's cost cap: compute kernels made to order, launched while the comm kernel (640 threads x 96
 * registers, 104,832 B of shared memory: NCCL's Hopper footprint) is in flight. */
static void keep(int n, char **specs) {
    fake_cuda_hold_events(1);
    comm_step("comm", COMM_STREAM);
    for (int i = 0; i < n; ++i) {
        char name[64];
        unsigned threads, regs, dyn, grid;
        if (sscanf(specs[i], "%63[^:]:%u:%u:%u:%u", name, &threads, &regs, &dyn, &grid) != 5) exit(2);
        fake_fn *f = fake_function(strdup(name), 0, (int)regs, 0, (int)dyn); /* the program raised its attribute */
        step(specs[i], f, grid, threads, dyn, COMPUTE_STREAM);
    }
}

/* ---------- the carveout hint ---------- */

typedef struct { int id; char pad[4]; union { char raw[64]; int cooperative; } value; } launch_attr; /* CUlaunchAttribute */
static fake_fn *coop;

static void *carveout_worker(void *arg) {
    long id = (long)arg;
    fake_cuda_set_device((int)(id % 2));
    launch_attr attr = {.id = 2, .value.cooperative = 1}; /* CU_LAUNCH_ATTRIBUTE_COOPERATIVE */
    for (long i = 0; i < per_thread; ++i) {
        CUlaunchConfig c = {132, 1, 1, 256, 1, 1, 1024, COMPUTE_STREAM, NULL, 0};
        cuLaunchKernelEx(&c, kernel, NULL, NULL); /* a CUkernel: one handle on both devices */
        if (id % 2 == 0) cuLaunchKernel_ptsz(compute, 132, 1, 1, 256, 1, 1, 1024, COMPUTE_STREAM, NULL, NULL);
        cuLaunchKernel(comm, 16, 1, 1, 640, 1, 1, 82240, COMM_STREAM, NULL, NULL);
        CUlaunchConfig cc = {132, 1, 1, 256, 1, 1, 1024, COMPUTE_STREAM, &attr, 1};
        cuLaunchKernelEx(&cc, coop, NULL, NULL);
    }
    return NULL;
}

static void carveout(int t, long n) {
    pthread_t tid[64];
    coop = fake_function("coop_grid_sync_kernel", 0, 32, 0, 0);
    per_thread = n;
    for (long i = 0; i < t && i < 64; ++i) pthread_create(&tid[i], NULL, carveout_worker, (void *)i);
    for (int i = 0; i < t && i < 64; ++i) pthread_join(tid[i], NULL);
    fake_fn *all[] = {compute, kernel, comm, coop};
    for (int i = 0; i < 4; ++i)
        printf("{\"kernel\": \"%s\", \"calls\": [%d, %d], \"value\": [%d, %d], \"launches\": %ld, \"shared_sum\": %lld, "
               "\"requested\": %u}\n",
               all[i]->name, atomic_load(&all[i]->carveout_calls[0]), atomic_load(&all[i]->carveout_calls[1]),
               atomic_load(&all[i]->carveout[0]), atomic_load(&all[i]->carveout[1]), atomic_load(&all[i]->launches),
               atomic_load(&all[i]->shared_sum), dyn_of(all[i]));
}

/* Every thread makes the first launch of the same handles at the same time, on two devices: a handle that is
 * not per device (a CUfunction) must get one cache entry, one hint; a CUkernel one per device. */
#define FIRST_MAX 512
static fake_fn *first_fn[FIRST_MAX], *first_kernel[FIRST_MAX], *first_coop[FIRST_MAX];
static pthread_barrier_t first_start;
static long first_handles;

static void *first_worker(void *arg) {
    long id = (long)arg;
    fake_cuda_set_device((int)(id % 2));
    launch_attr attr = {.id = 2, .value.cooperative = 1};
    pthread_barrier_wait(&first_start);
    for (long i = 0; i < first_handles; ++i) {
        cuLaunchKernel_ptsz(first_fn[i], 132, 1, 1, 256, 1, 1, 1024, COMPUTE_STREAM, NULL, NULL);
        CUlaunchConfig c = {132, 1, 1, 256, 1, 1, 1024, COMPUTE_STREAM, NULL, 0};
        cuLaunchKernelEx(&c, first_kernel[i], NULL, NULL);
        CUlaunchConfig cc = {132, 1, 1, 256, 1, 1, 1024, COMPUTE_STREAM, &attr, 1};
        cuLaunchKernelEx(&cc, first_coop[i], NULL, NULL);
    }
    return NULL;
}

static void first(int t, long h) {
    pthread_t tid[64];
    char name[64];
    first_handles = h < FIRST_MAX ? h : FIRST_MAX;
    for (long i = 0; i < first_handles; ++i) {
        snprintf(name, sizeof name, "firstF_%ld_func", i);
        first_fn[i] = fake_function(strdup(name), 0, 16, 0, 0);
        snprintf(name, sizeof name, "firstK_%ld_kernel", i);
        first_kernel[i] = fake_function(strdup(name), 1, 32, 1024, 0);
        snprintf(name, sizeof name, "firstC_%ld_coop", i);
        first_coop[i] = fake_function(strdup(name), 0, 32, 0, 0);
    }
    t = t < 64 ? t : 64;
    pthread_barrier_init(&first_start, NULL, (unsigned)t);
    for (long i = 0; i < t; ++i) pthread_create(&tid[i], NULL, first_worker, (void *)i);
    for (int i = 0; i < t; ++i) pthread_join(tid[i], NULL);
    long fn_not_once = 0, kernel_not_once = 0, coop_set = 0, launches = 0;
    for (long i = 0; i < first_handles; ++i) {
        fn_not_once += atomic_load(&first_fn[i]->carveout_calls[0]) + atomic_load(&first_fn[i]->carveout_calls[1]) != 1;
        kernel_not_once += atomic_load(&first_kernel[i]->carveout_calls[0]) != 1 ||
                           atomic_load(&first_kernel[i]->carveout_calls[1]) != (t > 1);
        coop_set += atomic_load(&first_coop[i]->carveout_calls[0]) + atomic_load(&first_coop[i]->carveout_calls[1]);
        launches += atomic_load(&first_fn[i]->launches) + atomic_load(&first_kernel[i]->launches) +
                    atomic_load(&first_coop[i]->launches);
    }
    printf("{\"handles\": %ld, \"launches\": %ld, \"functions_not_set_once\": %ld, "
           "\"kernels_not_set_once_per_device\": %ld, \"cooperative_set\": %ld}\n",
           first_handles, launches, fn_not_once, kernel_not_once, coop_set);
}

/* ---------- serialized launches and what launches show ---------- */

typedef int (*serialize_fn)(int);
static serialize_fn serialize_switch;

static void *serial_worker(void *arg) {
    long id = (long)arg;
    for (long i = 0; i < per_thread; ++i) {
        if ((i + id) % 4 == 0) cuLaunchKernel_ptsz(compute, 132, 1, 1, 256, 1, 1, 1024, COMPUTE_STREAM, NULL, NULL);
        else if ((i + id) % 4 == 1) cuLaunchKernel(comm, 16, 1, 1, 640, 1, 1, 82240, COMM_STREAM, NULL, NULL);
        else if ((i + id) % 4 == 2) cuGraphLaunch((void *)0x6a, COMPUTE_STREAM); /* a CUDA graph replay */
        else {
            CUlaunchConfig c = {132, 1, 1, 256, 1, 1, 1024, COMPUTE_STREAM, NULL, 0};
            cuLaunchKernelEx(&c, kernel, NULL, NULL);
        }
    }
    return NULL;
}

static void serialize(int t, long n) {
    serialize_switch = (serialize_fn)dlsym(RTLD_DEFAULT, "ccoverlap_set_serialize");
    if (!serialize_switch) { printf("{\"path\": \"no_serialize\"}\n"); return; }
    pthread_t tid[64];
    per_thread = n;
    int before = serialize_switch(1);
    for (long i = 0; i < t && i < 64; ++i) pthread_create(&tid[i], NULL, serial_worker, (void *)i);
    for (int i = 0; i < t && i < 64; ++i) pthread_join(tid[i], NULL);
    long busy = atomic_load(&fake_busy_launches), syncs = atomic_load(&fake_ctx_syncs);
    fake_cuda_capture(CAPTURED_STREAM, 1); /* a graph capture: nothing runs, nothing may sync */
    cuLaunchKernel_ptsz(compute, 132, 1, 1, 256, 1, 1, 1024, CAPTURED_STREAM, NULL, NULL);
    fake_cuda_capture(CAPTURED_STREAM, 0);
    long capture_syncs = atomic_load(&fake_ctx_syncs) - syncs;
    int was = serialize_switch(0);
    for (int i = 0; i < 10; ++i) cuLaunchKernel_ptsz(compute, 132, 1, 1, 256, 1, 1, 1024, COMPUTE_STREAM, NULL, NULL);
    printf("{\"before\": %d, \"was\": %d, \"launches\": %ld, \"graphs\": %ld, \"busy\": %ld, \"syncs\": %ld, "
           "\"capture_syncs\": %ld, \"invalidated\": %d, \"busy_after\": %ld}\n",
           before, was, (long)t * n, atomic_load(&fake_graph_launches), busy, syncs, capture_syncs,
           atomic_load(&fake_capture_invalidated),
           atomic_load(&fake_busy_launches) - busy);
}

typedef int (*arm_fn)(void *, unsigned long long, unsigned);
static pthread_barrier_t hold_start;

static void *hold_worker(void *arg) {
    long id = (long)arg;
    pthread_barrier_wait(&hold_start);
    if (id % 2) cuGraphLaunch((void *)0x6a, COMPUTE_STREAM);
    else cuLaunchKernel(comm, 16, 1, 1, 640, 1, 1, 82240, COMM_STREAM, NULL, NULL);
    return NULL;
}

/* The waits placed since the `from`-th: -1 unless the first is on `held` and any second on `other`, each with
 * `value`; else how many went on `other`. */
static long waits_since(long from, void *held, void *other, unsigned value) {
    long to = atomic_load(&fake_waits), on_other = 0;
    for (long i = from; i < to; ++i) {
        unsigned long long w = atomic_load(&fake_wait_log[i % FAKE_WAIT_LOG]);
        void *stream = i == from ? held : other;
        if (i - from > 1 || (w >> 32) != value || (uint32_t)w != (uint32_t)(uintptr_t)stream) return -1;
        on_other += i > from;
    }
    return to > from ? on_other : -1;
}

static void hold(int t, long n) {
    arm_fn arm = (arm_fn)dlsym(RTLD_DEFAULT, "ccoverlap_arm_hold");
    if (!arm) { printf("{\"path\": \"no_hold\"}\n"); return; }
    pthread_t tid[64];
    t = t < 64 ? t : 64;
    long wrong = 0, on_launch_stream = 0;
    for (long round = 1; round <= n; ++round) {
        long from = atomic_load(&fake_waits);
        arm(COMPUTE_STREAM, 0xF1A6, (unsigned)round); /* the held stream is the compute one, whoever launches */
        pthread_barrier_init(&hold_start, NULL, (unsigned)t);
        for (long i = 0; i < t; ++i) pthread_create(&tid[i], NULL, hold_worker, (void *)i);
        for (int i = 0; i < t; ++i) pthread_join(tid[i], NULL);
        pthread_barrier_destroy(&hold_start);
        /* the held stream first; a communication thread that launched first also held its own stream */
        long other = waits_since(from, COMPUTE_STREAM, COMM_STREAM, (unsigned)round);
        wrong += other < 0;
        on_launch_stream += other > 0;
    }
    long from = atomic_load(&fake_waits);
    arm(COMPUTE_STREAM, 0xF1A6, (unsigned)n + 1); /* one thread, first launching on another stream: both held */
    cuLaunchKernel(comm, 16, 1, 1, 640, 1, 1, 82240, COMM_STREAM, NULL, NULL);
    long both = waits_since(from, COMPUTE_STREAM, COMM_STREAM, (unsigned)n + 1);
    long armed = atomic_load(&fake_waits);
    arm(COMPUTE_STREAM, 0xF1A6, (unsigned)n + 2);
    arm(NULL, 0, 0); /* disarmed: the step ended before any launch */
    cuLaunchKernel(comm, 16, 1, 1, 640, 1, 1, 82240, COMM_STREAM, NULL, NULL);
    long disarmed = atomic_load(&fake_waits) - armed;
    fake_cuda_capture(CAPTURED_STREAM, 1);
    arm(CAPTURED_STREAM, 0xF1A6, (unsigned)n + 3); /* a wait would become part of the graph */
    cuLaunchKernel_ptsz(compute, 132, 1, 1, 256, 1, 1, 1024, CAPTURED_STREAM, NULL, NULL);
    long in_capture = atomic_load(&fake_waits) - armed - disarmed;
    from = atomic_load(&fake_waits);
    arm(COMPUTE_STREAM, 0xF1A6, (unsigned)n + 4); /* the first launch in a capture: only the held stream waits */
    cuLaunchKernel_ptsz(compute, 132, 1, 1, 256, 1, 1, 1024, CAPTURED_STREAM, NULL, NULL);
    long capturing_launch = waits_since(from, COMPUTE_STREAM, CAPTURED_STREAM, (unsigned)n + 4);
    fake_cuda_capture(CAPTURED_STREAM, 0);
    printf("{\"rounds\": %ld, \"wrong\": %ld, \"on_launch_stream\": %ld, \"both\": %ld, \"after_disarm\": %ld, "
           "\"in_capture\": %ld, \"capturing_launch\": %ld}\n",
           n, wrong, on_launch_stream, both, disarmed, in_capture, capturing_launch);
}

static void hip_serialize(long n) {
    serialize_fn on = (serialize_fn)dlsym(RTLD_DEFAULT, "ccoverlap_set_serialize");
    if (!on) { printf("{\"path\": \"no_serialize\"}\n"); return; }
    fake_fn *mod = fake_hip_function(NULL, "hip_gemm_kernel", 64, 0);
    on(1);
    for (long i = 0; i < n; ++i) hipModuleLaunchKernel(mod, 110, 1, 1, 256, 1, 1, 1024, NULL, NULL, NULL);
    hipGraphLaunch((void *)0x6a, NULL); /* a graph replay: serialized as one unit */
    on(0);
    hipModuleLaunchKernel(mod, 110, 1, 1, 256, 1, 1, 1024, NULL, NULL, NULL);
    printf("{\"launches\": %ld, \"syncs\": %ld}\n", n + 2, atomic_load(&fake_hip_syncs));
}

#define HIGH_STREAM ((void *)0x4000)
#define GREEN_STREAM ((void *)0x5000)

static void observe(void) {
    fake_cuda_stream(HIGH_STREAM, -3, 0);
    fake_cuda_stream(COMM_STREAM, 0, 0);
    fake_cuda_stream(GREEN_STREAM, 0, 116);
    launch_attr attr = {.id = 4}; /* CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: 4 x 1 x 1 */
    unsigned dims[3] = {4, 1, 1};
    memcpy(attr.value.raw, dims, sizeof dims);
    for (int i = 0; i < 3; ++i) {
        CUlaunchConfig c = {16, 1, 1, 544, 1, 1, 82240, HIGH_STREAM, &attr, 1};
        cuLaunchKernelEx(&c, comm, NULL, NULL);
    }
    cuLaunchKernel(comm, 8, 1, 1, 640, 1, 1, 82240, COMM_STREAM, NULL, NULL); /* no cluster */
    for (int i = 0; i < 5; ++i) {
        cuLaunchKernel_ptsz(compute, 116 * 8, 1, 1, 256, 1, 1, 1024, GREEN_STREAM, NULL, NULL);
        cuLaunchKernel_ptsz(kernel, 132, 1, 1, 256, 1, 1, 1024, COMPUTE_STREAM, NULL, NULL);
    }
    printf("{\"stream_ctx_calls\": %ld}\n", atomic_load(&fake_stream_ctx_calls));
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

/* ---------- serial twins of CUDA graphs ---------- */

typedef int (*twin_fn)(void *, void *);
static twin_fn register_twin;
#define G(x) ((void *)(uintptr_t)(x))

static void *twin_worker(void *arg) {
    long id = (long)arg;
    for (long i = 0; i < per_thread; ++i) {
        if (register_twin(G(0x20 + id), G(0xA0 + id)) != 0) atomic_fetch_add(&fake_busy_launches, 1000000);
        cuGraphLaunch(G(0x20 + id), COMPUTE_STREAM);
        cuGraphExecDestroy(G(0x20 + id));
    }
    return NULL;
}

static void twin(int t, long n) {
    serialize_switch = (serialize_fn)dlsym(RTLD_DEFAULT, "ccoverlap_set_serialize");
    register_twin = (twin_fn)dlsym(RTLD_DEFAULT, "ccoverlap_graph_twin");
    if (!serialize_switch || !register_twin) { printf("{\"path\": \"no_twin\"}\n"); return; }
    cuLaunchKernel_ptsz(compute, 132, 1, 1, 256, 1, 1, 1024, COMPUTE_STREAM, NULL, NULL); /* stats need a launch */
    int ok = register_twin(G(0x10), G(0x90));
    int refused = (register_twin(G(0x10), G(0x91)) != 0) + (register_twin(G(0x11), G(0x90)) != 0) +
                  (register_twin(NULL, G(0x92)) != 0) + (register_twin(G(0x13), NULL) != 0) +
                  (register_twin(G(0x14), G(0x14)) != 0);
    cuGraphLaunch(G(0x10), COMPUTE_STREAM); /* not serialized: the graph itself */
    long plain = atomic_load(&fake_graph_runs[0x10]);
    serialize_switch(1);
    cuGraphLaunch(G(0x10), COMPUTE_STREAM); /* serialized: its twin */
    long twin_runs = atomic_load(&fake_graph_runs[0x90]), graph_runs = atomic_load(&fake_graph_runs[0x10]);
    int failing = register_twin(G(0x12), FAKE_FAILING_GRAPH);
    int rc = cuGraphLaunch(G(0x12), COMPUTE_STREAM); /* its twin fails: the graph itself */
    cuGraphExecDestroy(G(0x10));
    long destroyed = atomic_load(&fake_graph_destroyed[0x10]) + atomic_load(&fake_graph_destroyed[0x90]);
    cuGraphLaunch(G(0x10), COMPUTE_STREAM); /* an executable at the same address: no stale twin */
    long after = atomic_load(&fake_graph_runs[0x10]) - graph_runs;
    cuGraphExecDestroy(G(0x12));
    pthread_t tid[32];
    per_thread = n;
    t = t < 32 ? t : 32;
    long busy = atomic_load(&fake_busy_launches);
    for (long i = 0; i < t; ++i) pthread_create(&tid[i], NULL, twin_worker, (void *)i);
    for (int i = 0; i < t; ++i) pthread_join(tid[i], NULL);
    long wrong = atomic_load(&fake_busy_launches) - busy;
    for (int i = 0; i < t; ++i)
        wrong += (atomic_load(&fake_graph_runs[0x20 + i]) != 0) + (atomic_load(&fake_graph_runs[0xA0 + i]) != n) +
                 (atomic_load(&fake_graph_destroyed[0xA0 + i]) != n) + (atomic_load(&fake_graph_destroyed[0x20 + i]) != n);
    serialize_switch(0);
    int held = 0;
    while (held < 1000 && register_twin(G(0x1000 + held), G(0x100000 + held)) == 0) ++held;
    printf("{\"registered\": %d, \"refused\": %d, \"plain\": %ld, \"twin_runs\": %ld, \"graph_runs\": %ld, "
           "\"failing_registered\": %d, \"failing_rc\": %d, \"failing_graph_runs\": %ld, \"destroyed\": %ld, "
           "\"after_destroy\": %ld, \"threads_wrong\": %ld, \"table\": %d}\n",
           ok, refused, plain, twin_runs, graph_runs, failing, rc, atomic_load(&fake_graph_runs[0x12]), destroyed, after,
           wrong, held);
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
    else if (!strcmp(cmd, "bench") && argc > 3) bench(atol(argv[2]), atoi(argv[3]), argc > 4 && !strcmp(argv[4], "comm"));
    else if (!strcmp(cmd, "hip")) hip();
    else if (!strcmp(cmd, "waves")) waves(argc - 2, argv + 2);
    else if (!strcmp(cmd, "gate")) gate();
    else if (!strcmp(cmd, "switch")) switch_policy();
    else if (!strcmp(cmd, "switch_threads") && argc > 3) switch_threads(atoi(argv[2]), atol(argv[3]));
    else if (!strcmp(cmd, "gate_threads") && argc > 3) gate_threads(atoi(argv[2]), atol(argv[3]));
    else if (!strcmp(cmd, "keep")) keep(argc - 2, argv + 2);
    else if (!strcmp(cmd, "carveout") && argc > 3) carveout(atoi(argv[2]), atol(argv[3]));
    else if (!strcmp(cmd, "first") && argc > 3) first(atoi(argv[2]), atol(argv[3]));
    else if (!strcmp(cmd, "serialize") && argc > 3) serialize(atoi(argv[2]), atol(argv[3]));
    else if (!strcmp(cmd, "observe")) observe();
    else if (!strcmp(cmd, "hold") && argc > 3) hold(atoi(argv[2]), atol(argv[3]));
    else if (!strcmp(cmd, "hip_serialize") && argc > 2) hip_serialize(atol(argv[2]));
    else if (!strcmp(cmd, "twin") && argc > 3) twin(atoi(argv[2]), atol(argv[3]));
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
