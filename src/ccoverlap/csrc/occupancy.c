/* Occupancy arithmetic: see occupancy.h for why this file is the only copy. */
#include "occupancy.h"

#include <limits.h>

#define CCOV_MAX_WARPS 256 /* bound for the register packing table */

static int div_up(int x, int y) { return (x + y - 1) / y; }
static int round_up(int x, int y) { return y * div_up(x, y); }
static int min_int(int a, int b) { return a < b ? a : b; }

static int device_ok(const ccov_device *d) {
    return d && d->warp_size > 0 && d->max_threads_per_block > 0 && d->max_threads_per_sm > 0 &&
           d->max_blocks_per_sm > 0 && d->regs_per_sm > 0 && d->regs_per_block > 0 &&
           d->reg_alloc_unit > 0 && d->max_regs_per_thread > 0 && d->reg_subpartitions > 0 &&
           d->smem_per_sm > 0 && d->smem_per_block_optin >= 0 && d->smem_reserved_per_block >= 0 &&
           d->smem_alloc_unit > 0 && d->max_threads_per_sm / d->warp_size <= CCOV_MAX_WARPS;
}

static int kernel_ok(const ccov_device *d, const ccov_kernel *k) {
    return k && k->threads > 0 && k->threads <= d->max_threads_per_block && k->regs >= 0 &&
           k->regs <= d->max_regs_per_thread && k->static_smem >= 0 && k->dynamic_smem >= 0 &&
           k->static_smem <= d->smem_per_block_optin &&
           k->dynamic_smem <= d->smem_per_block_optin - k->static_smem;
}

static int warps_of(const ccov_device *d, const ccov_kernel *k) { return div_up(k->threads, d->warp_size); }

static int regs_per_warp(const ccov_device *d, const ccov_kernel *k) {
    return round_up(k->regs * d->warp_size, d->reg_alloc_unit);
}

static int smem_per_block(const ccov_device *d, const ccov_kernel *k) {
    return round_up(k->static_smem + k->dynamic_smem + d->smem_reserved_per_block, d->smem_alloc_unit);
}

int ccov_occupancy_compute(const ccov_device *d, const ccov_kernel *k, ccov_occupancy *out) {
    if (!device_ok(d) || !kernel_ok(d, k) || !out) return CCOV_EINVAL;
    int warps = warps_of(d, k);
    int rpw = regs_per_warp(d, k);
    int smem = smem_per_block(d, k);

    out->limit_warps = (d->max_threads_per_sm / d->warp_size) / warps;
    out->limit_blocks = d->max_blocks_per_sm;

    /* The hardware checks a block's registers as if its warps were spread
     * over every sub-partition, hence the round-up to a multiple of them. */
    int assumed = rpw * round_up(warps, d->reg_subpartitions);
    if (assumed > d->regs_per_block || rpw * warps > d->regs_per_block) {
        out->limit_registers = 0;
    } else if (rpw == 0) {
        out->limit_registers = INT_MAX;
    } else {
        int per_subpartition = (d->regs_per_sm / d->reg_subpartitions) / rpw;
        out->limit_registers = per_subpartition * d->reg_subpartitions / warps;
    }

    if (smem > d->smem_per_block_optin + d->smem_reserved_per_block) {
        out->limit_shared_memory = 0;
    } else {
        out->limit_shared_memory = smem > 0 ? d->smem_per_sm / smem : INT_MAX;
    }

    out->blocks = min_int(min_int(out->limit_warps, out->limit_blocks),
                          min_int(out->limit_registers, out->limit_shared_memory));
    out->limiting = 0;
    if (out->blocks == out->limit_warps) out->limiting |= CCOV_RES_WARPS;
    if (out->blocks == out->limit_registers) out->limiting |= CCOV_RES_REGISTERS;
    if (out->blocks == out->limit_shared_memory) out->limiting |= CCOV_RES_SHARED_MEMORY;
    if (out->blocks == out->limit_blocks) out->limiting |= CCOV_RES_BLOCKS;
    out->smem_per_block = smem;
    out->regs_per_warp = rpw;
    return CCOV_OK;
}

/* Can wa warps of ra registers and wb warps of rb registers be placed on the
 * register-file sub-partitions? Warps are whole: a warp lives in one
 * sub-partition. With one kind of warp this reduces to CUDA's rule
 * (warps per sub-partition x sub-partitions). */
static int registers_fit(const ccov_device *d, int wa, int ra, int wb, int rb) {
    int cap = d->regs_per_sm / d->reg_subpartitions;
    if (wb == 0 || rb == 0) { int t = wa; wa = wb; wb = t; t = ra; ra = rb; rb = t; }
    if (wb == 0 || rb == 0) return 1; /* nothing holds registers */
    /* best[j]: most a-warps that fit in the sub-partitions so far, holding j b-warps */
    int best[CCOV_MAX_WARPS + 1];
    for (int j = 0; j <= wb; ++j) best[j] = j == 0 ? 0 : -1;
    for (int s = 0; s < d->reg_subpartitions; ++s) {
        int next[CCOV_MAX_WARPS + 1];
        for (int j = 0; j <= wb; ++j) next[j] = -1;
        for (int j = 0; j <= wb; ++j) {
            if (best[j] < 0) continue;
            for (int add = 0; j + add <= wb && add * rb <= cap; ++add) {
                int room = cap - add * rb;
                int a = ra > 0 ? room / ra : wa;
                int total = best[j] + a;
                if (total > wa) total = wa;
                if (total > next[j + add]) next[j + add] = total;
            }
        }
        for (int j = 0; j <= wb; ++j) best[j] = next[j];
    }
    return best[wb] >= wa;
}

