/* What the op files share (ops.c, the interpreter, and ops_*.c, the ops by what they do):
 * the slots that ops name by number, the parsers of op arguments, the output line, and
 * the op functions of ops_table.h. Not for the clients: they include ops.h. */
#ifndef CUQUOTA_OPS_INTERNAL_H
#define CUQUOTA_OPS_INTERNAL_H

#include "ops.h"
#include "ops_table.h"

#include <stddef.h>

/* The client binaries export none of these to the libraries they load. */
#pragma GCC visibility push(hidden)

/* A driver function of struct drv, or CUDA_ERROR_NOT_FOUND when the client has none. */
#define CALL(d, fn, ...) ((d)->fn ? (d)->fn(__VA_ARGS__) : CUDA_ERROR_NOT_FOUND)

#define MAX_DEVICES 64

/* In an op function: a malformed op unless it has exactly n arguments. */
#define NARGS(n) \
    do { \
        if (nf != (n) + 1) \
            return -1; \
    } while (0)

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

extern struct slots ptrs, handles, reservations, streams;
extern struct slots arrays, mipmaps; /* CUarray, CUmipmappedArray */
extern struct slots contexts; /* contexts made by ctxcreate */
extern struct slots graphs, execs; /* CUgraph, CUgraphExec */
extern CUmemoryPool host_pool; /* hostpool's pool (named by pool ops) */
extern const struct drv *the_drv; /* for the atexit handler */
extern CUcontext dev_ctx[MAX_DEVICES];
extern CUmemoryPool dev_pool[MAX_DEVICES];
extern int cur_dev;

/* One output line on stdout, flushed at once. */
void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Appends a slot; returns its number. */
size_t push(struct slots *s, unsigned long long value, size_t size, int live);
/* Each returns 0, or -1 when the word is malformed. */
int parse_size(const char *s, unsigned long long *out_v);
int parse_num(const char *s, unsigned long long *out_v);
int parse_int(const char *s, long long *out_v);
int parse_hex(const char *s, unsigned long long *out_v);
/* The slot a number word names, or NULL. */
struct slot *get_slot(struct slots *s, const char *arg);
CUresult use_device(const struct drv *d, int n);
void print_alloc(const char *name, unsigned long long size, CUresult rc, size_t slot,
                 CUdeviceptr p);
void *raw_sym(const struct drv *d, const char *name);
int stream_arg(const char *word, CUstream *st);
CUresult own_pool(const struct drv *d, CUmemoryPool *pool);
void set_location(CUmemLocation *loc, int type, int id);

/* One op: f[0] is its name, f[1..nf) its arguments (the op word split on ':'). Returns 0,
 * or -1 when the op is malformed. */
typedef int op_fn(const struct drv *d, char **f, int nf);

#define OP(name, fn) op_fn fn;
OP_TABLE
#undef OP

#pragma GCC visibility pop

#endif
