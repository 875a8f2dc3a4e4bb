/* Launch interposer core: policy, per-handle cache, decisions, stats, dlsym hook.
 *
 * Loaded with LD_PRELOAD (`ccoverlap run`). Rules it lives by:
 * - never break the host program: anything unknown or failing means the
 *   launch goes out unchanged, reported once on stderr;
 * - never call itself: the real dlsym comes from dlvsym, real driver
 *   functions from the driver's own handle, and a launch made inside an
 *   intercepted launch passes through (so a pad is never applied twice);
 * - the hot path (a handle seen before) takes no lock: entries are published
 *   with a release store of their key and read with acquire loads. */
#define _GNU_SOURCE
#include "interposer.h"
#include "policy.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------- logging ---------- */

static _Atomic uint64_t logged; /* one bit per message key */

void ccov_log_once(int key, const char *fmt, ...) {
    uint64_t bit = 1ull << (key & 63);
    if (atomic_fetch_or(&logged, bit) & bit) return;
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ccoverlap interposer: %s\n", line);
}

/* ---------- dlsym and real symbols ---------- */

typedef void *(*dlsym_fn)(void *, const char *);
static _Atomic(dlsym_fn) real_dlsym_ptr;

static dlsym_fn real_dlsym(void) {
    dlsym_fn f = atomic_load_explicit(&real_dlsym_ptr, memory_order_acquire);
    if (f) return f;
    /* dlvsym is not hooked, so this cannot recurse. GLIBC_2.34 is the version
     * of dlsym since libdl moved into libc; older glibc has 2.2.5 (x86-64) or
     * 2.17 (aarch64). */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (size_t i = 0; !f && i < sizeof versions / sizeof *versions; ++i)
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    atomic_store_explicit(&real_dlsym_ptr, f, memory_order_release);
    return f;
}

void *ccov_real_dlsym(void *handle, const char *symbol) {
    dlsym_fn f = real_dlsym();
    return f ? f(handle, symbol) : NULL;
}

/* The front ends, registered with CCOV_FRONTEND: the linker bounds their section. */
extern const ccov_frontend *const __start_ccov_frontends[], *const __stop_ccov_frontends[];

static ccov_hook *hook_named(const char *symbol, const ccov_frontend **owner) {
    for (const ccov_frontend *const *fe = __start_ccov_frontends; fe < __stop_ccov_frontends; ++fe)
        for (ccov_hook *h = (*fe)->hooks; h->name; ++h)
            if (strcmp(h->name, symbol) == 0) {
                *owner = *fe;
                return h;
            }
    return NULL;
}

/* Is `p` inside this library? Then it is a wrapper, never a real function. */
static int is_ours(void *p) {
    Dl_info mine, theirs;
    return dladdr((void *)ccov_real_dlsym, &mine) && dladdr(p, &theirs) && mine.dli_fbase == theirs.dli_fbase;
}

/* Keep the first real pointer anybody resolved for `h`. */
void ccov_remember(ccov_hook *h, void *p) {
    void *expected = NULL;
    if (p && !is_ours(p)) atomic_compare_exchange_strong(&h->real, &expected, p);
}

void *ccov_real(ccov_hook *h) {
    void *p = atomic_load_explicit(&h->real, memory_order_acquire);
    if (p) return p;
    /* Nobody handed it to us (the program links the driver directly): the
     * next definition after ours, else the driver library itself. */
    ccov_remember(h, ccov_real_dlsym(RTLD_NEXT, h->name));
    for (const char *const *lib = h->libs; !atomic_load(&h->real) && *lib; ++lib) {
        void *handle = dlopen(*lib, RTLD_NOW | RTLD_NOLOAD); /* never load a driver ourselves */
        if (handle) ccov_remember(h, ccov_real_dlsym(handle, h->name));
    }
    return atomic_load_explicit(&h->real, memory_order_acquire);
}

void *ccov_library_of(ccov_hook *h) {
    Dl_info info;
    void *p = ccov_real(h);
    if (!p || !dladdr(p, &info) || !info.dli_fname) return NULL;
    return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
}

static void *hooked_lookup(void *handle, const char *symbol, const ccov_frontend *fe, ccov_hook *h) {
    void *p = ccov_real_dlsym(handle, symbol);
    /* A global look-up finds our own export first: answer with it only where
     * the real API is loaded, so probing for CUDA or HIP stays truthful. */
    if (p && is_ours(p)) p = ccov_real_dlsym(RTLD_NEXT, symbol);
    if (!p) return NULL;
    if (fe->answer) return fe->answer(h, symbol, p);
    ccov_remember(h, p);
    return h->wrapper;
}

/* Everything but the hooked names goes straight to the real dlsym as a tail
 * call, so RTLD_NEXT keeps meaning "after the caller". */
CCOV_EXPORT void *dlsym(void *handle, const char *symbol) {
    const ccov_frontend *fe = NULL;
    ccov_hook *h = symbol[0] == 'c' || symbol[0] == 'h' ? hook_named(symbol, &fe) : NULL;
    if (h) return hooked_lookup(handle, symbol, fe, h);
    dlsym_fn f = real_dlsym();
    return f ? f(handle, symbol) : NULL;
}

/* ---------- policy ---------- */

/* Read once at load (policy.c: the table and the parser `ccoverlap run` uses too);
 * error[0]: invalid, every launch passes through. */
static ccov_policy pol;

static int at_least_0(int v) { return v > 0 ? v : 0; } /* CCOV_NONE: 0 */

static const char *process_getenv(const char *name, void *ctx) {
    (void)ctx;
    return getenv(name);
}

/* ---------- the live policy ---------- */

/* What ccoverlap_set_policy may change, in one word, so a launch reads a
 * consistent set with one load: mode (4 bits), pad_bytes (20), blocks (12)
 * and a generation (28) that counts the changes. */
static _Atomic uint64_t live;

_Static_assert(CCOV_PAD_MAX < 1 << 20 && CCOV_BLOCKS_MAX < 1 << 12, "the live word holds pad and blocks");

static uint64_t pack_live(int mode, int pad, int blocks, uint64_t gen) {
    return (uint64_t)mode | (uint64_t)pad << 4 | (uint64_t)blocks << 24 | (gen & 0xFFFFFFF) << 36;
}
static int live_mode(uint64_t w) { return (int)(w & 15); }
static int live_pad(uint64_t w) { return (int)(w >> 4 & 0xFFFFF); }
static int live_blocks(uint64_t w) { return (int)(w >> 24 & 0xFFF); }
static uint64_t live_gen(uint64_t w) { return w >> 36; }

/* Gate "comm": pad compute only while a communication kernel is in flight. */
static int gated(int mode) {
    int gate = pol.value[CCOV_F_GATE]; /* CCOV_NONE: by mode */
    return mode != CCOV_MODE_OFF && (gate == CCOV_GATE_COMM || (gate == CCOV_NONE && mode == CCOV_MODE_AUTO));
}

/* ---------- per-handle cache ---------- */

enum { ROLE_COMPUTE, ROLE_COMM, ROLE_EXCLUDED, ROLE_UNKNOWN };

#define MEMO_SLOTS 8
#define WAVE_SLOTS 4

