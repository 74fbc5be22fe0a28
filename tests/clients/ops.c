/* The op interpreter: runs ops given as argv words against a `struct drv` and prints one
 * machine-readable line per op on stdout ("name [args] key=value ..."), flushed at once.
 *
 * Besides the single calls, these ops drive the reliability tests (tests/reliability_*.rs):
 *   soak:THREADS:MS:QUOTA[:SEED[:ROUNDS]]  the concurrency soak of soak.c (one line)
 *   stream                  cuStreamCreate (the driver's own, not hooked); a stream slot
 *   freeon:SLOT:STREAM      cuMemFreeAsync of pointer SLOT on stream slot STREAM
 *   t-OP / tc-OP            run OP on a new thread (joined at once): t- with no current
 *                           context, tc- with the caller's context made current first
 *   fork:N                  fork; the child runs the next N ops and calls exit(), the
 *                           parent waits (at most 10 s, then kills it) and prints
 *                           "fork N pid=P status=S" (S: the exit code, 128 + the signal,
 *                           or -2 if it had to be killed, and then exits with status 5),
 *                           then goes on after those N ops
 *   forkexec:N              the same, but the child execs this program with the next N ops
 *   setenv:KEY=VALUE        setenv (the value may contain ':')
 *   spin:N:SIZE             N background threads allocate and free SIZE bytes until the
 *                           process ends; returns once each has done it once
 *   signal:SIG              kill(getpid(), SIG); prints "signal SIG survived" if still
 *                           alive after 10 s, or at once when a catch:SIG handler ran
 *   catch:SIG               installs the program's own SIG handler (it only notes the signal)
 *   procinfo                prints "procinfo threads=N term=D int=D": the process's threads
 *                           and the SIGTERM and SIGINT dispositions (default, ignore, handler)
 *   exitthread:CODE         a new thread calls exit(CODE) (the caller waits for it)
 *   sigexit:SIG             installs a SIG handler that calls exit(0) and sends SIG to the
 *                           first spin thread (most likely inside a hook); prints
 *                           "sigexit SIG survived" if still alive after 10 s
 *   atexitfree              registers an atexit handler that frees every live pointer and
 *                           releases every live handle, printing "atexitfree-ran n=N rc=R"
 *   bg-OP                   run OP on a new thread that is never joined
 *   waitgone:PATH           waits (at most 30 s) until PATH does not exist (PATH may hold
 *                           ':'; it is everything after the first one)
 *
 * CUDA arrays (FMT is a CUarray_format number, FLAGS a CUDA_ARRAY3D_* mask, both decimal):
 *   array:W:H:FMT:CH        cuArrayCreate_v2; an array slot
 *   array3d:W:H:D:FMT:CH:FLAGS              cuArray3DCreate_v2; an array slot
 *   larray:W:H:FMT:CH / larray3d:W:H:D:FMT:CH:FLAGS   the same with the legacy
 *                           cuArrayCreate / cuArray3DCreate (32-bit dimensions)
 *   mipmap:W:H:D:FMT:CH:FLAGS:LEVELS        cuMipmappedArrayCreate; a mipmap slot
 *   arrdestroy:SLOT / mipdestroy:SLOT       cuArrayDestroy / cuMipmappedArrayDestroy
 *   arrreq:SLOT / mipreq:SLOT               cu(Mipmapped)ArrayGetMemoryRequirements on the
 *                           current device (not hooked: looked up with the client's dlsym)
 *   miplevel:SLOT:LEVEL     cuMipmappedArrayGetLevel (not hooked); an array slot */
#define _GNU_SOURCE
#include "ops.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CALL(d, fn, ...) ((d)->fn ? (d)->fn(__VA_ARGS__) : CUDA_ERROR_NOT_FOUND)

#define MAX_DEVICES 64
#define MAX_FIELDS 8
#define FILL_LIMIT 1000000UL

struct slot {
    unsigned long long value; /* a device pointer or an allocation handle */
    size_t size;
    size_t mapped; /* reservations: bytes mapped at the start, for unmap */
    int live;
};

struct slots {
    struct slot *v;
    size_t n, cap;
};

static struct slots ptrs, handles, reservations, streams;
static struct slots arrays, mipmaps; /* CUarray, CUmipmappedArray */
static struct slots contexts; /* contexts made by ctxcreate */
static struct slots graphs, execs; /* CUgraph, CUgraphExec */
static CUmemoryPool host_pool; /* hostpool's pool (named by pool ops) */
static const struct drv *the_drv; /* for the atexit handler */
static CUcontext dev_ctx[MAX_DEVICES];
static CUmemoryPool dev_pool[MAX_DEVICES];
static int cur_dev = 0;

static void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

static size_t push(struct slots *s, unsigned long long value, size_t size, int live) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v) {
            fprintf(stderr, "ops: out of host memory\n");
            exit(3);
        }
    }
    s->v[s->n].value = value;
    s->v[s->n].size = size;
    s->v[s->n].mapped = 0;
    s->v[s->n].live = live;
    return s->n++;
}

/* Decimal with an optional binary suffix K/M/G/T. */
static int parse_size(const char *s, unsigned long long *out_v) {
    char *end;
    unsigned long long v, mul = 1;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    if (*end) {
        switch (*end) {
        case 'K': case 'k': mul = 1ULL << 10; break;
        case 'M': case 'm': mul = 1ULL << 20; break;
        case 'G': case 'g': mul = 1ULL << 30; break;
        case 'T': case 't': mul = 1ULL << 40; break;
        default: return -1;
        }
        if (end[1])
            return -1;
    }
    if (v > ULLONG_MAX / mul)
        return -1;
    *out_v = v * mul;
    return 0;
}

static int parse_num(const char *s, unsigned long long *out_v) {
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    *out_v = strtoull(s, &end, 10);
    return errno || *end ? -1 : 0;
}

static int parse_int(const char *s, long long *out_v) {
    char *end;
    if (!s || !*s)
        return -1;
    errno = 0;
    *out_v = strtoll(s, &end, 10);
    return errno || *end ? -1 : 0;
}

static int parse_hex(const char *s, unsigned long long *out_v) {
    char *end;
    if (!s || s[0] != '0' || (s[1] != 'x' && s[1] != 'X') || !s[2])
        return -1;
    errno = 0;
    *out_v = strtoull(s + 2, &end, 16);
    return errno || *end ? -1 : 0;
}

static struct slot *get_slot(struct slots *s, const char *arg) {
    unsigned long long i;
    if (parse_num(arg, &i) || i >= s->n)
        return NULL;
    return &s->v[i];
}

/* Makes device n's primary context current (retained once per device). */
static CUresult use_device(const struct drv *d, int n) {
    CUdevice dev;
    CUresult rc;
    if (n < 0 || n >= MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    rc = CALL(d, cuDeviceGet, &dev, n);
    if (rc)
        return rc;
    if (!dev_ctx[n]) {
        CUcontext ctx = NULL;
        rc = CALL(d, cuDevicePrimaryCtxRetain, &ctx, dev);
        if (rc)
            return rc;
        dev_ctx[n] = ctx;
    }
    rc = CALL(d, cuCtxSetCurrent, dev_ctx[n]);
    if (!rc)
        cur_dev = n;
    return rc;
}

static void print_alloc(const char *name, unsigned long long size, CUresult rc, size_t slot,
                        CUdeviceptr p) {
    out("%s %llu rc=%d slot=%zu ptr=0x%llx", name, size, rc, slot, p);
}

/* ---- threads:N:ITERS:SIZE ---- */

struct thread_arg {
    const struct drv *d;
    pthread_barrier_t *start, *hold;
    CUcontext ctx;
    unsigned long iters;
    size_t size;
    unsigned int seed;
    unsigned long ok, oom, other;
};

static void *thread_main(void *p) {
    struct thread_arg *a = p;
    const struct drv *d = a->d;
    CUdeviceptr live[4];
    unsigned int head = 0, n = 0, x = a->seed;
    unsigned long i;

    if (CALL(d, cuCtxSetCurrent, a->ctx))
        a->other++;
    pthread_barrier_wait(a->start);
    for (i = 0; i < a->iters; i++) {
        CUdeviceptr dp = 0;
        CUresult rc;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        if (n == 4 || (n > 0 && (x & 3) == 0)) {
            if (CALL(d, cuMemFree_v2, live[head]))
                a->other++;
            head = (head + 1) % 4;
            n--;
        }
        rc = CALL(d, cuMemAlloc_v2, &dp, a->size);
        if (rc == CUDA_SUCCESS) {
            live[(head + n) % 4] = dp;
            n++;
            a->ok++;
        } else if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
            a->oom++;
        } else {
            a->other++;
        }
    }
    /* Hold the last allocations until every thread is done, so that the threads' final
     * live sets add up (the demand peaks even if the scheduler ran them one by one). */
    pthread_barrier_wait(a->hold);
    while (n > 0) {
        if (CALL(d, cuMemFree_v2, live[head]))
            a->other++;
        head = (head + 1) % 4;
        n--;
    }
    return NULL;
}

static void op_threads(const struct drv *d, unsigned long nthreads, unsigned long iters,
                       size_t size) {
    struct thread_arg *args = calloc(nthreads, sizeof *args);
    pthread_t *tids = calloc(nthreads, sizeof *tids);
    unsigned long i, ok = 0, oom = 0, other = 0;
    CUcontext ctx = NULL;
    pthread_barrier_t start, hold;

    if (!args || !tids) {
        fprintf(stderr, "ops: out of host memory\n");
        exit(3);
    }
    if (CALL(d, cuCtxGetCurrent, &ctx))
        other++;
    pthread_barrier_init(&start, NULL, (unsigned int)nthreads);
    pthread_barrier_init(&hold, NULL, (unsigned int)nthreads);
    for (i = 0; i < nthreads; i++) {
        args[i].d = d;
        args[i].start = &start;
        args[i].hold = &hold;
        args[i].ctx = ctx;
        args[i].iters = iters;
        args[i].size = size;
        args[i].seed = 2463534242u + (unsigned int)i * 2654435761u;
        if (pthread_create(&tids[i], NULL, thread_main, &args[i])) {
            fprintf(stderr, "ops: pthread_create failed\n");
            exit(3);
        }
    }
    for (i = 0; i < nthreads; i++) {
        pthread_join(tids[i], NULL);
        ok += args[i].ok;
        oom += args[i].oom;
        other += args[i].other;
    }
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&hold);
    out("threads %lu ok=%lu oom=%lu other=%lu", nthreads, ok, oom, other);
    free(args);
    free(tids);
}

/* ---- lifecycle helpers ---- */

typedef CUresult (*fn_cuStreamCreate)(CUstream *stream, unsigned int flags);

/* A driver function cuquota does not hook, looked up with the client's own dlsym. */
static void *raw_sym(const struct drv *d, const char *name) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return h && d->sym ? d->sym(h, name) : NULL;
}

static int run_op(const struct drv *d, const char *word);

struct on_thread {
    const struct drv *d;
    const char *word;
    CUcontext ctx; /* made current first when not NULL */
    int result;
};

static void *on_thread_main(void *p) {
    struct on_thread *t = p;
    if (t->ctx && CALL(t->d, cuCtxSetCurrent, t->ctx)) {
        t->result = -1;
        return NULL;
    }
    t->result = run_op(t->d, t->word);
    return NULL;
}

