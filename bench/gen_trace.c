/* Writes a synthetic trace of N events in cuquota's trace format (schema 1, JSON Lines:
 * crates/format/src/schema.rs for the fields, src/trace/encode.rs for the exact event line), for
 * timing `cuquota report` and `cuquota export` on big files.
 *
 *   gen_trace N OUT
 *
 * One process, two 8 GiB GPUs with a 6 GiB quota each, four threads. Every event is
 * consistent with the ones before it: allocations (cuMemAlloc_v2, cuMemAllocAsync) of
 * 256 B .. 64 MiB and their frees (cuMemFree_v2, cuMemFreeAsync), pointers reused as a
 * caching allocator does, at most 4096 live per GPU (so a reader's state stays bounded);
 * a request over the quota is refused and retried at 0.9x until one fits (refused lines,
 * then the alloc and a backoff line); a cuMemGetInfo_v2 every 5000 events. Ends with the
 * summary line. Deterministic (fixed seed). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEVICES 2
#define SLOTS 4096
#define TOTAL (8ull << 30)
#define QUOTA (6ull << 30)
#define OUT_BUF (1 << 22)

static char *buf;
static size_t len;
static FILE *out;

static void flush(void) {
    if (len && fwrite(buf, 1, len, out) != len) {
        perror("gen_trace: write");
        exit(3);
    }
    len = 0;
}

static void s(const char *text) {
    size_t n = strlen(text);
    memcpy(buf + len, text, n);
    len += n;
}

static void u(uint64_t v) {
    char tmp[24];
    int i = 24;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    memcpy(buf + len, tmp + i, (size_t)(24 - i));
    len += (size_t)(24 - i);
}

static void hex(uint64_t v) {
    static const char digits[] = "0123456789abcdef";
    char tmp[20];
    int i = 20;
    do {
        tmp[--i] = digits[v & 15];
        v >>= 4;
    } while (v);
    buf[len++] = '0';
    buf[len++] = 'x';
    memcpy(buf + len, tmp + i, (size_t)(20 - i));
    len += (size_t)(20 - i);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

struct dev {
    uint64_t ptr[SLOTS], bytes[SLOTS];
    int live;
    uint64_t in_use, peak, peak_t, allocs, frees, refusals, alloc_bytes;
};
static struct dev devs[DEVICES];
static uint64_t t_ns, events;
static const uint32_t tids[] = {41001, 41002, 41003, 41017};

/* The common head of an event line, up to and including "in_use":V. */
static void head(const char *type, int dev, const char *api, uint64_t ptr, uint64_t bytes,
                 const char *result, uint64_t in_use) {
    if (len > OUT_BUF - 1024) flush();
    t_ns += 200 + next() % 1800;
    events++;
    s("{\"type\":\"");
    s(type);
    s("\",\"t_ns\":");
    u(t_ns);
    s(",\"tid\":");
    u(tids[next() % 4]);
    s(",\"dev\":");
    u((uint64_t)dev);
    s(",\"api\":\"");
    s(api);
    s("\",\"ptr\":\"");
    hex(ptr);
    s("\",\"bytes\":");
    u(bytes);
    s(",\"result\":\"");
    s(result);
    s("\",\"in_use\":");
    u(in_use);
}

static void end(void) { s("}\n"); }

static uint64_t request_size(void) {
    uint64_t r = next() % 1000;
    int shift = r < 690 ? 8 + (int)(next() % 8)     /* 256 B .. 32 KiB: most calls */
                : r < 990 ? 16 + (int)(next() % 6) /* 64 KiB .. 2 MiB */
                          : 22 + (int)(next() % 5); /* 4 MiB .. 64 MiB */
    uint64_t size = 1ull << shift;
    return size + (next() % 4) * (size / 4);
}

static void alloc(int d) {
    struct dev *dv = &devs[d];
    const char *api = next() % 4 ? "cuMemAlloc_v2" : "cuMemAllocAsync";
    uint64_t size = request_size();
    uint64_t sizes[64];
    int refused = 0;
    /* Now and then a big request, over the quota: the allocator backs off. */
    if (next() % 20000 == 0) size = QUOTA - dv->in_use + (QUOTA / 4);
    while (dv->in_use + size > QUOTA && refused < 63) {
        head("refused", d, api, 0, size, "CUDA_ERROR_OUT_OF_MEMORY", dv->in_use);
        s(",\"reason\":\"quota\"");
        end();
        dv->refusals++;
        sizes[refused++] = size;
        size = size * 9 / 10;
        if (size < 256) return;
    }
    if (dv->in_use + size > QUOTA) return;
    int slot = dv->live++;
    /* Pointers reused per slot, as a caching allocator reuses its blocks. */
    dv->ptr[slot] = 0x7f0000000000ull + ((uint64_t)d << 40) + ((uint64_t)slot << 26);
    dv->bytes[slot] = size;
    dv->in_use += size;
    dv->allocs++;
    dv->alloc_bytes += size;
    head("alloc", d, api, dv->ptr[slot], size, "CUDA_SUCCESS", dv->in_use);
    end();
    if (dv->in_use > dv->peak) dv->peak = dv->in_use, dv->peak_t = t_ns;
    if (refused) {
        sizes[refused++] = size;
        head("backoff", d, api, dv->ptr[slot], size, "CUDA_SUCCESS", dv->in_use);
        s(",\"sizes\":[");
        for (int i = 0; i < refused; i++) {
            if (i) s(",");
            u(sizes[i]);
        }
        s("]");
        end();
    }
}