struct ccov_entry {
    _Atomic uintptr_t key; /* the handle; published last */
    int device;
    int per_device;
    int role;
    const ccov_backend *be;
    ccov_kernel k; /* threads and dynamic_smem are per launch */
    int cluster;
    _Atomic int max_dynamic;
    _Atomic uint64_t memo[MEMO_SLOTS];  /* decision by tag (shape, wave class), see remember */
    _Atomic uint64_t waves[WAVE_SLOTS]; /* auto, drain by grid: shape -> multi-wave boundary */
    /* launches by outcome (CCOV_PADDED or a reason): one atomic add per launch */
    _Atomic unsigned long counts[CCOV_NREASONS];
    _Atomic int last_pad;
    _Atomic int sm_limit; /* the fewest SMs a launch's context allowed (a green context), 0: the whole device */
    int hint; /* HINT_*: the carveout hint of its side (hint_side), decided at insert */
    char *name;
};

#define CACHE_BITS 14
#define CACHE_SIZE (1u << CACHE_BITS)
#define CACHE_FILL (CACHE_SIZE / 4 * 3)
static struct ccov_entry cache[CACHE_SIZE];
static unsigned cache_used;
/* inserts, attribute raises, learning, memo writes, policy changes */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned slot_of(uintptr_t h) { return (unsigned)(((uint64_t)h * 0x9E3779B97F4A7C15ull) >> (64 - CACHE_BITS)); }

/* First entry of `h` (device < 0) or the one for `device`. */
static ccov_entry *find(uintptr_t h, int device) {
    for (unsigned i = slot_of(h), n = 0; n < CACHE_SIZE; i = (i + 1) & (CACHE_SIZE - 1), ++n) {
        uintptr_t k = atomic_load_explicit(&cache[i].key, memory_order_acquire);
        if (k == 0) return NULL;
        if (k == h && (device < 0 || cache[i].device == device)) return &cache[i];
    }
    return NULL;
}

/* 1: the regex of `field` matches `name`, 0: it does not, -1: the field is not set. */
static int matches(int field, const char *name) {
    return pol.compiled & 1u << field ? regexec(&pol.re[field], name, 0, NULL, 0) == 0 : -1;
}

static int role_of(const char *name) {
    if (ccov_comm_is(pol.comm, name)) return ROLE_COMM;
    if (matches(CCOV_F_INCLUDE, name) == 0 || matches(CCOV_F_EXCLUDE, name) == 1) return ROLE_EXCLUDED;
    return ROLE_COMPUTE;
}

/* The carveout hint: what became of the policy's carveout on one handle and device. */
enum { HINT_NONE, HINT_SET, HINT_FAILED, HINT_NA, HINT_COOPERATIVE, HINT_STATES };
static const char *const hint_names[HINT_STATES] = {"none", "set", "attribute_failed", "n/a", "cooperative"};

/* The two sides a hint is set on, each by its own policy field, counted apart in the stats (prefix). */
enum { SIDE_COMPUTE, SIDE_COMM, SIDES };
static const struct { int field, role, log_na, log_failed; const char *prefix; } hint_sides[SIDES] = {
    [SIDE_COMPUTE] = {CCOV_F_CARVEOUT, ROLE_COMPUTE, 46, 47, ""},
    [SIDE_COMM] = {CCOV_F_COMM_CARVEOUT, ROLE_COMM, 51, 52, "comm_"},
};

/* The side a kernel of `role` is hinted on; SIDES for none (excluded, unknown). */
static int hint_side(int role) {
    int side = 0;
    while (side < SIDES && hint_sides[side].role != role) side++;
    return side;
}

/* Set the kernel's preferred shared-memory carveout, once per handle and device (under the lock,
 * before the entry is published), in every mode: `carveout` on compute kernels, so the SM
 * configures room for a comm CTA's shared memory beside them; `comm_carveout` on communication
 * kernels, so an SM that takes a comm CTA first keeps room for compute's blocks. The attribute is
 * sticky, so no gate. Not on a handle first seen in a cooperative launch: a carveout below the
 * kernel's own need could lower the resident blocks its grid was sized to. */
static int hint(ccov_entry *e, void *handle, int cooperative) {
    int side = hint_side(e->role);
    if (side == SIDES || pol.value[hint_sides[side].field] == CCOV_NONE) return HINT_NONE;
    int percent = pol.value[hint_sides[side].field];
    const char *key = ccov_fields[hint_sides[side].field].key;
    if (e->be->carveout_na) {
        ccov_log_once(hint_sides[side].log_na, "%s: %s", key, e->be->carveout_na);
        return HINT_NA;
    }
    if (cooperative) return HINT_COOPERATIVE;
    int rc = e->be->set_attribute ? e->be->set_attribute(handle, e->per_device, e->device, CCOV_ATTR_CARVEOUT, percent) : -1;
    if (rc == 0) return HINT_SET;
    ccov_log_once(hint_sides[side].log_failed, "setting the shared-memory carveout of %s to %d%% failed (%d): its "
                  "launches go out without it (%s)", e->name, percent, rc, key);
    return HINT_FAILED;
}

/* The entry of `handle` on `device`, made under the lock unless another thread made it first: the one for
 * `device`, or the one shared by every device (a handle that is not per device, inserted from any device). */
static ccov_entry *insert(const ccov_backend *be, void *handle, int kind, int device, int cooperative) {
    pthread_mutex_lock(&lock);
    ccov_entry *e = find((uintptr_t)handle, -1);
    if (e && e->per_device) e = find((uintptr_t)handle, device);
    if (e || cache_used >= CACHE_FILL) goto out;
    ccov_info info = {0};
    int ok = be->describe(handle, kind, device, &info) == 0 && info.name;
    unsigned i = slot_of((uintptr_t)handle);
    while (atomic_load_explicit(&cache[i].key, memory_order_relaxed)) i = (i + 1) & (CACHE_SIZE - 1);
    e = &cache[i];
    e->device = device;
    e->per_device = ok && info.per_device;
    e->be = be;
    e->name = strdup(ok ? info.name : "?");
    e->role = ok && e->name ? role_of(e->name) : ROLE_UNKNOWN;
    e->k.regs = info.regs;
    e->k.static_smem = info.static_smem;
    e->cluster = info.cluster > 0 ? info.cluster : 1;
    atomic_store(&e->max_dynamic, info.max_dynamic);
    if (!ok) ccov_log_once(CCOV_R_UNKNOWN_KERNEL, "a %s kernel's name or attributes are unreadable: its launches go out unchanged", be->api);
    e->hint = hint(e, handle, cooperative);
    cache_used++;
    atomic_store_explicit(&e->key, (uintptr_t)handle, memory_order_release);
out:
    pthread_mutex_unlock(&lock);
    return e;
}

/* ---------- device limits and the learned communication kernel ---------- */

#define MAX_DEVICES 64
static struct { _Atomic int state; ccov_device d; } devices[MAX_DEVICES]; /* 0 unread, 1 ok, -1 failed */

static const ccov_device *device_limits(const ccov_backend *be, int device) {
    if (device < 0 || device >= MAX_DEVICES) return NULL;
    int s = atomic_load_explicit(&devices[device].state, memory_order_acquire);
    if (s == 0) {
        pthread_mutex_lock(&lock);
        s = atomic_load(&devices[device].state);
        if (s == 0) {
            s = be->device_limits(device, &devices[device].d) == 0 ? 1 : -1;
            atomic_store_explicit(&devices[device].state, s, memory_order_release);
        }
        pthread_mutex_unlock(&lock);
    }
    if (s < 0) ccov_log_once(CCOV_R_UNKNOWN_DEVICE, "device %d: limits unreadable or unsupported: launches on it go out unchanged", device);
    return s > 0 ? &devices[device].d : NULL;
}

static struct { _Atomic int learned; ccov_kernel k; int cluster; unsigned grid; char name[256]; } comm;

