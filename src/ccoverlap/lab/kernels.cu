// ccoverlap's kernels: compute (fma, elementwise) and communication proxies (the lab's
// reduce-copy, the bench emulation's paced collective), compiled with NVRTC.
// Every kernel may stamp, per block, its start and end (%globaltimer, ns) and SM id, so the
// lab can draw which blocks were resident where and when. `stamps` may be null.
// Build-time macros: STATIC_BYTES (static shared memory of the comm proxies), UNROLL (their loads
// in flight per thread: register pressure), both set by ccoverlap.lab.kernels.

#ifndef STATIC_BYTES
#define STATIC_BYTES 16
#endif
#ifndef UNROLL
#define UNROLL 4
#endif

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ unsigned sm_id() {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}

__device__ __forceinline__ void stamp(unsigned long long* stamps, unsigned long long t0) {
    __syncthreads();
    if (stamps && threadIdx.x == 0) {
        unsigned long long* s = stamps + 3ull * blockIdx.x;
        s[0] = t0;
        s[1] = global_ns();
        s[2] = sm_id();
    }
}

// The prologue of both communication proxies, a macro so that each kernel compiles to what it did
// when the lines stood in it: declares `fixed` (STATIC_BYTES of static shared memory, written here
// and read in the kernel's last lines so it is kept), `t0` (the start stamp), and this CTA's
// slice [begin, end) of n elements, walked in strides of `step` (blockDim.x x UNROLL).
#define COMM_PROLOGUE(n)                                                \
    __shared__ volatile char fixed[STATIC_BYTES];                       \
    unsigned long long t0 = global_ns();                                \
    if (threadIdx.x == 0) fixed[blockIdx.x % STATIC_BYTES] = 1;         \
    long long per_cta = (n + gridDim.x - 1) / gridDim.x;                \
    long long begin = per_cta * blockIdx.x;                             \
    long long end = min(begin + per_cta, n);                            \
    long long step = (long long)blockDim.x * UNROLL

// Compute-bound: a chain of dependent FMAs per thread, one element per thread.
extern "C" __global__ void fma_kernel(const float* __restrict__ in, float* __restrict__ out, int iters,
                                      unsigned long long* stamps) {
    unsigned long long t0 = global_ns();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    float a = in[i];
    float b = 0.5f + 0.25f * a;
    float x = a;
    for (int k = 0; k < iters; ++k) {
        x = fmaf(x, b, a);
        x = fmaf(x, 0.75f, -0.25f);
    }
    out[i] = x;
    stamp(stamps, t0);
}

// Memory-bound: z = 1.5 x + 0.5 y on float4, four vectors per thread.
extern "C" __global__ void triad_kernel(const float4* __restrict__ x, const float4* __restrict__ y,
                                        float4* __restrict__ z, long long n4, unsigned long long* stamps) {
    unsigned long long t0 = global_ns();
    long long base = ((long long)blockIdx.x * blockDim.x) * 4 + threadIdx.x;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        long long i = base + (long long)j * blockDim.x;
        if (i < n4) {
            float4 a = x[i], b = y[i];
            b.x = fmaf(1.5f, a.x, 0.5f * b.x);
            b.y = fmaf(1.5f, a.y, 0.5f * b.y);
            b.z = fmaf(1.5f, a.z, 0.5f * b.z);
            b.w = fmaf(1.5f, a.w, 0.5f * b.w);
            z[i] = b;
        }
    }
    stamp(stamps, t0);
}

// Communication proxy: out = a + b over this CTA's slice, staged through dynamic shared memory
// like NCCL's reduce-copy, with static shared memory and registers matched to the real kernel.
extern "C" __global__ void comm_proxy(const float4* __restrict__ a, const float4* __restrict__ b,
                                      float4* __restrict__ out, long long n4, int stage_slots,
                                      unsigned long long* stamps) {
    extern __shared__ float4 stage[];
    COMM_PROLOGUE(n4);
    for (long long i0 = begin + threadIdx.x; i0 < end; i0 += step) {
        float4 va[UNROLL], vb[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            long long i = i0 + (long long)u * blockDim.x;
            if (i < end) { va[u] = a[i]; vb[u] = b[i]; }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            long long i = i0 + (long long)u * blockDim.x;
            if (i < end) {
                int slot = (threadIdx.x + u * blockDim.x) % stage_slots;
                stage[slot] = make_float4(va[u].x + vb[u].x, va[u].y + vb[u].y, va[u].z + vb[u].z, va[u].w + vb[u].w);
                out[i] = stage[slot];
            }
        }
    }
    if (threadIdx.x == 0 && fixed[blockIdx.x % STATIC_BYTES] != 1) out[0].x = -1.f;  // keeps `fixed` alive
    stamp(stamps, t0);
}

// Emulated collective (ccoverlap bench --comm emulate): dst[j] = src[j % n_src] for every
// j = i % n_dst, i < total, so a collective's bytes are read and written once per i, the way a
// ring moves them through one rank. Paced: after each step a CTA waits until its own start time
// plus (step + 1) x step_ns, so a CTA that starts late ends late, as a waiting NCCL CTA does.
extern "C" __global__ void comm_paced(const uint4* __restrict__ src, long long n_src, uint4* __restrict__ dst,
                                      long long n_dst, long long total, long long step_ns, int stage_slots,
                                      unsigned long long* stamps) {
    extern __shared__ uint4 staged[];
    COMM_PROLOGUE(total);
    unsigned long long k = 0;
    for (long long i0 = begin + threadIdx.x; i0 - threadIdx.x < end; i0 += step, ++k) {
        uint4 v[UNROLL];
        long long j[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            long long i = i0 + (long long)u * blockDim.x;
            j[u] = i < n_dst ? i : i % n_dst;
            if (i < end) v[u] = src[j[u] < n_src ? j[u] : j[u] % n_src];
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (i0 + (long long)u * blockDim.x < end) {
                int slot = (threadIdx.x + u * blockDim.x) % stage_slots;
                staged[slot] = v[u];
                dst[j[u]] = staged[slot];
            }
        }
        if (step_ns > 0) {
            if (threadIdx.x == 0) {
                unsigned long long due = t0 + (k + 1) * (unsigned long long)step_ns;
                while (global_ns() < due) __nanosleep(256);
            }
            __syncthreads();
        }
    }
    if (threadIdx.x == 0 && fixed[blockIdx.x % STATIC_BYTES] != 1) dst[0].x = 0;  // keeps `fixed` alive
    stamp(stamps, t0);
}

// Delays a stream by `ns` nanoseconds: the "delayed" launch order puts it before comm.
extern "C" __global__ void sleep_kernel(unsigned long long ns) {
    unsigned long long t0 = global_ns();
    while (global_ns() - t0 < ns) __nanosleep(2000);
}

// The carveout sweep's kernel (ccoverlap.lab.carveout_sweep): each block spins `spin_ns` from its start,
// then stamps. A macro that the sweep instantiates once per name, since every hint and max-dynamic
// attribute state needs a function of its own (function attributes belong to a function).
#define SPIN_KERNEL(NAME)                                                                       \
    extern "C" __global__ void NAME(unsigned long long* stamps, unsigned long long spin_ns) {  \
        unsigned long long t0 = global_ns();                                                    \
        while (global_ns() - t0 < spin_ns) {}                                                   \
        stamp(stamps, t0);                                                                      \
    }
