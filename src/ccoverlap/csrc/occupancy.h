/* Occupancy arithmetic for ccoverlap: the one source of truth.
 *
 * Python (ccoverlap.model.occupancy, via ctypes) and the launch interposer both
 * compile this file, so a plan computed by `ccoverlap plan` is exactly the
 * pad the interposer applies. The single-kernel rules follow CUDA's
 * cuda_occupancy.h for compute capability >= 8 (register allocation per warp
 * in 256-register units and per register-file sub-partition, shared memory
 * in allocation units with a per-block reservation, default carveout); the
 * co-residency rules extend them to two kernels sharing one SM.
 *
 * Pure arithmetic: no CUDA headers, no allocation, no globals; re-entrant. */
#ifndef CCOVERLAP_OCCUPANCY_H
#define CCOVERLAP_OCCUPANCY_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int warp_size;
    int max_threads_per_block;
    int max_threads_per_sm;
    int max_blocks_per_sm;
    int regs_per_sm;
    int regs_per_block;
    int reg_alloc_unit;        /* registers, allocated per warp */
    int max_regs_per_thread;
    int reg_subpartitions;     /* register-file sub-partitions per SM */
    int smem_per_sm;           /* bytes usable by blocks at the default carveout */
    int smem_per_block_optin;  /* bytes, excluding the reservation */
    int smem_reserved_per_block;
    int smem_alloc_unit;
    int sm_count;              /* SMs (CUs) on the device: only ccov_plan_auto needs it */
} ccov_device;

typedef struct {
    int threads;
    int regs;
    int static_smem;
    int dynamic_smem;
} ccov_kernel;

/* Resources, as bit flags in `limiting` and as codes for `binding`. */
enum {
    CCOV_RES_NONE = 0,
    CCOV_RES_WARPS = 1,
    CCOV_RES_REGISTERS = 2,
    CCOV_RES_SHARED_MEMORY = 4,
    CCOV_RES_BLOCKS = 8,
};

typedef struct {
    int blocks;          /* resident blocks per SM */
    int limit_warps;
    int limit_registers;
    int limit_shared_memory;
    int limit_blocks;
    int limiting;        /* CCOV_RES_* flags of every limit equal to `blocks` */
    int smem_per_block;  /* allocated bytes per block, reservation included */
    int regs_per_warp;   /* allocated registers per warp */
} ccov_occupancy;

typedef struct {
    int feasible;
    int pad_bytes;            /* extra dynamic shared memory per compute block */
    int compute_blocks;       /* compute blocks per SM after the pad */
    int compute_blocks_before;
    int binding;              /* CCOV_RES_* that forbids co-residency (infeasible) */
    int comm_alone_fits;      /* k comm CTAs fit on an empty SM */
    int drain;                /* compute blocks per SM that retire before the comm CTAs fit */
    int multiwave_grid;       /* ccov_plan_auto: grids of at least this many blocks get the
                                 drain-1 plan; 0 when none does (0 from the other planners) */
} ccov_plan;

/* Return codes. */
enum { CCOV_OK = 0, CCOV_EINVAL = -1 };

int ccov_occupancy_compute(const ccov_device *dev, const ccov_kernel *k, ccov_occupancy *out);

/* Do `n_compute` blocks of `compute` and `n_comm` blocks of `comm` fit on one
 * SM at the same time? Returns 1 or 0 (then *binding names the first resource
 * that overflows, in the order blocks, warps, shared memory, registers), or
 * CCOV_EINVAL. */
int ccov_coresident(const ccov_device *dev, const ccov_kernel *compute, int n_compute,
                    const ccov_kernel *comm, int n_comm, int *binding);

/* Smallest extra dynamic shared memory that leaves at most `blocks` resident
 * blocks of `k` per SM; 0 when already there; -1 when the per-block opt-in
 * maximum forbids it (or blocks < 1). */
int ccov_pad_for_blocks(const ccov_device *dev, const ccov_kernel *k, int blocks);

/* Smallest pad of `compute` such that `comm_ctas` blocks of `comm` are
 * resident beside the compute blocks on every SM. */
int ccov_plan_pad(const ccov_device *dev, const ccov_kernel *compute,
                  const ccov_kernel *comm, int comm_ctas, ccov_plan *out);

/* The same with a drain budget: the comm CTAs must fit once `drain` of the
 * compute blocks resident on an SM have retired (0 is ccov_plan_pad). With
 * many waves of short blocks, and comm on a higher-priority stream, one
 * retirement comes soon, so drain 1 keeps more compute resident. */
int ccov_plan_pad_drain(const ccov_device *dev, const ccov_kernel *compute,
                        const ccov_kernel *comm, int comm_ctas, int drain, ccov_plan *out);

/* The drain chosen by the launch's grid (planner.plan(..., drain=None) and the
 * interposer's auto mode): drain 1 when the drain-1 plan is feasible and a
 * grid of `grid` blocks spans at least two waves of it (grid >= 2 * sm_count *
 * its compute blocks per SM), else drain 0. out->multiwave_grid says where
 * that boundary lies for this shape, so a caller can tell the wave class of
 * another grid without planning again. Needs dev->sm_count >= 1. */
int ccov_plan_auto(const ccov_device *dev, const ccov_kernel *compute,
                   const ccov_kernel *comm, int comm_ctas, long long grid, ccov_plan *out);

#ifdef __cplusplus
}
#endif
#endif