/* Learned in every mode, so a switch to auto (ccoverlap_set_policy) finds it. */
static void learn_comm(const ccov_entry *e, int threads, unsigned dynamic, const ccov_launch_info *li) {
    if (atomic_load_explicit(&comm.learned, memory_order_acquire)) return;
    pthread_mutex_lock(&lock);
    if (!atomic_load(&comm.learned)) {
        comm.k = e->k;
        comm.k.threads = threads;
        comm.k.dynamic_smem = (int)dynamic;
        comm.cluster = li && li->cluster > 0 ? li->cluster : e->cluster;
        comm.grid = li ? li->grid : 0;
        snprintf(comm.name, sizeof comm.name, "%s", e->name);
        atomic_store_explicit(&comm.learned, 1, memory_order_release);
    }
    pthread_mutex_unlock(&lock);
}

/* ---------- communication in flight ---------- */

/* Gate "comm" pads compute only while communication may run beside it: a
 * communication kernel waits for an event recorded on the compute stream when
 * it is enqueued, so only compute enqueued after it can share its SMs. Each
 * communication launch reserves a slot before the launch and records an event
 * on its stream after it; a compute launch asks whether any slot's event is
 * still running. One slot per stream (a stream runs in order: its newest
 * event completes last), 64 streams at most; the common case, nothing in
 * flight, costs one load of `ring_active`. A slot's state carries a sequence
 * number, so a thread that looked at an old state never retires a newer one. */
#define RING 64
enum { SLOT_FREE, SLOT_BUSY, SLOT_PENDING, SLOT_CAPTURED }; /* busy: being launched or recorded */

static struct {
    _Atomic uint64_t state; /* phase (2 bits) | sequence << 2 */
    _Atomic uintptr_t stream;
    _Atomic(const ccov_backend *) be;
    _Atomic(void *) event, owner; /* the slot's ccov_event, kept for its next use */
    int prev;                     /* phase before a busy holder took it (only the holder reads it) */
} ring[RING];
static _Atomic int ring_active; /* slots not free */
static _Atomic int ring_used;   /* highest slot used + 1: scans stop there */
static _Atomic int gate_broken; /* events unusable: compute is padded as if communication always ran */

static uint64_t next_state(uint64_t st, int phase) { return ((st >> 2) + 1) << 2 | (uint64_t)phase; }

static void break_gate(const char *why) {
    atomic_store(&gate_broken, 1);
    ccov_log_once(44, "%s: compute is padded as if communication were always in flight", why);
}

/* A slot for a communication launch on `stream`, taken busy; -1 if none. */
static int ring_reserve(const ccov_backend *be, void *stream) {
    if (atomic_load_explicit(&gate_broken, memory_order_relaxed)) return -1;
    if (!be->event_record || !be->event_done || !be->capture_done) {
        break_gate("this API has no events to tell when communication ends");
        return -1;
    }
    uintptr_t s = (uintptr_t)stream;
    int shared = s > 2; /* NULL, legacy and per-thread default streams are never shared */
    for (int attempt = 0; attempt < 8; ++attempt) {
        int best = -1, best_score = -1;
        uint64_t best_st = 0;
        for (int i = 0; i < RING; ++i) {
            uint64_t st = atomic_load_explicit(&ring[i].state, memory_order_acquire);
            int phase = (int)(st & 3), same = shared && atomic_load(&ring[i].stream) == s, score;
            if (phase == SLOT_PENDING || phase == SLOT_CAPTURED) score = same ? 4 : -1; /* supersede its last event */
            else if (phase == SLOT_FREE) score = same ? 3 : atomic_load(&ring[i].event) ? 1 : 2;
            else score = -1;
            if (score > best_score) best = i, best_score = score, best_st = st;
            if (score == 4) break;
        }
        if (best < 0) break;
        if (!atomic_compare_exchange_strong(&ring[best].state, &best_st, next_state(best_st, SLOT_BUSY))) continue;
        ring[best].prev = (int)(best_st & 3);
        if (ring[best].prev == SLOT_FREE) {
            atomic_fetch_add(&ring_active, 1);
            int used = atomic_load(&ring_used);
            while (used < best + 1 && !atomic_compare_exchange_weak(&ring_used, &used, best + 1)) {}
        }
        atomic_store(&ring[best].stream, s);
        atomic_store(&ring[best].be, be);
        return best;
    }
    break_gate("communication on more than 64 streams at once");
    return -1;
}

static void ring_set(int i, int phase) {
    uint64_t st = atomic_load(&ring[i].state);
    if (phase == SLOT_FREE) atomic_fetch_sub(&ring_active, 1);
    atomic_store_explicit(&ring[i].state, next_state(st, phase), memory_order_release);
}

/* After the communication launch: record its event, or give the slot back. */
static void ring_commit(int i, int launched) {
    if (!launched) { /* nothing new on the stream: the slot is what it was */
        ring_set(i, ring[i].prev);
        return;
    }
    const ccov_backend *be = atomic_load(&ring[i].be);
    ccov_event ev = {atomic_load(&ring[i].event), atomic_load(&ring[i].owner)};
    int r = be->event_record(&ev, (void *)atomic_load(&ring[i].stream));
    atomic_store(&ring[i].event, ev.event);
    atomic_store(&ring[i].owner, ev.owner);
    if (r == 0) {
        ring_set(i, SLOT_PENDING);
    } else if (r == 1) {
        ring_set(i, SLOT_CAPTURED); /* in flight until the capture ends: its replays carry the comm */
    } else {
        ring_set(i, SLOT_FREE);
        break_gate("recording an event after a communication launch failed");
    }
}

/* Is some communication kernel still running (or being captured)? Retires
 * the slots that finished. Anything unknown counts as in flight. */
static int comm_in_flight(void) {
    if (atomic_load_explicit(&gate_broken, memory_order_relaxed)) return 1;
    if (!atomic_load_explicit(&ring_active, memory_order_relaxed)) return 0;
    int used = atomic_load(&ring_used);
    for (int i = 0; i < used; ++i) {
        uint64_t st = atomic_load_explicit(&ring[i].state, memory_order_acquire);
        int phase = (int)(st & 3), r;
        if (phase == SLOT_FREE) continue;
        if (phase == SLOT_BUSY) return 1;
        const ccov_backend *be = atomic_load(&ring[i].be);
        if (phase == SLOT_PENDING) {
            ccov_event ev = {atomic_load(&ring[i].event), atomic_load(&ring[i].owner)};
            r = be->event_done(&ev);
        } else {
            r = be->capture_done((void *)atomic_load(&ring[i].stream));
        }
        if (r == 0) return 1;
        if (r < 0) ccov_log_once(45, "a communication event could not be queried: counted as finished");
        if (atomic_compare_exchange_strong(&ring[i].state, &st, next_state(st, SLOT_FREE)))
            atomic_fetch_sub(&ring_active, 1);
        if (r < 0) return 1;
    }
    return 0;
}

/* ---------- serialized launches ----------
 *
 * ccoverlap_set_serialize(1) makes every launch start on an idle device and
 * end before the next one starts: the context is drained before and after it,
 * under one lock, so launches of every thread take turns. The doctor measures
 * each kernel's time alone this way (docs/doctor.md). A launch on a stream
 * that captures a graph is not drained (nothing runs; a sync would break the
 * capture); a drain that fails lets the launch go out as it would have. */

static _Atomic int serialize_on;
static pthread_mutex_t serial_lock = PTHREAD_MUTEX_INITIALIZER;
enum { SERIAL_COUNTS = 4 };
static _Atomic unsigned long serial_counts[SERIAL_COUNTS]; /* drained, capturing, failed, graph twins replayed */
static const char *const serial_names[SERIAL_COUNTS] = {"serialized", "serialize_capturing", "serialize_failed",
                                                         "serialized_twins"};