static void release(int d) {
    struct dev *dv = &devs[d];
    int slot = (int)(next() % (uint64_t)dv->live);
    uint64_t ptr = dv->ptr[slot], bytes = dv->bytes[slot];
    dv->live--;
    dv->ptr[slot] = dv->ptr[dv->live];
    dv->bytes[slot] = dv->bytes[dv->live];
    dv->in_use -= bytes;
    dv->frees++;
    head("free", d, next() % 4 ? "cuMemFree_v2" : "cuMemFreeAsync", ptr, bytes, "CUDA_SUCCESS",
         dv->in_use);
    end();
}

static void meminfo(int d) {
    struct dev *dv = &devs[d];
    uint64_t real_used = dv->in_use + (512ull << 20);
    head("meminfo", d, "cuMemGetInfo_v2", 0, 0, "CUDA_SUCCESS", dv->in_use);
    s(",\"told_free\":");
    u(QUOTA - dv->in_use);
    s(",\"told_total\":");
    u(QUOTA);
    s(",\"real_free\":");
    u(TOTAL - real_used);
    s(",\"real_total\":");
    u(TOTAL);
    end();
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: gen_trace N OUT\n");
        return 2;
    }
    uint64_t n = strtoull(argv[1], NULL, 10);
    out = fopen(argv[2], "w");
    buf = malloc(OUT_BUF);
    if (!out || !buf) {
        perror("gen_trace");
        return 3;
    }
    s("{\"type\":\"header\",\"schema\":1,\"version\":\"0.1.0\",\"pid\":4242,\"host\":\"bench\","
      "\"rank\":0,\"argv\":[\"python\",\"train.py\"],\"start_unix_ns\":1700000000000000000,"
      "\"mode\":\"enforce\",\"devices\":[");
    for (int d = 0; d < DEVICES; d++) {
        if (d) s(",");
        s("{\"ordinal\":");
        u((uint64_t)d);
        s(",\"name\":\"Stand-in GPU\",\"total\":");
        u(TOTAL);
        s(",\"quota\":");
        u(QUOTA);
        s("}");
    }
    s("]}\n");
    while (events < n) {
        int d = (int)(next() % DEVICES);
        struct dev *dv = &devs[d];
        if (events % 5000 == 4999) {
            meminfo(d);
            continue;
        }
        /* Live count wanders around 2048 per GPU. */
        int grow = dv->live == 0 || (dv->live < SLOTS && (int)(next() % SLOTS) >= dv->live);
        if (grow)
            alloc(d);
        else
            release(d);
    }
    s("{\"type\":\"summary\",\"t_ns\":");
    u(t_ns + 1000);
    s(",\"end\":\"exit\",\"events\":");
    u(events);
    s(",\"dropped\":0,\"devices\":[");
    for (int d = 0; d < DEVICES; d++) {
        struct dev *dv = &devs[d];
        uint64_t live_bytes = 0;
        for (int i = 0; i < dv->live; i++) live_bytes += dv->bytes[i];
        if (d) s(",");
        s("{\"dev\":");
        u((uint64_t)d);
        s(",\"quota\":");
        u(QUOTA);
        s(",\"peak\":");
        u(dv->peak);
        s(",\"peak_t_ns\":");
        u(dv->peak_t);
        s(",\"in_use\":");
        u(dv->in_use);
        s(",\"allocs\":");
        u(dv->allocs);
        s(",\"frees\":");
        u(dv->frees);
        s(",\"refusals\":");
        u(dv->refusals);
        s(",\"alloc_bytes\":");
        u(dv->alloc_bytes);
        s(",\"live\":");
        u((uint64_t)dv->live);
        s(",\"live_bytes\":");
        u(live_bytes);
        s("}");
    }
    s("]}\n");
    flush();
    if (fclose(out)) {
        perror("gen_trace: close");
        return 3;
    }
    printf("events %llu\n", (unsigned long long)events);
    return 0;
}
