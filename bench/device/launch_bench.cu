// Launch micro-benchmark and pad probe for the interposer (bench/device/interposer_gpu.sh).
//
//   launch_bench bench BATCHES BATCH REPS   host time per launch of an empty kernel, one value per rep
//   launch_bench probe DYN                  dynamic shared memory a kernel really received
//
// Launches go through cudart (<<<>>>), which reaches the driver through
// cuGetProcAddress and launches CUkernel handles: the path torch takes. Only
// the launch calls are timed, in batches shorter than the launch queue, so the
// figure is host-side launch cost, not kernel throughput.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(x)                                                                      \
    do {                                                                              \
        cudaError_t e = (x);                                                          \
        if (e != cudaSuccess) {                                                       \
            std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e));              \
            std::exit(1);                                                             \
        }                                                                             \
    } while (0)

__global__ void empty_kernel() {}

// The dynamic shared memory of the running block, as the hardware allocated it.
__global__ void probe_kernel(unsigned *out) {
    unsigned dyn;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
    if (threadIdx.x == 0) out[0] = dyn;
}

int main(int argc, char **argv) {
    if (argc >= 5 && !std::strcmp(argv[1], "bench")) {
        long batches = std::atol(argv[2]);
        int batch = std::atoi(argv[3]), reps = std::atoi(argv[4]);
        cudaStream_t s;
        CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        for (int i = 0; i < 2000; ++i) empty_kernel<<<1, 32, 0, s>>>();
        CHECK(cudaStreamSynchronize(s));
        std::printf("{\"ns_per_launch\": [");
        for (int r = 0; r < reps; ++r) {
            double ns = 0;
            for (long b = 0; b < batches; ++b) {
                auto t0 = std::chrono::steady_clock::now();
                for (int i = 0; i < batch; ++i) empty_kernel<<<1, 32, 0, s>>>();
                auto t1 = std::chrono::steady_clock::now();
                ns += std::chrono::duration<double, std::nano>(t1 - t0).count();
                CHECK(cudaStreamSynchronize(s));
            }
            CHECK(cudaGetLastError());
            std::printf("%s%.2f", r ? ", " : "", ns / (batches * batch));
        }
        std::printf("], \"launches_per_rep\": %ld}\n", batches * batch);
        return 0;
    }
    if (argc >= 3 && !std::strcmp(argv[1], "probe")) {
        unsigned dyn = (unsigned)std::atoi(argv[2]), *out, seen = 0;
        CHECK(cudaMalloc(&out, sizeof *out));
        probe_kernel<<<1, 128, dyn>>>(out);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(&seen, out, sizeof seen, cudaMemcpyDeviceToHost));
        std::printf("{\"requested\": %u, \"seen\": %u}\n", dyn, seen);
        return 0;
    }
    std::fprintf(stderr, "usage: launch_bench bench BATCHES BATCH REPS | probe DYN\n");
    return 2;
}