int ccov_coresident(const ccov_device *d, const ccov_kernel *a, int na, const ccov_kernel *b, int nb,
                    int *binding) {
    if (!device_ok(d) || !kernel_ok(d, a) || !kernel_ok(d, b) || na < 0 || nb < 0 || !binding)
        return CCOV_EINVAL;
    ccov_occupancy oa, ob;
    ccov_occupancy_compute(d, a, &oa);
    ccov_occupancy_compute(d, b, &ob);
    int wa = warps_of(d, a) * na, wb = warps_of(d, b) * nb;
    int max_warps = d->max_threads_per_sm / d->warp_size;
    *binding = CCOV_RES_NONE;
    if (na + nb > d->max_blocks_per_sm) *binding = CCOV_RES_BLOCKS;
    else if (wa + wb > max_warps) *binding = CCOV_RES_WARPS;
    else if ((long)na * oa.smem_per_block + (long)nb * ob.smem_per_block > d->smem_per_sm ||
             (na && oa.limit_shared_memory == 0) || (nb && ob.limit_shared_memory == 0))
        *binding = CCOV_RES_SHARED_MEMORY;
    else if ((na && oa.limit_registers == 0) || (nb && ob.limit_registers == 0) ||
             !registers_fit(d, wa, oa.regs_per_warp, wb, ob.regs_per_warp))
        *binding = CCOV_RES_REGISTERS;
    return *binding == CCOV_RES_NONE;
}

int ccov_pad_for_blocks(const ccov_device *d, const ccov_kernel *k, int blocks) {
    ccov_occupancy occ;
    if (blocks < 1 || ccov_occupancy_compute(d, k, &occ) != CCOV_OK) return -1;
    if (occ.blocks <= blocks) return 0;
    /* Blocks per SM by shared memory is smem_per_sm / allocation, so the
     * allocation must exceed smem_per_sm / (blocks + 1); allocations are
     * rounded up to the unit, so the smallest pad lands one byte past the
     * previous unit boundary. */
    int alloc = round_up(d->smem_per_sm / (blocks + 1) + 1, d->smem_alloc_unit);
    int base = k->static_smem + k->dynamic_smem + d->smem_reserved_per_block;
    int pad = alloc - d->smem_alloc_unit + 1 - base;
    if (pad < 1) pad = 1;
    if (k->static_smem + k->dynamic_smem + pad > d->smem_per_block_optin) return -1;
    return pad;
}

int ccov_plan_pad(const ccov_device *d, const ccov_kernel *compute, const ccov_kernel *comm,
                  int comm_ctas, ccov_plan *out) {
    return ccov_plan_pad_drain(d, compute, comm, comm_ctas, 0, out);
}

int ccov_plan_pad_drain(const ccov_device *d, const ccov_kernel *compute, const ccov_kernel *comm,
                        int comm_ctas, int drain, ccov_plan *out) {
    ccov_occupancy occ;
    int binding;
    if (!out || comm_ctas < 1 || drain < 0 || ccov_occupancy_compute(d, compute, &occ) != CCOV_OK ||
        ccov_coresident(d, compute, 0, comm, comm_ctas, &binding) < 0)
        return CCOV_EINVAL;
    out->feasible = 0;
    out->pad_bytes = 0;
    out->compute_blocks = occ.blocks;
    out->compute_blocks_before = occ.blocks;
    out->comm_alone_fits = binding == CCOV_RES_NONE;
    out->binding = binding;
    out->drain = drain;
    out->multiwave_grid = 0;
    if (!out->comm_alone_fits) return CCOV_OK;
    if (occ.blocks == 0) { out->binding = occ.limiting; return CCOV_OK; }

    /* Fewer compute blocks need a larger pad, so the first block count that
     * fits, from the top, gives the smallest pad. For a given count the
     * smallest pad is best: more shared memory only takes room from comm. */
    for (int n = occ.blocks; n >= 1; --n) {
        int pad = ccov_pad_for_blocks(d, compute, n);
        if (pad < 0) { /* the opt-in maximum stops the pad here */
            if (out->binding == CCOV_RES_NONE) out->binding = CCOV_RES_SHARED_MEMORY;
            break;
        }
        ccov_kernel padded = *compute;
        padded.dynamic_smem += pad;
        ccov_occupancy pocc;
        ccov_occupancy_compute(d, &padded, &pocc);
        int staying = pocc.blocks > drain ? pocc.blocks - drain : 0;
        if (ccov_coresident(d, &padded, staying, comm, comm_ctas, &binding) == 1) {
            out->feasible = 1;
            out->pad_bytes = pad;
            out->compute_blocks = pocc.blocks;
            out->binding = CCOV_RES_NONE;
            return CCOV_OK;
        }
        out->binding = binding;
    }
    return CCOV_OK;
}

int ccov_plan_auto(const ccov_device *d, const ccov_kernel *compute, const ccov_kernel *comm,
                   int comm_ctas, long long grid, ccov_plan *out) {
    ccov_plan relaxed;
    if (!d || d->sm_count < 1 || grid < 0) return CCOV_EINVAL;
    int rc = ccov_plan_pad_drain(d, compute, comm, comm_ctas, 1, &relaxed);
    if (rc != CCOV_OK) return rc;
    /* two waves of the drain-1 plan: a compute block retires soon after a comm CTA waits */
    long long boundary = relaxed.feasible ? 2LL * d->sm_count * (relaxed.compute_blocks > 1 ? relaxed.compute_blocks : 1) : 0;
    if (boundary > INT_MAX) boundary = 0;
    if (boundary && grid >= boundary) {
        *out = relaxed;
    } else {
        rc = ccov_plan_pad_drain(d, compute, comm, comm_ctas, 0, out);
        if (rc != CCOV_OK) return rc;
    }
    out->multiwave_grid = (int)boundary;
    return CCOV_OK;
}