static void serial_begin(const ccov_backend *be, ccov_launch *l) {
    l->serialized = 0;
    if (!atomic_load_explicit(&serialize_on, memory_order_acquire)) return;
    if (!be->drain) {
        atomic_fetch_add(&serial_counts[2], 1);
        ccov_log_once(48, "%s launches cannot be serialized: they go out concurrently", be->api);
        return;
    }
    pthread_mutex_lock(&serial_lock);
    int r = be->drain(l->stream);
    if (r == 0) {
        l->serialized = 1; /* released in serial_end, after the launch has drained too */
        atomic_fetch_add(&serial_counts[0], 1);
        return;
    }
    pthread_mutex_unlock(&serial_lock);
    atomic_fetch_add(&serial_counts[r == 1 ? 1 : 2], 1);
    if (r < 0) ccov_log_once(49, "draining the device before a serialized launch failed: it went out unserialized");
}

static void serial_end(ccov_launch *l) {
    if (!l->serialized) return;
    l->serialized = 0;
    if (l->be->drain(l->stream) < 0) ccov_log_once(50, "draining the device after a serialized launch failed");
    pthread_mutex_unlock(&serial_lock);
}

/* ---------- the doctor's hold ----------
 *
 * ccoverlap_arm_hold(stream, ptr, value) makes the next launch of any thread first put a wait on `stream` until
 * the 32-bit word at device address `ptr` is at least `value`; value 0 disarms. The doctor arms it as a profiled
 * step's optimizer step ends and sets the word as the next one's ends (doctor/hold.py): the wait goes in before
 * the next step's first kernel, so a copy the host waits for between the steps (a `loss.item()`) is not held.
 * Where that first kernel goes to another stream, it waits too: a stream that synchronized with the held one
 * before the wait went in (FSDP2's all-gather copy-in stream, through an event recorded on the current stream)
 * would otherwise run the step's first kernels before the hold lets go, and the step's span would hold the wait. */

static _Atomic int hold_armed;
static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static void *hold_stream;
static uint64_t hold_ptr;
static uint32_t hold_value;
enum { HOLD_COUNTS = 4 };
/* placed, capturing (not placed), failed; and of those placed, how many also held the first launch's stream */
static _Atomic unsigned long hold_counts[HOLD_COUNTS];
static const char *const hold_names[HOLD_COUNTS] = {"holds", "holds_capturing", "holds_failed", "holds_launch_stream"};

CCOV_EXPORT int ccoverlap_arm_hold(void *stream, unsigned long long ptr, unsigned value) {
    pthread_mutex_lock(&hold_lock);
    hold_stream = stream, hold_ptr = ptr, hold_value = value;
    atomic_store_explicit(&hold_armed, value != 0, memory_order_release);
    pthread_mutex_unlock(&hold_lock);
    return 0;
}

static void hold_fire(const ccov_backend *be, void *stream) {
    if (!atomic_load_explicit(&hold_armed, memory_order_acquire)) return;
    pthread_mutex_lock(&hold_lock);
    if (atomic_exchange(&hold_armed, 0)) {
        int r = be->wait_value ? be->wait_value(hold_stream, hold_ptr, hold_value) : -1;
        atomic_fetch_add(&hold_counts[r == 0 ? 0 : r == 1 ? 1 : 2], 1);
        if (r < 0) ccov_log_once(51, "%s: the doctor's hold could not be placed: the step went out unheld", be->api);
        if (r == 0 && stream != hold_stream && be->wait_value(stream, hold_ptr, hold_value) == 0)
            atomic_fetch_add(&hold_counts[3], 1); /* a capturing launch stream is left alone, as above */
    }
    pthread_mutex_unlock(&hold_lock);
}

/* A launch of work the core does not decide (a CUDA graph replay) serialized as one unit: drained before and
 * after, under the serial lock, so the graph's kernels run with nothing of another thread beside them. */
void ccov_serial_unit_begin(const ccov_backend *be, void *stream, ccov_launch *l) {
    *l = (ccov_launch){.stream = stream, .be = be, .slot = -1};
    hold_fire(be, stream);
    serial_begin(be, l);
}
void ccov_serial_unit_end(ccov_launch *l) { serial_end(l); }

/* ---------- serial twins of CUDA graphs ----------
 *
 * A graph replayed on several streams runs its branches at once, even in the
 * alone window. The doctor (doctor/graph_capture.py) registers, for each such
 * graph it captured, a twin executable: the same nodes chained in one
 * topological order. A serialized replay of the graph (and only that) launches
 * the twin, so each of its kernels runs alone; any other replay is the graph
 * itself. The interposer owns a registered twin: it is destroyed when its
 * graph's executable is (the front end's destroy hook calls ccov_twin_forget),
 * so an executable made later at the same address never replays a stale twin. */

enum { TWINS = 256 };
static pthread_mutex_t twin_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { void *exec, *twin; } twins[TWINS];
static _Atomic int twins_held; /* registered now: none, no lock taken */

/* Register `twin` for `exec`: 0 registered, -1 refused (NULL, already registered, TWINS held); a refused
 * twin stays the caller's. */
CCOV_EXPORT int ccoverlap_graph_twin(void *exec, void *twin) {
    if (!exec || !twin || exec == twin) return -1;
    int free_at = -1, rc = -1;
    pthread_mutex_lock(&twin_lock);
    for (int i = 0; i < TWINS; ++i) {
        if (twins[i].exec == exec || twins[i].twin == twin || twins[i].exec == twin) goto out;
        if (!twins[i].exec && free_at < 0) free_at = i;
    }
    if (free_at >= 0) {
        twins[free_at].exec = exec;
        twins[free_at].twin = twin;
        atomic_fetch_add(&twins_held, 1);
        rc = 0;
    }
out:
    pthread_mutex_unlock(&twin_lock);
    return rc;
}

void *ccov_twin_forget(void *exec) {
    if (!exec || !atomic_load(&twins_held)) return NULL;
    void *twin = NULL;
    pthread_mutex_lock(&twin_lock);
    for (int i = 0; i < TWINS; ++i)
        if (twins[i].exec == exec) {
            twin = twins[i].twin;
            twins[i].exec = twins[i].twin = NULL;
            atomic_fetch_sub(&twins_held, 1);
            break;
        }
    pthread_mutex_unlock(&twin_lock);
    return twin;
}

void *ccov_serial_twin(const ccov_launch *l, void *exec) {
    if (!l->serialized || !exec || !atomic_load(&twins_held)) return NULL;
    void *twin = NULL;
    pthread_mutex_lock(&twin_lock);
    for (int i = 0; i < TWINS && !twin; ++i)
        if (twins[i].exec == exec) twin = twins[i].twin;
    pthread_mutex_unlock(&twin_lock);
    return twin;
}

void ccov_serial_twin_ran(void) { atomic_fetch_add(&serial_counts[3], 1); }

/* 1 on, 0 off; the previous setting. Launches already started finish under the old one. */
CCOV_EXPORT int ccoverlap_set_serialize(int on) { return atomic_exchange(&serialize_on, on != 0); }

/* ---------- what launches showed: the marks levers leave ----------
 *
 * Per communication launch: its stream's priority, its cluster, grid and
 * block; per compute kernel, the fewest SMs its launches' contexts allowed (a
 * green context). Read by `ccoverlap doctor` and `ccoverlap tune` from the
 * stats, to say whether a lever took effect (control/levers.py: Mark); only
 * observed where stats are written (nothing else reads them). */
