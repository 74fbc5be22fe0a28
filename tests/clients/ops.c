/* The op interpreter: runs ops given as argv words against a `struct drv` and prints one
 * machine-readable line per op on stdout ("name [args] key=value ..."), flushed at once.
 * An op word is the op's name and its arguments joined by ':'. ops_table.h lists the ops,
 * each run by a function in the ops_*.c file of its group; this file holds what they
 * share (ops_internal.h): the slots they name by number and the parsers of their words.
 *
 * The words the interpreter runs itself, around other ops (for the reliability tests,
 * tests/reliability_*.rs):
 *   t-OP / tc-OP            run OP on a new thread (joined at once): t- with no current
 *                           context, tc- with the caller's context made current first
 *   fork:N                  fork; the child runs the next N ops and calls exit(), the
 *                           parent waits (at most 10 s, then kills it) and prints
 *                           "fork N pid=P status=S" (S: the exit code, 128 + the signal,
 *                           or -2 if it had to be killed, and then exits with status 5),
 *                           then goes on after those N ops
 *   forkexec:N              the same, but the child execs this program with the next N ops
 *   setenv:KEY=VALUE        setenv (the value may contain ':')
 *   bg-OP                   run OP on a new thread that is never joined
 *   waitgone:PATH           waits (at most 30 s) until PATH does not exist (PATH may hold
 *                           ':'; it is everything after the first one) */
#define _GNU_SOURCE
#include "ops_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_FIELDS 8

struct slots ptrs, handles, reservations, streams;
struct slots arrays, mipmaps;
struct slots contexts;
struct slots graphs, execs;
CUmemoryPool host_pool;
const struct drv *the_drv;
CUcontext dev_ctx[MAX_DEVICES];
CUmemoryPool dev_pool[MAX_DEVICES];
int cur_dev = 0;

void out(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

size_t push(struct slots *s, unsigned long long value, size_t size, int live) {
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
int parse_size(const char *s, unsigned long long *out_v) {
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

int parse_num(const char *s, unsigned long long *out_v) {
    char *end;
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    *out_v = strtoull(s, &end, 10);
    return errno || *end ? -1 : 0;
}

int parse_int(const char *s, long long *out_v) {
    char *end;
    if (!s || !*s)
        return -1;
    errno = 0;
    *out_v = strtoll(s, &end, 10);
    return errno || *end ? -1 : 0;
}

int parse_hex(const char *s, unsigned long long *out_v) {
    char *end;
    if (!s || s[0] != '0' || (s[1] != 'x' && s[1] != 'X') || !s[2])
        return -1;
    errno = 0;
    *out_v = strtoull(s + 2, &end, 16);
    return errno || *end ? -1 : 0;
}

struct slot *get_slot(struct slots *s, const char *arg) {
    unsigned long long i;
    if (parse_num(arg, &i) || i >= s->n)
        return NULL;
    return &s->v[i];
}

/* Makes device n's primary context current (retained once per device). */
CUresult use_device(const struct drv *d, int n) {
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

void print_alloc(const char *name, unsigned long long size, CUresult rc, size_t slot,
                 CUdeviceptr p) {
    out("%s %llu rc=%d slot=%zu ptr=0x%llx", name, size, rc, slot, p);
}

/* A driver function cuquota does not hook, looked up with the client's own dlsym. */
void *raw_sym(const struct drv *d, const char *name) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return h && d->sym ? d->sym(h, name) : NULL;
}

/* A stream word: a stream slot, or "n" for the NULL stream. Returns 0, or -1 if malformed. */
int stream_arg(const char *word, CUstream *st) {
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

/* A location of TYPE for device or node ID: for DEVICE_LOCALITY_DOMAIN, the `localized`
 * member (deviceId ID, locality domain 0) over a union whose other bytes are not zero. */
void set_location(CUmemLocation *loc, int type, int id) {
    loc->type = type;
    loc->id = type == CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN ? (int)0xabab0000 : id;
    if (type == CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN) {
        loc->localized.deviceId = (unsigned char)id;
        loc->localized.localityDomainId = 0;
    }
}

/* The current device's pool of the pool op (created on first use). */
CUresult own_pool(const struct drv *d, CUmemoryPool *pool) {
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

/* The op table (ops_table.h): each op's name and its function. */
static const struct {
    const char *name;
    op_fn *run;
} table[] = {
#define OP(name, fn) {name, fn},
    OP_TABLE
#undef OP
};

/* Runs one op word. Returns 0, or -1 when the op is malformed. */
static int run_op(const struct drv *d, const char *word) {
    char buf[512];
    char *f[MAX_FIELDS];
    int nf = 0;
    char *p;
    size_t i;

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
    for (i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(f[0], table[i].name))
            return table[i].run(d, f, nf);
    return -1;
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
