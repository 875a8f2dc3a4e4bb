/* Launch interposer, shared core: what the CUDA and HIP front ends call.
 *
 * Each front end (interposer_cuda.c, interposer_hip.c) wraps its launch
 * entry points, describes a kernel handle and a device to the core through a
 * ccov_backend, and asks the core how many bytes to add per launch. The core
 * owns the policy, the per-handle cache, the stats and the symbol hooks; the
 * arithmetic is occupancy.c's, the same code Python uses. */
#ifndef CCOVERLAP_INTERPOSER_H
#define CCOVERLAP_INTERPOSER_H

#include <stdatomic.h>
#include <stdint.h>

#include "occupancy.h"

#define CCOV_EXPORT __attribute__((visibility("default")))

/* Why a launch went out unchanged (index into the stats' "skipped"). */
enum ccov_reason {
    CCOV_PADDED = 0,
    CCOV_R_COMMUNICATION,
    CCOV_R_EXCLUDED,
    CCOV_R_UNKNOWN_KERNEL,   /* name or attributes unreadable */
    CCOV_R_UNKNOWN_DEVICE,   /* device limits unreadable */
    CCOV_R_NO_PAD_NEEDED,
    CCOV_R_OVER_OPTIN,       /* static + dynamic + pad above the opt-in maximum */
    CCOV_R_INFEASIBLE,       /* auto: no pad lets the comm CTAs in */
    CCOV_R_COMM_UNKNOWN,     /* auto: no communication kernel seen yet */
    CCOV_R_COOPERATIVE,      /* every block must be resident: never shrink it */
    CCOV_R_ATTRIBUTE_FAILED, /* raising the max dynamic shared memory failed */
    CCOV_R_LAUNCH_RETRIED,   /* the padded launch failed; relaunched unchanged */
    CCOV_R_MODE_OFF,
    CCOV_R_POLICY_INVALID,
    CCOV_R_CACHE_FULL,
    CCOV_R_COMM_IDLE,        /* gate "comm": no communication kernel in flight */
    CCOV_R_TOO_COSTLY,       /* auto: the pad keeps fewer than `keep`% of the compute blocks */
    CCOV_NREASONS
};

/* What a front end knows about one kernel handle on one device. */
typedef struct {
    const char *name;
    int regs;
    int static_smem;
    int max_dynamic; /* dynamic bytes a launch may use without raising the attribute */
    int cluster;     /* required cluster size, 1 when none */
    int per_device;  /* the handle is shared by devices (CUkernel, host function) */
} ccov_info;

/* A communication launch's completion event, owned by one ring slot (see
 * interposer.c: comm in flight). `owner` is the context (CUDA) or device
 * (HIP) the event was created in. */
typedef struct {
    void *event;
    void *owner;
} ccov_event;

/* Function attributes the core sets, by the front end's own numbers. */
enum { CCOV_ATTR_MAX_DYNAMIC, CCOV_ATTR_CARVEOUT };

typedef struct {
    const char *api; /* "cuda" or "hip", for the stats */
    /* 0 on success for each; any failure makes the launch go out unchanged. */
    int (*current_device)(int *device);
    int (*describe)(void *handle, int kind, int device, ccov_info *out);
    int (*device_limits)(int device, ccov_device *out);
    /* Both NULL where no attribute is set (HIP: LDS needs no opt-in and has no carveout). */
    int (*get_max_dynamic)(void *handle, int per_device, int device, int *bytes);
    int (*set_attribute)(void *handle, int per_device, int device, int attr, int value); /* CCOV_ATTR_* */
    const char *carveout_na; /* why the policy's carveout means nothing here; NULL where it works */
    /* Communication in flight (gate "comm"); all NULL where the API has no
     * events: compute is then padded as if communication always ran.
     * event_record: record `ev` (created on first use, no timing) on `stream`
     * after a comm launch: 0 recorded, 1 the stream is capturing (nothing
     * recorded), -1 failed. event_done: 1 complete, 0 not yet, -1 error.
     * capture_done: 1 when `stream` no longer captures, 0 while it does, -1 error.
     * None of them may invalidate a capture underway in any thread. */
    int (*event_record)(ccov_event *ev, void *stream);
    int (*event_done)(ccov_event *ev);
    int (*capture_done)(void *stream);
    /* Serialized launches (ccoverlap_set_serialize): wait until the device is idle.
     * 0 drained, 1 `stream` is capturing a graph (nothing waited for), -1 failed.
     * NULL where the API cannot. */
    int (*drain)(void *stream);
    /* What a launch's stream says about it, for the stats; 0 on success, NULL where unknown.
     * stream_priority: the stream's priority (lower is higher). stream_sms: the SMs the
     * stream's context may use (a green context's), 0 for the whole device. */
    int (*stream_priority)(void *stream, int *priority);
    int (*stream_sms)(void *stream, int *sms);
    void *(*current_context)(void); /* the calling thread's, for the special streams' cache key */
    /* The doctor's hold (ccoverlap_arm_hold): `stream`'s later work waits until the 32-bit word at device
     * address `ptr` is at least `value`. 0 placed, 1 `stream` is capturing a graph (nothing placed), -1 failed.
     * NULL where the API cannot. */
    int (*wait_value)(void *stream, uint64_t ptr, uint32_t value);
} ccov_backend;