static char *stats_template; /* CCOVERLAP_STATS, kept even when the policy is invalid */

#define PRIORITIES 16 /* priority p counted at p + 8, clamped to 0..15 */
#define CLUSTERS 17   /* cluster sizes 1..16, the rest at 16 */
static struct {
    _Atomic unsigned long launches, priority_unknown, priority[PRIORITIES], cluster[CLUSTERS];
    _Atomic unsigned grid_min, grid_max, threads_min, threads_max;
} seen = {.grid_min = UINT32_MAX, .threads_min = UINT32_MAX};

static void atomic_min_u(_Atomic unsigned *a, unsigned v) {
    unsigned old = atomic_load_explicit(a, memory_order_relaxed);
    while (v < old && !atomic_compare_exchange_weak(a, &old, v)) {}
}
static void atomic_max_u(_Atomic unsigned *a, unsigned v) {
    unsigned old = atomic_load_explicit(a, memory_order_relaxed);
    while (v > old && !atomic_compare_exchange_weak(a, &old, v)) {}
}

static void observe_comm(const ccov_backend *be, const ccov_entry *e, int threads, const ccov_launch_info *li) {
    if (!stats_template) return;
    atomic_fetch_add_explicit(&seen.launches, 1, memory_order_relaxed);
    int prio;
    if (be->stream_priority && be->stream_priority(li ? li->stream : NULL, &prio) == 0) {
        int i = prio + 8 < 0 ? 0 : prio + 8 >= PRIORITIES ? PRIORITIES - 1 : prio + 8;
        atomic_fetch_add_explicit(&seen.priority[i], 1, memory_order_relaxed);
    } else {
        atomic_fetch_add_explicit(&seen.priority_unknown, 1, memory_order_relaxed);
    }
    int cluster = li && li->cluster > 0 ? li->cluster : e->cluster;
    cluster = cluster < 1 ? 1 : cluster >= CLUSTERS ? CLUSTERS - 1 : cluster;
    atomic_fetch_add_explicit(&seen.cluster[cluster], 1, memory_order_relaxed);
    if (li) {
        atomic_min_u(&seen.grid_min, li->grid);
        atomic_max_u(&seen.grid_max, li->grid);
    }
    atomic_min_u(&seen.threads_min, (unsigned)threads);
    atomic_max_u(&seen.threads_max, (unsigned)threads);
}

/* The SMs a stream's context allows, cached per stream (per context for the special streams
 * NULL, legacy and per-thread, whose context is the calling thread's): a green context's stream
 * keeps its context for life. A destroyed stream's handle reused by a new stream keeps the old
 * answer (rare: torch's stream pool never destroys streams). A slot holds sms + 2 (1: unknown),
 * 0 while its first reader asks. */
#define STREAM_SLOTS 256
static struct { _Atomic uintptr_t key; _Atomic int sms; } stream_cache[STREAM_SLOTS];

static int ask_sms(const ccov_backend *be, void *stream) {
    int sms;
    return be->stream_sms(stream, &sms) == 0 ? sms : -1;
}

static int stream_sms(const ccov_backend *be, void *stream) {
    uintptr_t key = (uintptr_t)stream;
    if (key <= 2) key = be->current_context ? (uintptr_t)be->current_context() | 1 : 0;
    if (!key) return ask_sms(be, stream);
    unsigned i = (unsigned)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> 56) % STREAM_SLOTS;
    for (unsigned n = 0; n < STREAM_SLOTS; ++n, i = (i + 1) % STREAM_SLOTS) {
        uintptr_t k = atomic_load_explicit(&stream_cache[i].key, memory_order_acquire);
        if (k == 0) {
            if (!atomic_compare_exchange_strong(&stream_cache[i].key, &k, key) && k != key) continue;
            if (k == 0) { /* ours: ask once, publish */
                int sms = ask_sms(be, stream);
                atomic_store_explicit(&stream_cache[i].sms, sms + 2, memory_order_release);
                return sms;
            }
        }
        if (k == key) {
            int v = atomic_load_explicit(&stream_cache[i].sms, memory_order_acquire);
            return v ? v - 2 : ask_sms(be, stream);
        }
    }
    return ask_sms(be, stream); /* every slot taken */
}

static void observe_sms(const ccov_backend *be, ccov_entry *e, void *stream) {
    if (!stats_template || !be->stream_sms) return;
    int sms = stream_sms(be, stream);
    if (sms <= 0) return;
    int old = atomic_load_explicit(&e->sm_limit, memory_order_relaxed);
    while ((old == 0 || sms < old) && !atomic_compare_exchange_weak(&e->sm_limit, &old, sms)) {}
}

/* ---------- decisions ---------- */

/* A launch shape in 31 bits: threads (11) and dynamic shared memory (20); 0
 * when it does not fit (then it is not memoised). A memo tag is a shape plus
 * the wave class (WAVE_BIT: a grid of two waves or more, drain by grid). */
#define WAVE_BIT (1u << 31)

static uint32_t shape_of(int threads, unsigned dynamic) {
    return threads > 0 && threads < 2048 && dynamic < (1u << 20) ? (uint32_t)threads | (uint32_t)dynamic << 11 : 0;
}

static unsigned mix(uint32_t t) { return t ^ t >> 7 ^ t >> 14 ^ t >> 31; }
static _Atomic uint64_t *memo_slot(ccov_entry *e, uint32_t tag) { return &e->memo[mix(tag) % MEMO_SLOTS]; }
static _Atomic uint64_t *wave_slot(ccov_entry *e, uint32_t shape) { return &e->waves[mix(shape) % WAVE_SLOTS]; }

/* A memo slot packs the tag in the low 32 bits and the decision in the high
 * 32: a pad (> 0) or -reason. Slots are chosen by the tag, so a kernel
 * launched with a few shapes does not replan on every launch. Reads take no
 * lock; writes take it and are dropped when the policy changed since the
 * decision was made under `snap`: ccoverlap_set_policy clears every memo
 * under the same lock, so no memo outlives the policy it was made under. */
static void remember(ccov_entry *e, uint32_t tag, uint64_t snap, int decision) {
    if (!tag) return;
    pthread_mutex_lock(&lock);
    if (live_gen(atomic_load(&live)) == live_gen(snap))
        atomic_store_explicit(memo_slot(e, tag), (uint64_t)(uint32_t)decision << 32 | tag, memory_order_relaxed);
    pthread_mutex_unlock(&lock);
}

/* The memoised decision for this launch, 1 if there is one. *tag is set either
 * way. With the drain chosen by grid, the wave class comes from the shape's
 * multi-wave boundary (ccov_plan.multiwave_grid), which depends on nothing
 * ccoverlap_set_policy changes, so it is memoised apart and never cleared. */
static int recall(ccov_entry *e, uint32_t shape, unsigned grid, int by_grid, uint32_t *tag, int *decision) {
    *tag = shape;
    if (!shape) return 0;
    if (by_grid) {
        uint64_t w = atomic_load_explicit(wave_slot(e, shape), memory_order_relaxed);
        if ((uint32_t)w != shape) return 0;
        uint32_t boundary = (uint32_t)(w >> 32);
        if (boundary && grid >= boundary) *tag |= WAVE_BIT;
    }
    uint64_t m = atomic_load_explicit(memo_slot(e, *tag), memory_order_relaxed);
    if ((uint32_t)m != *tag) return 0;
    *decision = (int32_t)(m >> 32);
    return 1;
}

/* The pad for one launch under the policy `snap`, or -reason. *boundary: the
 * shape's multi-wave boundary when the drain is chosen by grid, else 0. */