static int run_on_thread(const struct drv *d, const char *word, int with_ctx) {
    struct on_thread t = {d, word, NULL, 0};
    pthread_t tid;
    if (with_ctx && (CALL(d, cuCtxGetCurrent, &t.ctx) || !t.ctx))
        return -1;
    if (pthread_create(&tid, NULL, on_thread_main, &t)) {
        fprintf(stderr, "ops: pthread_create failed\n");
        exit(3);
    }
    pthread_join(tid, NULL);
    return t.result;
}

/* bg-OP: OP on a new thread that is never joined (the program goes on at once). */
static void *in_background_main(void *p) {
    struct on_thread *t = p;
    t->result = run_op(t->d, t->word);
    return NULL;
}

static int run_in_background(const struct drv *d, const char *word) {
    struct on_thread *t = calloc(1, sizeof *t); /* lives as long as the thread */
    pthread_t tid;
    if (!t)
        exit(3);
    t->d = d;
    t->word = word;
    if (pthread_create(&tid, NULL, in_background_main, t)) {
        fprintf(stderr, "ops: pthread_create failed\n");
        exit(3);
    }
    pthread_detach(tid);
    return 0;
}

struct spinner {
    const struct drv *d;
    CUcontext ctx;
    size_t size;
    int *started;
};