typedef struct ccov_entry ccov_entry;

/* One launch, between ccov_begin and ccov_end; the core's own, on the caller's stack. */
typedef struct {
    ccov_entry *entry;
    int pad;       /* bytes added; 0: unchanged */
    int nested;    /* a launch inside an intercepted launch: passed through, not counted */
    uint32_t tag;  /* memo tag of the decision (shape and wave class), 0: not memoised */
    uint64_t snap; /* the live policy the decision was made under */
    int slot;      /* comm launch: ring slot reserved for its event, -1 none */
    void *stream;
    const ccov_backend *be;
    int serialized; /* drained before the launch, the serial lock held: drained and released in ccov_end */
} ccov_launch;

/* Launch-side facts that only the launch call carries. */
typedef struct {
    unsigned grid;   /* blocks in the launch (saturated at UINT_MAX) */
    int cluster;     /* blocks per cluster from launch attributes, 0 if none */
    int cooperative;
    void *stream;    /* as event_record takes it (CUDA: the per-thread stream made explicit) */
} ccov_launch_info;

/* Decide the pad of one launch of `handle` (kind: front-end specific). */
int ccov_begin(const ccov_backend *be, void *handle, int kind, int threads, unsigned dynamic,
               const ccov_launch_info *li, ccov_launch *l);
/* The padded launch failed: it is relaunched unchanged, and this shape is not padded again. */
void ccov_failed(ccov_launch *l);
/* After the launch; `launched`: it succeeded (a comm launch then records its event). */
void ccov_end(ccov_launch *l, int launched);
/* A graph replay serialized as one unit in the alone window (no pad, no decision): see interposer.c. */
void ccov_serial_unit_begin(const ccov_backend *be, void *stream, ccov_launch *l);
void ccov_serial_unit_end(ccov_launch *l);
/* The twin registered for graph executable `exec` (ccoverlap_graph_twin), where `l` is serialized; else NULL.
 * ccov_serial_twin_ran counts a twin replayed. ccov_twin_forget: `exec` is being destroyed; its twin, now the
 * caller's to destroy, or NULL. See interposer.c. */
void *ccov_serial_twin(const ccov_launch *l, void *exec);
void ccov_serial_twin_ran(void);
void *ccov_twin_forget(void *exec);

void ccov_log_once(int key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Symbol hooks: a wrapper and the real function it stands for. */
typedef struct {
    const char *name;
    void *wrapper;
    _Atomic(void *) real;
    const char *const *libs; /* sonames to resolve `real` from when nobody handed it to us */
} ccov_hook;

/* Record `p` as `h`'s real function unless one is known or `p` is ours. */
void ccov_remember(ccov_hook *h, void *p);
/* The real function behind a hook, resolved on first use; NULL if none. */
void *ccov_real(ccov_hook *h);
/* Handle of the library that provides `h`'s real function (for helper symbols). */
void *ccov_library_of(ccov_hook *h);
/* dlsym that is never ours. */
void *ccov_real_dlsym(void *handle, const char *symbol);

/* A front end as the core sees it: its hook table, NULL-terminated by name, and how it answers a dlsym of one
 * of its hooks whose real function is `real` (NULL: the core remembers `real` and answers h's wrapper). */
typedef struct {
    ccov_hook *hooks;
    void *(*answer)(ccov_hook *h, const char *symbol, void *real);
} ccov_frontend;

/* Registers a front end with the core: a pointer to it in the section the core reads. The registration is
 * static, in place before any constructor runs, so a dlsym made while libraries load finds every hook, and
 * the core names no front end. */
#define CCOV_FRONTEND(fe) \
    __attribute__((used, section("ccov_frontends"))) static const ccov_frontend *const ccov_frontend_##fe = &(fe)

#endif