static int decide(const ccov_entry *e, const ccov_device *d, uint64_t snap, int threads, unsigned dynamic,
                  unsigned grid, int *boundary) {
    ccov_kernel k = e->k;
    k.threads = threads;
    k.dynamic_smem = (int)dynamic;
    *boundary = 0;
    ccov_occupancy occ;
    if (ccov_occupancy_compute(d, &k, &occ) != CCOV_OK) return -CCOV_R_UNKNOWN_KERNEL;
    int pad, mode = live_mode(snap);
    if (mode == CCOV_MODE_PAD) {
        pad = live_pad(snap);
        if ((long)k.static_smem + k.dynamic_smem + pad > d->smem_per_block_optin) return -CCOV_R_OVER_OPTIN;
    } else if (mode == CCOV_MODE_BLOCKS) {
        pad = ccov_pad_for_blocks(d, &k, live_blocks(snap));
        if (pad < 0) return -CCOV_R_OVER_OPTIN;
    } else {
        ccov_plan plan;
        int drain = pol.value[CCOV_F_DRAIN], per_sm = pol.value[CCOV_F_COMM_PER_SM];
        int rc = drain == CCOV_NONE && d->sm_count > 0
                     ? ccov_plan_auto(d, &k, &comm.k, per_sm, grid, &plan)
                     : ccov_plan_pad_drain(d, &k, &comm.k, per_sm, drain > 0 ? drain : 0, &plan);
        if (rc != CCOV_OK) return -CCOV_R_UNKNOWN_KERNEL;
        *boundary = plan.multiwave_grid;
        if (!plan.feasible) return -CCOV_R_INFEASIBLE;
        pad = plan.pad_bytes;
        /* The cost cap: a comm CTA that needs most of an SM (NCCL's on Hopper) leaves room
         * for one compute block, a slowdown on every SM for comm that uses a few of them. */
        int keep = pol.value[CCOV_F_KEEP];
        if (pad > 0 && keep > 0 && (long)plan.compute_blocks * 100 < (long)keep * plan.compute_blocks_before)
            return -CCOV_R_TOO_COSTLY;
    }
    return pad > 0 ? pad : -CCOV_R_NO_PAD_NEEDED;
}

static _Thread_local int depth __attribute__((tls_model("initial-exec")));
static _Atomic unsigned long loose[CCOV_NREASONS]; /* outcomes of launches without a cache entry */

static void count(ccov_entry *e, int outcome) {
    atomic_fetch_add_explicit(e ? &e->counts[outcome] : &loose[outcome], 1, memory_order_relaxed);
}

static int skip(ccov_launch *l, int reason) {
    count(l->entry, reason);
    l->pad = 0;
    return 0;
}

/* Make the kernel's max dynamic shared memory at least `bytes`; 0 on success.
 * The program may have raised it since we last looked: read it first, so it is
 * only ever raised, never lowered under a launch the program sized for it. */
static int ensure_attribute(ccov_entry *e, int bytes) {
    if (bytes <= atomic_load_explicit(&e->max_dynamic, memory_order_relaxed)) return 0;
    if (!e->be->set_attribute) return -1;
    int rc = 0, now = 0;
    pthread_mutex_lock(&lock);
    if (bytes > atomic_load(&e->max_dynamic)) {
        void *handle = (void *)atomic_load(&e->key);
        rc = e->be->get_max_dynamic(handle, e->per_device, e->device, &now);
        if (rc == 0 && now < bytes)
            rc = e->be->set_attribute(handle, e->per_device, e->device, CCOV_ATTR_MAX_DYNAMIC, now = bytes);
        if (rc == 0) atomic_store(&e->max_dynamic, now);
    }
    pthread_mutex_unlock(&lock);
    if (rc != 0)
        ccov_log_once(CCOV_R_ATTRIBUTE_FAILED, "raising the max dynamic shared memory of %s to %d B failed (%d): launched unchanged", e->name, bytes, rc);
    return rc;
}

int ccov_begin(const ccov_backend *be, void *handle, int kind, int threads, unsigned dynamic,
               const ccov_launch_info *li, ccov_launch *l) {
    l->entry = NULL;
    l->pad = 0;
    l->tag = 0;
    l->slot = -1;
    l->stream = li ? li->stream : NULL;
    l->be = be;
    l->serialized = 0;
    l->nested = depth++ > 0;
    if (l->nested) return 0;
    hold_fire(be, l->stream);
    serial_begin(be, l);
    if (pol.error[0]) return skip(l, CCOV_R_POLICY_INVALID);
    uint64_t snap = l->snap = atomic_load_explicit(&live, memory_order_acquire);
    int mode = live_mode(snap);

    int device = -1;
    ccov_entry *e = find((uintptr_t)handle, -1);
    if (!e || e->per_device) {
        if (be->current_device(&device) != 0) {
            ccov_log_once(CCOV_R_UNKNOWN_DEVICE, "the current %s device is unreadable: launched unchanged", be->api);
            return skip(l, CCOV_R_UNKNOWN_DEVICE);
        }
        if (e) e = find((uintptr_t)handle, device);
        if (!e) e = insert(be, handle, kind, device, li && li->cooperative);
        if (!e) {
            ccov_log_once(CCOV_R_CACHE_FULL, "more than %u kernels: new ones go out unchanged", CACHE_FILL);
            return skip(l, CCOV_R_CACHE_FULL);
        }
    }
    l->entry = e;
    if (e->role == ROLE_COMM) {
        observe_comm(be, e, threads, li);
        learn_comm(e, threads, dynamic, li);
        if (gated(mode)) l->slot = ring_reserve(be, li ? li->stream : NULL);
        return skip(l, CCOV_R_COMMUNICATION);
    }
    observe_sms(be, e, l->stream);
    if (mode == CCOV_MODE_OFF) return skip(l, CCOV_R_MODE_OFF);
    if (e->role == ROLE_EXCLUDED) return skip(l, CCOV_R_EXCLUDED);
    if (e->role == ROLE_UNKNOWN) return skip(l, CCOV_R_UNKNOWN_KERNEL);
    if (li && li->cooperative) return skip(l, CCOV_R_COOPERATIVE);
    if (mode == CCOV_MODE_AUTO && !atomic_load_explicit(&comm.learned, memory_order_acquire))
        return skip(l, CCOV_R_COMM_UNKNOWN);

    unsigned grid = li ? li->grid : 0;
    int by_grid = mode == CCOV_MODE_AUTO && pol.value[CCOV_F_DRAIN] == CCOV_NONE;
    uint32_t shape = shape_of(threads, dynamic);
    int decision;
    if (!recall(e, shape, grid, by_grid, &l->tag, &decision)) {
        const ccov_device *d = device_limits(be, e->device);
        if (!d) return skip(l, CCOV_R_UNKNOWN_DEVICE);
        int boundary;
        decision = decide(e, d, snap, threads, dynamic, grid, &boundary);
        if (by_grid && shape) {
            atomic_store_explicit(wave_slot(e, shape), (uint64_t)(uint32_t)boundary << 32 | shape, memory_order_relaxed);
            l->tag = boundary && grid >= (unsigned)boundary ? shape | WAVE_BIT : shape;
        }
        remember(e, l->tag, snap, decision);
    }
    if (decision <= 0) return skip(l, -decision);
    if (gated(mode) && !comm_in_flight()) return skip(l, CCOV_R_COMM_IDLE);
    if (ensure_attribute(e, (int)dynamic + decision) != 0) {
        remember(e, l->tag, snap, -CCOV_R_ATTRIBUTE_FAILED);
        return skip(l, CCOV_R_ATTRIBUTE_FAILED);
    }
    l->pad = decision;
    return decision;
}