static void *spin_main(void *p) {
    struct spinner *s = p;
    const struct drv *d = s->d;
    unsigned long i;
    CALL(d, cuCtxSetCurrent, s->ctx);
    for (i = 0;; i++) {
        CUdeviceptr dp = 0;
        if (i & 1) {
            if (!CALL(d, cuMemAllocAsync, &dp, s->size, NULL))
                CALL(d, cuMemFreeAsync, dp, NULL);
        } else if (!CALL(d, cuMemAlloc_v2, &dp, s->size)) {
            CALL(d, cuMemFree_v2, dp);
        }
        if (i == 1)
            __atomic_fetch_add(s->started, 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

/* The spinner threads, for sigexit (which interrupts one of them inside the hooks). */
static pthread_t spinners[64];
static int nspinners;

static volatile sig_atomic_t caught;

static void note_signal(int sig) {
    caught = sig;
}

static const char *disposition(int sig) {
    struct sigaction old;
    if (sigaction(sig, NULL, &old))
        return "unknown";
    if (old.sa_handler == SIG_DFL)
        return "default";
    return old.sa_handler == SIG_IGN ? "ignore" : "handler";
}

static int count_threads(void) {
    int n = 0;
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "Threads:", 8))
            n = atoi(line + 8);
    fclose(f);
    return n;
}

static void exit_from_handler(int sig) {
    (void)sig;
    exit(0); /* not async-signal-safe, and done by real programs all the same */
}

static void op_spin(const struct drv *d, unsigned long n, size_t size) {
    static int started;
    struct spinner *s = calloc(n, sizeof *s);
    CUcontext ctx = NULL;
    unsigned long i;
    int target = __atomic_load_n(&started, __ATOMIC_SEQ_CST) + (int)n;
    if (!s) {
        fprintf(stderr, "ops: out of host memory\n");
        exit(3);
    }
    CALL(d, cuCtxGetCurrent, &ctx);
    for (i = 0; i < n; i++) {
        pthread_t tid;
        s[i].d = d;
        s[i].ctx = ctx;
        s[i].size = size;
        s[i].started = &started;
        if (pthread_create(&tid, NULL, spin_main, &s[i])) {
            fprintf(stderr, "ops: pthread_create failed\n");
            exit(3);
        }
        pthread_detach(tid);
        if (nspinners < 64)
            spinners[nspinners++] = tid;
    }
    while (__atomic_load_n(&started, __ATOMIC_SEQ_CST) < target)
        sched_yield();
    out("spin %lu", n);
}

static void *exit_main(void *p) {
    exit((int)(long)p);
    return NULL;
}

static void atexit_free(void) {
    const struct drv *d = the_drv;
    size_t i, n = 0;
    CUresult rc, first = 0;
    for (i = 0; i < ptrs.n; i++) {
        if (!ptrs.v[i].live)
            continue;
        n++;
        rc = CALL(d, cuMemFree_v2, ptrs.v[i].value);
        if (rc && !first)
            first = rc;
    }
    for (i = 0; i < handles.n; i++) {
        if (!handles.v[i].live)
            continue;
        n++;
        rc = CALL(d, cuMemRelease, handles.v[i].value);
        if (rc && !first)
            first = rc;
    }
    out("atexitfree-ran n=%zu rc=%d", n, first);
}

/* Waits for a child at most 10 s (a hang is a failure to report, not to wait out); kills
 * it after that. Returns its exit code, 128 + its signal, or -2 when it had to be killed. */
static int wait_child(pid_t pid) {
    struct timespec ts = {0, 1000000L};
    int status = 0, i;
    pid_t got = 0;
    for (i = 0; i < 10000; i++) {
        got = waitpid(pid, &status, WNOHANG);
        if (got == pid || (got < 0 && errno != EINTR))
            break;
        nanosleep(&ts, NULL);
    }
    if (got != pid) {
        kill(pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        return -2;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status)
                             : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}

/* fork:N and forkexec:N at argv[0]; returns the number of words used, or -1. */
static int op_fork(const struct drv *d, int argc, char **argv) {
    int exec = !strncmp(argv[0], "forkexec:", 9);
    const char *arg = argv[0] + (exec ? 9 : 5);
    unsigned long long n;
    int status;
    pid_t pid;
    if (parse_num(arg, &n) || n > (unsigned long long)(argc - 1))
        return -1;
    pid = fork();
    if (pid < 0) {
        fprintf(stderr, "ops: fork failed\n");
        exit(3);
    }
    if (pid == 0) {
        if (exec) {
            char **args = calloc((size_t)n + 2, sizeof *args);
            if (!args)
                _exit(3);
            args[0] = "/proc/self/exe";
            memcpy(args + 1, argv + 1, (size_t)n * sizeof *args);
            execv("/proc/self/exe", args);
            fprintf(stderr, "ops: execv failed\n");
            _exit(127);
        }
        exit(run_ops(d, (int)n, argv + 1));
    }
    status = wait_child(pid);
    out("%s %llu pid=%d status=%d", exec ? "forkexec" : "fork", n, (int)pid, status);
    if (status == -2)
        exit(5); /* a hung child ends the run: the test has its answer */
    return (int)n + 1;
}

/* ---- one op ---- */

/* Returns 0, or -1 when the op is malformed. */
/* ---- VMM lifetimes and imports ------------------------------------------------------
 *   createfd:SIZE           cuMemCreate on the current device, exportable as a POSIX fd
 *   mapat:R:OFF:H           cuMemMap of handle slot H (its whole size) at reservation R + OFF
 *   unmapat:R:OFF:SIZE      cuMemUnmap of SIZE bytes at reservation R + OFF
 *   access:R:OFF:SIZE       cuMemSetAccess read-write for the current device
 *   retain:R:OFF            cuMemRetainAllocationHandle of reservation R + OFF: a handle slot
 *   export:H                cuMemExportToShareableHandle (POSIX fd); the fd goes in $OPS_FD
 *                           (inherited by a forkexec child)
 *   import:SIZE             cuMemImportFromShareableHandle of $OPS_FD: a handle slot of SIZE
 *   ipcopen / poolimport / extbuf   cuIpcOpenMemHandle(_v2) of a zero handle,
 *                           cuMemPoolImportPointer and cuExternalMemoryGetMappedBuffer with
 *                           null objects: a pointer slot if one comes back
 * Returns -1 for an op it does not know. */
/* ---- Context memory, cuCtxSetLimit, NVML, device identity ----
 * Driver functions through the client's dlsym on the driver's handle; NVML through
 * dlopen("libnvidia-ml.so.1") (the shim answers as it too). INDEX is an NVML index.
 *   ctxcreate3 / ctxcreate4      cuCtxCreate_v3 / _v4 on the current device (made current);
 *                                a context slot, as ctxcreate
 *   setlimit:LIMIT:VALUE         cuCtxSetLimit (LIMIT a CUlimit number, VALUE a size)
 *   getlimit:LIMIT               cuCtxGetLimit: "getlimit LIMIT rc=R value=V"
 *   uuid:DEV / busid:DEV         cuDeviceGetUuid as "uuid=GPU-..." / cuDeviceGetPCIBusId
 *                                as "id=..." of device ordinal DEV
 *   otherproc:INDEX:PID:SIZE     cuShimOtherProcess (the shim's: another process's memory)
 *   nvmlinit / nvmlshutdown      nvmlInit_v2 / nvmlShutdown
 *   nvmlcount                    nvmlDeviceGetCount_v2: "nvmlcount rc=R n=N"
 *   nvmlinfo:INDEX               nvmlDeviceGetMemoryInfo: "... free=F used=U total=T"
 *   nvmlinfo2:INDEX              nvmlDeviceGetMemoryInfo_v2: "... free used total reserved"
 *   nvmlprocs:INDEX              nvmlDeviceGetComputeRunningProcesses_v3 (size query first):
 *                                "nvmlprocs INDEX rc=R n=N listed=0|1 mine=BYTES others=BYTES"
 *                                (mine: this pid's usedGpuMemory; others: the rest summed)
 *   nvmluuid:INDEX / nvmlbus:INDEX  nvmlDeviceGetUUID "uuid=..." / nvmlDeviceGetPciInfo_v3
 *                                "id=BUSIDLEGACY long=BUSID"
 * Returns -1 for an op it does not know. */
static void *nvml_sym(const struct drv *d, const char *name) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    return h && d->sym ? d->sym(h, name) : NULL;
}

static int nvml_handle(const struct drv *d, const char *index, nvmlDevice_t *dev) {
    unsigned long long i;
    fn_nvmlDeviceGetHandleByIndex_v2 get;
    if (parse_num(index, &i))
        return -1;
    *(void **)&get = nvml_sym(d, "nvmlDeviceGetHandleByIndex_v2");
    return get ? get((unsigned int)i, dev) : CUDA_ERROR_NOT_FOUND;
}

/* ---- Context memory on the client's own lookup path (linked, dlsym,
 * cuGetProcAddress), not the client's dlsym as above:
 *   pctxcreate                   cuCtxCreate_v2 on the current device (made current); a
 *                                context slot, as ctxcreate: "pctxcreate rc=R slot=S"
 *   psetlimit:LIMIT:VALUE        cuCtxSetLimit: "psetlimit LIMIT rc=R"
 *   pctxthreads:N                N threads (at most 16) each create a context on the
 *                                current device at once (kept to the end): "pctxthreads N
 *                                ok=K" (K: how many succeeded)
 * Returns -1 for an op it does not know. */
struct ctx_thread {
    const struct drv *d;
    pthread_barrier_t *start;
    CUdevice dev;
    CUresult rc;
};

static void *ctx_thread_main(void *p) {
    struct ctx_thread *t = p;
    CUcontext ctx = NULL;
    pthread_barrier_wait(t->start);
    t->rc = CALL(t->d, cuCtxCreate_v2, &ctx, 0, t->dev);
    return NULL;
}

static int path_context_op(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    unsigned long long a = 0, b = 0;
    CUresult rc;
    if (!strcmp(op, "pctxcreate")) {
        CUcontext ctx = NULL;
        CUdevice dev = 0;
        if (nf != 1)
            return -1;
        rc = CALL(d, cuDeviceGet, &dev, cur_dev);
        if (!rc)
            rc = CALL(d, cuCtxCreate_v2, &ctx, 0, dev);
        out("pctxcreate rc=%d slot=%zu", rc,
            push(&contexts, (unsigned long long)(size_t)ctx, 0, rc == 0));
    } else if (!strcmp(op, "psetlimit")) {
        if (nf != 3 || parse_num(f[1], &a) || parse_size(f[2], &b))
            return -1;
        rc = CALL(d, cuCtxSetLimit, (int)a, b);
        out("psetlimit %llu rc=%d", a, rc);
    } else if (!strcmp(op, "pctxthreads")) {
        struct ctx_thread t[16];
        pthread_t tid[16];
        pthread_barrier_t start;
        CUdevice dev = 0;
        unsigned long long i, ok = 0;
        if (nf != 2 || parse_num(f[1], &a) || a == 0 || a > 16)
            return -1;
        rc = CALL(d, cuDeviceGet, &dev, cur_dev);
        if (rc)
            return -1;
        pthread_barrier_init(&start, NULL, (unsigned)a);
        for (i = 0; i < a; i++) {
            t[i].d = d;
            t[i].start = &start;
            t[i].dev = dev;
            t[i].rc = CUDA_ERROR_UNKNOWN;
            if (pthread_create(&tid[i], NULL, ctx_thread_main, &t[i]))
                exit(3);
        }
        for (i = 0; i < a; i++) {
            pthread_join(tid[i], NULL);
            ok += t[i].rc == CUDA_SUCCESS;
        }
        pthread_barrier_destroy(&start);
        out("pctxthreads %llu ok=%llu", a, ok);
    } else {
        return -1;
    }
    return 0;
}

static int context_nvml_op(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    unsigned long long a = 0, b = 0, c = 0;
    nvmlDevice_t nd = NULL;
    int rc;
#define NARGS(n) \
    do { \
        if (nf != (n) + 1) \
            return -1; \
    } while (0)
    if (!strcmp(op, "ctxcreate3") || !strcmp(op, "ctxcreate4")) {
        CUcontext ctx = NULL;
        CUdevice dev = 0;
        NARGS(0);
        rc = CALL(d, cuDeviceGet, &dev, cur_dev);
        if (!rc && !strcmp(op, "ctxcreate3")) {
            fn_cuCtxCreate_v3 create;
            *(void **)&create = raw_sym(d, "cuCtxCreate_v3");
            rc = create ? create(&ctx, NULL, 0, 0, dev) : CUDA_ERROR_NOT_FOUND;
        } else if (!rc) {
            fn_cuCtxCreate_v4 create;
            *(void **)&create = raw_sym(d, "cuCtxCreate_v4");
            rc = create ? create(&ctx, NULL, 0, dev) : CUDA_ERROR_NOT_FOUND;
        }
        out("%s rc=%d slot=%zu", op, rc,
            push(&contexts, (unsigned long long)(size_t)ctx, 0, rc == 0));
    } else if (!strcmp(op, "setlimit")) {
        fn_cuCtxSetLimit set;
        NARGS(2);
        if (parse_num(f[1], &a) || parse_size(f[2], &b))
            return -1;
        *(void **)&set = raw_sym(d, "cuCtxSetLimit");
        rc = set ? set((int)a, b) : CUDA_ERROR_NOT_FOUND;
        out("setlimit %llu rc=%d", a, rc);
    } else if (!strcmp(op, "getlimit")) {
        fn_cuCtxGetLimit get;
        size_t value = 0;
        NARGS(1);
        if (parse_num(f[1], &a))
            return -1;
        *(void **)&get = raw_sym(d, "cuCtxGetLimit");
        rc = get ? get(&value, (int)a) : CUDA_ERROR_NOT_FOUND;
        out("getlimit %llu rc=%d value=%zu", a, rc, value);
    } else if (!strcmp(op, "uuid")) {
        fn_cuDeviceGetUuid get;
        unsigned char u[16] = {0};
        NARGS(1);
        if (parse_num(f[1], &a))
            return -1;
        *(void **)&get = raw_sym(d, "cuDeviceGetUuid");
        rc = get ? get(u, (CUdevice)a) : CUDA_ERROR_NOT_FOUND;
        out("uuid %llu rc=%d uuid=GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
            "%02x%02x%02x%02x%02x%02x",
            a, rc, u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
            u[12], u[13], u[14], u[15]);
    } else if (!strcmp(op, "busid")) {
        fn_cuDeviceGetPCIBusId get;
        char id[32] = "-";
        NARGS(1);
        if (parse_num(f[1], &a))
            return -1;
        *(void **)&get = raw_sym(d, "cuDeviceGetPCIBusId");
        rc = get ? get(id, sizeof id, (CUdevice)a) : CUDA_ERROR_NOT_FOUND;
        out("busid %llu rc=%d id=%s", a, rc, id);
    } else if (!strcmp(op, "otherproc")) {
        fn_cuShimOtherProcess set;
        NARGS(3);
        if (parse_num(f[1], &a) || parse_num(f[2], &b) || parse_size(f[3], &c))
            return -1;
        *(void **)&set = raw_sym(d, "cuShimOtherProcess");
        rc = set ? set((int)a, (unsigned int)b, c) : CUDA_ERROR_NOT_FOUND;
        out("otherproc %llu rc=%d", a, rc);
    } else if (!strcmp(op, "nvmlinit") || !strcmp(op, "nvmlshutdown")) {
        fn_nvmlInit_v2 call;
        NARGS(0);
        *(void **)&call = nvml_sym(d, !strcmp(op, "nvmlinit") ? "nvmlInit_v2" : "nvmlShutdown");
        rc = call ? call() : CUDA_ERROR_NOT_FOUND;
        out("%s rc=%d", op, rc);
    } else if (!strcmp(op, "nvmlcount")) {
        fn_nvmlDeviceGetCount_v2 count;
        unsigned int n = 0;
        NARGS(0);
        *(void **)&count = nvml_sym(d, "nvmlDeviceGetCount_v2");
        rc = count ? count(&n) : CUDA_ERROR_NOT_FOUND;
        out("nvmlcount rc=%d n=%u", rc, n);
    } else if (!strcmp(op, "nvmlinfo")) {
        fn_nvmlDeviceGetMemoryInfo get;
        nvmlMemory_t m = {0, 0, 0};
        NARGS(1);
        rc = nvml_handle(d, f[1], &nd);
        if (rc < 0)
            return -1;
        *(void **)&get = nvml_sym(d, "nvmlDeviceGetMemoryInfo");
        if (!rc)
            rc = get ? get(nd, &m) : CUDA_ERROR_NOT_FOUND;
        out("nvmlinfo %s rc=%d free=%llu used=%llu total=%llu", f[1], rc, m.free, m.used,
            m.total);
    } else if (!strcmp(op, "nvmlinfo2")) {
        fn_nvmlDeviceGetMemoryInfo_v2 get;
        nvmlMemory_v2_t m;
        NARGS(1);
        memset(&m, 0, sizeof m);
        m.version = NVML_MEMORY_V2;
        rc = nvml_handle(d, f[1], &nd);
        if (rc < 0)
            return -1;
        *(void **)&get = nvml_sym(d, "nvmlDeviceGetMemoryInfo_v2");
        if (!rc)
            rc = get ? get(nd, &m) : CUDA_ERROR_NOT_FOUND;
        out("nvmlinfo2 %s rc=%d free=%llu used=%llu total=%llu reserved=%llu", f[1], rc, m.free,
            m.used, m.total, m.reserved);
    } else if (!strcmp(op, "nvmlprocs")) {
        fn_nvmlDeviceGetComputeRunningProcesses_v3 get;
        nvmlProcessInfo_t infos[64];
        unsigned int n = 0, i;
        unsigned long long mine = 0, others = 0;
        int listed = 0;
        NARGS(1);
        rc = nvml_handle(d, f[1], &nd);
        if (rc < 0)
            return -1;
        *(void **)&get = nvml_sym(d, "nvmlDeviceGetComputeRunningProcesses_v3");
        if (!rc && !get)
            rc = CUDA_ERROR_NOT_FOUND;
        if (!rc) {
            rc = get(nd, &n, NULL); /* the size query: 7 (insufficient size) if any */
            if (rc == 7 && n <= 64)
                rc = get(nd, &n, infos);
        }
        for (i = 0; !rc && i < n; i++) {
            if (infos[i].pid == (unsigned int)getpid()) {
                listed = 1;
                mine = infos[i].usedGpuMemory;
            } else {
                others += infos[i].usedGpuMemory;
            }
        }
        out("nvmlprocs %s rc=%d n=%u listed=%d mine=%llu others=%llu", f[1], rc, n, listed, mine,
            others);
    } else if (!strcmp(op, "nvmluuid")) {
        fn_nvmlDeviceGetUUID get;
        char uuid[96] = "-";
        NARGS(1);
        rc = nvml_handle(d, f[1], &nd);
        if (rc < 0)
            return -1;
        *(void **)&get = nvml_sym(d, "nvmlDeviceGetUUID");
        if (!rc)
            rc = get ? get(nd, uuid, sizeof uuid) : CUDA_ERROR_NOT_FOUND;
        out("nvmluuid %s rc=%d uuid=%s", f[1], rc, uuid);
    } else if (!strcmp(op, "nvmlbus")) {
        fn_nvmlDeviceGetPciInfo_v3 get;
        nvmlPciInfo_t pci;
        NARGS(1);
        memset(&pci, 0, sizeof pci);
        rc = nvml_handle(d, f[1], &nd);
        if (rc < 0)
            return -1;
        *(void **)&get = nvml_sym(d, "nvmlDeviceGetPciInfo_v3");
        if (!rc)
            rc = get ? get(nd, &pci) : CUDA_ERROR_NOT_FOUND;
        out("nvmlbus %s rc=%d id=%s long=%s", f[1], rc, pci.busIdLegacy, pci.busId);
    } else {
        return path_context_op(d, f, nf);
    }
#undef NARGS
    return 0;
}
/* ---- end of context memory and NVML ---- */

static int vmm_op(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    unsigned long long a = 0, b = 0;
    struct slot *r, *h;
    CUresult rc;
    if (!strcmp(op, "createfd")) {
        CUmemAllocationProp prop;
        CUmemGenericAllocationHandle hd = 0;
        size_t slot;
        if (nf != 2 || parse_size(f[1], &a))
            return -1;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = cur_dev;
        rc = CALL(d, cuMemCreate, &hd, a, &prop, 0);
        if (rc)
            hd = 0;
        slot = push(&handles, hd, a, rc == 0);
        out("createfd %llu rc=%d slot=%zu handle=0x%llx", a, rc, slot, hd);
    } else if (!strcmp(op, "mapat")) {
        if (nf != 4 || parse_size(f[2], &a))
            return -1;
        r = get_slot(&reservations, f[1]);
        h = get_slot(&handles, f[3]);
        if (!r || !h)
            return -1;
        rc = CALL(d, cuMemMap, r->value + a, h->size, 0, h->value, 0);
        out("mapat %s %s %s rc=%d", f[1], f[2], f[3], rc);
    } else if (!strcmp(op, "unmapat") || !strcmp(op, "access")) {
        if (nf != 4 || parse_size(f[2], &a) || parse_size(f[3], &b))
            return -1;
        r = get_slot(&reservations, f[1]);
        if (!r)
            return -1;
        if (!strcmp(op, "unmapat")) {
            rc = CALL(d, cuMemUnmap, r->value + a, b);
        } else {
            CUmemAccessDesc desc;
            desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            desc.location.id = cur_dev;
            desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
            rc = CALL(d, cuMemSetAccess, r->value + a, b, &desc, 1);
        }
        out("%s %s %s %s rc=%d", op, f[1], f[2], f[3], rc);
    } else if (!strcmp(op, "retain")) {
        CUmemGenericAllocationHandle hd = 0;
        size_t slot;
        if (nf != 3 || parse_size(f[2], &a))
            return -1;
        r = get_slot(&reservations, f[1]);
        if (!r)
            return -1;
        rc = CALL(d, cuMemRetainAllocationHandle, &hd, (void *)(uintptr_t)(r->value + a));
        if (rc)
            hd = 0;
        slot = push(&handles, hd, 0, rc == 0);
        out("retain %s %s rc=%d slot=%zu handle=0x%llx", f[1], f[2], rc, slot, hd);
    } else if (!strcmp(op, "export")) {
        int fd = -1;
        char num[32];
        if (nf != 2)
            return -1;
        h = get_slot(&handles, f[1]);
        if (!h)
            return -1;
        rc = CALL(d, cuMemExportToShareableHandle, &fd, h->value,
                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (!rc) {
            snprintf(num, sizeof num, "%d", fd);
            setenv("OPS_FD", num, 1);
        }
        out("export %s rc=%d fd=%d", f[1], rc, rc ? -1 : fd);
    } else if (!strcmp(op, "import")) {
        CUmemGenericAllocationHandle hd = 0;
        const char *fd = getenv("OPS_FD");
        size_t slot;
        if (nf != 2 || parse_size(f[1], &a))
            return -1;
        if (!fd)
            fd = "-1";
        rc = CALL(d, cuMemImportFromShareableHandle, &hd, (void *)(intptr_t)atoi(fd),
                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (rc)
            hd = 0;
        slot = push(&handles, hd, a, rc == 0);
        out("import %llu rc=%d slot=%zu handle=0x%llx", a, rc, slot, hd);
    } else if (!strcmp(op, "ipcopen") || !strcmp(op, "poolimport") || !strcmp(op, "extbuf")) {
        CUdeviceptr dp = 0;
        size_t slot;
        if (nf != 1)
            return -1;
        if (!strcmp(op, "ipcopen")) {
            CUipcMemHandle ipc;
            memset(&ipc, 0, sizeof ipc);
            rc = CALL(d, cuIpcOpenMemHandle_v2, &dp, ipc, 1);
        } else if (!strcmp(op, "poolimport")) {
            char data[64] = {0};
            rc = CALL(d, cuMemPoolImportPointer, &dp, dev_pool[cur_dev], data);
        } else {
            char desc[64] = {0};
            rc = CALL(d, cuExternalMemoryGetMappedBuffer, &dp, NULL, desc);
        }
        if (rc)
            dp = 0;
        slot = push(&ptrs, dp, 0, rc == 0);
        out("%s rc=%d slot=%zu ptr=0x%llx", op, rc, slot, dp);
    } else {
        return context_nvml_op(d, f, nf);
    }
    return 0;
}

/* ---- helpers of the pool and graph memory ops ---- */

/* A stream word: a stream slot, or "n" for the NULL stream. Returns 0, or -1 if malformed. */
static int stream_arg(const char *word, CUstream *st) {
    struct slot *s;
    if (!strcmp(word, "n")) {
        *st = NULL;
        return 0;
    }
    s = get_slot(&streams, word);
    if (!s)
        return -1;
    *st = (CUstream)(size_t)s->value;
    return 0;
}

/* The current device's pool of the pool op (created on first use). */
static CUresult own_pool(const struct drv *d, CUmemoryPool *pool) {
    if (!dev_pool[cur_dev]) {
        CUmemPoolProps props;
        CUmemoryPool p = NULL;
        CUresult rc;
        memset(&props, 0, sizeof props);
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = cur_dev;
        rc = CALL(d, cuMemPoolCreate, &p, &props);
        if (rc)
            return rc;
        dev_pool[cur_dev] = p;
    }
    *pool = dev_pool[cur_dev];
    return CUDA_SUCCESS;
}

/* A pool by name: "pool", "defpool" or "hostpool" (which must exist); -1: no such name. */
static CUresult named_pool(const struct drv *d, const char *name, CUmemoryPool *pool) {
    if (!strcmp(name, "pool"))
        return own_pool(d, pool);
    if (!strcmp(name, "hostpool")) {
        *pool = host_pool;
        return host_pool ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
    }
    if (!strcmp(name, "defpool")) {
        CUdevice dev = 0;
        CUresult rc = CALL(d, cuDeviceGet, &dev, cur_dev);
        return rc ? rc : CALL(d, cuDeviceGetDefaultMemPool, pool, dev);
    }
    return -1;
}

/* CUmemPool_attribute by name; -1 for an unknown one. */
static int pool_attr_number(const char *name) {
    const char *names[] = {"threshold", "reserved", "reservedhigh", "used", "usedhigh"};
    int i;
    for (i = 0; i < 5; i++)
        if (!strcmp(name, names[i]))
            return 4 + i;
    return -1;
}

/* ---- graph launches under threads (graph memory in the interposer) ----
 *   graphthreads:T:R:SIZE   T threads, each with the caller's context: its own graph of one
 *                           SIZE allocation freed inside it, instantiated, then R rounds of
 *                           cuGraphLaunch on the NULL stream and cuMemAlloc_v2(SIZE) +
 *                           cuMemFree_v2; prints launch_ok= launch_oom= alloc_ok= alloc_oom=
 *                           other= (any other result, setup included)
 *   instantiate1:G / instantiate2:G   the CUDA 10 cuGraphInstantiate and the CUDA 11.0
 *                           cuGraphInstantiate_v2 (error node, log) of graph slot G, looked up
 *                           with the client's dlsym on the driver: an exec slot */
struct graph_thread {
    const struct drv *d;
    CUcontext ctx;
    unsigned long long rounds, size;
    unsigned long launch_ok, launch_oom, alloc_ok, alloc_oom, other;
};

static void *graph_thread_main(void *p) {
    struct graph_thread *t = p;
    const struct drv *d = t->d;
    CUDA_MEM_ALLOC_NODE_PARAMS params;
    CUgraph g = NULL;
    CUgraphNode node = NULL, freed = NULL;
    CUgraphExec e = NULL;
    unsigned long long i;
    CUdevice dev = 0;
    CUresult rc = CALL(d, cuCtxSetCurrent, t->ctx);
    if (!rc)
        rc = CALL(d, cuGraphCreate, &g, 0);
    if (!rc)
        rc = CALL(d, cuDeviceGet, &dev, cur_dev);
    memset(&params, 0, sizeof params);
    params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    params.poolProps.location.id = dev;
    params.bytesize = t->size;
    if (!rc)
        rc = CALL(d, cuGraphAddMemAllocNode, &node, g, NULL, 0, &params);
    if (!rc)
        rc = CALL(d, cuGraphAddMemFreeNode, &freed, g, &node, 1, params.dptr);
    if (!rc)
        rc = CALL(d, cuGraphInstantiateWithFlags, &e, g, 0);
    if (rc) {
        t->other++;
        return NULL;
    }
    for (i = 0; i < t->rounds; i++) {
        CUdeviceptr dp = 0;
        rc = CALL(d, cuGraphLaunch, e, NULL);
        if (!rc)
            t->launch_ok++;
        else if (rc == CUDA_ERROR_OUT_OF_MEMORY)
            t->launch_oom++;
        else
            t->other++;
        rc = CALL(d, cuMemAlloc_v2, &dp, t->size);
        if (!rc) {
            t->alloc_ok++;
            if (CALL(d, cuMemFree_v2, dp))
                t->other++;
        } else if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
            t->alloc_oom++;
        } else {
            t->other++;
        }
    }
    if (CALL(d, cuGraphExecDestroy, e) || CALL(d, cuGraphDestroy, g))
        t->other++;
    return NULL;
}

static void graph_threads(const struct drv *d, unsigned long n, unsigned long long rounds,
                          unsigned long long size) {
    struct graph_thread *ts = calloc(n, sizeof *ts);
    pthread_t *tids = calloc(n, sizeof *tids);
    unsigned long i, started = 0, lo = 0, lm = 0, ao = 0, am = 0, other = 0;
    CUcontext ctx = NULL;
    if (!ts || !tids || CALL(d, cuCtxGetCurrent, &ctx)) {
        out("graphthreads %lu failed", n);
        free(ts);
        free(tids);
        return;
    }
    for (i = 0; i < n; i++) {
        ts[i].d = d;
        ts[i].ctx = ctx;
        ts[i].rounds = rounds;
        ts[i].size = size;
        if (pthread_create(&tids[i], NULL, graph_thread_main, &ts[i]))
            break;
        started++;
    }
    for (i = 0; i < started; i++) {
        pthread_join(tids[i], NULL);
        lo += ts[i].launch_ok;
        lm += ts[i].launch_oom;
        ao += ts[i].alloc_ok;
        am += ts[i].alloc_oom;
        other += ts[i].other;
    }
    out("graphthreads %lu launch_ok=%lu launch_oom=%lu alloc_ok=%lu alloc_oom=%lu other=%lu",
        started, lo, lm, ao, am, other + (n - started));
    free(ts);
    free(tids);
}
/* ---- end of graph launches under threads ---- */


/* ---- poolthreads:N:ROUNDS:SIZE (the pool cache under threads) ----
 * N threads, in ROUNDS lock-step rounds: each frees its oldest allocation when it holds 3
 * (cuMemFreeAsync or cuMemFree_v2, as it was made), then allocates SIZE, alternately with
 * cuMemAllocAsync on the NULL stream and cuMemAlloc_v2. Between rounds (no call in flight)
 * thread 0 reads the shim's whole footprint of the current device (cuShimFootprint) and
 * keeps the highest, and every 4th round synchronizes the context (the pools then give back
 * what they keep above their thresholds). Prints "poolthreads N ok= oom= other= max=". */

struct pool_thread {
    const struct drv *d;
    pthread_barrier_t *round;
    CUcontext ctx;
    unsigned long t, rounds;
    size_t size;
    unsigned long ok, oom, other;
    unsigned long long max;
};

static void *pool_thread_main(void *p) {
    struct pool_thread *a = p;
    const struct drv *d = a->d;
    CUdeviceptr live[3];
    int was_async[3];
    unsigned int head = 0, n = 0;
    unsigned long r;
    fn_cuShimFootprint fp = NULL;
    fn_cuCtxSynchronize sync = NULL;

    if (a->t == 0) {
        *(void **)&fp = raw_sym(d, "cuShimFootprint");
        *(void **)&sync = raw_sym(d, "cuCtxSynchronize");
    }
    if (CALL(d, cuCtxSetCurrent, a->ctx))
        a->other++;
    for (r = 0; r < a->rounds; r++) {
        CUdeviceptr dp = 0;
        CUresult rc;
        int async = (int)((a->t + r) % 2);
        pthread_barrier_wait(a->round);
        if (n == 3) {
            rc = was_async[head] ? CALL(d, cuMemFreeAsync, live[head], NULL)
                                 : CALL(d, cuMemFree_v2, live[head]);
            if (rc)
                a->other++;
            head = (head + 1) % 3;
            n--;
        }
        rc = async ? CALL(d, cuMemAllocAsync, &dp, a->size, NULL)
                   : CALL(d, cuMemAlloc_v2, &dp, a->size);
        if (rc == CUDA_SUCCESS) {
            live[(head + n) % 3] = dp;
            was_async[(head + n) % 3] = async;
            n++;
            a->ok++;
        } else if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
            a->oom++;
        } else {
            a->other++;
        }
        pthread_barrier_wait(a->round);
        if (a->t == 0) {
            size_t v[4] = {0, 0, 0, 0};
            unsigned long long sum;
            if (!fp || fp(cur_dev, &v[0], &v[1], &v[2], &v[3]))
                a->other++;
            sum = (unsigned long long)v[0] + v[1] + v[2] + v[3];
            if (sum > a->max)
                a->max = sum;
            if (r % 4 == 3 && (!sync || sync()))
                a->other++;
        }
    }
    pthread_barrier_wait(a->round);
    while (n > 0) {
        if ((was_async[head] ? CALL(d, cuMemFreeAsync, live[head], NULL)
                             : CALL(d, cuMemFree_v2, live[head])))
            a->other++;
        head = (head + 1) % 3;
        n--;
    }
    return NULL;
}

static void op_pool_threads(const struct drv *d, unsigned long nthreads, unsigned long rounds,
                            size_t size) {
    struct pool_thread *args = calloc(nthreads, sizeof *args);
    pthread_t *tids = calloc(nthreads, sizeof *tids);
    unsigned long i, ok = 0, oom = 0, other = 0;
    CUcontext ctx = NULL;
    pthread_barrier_t round;

    if (!args || !tids) {
        fprintf(stderr, "ops: out of host memory\n");
        exit(3);
    }
    if (CALL(d, cuCtxGetCurrent, &ctx))
        other++;
    pthread_barrier_init(&round, NULL, (unsigned int)nthreads);
    for (i = 0; i < nthreads; i++) {
        args[i].d = d;
        args[i].round = &round;
        args[i].ctx = ctx;
        args[i].t = i;
        args[i].rounds = rounds;
        args[i].size = size;
        if (pthread_create(&tids[i], NULL, pool_thread_main, &args[i])) {
            fprintf(stderr, "ops: pthread_create failed\n");
            exit(3);
        }
    }
    for (i = 0; i < nthreads; i++) {
        pthread_join(tids[i], NULL);
        ok += args[i].ok;
        oom += args[i].oom;
        other += args[i].other;
    }
    pthread_barrier_destroy(&round);
    out("poolthreads %lu ok=%lu oom=%lu other=%lu max=%llu", nthreads, ok, oom, other,
        args[0].max);
    free(args);
    free(tids);
}

static int run_op(const struct drv *d, const char *word) {
    char buf[512];
    char *f[MAX_FIELDS];
    int nf = 0;
    char *p;
    const char *op;
    unsigned long long a = 0, b = 0, c = 0;
    CUresult rc;

    if (!strncmp(word, "t-", 2))
        return run_on_thread(d, word + 2, 0);
    if (!strncmp(word, "tc-", 3))
        return run_on_thread(d, word + 3, 1);
    if (!strncmp(word, "bg-", 3))
        return run_in_background(d, word + 3);
    if (!strncmp(word, "setenv:", 7)) {
        const char *eq = strchr(word + 7, '=');
        if (!eq || eq == word + 7 || (size_t)(eq - word) >= sizeof buf)
            return -1;
        memcpy(buf, word + 7, (size_t)(eq - word - 7));
        buf[eq - word - 7] = '\0';
        out("setenv %s rc=%d", buf, setenv(buf, eq + 1, 1) ? -1 : 0);
        return 0;
    }
    if (!strncmp(word, "waitgone:", 9)) {
        /* Waits (at most 30 s) until the file named after the colon no longer exists: the
         * test's way to say "go on" at a point it chooses. */
        int waited = 0;
        while (access(word + 9, F_OK) == 0 && waited < 30000) {
            struct timespec ts = {0, 1000000L};
            nanosleep(&ts, NULL);
            waited++;
        }
        out("waitgone gone=%d", access(word + 9, F_OK) != 0);
        return 0;
    }
    if (strlen(word) >= sizeof buf)
        return -1;
    strcpy(buf, word);
    /* Split on ':' keeping empty fields (so "alloc:" is malformed, not "alloc"). */
    p = buf;
    f[nf++] = p;
    while ((p = strchr(p, ':')) != NULL) {
        *p++ = '\0';
        if (nf == MAX_FIELDS)
            return -1;
        f[nf++] = p;
    }
    op = f[0];

#define NARGS(n) \
    do { \
        if (nf != (n) + 1) \
            return -1; \
    } while (0)

    if (!strcmp(op, "init")) {
        NARGS(0);
        rc = CALL(d, cuInit, 0);
        if (!rc)
            rc = use_device(d, 0);
        out("init rc=%d", rc);
    } else if (!strcmp(op, "dev")) {
        NARGS(1);
        if (parse_num(f[1], &a) || a >= MAX_DEVICES)
            return -1;
        rc = use_device(d, (int)a);
        out("dev %llu rc=%d", a, rc);
    } else if (!strcmp(op, "noctx")) {
        NARGS(0);
        rc = CALL(d, cuCtxSetCurrent, NULL);
        out("noctx rc=%d", rc);
    } else if (!strcmp(op, "getctx")) {
        CUcontext ctx = NULL;
        NARGS(0);
        rc = CALL(d, cuCtxGetCurrent, &ctx);
        out("getctx rc=%d ctx=%p", rc, (void *)ctx);
    } else if (!strcmp(op, "count")) {
        int n = 0;
        NARGS(0);
        rc = CALL(d, cuDeviceGetCount, &n);
        out("count rc=%d n=%d", rc, n);
    } else if (!strcmp(op, "alloc") || !strcmp(op, "managed") || !strcmp(op, "async") ||
               !strcmp(op, "pool") || !strcmp(op, "defpool")) {
        CUdeviceptr dp = 0;
        NARGS(1);
        if (parse_size(f[1], &a))
            return -1;
        if (!strcmp(op, "alloc")) {
            rc = CALL(d, cuMemAlloc_v2, &dp, a);
        } else if (!strcmp(op, "managed")) {
            rc = CALL(d, cuMemAllocManaged, &dp, a, CU_MEM_ATTACH_GLOBAL);
        } else if (!strcmp(op, "async")) {
            rc = CALL(d, cuMemAllocAsync, &dp, a, NULL);
        } else if (!strcmp(op, "pool")) {
            CUmemoryPool pool = NULL;
            rc = own_pool(d, &pool);
            if (!rc)
                rc = CALL(d, cuMemAllocFromPoolAsync, &dp, a, pool, NULL);
        } else {
            CUmemoryPool pool = NULL;
            CUdevice dev = 0;
            rc = CALL(d, cuDeviceGet, &dev, cur_dev);
            if (!rc)
                rc = CALL(d, cuDeviceGetDefaultMemPool, &pool, dev);
            if (!rc)
                rc = CALL(d, cuMemAllocFromPoolAsync, &dp, a, pool, NULL);
        }
        if (rc)
            dp = 0;
        print_alloc(op, a, rc, push(&ptrs, dp, a, rc == 0), dp);
    } else if (!strcmp(op, "pitch")) {
        CUdeviceptr dp = 0;
        size_t pitch = 0;
        size_t slot;
        NARGS(3);
        if (parse_size(f[1], &a) || parse_size(f[2], &b) || parse_num(f[3], &c) ||
            c > UINT_MAX)
            return -1;
        rc = CALL(d, cuMemAllocPitch_v2, &dp, &pitch, a, b, (unsigned int)c);
        if (rc)
            dp = 0;
        slot = push(&ptrs, dp, rc ? 0 : pitch * b, rc == 0);
        out("pitch %llu %llu rc=%d slot=%zu pitch=%zu ptr=0x%llx", a, b, rc, slot, pitch, dp);
    } else if (!strcmp(op, "lalloc")) {
        CUdeviceptr_v1 dp = 0;
        NARGS(1);
        if (parse_size(f[1], &a) || a > UINT_MAX)
            return -1;
        rc = CALL(d, cuMemAlloc, &dp, (unsigned int)a);
        if (rc)
            dp = 0;
        print_alloc(op, a, rc, push(&ptrs, dp, a, rc == 0), dp);
    } else if (!strcmp(op, "free") || !strcmp(op, "freeasync") || !strcmp(op, "lfree")) {
        struct slot *s;
        NARGS(1);
        s = get_slot(&ptrs, f[1]);
        if (!s)
            return -1;
        if (!strcmp(op, "free"))
            rc = CALL(d, cuMemFree_v2, s->value);
        else if (!strcmp(op, "freeasync"))
            rc = CALL(d, cuMemFreeAsync, s->value, NULL);
        else
            rc = CALL(d, cuMemFree, (CUdeviceptr_v1)s->value);
        if (!rc)
            s->live = 0;
        out("%s %s rc=%d", op, f[1], rc);
    } else if (!strcmp(op, "freeptr")) {
        NARGS(1);
        if (parse_hex(f[1], &a))
            return -1;
        rc = CALL(d, cuMemFree_v2, a);
        out("freeptr 0x%llx rc=%d", a, rc);
    } else if (!strcmp(op, "freeall")) {
        size_t i, n = 0;
        CUresult first = 0;
        NARGS(0);
        for (i = 0; i < ptrs.n; i++) {
            if (!ptrs.v[i].live)
                continue;
            n++;
            rc = CALL(d, cuMemFree_v2, ptrs.v[i].value);
            if (rc && !first)
                first = rc;
            if (!rc)
                ptrs.v[i].live = 0;
        }
        out("freeall n=%zu rc=%d", n, first);
    } else if (!strcmp(op, "fill")) {
        unsigned long ok = 0;
        NARGS(1);
        if (parse_size(f[1], &a))
            return -1;
        for (rc = 0; ok < FILL_LIMIT;) {
            CUdeviceptr dp = 0;
            rc = CALL(d, cuMemAlloc_v2, &dp, a);
            if (rc)
                break;
            push(&ptrs, dp, a, 1);
            ok++;
        }
        out("fill %llu ok=%lu rc=%d", a, ok, rc);
    } else if (!strcmp(op, "create") || !strcmp(op, "createhost")) {
        CUmemAllocationProp prop;
        CUmemGenericAllocationHandle h = 0;
        size_t slot;
        int host = !strcmp(op, "createhost");
        if (host)
            NARGS(1);
        else if (nf != 2 && nf != 3)
            return -1;
        if (parse_size(f[1], &a))
            return -1;
        if (nf == 3 && (parse_num(f[2], &b) || b >= MAX_DEVICES))
            return -1;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = host ? 0 : (int)b;
        rc = CALL(d, cuMemCreate, &h, a, &prop, 0);
        if (rc)
            h = 0;
        slot = push(&handles, h, a, rc == 0);
        out("%s %llu rc=%d slot=%zu handle=0x%llx", op, a, rc, slot, h);
    } else if (!strcmp(op, "release")) {
        struct slot *s;
        NARGS(1);
        s = get_slot(&handles, f[1]);
        if (!s)
            return -1;
        rc = CALL(d, cuMemRelease, s->value);
        if (!rc)
            s->live = 0;
        out("release %s rc=%d", f[1], rc);
    } else if (!strcmp(op, "reserve")) {
        CUdeviceptr dp = 0;
        size_t slot;
        NARGS(1);
        if (parse_size(f[1], &a))
            return -1;
        rc = CALL(d, cuMemAddressReserve, &dp, a, 0, 0, 0);
        if (rc)
            dp = 0;
        slot = push(&reservations, dp, a, rc == 0);
        out("reserve %llu rc=%d slot=%zu ptr=0x%llx", a, rc, slot, dp);
    } else if (!strcmp(op, "map")) {
        struct slot *r, *h;
        NARGS(2);
        r = get_slot(&reservations, f[1]);
        h = get_slot(&handles, f[2]);
        if (!r || !h)
            return -1;
        rc = CALL(d, cuMemMap, r->value, h->size, 0, h->value, 0);
        if (!rc)
            r->mapped = h->size;
        out("map %s %s rc=%d", f[1], f[2], rc);
    } else if (!strcmp(op, "unmap")) {
        struct slot *r;
        NARGS(1);
        r = get_slot(&reservations, f[1]);
        if (!r)
            return -1;
        rc = CALL(d, cuMemUnmap, r->value, r->mapped);
        if (!rc)
            r->mapped = 0;
        out("unmap %s rc=%d", f[1], rc);
    } else if (!strcmp(op, "unreserve")) {
        struct slot *r;
        NARGS(1);
        r = get_slot(&reservations, f[1]);
        if (!r)
            return -1;
        rc = CALL(d, cuMemAddressFree, r->value, r->size);
        if (!rc)
            r->live = 0;
        out("unreserve %s rc=%d", f[1], rc);
    } else if (!strcmp(op, "info")) {
        size_t fr = 0, to = 0;
        NARGS(0);
        rc = CALL(d, cuMemGetInfo_v2, &fr, &to);
        out("info rc=%d free=%zu total=%zu", rc, fr, to);
    } else if (!strcmp(op, "linfo")) {
        unsigned int fr = 0, to = 0;
        NARGS(0);
        rc = CALL(d, cuMemGetInfo, &fr, &to);
        out("linfo rc=%d free=%u total=%u", rc, fr, to);
    } else if (!strcmp(op, "total")) {
        CUdevice dev = 0;
        size_t bytes = 0;
        NARGS(1);
        if (parse_num(f[1], &a) || a >= MAX_DEVICES)
            return -1;
        rc = CALL(d, cuDeviceGet, &dev, (int)a);
        if (!rc)
            rc = CALL(d, cuDeviceTotalMem_v2, &bytes, dev);
        out("total %llu rc=%d bytes=%zu", a, rc, bytes);
    } else if (!strcmp(op, "errname")) {
        long long code;
        const char *name = NULL;
        NARGS(1);
        if (parse_int(f[1], &code))
            return -1;
        rc = CALL(d, cuGetErrorName, (CUresult)code, &name);
        out("errname %lld rc=%d name=%s", code, rc, name ? name : "-");
    } else if (!strcmp(op, "poolthreads")) {
        NARGS(3);
        if (parse_num(f[1], &a) || a == 0 || a > 256 || parse_num(f[2], &b) ||
            parse_size(f[3], &c))
            return -1;
        op_pool_threads(d, (unsigned long)a, (unsigned long)b, c);
    } else if (!strcmp(op, "threads")) {
        NARGS(3);
        if (parse_num(f[1], &a) || a == 0 || a > 1024 || parse_num(f[2], &b) ||
            parse_size(f[3], &c))
            return -1;
        op_threads(d, (unsigned long)a, (unsigned long)b, c);
    } else if (!strcmp(op, "shimstats")) {
        size_t in_use = 0, peak = 0;
        unsigned long long live = 0;
        void *h;
        fn_cuShimStats stats = NULL;
        NARGS(1);
        if (parse_num(f[1], &a) || a >= MAX_DEVICES)
            return -1;
        h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (h && d->sym)
            stats = (fn_cuShimStats)d->sym(h, "cuShimStats");
        rc = stats ? stats((int)a, &in_use, &peak, &live) : CUDA_ERROR_NOT_FOUND;
        out("shimstats %llu rc=%d in_use=%zu peak=%zu live=%llu", a, rc, in_use, peak, live);
    } else if (!strcmp(op, "sleep")) {
        struct timespec ts;
        NARGS(1);
        if (parse_num(f[1], &a))
            return -1;
        ts.tv_sec = (time_t)(a / 1000);
        ts.tv_nsec = (long)(a % 1000) * 1000000L;
        while (nanosleep(&ts, &ts) && errno == EINTR)
            ;
        out("sleep %llu", a);
    } else if (!strcmp(op, "exit") || !strcmp(op, "_exit")) {
        long long code;
        NARGS(1);
        if (parse_int(f[1], &code))
            return -1;
        out("%s %lld", op, code);
        if (op[0] == '_')
            _exit((int)code);
        exit((int)code);
    } else if (!strcmp(op, "soak")) {
        unsigned long long seed = 1, rounds = 0;
        if (nf < 4 || nf > 6)
            return -1;
        if (parse_num(f[1], &a) || a == 0 || a > 256 || parse_num(f[2], &b) ||
            parse_size(f[3], &c) || (nf >= 5 && parse_num(f[4], &seed)) ||
            (nf == 6 && parse_num(f[5], &rounds)))
            return -1;
        if (soak_run(d, (unsigned long)a, (unsigned long)b, (size_t)c, (unsigned int)seed,
                     (unsigned long)rounds))
            return -1;
    } else if (!strcmp(op, "stream")) {
        CUstream st = NULL;
        fn_cuStreamCreate create;
        NARGS(0);
        *(void **)&create = raw_sym(d, "cuStreamCreate");
        rc = create ? create(&st, 0) : CUDA_ERROR_NOT_FOUND;
        if (rc)
            st = NULL;
        out("stream rc=%d slot=%zu", rc,
            push(&streams, (unsigned long long)(size_t)st, 0, rc == 0));
    } else if (!strcmp(op, "freeon")) {
        struct slot *s, *st;
        NARGS(2);
        s = get_slot(&ptrs, f[1]);
        st = get_slot(&streams, f[2]);
        if (!s || !st)
            return -1;
        rc = CALL(d, cuMemFreeAsync, s->value, (CUstream)(size_t)st->value);
        if (!rc)
            s->live = 0;
        out("freeon %s %s rc=%d", f[1], f[2], rc);
    } else if (!strcmp(op, "spin")) {
        NARGS(2);
        if (parse_num(f[1], &a) || a == 0 || a > 256 || parse_size(f[2], &b))
            return -1;
        op_spin(d, (unsigned long)a, (size_t)b);
    } else if (!strcmp(op, "signal")) {
        struct timespec ts = {0, 10000000L};
        int i;
        NARGS(1);
        if (parse_num(f[1], &a) || a == 0 || a >= 65)
            return -1;
        kill(getpid(), (int)a);
        for (i = 0; i < 1000 && caught != (int)a; i++)
            nanosleep(&ts, NULL);
        out("signal %llu survived", a);
    } else if (!strcmp(op, "catch")) {
        NARGS(1);
        if (parse_num(f[1], &a) || a == 0 || a >= 65)
            return -1;
        signal((int)a, note_signal);
        out("catch %llu", a);
    } else if (!strcmp(op, "procinfo")) {
        NARGS(0);
        out("procinfo threads=%d term=%s int=%s", count_threads(), disposition(SIGTERM),
            disposition(SIGINT));
    } else if (!strcmp(op, "sigexit")) {
        /* A handler for SIG that calls exit(0), then SIG sent to the first spinner thread,
         * which is most likely inside a hook: exit runs the exit handlers on that thread. */
        struct timespec ts = {0, 10000000L};
        int i;
        NARGS(1);
        if (parse_num(f[1], &a) || a == 0 || a >= 65 || nspinners == 0)
            return -1;
        signal((int)a, exit_from_handler);
        pthread_kill(spinners[0], (int)a);
        for (i = 0; i < 1000; i++)
            nanosleep(&ts, NULL);
        out("sigexit %llu survived", a);
    } else if (!strcmp(op, "exitthread")) {
        long long code;
        pthread_t tid;
        NARGS(1);
        if (parse_int(f[1], &code))
            return -1;
        out("exitthread %lld", code);
        if (pthread_create(&tid, NULL, exit_main, (void *)(long)code)) {
            fprintf(stderr, "ops: pthread_create failed\n");
            exit(3);
        }
        pthread_join(tid, NULL);
    } else if (!strcmp(op, "atexitfree")) {
        NARGS(0);
        out("atexitfree rc=%d", atexit(atexit_free));
    /* ---- CUDA arrays ---- */
    } else if (!strcmp(op, "larray") || !strcmp(op, "larray3d")) {
        unsigned long long v[6] = {0};
        int i, want = !strcmp(op, "larray") ? 4 : 6;
        void *arr = NULL;
        NARGS(want);
        for (i = 0; i < want; i++)
            if (parse_num(f[i + 1], &v[i]) || v[i] > UINT_MAX)
                return -1;
        if (want == 4) {
            CUDA_ARRAY_DESCRIPTOR_v1 d1 = {(unsigned int)v[0], (unsigned int)v[1], (int)v[2],
                                           (unsigned int)v[3]};
            rc = CALL(d, cuArrayCreate, (CUarray *)&arr, &d1);
        } else {
            CUDA_ARRAY3D_DESCRIPTOR_v1 d1 = {(unsigned int)v[0], (unsigned int)v[1],
                                             (unsigned int)v[2], (int)v[3],
                                             (unsigned int)v[4], (unsigned int)v[5]};
            rc = CALL(d, cuArray3DCreate, (CUarray *)&arr, &d1);
        }
        if (rc)
            arr = NULL;
        out("%s %llu %llu rc=%d slot=%zu handle=%p", op, v[0], v[1], rc,
            push(&arrays, (unsigned long long)(size_t)arr, 0, rc == 0), arr);
    } else if (!strcmp(op, "array") || !strcmp(op, "array3d") || !strcmp(op, "mipmap")) {
        unsigned long long v[7] = {0};
        int i, want = !strcmp(op, "array") ? 4 : !strcmp(op, "array3d") ? 6 : 7;
        CUDA_ARRAY3D_DESCRIPTOR d3;
        void *arr = NULL;
        size_t slot;
        NARGS(want);
        for (i = 0; i < want; i++)
            if (parse_num(f[i + 1], &v[i]))
                return -1;
        if (want == 4) {
            CUDA_ARRAY_DESCRIPTOR d2;
            d2.Width = v[0];
            d2.Height = v[1];
            d2.Format = (int)v[2];
            d2.NumChannels = (unsigned int)v[3];
            rc = CALL(d, cuArrayCreate_v2, (CUarray *)&arr, &d2);
        } else {
            d3.Width = v[0];
            d3.Height = v[1];
            d3.Depth = v[2];
            d3.Format = (int)v[3];
            d3.NumChannels = (unsigned int)v[4];
            d3.Flags = (unsigned int)v[5];
            if (want == 6)
                rc = CALL(d, cuArray3DCreate_v2, (CUarray *)&arr, &d3);
            else
                rc = CALL(d, cuMipmappedArrayCreate, (CUmipmappedArray *)&arr, &d3,
                          (unsigned int)v[6]);
        }
        if (rc)
            arr = NULL;
        slot = push(want == 7 ? &mipmaps : &arrays, (unsigned long long)(size_t)arr, 0, rc == 0);
        out("%s %llu %llu rc=%d slot=%zu handle=%p", op, v[0], v[1], rc, slot, arr);
    } else if (!strcmp(op, "arrdestroy") || !strcmp(op, "mipdestroy")) {
        int mip = !strcmp(op, "mipdestroy");
        struct slot *s;
        NARGS(1);
        s = get_slot(mip ? &mipmaps : &arrays, f[1]);
        if (!s)
            return -1;
        if (mip)
            rc = CALL(d, cuMipmappedArrayDestroy, (CUmipmappedArray)(size_t)s->value);
        else
            rc = CALL(d, cuArrayDestroy, (CUarray)(size_t)s->value);
        if (!rc)
            s->live = 0;
        out("%s %s rc=%d", op, f[1], rc);
    } else if (!strcmp(op, "arrreq") || !strcmp(op, "mipreq")) {
        int mip = !strcmp(op, "mipreq");
        CUDA_ARRAY_MEMORY_REQUIREMENTS req;
        struct slot *s;
        NARGS(1);
        s = get_slot(mip ? &mipmaps : &arrays, f[1]);
        if (!s)
            return -1;
        memset(&req, 0, sizeof req);
        if (mip) {
            fn_cuMipmappedArrayGetMemoryRequirements get;
            *(void **)&get = raw_sym(d, "cuMipmappedArrayGetMemoryRequirements");
            rc = get ? get(&req, (CUmipmappedArray)(size_t)s->value, cur_dev)
                     : CUDA_ERROR_NOT_FOUND;
        } else {
            fn_cuArrayGetMemoryRequirements get;
            *(void **)&get = raw_sym(d, "cuArrayGetMemoryRequirements");
            rc = get ? get(&req, (CUarray)(size_t)s->value, cur_dev) : CUDA_ERROR_NOT_FOUND;
        }
        out("%s %s rc=%d size=%zu alignment=%zu", op, f[1], rc, req.size, req.alignment);
    } else if (!strcmp(op, "miplevel")) {
        fn_cuMipmappedArrayGetLevel get;
        CUarray level = NULL;
        struct slot *s;
        NARGS(2);
        s = get_slot(&mipmaps, f[1]);
        if (!s || parse_num(f[2], &a))
            return -1;
        *(void **)&get = raw_sym(d, "cuMipmappedArrayGetLevel");
        rc = get ? get(&level, (CUmipmappedArray)(size_t)s->value, (unsigned int)a)
                 : CUDA_ERROR_NOT_FOUND;
        if (rc)
            level = NULL;
        out("miplevel %s %llu rc=%d slot=%zu", f[1], a, rc,
            push(&arrays, (unsigned long long)(size_t)level, 0, rc == 0));
    /* ---- end of CUDA arrays ---- */
    /* ---- placement, contexts, capture ----
     *   asyncon:SIZE:STREAM        cuMemAllocAsync on stream slot STREAM
     *   defpoolon:DEV:SIZE:STREAM  from device DEV's default pool, on stream slot STREAM
     *                              (or "n": the NULL stream)
     *   hostpool:SIZE              from a pool on host NUMA node 0, on the NULL stream
     *   locpool:TYPE:ID:SIZE       from CUDA 13's cuMemGetDefaultMemPool of location TYPE
     *                              (CUmemLocationType) ID, pinned, on the NULL stream
     *   ctxcreate                  cuCtxCreate_v2 on the current device (made current)
     *   ctxdestroy:SLOT            cuCtxDestroy_v2 of a created context
     *   ctxreset:DEV / ctxrelease:DEV  cuDevicePrimaryCtxReset_v2 / _Release_v2
     *   capture:STREAM / endcapture:STREAM  cuStreamBeginCapture_v2 / cuStreamEndCapture
     *   ctxretain:DEV              cuDevicePrimaryCtxRetain (one more reference)
     *   ctxattach / ctxdetach:SLOT cuCtxAttach of the current context / cuCtxDetach of a
     *                              created one (deprecated; dlsym on the driver's handle) */
    } else if (!strcmp(op, "asyncon") || !strcmp(op, "defpoolon") || !strcmp(op, "hostpool")) {
        CUdeviceptr dp = 0;
        CUstream st = NULL;
        const char *stream_word = NULL;
        int is_on = !strcmp(op, "asyncon"), is_def = !strcmp(op, "defpoolon");
        NARGS(is_on ? 2 : is_def ? 3 : 1);
        if (parse_size(f[is_def ? 2 : 1], &a))
            return -1;
        if (is_on)
            stream_word = f[2];
        else if (is_def)
            stream_word = f[3];
        if (stream_word && strcmp(stream_word, "n")) {
            struct slot *s = get_slot(&streams, stream_word);
            if (!s)
                return -1;
            st = (CUstream)(size_t)s->value;
        }
        if (is_on) {
            rc = CALL(d, cuMemAllocAsync, &dp, a, st);
        } else if (is_def) {
            CUmemoryPool pool = NULL;
            CUdevice dev = 0;
            if (parse_num(f[1], &b))
                return -1;
            rc = CALL(d, cuDeviceGet, &dev, (int)b);
            if (!rc)
                rc = CALL(d, cuDeviceGetDefaultMemPool, &pool, dev);
            if (!rc)
                rc = CALL(d, cuMemAllocFromPoolAsync, &dp, a, pool, st);
        } else {
            rc = 0;
            if (!host_pool) {
                CUmemPoolProps props;
                memset(&props, 0, sizeof props);
                props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
                props.location.type = 3; /* CU_MEM_LOCATION_TYPE_HOST_NUMA */
                props.location.id = 0;
                rc = CALL(d, cuMemPoolCreate, &host_pool, &props);
            }
            if (!rc)
                rc = CALL(d, cuMemAllocFromPoolAsync, &dp, a, host_pool, NULL);
        }
        if (rc)
            dp = 0;
        print_alloc(op, a, rc, push(&ptrs, dp, a, rc == 0), dp);
    } else if (!strcmp(op, "locpool")) {
        CUdeviceptr dp = 0;
        CUmemoryPool pool = NULL;
        CUmemLocation loc;
        NARGS(3);
        if (parse_num(f[1], &a) || parse_num(f[2], &b) || parse_size(f[3], &c))
            return -1;
        loc.type = (int)a;
        loc.id = (int)b;
        rc = CALL(d, cuMemGetDefaultMemPool, &pool, &loc, CU_MEM_ALLOCATION_TYPE_PINNED);
        if (!rc)
            rc = CALL(d, cuMemAllocFromPoolAsync, &dp, c, pool, NULL);
        if (rc)
            dp = 0;
        print_alloc(op, c, rc, push(&ptrs, dp, c, rc == 0), dp);
    } else if (!strcmp(op, "ctxretain")) {
        CUcontext ctx = NULL;
        CUdevice dev = 0;
        NARGS(1);
        if (parse_num(f[1], &a) || a >= MAX_DEVICES)
            return -1;
        rc = CALL(d, cuDeviceGet, &dev, (int)a);
        if (!rc)
            rc = CALL(d, cuDevicePrimaryCtxRetain, &ctx, dev);
        out("ctxretain %llu rc=%d", a, rc);
    } else if (!strcmp(op, "ctxattach") || !strcmp(op, "ctxdetach")) {
        typedef CUresult (*fn_attach)(CUcontext *, unsigned int);
        typedef CUresult (*fn_detach)(CUcontext);
        if (!strcmp(op, "ctxattach")) {
            fn_attach attach;
            CUcontext ctx = NULL;
            NARGS(0);
            *(void **)&attach = raw_sym(d, "cuCtxAttach");
            rc = attach ? attach(&ctx, 0) : CUDA_ERROR_NOT_FOUND;
            out("ctxattach rc=%d", rc);
        } else {
            fn_detach detach;
            struct slot *s;
            NARGS(1);
            s = get_slot(&contexts, f[1]);
            if (!s)
                return -1;
            *(void **)&detach = raw_sym(d, "cuCtxDetach");
            rc = detach ? detach((CUcontext)(size_t)s->value) : CUDA_ERROR_NOT_FOUND;
            out("ctxdetach %s rc=%d", f[1], rc);
        }
    } else if (!strcmp(op, "ctxcreate")) {
        CUcontext ctx = NULL;
        CUdevice dev = 0;
        fn_cuCtxCreate_v2 create;
        NARGS(0);
        *(void **)&create = raw_sym(d, "cuCtxCreate_v2");
        rc = CALL(d, cuDeviceGet, &dev, cur_dev);
        if (!rc)
            rc = create ? create(&ctx, 0, dev) : CUDA_ERROR_NOT_FOUND;
        out("ctxcreate rc=%d slot=%zu", rc,
            push(&contexts, (unsigned long long)(size_t)ctx, 0, rc == 0));
    } else if (!strcmp(op, "ctxdestroy")) {
        struct slot *s;
        NARGS(1);
        s = get_slot(&contexts, f[1]);
        if (!s)
            return -1;
        rc = CALL(d, cuCtxDestroy_v2, (CUcontext)(size_t)s->value);
        if (!rc)
            s->live = 0;
        out("ctxdestroy %s rc=%d", f[1], rc);
    } else if (!strcmp(op, "ctxreset") || !strcmp(op, "ctxrelease")) {
        CUdevice dev = 0;
        NARGS(1);
        if (parse_num(f[1], &a) || a >= MAX_DEVICES)
            return -1;
        rc = CALL(d, cuDeviceGet, &dev, (int)a);
        if (!rc && !strcmp(op, "ctxreset"))
            rc = CALL(d, cuDevicePrimaryCtxReset_v2, dev);
        else if (!rc)
            rc = CALL(d, cuDevicePrimaryCtxRelease_v2, dev);
        out("%s %llu rc=%d", op, a, rc);
    } else if (!strcmp(op, "capture") || !strcmp(op, "endcapture")) {
        struct slot *s;
        NARGS(1);
        s = get_slot(&streams, f[1]);
        if (!s)
            return -1;
        if (!strcmp(op, "capture")) {
            fn_cuStreamBeginCapture_v2 begin;
            *(void **)&begin = raw_sym(d, "cuStreamBeginCapture_v2");
            rc = begin ? begin((CUstream)(size_t)s->value, 0) : CUDA_ERROR_NOT_FOUND;
        } else {
            fn_cuStreamEndCapture end;
            void *graph = NULL;
            *(void **)&end = raw_sym(d, "cuStreamEndCapture");
            rc = end ? end((CUstream)(size_t)s->value, &graph) : CUDA_ERROR_NOT_FOUND;
            /* the captured graph is a graph slot */
            out("%s %s rc=%d slot=%zu", op, f[1], rc,
                push(&graphs, (unsigned long long)(size_t)graph, 0, rc == 0 && graph));
            return 0;
        }
        out("%s %s rc=%d", op, f[1], rc);
    /* ---- pools that keep memory, graph memory ----
     *   footprint:DEV              cuShimFootprint: allocations= pool_cache= graph= context=
     *   sync / streamsync:S        cuCtxSynchronize / cuStreamSynchronize of stream slot S
     *                              (or "n": the NULL stream); not hooked (client's dlsym)
     *   pooltrim:POOL:KEEP         cuMemPoolTrimTo; POOL is "pool" (the current device's pool
     *                              of the pool op, made if need be), "defpool" (its default
     *                              pool) or "hostpool" (hostpool's pool)
     *   poolattr:POOL:ATTR         cuMemPoolGetAttribute, ATTR threshold | reserved |
     *                              reservedhigh | used | usedhigh: value=V
     *   poolthreshold:POOL:BYTES   cuMemPoolSetAttribute(RELEASE_THRESHOLD)
     *   graph                      cuGraphCreate: a graph slot (endcapture:S makes one too)
     *   graphalloc:G:SIZE[:DEV]    cuGraphAddMemAllocNode into graph slot G (device DEV, else
     *                              the current one): a pointer slot (not live: free:N works
     *                              only once a launch made it live)
     *   graphfree:G:P              cuGraphAddMemFreeNode of pointer slot P into graph G
     *   instantiate:G[:FLAGS]      cuGraphInstantiateWithFlags (cuGraphInstantiate since
     *                              CUDA 12): an exec slot
     *   instantiatep:G:FLAGS:S     cuGraphInstantiateWithParams, upload stream S: an exec
     *                              slot, result=R (its result_out)
     *   upload:E:S / launch:E:S    cuGraphUpload / cuGraphLaunch of exec slot E on stream S
     *   execdestroy:E / graphdestroy:G   cuGraphExecDestroy / cuGraphDestroy
     *   graphtrim:DEV              cuDeviceGraphMemTrim
     *   graphattr:DEV:ATTR         cuDeviceGetGraphMemAttribute, ATTR used | usedhigh |
     *                              reserved | reservedhigh: value=V
     *   graphnodes:G               cuGraphGetNodes / cuGraphNodeGetType (not hooked):
     *                              n= alloc= free= */
    } else if (!strcmp(op, "footprint")) {
        size_t v[4] = {0, 0, 0, 0};
        fn_cuShimFootprint fp = NULL;
        void *h;
        NARGS(1);
        if (parse_num(f[1], &a) || a >= MAX_DEVICES)
            return -1;
        h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (h && d->sym)
            *(void **)&fp = d->sym(h, "cuShimFootprint");
        rc = fp ? fp((int)a, &v[0], &v[1], &v[2], &v[3]) : CUDA_ERROR_NOT_FOUND;
        out("footprint %llu rc=%d allocations=%zu pool_cache=%zu graph=%zu context=%zu", a, rc,
            v[0], v[1], v[2], v[3]);
    } else if (!strcmp(op, "sync")) {
        fn_cuCtxSynchronize sync;
        NARGS(0);
        *(void **)&sync = raw_sym(d, "cuCtxSynchronize");
        rc = sync ? sync() : CUDA_ERROR_NOT_FOUND;
        out("sync rc=%d", rc);
    } else if (!strcmp(op, "streamsync")) {
        fn_cuStreamSynchronize sync;
        CUstream st = NULL;
        NARGS(1);
        if (stream_arg(f[1], &st))
            return -1;
        *(void **)&sync = raw_sym(d, "cuStreamSynchronize");
        rc = sync ? sync(st) : CUDA_ERROR_NOT_FOUND;
        out("streamsync %s rc=%d", f[1], rc);
    } else if (!strcmp(op, "pooltrim") || !strcmp(op, "poolattr") ||
               !strcmp(op, "poolthreshold")) {
        CUmemoryPool pool = NULL;
        unsigned long long value = 0;
        int attr = 4;
        NARGS(2);
        if (!strcmp(op, "poolattr")) {
            attr = pool_attr_number(f[2]);
            if (attr < 0)
                return -1;
        } else if (parse_size(f[2], &a)) {
            return -1;
        }
        rc = named_pool(d, f[1], &pool);
        if (rc == -1)
            return -1;
        if (!rc && !strcmp(op, "pooltrim")) {
            rc = CALL(d, cuMemPoolTrimTo, pool, (size_t)a);
        } else if (!rc && !strcmp(op, "poolthreshold")) {
            value = a;
            rc = CALL(d, cuMemPoolSetAttribute, pool, 4, &value);
        } else if (!rc) {
            rc = CALL(d, cuMemPoolGetAttribute, pool, attr, &value);
        }
        if (!strcmp(op, "poolattr"))
            out("poolattr %s %s rc=%d value=%llu", f[1], f[2], rc, value);
        else
            out("%s %s %llu rc=%d", op, f[1], a, rc);
    } else if (!strcmp(op, "graph")) {
        CUgraph g = NULL;
        NARGS(0);
        rc = CALL(d, cuGraphCreate, &g, 0);
        out("graph rc=%d slot=%zu", rc, push(&graphs, (unsigned long long)(size_t)g, 0, rc == 0));
    } else if (!strcmp(op, "graphalloc")) {
        CUDA_MEM_ALLOC_NODE_PARAMS params;
        CUgraphNode node = NULL;
        struct slot *g;
        if (nf != 3 && nf != 4)
            return -1;
        g = get_slot(&graphs, f[1]);
        b = (unsigned long long)cur_dev;
        if (!g || parse_size(f[2], &a) || (nf == 4 && (parse_num(f[3], &b) || b >= MAX_DEVICES)))
            return -1;
        memset(&params, 0, sizeof params);
        params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        params.poolProps.location.id = (int)b;
        params.bytesize = a;
        rc = CALL(d, cuGraphAddMemAllocNode, &node, (CUgraph)(size_t)g->value, NULL, 0, &params);
        if (rc)
            params.dptr = 0;
        print_alloc(op, a, rc, push(&ptrs, params.dptr, a, 0), params.dptr);
    } else if (!strcmp(op, "graphfree")) {
        CUgraphNode node = NULL;
        struct slot *g, *s;
        NARGS(2);
        g = get_slot(&graphs, f[1]);
        s = get_slot(&ptrs, f[2]);
        if (!g || !s)
            return -1;
        rc = CALL(d, cuGraphAddMemFreeNode, &node, (CUgraph)(size_t)g->value, NULL, 0, s->value);
        out("graphfree %s %s rc=%d", f[1], f[2], rc);
    } else if (!strcmp(op, "instantiate") || !strcmp(op, "instantiatep")) {
        CUgraphExec e = NULL;
        struct slot *g;
        int with_params = !strcmp(op, "instantiatep");
        int result = -1;
        if (with_params ? nf != 4 : (nf != 2 && nf != 3))
            return -1;
        g = get_slot(&graphs, f[1]);
        if (!g || (nf >= 3 && parse_num(f[2], &a)))
            return -1;
        if (with_params) {
            CUDA_GRAPH_INSTANTIATE_PARAMS ip;
            CUstream st = NULL;
            if (stream_arg(f[3], &st))
                return -1;
            memset(&ip, 0, sizeof ip);
            ip.flags = a;
            ip.hUploadStream = st;
            ip.result_out = -1;
            rc = CALL(d, cuGraphInstantiateWithParams, &e, (CUgraph)(size_t)g->value, &ip);
            result = ip.result_out;
        } else {
            rc = CALL(d, cuGraphInstantiateWithFlags, &e, (CUgraph)(size_t)g->value, a);
        }
        if (rc)
            e = NULL;
        if (with_params)
            out("%s %s rc=%d slot=%zu result=%d", op, f[1], rc,
                push(&execs, (unsigned long long)(size_t)e, 0, rc == 0), result);
        else
            out("%s %s rc=%d slot=%zu", op, f[1], rc,
                push(&execs, (unsigned long long)(size_t)e, 0, rc == 0));
    } else if (!strcmp(op, "upload") || !strcmp(op, "launch")) {
        CUstream st = NULL;
        struct slot *e;
        NARGS(2);
        e = get_slot(&execs, f[1]);
        if (!e || stream_arg(f[2], &st))
            return -1;
        if (!strcmp(op, "upload"))
            rc = CALL(d, cuGraphUpload, (CUgraphExec)(size_t)e->value, st);
        else
            rc = CALL(d, cuGraphLaunch, (CUgraphExec)(size_t)e->value, st);
        out("%s %s %s rc=%d", op, f[1], f[2], rc);
    } else if (!strcmp(op, "execdestroy") || !strcmp(op, "graphdestroy")) {
        int exec = !strcmp(op, "execdestroy");
        struct slot *s;
        NARGS(1);
        s = get_slot(exec ? &execs : &graphs, f[1]);
        if (!s)
            return -1;
        if (exec)
            rc = CALL(d, cuGraphExecDestroy, (CUgraphExec)(size_t)s->value);
        else
            rc = CALL(d, cuGraphDestroy, (CUgraph)(size_t)s->value);
        if (!rc)
            s->live = 0;
        out("%s %s rc=%d", op, f[1], rc);
    } else if (!strcmp(op, "graphtrim") || !strcmp(op, "graphattr")) {
        unsigned long long value = 0;
        int attr = -1;
        CUdevice dev = 0;
        int trim = !strcmp(op, "graphtrim");
        NARGS(trim ? 1 : 2);
        if (parse_num(f[1], &a) || a >= MAX_DEVICES)
            return -1;
        if (!trim) {
            const char *names[] = {"used", "usedhigh", "reserved", "reservedhigh"};
            int i;
            for (i = 0; i < 4; i++)
                if (!strcmp(f[2], names[i]))
                    attr = i;
            if (attr < 0)
                return -1;
        }
        rc = CALL(d, cuDeviceGet, &dev, (int)a);
        if (!rc && trim)
            rc = CALL(d, cuDeviceGraphMemTrim, dev);
        else if (!rc)
            rc = CALL(d, cuDeviceGetGraphMemAttribute, dev, attr, &value);
        if (trim)
            out("graphtrim %llu rc=%d", a, rc);
        else
            out("graphattr %llu %s rc=%d value=%llu", a, f[2], rc, value);
    } else if (!strcmp(op, "graphnodes")) {
        fn_cuGraphGetNodes get;
        fn_cuGraphNodeGetType type_of;
        CUgraphNode nodes[64];
        size_t n = 64, i, allocs = 0, frees = 0;
        struct slot *g;
        NARGS(1);
        g = get_slot(&graphs, f[1]);
        if (!g)
            return -1;
        *(void **)&get = raw_sym(d, "cuGraphGetNodes");
        *(void **)&type_of = raw_sym(d, "cuGraphNodeGetType");
        rc = get && type_of ? get((CUgraph)(size_t)g->value, nodes, &n) : CUDA_ERROR_NOT_FOUND;
        if (rc)
            n = 0;
        for (i = 0; i < n; i++) {
            int t = -1;
            if (!type_of(nodes[i], &t)) {
                allocs += t == 10;
                frees += t == 11;
            }
        }
        out("graphnodes %s rc=%d n=%zu alloc=%zu free=%zu", f[1], rc, n, allocs, frees);
    /* ---- end of pools that keep memory, graph memory ---- */
    } else if (!strcmp(op, "instantiate1") || !strcmp(op, "instantiate2")) {
        typedef CUresult (*fn_logged)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
        fn_logged inst;
        CUgraphExec e = NULL;
        CUgraphNode err = NULL;
        char log[64];
        struct slot *g;
        NARGS(1);
        g = get_slot(&graphs, f[1]);
        if (!g)
            return -1;
        *(void **)&inst = raw_sym(d, op[11] == '1' ? "cuGraphInstantiate" : "cuGraphInstantiate_v2");
        rc = inst ? inst(&e, (CUgraph)(size_t)g->value, &err, log, sizeof log)
                  : CUDA_ERROR_NOT_FOUND;
        if (rc)
            e = NULL;
        out("%s %s rc=%d slot=%zu", op, f[1], rc,
            push(&execs, (unsigned long long)(size_t)e, 0, rc == 0));
    } else if (!strcmp(op, "graphthreads")) { /* graph memory in the interposer */
        NARGS(3);
        if (parse_num(f[1], &a) || parse_num(f[2], &b) || parse_size(f[3], &c) || !a)
            return -1;
        graph_threads(d, (unsigned long)a, b, c);
    } else if (!strcmp(op, "kill")) {
        NARGS(0);
        out("kill");
        raise(SIGKILL);
    } else {
        return vmm_op(d, f, nf);
    }
#undef NARGS
    return 0;
}

int run_ops(const struct drv *d, int argc, char **argv) {
    static struct drv saved; /* outlives main's copy, for the atexit handler */
    int i;
    saved = *d;
    the_drv = &saved;
    for (i = 0; i < argc; i++) {
        if (!strncmp(argv[i], "fork:", 5) || !strncmp(argv[i], "forkexec:", 9)) {
            int used = op_fork(d, argc - i, argv + i);
            if (used < 0) {
                fprintf(stderr, "ops: malformed op \"%s\"\n", argv[i]);
                return 2;
            }
            i += used - 1;
            continue;
        }
        if (run_op(d, argv[i])) {
            fprintf(stderr, "ops: malformed op \"%s\"\n", argv[i]);
            return 2;
        }
    }
    return 0;
}
