/* The ops on threads, processes and signals, which drive the reliability tests
 * (tests/reliability_*.rs); their rows: ops_table.h.
 *   threads:N:ITERS:SIZE    N threads allocate and free SIZE bytes ITERS times each, holding
 *                           their last allocations until all are done: "threads N ok= oom=
 *                           other="
 *   soak:THREADS:MS:QUOTA[:SEED[:ROUNDS]]  the concurrency soak of soak.c (one line)
 *   stream                  cuStreamCreate (the driver's own, not hooked); a stream slot
 *   freeon:SLOT:STREAM      cuMemFreeAsync of pointer SLOT on stream slot STREAM
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
 *   sigalloc:SIG:SIZE:N     installs a SIG handler that makes N cuMemAlloc_v2 of SIZE bytes
 *                           (the shim's CUDA_SHIM_FAIL can raise SIG inside a driver call,
 *                           so that the handler interrupts a hook)
 *   sigallocs               what the handler's allocations got: "sigallocs runs=R rc=A,B,..";
 *                           each granted pointer becomes a pointer slot */
#define _GNU_SOURCE
#include "ops_internal.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef CUresult (*fn_cuStreamCreate)(CUstream *stream, unsigned int flags);

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

static void run_threads(const struct drv *d, unsigned long nthreads, unsigned long iters,
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

static void start_spinners(const struct drv *d, unsigned long n, size_t size) {
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

int op_threads(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0, b = 0, c = 0;
    NARGS(3);
    if (parse_num(f[1], &a) || a == 0 || a > 1024 || parse_num(f[2], &b) ||
        parse_size(f[3], &c))
        return -1;
    run_threads(d, (unsigned long)a, (unsigned long)b, c);
    return 0;
}

int op_sleep(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    struct timespec ts;
    NARGS(1);
    if (parse_num(f[1], &a))
        return -1;
    ts.tv_sec = (time_t)(a / 1000);
    ts.tv_nsec = (long)(a % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
    out("sleep %llu", a);
    return 0;
}

int op_exit(const struct drv *d, char **f, int nf) {
    const char *op = f[0];
    long long code;
    NARGS(1);
    if (parse_int(f[1], &code))
        return -1;
    out("%s %lld", op, code);
    if (op[0] == '_')
        _exit((int)code);
    exit((int)code);
    return 0;
}

int op_soak(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0, b = 0, c = 0;
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
    return 0;
}

int op_stream(const struct drv *d, char **f, int nf) {
    CUresult rc;
    CUstream st = NULL;
    fn_cuStreamCreate create;
    NARGS(0);
    *(void **)&create = raw_sym(d, "cuStreamCreate");
    rc = create ? create(&st, 0) : CUDA_ERROR_NOT_FOUND;
    if (rc)
        st = NULL;
    out("stream rc=%d slot=%zu", rc,
        push(&streams, (unsigned long long)(size_t)st, 0, rc == 0));
    return 0;
}

int op_freeon(const struct drv *d, char **f, int nf) {
    CUresult rc;
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
    return 0;
}

int op_spin(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0, b = 0;
    NARGS(2);
    if (parse_num(f[1], &a) || a == 0 || a > 256 || parse_size(f[2], &b))
        return -1;
    start_spinners(d, (unsigned long)a, (size_t)b);
    return 0;
}

int op_signal(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    struct timespec ts = {0, 10000000L};
    int i;
    NARGS(1);
    if (parse_num(f[1], &a) || a == 0 || a >= 65)
        return -1;
    kill(getpid(), (int)a);
    for (i = 0; i < 1000 && caught != (int)a; i++)
        nanosleep(&ts, NULL);
    out("signal %llu survived", a);
    return 0;
}

int op_catch(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
    NARGS(1);
    if (parse_num(f[1], &a) || a == 0 || a >= 65)
        return -1;
    signal((int)a, note_signal);
    out("catch %llu", a);
    return 0;
}

/* The allocating handler's request and results (written only by the handler). */
static size_t sig_size;
static int sig_count, sig_runs, sig_done;
static CUresult sig_rc[16];
static CUdeviceptr sig_ptr[16];

static void alloc_in_handler(int sig) {
    int i;
    (void)sig;
    sig_runs++;
    for (i = 0; i < sig_count && sig_done < 16; i++, sig_done++) {
        sig_ptr[sig_done] = 0;
        sig_rc[sig_done] = CALL(the_drv, cuMemAlloc_v2, &sig_ptr[sig_done], sig_size);
    }
}

int op_sigalloc(const struct drv *d, char **f, int nf) {
    unsigned long long sig = 0, size = 0, n = 0;
    NARGS(3);
    if (parse_num(f[1], &sig) || sig == 0 || sig >= 65 || parse_size(f[2], &size) ||
        parse_num(f[3], &n) || n == 0 || n > 16)
        return -1;
    sig_size = (size_t)size;
    sig_count = (int)n;
    signal((int)sig, alloc_in_handler);
    out("sigalloc %llu", sig);
    return 0;
}

int op_sigallocs(const struct drv *d, char **f, int nf) {
    char list[16 * 12] = "";
    int i;
    NARGS(0);
    for (i = 0; i < sig_done; i++) {
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", i ? "," : "",
                 (int)sig_rc[i]);
        if (sig_rc[i] == CUDA_SUCCESS)
            push(&ptrs, sig_ptr[i], sig_size, 1);
    }
    out("sigallocs runs=%d rc=%s", sig_runs, list);
    return 0;
}

int op_procinfo(const struct drv *d, char **f, int nf) {
    NARGS(0);
    out("procinfo threads=%d term=%s int=%s", count_threads(), disposition(SIGTERM),
        disposition(SIGINT));
    return 0;
}

/* A handler for SIG that calls exit(0), then SIG sent to the first spinner thread, which
 * is most likely inside a hook: exit runs the exit handlers on that thread. */
int op_sigexit(const struct drv *d, char **f, int nf) {
    unsigned long long a = 0;
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
    return 0;
}

int op_exitthread(const struct drv *d, char **f, int nf) {
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
    return 0;
}

int op_atexitfree(const struct drv *d, char **f, int nf) {
    NARGS(0);
    out("atexitfree rc=%d", atexit(atexit_free));
    return 0;
}

int op_kill(const struct drv *d, char **f, int nf) {
    NARGS(0);
    out("kill");
    raise(SIGKILL);
    return 0;
}