void ccov_failed(ccov_launch *l) {
    if (l->entry) {
        ccov_log_once(CCOV_R_LAUNCH_RETRIED, "a padded launch of %s failed: relaunched unchanged, not padded again", l->entry->name);
        remember(l->entry, l->tag, l->snap, -CCOV_R_LAUNCH_RETRIED);
    }
    skip(l, CCOV_R_LAUNCH_RETRIED);
}

void ccov_end(ccov_launch *l, int launched) {
    depth--;
    if (l->slot >= 0) ring_commit(l->slot, launched);
    serial_end(l);
    if (l->nested || l->pad <= 0) return;
    count(l->entry, CCOV_PADDED);
    if (atomic_load_explicit(&l->entry->last_pad, memory_order_relaxed) != l->pad)
        atomic_store_explicit(&l->entry->last_pad, l->pad, memory_order_relaxed);
}

/* ---------- the runtime switch ---------- */

static _Atomic unsigned long policy_changes;

/* Mode index of off, pad, blocks, auto; value: pad bytes for pad, blocks for
 * blocks, ignored otherwise. 0, or -1 with nothing changed (out of range, or
 * the policy read at start was invalid: every launch passes through). Launches
 * racing with the switch get the old or the new policy, never a mix; stats
 * keep counting. */
CCOV_EXPORT int ccoverlap_set_policy(int mode, int value) {
    if (pol.error[0] || mode < CCOV_MODE_OFF || mode > CCOV_MODE_AUTO) return -1;
    int field = mode == CCOV_MODE_PAD ? CCOV_F_PAD_BYTES : mode == CCOV_MODE_BLOCKS ? CCOV_F_BLOCKS : -1;
    if (field >= 0 && (value < ccov_fields[field].lo || value > ccov_fields[field].hi)) return -1;
    pthread_mutex_lock(&lock);
    uint64_t old = atomic_load(&live);
    int pad = mode == CCOV_MODE_PAD ? value : live_pad(old), blocks = mode == CCOV_MODE_BLOCKS ? value : live_blocks(old);
    for (unsigned i = 0; i < CACHE_SIZE; ++i)
        if (atomic_load_explicit(&cache[i].key, memory_order_relaxed))
            for (int j = 0; j < MEMO_SLOTS; ++j) atomic_store_explicit(&cache[i].memo[j], 0, memory_order_relaxed);
    atomic_store_explicit(&live, pack_live(mode, pad, blocks, live_gen(old) + 1), memory_order_release);
    atomic_fetch_add(&policy_changes, 1);
    pthread_mutex_unlock(&lock);
    return 0;
}

/* ---------- stats ---------- */

static const char *const reason_names[CCOV_NREASONS] = {
    "padded", "communication", "excluded", "unknown_kernel", "unknown_device", "no_pad_needed",
    "over_optin", "infeasible", "comm_unknown", "cooperative", "attribute_failed", "launch_retried",
    "mode_off", "policy_invalid", "cache_full", "comm_idle", "too_costly"};

static int by_name(const void *a, const void *b) {
    return strcmp((*(ccov_entry *const *)a)->name, (*(ccov_entry *const *)b)->name);
}

/* "%p" in the path becomes the pid, so every worker of a job keeps its own file. */
static void stats_path(char *out, size_t cap) {
    size_t n = 0;
    for (const char *s = stats_template; *s && n + 24 < cap; ++s) {
        if (s[0] == '%' && s[1] == 'p') {
            n += (size_t)snprintf(out + n, cap - n, "%d", (int)getpid());
            ++s;
        } else {
            out[n++] = *s;
        }
    }
    out[n] = '\0';
}

/* {"name": n, ...} of the non-zero counts n[from..to). */
static void write_nonzero(FILE *f, const char *const *names, const unsigned long *n, int from, int to) {
    fputc('{', f);
    for (int r = from, first = 1; r < to; ++r)
        if (n[r]) {
            fprintf(f, "%s\"%s\": %lu", first ? "" : ", ", names[r], n[r]);
            first = 0;
        }
    fputc('}', f);
}

static void write_counts(FILE *f, const unsigned long *n, unsigned long (*hints)[HINT_STATES]) {
    unsigned long total = 0;
    for (int r = 0; r < CCOV_NREASONS; ++r) total += n[r];
    fprintf(f, "\"launches\": %lu, \"padded\": %lu, \"skipped\": ", total, n[CCOV_PADDED]);
    write_nonzero(f, reason_names, n, 1, CCOV_NREASONS);
    for (int side = 0; side < SIDES; ++side) {
        const char *prefix = hint_sides[side].prefix;
        fprintf(f, ", \"%scarveout_set\": %lu, \"%scarveout_skipped\": ", prefix, hints[side][HINT_SET], prefix);
        write_nonzero(f, hint_names, hints[side], HINT_SET + 1, HINT_STATES);
    }
}

/* A hint's state, counted on its kernel's side (none: nothing to count). */
static void count_hint(unsigned long (*hints)[HINT_STATES], const ccov_entry *e) {
    int side = hint_side(e->role);
    if (side < SIDES) hints[side][e->hint]++;
}

/* The serialized launches and what communication launches showed (see "what launches showed"). */
static void write_seen(FILE *f) {
    unsigned long serial[SERIAL_COUNTS], prio[PRIORITIES], cluster[CLUSTERS];
    unsigned long held[HOLD_COUNTS];
    for (int i = 0; i < SERIAL_COUNTS; ++i) serial[i] = atomic_load(&serial_counts[i]);
    for (int i = 0; i < HOLD_COUNTS; ++i) held[i] = atomic_load(&hold_counts[i]);
    fputs("\"serial\": ", f);
    write_nonzero(f, serial_names, serial, 0, SERIAL_COUNTS);
    fputs(",\n  \"hold\": ", f);
    write_nonzero(f, hold_names, held, 0, HOLD_COUNTS);
    fprintf(f, ",\n  \"comm_launches\": {\"launches\": %lu, \"priority_unknown\": %lu, \"priority\": {",
            atomic_load(&seen.launches), atomic_load(&seen.priority_unknown));
    for (int i = 0, first = 1; i < PRIORITIES; ++i)
        if ((prio[i] = atomic_load(&seen.priority[i]))) {
            fprintf(f, "%s\"%d\": %lu", first ? "" : ", ", i - 8, prio[i]);
            first = 0;
        }
    fputs("}, \"cluster\": {", f);
    for (int i = 1, first = 1; i < CLUSTERS; ++i)
        if ((cluster[i] = atomic_load(&seen.cluster[i]))) {
            fprintf(f, "%s\"%d\": %lu", first ? "" : ", ", i, cluster[i]);
            first = 0;
        }
    if (atomic_load(&seen.launches))
        fprintf(f, "}, \"grid\": [%u, %u], \"threads\": [%u, %u]}", atomic_load(&seen.grid_min),
                atomic_load(&seen.grid_max), atomic_load(&seen.threads_min), atomic_load(&seen.threads_max));
    else
        fputs("}, \"grid\": null, \"threads\": null}", f);
}

static void write_stats(void) {
    static ccov_entry *sorted[CACHE_SIZE];
    unsigned long totals[CCOV_NREASONS] = {0}, hints[SIDES][HINT_STATES] = {{0}}, launched = 0;
    unsigned n = 0;
    for (int r = 0; r < CCOV_NREASONS; ++r) totals[r] = atomic_load(&loose[r]);
    for (unsigned i = 0; i < CACHE_SIZE; ++i) {
        if (!atomic_load(&cache[i].key) || !cache[i].name) continue;
        sorted[n++] = &cache[i];
        count_hint(hints, &cache[i]);
        for (int r = 0; r < CCOV_NREASONS; ++r) totals[r] += atomic_load(&cache[i].counts[r]);
    }
    for (int r = 0; r < CCOV_NREASONS; ++r) launched += totals[r];
    if (!stats_template || !stats_template[0] || launched == 0) return; /* a launcher process must not clobber its workers' file */
    char path[4200], tmp[4300];
    stats_path(path, sizeof path);
    /* a character device (/dev/null) or a FIFO is written where it is: never replaced, nothing made beside it */
    struct stat st;
    int in_place = stat(path, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode));
    if (in_place) snprintf(tmp, sizeof tmp, "%s", path);
    else snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "ccoverlap interposer: cannot write stats to %s: %s\n", tmp, strerror(errno));
        return;
    }
    uint64_t now = atomic_load(&live);
    int mode = pol.error[0] ? pol.value[CCOV_F_MODE] : live_mode(now);
    fprintf(f, "{\n  \"pid\": %d,\n  \"mode\": \"%s\",\n  \"policy_error\": ", (int)getpid(),
            ccov_fields[CCOV_F_MODE].choices[mode]);
    if (pol.error[0]) ccov_json_str(f, pol.error, 1);
    else fputs("null", f);
    fprintf(f, ",\n  \"pad_bytes\": %d,\n  \"blocks\": %d,\n  \"comm_per_sm\": %d,\n  ",
            pol.error[0] ? at_least_0(pol.value[CCOV_F_PAD_BYTES]) : live_pad(now),
            pol.error[0] ? at_least_0(pol.value[CCOV_F_BLOCKS]) : live_blocks(now), pol.value[CCOV_F_COMM_PER_SM]);
    if (pol.value[CCOV_F_DRAIN] == CCOV_NONE) fputs("\"drain\": \"auto\", ", f);
    else fprintf(f, "\"drain\": %d, ", pol.value[CCOV_F_DRAIN]);
    fprintf(f, "\"keep\": %d, ", pol.value[CCOV_F_KEEP]);
    for (int side = 0; side < SIDES; ++side) {
        int field = hint_sides[side].field;
        if (pol.value[field] == CCOV_NONE) fprintf(f, "\"%s\": null, ", ccov_fields[field].key);
        else fprintf(f, "\"%s\": %d, ", ccov_fields[field].key, pol.value[field]);
    }
    fprintf(f, "\"gate\": \"%s\", \"gate_fallback\": %s, \"policy_changes\": %lu,\n  ",
            ccov_fields[CCOV_F_GATE].choices[gated(mode) ? CCOV_GATE_COMM : CCOV_GATE_ALWAYS],
            atomic_load(&gate_broken) ? "true" : "false", atomic_load(&policy_changes));
    write_counts(f, totals, hints);
    fputs(",\n  ", f);
    write_seen(f);
    fputs(",\n  \"comm_footprint\": ", f);
    if (atomic_load(&comm.learned)) {
        fprintf(f, "{\"threads\": %d, \"regs\": %d, \"static_smem\": %d, \"dynamic_smem\": %d, \"cluster\": %d, \"grid\": %u, \"name\": ",
                comm.k.threads, comm.k.regs, comm.k.static_smem, comm.k.dynamic_smem, comm.cluster, comm.grid);
        ccov_json_str(f, comm.name, 1);
        fputc('}', f);
    } else {
        fputs("null", f);
    }
    fputs(",\n  \"kernels\": [", f);
    qsort(sorted, n, sizeof *sorted, by_name);
    for (unsigned i = 0, first = 1; i < n;) { /* one row per name: handles of one kernel on several devices merge */
        ccov_entry *e = sorted[i];
        unsigned long counts[CCOV_NREASONS] = {0}, kernel_hints[SIDES][HINT_STATES] = {{0}};
        int pad = 0, sm_limit = 0;
        for (; i < n && strcmp(sorted[i]->name, e->name) == 0; ++i) {
            for (int r = 0; r < CCOV_NREASONS; ++r) counts[r] += atomic_load(&sorted[i]->counts[r]);
            count_hint(kernel_hints, sorted[i]);
            if (atomic_load(&sorted[i]->last_pad)) pad = atomic_load(&sorted[i]->last_pad);
            int limit = atomic_load(&sorted[i]->sm_limit);
            if (limit > 0 && (sm_limit == 0 || limit < sm_limit)) sm_limit = limit;
        }
        fprintf(f, "%s\n    {\"name\": ", first ? "" : ",");
        ccov_json_str(f, e->name, 1);
        fprintf(f, ", \"api\": \"%s\", \"pad_bytes\": %d, ", e->be->api, pad);
        if (sm_limit > 0) fprintf(f, "\"sm_limit\": %d, ", sm_limit);
        write_counts(f, counts, kernel_hints);
        fputc('}', f);
        first = 0;
    }
    fputs("\n  ]\n}\n", f);
    int failed = ferror(f);
    /* a full disk: no half file, no temporary left */
    if (fclose(f) != 0 || failed || (!in_place && rename(tmp, path) != 0)) {
        fprintf(stderr, "ccoverlap interposer: cannot write stats to %s: %s\n", path, strerror(errno ? errno : EIO));
        if (!in_place) unlink(tmp);
    }
}

/* A fork while another thread holds the lock must not leave the child stuck,
 * and a child reports only its own launches (CUDA does not work in a forked
 * child anyway, so it usually has none and writes nothing). */
static void before_fork(void) { pthread_mutex_lock(&lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&lock); }
static void after_fork_child(void) {
    pthread_mutex_init(&lock, NULL);
    pthread_mutex_init(&serial_lock, NULL); /* a parent's serialized launch is not the child's */
    atomic_store(&serialize_on, 0);
    pthread_mutex_init(&hold_lock, NULL); /* the parent's hold is on the parent's stream */
    atomic_store(&hold_armed, 0);
    for (int i = 0; i < RING; ++i) { /* the parent's events mean nothing here */
        atomic_store(&ring[i].state, SLOT_FREE);
        atomic_store(&ring[i].event, NULL);
        atomic_store(&ring[i].owner, NULL);
    }
    atomic_store(&ring_active, 0);
    for (int r = 0; r < CCOV_NREASONS; ++r) {
        atomic_store(&loose[r], 0);
        for (unsigned i = 0; i < CACHE_SIZE; ++i) atomic_store(&cache[i].counts[r], 0);
    }
}

/* The stats now, for a process about to end without its atexit handlers (the tuner's trials: os._exit). */
CCOV_EXPORT void ccoverlap_write_stats(void) { write_stats(); }

__attribute__((constructor)) static void init(void) {
    real_dlsym();
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    if (ccov_policy_load(&pol, process_getenv, NULL) == 0)
        atomic_store(&live, pack_live(pol.value[CCOV_F_MODE], at_least_0(pol.value[CCOV_F_PAD_BYTES]),
                                      at_least_0(pol.value[CCOV_F_BLOCKS]), 0));
    else
        fprintf(stderr, "ccoverlap interposer: invalid policy, every launch passes through unchanged: %s\n", pol.error);
    const char *stats = pol.text[CCOV_F_STATS] ? pol.text[CCOV_F_STATS] : getenv(ccov_fields[CCOV_F_STATS].env);
    if (stats) stats_template = strdup(stats);
    atexit(write_stats);
}
